//! Every clap type of prose-state, and nothing else: no logic, so that it can be read on its
//! own (and later included by a build script for completions and the man page).

use clap::{Args, Parser, Subcommand, ValueEnum};
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
pub struct McpArgs {
    /// The agent this server acts for: every call is made as the principal agent:NAME.
    /// Without it a VM session acts as agent:vm, and a subagent session is anonymous
    /// (agent:subagent), with no agent memory tools
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// Where the session's agent keeps its memory, as the program's `persist:` says:
    /// execution (persist: true, kept with the run), project, user, or a path (PATH/agents.db
    /// under the project root). The agent tools' default (a subagent session's only scope)
    #[arg(long, value_parser = AgentScope::parse, value_name = "SCOPE", requires = "agent")]
    pub scope: Option<AgentScope>,
    /// The role the session plays, fixed for its life (required): vm (the VM's tools) or
    /// subagent (read, bind in its scope, its own agent's memory; no finish, init,
    /// exec_append or gates_create)
    #[arg(long, value_enum, value_name = "ROLE")]
    pub role: Option<McpRole>,
    /// A subagent session's execution: it binds and reads in this execution's scope only
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = at_least(1))]
    pub execution_id: Option<i64>,
}

words! {
    /// The roles an MCP session may play.
    McpRole {
        /// The orchestrating VM: every served tool
        Vm => "vm",
        /// A subagent: read, bind in its scope, its own agent's memory and segments
        Subagent => "subagent",
    }
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address and port to listen on (port 0: any free port, printed at start)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7433")]
    pub listen: String,
    /// Allow an address other than loopback without TLS: tokens and sessions then cross
    /// the network in clear (a warning is printed)
    #[arg(long, conflicts_with = "tls_cert")]
    pub insecure_http: bool,
    /// Serve HTTPS with this certificate chain (PEM); needs --tls-key
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The certificate's private key (PEM); needs --tls-cert
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Print the public key this server signs decisions with (made on first use) and exit
    #[arg(long)]
    pub show_key: bool,
    /// Connections served at once; the next waits until one closes
    #[arg(long, value_name = "N", default_value_t = 256, env = "PROSE_SERVE_MAX_CONNECTIONS",
          value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub max_connections: u32,
    /// Seconds a client has to send a request's headers (and to finish a TLS handshake)
    /// before its connection is closed; also how long an idle connection is kept
    #[arg(long, value_name = "SECONDS", default_value_t = 10, env = "PROSE_SERVE_HEADER_TIMEOUT",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub header_timeout: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GuideFor {
    /// The orchestrating VM: every moment of a program, in prose-state commands
    Vm,
    /// The block to paste into a subagent's prompt (filled in with --run and --execution-id)
    Subagent,
    /// A person who finds, reads and decides gates
    Approver,
}

#[derive(Debug, Args)]
pub struct GuideArgs {
    /// Whose guide
    #[arg(value_enum, default_value_t = GuideFor::Vm)]
    pub who: GuideFor,
    /// The execution the subagent works in (fills in its guide)
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = at_least(1))]
    pub execution_id: Option<i64>,
    /// The binding the subagent writes (fills in its guide)
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// The binding is an assignment (`x = ...`): written where the program declared it
    #[arg(long, requires = "name")]
    pub assign: bool,
    /// The binding's kind, as the statement says: `output` for `output x = ...`
    #[arg(long, value_enum, value_name = "KIND", requires = "name")]
    pub kind: Option<Kind>,
    /// The persistent agent the subagent is (fills in its guide)
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// Where that agent's memory lives: execution (persist: true), project, user, or a path
    #[arg(long, value_parser = AgentScope::parse, default_value_t = AgentScope::Execution, requires = "agent")]
    pub scope: AgentScope,
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
pub struct CompletionsArgs {
    /// The shell
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The .prose program to copy into the run as program.prose
    pub program: Option<PathBuf>,

    /// Use this run id instead of a new {YYYYMMDD}-{HHMMSS}-{random6}
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,

    /// Where the run's state is kept: a state.db in the run directory, or the PostgreSQL
    /// server of OPENPROSE_POSTGRES_URL (.prose/.env, then the environment, then DATABASE_URL)
    #[arg(long, value_enum, default_value_t = BackendArg::Sqlite)]
    pub backend: BackendArg,

