//! `impl AgentStore` and `impl Store` for [`SqliteStore`]: its transactions, and the run's
//! reads and upkeep outside one.

use crate::error::{refused, shown, usage};
use crate::store::dump::{Cells, RunDump};
use crate::store::sqlite_schema;
use crate::store::tx::{Tx, TxKind};
use crate::store::{
    Access, AgentRow, AgentStore, BindingRow, Checkpointed, ExecutionRow, Found, ImportRow,
    Migration, QueryResult, RunInfo, RunSummary, Store, StoreStats,
};
use anyhow::{anyhow, Result};
use rusqlite::{params, Row, TransactionBehavior};
use std::path::Path;
use std::sync::atomic::Ordering;

use super::{
    agent_row, binding_row, db_error, dump, import_row, run_info_at, tx, SqliteStore, SqliteTx,
    Statements, AGENT_SELECT, AGENT_SELECT_PROJECT, BINDING_COLUMNS, CHAIN, DUE, OVERDUE, STATE,
    WATCHED,
};

impl AgentStore for SqliteStore {
    fn begin(&mut self, _kind: TxKind) -> Result<Box<dyn Tx + '_>> {
        self.prepare_write()?;
        let is_state = std::ptr::eq(self.schema, &STATE);
        if is_state && self.watch.is_none() {
            self.watch = self
                .opts
                .wiring
                .watcher()
                .and_then(|w| w(&self.path, self.opts));
        }
        // Which statements a watcher must hear of is said once, by the tables they change.
        self.touched.store(false, Ordering::Relaxed);
        if self.watch.is_some() {
            let touched = self.touched.clone();
            self.conn
                .update_hook(Some(
                    move |_: rusqlite::hooks::Action, _: &str, table: &str, _: i64| {
                        if WATCHED.contains(&table) {
                            touched.store(true, Ordering::Relaxed);
                        }
                    },
                ))
                .map_err(|e| self.error(e))?;
        }
        let busy_ms = self.busy_ms();
        let SqliteStore {
            conn,
            path,
            watch,
            touched,
            opts,
            ..
        } = self;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| db_error(e, path, busy_ms))?;
        Ok(Box::new(SqliteTx {
            tx,
            path,
            busy_ms,
            is_state,
            watch: watch.as_mut(),
            touched,
            seen: Default::default(),
            wiring: opts.wiring,
        }))
    }

    fn agent_rows(&mut self, name: Option<&str>) -> Result<Vec<AgentRow>> {
        let select = match self.segments_follow_records() {
            true => AGENT_SELECT,
            false => AGENT_SELECT_PROJECT,
        };
        match name {
            Some(name) => self.all(&format!("{select} WHERE a.name = ?1"), [name], agent_row),
            None => self.all(select, [], agent_row),
        }
    }

    fn segment_agents(&mut self) -> Result<Vec<AgentRow>> {
        let at_record = match self.segments_follow_records() {
            true => "MAX(at_record)",
            false => "NULL",
        };
        self.all(
            &format!(
                "SELECT agent_name, NULL, NULL, MIN(timestamp), MAX(timestamp), COUNT(*), {at_record}
                   FROM agent_segments WHERE agent_name IS NOT NULL GROUP BY agent_name"
            ),
            [],
            agent_row,
        )
    }
}

impl Store for SqliteStore {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn containment(&self) -> Option<String> {
        self.writes_refused.clone()
    }

    fn place(&self) -> String {
        std::fs::canonicalize(&self.path)
            .unwrap_or_else(|_| self.path.clone())
            .display()
            .to_string()
    }

    fn binding_location(&self, name: &str, execution_id: Option<i64>) -> String {
        let scope = execution_id.map_or_else(|| "NULL".to_string(), |id| id.to_string());
        format!(
            "{} (bindings table, name='{name}', execution_id={scope})",
            self.path.display()
        )
    }

    fn changes(&self) -> Box<dyn crate::store::wake::Changes> {
        crate::store::wake::watch(&self.path)
    }

