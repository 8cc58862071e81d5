//! Gates: create, view, decide and refuse (every refusal logged), team tallies, and the
//! `consumed` event of a decision with inputs.

use crate::error::{not_found, refused, shown};
use crate::model::GateStatus;
use crate::store::dump::GateRecord;
use crate::store::effects as notify;
use crate::store::tx::Txn;
use crate::store::{AuditRow, Created, Decided, Decision, NewExecution, NewGate};
use anyhow::{anyhow, Result};

use super::executions::exec_record;
use super::sweep::{sealed_deadline_passed, sweep, time_out_at};
use super::{
    append_audit, disagreement, ensure_open, finished, load_exact, run_of, starter, Event,
};

/// Gate `id`'s answer goes into binding `name` in `scope` only where nothing else claims that
/// line of frames, read in the opening's own transaction (so that no concurrent opening or
/// bind slips between a check and the write):
/// - no binding of the name is bound below the scope: it would hide the answer, and `get`
///   takes one it finds there for one written behind prose-state's back (`bind` refuses the
///   same write once the gate is open);
/// - no other gate answers into it on the line: in the same scope two decisions would be
///   read from one binding, each as its own gate's; above or below, one answer would hide the
///   other and the log would call the run tampered. The same gate opened again answers where
///   it answered before, or off that line (a sibling frame: a loop's next call).
fn answer_line_free<T: crate::store::Rows + ?Sized>(
    tx: &mut T,
    id: &str,
    name: &str,
    scope: Option<i64>,
) -> Result<()> {
    let below = |tx: &mut T, s: i64, of: Option<i64>| -> Result<bool> {
        Ok(match of {
            None => true,
            Some(r) => s != r && tx.scope_chain(s)?.contains(&r),
        })
    };
    for s in tx.bound_scopes(name)?.into_iter().flatten() {
        if Some(s) != scope && below(tx, s, scope)? {
            return Err(refused(format!(
                "--response-binding {}: it is bound in execution {s}, inside the answer's scope, where it would hide the answer: name another binding",
                shown(name)
            )));
        }
    }
    let answering = tx.response_gates(name)?;
    let again_here = answering.iter().any(|(g, at)| g == id && *at == scope);
    for (other, at) in answering {
        if other == id && again_here {
            continue;
        }
        // A scope only a copy's old numbering names (a moved run) is no frame here.
        if let Some(a) = at {
            if !tx.execution_exists(a)? {
                continue;
            }
        }
        let on_line = match (at, scope) {
            (a, b) if a == b => other != id,
            (None, _) | (_, None) => true,
            (Some(a), Some(b)) => below(tx, a, Some(b))? || below(tx, b, Some(a))?,
        };
        if on_line {
            let place = at.map_or("the root".to_string(), |a| format!("execution {a}"));
            return Err(refused(format!(
                "--response-binding {}: gate {} already answers into it, in {place}, on this answer's line of frames, where one gate's answer would be read as the other's or hide it: name another binding",
                shown(name),
                shown(&other)
            )));
        }
    }
    Ok(())
}

