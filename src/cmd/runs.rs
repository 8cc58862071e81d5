//! `runs`: the runs under the root, newest first.

use super::listing::{Listing, RunQuery};
use super::Run;
use crate::cli::RunsArgs;
use crate::context::Context;
use crate::model::now;
use crate::output::{one_line, Render};
use crate::store::RunSummary;
use anyhow::Result;
use serde::Serialize;
use std::io::{self, Write};

/// The JSON shape of `runs`: an array of the runs' rows (written out in `rows.rs`, so that the
/// store's field names are not the command line's contract).
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
        let header = [
            "RUN",
            "STATUS",
            "PROGRAM",
            "STARTED",
            "LAST EVENT",
            "PENDING GATES",
        ];
        super::table_of(w, &header, &self.runs, |r| {
            vec![
                r.run.id.clone(),
                r.run.status.as_ref().map_or("", |s| s.as_str()).to_string(),
                one_line(r.run.program_path.as_deref().unwrap_or("-"), 40),
                r.run.started_at.clone().unwrap_or_default(),
                r.last_event_at.clone().unwrap_or_else(|| "-".into()),
                r.pending_gates.to_string(),
            ]
        })
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }

    /// The pending counts are the gates rows', unchecked: it says so.
    fn notes(&self) -> Vec<String> {
        if self.runs.iter().any(|r| r.pending_gates > 0) {
            vec!["pending gates are counted from the gates' rows, not checked against their sealed logs: `gates --run RUN` checks one run".into()]
        } else {
            Vec::new()
        }
    }
}

pub fn run(args: &RunsArgs, ctx: &Context) -> Result<RunList> {
    let now = now();
    let want = args.status.clone();
    // A time, or a duration back from now.
    let since = match args.since.as_deref() {
        None => None,
        Some(s) => Some(match crate::model::parse_duration(s) {
            Ok(seconds) => crate::model::now_plus(-seconds),
            // A day alone is its first second.
            Err(_) => crate::model::canonical_time(s)
                .or_else(|| crate::model::canonical_time(&format!("{s} 00:00:00")))
                .ok_or_else(|| {
                crate::error::usage(format!(
                    "--since is neither a time (2026-11-20, 2026-11-20T10:00:00Z) nor a duration (7d, 12h): {}",
                    crate::error::shown(s)
                ))
            })?,
        }),
    };
    // The project's catalog of its SQLite runs and its server: each one query, newest first
    // and limited there (the runs of the page read whole from their stores).
    let (runs, warnings) = Listing::runs(
        ctx,
        &RunQuery {
            now: &now,
            status: want.as_ref(),
            since: since.as_deref(),
            limit: args.limit,
            scan: args.scan,
        },
    )?;
    Ok(RunList { runs, warnings })
}

impl Run for RunsArgs {
    type Output = RunList;
    fn run(&self, ctx: &Context) -> Result<RunList> {
        run(self, ctx)
    }
}
