//! The SQLite backend: one `state.db` per run, in WAL mode, shared by many processes.
//!
//! Every connection sets its busy timeout first, then `foreign_keys` and `synchronous = FULL`;
//! the database is put in WAL mode when it is created or upgraded (the mode is persistent),
//! and the log is kept when a connection closes (checkpointed by SQLite as it grows, by
//! `checkpoint`, and before a copy of the run is handed over).
//! Every write transaction begins IMMEDIATE, so a writer takes the lock before it reads and
//! never fails half-way with a lock upgrade error.

use super::dump::GateRecord;
use super::rows::{GateSelect, Rows};
use super::sqlite_schema::{self, Schema};
use super::{Access, AgentRow, AuditFilter, AuditRow, BindingRow, ImportRow, NewRun, OpenOptions};
use crate::error::{not_found, refused};
use crate::model::GateStatus;
use anyhow::{anyhow, Context, Result};
use rusqlite::config::DbConfig;
use rusqlite::{
    params, Connection, OpenFlags, OptionalExtension, Params, Row, TransactionBehavior,
};
use std::path::{Path, PathBuf};

use super::dump::Cells;
use super::sqlite_rows::gate_record;
pub(super) use super::sqlite_rows::{db_error, run_info_at, GATE_COLUMNS};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// What watches a run's commits from outside its database (the project catalog).
pub trait CommitWatch {
    /// Before a commit that changed a watched table, under the write lock, with the
    /// transaction's view of the database.
    fn before_commit(&mut self, conn: &Connection);
    /// After that commit.
    fn after_commit(&mut self);
}

/// Makes the watcher of a run's state.db, given its path and the options it was opened with
/// (None: nothing watches it).
pub type Watcher = fn(&Path, OpenOptions) -> Option<Box<dyn CommitWatch>>;

/// The tables whose changes a watcher hears of: the facts the project catalog keeps.
const WATCHED: &[&str] = &["run", "gates"];

/// How large a command lets the write-ahead log grow before it folds it in at close: small,
/// since every command's first open reads the whole log (about 64 pages).
const LOG_MOST: u64 = 256 * 1024;

/// The version stamped in a state.db's `PRAGMA user_version` by this build.
pub const SCHEMA_VERSION: i64 = 11;

/// The same for agents.db (project and user agent memory).
pub const AGENTS_SCHEMA_VERSION: i64 = 1;

pub const STATE: Schema = Schema {
    sql: include_str!("../../schema/sqlite.sql"),
    version: SCHEMA_VERSION,
    // Any prose-state reads it; a writer must know binding history (schema 10), or it would
    // delete a replaced attachment that an older version still names, and record no writer.
    min_reader: 1,
    min_writer: 10,
    what: "prose state db",
    core: &["run", "execution", "bindings"],
    empty_is_new: false,
};

/// The stamp of a run that holds a team's gate (a quorum, a veto off, a group, separation of
/// duties or an escalation): only a binary that knows team approvals (schema 8) and their
/// escalations (schema 9) may read it, and one that also knows binding history (schema 10)
/// write it.
pub const TEAM: Schema = Schema {
    min_reader: 9,
    min_writer: 10,
    ..STATE
};

pub const AGENTS: Schema = Schema {
    sql: include_str!("../../schema/agents.sql"),
    version: AGENTS_SCHEMA_VERSION,
    min_reader: 1,
    min_writer: 1,
    what: "prose agents db",
    core: &["agents", "agent_segments"],
    empty_is_new: true,
};

pub struct SqliteStore {
    /// What the process carries to its stores (kept connections, the audit key, …).
    /// How it was opened (its busy timeout, its process's wiring), kept whole.
    pub(super) opts: OpenOptions,
    /// Taken by `Drop`: a long-lived process keeps it for the next open.
    conn: super::Held<Connection>,
    /// Whether the connection may be kept for the next open of the same file: it was opened
    /// on a current schema, and nothing changed the connection's own settings (`query` sets
    /// query_only and an authorizer; an older file's read shims are temporary views).
    poolable: bool,
    path: PathBuf,
    schema: &'static Schema,
    /// What this build may do with the file (see `sqlite_schema`).
    access: Access,
    /// The version the file records.
    version: i64,
    /// What watches this run's commits from outside it (the project catalog), once known.
    watch: Option<Box<dyn CommitWatch>>,
    /// Set by the update hook when a transaction changes a watched table.
    touched: Arc<AtomicBool>,
    /// Why this store takes no writes, though it can be read (a state.db reached through a
    /// symlink, a run directory copied by hand): every write is refused (exit 4) with it.
    writes_refused: Option<String>,
}

