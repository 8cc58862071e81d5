//! A transaction on the server: the single statements the rules run in it, each with its
//! row mapping (see `store::tx`).

use super::{audit_row, blobs, committed, import_row, map_err, Params, Statements, AUDIT_SELECT};
use crate::error::{not_found, refused, shown};
use crate::model::{GateStatus, RunStatus};
use crate::store::dump::{AgentRecord, BindingRecord, GateRecord, RunRecord, SegmentRecord};
use crate::store::history::Kept;
use crate::store::tx::{KeyedExecution, Tx, TxKind};
use crate::store::{AuditRow, ImportRow, NewGate};
use anyhow::{anyhow, Result};
use postgres::types::{ToSql, Type};
use postgres::{Row, Transaction};

/// The advisory lock space of imports (two-key form), keyed by the run id's hash.
const IMPORT_LOCK: i32 = 0x7072_6f69;

/// A transaction on the server. A run's writes hold its row `FOR SHARE` (parallel branches
/// never wait on each other) or `FOR UPDATE` (serialised: gates, the audit chain, finish);
/// project-scoped agent memory has no run row to hold.
pub struct PgTx<'a> {
    pub(super) tx: Transaction<'a>,
    pub(super) run_id: Option<String>,
    /// The run's id and status, read when its row was locked.
    pub(super) run: Option<(String, Option<RunStatus>)>,
    /// The run's `history_keep`, read with it.
    pub(super) history_keep: Option<i64>,
    pub(super) shown_url: &'a str,
    pub(super) busy_ms: u64,
    /// Statements prepared in this transaction, for the ones a copy of a run runs once a row
    /// (10,000 bindings: one round trip each instead of two).
    pub(super) prepared: std::collections::HashMap<&'static str, postgres::Statement>,
    /// The binding (name, scope) whose row this transaction holds `FOR UPDATE` (read by
    /// `binding_head`): its writers wait for this one, and this one saw theirs committed.
    pub(super) held: Option<(String, i64)>,
    /// In a long-lived process, the statements kept prepared on the session: a write it
    /// makes again and again is planned once (a one-shot command's statements are typed and
    /// unnamed instead, one round trip each).
    pub(super) kept: Option<&'a mut super::Prepared>,
    pub(super) wiring: &'static crate::store::Wiring,
}

