//! `prune`: remove (or archive) whole run directories of old finished runs.

use super::listing::{EveryRun, Listing, RunsRead};
use super::Run;
use crate::cli::PruneArgs;
use crate::context::Context;
use crate::error::{refused, usage};
use crate::output::Render;
use crate::run::RunPaths;
use crate::store::RunSummary;
use anyhow::{Context as _, Result};
use serde::Serialize;
use std::io::{self, Write};
use std::path::Path;

#[derive(Debug, Serialize)]
pub struct PruneEntry {
    pub run_id: String,
    pub status: Option<crate::model::RunStatus>,
    pub started_at: Option<String>,
    pub bytes: u64,
    /// remove, archive or keep
    pub action: &'static str,
    /// Why a run is kept.
    pub reason: Option<String>,
    /// Whether the action was carried out (false in a dry run).
    pub done: bool,
}

#[derive(Debug, Serialize)]
pub struct Pruned {
    pub dry_run: bool,
    pub runs: Vec<PruneEntry>,
    pub bytes_freed: u64,
    /// Runs that could not be read (kept), also said on stderr.
    #[serde(skip)]
    pub warnings: Vec<String>,
}

impl Render for Pruned {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        let header = ["RUN", "STATUS", "STARTED", "BYTES", "ACTION"];
        super::table_of(w, &header, &self.runs, |e| {
            let action = match (&e.reason, e.done) {
                (Some(r), _) => format!("keep: {r}"),
                (None, true) if e.action == "archive" => "archived".to_string(),
                (None, true) => "removed".to_string(),
                (None, false) => format!("would {}", e.action),
            };
            vec![
                e.run_id.clone(),
                e.status.as_ref().map_or("", |s| s.as_str()).to_string(),
                e.started_at.clone().unwrap_or_default(),
                e.bytes.to_string(),
                action,
            ]
        })?;
        if self.dry_run {
            writeln!(
                w,
                "dry run: {} bytes would be freed; pass --yes to prune",
                self.bytes_freed
            )
        } else {
            writeln!(w, "{} bytes freed", self.bytes_freed)
        }
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }
}

fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Prunes every run of the project (`every`: planned, not yet read).
pub fn run(req: &PruneArgs, every: EveryRun, ctx: &Context) -> Result<Pruned> {
    if let Some(a) = req.archive.as_ref().filter(|a| a.exists() && !a.is_dir()) {
        return Err(usage(format!(
            "--archive is not a directory: {}",
            a.display()
        )));
    }
    let now = crate::model::now();
    // What the run takes: its directory, and what it keeps on a server.
    let size = |run: &RunPaths, store: &mut dyn crate::store::Store| -> Result<u64> {
        let mut bytes = dir_size(&run.dir);
        if store.keeps_values() {
            bytes += store.stats()?.binding_inline_bytes.max(0) as u64;
            bytes += store
                .blobs()?
                .iter()
                .map(|b| b.bytes.unwrap_or(0).max(0) as u64)
                .sum::<u64>();
        }
        Ok(bytes)
    };
    // SQLite runs: planned from the project catalog (a run is opened only to be pruned).
    // Runs on the server, and every run without a catalog, are visited.
    let RunsRead {
        read: summaries,
        visited: visit,
        plan_warnings,
        warnings,
    } = every.read(
        &now,
        |paths, s| (dir_size(&paths.dir), paths, s),
        |run, store| {
            let summary = store.run_summary(&now)?;
            Ok((size(run, store)?, run.clone(), summary))
        },
    )?;
    // A run that cannot be read is never pruned blind: it is kept, with the reason, and the
    // others are pruned as usual.
    let mut plan = Vec::new();
    for run in &visit {
        if summaries.iter().any(|(_, r, _)| r.dir == run.dir) {
            continue;
        }
        let why = warnings
            .iter()
            .find(|w| w.starts_with(&format!("skipped run {}:", run.id)))
            .map_or("unreadable", String::as_str);
        let reason = format!("unreadable, never pruned blind ({why})");
        plan.push((run.clone(), None, dir_size(&run.dir), Some(reason)));
    }
    let mut summaries: Vec<(u64, RunPaths, RunSummary)> = summaries;
    summaries.sort_by(|a, b| (&b.2.run.started_at, &b.1.id).cmp(&(&a.2.run.started_at, &a.1.id)));
    let action = if req.archive.is_some() {
        "archive"
    } else {
        "remove"
    };
    for (i, (bytes, paths, s)) in summaries.into_iter().enumerate() {
        let status = &s.run.status;
        let last = s.run.updated_at.as_deref().or(s.run.started_at.as_deref());
        let age = last.and_then(|at| crate::model::seconds_between(at, &now));
        let age = age.map(|s| s as f64 / 86_400.0);
        let (keep_n, keep_days) = (req.keep_n.unwrap_or(0), req.keep_days.unwrap_or(0));
        let reason = if (i as u64) < keep_n {
            Some(format!("among the newest {keep_n}"))
        } else if !status.as_ref().is_some_and(|s| s.is_finished()) {
            Some(format!(
                "{} (only completed and failed runs are pruned)",
                status.as_ref().map_or("no status", |s| s.as_str())
            ))
        } else if s.pending_gates > 0 {
            Some(format!("{} pending gates", s.pending_gates))
        } else if age.is_none_or(|d| d < keep_days as f64) {
            Some(format!("newer than {keep_days} days"))
        } else {
            None
        };
        plan.push((paths, Some(s), bytes, reason));
    }
    // Every destination is checked before anything moves: one conflict refuses the prune.
    if let (Some(dir), true) = (&req.archive, req.yes) {
        let conflicts: Vec<String> = plan
            .iter()
            .filter(|(.., reason)| reason.is_none())
            .map(|(paths, ..)| dir.join(&paths.id))
            .filter(|dest| dest.symlink_metadata().is_ok())
            .map(|dest| dest.display().to_string())
            .collect();
        if !conflicts.is_empty() {
            return Err(refused(format!(
                "the archive already holds {} of these runs; nothing was pruned: {}",
                conflicts.len(),
                conflicts.join(", ")
            )));
        }
    }
    let (mut out, mut freed) = (Vec::new(), 0);
    for (paths, s, bytes, mut reason) in plan {
        let mut done = false;
        if reason.is_none() && req.yes {
            // Read from the run itself before it goes: the catalog is not the truth.
            reason = still_prunable(ctx, &paths, &now).err();
        }
        if reason.is_none() {
            freed += bytes;
            if req.yes {
                prune_one(req, &paths, ctx)?;
                done = true;
            }
        }
        let (status, started_at) = s.map_or((None, None), |s| (s.run.status, s.run.started_at));
        out.push(PruneEntry {
            run_id: paths.id.clone(),
            status,
            started_at,
            bytes,
            action: if reason.is_some() { "keep" } else { action },
            reason,
            done,
        });
    }
    Ok(Pruned {
        dry_run: !req.yes,
        runs: out,
        bytes_freed: freed,
        warnings: plan_warnings
            .into_iter()
            .chain(
                warnings
                    .into_iter()
                    .map(|w| format!("{w} (kept, never pruned blind)")),
            )
            .collect(),
    })
}

/// Whether a run planned for pruning still may go, read from its own store: finished, and no
/// gate pending; else why it is kept.
fn still_prunable(ctx: &Context, paths: &RunPaths, now: &str) -> std::result::Result<(), String> {
    let s = ctx
        .open(paths)
        .and_then(|mut store| store.run_summary(now))
        .map_err(|e| format!("unreadable, never pruned blind ({e:#})"))?;
    match s.run.status {
        Some(st) if st.is_finished() && s.pending_gates == 0 => Ok(()),
        _ => Err("changed since it was planned (now running, or a gate pending)".into()),
    }
}

/// Removes one run, or archives it: a SQLite run's directory is moved into the archive as it
/// is; a run on a server is exported there first (a run directory of its own), and its rows
/// and values go only once the copy is whole.
fn prune_one(req: &PruneArgs, paths: &RunPaths, ctx: &Context) -> Result<()> {
    let on_server = !paths.exists() || paths.backend()? != crate::store::Backend::Sqlite;
    if let Some(dir) = &req.archive {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("could not create {}", dir.display()))?;
        let dest = dir.join(&paths.id);
        if on_server {
            super::export::copy_out(ctx, paths, ctx.open(paths)?, &dest)?;
        } else {
            crate::run::rename_noreplace(&paths.dir, &dest).with_context(|| {
                format!(
                    "could not move {} to {}",
                    paths.dir.display(),
                    dest.display()
                )
            })?;
        }
    }
    // State outside the directory (the server's rows and values) goes first.
    if on_server {
        ctx.open(paths)?.delete_run()?;
    }
    if paths.dir.exists() {
        std::fs::remove_dir_all(&paths.dir)
            .with_context(|| format!("could not remove {}", paths.dir.display()))?;
    }
    crate::store::catalog::forget_run(&paths.dir, ctx.opts);
    Ok(())
}