impl SqliteStore {
    /// Whether its agents' segments say which record they followed (`at_record`): a run's
    /// database from schema 10 on; never agents.db, whose memory outlives runs.
    fn segments_follow_records(&self) -> bool {
        !std::ptr::eq(self.schema, &AGENTS) && self.version >= 10
    }
}

/// Whether a SQLite file has any schema object, read only (for telling a run an init left
/// half-made from one to keep). A file that is not SQLite counts as having some: it is not
/// ours to remove.
pub fn has_schema(db: &Path) -> bool {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let Ok(c) = Connection::open_with_flags(db, flags) else {
        return true;
    };
    c.query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| {
        r.get::<_, i64>(0)
    })
    .map_or(true, |n| n > 0)
}

/// SQLite's process-wide settings, before its first connection: no count of the memory it
/// holds (`SQLITE_CONFIG_MEMSTATUS`), which nothing here reads and which takes a mutex at every
/// allocation (a command's start-up makes thousands, parsing the schema: 9 % of a bind's
/// instructions). Set too late (a connection already opened), SQLite refuses it and keeps
/// counting: slower, never wrong.
pub fn configure() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: the option takes one int; before the first connection SQLite takes it, after
        // it refuses it (SQLITE_MISUSE) and changes nothing.
        unsafe {
            rusqlite::ffi::sqlite3_config(
                rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS,
                0 as std::os::raw::c_int,
            );
        }
    });
}

impl SqliteStore {
    /// The busy timeout in milliseconds, as errors name it.
    fn busy_ms(&self) -> u128 {
        self.opts.busy_timeout.as_millis()
    }

