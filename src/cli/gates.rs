//! Approval gates: `gates` and its subcommands (create, show, wait, audit, verify, sweep),
//! `approve` and `reject`.

use super::at_least;
use super::principals::{OnOff, PrincipalArg, TokenArg};
use clap::{Args, Subcommand, ValueEnum};

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
    #[arg(long, value_enum, default_value_t = GateFilter::Pending)]
    pub status: GateFilter,

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

/// Which gates a listing shows: those of one status (`model::GateStatus`), or all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GateFilter {
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

    /// The answer an approval must give, as a JSON Schema (JSON, or @FILE holding it; at most
    /// 16 KiB, 8 levels): type, properties, required, additionalProperties (false), enum,
    /// const, minimum, maximum, minLength, maxLength, items, title, description, default.
    /// Sealed with the gate; `approve --response` is checked against it
    #[arg(long, value_name = "JSON|@FILE")]
    pub response_schema: Option<String>,

    /// A binding in the gate's scope that the decision writes with its answer (needs
    /// --response-schema): a version by the decider, on approval and on a rejection that
    /// answers. Only a decision writes it: `bind` to it is refused
    #[arg(long, value_name = "NAME", requires = "response_schema")]
    pub response_binding: Option<String>,

    /// Deadline from now: 30s, 30m, 4h, 7d, 2h30m, 1d12h; past it the gate times out
    #[arg(long, value_name = "DUR")]
    pub timeout: Option<String>,

    /// What the program does on rejection or timeout, as the language writes it: throw
    /// ["msg"], retry [label], continue, session "prompt", or a "message" alone (throw)
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
    /// The answer, as JSON or @FILE holding it (at most 64 KiB, 16 levels deep), checked
    /// against the gate's response schema and sealed with the decision; an approval needs
    /// one when the gate was opened with --response-schema
    #[arg(long, value_name = "JSON|@FILE")]
    pub response: Option<String>,
    /// Approve with an edit of an input the gate is about (repeatable; VALUE or @FILE, at
    /// most 1 MiB): a new version of that binding by you, in the decision's transaction, and
    /// the decision is about the edited version
    #[arg(long, value_name = "NAME=VALUE|@FILE", conflicts_with = "reject")]
    pub edit: Vec<String>,
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
    /// The answer, as JSON or @FILE holding it (at most 64 KiB, 16 levels deep), checked
    /// against the gate's response schema and sealed with the decision; optional on a
    /// rejection
    #[arg(long, value_name = "JSON|@FILE")]
    pub response: Option<String>,
    /// Decide without asking (required when stdin is not a terminal)
    #[arg(long, short = 'y')]
    pub yes: bool,
    #[command(flatten)]
    pub principal: PrincipalArg,
    #[command(flatten)]
    pub token: TokenArg,
}