/// Creates a gate, with its `approve GATE:` execution record and its `created` audit event.
/// The same call again on a pending gate is a safe retry; any other use of the id conflicts.
pub fn create_gate(mut tx: Txn<'_>, g: &NewGate) -> Result<Created> {
    sweep(&mut tx, g.now)?;
    ensure_open(&mut *tx)?;
    // An existing gate is a safe retry or a conflict, unless it is decided and asked to
    // open again: then this is its next instance.
    let existing = load_exact(&mut *tx, g.id)?;
    // The response binding its sealed openings named (a reopened gate answers into it again).
    let mut answered_into = None;
    if let Some(existing) = &existing {
        let (tampered, derived) = disagreement(&mut *tx, existing)?;
        answered_into = derived.response_binding.clone();
        // Opened again only when its sealed log says its opening was decided: a row set to
        // "decided" by SQL reopens nothing (the new opening could name anyone it likes).
        if let (Some(why), true) = (&tampered, g.reopen) {
            return Err(crate::error::tampered(format!(
                "gate {} disagrees with its sealed log ({why}): it is not opened again",
                shown(g.id)
            )));
        }
        if g.reopen && !existing.status.is_pending() {
            // Opened again, it asks for what it asked before: a reopen that leaves out the
            // quorum, the inputs or the answer would be decided by less than the program
            // counts on (one approver, no answer in the binding it reads next).
            let q = &derived.quorum;
            let mut dropped = Vec::new();
            if q.require > 1 && g.quorum.require <= 1 {
                dropped.push(format!("--require {}", q.require));
            }
            if !derived.inputs.is_empty() && g.inputs.is_empty() {
                dropped.push(format!("--inputs {}", derived.inputs.join(",")));
            }
            if derived.response_schema.is_some() && g.response_schema.is_none() {
                dropped.push("--response-schema".to_string());
            }
            if let (Some((name, _)), None) = (&derived.response_binding, g.response_binding) {
                dropped.push(format!("--response-binding {name}"));
            }
            if !dropped.is_empty() {
                return Err(crate::error::usage(format!(
                    "gate {} is opened again as it was created: pass {} as its first opening did",
                    shown(g.id),
                    dropped.join(", ")
                )));
            }
        }
        if g.reopen && !existing.status.is_pending() && derived.decision.is_none() {
            return Err(refused(format!(
                "gate {} is {} only in its row: no sealed decision stands (written by another tool?), so it is not opened again",
                shown(g.id),
                existing.status
            )));
        }
        if !g.reopen || existing.status.is_pending() {
            // The same call again: a safe retry (its quorum too, which its sealed log keeps).
            let q = &derived.quorum;
            // An escalated gate's row allows its escalation entry too.
            let mut given: Vec<String> = serde_json::from_str(g.allow).unwrap_or_default();
            if derived.escalated {
                given = q.escalated_allow(&given);
            }
            let same = existing.prompt == g.prompt
                && derived.inputs == g.inputs
                && derived.response_schema.as_ref() == g.response_schema
                && derived.response_binding == g.response_binding.map(|(n, s)| (n.to_string(), s))
                && existing.allow == given
                && existing.timeout.as_deref() == g.timeout
                && existing.on_reject.as_deref() == g.on_reject
                && existing.metadata.as_deref() == g.metadata
                && (q.require, q.veto, q.separate)
                    == (g.quorum.require, g.quorum.veto, g.quorum.separate)
                && (&q.remind, &q.escalate_to, q.escalate_after)
                    == (
                        &g.quorum.remind,
                        &g.quorum.escalate_to,
                        g.quorum.escalate_after,
                    );
            let pending = existing.status.is_pending();
            tx.commit()?;
            let existing = existing.clone();
            return Ok(if same && pending {
                Created::Retried(existing)
            } else {
                Created::Conflict(existing)
            });
        }
    }
    let instance = existing.as_ref().map_or(1, |e| e.instance + 1);
    let (run_id, _) = run_of(&mut *tx)?;
    if let Some(parent) = g.parent_execution {
        if !tx.execution_exists(parent)? {
            return Err(not_found(format!("execution not found: {parent}")));
        }
    }
    let text = format!("approve {}:", g.id);
    let metadata = serde_json::json!({"gate_id": g.id}).to_string();
    let record = exec_record(&NewExecution {
        statement_index: g.statement_index,
        statement_text: &text,
        status: "pending",
        started_at: Some(g.now),
        completed_at: None,
        error_message: None,
        parent_id: g.parent_execution,
        metadata: Some(&metadata),
        idempotency_key: None,
        principal: g.quorum.creator.as_deref().unwrap_or("unknown"),
    });
    let execution_id = tx
        .put_execution(None, &record)?
        .ok_or_else(|| anyhow!("the gate's execution record was not appended"))?;
    let allow: serde_json::Value = serde_json::from_str(g.allow)?;
    // What the gate is, sealed: the `gates` row is only its projection (`chain::derive`).
    let mut metadata = serde_json::json!({
        "prompt_hash": g.prompt_hash, "allow": allow, "instance": instance,
        "on_reject": g.on_reject, "timeout_at": g.timeout_at,
        // The rest of the row, so that every column of it is derived (`chain::compare`).
        "timeout": g.timeout,
        "metadata_hash": g.metadata.map(crate::model::sha256_tag)
    });
    let mut quorum = g.quorum.clone();
    if quorum.separate {
        quorum.starter = Some(starter(&mut *tx)?);
    }
    quorum.record(&mut metadata);
    if let Some(schema) = g.response_schema {
        metadata["response_schema"] = schema.clone();
    }
    if let Some((name, scope)) = g.response_binding {
        // Only a decision writes it: a const in its scope never can be, and a value already
        // there (not one an earlier opening of this gate answered into it) would be read as
        // the answer where no decision gives one (a timeout, a rejection without an answer).
        if let Some((kind, _, _, _)) = tx.binding_head(name, scope)? {
            if kind.as_deref() == Some("const") {
                return Err(refused(format!(
                    "--response-binding {}: it is a const in the gate's scope, which no decision may write",
                    shown(name)
                )));
            }
            if answered_into != Some((name.to_string(), scope)) {
                return Err(refused(format!(
                    "--response-binding {}: it is already bound in the gate's scope, and only a decision may write a gate's answer: name a new binding",
                    shown(name)
                )));
            }
        }
        answer_line_free(&mut *tx, g.id, name, scope)?;
        metadata["response_binding"] = name.into();
        metadata["response_scope"] = scope.into();
    }
    if !g.inputs.is_empty() {
        metadata["inputs"] = g.inputs.into();
        // Where they are looked up from, sealed: a row's `execution_id` is only a row.
        metadata["inputs_scope"] = g.parent_execution.into();
    }
    if quorum.is_team(&serde_json::from_value::<Vec<String>>(allow.clone())?) {
        tx.require_team_readers()?;
    }
    append_audit(
        &mut *tx,
        &Event::system(g.id, &run_id, "created", g.now),
        metadata,
    )?;
    if existing.is_some() {
        // The opening that ends is kept, as it was, in `gate_instances`.
        let ended = tx
            .gate_row(g.id)?
            .ok_or_else(|| anyhow!("gate vanished before it was opened again"))?;
        tx.put_gate(&ended, true)?;
        tx.reopen_gate(g, execution_id)?;
    } else {
        let text = |t: Option<&str>| t.map(str::to_string);
        tx.put_gate(
            &GateRecord {
                id: g.id.to_string(),
                run_id: Some(run_id.clone()),
                instance: 1,
                execution_id: Some(execution_id),
                prompt: Some(g.prompt.to_string()),
                allow: Some(g.allow.to_string()),
                timeout: text(g.timeout),
                timeout_at: text(g.timeout_at),
                on_reject: text(g.on_reject),
                status: Some(GateStatus::Pending),
                created_at: Some(g.now.to_string()),
                resolved_at: None,
                resolved_by: None,
                resolution_comment: None,
                metadata: text(g.metadata),
            },
            false,
        )?;
    }
    // When its first reminder is due (none: NULL, also over a reopened gate's old one).
    let remind_at = g.timeout_at.and_then(|deadline| {
        crate::team::next_reminder(&quorum.remind, deadline, g.now, &[], g.now)
    });
    tx.set_gate_schedule(g.id, None, remind_at.as_deref())?;
    let row = tx
        .load_gate(g.id)?
        .ok_or_else(|| anyhow!("gate vanished after insert"))?;
    tx.notice(notify::Event::Opened, &row);
    tx.commit()?;
    Ok(Created::New(row))
}

