//! The rules of the state, each written once, over any backend's transaction: a finished run
//! takes no more writes; a `const` stays const; overdue gates are swept first and fail
//! closed; every audit event is chained to the last; the first decision wins and every
//! refusal is logged; a retried keyed append is not appended twice.

use super::tx::{Tx, TxKind, Txn};
use super::AuditRow;
use crate::error::{refused, shown};
use crate::model::RunStatus;
use anyhow::{anyhow, Result};

mod agents;
mod bind;
mod executions;
mod gates;
mod restore;
mod run;
mod sweep;

pub use agents::{append_segment, remember};
pub use bind::{
    bind, decided_by, decision_opening_kept, narrowing_misled, prune_history, release_attachment,
    relink, HistoryPruned, OpeningNames,
};
pub use executions::append_execution;
pub use gates::{
    consume, create_gate, decide_gate, refuse_attempt, standing_tally, view_gate, INPUTS_MOVED,
};
pub use restore::{restore, restore_triggers, Restore};
pub use run::{add_import, finish, record_resume};
pub use sweep::{next_reminder_of, sweep, Swept};

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
    let (history, moves) = tx.gate_history_and_moves(&gate.id)?;
    let (integrity, derived) = super::chain::gate_against_history(
        gate,
        &run,
        &history,
        &moves,
        tx.wiring().key_for_reading()?,
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
    // A log whose last row claims the last number there is was numbered behind the tool's back.
    let next = seq.checked_add(1).ok_or_else(|| {
        crate::error::tampered(format!(
            "the run's audit log ends at seq {seq}, a number no log reaches: it was changed behind prose-state's back (run `prose-state gates verify`)"
        ))
    })?;
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
        seq: Some(next),
        seal: None,
    };
    let hash = row.chain_hash(&prev);
    row.seal = Some(tx.wiring().key_for_writing()?.seal(&hash));
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
    let key = tx.wiring().key_for_reading()?;
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
