//! Bringing the catalog up to date with the runs: the stale mark, new and removed runs, runs
//! re-read one by one under their lock, and `doctor`'s comparison of every row.

use super::{
    all, begin, close, dir_stamp, facts, file_id, forget, in_parallel, meta, of_state_db, open_db,
    put_facts, read_facts, set_meta, stamp_of, CatalogCheck, Facts, ProjectCatalog, CATALOG_FILE,
    STALE_FILE,
};
use crate::store::OpenOptions;
use anyhow::{anyhow, Context as _, Result};
use rusqlite::{params, OptionalExtension};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The runs directory's modification time is trusted only once it is this old: a run made
/// in the same clock tick as the comparison would leave it unchanged.
const SETTLED: Duration = Duration::from_secs(3);

impl ProjectCatalog {
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
        let rebooted = meta(c, "boot_id").map_err(&err)?.as_deref() != Some(boot.as_str());
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
            let sql = "SELECT id, stamp FROM runs WHERE +kind = 'sqlite'";
            let kept = all(self.db().expect("checked above"), sql, [], |r| r.try_into());
            self.fresh(&kept.map_err(self.err())?)?;
            set_meta(self.db().expect("checked above"), "boot_id", &boot).map_err(self.err())?;
        }
        self.reconcile(full)?;
        let dirty: Vec<String> = all(
            self.db().expect("checked above"),
            "SELECT id FROM runs INDEXED BY catalog_runs_stale WHERE stale <> 0
             UNION SELECT id FROM runs INDEXED BY catalog_runs_odd
                   WHERE kind <> 'sqlite' AND kind IN ('unreadable', 'none')
             UNION SELECT run FROM tickets",
            [],
            |r| r.get(0),
        )
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
        let recorded = meta(c, "runs_mtime").map_err(self.err())?;
        if !full && stamp.is_some() && recorded == stamp {
            return Ok(());
        }
        let dir = &self.runs_dir;
        let names: HashSet<String> = match self.run_names() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            names => names
                .with_context(|| format!("could not list runs: {}", dir.display()))?
                .collect(),
        };
        let known: HashMap<String, String> = self.row_kinds()?;
        let tx = begin(c).map_err(self.err())?;
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
            set_meta(&tx, "runs_mtime", stamp).map_err(self.err())?;
        }
        tx.commit().map_err(self.err())?;
        Ok(())
    }

    /// Reads one run again and puts its facts in the catalog (see the module's comment).
    pub fn repair(&mut self, id: &str) -> Result<()> {
        let dir = self.runs_dir.join(id);
        let paths = crate::run::RunPaths::in_dir(dir.clone());
        let c = self.conn.as_ref().expect("a catalog");
        let err = self.err();
        if !dir.is_dir() {
            return forget(c, id).map_err(&err);
        }
        // A directory with no run (yet), looked at again by every listing; or a record of a
        // run kept on the server: no facts of its own.
        let other = match paths.exists().then(|| paths.backend()) {
            None => Some("UPDATE runs SET kind = 'none', stale = 0, problem = NULL WHERE id = ?1"),
            Some(Ok(crate::store::Backend::Postgres)) => Some(
                "INSERT INTO runs (id, kind) VALUES (?1, 'server')
                 ON CONFLICT (id) DO UPDATE SET kind = 'server', stale = 0, problem = NULL",
            ),
            Some(Ok(crate::store::Backend::Sqlite)) => None,
            Some(Err(e)) => return self.unreadable(id, &e),
        };
        if let Some(other) = other {
            c.execute(other, [id]).map_err(&err)?;
            c.execute("DELETE FROM gates WHERE run = ?1", [id])
                .map_err(&err)?;
            return Ok(());
        }
        let stale_was: i64 = c
            .query_row("SELECT stale FROM runs WHERE id = ?1", [id], |r| r.get(0))
            .optional()
            .map_err(&err)?
            .unwrap_or(0);
        let read = (|| {
            // The file read must be the one at the path once its lock is held: a run being
            // replaced (`import --replace`) is exchanged under its old file's lock.
            for _ in 0..5 {
                let before = file_id(&paths.db);
                let mut store = crate::store::sqlite::SqliteStore::open(&paths.db, self.opts)?;
                // Under the run's write lock: no writer is between its ticket and its commit.
                let locked = store.lock_for_reading();
                if before.is_none() || file_id(&paths.db) != before {
                    store.unlock();
                    continue;
                }
                let ticket = c
                    .execute("INSERT INTO tickets (run) VALUES (?1)", [id])
                    .map(|_| c.last_insert_rowid())
                    .map_err(&err)?;
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
        let tx = begin(c).map_err(&err)?;
        put_facts(&tx, id, ticket, &facts, &stamp).map_err(&err)?;
        if locked {
            // Every writer with an older ticket has committed or died.
            tx.execute(
                "DELETE FROM tickets WHERE run = ?1 AND id <= ?2",
                params![id, ticket],
            )
            .map_err(&err)?;
            tx.execute(
                "UPDATE runs SET stale = 0 WHERE id = ?1 AND stale = ?2",
                params![id, stale_was],
            )
            .map_err(&err)?;
        } else {
            // Read without the lock (a read-only file): read again by the next listing.
            tx.execute("DELETE FROM tickets WHERE id = ?1", [ticket])
                .map_err(&err)?;
        }
        tx.commit().map_err(&err)
    }

    /// Records a run that could not be read: every listing tries it again, and reports it.
    fn unreadable(&mut self, id: &str, e: &anyhow::Error) -> Result<()> {
        let c = self.conn.as_ref().expect("a catalog");
        let why = format!("{e:#}");
        let tx = begin(c).map_err(self.err())?;
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
    pub(super) fn fresh(&mut self, kept: &[(String, Option<String>)]) -> Result<bool> {
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

    /// Makes the catalog anew from the runs (`doctor --fix`): every row read again.
    pub fn rebuild(&mut self) -> Result<()> {
        self.refresh(true)
    }

    /// Compares every row with its run, read now (`doctor`); nothing is written.
    pub fn check(&mut self) -> Result<CatalogCheck> {
        self.fold()?;
        let mut out = CatalogCheck::default();
        let Some(c) = self.db() else { return Ok(out) };
        let names: Vec<String> = self
            .run_names()
            .map_or_else(|_| Vec::new(), Iterator::collect);
        let rows: HashMap<String, String> = self.row_kinds()?;
        let dirty = "SELECT run FROM tickets UNION SELECT id FROM runs WHERE stale <> 0";
        let dirty: HashSet<String> = all(c, dirty, [], |r| r.get(0))
            .map_err(self.err())?
            .into_iter()
            .collect();
        for name in &names {
            let paths = crate::run::RunPaths::in_dir(self.runs_dir.join(name));
            if !paths.exists() || !matches!(paths.backend(), Ok(crate::store::Backend::Sqlite)) {
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
            let store = crate::store::sqlite::SqliteStore::open(&paths.db, self.opts);
            let Ok(facts) = store.and_then(|s| s.read(read_facts)) else {
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
        let run = "SELECT run_id, program_path, status, started_at, updated_at, error_message
                   FROM runs WHERE id = ?1 AND run_id IS NOT NULL";
        let c = self.db().expect("a catalog");
        facts(c, run, "run = ?1", [id]).map_err(self.err())
    }
}

/// What differs between a row's facts and the run's, in a few words; None when they agree.
fn differ(kept: &Facts, now: &Facts) -> Option<String> {
    let status = |f: &Facts| f.run.as_ref().and_then(|r| r.status.clone());
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
    // The status agrees: any other difference is in the run's other details.
    (kept.run != now.run).then(|| "other run details than the run's".to_string())
}

/// Runs `exchange`, which puts another run directory in the place of the one of `db`, while
/// holding the write lock of the run's current state.db and with the run's catalog row marked
/// stale before; then reads the run again into the catalog. A listing meanwhile waits for the
/// lock, or finds the row stale (`import --replace`).
pub fn while_replacing<T>(db: &Path, opts: OpenOptions, exchange: impl FnOnce() -> T) -> T {
    let Some((prose, id)) = of_state_db(db) else {
        return exchange();
    };
    let mut old = crate::store::sqlite::SqliteStore::open(db, opts).ok();
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
        super::log::mark_stale(&prose);
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
