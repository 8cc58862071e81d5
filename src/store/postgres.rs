//! The PostgreSQL backend: every run in the `openprose` schema of one server, keyed by run_id.
//!
//! Sessions run in UTC, and timestamps go in and out as text in the same form SQLite's
//! `datetime('now')` gives, so commands see the same values whichever backend holds a run.
//! Concurrency: writes to a run take its row `FOR SHARE` (parallel branches never wait on
//! each other) and check it is not finished; gate operations, which must be serialised
//! (first decision wins, one audit chain per run), and `finish` take it `FOR UPDATE`.

use super::dump::{Cells, GateRecord, RENUMBERED, RUN_EVENT};
use super::rows::{GateSelect, Rows};
use super::{Access, AuditFilter, AuditRow, BindingRow, GateRow, ImportRow, NewRun, OpenOptions};
use crate::error::{not_found, refused, shown};
use anyhow::{anyhow, Result};
use postgres::error::SqlState;
use postgres::types::{ToSql, Type};
use postgres::ToStatement;
use postgres::{Client, GenericClient, Row, Transaction};

/// The version in openprose.schema_version written by this build.
pub const POSTGRES_SCHEMA_VERSION: i32 = 12;

/// What a binary must understand to read this build's schema, and to write it safely.
/// Schema 11: `at_record` (of history and segments) is the record id sequence's position,
/// which a reader must map to the run's own record; an older reader takes it for the record
/// itself, and reads, exports and forks the past wrongly without a word (`get --as-of` a
/// binding "did not exist", a fork without it). So readers of 11 only.
const MIN_READER: i32 = 11;
// Schema 7 (team approvals): a writer from before them would decide a team's gate at its
// first approval. Schema 9 (binding history): an older writer would delete a replaced value
// that an older version still names, and record no writer. Schema 10 (a write's principal
// and step handed to the history trigger in settings) changes no row a writer of 9 writes;
// nor does schema 11 (an update's version kept by the BEFORE trigger), nor schema 12 (the
// history triggers fire only for sessions that are not prose-state's: a writer of 11 sets no
// `openprose.writer`, and its versions are kept by them as before), but a writer is a reader
// too: MIN_READER refuses writers before 11.
const MIN_WRITER: i32 = 9;
/// What the stamp asks of readers once a team's gate is on the server: a reader from before
/// team approvals (7) would take a quorum's votes for tampering, and one from before
/// escalations (8) an escalated gate's wider allow list.
pub const TEAM_READER: i32 = 8;

const SCHEMA: &str = include_str!("../../schema/postgres.sql");

/// Any constant: the advisory lock that serialises schema changes across processes.
const MIGRATION_LOCK: i64 = 0x7072_6f73_6573_7401;

/// A timestamp column as text in `datetime('now')` form.
macro_rules! ts {
    ($col:literal) => {
        concat!(
            "to_char(",
            $col,
            " AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')"
        )
    };
}

mod blobs;
mod catalog;
mod connect;
mod dump;
mod principals;
mod query;
mod tx;

pub use tx::PgTx;

pub use connect::masked;
use connect::{committed, connect_client, connect_error, map_err};

/// A connection of its own to the server at `url`, for listening (`wake`).
pub fn listening_client(url: &str) -> Result<Client> {
    Ok(connect_client(url)?)
}

/// The agents rows with their segment counts, under a WHERE clause (`$1` is the run).
macro_rules! agent_select {
    ($where:literal) => {
        concat!(
            "SELECT a.name, a.scope, a.memory, ",
            ts!("a.created_at"),
            ", ",
            ts!("a.updated_at"),
            ", (SELECT COUNT(*) FROM openprose.agent_segments s
                WHERE s.agent_name = a.name AND s.run_id IS NOT DISTINCT FROM a.run_id),
               (SELECT MAX(s.at_record) FROM openprose.agent_segments s
                WHERE s.agent_name = a.name AND s.run_id IS NOT DISTINCT FROM a.run_id)
             FROM openprose.agents a ",
            $where
        )
    };
}

// After the macros it uses (`ts!`, `agent_select!`): a macro is seen only below it.
mod store_impl;

