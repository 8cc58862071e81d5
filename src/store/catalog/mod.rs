//! The project catalog of SQLite runs (`<root>/.prose/catalog.db`): one row a run (its status,
//! program, times, pending gates and earliest deadline) and one row a pending gate, so that a
//! cross-run listing is one query, not one database open per run. It is never the source of
//! truth, and can always be rebuilt from the runs.
//!
//! How it stays true, without ever holding two locks in the other order:
//! - **Writers.** A run's write transaction that changes a fact kept here (the run's status,
//!   a gate opened or resolved, a copy restored) appends a *ticket* line to the catalog's log
//!   (`.prose/catalog.log`) before its run commit, while it holds the run's write lock
//!   (`log::Watch::mark`). Tickets of a run are therefore logged in the order of its commits.
//!   After the commit it appends the facts it committed, read inside its own transaction
//!   (`log::Watch::apply`). Writers never open the catalog's database: the next listing folds
//!   the log in ([`ProjectCatalog::fold`]), giving each ticket its place in one sequence. A
//!   row keeps the facts of its newest ticket: an older writer arriving late changes nothing.
//! - **A writer that cannot log its ticket** creates `.prose/catalog.stale` while it still
//!   holds the run's lock; the next listing marks every row stale and re-reads them all.
//! - **Readers.** A run with a ticket left (its writer died between its commit and its catalog
//!   update), a stale row, or a run the catalog has not seen is re-read by the next listing
//!   from that run alone ([`ProjectCatalog::repair`]): under the run's write lock, so that no
//!   writer can be between its ticket and its commit then, with a ticket of its own taken
//!   under that lock, so that its copy is ordered among the writers'.
//! - **New and removed runs** are noticed by the runs directory's modification time: when it
//!   differs from the one the catalog recorded, the directory's names are compared with the
//!   rows. `init` announces its changes to the directory in the log, each with the time
//!   before and after ([`changing_runs`]): while the announced changes follow one another
//!   from the recorded time, the new runs are known without comparing 100,000 names. Writes
//!   behind the tool's back (raw `sqlite3` into an existing run) are found by `--scan` and by
//!   `doctor`, which compare every run.
//!
//! Its jobs, a file each: [`log`] (the writers' side, and folding their lines in), [`refresh`]
//! (bringing the rows up to date with the runs), [`queries`] (what a listing reads) and
//! [`stats`] (the runs' stats it keeps).

mod log;
mod queries;
mod refresh;
mod stats;

pub use log::{changing_runs, watch};
pub use queries::copy_warning;
pub use refresh::{forget_run, while_replacing};

use super::dump::GateRecord;
use super::sqlite_rows::{db_error, gate_record, GATE_COLUMNS};
use super::{OpenOptions, RunFilter};
use anyhow::{anyhow, Result};
use rusqlite::config::DbConfig;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

pub const CATALOG_FILE: &str = "catalog.db";
/// Made by a writer that could not take its ticket: every row is read again.
pub const STALE_FILE: &str = "catalog.stale";
/// The catalog's format (PRAGMA user_version).
pub const CATALOG_VERSION: i64 = 6;
const SCHEMA: &str = include_str!("../../../schema/catalog.sql");
/// A write-ahead log past this is folded in when a connection closes (see `sqlite::connect`).
const LOG_MOST: u64 = 256 * 1024;
/// The catalog's log of writers' tickets and facts (see `log::Watch`), and its folded-in
/// copies' prefix (`catalog.log.N`).
pub const LOG_FILE: &str = "catalog.log";

/// The facts of one run that the catalog keeps, read from its state.db: its run row's
/// columns and its pending gates, as a writer's facts line carries them (see `log`) and as
/// `put_facts` writes them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Facts {
    run: Option<RunFacts>,
    pending: Vec<GateRecord>,
    /// When each pending gate's next reminder is due (by gate id; none: not listed).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    reminders: std::collections::BTreeMap<String, String>,
}

/// A run row's columns the catalog keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct RunFacts {
    id: String,
    program_path: Option<String>,
    status: Option<String>,
    started_at: Option<String>,
    updated_at: Option<String>,
    error_message: Option<String>,
}

/// A run's facts, from a row of these columns in `RunFacts`' order.
fn run_facts(r: &rusqlite::Row) -> rusqlite::Result<RunFacts> {
    Ok(RunFacts {
        id: r.get(0)?,
        program_path: r.get(1)?,
        status: r.get(2)?,
        started_at: r.get(3)?,
        updated_at: r.get(4)?,
        error_message: r.get(5)?,
    })
}

