//! `stats`, `checkpoint` and `vacuum`: looking after the stores of one run or all of them.

use super::listing::Listing;
use super::{over_runs, Run};
use crate::context::Context;
use crate::output::{table, Render};
use crate::run::RunPaths;
use crate::store::{Checkpointed, RunStats};
use anyhow::Result;
use serde::ser::{SerializeStruct, Serializer};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{self, Write};

/// The JSON shape of a run's stats, written out here so that the store's field names are not
/// the command line's contract.
impl Serialize for RunStats {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let st = &self.store;
        let mut r = s.serialize_struct("RunStats", 11)?;
        r.serialize_field("run_id", &self.run_id)?;
        r.serialize_field("backend", st.backend)?;
        r.serialize_field("schema_version", &st.schema_version)?;
        r.serialize_field("db_bytes", &st.db_bytes)?;
        r.serialize_field("wal_bytes", &st.wal_bytes)?;
        r.serialize_field("tables", &st.tables)?;
        r.serialize_field("execution_status", &st.execution_status)?;
        r.serialize_field("binding_inline_bytes", &st.binding_inline_bytes)?;
        r.serialize_field("settings", &st.settings)?;
        r.serialize_field("attachment_files", &self.attachment_files)?;
        r.serialize_field("attachment_bytes", &self.attachment_bytes)?;
        r.end()
    }
}

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
            kv(w, "rows", counts(&s.tables))?;
            kv(w, "execution statuses", counts(&s.execution_status))?;
            kv(w, "binding bytes inline", s.binding_inline_bytes)?;
            kv(
                w,
                "attachments",
                format!(
                    "{} files, {} bytes",
                    one.attachment_files, one.attachment_bytes
                ),
            )?;
            for (k, v) in &s.settings {
                kv(w, k, v)?;
            }
            return Ok(());
        }
        let t = &self.totals;
        kv(w, "runs", t.runs)?;
        kv(w, "db bytes", t.db_bytes)?;
        kv(w, "wal bytes", t.wal_bytes)?;
        kv(w, "rows", counts(&t.tables))?;
        kv(w, "execution statuses", counts(&t.execution_status))?;
        kv(w, "binding bytes inline", t.binding_inline_bytes)?;
        kv(
            w,
            "attachments",
            format!("{} files, {} bytes", t.attachment_files, t.attachment_bytes),
        )?;
        if !self.runs.is_empty() {
            writeln!(w)?;
            let header: Vec<String> = [
                "RUN",
                "BACKEND",
                "DB BYTES",
                "EXECUTIONS",
                "BINDINGS",
                "ATTACHMENT BYTES",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let rows: Vec<Vec<String>> = self
                .runs
                .iter()
                .map(|r| {
                    vec![
                        r.run_id.clone(),
                        r.store.backend.to_string(),
                        r.store.db_bytes.map_or("-".into(), |b| b.to_string()),
                        r.store
                            .tables
                            .get("execution")
                            .copied()
                            .unwrap_or(0)
                            .to_string(),
                        r.store
                            .tables
                            .get("bindings")
                            .copied()
                            .unwrap_or(0)
                            .to_string(),
                        r.attachment_bytes.to_string(),
                    ]
                })
                .collect();
            table(w, &header, &rows)?;
        }
        Ok(())
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }
}

/// The stats of the runs the command covers: `--run`'s alone, or every run, read from the
/// project catalog (a SQLite run opened only when its files changed since) and from the
/// server's tables in a few queries; with `scan`, every run opened.
pub fn stats(ctx: &Context, scan: bool) -> Result<Stats> {
    let (runs, warnings) = Listing::stats(ctx, scan)?;
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
    }
    Ok(Stats {
        totals: t,
        runs,
        warnings,
    })
}

#[derive(Debug)]
pub struct RunCheckpoint {
    pub run_id: String,
    pub result: Checkpointed,
}

impl Serialize for RunCheckpoint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = &self.result;
        let mut r = s.serialize_struct("RunCheckpoint", 5)?;
        r.serialize_field("run_id", &self.run_id)?;
        r.serialize_field("mode", &c.mode)?;
        r.serialize_field("busy", &c.busy)?;
        r.serialize_field("wal_frames", &c.wal_frames)?;
        r.serialize_field("checkpointed_frames", &c.checkpointed_frames)?;
        r.end()
    }
}

#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct CheckpointList {
    pub runs: Vec<RunCheckpoint>,
    #[serde(skip)]
    pub warnings: Vec<String>,
}

