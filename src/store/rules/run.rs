//! The run as a whole: finish it, register its imports, record a resume.

use crate::error::refused;
use crate::model::{GateStatus, RunStatus};
use crate::store::tx::Txn;
use crate::store::{Finished, ImportAdded, ImportRow, Resumed};
use anyhow::Result;

use super::sweep::sweep;
use super::{append_audit, ensure_open, run_of, Event};

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
            .gate_rows(crate::store::GateSelect::Listed(Some(&GateStatus::Pending)))?
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
    // Each gate's newest `resumed` event and newest decision, by audit id: one read of the log.
    let mut newest: std::collections::HashMap<String, (i64, i64)> = Default::default();
    for a in tx.audit(&crate::store::AuditFilter::default())? {
        let (resumed, decided) = newest.entry(a.gate_id).or_default();
        match a.event_type.as_str() {
            "resumed" => *resumed = (*resumed).max(a.id),
            "approved" | "rejected" | "timeout" => *decided = (*decided).max(a.id),
            _ => {}
        }
    }
    for g in tx.gate_rows(crate::store::GateSelect::Listed(None))? {
        let (resumed, decided) = newest.get(&g.id).copied().unwrap_or_default();
        let decided_since = decided > resumed;
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
