//! `impl AgentStore` and `impl Store` for [`PgStore`]: its transactions, and the run's reads
//! and upkeep outside one.

use super::connect::map_err;
use crate::error::{not_found, shown, usage};
use crate::model::{ExecStatus, RunStatus};
use crate::store::tx::{Tx, TxKind};
use crate::store::{
    Access, AgentRow, AgentStore, BindingRow, Checkpointed, ExecutionRow, Found, ImportRow,
    QueryResult, RunInfo, RunSummary, Store, StoreStats,
};
use anyhow::Result;
use postgres::types::{ToSql, Type};
use postgres::Row;

use super::{
    binding_row, import_row, listening_client, missing_triggers, select_list, PgStore, PgTx,
    Statements, BINDING_SELECT, CHAIN, DUE, OVERDUE, POSTGRES_SCHEMA_VERSION,
};

impl AgentStore for PgStore {
    fn begin(&mut self, kind: TxKind) -> Result<Box<dyn Tx + '_>> {
        self.prepare_write()?;
        let PgStore {
            client,
            run_id,
            shown_url,
            busy_ms,
            kept_statements,
            wiring,
            ..
        } = self;
        let tx = client
            .transaction()
            .map_err(|e| map_err(e, shown_url, *busy_ms))?;
        let mut tx = PgTx {
            tx,
            run_id: run_id.clone(),
            run: None,
            history_keep: None,
            shown_url,
            busy_ms: *busy_ms,
            prepared: std::collections::HashMap::new(),
            held: None,
            kept: wiring.keeps().then_some(kept_statements),
            wiring,
        };
        if let Some(id) = run_id.as_deref() {
            tx.lock_run(id, kind)?;
        }
        Ok(Box::new(tx))
    }

    fn agent_rows(&mut self, name: Option<&str>) -> Result<Vec<AgentRow>> {
        let run = self.run_id.clone();
        match name {
            Some(name) => self.all(
                agent_select!("WHERE a.run_id IS NOT DISTINCT FROM $1 AND a.name = $2"),
                &[&run, &name],
                agent_row,
            ),
            None => self.all(
                agent_select!("WHERE a.run_id IS NOT DISTINCT FROM $1"),
                &[&run],
                agent_row,
            ),
        }
    }

    fn segment_agents(&mut self) -> Result<Vec<AgentRow>> {
        let run = self.run_id.clone();
        self.all(
            concat!(
                "SELECT s.agent_name, NULL, NULL, ",
                ts!("MIN(s.timestamp)"),
                ", ",
                ts!("MAX(s.timestamp)"),
                ", COUNT(*), MAX(s.at_record) FROM openprose.agent_segments s
                  WHERE s.run_id IS NOT DISTINCT FROM $1 AND s.agent_name IS NOT NULL
                  GROUP BY s.agent_name"
            ),
            &[&run],
            agent_row,
        )
    }
}

fn agent_row(r: &Row) -> AgentRow {
    AgentRow {
        name: r.get(0),
        scope: r.get(1),
        memory: r.get(2),
        created_at: r.get(3),
        updated_at: r.get(4),
        segments: r.get(5),
        last_segment_at_record: r.get(6),
    }
}

impl Store for PgStore {
    fn location(&self) -> String {
        self.shown_url.clone()
    }

    fn place(&self) -> String {
        // The server and database, whatever the connection's options.
        self.shown_url
            .split('?')
            .next()
            .unwrap_or_default()
            .to_string()
    }

    fn binding_location(&self, name: &str, execution_id: Option<i64>) -> String {
        let scope = execution_id.map_or_else(|| "IS NULL".to_string(), |id| format!("= {id}"));
        format!(
            "openprose.bindings WHERE name='{name}' AND run_id='{}' AND execution_id {scope} ({})",
            self.run_id.as_deref().unwrap_or(""),
            self.shown_url
        )
    }

