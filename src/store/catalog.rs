//! The project catalog of SQLite runs (`<root>/.prose/catalog.db`): one row a run (its status,
//! program, times, pending gates and earliest deadline) and one row a pending gate, so that a
//! cross-run listing is one query, not one database open per run. It is never the source of
//! truth, and can always be rebuilt from the runs.
//!
//! How it stays true, without ever holding two locks in the other order:
//! - **Writers.** A run's write transaction that changes a fact kept here (the run's status,
//!   a gate opened or resolved, a copy restored) appends a *ticket* line to the catalog's log
//!   (`.prose/catalog.log`) before its run commit, while it holds the run's write lock
//!   ([`Link::mark`]). Tickets of a run are therefore logged in the order of its commits.
//!   After the commit it appends the facts it committed, read inside its own transaction
//!   ([`Link::apply`]). Writers never open the catalog's database: the next listing folds
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

use super::sqlite_rows::{db_error, gate_row, run_info_at, GATE_COLUMNS};
use super::{
    Catalog, GateRow, OpenOptions, RunFilter, RunInfo, RunStats, RunSummary, Store, StoreStats,
};
use anyhow::{anyhow, Result};
use rusqlite::config::DbConfig;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

pub const CATALOG_FILE: &str = "catalog.db";
/// Made by a writer that could not take its ticket: every row is read again.
pub const STALE_FILE: &str = "catalog.stale";
/// The catalog's format (PRAGMA user_version).
pub const CATALOG_VERSION: i64 = 6;
const SCHEMA: &str = include_str!("../../schema/catalog.sql");
/// A write-ahead log past this is folded in when a connection closes (see `sqlite::connect`).
const LOG_MOST: u64 = 256 * 1024;
/// The catalog's log of writers' tickets and facts (see `Link`), and its folded-in copies'
/// prefix (`catalog.log.N`).
pub const LOG_FILE: &str = "catalog.log";
/// A writer whose line takes the log past this folds it in.
const FOLD_AT: u64 = 1024 * 1024;
/// A facts line longer than this is not written: the ticket stays, and the next listing reads
/// the run from its database.
const LINE_MOST: usize = 256 * 1024;
/// The runs directory's modification time is trusted only once it is this old: a run made
/// in the same clock tick as the comparison would leave it unchanged.
const SETTLED: Duration = Duration::from_secs(3);

/// The facts of one run that the catalog keeps, read from its state.db.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub run: Option<(RunInfo, Option<String>)>,
    pub pending: Vec<GateRow>,
}

/// Reads a run's facts (inside the caller's transaction, when it has one).
pub(super) fn read_facts(c: &Connection) -> rusqlite::Result<Facts> {
    let run = c
        .query_row(
            "SELECT id, program_path, status, started_at, updated_at, error_message FROM run LIMIT 1",
            [],
            |r| Ok((run_info_at(r, 0)?, r.get(5)?)),
        )
        .optional()?;
    let pending = c
        .prepare_cached(&format!(
            "SELECT {GATE_COLUMNS} FROM gates WHERE status = 'pending' ORDER BY created_at, id"
        ))?
        .query_map([], gate_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(Facts { run, pending })
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

fn is_corrupt(e: &anyhow::Error) -> bool {
    e.downcast_ref::<rusqlite::Error>()
        .and_then(rusqlite::Error::sqlite_error_code)
        .is_some_and(|c| {
            matches!(
                c,
                rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt
            )
        })
}

fn try_open(path: &Path, busy: Duration, create: bool) -> Result<Option<Connection>> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
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
    facts: &FactRows,
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
    let deadline = facts.pending.iter().filter_map(|g| g.6.as_deref()).min();
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
        info.map(|i| &i.0),
        info.and_then(|i| i.1.as_deref()),
        info.and_then(|i| i.2.as_deref()),
        info.and_then(|i| i.3.as_deref()),
        info.and_then(|i| i.4.as_deref()),
        info.and_then(|i| i.5.as_deref()),
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
                 CASE WHEN ?8 IS NULL THEN NULL ELSE IFNULL(datetime(?8), '') END)",
    )?;
    for g in &facts.pending {
        insert.execute(params![
            run, g.0, g.1, g.2, g.3, g.4, g.5, g.6, g.7, g.8, g.9, g.10, g.11, g.12, g.13, g.14,
        ])?;
    }
    Ok(true)
}

/// A fact-changing write's ticket: the nonce its two log lines share.
pub type Ticket = String;

/// The rows a run's facts become in the catalog, as a writer's facts line carries them (and
/// as `put_facts` writes them): the run row's columns, and each pending gate's.
#[derive(Serialize, Deserialize)]
struct FactRows {
    /// id, program_path, status, started_at, updated_at, error_message
    run: Option<RunColumns>,
    pending: Vec<GateColumns>,
}

type RunColumns = (
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);
/// id, run_id, execution_id, prompt, allow (JSON), timeout, timeout_at, on_reject, status,
/// created_at, resolved_at, resolved_by, resolution_comment, metadata, instance
type GateColumns = (
    String,
    Option<String>,
    Option<i64>,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
);

impl FactRows {
    fn of(facts: &Facts) -> FactRows {
        FactRows {
            run: facts.run.as_ref().map(|(i, e)| {
                (
                    i.id.clone(),
                    i.program_path.clone(),
                    i.status.as_ref().map(|s| s.as_str().to_string()),
                    i.started_at.clone(),
                    i.updated_at.clone(),
                    e.clone(),
                )
            }),
            pending: facts
                .pending
                .iter()
                .map(|g| {
                    (
                        g.id.clone(),
                        g.run_id.clone(),
                        g.execution_id,
                        g.prompt.clone(),
                        serde_json::to_string(&g.allow).unwrap_or_default(),
                        g.timeout.clone(),
                        g.timeout_at.clone(),
                        g.on_reject.clone(),
                        g.status.to_string(),
                        g.created_at.clone(),
                        g.resolved_at.clone(),
                        g.resolved_by.clone(),
                        g.resolution_comment.clone(),
                        g.metadata.clone(),
                        g.instance,
                    )
                })
                .collect(),
        }
    }
}