impl Render for CheckpointList {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        for r in &self.runs {
            writeln!(
                w,
                "{}: {} checkpoint, {} of {} WAL frames moved{}",
                r.run_id,
                r.result.mode,
                r.result.checkpointed_frames,
                r.result.wal_frames,
                if r.result.busy {
                    " (busy: a reader or writer was active; retry)"
                } else {
                    ""
                }
            )?;
        }
        Ok(())
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }
}

pub fn checkpoint(mode: &str, runs: &[RunPaths], ctx: &Context) -> Result<CheckpointList> {
    let (runs, warnings) = over_runs(runs, ctx, |run, store| {
        Ok(RunCheckpoint {
            run_id: run.id.clone(),
            result: store.checkpoint(mode)?,
        })
    })?;
    Ok(CheckpointList { runs, warnings })
}

#[derive(Debug, Serialize)]
pub struct RunVacuum {
    pub run_id: String,
    pub bytes_before: Option<u64>,
    pub bytes_after: Option<u64>,
}

#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct VacuumList {
    pub runs: Vec<RunVacuum>,
    #[serde(skip)]
    pub warnings: Vec<String>,
}

impl Render for VacuumList {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        for r in &self.runs {
            match (r.bytes_before, r.bytes_after) {
                (Some(b), Some(a)) => writeln!(w, "{}: {b} -> {a} bytes", r.run_id)?,
                _ => writeln!(w, "{}: vacuumed", r.run_id)?,
            }
        }
        Ok(())
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }
}

pub fn vacuum(runs: &[RunPaths], ctx: &Context) -> Result<VacuumList> {
    let (runs, warnings) = over_runs(runs, ctx, |run, store| {
        let (bytes_before, bytes_after) = store.vacuum()?;
        Ok(RunVacuum {
            run_id: run.id.clone(),
            bytes_before,
            bytes_after,
        })
    })?;
    Ok(VacuumList { runs, warnings })
}

#[derive(Debug)]
pub struct RunMigration {
    pub run_id: String,
    pub migration: crate::store::Migration,
}

impl Serialize for RunMigration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let m = &self.migration;
        let mut r = s.serialize_struct("RunMigration", 5)?;
        r.serialize_field("run_id", &self.run_id)?;
        r.serialize_field("from", &m.from)?;
        r.serialize_field("to", &m.to)?;
        r.serialize_field("steps", &m.steps)?;
        r.serialize_field("applied", &m.applied)?;
        r.end()
    }
}

#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct MigrationList {
    pub runs: Vec<RunMigration>,
    #[serde(skip)]
    pub warnings: Vec<String>,
    #[serde(skip)]
    pub dry_run: bool,
}

impl Render for MigrationList {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        let mut pending = 0;
        for r in &self.runs {
            let m = &r.migration;
            if m.steps.is_empty() {
                writeln!(w, "{}: schema {}, nothing to do", r.run_id, m.from)?;
                continue;
            }
            let verb = if m.applied {
                "migrated"
            } else {
                "would migrate"
            };
            writeln!(w, "{}: {verb} schema {} -> {}:", r.run_id, m.from, m.to)?;
            for step in &m.steps {
                writeln!(w, "  {step}")?;
            }
            pending += usize::from(!m.applied);
        }
        if self.dry_run && pending > 0 {
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

/// `migrate`: shows what upgrading each run's schema does, and with `yes` does it.
pub fn migrate(yes: bool, runs: &[RunPaths], ctx: &Context) -> Result<MigrationList> {
    let (runs, warnings) = over_runs(runs, ctx, |run, store| {
        Ok(RunMigration {
            run_id: run.id.clone(),
            migration: store.migrate(yes)?,
        })
    })?;
    Ok(MigrationList {
        runs,
        warnings,
        dry_run: !yes,
    })
}

impl Run for crate::cli::StatsArgs {
    type Output = Stats;
    fn run(&self, ctx: &Context) -> Result<Stats> {
        stats(ctx, self.scan)
    }
}

impl Run for crate::cli::CheckpointArgs {
    type Output = CheckpointList;
    fn run(&self, ctx: &Context) -> Result<CheckpointList> {
        checkpoint(self.mode.as_str(), &Listing::runs_to_visit(ctx)?, ctx)
    }
}

/// `vacuum` (no options).
pub struct VacuumCmd;

impl Run for VacuumCmd {
    type Output = VacuumList;
    fn run(&self, ctx: &Context) -> Result<VacuumList> {
        vacuum(&Listing::runs_to_visit(ctx)?, ctx)
    }
}

impl Run for crate::cli::MigrateArgs {
    type Output = MigrationList;
    fn run(&self, ctx: &Context) -> Result<MigrationList> {
        migrate(self.yes, &Listing::runs_to_visit(ctx)?, ctx)
    }
}
