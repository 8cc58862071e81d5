//! The catalog's log: the writers' side (a ticket before a run's commit, its facts after),
//! the runs directory's announced changes, and folding the lines into the catalog.

use super::{
    begin, dir_stamp, meta, of_state_db, put_facts, read_facts, set_meta, stamp_of, Facts,
    ProjectCatalog, Ticket, CATALOG_FILE, CATALOG_VERSION, LOG_FILE, STALE_FILE,
};
use crate::store::OpenOptions;
use anyhow::Result;
use rusqlite::{Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A writer whose line takes the log past this folds it in.
const FOLD_AT: u64 = 1024 * 1024;
/// A facts line longer than this is not written: the ticket stays, and the next listing reads
/// the run from its database.
const LINE_MOST: usize = 256 * 1024;

/// One line of the catalog's log (`.prose/catalog.log`), JSON: a ticket (`T`), appended
/// under the run's write lock before its commit, or the facts a ticket's write committed
/// (`F`), appended after the commit.
#[derive(Serialize, Deserialize, Default)]
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
    f: Option<Facts>,
    /// `D`: the runs directory's modification time before and after a change prose-state
    /// made to it (see [`changing_runs`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    b: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    a: Option<String>,
}

impl LogLine {
    /// The line as the log keeps it: JSON, then a newline.
    fn bytes(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        line.push(b'\n');
        line
    }
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

/// Marks every row stale (see `STALE_FILE`): for a write that could not log its ticket.
pub(super) fn mark_stale(prose: &Path) {
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(prose.join(STALE_FILE));
}

/// The writer's side: a run's writes, watched for the catalog (`sqlite::CommitWatch`): a
/// ticket taken under the run's write lock before the commit, with the facts being
/// committed; both logged after it. It never opens the catalog's database: a ticket and its
/// facts are lines of the catalog's log, folded in by the next listing.
struct Watch {
    prose: PathBuf,
    run: String,
    opts: OpenOptions,
    pending: Option<(Ticket, Option<Facts>)>,
}

impl Watch {
    fn line(&self, kind: char, ticket: &str, facts: Option<(String, Facts)>) -> Vec<u8> {
        let (s, f) = facts.unzip();
        let (run, n) = (self.run.clone(), ticket.to_string());
        LogLine {
            v: CATALOG_VERSION,
            t: kind,
            run,
            n,
            s,
            f,
            ..LogLine::default()
        }
        .bytes()
    }

    /// Takes a ticket: called inside the run's write transaction, before its commit. None
    /// when there is no catalog (the first listing builds it, reading this run under its
    /// lock), or when the ticket could not be logged: then the stale mark is made instead,
    /// and the next listing reads every run again.
    fn mark(&mut self) -> Option<Ticket> {
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
                mark_stale(&self.prose);
                None
            }
        }
    }

    /// Logs the facts a transaction committed under `ticket`: after the run's commit. Best
    /// effort: a facts line not written (too large, or a failure) leaves the ticket, and the
    /// next listing reads the run again. A log grown past `FOLD_AT` is folded in here.
    fn apply(&mut self, ticket: Ticket, facts: Facts) {
        let db = self
            .prose
            .join("runs")
            .join(&self.run)
            .join(crate::run::DB_FILE);
        let line = self.line('F', &ticket, Some((stamp_of(&db), facts)));
        if line.len() > LINE_MOST {
            return;
        }
        if let Ok(size) = append(&self.prose, &line) {
            if size > FOLD_AT {
                if let Ok(Some(mut c)) = ProjectCatalog::open(&self.prose.join("runs"), self.opts) {
                    let _ = c.fold();
                }
            }
        }
    }
}

impl crate::store::sqlite::CommitWatch for Watch {
    fn before_commit(&mut self, conn: &Connection) {
        // Unreadable facts leave the ticket: the next listing reads the run again.
        self.pending = self.mark().map(|t| (t, read_facts(conn).ok()));
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
            self.apply(ticket, facts);
        }
    }
}

/// The catalog's watcher of a run's state.db (wired by `Context`), if the run is a project's.
pub fn watch(db: &Path, opts: OpenOptions) -> Option<Box<dyn crate::store::sqlite::CommitWatch>> {
    let (prose, run) = of_state_db(db)?;
    let pending = None;
    Some(Box::new(Watch {
        prose,
        run,
        opts,
        pending,
    }))
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
            if let (Some(recorded), Some(b), Some(a)) = (meta(c, "runs_mtime")?, &line.b, &line.a) {
                if &recorded == b {
                    set_meta(c, "runs_mtime", a)?;
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
    let Some(prose) = runs_dir.parent().filter(|p| p.join(CATALOG_FILE).is_file()) else {
        return change();
    };
    let Some(lock) = std::fs::File::open(runs_dir)
        .ok()
        .filter(|l| l.lock().is_ok())
    else {
        return change();
    };
    let before = dir_stamp(runs_dir);
    let done = change()?;
    if let (Some((_, b)), Some((_, a))) = (before, dir_stamp(runs_dir)) {
        let run = added.unwrap_or_default().to_string();
        let (b, a) = (Some(b), Some(a));
        let line = LogLine {
            v: CATALOG_VERSION,
            t: 'D',
            run,
            b,
            a,
            ..LogLine::default()
        };
        // Not logged: the chain breaks, and the next listing compares the names.
        let _ = append(prose, &line.bytes());
    }
    drop(lock);
    Ok(done)
}

impl ProjectCatalog {
    /// Folds the catalog's log in (see `Watch`). Under the catalog's write lock, the live log
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
        match std::fs::symlink_metadata(&live) {
            Ok(m) if m.is_dir() => std::fs::remove_dir(&live).unwrap_or_default(),
            Ok(m) if !m.is_file() => std::fs::remove_file(&live).unwrap_or_default(),
            _ => {}
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
        let tx = begin(c).map_err(&err)?;
        let folded: i64 = meta(&tx, "log_folded")
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
        set_meta(&tx, "log_folded", &newest.to_string()).map_err(&err)?;
        tx.commit().map_err(&err)?;
        for (_, path) in aside.iter().filter(|a| a.0 <= newest) {
            let _ = std::fs::remove_file(path);
        }
        Ok(())
    }
}