    fn changes(&self) -> Box<dyn crate::store::wake::Changes> {
        match self.run_id.as_deref() {
            Some(run) => crate::store::wake::listen(&self.url, run, || listening_client(&self.url)),
            None => Box::new(crate::store::wake::Polling),
        }
    }

    fn binding_versions(
        &mut self,
        name: &str,
        execution_id: Option<i64>,
        which: crate::store::history::Versions,
    ) -> Result<crate::store::history::Span> {
        use crate::store::history::{HistoryRow, Span, Versions, COLUMNS};
        const KEY: &str = "h.run_id = $1 AND h.name = $2 AND COALESCE(h.execution_id, -1) = $3";
        let run = self.run()?.to_string();
        let scope = execution_id.unwrap_or(-1);
        let columns = select_list(COLUMNS, "h.");
        let (total, last_n): (i64, Option<i64>) = self.one(
            &format!("SELECT COUNT(*), MAX(h.n) FROM openprose.binding_history h WHERE {KEY}"),
            &[&run, &name, &scope],
            |r| (r.get(0), r.get(1)),
        )?;
        let first = self.opt(
            &format!(
                "SELECT {columns} FROM openprose.binding_history h WHERE {KEY} ORDER BY h.n LIMIT 1"
            ),
            &[&run, &name, &scope],
            |r| HistoryRow::read(r),
        )?;
        let rows = match which {
            Versions::Page { before, limit } => self.all(
                &format!(
                    "SELECT {columns} FROM openprose.binding_history h
                      WHERE {KEY} AND ($4::bigint IS NULL OR h.n < $4)
                      ORDER BY h.n DESC LIMIT $5"
                ),
                &[&run, &name, &scope, &before, &limit],
                |r| HistoryRow::read(r),
            )?,
            Versions::Rebuilding(n) => self.all(
                &format!(
                    "SELECT {columns} FROM openprose.binding_history h
                      WHERE {KEY} AND h.n <= $4
                        AND h.n >= COALESCE((SELECT MAX(h.n) FROM openprose.binding_history h
                                              WHERE {KEY} AND h.n <= $4 AND h.delta IS NULL), 0)
                      ORDER BY h.n"
                ),
                &[&run, &name, &scope, &n],
                |r| HistoryRow::read(r),
            )?,
        };
        Ok(Span {
            rows,
            total,
            first,
            last_n,
        })
    }

    fn history_scopes(&mut self, name: &str) -> Result<Vec<Option<i64>>> {
        let run = self.run()?.to_string();
        self.all(
            "SELECT DISTINCT execution_id FROM openprose.binding_history
             WHERE run_id = $1 AND name = $2",
            &[&run, &name],
            |r| r.get(0),
        )
    }

    // Scope resolution, as in the SQLite store: nearest scope first, root scope last.
    fn resolve(&mut self, name: &str, execution_id: Option<i64>) -> Result<Option<Found>> {
        let run = self.run()?.to_string();
        if let Some(start) = execution_id {
            let found = self.opt(
                &format!(
                    "{CHAIN} SELECT {BINDING_SELECT}, c.depth FROM chain c JOIN openprose.bindings b
                       ON b.run_id = $2 AND b.name = $4 AND COALESCE(b.execution_id, -1) = c.id
                     ORDER BY c.depth LIMIT 1"
                ),
                &[&start, &run, &crate::store::MAX_SCOPE_DEPTH, &name],
                |r| Found {
                    row: binding_row(r),
                    depth: Some(r.get::<_, i32>(10) as u64),
                },
            )?;
            if found.is_some() {
                return Ok(found);
            }
        }
        self.opt(
            &format!(
                "SELECT {BINDING_SELECT} FROM openprose.bindings b
                 WHERE b.run_id = $2 AND b.name = $1 AND b.execution_id IS NULL"
            ),
            &[&name, &run],
            |r| Found {
                row: binding_row(r),
                depth: None,
            },
        )
    }

    fn query_readonly(&mut self, sql: &str, limit: std::time::Duration) -> Result<QueryResult> {
        self.sandboxed_query(sql, limit)
    }

