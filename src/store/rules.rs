//! The rules of the state, each written once, over any backend's transaction: a finished run
//! takes no more writes; a `const` stays const; overdue gates are swept first and fail
//! closed; every audit event is chained to the last; the first decision wins and every
//! refusal is logged; a retried keyed append is not appended twice.

use super::dump::{AgentRecord, BindingRecord, ExecRecord, GateRecord, SegmentRecord};
use super::effects as notify;
use super::tx::{Tx, TxKind, Txn};
use super::{
    AuditRow, BindOutcome, Created, Decided, Decision, Finished, ImportAdded, ImportRow,
    NewBinding, NewExecution, NewGate, Resumed,
};
use crate::error::{not_found, refused, shown};
use crate::model::{GateStatus, RunStatus};
use anyhow::{anyhow, Result};

/// A write to a finished run (`completed` or `failed`) is refused. Checked inside the write's
/// own transaction, so a write and a `finish` cannot interleave.
pub fn ensure_open(tx: &mut dyn Tx) -> Result<()> {
    match finished(tx)? {
        Some(why) => Err(refused(why)),
        None => Ok(()),
    }
}

/// Why the run takes no more writes (it is `completed` or `failed`), or None.
fn finished(tx: &mut dyn Tx) -> Result<Option<String>> {
    Ok(match tx.run_row()? {
        Some((id, Some(status))) if status.is_finished() => Some(format!(
            "run {id} is {status}: a finished run takes no more writes"
        )),
        _ => None,
    })
}

/// The run's own id and status, from its row. The id is what every audit event of it names
/// (a gate row's `run_id` is what a writer of the database left there).
fn run_of(tx: &mut dyn Tx) -> Result<(String, Option<RunStatus>)> {
    tx.run_row()?
        .ok_or_else(|| anyhow!("the store has no run row"))
}

/// The gate stored under exactly `id`, if any: a row another id answers for (a collation
/// changed behind the tool's back makes `deploy` find `DEPLOY`) is refused as tampering.
pub fn load_exact(tx: &mut dyn Tx, id: &str) -> Result<Option<super::GateRow>> {
    match tx.load_gate(id)? {
        Some(g) if g.id != id => Err(crate::error::tampered(format!(
            "looking up gate {} found gate {}: the gates table was changed behind prose-state's back",
            shown(id),
            shown(&g.id)
        ))),
        other => Ok(other),
    }
}

/// What a write may act on: the gate checked against its own sealed history. Why it may not
/// (it contradicts its sealed events, or its row names an opening other than the newest sealed
/// one, so that its allow list is nobody's), and what the history derives.
fn disagreement(
    tx: &mut dyn Tx,
    gate: &super::GateRow,
) -> Result<(Option<String>, super::chain::Derived)> {
    let run = run_of(tx)?.0;
    let (integrity, derived) = super::chain::gate_against_history(
        gate,
        &run,
        &tx.gate_history(&gate.id)?,
        super::seal::key_for_reading()?,
    );
    let why = match integrity {
        super::chain::Integrity::Tampered(why) => Some(why),
        _ if derived.instance > 0 && gate.instance != derived.instance => Some(format!(
            "its row is instance {}, but its sealed log's newest opening is instance {}",
            gate.instance, derived.instance
        )),
        _ => None,
    };
    Ok((why, derived))
}

/// One audit event to append (its metadata beside it).
pub struct Event<'a> {
    pub gate_id: &'a str,
    pub run_id: &'a str,
    pub event_type: &'a str,
    pub principal: Option<&'a str>,
    pub comment: Option<&'a str>,
    pub now: &'a str,
}

impl<'a> Event<'a> {
    /// An event the tool makes itself: by `system`, with no comment.
    pub fn system(gate_id: &'a str, run_id: &'a str, event_type: &'a str, now: &'a str) -> Self {
        Event {
            gate_id,
            run_id,
            event_type,
            principal: Some("system"),
            comment: None,
            now,
        }
    }

    /// The same event, by `principal`, with `comment`.
    pub fn by(self, principal: Option<&'a str>, comment: Option<&'a str>) -> Self {
        Event {
            principal,
            comment,
            ..self
        }
    }
}

/// Appends an audit row chained to the run's last one. The id and the previous hash are read
/// and the row written in the same serialised transaction.
pub fn append_audit(
    tx: &mut dyn Tx,
    e: &Event,
    mut metadata: serde_json::Value,
) -> Result<AuditRow> {
    // Where in the log it happened, sealed with it: what a fork at a record carries.
    if let Some(m) = metadata.as_object_mut() {
        m.insert("after_record".into(), tx.newest_record()?.into());
    }
    let (mut seq, mut prev) = tx.chain_head()?;
    // A run's first sealed row is its genesis: what came before is sealed as such, and
    // nothing unsealed after it is ever "from before the chain".
    if seq == 0 && e.event_type != super::dump::GENESIS {
        genesis(tx, e.run_id, e.now, None)?;
        (seq, prev) = tx.chain_head()?;
    }
    let id = tx.next_audit_id()?;
    let mut row = AuditRow {
        id,
        gate_id: e.gate_id.to_string(),
        run_id: e.run_id.to_string(),
        event_type: e.event_type.to_string(),
        principal: e.principal.map(str::to_string),
        comment: e.comment.map(str::to_string),
        timestamp: Some(e.now.to_string()),
        metadata: Some(metadata.to_string()),
        prev_hash: Some(prev.clone()),
        hash: None,
        seq: Some(seq + 1),
        seal: None,
    };
    let hash = row.chain_hash(&prev);
    row.seal = Some(super::seal::key_for_writing()?.seal(&hash));
    row.hash = Some(hash);
    tx.insert_audit(&row)?;
    Ok(row)
}

/// Seals a run: the first row of its sealed sequence, recording a digest of each row already
/// in its log outside the sequence (rows from before the seal: an older schema's, or another
/// tool's). Verification takes exactly those as from before the chain; any other unsealed
/// row, whatever its id, is unattested, and one of them changed or removed breaks the log.
/// Gates opened before the seal are not vouched for: nothing can tell one the program opened
/// from one inserted the moment before, so their decisions stay unattested.
fn genesis(tx: &mut dyn Tx, run_id: &str, now: &str, started_by: Option<&str>) -> Result<AuditRow> {
    let before: Vec<String> = tx
        .unsealed_audit()?
        .iter()
        .map(super::chain::pre_seal_digest)
        .collect();
    let metadata = match started_by {
        Some(p) => serde_json::json!({ "before_seal": before, "started_by": p }),
        None => serde_json::json!({ "before_seal": before }),
    };
    let e = Event::system(super::dump::RUN_EVENT, run_id, super::dump::GENESIS, now);
    append_audit(tx, &e, metadata)
}