    fn wiring_of(&self) -> &'static super::Wiring {
        self.opts.wiring
    }

    fn connect(path: &Path, opts: OpenOptions, create: bool) -> Result<Self> {
        configure();
        let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if create {
            flags |= OpenFlags::SQLITE_OPEN_CREATE;
        }
        let busy_ms = opts.busy_timeout.as_millis();
        let conn = Connection::open_with_flags(path, flags)
            .map_err(|e| db_error(e, path, busy_ms))
            .with_context(|| format!("could not open state db: {}", path.display()))?;
        // Room for every statement one command runs (a decision with an answer and an edit
        // runs about 25): with rusqlite's 16, the least recently used were evicted and
        // planned again within the same command.
        conn.set_prepared_statement_cache_capacity(STATEMENTS_KEPT);
        let store = Self::over(conn, path, opts)?;
        // The write-ahead log stays when the last connection closes: every command is a
        // process of its own, and each was the last to close, so each checkpointed and
        // deleted the log (five fsyncs a bind, where the commit itself needs one or two).
        // SQLite's auto-checkpoint, `checkpoint` and `vacuum` move it into the database;
        // `journal_size_limit` bounds what a checkpoint leaves of it. Durability is the same:
        // every commit is synced in the log (`synchronous = FULL`).
        // The first process to open a database nobody has open rebuilds the log's index by
        // reading every valid frame of it, and loses what was checkpointed (so a log that
        // only auto-checkpoints is copied again and again and never restarts). A command is
        // such a process: it does not auto-checkpoint, and folds the log in and truncates it
        // when it closes with more than LOG_MOST bytes in it (one close in every dozen or so
        // writes). A long-lived process (the MCP server) keeps its connection, and with it
        // the index: SQLite's auto-checkpoint serves it.
        store
            .conn
            .set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .map_err(|e| store.error(e))?;
        // One plan a statement, whatever its parameters (the query planner stability
        // guarantee). Without it SQLite marks a statement whose plan looked at a bound value
        // (its text parameters, here) to be compiled again whenever that parameter is bound
        // anew: in the MCP server, whose statements are cached, every read of binding
        // history was compiled again at every call (two recompilations a `bind`, 0.25 million
        // instructions). No statement of a state or agents db depends on a bound value for
        // its plan: none matches a bound LIKE pattern, and the partial index's `IS NOT NULL`
        // is implied by any `=`.
        store
            .conn
            .set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
            .map_err(|e| store.error(e))?;
        // The schema's triggers keep raw writers' changes (a binding's version and its
        // history, an agent's memory, a segment's record): prose-state keeps its own writes'
        // in the same transaction, attributed (`SqliteTx::write_binding`), so its connections
        // fire none. That also spares every process compiling them into its writes (a
        // rebind's upsert compiled five trigger programs: 0.3 million instructions).
        store
            .conn
            .set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, false)
            .map_err(|e| store.error(e))?;
        store
            .conn
            .execute_batch(if opts.wiring.keeps() {
                "PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL;
                     PRAGMA journal_size_limit = 1048576;"
            } else {
                "PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL;
                     PRAGMA journal_size_limit = 1048576; PRAGMA wal_autocheckpoint = 0;"
            })
            .map_err(|e| store.error(e))?;
        Ok(store)
    }

    /// A store over a connection to a state.db (just opened, or kept), its busy timeout set
    /// first: everything after it may meet a lock.
    fn over(conn: Connection, path: &Path, opts: OpenOptions) -> Result<Self> {
        let store = SqliteStore {
            conn: super::Held::new(conn),
            poolable: false,
            path: path.to_path_buf(),
            schema: &STATE,
            access: Access::Current,
            version: SCHEMA_VERSION,
            watch: None,
            touched: Arc::default(),
            writes_refused: None,
            opts,
        };
        store
            .conn
            .busy_timeout(opts.busy_timeout)
            .map_err(|e| store.error(e))?;
        Ok(store)
    }

    /// Creates a new state.db (the file must not exist) with the schema and the run row.
    pub fn create(path: &Path, run: &NewRun, opts: OpenOptions) -> Result<Self> {
        let mut store = Self::connect(path, opts, true)?;
        store.set_wal()?;
        let busy_ms = store.busy_ms();
        let err = |e| db_error(e, path, busy_ms);
        let tx = store
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err)?;
        tx.execute_batch(&STATE.stored_sql()).map_err(err)?;
        tx.pragma_update(None, "user_version", STATE.stamp())
            .map_err(err)?;
        tx.execute(
            "INSERT INTO run (id, program_path, program_source, started_at, updated_at, status,
                              state_mode, history_keep)
             VALUES (?1, ?2, ?3, ?4, ?4, 'running', 'sqlite', ?5)",
            params![
                run.id,
                run.program_path,
                run.program_source,
                run.created_at,
                run.history_keep
            ],
        )
        .map_err(err)?;
        tx.commit().map_err(err)?;
        Ok(store)
    }

    /// Opens an existing state.db. When its schema is current this costs one pragma read.
    /// Nothing is written: an older file is read through shims and upgraded by the first
    /// write; a newer one is refused if this build may not read it.
    pub fn open(path: &Path, opts: OpenOptions) -> Result<Self> {
        let file = match std::fs::metadata(path) {
            Ok(m) if m.is_file() => m,
            _ => return Err(not_found(format!("state db not found: {}", path.display()))),
        };
        let mut store = match pool::take(opts.wiring, path, &file) {
            // Its pragmas were set when it was opened, and last for the connection.
            Some(conn) => Self::over(conn, path, opts)?,
            None => Self::connect(path, opts, false)?,
        };
        // Read again on a kept connection too: another process may have upgraded the file.
        store.check_schema()?;
        store.poolable = opts.wiring.keeps() && store.access == Access::Current;
        Ok(store)
    }

    /// Opens an agents.db, creating it (and its directory) on first use when `create` is set.
    pub fn open_agents(path: &Path, opts: OpenOptions, create: bool) -> Result<Self> {
        if !path.is_file() {
            if !create {
                return Err(not_found(format!(
                    "agents db not found: {}",
                    path.display()
                )));
            }
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).with_context(|| {
                    format!(
                        "could not create directory for agents db: {}",
                        dir.display()
                    )
                })?;
            }
        }
        let mut store = Self::connect(path, opts, create)?;
        store.schema = &AGENTS;
        store.version = AGENTS.version;
        store.check_schema()?;
        if create && store.access == Access::Older {
            // Created on first use: made whole now, as a write would.
            store.upgrade(false)?;
        }
        Ok(store)
    }

    /// Takes the run's write lock for a read that must not fall between a writer's catalog
    /// ticket and its commit (`catalog::ProjectCatalog::repair`); false when it could not be
    /// taken (a read-only file, a lock held past the timeout): the read is then a plain one.
    pub fn lock_for_reading(&mut self) -> bool {
        if self.conn.execute_batch("BEGIN IMMEDIATE").is_ok() {
            return true;
        }
        let _ = self.conn.execute_batch("BEGIN");
        false
    }

    /// Ends what `lock_for_reading` began.
    pub fn unlock(&mut self) {
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }

    /// A read of the database by a module of the store that keeps copies of its rows (the
    /// project catalog reads the facts it keeps), its errors mapped here.
    pub(super) fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        f(&self.conn).map_err(|e| self.error(e))
    }

    fn set_wal(&self) -> Result<()> {
        let mode: String = self
            .conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(|e| self.error(e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(anyhow!(
                "could not put the state db in WAL mode (it stayed {mode}): {}",
                self.path.display()
            ));
        }
        Ok(())
    }

    fn check_schema(&mut self) -> Result<()> {
        let stamp: i64 = self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| self.error(e))?;
        if stamp == self.schema.stamp() {
            return Ok(());
        }
        let version = sqlite_schema::decode(stamp).version;
        let path = self.path.clone();
        let busy_ms = self.busy_ms();
        let err = |e| db_error(e, &path, busy_ms);
        self.access = sqlite_schema::check(&self.conn, self.schema, &self.path, &err)?;
        self.version = version;
        if self.access == Access::Older {
            sqlite_schema::install_read_shims(&self.conn, self.schema)
                .map_err(|e| anyhow!("could not read the older db ({e:#}): {}", path.display()))?;
        }
        Ok(())
    }

    fn upgrade(&mut self, allow_rebuild: bool) -> Result<()> {
        let path = self.path.clone();
        let busy_ms = self.busy_ms();
        let err = |e| db_error(e, &path, busy_ms);
        sqlite_schema::upgrade(&mut self.conn, self.schema, &path, &err, allow_rebuild)?;
        self.access = Access::Current;
        self.version = self.schema.version;
        Ok(())
    }

    /// Refuses every write from now on (exit 4, with `why`); reads go on.
    pub fn refuse_writes(&mut self, why: String) {
        self.writes_refused = Some(why);
    }

    /// Makes the file writable by this build: the first write to an older file upgrades it;
    /// a write to a newer file this build may not write is refused.
    fn prepare_write(&mut self) -> Result<()> {
        if let Some(why) = &self.writes_refused {
            return Err(refused(why.clone()));
        }
        match self.access {
            Access::Current | Access::NewerWritable => Ok(()),
            Access::Older => self.upgrade(false),
            Access::NewerReadOnly => Err(super::refuse_write(
                self.version,
                self.schema.version,
                &self.path.display().to_string(),
            )),
        }
    }
}

