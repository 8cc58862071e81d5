//! The only code that speaks SQL. Commands call a [`Store`] with typed values; each backend
//! owns its connection settings, SQL text and row mapping.

pub mod book_log;
pub mod catalog;
pub mod chain;
pub mod dump;
pub mod effects;
pub mod gate_read;
pub mod history;
pub mod postgres;
pub mod principals;
pub mod rows;
pub mod rules;
pub mod seal;
pub mod signatures;
pub mod sqlite;
mod sqlite_rows;

/// Whether stores keep their connections for the next open (a long-lived process, the MCP
/// server); a command, which opens a store once, never does.
static KEEPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Keeps connections from now on (SQLite: per file; PostgreSQL: per server URL).
pub fn keep_connections() {
    KEEPING.store(true, std::sync::atomic::Ordering::SeqCst);
}

pub fn keeping() -> bool {
    KEEPING.load(std::sync::atomic::Ordering::Relaxed)
}

/// Connections kept for the next open, under a key saying what they may be used again for
/// (SQLite: the file; PostgreSQL: the server). Only while [`keeping`]; at most `most` are
/// kept, the newest.
pub struct Kept<C> {
    kept: std::sync::Mutex<Vec<(String, C)>>,
    most: usize,
}

impl<C> Kept<C> {
    pub const fn new(most: usize) -> Self {
        Kept {
            kept: std::sync::Mutex::new(Vec::new()),
            most,
        }
    }

    /// A kept connection under `key`, if any; the kept ones `stale` names are closed first.
    pub fn take(&self, key: &str, stale: impl Fn(&str, &C) -> bool) -> Option<C> {
        if !keeping() {
            return None;
        }
        let mut kept = self.kept.lock().ok()?;
        kept.retain(|(k, c)| !stale(k, c));
        let at = kept.iter().rposition(|(k, _)| k == key)?;
        Some(kept.swap_remove(at).1)
    }

    /// Keeps a connection (while [`keeping`]; otherwise it is closed).
    pub fn give(&self, key: String, conn: C) {
        if !keeping() {
            return;
        }
        if let Ok(mut kept) = self.kept.lock() {
            if kept.len() >= self.most {
                kept.remove(0);
            }
            kept.push((key, conn));
        }
    }
}

/// A store's connection, held until the store drops, whose `Drop` takes it (to keep it for the
/// next open, or to close it). An `Option` only so that it can be taken then: until then it is
/// always there, and the holder reads it as the connection itself.
pub struct Held<C>(Option<C>);

impl<C> Held<C> {
    pub fn new(conn: C) -> Self {
        Held(Some(conn))
    }

    /// The connection, for the store's `Drop` (nothing reads it after).
    pub fn take(&mut self) -> Option<C> {
        self.0.take()
    }
}

impl<C> std::ops::Deref for Held<C> {
    type Target = C;
    fn deref(&self) -> &C {
        self.0
            .as_ref()
            .expect("a store's connection is held until the store drops")
    }
}

impl<C> std::ops::DerefMut for Held<C> {
    fn deref_mut(&mut self) -> &mut C {
        self.0
            .as_mut()
            .expect("a store's connection is held until the store drops")
    }
}

pub mod sqlite_schema;
pub mod tx;
pub mod wake;

pub use rows::{GateSelect, Rows};
pub use tx::{Tx, TxKind};

use crate::model::{ExecStatus, RunStatus};
use anyhow::Result;
use serde::ser::Serializer;
use serde::Serialize;
use std::path::Path;
use std::time::Duration;

/// How far up a scope chain a lookup walks before it stops: a guard against a parent_id
/// cycle written by raw SQL, far beyond any real nesting. Bound as a parameter of the scope
/// query on every backend.
pub const MAX_SCOPE_DEPTH: i32 = 1_000_000;

/// How to open a store: settings that come from the command line or its environment.
#[derive(Debug, Clone, Copy)]
pub struct OpenOptions {
    /// How long a writer waits for another writer's lock before giving up (exit 75).
    pub busy_timeout: Duration,
}

/// The `run` row written by `init`.
#[derive(Debug)]
pub struct NewRun<'a> {
    pub id: &'a str,
    pub program_path: Option<&'a str>,
    pub program_source: Option<&'a str>,
    pub created_at: &'a str,
    /// Versions kept of each binding (the project's default at `init`); None: all.
    pub history_keep: Option<i64>,
}

/// One binding to upsert by (name, scope).
#[derive(Debug, Clone, Copy)]
pub struct NewBinding<'a> {
    pub name: &'a str,
    pub execution_id: Option<i64>,
    pub kind: &'a str,
    /// The value itself, or for an attachment the summary that stands in for it. With an
    /// `update`, ignored: the value is computed from the stored one.
    pub value: &'a str,
    pub source_statement: Option<&'a str>,
    /// Relative to the run directory.
    pub attachment_path: Option<&'a str>,
    /// An atomic read-modify-write of the stored JSON value, instead of `value`.
    pub update: Option<&'a Update>,
    /// Compare-and-set: written only if the binding's version is this one (0: absent).
    pub if_version: Option<i64>,
    pub now: &'a str,
    /// Who writes it, recorded in its history (`unknown` when no one is known).
    pub principal: &'a str,
    /// An update's key (`bind --append V --key K`): an update whose key a kept version of
    /// the binding already carries is not applied again.
    pub key: Option<&'a str>,
}

