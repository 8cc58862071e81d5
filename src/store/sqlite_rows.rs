//! The row mappers and the error edge that SQLite's stores share: a run's state.db
//! (`sqlite`) and the project catalog (`catalog`), which keeps copies of the same rows.

use super::{GateRow, RunInfo};
use crate::error::busy;
use crate::model::{GateStatus, RunStatus};
use anyhow::anyhow;
use rusqlite::{ErrorCode, Row};
use std::path::Path;

/// Maps a rusqlite error to the error the user sees: a lock held past the timeout becomes
/// exit 75 with advice to retry; a file that is not SQLite says so.
pub(super) fn db_error(e: rusqlite::Error, path: &Path, busy_ms: u128) -> anyhow::Error {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => busy(format!(
            "database is busy: another process held its write lock for more than {busy_ms} ms; retry the command: {}",
            path.display()
        )),
        Some(ErrorCode::NotADatabase) => {
            anyhow!("not a SQLite database: {}", path.display())
        }
        Some(ErrorCode::ReadOnly | ErrorCode::CannotOpen) => anyhow!(
            "cannot write the state db ({e}); check that the run directory is writable: {}",
            path.display()
        ),
        Some(ErrorCode::DiskFull) => anyhow!("disk full writing the state db: {}", path.display()),
        // SQLite reports a full disk under its WAL index as a plain I/O error.
        Some(ErrorCode::SystemIoFailure) => anyhow!(
            "disk I/O error on the state db ({e}); is the disk full or failing?: {}",
            path.display()
        ),
        _ => anyhow::Error::new(e).context(format!("state db: {}", path.display())),
    }
}

pub(super) const GATE_COLUMNS: &str =
    "id, run_id, execution_id, prompt, allow, timeout, timeout_at, \
                            on_reject, status, created_at, resolved_at, resolved_by, \
                            resolution_comment, metadata, instance";

fn parse_allow(text: Option<String>) -> Vec<String> {
    text.and_then(|t| serde_json::from_str::<Vec<String>>(&t).ok())
        .unwrap_or_default()
}

/// A run's id, program path, status, started and updated times, from column `at` on.
pub(super) fn run_info_at(r: &Row, at: usize) -> rusqlite::Result<RunInfo> {
    Ok(RunInfo {
        id: r.get(at)?,
        program_path: r.get(at + 1)?,
        status: r
            .get::<_, Option<String>>(at + 2)?
            .as_deref()
            .map(RunStatus::parse),
        started_at: r.get(at + 3)?,
        updated_at: r.get(at + 4)?,
    })
}

pub(super) fn gate_row(r: &Row) -> rusqlite::Result<GateRow> {
    Ok(GateRow {
        id: r.get(0)?,
        run_id: r.get(1)?,
        execution_id: r.get(2)?,
        prompt: r.get::<_, Option<String>>(3)?.unwrap_or_default(),
        allow: parse_allow(r.get(4)?),
        timeout: r.get(5)?,
        timeout_at: r.get(6)?,
        on_reject: r.get(7)?,
        status: GateStatus::parse(&r.get::<_, Option<String>>(8)?.unwrap_or_default()),
        created_at: r.get(9)?,
        resolved_at: r.get(10)?,
        resolved_by: r.get(11)?,
        resolution_comment: r.get(12)?,
        metadata: r.get(13)?,
        instance: r.get::<_, Option<i64>>(14)?.unwrap_or(1),
    })
}
