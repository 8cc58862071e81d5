//! What a listing reads from the catalog: the `Catalog` questions, each one query, with the
//! runs it shows checked against their files.

use super::{all, ProjectCatalog};
use crate::store::sqlite_rows::{gate_row, run_info_at, GATE_COLUMNS};
use crate::store::{Catalog, GateRow, RunFilter, RunStats, RunSummary, Store};
use anyhow::Result;
use rusqlite::{params, Connection};

/// A run and the stamp its facts were read under (see `ProjectCatalog::fresh`).
type Kept = (String, Option<String>);

impl ProjectCatalog {
    /// The runs that could not be read (reported in `warnings`).
    pub fn unreadable_runs(&self) -> Result<Vec<String>> {
        let Some(c) = self.db() else {
            return Ok(Vec::new());
        };
        let sql = "SELECT id FROM runs WHERE kind <> 'sqlite' AND kind = 'unreadable' ORDER BY id";
        all(c, sql, [], |r| r.get(0)).map_err(self.err())
    }

    /// The rows of `read`, read again when any of the runs `kept` names of them changed since
    /// their facts were read (see `fresh`); none without a catalog.
    fn read_fresh<T>(
        &mut self,
        read: impl Fn(&Connection) -> rusqlite::Result<Vec<T>>,
        kept: impl Fn(&[T]) -> Vec<Kept>,
    ) -> Result<Vec<T>> {
        let Some(c) = self.db() else {
            return Ok(Vec::new());
        };
        let rows = read(c).map_err(self.err())?;
        if !self.fresh(&kept(&rows))? {
            return Ok(rows);
        }
        read(self.db().expect("a catalog")).map_err(self.err())
    }
}

impl Catalog for ProjectCatalog {
    fn sweep_overdue(
        &mut self,
        runs: &RunFilter,
        now: &str,
    ) -> Result<(usize, crate::store::rules::Swept)> {
        let Some(c) = self.db() else {
            return Ok(Default::default());
        };
        let overdue: Vec<String> = all(
            c,
            "SELECT DISTINCT g.run
             FROM gates g INDEXED BY catalog_gates_due JOIN runs r ON r.id = g.run
             WHERE g.due IS NOT NULL AND g.due <= datetime(?1) AND +r.kind = 'sqlite'
             ORDER BY g.run",
            [now],
            |r| r.get(0),
        )
        .map_err(self.err())?;
        let (mut swept, mut done_all) = (0, crate::store::rules::Swept::default());
        for id in overdue.iter().filter(|id| Self::wanted(runs, id)) {
            // Through the run's own rules: its store marks and updates the catalog.
            let done = crate::store::sqlite::SqliteStore::open(&self.state_db(id), self.opts)
                .and_then(|mut s| s.sweep_timeouts(now));
            match done {
                Ok(d) => {
                    swept += 1;
                    done_all.add(d);
                }
                Err(e) => {
                    self.problems.push(format!("skipped run {id}: {e:#}"));
                    self.unswept.insert(id.clone());
                }
            }
        }
        Ok((swept, done_all))
    }

    fn pending_gates_of(
        &mut self,
        runs: &RunFilter,
        limit: Option<i64>,
    ) -> Result<Vec<(GateRow, Option<String>)>> {
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
        let read = |c: &Connection| {
            all(c, &sql, [limit.unwrap_or(-1)], |r| {
                Ok((r.get(16)?, r.get(17)?, gate_row(r)?, r.get(15)?))
            })
        };
        // The runs shown, checked against their files; read again if they changed.
        let rows = self.read_fresh(read, |rows: &[(String, Option<String>, GateRow, _)]| {
            let mut shown: Vec<Kept> = rows
                .iter()
                .map(|(r, s, ..)| (r.clone(), s.clone()))
                .collect();
            shown.sort_unstable();
            shown.dedup();
            shown
        })?;
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
        // The page from the catalog, newest first; each run of it read whole from its store.
        let read = |c: &Connection| {
            all(
                c,
                "SELECT id, stamp FROM runs INDEXED BY catalog_runs_started WHERE +kind = 'sqlite'
                   AND (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR started_at >= ?2)
                 ORDER BY started_at DESC, id DESC LIMIT ?3",
                params![status, since, limit.unwrap_or(-1)],
                |r| r.try_into(),
            )
        };
        let ids: Vec<Kept> = self.read_fresh(read, <[Kept]>::to_vec)?;
        let mut out = Vec::new();
        for (id, _) in ids.iter().filter(|(id, _)| Self::wanted(runs, id)) {
            match crate::store::sqlite::SqliteStore::open(&self.state_db(id), self.opts)
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
        let sql = "SELECT r.id, r.id, r.program_path, r.status, r.started_at, r.updated_at,
                    r.error_message,
                    (SELECT COUNT(*) FROM gates g WHERE g.run = r.id
                       AND NOT (g.due IS NOT NULL AND g.due <= datetime(?1))),
                    r.stamp
             FROM runs r INDEXED BY catalog_runs_started WHERE +r.kind = 'sqlite'
             ORDER BY r.started_at DESC, r.id DESC";
        let read = |c: &Connection| {
            all(c, sql, [now], |r| {
                let run = run_info_at(r, 1)?;
                let (error_message, pending_gates) = (r.get(6)?, r.get(7)?);
                let s = RunSummary {
                    run,
                    error_message,
                    last_event_at: None,
                    pending_gates,
                };
                Ok((r.get(0)?, s, r.get(8)?))
            })
        };
        // Every run is planned from: each checked against its files (a stat, not an open).
        let rows = self.read_fresh(read, |rows: &[(String, RunSummary, Option<String>)]| {
            rows.iter()
                .map(|(id, _, s)| (id.clone(), s.clone()))
                .collect()
        })?;
        Ok(rows
            .into_iter()
            .filter(|(id, ..)| Self::wanted(runs, id))
            .map(|(id, s, _)| (id, s))
            .collect())
    }

    fn stats_of(&mut self, runs: &RunFilter) -> Result<Vec<(String, RunStats)>> {
        self.kept_stats(runs)
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
        let sql = "SELECT id, run_id FROM runs INDEXED BY catalog_runs_copies
                   WHERE run_id <> id AND kind = 'sqlite' ORDER BY id";
        all::<(String, String)>(c, sql, [], |r| r.try_into())
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
