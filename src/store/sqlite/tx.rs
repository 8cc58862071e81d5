//! A write transaction on a SQLite store: the single statements the rules run in it, each
//! with its row mapping (see `store::tx`).

use super::{audit_row, db_error, import_row, CommitWatch, Statements, AUDIT_COLUMNS};
use crate::model::{GateStatus, RunStatus};
use crate::store::dump::{AgentRecord, BindingRecord, GateRecord, RunRecord, SegmentRecord};
use crate::store::history::Kept;
use crate::store::tx::{KeyedExecution, Tx};
use crate::store::{AuditRow, ImportRow, NewGate};
use anyhow::{anyhow, Result};
use rusqlite::{params, Connection};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// A write transaction on a SQLite store. Every kind begins IMMEDIATE: the write lock is
/// taken before anything is read, so a writer never fails half-way on a lock upgrade, and
/// writers to one file are serialised.
pub struct SqliteTx<'a> {
    pub(super) tx: rusqlite::Transaction<'a>,
    pub(super) path: &'a Path,
    pub(super) busy_ms: u128,
    /// A run's state.db (an agents.db has no run).
    pub(super) is_state: bool,
    /// What watches the run's commits (the project catalog), for a run of a project.
    pub(super) watch: Option<&'a mut Box<dyn CommitWatch>>,
    pub(super) touched: &'a AtomicBool,
    /// What this transaction's reads already learned, for the writes after them (a bind's
    /// statements are few, and each one a process prepares costs it).
    pub(super) seen: Seen,
    pub(super) wiring: &'static crate::store::Wiring,
}

/// Reads a bind makes once, kept for the statements that follow them in its transaction.
#[derive(Default)]
pub(super) struct Seen {
    /// The run's bound on versions kept, read with the run's status.
    history_keep: Option<Option<i64>>,
    /// The number of a binding's newest version before the write (name, scope, n), read with
    /// its head.
    history_head: Option<(String, i64, Option<i64>)>,
}

impl SqliteTx<'_> {
    pub(super) fn wiring_of(&self) -> &'static crate::store::Wiring {
        self.wiring
    }
}

impl Statements for SqliteTx<'_> {
    fn conn(&self) -> &Connection {
        &self.tx
    }

    fn error(&self, e: rusqlite::Error) -> anyhow::Error {
        db_error(e, self.path, self.busy_ms)
    }
}

