//! `finish`: a run's final status.

use crate::cli::FinishArgs;
use crate::error::usage;
use crate::model::{now, RunStatus};
use crate::output::Render;
use crate::store::Finished;
use anyhow::Result;
use serde::Serialize;
use std::io::{self, Write};

#[derive(Debug, Serialize)]
pub struct RunFinished {
    pub run_id: String,
    pub status: RunStatus,
    /// The status before; null when the run already had this status (nothing written).
    pub previous_status: Option<RunStatus>,
    pub error: Option<String>,
}

impl Render for RunFinished {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        match &self.previous_status {
            Some(p) => writeln!(w, "Run {}: {p} -> {}", self.run_id, self.status),
            None => writeln!(w, "Run {}: already {}", self.run_id, self.status),
        }
    }
}

impl super::Run for FinishArgs {
    type Output = RunFinished;
    fn run(&self, ctx: &crate::context::Context) -> Result<RunFinished> {
        let (_, mut store) = ctx.the_run()?;
        let status = RunStatus::from(self.status);
        if self.error.as_ref().is_some_and(|e| e.trim().is_empty()) {
            return Err(usage("--error is empty"));
        }
        let run_id = store.run_info()?.id;
        let previous_status = match store.finish(&status, self.error.as_deref(), &now())? {
            Finished::Done { previous_status } => Some(previous_status),
            Finished::Unchanged => None,
        };
        Ok(RunFinished {
            run_id,
            status,
            previous_status,
            error: self.error.clone(),
        })
    }
}
