//! The values a store takes and gives: the inputs of its writes, the rows it reads, and
//! what its operations report.

use super::{chain, signatures, Store};
use crate::model::{ExecStatus, RunStatus};
use anyhow::Result;
use serde::ser::Serializer;
use serde::Serialize;
use std::path::Path;
use std::time::Duration;

/// How to open a store: settings that come from the command line or its environment.
#[derive(Debug, Clone, Copy)]
pub struct OpenOptions {
    /// How long a writer waits for another writer's lock before giving up (exit 75).
    pub busy_timeout: Duration,
    /// What the process carries to its stores (see [`super::Wiring`]).
    pub wiring: &'static super::Wiring,
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

/// The head of a stored binding: kind, attachment path, version, and the statement that wrote
/// it (a decision's is `approve GATE:`).
pub type BindingHead = (Option<String>, Option<String>, i64, Option<String>);

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
#[derive(Debug, Clone, PartialEq)]
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
    /// Its metadata as parsed (Null when it does not parse: an opening's then names nothing).
    pub fn metadata_json(&self) -> serde_json::Value {
        self.metadata
            .as_deref()
            .and_then(|m| serde_json::from_str(m).ok())
            .unwrap_or_default()
    }

    /// The row's chain hash: sha256 over a canonical JSON array of the previous hash and every
    /// content column. Backend-neutral, so both stores chain identically. A row with a
    /// sequence number (schema 5) hashes that instead of its database id, so a run keeps its
    /// chain when it moves between backends; older rows hash their id, as they were written.
    pub fn chain_hash(&self, prev: &str) -> String {
        // Serialised straight from the fields (a tuple is a JSON array): the same bytes as
        // the array built as a `serde_json::Value`, without copying every field into one. The
        // verification of a whole log computes this once a row.
        let canonical = match self.seq {
            Some(seq) => serde_json::to_vec(&(
                "prose-audit-2",
                prev,
                seq,
                &self.gate_id,
                &self.run_id,
                &self.event_type,
                &self.principal,
                &self.comment,
                &self.timestamp,
                &self.metadata,
            )),
            None => serde_json::to_vec(&(
                prev,
                self.id,
                &self.gate_id,
                &self.run_id,
                &self.event_type,
                &self.principal,
                &self.comment,
                &self.timestamp,
                &self.metadata,
            )),
        }
        .unwrap_or_default();
        crate::model::sha256_tag_bytes(&canonical)
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
    /// The answer a decision must give, checked (`response::parse_schema`): sealed in the
    /// `created` event.
    pub response_schema: Option<&'a serde_json::Value>,
    /// The binding its decision writes with the answer, and its scope: the language's frame
    /// of the gate's record, as `bind` would write there (None: the root). Sealed in the
    /// `created` event.
    pub response_binding: Option<(&'a str, Option<i64>)>,
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
pub struct Decision<'a> {
    pub gate_id: &'a str,
    pub approve: bool,
    pub principal: &'a crate::model::Principal,
    /// Where the decision was taken: `cli` or `web` (recorded with it).
    pub client: &'a str,
    pub comment: Option<&'a str>,
    /// The hash of the prompt the decider was shown; a mismatch is refused.
    pub prompt_hash: &'a str,
    /// The gate instance the decider was shown: another (the gate reopened since, even with
    /// the same prompt) is refused. None: whichever instance is there.
    pub instance: Option<i64>,
    /// The approval page's key, which signs the decision (`sign`); None on the command line.
    pub signer: Option<&'a dyn signatures::SignsDecisions>,
    /// The content digest of each of the gate's inputs as the decider was shown them (read
    /// by the front end: an attachment's value is a file or a blob), sealed with the
    /// decision. Required for a gate with inputs.
    pub inputs: Option<&'a std::collections::BTreeMap<String, Option<String>>>,
    /// The version of each input, in its frame, that the decider was shown: sealed with the
    /// decision, so that `verify`, `gates wait` and `get --version` check that very version.
    pub pins: Option<&'a std::collections::BTreeMap<String, chain::Pin>>,
    /// The answer given with the decision (`--response`), parsed: checked in the rule against
    /// the schema the gate's `created` event seals, and sealed with the decision.
    pub response: Option<&'a serde_json::Value>,
    /// An approval's edits of the gate's inputs (`approve --edit NAME=VALUE`): each a new
    /// version of that input by the decider, written in the decision's transaction, and the
    /// decision sealed about the edited version.
    pub edits: &'a [(String, String)],
    /// Who decides, as the principals book says it: asked by the rule once the decision holds
    /// the run's write lock, so that a token revoked, or a group changed, while it waited for
    /// the lock is seen (the decision's time is read then too). An Err refused or tampered
    /// (the token revoked since) is logged as a refusal.
    pub authority: &'a dyn Fn() -> anyhow::Result<Authority>,
}

/// Who decides, when the decision is taken.
pub struct Authority {
    /// Whether a token authenticated the principal (`auth`).
    pub authenticated: bool,
    /// Who is in which group and who is revoked, from the principals book's sealed log; Err
    /// says why the log cannot be trusted (then no group admits anyone).
    pub roster: std::result::Result<crate::team::Roster, String>,
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
    /// Someone decided first (or the deadline passed); the attempt was audit-logged. `true`:
    /// only its row says so, no sealed decision of its opening stands (the spec's own SQL,
    /// another tool): nothing here attests that decision.
    AlreadyResolved(GateRow, bool),
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
    /// Rows of this event type.
    pub event: Option<&'a str>,
    /// Rows whose metadata holds any of these texts (a narrowing; the reader parses what it
    /// wants). See [`spellings`] for what a name is looked for as.
    pub mentions: Option<&'a [&'a str]>,
    /// `created` events whose metadata names this binding as the gate's response binding
    /// (`--response-binding`): an indexed narrowing on SQLite (schema 11), so that a `bind`
    /// does not read every opening of the run to learn that no gate answers into its name.
    /// The reader parses and checks what it finds, as with `mentions`.
    pub answers_into: Option<&'a str>,
    /// With `gate_id`: the run's moves (its `renumbered` events) besides that gate's rows, in
    /// the same read, as a gate's history is judged with them.
    pub with_moves: bool,
    /// Rows of the sealed chain after this sequence number (those a machine's anchor does not
    /// cover yet: `chain::names_after`).
    pub after_seq: Option<i64>,
}

/// The texts a row that names binding `name` holds one of: the name as a JSON string, as
/// prose-state's compact JSON writes it, or a JSON `\u` escape. A name is letters, digits,
/// `_`, `.` and `-`, so an escape is its only other spelling in JSON, and prose-state's own
/// rows spell nothing so (no text they seal takes control characters): only a row changed
/// behind its back does, and it may spell the name another way (`"\u0061ns"` is `"ans"`)
/// that must not hide it from the reader.
pub fn spellings(name: &str) -> [String; 2] {
    [serde_json::Value::from(name).to_string(), "\\u".to_string()]
}

impl AuditFilter<'_> {
    /// `answers_into` as the texts to look for ([`spellings`]), for a backend that narrows by
    /// text, not by an index.
    pub fn answers_spellings(&self) -> Option<Vec<String>> {
        self.answers_into.map(|name| spellings(name).to_vec())
    }
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
    /// The newest execution record when its newest segment was appended: a segment no record
    /// followed is a session that ran and was not logged (`resume`).
    pub last_segment_at_record: Option<i64>,
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

/// An execution row as stored (raw SQL may leave any column NULL): the one shape of the table,
/// read by every reader, written by appends, dumps and restores alike. A status raw SQL wrote
/// that is none of the vocabulary reads as `ExecStatus::Other`, never fails the read.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionRow {
    pub id: i64,
    pub statement_index: Option<i64>,
    pub statement_text: Option<String>,
    pub status: Option<ExecStatus>,
    pub started_at: Option<String>,
    pub completed_at: Option<String>,
    pub error_message: Option<String>,
    pub parent_id: Option<i64>,
    /// JSON; a server stores it as jsonb, so it is compared as JSON.
    pub metadata: Option<String>,
    /// The key a retried append lands once under (`exec-append --key`).
    pub idempotency_key: Option<String>,
    /// Who appended it (schema 10); None for a raw writer, or a record from before.
    pub principal: Option<String>,
}

