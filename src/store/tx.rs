//! The thin side of a backend: one transaction, and the single statements the rules run in
//! it, each with its row mapping. A backend begins the kind of transaction asked for (SQLite:
//! `BEGIN IMMEDIATE`; PostgreSQL: a transaction holding the run's row `FOR SHARE` or
//! `FOR UPDATE`) and maps its driver's errors once, in its implementation of this trait. The
//! rules themselves (`rules.rs`) are written once, above it.

use super::dump::{AgentRecord, BindingRecord, GateRecord, RunRecord, SegmentRecord};
use super::effects::{Event, Notice};
use super::history::Kept;
use super::{AuditRow, GateRow, ImportRow, NewGate};
use crate::model::RunStatus;
use anyhow::Result;

/// Which transaction a rule needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxKind {
    /// A write that may run beside the run's other writes (parallel branches binding at once):
    /// PostgreSQL holds the run's row `FOR SHARE`.
    Write,
    /// A write serialised with every other serialised write of the run: gate operations
    /// (first decision wins, one audit chain per run), `finish`, removing an attachment.
    /// PostgreSQL holds the run's row `FOR UPDATE`.
    Serial,
    /// A copy of a run arriving (`import`): the run may not exist yet. Serialised with every
    /// other write of the run, and with other imports of its id (PostgreSQL: an advisory lock
    /// on the id, then the row `FOR UPDATE` when there is one).
    Import,
}

/// An execution record stored under an idempotency key: id, index, text, status, parent.
pub type KeyedExecution = (
    i64,
    Option<i64>,
    Option<String>,
    Option<String>,
    Option<i64>,
);

/// One open transaction. Every method is one statement (or, where a dialect needs it, the
/// few that make one step); none holds a rule. Each table has one INSERT (a `put_` method),
/// used alike by the live rules and by `rules::restore`, which writes a copy of a run.
pub trait Tx: super::Rows {
    // The run.
    /// The run's id and status; None where the store has no run (an agents.db, project agents
    /// on the server) or the run row is missing.
    fn run_row(&mut self) -> Result<Option<(String, Option<RunStatus>)>>;
    fn set_run_status(&mut self, status: &RunStatus, error: Option<&str>, now: &str) -> Result<()>;
    /// How many versions of each binding the run keeps (`run.history_keep`); None: all.
    fn history_keep(&mut self) -> Result<Option<i64>>;

    // Bindings.
    /// The kind, attachment path and version of the binding of this name in this scope,
    /// locked for the rest of the transaction where the dialect locks rows.
    fn binding_head(
        &mut self,
        name: &str,
        execution_id: Option<i64>,
    ) -> Result<Option<super::BindingHead>>;
    /// The binding's own version in this scope: the newest `n` its history keeps (None: it
    /// keeps none), read after [`Tx::binding_head`] in the same transaction, so that it is the
    /// version of the row that read holds.
    fn binding_own_version(&mut self, name: &str, execution_id: Option<i64>)
        -> Result<Option<i64>>;
    /// The stored value of the binding of this name in this scope.
    fn binding_value(&mut self, name: &str, execution_id: Option<i64>) -> Result<Option<String>>;
    /// Inserts a binding, or replaces the one of its name in its scope, keeping that one's
    /// `created_at`, and keeps the write as the binding's next version in the same
    /// transaction: written by `principal` (None: a copy's write, unattributed), and for a
    /// `--append`/`--merge` step the step itself in place of the whole value (`delta`; the
    /// version's value left NULL). The binding's new own version (its history's `n`, as
    /// `history` lists it). prose-state keeps its own writes' versions: the schema's history
    /// triggers keep raw writers' (whose `principal` stays NULL) and do not fire for
    /// prose-state's sessions, so no version is kept twice or attributed to another writer.
    fn put_binding(
        &mut self,
        binding: &BindingRecord,
        principal: Option<&str>,
        delta: Option<&str>,
    ) -> Result<i64>;
    /// Points the binding of this name in this scope at another attachment: the same bytes
    /// kept elsewhere, not a new version.
    fn set_attachment_path(
        &mut self,
        name: &str,
        execution_id: Option<i64>,
        attachment_path: &str,
    ) -> Result<()>;
    /// Deletes a blob kept in the store, unless an upload still holds it; whether it is gone.
    /// A store that keeps no values has none to delete.
    fn delete_blob(&mut self, _blob: &str) -> Result<bool> {
        Ok(false)
    }