/// One line of the catalog's log (`.prose/catalog.log`), JSON: a ticket (`T`), appended
/// under the run's write lock before its commit, or the facts a ticket's write committed
/// (`F`), appended after the commit.
#[derive(Serialize, Deserialize)]
struct LogLine {
    /// The catalog version that wrote the line: a line of another is not guessed at (every
    /// row is read again instead).
    v: i64,
    t: char,
    run: String,
    n: Ticket,
    /// `F`: the run's files after the commit (see `stamp_of`) and its facts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    s: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    f: Option<FactRows>,
    /// `D`: the runs directory's modification time before and after a change prose-state
    /// made to it (see [`changing_runs`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    b: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    a: Option<String>,
}

/// Appends one line to the catalog's log: under a shared lock of the log file, and to the
/// file at the path (a fold renames the log aside under an exclusive lock; a writer that
/// opened it before finds it moved and opens the new one). The log's size after the line.
fn append(prose: &Path, line: &[u8]) -> std::io::Result<u64> {
    use std::io::Write;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let path = prose.join(LOG_FILE);
    for _ in 0..10 {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)?;
        f.lock_shared()?;
        let held = f.metadata()?;
        let named = std::fs::symlink_metadata(&path).ok();
        if named.is_some_and(|m| m.ino() == held.ino() && m.dev() == held.dev()) {
            f.write_all(line)?;
            return Ok(held.len() + line.len() as u64);
        }
    }
    Err(std::io::Error::other("the catalog's log kept being moved"))
}

/// The writer's side: held by a run's store, used only by the transactions that change a
/// fact the catalog keeps. It never opens the catalog's database: a ticket and its facts are
/// lines of the catalog's log, folded in by the next listing.
pub struct Link {
    prose: PathBuf,
    run: String,
    busy: Duration,
}

impl Link {
    /// The catalog of the project a state.db belongs to, if it is a project's run.
    pub fn for_state_db(db: &Path, busy: Duration) -> Option<Link> {
        let (prose, run) = of_state_db(db)?;
        Some(Link { prose, run, busy })
    }

    fn line(&self, kind: char, ticket: &str, facts: Option<(String, FactRows)>) -> Vec<u8> {
        let (s, f) = facts.map_or((None, None), |(s, f)| (Some(s), Some(f)));
        let mut line = serde_json::to_vec(&LogLine {
            v: CATALOG_VERSION,
            t: kind,
            run: self.run.clone(),
            n: ticket.to_string(),
            s,
            f,
            b: None,
            a: None,
        })
        .unwrap_or_default();
        line.push(b'\n');
        line
    }

    /// Marks every row stale (see `STALE_FILE`): for a write that could not log its ticket.
    fn stale(&self) {
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.prose.join(STALE_FILE));
    }

    /// Takes a ticket: called inside the run's write transaction, before its commit. None
    /// when there is no catalog (the first listing builds it, reading this run under its
    /// lock), or when the ticket could not be logged: then the stale mark is made instead,
    /// and the next listing reads every run again.
    pub fn mark(&mut self) -> Option<Ticket> {
        if !self.prose.join(CATALOG_FILE).is_file() {
            return None;
        }
        let since = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let ticket = format!("{}.{}", std::process::id(), since.as_nanos());
        match append(&self.prose, &self.line('T', &ticket, None)) {
            Ok(_) => Some(ticket),
            Err(_) => {
                self.stale();
                None
            }
        }
    }

    /// Logs the facts a transaction committed under `ticket`: after the run's commit. Best
    /// effort: a facts line not written (too large, or a failure) leaves the ticket, and the
    /// next listing reads the run again. A log grown past `FOLD_AT` is folded in here.
    pub fn apply(&mut self, ticket: Ticket, facts: &Facts) {
        let stamp = stamp_of(
            &self
                .prose
                .join("runs")
                .join(&self.run)
                .join(crate::run::DB_FILE),
        );
        let line = self.line('F', &ticket, Some((stamp, FactRows::of(facts))));
        if line.len() > LINE_MOST {
            return;
        }
        if let Ok(size) = append(&self.prose, &line) {
            if size > FOLD_AT {
                let opts = OpenOptions {
                    busy_timeout: self.busy,
                };
                if let Ok(Some(mut c)) = ProjectCatalog::open(&self.prose.join("runs"), opts) {
                    let _ = c.fold();
                }
            }
        }
    }
}

/// A run's writes, watched for the catalog (`sqlite::CommitWatch`): a ticket taken under the
/// run's write lock before the commit, with the facts being committed; both logged after it.
struct Watch {
    link: Link,
    pending: Option<(Ticket, Option<Facts>)>,
}

impl super::sqlite::CommitWatch for Watch {
    fn before_commit(&mut self, conn: &Connection) {
        // Unreadable facts leave the ticket: the next listing reads the run again.
        self.pending = self.link.mark().map(|t| (t, read_facts(conn).ok()));
    }

    fn after_commit(&mut self) {
        let Some((ticket, facts)) = self.pending.take() else {
            return;
        };
        // Fault injection for the tests: a pause between the run's commit and the catalog's
        // update, where a SIGKILL leaves the ticket behind.
        if let Some(ms) = std::env::var_os("PROSE_STATE_TEST_CATALOG_PAUSE_MS")
            .and_then(|v| v.to_str()?.parse::<u64>().ok())
        {
            std::thread::sleep(Duration::from_millis(ms));
        }
        if let Some(facts) = facts {
            self.link.apply(ticket, &facts);
        }
    }
}

/// The catalog's watcher of a run's state.db (installed by `Context`), if the run is a
/// project's.
pub fn watch(db: &Path, busy: Duration) -> Option<Box<dyn super::sqlite::CommitWatch>> {
    Link::for_state_db(db, busy).map(|link| {
        Box::new(Watch {
            link,
            pending: None,
        }) as Box<dyn super::sqlite::CommitWatch>
    })
}