    /// Print only the run id, for a shell to capture: RUN=$(prose-state init -q)
    #[arg(long, short = 'q')]
    pub quiet: bool,

    /// Who starts the run, recorded in its sealed genesis (for separation of duties)
    #[command(flatten)]
    pub principal: PrincipalArg,
    #[command(flatten)]
    pub token: TokenArg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    Sqlite,
    Postgres,
}

#[derive(Debug, Args)]
pub struct BindArgs {
    /// Binding name, e.g. research, anon_001, research.findings
    pub name: String,

    /// The value; `-`, or nothing with piped input, reads it from stdin
    #[arg(conflicts_with_all = ["file", "append", "merge", "from"])]
    pub value: Option<String>,

    /// Read the value from this file
    #[arg(long, value_name = "PATH", conflicts_with = "from")]
    pub file: Option<PathBuf>,

    /// Copy the value of this binding, as `get` reads it from --execution-id (`let a = b`):
    /// the value is not printed, and an attachment is copied whole
    #[arg(long, value_name = "NAME", conflicts_with_all = ["append", "merge"])]
    pub from: Option<String>,

    /// Look --from up from this execution record instead (`let x = do f()`: the block's
    /// result, read in its frame, bound in the caller's)
    #[arg(long, value_name = "N", requires = "from", allow_hyphen_values = true,
          value_parser = at_least(1))]
    pub from_execution_id: Option<i64>,

    /// Bind in the frame of this execution record (a block invocation or a branch; a record
    /// inside one binds in it; omitted: the root)
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = at_least(1))]
    pub execution_id: Option<i64>,

    /// An assignment (`x = ...`): write the binding `get` reads from here, in whatever frame
    /// holds it (exit 3 if none does)
    #[arg(long, conflicts_with = "local")]
    pub assign: bool,

    /// Bind at the --execution-id record itself: a name its construct declares for its body
    /// alone (a loop variable, `catch as err`)
    #[arg(long, requires = "execution_id")]
    pub local: bool,

    /// What kind of binding this is; a const cannot be rebound in its scope
    #[arg(long, value_enum, default_value_t = Kind::Let)]
    pub kind: Kind,

    /// The statement that produced the value, e.g. 'let research = session: researcher'
    #[arg(long, value_name = "STMT")]
    pub source: Option<String>,

    /// One-line summary; for an attachment it is stored as the value
    #[arg(long, value_name = "TEXT")]
    pub summary: Option<String>,

    /// Append this to the JSON array the binding holds (an absent binding is []), in one
    /// transaction: concurrent appends all land. JSON if it parses as JSON, else a string
    #[arg(long, value_name = "VALUE", conflicts_with_all = ["file", "merge"])]
    pub append: Option<String>,

    /// An --append's (or --merge's) key: one whose key a kept version already carries is not
    /// applied again (a step run again after a crash adds nothing twice)
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,

    /// Merge this JSON object into the one the binding holds (RFC 7396: a null member
    /// removes the key; an absent binding is {}), in one transaction
    #[arg(long, value_name = "JSON", conflicts_with = "file")]
    pub merge: Option<String>,

    /// Write only if the binding is still at this version, its own (`get --json` shows it,
    /// `history` lists it; 0: the binding does not exist yet); otherwise exit 4 and write
    /// nothing
    #[arg(long, value_name = "N")]
    pub if_version: Option<i64>,

    /// Values longer than this many bytes go to attachments/ instead of the database
    #[arg(long, value_name = "BYTES", default_value_t = 102_400, allow_hyphen_values = true,
          value_parser = clap::value_parser!(u64).range(0..=268_435_456))]
    pub attach_over: u64,

    #[command(flatten)]
    pub principal: PrincipalArg,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// Binding name
    pub name: String,

    /// Start the lookup in this execution's scope and walk up to the root
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = at_least(1))]
    pub execution_id: Option<i64>,

    /// Print the scope chain walked and where the binding was found, not the value
    #[arg(long)]
    pub explain: bool,

    /// Only the value's bytes from this offset (a large value read in parts)
    #[arg(long, value_name = "BYTES", conflicts_with = "explain")]
    pub offset: Option<u64>,

    /// At most this many bytes of the value (from --offset, or from the start)
    #[arg(long, value_name = "BYTES", conflicts_with = "explain")]
    pub length: Option<u64>,

    /// Read this version of the binding (1, 2, 3, ... in its scope; `history NAME` lists them)
    #[arg(long, value_name = "V", value_parser = at_least(1), conflicts_with_all = ["explain", "as_of"])]
    pub version: Option<i64>,

    /// Read the binding as it stood when the record after this one was appended (a record id,
    /// as `log` shows it), or at this UTC time ('2026-11-24 10:15:00'), looked up through the
    /// scope chain as `get` would have then
    #[arg(long, value_name = "RECORD|TIME", conflicts_with = "explain")]
    pub as_of: Option<String>,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Binding name
    pub name: String,

    /// The binding of this execution's scope, or of the nearest scope above it that has one
    /// (omitted: the root scope)
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = at_least(1))]
    pub execution_id: Option<i64>,

    /// At most this many versions, newest first (1 to 100)
    #[arg(long, value_name = "N", default_value_t = 20,
          value_parser = clap::value_parser!(u64).range(1..=100))]
    pub limit: u64,

    /// Only versions older than this one (to page back through a long history)
    #[arg(long, value_name = "V", value_parser = at_least(1))]
    pub before: Option<i64>,
}