/// Seals a run that is not sealed yet (at `init`), recording who started it; nothing when it
/// is sealed.
pub fn seal_run(mut tx: Txn<'_>, now: &str, started_by: Option<&str>) -> Result<()> {
    let (seq, _) = tx.chain_head()?;
    if seq == 0 {
        let (run_id, _) = run_of(&mut *tx)?;
        genesis(&mut *tx, &run_id, now, started_by)?;
    }
    tx.commit()
}

/// Whether an audit row opens a team's gate (see `Tx::require_team_readers`).
fn is_team_opening(row: &AuditRow) -> bool {
    let Some(m) = (row.event_type == "created")
        .then_some(row.metadata.as_deref())
        .flatten()
        .and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok())
    else {
        return false;
    };
    let allow: Vec<String> = serde_json::from_value(m["allow"].clone()).unwrap_or_default();
    crate::team::Quorum::from_created(&m).is_ok_and(|q| q.is_team(&allow))
}

/// Who started the run, as its sealed genesis records it: `unknown` when it records no one
/// (a run sealed before this was recorded, or at its first sealed write) or is not sealed
/// with this machine's key.
fn starter(tx: &mut dyn Tx) -> Result<String> {
    let key = super::seal::key_for_reading()?;
    Ok(tx
        .gate_history(super::dump::RUN_EVENT)?
        .iter()
        .filter(|r| r.event_type == super::dump::GENESIS)
        .find(|r| super::chain::self_state(r, key) == super::chain::RowState::Attested)
        .and_then(|r| r.metadata.as_deref())
        .and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok())
        .and_then(|m| m["started_by"].as_str().map(str::to_string))
        .unwrap_or_else(|| "unknown".to_string()))
}

/// What a sweep did: gates timed out, escalated, and reminders announced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Swept {
    pub timed_out: usize,
    pub escalated: usize,
    pub reminders: usize,
}

impl Swept {
    pub fn total(&self) -> usize {
        self.timed_out + self.escalated + self.reminders
    }

    pub fn add(&mut self, o: Swept) {
        self.timed_out += o.timed_out;
        self.escalated += o.escalated;
        self.reminders += o.reminders;
    }
}

/// Does what is due on every pending gate, each with its sealed audit event first. Every gate
/// operation runs this first, inside its own transaction, so a gate past its deadline can never
/// be approved, whether or not anything swept it:
/// - past its deadline, a gate with an escalation its sealed log has not made is escalated
///   (`escalated`: its escalation entry joins the allow list, with a new deadline), once, and
///   only when its sealed deadline has passed; any other is marked `timeout` by `system`,
///   resolved at its deadline;
/// - each reminder due before its current deadline that its sealed log has not announced is
///   announced (`reminder`), once: what was announced is read from the sealed log, never from
///   the row's `remind_at`, which only says when to look.
pub fn sweep(tx: &mut Txn<'_>, now: &str) -> Result<Swept> {
    let due: Vec<super::GateRow> = tx
        .gate_rows(super::GateSelect::Due(now))?
        .into_iter()
        .map(super::dump::GateRecord::into_row)
        .collect();
    let mut swept = Swept::default();
    let run_id = if due.is_empty() {
        String::new()
    } else {
        run_of(&mut **tx)?.0
    };
    let passed = |t: Option<&str>| {
        t.is_some_and(|t| crate::model::seconds_between(now, t).is_none_or(|s| s <= 0))
    };
    for gate in &due {
        let (tampered, d) = disagreement(&mut **tx, gate)?;
        let sound = tampered.is_none() && d.instance == gate.instance && d.instance > 0;
        // A reader that cannot vouch for the gate's opening (its seal is another machine's,
        // or this one has no key) leaves a schedule it claims to one that can: it neither
        // times out a gate that may escalate nor drops its reminders. Tampered, it fails
        // closed as ever.
        if !sound && tampered.is_none() && claims_schedule(&mut **tx, gate)? {
            continue;
        }
        let sealed_deadline = d.timeout_at.clone().flatten();
        let mut gate = gate.clone();
        if sound && passed(sealed_deadline.as_deref()) {
            if let Some(new_deadline) = super::chain::escalation(&d) {
                let at = crate::model::canonical_time(sealed_deadline.as_deref().unwrap_or(now))
                    .unwrap_or_else(|| now.to_string());
                let allow = d.quorum.escalated_allow(&d.allow);
                append_audit(
                    &mut **tx,
                    &Event::system(&gate.id, &run_id, super::chain::ESCALATED, &at),
                    serde_json::json!({
                        "instance": gate.instance, "to": d.quorum.escalate_to,
                        "timeout_at": new_deadline, "deadline_was": sealed_deadline,
                        "swept_at": now
                    }),
                )?;
                // The new period's reminders are set by `remind` below (or the timeout ends it).
                tx.set_gate_schedule(
                    &gate.id,
                    Some((&serde_json::to_string(&allow)?, &new_deadline)),
                    None,
                )?;
                gate = load_exact(&mut **tx, &gate.id)?
                    .ok_or_else(|| anyhow!("gate vanished while it was escalated"))?;
                tx.notice(notify::Event::Escalated, &gate);
                swept.escalated += 1;
                if !passed(Some(&new_deadline)) {
                    swept.reminders += remind(tx, &gate, &d, &run_id, now, Some(&at))?;
                    continue;
                }
            }
        }
        // Acted on by the sealed deadline where its opening is sealed (a row's deadline in
        // another form, tampered, neither times it out early nor keeps it open late); by the
        // row's only where nothing sealed one (an opening from before deadlines were sealed).
        let sealed_opening = d.instance > 0 && d.instance == gate.instance;
        let deadline = match (&d.timeout_at, sealed_opening) {
            (Some(sealed), true) => sealed.clone(),
            _ => gate.timeout_at.clone(),
        };
        if passed(deadline.as_deref()) {
            let at = deadline
                .as_deref()
                .and_then(crate::model::canonical_time)
                .unwrap_or_else(|| now.to_string());
            time_out_at(tx, &gate, &run_id, now, at)?;
            swept.timed_out += 1;
        } else if sound {
            swept.reminders += remind(tx, &gate, &d, &run_id, now, None)?;
        } else if tampered.is_none() {
            // A reminder the sealed log cannot vouch for is not announced; nothing is due.
            tx.set_gate_schedule(&gate.id, None, None)?;
        }
        // Tampered and not past its sealed deadline: left as it is (every decision on it is
        // refused, every wait on it exits 9).
    }
    Ok(swept)
}

/// Whether the newest `created` event of a gate's current opening, sealed or not, asks for
/// reminders or an escalation.
fn claims_schedule(tx: &mut dyn Tx, gate: &super::GateRow) -> Result<bool> {
    Ok(tx
        .gate_history(&gate.id)?
        .iter()
        .rev()
        .filter(|r| r.event_type == "created")
        .filter_map(|r| r.metadata.as_deref())
        .filter_map(|m| serde_json::from_str::<serde_json::Value>(m).ok())
        .find(|m| m["instance"].as_i64().unwrap_or(1) == gate.instance)
        .is_some_and(|m| m.get("escalate").is_some() || m.get("remind").is_some()))
}

