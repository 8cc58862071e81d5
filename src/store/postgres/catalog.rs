//! Cross-run reads on the server: every run of the project is in the same tables, so a
//! listing is one query (and a sweep touches only the runs that have an overdue gate), over
//! one connection, never one connection a run.

use super::{audit_row, gate_columns, gate_row, PgStore, Statements, AUDIT_SELECT, DUE};
use crate::model::RunStatus;
use crate::store::dump::{RENUMBERED, RUN_EVENT};
use crate::store::{
    AuditFilter, AuditRow, Catalog, GateRow, RunFilter, RunInfo, RunStats, RunSummary,
    ServerCatalog, ServerStats, Store, StoreStats, STATS_TABLES,
};
use anyhow::Result;
use postgres::types::ToSql;
use std::collections::BTreeMap;

impl PgStore {
    /// A run's stats before its rows are counted: every table at zero, and the connection's
    /// settings.
    pub(super) fn no_stats(&self) -> StoreStats {
        StoreStats {
            backend: "postgres",
            schema_version: self.version,
            tables: STATS_TABLES.iter().map(|t| (t.to_string(), 0)).collect(),
            server: Some(ServerStats::default()),
            ..Default::default()
        }
    }

    /// The server's sizes, shared by every run on it: the openprose tables with their indexes
    /// and TOAST, and the whole database. None for one the server does not give this role.
    fn server_sizes(&mut self) -> (Option<u64>, Option<u64>) {
        let tables = self.one(
            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::bigint
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'openprose' AND c.relkind IN ('r', 'p')",
            &[],
            |r| r.get::<_, i64>(0),
        );
        let database = self.one("SELECT pg_database_size(current_database())", &[], |r| {
            r.get::<_, i64>(0)
        });
        (
            tables.ok().map(|b| b as u64),
            database.ok().map(|b| b as u64),
        )
    }

    /// The stats of every run of `runs` with a run row, by id: each figure one query grouped
    /// by run, over this connection.
    pub(super) fn stats_by_run(
        &mut self,
        runs: &RunFilter,
    ) -> Result<BTreeMap<String, StoreStats>> {
        let mut settings = BTreeMap::new();
        for name in [
            "server_version",
            "TimeZone",
            "lock_timeout",
            "default_transaction_isolation",
        ] {
            let v: String = self.one("SELECT current_setting($1)", &[&name], |r| r.get(0))?;
            settings.insert(name.to_string(), v);
        }
        settings.insert("server".to_string(), self.shown_url.clone());
        let filter: [&(dyn ToSql + Sync); 2] = [&runs.only, &runs.except];
        let ids: Vec<String> = self.all(
            "SELECT id FROM openprose.run
             WHERE ($1::text[] IS NULL OR id = ANY($1)) AND NOT id = ANY($2)",
            &filter,
            |r| r.get(0),
        )?;
        let (tables_bytes, database_bytes) = self.server_sizes();
        let mut all: BTreeMap<String, StoreStats> = BTreeMap::new();
        for id in ids {
            let mut st = self.no_stats();
            st.settings = settings.clone();
            st.server = Some(ServerStats {
                tables_bytes,
                database_bytes,
                ..Default::default()
            });
            all.insert(id, st);
        }
        // Each figure: the table's key, what its rows are grouped by besides the run, the two
        // sums taken, the table, and where they go. Names and expressions are constants, never
        // input. A row's size is as the server stores it (`pg_column_size` of the row); a
        // value's chunks are counted by their data alone, which a whole row would fetch.
        type Put = fn(&mut StoreStats, String, i64, i64);
        let count: Put = |st, table, n, size| {
            st.tables.extend([(table, n)]);
            server_of(st).row_bytes += size as u64;
        };
        let status: Put = |st, status, n, _| st.execution_status.extend([(status, n)]);
        let bytes: Put = |st, _, n, _| st.binding_inline_bytes = n;
        let values: Put = |st, _, n, size| {
            let server = server_of(st);
            server.attachments = n as u64;
            server.attachment_bytes = size as u64;
        };
        let rows_of: Put = |st, _, _, size| server_of(st).row_bytes += size as u64;
        const ROW: &str = "COALESCE(SUM(pg_column_size(t.*)), 0)::bigint";
        let figures = STATS_TABLES.iter().map(|t| {
            let key = if *t == "run" { "id" } else { "run_id" };
            (key, format!("'{t}'::text"), "COUNT(*)", ROW, *t, count)
        });
        let mut figures: Vec<_> = figures
            .chain([
                (
                    "run_id",
                    "COALESCE(status, '?')".into(),
                    "COUNT(*)",
                    "0::bigint",
                    "execution",
                    status,
                ),
                (
                    "run_id",
                    "''::text".into(),
                    "COALESCE(SUM(octet_length(value)), 0)::bigint",
                    "0::bigint",
                    "bindings",
                    bytes,
                ),
            ])
            .collect();
        // Values kept on the server (schema 4): their count and bytes, and their rows' sizes.
        if self.version >= 4 {
            figures.extend([
                (
                    "run_id",
                    "''::text".into(),
                    "0::bigint",
                    ROW,
                    "attachments",
                    rows_of,
                ),
                (
                    "run_id",
                    "''::text".into(),
                    "COUNT(*)",
                    "COALESCE(SUM(bytes), 0)::bigint",
                    "attachments",
                    values,
                ),
                (
                    "run_id",
                    "''::text".into(),
                    "0::bigint",
                    "COALESCE(SUM(pg_column_size(t.data)), 0)::bigint",
                    "attachment_chunks",
                    rows_of,
                ),
            ]);
        }
        for (key, by, what, size, table, put) in figures {
            let sql = format!(
                "SELECT {key}, {by}, {what}, {size} FROM openprose.{table} t
                 WHERE ($1::text[] IS NULL OR {key} = ANY($1)) AND NOT {key} = ANY($2)
                 GROUP BY 1, 2"
            );
            let rows: Vec<(Option<String>, String, i64, i64)> =
                self.all(&sql, &filter, |r| (r.get(0), r.get(1), r.get(2), r.get(3)))?;
            for (id, by, n, size) in rows {
                if let Some(st) = id.and_then(|id| all.get_mut(&id)) {
                    put(st, by, n, size);
                }
            }
        }
        Ok(all)
    }
}
/// A run's server figures, made when the first is put.
fn server_of(st: &mut StoreStats) -> &mut ServerStats {
    st.server.get_or_insert_with(ServerStats::default)
}