#[derive(Debug, Args)]
pub struct ExecAppendArgs {
    /// Statement index in the program (taken from the start with --ends)
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = at_least(0),
          required_unless_present = "ends")]
    pub index: Option<i64>,

    /// Statement text, e.g. 'session "Research AI safety"' (taken from the start with --ends)
    #[arg(long, value_name = "STMT", required_unless_present = "ends")]
    pub text: Option<String>,

    /// End the construct that record ID started: its index, text and parent are the start's,
    /// and it ends once (again: the same id)
    #[arg(long, value_name = "ID", allow_hyphen_values = true, value_parser = at_least(1),
          conflicts_with = "key")]
    pub ends: Option<i64>,

    /// What a start opens, where its text is not the program's own (`branch` for a branch of
    /// a parallel); read from the text's leading keyword otherwise
    #[arg(long, value_name = "KIND", value_parser = construct_kinds())]
    pub construct: Option<String>,

    /// Record status
    #[arg(long, value_enum)]
    pub status: Status,

    /// Id of the enclosing execution record (for nested blocks)
    #[arg(long, value_name = "ID", allow_hyphen_values = true, value_parser = at_least(1))]
    pub parent: Option<i64>,

    /// A JSON object, e.g. '{"parallel_id": "p1", "branch": "a"}'
    #[arg(long, value_name = "JSON")]
    pub metadata: Option<String>,

    /// Error message (for failed records)
    #[arg(long, value_name = "MSG")]
    pub error: Option<String>,

    /// Idempotency key: a retry with the same key and record appends nothing and prints the
    /// first one's id (safe after a lost connection); the same key on another record is refused
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,

    #[command(flatten)]
    pub principal: PrincipalArg,
}

/// The constructs `exec-append --construct` names: those with a start record.
fn construct_kinds() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        crate::language::NAMES
            .iter()
            .filter(|(_, k)| k.opens())
            .map(|(n, _)| *n),
    )
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Do it (without: only show what would be done)
    #[arg(long, short = 'y')]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub struct QueryArgs {
    /// One read-only SQL statement, e.g. "SELECT name, kind FROM bindings"
    pub sql: String,
    /// Stop the statement after this long (exit 6), e.g. 30s, 5m
    #[arg(long, value_name = "DUR", default_value = "30s")]
    pub timeout: String,
}

words! {
    /// The kinds a binding may have (the spec's `bindings.kind`).
    Kind {
        Input => "input",
        Output => "output",
        Let => "let",
        Const => "const",
    }
}

words! {
    /// Execution record statuses: the spec's schema comment plus the ones its append-only
    /// examples write (started, iteration, joined, exited, retry).
    Status {
        Pending => "pending",
        Executing => "executing",
        Started => "started",
        Completed => "completed",
        Failed => "failed",
        Skipped => "skipped",
        Iteration => "iteration",
        Joined => "joined",
        Exited => "exited",
        Retry => "retry",
    }
}

/// Who is acting: `--as NAME`, else PROSE_PRINCIPAL, else the login name.
#[derive(Debug, Args)]
pub struct PrincipalArg {
    /// Act as this principal (default: PROSE_PRINCIPAL, else the login name; a write with
    /// neither is recorded as the account it runs as)
    #[arg(long = "as", env = "PROSE_PRINCIPAL", value_name = "PRINCIPAL")]
    pub principal: Option<String>,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct GatesArgs {
    #[command(subcommand)]
    pub command: Option<GatesCommand>,

    #[command(flatten)]
    pub list: GatesListArgs,
}

/// Listing options (`prose-state gates` with no subcommand).
#[derive(Debug, Args)]
pub struct GatesListArgs {
    /// Which gates to list
    #[arg(long, value_enum, default_value_t = GateStatus::Pending)]
    pub status: GateStatus,