/// Whether a pending opening's sealed deadline has passed at `now`, with nothing left to
/// escalate to: "too late" is decided by the sealed deadline alone, whatever the row says.
fn sealed_deadline_passed(d: &super::chain::Derived, now: &str) -> bool {
    let Some(Some(deadline)) = &d.timeout_at else {
        return false;
    };
    d.decision.is_none()
        && super::chain::escalation(d).is_none()
        && crate::model::seconds_between(now, deadline).is_none_or(|s| s <= 0)
}

/// Marks a gate past its deadline `timeout`. The deadline `at` is when it timed out (the
/// sealed one; one that does not parse: now), and both the gate's `resolved_at` and its
/// `timeout` event say so; when the sweep saw it is `swept_at` in the event's metadata.
fn time_out_at(
    tx: &mut Txn<'_>,
    gate: &super::GateRow,
    run_id: &str,
    now: &str,
    at: String,
) -> Result<()> {
    append_audit(
        &mut **tx,
        &Event::system(&gate.id, run_id, "timeout", &at),
        serde_json::json!({
            "timeout_at": gate.timeout_at, "on_reject": gate.on_reject, "swept_at": now,
            "instance": gate.instance
        }),
    )?;
    tx.resolve_gate(&gate.id, &GateStatus::Timeout, "system", None, &at)?;
    let mut timed_out = gate.clone();
    timed_out.status = GateStatus::Timeout;
    timed_out.resolved_at = Some(at);
    timed_out.resolved_by = Some("system".into());
    timed_out.resolution_comment = None;
    tx.notice(notify::Event::TimedOut, &timed_out);
    Ok(())
}

/// Where the gate's current period begins: reminders count before the deadline of the period
/// they are in, from the gate's opening or from its escalation.
fn period_start(gate: &super::GateRow, d: &super::chain::Derived, deadline: &str) -> String {
    if d.escalated {
        let after = d.quorum.escalate_after.unwrap_or_default();
        crate::model::Timestamp::parse_lenient(deadline)
            .map(|t| t.plus_seconds(-after).to_string())
            .unwrap_or_default()
    } else {
        gate.created_at.clone().unwrap_or_default()
    }
}

/// When a pending gate's next reminder is due, as its sealed log and schedule say.
pub fn next_reminder_of(
    gate: &super::GateRow,
    d: &super::chain::Derived,
    now: &str,
) -> Option<String> {
    let deadline = gate
        .timeout_at
        .as_deref()
        .and_then(crate::model::canonical_time)?;
    let start = period_start(gate, d, &deadline);
    gate.status
        .is_pending()
        .then(|| crate::team::next_reminder(&d.quorum.remind, &deadline, &start, &d.reminded, now))
        .flatten()
}

/// Announces each reminder of a pending gate that is due and that its sealed log has not
/// announced, then sets when the next one is due. `escalated_at`: the escalation this sweep
/// just made (its deadline is the period's start). How many it announced.
fn remind(
    tx: &mut Txn<'_>,
    gate: &super::GateRow,
    d: &super::chain::Derived,
    run_id: &str,
    now: &str,
    escalated_at: Option<&str>,
) -> Result<usize> {
    let Some(deadline) = gate
        .timeout_at
        .as_deref()
        .and_then(crate::model::canonical_time)
    else {
        tx.set_gate_schedule(&gate.id, None, None)?;
        return Ok(0);
    };
    let start = match escalated_at {
        Some(at) => at.to_string(),
        None => period_start(gate, d, &deadline),
    };
    let mut announced = 0;
    for (before, at) in crate::team::reminders(&d.quorum.remind, &deadline, &start) {
        if d.reminded.contains(&at) || crate::model::seconds_between(now, &at).is_none_or(|s| s > 0)
        {
            continue;
        }
        append_audit(
            &mut **tx,
            &Event::system(&gate.id, run_id, super::chain::REMINDER, now),
            serde_json::json!({
                "instance": gate.instance, "at": at, "before": before,
                "timeout_at": deadline
            }),
        )?;
        tx.notice(notify::Event::Reminder, gate);
        announced += 1;
    }
    let next = crate::team::next_reminder(&d.quorum.remind, &deadline, &start, &d.reminded, now);
    tx.set_gate_schedule(&gate.id, None, next.as_deref())?;
    Ok(announced)
}