/// Reads a run's facts (inside the caller's transaction, when it has one).
pub(super) fn read_facts(c: &Connection) -> rusqlite::Result<Facts> {
    let mut f = facts(
        c,
        "SELECT id, program_path, status, started_at, updated_at, error_message FROM run LIMIT 1",
        "status = 'pending'",
        [],
    )?;
    // A file from before reminders (schema 9) has none to list.
    f.reminders = all(
        c,
        "SELECT id, remind_at FROM gates WHERE status = 'pending' AND remind_at IS NOT NULL",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .map(|v| v.into_iter().collect())
    .unwrap_or_default();
    Ok(f)
}

/// The facts of one run: its run row (`run_sql`, columns in `RunFacts`' order) and the
/// gates `gates_where` picks, both with `p`.
fn facts<P: rusqlite::Params + Copy>(
    c: &Connection,
    run_sql: &str,
    gates_where: &str,
    p: P,
) -> rusqlite::Result<Facts> {
    let gates =
        format!("SELECT {GATE_COLUMNS} FROM gates WHERE {gates_where} ORDER BY created_at, id");
    Ok(Facts {
        run: c.query_row(run_sql, p, run_facts).optional()?,
        pending: all(c, &gates, p, gate_record)?,
        // Not kept by the catalog's rows, nor compared (`differ`): only when to look again.
        reminders: Default::default(),
    })
}

/// Every row of `sql` with `p`, mapped by `f`.
fn all<T>(
    c: &Connection,
    sql: &str,
    p: impl rusqlite::Params,
    f: impl FnMut(&rusqlite::Row) -> rusqlite::Result<T>,
) -> rusqlite::Result<Vec<T>> {
    c.prepare_cached(sql)?.query_map(p, f)?.collect()
}

/// A value of the catalog's `meta` table.
fn meta(c: &Connection, key: &str) -> rusqlite::Result<Option<String>> {
    c.prepare_cached("SELECT value FROM meta WHERE key = ?1")?
        .query_row([key], |r| r.get(0))
        .optional()
}

/// Sets a value of the catalog's `meta` table.
fn set_meta(c: &Connection, key: &str, value: &str) -> rusqlite::Result<()> {
    c.prepare_cached("INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)")?
        .execute([key, value])
        .map(drop)
}

/// A write transaction of the catalog, its write lock taken now.
fn begin(c: &Connection) -> rusqlite::Result<rusqlite::Transaction<'_>> {
    rusqlite::Transaction::new_unchecked(c, rusqlite::TransactionBehavior::Immediate)
}

/// The project directory (`.prose/`) and run id of a state.db at `<.prose>/runs/<id>/state.db`;
/// None for a run kept anywhere else (an export, a directory named by path) and for the
/// staging directories (`.`-names) that imports and inits build in.
pub fn of_state_db(db: &Path) -> Option<(PathBuf, String)> {
    let dir = db.parent()?;
    let id = dir.file_name()?.to_str()?;
    let runs = dir.parent()?;
    let prose = runs.parent()?;
    let named = |p: &Path, name: &str| p.file_name().is_some_and(|n| n == name);
    if id.starts_with('.') || !named(runs, "runs") || !named(prose, ".prose") {
        return None;
    }
    Some((prose.to_path_buf(), id.to_string()))
}

/// Opens the catalog, or None when there is none (and `create` is unset) or it is not of this
/// version. A file that is not a catalog SQLite can read is moved aside when `create` is set,
/// and a new one made.
fn open_db(prose: &Path, busy: Duration, create: bool) -> Result<Option<Connection>> {
    let path = prose.join(CATALOG_FILE);
    if !create && !path.is_file() {
        return Ok(None);
    }
    match try_open(&path, busy, create) {
        Ok(c) => Ok(c),
        Err(e) if create && is_corrupt(&e) => {
            let aside = prose.join(format!(
                "{CATALOG_FILE}.corrupt-{}",
                crate::model::now().replace([' ', ':'], "-")
            ));
            let _ = std::fs::rename(&path, &aside);
            for suffix in ["-wal", "-shm"] {
                let _ = std::fs::remove_file(prose.join(format!("{CATALOG_FILE}{suffix}")));
            }
            try_open(&path, busy, true)
        }
        Err(e) => Err(e),
    }
}

/// Whether `e` is SQLite's saying the file is not a database, or a damaged one.
fn is_corrupt(e: &anyhow::Error) -> bool {
    use rusqlite::ErrorCode::{DatabaseCorrupt, NotADatabase};
    sqlite_code(e).is_some_and(|c| matches!(c, NotADatabase | DatabaseCorrupt))
}