    /// The pending gates (the default; the spec's spelling `--pending` is accepted)
    #[arg(long, conflicts_with = "status")]
    pub pending: bool,

    /// Only pending gates whose deadline falls within this long from now (e.g. 1h)
    #[arg(long, value_name = "DUR")]
    pub expiring: Option<String>,

    /// Read every run's own database rather than the project catalog (finds what raw SQL
    /// changed behind prose-state's back)
    #[arg(long)]
    pub scan: bool,

    /// At most this many gates, the oldest first
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub limit: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GateStatus {
    Pending,
    Approved,
    Rejected,
    Timeout,
    All,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once, never moved about
pub enum GatesCommand {
    /// Create a pending gate in the run (--run), with its audit event and execution record
    Create(GateCreateArgs),
    /// Show a gate in full with its audit history (logs a `viewed` event)
    Show(GateShowArgs),
    /// Block until a gate is decided or times out; exit 0 approved, 5 rejected, 6 timed out,
    /// 7 still pending when the wait ran out
    Wait(GateWaitArgs),
    /// Print the audit trail (of every run unless --run is given)
    Audit(GateAuditArgs),
    /// Recompute the audit log's hash chain; exit 0 intact, 9 broken, 10 unattested
    Verify(GateVerifyArgs),
    /// Do what is due on every run's pending gates (of --run only, when given): timeouts,
    /// escalations and reminders, each once. For a cron job where nothing else reads the gates
    Sweep(GateSweepArgs),
}

#[derive(Debug, Args)]
pub struct GateSweepArgs {
    /// Read every run from its own database (the catalog brought up to date), not only those
    /// the catalog says have something due: for deadlines raw SQL changed behind prose-state's
    /// back
    #[arg(long)]
    pub scan: bool,
}

#[derive(Debug, Args)]
#[command(override_usage = "prose-state gates verify [OPTIONS] [[RUN] GATE]")]
pub struct GateVerifyArgs {
    /// [RUN] GATE: check one gate of the run (id, directory or state.db path; default:
    /// --run, else PROSE_RUN): the run's chain and that gate against its log; exit 3 when
    /// the run has no such gate
    #[arg(value_name = "GATE", num_args = 0..=2)]
    pub ids: Vec<String>,
    /// Also require every approval and rejection to carry a signature by the approval page's
    /// key the project pinned (`principals require --signed`): unsigned ones are unattested
    /// (exit 10), signatures that do not match tampered (exit 9)
    #[arg(long)]
    pub signed: bool,
    /// The key to check signatures against (ed25519:HEX) instead of the one the project
    /// pinned: for a checker that trusts nothing its agents can write
    #[arg(long, value_name = "KEY", requires = "signed")]
    pub key: Option<String>,
    /// Count a signed decision that a fork carried from RUN, the run it was made in
    /// (otherwise unattested, exit 10: a fork of another run made under a run's id would carry
    /// that run's decisions)
    #[arg(long, value_name = "RUN", requires = "signed")]
    pub accept_carried_from: Option<String>,
}

#[derive(Debug, Args)]
pub struct GateCreateArgs {
    /// Gate id, unique within the run (the language's `approve GATE_ID:`)
    pub gate_id: String,

    /// The prompt shown to whoever decides
    #[arg(long, value_name = "TEXT")]
    pub prompt: String,

    /// Open the gate again if it exists and was decided (rejected, timed out or approved): its
    /// next instance, for `retry` and for a gate inside a loop
    #[arg(long)]
    pub reopen: bool,

    /// Principals who may decide, comma-separated; `user` admits anyone not `agent:...`
    #[arg(
        long,
        value_name = "P,P",
        value_delimiter = ',',
        default_value = "user"
    )]
    pub allow: Vec<String>,

    /// The bindings the decision is about, comma-separated (at most 16), looked up from the
    /// gate's scope: shown beside the prompt, their content sealed with the decision. A change
    /// of one after the decision and before the VM consumes it makes the decision stale (exit
    /// 11). Default: none, so the program's own writes never make a decision stale
    #[arg(long, value_name = "NAME,NAME", value_delimiter = ',')]
    pub inputs: Vec<String>,

