//! Executions: appending one record, a keyed retry appending nothing.

use crate::error::{not_found, refused, shown};
use crate::store::tx::Txn;
use crate::store::ExecutionRow;
use crate::store::NewExecution;
use anyhow::{anyhow, Result};

use super::ensure_open;

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
fn keyed_retry(
    key: &str,
    existing: crate::store::tx::KeyedExecution,
    rec: &NewExecution,
) -> Result<i64> {
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
pub(super) fn exec_record(rec: &NewExecution) -> ExecutionRow {
    let text = |t: Option<&str>| t.map(str::to_string);
    ExecutionRow {
        id: 0,
        statement_index: rec.statement_index,
        statement_text: Some(rec.statement_text.to_string()),
        status: Some(crate::model::ExecStatus::parse(rec.status)),
        started_at: text(rec.started_at),
        completed_at: text(rec.completed_at),
        error_message: text(rec.error_message),
        parent_id: rec.parent_id,
        metadata: text(rec.metadata),
        idempotency_key: text(rec.idempotency_key),
        principal: Some(rec.principal.to_string()),
    }
}