/// A read-modify-write of a binding's JSON value, done inside the write transaction so that
/// concurrent updates all land.
#[derive(Debug, Clone)]
pub enum Update {
    /// Push onto the JSON array (an absent binding is `[]`).
    Append(serde_json::Value),
    /// Merge into the JSON object as a JSON Merge Patch, RFC 7396 (an absent binding is `{}`;
    /// a `null` member removes the key).
    Merge(serde_json::Value),
}

/// What a successful bind did.
#[derive(Debug, Default)]
pub struct BindOutcome {
    /// Attachments this write may have left unnamed (the replaced value's, and those of
    /// versions the run's bound cut): the caller releases each that nothing names any more.
    pub released: Vec<String>,
    /// The value written, when it was computed (`update`).
    pub written: Option<String>,
    /// The binding's own version after the write (its history's `n`).
    pub version: Option<i64>,
}

/// How an `attachment_path` names a value kept in the store itself (PostgreSQL) rather than a
/// file in the run directory: `server:` and the blob's name.
pub const SERVER_PREFIX: &str = "server:";

/// The blob a `server:` attachment path names.
pub fn server_blob(attachment_path: &str) -> Option<&str> {
    attachment_path
        .strip_prefix(SERVER_PREFIX)
        .filter(|b| !b.is_empty())
}

/// A large value on its way into the store, in a transaction of its own (no run lock held):
/// bytes in order, then `finish`, which commits the blob whole. Dropped unfinished, nothing
/// of it is kept.
pub trait Upload {
    fn write(&mut self, bytes: &[u8]) -> Result<()>;
    fn finish(self: Box<Self>) -> Result<()>;
}

/// A blob the store holds: whole (with its length and digest) or a part an upload left.
#[derive(Debug, Clone)]
pub struct BlobInfo {
    pub blob: String,
    /// None: chunks with no `attachments` row (never whole).
    pub bytes: Option<i64>,
    pub sha256: Option<String>,
    /// A live upload holds it (not linked yet): none of a collector's business.
    pub in_upload: bool,
}

/// The head of a stored binding: kind, attachment path, version.
pub type BindingHead = (Option<String>, Option<String>, i64);

/// One execution record to append.
#[derive(Debug)]
pub struct NewExecution<'a> {
    /// None for a gate's `approve GATE:` record, which has no statement of its own.
    pub statement_index: Option<i64>,
    pub statement_text: &'a str,
    pub status: &'a str,
    pub started_at: Option<&'a str>,
    pub completed_at: Option<&'a str>,
    pub error_message: Option<&'a str>,
    pub parent_id: Option<i64>,
    pub metadata: Option<&'a str>,
    /// A retry with the same key appends nothing (exec-append --key).
    pub idempotency_key: Option<&'a str>,
    /// Who appends it (`--as`, PROSE_PRINCIPAL, the MCP agent; `unknown` when no one).
    pub principal: &'a str,
}

/// A bindings row as stored. Rows written by raw SQL may hold NULLs anywhere and a value
/// that is not valid UTF-8, so the value is kept as bytes.
#[derive(Debug, Clone)]
pub struct BindingRow {
    pub name: String,
    pub execution_id: Option<i64>,
    pub kind: Option<String>,
    pub value: Option<Vec<u8>>,
    pub source_statement: Option<String>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    pub attachment_path: Option<String>,
    /// Bumped by every write (schema 5), from a counter shared by the run's bindings; None on
    /// rows read through an older file. Stored for the spec's SQL and raw writers, and what a
    /// consumption checks has not moved; never shown as the binding's version.
    pub version: Option<i64>,
    /// The binding's own version: the newest `n` its history keeps in its scope (1, 2, 3, ...),
    /// what `history` lists, `get --version` reads and `bind --if-version` compares; None where
    /// its history keeps none.
    pub own_version: Option<i64>,
}

/// Where a scope lookup found its binding.
#[derive(Debug, Clone)]
pub struct Found {
    pub row: BindingRow,
    /// How many parent links above the starting execution the binding was found; `None`
    /// when it was found in the root scope.
    pub depth: Option<u64>,
}

/// The result of a read-only query: columns in order, and each row's values.
#[derive(Debug)]
pub struct QueryResult {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<serde_json::Value>>,
}

impl Serialize for QueryResult {
    /// A JSON array of objects whose keys keep the column order, as `sqlite3 -json` prints.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Row<'a>(&'a [String], &'a [serde_json::Value]);
        impl Serialize for Row<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_map(self.0.iter().zip(self.1))
            }
        }
        s.collect_seq(self.rows.iter().map(|r| Row(&self.columns, r)))
    }
}

/// The most one `query` result may hold, as the JSON it prints: past it the query is
/// refused (exit 4) as the rows are read, so neither memory nor the output grows without
/// bound. On SQLite it is also the longest value a statement may make (SQLITE_LIMIT_LENGTH).
pub const QUERY_MOST_BYTES: usize = 64 * 1024 * 1024;

/// The most values (rows times columns) one `query` result may hold: each takes memory of its
/// own, however short its JSON.
pub const QUERY_MOST_VALUES: usize = 1_000_000;

