//! `resume`: one document with everything a VM needs to continue a run from the database
//! alone, computed here from plain rows so that every backend answers alike.
//!
//! Here, the document's types; `frame` rebuilds where the run stands from its records,
//! `answer` reads the answers (`--all`, the bounded one, the unfinished runs) and runs the
//! command, and `render` writes them as text.

mod answer;
mod frame;
mod render;

pub(super) use frame::{
    failure_escapes, not_after_its_end, not_an_abandoned_result, open_inside, open_records,
};

use super::gates::IntegrityView;
use crate::model::{ExecStatus as S, RunStatus};
use crate::store::{ExecutionRow, STARTS};
use serde::Serialize;
use serde_json::Value;

#[derive(Debug, Serialize)]
pub struct RunPart {
    pub id: String,
    pub status: RunStatus,
    pub previous_status: RunStatus,
    pub program_path: Option<String>,
    pub error_message: Option<String>,
}

/// One execution record, with its metadata parsed.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    pub id: i64,
    pub statement_index: Option<i64>,
    pub statement_text: Option<String>,
    pub status: Option<S>,
    pub parent_id: Option<i64>,
    pub at: Option<String>,
    pub metadata: Option<Value>,
    /// Who appended it; omitted when not recorded (a raw writer, an older record).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// What a start opens (`exec-append --construct`, or its text's leading keyword; see
    /// `docs/language.md`); omitted for other records, and for a start whose text is not the
    /// program's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub construct: Option<crate::language::Kind>,
    /// For an `approve` record (its metadata names a gate): the gate as it stands now, which
    /// the record's own status (written when the gate was opened) does not say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate_now: Option<GateNow>,
}

/// A gate's state now, beside the record that opened it.
#[derive(Debug, Clone, Serialize)]
pub struct GateNow {
    pub status: crate::model::GateStatus,
    pub instance: Option<i64>,
    /// Set where its decision does not stand (tampered, or nothing attests it): why, and the
    /// gate's next step is `stop`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<String>,
}

impl Position {
    /// Each record of the position that opened a gate (`pending`, as `gates create` appends
    /// it) says how that gate stands now: the gate whose sealed opening appended it, else
    /// (an opening from before openings sealed it) the one its statement names. Never a gate
    /// a rewritten text or metadata names, and never on the VM's own `completed` or `failed`
    /// record of the statement, which is logged already.
    fn mark_gates(&mut self, gates: &[GateNext]) {
        let events = self
            .open
            .iter_mut()
            .chain(self.current.as_mut())
            .chain(self.after.as_mut())
            .chain(self.last_event.as_mut());
        for e in events {
            if e.status != Some(S::Pending) {
                continue;
            }
            let claimed = gates.iter().find(|g| g.opened_records.contains(&e.id));
            let named = e
                .statement_text
                .as_deref()
                .and_then(crate::language::approved_gate);
            let unclaimed = |g: &&GateNext| g.opened_records.is_empty();
            let gate = claimed.or_else(|| {
                named.and_then(|id| gates.iter().filter(unclaimed).find(|g| g.id == id))
            });
            if let Some(g) = gate {
                e.gate_now = Some(GateNow {
                    status: g.status.clone(),
                    instance: g.instance,
                    stop: (g.next_step.action == "stop").then(|| {
                        g.next_step
                            .argument
                            .clone()
                            .unwrap_or_else(|| g.integrity.state.to_uppercase())
                    }),
                });
            }
        }
    }
}

impl From<&ExecutionRow> for Event {
    fn from(r: &ExecutionRow) -> Self {
        let m = meta(r);
        let start = r
            .status
            .as_ref()
            .is_some_and(|s| STARTS.contains(&s.as_str()));
        Event {
            construct: start
                .then(|| crate::language::construct_of(r.statement_text.as_deref(), m.as_ref()))
                .flatten(),
            id: r.id,
            statement_index: r.statement_index,
            statement_text: r.statement_text.clone(),
            status: r.status.clone(),
            parent_id: r.parent_id,
            at: r.at().map(str::to_string),
            metadata: m,
            by: r.principal.clone(),
            gate_now: None,
        }
    }
}

pub(super) fn meta(r: &ExecutionRow) -> Option<Value> {
    r.metadata
        .as_deref()
        .and_then(|m| serde_json::from_str(m).ok())
}