impl Catalog for PgStore {
    fn stats_of(&mut self, runs: &RunFilter) -> Result<Vec<(String, RunStats)>> {
        Ok(self
            .stats_by_run(runs)?
            .into_iter()
            .map(|(id, store)| {
                let st = RunStats {
                    run_id: id.clone(),
                    store,
                    attachment_files: 0,
                    attachment_bytes: 0,
                };
                (id, st)
            })
            .collect())
    }

    fn sweep_overdue(
        &mut self,
        runs: &RunFilter,
        now: &str,
    ) -> Result<(usize, crate::store::rules::Swept)> {
        let overdue: Vec<String> = self.all(
            &format!(
                "SELECT DISTINCT run_id FROM openprose.gates g
                 WHERE ($1::text[] IS NULL OR run_id = ANY($1)) AND NOT run_id = ANY($3)
                   AND {DUE}
                 ORDER BY run_id"
            ),
            &[&runs.only, &now, &runs.except],
            |r| r.get(0),
        )?;
        let mine = self.run_id.take();
        let (mut swept, mut done_all) = (0, crate::store::rules::Swept::default());
        for id in &overdue {
            self.run_id = Some(id.clone());
            match self.sweep_timeouts(now) {
                Ok(d) => done_all.add(d),
                Err(e) => {
                    self.run_id = mine;
                    return Err(e);
                }
            }
            swept += 1;
        }
        self.run_id = mine;
        Ok((swept, done_all))
    }

    fn pending_gates_of(
        &mut self,
        runs: &RunFilter,
        limit: Option<i64>,
    ) -> Result<Vec<(GateRow, Option<String>)>> {
        self.gates_of(runs, Some("pending"), limit)
    }

    fn runs_of(&mut self, runs: &RunFilter, now: &str) -> Result<Vec<(String, RunSummary)>> {
        Ok(self
            .summaries_of(runs, now, None, None, None)?
            .into_iter()
            .map(|s| (s.run.id.clone(), s))
            .collect())
    }