/// What a `query` result has taken so far, against its bounds and its `--timeout`: each
/// backend takes every value through it as the rows are read.
pub(crate) struct QueryBudget {
    /// What each column's key costs a row: `"name":` and a separator.
    keys: Vec<usize>,
    bytes: usize,
    values: usize,
    start: std::time::Instant,
    limit: Duration,
}

impl QueryBudget {
    pub(crate) fn new(columns: &[String], start: std::time::Instant, limit: Duration) -> Self {
        QueryBudget {
            keys: columns
                .iter()
                .map(|c| json_len(&c.as_str().into()) + 2)
                .collect(),
            bytes: 2,
            values: 0,
            start,
            limit,
        }
    }

    /// Whether `--timeout` has passed: reading and converting rows counts, not only the
    /// database's own work.
    pub(crate) fn overdue(&self) -> bool {
        self.start.elapsed() > self.limit
    }

    /// Takes one value of column `i`, or refuses the result as too large.
    pub(crate) fn take(&mut self, i: usize, v: &serde_json::Value) -> Result<()> {
        self.values += 1;
        self.bytes += self.keys.get(i).copied().unwrap_or(0) + json_len(v);
        if i == 0 {
            self.bytes += 3; // {}, and the row's separator
        }
        if self.values > QUERY_MOST_VALUES {
            return Err(too_large(format!("over {QUERY_MOST_VALUES} values")));
        }
        if self.bytes > QUERY_MOST_BYTES {
            return Err(too_large(format!("over {QUERY_MOST_BYTES} bytes of JSON")));
        }
        Ok(())
    }
}

/// The refusal of a result past [`QUERY_MOST_BYTES`] or [`QUERY_MOST_VALUES`].
pub(crate) fn too_large(what: impl std::fmt::Display) -> anyhow::Error {
    crate::error::refused(format!(
        "query result too large ({what}): one query returns at most {QUERY_MOST_BYTES} bytes \
         (64 MiB) of JSON and {QUERY_MOST_VALUES} values; narrow it with WHERE, LIMIT, fewer \
         columns or substr()"
    ))
}

/// The length of a value's JSON, counted as it is written, never held.
fn json_len(v: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

/// The run's own row.
#[derive(Debug, Clone)]
pub struct RunInfo {
    pub id: String,
    pub program_path: Option<String>,
    pub status: Option<RunStatus>,
    pub started_at: Option<String>,
    pub updated_at: Option<String>,
}

/// A gates row. `allow` is parsed from its JSON; an allow list that is not a JSON array of
/// strings (written by raw SQL) admits nobody: gates fail closed.
#[derive(Debug, Clone)]
pub struct GateRow {
    pub id: String,
    pub run_id: Option<String>,
    pub execution_id: Option<i64>,
    pub prompt: String,
    pub allow: Vec<String>,
    pub timeout: Option<String>,
    pub timeout_at: Option<String>,
    pub on_reject: Option<String>,
    pub status: crate::model::GateStatus,
    pub created_at: Option<String>,
    pub resolved_at: Option<String>,
    pub resolved_by: Option<String>,
    pub resolution_comment: Option<String>,
    pub metadata: Option<String>,
    /// Which opening of the gate this is: 1, then one more for each `--reopen`.
    pub instance: i64,
}

/// One gate_audit_log row.
#[derive(Debug, Clone)]
pub struct AuditRow {
    pub id: i64,
    pub gate_id: String,
    pub run_id: String,
    pub event_type: String,
    pub principal: Option<String>,
    pub comment: Option<String>,
    pub timestamp: Option<String>,
    pub metadata: Option<String>,
    pub prev_hash: Option<String>,
    pub hash: Option<String>,
    /// The row's place in its run's chain (schema 5); None on older rows and on rows written
    /// by other tools.
    pub seq: Option<i64>,
    /// The HMAC of `hash` under the audit key (schema 5).
    pub seal: Option<String>,
}

impl AuditRow {
    /// The row's chain hash: sha256 over a canonical JSON array of the previous hash and every
    /// content column. Backend-neutral, so both stores chain identically. A row with a
    /// sequence number (schema 5) hashes that instead of its database id, so a run keeps its
    /// chain when it moves between backends; older rows hash their id, as they were written.
    pub fn chain_hash(&self, prev: &str) -> String {
        if let Some(seq) = self.seq {
            let canonical = serde_json::json!([
                "prose-audit-2",
                prev,
                seq,
                self.gate_id,
                self.run_id,
                self.event_type,
                self.principal,
                self.comment,
                self.timestamp,
                self.metadata
            ]);
            return crate::model::sha256_tag(&canonical.to_string());
        }
        let canonical = serde_json::json!([
            prev,
            self.id,
            self.gate_id,
            self.run_id,
            self.event_type,
            self.principal,
            self.comment,
            self.timestamp,
            self.metadata
        ]);
        crate::model::sha256_tag(&canonical.to_string())
    }
}

/// A gate to create (`gates create`), with the execution record the spec appends beside it.
#[derive(Debug)]
pub struct NewGate<'a> {
    pub id: &'a str,
    pub prompt: &'a str,
    /// JSON array of principals.
    pub allow: &'a str,
    pub timeout: Option<&'a str>,
    pub timeout_at: Option<&'a str>,
    pub on_reject: Option<&'a str>,
    pub metadata: Option<&'a str>,
    /// Open the gate again when it exists and is decided (a new instance).
    pub reopen: bool,
    /// statement_index of the appended `approve GATE_ID:` record.
    pub statement_index: Option<i64>,
    /// The enclosing execution: parent of the appended record.
    pub parent_execution: Option<i64>,
    pub prompt_hash: &'a str,
    /// The bindings a decision is about (`--inputs`), sealed in its `created` event.
    pub inputs: &'a [String],
    pub now: &'a str,
    /// What the opening asks of its deciders. With separation of duties, its `creator` is
    /// who creates it; the rule adds the run's starter from the run's sealed genesis.
    pub quorum: crate::team::Quorum,
}