    fn run_id(&mut self) -> Result<String> {
        Ok(self.run()?.to_string())
    }

    fn run_info(&mut self) -> Result<RunInfo> {
        let run = self.run()?.to_string();
        self.opt(
            concat!(
                "SELECT id, program_path, status, ",
                ts!("started_at"),
                ", ",
                ts!("updated_at"),
                " FROM openprose.run WHERE id = $1"
            ),
            &[&run],
            |row| RunInfo {
                id: row.get(0),
                program_path: row.get(1),
                status: row.get::<_, Option<&str>>(2).map(RunStatus::parse),
                started_at: row.get(3),
                updated_at: row.get(4),
            },
        )?
        .ok_or_else(|| not_found(format!("run not found: {}", shown(&run))))
    }

    // A waiter's look is these two statements (`gate`): each is one round trip and one
    // transaction on the server, its parameters' types given, with no statement prepared
    // first (a prepared one costs another round trip, and a transaction, for its Parse).
    fn any_overdue(&mut self, now: &str) -> Result<bool> {
        let run = self.run()?.to_string();
        let now = now.to_string();
        Ok(self
            .opt_typed(
                &format!(
                    "SELECT EXISTS (SELECT 1 FROM openprose.gates WHERE run_id = $1 AND {DUE})"
                ),
                &[(&run, Type::TEXT), (&now, Type::TEXT)],
                |r| r.get(0),
            )?
            .unwrap_or(false))
    }

    fn run_summary(&mut self, now: &str) -> Result<RunSummary> {
        let info = self.run_info()?;
        let run = info.id.clone();
        self.one(
            &format!(
                "SELECT (SELECT error_message FROM openprose.run WHERE id = $1),
                        (SELECT {} FROM (SELECT MAX(COALESCE(completed_at, started_at)) AS t
                           FROM openprose.execution WHERE run_id = $1) m),
                        (SELECT COUNT(*) FROM openprose.gates
                           WHERE run_id = $1 AND status = 'pending' AND NOT ({OVERDUE}))",
                ts!("m.t")
            ),
            &[&run, &now],
            |row| RunSummary {
                run: info,
                error_message: row.get(0),
                last_event_at: row.get(1),
                pending_gates: row.get(2),
            },
        )
    }

    fn imports(&mut self) -> Result<Vec<ImportRow>> {
        let run = self.run()?.to_string();
        self.all(
            concat!(
                "SELECT alias, source_url, ",
                ts!("fetched_at"),
                ", inputs_schema::text, outputs_schema::text FROM openprose.imports
                 WHERE run_id = $1 ORDER BY alias"
            ),
            &[&run],
            import_row,
        )
    }

    fn executions_matching(&mut self, q: &crate::store::ExecQuery) -> Result<Vec<ExecutionRow>> {
        let run = self.run()?.to_string();
        let (tail, params) = q.sql("run_id = $1 AND ", true, |i| format!("${}", i + 2));
        let mut args: Vec<&(dyn ToSql + Sync)> = vec![&run];
        args.extend(params.iter().map(|p| p as &(dyn ToSql + Sync)));
        // A server of schema 1 has no key column yet, and a read never upgrades it.
        let key = if self.version >= 2 {
            "idempotency_key"
        } else {
            "NULL::text"
        };
        self.all(
            &format!(
                concat!(
                    "SELECT id, statement_index, statement_text, status, ",
                    ts!("started_at"),
                    ", ",
                    ts!("completed_at"),
                    ", error_message, parent_id, metadata::text, {}, principal FROM openprose.execution {}"
                ),
                key,
                tail
            ),
            &args,
            |r| ExecutionRow {
                id: r.get(0),
                statement_index: r.get(1),
                statement_text: r.get(2),
                status: r.get::<_, Option<&str>>(3).map(ExecStatus::parse),
                started_at: r.get(4),
                completed_at: r.get(5),
                error_message: r.get(6),
                parent_id: r.get(7),
                metadata: r.get(8),
                idempotency_key: r.get(9),
                principal: r.get(10),
            },
        )
    }