pub struct PgStore {
    /// What the process carries to its stores (kept connections, the audit key, …).
    pub(super) wiring: &'static super::Wiring,
    /// Taken by `Drop`: a long-lived process keeps it for the next open.
    client: super::Held<Client>,
    /// The server's URL: which kept connections this one may be used again as. Never shown.
    url: String,
    /// What this build may do with the server's schema.
    access: Access,
    /// The schema version the server records.
    version: i64,
    /// The run this store serves; None for project-scoped agent memory only.
    run_id: Option<String>,
    shown_url: String,
    busy_ms: u64,
    /// This session may hold upload locks (`blobs`): released before it is kept.
    uploading: bool,
    /// A read-only snapshot is open on this session (`Store::snapshot`).
    in_snapshot: bool,
    /// The session ran a statement of the caller's (`query`): never kept (see `Drop`).
    ran_foreign_sql: bool,
    /// Statements prepared on this session for the writes a long-lived process makes again
    /// and again (kept with the session: see `pool`).
    kept_statements: Prepared,
}

/// Statements prepared on a session, by their text.
pub(super) type Prepared = std::collections::HashMap<&'static str, postgres::Statement>;

impl PgStore {
    fn err(&self) -> impl Fn(postgres::Error) -> anyhow::Error + '_ {
        |e| map_err(e, &self.shown_url, self.busy_ms)
    }

    fn run(&self) -> Result<&str> {
        self.run_id
            .as_deref()
            .ok_or_else(|| anyhow!("no run selected for this postgres store"))
    }

    /// Connects, sets the session up and brings the schema to this build's version; with a
    /// run, checks that it exists. All of it in one round trip when the schema is current.
    fn connect(url: &str, run: Option<&str>, opts: OpenOptions) -> Result<(Self, bool)> {
        let shown_url = masked(url);
        let busy_ms = opts.busy_timeout.as_millis() as u64;
        let kept = opts
            .wiring
            .pools()
            .and_then(|p| p.postgres.take(url, |_, c| c.0.is_closed()));
        let was_kept = kept.is_some();
        let (client, kept_statements) = match kept {
            Some(kept) => kept,
            None => (
                connect_client(url).map_err(|e| connect_error(&e, url, &shown_url))?,
                Prepared::new(),
            ),
        };
        let mut store = PgStore {
            client: super::Held::new(client),
            url: url.to_string(),
            run_id: run.map(str::to_string),
            shown_url,
            busy_ms,
            access: Access::Current,
            version: POSTGRES_SCHEMA_VERSION as i64,
            uploading: false,
            in_snapshot: false,
            ran_foreign_sql: false,
            kept_statements,
            wiring: opts.wiring,
        };
        // Every open sets the session up again (time zone, lock timeout), kept or not.
        let started = store.start();
        let (version, run_exists) = match started {
            // A kept connection the server has closed since (restarted, the session
            // terminated, or ended idle: its first statement may read the termination notice,
            // 57P01 or 57P05, before the socket shows closed), or one the network lost: a new
            // one, as if none had been kept (the next kept one first; at most every kept one
            // is tried, then a new connection, whose error is the answer).
            Err(e) if was_kept && (store.client.is_closed() || lost(&e)) => {
                drop(store);
                return Self::connect(url, run, opts);
            }
            Ok(v) => v,
            // No openprose schema yet: first use of this server.
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => {
                store.ensure_schema()?;
                store.start().map_err(store.err())?
            }
            Err(e) => return Err(store.err()(e)),
        };
        // A read never changes the schema: an older one is upgraded by the first write, a
        // newer one is used as far as what it records allows.
        match version {
            Some(v) if v == POSTGRES_SCHEMA_VERSION => {}
            None => store.ensure_schema()?,
            Some(v) => {
                let stamp = if v > POSTGRES_SCHEMA_VERSION {
                    store.stamp(v)?
                } else {
                    super::Stamp {
                        version: v as i64,
                        min_reader: 0,
                        min_writer: 0,
                    }
                };
                store.version = stamp.version;
                store.access =
                    super::access_for(&stamp, POSTGRES_SCHEMA_VERSION as i64).map_err(|why| {
                        refused(format!(
                            "openprose {why}; upgrade prose-state: {}",
                            store.shown_url
                        ))
                    })?;
            }
        }
        Ok((store, run_exists))
    }

    /// What a newer schema asks of readers and writers (recorded since schema 2).
    fn stamp(&mut self, version: i32) -> Result<super::Stamp> {
        let (r, w): (Option<i32>, Option<i32>) = self.one(
            "SELECT min_reader, min_writer FROM openprose.schema_version
             ORDER BY version DESC LIMIT 1",
            &[],
            |row| (row.get(0), row.get(1)),
        )?;
        Ok(super::Stamp {
            version: version as i64,
            min_reader: r.unwrap_or(version) as i64,
            min_writer: w.unwrap_or(version) as i64,
        })
    }

    /// Makes the schema writable by this build: the first write to an older schema upgrades
    /// it; a write to a newer one this build may not write is refused.
    fn prepare_write(&mut self) -> Result<()> {
        match self.access {
            Access::Current | Access::NewerWritable => Ok(()),
            Access::Older => self.upgrade(),
            Access::NewerReadOnly => Err(super::refuse_write(
                self.version,
                POSTGRES_SCHEMA_VERSION as i64,
                &self.shown_url,
            )),
        }
    }

    /// Brings an older schema to this build's.
    fn upgrade(&mut self) -> Result<()> {
        self.ensure_schema()?;
        self.access = Access::Current;
        self.version = POSTGRES_SCHEMA_VERSION as i64;
        Ok(())
    }

    /// The session settings, the schema version and whether the run exists, in one statement.
    /// `openprose.writer` tells the history triggers that this session keeps its own writes'
    /// versions (schema 12): they fire for other writers only.
    ///
    /// The session finds names in `pg_catalog` alone (`search_path`), whatever the database or
    /// the role sets: a writer of the database who puts a schema of its own ahead of it (an
    /// operator `>` or `=` of its own, a function of a built-in's name) changes what no
    /// statement of prose-state means. Every table is named with its schema. This statement,
    /// parsed before it sets the path, names each function and operator with its schema too.
    fn start(&mut self) -> Result<(Option<i32>, bool), postgres::Error> {
        let busy = self.busy_ms.to_string();
        let run = self.run_id.clone().unwrap_or_default();
        let row = self.client.query_typed(
            "SELECT pg_catalog.set_config('search_path', 'pg_catalog', false),
                    pg_catalog.set_config('TimeZone', 'UTC', false),
                    pg_catalog.set_config('openprose.writer', 'prose-state', false),
                    pg_catalog.set_config('lock_timeout', $1, false),
                    pg_catalog.set_config('client_min_messages', 'warning', false),
                    (SELECT pg_catalog.max(version) FROM openprose.schema_version),
                    EXISTS (SELECT 1 FROM openprose.run WHERE id OPERATOR(pg_catalog.=) $2)",
            &[(&busy, Type::TEXT), (&run, Type::TEXT)],
        )?;
        let row = &row[0];
        Ok((row.get(5), row.get(6)))
    }

    /// Creates the openprose schema, or brings it up to this build's version, under an
    /// advisory lock so that concurrent first uses do not race.
    fn ensure_schema(&mut self) -> Result<()> {
        self.in_tx(|on| {
            on.exec("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
            // Another process may have done it while this one waited for the lock.
            let table: bool = on.one(
                "SELECT to_regclass('openprose.schema_version') IS NOT NULL",
                &[],
                |r| r.get(0),
            )?;
            let current: Option<i32> = match table {
                true => on.one(
                    "SELECT max(version) FROM openprose.schema_version",
                    &[],
                    |r| r.get(0),
                )?,
                false => None,
            };
            if current.is_none_or(|v| v < POSTGRES_SCHEMA_VERSION) {
                on.on(|c| c.batch_execute(SCHEMA))?;
                on.exec("DELETE FROM openprose.schema_version", &[])?;
                on.exec(
                    "INSERT INTO openprose.schema_version (version, min_reader, min_writer)
                 VALUES ($1, $2, $3)",
                    &[&POSTGRES_SCHEMA_VERSION, &MIN_READER, &MIN_WRITER],
                )?;
            }
            Ok(())
        })
    }

    /// `f` in a plain transaction of this session (no run row held), committed when it
    /// succeeds.
    fn in_tx<T>(&mut self, f: impl FnOnce(&mut On<'_, Transaction<'_>>) -> Result<T>) -> Result<T> {
        let (url, busy_ms) = (self.shown_url.clone(), self.busy_ms);
        let err = |e| map_err(e, &url, busy_ms);
        let mut tx = self.client.transaction().map_err(err)?;
        let done = f(&mut On {
            c: &mut tx,
            url: &url,
            busy_ms,
        })?;
        committed(tx.commit(), err)?;
        Ok(done)
    }

    /// Creates a run's row.
    pub fn create_run(url: &str, run: &NewRun, opts: OpenOptions) -> Result<Self> {
        let (store, exists) = Self::connect(url, Some(run.id), opts)?;
        let mut store = store;
        if exists {
            return Err(refused(format!(
                "run already exists on the server: {}",
                shown(run.id)
            )));
        }
        // The run's own row is not there to lock yet: a plain transaction.
        store.prepare_write()?;
        store.in_tx(|on| {
            on.exec(
            "INSERT INTO openprose.run (id, program_path, program_source, started_at, updated_at,
                 status, state_mode, history_keep)
             VALUES ($1, $2, $3, ($4::text)::timestamptz, ($4::text)::timestamptz, 'running',
                     'postgres', $5)",
            &[&run.id, &run.program_path, &run.program_source, &run.created_at, &run.history_keep],
        )
        })?;
        Ok(store)
    }

    /// Opens the store of an existing run.
    pub fn open_run(url: &str, run_id: &str, opts: OpenOptions) -> Result<Self> {
        let (store, exists) = Self::connect(url, Some(run_id), opts)?;
        if !exists {
            return Err(not_found(format!(
                "run not found on the server {}: {}",
                store.shown_url,
                shown(run_id)
            )));
        }
        Ok(store)
    }

    /// The store of a run that may not exist yet (an import's destination), and whether it
    /// does.
    pub fn open_maybe(url: &str, run_id: &str, opts: OpenOptions) -> Result<(Self, bool)> {
        Self::connect(url, Some(run_id), opts)
    }

    /// A store for project-scoped agents only (run_id NULL).
    pub fn open_project(url: &str, opts: OpenOptions) -> Result<Self> {
        Ok(Self::connect(url, None, opts)?.0)
    }

    /// The ids of every run on the server.
    pub fn run_ids(&mut self) -> Result<Vec<String>> {
        super::ServerCatalog::ids_of(self, &super::RunFilter::default())
    }
}

