//! Signed decisions, as the sealed chain checks them: what a signature covers, and whether a
//! decided gate's signature stands against a pinned public key. Holding and using a signing
//! key is the approval page's (`sign`); the store only asks a [`SignsDecisions`] for the
//! signature of a decision it records.

use super::chain::{ChainReport, Derived, Integrity};
use super::{AuditRow, GateRow};
use anyhow::Result;
use ed25519_dalek::{Signature, Verifier as _, VerifyingKey};

const PREFIX: &str = "ed25519:";

/// What signs a decision as it is recorded (the approval page's key).
pub trait SignsDecisions: std::fmt::Debug {
    /// The signature of a decision, as its audit row keeps it.
    fn sign(&self, what: &Signed) -> serde_json::Value;
}

/// What a signature covers, as the gate row and its decision say it.
#[derive(Debug, Clone, Copy)]
pub struct Signed<'a> {
    pub run: &'a str,
    pub gate: &'a str,
    pub instance: i64,
    pub prompt_hash: &'a str,
    /// `approved` or `rejected`.
    pub decision: &'a str,
    pub principal: &'a str,
    pub time: &'a str,
    /// The digest of the decision's inputs (`inputs_digest`), for a gate with inputs.
    pub inputs: Option<&'a str>,
    /// The identity of the project's place (its principals book's binding: a project's id, or
    /// a server and database), which a signature from this release names (`"v": 3`), so that a
    /// decision signed for one project stands in no other.
    pub place: Option<&'a str>,
    /// The digest of the answer and edits the decision (or vote) carries (`answer_digest`),
    /// for one that carries either.
    pub answer: Option<&'a str>,
    /// The comment or reason the decision (or vote) was given with, as its sealed event keeps
    /// it (covered from format v4 on).
    pub comment: Option<&'a str>,
}

/// The signature format that names the project's place.
pub const PLACED: i64 = 3;
/// The signature format made now: v3's fields, and the decision's answer and edits and its
/// comment.
pub const ANSWERED: i64 = 4;

/// What a signature covers of a decision's answer (`response`) and edits (`edits`), as its
/// sealed metadata keeps them: None for a decision that carries neither.
pub fn answer_digest(metadata: &serde_json::Value) -> Option<String> {
    // An answer of `null` is an answer: present, it is covered.
    let (response, edits) = (metadata.get("response"), metadata.get("edits"));
    (response.is_some() || edits.is_some())
        .then(|| crate::model::sha256_tag(&serde_json::json!([response, edits]).to_string()))
}

/// What a decision's signature is checked against (`gates wait --require-signed`, `gates
/// verify --signed`).
#[derive(Debug, Clone)]
pub struct SignedBy {
    pub key: VerifyingKey,
    /// This project's place (see [`Signed::place`]); None: it has none (a project with no id).
    pub place: Option<String>,
    /// The run whose decisions, carried here by a fork, count (`--accept-carried-from RUN`):
    /// the run the VM forked from, where the decision was made.
    pub accept_carried: Option<String>,
}

/// What a signature covers of a decision's inputs: the digest of their content digests, by
/// name.
pub fn inputs_digest(map: &std::collections::BTreeMap<String, Option<String>>) -> String {
    crate::model::sha256_tag(&serde_json::to_string(map).unwrap_or_default())
}