/// Applies one line of the catalog's log (see `ProjectCatalog::fold`).
fn apply_line(c: &Connection, line: LogLine) -> rusqlite::Result<()> {
    match (line.t, line.f) {
        ('T', _) => {
            c.prepare_cached("INSERT OR IGNORE INTO tickets (run, nonce) VALUES (?1, ?2)")?
                .execute([&line.run, &line.n])?;
        }
        ('F', Some(facts)) => {
            // No ticket: a repair read the run after this write committed, and removed it.
            let ticket: Option<i64> = c
                .prepare_cached("SELECT id FROM tickets WHERE nonce = ?1 AND run = ?2")?
                .query_row([&line.n, &line.run], |r| r.get(0))
                .optional()?;
            if let Some(ticket) = ticket {
                put_facts(
                    c,
                    &line.run,
                    ticket,
                    &facts,
                    line.s.as_deref().unwrap_or(""),
                )?;
                c.prepare_cached("DELETE FROM tickets WHERE id = ?1")?
                    .execute([ticket])?;
            }
        }
        ('D', _) => {
            // The chain of announced changes: while each starts where the last ended, the
            // directory holds nothing unannounced, and its names need not be compared.
            let recorded: Option<String> = c
                .prepare_cached("SELECT value FROM meta WHERE key = 'runs_mtime'")?
                .query_row([], |r| r.get(0))
                .optional()?;
            if let (Some(recorded), Some(b), Some(a)) = (recorded, &line.b, &line.a) {
                if &recorded == b {
                    c.prepare_cached(
                        "INSERT OR REPLACE INTO meta (key, value) VALUES ('runs_mtime', ?1)",
                    )?
                    .execute([a])?;
                }
            }
            if !line.run.is_empty() {
                c.prepare_cached(
                    "INSERT INTO runs (id, kind, stale) VALUES (?1, 'none', 1)
                     ON CONFLICT (id) DO UPDATE SET stale = stale + 1",
                )?
                .execute([&line.run])?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The runs directory's modification time, in nanoseconds (the catalog's `runs_mtime`).
fn dir_stamp(dir: &Path) -> Option<(SystemTime, String)> {
    let m = std::fs::metadata(dir).and_then(|m| m.modified()).ok()?;
    let nanos = m.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_nanos();
    Some((m, nanos.to_string()))
}

/// Makes a change to the runs directory (a run's staging directory made, or a run put in
/// place: `added`) and announces it in the catalog's log, with the directory's modification
/// time before and after, under an exclusive lock of the directory that every announced
/// change takes. The next listing then knows the directory holds nothing it was not told of
/// while each change starts where the one before ended, and does not compare its names.
/// Any change not announced (an older version, a directory made by hand, a removal) breaks
/// the chain: the names are compared. With no catalog yet, the change alone.
pub fn changing_runs<T>(
    runs_dir: &Path,
    added: Option<&str>,
    change: impl FnOnce() -> std::io::Result<T>,
) -> std::io::Result<T> {
    let prose = match runs_dir.parent() {
        Some(p) if p.join(CATALOG_FILE).is_file() => p,
        _ => return change(),
    };
    let Ok(lock) = std::fs::File::open(runs_dir) else {
        return change();
    };
    if lock.lock().is_err() {
        return change();
    }
    let before = dir_stamp(runs_dir);
    let done = change()?;
    if let (Some((_, b)), Some((_, a))) = (before, dir_stamp(runs_dir)) {
        let mut line = serde_json::to_vec(&LogLine {
            v: CATALOG_VERSION,
            t: 'D',
            run: added.unwrap_or_default().to_string(),
            n: String::new(),
            s: None,
            f: None,
            b: Some(b),
            a: Some(a),
        })
        .unwrap_or_default();
        line.push(b'\n');
        // Not logged: the chain breaks, and the next listing compares the names.
        let _ = append(prose, &line);
    }
    drop(lock);
    Ok(done)
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
        let conn = if runs_dir.is_dir() {
            let opened = open_db(&prose, opts.busy_timeout, true).map_err(|e| {
                e.context(format!("catalog: {}", prose.join(CATALOG_FILE).display()))
            })?;
            match opened {
                Some(c) => Some(c),
                None => return Ok(None),
            }
        } else {
            None
        };
        Ok(Some(ProjectCatalog {
            conn,
            prose,
            runs_dir: runs_dir.to_path_buf(),
            opts,
            problems: Vec::new(),
            unswept: HashSet::new(),
        }))
    }

    fn err(&self) -> impl Fn(rusqlite::Error) -> anyhow::Error + '_ {
        let path = self.prose.join(CATALOG_FILE);
        let busy = self.opts.busy_timeout.as_millis();
        move |e| db_error(e, &path, busy)
    }

    /// Each row's kind, by run.
    fn row_kinds(&self) -> Result<HashMap<String, String>> {
        let c = self.db().expect("a catalog");
        c.prepare_cached("SELECT id, kind FROM runs")
            .and_then(|mut s| {
                s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<rusqlite::Result<_>>()
            })
            .map_err(self.err())
    }

    fn db(&self) -> Option<&Connection> {
        self.conn.as_ref()
    }

    /// Folds the catalog's log in (see `Link`). Under the catalog's write lock, the live log
    /// is renamed aside (`catalog.log.N`) under the log's exclusive lock, so that no writer
    /// is mid-line in it and none writes to it after; then every aside log not yet folded is
    /// applied, oldest first, and the newest one folded is recorded in the same transaction,
    /// so that a fold killed after its commit never applies a log twice. A ticket line adds a
    /// ticket; a facts line puts its facts in the row (if its ticket is newer than the row's)
    /// and deletes its ticket. A line that cannot be read marks every row stale.
    pub fn fold(&mut self) -> Result<()> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let Some(c) = self.conn.as_ref() else {
            return Ok(());
        };
        let err = self.err();
        let io = |e: std::io::Error, what: &Path| {
            anyhow::Error::new(e).context(format!("catalog log: {}", what.display()))
        };
        let live = self.prose.join(LOG_FILE);
        // Never followed: a symlink (or anything but a file) in its place is removed, and
        // the writers that could not log meanwhile have left the stale mark.
        if let Ok(m) = std::fs::symlink_metadata(&live) {
            if !m.is_file() {
                if m.is_dir() {
                    let _ = std::fs::remove_dir(&live);
                } else {
                    let _ = std::fs::remove_file(&live);
                }
            }
        }
        let mut aside: Vec<(i64, PathBuf)> = std::fs::read_dir(&self.prose)
            .map_err(|e| io(e, &self.prose))?
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let n = name
                    .strip_prefix(LOG_FILE)?
                    .strip_prefix('.')?
                    .parse()
                    .ok()?;
                Some((n, e.path()))
            })
            .collect();
        let log = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&live);
        if aside.is_empty() && log.is_err() {
            return Ok(());
        }
        let tx = rusqlite::Transaction::new_unchecked(c, rusqlite::TransactionBehavior::Immediate)
            .map_err(&err)?;
        let folded: i64 = tx
            .query_row("SELECT value FROM meta WHERE key = 'log_folded'", [], |r| {
                r.get::<_, String>(0)
            })
            .optional()
            .map_err(&err)?
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if let Ok(f) = log {
            f.lock().map_err(|e| io(e, &live))?;
            let held = f.metadata().map_err(|e| io(e, &live))?;
            let named = std::fs::symlink_metadata(&live).ok();
            if named.is_some_and(|m| m.ino() == held.ino() && m.dev() == held.dev()) {
                let next = aside.iter().map(|a| a.0).max().unwrap_or(0).max(folded) + 1;
                let to = self.prose.join(format!("{LOG_FILE}.{next}"));
                std::fs::rename(&live, &to).map_err(|e| io(e, &live))?;
                aside.push((next, to));
            }
        }
        aside.sort();
        let mut newest = folded;
        let mut odd = false;
        for (n, path) in aside.iter().filter(|a| a.0 > folded) {
            let text = std::fs::read(path).map_err(|e| io(e, path))?;
            for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                match serde_json::from_slice::<LogLine>(line) {
                    Ok(l) if l.v == CATALOG_VERSION => apply_line(&tx, l).map_err(&err)?,
                    _ => odd = true,
                }
            }
            newest = *n;
        }
        if odd {
            tx.execute("UPDATE runs SET stale = stale + 1", [])
                .map_err(&err)?;
        }
        tx.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('log_folded', ?1)",
            [newest.to_string()],
        )
        .map_err(&err)?;
        tx.commit().map_err(&err)?;
        for (_, path) in aside.iter().filter(|a| a.0 <= newest) {
            let _ = std::fs::remove_file(path);
        }
        Ok(())
    }

    /// Brings the catalog up to date: claims the stale mark, compares the runs directory
    /// when it changed (`full`: always), then re-reads every run with a ticket left, a stale
    /// row, or no facts yet.
    pub fn refresh(&mut self, full: bool) -> Result<()> {
        self.fold()?;
        let Some(c) = self.db() else { return Ok(()) };
        let err = self.err();
        let stale = self.prose.join(STALE_FILE);
        // After a reboot the catalog's last commits may be gone (synchronous = NORMAL keeps a
        // prefix of them), tickets with them; a run whose commit was kept has changed its
        // files since its facts were read: every run's files are compared (a stat each, not
        // an open), and those that changed are read again.
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|b| b.trim().to_string())
            .unwrap_or_default();
        let booted: Option<String> = c
            .query_row("SELECT value FROM meta WHERE key = 'boot_id'", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(&err)?;
        let rebooted = booted.as_deref() != Some(boot.as_str());
        if full || stale.exists() {
            // Every row, then the mark: a writer that makes it again after this is read by
            // the next listing (it holds its run's lock until its commit, and the repairs
            // below take that lock).
            c.execute("UPDATE runs SET stale = stale + 1", [])
                .map_err(&err)?;
            let _ = std::fs::remove_file(&stale);
        }
        drop(err);
        if rebooted {
            let kept: Vec<(String, Option<String>)> = self
                .db()
                .expect("checked above")
                .prepare("SELECT id, stamp FROM runs WHERE +kind = 'sqlite'")
                .and_then(|mut s| s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
                .map_err(self.err())?;
            self.fresh(&kept)?;
            self.db()
                .expect("checked above")
                .execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('boot_id', ?1)",
                    [&boot],
                )
                .map_err(self.err())?;
        }
        self.reconcile(full)?;
        let c = self.db().expect("checked above");
        let dirty: Vec<String> = c
            .prepare(
                "SELECT id FROM runs INDEXED BY catalog_runs_stale WHERE stale <> 0
                 UNION SELECT id FROM runs INDEXED BY catalog_runs_odd
                       WHERE kind <> 'sqlite' AND kind IN ('unreadable', 'none')
                 UNION SELECT run FROM tickets",
            )
            .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
            .map_err(self.err())?;
        for id in dirty {
            self.repair(&id)?;
        }
        Ok(())
    }

    /// Compares the runs directory's names with the rows, when its modification time is not
    /// the one recorded (or `full`).
    fn reconcile(&mut self, full: bool) -> Result<()> {
        let c = self.db().expect("a catalog");
        let (mtime, stamp) = dir_stamp(&self.runs_dir).unzip();
        let recorded: Option<String> = c
            .query_row("SELECT value FROM meta WHERE key = 'runs_mtime'", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(self.err())?;
        if !full && stamp.is_some() && recorded == stamp {
            return Ok(());
        }
        let entries = match std::fs::read_dir(&self.runs_dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                return Err(anyhow::Error::new(e)
                    .context(format!("could not list runs: {}", self.runs_dir.display())))
            }
        };
        let names: HashSet<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| !n.starts_with('.'))
            .collect();
        let known: HashMap<String, String> = self.row_kinds()?;
        let tx = rusqlite::Transaction::new_unchecked(c, rusqlite::TransactionBehavior::Immediate)
            .map_err(self.err())?;
        for gone in known.keys().filter(|k| !names.contains(*k)) {
            forget(&tx, gone).map_err(self.err())?;
        }
        for name in names.iter().filter(|n| !known.contains_key(*n)) {
            // Read by the repair that follows (stale), under the run's lock.
            tx.execute(
                "INSERT OR IGNORE INTO runs (id, kind, stale) VALUES (?1, 'none', 1)",
                [name],
            )
            .map_err(self.err())?;
        }
        // Recorded only once settled (see SETTLED), so that nothing made since is missed.
        let settled = mtime
            .and_then(|m| SystemTime::now().duration_since(m).ok())
            .is_some_and(|age| age > SETTLED);
        if let (Some(stamp), true) = (&stamp, settled) {
            tx.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('runs_mtime', ?1)",
                [stamp],
            )
            .map_err(self.err())?;
        }
        tx.commit().map_err(self.err())?;
        Ok(())
    }

    /// Reads one run again and puts its facts in the catalog (see the module's comment).
    pub fn repair(&mut self, id: &str) -> Result<()> {
        let dir = self.runs_dir.join(id);
        let paths = crate::run::RunPaths::in_dir(dir.clone());
        let c = self.conn.as_ref().expect("a catalog");
        let err = |e| {
            db_error(
                e,
                &self.prose.join(CATALOG_FILE),
                self.opts.busy_timeout.as_millis(),
            )
        };
        if !dir.is_dir() {
            return forget(c, id).map_err(err);
        }
        if !paths.exists() {
            // A directory with no run (yet): looked at again by every listing.
            c.execute(
                "UPDATE runs SET kind = 'none', stale = 0, problem = NULL WHERE id = ?1",
                [id],
            )
            .map_err(err)?;
            c.execute("DELETE FROM gates WHERE run = ?1", [id])
                .map_err(err)?;
            return Ok(());
        }
        match paths.backend() {
            Ok(super::Backend::Sqlite) => {}
            Ok(super::Backend::Postgres) => {
                c.execute(
                    "INSERT INTO runs (id, kind) VALUES (?1, 'server')
                     ON CONFLICT (id) DO UPDATE SET kind = 'server', stale = 0, problem = NULL",
                    [id],
                )
                .map_err(err)?;
                c.execute("DELETE FROM gates WHERE run = ?1", [id])
                    .map_err(err)?;
                return Ok(());
            }
            Err(e) => return self.unreadable(id, &e),
        }
        let stale_was: i64 = c
            .query_row("SELECT stale FROM runs WHERE id = ?1", [id], |r| r.get(0))
            .optional()
            .map_err(err)?
            .unwrap_or(0);
        let read = (|| {
            // The file read must be the one at the path once its lock is held: a run being
            // replaced (`import --replace`) is exchanged under its old file's lock.
            for _ in 0..5 {
                let before = file_id(&paths.db);
                let mut store = super::sqlite::SqliteStore::open(&paths.db, self.opts)?;
                // Under the run's write lock: no writer is between its ticket and its commit.
                let locked = store.lock_for_reading();
                if before.is_none() || file_id(&paths.db) != before {
                    store.unlock();
                    continue;
                }
                let ticket = c
                    .execute("INSERT INTO tickets (run) VALUES (?1)", [id])
                    .map(|_| c.last_insert_rowid())
                    .map_err(err)?;
                let facts = store.read(read_facts);
                let stamp = stamp_of(&paths.db);
                store.unlock();
                return Ok((locked, ticket, facts?, stamp));
            }
            Err(anyhow!(
                "the run's state.db kept being replaced while it was read"
            ))
        })();
        let (locked, ticket, facts, stamp) = match read {
            Ok(r) => r,
            Err(e) => return self.unreadable(id, &e),
        };
        let tx = rusqlite::Transaction::new_unchecked(c, rusqlite::TransactionBehavior::Immediate)
            .map_err(err)?;
        put_facts(&tx, id, ticket, &FactRows::of(&facts), &stamp).map_err(err)?;
        if locked {
            // Every writer with an older ticket has committed or died.
            tx.execute(
                "DELETE FROM tickets WHERE run = ?1 AND id <= ?2",
                params![id, ticket],
            )
            .map_err(err)?;
            tx.execute(
                "UPDATE runs SET stale = 0 WHERE id = ?1 AND stale = ?2",
                params![id, stale_was],
            )
            .map_err(err)?;
        } else {
            // Read without the lock (a read-only file): read again by the next listing.
            tx.execute("DELETE FROM tickets WHERE id = ?1", [ticket])
                .map_err(err)?;
        }
        tx.commit().map_err(err)
    }

    /// Records a run that could not be read: every listing tries it again, and reports it.
    fn unreadable(&mut self, id: &str, e: &anyhow::Error) -> Result<()> {
        let c = self.conn.as_ref().expect("a catalog");
        let why = format!("{e:#}");
        let tx = rusqlite::Transaction::new_unchecked(c, rusqlite::TransactionBehavior::Immediate)
            .map_err(self.err())?;
        tx.execute(
            "INSERT INTO runs (id, kind, problem) VALUES (?1, 'unreadable', ?2)
             ON CONFLICT (id) DO UPDATE SET kind = 'unreadable', problem = ?2",
            params![id, why],
        )
        .map_err(self.err())?;
        tx.execute("DELETE FROM gates WHERE run = ?1", [id])
            .map_err(self.err())?;
        tx.commit().map_err(self.err())?;
        self.problems.push(format!("skipped run {id}: {why}"));
        Ok(())
    }

    /// Reads again those of `kept` (each run with the stamp its facts were read under, taken
    /// in the same query as what is shown) whose files are not as they were then (a write
    /// behind prose-state's back, or one since whose catalog update is still to come);
    /// whether any was. A stat of each run's files, never a query or an open.
    fn fresh(&mut self, kept: &[(String, Option<String>)]) -> Result<bool> {
        let runs_dir = &self.runs_dir;
        let changed: Vec<String> = in_parallel(kept, |(id, stamp)| {
            let db = runs_dir.join(id).join(crate::run::DB_FILE);
            (stamp.as_deref() != Some(stamp_of(&db).as_str())).then(|| id.clone())
        })
        .into_iter()
        .flatten()
        .collect();
        for id in &changed {
            self.repair(id)?;
        }
        Ok(!changed.is_empty())
    }

    /// The runs kept on the project's server (directories here holding only a record).
    pub fn server_runs(&self) -> Result<Vec<String>> {
        self.ids_of_kind("server")
    }

    /// The runs that could not be read (reported in `warnings`).
    pub fn unreadable_runs(&self) -> Result<Vec<String>> {
        self.ids_of_kind("unreadable")
    }

    fn ids_of_kind(&self, kind: &str) -> Result<Vec<String>> {
        let Some(c) = self.db() else {
            return Ok(Vec::new());
        };
        c.prepare_cached("SELECT id FROM runs WHERE kind <> 'sqlite' AND kind = ?1 ORDER BY id")
            .and_then(|mut s| s.query_map([kind], |r| r.get(0))?.collect())
            .map_err(self.err())
    }

    /// Makes the catalog anew from the runs (`doctor --fix`): every row read again.
    pub fn rebuild(&mut self) -> Result<()> {
        self.refresh(true)
    }

    /// Compares every row with its run, read now (`doctor`); nothing is written.
    pub fn check(&mut self) -> Result<CatalogCheck> {
        self.fold()?;
        let mut out = CatalogCheck::default();
        let Some(c) = self.db() else { return Ok(out) };
        let names: Vec<String> = match std::fs::read_dir(&self.runs_dir) {
            Ok(e) => e
                .flatten()
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .filter(|n| !n.starts_with('.'))
                .collect(),
            Err(_) => Vec::new(),
        };
        // Each row's kind, by run.
        let rows: HashMap<String, String> = self.row_kinds()?;
        let dirty: HashSet<String> = c
            .prepare("SELECT run FROM tickets UNION SELECT id FROM runs WHERE stale <> 0")
            .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
            .map_err(self.err())?;
        for name in &names {
            let paths = crate::run::RunPaths::in_dir(self.runs_dir.join(name));
            if !paths.exists() || !matches!(paths.backend(), Ok(super::Backend::Sqlite)) {
                continue;
            }
            out.runs += 1;
            let Some(kind) = rows.get(name) else {
                out.differences
                    .push((name.clone(), "not in the catalog".into()));
                continue;
            };
            if kind != "sqlite" || dirty.contains(name) {
                // Read again by the next listing.
                continue;
            }
            let Ok(store) = super::sqlite::SqliteStore::open(&paths.db, self.opts) else {
                continue;
            };
            let Ok(facts) = store.read(read_facts) else {
                continue;
            };
            let kept = self.kept_facts(name)?;
            if let Some(why) = differ(&kept, &facts) {
                out.differences
                    .push((name.clone(), format!("the catalog says {why}")));
            }
        }
        for (id, kind) in &rows {
            if kind == "sqlite" && !names.contains(id) {
                out.differences
                    .push((id.clone(), "in the catalog, but not under the runs".into()));
            }
        }
        out.differences.sort();
        Ok(out)
    }

    /// The facts a row holds.
    fn kept_facts(&self, id: &str) -> Result<Facts> {
        let c = self.db().expect("a catalog");
        let run = c
            .query_row(
                "SELECT run_id, program_path, status, started_at, updated_at, error_message
                 FROM runs WHERE id = ?1 AND run_id IS NOT NULL",
                [id],
                |r| Ok((run_info_at(r, 0)?, r.get(5)?)),
            )
            .optional()
            .map_err(self.err())?;
        let pending = c
            .prepare_cached(&format!(
                "SELECT {GATE_COLUMNS} FROM gates WHERE run = ?1 ORDER BY created_at, id"
            ))
            .and_then(|mut s| s.query_map([id], gate_row)?.collect())
            .map_err(self.err())?;
        Ok(Facts { run, pending })
    }
}