/// How a PostgreSQL store and its transactions run a statement: each helper is one statement,
/// its parameters and its row mapper, and maps the driver's error once, here (`map_err`, with
/// the URL as shown and the busy timeout).
trait Statements {
    type Client: GenericClient;
    /// The session (a connection, or a transaction on one), the URL as shown, the timeout.
    fn session(&mut self) -> (&mut Self::Client, &str, u64);

    /// `f` over the session, its error mapped.
    fn on<T>(
        &mut self,
        f: impl FnOnce(&mut Self::Client) -> Result<T, postgres::Error>,
    ) -> Result<T> {
        let (c, url, busy_ms) = self.session();
        f(c).map_err(|e| map_err(e, url, busy_ms))
    }

    /// Runs a statement that returns no rows.
    fn exec<S: ?Sized + ToStatement>(&mut self, sql: &S, p: Params) -> Result<()> {
        self.on(|c| c.execute(sql, p).map(drop))
    }

    /// The one row a statement returns.
    fn one<S: ?Sized + ToStatement, T>(
        &mut self,
        sql: &S,
        p: Params,
        f: impl FnOnce(&Row) -> T,
    ) -> Result<T> {
        self.on(|c| c.query_one(sql, p).map(|r| f(&r)))
    }

    /// The row a statement returns, if any.
    fn opt<S: ?Sized + ToStatement, T>(
        &mut self,
        sql: &S,
        p: Params,
        f: impl FnOnce(&Row) -> T,
    ) -> Result<Option<T>> {
        self.on(|c| c.query_opt(sql, p).map(|r| r.as_ref().map(f)))
    }