    /// Deadline from now: 30s, 30m, 4h, 7d, 2h30m, 1d12h; past it the gate times out
    #[arg(long, value_name = "DUR")]
    pub timeout: Option<String>,

    /// What the program does on rejection or timeout, stored as given: throw ["msg"],
    /// retry [label], continue, session "prompt", or a bare string (throw)
    #[arg(long, value_name = "ACTION")]
    pub on_reject: Option<String>,

    /// The enclosing execution: parent of the `approve GATE_ID:` record appended
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = at_least(1))]
    pub execution_id: Option<i64>,

    /// Statement index of the `approve` statement, for the appended record
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = at_least(0))]
    pub index: Option<i64>,

    /// A JSON object of additional data
    #[arg(long, value_name = "JSON")]
    pub metadata: Option<String>,

    /// Approvals needed: the gate is approved when N distinct allowed principals approved
    /// it, each authenticated (a token, or the approval page)
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub require: u32,

    /// With `off`, a rejection needs N rejections too; by default one rejection by an
    /// allowed principal rejects the gate
    #[arg(long, value_name = "on|off", default_value = "on")]
    pub veto: OnOff,

    /// Neither the principal who started the run nor the one creating the gate may approve
    /// it (so does the project's `principals policy --separate-duties on`)
    #[arg(long)]
    pub no_self_approve: bool,

    /// A reminder this long before the deadline (repeatable): the on-gate hook hears
    /// `reminder` once for each, before each deadline the gate has. Needs --timeout
    #[arg(long, value_name = "DUR")]
    pub remind: Vec<String>,

    /// At the deadline the gate does not time out: once, it opens to this allow entry as well
    /// (`group:G` or a principal), audited as `escalated`, with a new deadline. Needs --timeout
    #[arg(long, value_name = "ENTRY")]
    pub escalate_to: Option<String>,

    /// The new deadline after an escalation, from the old one (default: --timeout again)
    #[arg(long, value_name = "DUR", requires = "escalate_to")]
    pub escalate_timeout: Option<String>,

    /// Who creates the gate (recorded for separation of duties)
    #[command(flatten)]
    pub principal: PrincipalArg,
    #[command(flatten)]
    pub token: TokenArg,
}

/// `[RUN] GATE`: a gate, and the run it is in when that is not `--run` or PROSE_RUN. A
/// command that takes it overrides its usage line: clap would print `<RUN> [GATE]...` for the
/// optional run before the gate.
#[derive(Debug, Args)]
pub struct RunGate {
    /// [RUN] GATE: the run (id, directory or state.db path; default: --run, else PROSE_RUN),
    /// then the gate id
    #[arg(value_name = "GATE", num_args = 1..=2, required = true)]
    pub ids: Vec<String>,
}

impl RunGate {
    /// The run named before the gate, if one was.
    pub fn run(&self) -> Option<&str> {
        (self.ids.len() == 2).then(|| self.ids[0].as_str())
    }

    pub fn gate(&self) -> &str {
        self.ids.last().map_or("", String::as_str)
    }
}

#[derive(Debug, Args)]
#[command(override_usage = "prose-state gates show [OPTIONS] [RUN] GATE")]
pub struct GateShowArgs {
    #[command(flatten)]
    pub target: RunGate,
    #[command(flatten)]
    pub principal: PrincipalArg,
}

