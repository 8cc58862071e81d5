//! The traits every backend implements: [`AgentStore`] (agent memory) and [`Store`] (one
//! run).

use super::{
    chain, dump, history, rules, seal, signatures, tx, wake, AgentRow, Attempt, AuditFilter,
    AuditRow, BindOutcome, BindingRow, BlobInfo, Checkpointed, Created, Decided, Decision,
    ExecQuery, ExecutionRow, Finished, Found, GateRow, GateSelect, ImportAdded, ImportRow, InputAt,
    Migration, NewBinding, NewExecution, NewGate, QueryResult, ResumeCounts, Resumed, Rows,
    RunInfo, RunSummary, StoreStats, Tx, TxKind, Upload, SERVER_PREFIX,
};
use anyhow::Result;
use std::time::Duration;

/// Persistent agent memory: kept in a run's state.db (execution scope) or an agents.db
/// (project and user scope), with the same tables and the same operations.
pub trait AgentStore {
    /// Begins a transaction of the kind asked for: the one thing a backend does for a rule.
    fn begin(&mut self, kind: TxKind) -> Result<Box<dyn Tx + '_>>;

    /// A transaction for a rule: the backend's, with what its commit must cause.
    fn txn(&mut self, kind: TxKind) -> Result<tx::Txn<'_>> {
        self.begin(kind).map(tx::Txn::new)
    }

    /// The agent of this name, with its count of segments.
    fn agent(&mut self, name: &str) -> Result<Option<AgentRow>> {
        Ok(self.agent_rows(Some(name))?.into_iter().next())
    }

    /// Replaces the agent's memory, creating the agent if needed.
    fn remember(&mut self, name: &str, scope: &str, memory: &str, now: &str) -> Result<()> {
        rules::remember(self.txn(rules::AGENT)?, name, scope, memory, now)
    }

    /// Appends a segment and returns its number: 1, 2, ... with no gap and no duplicate, however
    /// many processes append at once. Creates the agent (with no memory) if needed.
    fn append_segment(
        &mut self,
        name: &str,
        scope: &str,
        prompt: &str,
        summary: &str,
        now: &str,
    ) -> Result<i64> {
        rules::append_segment(self.txn(rules::AGENT)?, name, scope, prompt, summary, now)
    }

    /// Every agent in the store, by name: those with a row, and those another writer made the
    /// spec's way, with segments and no agents row (its `UPDATE agents` matched nothing),
    /// listed with no memory. Sorted here, by bytes, so both backends list in one order
    /// whatever the server's collation.
    fn agents(&mut self) -> Result<Vec<AgentRow>> {
        let mut rows = self.agent_rows(None)?;
        let known: std::collections::HashSet<String> =
            rows.iter().map(|r| r.name.clone()).collect();
        rows.extend(
            self.segment_agents()?
                .into_iter()
                .filter(|s| !known.contains(&s.name)),
        );
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(rows)
    }

    /// The agents rows (of this name only, when given), each with its count of segments.
    fn agent_rows(&mut self, name: Option<&str>) -> Result<Vec<AgentRow>>;

    /// One row a name that has segments: no scope, no memory, the first and last segment's
    /// times as created and updated, and the count.
    fn segment_agents(&mut self) -> Result<Vec<AgentRow>>;
}

fn not_kept(blob: &str) -> anyhow::Error {
    crate::error::refused(format!(
        "this store keeps no values of its own; attachment {SERVER_PREFIX}{} cannot be read here",
        crate::error::shown(blob)
    ))
}

/// The operations every backend provides for one run.
/// Reads that must agree with each other, in one snapshot: a run's store, and a server's
/// catalog reading many runs' gates and logs. Use [`super::consistent`], which ends the
/// snapshot however the reads go.
pub trait Snapshot {
    /// Starts a read-only snapshot that the reads up to [`Snapshot::end_read`] all see, so
    /// that reads compared with each other (a gate's row with its sealed log) never straddle
    /// another writer's commit. False (and nothing started) when the store already reads in
    /// one ([`Store::snapshot`]).
    fn begin_read(&mut self) -> Result<bool>;