    /// The row a statement returns, if any, its parameters' types given: one round trip,
    /// with no statement prepared first (for the statements of a one-shot command's hot path).
    fn opt_typed<T>(
        &mut self,
        sql: &str,
        p: &[(&(dyn ToSql + Sync), Type)],
        f: impl FnOnce(&Row) -> T,
    ) -> Result<Option<T>> {
        self.on(|c| {
            let rows = c.query_typed(sql, p)?;
            Ok(rows.first().map(f))
        })
    }

    /// Every row a statement returns, its parameters' types given: one round trip, with no
    /// statement prepared first.
    fn all_typed<T>(
        &mut self,
        sql: &str,
        p: &[(&(dyn ToSql + Sync), Type)],
        f: impl FnMut(&Row) -> T,
    ) -> Result<Vec<T>> {
        self.on(|c| {
            c.query_typed(sql, p)
                .map(|rows| rows.iter().map(f).collect())
        })
    }

    /// Every row a statement returns.
    fn all<S: ?Sized + ToStatement, T>(
        &mut self,
        sql: &S,
        p: Params,
        f: impl FnMut(&Row) -> T,
    ) -> Result<Vec<T>> {
        self.on(|c| c.query(sql, p).map(|rows| rows.iter().map(f).collect()))
    }
}