/// What differs between a row's facts and the run's, in a few words; None when they agree.
fn differ(kept: &Facts, now: &Facts) -> Option<String> {
    let status = |f: &Facts| {
        f.run
            .as_ref()
            .and_then(|(i, _)| i.status.as_ref().map(|s| s.as_str().to_string()))
    };
    if status(kept) != status(now) {
        return Some(format!(
            "status {:?}, the run {:?}",
            status(kept),
            status(now)
        ));
    }
    let ids = |f: &Facts| {
        f.pending
            .iter()
            .map(|g| (g.id.clone(), g.instance, g.timeout_at.clone()))
            .collect::<Vec<_>>()
    };
    if ids(kept) != ids(now) {
        return Some(format!(
            "{} pending gates, the run {}",
            kept.pending.len(),
            now.pending.len()
        ));
    }
    let other = |f: &Facts| {
        f.run.as_ref().map(|(i, e)| {
            (
                i.id.clone(),
                i.program_path.clone(),
                i.started_at.clone(),
                i.updated_at.clone(),
                e.clone(),
            )
        })
    };
    (other(kept) != other(now)).then(|| "other run details than the run's".to_string())
}

/// What a state.db and its write-ahead log are now: identity, size and modification time.
fn stamp_of(db: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let mut log = db.as_os_str().to_owned();
    log.push("-wal");
    [db, Path::new(&log)]
        .iter()
        .map(|f| match std::fs::metadata(f) {
            Ok(m) => format!(
                "{}:{}:{}:{}.{}",
                m.dev(),
                m.ino(),
                m.len(),
                m.mtime(),
                m.mtime_nsec()
            ),
            Err(_) => "-".into(),
        })
        .collect::<Vec<_>>()
        .join("/")
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

/// Runs `exchange`, which puts another run directory in the place of the one of `db`, while
/// holding the write lock of the run's current state.db and with the run's catalog row marked
/// stale before; then reads the run again into the catalog. A listing meanwhile waits for the
/// lock, or finds the row stale (`import --replace`).
pub fn while_replacing<T>(db: &Path, opts: OpenOptions, exchange: impl FnOnce() -> T) -> T {
    let Some((prose, id)) = of_state_db(db) else {
        return exchange();
    };
    let mut old = super::sqlite::SqliteStore::open(db, opts).ok();
    if let Some(s) = old.as_mut() {
        s.lock_for_reading();
    }
    let marked = match open_db(&prose, opts.busy_timeout, false) {
        Ok(Some(c)) => c
            .execute("UPDATE runs SET stale = stale + 1 WHERE id = ?1", [&id])
            .is_ok(),
        Ok(None) => !prose.join(CATALOG_FILE).exists(),
        Err(_) => false,
    };
    if !marked {
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(prose.join(STALE_FILE));
    }
    let done = exchange();
    if let Some(mut s) = old {
        s.unlock();
    }
    if let Some(runs) = db.parent().and_then(Path::parent) {
        if let Ok(Some(mut catalog)) = ProjectCatalog::open(runs, opts) {
            if catalog.conn.is_some() {
                let _ = catalog.repair(&id);
            }
        }
    }
    done
}

/// Removes a pruned run's rows (best effort: a listing finds the directory gone anyway).
pub fn forget_run(dir: &Path, opts: OpenOptions) {
    if let Some((prose, id)) = of_state_db(&dir.join(crate::run::DB_FILE)) {
        if let Ok(Some(c)) = open_db(&prose, opts.busy_timeout, false) {
            let _ = forget(&c, &id);
            close(c, &prose);
        }
    }
}

/// Removes a run's rows.
fn forget(c: &Connection, id: &str) -> rusqlite::Result<()> {
    c.execute("DELETE FROM runs WHERE id = ?1", [id])?;
    c.execute("DELETE FROM gates WHERE run = ?1", [id])?;
    c.execute("DELETE FROM tickets WHERE run = ?1", [id])?;
    c.execute("DELETE FROM run_stats WHERE id = ?1", [id])?;
    Ok(())
}

/// A SQLite run's stats as the catalog keeps them (`run_stats.stats`).
#[derive(Serialize, Deserialize)]
struct KeptStats {
    run_id: String,
    schema_version: i64,
    db_bytes: Option<u64>,
    wal_bytes: Option<u64>,
    tables: BTreeMap<String, i64>,
    execution_status: BTreeMap<String, i64>,
    binding_inline_bytes: i64,
    settings: BTreeMap<String, String>,
    attachment_files: u64,
    attachment_bytes: u64,
}

impl KeptStats {
    fn of(st: &RunStats) -> KeptStats {
        KeptStats {
            run_id: st.run_id.clone(),
            schema_version: st.store.schema_version,
            db_bytes: st.store.db_bytes,
            wal_bytes: st.store.wal_bytes,
            tables: st.store.tables.clone(),
            execution_status: st.store.execution_status.clone(),
            binding_inline_bytes: st.store.binding_inline_bytes,
            settings: st.store.settings.clone(),
            attachment_files: st.attachment_files,
            attachment_bytes: st.attachment_bytes,
        }
    }

    fn stats(self) -> RunStats {
        RunStats {
            run_id: self.run_id,
            store: StoreStats {
                backend: "sqlite",
                schema_version: self.schema_version,
                db_bytes: self.db_bytes,
                wal_bytes: self.wal_bytes,
                tables: self.tables,
                execution_status: self.execution_status,
                binding_inline_bytes: self.binding_inline_bytes,
                settings: self.settings,
            },
            attachment_files: self.attachment_files,
            attachment_bytes: self.attachment_bytes,
        }
    }
}

/// What a run's stats are read from: its state.db and log (`stamp_of`), and its attachments
/// directory (identity and modification time: a file added, replaced or removed changes it).
fn stats_files(dir: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let attachments = match std::fs::symlink_metadata(dir.join(crate::run::ATTACHMENTS_DIR)) {
        Ok(m) => format!(
            "{}:{}:{}:{}.{}",
            m.dev(),
            m.ino(),
            m.file_type().is_dir(),
            m.mtime(),
            m.mtime_nsec()
        ),
        Err(_) => "-".into(),
    };
    format!("{}/{attachments}", stamp_of(&dir.join(crate::run::DB_FILE)))
}

impl Drop for ProjectCatalog {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            close(c, &self.prose);
        }
    }
}