#[derive(Debug)]
pub enum Created {
    New(GateRow),
    /// The same call again on a gate still pending: a safe retry, nothing written.
    Retried(GateRow),
    /// The id is taken by a different gate, or one no longer pending.
    Conflict(GateRow),
}

/// A gate input as a reader found it: its name, and where (scope) and at which write version
/// (None: not bound).
pub type InputAt = (String, Option<(Option<i64>, i64)>);

/// An approve or reject.
#[derive(Debug)]
pub struct Decision<'a> {
    pub gate_id: &'a str,
    pub approve: bool,
    pub principal: &'a crate::model::Principal,
    /// Whether a token authenticated the principal (`auth`).
    pub authenticated: bool,
    /// Where the decision was taken: `cli` or `web` (recorded with it).
    pub client: &'a str,
    pub comment: Option<&'a str>,
    /// The hash of the prompt the decider was shown; a mismatch is refused.
    pub prompt_hash: &'a str,
    /// The gate instance the decider was shown: another (the gate reopened since, even with
    /// the same prompt) is refused. None: whichever instance is there.
    pub instance: Option<i64>,
    pub now: &'a str,
    /// The approval page's key, which signs the decision (`sign`); None on the command line.
    pub signer: Option<&'a dyn signatures::SignsDecisions>,
    /// The content digest of each of the gate's inputs as the decider was shown them (read
    /// by the front end: an attachment's value is a file or a blob), sealed with the
    /// decision. Required for a gate with inputs.
    pub inputs: Option<&'a std::collections::BTreeMap<String, Option<String>>>,
    /// The version of each input, in its frame, that the decider was shown: sealed with the
    /// decision, so that `verify`, `gates wait` and `get --version` check that very version.
    pub pins: Option<&'a std::collections::BTreeMap<String, chain::Pin>>,
    /// Who is in which group and who is revoked, from the principals book's sealed log when
    /// the decision is taken; Err says why the log cannot be trusted (then no group admits
    /// anyone).
    pub roster: &'a std::result::Result<crate::team::Roster, String>,
}

/// A decision refused before it reached the gate (see `rules::refuse_attempt`).
#[derive(Debug)]
pub struct Attempt<'a> {
    pub gate_id: &'a str,
    pub approve: bool,
    /// Who the attempt was made as: authenticated (a web session), or only claimed.
    pub principal: Option<&'a str>,
    pub authenticated: bool,
    /// `cli` or `web`.
    pub client: &'a str,
    /// Why it was refused, in words.
    pub reason: &'a str,
    pub now: &'a str,
}

#[derive(Debug)]
pub enum Decided {
    Done(GateRow),
    NotFound,
    /// Someone decided first (or the deadline passed); the attempt was audit-logged.
    AlreadyResolved(GateRow),
    /// The principal is not in the allow list; the attempt was audit-logged.
    NotAllowed(GateRow),
    /// The prompt changed, or the gate was reopened, after it was shown; the attempt was
    /// audit-logged.
    PromptChanged(GateRow),
    /// The gate's row contradicts its sealed events (its prompt, allow list, instance or
    /// status was changed behind the tool's back), with why.
    Tampered(GateRow, String),
    /// A vote short of the gate's quorum was counted (`already`: it had been, and nothing
    /// was written); the gate is still pending.
    Counted {
        gate: GateRow,
        quorum: crate::team::Quorum,
        tally: crate::team::Tally,
        already: bool,
    },
    /// The gate counts only authenticated decisions, and this one was a claim; logged.
    NotAuthenticated(GateRow),
    /// Separation of duties: the principal started the run or created the gate; logged.
    OwnGate(GateRow, String),
}

/// Which audit rows to read.
#[derive(Debug, Default)]
pub struct AuditFilter<'a> {
    pub gate_id: Option<&'a str>,
    pub principal: Option<&'a str>,
    /// Rows at or after this timestamp.
    pub since: Option<&'a str>,
}

/// A persistent agent's row, with its segment count.
#[derive(Debug, Clone)]
pub struct AgentRow {
    pub name: String,
    pub scope: Option<String>,
    pub memory: Option<String>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    pub segments: i64,
}

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

/// An imports row.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportRow {
    pub alias: String,
    pub source_url: Option<String>,
    pub fetched_at: Option<String>,
    pub inputs_schema: Option<String>,
    pub outputs_schema: Option<String>,
}

#[derive(Debug)]
pub enum ImportAdded {
    Added(ImportRow),
    /// The same alias with the same source and schemas: nothing written.
    Unchanged(ImportRow),
    Replaced(ImportRow),
    /// The alias is registered with a different source or schemas (and no --replace).
    Conflict(ImportRow),
}

