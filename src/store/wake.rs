//! Waiters woken by the commit: a process that waits for a run to change (`gates wait`,
//! `log --follow`, the MCP server, the page) learns of a commit within milliseconds, and costs
//! almost nothing while idle.
//!
//! - On PostgreSQL, a trigger in the committing transaction sends `NOTIFY openprose_change`
//!   with the run's id (schema 9), so it is heard only if the write commits, and raw writers
//!   wake waiters too. One connection per process listens, for every waiter of the process.
//! - On SQLite, one file watch per process (inotify, through the `notify` crate) on the run
//!   directories its waiters wait on; a change of `state.db` or its write-ahead log wakes the
//!   run's waiters, who confirm it with `PRAGMA data_version` (a checkpoint, or the waiter's own
//!   process, changes nothing they would see).
//!
//! A signal missed or coalesced only delays a waiter until its next look: every waiter still
//! looks at its safety-net interval. Where a listening connection or a watch cannot be had
//! (the server's `max_connections`, the kernel's inotify instances, `PROSE_STATE_WAKE=poll`),
//! waiters poll, as before.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The channel the schema's trigger notifies, with the run's id as payload.
pub const CHANNEL: &str = "openprose_change";

/// How a waiter learns that its run may have changed.
pub trait Changes: Send {
    /// Blocks until a change to the run may have committed, or `max` has passed. True when
    /// woken by a change (the waiter looks again either way).
    fn wait(&mut self, max: Duration) -> bool;
    /// `listen` (PostgreSQL NOTIFY), `watch` (a file watch) or `poll`.
    fn how(&self) -> &'static str;
}

/// Sleeps the whole interval: what every waiter falls back to.
pub struct Polling;

impl Changes for Polling {
    fn wait(&mut self, max: Duration) -> bool {
        std::thread::sleep(max);
        false
    }

    fn how(&self) -> &'static str {
        "poll"
    }
}

/// How long a waiter woken by the commit sleeps at most between looks (the safety net for a
/// signal missed), unless told otherwise.
pub const SAFETY_NET: Duration = Duration::from_secs(30);

/// The interval a waiter looks at: `given`, else the safety net when `changes` wake it, else
/// `polling`.
pub fn interval(given: Option<Duration>, changes: &dyn Changes, polling: Duration) -> Duration {
    given.unwrap_or(if changes.how() == "poll" {
        polling
    } else {
        SAFETY_NET
    })
}

/// How many waiters of one process look at once (each look holds its store: on PostgreSQL,
/// a server connection). Waiters woken together (a commit to their run wakes all of them)
/// take turns, this many at a time, so that a process with a thousand waiters never opens a
/// thousand connections at once; a look is a few statements, milliseconds. The PostgreSQL
/// backend keeps as many idle connections for the next open, so these looks reuse them.
pub const LOOKS_AT_ONCE: usize = 8;

/// A waiter's turn to look, held while it looks (and, on PostgreSQL, until its store is put
/// back): at most [`LOOKS_AT_ONCE`] in the process at once.
pub struct Turn(());

/// Waits for a turn to look.
pub fn turn() -> Turn {
    let (count, freed) = looks();
    let mut n = count.lock().unwrap_or_else(|p| p.into_inner());
    while *n >= LOOKS_AT_ONCE {
        n = freed.wait(n).unwrap_or_else(|p| p.into_inner());
    }
    *n += 1;
    Turn(())
}

impl Drop for Turn {
    fn drop(&mut self) {
        let (count, freed) = looks();
        let mut n = count.lock().unwrap_or_else(|p| p.into_inner());
        *n -= 1;
        freed.notify_one();
    }
}

/// How this process hears of changes. One per process by nature, the one static here: every
/// waiter of the process shares one file watch (one inotify instance) and one listening
/// connection per server, whichever store or context it came through, and the turns bound
/// the process's looks as a whole. Two would hear each change twice and bound nothing.
struct Wake {
    /// The looks under way, and the signal that one ended.
    looks: (Mutex<usize>, Condvar),
    /// The listening connections, by server URL.
    pg_hubs: Mutex<HashMap<String, Arc<Hub>>>,
    /// The file watch, made at its first use (None: the platform gives none).
    files: OnceLock<Option<FileWatch>>,
}