impl ExecutionRow {
    /// The row from `EXECUTION_COLUMNS`' cells, as a dump and every reader read it.
    pub fn read(c: &dyn super::dump::Cells) -> Self {
        ExecutionRow {
            id: c.int(0).unwrap_or_default(),
            statement_index: c.int(1),
            statement_text: c.text(2),
            status: c.text(3).as_deref().map(ExecStatus::parse),
            started_at: c.text(4),
            completed_at: c.text(5),
            error_message: c.text(6),
            parent_id: c.int(7),
            metadata: c.text(8),
            idempotency_key: c.text(9),
            principal: c.text(10),
        }
    }

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

#[cfg(test)]
mod tests {
    use super::AuditRow;

    /// The hash as it was first defined: the array built as a `serde_json::Value`.
    fn as_defined(r: &AuditRow, prev: &str) -> String {
        let canonical = match r.seq {
            Some(seq) => serde_json::json!([
                "prose-audit-2",
                prev,
                seq,
                r.gate_id,
                r.run_id,
                r.event_type,
                r.principal,
                r.comment,
                r.timestamp,
                r.metadata
            ]),
            None => serde_json::json!([
                prev,
                r.id,
                r.gate_id,
                r.run_id,
                r.event_type,
                r.principal,
                r.comment,
                r.timestamp,
                r.metadata
            ]),
        };
        crate::model::sha256_tag(&canonical.to_string())
    }