#[derive(Debug, Args)]
#[command(
    override_usage = "prose-state gates wait [OPTIONS] [RUN] GATE\n       prose-state gates wait --all|--any [OPTIONS] GATE GATE..."
)]
pub struct GateWaitArgs {
    /// [RUN] GATE: the run (id, directory or state.db path; default: --run, else PROSE_RUN),
    /// then the gate id; with --all or --any, every argument is a gate of the run --run or
    /// PROSE_RUN names
    #[arg(value_name = "GATE", num_args = 1.., required = true)]
    pub ids: Vec<String>,
    /// Wait for every gate: exit 0 when all are approved, and fail as soon as one fails
    #[arg(long, conflicts_with_all = ["any", "instance"])]
    pub all: bool,
    /// Wait for any gate: exit 0 as soon as one is approved, and fail only when all failed
    #[arg(long, conflicts_with = "instance")]
    pub any: bool,
    /// Stop waiting after this long (default: until the gate is decided or times out); 0
    /// looks once and answers at once (exit 7 while the gate is pending)
    #[arg(long, value_name = "DUR")]
    pub timeout: Option<String>,
    /// How often to look [default: 1s; 30s when the wait is woken by the commit, as it is
    /// unless PROSE_STATE_WAKE=poll or no listening connection or file watch can be had]
    #[arg(long, value_name = "DUR")]
    pub poll: Option<String>,
    /// Treat a decision nothing attests (written with the spec's own SQL by another tool, or
    /// sealed on another machine) as made, instead of exiting 10
    #[arg(long, conflicts_with = "require_signed")]
    pub accept_unattested: bool,
    /// Count a decision only if the approval page signed it with the key the project pinned
    /// (`principals require --signed`): exit 10 when it is not signed, 9 when its signature
    /// does not match
    #[arg(long)]
    pub require_signed: bool,
    /// The key to check the signature against (ed25519:HEX) instead of the one the project
    /// pinned: for a waiter that trusts nothing its agents can write
    #[arg(long, value_name = "KEY", requires = "require_signed")]
    pub key: Option<String>,
    /// Count a signed decision that a fork carried from RUN, the run it was made in, for a
    /// VM that forked that run itself (otherwise unattested, exit 10: a fork of another run
    /// made under this run's id would carry that run's decisions)
    #[arg(long, value_name = "RUN", requires = "require_signed")]
    pub accept_carried_from: Option<String>,
    /// Wait for the decision of this opening of the gate (the `instance` that `gates create`
    /// printed, or `resume` gives): if the gate was opened again since, the answer is that
    /// opening's own outcome, never the new opening's decision
    #[arg(long, value_name = "N", value_parser = at_least(1))]
    pub instance: Option<i64>,
}

#[derive(Debug, Args)]
pub struct GateAuditArgs {
    /// Only this gate's events
    #[arg(long, value_name = "GATE")]
    pub gate: Option<String>,
    /// Only this principal's events
    #[arg(long, value_name = "PRINCIPAL")]
    pub principal: Option<String>,
    /// Only events within this long before now (e.g. 24h)
    #[arg(long, value_name = "DUR")]
    pub since: Option<String>,
}

#[derive(Debug, Args)]
#[command(override_usage = "prose-state approve [OPTIONS] [RUN] GATE")]
pub struct ApproveArgs {
    #[command(flatten)]
    pub target: RunGate,
    /// A comment recorded with the approval
    #[arg(long, value_name = "TEXT")]
    pub comment: Option<String>,
    /// Reject instead (the spec's `prose approve RUN GATE --reject --reason ...`)
    #[arg(long, requires = "reason", conflicts_with = "approve")]
    pub reject: bool,
    /// Approve (the default; the spec's spelling `--approve` is accepted)
    #[arg(long)]
    pub approve: bool,
    /// Why the gate is rejected (with --reject)
    #[arg(long, value_name = "TEXT", requires = "reject")]
    pub reason: Option<String>,
    /// Decide without asking (required when stdin is not a terminal)
    #[arg(long, short = 'y')]
    pub yes: bool,
    #[command(flatten)]
    pub principal: PrincipalArg,
    #[command(flatten)]
    pub token: TokenArg,
}

#[derive(Debug, Args)]
#[command(override_usage = "prose-state reject [OPTIONS] [RUN] GATE")]
pub struct RejectArgs {
    #[command(flatten)]
    pub target: RunGate,
    /// Why the gate is rejected (required)
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
    /// Decide without asking (required when stdin is not a terminal)
    #[arg(long, short = 'y')]
    pub yes: bool,
    #[command(flatten)]
    pub principal: PrincipalArg,
    #[command(flatten)]
    pub token: TokenArg,
}