/// One gate with its audit history, logging a `viewed` event by `viewer` where this machine
/// holds an audit key.
pub fn view_gate(
    mut tx: Txn<'_>,
    id: &str,
    viewer: Option<&str>,
    client: &str,
    now: &str,
) -> Result<Option<(crate::store::GateRow, Vec<AuditRow>)>> {
    sweep(&mut tx, now)?;
    let Some(gate) = load_exact(&mut *tx, id)? else {
        tx.commit()?;
        return Ok(None);
    };
    // A look is logged where this machine holds an audit key; one without makes none for it
    // (a key made here would seal rows no teammate can check).
    if tx.wiring().key_for_reading()?.is_some() {
        let run_id = run_of(&mut *tx)?.0;
        append_audit(
            &mut *tx,
            &Event::system(id, &run_id, "viewed", now).by(viewer, None),
            serde_json::json!({"client": client}),
        )?;
    }
    let history = tx.gate_history(id)?;
    tx.commit()?;
    Ok(Some((gate, history)))
}

/// Records a decision refused before it reached the gate (a token that is not valid, a
/// signature the project requires, a web form without its CSRF token): a `refused` event on
/// the gate, like the refusals `decide_gate` makes. Whether it was recorded: not when the
/// gate does not exist, or the run is finished (it takes no more writes).
pub fn refuse_attempt(mut tx: Txn<'_>, a: &crate::store::Attempt) -> Result<bool> {
    let gate = match finished(&mut *tx)? {
        None => tx.load_gate(a.gate_id)?.filter(|g| g.id == a.gate_id),
        Some(_) => None,
    };
    let Some(gate) = gate else {
        tx.commit()?;
        return Ok(false);
    };
    let run_id = run_of(&mut *tx)?.0;
    append_audit(
        &mut *tx,
        &Event::system(a.gate_id, &run_id, "refused", a.now).by(a.principal, None),
        refused_metadata(a.client, &gate, a.authenticated, a.approve, a.reason),
    )?;
    tx.commit()?;
    Ok(true)
}

/// Approves or rejects a pending gate. Of concurrent decisions exactly one wins: each runs
/// serialised, and only a gate still pending, allowing the principal, with the prompt the
/// decider was shown, is decided; every refusal is audit-logged.
/// A decision's inputs moved between their read and its transaction (exit 75 when it stays
/// so: a retry may clear it). `services::decide` reads them again and retries.
pub const INPUTS_MOVED: &str =
    "an input of the gate changed while the decision was being taken: try again";