/// A statement's parameters.
type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// Pending gates of run $1 past their deadline at $2.
const OVERDUE: &str = "status = 'pending' AND timeout_at IS NOT NULL
                       AND timeout_at <= ($2::text)::timestamptz";
/// Pending gates of run $1 with something due at $2: past their deadline, or a reminder (on
/// `gates` or on `gates g`, unqualified).
const DUE: &str = "status = 'pending' AND (timeout_at IS NOT NULL
                       AND timeout_at <= ($2::text)::timestamptz
                       OR remind_at <= ($2::text)::timestamptz)";

/// Columns of a list (a `dump::Table`'s) as the server gives them in the form both backends
/// share (times as `datetime('now')` text, JSON as text), each named after `prefix`, the
/// alias of a table of runs' rows (`run_id`).
///
/// `at_record`, which the triggers take from the execution id sequence's position when they
/// keep a version (schema 11: no lookup of `execution` at every write), is given as what it
/// means: the newest record of the row's run at or below that position (the run's newest
/// record when the version was written), as SQLite's triggers record it.
fn select_list(list: &str, prefix: &str) -> String {
    let columns: Vec<String> = super::dump::columns(list)
        .map(|(c, time, json)| match (time, json) {
            (true, _) => format!(ts!("{}{}"), prefix, c),
            (_, true) => format!("{prefix}{c}::text"),
            _ if c == "at_record" => format!(
                "(SELECT MAX(e.id) FROM openprose.execution e \
                  WHERE e.run_id = {prefix}run_id AND e.id <= {prefix}at_record)"
            ),
            _ => format!("{prefix}{c}"),
        })
        .collect();
    columns.join(", ")
}

/// A gate's columns on `gates g`, in `gate_record`'s order.
fn gate_columns() -> String {
    select_list(super::dump::GATE_COLUMNS, "g.")
}

fn gate_select() -> String {
    format!("SELECT {} FROM openprose.gates g", gate_columns())
}

const AUDIT_SELECT: &str = concat!(
    "SELECT id, gate_id, run_id, event_type, principal, comment, ",
    ts!("timestamp"),
    ", metadata, prev_hash, hash, seq, seal FROM openprose.gate_audit_log"
);