impl SqliteTx<'_> {
    /// A binding's write and the version it takes: the version number, higher than any in
    /// the file, and the history row that keeps it, with the newest record (`MAX(id)`, as
    /// every other writer of a version and the raw writers' triggers take it: readers order
    /// versions by it, so all writers must agree), attributed (`principal`; none: a copy's
    /// write), holding the step (`delta`) in place of the whole value for an `--append` or
    /// `--merge`. prose-state keeps its own writes' versions here, in the write's own
    /// transaction: the schema's triggers, which keep raw writers' versions, do not fire on
    /// its connections (`SqliteStore::connect`), so a version is never kept twice, never
    /// left unattributed, and a dropped trigger loses no write of prose-state's.
    fn write_binding(
        &mut self,
        b: &BindingRecord,
        principal: Option<&str>,
        delta: Option<&str>,
    ) -> Result<i64> {
        let name = b.name.as_deref().unwrap_or_default();
        let scope = b.execution_id.unwrap_or(-1);
        // The number of the binding's newest version, as the bind's read of its head found
        // it in this transaction (else read now): writers are serialised, so it stands.
        let newest = match self.seen.history_head.take() {
            Some((n, s, newest)) if n == name && s == scope => newest,
            _ => self.one(
                "SELECT (SELECT n FROM binding_history
                          WHERE name = ?1 AND IFNULL(execution_id, -1) = ?2
                          ORDER BY n DESC LIMIT 1)",
                params![name, scope],
                |r| r.get(0),
            )?,
        };
        self.exec(
            "INSERT INTO bindings (name, execution_id, kind, value, source_statement,
                                   created_at, updated_at, attachment_path, version)
             VALUES (?1, ?2, ?3, CAST(?4 AS TEXT), ?5, ?6, ?7, ?8,
                     (SELECT IFNULL(MAX(version), 0) + 1 FROM bindings))
             ON CONFLICT (name, IFNULL(execution_id, -1)) DO UPDATE SET
                 kind = excluded.kind,
                 value = excluded.value,
                 source_statement = excluded.source_statement,
                 attachment_path = excluded.attachment_path,
                 updated_at = excluded.updated_at,
                 version = excluded.version",
            params![
                b.name,
                b.execution_id,
                b.kind,
                b.value,
                b.source_statement,
                b.created_at,
                b.updated_at,
                b.attachment_path
            ],
        )?;
        // The binding's own version: the next of its history in its scope.
        let version = newest.unwrap_or(0) + 1;
        self.exec(
            "INSERT INTO binding_history (name, execution_id, n, kind, value, delta,
                                          attachment_path, source_statement, written_at,
                                          at_record, principal)
             VALUES (?1, ?2, ?3, ?4, CASE WHEN ?6 IS NULL THEN CAST(?5 AS TEXT) END, ?6, ?7, ?8,
                     ?10, (SELECT MAX(id) FROM execution), ?9)",
            params![
                b.name,
                b.execution_id,
                version,
                b.kind,
                b.value,
                delta,
                b.attachment_path,
                b.source_statement,
                principal,
                // The write's own time (the rule's), which its decision's event seals too.
                b.updated_at.clone().unwrap_or_else(crate::model::now)
            ],
        )?;
        Ok(version)
    }

    /// A run-scoped agent's version after prose-state wrote its row: kept when the agent is
    /// new, or its memory or scope differs from its newest version (what the schema's agent
    /// triggers keep for a raw writer). An agents.db keeps no history.
    fn keep_agent_version(&mut self, name: &str) -> Result<()> {
        if !self.is_state {
            return Ok(());
        }
        self.exec(
            "INSERT INTO agent_history (name, n, kind, value, written_at, at_record)
             SELECT a.name, IFNULL(h.n, 0) + 1, a.scope, a.memory, ?2,
                    (SELECT MAX(id) FROM execution)
               FROM agents a
               LEFT JOIN (SELECT n, kind, value, deleted FROM agent_history
                           WHERE name = ?1 ORDER BY n DESC LIMIT 1) h ON 1
              WHERE a.name = ?1
                AND (h.n IS NULL OR h.deleted = 1 OR h.kind IS NOT a.scope
                     OR h.value IS NOT a.memory)",
            params![name, crate::model::now()],
        )
    }
}