    // The execution log.
    fn keyed_execution(&mut self, key: &str) -> Result<Option<KeyedExecution>>;
    /// Appends a record (its `id` ignored), as `id` where the store keeps the ids it is given
    /// (`keeps_ids`), else numbered by the store. Its id; None when its idempotency key was
    /// taken meanwhile by another writer.
    fn put_execution(
        &mut self,
        id: Option<i64>,
        record: &super::ExecutionRow,
    ) -> Result<Option<i64>>;

    // Gates.
    /// The gates row of this id as the rules read it.
    fn load_gate(&mut self, id: &str) -> Result<Option<GateRow>> {
        Ok(self.gate_row(id)?.map(GateRecord::into_row))
    }
    /// Inserts a gates row (`instance` false) or a gate_instances row (an earlier opening).
    fn put_gate(&mut self, gate: &GateRecord, instance: bool) -> Result<()>;
    /// Makes the gates row the gate's next instance: pending, with this gate's prompt, allow
    /// list, deadline and record.
    fn reopen_gate(&mut self, gate: &NewGate, execution_id: i64) -> Result<()>;
    /// Sets a pending gate's outcome; `resolved_at` is `at`.
    fn resolve_gate(
        &mut self,
        id: &str,
        status: &crate::model::GateStatus,
        by: &str,
        comment: Option<&str>,
        at: &str,
    ) -> Result<()>;
    /// Moves a pending gate's schedule: its allow list and deadline (when given, as an
    /// escalation does) and the time its next reminder is due (None: none is).
    fn set_gate_schedule(
        &mut self,
        id: &str,
        widened: Option<(&str, &str)>,
        remind_at: Option<&str>,
    ) -> Result<()>;

    // The audit chain.
    /// The head of the run's audit chain: the sequence number of its newest sequenced row (0
    /// when none) and the hash to chain the next row to (that row's; before any, the newest
    /// hashed row's of the older chain; else empty).
    fn chain_head(&mut self) -> Result<(i64, String)>;
    /// The id the next audit row takes.
    fn next_audit_id(&mut self) -> Result<i64>;
    /// The run's newest execution record (None before the first): where in the log an event
    /// happened, which its sealed metadata records (`after_record`).
    fn newest_record(&mut self) -> Result<Option<i64>>;
    fn insert_audit(&mut self, row: &AuditRow) -> Result<()>;
    /// The run's audit rows outside the sealed sequence, in id order (what a genesis seals).
    fn unsealed_audit(&mut self) -> Result<Vec<AuditRow>>;

    // Imports.
    fn import(&mut self, alias: &str) -> Result<Option<ImportRow>>;
    /// Inserts an import, or replaces the one of its alias.
    fn put_import(&mut self, import: &ImportRow) -> Result<()>;

    // Agents.
    /// Inserts an agent, or sets the scope, memory and `updated_at` of the one of its name.
    fn put_agent(&mut self, agent: &AgentRecord) -> Result<()>;
    /// Creates the agent (no memory) or touches it (its scope and memory kept); locks its row
    /// where the dialect does.
    fn touch_agent(&mut self, name: &str, scope: &str, now: &str) -> Result<()>;
    fn next_segment_number(&mut self, name: &str) -> Result<i64>;
    fn put_segment(&mut self, segment: &SegmentRecord) -> Result<()>;