/// The scope chain of execution $1 of run $2 (itself, its parent, ...; at most $3 links up):
/// `chain`'s id and depth.
const CHAIN: &str = "WITH RECURSIVE chain(id, parent_id, depth) AS (
        SELECT id, parent_id, 0 FROM openprose.execution WHERE id = $1 AND run_id = $2
        UNION ALL
        SELECT e.id, e.parent_id, c.depth + 1
        FROM chain c JOIN openprose.execution e ON e.id = c.parent_id
        WHERE c.depth < $3::int)";

const BINDING_SELECT: &str = concat!(
    "b.name, b.execution_id, b.kind, b.value, b.source_statement, ",
    ts!("b.created_at"),
    ", ",
    ts!("b.updated_at"),
    ", b.attachment_path, b.version, ",
    // The binding's own version: the newest `n` of its history (one seek of its index).
    "(SELECT MAX(h.n) FROM openprose.binding_history h WHERE h.run_id = b.run_id \
       AND h.name = b.name AND COALESCE(h.execution_id, -1) = COALESCE(b.execution_id, -1))"
);

/// A gates (or gate_instances) row in `gate_columns()`' order, as stored.
fn gate_record(r: &Row) -> GateRecord {
    GateRecord::read(r)
}

/// A row of the server, whose columns hold the types the schema gives them.
impl Cells for Row {
    fn text(&self, i: usize) -> Option<String> {
        self.get(i)
    }

    fn int(&self, i: usize) -> Option<i64> {
        self.get(i)
    }

    fn bytes(&self, i: usize) -> Option<Vec<u8>> {
        self.get::<_, Option<String>>(i).map(String::into_bytes)
    }
}

/// A gates row as the rules read it.
fn gate_row(r: &Row) -> GateRow {
    gate_record(r).into_row()
}

fn audit_row(r: &Row) -> AuditRow {
    AuditRow {
        id: r.get(0),
        gate_id: r.get(1),
        run_id: r.get(2),
        event_type: r.get(3),
        principal: r.get(4),
        comment: r.get(5),
        timestamp: r.get(6),
        metadata: r.get(7),
        prev_hash: r.get(8),
        hash: r.get(9),
        seq: r.get(10),
        seal: r.get(11),
    }
}

fn binding_row(r: &Row) -> BindingRow {
    BindingRow {
        name: r.get(0),
        execution_id: r.get(1),
        kind: r.get(2),
        value: r.bytes(3),
        source_statement: r.get(4),
        created_at: r.get(5),
        updated_at: r.get(6),
        attachment_path: r.get(7),
        version: r.get(8),
        own_version: r.get(9),
    }
}

fn attachment_referenced(
    s: &mut impl Statements,
    run_id: &str,
    attachment_path: &str,
) -> Result<bool> {
    s.one(
        "SELECT EXISTS (SELECT 1 FROM openprose.bindings WHERE run_id = $1 AND attachment_path = $2)
             OR EXISTS (SELECT 1 FROM openprose.binding_history
                        WHERE run_id = $1 AND attachment_path = $2)",
        &[&run_id, &attachment_path],
        |r| r.get(0),
    )
}

/// Every kept version of the binding (or agent) of this name in exactly this scope, oldest
/// first.
fn kept_versions(
    s: &mut impl Statements,
    kept: super::history::Kept,
    run_id: &str,
    name: &str,
    execution_id: Option<i64>,
) -> Result<Vec<super::history::HistoryRow>> {
    s.all(
        &format!(
            "SELECT {} FROM openprose.{} h
             WHERE run_id = $1 AND name = $2 AND COALESCE(execution_id, -1) = $3 ORDER BY n",
            select_list(super::history::COLUMNS, "h."),
            kept.table()
        ),
        &[&run_id, &name, &execution_id.unwrap_or(-1)],
        |r| super::history::HistoryRow::read(r),
    )
}

/// The scope chain from `id` up to the topmost execution, nearest first.
fn scope_chain(s: &mut impl Statements, run_id: &str, id: i64) -> Result<Vec<i64>> {
    s.all(
        &format!("{CHAIN} SELECT id FROM chain ORDER BY depth"),
        &[&id, &run_id, &crate::store::MAX_SCOPE_DEPTH],
        |r| r.get(0),
    )
}