/// Whether `e` is SQLite's saying another connection holds the lock.
fn is_busy(e: &anyhow::Error) -> bool {
    use rusqlite::ErrorCode::{DatabaseBusy, DatabaseLocked};
    sqlite_code(e).is_some_and(|c| matches!(c, DatabaseBusy | DatabaseLocked))
}

fn sqlite_code(e: &anyhow::Error) -> Option<rusqlite::ErrorCode> {
    e.downcast_ref::<rusqlite::Error>()
        .and_then(rusqlite::Error::sqlite_error_code)
}

fn try_open(path: &Path, busy: Duration, create: bool) -> Result<Option<Connection>> {
    // Making the catalog changes its journal mode, and SQLite answers "locked" at once, not
    // after the busy timeout, to a connection that would wait for another doing the same: the
    // whole open is tried again until the maker has finished, each try waiting only what is
    // left of the timeout, so that the open as a whole waits no longer than it.
    let until = std::time::Instant::now() + busy;
    let mut pause = Duration::from_millis(1);
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        match try_open_once(path, left, create) {
            Err(e) if is_busy(&e) && !left.is_zero() => {
                std::thread::sleep(pause.min(left));
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            // What the caller does with it next waits the whole timeout again.
            Ok(Some(c)) => {
                c.busy_timeout(busy)?;
                return Ok(Some(c));
            }
            opened => return opened,
        }
    }
}

fn try_open_once(path: &Path, busy: Duration, create: bool) -> Result<Option<Connection>> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    crate::store::sqlite::configure();
    let c = Connection::open_with_flags(path, flags)?;
    c.busy_timeout(busy)?;
    // Kept between processes, like a run's log; NORMAL: the catalog can always be rebuilt.
    c.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    // Read through a memory map: a listing of every gate reads the catalog whole, and a read
    // per page (the cache holds 2 MiB) was a third of its time at 100,000 runs.
    c.execute_batch(
        "PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0;
         PRAGMA mmap_size = 1073741824;",
    )?;
    let version: i64 = c.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version == CATALOG_VERSION {
        return Ok(Some(c));
    }
    if !create || version > CATALOG_VERSION {
        return Ok(None);
    }
    // New, or older: made anew (nothing in it is the source of anything).
    let mode: String = c.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(anyhow!(
            "could not put the catalog in WAL mode: {}",
            path.display()
        ));
    }
    c.execute_batch(&format!(
        "BEGIN IMMEDIATE;
         DROP TABLE IF EXISTS runs; DROP TABLE IF EXISTS gates;
         DROP TABLE IF EXISTS tickets; DROP TABLE IF EXISTS meta;
         DROP TABLE IF EXISTS run_stats;
         {SCHEMA}
         PRAGMA user_version = {CATALOG_VERSION};
         COMMIT;"
    ))?;
    Ok(Some(c))
}

/// Closes a catalog connection, folding its log in when it has grown (see `LOG_MOST`).
fn close(c: Connection, prose: &Path) {
    let log = prose.join(format!("{CATALOG_FILE}-wal"));
    if std::fs::metadata(&log).is_ok_and(|m| m.len() > LOG_MOST) {
        let _ = c.busy_timeout(Duration::ZERO);
        let _ = c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    }
}