    /// Ends the snapshot [`Snapshot::begin_read`] started.
    fn end_read(&mut self) -> Result<()>;
}

pub trait Store: AgentStore + Rows + Snapshot {
    /// Where this run's state is, for messages: a state.db path, or the server's URL with the
    /// password masked.
    fn location(&self) -> String;

    /// Where a binding is, in the spec's confirmation form (`Location: ...`).
    fn binding_location(&self, name: &str, execution_id: Option<i64>) -> String;

    /// Upserts a binding by (name, scope) in one write transaction (`rules::bind`).
    fn bind(
        &mut self,
        binding: &NewBinding,
        publish: &mut dyn FnMut() -> Result<()>,
    ) -> Result<BindOutcome> {
        // A read-modify-write or a compare-and-set is serialised with the run's other writes
        // (on PostgreSQL, two first writes of one name would otherwise both see it absent).
        let kind = if binding.update.is_some() || binding.if_version.is_some() {
            rules::BIND_CHECKED
        } else {
            rules::BIND
        };
        rules::bind(self.txn(kind)?, binding, publish)
    }

    /// Runs `remove` if no binding references `attachment_path` any more
    /// (`rules::release_attachment`).
    fn release_attachment(
        &mut self,
        attachment_path: &str,
        remove: &mut dyn FnMut() -> Result<()>,
    ) -> Result<bool> {
        rules::release_attachment(self.txn(rules::RELEASE)?, attachment_path, remove)
    }

    /// Whether large values are kept in the store itself (`server:` attachments, every
    /// machine reads them) rather than as files in the run directory on one machine.
    fn keeps_values(&self) -> bool {
        false
    }