/// An execution row as stored (raw SQL may leave any column NULL).
#[derive(Debug, Clone)]
pub struct ExecutionRow {
    pub id: i64,
    pub statement_index: Option<i64>,
    pub statement_text: Option<String>,
    pub status: Option<ExecStatus>,
    pub started_at: Option<String>,
    pub completed_at: Option<String>,
    pub error_message: Option<String>,
    pub parent_id: Option<i64>,
    pub metadata: Option<String>,
    /// Who appended it (schema 10); None for a raw writer, or a record from before.
    pub principal: Option<String>,
}

/// The statuses that open a construct, and those that close one (`resume`'s record shapes).
pub const STARTS: &[&str] = &["executing", "started"];
pub const ENDS: &[&str] = &["completed", "failed", "skipped", "joined", "exited"];

/// One execution record, by id.
/// The run this run was forked from, as its sealed genesis records it (`forked_from`: run,
/// record, time): None for a run not forked, or whose genesis this machine cannot attest.
pub fn forked_from(store: &mut dyn Store) -> Result<Option<serde_json::Value>> {
    let key = seal::key_for_reading()?;
    Ok(store
        .audit(&AuditFilter {
            gate_id: Some(dump::RUN_EVENT),
            principal: None,
            since: None,
        })?
        .iter()
        .filter(|r| r.gate_id == dump::RUN_EVENT && r.event_type == dump::GENESIS)
        .find(|r| chain::self_state(r, key) == chain::RowState::Attested)
        .and_then(|r| r.metadata.as_deref())
        .and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok())
        .and_then(|m| m.get("forked_from").cloned())
        .filter(|f| !f.is_null()))
}

pub fn record(store: &mut dyn Store, id: i64) -> Result<Option<ExecutionRow>> {
    Ok(store
        .executions_matching(&ExecQuery {
            after: id - 1,
            before: Some(id + 1),
            ..Default::default()
        })?
        .pop())
}

impl ExecutionRow {
    /// What this record opens, if it is a start: [`crate::language::construct_of`] of its
    /// text and metadata.
    pub fn construct(&self) -> Option<crate::language::Kind> {
        let m = self
            .metadata
            .as_deref()
            .and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok());
        crate::language::construct_of(self.statement_text.as_deref(), m.as_ref())
    }
}

/// The frame a binding named `name` made at record `id` lives in (`None`: the root): the
/// nearest record, from `id` up its parents, that opens a frame
/// ([`crate::language::is_frame`]). A branch whose statement assigns `name` (a named branch,
/// `a = session ...`) is no frame for it: its result is read after the join.
pub fn frame_of(store: &mut dyn Store, id: i64, name: Option<&str>) -> Result<Option<i64>> {
    let mut at = Some(id);
    while let Some(id) = at {
        let Some(r) = record(store, id)? else {
            return Ok(None);
        };
        let kind = r.construct();
        let status = r.status.as_ref().map(|s| s.as_str());
        let names_it = kind == Some(crate::language::Kind::Branch)
            && name.is_some()
            && r.statement_text
                .as_deref()
                .and_then(crate::language::assigned_name)
                == name;
        if STARTS.contains(&status.unwrap_or(""))
            && crate::language::is_frame(kind, status)
            && !names_it
        {
            return Ok(Some(id));
        }
        // Parents come before their children (`exec-append` checks it); a raw row that
        // points forward ends the walk at the root rather than going round.
        at = r.parent_id.filter(|p| *p < id);
    }
    Ok(None)
}

/// A narrow read of the execution log: `resume` reads only the records its answer holds, so
/// that it costs the same on a run of a thousand records and of a million. Every condition is
/// optional; the SQL is written here once, for both backends.
#[derive(Debug, Clone, Default)]
pub struct ExecQuery {
    /// Records with an id above this.
    pub after: i64,
    /// Records with an id below this.
    pub before: Option<i64>,
    /// Records whose status is one of these.
    pub only: Option<&'static [&'static str]>,
    /// Records whose status is none of these (a NULL status included).
    pub except: Option<&'static [&'static str]>,
    /// Records of this statement index (`Some(None)`: with none).
    pub statement: Option<Option<i64>>,
    /// Records with this parent (`Some(None)`: at the top level).
    pub parent: Option<Option<i64>>,
    /// Records of a statement index some start record has (what could close a start).
    pub of_started_statements: bool,
    /// Records that carry metadata.
    pub with_metadata: bool,
    pub newest_first: bool,
    pub limit: Option<i64>,
}

