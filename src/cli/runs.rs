//! Whole runs and the project's: `runs`, `resume`, `log`, `diff`, `fork`, `export`,
//! `import`, `stats`, and the maintenance commands (doctor, checkpoint, migrate, prune).

use super::at_least;
use super::principals::PrincipalArg;
use super::state::BackendArg;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The directory to write the copy to; it must not exist [default: ./RUN_ID]
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ImportFrom {
    /// A run directory of prose-state's: an export, or a SQLite run's own directory (or its
    /// state.db)
    Run,
    /// A run directory of OpenProse's filesystem state mode (state.md, bindings/, agents/)
    Filesystem,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The run directory (or state.db) to bring in
    pub path: PathBuf,
    /// What PATH holds
    #[arg(long, value_enum, default_value_t = ImportFrom::Run)]
    pub from: ImportFrom,
    /// Replace a run with the same id and other content here (without it: exit 4)
    #[arg(long)]
    pub replace: bool,
    /// The backend to import into [default: the project's: PostgreSQL when it has a server
    /// URL, else SQLite]
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
    /// Vouch for the audit rows another machine sealed: seal them again with this machine's
    /// key, so that their decisions stand here; the import's audit event names who vouched
    /// and for how many rows. Without it they keep the seal they came with, and a decision
    /// this machine cannot check stays unattested (exit 10 at `gates wait`)
    #[arg(long)]
    pub vouch: bool,
    /// Import the run under this new run id: a copy re-identified (a run directory copied by
    /// hand takes no writes until it is). Every audit row is chained again under the new id
    /// and sealed here, so it needs --vouch; decisions the page signed were signed for the
    /// original run and no longer verify as signed
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    #[command(flatten)]
    pub principal: PrincipalArg,
}

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The execution record to fork at (its id, as `log` shows it): the fork holds the
    /// records up to it and the state as it stood when the next record was appended (for the
    /// newest record: as it is now)
    #[arg(long, value_name = "RECORD", value_parser = at_least(1))]
    pub at: i64,
    /// The new run's id [default: a new {YYYYMMDD}-{HHMMSS}-{random6}]
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// Replace a root-scope binding at the fork point (repeatable), e.g. --bind topic=quantum:
    /// how a run is retried with a corrected input
    #[arg(long, value_name = "NAME=VALUE")]
    pub bind: Vec<String>,
    /// Where the fork is kept [default: the project's: PostgreSQL when it has a server URL,
    /// else SQLite]
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
    #[command(flatten)]
    pub principal: PrincipalArg,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// A run `running` with no event for this many hours is reported stale
    #[arg(long, value_name = "HOURS", default_value_t = 24.0)]
    pub stale: f64,
    /// Repair what is safe: mark stale runs interrupted, make dropped schema triggers again,
    /// delete leftover temporary and unreferenced attachment files
    #[arg(long)]
    pub fix: bool,
}

words! {
    CheckpointMode {
        Passive => "passive",
        Full => "full",
        Restart => "restart",
        Truncate => "truncate",
    }
}

#[derive(Debug, Args)]
pub struct CheckpointArgs {
    /// SQLite's checkpoint mode
    #[arg(long, value_enum, default_value_t = CheckpointMode::Truncate)]
    pub mode: CheckpointMode,
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Keep runs finished within this many days
    #[arg(long, value_name = "N", required_unless_present = "history")]
    pub keep_days: Option<u64>,
    /// Always keep the newest M runs, whatever their age
    #[arg(long, value_name = "M", required_unless_present = "history")]
    pub keep_n: Option<u64>,
    /// Prune binding history instead of runs: keep the newest KEEP versions of each binding
    /// (of --run, or of every run), delete the older ones and the values only they named
    #[arg(long, value_name = "KEEP", conflicts_with_all = ["keep_days", "keep_n", "archive"],
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub history: Option<u64>,
    /// With --history: also make KEEP the project's default, which every run made from now on
    /// keeps to as it writes (a binding's older versions go once it holds twice as many)
    #[arg(long = "default", requires = "history")]
    pub history_default: bool,
    /// Really prune (without it, only show what would go)
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Move pruned run directories here instead of deleting them
    #[arg(long, value_name = "DIR")]
    pub archive: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// Keep printing new events until interrupted
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// How often to look for new events with --follow, in milliseconds [default: 500; 30000
    /// when new events wake it, as they do unless PROSE_STATE_WAKE=poll or no listening
    /// connection or file watch can be had]
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(50..=60_000))]
    pub poll_ms: Option<u64>,
    /// Only the events after this one (an event's `id`): what a reader has not seen yet
    #[arg(long, value_name = "ID", default_value_t = 0, value_parser = at_least(0))]
    pub since: i64,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The first run: a run id, a run directory or the path of its state.db
    pub run_a: String,
    /// The second run, compared with the first: what only it has is "added", what only
    /// RUN_A has is "removed"
    pub run_b: String,
    /// Read RUN_A from this backend (for a run id kept both here and on the server)
    /// [default: where the project finds the run]
    #[arg(long, value_enum, value_name = "BACKEND")]
    pub backend_a: Option<BackendArg>,
    /// Read RUN_B from this backend (for a run id kept both here and on the server)
    /// [default: where the project finds the run]
    #[arg(long, value_enum, value_name = "BACKEND")]
    pub backend_b: Option<BackendArg>,
    /// Compare only the bindings of this name (in every scope); records and gates are
    /// compared whole still
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// At most this many entries in each list: the differing bindings, each run's records
    /// after the part they share, the differing gates (each list also stays within about
    /// 7 KiB)
    #[arg(long, value_name = "N", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=500))]
    pub limit: u32,
    /// The differing bindings from this one on (the `next_cursor` of the previous answer)
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub cursor: u64,
    /// Every difference, unbounded
    #[arg(long, conflicts_with_all = ["limit", "cursor"])]
    pub all: bool,
    /// Exit 1 when the runs differ, as `git diff --exit-code` does (without it, 0 either way)
    #[arg(long)]
    pub exit_code: bool,
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Do it (without: only show what would be done)
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// `resume`'s bound and cursor.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// Everything: every statement's latest record, every binding, agent and gate (unbounded)
    #[arg(long, conflicts_with_all = ["cursor", "limit"])]
    pub all: bool,
    /// Bindings after this name (the `next_cursor` of the previous answer)
    #[arg(long, value_name = "NAME")]
    pub cursor: Option<String>,
    /// At most this many bindings in the answer, 1 to 1000 (default 64; the answer stays within
    /// 16 KiB)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: Option<u32>,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Open every run's own database rather than using the figures the project catalog
    /// kept of runs whose files have not changed since
    #[arg(long)]
    pub scan: bool,
}

#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Only runs with this status
    #[arg(long, value_enum)]
    pub status: Option<crate::model::RunStatus>,
    /// At most this many runs
    #[arg(long, value_name = "N", default_value_t = 50, allow_hyphen_values = true,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub limit: u64,
    /// Only runs started at or after TIME (2026-11-20, 2026-11-20T10:00:00Z), or within the
    /// last DURATION (7d, 12h)
    #[arg(long, value_name = "TIME|DURATION")]
    pub since: Option<String>,
    /// Read every run's own database rather than the project catalog (finds what raw SQL
    /// changed behind prose-state's back)
    #[arg(long)]
    pub scan: bool,
}