#[derive(Debug, Serialize)]
pub struct Position {
    /// The innermost open construct: the latest record that started (`executing`/`started`)
    /// and was not closed. A start is closed by a later `completed`/`failed`/`skipped`/
    /// `joined`/`exited` record of the same statement (same index and text) that has either
    /// the same parent (the guide's shape) or the start itself as its parent (the shape the
    /// guide taught before 0.x: `--parent "$BLOCK"` on the block's completion).
    pub current: Option<Event>,
    /// Every open construct, outermost first: blocks, `try:`, loops, `parallel:`.
    pub open: Vec<Event>,
    /// The latest record inside `current` (its children; the top level when nothing is open)
    /// that is not a start: the VM continues with the statement after it.
    pub after: Option<Event>,
    /// The latest record of all.
    pub last_event: Option<Event>,
    /// Inside a `catch`: the failure it caught (the record and its error), what `catch as
    /// err` binds. With a failure on its way to a `try:`'s handler (`handler`), that failure:
    /// what the catch binds next; on its way to the program's end, the message the run fails
    /// with (a gate's `throw "msg"`, not the person's reason).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caught: Option<Caught>,
    /// When `after` is a failure no retry takes (a `throw`, a failed statement, a retry's
    /// last attempt): what takes it instead of the statement after it, the catch of the
    /// nearest `try:` whose body it is in, a parallel's `on-fail` policy, or the program.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handler: Option<String>,
    /// With `handler`: the open constructs the failure leaves before it, innermost first,
    /// each ended `--status failed` before the handler starts (`exec-append` refuses a catch
    /// while one is open).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub leaves: Vec<i64>,
    /// When `after` is an `approve` record failed on its gate's rejection or timeout, and the
    /// gate's sealed `on_reject` is not `throw`: the gate and that `on_reject`, which takes
    /// the failure instead of any handler; the gate's `next_step` says what to do. Never set
    /// beside `handler`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_reject: Option<GateTakes>,
}

/// A failed `approve` record that its gate's `on_reject` takes ([`Position::on_reject`]).
#[derive(Debug, Clone, Serialize)]
pub struct GateTakes {
    pub gate: String,
    /// As sealed when the gate opened: `continue`, `retry STEP`, `session …`.
    pub on_reject: String,
}