/// A decision as it is taken: holding the run's write lock, at the time read then, by whom
/// the principals book says then.
struct Taken<'a> {
    d: &'a Decision<'a>,
    now: String,
    authenticated: bool,
    roster: std::result::Result<crate::team::Roster, String>,
}

impl<'a> std::ops::Deref for Taken<'a> {
    type Target = Decision<'a>;
    fn deref(&self) -> &Decision<'a> {
        self.d
    }
}

pub fn decide_gate(mut tx: Txn<'_>, asked: &Decision) -> Result<Decided> {
    // The transaction holds the run's write lock: a decision that waited for it (another
    // writer holding it) is taken now, as the book says now. A deadline that passed, or a
    // token revoked, while it waited is seen: the sealed order of events is the real one.
    let now = crate::model::now();
    let authority = (asked.authority)();
    let Some(gate) = load_exact(&mut *tx, asked.gate_id)? else {
        tx.commit()?;
        return Ok(Decided::NotFound);
    };
    let authority = match authority {
        Ok(a) => a,
        Err(e)
            if matches!(
                crate::error::code_of(&e),
                Some(crate::error::Code::Refused | crate::error::Code::Tampered)
            ) =>
        {
            let run_id = run_of(&mut *tx)?.0;
            let reason = format!("{e:#}");
            let mut metadata = refused_metadata(asked.client, &gate, false, asked.approve, &reason);
            metadata["prompt_hash"] = asked.prompt_hash.into();
            let ev = Event::system(asked.gate_id, &run_id, "refused", &now);
            append_audit(
                &mut *tx,
                &ev.by(Some(asked.principal.as_str()), asked.comment),
                metadata,
            )?;
            tx.commit()?;
            let logged = format!("{reason}; this attempt was logged");
            return Err(match crate::error::code_of(&e) {
                Some(crate::error::Code::Tampered) => crate::error::tampered(logged),
                _ => crate::error::refused(logged),
            });
        }
        Err(e) => return Err(e),
    };
    let d = &Taken {
        d: asked,
        now,
        authenticated: authority.authenticated,
        roster: authority.roster,
    };
    sweep(&mut tx, &d.now)?;
    ensure_open(&mut *tx)?;
    let Some(gate) = load_exact(&mut *tx, d.gate_id)? else {
        tx.commit()?;
        return Ok(Decided::NotFound);
    };
    let run_id = run_of(&mut *tx)?.0;
    // The gate as its sealed events make it: a row that contradicts them is not decided.
    let (mut tampered, mut derived) = disagreement(&mut *tx, &gate)?;
    // Too late by the sealed deadline (which the sweep above finds through the row, to the
    // second): timed out now, as the sweep would, and the decision refused as late.
    let mut gate = gate;
    if tampered.is_none() && gate.status.is_pending() && sealed_deadline_passed(&derived, &d.now) {
        let deadline = derived.timeout_at.clone().flatten().unwrap_or_default();
        let at = crate::model::canonical_time(&deadline).unwrap_or_else(|| d.now.to_string());
        time_out_at(&mut tx, &gate, &run_id, &d.now, at)?;
        gate = load_exact(&mut *tx, d.gate_id)?
            .ok_or_else(|| anyhow!("gate vanished while it timed out"))?;
        (tampered, derived) = disagreement(&mut *tx, &gate)?;
    }
    let q = &derived.quorum;
    let empty = crate::team::Roster::default();
    let roster = match &d.roster {
        Ok(r) => r,
        Err(why) => {
            // A book whose log cannot be trusted admits no one through a group.
            if tampered.is_none() && gate.allow.iter().any(|a| crate::team::is_group(a)) {
                tampered = Some(format!("{why}, so no group admits anyone"));
            }
            &empty
        }
    };
    let via = crate::team::admitting(&gate.allow, d.principal, roster);
    // A claim on a team's gate is told that it does not count, before whether it is allowed.
    let claim = q.needs_authentication(&gate.allow) && !d.authenticated;
    let refused = refusal(&gate, d, &derived, tampered, claim || !via.is_empty())
        .or_else(|| team_refusal(&gate, d, &derived));
    if let Some((outcome, reason)) = refused {
        let mut metadata = refused_metadata(d.client, &gate, d.authenticated, d.approve, &reason);
        metadata["prompt_hash"] = d.prompt_hash.into();
        let e = Event::system(d.gate_id, &run_id, "refused", &d.now);
        append_audit(
            &mut *tx,
            &e.by(Some(d.principal.as_str()), d.comment),
            metadata,
        )?;
        tx.commit()?;
        return Ok(outcome);
    }
    // An answer fits the schema the opening sealed, or the decision is bad input: nothing
    // written (not even the sweep above), no event.
    crate::response::check_answer(derived.response_schema.as_ref(), d.response, d.approve)?;
    check_edits(d, &derived)?;
    // A decision about inputs seals what they held as the decider saw them.
    let inputs = match (derived.inputs.is_empty(), d.inputs) {
        (true, _) => None,
        (false, Some(map))
            if map.keys().eq(derived
                .inputs
                .iter()
                .collect::<std::collections::BTreeSet<_>>()) =>
        {
            Some(map)
        }
        (false, _) => {
            return Err(anyhow!(
                "gate {} is about inputs ({}) that were not read for this decision",
                shown(d.gate_id),
                derived.inputs.join(", ")
            ))
        }
    };
    // What was read for the decision is what the inputs hold now, in this transaction: a
    // vote (an approver's edit) or a write committed since the read would otherwise be sealed
    // as not seen, and the decision stale at once. The caller reads again and retries.
    if let (Some(_), Some(pins)) = (inputs, d.pins) {
        for (name, pin) in pins {
            if tx.binding_own_version(name, pin.scope)? != Some(pin.version) {
                return Err(crate::error::busy(INPUTS_MOVED));
            }
        }
    }
    let me = d.principal.as_str();
    let counted = |gate, tally, already| Decided::Counted {
        gate,
        quorum: q.clone(),
        tally,
        already,
    };
    // The same principal voting again counts once, and writes nothing; with another answer
    // it is refused (exit 4), so that no answer is dropped unseen.
    if derived.tally.votes(d.approve).iter().any(|p| p == me) {
        let earlier = derived
            .responses
            .iter()
            .find(|(by, _)| by == me)
            .map(|(_, answer)| answer);
        if earlier != d.response || !d.edits.is_empty() {
            let with = match d.edits.is_empty() {
                true => "with another answer",
                false => "and a vote given again edits nothing",
            };
            return Err(crate::error::refused(format!(
                "{} already voted on gate {} {with}: a vote stands as it was given",
                shown(me),
                shown(d.gate_id)
            )));
        }
        let tally = recount(&gate, &derived, roster).0;
        tx.commit()?;
        return Ok(counted(gate, tally, true));
    }
    // Earlier votes count while their principal is still allowed now.
    let (mut tally, discounted) = recount(&gate, &derived, roster);
    tally.add(me, d.approve);
    let outcome = tally.outcome(q);
    let resolves = outcome != crate::team::Outcome::Pending;
    let status = if d.approve {
        GateStatus::Approved
    } else {
        GateStatus::Rejected
    };
    let kind = match (resolves, d.approve) {
        (true, _) => status.as_str(),
        (false, true) => crate::store::chain::VOTE_APPROVE,
        (false, false) => crate::store::chain::VOTE_REJECT,
    };
    // An approval's edits are versions by the decider, and the decision is about them.
    let edited = apply_edits(&mut tx, d, &derived, me)?;
    let inputs = edited.as_ref().map(|e| &e.0).or(inputs);
    let pins = edited.as_ref().map(|e| &e.1).or(d.pins);
    let sealed_edits = edited.as_ref().map(|e| &e.2);
    let mut metadata = decision_metadata(&gate, d, kind, inputs, sealed_edits);
    // The decision writes its answer into the gate's response binding, as a version by the
    // decider, in its own transaction; its event seals which version that is.
    if let (true, Some((name, scope)), Some(answer)) =
        (resolves, &derived.response_binding, d.response)
    {
        let value = answer.to_string();
        let statement = format!("approve {}:", d.gate_id);
        let written = super::bind::write(
            &mut tx,
            &crate::store::NewBinding {
                name,
                execution_id: *scope,
                kind: "let",
                value: &value,
                source_statement: Some(&statement),
                attachment_path: None,
                update: None,
                if_version: None,
                now: &d.now,
                principal: me,
                key: None,
            },
            &mut || Ok(()),
            super::bind::Writer::Answer(d.gate_id),
        )?;
        metadata["response_version"] = written.version.into();
    }
    if let (Some(_), Some(pins)) = (inputs, pins) {
        metadata["pinned"] = serde_json::to_value(pins)?;
    }
    if q.is_team(&gate.allow) {
        metadata["via"] = via.into();
        let votes = tally.votes(d.approve);
        match (resolves, q.decided_by_one(d.approve)) {
            (true, true) => {}
            (true, false) => {
                metadata[if d.approve { "approvals" } else { "rejections" }] = votes.clone().into()
            }
            (false, _) => {
                metadata["count"] = votes.len().into();
                metadata["require"] = q.require.into();
            }
        }
        if !discounted.is_empty() {
            metadata["discounted"] = discounted.into();
        }
    }
    // The audit event is written before the gates row changes, in the same transaction.
    let e = Event::system(d.gate_id, &run_id, kind, &d.now);
    append_audit(&mut *tx, &e.by(Some(me), d.comment), metadata)?;
    if !resolves {
        tx.commit()?;
        return Ok(counted(gate, tally, false));
    }
    tx.resolve_gate(d.gate_id, &status, me, d.comment, &d.now)?;
    let row = tx
        .load_gate(d.gate_id)?
        .ok_or_else(|| anyhow!("gate vanished during decision"))?;
    tx.notice(
        if d.approve {
            notify::Event::Approved
        } else {
            notify::Event::Rejected
        },
        &row,
    );
    tx.commit()?;
    Ok(Decided::Done(row))
}