    // Copies of a run (`import`, `export`).
    /// Whether rows keep the ids they are given (a run's own SQLite file); a server numbers
    /// them itself.
    fn keeps_ids(&self) -> bool;
    /// Inserts the run's row, or sets every column of it.
    fn put_run(&mut self, run: &RunRecord) -> Result<()>;
    /// Deletes every row of the run but its own row and its audit log (append-only), its
    /// values included (`import --replace`).
    fn clear_run(&mut self) -> Result<()>;
    /// How many versions of the binding (or agent) of this name in exactly this scope are
    /// kept (what a write under a bound on versions counts, without reading them).
    fn versions_kept(&mut self, kept: Kept, name: &str, execution_id: Option<i64>) -> Result<i64>;
    /// The bindings (or agents) (name, scope) with more than `keep` versions kept.
    fn history_over(&mut self, kept: Kept, keep: i64) -> Result<Vec<(String, Option<i64>)>>;
    /// Deletes the binding's versions older than version `n`, and makes version `n` the
    /// oldest kept: whole (`value`, when it was a step) and marked as having versions before
    /// it that are not kept.
    fn cut_history(
        &mut self,
        kept: Kept,
        name: &str,
        execution_id: Option<i64>,
        n: i64,
        value: Option<Option<&[u8]>>,
    ) -> Result<()>;
    /// A value moved (`relink`): every kept version that named it at `old` names it at `new`.
    /// A move is not a write: it makes no version.
    fn relink_history(&mut self, old: &str, new: &str) -> Result<()>;
    /// Deletes every kept version of the run's bindings (a copy writes its own after).
    fn clear_history(&mut self, kept: Kept) -> Result<()>;
    /// Inserts a kept version as given (its `seq` ignored: the store numbers the writes).
    fn put_history(&mut self, kept: Kept, row: &super::history::HistoryRow) -> Result<()>;
    /// Marks each binding's oldest kept version as having unknown versions before it, and no
    /// known time (a copy that carries no history: what the bindings held before it, and when
    /// it was written, are not known; the time of the copy would make two copies differ).
    fn mark_history_gap(&mut self, kept: Kept) -> Result<()>;
    /// The triggers of the schema the database does not hold.
    fn missing_triggers(&mut self) -> Result<Vec<String>>;
    /// Makes the schema's missing triggers again.
    fn make_triggers(&mut self, missing: &[String]) -> Result<()>;
    /// A version of every binding (or memory) as it stands, and a deletion of each one whose
    /// newest version is not one, written `now` and marked `gap`: writes before it may not
    /// have been kept (its history's trigger was missing).
    fn resume_history(&mut self, kept: Kept, now: &str) -> Result<()>;
    /// The run's audit row at this sequence number: None when there is none, else its hash.
    fn audit_at_seq(&mut self, seq: i64) -> Result<Option<Option<String>>>;

    /// Marks the store as holding a team's gate (`team::Quorum::is_team`): a binary from
    /// before team approvals may then neither read it (it would take a quorum's votes for
    /// tampering) nor write it (it would decide at the first approval). SQLite raises the
    /// file's stamp; PostgreSQL the server's (whose writers are asked for it already).
    fn require_team_readers(&mut self) -> Result<()> {
        Ok(())
    }

    fn commit(self: Box<Self>) -> Result<()>;
}

/// A transaction as the rules hold it: the backend's, and what its commit must cause beyond
/// its rows: gate notices, and for a rule that seals audit events, this machine's anchor of
/// the run's chain moved to its newest row. Those happen once it commits, in [`Txn::commit`],
/// and never for a transaction that does not: dropped uncommitted, it takes them with it.
pub struct Txn<'a> {
    tx: Box<dyn Tx + 'a>,
    notices: Vec<Notice>,
    /// Where the run's anchor is kept (`Store::place`), when its commit moves it.
    anchor: Option<String>,
}

impl<'a> Txn<'a> {
    pub fn new(tx: Box<dyn Tx + 'a>) -> Self {
        Txn {
            tx,
            notices: Vec::new(),
            anchor: None,
        }
    }

    /// This transaction, moving the run's anchor kept for `place` when it commits.
    pub fn anchoring(self, place: String) -> Self {
        let anchor = Some(place);
        Txn { anchor, ..self }
    }

    /// A gate this transaction changed, as it leaves it: announced if it commits.
    pub fn notice(&mut self, event: Event, gate: &GateRow) {
        self.notices.push(Notice {
            event,
            gate: gate.clone(),
        });
    }

    /// Commits, then causes what the transaction queued.
    pub fn commit(mut self) -> Result<()> {
        let anchor = self
            .anchor
            .take()
            .and_then(|place| super::chain::anchor_move(&mut *self.tx, place));
        let wiring = self.tx.wiring();
        self.tx.commit()?;
        crate::model::test_faults::after_commit();
        wiring.deliver(self.notices);
        if let Some(move_anchor) = anchor {
            move_anchor();
        }
        Ok(())
    }
}

impl<'a> std::ops::Deref for Txn<'a> {
    type Target = dyn Tx + 'a;
    fn deref(&self) -> &Self::Target {
        &*self.tx
    }
}

impl std::ops::DerefMut for Txn<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut *self.tx
    }
}