impl Signed<'_> {
    /// The signed bytes, as signature format `v` makes them (the signer's is [`ANSWERED`]): a
    /// JSON array, so that no field can run into the next. Only v3 and v4 are made and
    /// checked (a signature without the place it names is unattested before its bytes are
    /// read); with no place the array holds null there, which no check accepts. v4 is v3 with
    /// the answer's digest and the comment after the place.
    pub fn message(&self, v: i64) -> Vec<u8> {
        let mut fields = serde_json::json!([
            format!("prose-state signed decision v{v}"),
            self.run,
            self.gate,
            self.instance,
            self.prompt_hash,
            self.decision,
            self.principal,
            self.time,
            self.inputs,
            self.place,
        ]);
        if let (true, Some(a)) = (v >= ANSWERED, fields.as_array_mut()) {
            a.push(self.answer.into());
            a.push(self.comment.into());
        }
        serde_json::to_vec(&fields).unwrap_or_default()
    }

    /// What the decided `gate` row says was decided.
    pub fn of_gate(gate: &'_ GateRow) -> Option<Signed<'_>> {
        Some(Signed {
            run: gate.run_id.as_deref()?,
            gate: &gate.id,
            instance: gate.instance,
            prompt_hash: "",
            decision: gate.status.as_str(),
            principal: gate.resolved_by.as_deref()?,
            time: gate.resolved_at.as_deref()?,
            inputs: None,
            place: None,
            answer: None,
            comment: None,
        })
    }
}

/// `ed25519:HEX` of a public key.
pub fn public_tag(key: &VerifyingKey) -> String {
    format!("{PREFIX}{}", crate::model::hex(key.as_bytes()))
}

/// A public key from its `ed25519:HEX` form (a usage error naming the value when it is not).
pub fn parse_public(tag: &str) -> Result<VerifyingKey> {
    let bad = || {
        crate::error::usage(format!(
            "not an Ed25519 public key (ed25519: and 64 hex digits): {}",
            crate::error::shown(tag)
        ))
    };
    let bytes = tag
        .trim()
        .strip_prefix(PREFIX)
        .and_then(super::seal::hex_bytes)
        .ok_or_else(bad)?;
    let bytes: [u8; 32] = bytes.try_into().map_err(|_| bad())?;
    VerifyingKey::from_bytes(&bytes).map_err(|_| bad())
}

/// Why a decided gate's signature does not stand, if it does not: its decision (the sealed
/// event `derived` names, of the gate's newest sealed opening) must carry a signature by the
/// pinned key over what the gate row says was decided, with the hash of the gate's prompt,
/// for this project's place; a decision carried from another run counts only where `by`
/// accepts carried decisions.
pub fn problem(
    gate: &GateRow,
    rows: &[AuditRow],
    derived: Option<&Derived>,
    by: &SignedBy,
) -> Option<Integrity> {
    let status = gate.status.as_str();
    if status != "approved" && status != "rejected" {
        return None;
    }
    let Some(mut what) = Signed::of_gate(gate) else {
        return Some(Integrity::Tampered(
            "decided with no principal or time".into(),
        ));
    };
    let hash = crate::model::sha256_tag(&gate.prompt);
    what.prompt_hash = &hash;
    decision_problem(what, rows, derived, by)
}

/// [`problem`] for an earlier opening of gate `gate`, one a later opening superseded: what
/// its decision was, as its own sealed events (`d`) make it.
pub fn opening_problem(
    gate: &str,
    d: &Derived,
    rows: &[AuditRow],
    by: &SignedBy,
) -> Option<Integrity> {
    let (status, principal, _) = d.decision.as_ref()?;
    let decision = status.as_str();
    if decision != "approved" && decision != "rejected" {
        return None;
    }
    let (Some(prompt_hash), Some(time)) = (d.prompt_hash.as_deref(), d.decided_at.as_deref())
    else {
        return Some(Integrity::Tampered(
            "decided with no prompt or time sealed".into(),
        ));
    };
    let what = Signed {
        run: &d.run_id,
        gate,
        instance: d.instance,
        prompt_hash,
        decision,
        principal,
        time,
        inputs: None,
        place: None,
        answer: None,
        comment: None,
    };
    decision_problem(what, rows, Some(d), by)
}