/// Edits are an approval's, of the gate's inputs, each once: anything else is bad input.
fn check_edits(d: &Decision, derived: &crate::store::chain::Derived) -> Result<()> {
    if d.edits.is_empty() {
        return Ok(());
    }
    if !d.approve {
        return Err(crate::error::usage(
            "only an approval edits the gate's inputs",
        ));
    }
    for (name, _) in d.edits {
        if !derived.inputs.contains(name) {
            let about = match derived.inputs.is_empty() {
                true => "it is about no inputs".to_string(),
                false => format!("its inputs are {}", derived.inputs.join(", ")),
            };
            return Err(crate::error::usage(format!(
                "--edit {}: gate {} is not about it ({about})",
                shown(name),
                shown(d.gate_id)
            )));
        }
    }
    Ok(())
}

type Edited = (
    std::collections::BTreeMap<String, Option<String>>,
    std::collections::BTreeMap<String, crate::store::chain::Pin>,
    serde_json::Value,
);

/// Writes an approval's edits: each a new version of the input by the decider, in the scope
/// and on top of the version the decider was shown (compare-and-set: an input changed since is
/// refused, exit 4, so that two approvers' edits never both land unseen). The inputs' digests
/// and pins as the decision seals them, with the edits, and what the edits were.
fn apply_edits(
    tx: &mut Txn<'_>,
    d: &Taken,
    derived: &crate::store::chain::Derived,
    me: &str,
) -> Result<Option<Edited>> {
    if d.edits.is_empty() {
        return Ok(None);
    }
    let mut digests = d.inputs.cloned().unwrap_or_default();
    let mut pins = d.pins.cloned().unwrap_or_default();
    let mut sealed = Vec::new();
    let statement = format!("approve {}:", d.gate_id);
    for (name, value) in d.edits {
        let (scope, from) = match (pins.get(name), digests.get(name)) {
            (Some(pin), _) => (pin.scope, Some(pin.version)),
            (None, Some(Some(_))) => {
                return Err(refused(format!(
                    "input {} has no version in its history (`prose-state doctor --fix` starts it again): it cannot be edited",
                    shown(name)
                )))
            }
            (None, _) => (derived.inputs_scope, None),
        };
        let head = tx.binding_head(name, scope)?;
        let kind = head
            .as_ref()
            .and_then(|h| h.0.clone())
            .unwrap_or_else(|| "let".to_string());
        if kind == "const" {
            return Err(crate::error::usage(format!(
                "--edit {}: gate {}'s input {} is a const (a block's argument, bound once), which no edit rebinds: approve without editing it, or reject it with a reason",
                shown(name),
                shown(d.gate_id),
                shown(name)
            )));
        }
        let before = match &head {
            Some((_, None, _, _)) => tx.binding_value(name, scope)?.map(|v| v.len()),
            _ => None,
        };
        let written = super::bind::write_over(
            tx,
            &crate::store::NewBinding {
                name,
                execution_id: scope,
                kind: &kind,
                value,
                source_statement: Some(&statement),
                attachment_path: None,
                update: None,
                if_version: Some(from.unwrap_or(0)),
                now: &d.now,
                principal: me,
                key: None,
            },
            &mut || Ok(()),
            super::bind::Writer::Edit,
            Some(head),
        )?;
        let version = written
            .version
            .ok_or_else(|| anyhow!("the edit of {} was not versioned", shown(name)))?;
        // What the version replaced held, as the decider was shown it (its digest, which the
        // decision otherwise seals only for the edited version): sealed, so that the version
        // the edit replaced cannot be rewritten in history unseen.
        let before_digest = from.and(digests.get(name).cloned().flatten());
        let digest = crate::model::sha256_tag(value);
        digests.insert(name.clone(), Some(digest.clone()));
        pins.insert(name.clone(), crate::store::chain::Pin { scope, version });
        let mut edit = serde_json::json!({
            "name": name, "execution_id": scope, "from_version": from, "version": version,
            "bytes_before": before, "bytes": value.len(), "digest": digest,
        });
        if let Some(digest) = before_digest {
            edit["digest_before"] = digest.into();
        }
        sealed.push(edit);
    }
    Ok(Some((digests, pins, sealed.into())))
}