    /// Starts uploading a new blob. The upload is marked as this process's until
    /// [`Store::end_upload`] (or until the process ends), so that nothing collects it before
    /// its binding commits.
    fn upload(&mut self, _blob: &str) -> Result<Box<dyn Upload + '_>> {
        Err(anyhow::anyhow!("this store keeps large values as files"))
    }

    /// The upload of `blob` is no longer this process's: linked by a committed row, or (not
    /// `linked`) deleted, unless a row links it after all (a commit whose outcome was lost).
    fn end_upload(&mut self, _blob: &str, _linked: bool) -> Result<()> {
        Ok(())
    }

    /// From here on, every read of this store sees one snapshot, until it is dropped (so a
    /// value read in parts is never half one version and half the next).
    fn snapshot(&mut self) -> Result<()> {
        Ok(())
    }

    /// A whole blob's length; None when the store has no such whole blob.
    fn blob_len(&mut self, _blob: &str) -> Result<Option<u64>> {
        Ok(None)
    }

    /// `len` bytes of a blob from `offset` (fewer at its end).
    fn read_blob(&mut self, blob: &str, _offset: u64, _len: u64) -> Result<Vec<u8>> {
        Err(not_kept(blob))
    }

    /// A blob's bytes as a stream, read in the store's snapshot; the store goes with it.
    fn into_blob_reader(self: Box<Self>, blob: &str) -> Result<Box<dyn std::io::Read>> {
        Err(not_kept(blob))
    }

    /// Every row of the run (`export`, `import`), read in the store's snapshot when one was
    /// taken ([`Store::snapshot`]).
    fn dump(&mut self) -> Result<dump::RunDump>;

    /// Writes a whole copy of a run in one transaction (`rules::restore`). The caller anchors
    /// the chain once the copy is where it stays.
    fn restore(&mut self, copy: &rules::Restore) -> Result<()> {
        rules::restore(self.txn(TxKind::Import)?, copy)
    }

    /// Every blob of the run, whole or not (for `doctor`).
    fn blobs(&mut self) -> Result<Vec<BlobInfo>> {
        Ok(Vec::new())
    }

    /// Points the binding of (name, scope) whose attachment is `old` at `new` instead
    /// (`rules::relink`): false when it no longer points at `old`.
    fn relink(
        &mut self,
        name: &str,
        execution_id: Option<i64>,
        old: &str,
        new: &str,
    ) -> Result<bool> {
        rules::relink(self.txn(rules::BIND)?, name, execution_id, old, new)
    }

    /// Records that the VM consumed a gate's decision (`rules::consume`).
    fn consume_decision(
        &mut self,
        gate_id: &str,
        instance: i64,
        inputs: &[InputAt],
        chain: &[Option<i64>],
        now: &str,
    ) -> Result<bool> {
        // A sealed event like any other: its commit moves the anchor, so that cutting it
        // from the log's end is found.
        rules::consume(
            self.sealing(rules::GATE)?,
            gate_id,
            instance,
            inputs,
            chain,
            now,
        )
    }

    /// What wakes a waiter on this run when a change may have committed (`wake`): the
    /// process's one listening connection or file watch, else polling.
    fn changes(&self) -> Box<dyn wake::Changes> {
        Box::new(wake::Polling)
    }

    /// Keeps the newest `keep` versions of each binding (`rules::prune_history`).
    fn prune_history(&mut self, keep: i64, apply: bool) -> Result<rules::HistoryPruned> {
        rules::prune_history(self.txn(TxKind::Serial)?, keep, apply)
    }

    /// Every kept version of the binding of this name in exactly this scope (None: the
    /// root), oldest first.
    fn binding_history(
        &mut self,
        name: &str,
        execution_id: Option<i64>,
    ) -> Result<Vec<history::HistoryRow>> {
        self.kept_versions(history::Kept::Bindings, name, execution_id)
    }

    /// Some of the kept versions of the binding of this name in exactly this scope (see
    /// [`history::Versions`]), with the count and ends of all of them: reads those rows only.
    fn binding_versions(
        &mut self,
        name: &str,
        execution_id: Option<i64>,
        which: history::Versions,
    ) -> Result<history::Span>;

    /// The scopes that have any kept version of a binding of this name.
    fn history_scopes(&mut self, name: &str) -> Result<Vec<Option<i64>>>;

    /// Resolves `name` through the scope chain starting at `execution_id` (nearest scope
    /// first, root scope last), or in the root scope alone when it is `None`.
    fn resolve(&mut self, name: &str, execution_id: Option<i64>) -> Result<Option<Found>>;

    /// Appends one execution record and returns its id (`rules::append_execution`).
    fn append_execution(&mut self, record: &NewExecution) -> Result<i64> {
        rules::append_execution(self.txn(rules::EXECUTION)?, record)
    }

    /// Runs one read-only SQL statement; a statement that would write is refused, and one
    /// still running after `limit` is stopped (exit 6).
    fn query_readonly(&mut self, sql: &str, limit: Duration) -> Result<QueryResult>;

    /// The run's own row.
    fn run_info(&mut self) -> Result<RunInfo>;

    /// The run's id, as its row holds it (a backend that knows it without a read says so).
    fn run_id(&mut self) -> Result<String> {
        Ok(self.run_info()?.id)
    }

    /// Whether any pending gate is past its deadline (a read, so that a sweep with nothing
    /// to do takes no write lock).
    fn any_overdue(&mut self, now: &str) -> Result<bool>;

    /// Does what is due on the run's pending gates (`rules::sweep`: timeouts, escalations and
    /// reminders), in one transaction. Every gate operation below does this first, inside its
    /// own transaction.
    fn sweep_timeouts(&mut self, now: &str) -> Result<rules::Swept> {
        if !self.any_overdue(now)? {
            return Ok(rules::Swept::default());
        }
        let mut tx = self.sealing(rules::GATE)?;
        let n = rules::sweep(&mut tx, now)?;
        tx.commit()?;
        Ok(n)
    }

    /// Creates a gate with its `created` audit event and its `approve GATE:` execution record.
    fn create_gate(&mut self, gate: &NewGate) -> Result<Created> {
        rules::create_gate(self.sealing(rules::GATE)?, gate)
    }

    /// Where this run's state is, as one stable string: a state.db's canonical path, or the
    /// server and database (no password). Names the run's anchor on this machine.
    fn place(&self) -> String;

    /// A transaction for a rule that seals audit events: once it commits, this machine's
    /// anchor of the run's chain moves to its newest row ([`tx::Txn::commit`]).
    fn sealing(&mut self, kind: TxKind) -> Result<tx::Txn<'_>> {
        let place = self.place();
        Ok(self.txn(kind)?.anchoring(place))
    }

    /// Moves this machine's anchor of the run's chain to its newest row, when that row is
    /// sealed with this machine's key (what a rule's commit does, for a copy of a run once it
    /// is where it stays). An anchor that cannot be moved costs a warning.
    fn anchor_chain(&mut self) {
        if let Err(e) = self.sealing(TxKind::Serial).and_then(tx::Txn::commit) {
            crate::output::warn(&format!("could not read the audit chain's head: {e:#}"));
        }
    }

    /// Gates of this run as stored, oldest first (by `created_at`, then id); `status` None
    /// means all.
    fn read_gates(&mut self, status: Option<&crate::model::GateStatus>) -> Result<Vec<GateRow>> {
        let rows = self.gate_rows(GateSelect::Listed(status))?;
        Ok(rows.into_iter().map(dump::GateRecord::into_row).collect())
    }

    /// One gate as stored.
    fn read_gate(&mut self, id: &str) -> Result<Option<GateRow>> {
        Ok(self.gate_row(id)?.map(dump::GateRecord::into_row))
    }

    /// An earlier opening of a gate, as `gate_instances` keeps it: a projection, compared with
    /// that opening's sealed events and never trusted (`chain::opening_integrity`).
    fn read_gate_opening(&mut self, id: &str, instance: i64) -> Result<Option<GateRow>> {
        let rows = self.gate_rows(GateSelect::Opening(id, instance))?;
        Ok(rows.into_iter().next().map(dump::GateRecord::into_row))
    }

    /// Gates of this run after the sweep.
    fn gates(
        &mut self,
        status: Option<&crate::model::GateStatus>,
        now: &str,
    ) -> Result<Vec<GateRow>> {
        self.sweep_timeouts(now)?;
        self.read_gates(status)
    }

    /// One gate with its audit history, logging a `viewed` event by `viewer` through
    /// `client` (`cli`, `web`).
    fn view_gate(
        &mut self,
        id: &str,
        viewer: Option<&str>,
        client: &str,
        now: &str,
    ) -> Result<Option<(GateRow, Vec<AuditRow>)>> {
        rules::view_gate(self.sealing(rules::GATE)?, id, viewer, client, now)
    }

    /// Approves or rejects a pending gate; of concurrent decisions exactly one wins.
    fn decide_gate(&mut self, decision: &Decision) -> Result<Decided> {
        rules::decide_gate(self.sealing(rules::GATE)?, decision)
    }

    /// Records a decision refused before it reached the gate; whether it was recorded (the
    /// gate exists and the run takes writes).
    fn refuse_attempt(&mut self, attempt: &Attempt) -> Result<bool> {
        rules::refuse_attempt(self.sealing(rules::GATE)?, attempt)
    }

    /// The bindings the run's sealed openings name (each one's response binding and inputs),
    /// told from the sealed log itself, never from a narrowing of rows raw SQL can change: the
    /// names this machine's anchor of the run's chain holds (those its openings name, up to the
    /// anchored row) and those of the rows after it, read in sequence and checked
    /// (`chain::names_after`). A chain after the anchor that does not hold together names what
    /// cannot be told (exit 9).
    fn sealed_names(&mut self) -> Result<std::collections::BTreeSet<String>> {
        Ok(self.sealed_names_at()?.0)
    }

    /// [`Store::sealed_names`], and the sequence number of the newest row of the run's chain
    /// read: a reader whose check of the log failed while this number moved (a decision
    /// committed beside it) reads again (`services::inputs::settled`).
    fn sealed_names_at(&mut self) -> Result<(std::collections::BTreeSet<String>, i64)> {
        let run_id = self.run_id()?;
        let home = self.wiring().home();
        let anchor =
            seal::anchored(home.as_deref(), &self.place(), &run_id).filter(|a| a.named.is_some());
        let rows = self.audit(&AuditFilter {
            after_seq: Some(anchor.as_ref().map_or(0, |a| a.seq)),
            ..AuditFilter::default()
        })?;
        let key = self.wiring().key_for_reading()?;
        let mut named = chain::names_after(&rows, anchor.as_ref(), key).map_err(|why| {
            crate::error::tampered(format!(
                "the run's audit log does not hold together ({why}): which bindings its gates name cannot be told (run `prose-state gates verify`)"
            ))
        })?;
        let newest = rows.iter().filter_map(|r| r.seq).max();
        let anchored = anchor.as_ref().map_or(0, |a| a.seq);
        named.extend(anchor.and_then(|a| a.named).unwrap_or_default());
        Ok((named, newest.unwrap_or(anchored).max(anchored)))
    }

    /// The gates whose sealed openings name binding `name`. Whether any does is told by
    /// [`Store::sealed_names`]; only then are the openings naming it read
    /// ([`super::Rows::gates_naming`]'s narrow read), which must find them: one that does not
    /// was misled behind prose-state's back (exit 9).
    fn naming(&mut self, name: &str) -> Result<super::rows::Naming> {
        let names = self.sealed_names()?;
        self.naming_among(&names, name)
    }

    /// [`Store::naming`], with [`Store::sealed_names`] already read.
    fn naming_among(
        &mut self,
        names: &std::collections::BTreeSet<String>,
        name: &str,
    ) -> Result<super::rows::Naming> {
        if !names.contains(name) {
            return Ok(super::rows::Naming::default());
        }
        let naming = self.gates_naming(name)?;
        if !naming.input && naming.response.is_empty() {
            return Err(rules::narrowing_misled(name));
        }
        Ok(naming)
    }

    /// Checks the audit log against its seals and this machine's anchor, and every gate
    /// against its log (`chain::check`). A read: nothing is written.
    fn verify_audit(&mut self) -> Result<chain::ChainReport> {
        self.verify_signed(None)
    }

    /// [`Store::verify_audit`], and with `signed`, every approval and rejection checked for
    /// a signature by that key (`sign::check`).
    fn verify_signed(
        &mut self,
        signed: Option<&signatures::SignedBy>,
    ) -> Result<chain::ChainReport> {
        // The anchor before the log: an anchor is moved only after its rows commit, so the
        // log read after it holds every row it names. Read the other way round, a writer
        // committing and anchoring between the two reads looked like rows cut from the end.
        let run_id = self.run_info()?.id;
        let home = self.wiring().home();
        let anchor = seal::anchored(home.as_deref(), &self.place(), &run_id);
        // The log and the gates in one snapshot: a decision committed between the two reads
        // would otherwise show its row ahead of (or behind) its sealed events, as tampering.
        let (rows, gates) = super::consistent(self, |s| {
            Ok((s.audit(&AuditFilter::default())?, s.read_gates(None)?))
        })?;
        let key = self.wiring().key_for_reading()?;
        let mut report = chain::check(&rows, &gates, Some(&run_id), key, anchor.as_ref());
        // What vouches for nothing: a run this machine saw broken, and one read where it must
        // not be written (a copy, a symlinked database), whose anchor is not its own.
        let doubt = seal::seen_broken(home.as_deref(), &self.place(), &run_id).or_else(|| {
            self.containment()
                .map(|why| format!("not verified here: {why}"))
        });
        if let Some(reason) = doubt {
            report.broken(0, reason);
        }
        if let Some(signed) = signed {
            signatures::check(&mut report, &rows, &gates, signed);
        }
        Ok(report)
    }

    /// Why this run, read here, must not be written (a copy made by hand, a symlinked
    /// database): what it says then vouches for nothing either.
    fn containment(&self) -> Option<String> {
        None
    }

    /// Seals a run not sealed yet: its genesis event (`rules::seal_run`).
    fn seal_run(&mut self, now: &str, started_by: Option<&str>) -> Result<()> {
        rules::seal_run(self.txn(rules::GATE)?, now, started_by)
    }

    /// Sets the run's final status (`rules::finish`).
    fn finish(
        &mut self,
        status: &crate::model::RunStatus,
        error: Option<&str>,
        now: &str,
    ) -> Result<Finished> {
        rules::finish(self.sealing(rules::FINISH)?, status, error, now)
    }

    /// The run row, its last event and its pending gates (read only).
    fn run_summary(&mut self, now: &str) -> Result<RunSummary>;

    fn add_import(&mut self, import: &ImportRow, replace: bool) -> Result<ImportAdded> {
        rules::add_import(self.txn(rules::IMPORT)?, import, replace)
    }

    fn imports(&mut self) -> Result<Vec<ImportRow>>;

    /// Every execution record, oldest first.
    fn executions(&mut self) -> Result<Vec<ExecutionRow>> {
        self.executions_after(0)
    }

    /// The execution records with an id above `after`, oldest first (for `log --follow`:
    /// each call is one short statement, no transaction is held between calls).
    fn executions_after(&mut self, after: i64) -> Result<Vec<ExecutionRow>> {
        self.executions_matching(&ExecQuery {
            after,
            ..Default::default()
        })
    }

    /// The execution records `q` selects, in one statement.
    fn executions_matching(&mut self, q: &ExecQuery) -> Result<Vec<ExecutionRow>>;

    /// The bindings of the first `names` names after `after` (in name order) that are visible
    /// from the scopes in `chain` or the root: every row of each such name in those scopes.
    fn bindings_page(
        &mut self,
        chain: &[i64],
        after: Option<&str>,
        names: i64,
    ) -> Result<Vec<BindingRow>>;

    /// The run's records and bindings counted, the bindings visible from `chain`, and the
    /// run's error message.
    fn resume_counts(&mut self, chain: &[i64]) -> Result<ResumeCounts>;

    /// Every binding, in (scope, name) order.
    fn bindings(&mut self) -> Result<Vec<BindingRow>>;

    /// Sizes, row counts and settings.
    fn stats(&mut self) -> Result<StoreStats>;

    /// Database-level problems (SQLite: integrity_check and foreign_key_check), one line each.
    fn health(&mut self) -> Result<Vec<String>>;
    /// The triggers this build's schema makes that the database does not hold: dropped
    /// behind prose-state's back (a database at an older schema is not asked: it is upgraded
    /// by its first write). On PostgreSQL they are the server's, shared by every run.
    fn missing_triggers(&mut self) -> Result<Vec<String>>;
    /// Makes the missing triggers again, as the schema does, and starts the history of every
    /// binding and agent memory they keep again with a version marked as following a time
    /// when writes may not have been kept; the triggers made again.
    fn restore_triggers(&mut self) -> Result<Vec<String>> {
        rules::restore_triggers(self.txn(TxKind::Serial)?, &crate::model::now())
    }

    /// Moves the write-ahead log into the database (SQLite only).
    fn checkpoint(&mut self, mode: &str) -> Result<Checkpointed>;

    /// Rebuilds the database to reclaim space; returns the size before and after where known.
    fn vacuum(&mut self) -> Result<(Option<u64>, Option<u64>)>;

    /// What upgrading this store's schema to this build's does (steps in words); with
    /// `apply`, does it, in one transaction, table rebuilds included.
    fn migrate(&mut self, apply: bool) -> Result<Migration>;

    /// Deletes the run's state where it is not inside the run directory (PostgreSQL rows; the
    /// gate audit log is kept). SQLite state goes with the directory: nothing to do here.
    fn delete_run(&mut self) -> Result<()>;

    /// Records a resume (`rules::record_resume`).
    fn record_resume(&mut self, now: &str) -> Result<Resumed> {
        rules::record_resume(self.sealing(rules::RESUME)?, now)
    }
}