/// A decider's token: the principal it authenticates decides.
#[derive(Debug, Args)]
pub struct TokenArg {
    /// Act as the principal this token authenticates: a file holding the token
    /// `principals add` issued (without it: PROSE_TOKEN, if set)
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct PrincipalsArgs {
    #[command(subcommand)]
    pub command: Option<PrincipalsCommand>,
}

#[derive(Debug, Subcommand)]
pub enum PrincipalsCommand {
    /// Issue a token for NAME, printed once (kept only as an Argon2id hash); a revoked
    /// principal gets a new one
    Add(PrincipalAddArgs),
    /// List the principals, with when each token was issued or revoked (never a token)
    List,
    /// Revoke NAME's token: it no longer authenticates anything
    Revoke(PrincipalNameArgs),
    /// Require a token for every decision (`approve`/`reject` refuse `--as` alone), or with
    /// --signed a decision signed by the approval page; --off lifts it
    Require(RequireArgs),
    /// The groups an allow list names as group:G: add or remove members, or list them
    /// (kept in the principals book's sealed log)
    Group(GroupArgs),
    /// The project's policy: with --separate-duties on, no gate made from then on may be
    /// approved by the principal who started its run or created it (without an option: show it)
    Policy(PolicyArgs),
    /// Bind the book to this project (or server database) after moving or restoring it on
    /// purpose: a book bound elsewhere admits no one here. Signed by the pinned key's holder
    /// when one is pinned
    Rebind,
}

#[derive(Debug, Args)]
pub struct GroupArgs {
    #[command(subcommand)]
    pub command: GroupCommand,
}

#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// Add principals to GROUP (made by its first member)
    Add(GroupMembersArgs),
    /// Remove principals from GROUP: an approval they gave a gate that has not reached its
    /// quorum stops counting
    Remove(GroupMembersArgs),
    /// Every group and its members
    List,
}

#[derive(Debug, Args)]
pub struct GroupMembersArgs {
    /// The group, as an allow list names it after group:
    pub group: String,
    /// The principals
    #[arg(required = true)]
    pub principals: Vec<String>,
}

#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// Separation of duties for gates made from now on: the run's starter and the gate's
    /// creator may not approve it
    #[arg(long, value_name = "on|off")]
    pub separate_duties: Option<OnOff>,
}

/// A switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Debug, Args)]
pub struct PrincipalAddArgs {
    /// The principal, as decisions will record it
    pub name: String,
    /// An agent: recorded as agent:NAME, which can never decide a `user` gate
    #[arg(long)]
    pub agent: bool,
    /// Also add the principal to this group (repeatable)
    #[arg(long = "group", value_name = "GROUP")]
    pub groups: Vec<String>,
}

#[derive(Debug, Args)]
pub struct PrincipalNameArgs {
    /// The principal (agent:NAME for an agent)
    pub name: String,
}

#[derive(Debug, Args)]
pub struct RequireArgs {
    /// Lift the requirement (of a token, and of signed decisions)
    #[arg(long, conflicts_with_all = ["signed", "key"])]
    pub off: bool,
    /// Also require every decision to be signed by the approval page (`serve`): authorizes
    /// its key (as the audit key's holder) and pins it (as the key's holder: run as the user
    /// serve runs as); the command line may then not decide, and every later change to the
    /// book is that key's holder's
    #[arg(long)]
    pub signed: bool,
    /// The key (ed25519:HEX, as `serve --show-key` prints it): authorized only, when this
    /// user does not hold it (its holder then pins it); with a key pinned, re-pinned by the
    /// pinned key's holder; default: this user's serve key, made if it has none
    #[arg(long, value_name = "KEY", requires = "signed")]
    pub key: Option<String>,
}

/// Where a persistent agent's memory lives: the language's `persist:` values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentScope {
    /// The run's state.db (needs --run): `persist: true`
    Execution,
    /// <root>/.prose/agents.db (or the project's PostgreSQL server): `persist: project`
    Project,
    /// ~/.prose/agents.db (PROSE_HOME overrides the home directory): `persist: user`
    User,
    /// `persist: "PATH"`: PATH/agents.db under the project root. The path is relative, has a
    /// `/`, and never leaves the root (no `..`); kept as given, without a trailing `/`.
    Path(String),
}

impl AgentScope {
    /// The word, or the path, as `--scope` takes it.
    pub fn as_str(&self) -> &str {
        match self {
            AgentScope::Execution => "execution",
            AgentScope::Project => "project",
            AgentScope::User => "user",
            AgentScope::Path(path) => path,
        }
    }