impl PgTx<'_> {
    /// `sql` prepared once in this transaction.
    fn prepared(&mut self, sql: &'static str) -> Result<postgres::Statement> {
        if let Some(s) = self.prepared.get(sql) {
            return Ok(s.clone());
        }
        let s = self.on(|c| c.prepare(sql))?;
        self.prepared.insert(sql, s.clone());
        Ok(s)
    }

    /// Runs `sql`, prepared once in this transaction.
    fn exec_prepared(&mut self, sql: &'static str, p: Params) -> Result<()> {
        let stmt = self.prepared(sql)?;
        self.exec(&stmt, p)
    }

    /// A binding's write and the version it takes: the version number from the sequence
    /// every write of the server draws on, and the history row that keeps it, attributed
    /// (`principal`; none: a copy's write), holding the step (`delta`) in place of the whole
    /// value for an `--append` or `--merge`, and the run's waiters told. prose-state keeps its
    /// own writes' versions here, in the write's own transaction: the schema's triggers, which
    /// keep raw writers' versions, do not fire for its sessions (`openprose.writer`, set when
    /// a session starts), so a version is never kept twice or left unattributed, and a write
    /// loads no PL/pgSQL. The version's number is taken by a statement that sees every
    /// version committed before it: one statement when `binding_head` already holds the row
    /// (a rebind), else a second after the upsert holds it (a first write may meet a
    /// concurrent one). A copy's writes (many a transaction) are prepared once.
    fn write_binding(
        &mut self,
        b: &BindingRecord,
        principal: Option<&str>,
        delta: Option<&str>,
    ) -> Result<i64> {
        // One parameter list for the three statements: $1 name, $2 run, $3 scope, $4 kind,
        // $5 value, $6 source statement, $7 created, $8 updated, $9 attachment (the upsert's),
        // $10 step, $11 principal (the version's), $12 now (the version's time).
        macro_rules! upsert {
            () => {
                "INSERT INTO openprose.bindings (name, run_id, execution_id, kind, value,
                     source_statement, created_at, updated_at, attachment_path, version)
                 VALUES ($1, $2, $3, $4, $5, $6, COALESCE(($7::text)::timestamptz, now()),
                         COALESCE(($8::text)::timestamptz, now()), $9,
                         nextval('openprose.binding_version_seq'))
                 ON CONFLICT (name, run_id, (COALESCE(execution_id, -1))) DO UPDATE SET
                     kind = excluded.kind, value = excluded.value,
                     source_statement = excluded.source_statement,
                     attachment_path = excluded.attachment_path,
                     updated_at = excluded.updated_at, version = excluded.version
                 RETURNING version"
            };
        }
        macro_rules! keep_version {
            ($from:literal) => {
                concat!(
                    "INSERT INTO openprose.binding_history (run_id, name, execution_id, n, kind,
                         value, delta, attachment_path, source_statement, written_at, at_record,
                         principal)
                     SELECT $2::text, $1::text, $3::bigint,
                            (SELECT COALESCE(MAX(h.n), 0) + 1 FROM openprose.binding_history h
                              WHERE h.run_id = $2 AND h.name = $1
                                AND COALESCE(h.execution_id, -1) = COALESCE($3, -1)),
                            $4::text, CASE WHEN $10::text IS NULL THEN $5::text END, $10::text,
                            $9::text, $6::text, ($12::text)::timestamptz,
                            (SELECT CASE WHEN s.is_called THEN s.last_value END
                               FROM openprose.execution_id_seq s),
                            $11::text
                       FROM ",
                    $from,
                    "(SELECT pg_notify('openprose_change', $2)) AS woken
                     RETURNING n"
                )
            };
        }
        const UPSERT: &str = upsert!();
        const VERSION: &str = keep_version!("");
        // A rebind whose row this transaction already holds: every writer of the binding
        // before it has committed, so one statement (one round trip) sees their versions.
        const REBIND: &str = concat!(
            "WITH written AS (",
            upsert!(),
            "), kept AS (",
            keep_version!("written, "),
            ") SELECT kept.n FROM written, kept"
        );
        let run = self.run()?;
        let value = text_value(b)?;
        let copy = principal.is_none();
        let scope = b.execution_id.unwrap_or(-1);
        let held = self
            .held
            .as_ref()
            .is_some_and(|(n, s)| Some(n.as_str()) == b.name.as_deref() && *s == scope);
        // The write's own time (the rule's), which its decision's event seals too.
        let now = b.updated_at.clone().unwrap_or_else(crate::model::now);
        let p: [(&(dyn ToSql + Sync), Type); 12] = [
            (&b.name, Type::TEXT),
            (&run, Type::TEXT),
            (&b.execution_id, Type::INT8),
            (&b.kind, Type::TEXT),
            (&value, Type::TEXT),
            (&b.source_statement, Type::TEXT),
            (&b.created_at, Type::TEXT),
            (&b.updated_at, Type::TEXT),
            (&b.attachment_path, Type::TEXT),
            (&delta, Type::TEXT),
            (&principal, Type::TEXT),
            (&now, Type::TEXT),
        ];
        if held && !copy {
            return self
                .opt_hot(REBIND, &p, false, |r| r.get::<_, i64>(0))?
                .ok_or_else(|| anyhow!("the write of a binding kept no version"));
        }
        self.opt_hot(UPSERT, &p[..9], copy, |r| r.get::<_, i64>(0))?
            .ok_or_else(|| anyhow!("the upsert of a binding returned no row"))?;
        // The binding's own version: the `n` its history keeps it as.
        self.opt_hot(VERSION, &p, copy, |r| r.get::<_, i64>(0))?
            .ok_or_else(|| anyhow!("the write of a binding kept no version"))
    }

    /// A run-scoped agent's version after prose-state wrote its row: kept when the agent is
    /// new, or its memory or scope differs from its newest version (what the schema's agent
    /// trigger keeps for a raw writer). Project-scoped memory keeps no history.
    fn keep_agent_version(&mut self, name: &str) -> Result<()> {
        let Some(run) = self.run_id.clone() else {
            return Ok(());
        };
        self.exec_prepared(
            "INSERT INTO openprose.agent_history (run_id, name, n, kind, value, written_at,
                 at_record)
             SELECT a.run_id, a.name, COALESCE(h.n, 0) + 1, a.scope, a.memory,
                    ($3::text)::timestamptz,
                    (SELECT CASE WHEN s.is_called THEN s.last_value END
                       FROM openprose.execution_id_seq s)
               FROM openprose.agents a
               LEFT JOIN LATERAL (SELECT n, kind, value, deleted FROM openprose.agent_history
                                   WHERE run_id = a.run_id AND name = a.name
                                   ORDER BY n DESC LIMIT 1) h ON true
              WHERE a.run_id = $1 AND a.name = $2
                AND (h.n IS NULL OR h.deleted = 1 OR h.kind IS DISTINCT FROM a.scope
                     OR h.value IS DISTINCT FROM a.memory)",
            &[&run, &name, &crate::model::now()],
        )
    }

    /// The row a write of the hot path returns, if any: prepared once a session in a
    /// long-lived process (kept with it); else, for a statement this transaction runs `many`
    /// times (a copy's rows), prepared once in it; else typed and unnamed (one round trip).
    fn opt_hot<T>(
        &mut self,
        sql: &'static str,
        p: &[(&(dyn ToSql + Sync), Type)],
        many: bool,
        f: impl FnOnce(&Row) -> T,
    ) -> Result<Option<T>> {
        let cached = match (self.kept.as_deref(), many) {
            (Some(kept), _) => kept.get(sql).cloned(),
            (None, true) => self.prepared.get(sql).cloned(),
            (None, false) => return self.opt_typed(sql, p, f),
        };
        let stmt = match cached {
            Some(s) => s,
            None => {
                let types: Vec<Type> = p.iter().map(|(_, t)| t.clone()).collect();
                let s = self
                    .tx
                    .prepare_typed(sql, &types)
                    .map_err(|e| map_err(e, self.shown_url, self.busy_ms))?;
                match self.kept.as_deref_mut() {
                    Some(kept) => kept.insert(sql, s.clone()),
                    None => self.prepared.insert(sql, s.clone()),
                };
                s
            }
        };
        let values: Vec<&(dyn ToSql + Sync)> = p.iter().map(|(v, _)| *v).collect();
        self.opt(&stmt, &values, f)
    }

    pub(super) fn run(&self) -> Result<String> {
        self.run_id
            .clone()
            .ok_or_else(|| anyhow!("no run selected for this postgres store"))
    }

    /// Locks the run row (shared, or exclusive for operations that must be serialised) and
    /// reads its status.
    pub(super) fn lock_run(&mut self, run_id: &str, kind: TxKind) -> Result<()> {
        let sql = match kind {
            TxKind::Serial => {
                "SELECT status, history_keep FROM openprose.run WHERE id = $1 FOR UPDATE"
            }
            TxKind::Write => {
                "SELECT status, history_keep FROM openprose.run WHERE id = $1 FOR SHARE"
            }
            TxKind::Import => {
                self.exec(
                    "SELECT pg_advisory_xact_lock($1, hashtext($2))",
                    &[&IMPORT_LOCK, &run_id],
                )?;
                "SELECT status, history_keep FROM openprose.run WHERE id = $1 FOR UPDATE"
            }
        };
        let row = self.opt_typed(sql, &[(&run_id, Type::TEXT)], |r| {
            (RunStatus::parse(r.get(0)), r.get::<_, Option<i64>>(1))
        })?;
        self.history_keep = row.as_ref().and_then(|r| r.1);
        let status = row.map(|r| r.0);
        self.run = match status {
            Some(status) => Some((run_id.to_string(), Some(status))),
            None if kind == TxKind::Import => None,
            None => return Err(not_found(format!("run not found: {}", shown(run_id)))),
        };
        Ok(())
    }
}