mod dump;
mod query;
mod store_impl;
mod tx;

pub use tx::SqliteTx;

/// How many planned statements a connection keeps (see `Statements::prepared`).
const STATEMENTS_KEPT: usize = 64;

/// How a SQLite store and its transactions run a statement: each helper is one statement, its
/// parameters and its row mapper, and maps the driver's error once, here (`db_error`). Every
/// statement goes through the connection's statement cache, so that it is planned once per
/// connection: once per command, and once per kept connection in a long-lived process (the
/// MCP server) rather than on every call.
trait Statements {
    fn conn(&self) -> &Connection;
    fn error(&self, e: rusqlite::Error) -> anyhow::Error;

    /// `f` over the statement `sql`, prepared.
    fn prepared<T>(
        &self,
        sql: &str,
        f: impl FnOnce(&mut rusqlite::Statement) -> rusqlite::Result<T>,
    ) -> Result<T> {
        // Cached on its connection in every process: a command that runs one statement twice
        // (a decision reads a binding's head for its edit, then its write does) plans it
        // once, and planning is most of what a short command's statements cost.
        let c = self.conn();
        c.prepare_cached(sql)
            .and_then(|mut s| f(&mut s))
            .map_err(|e| self.error(e))
    }

    /// Runs a statement that returns no rows.
    fn exec(&self, sql: &str, p: impl Params) -> Result<()> {
        self.prepared(sql, |s| s.execute(p).map(drop))
    }

