//! A run's own state: `init`, `bind`, `get`, `history`, `exec-append`, `query`, `imports` and
//! `finish`, with the kinds and statuses they take.

use super::at_least;
use super::principals::{PrincipalArg, TokenArg};
use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;

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
    pub status: crate::model::ExecStatus,

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
    /// The statuses a run may finish with (`model::RunStatus`'s ending ones).
    FinalStatus {
        Completed => "completed",
        Failed => "failed",
        Interrupted => "interrupted",
    }
}

impl From<FinalStatus> for crate::model::RunStatus {
    fn from(s: FinalStatus) -> Self {
        crate::model::RunStatus::parse(s.as_str())
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
