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
    /// for one that carries either: a signature over it is format v4.
    pub answer: Option<&'a str>,
}

/// The signature format that names the project's place.
pub const PLACED: i64 = 3;
/// The signature format that also covers the decision's answer and edits.
pub const ANSWERED: i64 = 4;

/// What a signature covers of a decision's answer (`response`) and edits (`edits`), as its
/// sealed metadata keeps them: None for a decision that carries neither.
pub fn answer_digest(metadata: &serde_json::Value) -> Option<String> {
    let (response, edits) = (&metadata["response"], &metadata["edits"]);
    (!response.is_null() || !edits.is_null())
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
    /// The signature format this decision is signed in: v4 where it carries an answer or
    /// edits, v3 otherwise.
    pub fn format(&self) -> i64 {
        if self.answer.is_some() {
            ANSWERED
        } else {
            PLACED
        }
    }

    /// The signed bytes: a JSON array, so that no field can run into the next. Only v3 and v4
    /// are made and checked (a signature without the place it names is unattested before its
    /// bytes are read); with no place the array holds null there, which no check accepts. v4
    /// is v3 with the answer's digest after the place.
    pub fn message(&self) -> Vec<u8> {
        let mut fields = serde_json::json!([
            format!("prose-state signed decision v{}", self.format()),
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
        if let (Some(answer), Some(a)) = (self.answer, fields.as_array_mut()) {
            a.push(answer.into());
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
    let metadata = rows
        .iter()
        .filter(|r| Some(r.id) == decision && r.event_type == status)
        .filter_map(|r| serde_json::from_str::<serde_json::Value>(r.metadata.as_deref()?).ok())
        .find(|m| m["instance"].as_i64().unwrap_or(1) == what.instance);
    let Some(metadata) = metadata else {
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
    for principal in d.counted.iter().filter(|p| p.as_str() != decider) {
        let found = rows.iter().find_map(|r| {
            let m = serde_json::from_str::<serde_json::Value>(r.metadata.as_deref()?).ok()?;
            (r.event_type == vote
                && r.principal.as_deref() == Some(principal.as_str())
                && m["instance"].as_i64().unwrap_or(1) == what.instance)
                .then(|| (m, r.timestamp.clone().unwrap_or_default()))
        });
        let Some((m, time)) = found else {
            return unsigned("not signed: a vote it counts is not in its log");
        };
        // Each vote signed the inputs as its voter saw them.
        let vote_inputs = serde_json::from_value::<
            std::collections::BTreeMap<String, Option<String>>,
        >(m["inputs"].clone())
        .ok()
        .map(|m| inputs_digest(&m));
        // And the answer and edits it gave.
        let vote_answer = answer_digest(&m);
        let what = Signed {
            decision: vote,
            principal,
            time: &time,
            inputs: vote_inputs.as_deref(),
            answer: vote_answer.as_deref(),
            ..what
        };
        if let Some(p) = signature_problem(&m, &what, by) {
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
    match sig["v"].as_i64() {
        // A signature from before signatures covered answers does not vouch for one: the
        // answer or edits were added to what was signed.
        Some(PLACED) if what.answer.is_some() => {
            return Some(Integrity::Tampered(
                "its signature does not cover the answer or edits its decision records".into(),
            ))
        }
        Some(PLACED | ANSWERED) => {}
        _ => return unsigned("signed by a release before signatures named their project: decide it again on the page"),
    }
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
        .is_some_and(|s| pinned.verify(&what.message(), &s).is_ok());
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

/// The public key (`ed25519:HEX`) of this user's serve key, if it has one (nothing is made,
/// nothing refused: a key that cannot be read is none).
pub fn own_public() -> Option<String> {
    let home = super::seal::prose_home()?;
    let bytes = super::seal::read_secret(&home, KEY_FILE, "the signing key").ok()??;
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

    /// A v4 signature covers the answer and edits: another answer, none, or the v3 format
    /// over an answer does not stand; without an answer the format is v3, as before.
    #[test]
    fn a_signature_covers_the_answer_and_edits() {
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
        };
        let signed = |what: &Signed, v: i64| {
            let mut m = metadata.clone();
            m["signature"] = serde_json::json!({
                "key": public_tag(&key.verifying_key()), "v": v, "place": "project:p",
                "sig": crate::model::hex(&key.sign(&what.message()).to_bytes()),
            });
            m
        };
        assert_eq!(what.format(), ANSWERED);
        assert!(signature_problem(&signed(&what, 4), &what, &by).is_none());
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
        ] {
            assert!(matches!(
                signature_problem(&signed(&what, 4), &changed, &by),
                Some(Integrity::Tampered(_))
            ));
        }
        assert!(matches!(
            signature_problem(&signed(&what, 3), &what, &by),
            Some(Integrity::Tampered(_))
        ));
        let plain = Signed {
            answer: None,
            ..what
        };
        assert_eq!(plain.format(), PLACED);
        assert!(signature_problem(&signed(&plain, 3), &plain, &by).is_none());
        assert_eq!(answer_digest(&serde_json::json!({"client": "web"})), None);
    }
}