impl ProjectCatalog {
    fn state_db(&self, id: &str) -> PathBuf {
        self.runs_dir.join(id).join(crate::run::DB_FILE)
    }

    fn wanted(runs: &RunFilter, id: &str) -> bool {
        runs.only.as_ref().is_none_or(|o| o.iter().any(|r| r == id))
            && !runs.except.iter().any(|r| r == id)
    }
}

impl Catalog for ProjectCatalog {
    fn sweep_overdue(&mut self, runs: &RunFilter, now: &str) -> Result<usize> {
        let Some(c) = self.db() else { return Ok(0) };
        let overdue: Vec<String> = c
            .prepare_cached(
                "SELECT DISTINCT g.run
                 FROM gates g INDEXED BY catalog_gates_due JOIN runs r ON r.id = g.run
                 WHERE g.due IS NOT NULL AND g.due <= datetime(?1) AND +r.kind = 'sqlite'
                 ORDER BY g.run",
            )
            .and_then(|mut s| s.query_map([now], |r| r.get(0))?.collect())
            .map_err(self.err())?;
        let mut swept = 0;
        for id in overdue.iter().filter(|id| Self::wanted(runs, id)) {
            // Through the run's own rules: its store marks and updates the catalog.
            let done = super::sqlite::SqliteStore::open(&self.state_db(id), self.opts)
                .and_then(|mut s| s.sweep_timeouts(now));
            match done {
                Ok(_) => swept += 1,
                Err(e) => {
                    self.problems.push(format!("skipped run {id}: {e:#}"));
                    self.unswept.insert(id.clone());
                }
            }
        }
        Ok(swept)
    }