fn wake() -> &'static Wake {
    static WAKE: OnceLock<Wake> = OnceLock::new();
    WAKE.get_or_init(|| Wake {
        looks: (Mutex::new(0), Condvar::new()),
        pg_hubs: Mutex::default(),
        files: OnceLock::new(),
    })
}

/// The looks under way in this process, and the signal that one ended.
fn looks() -> &'static (Mutex<usize>, Condvar) {
    &wake().looks
}

/// Whether wake-ups are turned off (`PROSE_STATE_WAKE=poll`): every waiter polls.
pub fn disabled() -> bool {
    std::env::var("PROSE_STATE_WAKE").is_ok_and(|v| v == "poll")
}

/// Changes heard by one process, by key (a run id, or a run directory): a count each key's
/// waiters compare with the one they saw, and whether the hub still hears anything.
struct Hub {
    state: Mutex<(HashMap<String, u64>, bool)>,
    cond: Condvar,
}

impl Hub {
    fn new() -> Arc<Hub> {
        Arc::new(Hub {
            state: Mutex::new((HashMap::new(), true)),
            cond: Condvar::new(),
        })
    }

    fn bump(&self, key: &str) {
        if let Ok(mut s) = self.state.lock() {
            *s.0.entry(key.to_string()).or_default() += 1;
        }
        self.cond.notify_all();
    }

