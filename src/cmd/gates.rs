//! `gates`: list, create, show, wait, audit, verify.
//!
//! Here, the command and `gates sweep`; `view` holds how a gate is shown (its team's votes,
//! its integrity), and each of `show` (list, show, audit), `create`, `wait` and
//! `verify` a subcommand's reading and output.

mod create;
mod show;
mod verify;
mod view;
mod wait;

pub use create::{create, quorum, GateCreated};
pub use show::{audit, list, show_to, AuditList, GateList, GateShown};
pub use verify::{verify, verify_gates, Broken, GateProblem, RunChain, Verified};
pub use view::{edit_line, team_view, GateView, IntegrityView, LazyRoster, TeamView};
pub use wait::{wait, GateWaited, SeveralWaited, WaitOutput};

use super::listing::Listing;
use super::Run;
use crate::cli::{GatesArgs, GatesCommand};
use crate::context::Context;
use crate::error::{not_found, shown, Code};
use crate::model::{now, now_plus, parse_duration};
use crate::output::Render;
use anyhow::Result;
use serde::Serialize;
use std::io::{self, Write};

/// The error for a gate the run does not have (exit 3).
pub(super) fn gate_not_found(run_id: &str, gate: &str) -> anyhow::Error {
    not_found(format!("gate not found in run {run_id}: {}", shown(gate)))
}

/// The time a duration from now comes.
fn in_future(duration: &str) -> Result<String> {
    parse_duration(duration).map(now_plus)
}

/// What `gates sweep` did.
#[derive(Serialize)]
pub struct SweptGates {
    /// Runs that had something due.
    pub runs: usize,
    #[serde(flatten)]
    pub done: crate::store::rules::Swept,
    #[serde(skip)]
    pub warnings: Vec<String>,
}

impl Render for SweptGates {
    /// 1 when a run could not be swept.
    fn exit_code(&self) -> Code {
        if self.warnings.is_empty() {
            Code::Ok
        } else {
            Code::Error
        }
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }

    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        let d = &self.done;
        if self.runs == 0 {
            return match self.warnings.len() {
                0 => writeln!(w, "nothing due"),
                n => writeln!(w, "nothing due in the runs read ({n} could not be read)"),
            };
        }
        writeln!(
            w,
            "swept {} run{}: {} timed out, {} escalated, {} reminder{} announced",
            self.runs,
            if self.runs == 1 { "" } else { "s" },
            d.timed_out,
            d.escalated,
            d.reminders,
            if d.reminders == 1 { "" } else { "s" }
        )
    }
}

crate::output::one_of!(
    /// What `gates` and its subcommands print.
    GatesOutput {
        List(GateList),
        Created(GateCreated),
        Shown(GateShown),
        Waited(WaitOutput),
        Audit(AuditList),
        Verified(Verified),
        Swept(SweptGates),
    }
);

impl Run for GatesArgs {
    type Output = GatesOutput;
    fn run(&self, ctx: &Context) -> Result<GatesOutput> {
        Ok(match &self.command {
            None => GatesOutput::List(list(&self.list, ctx)?),
            Some(GatesCommand::Create(a)) => {
                GatesOutput::Created(create(a, ctx.the_run()?.1.as_mut(), quorum(a, ctx)?)?)
            }
            Some(GatesCommand::Show(a)) => {
                let (paths, mut store) = ctx.open_run(a.target.run().or(ctx.run.as_deref()))?;
                // Who looked, named as a history names its writer (claimed, not proved):
                // `--as`, PROSE_PRINCIPAL, the login name, else the account it runs as.
                let viewer = ctx.writer(&a.principal)?;
                GatesOutput::Shown(show_to(
                    a.target.gate(),
                    Some(&viewer),
                    "cli",
                    store.as_mut(),
                    &paths.dir,
                    &mut LazyRoster::new(ctx),
                )?)
            }
            Some(GatesCommand::Wait(a)) => GatesOutput::Waited(wait(a, ctx)?),
            Some(GatesCommand::Audit(a)) => GatesOutput::Audit(audit(a, ctx)?),
            Some(GatesCommand::Verify(a)) => GatesOutput::Verified(verify_gates(a, &a.ids, ctx)?),
            Some(GatesCommand::Sweep(a)) => {
                let (runs, done, warnings) = Listing::sweep(ctx, &now(), a.scan)?;
                GatesOutput::Swept(SweptGates {
                    runs,
                    done,
                    warnings,
                })
            }
        })
    }
}