    fn pending_gates_of(
        &mut self,
        runs: &RunFilter,
        limit: Option<i64>,
    ) -> Result<Vec<(GateRow, Option<String>)>> {
        let Some(c) = self.db() else {
            return Ok(Vec::new());
        };
        let cols = GATE_COLUMNS
            .split(", ")
            .map(|col| format!("g.{}", col.trim()))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT {cols}, r.program_path, g.run, r.stamp
             FROM gates g INDEXED BY catalog_gates_order JOIN runs r ON r.id = g.run
             WHERE +r.kind = 'sqlite' ORDER BY g.created_at, g.run, g.id LIMIT ?1"
        );
        type Shown = (String, Option<String>, GateRow, Option<String>);
        let read = |c: &Connection| -> rusqlite::Result<Vec<Shown>> {
            c.prepare_cached(&sql)?
                .query_map([limit.unwrap_or(-1)], |r| {
                    Ok((r.get(16)?, r.get(17)?, gate_row(r)?, r.get(15)?))
                })?
                .collect()
        };
        let mut rows = read(c).map_err(self.err())?;
        // The runs shown, checked against their files; read again if they changed.
        let mut shown: Vec<(String, Option<String>)> = rows
            .iter()
            .map(|(run, stamp, ..)| (run.clone(), stamp.clone()))
            .collect();
        shown.sort_unstable();
        shown.dedup();
        if self.fresh(&shown)? {
            rows = read(self.db().expect("a catalog")).map_err(self.err())?;
        }
        // A gate is listed under the run directory that holds it, whatever its row says (a
        // copied directory's rows name the original): a decision goes where it is shown.
        Ok(rows
            .into_iter()
            .filter(|(run, ..)| Self::wanted(runs, run) && !self.unswept.contains(run))
            .map(|(run, _, mut g, p)| {
                g.run_id = Some(run);
                (g, p)
            })
            .collect())
    }

    fn summaries_of(
        &mut self,
        runs: &RunFilter,
        now: &str,
        status: Option<&str>,
        since: Option<&str>,
        limit: Option<i64>,
    ) -> Result<Vec<RunSummary>> {
        let Some(c) = self.db() else {
            return Ok(Vec::new());
        };
        // The page from the catalog, newest first; each run of it read whole from its store.
        let read = |c: &Connection| -> rusqlite::Result<Vec<(String, Option<String>)>> {
            c.prepare_cached(
                "SELECT id, stamp FROM runs INDEXED BY catalog_runs_started WHERE +kind = 'sqlite'
                   AND (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR started_at >= ?2)
                 ORDER BY started_at DESC, id DESC LIMIT ?3",
            )?
            .query_map(params![status, since, limit.unwrap_or(-1)], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?
            .collect()
        };
        let mut ids = read(c).map_err(self.err())?;
        if self.fresh(&ids)? {
            ids = read(self.db().expect("a catalog")).map_err(self.err())?;
        }
        let mut out = Vec::new();
        for (id, _) in ids.iter().filter(|(id, _)| Self::wanted(runs, id)) {
            match super::sqlite::SqliteStore::open(&self.state_db(id), self.opts)
                .and_then(|mut s| s.run_summary(now))
            {
                Ok(mut s) => {
                    // Listed under its directory's name (a copy's database names the original).
                    s.run.id = id.clone();
                    out.push(s)
                }
                Err(e) => self.problems.push(format!("skipped run {id}: {e:#}")),
            }
        }
        Ok(out)
    }

    fn runs_of(&mut self, runs: &RunFilter, now: &str) -> Result<Vec<(String, RunSummary)>> {
        let Some(c) = self.db() else {
            return Ok(Vec::new());
        };
        let sql = "SELECT r.id, r.id, r.program_path, r.status, r.started_at, r.updated_at,
                    r.error_message,
                    (SELECT COUNT(*) FROM gates g WHERE g.run = r.id
                       AND NOT (g.due IS NOT NULL AND g.due <= datetime(?1))),
                    r.stamp
             FROM runs r INDEXED BY catalog_runs_started WHERE +r.kind = 'sqlite'
             ORDER BY r.started_at DESC, r.id DESC";
        type Planned = (String, RunSummary, Option<String>);
        let read = |c: &Connection| -> rusqlite::Result<Vec<Planned>> {
            c.prepare_cached(sql)?
                .query_map([now], |r| {
                    Ok((
                        r.get(0)?,
                        RunSummary {
                            run: run_info_at(r, 1)?,
                            error_message: r.get(6)?,
                            last_event_at: None,
                            pending_gates: r.get(7)?,
                        },
                        r.get(8)?,
                    ))
                })?
                .collect()
        };
        let mut rows = read(c).map_err(self.err())?;
        // Every run is planned from: each checked against its files (a stat, not an open).
        let kept: Vec<(String, Option<String>)> = rows
            .iter()
            .map(|(id, _, stamp)| (id.clone(), stamp.clone()))
            .collect();
        if self.fresh(&kept)? {
            rows = read(self.db().expect("a catalog")).map_err(self.err())?;
        }
        Ok(rows
            .into_iter()
            .filter(|(id, ..)| Self::wanted(runs, id))
            .map(|(id, s, _)| (id, s))
            .collect())
    }

    fn stats_of(&mut self, runs: &RunFilter) -> Result<Vec<(String, RunStats)>> {
        let Some(c) = self.db() else {
            return Ok(Vec::new());
        };
        let kept: Vec<(String, Option<String>, Option<String>)> = c
            .prepare_cached(
                "SELECT r.id, s.files, s.stats FROM runs r LEFT JOIN run_stats s ON s.id = r.id
                 WHERE +r.kind = 'sqlite' ORDER BY r.id",
            )
            .and_then(|mut s| {
                s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                    .collect()
            })
            .map_err(self.err())?;
        let kept: Vec<_> = kept
            .into_iter()
            .filter(|(id, ..)| Self::wanted(runs, id))
            .collect();
        let runs_dir = &self.runs_dir;
        let now = in_parallel(&kept, |(id, ..)| stats_files(&runs_dir.join(id)));
        let mut out = Vec::with_capacity(kept.len());
        let mut changed = Vec::new();
        for ((id, files, stats), before) in kept.into_iter().zip(now) {
            if files.as_deref() == Some(before.as_str()) {
                if let Some(k) = stats.and_then(|s| serde_json::from_str::<KeptStats>(&s).ok()) {
                    out.push((id, k.stats()));
                    continue;
                }
            }
            changed.push((id, before));
        }
        let progress = crate::term::Progress::new(changed.len());
        let mut read = Vec::new();
        for (id, before) in changed {
            progress.step();
            let dir = self.runs_dir.join(&id);
            let paths = crate::run::RunPaths::in_dir(dir.clone());
            let st = super::sqlite::SqliteStore::open(&paths.db, self.opts)
                .and_then(|mut s| super::run_stats(&mut s, &dir, &id));
            match st {
                Ok(st) => {
                    // Kept under the files read only if they did not change meanwhile (the
                    // first open may make the log): otherwise read again next time.
                    if stats_files(&dir) == before {
                        let json = serde_json::to_string(&KeptStats::of(&st))?;
                        read.push((id.clone(), before, json));
                    }
                    out.push((id, st));
                }
                Err(e) => self.problems.push(format!("skipped run {id}: {e:#}")),
            }
        }
        if !read.is_empty() {
            let c = self.db().expect("checked above");
            let tx =
                rusqlite::Transaction::new_unchecked(c, rusqlite::TransactionBehavior::Immediate)
                    .map_err(self.err())?;
            for (id, files, json) in &read {
                tx.prepare_cached(
                    "INSERT OR REPLACE INTO run_stats (id, files, stats) VALUES (?1, ?2, ?3)",
                )
                .and_then(|mut s| s.execute([id, files, json]))
                .map_err(self.err())?;
            }
            tx.commit().map_err(self.err())?;
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    fn warnings(&mut self) -> Vec<String> {
        let mut out = self.copies();
        out.append(&mut self.problems);
        out
    }
}

impl ProjectCatalog {
    /// The run directories that are copies (their name is not the id their database records),
    /// each named once; read through their own index, so a listing of 100,000 runs pays
    /// nothing for them.
    fn copies(&mut self) -> Vec<String> {
        let Some(c) = self.db() else {
            return Vec::new();
        };
        let found: rusqlite::Result<Vec<(String, String)>> = c
            .prepare_cached(
                "SELECT id, run_id FROM runs INDEXED BY catalog_runs_copies
                 WHERE run_id <> id AND kind = 'sqlite' ORDER BY id",
            )
            .and_then(|mut s| s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect());
        found
            .unwrap_or_default()
            .into_iter()
            .map(|(dir, recorded)| copy_warning(&dir, &recorded))
            .collect()
    }
}

/// What a listing says of a run directory copied by hand.
pub fn copy_warning(dir: &str, recorded: &str) -> String {
    format!(
        "run {} is a copy of run {} (its directory's name is not the id it records): listed under its own name; nothing is decided or written in it",
        crate::error::shown(dir),
        crate::error::shown(recorded)
    )
}

#[cfg(test)]
mod tests {
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