/// The failure a `catch` caught.
#[derive(Debug, Clone, Serialize)]
pub struct Caught {
    pub record: i64,
    pub error: Option<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct Parallel {
    pub parallel_id: String,
    pub statement_index: Option<i64>,
    pub branches: Vec<String>,
    pub completed: Vec<String>,
    pub failed: Vec<String>,
    /// Branches neither completed nor failed, while the parallel still waits on them.
    pub outstanding: Vec<String>,
    pub joined: bool,
    /// `all` (the default), `first`, or `any` (with `count`), as the start recorded it.
    pub strategy: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
    /// `fail-fast` (the default), `continue` or `ignore`.
    pub on_fail: String,
    /// Why it waits on no branch any more, though some are not ended: `first` or `any` has
    /// its completions, or a `fail-fast` branch failed. Those branches are in `to_skip`: end
    /// them `--status skipped`, do not run them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub to_skip: Vec<String>,
    /// Branches ended `skipped` (cut short by `first`, `any` or `fail-fast`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// The branches started and not ended, each with what was done last inside it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub open_branches: Vec<OpenBranch>,
}

/// A branch started and not ended: where it goes on from.
#[derive(Debug, Serialize)]
pub struct OpenBranch {
    pub branch: String,
    /// Its start record (its frame, and the parent of what runs inside it).
    pub record: i64,
    /// The last thing done inside it; none yet when null.
    pub after: Option<String>,
    /// When that was a failure no retry takes: what takes it (the parallel's `on-fail`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handler: Option<String>,
    /// The innermost construct still open inside it (a block call, a loop, a `try:`): the
    /// branch goes on inside that, after what was done there, not from `after`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inside: Option<String>,
    /// The binding its session's result went into after its last record (its named result,
    /// or a `--key`ed append with its record's id): the session ran; log its completion, do
    /// not run it again. Such a branch is never in `to_skip`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivered: Option<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct Loop {
    pub loop_id: String,
    pub statement_index: Option<i64>,
    /// The latest iteration recorded as done (`iteration` and `exited` records).
    pub iteration: Option<i64>,
    /// The iteration in progress (one after the latest done), while the loop has not exited.
    pub current: Option<i64>,
    pub max: Option<i64>,
    pub exited: bool,
    pub reason: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Retry {
    pub id: i64,
    pub statement_index: Option<i64>,
    pub statement_text: Option<String>,
    /// The attempt the latest record is about: in progress after `retry`, failed after
    /// `failed`.
    pub attempt: Option<i64>,
    pub max: Option<i64>,
    /// The error of the last failure.
    pub last_error: Option<String>,
    /// `running` (a `retry` record: the attempt is under way), `next` (an attempt failed and
    /// attempts are left: append `retry` with `next_attempt`, after the backoff), or
    /// `exhausted` (the last attempt failed: `handler` takes the failure).
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_attempt: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff: Option<String>,
    /// What takes an exhausted failure: the catch of an open `try:`, a parallel's `on-fail`
    /// policy, or the program failing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handler: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct BindingInfo {
    pub name: String,
    pub kind: Option<String>,
    pub execution_id: Option<i64>,
    /// `root` or `execution`.
    pub scope: &'static str,
    pub bytes: u64,
    pub attachment_path: Option<String>,
    pub first_line: String,
    /// Written after the newest record of its frame: the statement that wrote it was not
    /// logged before the VM stopped. Log that statement's completion; do not run it again.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unlogged: bool,
    /// Unlogged, the `--key` of its newest `--append`/`--merge`: in a `parallel for` whose
    /// branches append to one list with their own record's id as key, the branch whose
    /// session ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unlogged_key: Option<String>,
    /// The gate whose decision wrote it (its answer, or an approver's edit): no session's
    /// output, nothing to log.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_gate: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct AgentInfo {
    pub name: String,
    pub scope: String,
    pub segments: i64,
    pub memory_bytes: Option<usize>,
    /// Its newest segment (of this run's memory) was appended after the run's newest record:
    /// its session ran and the statement was not logged before the VM stopped. Log that
    /// statement's completion; do not run the session again.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unlogged: bool,
}

/// What the VM does next about a gate.
#[derive(Debug, Serialize)]
pub struct NextStep {
    /// continue, wait, throw, retry or session; `stop` for a gate that disagrees with its
    /// sealed log, or whose decision nothing attests (its decision cannot be relied on);
    /// `reopen` for a stale decision (open the gate again, and wait for the new decision)
    pub action: String,
    /// The message, label or prompt the action carries, as written.
    pub argument: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct GateNext {
    pub id: String,
    pub status: crate::model::GateStatus,
    /// The gate's newest opening, as its sealed log says (the instance `gates wait
    /// --instance` takes); null when nothing sealed opened it.
    pub instance: Option<i64>,
    pub next_step: NextStep,
    pub on_reject: Option<String>,
    pub resolved_by: Option<String>,
    pub resolved_at: Option<String>,
    /// The decision's comment or reason, as its sealed event has it (only for a gate whose
    /// row agrees with its log): what a `retry` or a `session` after a rejection works from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Under `retry`: the newest record logged in the gate's frame after its `approve`
    /// record failed, when there is one. The step ran again since: open the gate again now
    /// (`gates create G --reopen`), rather than run the step once more. Under `session`: the
    /// same record is the session's: it ran, go on after it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retried_since: Option<i64>,
    /// Rejected or timed out under `throw` or `continue`: the VM's record of its statement
    /// logged `failed` after its newest opening, when there is one. That record is its
    /// `on_reject`, taken; the position says where the run went on (not thrown again).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logged_failed: Option<i64>,
    /// The records its sealed openings appended (`approve G:`, pending), oldest first.
    #[serde(skip)]
    pub opened_records: Vec<i64>,
    pub timeout_at: Option<String>,
    /// Where the gate stands against its audit log (as `gates show` reports it). A tampered
    /// gate's next step is `stop`, whatever its status says.
    pub integrity: IntegrityView,
    /// A pending team's gate's votes and schedule, in one line ("1 of 2 approvals: bob;
    /// waiting for group:release; escalates to group:oncall at the deadline").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// Why its decision no longer stands (an input changed before it was consumed): its next
    /// step is `reopen`, and `resume` exits 11.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<String>,
    /// The answer its sealed decision gave (`approve --response`), in one line of at most 200
    /// characters, and the binding it was written to: read the whole with `get` or `gates
    /// wait`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// The approvals' edits of its inputs, one line each (`NAME by P: version A -> B (X -> Y
    /// bytes)`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub edited: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct ResumeDoc {
    pub run: RunPart,
    pub position: Position,
    /// Per statement index, its latest record (append-only: the latest row wins).
    pub statements: Vec<Event>,
    pub parallel: Vec<Parallel>,
    pub loops: Vec<Loop>,
    pub retries: Vec<Retry>,
    pub bindings: Vec<BindingInfo>,
    pub agents: Vec<AgentInfo>,
    pub gates: Vec<GateNext>,
    /// Gates that got a `resumed` audit event now.
    pub gates_logged_resumed: Vec<String>,
}

pub(super) fn str_of(v: &Value, k: &str) -> Option<String> {
    match v.get(k)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

pub(super) fn branch_list(m: &Value) -> Vec<String> {
    match m.get("branches") {
        Some(Value::Array(bs)) => bs
            .iter()
            .map(|b| b.as_str().map_or_else(|| b.to_string(), str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

/// The most a bounded `resume` answer holds, in bytes of JSON (the human text is shorter).
pub const BOUND: usize = 16 * 1024;
/// Bindings in one bounded answer, unless `--limit` says otherwise.
pub const DEFAULT_BINDINGS: usize = 64;
/// The longest text kept of a statement, an error or an on_reject in a bounded answer.
const TEXT: usize = 200;

/// How much of the run a bounded answer leaves out, counted.
#[derive(Debug, Serialize)]
pub struct Counts {
    pub records: usize,
    /// Parallels, loops and retries still open (all of them are listed unless `truncated`).
    pub parallel: usize,
    pub loops: usize,
    pub retries: usize,
    /// Bindings in the whole run, every scope.
    pub bindings: usize,
    /// Bindings visible from the current scope (the nearest of each name).
    pub bindings_visible: usize,
    pub agents: usize,
    pub gates: usize,
}

/// `resume` by default: what the VM needs to continue, within [`BOUND`] bytes whatever the
/// run's size. The run, the position and the open constructs; parallels not joined, loops not
/// exited and retries outstanding; gates with their next steps (pending first); the bindings
/// visible from the current scope, by name, a page at a time; the counts of everything.
#[derive(Debug, Serialize)]
pub struct ResumeBrief {
    pub run: RunPart,
    pub position: Position,
    pub parallel: Vec<Parallel>,
    pub loops: Vec<Loop>,
    pub retries: Vec<Retry>,
    pub gates: Vec<GateNext>,
    /// The scope the bindings are seen from: the innermost open construct, or the root.
    pub scope: Option<i64>,
    pub bindings: Vec<BindingInfo>,
    pub agents: Vec<AgentInfo>,
    /// Pass as `--cursor` for the next page of bindings; null on the last page.
    pub next_cursor: Option<String>,
    pub counts: Counts,
    /// Something besides the bindings' pages was left out to stay within the bound (`--all`
    /// has everything).
    pub truncated: bool,
    pub gates_logged_resumed: Vec<String>,
}

crate::output::one_of!(
    /// What `resume` answers: bounded by default, everything with `--all`.
    ResumeAnswer {
        Brief(Box<ResumeBrief>),
        All(Box<ResumeDoc>),
        Runs(Box<Unfinished>),
    }
);

/// `resume` with no run named, when the project has several unfinished runs: each with what
/// tells it apart, newest first. Nothing is recorded; the VM names the run it continues.
#[derive(Debug, Serialize)]
pub struct Unfinished {
    /// No run was named.
    pub run: Option<String>,
    pub runs: Vec<Resumable>,
    /// Unfinished runs past the ones listed.
    pub more: usize,
    pub next_step: &'static str,
}

/// An unfinished run (running or interrupted), as `resume` without a run lists it.
#[derive(Debug, Serialize)]
pub struct Resumable {
    pub run_id: String,
    pub status: Option<RunStatus>,
    pub program: Option<String>,
    pub started_at: Option<String>,
    /// The run it was forked from, as its sealed genesis says: `run`, `record`, `at`.
    pub forked_from: Option<Value>,
    /// Its newest execution record: id, statement, status and time.
    pub newest_record: Option<Event>,
    pub pending_gates: i64,
}

/// The on_reject action as the language defines it: `throw ["msg"]` (the default),
/// `retry [label]`, `continue`, `session "prompt"`, or a `"message"` alone meaning throw
/// (read as tolerantly as it was stored: a value `gates create` checked before, or raw SQL's).
pub fn on_reject_step(on_reject: Option<&str>) -> NextStep {
    let text = on_reject.map(str::trim).unwrap_or("");
    let arg = |rest: &str| {
        let rest = rest.trim();
        (!rest.is_empty()).then(|| rest.to_string())
    };
    let word = text.split_whitespace().next().unwrap_or("");
    match word {
        "" => step("throw", None),
        "throw" => step("throw", arg(&text[5..])),
        "retry" => step("retry", arg(&text[5..])),
        "continue" if text == "continue" => step("continue", None),
        "session" => step("session", arg(&text[7..])),
        _ => step("throw", Some(text.to_string())),
    }
}

pub(super) fn step(action: &str, argument: Option<String>) -> NextStep {
    NextStep {
        action: action.into(),
        argument,
    }
}