    /// The one row a statement returns.
    fn one<T>(
        &self,
        sql: &str,
        p: impl Params,
        f: impl FnOnce(&Row) -> rusqlite::Result<T>,
    ) -> Result<T> {
        self.prepared(sql, |s| s.query_row(p, f))
    }

    /// The row a statement returns, if any.
    fn opt<T>(
        &self,
        sql: &str,
        p: impl Params,
        f: impl FnOnce(&Row) -> rusqlite::Result<T>,
    ) -> Result<Option<T>> {
        self.prepared(sql, |s| s.query_row(p, f).optional())
    }

    /// Every row a statement returns.
    fn all<T>(
        &self,
        sql: &str,
        p: impl Params,
        f: impl FnMut(&Row) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>> {
        self.prepared(sql, |s| s.query_map(p, f)?.collect())
    }
}

/// A binding's columns, and its own version: the newest `n` of its history (one seek of the
/// history's index on name, scope and n).
const BINDING_COLUMNS: &str = "b.name, b.execution_id, b.kind, b.value, b.source_statement, \
                               b.created_at, b.updated_at, b.attachment_path, b.version, \
                               (SELECT MAX(h.n) FROM binding_history h WHERE h.name = b.name \
                                  AND IFNULL(h.execution_id, -1) = IFNULL(b.execution_id, -1))";

fn binding_row(r: &Row) -> rusqlite::Result<BindingRow> {
    Ok(BindingRow {
        name: r.get(0)?,
        execution_id: r.get(1)?,
        kind: r.get(2)?,
        value: r.bytes(3),
        source_statement: r.get(4)?,
        created_at: r.get(5)?,
        updated_at: r.get(6)?,
        attachment_path: r.get(7)?,
        version: r.get(8)?,
        own_version: r.get(9)?,
    })
}

/// The scope chain of execution ?1 (itself, its parent, ...; at most ?2 links up): `chain`'s
/// id and depth.
const CHAIN: &str = "WITH RECURSIVE chain(id, parent_id, depth) AS (
        SELECT id, parent_id, 0 FROM execution WHERE id = ?1
        UNION ALL
        SELECT e.id, e.parent_id, c.depth + 1
        FROM chain c JOIN execution e ON e.id = c.parent_id
        WHERE c.depth < ?2)";

const AUDIT_COLUMNS: &str = "id, gate_id, run_id, event_type, principal, comment, timestamp, \
                             metadata, prev_hash, hash, seq, seal";

/// Pending gates whose deadline has passed. A deadline that does not parse counts as passed:
/// gates fail closed.
pub(super) const OVERDUE: &str = "status = 'pending' AND timeout_at IS NOT NULL
                       AND (datetime(timeout_at) IS NULL OR datetime(timeout_at) <= datetime(?1))";

/// Pending gates with something due: past their deadline, or a reminder to announce.
pub(super) const DUE: &str = "status = 'pending' AND (timeout_at IS NOT NULL
                       AND (datetime(timeout_at) IS NULL OR datetime(timeout_at) <= datetime(?1))
                       OR remind_at IS NOT NULL AND datetime(remind_at) <= datetime(?1))";

fn audit_row(r: &Row) -> rusqlite::Result<AuditRow> {
    Ok(AuditRow {
        id: r.get(0)?,
        gate_id: r.get(1)?,
        run_id: r.get(2)?,
        event_type: r.get(3)?,
        principal: r.get(4)?,
        comment: r.get(5)?,
        timestamp: r.get(6)?,
        metadata: r.get(7)?,
        prev_hash: r.get(8)?,
        hash: r.get(9)?,
        seq: r.get(10)?,
        seal: r.get(11)?,
    })
}

fn attachment_referenced(s: &impl Statements, attachment_path: &str) -> Result<bool> {
    s.one(
        "SELECT EXISTS (SELECT 1 FROM bindings WHERE attachment_path = ?1)
             OR EXISTS (SELECT 1 FROM binding_history WHERE attachment_path = ?1)",
        [attachment_path],
        |r| r.get(0),
    )
}

