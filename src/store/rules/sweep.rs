//! The sweep: overdue gates timed out or escalated, and reminders announced, before any
//! other gate operation.

use crate::model::GateStatus;
use crate::store::effects as notify;
use crate::store::tx::{Tx, Txn};
use anyhow::{anyhow, Result};

use super::{append_audit, disagreement, load_exact, run_of, Event};

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
    let due: Vec<crate::store::GateRow> = tx
        .gate_rows(crate::store::GateSelect::Due(now))?
        .into_iter()
        .map(crate::store::dump::GateRecord::into_row)
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
            if let Some(new_deadline) = crate::store::chain::escalation(&d) {
                let at = crate::model::canonical_time(sealed_deadline.as_deref().unwrap_or(now))
                    .unwrap_or_else(|| now.to_string());
                let allow = d.quorum.escalated_allow(&d.allow);
                append_audit(
                    &mut **tx,
                    &Event::system(&gate.id, &run_id, crate::store::chain::ESCALATED, &at),
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
        // An opening its sealed log already decided is never decided again, whatever its row
        // says (a row set back to pending behind prose-state's back): left as it is, tampered.
        let decided = sealed_opening && d.decision.is_some();
        if passed(deadline.as_deref()) && !decided {
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
fn claims_schedule(tx: &mut dyn Tx, gate: &crate::store::GateRow) -> Result<bool> {
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
pub(super) fn sealed_deadline_passed(d: &crate::store::chain::Derived, now: &str) -> bool {
    let Some(Some(deadline)) = &d.timeout_at else {
        return false;
    };
    d.decision.is_none()
        && crate::store::chain::escalation(d).is_none()
        && crate::model::seconds_between(now, deadline).is_none_or(|s| s <= 0)
}

/// Marks a gate past its deadline `timeout`. The deadline `at` is when it timed out (the
/// sealed one; one that does not parse: now), and both the gate's `resolved_at` and its
/// `timeout` event say so; when the sweep saw it is `swept_at` in the event's metadata.
pub(super) fn time_out_at(
    tx: &mut Txn<'_>,
    gate: &crate::store::GateRow,
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
fn period_start(
    gate: &crate::store::GateRow,
    d: &crate::store::chain::Derived,
    deadline: &str,
) -> String {
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
    gate: &crate::store::GateRow,
    d: &crate::store::chain::Derived,
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
    gate: &crate::store::GateRow,
    d: &crate::store::chain::Derived,
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
            &Event::system(&gate.id, run_id, crate::store::chain::REMINDER, now),
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