/// Why the decision `what` says was made does not stand signed, if it does not (see
/// [`problem`]).
fn decision_problem(
    what: Signed,
    rows: &[AuditRow],
    derived: Option<&Derived>,
    by: &SignedBy,
) -> Option<Integrity> {
    // Rebound, so that it may borrow what is read here (the run a fork carried it from).
    let mut what = what;
    let status = what.decision;
    let unsigned = |why: &str| Some(Integrity::Unattested(why.to_string()));
    let decision = derived.and_then(|d| d.decision.as_ref().map(|(_, _, id)| *id));
    let found = rows
        .iter()
        .filter(|r| Some(r.id) == decision && r.event_type == status)
        .filter_map(|r| {
            let m = serde_json::from_str::<serde_json::Value>(r.metadata.as_deref()?).ok()?;
            Some((m, r.comment.as_deref()))
        })
        .find(|(m, _)| m["instance"].as_i64().unwrap_or(1) == what.instance);
    let Some((metadata, comment)) = found else {
        return unsigned("not signed: its decision is not in its log");
    };
    // A decision a fork carried was signed in the run it was made in, which its sealed copy
    // names (only prose-state, holding the audit key, writes that copy).
    let made_in = metadata["carried"]["run"].as_str().map(str::to_string);
    if let Some(run) = &made_in {
        // A fork of another run, made under this run's id, would carry that run's decisions
        // here: one counts only where the waiter says it forked on purpose.
        if by.accept_carried.as_deref() != Some(run.as_str()) {
            return Some(Integrity::Unattested(format!(
                "its decision was made in run {} and carried here by a fork: a VM that forked that run itself accepts it with --accept-carried-from {}",
                crate::error::shown(run),
                crate::error::shown(run)
            )));
        }
        what.run = run;
    }
    let inputs = serde_json::from_value::<std::collections::BTreeMap<String, Option<String>>>(
        metadata["inputs"].clone(),
    )
    .ok()
    .map(|m| inputs_digest(&m));
    what.inputs = inputs.as_deref();
    let answer = answer_digest(&metadata);
    what.answer = answer.as_deref();
    what.comment = comment;
    if let Some(p) = signature_problem(&metadata, &what, by) {
        return Some(p);
    }
    // A team's decision counts several votes: each is signed on its own.
    let d = derived?;
    let vote = if status == "approved" {
        super::chain::VOTE_APPROVE
    } else {
        super::chain::VOTE_REJECT
    };
    let decider = what.principal;
    // The opening's votes, each with its sealed metadata (of this gate: a run's other gates
    // have votes by the same principals).
    let votes: Vec<(&AuditRow, serde_json::Value)> = rows
        .iter()
        .filter(|r| r.gate_id == what.gate)
        .filter(|r| {
            r.event_type == super::chain::VOTE_APPROVE || r.event_type == super::chain::VOTE_REJECT
        })
        .filter_map(|r| Some((r, serde_json::from_str(r.metadata.as_deref()?).ok()?)))
        .filter(|(_, m): &(_, serde_json::Value)| {
            m["instance"].as_i64().unwrap_or(1) == what.instance
        })
        .collect();
    for principal in d.counted.iter().filter(|p| p.as_str() != decider) {
        let counted = votes
            .iter()
            .any(|(r, _)| r.event_type == vote && r.principal.as_deref() == Some(principal));
        if !counted {
            return unsigned("not signed: a vote it counts is not in its log");
        }
    }
    // Each vote is signed on its own, over the inputs as its voter saw them, its answer and
    // edits and its comment: every vote the decision counts must be, and any other vote that
    // carries a signature (one no longer counted is still shown, with its answer and edits)
    // must stand too.
    for (r, m) in &votes {
        let principal = r.principal.as_deref().unwrap_or_default();
        let counts = r.event_type == vote
            && principal != decider
            && d.counted.iter().any(|p| p == principal);
        if !counts && m["signature"].is_null() {
            continue;
        }
        let vote_inputs = serde_json::from_value::<
            std::collections::BTreeMap<String, Option<String>>,
        >(m["inputs"].clone())
        .ok()
        .map(|m| inputs_digest(&m));
        let vote_answer = answer_digest(m);
        let time = r.timestamp.clone().unwrap_or_default();
        let what = Signed {
            decision: &r.event_type,
            principal,
            time: &time,
            inputs: vote_inputs.as_deref(),
            answer: vote_answer.as_deref(),
            comment: r.comment.as_deref(),
            ..what
        };
        if let Some(p) = signature_problem(m, &what, by) {
            return Some(p);
        }
    }
    None
}