/// Every kept version of the binding (or agent) of this name in exactly this scope, oldest
/// first.
fn kept_versions(
    s: &impl Statements,
    kept: super::history::Kept,
    name: &str,
    execution_id: Option<i64>,
) -> Result<Vec<super::history::HistoryRow>> {
    s.all(
        &format!(
            "SELECT {} FROM {} WHERE name = ?1 AND IFNULL(execution_id, -1) = ?2 ORDER BY n",
            super::history::COLUMNS,
            kept.table()
        ),
        params![name, execution_id.unwrap_or(-1)],
        |r| Ok(super::history::HistoryRow::read(r)),
    )
}

/// The scope chain from `id` up to the topmost execution, nearest first.
fn scope_chain(s: &impl Statements, id: i64) -> Result<Vec<i64>> {
    s.all(
        &format!("{CHAIN} SELECT id FROM chain ORDER BY depth"),
        params![id, crate::store::MAX_SCOPE_DEPTH],
        |r| r.get(0),
    )
}

/// The scopes a binding of this name is bound in now (None: the root).
fn bound_scopes(s: &impl Statements, name: &str) -> Result<Vec<Option<i64>>> {
    s.all(
        // A scope raw SQL wrote as other than an integer reads as 0, which is no execution's.
        "SELECT CASE typeof(execution_id) WHEN 'integer' THEN execution_id
                WHEN 'null' THEN NULL ELSE 0 END FROM bindings WHERE name = ?1",
        [name],
        |r| r.get(0),
    )
}

fn execution_exists(s: &impl Statements, id: i64) -> Result<bool> {
    s.one(
        "SELECT EXISTS (SELECT 1 FROM execution WHERE id = ?1)",
        [id],
        |r| r.get(0),
    )
}

const AGENT_SELECT: &str = "SELECT a.name, a.scope, a.memory, a.created_at, a.updated_at,
        (SELECT COUNT(*) FROM agent_segments s WHERE s.agent_name = a.name),
        (SELECT MAX(at_record) FROM agent_segments s WHERE s.agent_name = a.name) FROM agents a";

/// The same of agents.db (project and user memory), whose segments follow no run's records.
const AGENT_SELECT_PROJECT: &str = "SELECT a.name, a.scope, a.memory, a.created_at, a.updated_at,
        (SELECT COUNT(*) FROM agent_segments s WHERE s.agent_name = a.name), NULL FROM agents a";

fn agent_row(r: &Row) -> rusqlite::Result<AgentRow> {
    Ok(AgentRow {
        name: r.get(0)?,
        scope: r.get(1)?,
        memory: r.get(2)?,
        created_at: r.get(3)?,
        updated_at: r.get(4)?,
        segments: r.get(5)?,
        last_segment_at_record: r.get(6)?,
    })
}

fn import_row(r: &Row) -> rusqlite::Result<ImportRow> {
    Ok(ImportRow::read(r))
}

/// The gates rows `which` selects (`Rows::gate_rows`), on a store or in a transaction.
fn gate_rows(s: &impl Statements, which: GateSelect<'_>) -> Result<Vec<GateRecord>> {
    match which {
        GateSelect::Listed(status) => s.all(
            &format!(
                "SELECT {GATE_COLUMNS} FROM gates WHERE ?1 IS NULL OR status = ?1
                 ORDER BY created_at, id"
            ),
            [status.map(GateStatus::as_str)],
            gate_record,
        ),
        GateSelect::Id(id) => s.all(
            &format!("SELECT {GATE_COLUMNS} FROM gates WHERE id = ?1"),
            [id],
            gate_record,
        ),
        GateSelect::Opening(id, instance) => s.all(
            &format!(
                "SELECT {} FROM gate_instances WHERE gate_id = ?1 AND instance = ?2",
                super::dump::INSTANCE_COLUMNS
            ),
            params![id, instance],
            gate_record,
        ),
        GateSelect::Due(now) => s.all(
            &format!("SELECT {GATE_COLUMNS} FROM gates WHERE {DUE} ORDER BY created_at, id"),
            [now],
            gate_record,
        ),
    }
}