    fn die(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.1 = false;
        }
        self.cond.notify_all();
    }

    fn seen(&self, key: &str) -> u64 {
        self.state
            .lock()
            .map(|s| s.0.get(key).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    /// Waits until the key's count passes `seen`, or `until`; the new count when it did.
    /// None when the hub stopped hearing (the caller then sleeps what is left).
    fn wait(&self, key: &str, seen: u64, until: Instant) -> Option<Option<u64>> {
        let mut s = self.state.lock().ok()?;
        loop {
            if !s.1 {
                return None;
            }
            let now = s.0.get(key).copied().unwrap_or(0);
            if now != seen {
                return Some(Some(now));
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Some(None);
            }
            s = self.cond.wait_timeout(s, left).ok()?.0;
        }
    }
}

/// A waiter on one hub's key.
struct Waiter {
    hub: Arc<Hub>,
    key: String,
    seen: u64,
    how: &'static str,
    /// SQLite: a connection of the waiter's own, whose `data_version` says whether another
    /// connection committed since it last looked.
    confirm: Option<(rusqlite::Connection, i64)>,
    /// A wake-up whose look was cut short by the end of a wait: the next wait looks first,
    /// so a commit that became visible just after is never left to the safety net.
    unconfirmed: bool,
}

impl Waiter {
    fn committed_elsewhere(&mut self) -> bool {
        let Some((conn, last)) = &mut self.confirm else {
            return true;
        };
        match conn.pragma_query_value(None, "data_version", |r| r.get::<_, i64>(0)) {
            Ok(v) if v != *last => {
                *last = v;
                true
            }
            Ok(_) => false,
            Err(_) => true,
        }
    }
}

impl Changes for Waiter {
    fn wait(&mut self, max: Duration) -> bool {
        let until = Instant::now() + max;
        if std::mem::take(&mut self.unconfirmed) && self.committed_elsewhere() {
            return true;
        }
        loop {
            match self.hub.wait(&self.key, self.seen, until) {
                Some(Some(now)) => {
                    self.seen = now;
                    // The log's bytes are written before the commit marks them committed (in
                    // shared memory, which no watch sees): looked at again, briefly.
                    for _ in 0..20 {
                        if self.committed_elsewhere() {
                            return true;
                        }
                        if self.confirm.is_none() {
                            break;
                        }
                        if Instant::now() >= until {
                            self.unconfirmed = true;
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
                Some(None) => return false,
                None => {
                    std::thread::sleep(until.saturating_duration_since(Instant::now()));
                    return false;
                }
            }
        }
    }

    fn how(&self) -> &'static str {
        self.how
    }
}

/// The process's listening connections, by server URL.
fn pg_hubs() -> &'static Mutex<HashMap<String, Arc<Hub>>> {
    &wake().pg_hubs
}

/// The key every change of a server's runs also bumps: what a waiter on any run waits on.
const ANY_RUN: &str = "*";

/// A waiter on any run of the server at `url` (the page's pending list), connecting with
/// `connect` if the process does not listen to it yet.
pub fn listen_all(
    url: &str,
    connect: impl FnOnce() -> anyhow::Result<postgres::Client>,
) -> Box<dyn Changes> {
    listen(url, ANY_RUN, connect)
}

/// A waiter on run `run` of the server at `url`, through the process's one listening
/// connection to it (opened on first use, on a thread of its own). Polling when it cannot be
/// had.
pub fn listen(
    url: &str,
    run: &str,
    connect: impl FnOnce() -> anyhow::Result<postgres::Client>,
) -> Box<dyn Changes> {
    if disabled() {
        return Box::new(Polling);
    }
    let hub = {
        let Ok(mut hubs) = pg_hubs().lock() else {
            return Box::new(Polling);
        };
        match hubs.get(url) {
            Some(h) if h.state.lock().is_ok_and(|s| s.1) => h.clone(),
            _ => {
                let Ok(mut client) = connect() else {
                    return Box::new(Polling);
                };
                if client.batch_execute(&format!("LISTEN {CHANNEL}")).is_err() {
                    return Box::new(Polling);
                }
                let hub = Hub::new();
                let heard = hub.clone();
                let spawned = std::thread::Builder::new()
                    .name("prose-listen".into())
                    .spawn(move || loop {
                        use postgres::fallible_iterator::FallibleIterator as _;
                        let next = client
                            .notifications()
                            .timeout_iter(Duration::from_secs(30))
                            .next();
                        match next {
                            Ok(Some(note)) => {
                                heard.bump(note.payload());
                                heard.bump(ANY_RUN);
                            }
                            Err(_) => return heard.die(),
                            // Quiet for a while: the connection is checked, then listened on.
                            Ok(None) => {
                                if client.is_closed() || client.simple_query("").is_err() {
                                    return heard.die();
                                }
                            }
                        }
                    });
                if spawned.is_err() {
                    return Box::new(Polling);
                }
                hubs.insert(url.to_string(), hub.clone());
                hub
            }
        }
    };
    let seen = hub.seen(run);
    Box::new(Waiter {
        hub,
        key: run.to_string(),
        seen,
        how: "listen",
        confirm: None,
        unconfirmed: false,
    })
}

/// The process's one file watch, and the hub of the run directories it watches.
struct FileWatch {
    watcher: Mutex<notify::RecommendedWatcher>,
    watched: Mutex<Vec<PathBuf>>,
    hub: Arc<Hub>,
}

fn file_watch() -> Option<&'static FileWatch> {
    wake()
        .files
        .get_or_init(|| {
            let hub = Hub::new();
            let heard = hub.clone();
            let watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
                let Ok(ev) = ev else { return };
                // A write, or a writer closing the file (after its commit); not a reader.
                use notify::event::{AccessKind, AccessMode, EventKind};
                if matches!(ev.kind, EventKind::Access(a) if a != AccessKind::Close(AccessMode::Write)) {
                    return;
                }
                for p in &ev.paths {
                    // A run's database, or the project catalog's log, which every run's commit
                    // of its gates appends to (not the catalog itself: a reader applying the
                    // log writes that, and would wake itself).
                    let db = p
                        .file_name()
                        .and_then(|f| f.to_str())
                        .is_some_and(|f| f.starts_with("state.db") || f == "catalog.log");
                    if let (true, Some(dir)) = (db, p.parent()) {
                        heard.bump(&dir.to_string_lossy());
                    }
                }
            })
            .ok()?;
            Some(FileWatch {
                watcher: Mutex::new(watcher),
                watched: Mutex::new(Vec::new()),
                hub,
            })
        })
        .as_ref()
}