/// Upserts a binding. A `const` is not rebound in its scope. `publish` puts the attachment
/// file in place after the checks and before the row is written, so no committed row ever
/// points at a file that is missing or partial.
pub fn bind(
    mut tx: Txn<'_>,
    b: &NewBinding,
    publish: &mut dyn FnMut() -> Result<()>,
) -> Result<BindOutcome> {
    ensure_open(&mut *tx)?;
    let existing = tx.binding_head(b.name, b.execution_id)?;
    // Compare-and-set on the binding's own version, as `history` numbers it (0: no binding of
    // the name in this scope). Versions are never renumbered (pruning keeps the newest), so
    // a version once read is never seen again after a write.
    if let Some(want) = b.if_version {
        let have = match &existing {
            None => Some(0),
            Some(_) => tx.binding_own_version(b.name, b.execution_id)?,
        };
        match have {
            Some(have) if have == want => {}
            Some(have) => {
                return Err(refused(format!(
                    "binding {} is at version {have}, not {want}: it changed since it was read (read it again, then retry)",
                    shown(b.name)
                )))
            }
            None => {
                return Err(refused(format!(
                    "binding {} has no version in its history (written while its history was not kept: `prose-state doctor --fix` starts it again), so it is not at version {want}",
                    shown(b.name)
                )))
            }
        }
    }
    if let Some((Some(kind), attached, _)) = &existing {
        // The same const bound again with the same value (a block's arguments bound again
        // after a crash) changes nothing: it is that binding, as it is.
        if kind == "const"
            && b.update.is_none()
            && attached.is_none()
            && b.attachment_path.is_none()
        {
            let current = tx.binding_value(b.name, b.execution_id)?;
            if current.as_deref() == Some(b.value) && b.kind == "const" {
                return Ok(BindOutcome {
                    released: Vec::new(),
                    written: current,
                    version: tx.binding_own_version(b.name, b.execution_id)?,
                });
            }
        }
        if kind == "const" {
            let scope = match b.execution_id {
                Some(id) => format!("execution {id}"),
                None => "the root scope".to_string(),
            };
            return Err(refused(format!(
                "binding is const in {scope} and cannot be rebound: {}",
                shown(b.name)
            )));
        }
    }
    // A keyed update already applied (a step run again after a crash) is not applied twice.
    if let (Some(key), Some(_), Some(_)) = (b.key, b.update, &existing) {
        let kept = tx.kept_versions(super::history::Kept::Bindings, b.name, b.execution_id)?;
        let carries = |r: &super::history::HistoryRow| {
            r.delta
                .as_deref()
                .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
                .is_some_and(|d| d.get("key").and_then(|k| k.as_str()) == Some(key))
        };
        if kept.iter().any(carries) {
            let current = tx.binding_value(b.name, b.execution_id)?;
            return Ok(BindOutcome {
                released: Vec::new(),
                written: current,
                version: tx.binding_own_version(b.name, b.execution_id)?,
            });
        }
    }
    let mut delta = None;
    let (computed, kind) = match b.update {
        Some(update) => {
            if existing.as_ref().is_some_and(|h| h.1.is_some()) {
                return Err(refused(format!(
                    "binding {} holds an attachment: --append and --merge work on JSON values kept inline",
                    shown(b.name)
                )));
            }
            let current = tx.binding_value(b.name, b.execution_id)?;
            let value = super::history::apply_update(update, current.as_deref(), b.name)?;
            // History keeps the step, not the whole value again (which would grow with the
            // square of the steps), after a version it applies to.
            let mut step = match update {
                super::Update::Append(item) => serde_json::json!({ "append": item }),
                super::Update::Merge(patch) => serde_json::json!({ "merge": patch }),
            };
            if let Some(key) = b.key {
                step["key"] = serde_json::Value::from(key);
                // The key is kept with the step: a binding made by a keyed update starts as
                // its empty value (a version of its own), so that the first step is one too.
                if existing.is_none() {
                    let empty = match update {
                        super::Update::Append(_) => "[]",
                        super::Update::Merge(_) => "{}",
                    };
                    let first = BindingRecord {
                        name: Some(b.name.to_string()),
                        execution_id: b.execution_id,
                        kind: Some(b.kind.to_string()),
                        value: Some(empty.as_bytes().to_vec()),
                        source_statement: b.source_statement.map(str::to_string),
                        created_at: Some(b.now.to_string()),
                        updated_at: Some(b.now.to_string()),
                        attachment_path: None,
                    };
                    tx.put_binding(&first, Some(b.principal), None)?;
                }
                delta = Some(step);
            } else {
                delta = existing.as_ref().map(|_| step);
            }
            // An update keeps the binding's kind.
            let kind = existing.as_ref().and_then(|h| h.0.clone());
            (Some(value), kind)
        }
        None => (None, None),
    };
    let written = NewBinding {
        value: computed.as_deref().unwrap_or(b.value),
        kind: kind.as_deref().unwrap_or(b.kind),
        ..*b
    };
    publish()?;
    let record = BindingRecord {
        name: Some(written.name.to_string()),
        execution_id: written.execution_id,
        kind: Some(written.kind.to_string()),
        value: Some(written.value.as_bytes().to_vec()),
        source_statement: written.source_statement.map(str::to_string),
        created_at: Some(written.now.to_string()),
        updated_at: Some(written.now.to_string()),
        attachment_path: written.attachment_path.map(str::to_string),
    };
    let delta = delta.map(|d| d.to_string());
    let version = tx.put_binding(&record, Some(b.principal), delta.as_deref())?;
    // The run's bound on versions kept (the project's default at `init`): once a binding
    // holds twice as many, the older ones go in this write's transaction, so that the bound
    // costs a cut now and then, not one at every write.
    let mut released = Vec::new();
    if let Some(keep) = tx.history_keep()?.filter(|k| *k > 0) {
        let kind = super::history::Kept::Bindings;
        if tx.versions_kept(kind, b.name, b.execution_id)? > 2 * keep {
            let rows = tx.kept_versions(kind, b.name, b.execution_id)?;
            let gone = cut_to(&mut *tx, kind, b.name, b.execution_id, &rows, keep as usize)?;
            released.extend(gone.iter().filter_map(|r| r.attachment_path.clone()));
        }
    }
    tx.commit()?;
    let replaced_attachment = existing
        .and_then(|(_, old, _)| old)
        .filter(|old| Some(old.as_str()) != b.attachment_path);
    released.extend(replaced_attachment);
    released.sort();
    released.dedup();
    Ok(BindOutcome {
        released,
        written: computed,
        // The binding's own new version, for a caller that will compare-and-set again: every
        // bind reports it (`bind --json` shows it, `history` lists it).
        version: Some(version),
    })
}

/// Runs `remove` if no binding references the attachment any more, in a serialised
/// transaction, so a concurrent bind cannot take the file up while it goes.
pub fn release_attachment(
    mut tx: Txn<'_>,
    attachment_path: &str,
    remove: &mut dyn FnMut() -> Result<()>,
) -> Result<bool> {
    let referenced = tx.attachment_referenced(attachment_path)?;
    let released = !referenced
        && match super::server_blob(attachment_path) {
            // Kept in the store: its chunks go in this transaction, unless an upload still
            // holds it (a writer that has not linked it yet).
            Some(blob) => tx.delete_blob(blob)?,
            None => {
                remove()?;
                true
            }
        };
    tx.commit()?;
    Ok(released)
}

/// Cuts one binding's (or agent's) kept versions `rows` to its newest `keep`: the oldest kept
/// made whole (a step rebuilt into its value) and marked as having older versions not kept.
/// The versions that went (none when it holds no more than `keep`).
fn cut_to<'r>(
    tx: &mut dyn Tx,
    kept: super::history::Kept,
    name: &str,
    scope: Option<i64>,
    rows: &'r [super::history::HistoryRow],
    keep: usize,
) -> Result<&'r [super::history::HistoryRow]> {
    let cut = rows.len().saturating_sub(keep);
    if cut == 0 {
        return Ok(&[]);
    }
    let whole = match rows[cut].delta {
        Some(_) => Some(super::history::value_at(rows, cut)?),
        None => None,
    };
    tx.cut_history(
        kept,
        name,
        scope,
        rows[cut].n,
        whole.as_ref().map(|v| v.as_deref()),
    )?;
    Ok(&rows[..cut])
}

/// What pruning a run's binding history did (or, in a dry run, would do).
#[derive(Debug, Default, serde::Serialize)]
pub struct HistoryPruned {
    /// Versions deleted.
    pub versions: usize,
    /// Bindings that lost versions.
    pub bindings: usize,
    /// The bytes of the values kept in rows that went.
    pub bytes: u64,
    /// Values kept outside the rows that only the deleted versions named: released after the
    /// commit, unless something names them again by then.
    #[serde(skip)]
    pub released: Vec<String>,
}