/// Why a decision may not be taken on this gate (its row contradicts its sealed events, it is
/// decided already or timed out, it was reopened or its prompt changed since it was shown,
/// the principal is not allowed): what the caller is told, and the reason its `refused` event
/// records. None when it may.
fn refusal(
    gate: &crate::store::GateRow,
    d: &Decision,
    d_open: &crate::store::chain::Derived,
    tampered: Option<String>,
    admitted: bool,
) -> Option<(Decided, String)> {
    let g = gate.clone();
    Some(if let Some(t) = tampered {
        let reason = format!("the gate disagrees with its sealed log: {t}");
        (Decided::Tampered(g, reason.clone()), reason)
    } else if !gate.status.is_pending() {
        // Decided in its row alone, by no sealed event of its opening.
        let unattested = d_open.decision.is_none();
        let only = if unattested { " in its row only" } else { "" };
        (
            Decided::AlreadyResolved(g, unattested),
            format!("already {}{only}", gate.status),
        )
    } else if let Some(shown) = d.instance.filter(|i| *i != gate.instance) {
        let reason = format!(
            "gate reopened after it was shown (instance {shown} shown, {} now)",
            gate.instance
        );
        (Decided::PromptChanged(g), reason)
    } else if !admitted {
        (Decided::NotAllowed(g), "principal not allowed".to_string())
    } else if crate::model::sha256_tag(&gate.prompt) != d.prompt_hash {
        let reason = "prompt changed after it was shown".to_string();
        (Decided::PromptChanged(g), reason)
    } else {
        return None;
    })
}