    /// Every column given texts a JSON string escapes differently (quotes, backslashes,
    /// control characters, non-ASCII, a line separator, an empty string) or none: the
    /// chain hash is the same bytes as defined, row by row.
    #[test]
    fn the_chain_hash_is_the_canonical_array_as_defined() {
        let texts: Vec<Option<String>> = [
            None,
            Some(""),
            Some("plain"),
            Some("a \"quoted\" \\ back"),
            Some("tab\tnew\nline\u{1}\u{7f}"),
            Some("é ü 日本 \u{2028} \u{1F600}"),
            Some(r#"{"inputs":["doc"],"response_binding":"ans"}"#),
        ]
        .into_iter()
        .map(|t| t.map(str::to_string))
        .collect();
        let mut n = 0;
        for (i, a) in texts.iter().enumerate() {
            for (j, b) in texts.iter().enumerate() {
                for seq in [None, Some(0), Some(7), Some(i64::MAX)] {
                    let r = AuditRow {
                        id: (i * 10 + j) as i64 - 3,
                        gate_id: a.clone().unwrap_or_default(),
                        run_id: b.clone().unwrap_or_default(),
                        event_type: "created".into(),
                        principal: a.clone(),
                        comment: b.clone(),
                        timestamp: texts[(i + j) % texts.len()].clone(),
                        metadata: texts[(i * j) % texts.len()].clone(),
                        prev_hash: None,
                        hash: None,
                        seq,
                        seal: None,
                    };
                    for prev in ["", "sha256:00", "x\"y"] {
                        assert_eq!(r.chain_hash(prev), as_defined(&r, prev), "{r:?}");
                        n += 1;
                    }
                }
            }
        }
        assert_eq!(n, 7 * 7 * 4 * 3);
    }

    #[test]
    fn hex_is_two_lower_case_digits_a_byte() {
        let all: Vec<u8> = (0..=255).collect();
        let want: String = all.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(crate::model::hex(&all), want);
    }
}