/// Writes a run's facts into its row and its pending gates, if `ticket` is newer than the
/// facts the row holds; inside the caller's catalog transaction. Whether it wrote them.
fn put_facts(
    c: &Connection,
    run: &str,
    ticket: i64,
    facts: &Facts,
    stamp: &str,
) -> rusqlite::Result<bool> {
    let applied: Option<i64> = c
        .query_row("SELECT applied FROM runs WHERE id = ?1", [run], |r| {
            r.get(0)
        })
        .optional()?;
    if applied.is_some_and(|a| a >= ticket) {
        return Ok(false);
    }
    let info = facts.run.as_ref();
    let deadline = facts
        .pending
        .iter()
        .filter_map(|g| g.timeout_at.as_deref())
        .min();
    c.prepare_cached(
        "INSERT INTO runs (id, kind, run_id, program_path, status, started_at, updated_at,
                           error_message, pending, next_deadline, applied, problem, stamp)
         VALUES (?1, 'sqlite', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, NULL, ?11)
         ON CONFLICT (id) DO UPDATE SET kind = 'sqlite', run_id = ?2, program_path = ?3,
             status = ?4, started_at = ?5, updated_at = ?6, error_message = ?7, pending = ?8,
             next_deadline = ?9, applied = ?10, problem = NULL, stamp = ?11",
    )?
    .execute(params![
        run,
        info.map(|i| &i.id),
        info.and_then(|i| i.program_path.as_deref()),
        info.and_then(|i| i.status.as_deref()),
        info.and_then(|i| i.started_at.as_deref()),
        info.and_then(|i| i.updated_at.as_deref()),
        info.and_then(|i| i.error_message.as_deref()),
        facts.pending.len() as i64,
        deadline,
        ticket,
        stamp,
    ])?;
    c.prepare_cached("DELETE FROM gates WHERE run = ?1")?
        .execute([run])?;
    let mut insert = c.prepare_cached(
        "INSERT OR REPLACE INTO gates (run, id, run_id, execution_id, prompt, allow, timeout,
             timeout_at, on_reject, status, created_at, resolved_at, resolved_by,
             resolution_comment, metadata, instance, due)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
                 CASE WHEN ?8 IS NULL THEN datetime(?17)
                      WHEN ?17 IS NULL THEN IFNULL(datetime(?8), '')
                      ELSE min(IFNULL(datetime(?8), ''), IFNULL(datetime(?17), '')) END)",
    )?;
    for g in &facts.pending {
        // The prompt and allow list as the rules read them (see `GateRecord::into_row`).
        let allow = serde_json::to_string(&g.allow_list()).unwrap_or_default();
        let status = g.status.as_ref().map_or("", |s| s.as_str());
        insert.execute(params![
            run,
            g.id,
            g.run_id,
            g.execution_id,
            g.prompt.as_deref().unwrap_or_default(),
            allow,
            g.timeout,
            g.timeout_at,
            g.on_reject,
            status,
            g.created_at,
            g.resolved_at,
            g.resolved_by,
            g.resolution_comment,
            g.metadata,
            g.instance,
            facts.reminders.get(&g.id),
        ])?;
    }
    Ok(true)
}

/// A fact-changing write's ticket: the nonce its two log lines share.
pub type Ticket = String;

/// The runs directory's modification time, in nanoseconds (the catalog's `runs_mtime`).
fn dir_stamp(dir: &Path) -> Option<(SystemTime, String)> {
    let m = std::fs::metadata(dir).and_then(|m| m.modified()).ok()?;
    let nanos = m.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_nanos();
    Some((m, nanos.to_string()))
}

/// The reader's side: a project's catalog, brought up to date for a listing.
pub struct ProjectCatalog {
    conn: Option<Connection>,
    prose: PathBuf,
    runs_dir: PathBuf,
    opts: OpenOptions,
    /// Runs that could not be read, one line each ("skipped run ID: why").
    problems: Vec<String>,
    /// Runs an overdue sweep failed on: their gates are not listed as pending.
    unswept: HashSet<String>,
}

/// What `doctor` finds comparing the catalog with the runs.
#[derive(Debug, Default)]
pub struct CatalogCheck {
    pub runs: usize,
    /// The runs whose row differs from the run, or that one has and the other not, each
    /// with what differs.
    pub differences: Vec<(String, String)>,
}

impl ProjectCatalog {
    /// Opens (or makes) the catalog of the project whose runs are in `runs_dir`. None when
    /// the catalog is of a newer version (the caller visits every run instead).
    pub fn open(runs_dir: &Path, opts: OpenOptions) -> Result<Option<Self>> {
        let prose = runs_dir
            .parent()
            .map_or_else(|| PathBuf::from(".prose"), Path::to_path_buf);
        // No runs: nothing to catalog, and no directory to make.
        let mut conn = None;
        if runs_dir.is_dir() {
            let opened = open_db(&prose, opts.busy_timeout, true).map_err(|e| {
                e.context(format!("catalog: {}", prose.join(CATALOG_FILE).display()))
            })?;
            let Some(c) = opened else { return Ok(None) };
            conn = Some(c);
        }
        Ok(Some(ProjectCatalog {
            conn,
            prose,
            runs_dir: runs_dir.to_path_buf(),
            opts,
            problems: Vec::new(),
            unswept: HashSet::new(),
        }))
    }

    fn err(&self) -> impl Fn(rusqlite::Error) -> anyhow::Error {
        let path = self.prose.join(CATALOG_FILE);
        let busy = self.opts.busy_timeout.as_millis();
        move |e| db_error(e, &path, busy)
    }

    /// Each row's kind, by run.
    fn row_kinds(&self) -> Result<HashMap<String, String>> {
        let c = self.db().expect("a catalog");
        let kinds = all(c, "SELECT id, kind FROM runs", [], |r| r.try_into());
        Ok(kinds.map_err(self.err())?.into_iter().collect())
    }