/// What every decision's audit event records, taken or refused: where it was taken, the
/// gate's opening, and whether a token authenticated the principal.
fn client_metadata(
    client: &str,
    gate: &crate::store::GateRow,
    authenticated: bool,
) -> serde_json::Value {
    let mut metadata = serde_json::json!({ "client": client, "instance": gate.instance });
    if authenticated {
        metadata["authenticated"] = "token".into();
    }
    metadata
}

/// The metadata of a `refused` event: what was attempted, and why it was refused.
fn refused_metadata(
    client: &str,
    gate: &crate::store::GateRow,
    authenticated: bool,
    approve: bool,
    reason: &str,
) -> serde_json::Value {
    let mut metadata = client_metadata(client, gate, authenticated);
    metadata["attempted"] = if approve { "approve" } else { "reject" }.into();
    metadata["reason"] = reason.into();
    metadata
}

/// The metadata of an `approved` or `rejected` audit event, or of a vote short of the quorum
/// (`kind` names which: what a signature signs).
fn decision_metadata(
    gate: &crate::store::GateRow,
    d: &Taken,
    kind: &str,
    inputs: Option<&std::collections::BTreeMap<String, Option<String>>>,
    edits: Option<&serde_json::Value>,
) -> serde_json::Value {
    let mut metadata = client_metadata(d.client, gate, d.authenticated);
    metadata["prompt_hash"] = d.prompt_hash.into();
    // The answer and the edits it carries, which its signature covers.
    if let Some(sealed) = edits {
        metadata["edits"] = sealed.clone();
    }
    if let Some(answer) = d.response {
        metadata["response"] = answer.clone();
    }
    let answer = crate::store::signatures::answer_digest(&metadata);
    let inputs_digest = inputs.map(crate::store::signatures::inputs_digest);
    if let Some(map) = inputs {
        metadata["inputs"] = serde_json::to_value(map).unwrap_or_default();
    }
    if d.approve {
        if let Some(s) = gate
            .created_at
            .as_deref()
            .and_then(|c| crate::model::seconds_between(c, &d.now))
        {
            metadata["approval_time_seconds"] = s.into();
        }
    } else {
        metadata["on_reject"] = gate.on_reject.clone().into();
    }
    if let Some(signer) = d.signer {
        metadata["signature"] = signer.sign(&crate::store::signatures::Signed {
            run: gate.run_id.as_deref().unwrap_or_default(),
            gate: &gate.id,
            instance: gate.instance,
            prompt_hash: d.prompt_hash,
            decision: kind,
            principal: d.principal.as_str(),
            time: &d.now,
            inputs: inputs_digest.as_deref(),
            place: None,
            answer: answer.as_deref(),
            comment: d.comment,
        });
    }
    metadata
}