    fn bindings_page(
        &mut self,
        chain: &[i64],
        after: Option<&str>,
        names: i64,
    ) -> Result<Vec<BindingRow>> {
        let run = self.run()?.to_string();
        let scopes = crate::store::scope_list(chain);
        self.all(
            &format!(
                "SELECT {BINDING_SELECT} FROM openprose.bindings b
                 WHERE b.run_id = $1 AND COALESCE(b.execution_id, -1) IN ({scopes})
                   AND b.name IN (
                     SELECT DISTINCT name COLLATE \"C\" FROM openprose.bindings
                     WHERE run_id = $1 AND COALESCE(execution_id, -1) IN ({scopes})
                       AND name COLLATE \"C\" > $2
                     ORDER BY name COLLATE \"C\" LIMIT $3)
                 ORDER BY b.name COLLATE \"C\""
            ),
            &[&run, &after.unwrap_or(""), &names],
            binding_row,
        )
    }

    fn resume_counts(&mut self, chain: &[i64]) -> Result<crate::store::ResumeCounts> {
        let run = self.run()?.to_string();
        let in_chain = if chain.is_empty() {
            "FALSE".to_string()
        } else {
            format!("b.execution_id IN ({})", crate::store::id_list(chain))
        };
        self.one(
            &format!(
                "SELECT (SELECT COUNT(*) FROM openprose.execution WHERE run_id = $1),
                        (SELECT COUNT(*) FROM openprose.bindings WHERE run_id = $1),
                        (SELECT COUNT(*) FROM openprose.bindings
                         WHERE run_id = $1 AND execution_id IS NOT NULL),
                        (SELECT COUNT(DISTINCT name) FROM openprose.bindings b
                         WHERE b.run_id = $1 AND {in_chain} AND NOT EXISTS (
                             SELECT 1 FROM openprose.bindings r
                             WHERE r.run_id = $1 AND r.name = b.name
                               AND COALESCE(r.execution_id, -1) = -1)),
                        (SELECT error_message FROM openprose.run WHERE id = $1)"
            ),
            &[&run],
            |r| {
                let (records, bindings, scoped, chain_only): (i64, i64, i64, i64) =
                    (r.get(0), r.get(1), r.get(2), r.get(3));
                crate::store::ResumeCounts {
                    error_message: r.get(4),
                    records,
                    bindings,
                    bindings_visible: bindings - scoped + chain_only,
                }
            },
        )
    }

    fn bindings(&mut self) -> Result<Vec<BindingRow>> {
        let run = self.run()?.to_string();
        self.all(
            &format!(
                "SELECT {BINDING_SELECT} FROM openprose.bindings b WHERE b.run_id = $1
                 ORDER BY COALESCE(b.execution_id, -1), b.name"
            ),
            &[&run],
            binding_row,
        )
    }

    fn stats(&mut self) -> Result<StoreStats> {
        let run = self.run()?.to_string();
        let only = crate::store::RunFilter {
            only: Some(vec![run.clone()]),
            except: Vec::new(),
        };
        let mut all = self.stats_by_run(&only)?;
        Ok(all.remove(&run).unwrap_or_else(|| self.no_stats()))
    }

    fn health(&mut self) -> Result<Vec<String>> {
        // PostgreSQL keeps its own integrity and enforces the foreign keys; what can still go
        // wrong is rows written by other means pointing at executions that do not exist.
        let run = self.run()?.to_string();
        let n: i64 = self.one(
            "SELECT COUNT(*) FROM openprose.bindings b WHERE b.run_id = $1
               AND b.execution_id IS NOT NULL AND NOT EXISTS
               (SELECT 1 FROM openprose.execution e WHERE e.id = b.execution_id AND e.run_id = $1)",
            &[&run],
            |r| r.get(0),
        )?;
        let problem = format!("{n} bindings are scoped to executions that do not exist");
        Ok((n > 0).then_some(problem).into_iter().collect())
    }

    fn missing_triggers(&mut self) -> Result<Vec<String>> {
        if self.access != Access::Current {
            return Ok(Vec::new());
        }
        missing_triggers(self)
    }

    fn checkpoint(&mut self, _mode: &str) -> Result<Checkpointed> {
        Err(usage(
            "checkpoint applies to SQLite's write-ahead log; PostgreSQL manages its own",
        ))
    }

    fn vacuum(&mut self) -> Result<(Option<u64>, Option<u64>)> {
        self.client
            .batch_execute(
                "VACUUM (ANALYZE) openprose.run, openprose.execution, openprose.bindings,
                 openprose.agents, openprose.agent_segments, openprose.imports, openprose.gates,
                 openprose.gate_audit_log",
            )
            .map_err(self.err())?;
        Ok((None, None))
    }

    fn migrate(&mut self, apply: bool) -> Result<crate::store::Migration> {
        let (from, older) = (self.version, self.access == Access::Older);
        let step = format!(
            "apply the openprose schema of version {POSTGRES_SCHEMA_VERSION} (idempotent; adds what version {from} lacks)"
        );
        let steps = older.then_some(step).into_iter().collect();
        let applied = apply && older;
        if applied {
            self.upgrade()?;
        }
        let ours = POSTGRES_SCHEMA_VERSION as i64;
        let to = if older { ours } else { from };
        Ok(crate::store::Migration {
            from,
            to,
            steps,
            applied,
        })
    }

    fn keeps_values(&self) -> bool {
        true
    }

    fn dump(&mut self) -> Result<crate::store::dump::RunDump> {
        self.dump_rows()
    }

    fn upload(&mut self, blob: &str) -> Result<Box<dyn crate::store::Upload + '_>> {
        self.start_upload(blob)
    }