/// Why one sealed decision or vote's signature does not stand over `what`, if it does not.
fn signature_problem(
    metadata: &serde_json::Value,
    what: &Signed,
    by: &SignedBy,
) -> Option<Integrity> {
    let pinned = &by.key;
    let unsigned = |why: &str| Some(Integrity::Unattested(why.to_string()));
    let sig = &metadata["signature"];
    if sig.is_null() {
        let client = metadata["client"].as_str().unwrap_or("another tool");
        return Some(Integrity::Unattested(format!(
            "not signed: decided through {}",
            crate::error::shown(client)
        )));
    }
    if sig["key"].as_str() != Some(public_tag(pinned).as_str()) {
        return unsigned("signed by a key that is not the pinned one");
    }
    // A signature names the project it was made for; one from before signatures did could
    // stand in any project pinned to the same key.
    let v = match sig["v"].as_i64() {
        // A signature from before signatures covered answers does not vouch for one: the
        // answer or edits were added to what was signed.
        Some(PLACED) if what.answer.is_some() => {
            return Some(Integrity::Tampered(
                "its signature does not cover the answer or edits its decision records".into(),
            ))
        }
        Some(v @ (PLACED | ANSWERED)) => v,
        _ => return unsigned("signed by a release before signatures named their project: decide it again on the page"),
    };
    let Some(place) = by.place.as_deref() else {
        return unsigned("this project has no id to check the signature's project against");
    };
    if let Some(signed_for) = sig["place"].as_str().filter(|p| *p != place) {
        return Some(Integrity::Unattested(format!(
            "signed for another project ({}), not this one ({})",
            crate::error::shown(signed_for),
            crate::error::shown(place)
        )));
    }
    let what = &Signed {
        place: Some(place),
        ..*what
    };
    let valid = sig["sig"]
        .as_str()
        .and_then(super::seal::hex_bytes)
        .and_then(|b| <[u8; 64]>::try_from(b).ok())
        .map(|b| Signature::from_bytes(&b))
        .is_some_and(|s| pinned.verify(&what.message(v), &s).is_ok());
    if valid {
        None
    } else {
        Some(Integrity::Tampered(
            "its signature does not match the decision the gate records".into(),
        ))
    }
}

/// Adds to a run's report every decided gate whose signature does not stand (a gate already
/// reported keeps its first finding).
pub fn check(report: &mut ChainReport, rows: &[AuditRow], gates: &[GateRow], by: &SignedBy) {
    for gate in gates {
        if report.gates.iter().any(|(g, _)| g == &gate.id) {
            continue;
        }
        if let Some(p) = problem(gate, rows, report.derived.get(&gate.id), by) {
            report.gates.push((gate.id.clone(), p));
        }
    }
    // The openings reopened gates superseded: what a wait on one of them answers with.
    let mut earlier = Vec::new();
    for (gate, d) in &report.derived {
        for opening in &d.earlier {
            if let Some(p) = opening_problem(gate, opening, rows, by) {
                earlier.push((gate.clone(), opening.instance, p));
            }
        }
    }
    report.earlier.extend(earlier);
}

/// The signing key's file in the prose home of the user running `serve`.
pub const KEY_FILE: &str = "serve-signing.key";