/// Why a team's rules refuse this decision (after the rules every gate has): a claim where
/// only authenticated decisions count, an approval by the run's starter or the gate's
/// creator under separation of duties, a vote changed without a veto.
fn team_refusal(
    gate: &crate::store::GateRow,
    d: &Taken,
    derived: &crate::store::chain::Derived,
) -> Option<(Decided, String)> {
    let q = &derived.quorum;
    let me = d.principal.as_str();
    let g = gate.clone();
    Some(if q.needs_authentication(&gate.allow) && !d.authenticated {
        (
            Decided::NotAuthenticated(g),
            "this gate counts only authenticated decisions".to_string(),
        )
    } else if d.approve && q.excluded().contains(&me) {
        let whose = if q.starter.as_deref() == Some(me) {
            "started its run"
        } else {
            "created it"
        };
        let reason =
            format!("separation of duties: {me} {whose}, and may not approve their own gate");
        (Decided::OwnGate(g, reason.clone()), reason)
    } else if !q.veto && derived.tally.votes(!d.approve).iter().any(|p| p == me) {
        let reason = format!(
            "{me} already voted to {} this gate",
            if d.approve { "reject" } else { "approve" }
        );
        (Decided::OwnGate(g, reason.clone()), reason)
    } else {
        return None;
    })
}

/// The votes of a gate as they stand: for an opening still pending, its sealed votes that
/// still count under the roster (what the next decision counts); once decided, whom the
/// decision counted. What every reader shows as the gate's progress.
pub fn standing_tally(
    gate: &crate::store::GateRow,
    derived: &crate::store::chain::Derived,
    roster: &crate::team::Roster,
) -> crate::team::Tally {
    match derived.decision {
        None => recount(gate, derived, roster).0,
        Some(_) => derived.tally_or_counted(),
    }
}

/// The sealed votes of the gate's opening that still count: each by a principal the allow
/// list admits now (a group member still in the group, a principal not revoked), and, for
/// an approval, not excluded by separation of duties. Those that no longer count, with why.
fn recount(
    gate: &crate::store::GateRow,
    derived: &crate::store::chain::Derived,
    roster: &crate::team::Roster,
) -> (crate::team::Tally, Vec<serde_json::Value>) {
    let mut tally = crate::team::Tally::default();
    let mut discounted = Vec::new();
    let votes = derived
        .tally
        .approvals
        .iter()
        .map(|p| (p, true))
        .chain(derived.tally.rejections.iter().map(|p| (p, false)));
    for (p, approve) in votes {
        // A revoked principal's vote counts for nothing, whichever entry admitted it.
        let still = !roster.revoked.contains(p)
            && crate::model::Principal::parse(p, "principal")
                .is_ok_and(|pp| !crate::team::admitting(&gate.allow, &pp, roster).is_empty());
        if still {
            tally.add(p, approve);
        } else {
            let why = if roster.revoked.contains(p) {
                "revoked"
            } else {
                "no longer allowed"
            };
            discounted.push(serde_json::json!({"principal": p, "why": why}));
        }
    }
    (tally, discounted)
}

/// Records that the VM consumed the decision of a gate with inputs (`gates wait` returned it,
/// `resume` reported it): a sealed `consumed` event, once, after which a change of its inputs
/// no longer makes it stale. Written only while each input is still at the version the
/// caller read its content at (`inputs`: name, and where it was found and at which version;
/// None: not bound), so that a change between that read and this write is never consumed
/// unseen. Whether it was written.
pub fn consume(
    mut tx: Txn<'_>,
    gate_id: &str,
    instance: i64,
    inputs: &[crate::store::InputAt],
    chain: &[Option<i64>],
    now: &str,
) -> Result<bool> {
    if finished(&mut *tx)?.is_some() {
        return Ok(false);
    }
    let Some(gate) = load_exact(&mut *tx, gate_id)? else {
        return Ok(false);
    };
    let (tampered, d) = disagreement(&mut *tx, &gate)?;
    if tampered.is_some() || d.instance != instance || d.decision.is_none() || d.consumed {
        return Ok(false);
    }
    // Each input as the lookup finds it now, walking the same scopes (nearest first, the root
    // last): the same binding at the same version, or still none (a first bind anywhere on
    // the way, or one in a nearer scope, is a change).
    for (name, at) in inputs {
        let mut now_at = None;
        for scope in chain {
            if let Some(head) = tx.binding_head(name, *scope)? {
                now_at = Some((*scope, head.2));
                break;
            }
        }
        if now_at != *at {
            return Ok(false);
        }
    }
    let run_id = run_of(&mut *tx)?.0;
    let decision = d.decision.as_ref().map(|(_, _, id)| *id);
    append_audit(
        &mut *tx,
        &Event::system(gate_id, &run_id, crate::store::chain::CONSUMED, now),
        serde_json::json!({"instance": instance, "decision": decision}),
    )?;
    tx.commit()?;
    Ok(true)
}