    fn end_upload(&mut self, blob: &str, linked: bool) -> Result<()> {
        self.finish_upload(blob, linked)
    }

    fn snapshot(&mut self) -> Result<()> {
        self.begin_snapshot()
    }

    fn blob_len(&mut self, blob: &str) -> Result<Option<u64>> {
        self.whole_blob_len(blob)
    }

    fn read_blob(&mut self, blob: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.blob_range(blob, offset, len)
    }

    fn into_blob_reader(self: Box<Self>, blob: &str) -> Result<Box<dyn std::io::Read>> {
        self.blob_reader(blob)
    }

    fn blobs(&mut self) -> Result<Vec<crate::store::BlobInfo>> {
        self.all_blobs()
    }

    fn delete_run(&mut self) -> Result<()> {
        let run = self.run()?.to_string();
        // The run's values have no foreign key to it (see the schema): deleted with it here.
        // Agents and their segments have no foreign key to the run either (the spec's
        // project agents share the tables, with no run).
        self.in_tx(|on| {
            for sql in [
                "DELETE FROM openprose.attachment_chunks WHERE run_id = $1",
                "DELETE FROM openprose.attachments WHERE run_id = $1",
                "DELETE FROM openprose.agent_segments WHERE run_id = $1",
                "DELETE FROM openprose.agents WHERE run_id = $1",
                "DELETE FROM openprose.agent_history WHERE run_id = $1",
                "DELETE FROM openprose.run WHERE id = $1",
                // After the run's bindings (deleted with the run), whose history goes with
                // them: a raw writer's deletion would have recorded tombstones in it.
                "DELETE FROM openprose.binding_history WHERE run_id = $1",
            ] {
                on.exec(sql, &[&run])?;
            }
            Ok(())
        })
    }
}

impl crate::store::Snapshot for PgStore {
    fn begin_read(&mut self) -> Result<bool> {
        if self.in_snapshot {
            return Ok(false);
        }
        self.begin_snapshot()?;
        Ok(true)
    }

    fn end_read(&mut self) -> Result<()> {
        if self.in_snapshot {
            self.client.batch_execute("COMMIT").map_err(self.err())?;
            self.in_snapshot = false;
        }
        Ok(())
    }
}
