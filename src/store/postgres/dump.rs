//! A run's rows read off the server (`Store::dump`), in the store's snapshot.

use super::{select_list, PgStore, Statements};
use crate::store::dump::{Cells, RunDump, Table, TableSource};
use crate::store::{AuditFilter, Rows};
use anyhow::Result;

/// What the spec's server-only columns hold for the run, where it is not their default.
const SERVER_ONLY: &str = "SELECT
    (SELECT COUNT(*) FROM openprose.run WHERE id = $1 AND metadata IS NOT NULL AND metadata <> '{}'::jsonb),
    (SELECT COUNT(*) FROM openprose.bindings WHERE run_id = $1 AND metadata IS NOT NULL AND metadata <> '{}'::jsonb),
    (SELECT COUNT(*) FROM openprose.agents WHERE run_id = $1 AND metadata IS NOT NULL AND metadata <> '{}'::jsonb),
    (SELECT COUNT(*) FROM openprose.agent_segments WHERE run_id = $1 AND metadata IS NOT NULL AND metadata <> '{}'::jsonb),
    (SELECT COUNT(*) FROM openprose.imports WHERE run_id = $1
        AND ((metadata IS NOT NULL AND metadata <> '{}'::jsonb) OR content_hash IS NOT NULL))";

impl TableSource for PgStore {
    fn rows<T>(&mut self, table: &Table, read: fn(&dyn Cells) -> T) -> Result<Vec<T>> {
        let run_id = self.run()?.to_string();
        let (key, order) = match table.order {
            "" => ("id", "id"),
            order => ("run_id", order),
        };
        let sql = format!(
            "SELECT {} FROM openprose.{} t WHERE {key} = $1 ORDER BY {order}",
            select_list(table.columns, "t."),
            table.name
        );
        self.all(&sql, &[&run_id], |r| read(r))
    }
}

impl PgStore {
    pub(super) fn dump_rows(&mut self) -> Result<RunDump> {
        let run_id = self.run()?.to_string();
        let rows = RunDump::read(self)?;
        let counts: Vec<i64> = self.one(SERVER_ONLY, &[&run_id], |r| {
            (0..5).map(|i| r.get(i)).collect()
        })?;
        let what = [
            "the run's metadata",
            "bindings' metadata",
            "agents' metadata",
            "agent segments' metadata",
            "imports' metadata or content_hash",
        ];
        let server_only = what
            .iter()
            .zip(counts)
            .filter(|(_, n)| *n > 0)
            .map(|(what, n)| format!("{what} ({n} rows)"))
            .collect();
        Ok(RunDump {
            audit: self.audit(&AuditFilter::default())?,
            server_only,
            ..rows
        })
    }
}
