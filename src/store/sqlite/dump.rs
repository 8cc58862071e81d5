//! A run's rows read off its file (`Store::dump`), in the caller's snapshot: every value
//! as stored, however raw SQL typed it.

use super::{audit_row, SqliteStore, Statements, AUDIT_COLUMNS};
use crate::store::dump::{columns, Cells, RunDump, Table, TableSource};
use anyhow::Result;

impl TableSource for SqliteStore {
    fn rows<T>(&mut self, table: &Table, read: fn(&dyn Cells) -> T) -> Result<Vec<T>> {
        let columns: Vec<String> = columns(table.columns)
            .map(|(c, _, _)| match c {
                "value" => format!("CAST({c} AS BLOB)"),
                _ => c.to_string(),
            })
            .collect();
        let sql = format!(
            "SELECT {} FROM {} ORDER BY {}",
            columns.join(", "),
            table.name,
            match table.order {
                "" => "rowid LIMIT 1",
                order => order,
            }
        );
        self.all(&sql, [], |r| Ok(read(r)))
    }
}

/// Every row of a run's file (`Store::dump`), read in the caller's snapshot.
pub(super) fn dump_rows(s: &mut SqliteStore) -> Result<RunDump> {
    Ok(RunDump {
        audit: s.all(
            &format!("SELECT {AUDIT_COLUMNS} FROM gate_audit_log ORDER BY id"),
            [],
            audit_row,
        )?,
        ..RunDump::read(s)?
    })
}