/// A waiter on the project catalog in `prose_dir` (`.prose/`), which each SQLite run's commit
/// of its run or gates updates: the page's pending list.
pub fn watch_catalog(prose_dir: &Path) -> Box<dyn Changes> {
    watch_in(prose_dir, None)
}

/// A waiter on the SQLite run whose database is `db`, through the process's one file watch.
/// Polling when the watch cannot be had (the kernel's inotify limits).
pub fn watch(db: &Path) -> Box<dyn Changes> {
    match db.parent() {
        Some(dir) => watch_in(dir, Some(db)),
        None => Box::new(Polling),
    }
}

/// A waiter on the files of `dir`, confirmed by `db`'s `data_version` when there is one.
fn watch_in(dir: &Path, db: Option<&Path>) -> Box<dyn Changes> {
    use notify::Watcher as _;
    if disabled() {
        return Box::new(Polling);
    }
    let Some(w) = file_watch() else {
        return Box::new(Polling);
    };
    // The key is the directory as the watch reports it: absolute.
    let Ok(dir) = std::fs::canonicalize(dir) else {
        return Box::new(Polling);
    };
    {
        let Ok(mut watched) = w.watched.lock() else {
            return Box::new(Polling);
        };
        if !watched.contains(&dir) {
            let added = w.watcher.lock().map_err(|_| ()).and_then(|mut x| {
                x.watch(&dir, notify::RecursiveMode::NonRecursive)
                    .map_err(|_| ())
            });
            if added.is_err() {
                return Box::new(Polling);
            }
            watched.push(dir.clone());
        }
    }
    let confirm = match db {
        None => None,
        Some(db) => {
            let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
            let Ok(conn) = rusqlite::Connection::open_with_flags(db, flags) else {
                return Box::new(Polling);
            };
            let Ok(version) = conn.pragma_query_value(None, "data_version", |r| r.get::<_, i64>(0))
            else {
                return Box::new(Polling);
            };
            Some((conn, version))
        }
    };
    let key = dir.to_string_lossy().into_owned();
    let seen = w.hub.seen(&key);
    Box::new(Waiter {
        hub: w.hub.clone(),
        key,
        seen,
        how: "watch",
        confirm,
        unconfirmed: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file event heard before its commit is visible, at the very end of a wait: the wait
    /// ends unconfirmed, and the next one looks first, so the commit (now visible) wakes it
    /// with no further event.
    #[test]
    fn a_wake_cut_short_by_the_deadline_is_looked_at_again() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state.db");
        let writer = rusqlite::Connection::open(&db).unwrap();
        writer
            .execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (x)")
            .unwrap();
        let reader = rusqlite::Connection::open(&db).unwrap();
        let version = reader
            .pragma_query_value(None, "data_version", |r| r.get::<_, i64>(0))
            .unwrap();
        let hub = Hub::new();
        let mut w = Waiter {
            hub: hub.clone(),
            key: "k".into(),
            seen: hub.seen("k"),
            how: "watch",
            confirm: Some((reader, version)),
            unconfirmed: false,
        };
        // The event, with nothing committed yet, and no time left to look again.
        hub.bump("k");
        assert!(!w.wait(Duration::ZERO));
        assert!(w.unconfirmed);
        writer.execute("INSERT INTO t VALUES (1)", []).unwrap();
        // No new event: the commit is seen by the look the cut-short wake left owed.
        assert!(w.wait(Duration::from_millis(1)));
        // Owed once: an idle wait after it hears nothing.
        assert!(!w.wait(Duration::from_millis(1)));
    }
}