/// What `prune --history` did to one run.
#[derive(Debug, Serialize)]
pub struct HistoryEntry {
    pub run_id: String,
    #[serde(flatten)]
    pub pruned: crate::store::rules::HistoryPruned,
    /// Values kept outside the rows (attachment files, values on the server) deleted with
    /// the versions that alone named them.
    pub values_released: usize,
}

#[derive(Debug, Serialize)]
pub struct HistoryPrunedOut {
    pub dry_run: bool,
    /// The versions kept of each binding.
    pub keep: u64,
    /// Whether KEEP became the project's default (`--default --yes`).
    pub default_set: bool,
    pub runs: Vec<HistoryEntry>,
    #[serde(skip)]
    pub warnings: Vec<String>,
}

impl Render for HistoryPrunedOut {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        let header = ["RUN", "BINDINGS", "VERSIONS", "BYTES", "VALUES"];
        super::table_of(w, &header, &self.runs, |e| {
            vec![
                e.run_id.clone(),
                e.pruned.bindings.to_string(),
                e.pruned.versions.to_string(),
                e.pruned.bytes.to_string(),
                e.values_released.to_string(),
            ]
        })?;
        let versions: usize = self.runs.iter().map(|e| e.pruned.versions).sum();
        if self.default_set {
            writeln!(
                w,
                "the project's default is now {}: runs made from now on keep to it as they write",
                self.keep
            )?;
        }
        if self.dry_run {
            writeln!(
                w,
                "dry run: {versions} versions would go, the newest {} of each binding kept; pass --yes to prune",
                self.keep
            )
        } else {
            writeln!(
                w,
                "{versions} versions pruned, the newest {} of each binding kept",
                self.keep
            )
        }
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }
}

/// `prune --history KEEP`: each run's bindings keep their newest KEEP versions; the values
/// only the deleted versions named are released after the commit, under the run's write lock.
fn prune_history(req: &PruneArgs, keep: u64, ctx: &Context) -> Result<HistoryPrunedOut> {
    if req.history_default && req.yes {
        let mut book = ctx
            .principal_book(true)?
            .ok_or_else(|| anyhow::anyhow!("the project's settings could not be opened"))?;
        book.set_setting(super::init::HISTORY_KEEP, &keep.to_string())?;
    }
    let runs = Listing::runs_to_visit(ctx)?;
    let (runs, warnings) = super::over_runs(&runs, ctx, |run, store| {
        let pruned = store.prune_history(keep as i64, req.yes)?;
        let mut values_released = 0;
        if req.yes {
            for rel in &pruned.released {
                let released = store.release_attachment(rel, &mut || {
                    crate::services::attach::remove(&run.dir, rel)
                })?;
                values_released += usize::from(released);
            }
        } else {
            values_released = pruned.released.len();
        }
        Ok(HistoryEntry {
            run_id: run.id.clone(),
            pruned,
            values_released,
        })
    })?;
    Ok(HistoryPrunedOut {
        dry_run: !req.yes,
        keep,
        default_set: req.history_default && req.yes,
        runs,
        warnings,
    })
}

crate::output::one_of!(
    /// Runs pruned, or with `--history` the versions of bindings.
    PruneOut {
        Runs(Pruned),
        History(HistoryPrunedOut),
    }
);

impl Run for PruneArgs {
    type Output = PruneOut;
    fn run(&self, ctx: &Context) -> Result<PruneOut> {
        if let Some(keep) = self.history {
            return prune_history(self, keep, ctx).map(PruneOut::History);
        }
        // Every run: the project catalog's, those with a directory here the catalog does not
        // read (on a server, unreadable), and those only on the project's server.
        run(self, Listing::every_run(ctx)?, ctx).map(PruneOut::Runs)
    }
}