impl<'a> Statements for PgTx<'a> {
    type Client = Transaction<'a>;
    fn session(&mut self) -> (&mut Transaction<'a>, &str, u64) {
        (&mut self.tx, self.shown_url, self.busy_ms)
    }
}

impl Tx for PgTx<'_> {
    /// The server's stamp asks every writer to know team approvals; once a team's gate is on
    /// it, every reader too (a plain server keeps older readers).
    fn require_team_readers(&mut self) -> Result<()> {
        self.exec(
            "UPDATE openprose.schema_version SET min_reader = $1 WHERE min_reader < $1",
            &[&crate::store::postgres::TEAM_READER],
        )
    }

    fn run_row(&mut self) -> Result<Option<(String, Option<RunStatus>)>> {
        Ok(self.run.clone())
    }

    fn history_keep(&mut self) -> Result<Option<i64>> {
        Ok(self.history_keep)
    }

    fn set_run_status(&mut self, status: &RunStatus, error: Option<&str>, now: &str) -> Result<()> {
        let run = self.run()?;
        self.exec(
            "UPDATE openprose.run SET status = $2, updated_at = ($3::text)::timestamptz,
                 error_message = COALESCE($4, error_message) WHERE id = $1",
            &[&run, &status.as_str(), &now, &error],
        )?;
        if let Some(r) = &mut self.run {
            r.1 = Some(status.clone());
        }
        Ok(())
    }

    fn binding_head(
        &mut self,
        name: &str,
        execution_id: Option<i64>,
    ) -> Result<Option<crate::store::BindingHead>> {
        let run = self.run()?;
        let head = self.opt_typed(
            "SELECT kind, attachment_path, version, source_statement FROM openprose.bindings
             WHERE run_id = $1 AND name = $2 AND COALESCE(execution_id, -1) = $3 FOR UPDATE",
            &[
                (&run, Type::TEXT),
                (&name, Type::TEXT),
                (&execution_id.unwrap_or(-1), Type::INT8),
            ],
            |r| (r.get(0), r.get(1), r.get(2), r.get(3)),
        )?;
        if head.is_some() {
            self.held = Some((name.to_string(), execution_id.unwrap_or(-1)));
        }
        Ok(head)
    }

    fn binding_own_version(
        &mut self,
        name: &str,
        execution_id: Option<i64>,
    ) -> Result<Option<i64>> {
        // After `binding_head`'s lock: every version of the row committed before is seen.
        let run = self.run()?;
        self.opt_typed(
            "SELECT MAX(n) FROM openprose.binding_history
             WHERE run_id = $1 AND name = $2 AND COALESCE(execution_id, -1) = $3",
            &[
                (&run, Type::TEXT),
                (&name, Type::TEXT),
                (&execution_id.unwrap_or(-1), Type::INT8),
            ],
            |r| r.get::<_, Option<i64>>(0),
        )
        .map(Option::flatten)
    }

    fn binding_value(&mut self, name: &str, execution_id: Option<i64>) -> Result<Option<String>> {
        let run = self.run()?;
        self.opt_typed(
            "SELECT value FROM openprose.bindings
             WHERE run_id = $1 AND name = $2 AND COALESCE(execution_id, -1) = $3",
            &[
                (&run, Type::TEXT),
                (&name, Type::TEXT),
                (&execution_id.unwrap_or(-1), Type::INT8),
            ],
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
        let run = self.run()?;
        // The same bytes kept elsewhere: not a new version (the triggers, which would have
        // made it one, do not fire for prose-state's sessions). The run's waiters are told.
        self.exec(
            "UPDATE openprose.bindings SET attachment_path = $4
             FROM (SELECT pg_notify('openprose_change', $1)) AS woken
             WHERE run_id = $1 AND name = $2 AND COALESCE(execution_id, -1) = $3",
            &[&run, &name, &execution_id.unwrap_or(-1), &attachment_path],
        )
    }

    fn delete_blob(&mut self, blob: &str) -> Result<bool> {
        let run = self.run()?;
        blobs::delete(self, &run, blob)
    }

    fn keeps_ids(&self) -> bool {
        false
    }

    fn put_run(&mut self, r: &RunRecord) -> Result<()> {
        self.exec(
            "INSERT INTO openprose.run (id, program_path, program_source, started_at,
                 updated_at, status, error_message, state_mode)
             VALUES ($1, $2, $3, COALESCE(($4::text)::timestamptz, now()),
                     COALESCE(($5::text)::timestamptz, now()), COALESCE($6, 'running'), $7,
                     'postgres')
             ON CONFLICT (id) DO UPDATE SET program_path = EXCLUDED.program_path,
                 program_source = EXCLUDED.program_source, started_at = EXCLUDED.started_at,
                 updated_at = EXCLUDED.updated_at, status = EXCLUDED.status,
                 error_message = EXCLUDED.error_message",
            &[
                &r.id,
                &r.program_path,
                &r.program_source,
                &r.started_at,
                &r.updated_at,
                &r.status,
                &r.error_message,
            ],
        )?;
        // The run row as this transaction now holds it (a restore's rules read it next).
        let status = r
            .status
            .as_deref()
            .map_or(RunStatus::Running, RunStatus::parse);
        self.run = Some((r.id.clone(), Some(status)));
        Ok(())
    }

    fn clear_run(&mut self) -> Result<()> {
        let run = self.run()?;
        for table in [
            "gates",
            "gate_instances",
            "bindings",
            "binding_history",
            "agent_segments",
            "agents",
            "agent_history",
            "imports",
            "attachment_chunks",
            "attachments",
            "execution",
        ] {
            self.exec(
                &format!("DELETE FROM openprose.{table} WHERE run_id = $1"),
                &[&run],
            )?;
        }
        Ok(())
    }

    fn versions_kept(&mut self, kept: Kept, name: &str, execution_id: Option<i64>) -> Result<i64> {
        let run = self.run()?;
        self.one(
            &format!(
                "SELECT COUNT(*) FROM openprose.{}
                  WHERE run_id = $1 AND name = $2 AND COALESCE(execution_id, -1) = $3",
                kept.table()
            ),
            &[&run, &name, &execution_id.unwrap_or(-1)],
            |r| r.get(0),
        )
    }

    fn history_over(&mut self, kept: Kept, keep: i64) -> Result<Vec<(String, Option<i64>)>> {
        let run = self.run()?;
        self.all(
            &format!(
                "SELECT name, execution_id FROM openprose.{} WHERE run_id = $1
                 GROUP BY name, execution_id HAVING COUNT(*) > $2
                 ORDER BY name COLLATE \"C\", COALESCE(execution_id, -1)",
                kept.table()
            ),
            &[&run, &keep],
            |r| (r.get(0), r.get(1)),
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
        let run = self.run()?;
        let scope = execution_id.unwrap_or(-1);
        let table = kept.table();
        self.exec(
            &format!(
                "DELETE FROM openprose.{table}
                 WHERE run_id = $1 AND name = $2 AND COALESCE(execution_id, -1) = $3 AND n < $4"
            ),
            &[&run, &name, &scope, &n],
        )?;
        let whole = value.is_some();
        let text = value
            .flatten()
            .map(|v| String::from_utf8_lossy(v).into_owned());
        self.exec(
            &format!(
                "UPDATE openprose.{table} SET gap = 1,
                     value = CASE WHEN $5 THEN $6 ELSE value END,
                     delta = CASE WHEN $5 THEN NULL ELSE delta END
                 WHERE run_id = $1 AND name = $2 AND COALESCE(execution_id, -1) = $3 AND n = $4"
            ),
            &[&run, &name, &scope, &n, &whole, &text],
        )
    }

    fn relink_history(&mut self, old: &str, new: &str) -> Result<()> {
        let run = self.run()?;
        self.exec(
            "UPDATE openprose.binding_history SET attachment_path = $3,
                 value = replace(value, $2, $3)
             WHERE run_id = $1 AND attachment_path = $2",
            &[&run, &old, &new],
        )
    }

    fn clear_history(&mut self, kept: Kept) -> Result<()> {
        let run = self.run()?;
        self.exec(
            &format!("DELETE FROM openprose.{} WHERE run_id = $1", kept.table()),
            &[&run],
        )
    }

    fn put_history(&mut self, kept: Kept, h: &crate::store::history::HistoryRow) -> Result<()> {
        let run = self.run()?;
        let value = h
            .value
            .as_deref()
            .map(|v| String::from_utf8_lossy(v).into_owned());
        self.exec(
            &format!(
                "INSERT INTO openprose.{} (run_id, name, execution_id, n, kind, value, delta,
                     attachment_path, source_statement, written_at, at_record, principal,
                     deleted, gap)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, ($10::text)::timestamptz, $11, $12,
                         $13, $14)",
                kept.table()
            ),
            &[
                &run,
                &h.name,
                &h.execution_id,
                &h.n,
                &h.kind,
                &value,
                &h.delta,
                &h.attachment_path,
                &h.source_statement,
                &h.written_at,
                &h.at_record,
                &h.principal,
                &(h.deleted as i64),
                &(h.gap as i64),
            ],
        )
    }

    fn missing_triggers(&mut self) -> Result<Vec<String>> {
        super::missing_triggers(self)
    }

    /// The schema again, whole, as an upgrade runs it (under its lock): it makes its
    /// functions and triggers as they are, and nothing else changes.
    fn make_triggers(&mut self, _missing: &[String]) -> Result<()> {
        self.exec(
            "SELECT pg_advisory_xact_lock($1)",
            &[&super::MIGRATION_LOCK],
        )?;
        self.on(|c| c.batch_execute(super::SCHEMA))
    }

    /// Every run's: a trigger of the server is every run's.
    fn resume_history(&mut self, kept: Kept, now: &str) -> Result<()> {
        let [gone, current] = match kept {
            Kept::Bindings => [
                "INSERT INTO openprose.binding_history (run_id, name, execution_id, n, kind,
                     written_at, at_record, deleted, gap)
                 SELECT h.run_id, h.name, h.execution_id, h.n + 1, h.kind,
                        ($1::text)::timestamptz,
                        (SELECT MAX(e.id) FROM openprose.execution e WHERE e.run_id = h.run_id),
                        1, 1
                 FROM openprose.binding_history h
                 WHERE h.deleted = 0
                   AND h.n = (SELECT MAX(h2.n) FROM openprose.binding_history h2
                               WHERE h2.run_id = h.run_id AND h2.name = h.name
                                 AND COALESCE(h2.execution_id, -1) = COALESCE(h.execution_id, -1))
                   AND NOT EXISTS (SELECT 1 FROM openprose.bindings c
                                    WHERE c.run_id = h.run_id AND c.name = h.name
                                      AND COALESCE(c.execution_id, -1) = COALESCE(h.execution_id, -1))",
                "INSERT INTO openprose.binding_history (run_id, name, execution_id, n, kind, value,
                     attachment_path, source_statement, written_at, at_record, gap)
                 SELECT c.run_id, c.name, c.execution_id,
                        (SELECT COALESCE(MAX(h.n), 0) + 1 FROM openprose.binding_history h
                          WHERE h.run_id = c.run_id AND h.name = c.name
                            AND COALESCE(h.execution_id, -1) = COALESCE(c.execution_id, -1)),
                        c.kind, c.value, c.attachment_path, c.source_statement,
                        ($1::text)::timestamptz,
                        (SELECT MAX(e.id) FROM openprose.execution e WHERE e.run_id = c.run_id), 1
                 FROM openprose.bindings c",
            ],
            Kept::Agents => [
                "INSERT INTO openprose.agent_history (run_id, name, n, kind, written_at,
                     at_record, deleted, gap)
                 SELECT h.run_id, h.name, h.n + 1, h.kind, ($1::text)::timestamptz,
                        (SELECT MAX(e.id) FROM openprose.execution e WHERE e.run_id = h.run_id),
                        1, 1
                 FROM openprose.agent_history h
                 WHERE h.deleted = 0
                   AND h.n = (SELECT MAX(h2.n) FROM openprose.agent_history h2
                               WHERE h2.run_id = h.run_id AND h2.name = h.name)
                   AND NOT EXISTS (SELECT 1 FROM openprose.agents c
                                    WHERE c.run_id = h.run_id AND c.name = h.name)",
                "INSERT INTO openprose.agent_history (run_id, name, n, kind, value, written_at,
                     at_record, gap)
                 SELECT c.run_id, c.name,
                        (SELECT COALESCE(MAX(h.n), 0) + 1 FROM openprose.agent_history h
                          WHERE h.run_id = c.run_id AND h.name = c.name),
                        c.scope, c.memory, ($1::text)::timestamptz,
                        (SELECT MAX(e.id) FROM openprose.execution e WHERE e.run_id = c.run_id), 1
                 FROM openprose.agents c WHERE c.run_id IS NOT NULL",
            ],
        };
        self.exec(gone, &[&now])?;
        self.exec(current, &[&now])
    }

    fn mark_history_gap(&mut self, kept: Kept) -> Result<()> {
        let run = self.run()?;
        let table = kept.table();
        self.exec(
            &format!(
                "UPDATE openprose.{table} SET gap = 1, written_at = NULL WHERE seq IN
                     (SELECT MIN(seq) FROM openprose.{table} WHERE run_id = $1
                       GROUP BY name, COALESCE(execution_id, -1))"
            ),
            &[&run],
        )
    }

    fn put_execution(
        &mut self,
        _id: Option<i64>,
        e: &crate::store::ExecutionRow,
    ) -> Result<Option<i64>> {
        let run = self.run()?;
        // Writers of a run are not serialised: a concurrent insert with the same key waits
        // for the first to commit, then does nothing.
        let stmt = self.prepared(
            "INSERT INTO openprose.execution (run_id, statement_index, statement_text, status,
                 started_at, completed_at, error_message, parent_id, metadata, idempotency_key,
                 principal)
             VALUES ($1, $2, $3, $4, ($5::text)::timestamptz, ($6::text)::timestamptz, $7, $8,
                     ($9::text)::jsonb, $10, $11)
             ON CONFLICT (run_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
             RETURNING id",
        )?;
        self.opt(
            &stmt,
            &[
                &run,
                &e.statement_index,
                &e.statement_text,
                &e.status.as_ref().map(|s| s.as_str()),
                &e.started_at,
                &e.completed_at,
                &e.error_message,
                &e.parent_id,
                &e.metadata,
                &e.idempotency_key,
                &e.principal,
            ],
            |r| r.get(0),
        )
    }

    fn put_gate(&mut self, g: &GateRecord, instance: bool) -> Result<()> {
        let sql = if instance {
            "INSERT INTO openprose.gate_instances (gate_id, instance, run_id, execution_id, prompt,
                 allow, timeout, timeout_at, on_reject, status, created_at, resolved_at,
                 resolved_by, resolution_comment, metadata)
             VALUES ($1, $2, $3, $4, $5, $6, $7, ($8::text)::timestamptz, $9, $10,
                     ($11::text)::timestamptz, ($12::text)::timestamptz, $13, $14, $15)"
        } else {
            "INSERT INTO openprose.gates (id, instance, run_id, execution_id, prompt, allow,
                 timeout, timeout_at, on_reject, status, created_at, resolved_at, resolved_by,
                 resolution_comment, metadata)
             VALUES ($1, $2, $3, $4, $5, $6, $7, ($8::text)::timestamptz, $9,
                     COALESCE($10, 'pending'), COALESCE(($11::text)::timestamptz, now()),
                     ($12::text)::timestamptz, $13, $14, $15)"
        };
        self.exec_prepared(
            sql,
            &[
                &g.id,
                &g.instance,
                &g.run_id,
                &g.execution_id,
                &g.prompt,
                &g.allow,
                &g.timeout,
                &g.timeout_at,
                &g.on_reject,
                &g.status.as_ref().map(GateStatus::as_str),
                &g.created_at,
                &g.resolved_at,
                &g.resolved_by,
                &g.resolution_comment,
                &g.metadata,
            ],
        )
    }

    fn put_agent(&mut self, a: &AgentRecord) -> Result<()> {
        let run = self.run_id.clone();
        self.exec_prepared(
            "INSERT INTO openprose.agents (name, run_id, scope, memory, created_at, updated_at)
             VALUES ($1, $2, COALESCE($3, 'execution'), $4,
                     COALESCE(($5::text)::timestamptz, now()),
                     COALESCE(($6::text)::timestamptz, now()))
             ON CONFLICT (name, (COALESCE(run_id, '__project__'))) DO UPDATE SET
                 scope = excluded.scope, memory = excluded.memory, updated_at = excluded.updated_at",
            &[
                &a.name,
                &run,
                &a.scope,
                &a.memory,
                &a.created_at,
                &a.updated_at,
            ],
        )?;
        self.keep_agent_version(&a.name)
    }

    fn put_segment(&mut self, g: &SegmentRecord) -> Result<()> {
        let run = self.run_id.clone();
        self.exec_prepared(
            "INSERT INTO openprose.agent_segments (agent_name, run_id, segment_number,
                     timestamp, prompt, summary, at_record)
                 VALUES ($1, $2, $3, COALESCE(($4::text)::timestamptz, now()), $5, $6,
                         COALESCE($7, CASE WHEN $2::text IS NOT NULL THEN
                             (SELECT CASE WHEN s.is_called THEN s.last_value END
                                FROM openprose.execution_id_seq s) END))",
            &[
                &g.agent_name,
                &run,
                &g.segment_number,
                &g.timestamp,
                &g.prompt,
                &g.summary,
                &g.at_record,
            ],
        )
    }

    fn audit_at_seq(&mut self, seq: i64) -> Result<Option<Option<String>>> {
        let run = self.run()?;
        self.opt(
            "SELECT hash FROM openprose.gate_audit_log WHERE run_id = $1 AND seq = $2",
            &[&run, &seq],
            |r| r.get(0),
        )
    }

    fn keyed_execution(&mut self, key: &str) -> Result<Option<KeyedExecution>> {
        let run = self.run()?;
        self.opt(
            "SELECT id, statement_index, statement_text, status, parent_id
             FROM openprose.execution WHERE run_id = $1 AND idempotency_key = $2",
            &[&run, &key],
            |r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)),
        )
    }

    fn reopen_gate(&mut self, g: &NewGate, execution_id: i64) -> Result<()> {
        let run = self.run()?;
        self.exec(
            "UPDATE openprose.gates SET execution_id = $3, prompt = $4, allow = $5,
                    timeout = $6, timeout_at = ($7::text)::timestamptz, on_reject = $8,
                    status = 'pending', created_at = ($9::text)::timestamptz,
                    resolved_at = NULL, resolved_by = NULL, resolution_comment = NULL,
                    metadata = $10, instance = instance + 1
              WHERE run_id = $1 AND id = $2",
            &[
                &run,
                &g.id,
                &execution_id,
                &g.prompt,
                &g.allow,
                &g.timeout,
                &g.timeout_at,
                &g.on_reject,
                &g.now,
                &g.metadata,
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
        let run = self.run()?;
        self.exec(
            "UPDATE openprose.gates SET status = $3, resolved_at = ($4::text)::timestamptz,
                 resolved_by = $5, resolution_comment = $6
             WHERE run_id = $1 AND id = $2 AND status = 'pending'",
            &[&run, &id, &status.as_str(), &at, &by, &comment],
        )
    }

    fn set_gate_schedule(
        &mut self,
        id: &str,
        widened: Option<(&str, &str)>,
        remind_at: Option<&str>,
    ) -> Result<()> {
        let run = self.run()?;
        let (allow, timeout_at) = widened.unzip();
        self.exec(
            "UPDATE openprose.gates SET allow = COALESCE($3, allow),
                 timeout_at = COALESCE(($4::text)::timestamptz, timeout_at),
                 remind_at = ($5::text)::timestamptz
             WHERE run_id = $1 AND id = $2 AND status = 'pending'",
            &[&run, &id, &allow, &timeout_at, &remind_at],
        )
    }

    fn chain_head(&mut self) -> Result<(i64, String)> {
        let run = self.run()?;
        self.one(
            "SELECT COALESCE((SELECT MAX(seq) FROM openprose.gate_audit_log WHERE run_id = $1), 0),
                    COALESCE((SELECT hash FROM openprose.gate_audit_log
                               WHERE run_id = $1 AND seq IS NOT NULL ORDER BY seq DESC LIMIT 1),
                             (SELECT hash FROM openprose.gate_audit_log
                               WHERE run_id = $1 AND hash IS NOT NULL ORDER BY id DESC LIMIT 1), '')",
            &[&run],
            |r| (r.get(0), r.get(1)),
        )
    }

    fn next_audit_id(&mut self) -> Result<i64> {
        self.one(
            "SELECT nextval(pg_get_serial_sequence('openprose.gate_audit_log', 'id'))",
            &[],
            |r| r.get(0),
        )
    }

    fn newest_record(&mut self) -> Result<Option<i64>> {
        let run = self.run()?;
        self.one(
            "SELECT MAX(id) FROM openprose.execution WHERE run_id = $1",
            &[&run],
            |r| r.get(0),
        )
    }

    fn insert_audit(&mut self, row: &AuditRow) -> Result<()> {
        self.exec(
            "INSERT INTO openprose.gate_audit_log
                 (id, gate_id, run_id, event_type, principal, comment, timestamp, metadata,
                  prev_hash, hash, seq, seal)
             VALUES ($1, $2, $3, $4, $5, $6, ($7::text)::timestamptz, $8, $9, $10, $11, $12)",
            &[
                &row.id,
                &row.gate_id,
                &row.run_id,
                &row.event_type,
                &row.principal,
                &row.comment,
                &row.timestamp,
                &row.metadata,
                &row.prev_hash,
                &row.hash,
                &row.seq,
                &row.seal,
            ],
        )
    }

    fn unsealed_audit(&mut self) -> Result<Vec<AuditRow>> {
        let run = self.run()?;
        self.all(
            &format!("{AUDIT_SELECT} WHERE run_id = $1 AND seq IS NULL ORDER BY id"),
            &[&run],
            audit_row,
        )
    }

    fn import(&mut self, alias: &str) -> Result<Option<ImportRow>> {
        let run = self.run()?;
        self.opt(
            concat!(
                "SELECT alias, source_url, ",
                ts!("fetched_at"),
                ", inputs_schema::text, outputs_schema::text
                 FROM openprose.imports WHERE run_id = $1 AND alias = $2 FOR UPDATE"
            ),
            &[&run, &alias],
            import_row,
        )
    }

    fn put_import(&mut self, i: &ImportRow) -> Result<()> {
        let run = self.run()?;
        self.exec_prepared(
            "INSERT INTO openprose.imports (alias, run_id, source_url, fetched_at,
                 inputs_schema, outputs_schema)
             VALUES ($1, $2, $3, ($4::text)::timestamptz, ($5::text)::jsonb, ($6::text)::jsonb)
             ON CONFLICT (alias, run_id) DO UPDATE SET source_url = excluded.source_url,
                 fetched_at = excluded.fetched_at, inputs_schema = excluded.inputs_schema,
                 outputs_schema = excluded.outputs_schema",
            &[
                &i.alias,
                &run,
                &i.source_url,
                &i.fetched_at,
                &i.inputs_schema,
                &i.outputs_schema,
            ],
        )
    }

    fn touch_agent(&mut self, name: &str, scope: &str, now: &str) -> Result<()> {
        let run = self.run_id.clone();
        // The upsert locks the agent's row: appends to one agent are serialised, so the next
        // number is never taken twice; other agents are not held up.
        self.exec(
            "INSERT INTO openprose.agents (name, run_id, scope, created_at, updated_at)
             VALUES ($1, $2, $3, ($4::text)::timestamptz, ($4::text)::timestamptz)
             ON CONFLICT (name, (COALESCE(run_id, '__project__'))) DO UPDATE SET
                 updated_at = excluded.updated_at",
            &[&name, &run, &scope, &now],
        )?;
        self.keep_agent_version(name)
    }

    fn next_segment_number(&mut self, name: &str) -> Result<i64> {
        let run = self.run_id.clone();
        self.one(
            "SELECT COALESCE(MAX(segment_number), 0) + 1 FROM openprose.agent_segments
             WHERE agent_name = $1 AND run_id IS NOT DISTINCT FROM $2",
            &[&name, &run],
            |r| r.get(0),
        )
    }

    fn commit(self: Box<Self>) -> Result<()> {
        let (shown_url, busy_ms) = (self.shown_url, self.busy_ms);
        committed(self.tx.commit(), |e| map_err(e, shown_url, busy_ms))
    }
}

/// A binding's value as the text PostgreSQL stores; bytes that are not UTF-8 are refused.
fn text_value(b: &BindingRecord) -> Result<Option<&str>> {
    match b.value.as_deref().map(std::str::from_utf8) {
        None => Ok(None),
        Some(Ok(v)) => Ok(Some(v)),
        Some(Err(_)) => Err(refused(format!(
            "binding {} holds bytes that are not UTF-8 text, which PostgreSQL cannot store; nothing was imported",
            shown(b.name.as_deref().unwrap_or_default())
        ))),
    }
}
