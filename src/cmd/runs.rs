//! `runs`: the runs under the root, newest first.

use super::{over_runs, Run};
use crate::cli::{RunStatus, RunsArgs};
use crate::context::Context;
use crate::model::now;
use crate::output::{one_line, table, Render};
use crate::run::RunPaths;
use crate::store::RunSummary;
use anyhow::Result;
use serde::Serialize;
use std::io::{self, Write};

#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct RunList {
    pub runs: Vec<RunSummary>,
    #[serde(skip)]
    pub warnings: Vec<String>,
}

impl Render for RunList {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        if self.runs.is_empty() {
            return writeln!(w, "no runs");
        }
        let header: Vec<String> = [
            "RUN",
            "STATUS",
            "PROGRAM",
            "STARTED",
            "LAST EVENT",
            "PENDING GATES",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let rows: Vec<Vec<String>> = self
            .runs
            .iter()
            .map(|r| {
                vec![
                    r.run.id.clone(),
                    r.run.status.clone().unwrap_or_default(),
                    one_line(r.run.program_path.as_deref().unwrap_or("-"), 40),
                    r.run.started_at.clone().unwrap_or_default(),
                    r.last_event_at.clone().unwrap_or_else(|| "-".into()),
                    r.pending_gates.to_string(),
                ]
            })
            .collect();
        table(w, &header, &rows)
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }
}

pub fn run(args: &RunsArgs, runs: &[RunPaths], ctx: &Context) -> Result<RunList> {
    let now = now();
    let want = args.status.map(|s| match s {
        RunStatus::Running => "running",
        RunStatus::Completed => "completed",
        RunStatus::Failed => "failed",
        RunStatus::Interrupted => "interrupted",
    });
    let (mut all, warnings) = over_runs(runs, ctx, |_, store| store.run_summary(&now))?;
    all.retain(|r| want.is_none_or(|w| r.run.status.as_deref() == Some(w)));
    all.sort_by(|a, b| (&b.run.started_at, &b.run.id).cmp(&(&a.run.started_at, &a.run.id)));
    all.truncate(args.limit as usize);
    Ok(RunList {
        runs: all,
        warnings,
    })
}

impl Run for RunsArgs {
    type Output = RunList;
    fn run(&self, ctx: &Context) -> Result<RunList> {
        run(self, &ctx.all_runs()?, ctx)
    }
}