impl Tx for SqliteTx<'_> {
    fn require_team_readers(&mut self) -> Result<()> {
        let team = super::TEAM.stamp();
        let raw: i64 = self.one("PRAGMA user_version", [], |r| r.get(0))?;
        if self.is_state
            && crate::store::sqlite_schema::decode(raw).min_reader < super::TEAM.min_reader
        {
            self.exec(&format!("PRAGMA user_version = {team}"), [])?;
        }
        Ok(())
    }

    fn run_row(&mut self) -> Result<Option<(String, Option<RunStatus>)>> {
        if !self.is_state {
            return Ok(None);
        }
        let row = self.opt(
            "SELECT id, status, history_keep FROM run LIMIT 1",
            [],
            |r| {
                let status: Option<String> = r.get(1)?;
                Ok((
                    (r.get(0)?, status.as_deref().map(RunStatus::parse)),
                    r.get::<_, Option<i64>>(2)?,
                ))
            },
        )?;
        self.seen.history_keep = Some(row.as_ref().and_then(|r| r.1));
        Ok(row.map(|r| r.0))
    }

    fn history_keep(&mut self) -> Result<Option<i64>> {
        if !self.is_state {
            return Ok(None);
        }
        if let Some(keep) = self.seen.history_keep {
            return Ok(keep);
        }
        Ok(self
            .opt("SELECT history_keep FROM run LIMIT 1", [], |r| {
                r.get::<_, Option<i64>>(0)
            })?
            .flatten())
    }

    fn set_run_status(&mut self, status: &RunStatus, error: Option<&str>, now: &str) -> Result<()> {
        self.exec(
            "UPDATE run SET status = ?1, updated_at = ?2, error_message = IFNULL(?3, error_message)",
            params![status.as_str(), now, error],
        )
    }

    fn binding_head(
        &mut self,
        name: &str,
        execution_id: Option<i64>,
    ) -> Result<Option<crate::store::BindingHead>> {
        let scope = execution_id.unwrap_or(-1);
        // One row, the binding or not: its head, and the number of its newest version (for
        // the write that may follow: see `write_binding`), which the index on (name, scope, n)
        // finds in one seek.
        let (head, newest) = self
            .opt(
                "SELECT b.kind, b.attachment_path, b.version, h.n, b.source_statement
                   FROM (SELECT (SELECT n FROM binding_history
                                  WHERE name = ?1 AND IFNULL(execution_id, -1) = ?2
                                  ORDER BY n DESC LIMIT 1) AS n) h
                   LEFT JOIN bindings b ON b.name = ?1 AND IFNULL(b.execution_id, -1) = ?2",
                params![name, scope],
                |r| {
                    let version: Option<i64> = r.get(2)?;
                    let head = match version {
                        Some(v) => Some((
                            r.get(0)?,
                            r.get(1)?,
                            v,
                            r.get::<_, Option<String>>(4).ok().flatten(),
                        )),
                        None => None,
                    };
                    Ok((head, r.get::<_, Option<i64>>(3)?))
                },
            )?
            .unwrap_or((None, None));
        self.seen.history_head = Some((name.to_string(), scope, newest));
        Ok(head)
    }

    fn binding_own_version(
        &mut self,
        name: &str,
        execution_id: Option<i64>,
    ) -> Result<Option<i64>> {
        let scope = execution_id.unwrap_or(-1);
        // Read with the head already, in this transaction.
        if let Some((n, s, newest)) = &self.seen.history_head {
            if n == name && *s == scope {
                return Ok(*newest);
            }
        }
        self.one(
            "SELECT (SELECT n FROM binding_history
                      WHERE name = ?1 AND IFNULL(execution_id, -1) = ?2
                      ORDER BY n DESC LIMIT 1)",
            params![name, scope],
            |r| r.get(0),
        )
    }

    fn binding_value(&mut self, name: &str, execution_id: Option<i64>) -> Result<Option<String>> {
        self.opt(
            "SELECT CAST(value AS TEXT) FROM bindings
             WHERE name = ?1 AND IFNULL(execution_id, -1) = ?2",
            params![name, execution_id.unwrap_or(-1)],
            |r| r.get(0),
        )
        .map(Option::flatten)
    }

    fn put_binding(
        &mut self,
        binding: &BindingRecord,
        principal: Option<&str>,
        delta: Option<&str>,
    ) -> Result<i64> {
        self.write_binding(binding, principal, delta)
    }

    fn set_attachment_path(
        &mut self,
        name: &str,
        execution_id: Option<i64>,
        attachment_path: &str,
    ) -> Result<()> {
        // The same bytes kept elsewhere: not a new version (the triggers, which would have
        // made it one, do not fire for prose-state's connections).
        self.exec(
            "UPDATE bindings SET attachment_path = ?3
             WHERE name = ?1 AND IFNULL(execution_id, -1) = ?2",
            params![name, execution_id.unwrap_or(-1), attachment_path],
        )
    }

    fn keyed_execution(&mut self, key: &str) -> Result<Option<KeyedExecution>> {
        self.opt(
            "SELECT id, statement_index, statement_text, status, parent_id
             FROM execution WHERE idempotency_key = ?1",
            [key],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
    }

    fn reopen_gate(&mut self, g: &NewGate, execution_id: i64) -> Result<()> {
        self.exec(
            "UPDATE gates SET execution_id = ?2, prompt = ?3, allow = ?4, timeout = ?5,
                    timeout_at = ?6, on_reject = ?7, status = 'pending', created_at = ?8,
                    resolved_at = NULL, resolved_by = NULL, resolution_comment = NULL,
                    metadata = ?9, instance = instance + 1
              WHERE id = ?1",
            params![
                g.id,
                execution_id,
                g.prompt,
                g.allow,
                g.timeout,
                g.timeout_at,
                g.on_reject,
                g.now,
                g.metadata
            ],
        )
    }

    fn resolve_gate(
        &mut self,
        id: &str,
        status: &GateStatus,
        by: &str,
        comment: Option<&str>,
        at: &str,
    ) -> Result<()> {
        self.exec(
            "UPDATE gates SET status = ?2, resolved_at = ?3, resolved_by = ?4, resolution_comment = ?5
             WHERE id = ?1 AND status = 'pending'",
            params![id, status.as_str(), at, by, comment],
        )
    }

    fn set_gate_schedule(
        &mut self,
        id: &str,
        widened: Option<(&str, &str)>,
        remind_at: Option<&str>,
    ) -> Result<()> {
        let (allow, timeout_at) = widened.unzip();
        self.exec(
            "UPDATE gates SET allow = IFNULL(?2, allow), timeout_at = IFNULL(?3, timeout_at),
                 remind_at = ?4
             WHERE id = ?1 AND status = 'pending'",
            params![id, allow, timeout_at, remind_at],
        )
    }

    fn chain_head(&mut self) -> Result<(i64, String)> {
        self.one(
            "SELECT IFNULL((SELECT seq FROM gate_audit_log WHERE seq IS NOT NULL
                            ORDER BY seq DESC LIMIT 1), 0),
                    COALESCE((SELECT hash FROM gate_audit_log WHERE seq IS NOT NULL
                               ORDER BY seq DESC LIMIT 1),
                             (SELECT hash FROM gate_audit_log WHERE hash IS NOT NULL
                               ORDER BY id DESC LIMIT 1), '')",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
    }

    fn next_audit_id(&mut self) -> Result<i64> {
        // AUTOINCREMENT's own counter too: an id is never reused, even after rows were cut.
        self.one(
            "SELECT MAX(IFNULL((SELECT MAX(id) FROM gate_audit_log), 0),
                        IFNULL((SELECT seq FROM sqlite_sequence WHERE name = 'gate_audit_log'), 0)) + 1",
            [],
            |r| r.get(0),
        )
    }

    fn newest_record(&mut self) -> Result<Option<i64>> {
        self.one("SELECT MAX(id) FROM execution", [], |r| r.get(0))
    }

    fn insert_audit(&mut self, row: &AuditRow) -> Result<()> {
        self.exec(
            &format!("INSERT INTO gate_audit_log ({AUDIT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"),
            params![
                row.id,
                row.gate_id,
                row.run_id,
                row.event_type,
                row.principal,
                row.comment,
                row.timestamp,
                row.metadata,
                row.prev_hash,
                row.hash,
                row.seq,
                row.seal
            ],
        )
    }

    fn unsealed_audit(&mut self) -> Result<Vec<AuditRow>> {
        self.all(
            &format!("SELECT {AUDIT_COLUMNS} FROM gate_audit_log WHERE seq IS NULL ORDER BY id"),
            [],
            audit_row,
        )
    }

    fn import(&mut self, alias: &str) -> Result<Option<ImportRow>> {
        self.opt(
            "SELECT alias, source_url, fetched_at, inputs_schema, outputs_schema
             FROM imports WHERE alias = ?1",
            [alias],
            import_row,
        )
    }

    fn put_import(&mut self, import: &ImportRow) -> Result<()> {
        self.exec(
            "INSERT INTO imports (alias, source_url, fetched_at, inputs_schema, outputs_schema)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (alias) DO UPDATE SET source_url = excluded.source_url,
                 fetched_at = excluded.fetched_at, inputs_schema = excluded.inputs_schema,
                 outputs_schema = excluded.outputs_schema",
            params![
                import.alias,
                import.source_url,
                import.fetched_at,
                import.inputs_schema,
                import.outputs_schema
            ],
        )
    }

    fn touch_agent(&mut self, name: &str, scope: &str, now: &str) -> Result<()> {
        self.exec(
            "INSERT INTO agents (name, scope, created_at, updated_at) VALUES (?1, ?2, ?3, ?3)
             ON CONFLICT (name) DO UPDATE SET updated_at = excluded.updated_at",
            params![name, scope, now],
        )?;
        self.keep_agent_version(name)
    }

    fn next_segment_number(&mut self, name: &str) -> Result<i64> {
        self.one(
            "SELECT IFNULL(MAX(segment_number), 0) + 1 FROM agent_segments WHERE agent_name = ?1",
            [name],
            |r| r.get(0),
        )
    }

    fn keeps_ids(&self) -> bool {
        true
    }

    fn put_run(&mut self, r: &RunRecord) -> Result<()> {
        self.exec(
            "INSERT INTO run (id, program_path, program_source, started_at, updated_at, status,
                              error_message)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (id) DO UPDATE SET program_path = ?2, program_source = ?3,
                 started_at = ?4, updated_at = ?5, status = ?6, error_message = ?7",
            params![
                r.id,
                r.program_path,
                r.program_source,
                r.started_at,
                r.updated_at,
                r.status,
                r.error_message
            ],
        )
    }

    fn clear_run(&mut self) -> Result<()> {
        // A run's file is replaced whole (a new directory), never cleared in place.
        Err(anyhow!("a SQLite run is replaced by a new directory"))
    }

    fn versions_kept(&mut self, kept: Kept, name: &str, execution_id: Option<i64>) -> Result<i64> {
        self.one(
            &format!(
                "SELECT COUNT(*) FROM {} WHERE name = ?1 AND IFNULL(execution_id, -1) = ?2",
                kept.table()
            ),
            params![name, execution_id.unwrap_or(-1)],
            |r| r.get(0),
        )
    }

    fn history_over(&mut self, kept: Kept, keep: i64) -> Result<Vec<(String, Option<i64>)>> {
        self.all(
            &format!(
                "SELECT name, execution_id FROM {}
                 GROUP BY name, IFNULL(execution_id, -1) HAVING COUNT(*) > ?1
                 ORDER BY name, IFNULL(execution_id, -1)",
                kept.table()
            ),
            [keep],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
    }

    fn cut_history(
        &mut self,
        kept: Kept,
        name: &str,
        execution_id: Option<i64>,
        n: i64,
        value: Option<Option<&[u8]>>,
    ) -> Result<()> {
        let scope = execution_id.unwrap_or(-1);
        let table = kept.table();
        self.exec(
            &format!(
                "DELETE FROM {table} WHERE name = ?1 AND IFNULL(execution_id, -1) = ?2 AND n < ?3"
            ),
            params![name, scope, n],
        )?;
        self.exec(
            &format!(
                "UPDATE {table} SET gap = 1,
                 value = CASE WHEN ?4 THEN CAST(?5 AS TEXT) ELSE value END,
                 delta = CASE WHEN ?4 THEN NULL ELSE delta END
             WHERE name = ?1 AND IFNULL(execution_id, -1) = ?2 AND n = ?3"
            ),
            params![name, scope, n, value.is_some(), value.flatten()],
        )
    }

    fn relink_history(&mut self, old: &str, new: &str) -> Result<()> {
        self.exec(
            "UPDATE binding_history SET attachment_path = ?2, value = replace(value, ?1, ?2)
             WHERE attachment_path = ?1",
            params![old, new],
        )
    }

    fn clear_history(&mut self, kept: Kept) -> Result<()> {
        self.exec(&format!("DELETE FROM {}", kept.table()), [])
    }

    fn put_history(&mut self, kept: Kept, h: &crate::store::history::HistoryRow) -> Result<()> {
        self.exec(
            &format!(
                "INSERT INTO {} (name, execution_id, n, kind, value, delta, attachment_path,
                     source_statement, written_at, at_record, principal, deleted, gap)
                 VALUES (?1, ?2, ?3, ?4, CAST(?5 AS TEXT), ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                kept.table()
            ),
            params![
                h.name,
                h.execution_id,
                h.n,
                h.kind,
                h.value,
                h.delta,
                h.attachment_path,
                h.source_statement,
                h.written_at,
                h.at_record,
                h.principal,
                h.deleted as i64,
                h.gap as i64
            ],
        )
    }

    fn mark_history_gap(&mut self, kept: Kept) -> Result<()> {
        let table = kept.table();
        self.exec(
            &format!(
                "UPDATE {table} SET gap = 1, written_at = NULL WHERE seq IN
                     (SELECT MIN(seq) FROM {table} GROUP BY name, IFNULL(execution_id, -1))"
            ),
            [],
        )
    }

    fn missing_triggers(&mut self) -> Result<Vec<String>> {
        let sql = if self.is_state {
            super::STATE.sql
        } else {
            super::AGENTS.sql
        };
        missing_triggers(self.conn(), sql).map_err(|e| self.error(e))
    }

    fn make_triggers(&mut self, missing: &[String]) -> Result<()> {
        let sql = if self.is_state {
            super::STATE.sql
        } else {
            super::AGENTS.sql
        };
        for (name, statement) in crate::store::schema_triggers(sql) {
            if missing.iter().any(|m| m == name) {
                self.exec(statement, [])?;
            }
        }
        Ok(())
    }

    fn resume_history(&mut self, kept: Kept, now: &str) -> Result<()> {
        let [current, gone] = match kept {
            Kept::Bindings => [
                "INSERT INTO binding_history (name, execution_id, n, kind, value, attachment_path,
                                              source_statement, written_at, at_record, gap)
                 SELECT c.name, c.execution_id,
                        (SELECT IFNULL(MAX(h.n), 0) + 1 FROM binding_history h
                          WHERE h.name = c.name
                            AND IFNULL(h.execution_id, -1) = IFNULL(c.execution_id, -1)),
                        c.kind, c.value, c.attachment_path, c.source_statement, ?1,
                        (SELECT MAX(id) FROM execution), 1
                 FROM bindings c",
                "INSERT INTO binding_history (name, execution_id, n, kind, written_at, at_record,
                                              deleted, gap)
                 SELECT h.name, h.execution_id, h.n + 1, h.kind, ?1,
                        (SELECT MAX(id) FROM execution), 1, 1
                 FROM binding_history h
                 WHERE h.deleted = 0
                   AND h.n = (SELECT MAX(h2.n) FROM binding_history h2 WHERE h2.name = h.name
                               AND IFNULL(h2.execution_id, -1) = IFNULL(h.execution_id, -1))
                   AND NOT EXISTS (SELECT 1 FROM bindings c WHERE c.name = h.name
                                     AND IFNULL(c.execution_id, -1) = IFNULL(h.execution_id, -1))",
            ],
            Kept::Agents => [
                "INSERT INTO agent_history (name, n, kind, value, written_at, at_record, gap)
                 SELECT c.name,
                        (SELECT IFNULL(MAX(h.n), 0) + 1 FROM agent_history h
                          WHERE h.name = c.name),
                        c.scope, c.memory, ?1, (SELECT MAX(id) FROM execution), 1
                 FROM agents c",
                "INSERT INTO agent_history (name, n, kind, written_at, at_record, deleted, gap)
                 SELECT h.name, h.n + 1, h.kind, ?1, (SELECT MAX(id) FROM execution), 1, 1
                 FROM agent_history h
                 WHERE h.deleted = 0
                   AND h.n = (SELECT MAX(h2.n) FROM agent_history h2 WHERE h2.name = h.name)
                   AND NOT EXISTS (SELECT 1 FROM agents c WHERE c.name = h.name)",
            ],
        };
        // Deletions first: a name held now is never one the second statement would see gone.
        self.exec(gone, [now])?;
        self.exec(current, [now])
    }

    fn put_execution(
        &mut self,
        id: Option<i64>,
        e: &crate::store::ExecutionRow,
    ) -> Result<Option<i64>> {
        // Writers are serialised here, so a key looked up absent stays absent.
        self.exec(
            "INSERT INTO execution (id, statement_index, statement_text, status, started_at,
                                    completed_at, error_message, parent_id, metadata,
                                    idempotency_key, principal)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                id,
                e.statement_index,
                e.statement_text,
                e.status.as_ref().map(|s| s.as_str()),
                e.started_at,
                e.completed_at,
                e.error_message,
                e.parent_id,
                e.metadata,
                e.idempotency_key,
                e.principal
            ],
        )?;
        Ok(Some(self.tx.last_insert_rowid()))
    }

    fn put_gate(&mut self, g: &GateRecord, instance: bool) -> Result<()> {
        let table = if instance { "gate_instances" } else { "gates" };
        let id = if instance { "gate_id" } else { "id" };
        self.exec(
            &format!(
                "INSERT INTO {table} ({id}, instance, run_id, execution_id, prompt, allow,
                     timeout, timeout_at, on_reject, status, created_at, resolved_at,
                     resolved_by, resolution_comment, metadata)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"
            ),
            params![
                g.id,
                g.instance,
                g.run_id,
                g.execution_id,
                g.prompt,
                g.allow,
                g.timeout,
                g.timeout_at,
                g.on_reject,
                g.status.as_ref().map(GateStatus::as_str),
                g.created_at,
                g.resolved_at,
                g.resolved_by,
                g.resolution_comment,
                g.metadata
            ],
        )
    }

    fn put_agent(&mut self, a: &AgentRecord) -> Result<()> {
        self.exec(
            "INSERT INTO agents (name, scope, memory, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (name) DO UPDATE SET
                 scope = excluded.scope, memory = excluded.memory, updated_at = excluded.updated_at",
            params![a.name, a.scope, a.memory, a.created_at, a.updated_at],
        )?;
        self.keep_agent_version(&a.name)
    }

    fn put_segment(&mut self, g: &SegmentRecord) -> Result<()> {
        // An agents.db (project and user memory) has no `at_record`: it belongs to no run. A
        // run's segment records the newest record when it was appended, unless a copy says.
        self.exec(
            if self.is_state {
                "INSERT INTO agent_segments (agent_name, segment_number, timestamp, prompt,
                                             summary, at_record)
                 VALUES (?1, ?2, ?3, ?4, ?5, IFNULL(?6, (SELECT MAX(id) FROM execution)))"
            } else {
                "INSERT INTO agent_segments (agent_name, segment_number, timestamp, prompt,
                                             summary)
                 VALUES (?1, ?2, ?3, ?4, ?5)"
            },
            params![
                g.agent_name,
                g.segment_number,
                g.timestamp,
                g.prompt,
                g.summary,
                g.at_record
            ]
            .get(..if self.is_state { 6 } else { 5 })
            .unwrap_or_default(),
        )
    }

    fn audit_at_seq(&mut self, seq: i64) -> Result<Option<Option<String>>> {
        self.opt(
            "SELECT hash FROM gate_audit_log WHERE seq = ?1",
            [seq],
            |r| r.get(0),
        )
    }

    fn commit(self: Box<Self>) -> Result<()> {
        let SqliteTx {
            tx,
            path,
            busy_ms,
            mut watch,
            touched,
            ..
        } = *self;
        // Under the write lock, before the commit: a watcher (the catalog) takes what it needs
        // to learn of the change even if this process dies right after the commit.
        let watched = touched.load(Ordering::Relaxed);
        if let (true, Some(w)) = (watched, watch.as_mut()) {
            w.before_commit(&tx);
        }
        tx.commit().map_err(|e| db_error(e, path, busy_ms))?;
        if let (true, Some(w)) = (watched, watch) {
            w.after_commit();
        }
        Ok(())
    }
}

/// The triggers of `schema_sql` that `c`'s database does not hold.
pub(in crate::store) fn missing_triggers(
    c: &Connection,
    schema_sql: &str,
) -> rusqlite::Result<Vec<String>> {
    let mut held = c.prepare("SELECT name FROM sqlite_master WHERE type = 'trigger'")?;
    let held: Vec<String> = held
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(crate::store::schema_triggers(schema_sql)
        .into_iter()
        .map(|(name, _)| name.to_string())
        .filter(|name| !held.contains(name))
        .collect())
}