/// The scopes a binding of this name is bound in now (None: the root).
fn bound_scopes(s: &mut impl Statements, run_id: &str, name: &str) -> Result<Vec<Option<i64>>> {
    s.all(
        "SELECT execution_id FROM openprose.bindings WHERE run_id = $1 AND name = $2",
        &[&run_id, &name],
        |r| r.get(0),
    )
}

fn execution_exists(s: &mut impl Statements, run_id: &str, id: i64) -> Result<bool> {
    s.one(
        "SELECT EXISTS (SELECT 1 FROM openprose.execution WHERE id = $1 AND run_id = $2)",
        &[&id, &run_id],
        |r| r.get(0),
    )
}

fn import_row(r: &Row) -> ImportRow {
    ImportRow::read(r)
}

/// A transaction held apart from its store (an upload's, a cleanup's), with its error edge.
struct On<'a, C> {
    c: &'a mut C,
    url: &'a str,
    busy_ms: u64,
}

impl<C: GenericClient> Statements for On<'_, C> {
    type Client = C;
    fn session(&mut self) -> (&mut C, &str, u64) {
        (self.c, self.url, self.busy_ms)
    }
}

/// The gates rows `which` selects of run `run` (`Rows::gate_rows`), on a store or in a
/// transaction (where `Due` locks the rows it reads), in one round trip.
fn gate_rows(s: &mut impl Statements, run: &str, which: GateSelect<'_>) -> Result<Vec<GateRecord>> {
    let run = run.to_string();
    let (sql, id, number) = match which {
        GateSelect::Listed(status) => {
            let status = status.map(|s| s.as_str().to_string());
            let sql = format!(
                "{} WHERE run_id = $1 AND ($2::text IS NULL OR status = $2)
                 ORDER BY created_at, id",
                gate_select()
            );
            (sql, status, None)
        }
        GateSelect::Id(id) => (
            format!("{} WHERE run_id = $1 AND id = $2", gate_select()),
            Some(id.to_string()),
            None,
        ),
        GateSelect::Opening(id, instance) => (
            format!(
                "SELECT {} FROM openprose.gate_instances g
                  WHERE g.run_id = $1 AND g.gate_id = $2 AND g.instance = $3",
                select_list(super::dump::INSTANCE_COLUMNS, "g.")
            ),
            Some(id.to_string()),
            Some(instance),
        ),
        GateSelect::Due(now) => (
            format!(
                "{} WHERE run_id = $1 AND {DUE} ORDER BY created_at, id FOR UPDATE",
                gate_select()
            ),
            Some(now.to_string()),
            None,
        ),
    };
    let mut p: Vec<(&(dyn ToSql + Sync), Type)> = vec![(&run, Type::TEXT), (&id, Type::TEXT)];
    if let Some(n) = &number {
        p.push((n, Type::INT8));
    }
    s.all_typed(&sql, &p, gate_record)
}

/// The audit rows of run `run` the filter selects, in id order.
fn audit(s: &mut impl Statements, run: &str, f: &AuditFilter) -> Result<Vec<AuditRow>> {
    let answers_into = f.answers_spellings();
    s.all(
        &format!(
            "{AUDIT_SELECT} WHERE run_id = $1
               AND ($2::text IS NULL OR gate_id = $2
                    OR ($8 AND gate_id = '{RUN_EVENT}' AND event_type = '{RENUMBERED}'))
               AND ($3::text IS NULL OR principal = $3)
               AND ($4::text IS NULL OR timestamp >= ($4::text)::timestamptz)
               AND ($5::text IS NULL OR event_type = $5)
               AND ($6::text[] IS NULL
                    OR EXISTS (SELECT 1 FROM unnest($6::text[]) t WHERE pg_catalog.strpos(metadata::text, t) > 0))
               AND ($7::text[] IS NULL OR (event_type = 'created'
                    AND EXISTS (SELECT 1 FROM unnest($7::text[]) t WHERE pg_catalog.strpos(metadata::text, t) > 0)))
               AND ($9::int8 IS NULL OR seq > $9)
             ORDER BY id"
        ),
        &[
            &run,
            &f.gate_id,
            &f.principal,
            &f.since,
            &f.event,
            &f.mentions,
            // The name's spellings: a narrowing of the run's openings, which the reader parses
            // and checks.
            &answers_into,
            &f.with_moves,
            &f.after_seq,
        ],
        audit_row,
    )
}

