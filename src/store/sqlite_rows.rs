//! The row mappers and the error edge that SQLite's stores share: a run's state.db
//! (`sqlite`) and the project catalog (`catalog`), which keeps copies of the same rows.

use super::dump::{Cells, GateRecord};
use super::{GateRow, RunInfo};
use crate::error::busy;
use crate::model::RunStatus;
use anyhow::anyhow;
use rusqlite::types::ValueRef;
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

pub(super) use super::dump::GATE_COLUMNS;

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

/// Any stored value: as text (raw SQL may put a number where text belongs), as a number
/// where it is one.
impl Cells for Row<'_> {
    fn text(&self, i: usize) -> Option<String> {
        match self.get_ref(i).ok()? {
            ValueRef::Null => None,
            ValueRef::Integer(n) => Some(n.to_string()),
            ValueRef::Real(f) => Some(f.to_string()),
            ValueRef::Text(t) | ValueRef::Blob(t) => Some(String::from_utf8_lossy(t).into_owned()),
        }
    }

    fn int(&self, i: usize) -> Option<i64> {
        match self.get_ref(i).ok()? {
            ValueRef::Integer(n) => Some(n),
            ValueRef::Text(t) => std::str::from_utf8(t).ok().and_then(|t| t.parse().ok()),
            _ => None,
        }
    }

    fn bytes(&self, i: usize) -> Option<Vec<u8>> {
        match self.get_ref(i).ok()? {
            ValueRef::Text(t) | ValueRef::Blob(t) => Some(t.to_vec()),
            _ => self.text(i).map(String::into_bytes),
        }
    }
}

/// A gates (or gate_instances) row in `GATE_COLUMNS`' order, as stored.
pub(super) fn gate_record(r: &Row) -> rusqlite::Result<GateRecord> {
    Ok(GateRecord::read(r))
}

/// A gates row in `GATE_COLUMNS`' order, as the rules read it.
pub(super) fn gate_row(r: &Row) -> rusqlite::Result<GateRow> {
    gate_record(r).map(GateRecord::into_row)
}