    /// The names in the runs directory, but the staging directories (`.`-names).
    fn run_names(&self) -> std::io::Result<impl Iterator<Item = String>> {
        Ok(std::fs::read_dir(&self.runs_dir)?
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| !n.starts_with('.')))
    }

    fn db(&self) -> Option<&Connection> {
        self.conn.as_ref()
    }

    fn state_db(&self, id: &str) -> PathBuf {
        self.runs_dir.join(id).join(crate::run::DB_FILE)
    }

    fn wanted(runs: &RunFilter, id: &str) -> bool {
        runs.only.as_ref().is_none_or(|o| o.iter().any(|r| r == id))
            && !runs.except.iter().any(|r| r == id)
    }
}

impl Drop for ProjectCatalog {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            close(c, &self.prose);
        }
    }
}

/// What a state.db and its write-ahead log are now: identity, size and modification time.
fn stamp_of(db: &Path) -> String {
    let mut log = db.as_os_str().to_owned();
    log.push("-wal");
    [db, Path::new(&log)]
        .iter()
        .map(|f| file_stamp(std::fs::metadata(f), |m| m.len()))
        .collect::<Vec<_>>()
        .join("/")
}

/// A file's identity, `what` of it (its size, its kind) and its modification time; `-` when
/// it could not be read.
fn file_stamp<T: std::fmt::Display>(
    m: std::io::Result<std::fs::Metadata>,
    what: impl Fn(&std::fs::Metadata) -> T,
) -> String {
    use std::os::unix::fs::MetadataExt;
    m.map_or("-".into(), |m| {
        let (dev, ino, what) = (m.dev(), m.ino(), what(&m));
        format!("{dev}:{ino}:{what}:{}.{}", m.mtime(), m.mtime_nsec())
    })
}

/// `f` of every item, in order. Many items (a listing of every gate stats each run's files)
/// are shared among a few threads: those stats are most of such a listing's time.
fn in_parallel<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = if items.len() < 2_000 {
        1
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
    };
    if threads == 1 {
        return items.iter().map(f).collect();
    }
    let f = &f;
    std::thread::scope(|s| {
        let parts: Vec<_> = items
            .chunks(items.len().div_ceil(threads))
            .map(|part| s.spawn(move || part.iter().map(f).collect::<Vec<R>>()))
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().expect("a stat does not panic"))
            .collect()
    })
}

/// A file's identity (device and inode).
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Removes a run's rows.
fn forget(c: &Connection, id: &str) -> rusqlite::Result<()> {
    c.execute("DELETE FROM runs WHERE id = ?1", [id])?;
    c.execute("DELETE FROM gates WHERE run = ?1", [id])?;
    c.execute("DELETE FROM tickets WHERE run = ?1", [id])?;
    c.execute("DELETE FROM run_stats WHERE id = ?1", [id])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    /// Processes that find no catalog make it at once: each opens it, none is told it is
    /// locked (changing the journal mode is a lock SQLite will not wait for).
    #[test]
    fn many_openers_of_a_new_catalog_all_get_it() {
        for round in 0..30 {
            let dir = tempfile::tempdir().unwrap();
            let prose = dir.path().join(".prose");
            std::fs::create_dir_all(prose.join("runs")).unwrap();
            let start = std::sync::Barrier::new(12);
            std::thread::scope(|s| {
                let opened: Vec<_> = (0..12)
                    .map(|_| {
                        s.spawn(|| {
                            start.wait();
                            super::open_db(&prose, super::Duration::from_secs(10), true)
                                .map(|c| c.is_some())
                        })
                    })
                    .collect();
                for o in opened {
                    let o = o.join().unwrap();
                    assert!(matches!(o, Ok(true)), "round {round}: {o:?}");
                }
            });
        }
    }

    /// Above the threshold the work is shared among threads; every item is mapped once, and
    /// the results come back in the items' order, as below it.
    #[test]
    fn in_parallel_keeps_every_item_in_order() {
        for n in [0, 1, 1_999, 2_000, 2_001, 9_999] {
            let items: Vec<u64> = (0..n).collect();
            let calls = std::sync::atomic::AtomicUsize::new(0);
            let out = super::in_parallel(&items, |x| {
                calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                x * 3
            });
            assert_eq!(out, items.iter().map(|x| x * 3).collect::<Vec<_>>(), "{n}");
            assert_eq!(calls.into_inner(), n as usize, "{n}");
        }
    }
}