/// A store's and its transactions' reads, each one statement (`store::rows`).
macro_rules! pg_rows {
    ($t:ty) => {
        impl Rows for $t {
            fn gate_rows(&mut self, which: GateSelect<'_>) -> Result<Vec<GateRecord>> {
                let run = self.run()?.to_string();
                gate_rows(self, &run, which)
            }

            fn audit(&mut self, filter: &AuditFilter) -> Result<Vec<AuditRow>> {
                let run = self.run()?.to_string();
                audit(self, &run, filter)
            }

            fn execution_exists(&mut self, id: i64) -> Result<bool> {
                let run = self.run()?.to_string();
                execution_exists(self, &run, id)
            }

            fn scope_chain(&mut self, execution_id: i64) -> Result<Vec<i64>> {
                let run = self.run()?.to_string();
                scope_chain(self, &run, execution_id)
            }

            fn bound_scopes(&mut self, name: &str) -> Result<Vec<Option<i64>>> {
                let run = self.run()?.to_string();
                bound_scopes(self, &run, name)
            }

            fn attachment_referenced(&mut self, attachment_path: &str) -> Result<bool> {
                let run = self.run()?.to_string();
                attachment_referenced(self, &run, attachment_path)
            }

            fn kept_versions(
                &mut self,
                kept: super::history::Kept,
                name: &str,
                execution_id: Option<i64>,
            ) -> Result<Vec<super::history::HistoryRow>> {
                let run = self.run()?.to_string();
                kept_versions(self, kept, &run, name, execution_id)
            }

            fn wiring(&self) -> &'static super::Wiring {
                self.wiring
            }
        }
    };
}

pg_rows!(PgStore);
pg_rows!(tx::PgTx<'_>);

impl Statements for PgStore {
    type Client = Client;
    fn session(&mut self) -> (&mut Client, &str, u64) {
        (&mut self.client, &self.shown_url, self.busy_ms)
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        let Some(mut client) = self.client.take() else {
            return;
        };
        // No transaction is open here (a transaction borrows the client, and rolls back when
        // dropped) but a snapshot, ended here with any upload lock, and every open sets the
        // session up again. A session that cannot be put back in order is not kept, nor one
        // that ran the caller's SQL (`query`).
        let pools = self.wiring.pools();
        if let (Some(pools), false, false) = (pools, client.is_closed(), self.ran_foreign_sql) {
            let mut clean = Ok(());
            if self.in_snapshot {
                clean = client.batch_execute("ROLLBACK");
            }
            if self.uploading && clean.is_ok() {
                clean = client.batch_execute("SELECT pg_advisory_unlock_all()");
            }
            if clean.is_ok() {
                let prepared = std::mem::take(&mut self.kept_statements);
                pools.postgres.give(self.url.clone(), (client, prepared));
            }
        }
    }
}

/// Whether a statement's error says the session is gone: the connection closed or failed, or
/// the server ended the session (class 08, connection exception; class 57P, the operator or
/// the server: shut down, terminated, or `idle_session_timeout`).
fn lost(e: &postgres::Error) -> bool {
    match e.code() {
        Some(c) => c.code().starts_with("08") || c.code().starts_with("57P"),
        None => e.is_closed() || e.as_db_error().is_none(),
    }
}

/// The triggers of the schema the server does not hold (on the openprose tables).
fn missing_triggers(on: &mut impl Statements) -> Result<Vec<String>> {
    let held: Vec<String> = on.all(
        "SELECT t.tgname::text FROM pg_trigger t
           JOIN pg_class c ON c.oid = t.tgrelid
           JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = 'openprose' AND NOT t.tgisinternal",
        &[],
        |r| r.get(0),
    )?;
    Ok(super::schema_triggers(SCHEMA)
        .into_iter()
        .map(|(name, _)| name.to_string())
        .filter(|name| !held.contains(name))
        .collect())
}