/// The audit rows the filter selects, in id order.
fn audit(s: &impl Statements, f: &AuditFilter) -> Result<Vec<AuditRow>> {
    let (sql, values) = audit_select(f);
    s.all(&sql, rusqlite::params_from_iter(values), audit_row)
}

/// The statement that reads the audit rows `f` selects, and its parameters in order.
fn audit_select<'a>(f: &'a AuditFilter<'a>) -> (String, Vec<&'a dyn rusqlite::ToSql>) {
    // Only the filters given are in the statement, each matched as itself: an index finds
    // the rows (a gate's, a `created` event's), and a process that prepares it once (every
    // command) does not plan the ones it was not asked for.
    let mut wheres = Vec::new();
    let mut values: Vec<&'a dyn rusqlite::ToSql> = Vec::new();
    match (&f.gate_id, f.with_moves) {
        (None, _) => {}
        (Some(gate), false) => {
            wheres.push("gate_id = ?");
            values.push(gate);
        }
        // Each side of the OR is a lookup in `idx_gate_audit_gate`.
        (Some(gate), true) => {
            wheres.push("(gate_id = ? OR (gate_id = ? AND event_type = ?))");
            values.extend([
                gate as &dyn rusqlite::ToSql,
                &super::dump::RUN_EVENT,
                &super::dump::RENUMBERED,
            ]);
        }
    }
    let any_of: String;
    if let Some(texts) = f.mentions.filter(|t| !t.is_empty()) {
        let each = vec!["instr(metadata, ?) > 0"; texts.len()];
        any_of = format!("({})", each.join(" OR "));
        wheres.push(&any_of);
        values.extend(texts.iter().map(|t| t as &dyn rusqlite::ToSql));
    }
    for (given, test) in [
        (&f.principal, "principal = ?"),
        (&f.since, "datetime(timestamp) >= datetime(?)"),
        (&f.event, "event_type = ?"),
        // Word for word the terms of `idx_gate_audit_answers` (schema 11), which SQLite then
        // reads instead of every opening; an older file without it scans, with the same rows.
        (
            &f.answers_into,
            "event_type = 'created' AND json_valid(metadata) \
             AND json_extract(metadata, '$.response_binding') = ?",
        ),
    ] {
        if let Some(v) = given {
            wheres.push(test);
            values.push(v);
        }
    }
    if let Some(seq) = &f.after_seq {
        wheres.push("seq > ?");
        values.push(seq);
    }
    let filter = match wheres.is_empty() {
        true => String::new(),
        false => format!("WHERE {}", wheres.join(" AND ")),
    };
    (
        format!("SELECT {AUDIT_COLUMNS} FROM gate_audit_log {filter} ORDER BY id"),
        values,
    )
}

/// A store's and its transactions' reads, each one statement (`store::rows`).
macro_rules! sqlite_rows {
    ($t:ty) => {
        impl Rows for $t {
            fn gate_rows(&mut self, which: GateSelect<'_>) -> Result<Vec<GateRecord>> {
                gate_rows(self, which)
            }

            fn audit(&mut self, filter: &AuditFilter) -> Result<Vec<AuditRow>> {
                audit(self, filter)
            }

            fn execution_exists(&mut self, id: i64) -> Result<bool> {
                execution_exists(self, id)
            }

            fn scope_chain(&mut self, execution_id: i64) -> Result<Vec<i64>> {
                scope_chain(self, execution_id)
            }

            fn bound_scopes(&mut self, name: &str) -> Result<Vec<Option<i64>>> {
                bound_scopes(self, name)
            }

            fn attachment_referenced(&mut self, attachment_path: &str) -> Result<bool> {
                attachment_referenced(self, attachment_path)
            }

            fn kept_versions(
                &mut self,
                kept: super::history::Kept,
                name: &str,
                execution_id: Option<i64>,
            ) -> Result<Vec<super::history::HistoryRow>> {
                kept_versions(self, kept, name, execution_id)
            }

            fn wiring(&self) -> &'static super::Wiring {
                self.wiring_of()
            }
        }
    };
}