    fn binding_versions(
        &mut self,
        name: &str,
        execution_id: Option<i64>,
        which: crate::store::history::Versions,
    ) -> Result<crate::store::history::Span> {
        use crate::store::history::{HistoryRow, Span, Versions, COLUMNS};
        const KEY: &str = "name = ?1 AND IFNULL(execution_id, -1) = ?2";
        let scope = execution_id.unwrap_or(-1);
        let read = |r: &Row| Ok(HistoryRow::read(r));
        let (total, last_n): (i64, Option<i64>) = self.one(
            &format!("SELECT COUNT(*), MAX(n) FROM binding_history WHERE {KEY}"),
            params![name, scope],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let first = self.opt(
            &format!("SELECT {COLUMNS} FROM binding_history WHERE {KEY} ORDER BY n LIMIT 1"),
            params![name, scope],
            read,
        )?;
        let rows = match which {
            Versions::Page { before, limit } => self.all(
                &format!(
                    "SELECT {COLUMNS} FROM binding_history
                      WHERE {KEY} AND (?3 IS NULL OR n < ?3) ORDER BY n DESC LIMIT ?4"
                ),
                params![name, scope, before, limit],
                read,
            )?,
            Versions::Rebuilding(n) => self.all(
                &format!(
                    "SELECT {COLUMNS} FROM binding_history
                      WHERE {KEY} AND n <= ?3
                        AND n >= IFNULL((SELECT MAX(n) FROM binding_history
                                          WHERE {KEY} AND n <= ?3 AND delta IS NULL), 0)
                      ORDER BY n"
                ),
                params![name, scope, n],
                read,
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
        self.all(
            // A scope raw SQL wrote as other than an integer reads as 0, which is no
            // execution's (the reader judges it), rather than failing the read.
            "SELECT DISTINCT CASE typeof(execution_id) WHEN 'integer' THEN execution_id
                    WHEN 'null' THEN NULL ELSE 0 END FROM binding_history WHERE name = ?1",
            [name],
            |r| r.get(0),
        )
    }

    // Scope resolution, part of the contract: the nearest scope wins. The chain starts at
    // the given execution and follows parent_id upward; a binding whose execution_id is in
    // the chain is taken from the smallest depth; the root scope (execution_id IS NULL) is
    // searched last. The join uses the expression of the unique index, so each step of the
    // chain is one index probe.
    fn resolve(&mut self, name: &str, execution_id: Option<i64>) -> Result<Option<Found>> {
        if let Some(start) = execution_id {
            let found = self.opt(
                &format!(
                    "{CHAIN} SELECT {BINDING_COLUMNS}, c.depth
                     FROM chain c JOIN bindings b
                       ON b.name = ?3 AND IFNULL(b.execution_id, -1) = c.id
                     ORDER BY c.depth
                     LIMIT 1"
                ),
                params![start, crate::store::MAX_SCOPE_DEPTH, name],
                |r| {
                    Ok(Found {
                        row: binding_row(r)?,
                        depth: Some(r.get::<_, i64>(10)? as u64),
                    })
                },
            )?;
            if found.is_some() {
                return Ok(found);
            }
        }
        self.opt(
            &format!(
                "SELECT {BINDING_COLUMNS} FROM bindings b
                 WHERE b.name = ?1 AND IFNULL(b.execution_id, -1) = -1"
            ),
            [name],
            |r| {
                Ok(Found {
                    row: binding_row(r)?,
                    depth: None,
                })
            },
        )
    }

    fn query_readonly(&mut self, sql: &str, limit: std::time::Duration) -> Result<QueryResult> {
        self.sandboxed_query(sql, limit)
    }

    fn run_info(&mut self) -> Result<RunInfo> {
        self.opt(
            "SELECT id, program_path, status, started_at, updated_at FROM run LIMIT 1",
            [],
            |r| run_info_at(r, 0),
        )?
        .ok_or_else(|| anyhow!("state db has no run row: {}", self.path.display()))
    }

    fn any_overdue(&mut self, now: &str) -> Result<bool> {
        self.one(
            &format!("SELECT EXISTS (SELECT 1 FROM gates WHERE {DUE})"),
            [now],
            |r| r.get(0),
        )
    }

    fn run_summary(&mut self, now: &str) -> Result<RunSummary> {
        let run = self.run_info()?;
        let (error_message, last_event_at, pending_gates) = self.one(
            &format!(
                "SELECT (SELECT error_message FROM run LIMIT 1),
                        (SELECT MAX(COALESCE(completed_at, started_at)) FROM execution),
                        (SELECT COUNT(*) FROM gates WHERE status = 'pending' AND NOT ({OVERDUE}))"
            ),
            [now],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        Ok(RunSummary {
            run,
            error_message,
            last_event_at,
            pending_gates,
        })
    }

    fn imports(&mut self) -> Result<Vec<ImportRow>> {
        self.all(
            "SELECT alias, source_url, fetched_at, inputs_schema, outputs_schema
             FROM imports ORDER BY alias",
            [],
            import_row,
        )
    }

    fn executions_matching(&mut self, q: &crate::store::ExecQuery) -> Result<Vec<ExecutionRow>> {
        let (tail, params) = q.sql("", false, |i| format!("?{}", i + 1));
        self.all(
            &format!(
                "SELECT {} FROM execution {tail}",
                crate::store::dump::EXECUTION_COLUMNS
            ),
            rusqlite::params_from_iter(params),
            // Read as a dump reads it: a cell raw SQL gave another type never fails the read.
            |r| Ok(ExecutionRow::read(r)),
        )
    }

    fn bindings_page(
        &mut self,
        chain: &[i64],
        after: Option<&str>,
        names: i64,
    ) -> Result<Vec<BindingRow>> {
        // The scope key is the unique index's own expression, so the names are read from the
        // index in order and only the page's rows are fetched.
        let scopes = crate::store::scope_list(chain);
        self.all(
            &format!(
                "SELECT {BINDING_COLUMNS} FROM bindings b
                 WHERE IFNULL(b.execution_id, -1) IN ({scopes}) AND b.name IN (
                     SELECT DISTINCT name FROM bindings
                     WHERE IFNULL(execution_id, -1) IN ({scopes}) AND name > ?1
                     ORDER BY name LIMIT ?2)
                 ORDER BY b.name"
            ),
            params![after.unwrap_or(""), names],
            binding_row,
        )
    }

    fn resume_counts(&mut self, chain: &[i64]) -> Result<crate::store::ResumeCounts> {
        // Visible: every root binding, and the names of the chain's scopes the root lacks.
        let chain_list = crate::store::id_list(chain);
        self.one(
            &format!(
                "SELECT (SELECT COUNT(*) FROM execution), (SELECT COUNT(*) FROM bindings),
                        (SELECT COUNT(*) FROM bindings WHERE execution_id IS NOT NULL),
                        (SELECT COUNT(DISTINCT name) FROM bindings b
                         WHERE b.execution_id IN ({chain_list}) AND NOT EXISTS (
                             SELECT 1 FROM bindings r
                             WHERE r.name = b.name AND IFNULL(r.execution_id, -1) = -1)),
                        (SELECT error_message FROM run LIMIT 1)"
            ),
            [],
            |r| {
                let (records, bindings, scoped, chain_only): (i64, i64, i64, i64) =
                    (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
                Ok(crate::store::ResumeCounts {
                    error_message: r.get(4)?,
                    records,
                    bindings,
                    bindings_visible: bindings - scoped + chain_only,
                })
            },
        )
    }

    fn bindings(&mut self) -> Result<Vec<BindingRow>> {
        self.all(
            &format!(
                "SELECT {BINDING_COLUMNS} FROM bindings b ORDER BY IFNULL(b.execution_id, -1), b.name"
            ),
            [],
            binding_row,
        )
    }

    fn stats(&mut self) -> Result<StoreStats> {
        let mut st = StoreStats {
            backend: "sqlite",
            schema_version: self.version,
            db_bytes: std::fs::metadata(&self.path).ok().map(|m| m.len()),
            wal_bytes: {
                let mut wal = self.path.clone().into_os_string();
                wal.push("-wal");
                Some(std::fs::metadata(wal).map_or(0, |m| m.len()))
            },
            ..Default::default()
        };
        for table in crate::store::STATS_TABLES {
            // Table names are this fixed list, never input.
            let n: i64 = self
                .one(&format!("SELECT COUNT(*) FROM \"{table}\""), [], |r| {
                    r.get(0)
                })
                .unwrap_or(0);
            st.tables.insert(table.to_string(), n);
        }
        let rows: Vec<(String, i64)> = self.all(
            "SELECT IFNULL(status, '?'), COUNT(*) FROM execution GROUP BY 1 ORDER BY 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        st.execution_status = rows.into_iter().collect();
        st.binding_inline_bytes = self.one(
            "SELECT IFNULL(SUM(length(CAST(value AS BLOB))), 0) FROM bindings",
            [],
            |r| r.get(0),
        )?;
        for pragma in [
            "journal_mode",
            "busy_timeout",
            "synchronous",
            "foreign_keys",
            "wal_autocheckpoint",
        ] {
            let v: String = self.one(&format!("PRAGMA {pragma}"), [], |r| {
                Ok(r.text(0).unwrap_or_default())
            })?;
            let v = match (pragma, v.as_str()) {
                ("synchronous", "2") => "2 (FULL)".to_string(),
                ("synchronous", "1") => "1 (NORMAL)".to_string(),
                ("synchronous", "0") => "0 (OFF)".to_string(),
                _ => v,
            };
            st.settings.insert(pragma.to_string(), v);
        }
        Ok(st)
    }

    fn health(&mut self) -> Result<Vec<String>> {
        let lines: Vec<String> = self.all("PRAGMA integrity_check", [], |r| r.get(0))?;
        let mut problems: Vec<String> = lines
            .into_iter()
            .filter(|l| l != "ok")
            .map(|l| format!("integrity: {l}"))
            .collect();
        let fks: Vec<(String, Option<i64>, String)> =
            self.all("PRAGMA foreign_key_check", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?;
        problems.extend(fks.into_iter().map(|(table, rowid, parent)| {
            format!(
                "foreign key: {table} row {} points at a missing {parent} row",
                rowid.map_or("?".into(), |r| r.to_string())
            )
        }));
        Ok(problems)
    }

    fn missing_triggers(&mut self) -> Result<Vec<String>> {
        // An older file is upgraded by its first write; a newer one's triggers are its own.
        if self.access != Access::Current {
            return Ok(Vec::new());
        }
        tx::missing_triggers(&self.conn, self.schema.sql).map_err(|e| self.error(e))
    }

    fn checkpoint(&mut self, mode: &str) -> Result<Checkpointed> {
        let mode = mode.to_ascii_uppercase();
        if !matches!(mode.as_str(), "PASSIVE" | "FULL" | "RESTART" | "TRUNCATE") {
            return Err(usage(format!("unknown checkpoint mode: {}", shown(&mode))));
        }
        // The mode is one of four fixed words, checked above.
        let (busy, log, done): (i64, i64, i64) =
            self.one(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?;
        Ok(Checkpointed {
            mode: mode.to_ascii_lowercase(),
            busy: busy != 0,
            wal_frames: log,
            checkpointed_frames: done,
        })
    }

    fn vacuum(&mut self) -> Result<(Option<u64>, Option<u64>)> {
        if let Some(why) = &self.writes_refused {
            return Err(refused(why.clone()));
        }
        let size = |p: &Path| std::fs::metadata(p).ok().map(|m| m.len());
        let before = size(&self.path);
        self.conn
            .execute_batch("VACUUM")
            .map_err(|e| self.error(e))?;
        let _ = self.one("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        Ok((before, size(&self.path)))
    }

    fn migrate(&mut self, apply: bool) -> Result<Migration> {
        let (from, older) = (self.version, self.access == Access::Older);
        let steps: Vec<String> = match older {
            true => sqlite_schema::plan(&self.conn, self.schema)?
                .into_iter()
                .map(|s| s.action)
                .collect(),
            false => Vec::new(),
        };
        let applied = apply && older;
        if applied {
            if let Some(why) = &self.writes_refused {
                return Err(refused(why.clone()));
            }
            self.upgrade(true)?;
        }
        let to = if older { self.schema.version } else { from };
        Ok(Migration {
            from,
            to,
            steps,
            applied,
        })
    }

    fn snapshot(&mut self) -> Result<()> {
        if self.conn.is_autocommit() {
            // A read transaction: its snapshot starts at its first read, made here. The
            // connection is not kept after it.
            self.poolable = false;
            self.conn
                .execute_batch("BEGIN DEFERRED; SELECT COUNT(*) FROM run;")
                .map_err(|e| self.error(e))?;
        }
        Ok(())
    }

    fn dump(&mut self) -> Result<RunDump> {
        if self.access == Access::Older {
            return Err(refused(format!(
                "db has schema version {}, older than this prose-state's {}: run `prose-state migrate --run ...` on it first (a copy reads every column of the current schema): {}",
                self.version,
                self.schema.version,
                self.path.display()
            )));
        }
        dump::dump_rows(self)
    }

    fn delete_run(&mut self) -> Result<()> {
        Ok(())
    }
}

impl crate::store::Snapshot for SqliteStore {
    fn begin_read(&mut self) -> Result<bool> {
        if !self.conn.is_autocommit() {
            return Ok(false);
        }
        // Its snapshot starts at its first read, made here.
        self.conn
            .execute_batch("BEGIN DEFERRED; SELECT COUNT(*) FROM run;")
            .map_err(|e| self.error(e))?;
        Ok(true)
    }

    fn end_read(&mut self) -> Result<()> {
        if !self.conn.is_autocommit() {
            self.conn
                .execute_batch("COMMIT")
                .map_err(|e| self.error(e))?;
        }
        Ok(())
    }
}