/// The public key (`ed25519:HEX`) of the serve key in the user's prose directory `home`, if
/// it has one (nothing is made, nothing refused: a key that cannot be read is none).
pub fn own_public(home: Option<&std::path::Path>) -> Option<String> {
    let bytes = super::seal::read_secret(home?, KEY_FILE, "the signing key").ok()??;
    let secret: [u8; 32] = bytes.get(..32)?.try_into().ok()?;
    Some(public_tag(
        &ed25519_dalek::SigningKey::from_bytes(&secret).verifying_key(),
    ))
}

/// What signs a change to the principals book once a key is pinned (the approver's key).
pub trait SignsBook {
    /// `ed25519:HEX`, the public key.
    fn public(&self) -> &str;
    /// The signature over a book row's hash, as its `seal` column keeps it: `ed25519:SIGHEX`.
    fn sign_book(&self, hash: &str) -> String;
}

/// The bytes a book row's signature covers.
pub fn book_message(hash: &str) -> Vec<u8> {
    [
        b"prose-state principals book v1\0".as_slice(),
        hash.as_bytes(),
    ]
    .concat()
}

/// Whether `seal` is `key`'s signature over a book row's `hash`.
pub fn book_signature_valid(key: &VerifyingKey, hash: &str, seal: &str) -> bool {
    seal.strip_prefix(PREFIX)
        .and_then(super::seal::hex_bytes)
        .and_then(|b| <[u8; 64]>::try_from(b).ok())
        .map(|b| Signature::from_bytes(&b))
        .is_some_and(|s| key.verify_strict(&book_message(hash), &s).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer as _, SigningKey};

    /// A v4 signature covers the answer and edits and the comment: another answer, none, an
    /// answer of `null` removed, another comment, or the v3 format over an answer does not
    /// stand; v3 over a decision without an answer still does (one signed before v4).
    #[test]
    fn a_signature_covers_the_answer_edits_and_comment() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let by = SignedBy {
            key: key.verifying_key(),
            place: Some("project:p".into()),
            accept_carried: None,
        };
        let metadata = serde_json::json!({"response": {"size": 3}, "edits": [{"name": "draft"}]});
        let answer = answer_digest(&metadata).unwrap();
        let what = Signed {
            run: "r",
            gate: "g",
            instance: 1,
            prompt_hash: "sha256:p",
            decision: "approved",
            principal: "alice",
            time: "2026-11-29 10:00:00",
            inputs: None,
            place: Some("project:p"),
            answer: Some(&answer),
            comment: Some("fine"),
        };
        let signed = |what: &Signed, v: i64| {
            let mut m = metadata.clone();
            m["signature"] = serde_json::json!({
                "key": public_tag(&key.verifying_key()), "v": v, "place": "project:p",
                "sig": crate::model::hex(&key.sign(&what.message(v)).to_bytes()),
            });
            m
        };
        assert!(signature_problem(&signed(&what, ANSWERED), &what, &by).is_none());
        let other = answer_digest(&serde_json::json!({"response": {"size": 4}})).unwrap();
        for changed in [
            Signed {
                answer: Some(&other),
                ..what
            },
            Signed {
                answer: None,
                ..what
            },
            Signed {
                comment: Some("not fine"),
                ..what
            },
            Signed {
                comment: None,
                ..what
            },
        ] {
            assert!(matches!(
                signature_problem(&signed(&what, ANSWERED), &changed, &by),
                Some(Integrity::Tampered(_))
            ));
        }
        assert!(matches!(
            signature_problem(&signed(&what, PLACED), &what, &by),
            Some(Integrity::Tampered(_))
        ));
        let plain = Signed {
            answer: None,
            comment: None,
            ..what
        };
        assert!(signature_problem(&signed(&plain, PLACED), &plain, &by).is_none());
        assert_eq!(answer_digest(&serde_json::json!({"client": "web"})), None);
        // An answer of null is an answer.
        assert!(answer_digest(&serde_json::json!({"response": null})).is_some());
    }
}