sqlite_rows!(SqliteStore);
sqlite_rows!(SqliteTx<'_>);

impl Statements for SqliteStore {
    fn conn(&self) -> &Connection {
        &self.conn
    }

    fn error(&self, e: rusqlite::Error) -> anyhow::Error {
        db_error(e, &self.path, self.busy_ms())
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        // A connection in a transaction (an error left it open) is closed, which rolls it
        // back; so is one whose settings a command changed.
        if self.poolable && conn.is_autocommit() {
            pool::give(self.opts.wiring, &self.path, conn);
            return;
        }
        // A command's last act on a log grown past LOG_MOST: fold it in and truncate it (see
        // `connect`). Best effort: a reader or writer still at work makes it wait for the
        // next close.
        let mut log = self.path.clone().into_os_string();
        log.push("-wal");
        if conn.is_autocommit() && std::fs::metadata(&log).is_ok_and(|m| m.len() > LOG_MOST) {
            let _ = conn.busy_timeout(std::time::Duration::ZERO);
            let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        }
        // A command (a process of its own) leaves its first few connections to its exit,
        // which frees what they hold at once: closing one frees its parsed schema object by
        // object (0.16 million instructions, 7 % of a `bind`) for a process about to end.
        // Nothing durable waits on a close: every commit was synced, the log is not
        // checkpointed at a close (`connect`), and the locks go with the process. A command
        // that opens many stores (`doctor`, a listing) closes the rest as they go.
        if conn.is_autocommit() && self.opts.wiring.leave_to_exit() {
            std::mem::forget(conn);
        }
    }
}

/// Connections kept for the next open of the same state.db, where the process's wiring keeps
/// them (the MCP server's: see `Wiring::keeping`): opening one parses the whole schema, which
/// is most of what a small `get` costs. A kept connection is used again only for the very same file
/// (its path, device and inode: a run directory removed and made again under the same id is
/// another file, and the kept connection, which holds the old inode open so that its number
/// cannot be reused, is closed instead).
mod pool {
    use crate::store::Wiring;
    use rusqlite::Connection;
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;

    /// The key of a file: its path, then its identity.
    fn key(path: &Path, file: &std::fs::Metadata) -> (String, String) {
        let path = format!("{}\0", path.display());
        let id = format!("{path}{}:{}", file.dev(), file.ino());
        (path, id)
    }

    /// A kept connection to this file, if any; those to a file since replaced are closed.
    pub fn take(wiring: &Wiring, path: &Path, file: &std::fs::Metadata) -> Option<Connection> {
        let kept = &wiring.pools()?.sqlite;
        let (path, id) = key(path, file);
        kept.take(&id, |k, _| k.starts_with(&path) && k != id)
    }

    pub fn give(wiring: &Wiring, path: &Path, conn: Connection) {
        if let (Some(pools), Ok(file)) = (wiring.pools(), std::fs::metadata(path)) {
            pools.sqlite.give(key(path, &file).1, conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How SQLite reads the audit rows `f` selects, step by step.
    fn plan(f: &AuditFilter) -> Vec<String> {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(STATE.sql).unwrap();
        let (sql, values) = audit_select(f);
        let mut plan = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let steps = plan
            .query_map(rusqlite::params_from_iter(values), |r| r.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        steps
    }

    /// The question every `bind` asks (does some gate answer into this name?) is a lookup in
    /// `idx_gate_audit_answers`, not a read of every opening, asked as the rule asks it.
    #[test]
    fn the_openings_that_answer_into_a_name_are_found_by_the_index() {
        let steps = plan(&AuditFilter {
            event: Some("created"),
            answers_into: Some("verdict"),
            ..AuditFilter::default()
        });
        assert!(
            steps
                .iter()
                .any(|s| s.contains("USING INDEX idx_gate_audit_answers")),
            "{steps:?}"
        );
    }

    /// A gate's history and the run's moves, read together, are lookups of one index, never
    /// a scan of the log.
    #[test]
    fn a_gate_history_with_the_moves_is_read_by_the_index() {
        let steps = plan(&AuditFilter {
            gate_id: Some("deploy"),
            with_moves: true,
            ..AuditFilter::default()
        });
        assert!(
            steps.iter().all(|s| !s.starts_with("SCAN gate_audit_log")),
            "{steps:?}"
        );
        assert!(
            steps.iter().any(|s| s.contains("idx_gate_audit_gate")),
            "{steps:?}"
        );
    }
}
