//! `stats`, `checkpoint`, `vacuum` and `migrate`: looking after the stores of one run or all of them.

use super::listing::Listing;
use super::{over_runs, Run};
use crate::context::Context;
use crate::output::Render;
use crate::store::{Checkpointed, Migration, RunStats, ServerStats};
use anyhow::Result;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{self, Write};

#[derive(Debug, Default, Serialize)]
pub struct Totals {
    pub runs: usize,
    pub db_bytes: u64,
    pub wal_bytes: u64,
    pub tables: BTreeMap<String, i64>,
    pub execution_status: BTreeMap<String, i64>,
    pub binding_inline_bytes: i64,
    pub attachment_files: u64,
    pub attachment_bytes: u64,
    /// The server runs' figures summed (their values and rows), with the server's sizes;
    /// null when no run is on a server.
    pub server: Option<ServerStats>,
}

#[derive(Debug, Serialize)]
pub struct Stats {
    pub totals: Totals,
    pub runs: Vec<RunStats>,
    #[serde(skip)]
    pub warnings: Vec<String>,
}

fn kv(w: &mut dyn Write, key: &str, value: impl std::fmt::Display) -> io::Result<()> {
    writeln!(w, "{key:<22} {value}")
}

fn counts(map: &BTreeMap<String, i64>) -> String {
    if map.is_empty() {
        return "-".into();
    }
    map.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Render for Stats {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        // One run's counts are the totals'.
        let t = &self.totals;
        if let [one] = self.runs.as_slice() {
            let s = &one.store;
            kv(w, "run", &one.run_id)?;
            kv(w, "backend", s.backend)?;
            kv(w, "schema version", s.schema_version)?;
            if let Some(b) = s.db_bytes {
                kv(w, "db bytes", b)?;
            }
            if let Some(b) = s.wal_bytes {
                kv(w, "wal bytes", b)?;
            }
        } else {
            kv(w, "runs", t.runs)?;
            // Files' sizes, where there are files: a server's runs have none.
            if self.runs.iter().any(|r| r.store.db_bytes.is_some()) || t.server.is_none() {
                kv(w, "db bytes", t.db_bytes)?;
                kv(w, "wal bytes", t.wal_bytes)?;
            }
        }
        kv(w, "rows", counts(&t.tables))?;
        kv(w, "execution statuses", counts(&t.execution_status))?;
        kv(w, "binding bytes inline", t.binding_inline_bytes)?;
        let files = format!("{} files, {} bytes", t.attachment_files, t.attachment_bytes);
        kv(w, "attachments", files)?;
        if let Some(s) = &t.server {
            let values = format!(
                "{} value{}, {} bytes",
                s.attachments,
                if s.attachments == 1 { "" } else { "s" },
                s.attachment_bytes
            );
            kv(w, "server attachments", values)?;
            kv(w, "server row bytes", s.row_bytes)?;
            let size = |b: Option<u64>| b.map_or("-".to_string(), |b| b.to_string());
            kv(w, "server tables bytes", size(s.tables_bytes))?;
            kv(w, "server database bytes", size(s.database_bytes))?;
        }
        if let [one] = self.runs.as_slice() {
            for (k, v) in &one.store.settings {
                kv(w, k, v)?;
            }
        } else if !self.runs.is_empty() {
            writeln!(w)?;
            let header = [
                "RUN",
                "BACKEND",
                "DB BYTES",
                "EXECUTIONS",
                "BINDINGS",
                "ATTACHMENT BYTES",
            ];
            super::table_of(w, &header, &self.runs, |r| {
                let rows = |t: &str| r.store.tables.get(t).copied().unwrap_or(0).to_string();
                vec![
                    r.run_id.clone(),
                    r.store.backend.to_string(),
                    r.store.db_bytes.map_or("-".into(), |b| b.to_string()),
                    rows("execution"),
                    rows("bindings"),
                    // Files here, and values kept on the server.
                    (r.attachment_bytes + r.store.server.map_or(0, |s| s.attachment_bytes))
                        .to_string(),
                ]
            })?;
        }
        Ok(())
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }
}

impl Run for crate::cli::StatsArgs {
    type Output = Stats;
    /// The stats of the runs the command covers: `--run`'s alone, or every run, read from the
    /// project catalog (a SQLite run opened only when its files changed since) and from the
    /// server's tables in a few queries; with `--scan`, every run opened.
    fn run(&self, ctx: &Context) -> Result<Stats> {
        let (runs, warnings) = Listing::stats(ctx, self.scan)?;
        let mut t = Totals {
            runs: runs.len(),
            ..Default::default()
        };
        for r in &runs {
            t.db_bytes += r.store.db_bytes.unwrap_or(0);
            t.wal_bytes += r.store.wal_bytes.unwrap_or(0);
            for (k, v) in &r.store.tables {
                *t.tables.entry(k.clone()).or_default() += v;
            }
            for (k, v) in &r.store.execution_status {
                *t.execution_status.entry(k.clone()).or_default() += v;
            }
            t.binding_inline_bytes += r.store.binding_inline_bytes;
            t.attachment_files += r.attachment_files;
            t.attachment_bytes += r.attachment_bytes;
            if let Some(s) = &r.store.server {
                let sum = t.server.get_or_insert_with(ServerStats::default);
                sum.attachments += s.attachments;
                sum.attachment_bytes += s.attachment_bytes;
                sum.row_bytes += s.row_bytes;
                // One server's sizes, the same for each of its runs.
                sum.tables_bytes = sum.tables_bytes.max(s.tables_bytes);
                sum.database_bytes = sum.database_bytes.max(s.database_bytes);
            }
        }
        Ok(Stats {
            totals: t,
            runs,
            warnings,
        })
    }
}