/// Keeps the newest `keep` versions of each binding of the run (at least 1: the current one)
/// and deletes the older ones, in one transaction. The oldest version kept becomes whole (a
/// step is rebuilt into its value) and is marked as having versions before it that are not
/// kept, so that a read of a time before it says so instead of finding nothing. A finished
/// run is pruned too: this is upkeep, not a write of its state. Without `apply`, nothing is
/// written.
pub fn prune_history(mut tx: Txn<'_>, keep: i64, apply: bool) -> Result<HistoryPruned> {
    use super::history::Kept;
    let mut out = HistoryPruned::default();
    let over = [Kept::Bindings, Kept::Agents]
        .into_iter()
        .map(|k| {
            Ok(tx
                .history_over(k, keep.max(1))?
                .into_iter()
                .map(move |b| (k, b)))
        })
        .collect::<Result<Vec<_>>>()?;
    for (kept, (name, scope)) in over.into_iter().flatten() {
        let rows = tx.kept_versions(kept, &name, scope)?;
        let gone = cut_to(&mut *tx, kept, &name, scope, &rows, keep.max(1) as usize)?;
        if gone.is_empty() {
            continue;
        }
        out.bindings += 1;
        out.versions += gone.len();
        out.bytes += gone
            .iter()
            .map(|r| r.value.as_ref().map_or(0, Vec::len) + r.delta.as_ref().map_or(0, String::len))
            .sum::<usize>() as u64;
        out.released
            .extend(gone.iter().filter_map(|r| r.attachment_path.clone()));
    }
    out.released.sort();
    out.released.dedup();
    // Only those nothing names any more (the current value or a version kept may share one).
    let mut released = Vec::new();
    for rel in std::mem::take(&mut out.released) {
        if !tx.attachment_referenced(&rel)? {
            released.push(rel);
        }
    }
    out.released = released;
    if apply {
        tx.commit()?;
    }
    Ok(out)
}

/// Moves a binding's value to where it is now kept (`doctor --fix` uploading a local
/// attachment file to the server): the row of (name, scope) is pointed at `new` only if it
/// still points at `old`, so a rebind that came first is never undone. The value is the same
/// bytes, so a finished run takes this too.
pub fn relink(
    mut tx: Txn<'_>,
    name: &str,
    execution_id: Option<i64>,
    old: &str,
    new: &str,
) -> Result<bool> {
    let moved = match tx.binding_head(name, execution_id)? {
        Some((_, Some(path), _)) if path == old => {
            tx.set_attachment_path(name, execution_id, new)?;
            tx.relink_history(old, new)?;
            true
        }
        _ => false,
    };
    tx.commit()?;
    Ok(moved)
}

/// Appends one execution record and returns its id. With an idempotency key, a retry of the
/// same record returns the first one's id and appends nothing; the key on another record is
/// refused.
pub fn append_execution(mut tx: Txn<'_>, rec: &NewExecution) -> Result<i64> {
    ensure_open(&mut *tx)?;
    if let Some(parent) = rec.parent_id {
        if !tx.execution_exists(parent)? {
            return Err(not_found(format!("parent execution not found: {parent}")));
        }
    }
    if let Some(key) = rec.idempotency_key {
        if let Some(existing) = tx.keyed_execution(key)? {
            return keyed_retry(key, existing, rec);
        }
    }
    let id = match tx.put_execution(None, &exec_record(rec))? {
        Some(id) => id,
        // Another writer took the key between the look and the insert.
        None => {
            let key = rec.idempotency_key.unwrap_or_default();
            let existing = tx
                .keyed_execution(key)?
                .ok_or_else(|| anyhow!("execution record was not appended"))?;
            return keyed_retry(key, existing, rec);
        }
    };
    tx.commit()?;
    Ok(id)
}

/// The record already appended under an idempotency key: its id when it is the same record
/// (a retry), a refusal when the key was used for another.
fn keyed_retry(key: &str, existing: super::tx::KeyedExecution, rec: &NewExecution) -> Result<i64> {
    let (id, index, text, status, parent) = existing;
    if index == rec.statement_index
        && text.as_deref() == Some(rec.statement_text)
        && status.as_deref() == Some(rec.status)
        && parent == rec.parent_id
    {
        Ok(id)
    } else {
        Err(refused(format!(
            "--key was already used for another record (execution {id}): {}",
            shown(key)
        )))
    }
}

/// The row a live append writes (the store gives it its id).
fn exec_record(rec: &NewExecution) -> ExecRecord {
    let text = |t: Option<&str>| t.map(str::to_string);
    ExecRecord {
        id: 0,
        statement_index: rec.statement_index,
        statement_text: Some(rec.statement_text.to_string()),
        status: Some(rec.status.to_string()),
        started_at: text(rec.started_at),
        completed_at: text(rec.completed_at),
        error_message: text(rec.error_message),
        parent_id: rec.parent_id,
        metadata: text(rec.metadata),
        idempotency_key: text(rec.idempotency_key),
        principal: Some(rec.principal.to_string()),
    }
}