impl ExecQuery {
    /// The WHERE condition and the ORDER BY/LIMIT tail, and the integer parameters in order:
    /// parameter `i` (from 0) is written `ph(i)`. `run` is the backend's own condition on a
    /// row of the run (`""` on SQLite, `run_id = $1 AND ` on PostgreSQL); statuses are this
    /// fixed vocabulary, written as literals.
    pub fn sql(&self, run: &str, pg: bool, ph: impl Fn(usize) -> String) -> (String, Vec<i64>) {
        let list = |v: &[&str]| {
            v.iter()
                .map(|s| format!("'{s}'"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut params = vec![self.after];
        let mut cond = vec![format!("{run}id > {}", ph(0))];
        let param = |v: i64, params: &mut Vec<i64>| {
            params.push(v);
            ph(params.len() - 1)
        };
        if let Some(before) = self.before {
            cond.push(format!("id < {}", param(before, &mut params)));
        }
        if let Some(only) = self.only {
            // Beside the statements of the starts, the status is only a filter: SQLite would
            // otherwise walk every `completed` record through the status index.
            let plus = if self.of_started_statements && !pg {
                "+"
            } else {
                ""
            };
            cond.push(format!("{plus}status IN ({})", list(only)));
        }
        if let Some(except) = self.except {
            cond.push(format!(
                "(status IS NULL OR status NOT IN ({}))",
                list(except)
            ));
        }
        match self.statement {
            Some(Some(i)) => cond.push(format!("statement_index = {}", param(i, &mut params))),
            Some(None) => cond.push("statement_index IS NULL".into()),
            None => {}
        }
        match self.parent {
            Some(Some(p)) => cond.push(format!("parent_id = {}", param(p, &mut params))),
            Some(None) => cond.push("parent_id IS NULL".into()),
            None => {}
        }
        if self.of_started_statements {
            let starts = list(STARTS);
            cond.push(format!(
                "(statement_index IN (SELECT s.statement_index FROM {table} s
                    WHERE {srun}s.status IN ({starts}))
                  OR (statement_index IS NULL AND EXISTS (SELECT 1 FROM {table} s
                    WHERE {srun}s.statement_index IS NULL AND s.status IN ({starts}))))",
                table = if pg {
                    "openprose.execution"
                } else {
                    "execution"
                },
                srun = run.replace("run_id", "s.run_id"),
            ));
        }
        if self.with_metadata {
            cond.push(if pg {
                "metadata IS NOT NULL AND metadata <> '{}'::jsonb".into()
            } else {
                "metadata IS NOT NULL AND metadata NOT IN ('', '{}')".into()
            });
        }
        let mut sql = format!(
            "WHERE {} ORDER BY id{}",
            cond.join(" AND "),
            if self.newest_first { " DESC" } else { "" }
        );
        if let Some(limit) = self.limit {
            sql.push_str(&format!(" LIMIT {}", param(limit, &mut params)));
        }
        (sql, params)
    }
}

/// What a bounded `resume` counts without reading the rows, and the run's error, in one
/// statement.
#[derive(Debug, Clone, Default)]
pub struct ResumeCounts {
    pub error_message: Option<String>,
    pub records: i64,
    pub bindings: i64,
    /// Bindings visible from the scope chain given: the nearest of each name.
    pub bindings_visible: i64,
}

/// The scope condition of a narrow bindings read: the root, and the given scopes (ids from the
/// database, written as literals).
pub fn scope_list(chain: &[i64]) -> String {
    id_list(&[&[-1], chain].concat())
}

/// Ids from the database, written as a list of SQL literals.
pub fn id_list(ids: &[i64]) -> String {
    ids.iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl ExecutionRow {
    /// When the event happened: every record prose-state appends carries one of the two.
    pub fn at(&self) -> Option<&str> {
        self.completed_at.as_deref().or(self.started_at.as_deref())
    }
}

/// What `runs` shows of a run.
#[derive(Debug, Clone)]
pub struct RunSummary {
    pub run: RunInfo,
    pub error_message: Option<String>,
    /// The time of the latest execution record.
    pub last_event_at: Option<String>,
    /// Gates pending and not past their deadline.
    pub pending_gates: i64,
}

#[derive(Debug)]
pub enum Finished {
    Done {
        previous_status: RunStatus,
    },
    /// Already finished with this status: nothing written.
    Unchanged,
}

/// What `resume` changed.
#[derive(Debug)]
pub struct Resumed {
    pub previous_status: RunStatus,
    pub status: RunStatus,
    /// Gates that got a `resumed` audit event.
    pub gates_logged: Vec<String>,
}

/// What `stats` reports of one run's store.
#[derive(Debug, Clone, Default)]
pub struct StoreStats {
    pub backend: &'static str,
    pub schema_version: i64,
    /// The database file's size (SQLite).
    pub db_bytes: Option<u64>,
    /// The write-ahead log's size (SQLite).
    pub wal_bytes: Option<u64>,
    /// Rows per table (this run's rows, on PostgreSQL).
    pub tables: std::collections::BTreeMap<String, i64>,
    pub execution_status: std::collections::BTreeMap<String, i64>,
    /// Bytes of binding values kept inline (for attachments, their summaries).
    pub binding_inline_bytes: i64,
    /// The settings in force on this connection.
    pub settings: std::collections::BTreeMap<String, String>,
    /// What the run keeps on a server (PostgreSQL; None on SQLite).
    pub server: Option<ServerStats>,
}

/// What a run keeps on a PostgreSQL server, and how big the server's tables are.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerStats {
    /// The values over the attachment threshold kept on the server (whole blobs:
    /// `openprose.attachments` rows), and their bytes.
    pub attachments: u64,
    pub attachment_bytes: u64,
    /// The run's rows as the server stores them (`pg_column_size` of each row, of every
    /// table, its values' chunks included): its share of the tables below, without indexes.
    pub row_bytes: u64,
    /// Every run's: the openprose schema's tables with their indexes and TOAST
    /// (`pg_total_relation_size`), and the whole database (`pg_database_size`); None when the
    /// server would not say.
    pub tables_bytes: Option<u64>,
    pub database_bytes: Option<u64>,
}

/// The tables `stats` counts the rows of, on either backend.
pub const STATS_TABLES: [&str; 8] = [
    "run",
    "execution",
    "bindings",
    "agents",
    "agent_segments",
    "imports",
    "gates",
    "gate_audit_log",
];

/// What `stats` reports of one run: its store's figures and its attachments' files.
#[derive(Debug, Clone)]
pub struct RunStats {
    pub run_id: String,
    pub store: StoreStats,
    pub attachment_files: u64,
    pub attachment_bytes: u64,
}

/// A run's stats: its store's figures, and the files of its attachments (in `run_dir`).
pub fn run_stats(store: &mut dyn Store, run_dir: &Path, id: &str) -> Result<RunStats> {
    let (files, bytes) = crate::run::footprint(run_dir);
    Ok(RunStats {
        run_id: store.run_info().map_or_else(|_| id.to_string(), |r| r.id),
        store: store.stats()?,
        attachment_files: files,
        attachment_bytes: bytes,
    })
}

/// What a checkpoint did (SQLite's `PRAGMA wal_checkpoint`).
#[derive(Debug)]
pub struct Checkpointed {
    pub mode: String,
    /// Whether a reader or writer kept it from completing.
    pub busy: bool,
    pub wal_frames: i64,
    pub checkpointed_frames: i64,
}

fn not_kept(blob: &str) -> anyhow::Error {
    crate::error::refused(format!(
        "this store keeps no values of its own; attachment {SERVER_PREFIX}{} cannot be read here",
        crate::error::shown(blob)
    ))
}

/// The operations every backend provides for one run.
pub trait Store: AgentStore + Rows {
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
        rules::consume(
            self.txn(rules::GATE)?,
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

    /// The scope chain from `execution_id` up to the topmost execution, nearest first.
    fn scope_chain(&mut self, execution_id: i64) -> Result<Vec<i64>>;

    /// Appends one execution record and returns its id (`rules::append_execution`).
    fn append_execution(&mut self, record: &NewExecution) -> Result<i64> {
        rules::append_execution(self.txn(rules::EXECUTION)?, record)
    }

    /// Runs one read-only SQL statement; a statement that would write is refused, and one
    /// still running after `limit` is stopped (exit 6).
    fn query_readonly(&mut self, sql: &str, limit: Duration) -> Result<QueryResult>;

    /// The run's own row.
    fn run_info(&mut self) -> Result<RunInfo>;

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

    /// One gate after the sweep.
    fn gate(&mut self, id: &str, now: &str) -> Result<Option<GateRow>> {
        self.sweep_timeouts(now)?;
        self.read_gate(id)
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
        let anchor = seal::anchored(&self.place(), &run_id);
        let rows = self.audit(&AuditFilter::default())?;
        let gates = self.read_gates(None)?;
        let key = seal::key_for_reading()?;
        let mut report = chain::check(&rows, &gates, Some(&run_id), key, anchor.as_ref());
        // What vouches for nothing: a run this machine saw broken, and one read where it must
        // not be written (a copy, a symlinked database), whose anchor is not its own.
        let doubt = seal::seen_broken(&self.place(), &run_id).or_else(|| {
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

/// Which runs a cross-run read covers: `only` these (None: every run), less `except`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    pub only: Option<Vec<String>>,
    pub except: Vec<String>,
}

/// What cross-run commands read of many runs at once, in a few queries rather than a store a
/// run: a server's tables hold every run of the project; a SQLite project keeps a catalog of
/// its runs (`catalog/`).
pub trait Catalog {
    /// Sweeps the gates with something due (a deadline, a reminder) of the runs that have
    /// any, among `runs`, each under its own run's rules; how many runs were swept, and what
    /// was done.
    fn sweep_overdue(&mut self, runs: &RunFilter, now: &str) -> Result<(usize, rules::Swept)>;
    /// The pending gates of `runs`, each with its run's program path, oldest first (by
    /// creation, then run, then id); at most `limit`.
    fn pending_gates_of(
        &mut self,
        runs: &RunFilter,
        limit: Option<i64>,
    ) -> Result<Vec<(GateRow, Option<String>)>>;
    /// The summaries of `runs`, newest first; of one status, started at or after `since`, and
    /// at most `limit`.
    fn summaries_of(
        &mut self,
        runs: &RunFilter,
        now: &str,
        status: Option<&str>,
        since: Option<&str>,
        limit: Option<i64>,
    ) -> Result<Vec<RunSummary>>;
    /// Every run of `runs` as the catalog keeps it, newest first, keyed by where it lives
    /// (its directory's name; on a server, its id), with its pending gates not past their
    /// deadline; `last_event_at` is not kept.
    fn runs_of(&mut self, runs: &RunFilter, now: &str) -> Result<Vec<(String, RunSummary)>>;
    /// The stats of every run of `runs`, keyed by where it lives, in that key's order: a
    /// SQLite run opened only when its files changed since its stats were kept; a server's
    /// in a few grouped queries (its runs' attachments, files here, are counted by the
    /// caller).
    fn stats_of(&mut self, runs: &RunFilter) -> Result<Vec<(String, RunStats)>>;
    /// What could not be read on the way, one line a run ("skipped run ID: why").
    fn warnings(&mut self) -> Vec<String> {
        Vec::new()
    }
}

/// What a server's tables answer beyond a catalog: every gate and every audit row.
pub trait ServerCatalog: Catalog {
    /// The gates of `runs`, of one status or all, each with its run's program path, oldest
    /// first; at most `limit`.
    fn gates_of(
        &mut self,
        runs: &RunFilter,
        status: Option<&str>,
        limit: Option<i64>,
    ) -> Result<Vec<(GateRow, Option<String>)>>;
    /// The ids of `runs`, in order.
    fn ids_of(&mut self, runs: &RunFilter) -> Result<Vec<String>>;
    /// The audit rows of `runs` that `filter` keeps, by run, each run's oldest first.
    fn audits_of(&mut self, runs: &RunFilter, filter: &AuditFilter) -> Result<Vec<AuditRow>>;
    /// Where these runs' state is, as [`Store::place`] names it (for their anchors).
    fn catalog_place(&self) -> String;
}

/// What a database records of its schema: its version, and what a binary must understand
/// to read it and to write it safely (like SQLite's own read and write format versions).
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    pub version: i64,
    pub min_reader: i64,
    pub min_writer: i64,
}

/// What `migrate` found, or did.
#[derive(Debug)]
pub struct Migration {
    /// The schema version before.
    pub from: i64,
    /// The version after (this build's when anything is to do).
    pub to: i64,
    pub steps: Vec<String>,
    pub applied: bool,
}

/// The triggers a schema script creates, by name, each with its own statement as the script
/// holds it (to the `END;` of a body, or the statement's `;`): what a database at that schema
/// must hold, and how each is made again, read from the schema itself.
pub fn schema_triggers(sql: &str) -> Vec<(&str, &str)> {
    let mut found = Vec::new();
    let mut rest = sql;
    let mut at = 0;
    while let Some(i) = rest.find("CREATE TRIGGER ") {
        let start = at + i;
        let head = &sql[start + "CREATE TRIGGER ".len()..];
        let head = head.strip_prefix("IF NOT EXISTS ").unwrap_or(head);
        let name = head.split_whitespace().next().unwrap_or_default();
        let first_semicolon = sql[start..].find(';').map_or(sql.len(), |e| start + e + 1);
        let body = sql[start..first_semicolon].find("\nBEGIN");
        let end = match body {
            Some(_) => sql[start..]
                .find("\nEND;")
                .map_or(sql.len(), |e| start + e + 5),
            None => first_semicolon,
        };
        found.push((name, &sql[start..end]));
        at = end;
        rest = &sql[end..];
    }
    found
}

/// What this binary may do with a database, by its stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// This build's version.
    Current,
    /// Older: read as it is (never changed by a read); upgraded by the first write.
    Older,
    /// Newer, with changes this build may write alongside.
    NewerWritable,
    /// Newer, with changes this build cannot write safely: reads only.
    NewerReadOnly,
}

/// The one rule for schema versions, on every backend. Err: the file cannot even be read,
/// with why.
pub fn access_for(stamp: &Stamp, ours: i64) -> std::result::Result<Access, String> {
    use std::cmp::Ordering;
    match stamp.version.cmp(&ours) {
        Ordering::Equal => Ok(Access::Current),
        Ordering::Less => Ok(Access::Older),
        Ordering::Greater if stamp.min_reader > ours => Err(format!(
            "db has schema version {}, which needs prose-state schema {} or later to read (this one has {ours})",
            stamp.version, stamp.min_reader
        )),
        Ordering::Greater if stamp.min_writer > ours => Ok(Access::NewerReadOnly),
        Ordering::Greater => Ok(Access::NewerWritable),
    }
}

/// The refusal of a write to a database this build may only read.
pub fn refuse_write(stamp_version: i64, ours: i64, location: &str) -> anyhow::Error {
    crate::error::refused(format!(
        "db has schema version {stamp_version}, whose changes this prose-state (schema {ours}) cannot write safely; upgrade prose-state to write it (reads work), the db was left unchanged: {location}"
    ))
}

pub use crate::model::Backend;

#[cfg(test)]
mod tests {
    /// Every trigger each schema makes is read whole from it: a SQLite body to its `END;`, a
    /// PostgreSQL statement to its `;`, and no other statement taken for one.
    #[test]
    fn schema_triggers_reads_each_trigger_whole() {
        let lite = super::schema_triggers(include_str!("../../schema/sqlite.sql"));
        let names: Vec<&str> = lite.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "bindings_version_insert",
                "bindings_version_update",
                "binding_history_version",
                "binding_history_delete",
                "agent_segments_at_record",
                "agent_history_insert",
                "agent_history_update",
                "agent_history_delete",
                "gate_audit_log_no_update",
                "gate_audit_log_no_delete"
            ]
        );
        for (name, sql) in &lite {
            assert!(sql.starts_with("CREATE TRIGGER IF NOT EXISTS "), "{name}");
            assert!(sql.ends_with("\nEND;"), "{name}: {sql}");
            assert_eq!(sql.matches("CREATE ").count(), 1, "{name}");
        }
        let pg = super::schema_triggers(include_str!("../../schema/postgres.sql"));
        assert_eq!(pg.len(), 8);
        for (name, sql) in &pg {
            assert!(
                sql.starts_with(&format!("CREATE TRIGGER {name} ")),
                "{name}"
            );
            assert!(sql.ends_with(");"), "{name}: {sql}");
        }
    }
}