/// What `checkpoint`, `vacuum` and `migrate` return: a row for each run they visit, and the
/// runs that could not be read (said on stderr).
#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct PerRun<T> {
    pub runs: Vec<T>,
    #[serde(skip)]
    pub warnings: Vec<String>,
    /// `migrate` without `--yes`: what it would do.
    #[serde(skip)]
    pub dry_run: bool,
}

/// A row of [`PerRun`]: its text, and whether it waits for `--yes`.
pub trait RunLine {
    fn line(&self, w: &mut dyn Write) -> io::Result<()>;
    fn pending(&self) -> bool {
        false
    }
}

impl<T: RunLine + Serialize> Render for PerRun<T> {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        for r in &self.runs {
            r.line(w)?;
        }
        if self.dry_run && self.runs.iter().any(T::pending) {
            writeln!(
                w,
                "dry run: pass --yes to migrate, each run in one transaction"
            )?;
        }
        Ok(())
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }
}

/// Applies `f` to every run the command covers, each answer under its run's id.
fn per_run<T: Send>(
    ctx: &Context,
    dry_run: bool,
    f: impl Fn(&mut dyn crate::store::Store) -> Result<T> + Sync,
) -> Result<PerRun<Visited<T>>> {
    let (runs, warnings) = over_runs(&Listing::runs_to_visit(ctx)?, ctx, |run, store| {
        let run_id = run.id.clone();
        f(store).map(|done| Visited { run_id, done })
    })?;
    Ok(PerRun {
        runs,
        warnings,
        dry_run,
    })
}

/// A run's row of [`PerRun`]: its id, then what the store answered.
#[derive(Debug, Serialize)]
pub struct Visited<T> {
    pub run_id: String,
    #[serde(flatten)]
    pub done: T,
}

impl RunLine for Visited<Checkpointed> {
    fn line(&self, w: &mut dyn Write) -> io::Result<()> {
        let c = &self.done;
        let busy = if c.busy {
            " (busy: a reader or writer was active; retry)"
        } else {
            ""
        };
        writeln!(
            w,
            "{}: {} checkpoint, {} of {} WAL frames moved{busy}",
            self.run_id, c.mode, c.checkpointed_frames, c.wal_frames
        )
    }
}

impl Run for crate::cli::CheckpointArgs {
    type Output = PerRun<Visited<Checkpointed>>;
    fn run(&self, ctx: &Context) -> Result<Self::Output> {
        per_run(ctx, false, |store| store.checkpoint(self.mode.as_str()))
    }
}

/// What `vacuum` answers: the size before and after, where known.
#[derive(Debug, Serialize)]
pub struct Vacuumed {
    pub bytes_before: Option<u64>,
    pub bytes_after: Option<u64>,
}

impl RunLine for Visited<Vacuumed> {
    fn line(&self, w: &mut dyn Write) -> io::Result<()> {
        match (self.done.bytes_before, self.done.bytes_after) {
            (Some(b), Some(a)) => writeln!(w, "{}: {b} -> {a} bytes", self.run_id),
            _ => writeln!(w, "{}: vacuumed", self.run_id),
        }
    }
}

/// `vacuum` (no options).
pub struct VacuumCmd;

impl Run for VacuumCmd {
    type Output = PerRun<Visited<Vacuumed>>;
    fn run(&self, ctx: &Context) -> Result<Self::Output> {
        per_run(ctx, false, |store| {
            let (bytes_before, bytes_after) = store.vacuum()?;
            Ok(Vacuumed {
                bytes_before,
                bytes_after,
            })
        })
    }
}

impl RunLine for Visited<Migration> {
    fn line(&self, w: &mut dyn Write) -> io::Result<()> {
        let m = &self.done;
        if m.steps.is_empty() {
            return writeln!(w, "{}: schema {}, nothing to do", self.run_id, m.from);
        }
        let verb = if m.applied {
            "migrated"
        } else {
            "would migrate"
        };
        writeln!(w, "{}: {verb} schema {} -> {}:", self.run_id, m.from, m.to)?;
        for step in &m.steps {
            writeln!(w, "  {step}")?;
        }
        Ok(())
    }

    fn pending(&self) -> bool {
        !self.done.steps.is_empty() && !self.done.applied
    }
}

impl Run for crate::cli::MigrateArgs {
    type Output = PerRun<Visited<Migration>>;
    /// Shows what upgrading each run's schema does, and with `--yes` does it.
    fn run(&self, ctx: &Context) -> Result<Self::Output> {
        per_run(ctx, !self.yes, |store| store.migrate(self.yes))
    }
}