    /// The `scope` column's value: `custom` for a path, as the spec's schema has it.
    pub fn column(&self) -> &'static str {
        match self {
            AgentScope::Execution => "execution",
            AgentScope::Project => "project",
            AgentScope::User => "user",
            AgentScope::Path(_) => "custom",
        }
    }

    /// `--scope`'s value: execution, project, user, or a path (see [`AgentScope::Path`]).
    pub fn parse(value: &str) -> std::result::Result<Self, String> {
        Ok(match value {
            "execution" => AgentScope::Execution,
            "project" => AgentScope::Project,
            "user" => AgentScope::User,
            path if path.contains('/') => {
                let bad = |why: &str| {
                    Err(format!(
                        "{why}: {} (a path is relative to the project root, as `persist: \
                         \".prose/custom/agent/\"` gives it)",
                        crate::error::shown(path)
                    ))
                };
                if path.chars().any(char::is_control) {
                    return bad("a path has no control character");
                }
                let p = std::path::Path::new(path);
                if p.is_absolute() {
                    return bad("a scope's path is relative to the project root");
                }
                if p.components().any(|c| {
                    !matches!(
                        c,
                        std::path::Component::Normal(_) | std::path::Component::CurDir
                    )
                }) {
                    return bad("a scope's path stays inside the project root (no `..`)");
                }
                if !p
                    .components()
                    .any(|c| matches!(c, std::path::Component::Normal(_)))
                {
                    return bad("a scope's path names a directory");
                }
                AgentScope::Path(path.trim_end_matches('/').to_string())
            }
            other => {
                return Err(format!(
                    "scope is execution, project, user, or a path with a `/`: {}",
                    crate::error::shown(other)
                ))
            }
        })
    }
}

impl std::fmt::Display for AgentScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Where the agent's memory lives: execution (persist: true), project, user, or a path
    /// (persist: "PATH": PATH/agents.db under the project root)
    #[arg(long, value_parser = AgentScope::parse, default_value_t = AgentScope::Execution, global = true)]
    pub scope: AgentScope,

    /// The home directory for user scope [default: $HOME]
    #[arg(
        long,
        env = "PROSE_HOME",
        value_name = "DIR",
        global = true,
        hide_env_values = true
    )]
    pub home: Option<PathBuf>,

    #[command(subcommand)]
    pub command: AgentCommand,
}

#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Print an agent's memory (exit 3 if it has none)
    Memory {
        /// Agent name
        name: String,
    },
    /// Replace an agent's memory: VALUE, `-` or piped stdin, or --file
    Remember {
        /// Agent name
        name: String,
        /// The new memory; `-`, or nothing with piped input, reads stdin
        #[arg(conflicts_with = "file")]
        value: Option<String>,
        /// Read the memory from this file
        #[arg(long, value_name = "PATH")]
        file: Option<PathBuf>,
    },
    /// Append a segment (one invocation's record) and print its number
    Segment {
        /// Agent name
        name: String,
        /// The prompt the agent was given
        #[arg(long, value_name = "TEXT")]
        prompt: String,
        /// What it did
        #[arg(long, value_name = "TEXT")]
        summary: String,
    },
    /// List the agents in the scope
    List,
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
#[command(args_conflicts_with_subcommands = true)]
pub struct ImportsArgs {
    #[command(subcommand)]
    pub command: Option<ImportsCommand>,
}

#[derive(Debug, Subcommand)]
pub enum ImportsCommand {
    /// Register an import alias (idempotent; a different source needs --replace)
    Add(ImportAddArgs),
}

#[derive(Debug, Args)]
pub struct ImportAddArgs {
    /// The alias its bindings are prefixed with (`research` for `research.findings`)
    pub alias: String,
    /// Where the program was imported from
    #[arg(long, value_name = "URL")]
    pub source: String,
    /// JSON schema of its inputs
    #[arg(long, value_name = "JSON")]
    pub inputs_schema: Option<String>,
    /// JSON schema of its outputs
    #[arg(long, value_name = "JSON")]
    pub outputs_schema: Option<String>,
    /// Replace an alias already registered with a different source or schemas
    #[arg(long)]
    pub replace: bool,
}

words! {
    FinalStatus {
        Completed => "completed",
        Failed => "failed",
        Interrupted => "interrupted",
    }
}

#[derive(Debug, Args)]
pub struct FinishArgs {
    /// The run's final status
    #[arg(long, value_enum)]
    pub status: FinalStatus,
    /// Why it failed or was interrupted
    #[arg(long, value_name = "MSG")]
    pub error: Option<String>,
}

words! {
    RunStatus {
        Running => "running",
        Completed => "completed",
        Failed => "failed",
        Interrupted => "interrupted",
    }
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
    pub status: Option<RunStatus>,
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