    fn summaries_of(
        &mut self,
        runs: &RunFilter,
        now: &str,
        status: Option<&str>,
        since: Option<&str>,
        limit: Option<i64>,
    ) -> Result<Vec<RunSummary>> {
        // Newest first, limited before the per-run figures are computed.
        self.all(
            concat!(
                "SELECT r.id, r.program_path, r.status, ",
                ts!("r.started_at"),
                ", ",
                ts!("r.updated_at"),
                ", r.error_message,
                 (SELECT ",
                ts!("max(COALESCE(e.completed_at, e.started_at))"),
                " FROM openprose.execution e WHERE e.run_id = r.id),
                 (SELECT COUNT(*) FROM openprose.gates g WHERE g.run_id = r.id
                    AND g.status = 'pending'
                    AND NOT (g.timeout_at IS NOT NULL
                             AND g.timeout_at <= ($2::text)::timestamptz))
                 FROM (SELECT * FROM openprose.run
                       WHERE ($1::text[] IS NULL OR id = ANY($1)) AND NOT id = ANY($5)
                         AND ($3::text IS NULL OR status = $3)
                         AND ($6::text IS NULL OR started_at >= ($6::text)::timestamptz)
                       ORDER BY started_at DESC, id DESC
                       LIMIT $4) r
                 ORDER BY r.started_at DESC, r.id DESC"
            ),
            &[&runs.only, &now, &status, &limit, &runs.except, &since],
            |r| RunSummary {
                run: RunInfo {
                    id: r.get(0),
                    program_path: r.get(1),
                    status: r.get::<_, Option<&str>>(2).map(RunStatus::parse),
                    started_at: r.get(3),
                    updated_at: r.get(4),
                },
                error_message: r.get(5),
                last_event_at: r.get(6),
                pending_gates: r.get(7),
            },
        )
    }
}

impl ServerCatalog for PgStore {
    fn gates_of(
        &mut self,
        runs: &RunFilter,
        status: Option<&str>,
        limit: Option<i64>,
    ) -> Result<Vec<(GateRow, Option<String>)>> {
        self.all(
            &format!(
                "SELECT {}, r.program_path
                 FROM openprose.gates g JOIN openprose.run r ON r.id = g.run_id
                 WHERE ($1::text[] IS NULL OR g.run_id = ANY($1)) AND NOT g.run_id = ANY($3)
                   AND ($2::text IS NULL OR g.status = $2)
                 ORDER BY g.created_at, g.run_id, g.id
                 LIMIT $4",
                gate_columns()
            ),
            &[&runs.only, &status, &runs.except, &limit],
            |r| (gate_row(r), r.get(15)),
        )
    }

    fn ids_of(&mut self, runs: &RunFilter) -> Result<Vec<String>> {
        self.all(
            "SELECT id FROM openprose.run
             WHERE ($1::text[] IS NULL OR id = ANY($1)) AND NOT id = ANY($2) ORDER BY id",
            &[&runs.only, &runs.except],
            |r| r.get(0),
        )
    }

    fn audits_of(&mut self, runs: &RunFilter, f: &AuditFilter) -> Result<Vec<AuditRow>> {
        // The filter as `Store::audit` applies it to one run.
        self.all(
            &format!(
                "{AUDIT_SELECT}
                 WHERE ($1::text[] IS NULL OR run_id = ANY($1)) AND NOT run_id = ANY($2)
                   AND ($3::text IS NULL OR gate_id = $3
                        OR ($9 AND gate_id = '{RUN_EVENT}' AND event_type = '{RENUMBERED}'))
                   AND ($4::text IS NULL OR principal = $4)
                   AND ($5::text IS NULL OR timestamp >= ($5::text)::timestamptz)
                   AND ($6::text IS NULL OR event_type = $6)
                   AND ($7::text[] IS NULL
                    OR EXISTS (SELECT 1 FROM unnest($7::text[]) t WHERE pg_catalog.strpos(metadata::text, t) > 0))
                   AND ($8::text[] IS NULL OR (event_type = 'created'
                    AND EXISTS (SELECT 1 FROM unnest($8::text[]) t WHERE pg_catalog.strpos(metadata::text, t) > 0)))
                   AND ($10::int8 IS NULL OR seq > $10)
                 ORDER BY run_id, id"
            ),
            &[
                &runs.only,
                &runs.except,
                &f.gate_id,
                &f.principal,
                &f.since,
                &f.event,
                &f.mentions,
                &f.answers_spellings(),
                &f.with_moves,
                &f.after_seq,
            ],
            audit_row,
        )
    }

    fn catalog_place(&self) -> String {
        self.place()
    }
}
