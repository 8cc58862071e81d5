//! Every clap type of prose-state, and nothing else: no logic, so that it can be read on its
//! own (and later included by a build script for completions and the man page).
//!
//! Here, the top level (`Cli`, its global options, the commands); each command family's
//! arguments are in a file of their own below, all of them re-exported here.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// A whole number from `min` up (an id, an index).
fn at_least(min: i64) -> clap::builder::RangedI64ValueParser<i64> {
    clap::value_parser!(i64).range(min..)
}

/// A value enum each variant of which is one word: clap reads the variant by it, `as_str`
/// gives it back.
macro_rules! words {
    ($(#[$m:meta])* $name:ident { $($(#[$v:meta])* $variant:ident => $word:literal,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
        pub enum $name {
            $($(#[$v])* #[value(name = $word)] $variant,)*
        }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)*
                }
            }
        }
    };
}

// After `words!`: the families use it.
mod agent;
mod gates;
mod principals;
mod runs;
mod servers;
mod state;

pub use agent::*;
pub use gates::*;
pub use principals::*;
pub use runs::*;
pub use servers::*;
pub use state::*;

/// The end of every `--help`, the top level's and each subcommand's (src/parse.rs adds it to
/// the subcommands).
pub const EXIT_CODES: &str =
    "Exit codes: 0 ok; 1 error; 2 usage or invalid input; 3 not found; 4 refused or \
conflict; 5 gate rejected; 6 gate timed out, or query past --timeout; 7 gate still pending when \
the wait ran out; 8 a write's outcome unknown (connection lost while committing); 9 tampered \
(a gate or audit log that disagrees with what was sealed); 10 unattested (a decision nothing \
attests); 11 stale (a decision whose inputs changed before it was consumed); 75 busy or \
disconnected, nothing written: retry.";

/// Durable state for OpenProse runs: bindings, the execution log, agent memory and approval
/// gates, kept in each run's SQLite state.db.
///
/// The VM calls `init` and `exec-append`; subagents call `bind` and `get`; anyone may `query`.
/// Every command is safe to run from many processes at once.
#[derive(Debug, Parser)]
#[command(
    name = "prose-state",
    version,
    max_term_width = 100,
    after_help = EXIT_CODES
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,

    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Debug, Args)]
pub struct Global {
    /// Project root that holds .prose/ [default: the nearest directory holding .prose/, from
    /// the current one up; else the current directory]
    #[arg(long, global = true, env = "PROSE_ROOT", value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// The run: a run id, a run directory, or the path of its state.db. Commands that act on
    /// one run also read PROSE_RUN; listings (gates, runs, stats, doctor, ...) are narrowed
    /// only by this flag
    #[arg(long, global = true, value_name = "RUN")]
    pub run: Option<String>,

    /// Print JSON on stdout: exactly one document, or JSON Lines (one object a line) for `log`;
    /// diagnostics go to stderr
    #[arg(long, global = true)]
    pub json: bool,

    /// Milliseconds to wait for another process's write lock before giving up with exit 75
    /// (0 to 2147483647, the most SQLite and PostgreSQL take)
    #[arg(
        long,
        global = true,
        env = "PROSE_STATE_BUSY_TIMEOUT",
        value_name = "MS",
        default_value_t = 10_000,
        value_parser = clap::value_parser!(u64).range(0..=i32::MAX as u64)
    )]
    pub busy_timeout: u64,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a run: its directory, state.db, attachments/ and a copy of the program
    Init(InitArgs),
    /// Write a binding (a named value) in the root scope or an execution's scope
    Bind(BindArgs),
    /// Read a binding, resolving it through the scope chain (--version, --as-of: as it was)
    Get(GetArgs),
    /// Every kept version of a binding: when, from which record, and who wrote it
    History(HistoryArgs),
    /// Append one record to the execution log (append-only)
    ExecAppend(ExecAppendArgs),
    /// Run one read-only SQL statement and print the rows (JSON like `sqlite3 -json`)
    Query(QueryArgs),
    /// Approval gates: list the pending ones (of every run by default), or create, show,
    /// wait for, audit and verify them
    Gates(GatesArgs),
    /// Approve a pending gate (`--reject --reason` rejects it instead)
    Approve(ApproveArgs),
    /// Reject a pending gate, with a reason
    Reject(RejectArgs),
    /// Principals who decide with a token: add (issues it, shown once), list, revoke, and
    /// require a token for every decision
    Principals(PrincipalsArgs),
    /// Persistent agent memory and segments, in execution, project or user scope
    Agent(AgentArgs),
    /// The import registry: list it, or `imports add`
    Imports(ImportsArgs),
    /// Set a run's final status (completed and failed runs take no more writes)
    Finish(FinishArgs),
    /// List the runs under the root, newest first
    Runs(RunsArgs),
    /// Where a run stands and what the VM does next, in at most 16 KiB (--all: everything),
    /// and record the resume. With no run named: the project's unfinished runs (exactly
    /// one: its answer), recording nothing
    Resume(ResumeArgs),
    /// The execution log, one line an event (JSON Lines with --json); --follow keeps printing
    Log(LogArgs),
    /// Compare two runs (a fork and its source, or any two): the bindings, execution records
    /// and gates that differ, read-only, a bounded number of each
    Diff(DiffArgs),
    /// Print a shell completion script: prose-state completions bash > /etc/bash_completion.d/prose-state
    Completions(CompletionsArgs),
    /// Print the man page (roff): prose-state man > prose-state.1
    Man,
    /// Sizes, row counts, execution statuses and settings of a run (--run) or of all runs
    Stats(StatsArgs),
    /// Check runs for problems: integrity, attachments, stale runs, the audit chain, dropped
    /// triggers; exit 1 if any. --fix repairs what is safe
    Doctor(DoctorArgs),
    /// Move SQLite's write-ahead log into the database (of --run, or of every run)
    Checkpoint(CheckpointArgs),
    /// Rebuild the database to reclaim space (of --run, or of every run)
    Vacuum,
    /// Upgrade the schema of the runs (or --run) to this build's: shows what it does, and
    /// with --yes does it, each run in one transaction. Writes upgrade on their own when the
    /// change is additive; a change that rebuilds a table waits for this command
    Migrate(MigrateArgs),
    /// Remove (or --archive) old finished runs; a dry run unless --yes
    Prune(PruneArgs),
    /// Write a self-contained copy of one run (--run, from either backend): a run directory
    /// with a SQLite state.db and attachments/, readable by sqlite3 and by `--run DIR`
    Export(ExportArgs),
    /// Bring a run into this project's backend: an exported or plain run directory, or
    /// (--from filesystem) a run of OpenProse's filesystem state mode
    Import(ImportArgs),
    /// Make a new run whose state is --run's as of one execution record (--at): its records up
    /// to it, bindings and agent memory as they were, and the gates opened by then; --bind
    /// replaces an input. The source is untouched
    Fork(ForkArgs),
    /// Serve the agent's commands as Model Context Protocol tools on stdio, acting as
    /// agent:NAME (no tool decides a gate)
    Mcp(McpArgs),
    /// Serve the approval page: pending gates of every run, each gate's context, approve and
    /// reject forms, for principals logged in with their token (loopback by default)
    Serve(ServeArgs),
    /// Print the state protocol for a VM, a subagent or an approver, in Markdown
    Guide(GuideArgs),
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}