/// Creates a gate, with its `approve GATE:` execution record and its `created` audit event.
/// The same call again on a pending gate is a safe retry; any other use of the id conflicts.
pub fn create_gate(mut tx: Txn<'_>, g: &NewGate) -> Result<Created> {
    sweep(&mut tx, g.now)?;
    ensure_open(&mut *tx)?;
    // An existing gate is a safe retry or a conflict, unless it is decided and asked to
    // open again: then this is its next instance.
    let existing = load_exact(&mut *tx, g.id)?;
    if let Some(existing) = &existing {
        let (tampered, derived) = disagreement(&mut *tx, existing)?;
        // Opened again only when its sealed log says its opening was decided: a row set to
        // "decided" by SQL reopens nothing (the new opening could name anyone it likes).
        if let (Some(why), true) = (&tampered, g.reopen) {
            return Err(crate::error::tampered(format!(
                "gate {} disagrees with its sealed log ({why}): it is not opened again",
                shown(g.id)
            )));
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

/// One gate with its audit history, logging a `viewed` event by `viewer`.
pub fn view_gate(
    mut tx: Txn<'_>,
    id: &str,
    viewer: Option<&str>,
    client: &str,
    now: &str,
) -> Result<Option<(super::GateRow, Vec<AuditRow>)>> {
    sweep(&mut tx, now)?;
    let Some(gate) = load_exact(&mut *tx, id)? else {
        tx.commit()?;
        return Ok(None);
    };
    let run_id = run_of(&mut *tx)?.0;
    append_audit(
        &mut *tx,
        &Event::system(id, &run_id, "viewed", now).by(viewer, None),
        serde_json::json!({"client": client}),
    )?;
    let history = tx.gate_history(id)?;
    tx.commit()?;
    Ok(Some((gate, history)))
}

/// Records a decision refused before it reached the gate (a token that is not valid, a
/// signature the project requires, a web form without its CSRF token): a `refused` event on
/// the gate, like the refusals `decide_gate` makes. Whether it was recorded: not when the
/// gate does not exist, or the run is finished (it takes no more writes).
pub fn refuse_attempt(mut tx: Txn<'_>, a: &super::Attempt) -> Result<bool> {
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
pub fn decide_gate(mut tx: Txn<'_>, d: &Decision) -> Result<Decided> {
    sweep(&mut tx, d.now)?;
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
    if tampered.is_none() && gate.status.is_pending() && sealed_deadline_passed(&derived, d.now) {
        let deadline = derived.timeout_at.clone().flatten().unwrap_or_default();
        let at = crate::model::canonical_time(&deadline).unwrap_or_else(|| d.now.to_string());
        time_out_at(&mut tx, &gate, &run_id, d.now, at)?;
        gate = load_exact(&mut *tx, d.gate_id)?
            .ok_or_else(|| anyhow!("gate vanished while it timed out"))?;
        (tampered, derived) = disagreement(&mut *tx, &gate)?;
    }
    let q = &derived.quorum;
    let empty = crate::team::Roster::default();
    let roster = match d.roster {
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
    let refused = refusal(&gate, d, tampered, claim || !via.is_empty())
        .or_else(|| team_refusal(&gate, d, &derived));
    if let Some((outcome, reason)) = refused {
        let mut metadata = refused_metadata(d.client, &gate, d.authenticated, d.approve, &reason);
        metadata["prompt_hash"] = d.prompt_hash.into();
        let e = Event::system(d.gate_id, &run_id, "refused", d.now);
        append_audit(
            &mut *tx,
            &e.by(Some(d.principal.as_str()), d.comment),
            metadata,
        )?;
        tx.commit()?;
        return Ok(outcome);
    }
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
    let me = d.principal.as_str();
    let counted = |gate, tally, already| Decided::Counted {
        gate,
        quorum: q.clone(),
        tally,
        already,
    };
    // The same principal voting again counts once, and writes nothing.
    if derived.tally.votes(d.approve).iter().any(|p| p == me) {
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
        (false, true) => super::chain::VOTE_APPROVE,
        (false, false) => super::chain::VOTE_REJECT,
    };
    let mut metadata = decision_metadata(&gate, d, kind, inputs);
    if let (Some(_), Some(pins)) = (inputs, d.pins) {
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
    let e = Event::system(d.gate_id, &run_id, kind, d.now);
    append_audit(&mut *tx, &e.by(Some(me), d.comment), metadata)?;
    if !resolves {
        tx.commit()?;
        return Ok(counted(gate, tally, false));
    }
    tx.resolve_gate(d.gate_id, &status, me, d.comment, d.now)?;
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

/// Why a decision may not be taken on this gate (its row contradicts its sealed events, it is
/// decided already or timed out, it was reopened or its prompt changed since it was shown,
/// the principal is not allowed): what the caller is told, and the reason its `refused` event
/// records. None when it may.
fn refusal(
    gate: &super::GateRow,
    d: &Decision,
    tampered: Option<String>,
    admitted: bool,
) -> Option<(Decided, String)> {
    let g = gate.clone();
    Some(if let Some(t) = tampered {
        let reason = format!("the gate disagrees with its sealed log: {t}");
        (Decided::Tampered(g, reason.clone()), reason)
    } else if !gate.status.is_pending() {
        (
            Decided::AlreadyResolved(g),
            format!("already {}", gate.status),
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
fn client_metadata(client: &str, gate: &super::GateRow, authenticated: bool) -> serde_json::Value {
    let mut metadata = serde_json::json!({ "client": client, "instance": gate.instance });
    if authenticated {
        metadata["authenticated"] = "token".into();
    }
    metadata
}

/// The metadata of a `refused` event: what was attempted, and why it was refused.
fn refused_metadata(
    client: &str,
    gate: &super::GateRow,
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
    gate: &super::GateRow,
    d: &Decision,
    kind: &str,
    inputs: Option<&std::collections::BTreeMap<String, Option<String>>>,
) -> serde_json::Value {
    let mut metadata = client_metadata(d.client, gate, d.authenticated);
    metadata["prompt_hash"] = d.prompt_hash.into();
    let inputs_digest = inputs.map(super::signatures::inputs_digest);
    if let Some(map) = inputs {
        metadata["inputs"] = serde_json::to_value(map).unwrap_or_default();
    }
    if d.approve {
        if let Some(s) = gate
            .created_at
            .as_deref()
            .and_then(|c| crate::model::seconds_between(c, d.now))
        {
            metadata["approval_time_seconds"] = s.into();
        }
    } else {
        metadata["on_reject"] = gate.on_reject.clone().into();
    }
    if let Some(signer) = d.signer {
        metadata["signature"] = signer.sign(&super::signatures::Signed {
            run: gate.run_id.as_deref().unwrap_or_default(),
            gate: &gate.id,
            instance: gate.instance,
            prompt_hash: d.prompt_hash,
            decision: kind,
            principal: d.principal.as_str(),
            time: d.now,
            inputs: inputs_digest.as_deref(),
            place: None,
        });
    }
    metadata
}

/// Why a team's rules refuse this decision (after the rules every gate has): a claim where
/// only authenticated decisions count, an approval by the run's starter or the gate's
/// creator under separation of duties, a vote changed without a veto.
fn team_refusal(
    gate: &super::GateRow,
    d: &Decision,
    derived: &super::chain::Derived,
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
    gate: &super::GateRow,
    derived: &super::chain::Derived,
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
    gate: &super::GateRow,
    derived: &super::chain::Derived,
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

/// Sets the run's final status. A `completed` or `failed` run is closed and keeps its status;
/// completing a run with a pending gate is refused. Overdue gates are swept first.
pub fn finish(
    mut tx: Txn<'_>,
    status: &RunStatus,
    error: Option<&str>,
    now: &str,
) -> Result<Finished> {
    let swept = sweep(&mut tx, now)?;
    let (id, current) = run_of(&mut *tx)?;
    let current = current.unwrap_or(RunStatus::Running);
    if current.is_finished() {
        if current == *status {
            // Nothing written (a sweep of a finished run is not kept); the commit only moves
            // the anchor, as every gate operation's does.
            if swept.total() == 0 {
                tx.commit()?;
            }
            return Ok(Finished::Unchanged);
        }
        return Err(refused(format!(
            "run {id} is already {current}; a finished run keeps its status"
        )));
    }
    if *status == RunStatus::Completed {
        let pending: Vec<String> = tx
            .gate_rows(super::GateSelect::Listed(Some(&GateStatus::Pending)))?
            .into_iter()
            .map(|g| g.id)
            .collect();
        if !pending.is_empty() {
            return Err(refused(format!(
                "run {id} has pending gates ({}); decide them first, or finish as failed or interrupted",
                pending.join(", ")
            )));
        }
    }
    tx.set_run_status(status, error, now)?;
    tx.commit()?;
    Ok(Finished::Done {
        previous_status: current,
    })
}

/// Registers an import. The same alias with the same source and schemas is a no-op; a
/// different one needs `replace`.
pub fn add_import(mut tx: Txn<'_>, import: &ImportRow, replace: bool) -> Result<ImportAdded> {
    ensure_open(&mut *tx)?;
    // Schemas are compared as JSON values: a backend may store them normalised.
    let same_json = |a: &Option<String>, b: &Option<String>| {
        let parse = |t: &Option<String>| {
            t.as_deref()
                .map(|t| serde_json::from_str::<serde_json::Value>(t).ok())
        };
        parse(a) == parse(b)
    };
    let outcome = match tx.import(&import.alias)? {
        Some(e)
            if e.source_url == import.source_url
                && same_json(&e.inputs_schema, &import.inputs_schema)
                && same_json(&e.outputs_schema, &import.outputs_schema) =>
        {
            return Ok(ImportAdded::Unchanged(e));
        }
        Some(e) if !replace => return Ok(ImportAdded::Conflict(e)),
        Some(_) => ImportAdded::Replaced(import.clone()),
        None => ImportAdded::Added(import.clone()),
    };
    tx.put_import(import)?;
    tx.commit()?;
    Ok(outcome)
}

/// Replaces an agent's memory, creating the agent if needed.
pub fn remember(mut tx: Txn<'_>, name: &str, scope: &str, memory: &str, now: &str) -> Result<()> {
    ensure_open(&mut *tx)?;
    tx.put_agent(&AgentRecord {
        name: name.to_string(),
        scope: Some(scope.to_string()),
        memory: Some(memory.to_string()),
        created_at: Some(now.to_string()),
        updated_at: Some(now.to_string()),
    })?;
    tx.commit()
}

/// Appends a segment and returns its number: 1, 2, ... with no gap and no duplicate however
/// many processes append at once (the number is read and used under the agent's lock).
pub fn append_segment(
    mut tx: Txn<'_>,
    name: &str,
    scope: &str,
    prompt: &str,
    summary: &str,
    now: &str,
) -> Result<i64> {
    ensure_open(&mut *tx)?;
    tx.touch_agent(name, scope, now)?;
    let n = tx.next_segment_number(name)?;
    tx.put_segment(&SegmentRecord {
        agent_name: Some(name.to_string()),
        segment_number: Some(n),
        timestamp: Some(now.to_string()),
        prompt: Some(prompt.to_string()),
        summary: Some(summary.to_string()),
        // A run's store records the newest record itself (a trigger).
        at_record: None,
    })?;
    tx.commit()?;
    Ok(n)
}

/// Records a resume: a `resumed` audit event for each gate that is pending or was decided
/// since the last resume, and an `interrupted` run set back to `running`. A finished run is
/// only read.
pub fn record_resume(mut tx: Txn<'_>, now: &str) -> Result<Resumed> {
    let (run_id, status) = run_of(&mut *tx)?;
    let status = status.unwrap_or(RunStatus::Running);
    if status.is_finished() {
        // Nothing written: the commit only moves the anchor.
        tx.commit()?;
        return Ok(Resumed {
            previous_status: status.clone(),
            status,
            gates_logged: Vec::new(),
        });
    }
    sweep(&mut tx, now)?;
    let mut logged = Vec::new();
    for g in tx.gate_rows(super::GateSelect::Listed(None))? {
        // The audit ids of its last `resumed` event and of its last decision.
        let newest = |history: &[AuditRow], kinds: &[&str]| {
            let of_kind = history
                .iter()
                .filter(|a| kinds.contains(&a.event_type.as_str()));
            of_kind.map(|a| a.id).max().unwrap_or(0)
        };
        let history = tx.gate_history(&g.id)?;
        let decided_since =
            newest(&history, &["approved", "rejected", "timeout"]) > newest(&history, &["resumed"]);
        let status = g.status.unwrap_or_else(|| GateStatus::parse(""));
        if status.is_pending() || decided_since {
            append_audit(
                &mut *tx,
                &Event::system(&g.id, &run_id, "resumed", now),
                serde_json::json!({
                    "resume_source": "cli", "previous_status": status.as_str()
                }),
            )?;
            logged.push(g.id);
        }
    }
    let new_status = if status == RunStatus::Interrupted {
        tx.set_run_status(&RunStatus::Running, None, now)?;
        RunStatus::Running
    } else {
        status.clone()
    };
    tx.commit()?;
    Ok(Resumed {
        previous_status: status,
        status: new_status,
        gates_logged: logged,
    })
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
    inputs: &[super::InputAt],
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
        &Event::system(gate_id, &run_id, super::chain::CONSUMED, now),
        serde_json::json!({"instance": instance, "decision": decision}),
    )?;
    tx.commit()?;
    Ok(true)
}

/// The transaction kind each rule needs, named once.
pub const BIND: TxKind = TxKind::Write;
pub const BIND_CHECKED: TxKind = TxKind::Serial;
pub const EXECUTION: TxKind = TxKind::Write;
pub const GATE: TxKind = TxKind::Serial;
pub const FINISH: TxKind = TxKind::Serial;
pub const RELEASE: TxKind = TxKind::Serial;
pub const IMPORT: TxKind = TxKind::Write;
pub const AGENT: TxKind = TxKind::Write;
pub const RESUME: TxKind = TxKind::Serial;

/// A copy of a run to write into a store (`import`, and `export`'s new file).
pub struct Restore<'a> {
    pub dump: &'a super::dump::RunDump,
    /// The path each attachment has in the destination, by its path in the source.
    pub paths: &'a std::collections::HashMap<String, String>,
    /// The destination was made for this copy (a new file holding only the run's row).
    pub fresh: bool,
    /// Replace a different run under the same id: its rows and values go first (its audit
    /// log, append-only, stays, and must agree with the copy's).
    pub replace: bool,
    /// Seal every chained row again with this machine's key (an import); else the rows keep
    /// their seals (an export is a copy, as it was).
    pub reseal: bool,
    /// The `imported` event to append: who imported, and its metadata. None for an export.
    pub event: Option<(Option<&'a str>, serde_json::Value)>,
    pub now: &'a str,
}

/// Writes a whole run in one transaction: the run's row, its log (renumbered where the store
/// numbers ids itself, every reference moved with it), bindings pointed at their values' new
/// places, gates, agents, imports, and the audit chain with its sequence and hashes as they
/// were (resealed on import), then the `imported` event chained after it. Nothing is written
/// if any of it is refused.
pub fn restore(mut tx: Txn<'_>, r: &Restore) -> Result<()> {
    use super::dump::{IMPORTED, RUN_EVENT};
    use std::collections::HashMap;
    let d = r.dump;
    let run_id = d.run.id.as_str();
    d.check_keys()?;
    if !r.fresh && tx.run_row()?.is_some() {
        if !r.replace {
            return Err(refused(format!(
                "run {} already exists here with other content: import --replace to replace it",
                shown(run_id)
            )));
        }
        tx.clear_run()?;
    }
    tx.put_run(&d.run)?;
    let keep = tx.keeps_ids();
    let mut ids: HashMap<i64, i64> = HashMap::new();
    let moved = |ids: &HashMap<i64, i64>, id: Option<i64>, what: &dyn Fn() -> String| {
        match id {
        None => Ok(None),
        Some(id) if keep => Ok(Some(id)),
        Some(id) => ids.get(&id).copied().map(Some).ok_or_else(|| {
            refused(format!(
                "{} names execution {id}, which the run's log does not have before it; nothing was imported",
                what()
            ))
        }),
    }
    };
    for e in &d.executions {
        let mut e2 = e.clone();
        e2.parent_id = moved(&ids, e.parent_id, &|| format!("execution {}", e.id))?;
        let id = tx
            .put_execution(keep.then_some(e.id), &e2)?
            .ok_or_else(|| {
                anyhow!(
                "execution {}: its idempotency key is another record's too; nothing was imported",
                e.id
            )
            })?;
        ids.insert(e.id, id);
    }
    for b in &d.bindings {
        let mut b2 = b.clone();
        let name = || format!("binding {}", shown(b.name.as_deref().unwrap_or_default()));
        b2.execution_id = moved(&ids, b.execution_id, &name)?;
        if let Some(old) = &b.attachment_path {
            let new = r
                .paths
                .get(old)
                .ok_or_else(|| anyhow!("{}: its value was not copied", name()))?;
            // The summary names where the value is kept: it names the new place.
            b2.value = b.value.as_deref().map(|v| {
                String::from_utf8_lossy(v)
                    .replace(old.as_str(), new)
                    .into_bytes()
            });
            b2.attachment_path = Some(new.clone());
        }
        tx.put_binding(&b2, None, None)?;
    }
    // Every version as the copy kept it (the bindings' writes above made their own); a copy
    // that carries none (made before history was kept) starts each binding's here.
    use super::history::Kept;
    if d.history.is_empty() {
        tx.mark_history_gap(Kept::Bindings)?;
    } else {
        tx.clear_history(Kept::Bindings)?;
        for h in &d.history {
            let mut h2 = h.clone();
            let name = || format!("a version of binding {}", shown(&h.name));
            h2.execution_id = moved(&ids, h.execution_id, &name)?;
            h2.at_record = moved(&ids, h.at_record, &name)?;
            if let Some(old) = &h.attachment_path {
                let new = r
                    .paths
                    .get(old)
                    .ok_or_else(|| anyhow!("{}: its value was not copied", name()))?;
                h2.value = h.value.as_deref().map(|v| {
                    String::from_utf8_lossy(v)
                        .replace(old.as_str(), new)
                        .into_bytes()
                });
                h2.attachment_path = Some(new.clone());
            }
            tx.put_history(Kept::Bindings, &h2)?;
        }
    }
    for (gates, instance) in [(&d.gates, false), (&d.gate_instances, true)] {
        for g in gates {
            let mut g2 = g.clone();
            g2.run_id = Some(run_id.to_string());
            g2.execution_id = moved(&ids, g.execution_id, &|| format!("gate {}", shown(&g.id)))?;
            tx.put_gate(&g2, instance)?;
        }
    }
    for a in &d.agents {
        tx.put_agent(a)?;
    }
    if d.agent_history.is_empty() {
        tx.mark_history_gap(Kept::Agents)?;
    } else {
        tx.clear_history(Kept::Agents)?;
        for h in &d.agent_history {
            let mut h2 = h.clone();
            h2.at_record = moved(&ids, h.at_record, &|| {
                format!("a version of agent {}", shown(&h.name))
            })?;
            tx.put_history(Kept::Agents, &h2)?;
        }
    }
    for s in &d.segments {
        let mut s2 = s.clone();
        s2.at_record = moved(&ids, s.at_record, &|| "an agent segment".to_string())?;
        tx.put_segment(&s2)?;
    }
    for i in &d.imports {
        tx.put_import(i)?;
    }
    let key = r.reseal.then(super::seal::key_for_writing).transpose()?;
    for row in &d.audit {
        if !keep && row.seq.is_none() && row.hash.is_some() {
            return Err(refused(format!(
                "the audit log of run {} has rows from before prose-state schema 5, whose hashes cover their row ids, which this store numbers itself; import it into SQLite instead (nothing was imported)",
                shown(run_id)
            )));
        }
        if let Some(seq) = row.seq {
            // The server's log is append-only: a run pruned there and brought back finds its
            // events still in place, the same ones; another run's are refused.
            match tx.audit_at_seq(seq)? {
                Some(hash) if hash == row.hash => continue,
                Some(_) => {
                    return Err(refused(format!(
                        "the audit log here already holds a different event at seq {seq} of run {} (it is append-only, so a run with another history cannot take this id); nothing was imported",
                        shown(run_id)
                    )))
                }
                None => {}
            }
        }
        let mut row2 = row.clone();
        if is_team_opening(row) {
            tx.require_team_readers()?;
        }
        row2.id = if keep { row.id } else { tx.next_audit_id()? };
        if let (Some(k), Some(hash), Some(_)) = (&key, &row.hash, row.seq) {
            row2.seal = Some(k.seal(hash));
        }
        tx.insert_audit(&row2)?;
    }
    // A copy carries no `remind_at` (only when to look): each pending gate's next reminder is
    // read again from its sealed log, as it stands here.
    for g in d
        .gates
        .iter()
        .filter(|g| g.status.as_ref().is_some_and(|s| s.is_pending()))
    {
        let Some(row) = load_exact(&mut *tx, &g.id)? else {
            continue;
        };
        let (tampered, derived) = disagreement(&mut *tx, &row)?;
        // The earliest not yet announced, due or not: the next reader announces a due one.
        let next = match tampered {
            None => next_reminder_of(&row, &derived, "1970-01-01 00:00:00"),
            Some(_) => None,
        };
        if next.is_some() {
            tx.set_gate_schedule(&row.id, None, next.as_deref())?;
        }
    }
    if let Some((principal, metadata)) = &r.event {
        let e = Event::system(RUN_EVENT, run_id, IMPORTED, r.now).by(*principal, None);
        append_audit(&mut *tx, &e, metadata.clone())?;
    }
    tx.commit()
}

/// Makes the schema's missing triggers again (doctor --fix) and, where a history's trigger
/// was missing, starts each binding's (or memory's) history again at a version marked as
/// following a time when writes may not have been kept: reading or forking before it is then
/// "not known", never a value history did not see.
pub fn restore_triggers(mut tx: Txn<'_>, now: &str) -> Result<Vec<String>> {
    use super::history::Kept;
    let missing = tx.missing_triggers()?;
    if missing.is_empty() {
        return Ok(missing);
    }
    tx.make_triggers(&missing)?;
    for kept in [Kept::Bindings, Kept::Agents] {
        if missing.iter().any(|t| kept.keeps_by(t)) {
            tx.resume_history(kept, now)?;
        }
    }
    tx.commit()?;
    Ok(missing)
}
