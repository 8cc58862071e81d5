//! `resume`: one document with everything a VM needs to continue a run from the database
//! alone, computed here from plain rows so that every backend answers alike.

use super::gates::IntegrityView;
use crate::model::{now, ExecStatus as S, RunStatus};
use crate::output::{human_duration, one_line, Render};
use crate::run::RunPaths;
use crate::store::{AgentRow, ExecQuery, ExecutionRow, GateRow, Store, ENDS, STARTS};
use anyhow::Result;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};

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
}

impl Position {
    /// Each record of the position that opened a gate says how the gate stands now.
    fn mark_gates(&mut self, gates: &[GateNext]) {
        let events = self
            .open
            .iter_mut()
            .chain(self.current.as_mut())
            .chain(self.after.as_mut())
            .chain(self.last_event.as_mut());
        for e in events {
            let named = e.metadata.as_ref().and_then(|m| str_of(m, "gate_id"));
            if let Some(g) = named.and_then(|id| gates.iter().find(|g| g.id == id)) {
                e.gate_now = Some(GateNow {
                    status: g.status.clone(),
                    instance: g.instance,
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
    /// err` binds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caught: Option<Caught>,
    /// When `after` is a failure no retry takes (a `throw`, a failed statement, a retry's
    /// last attempt): what takes it instead of the statement after it, the catch of the
    /// nearest `try:` whose body it is in, a parallel's `on-fail` policy, or the program.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handler: Option<String>,
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
}

#[derive(Debug, Serialize)]
pub struct AgentInfo {
    pub name: String,
    pub scope: String,
    pub segments: i64,
    pub memory_bytes: Option<usize>,
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

/// The on_reject action as the language defines it: `throw ["msg"]` (the default),
/// `retry [label]`, `continue`, `session "prompt"`, or a bare string meaning throw.
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

fn step(action: &str, argument: Option<String>) -> NextStep {
    NextStep {
        action: action.into(),
        argument,
    }
}

/// The next step for a gate whose newest sealed opening is `instance`: a pending one is
/// waited on as that opening.
fn next_step(g: &GateRow, instance: Option<i64>) -> NextStep {
    match g.status.as_str() {
        "approved" => step("continue", None),
        "pending" => step(
            "wait",
            Some(match instance {
                Some(n) => format!("gates wait {} --instance {n}", g.id),
                None => format!("gates wait {}", g.id),
            }),
        ),
        _ => on_reject_step(g.on_reject.as_deref()),
    }
}

type StatementKey = (Option<i64>, Option<String>, Option<i64>);

fn key(r: &ExecutionRow) -> StatementKey {
    (r.statement_index, r.statement_text.clone(), r.parent_id)
}

pub(super) fn str_of(v: &Value, k: &str) -> Option<String> {
    match v.get(k)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// The starts a terminal record closes: the start it names as its parent when that start is
/// the same statement (the older guide's block shape), else the latest open start with the
/// same index, text and parent.
/// Also gives, for each closing record of the older shape, the level it closes at (its
/// start's parent), so that it counts where its start stood.
fn open_starts(rows: &[ExecutionRow]) -> (Vec<&ExecutionRow>, HashMap<i64, Option<i64>>) {
    let mut open: Vec<&ExecutionRow> = Vec::new();
    let mut level: HashMap<i64, Option<i64>> = HashMap::new();
    let same = |a: &ExecutionRow, b: &ExecutionRow| {
        a.statement_index == b.statement_index && a.statement_text == b.statement_text
    };
    // Starts and ends as the narrow reads select them (`STARTS`, `ENDS`).
    let among = |list: &[&str], r: &ExecutionRow| {
        r.status
            .as_ref()
            .is_some_and(|s| list.contains(&s.as_str()))
    };
    for r in rows {
        if among(STARTS, r) {
            open.push(r);
        } else if among(ENDS, r) {
            // An end that names its start (`exec-append --ends`) closes exactly that start,
            // and is never read by its text.
            if let Some(start) = ends_of(r) {
                if let Some(i) = open.iter().rposition(|o| o.id == start) {
                    open.remove(i);
                }
                continue;
            }
            // An end of the guide's shape: the latest open start of the same statement at the
            // same level. It comes first: a start cannot end while a start inside it is still
            // open, so where the end also fits the older shape (its parent a start of the same
            // statement, as in a recursive call), it ends the inner one.
            let sibling = open.iter().rposition(|o| key(o) == key(r));
            let named = r
                .parent_id
                .and_then(|p| open.iter().rposition(|o| o.id == p && same(o, r)));
            let closed = match (sibling, named) {
                (Some(s), Some(n)) if s > n => Some(s),
                (_, Some(n)) => {
                    level.insert(r.id, open[n].parent_id);
                    Some(n)
                }
                (s, None) => s,
            };
            if let Some(i) = closed {
                open.remove(i);
            }
        }
    }
    (open, level)
}

/// The start an end names (`exec-append --ends`), if it names one.
fn ends_of(r: &ExecutionRow) -> Option<i64> {
    meta(r)?.get("ends")?.as_i64()
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

/// A `parallel:` block or a loop, gathered from the records that carry its id.
trait Construct: Sized {
    /// The metadata key that carries its id.
    const ID: &'static str;
    /// The statuses of the records that can change it (None: any).
    const ONLY: Option<&'static [&'static str]>;
    /// Begins it from the first record that carries its id (`m` its metadata).
    fn new(id: String, statement_index: Option<i64>, m: &Value) -> Self;
    /// Takes in one record that carries its id (`m` its metadata).
    fn record(&mut self, r: &ExecutionRow, m: &Value);
    /// Done reading: fills in what follows from the records, and says whether it is open.
    fn finish(&mut self) -> bool;
}

impl Construct for Parallel {
    const ID: &'static str = "parallel_id";
    const ONLY: Option<&'static [&'static str]> = None;

    fn new(parallel_id: String, statement_index: Option<i64>, m: &Value) -> Self {
        Parallel {
            parallel_id,
            statement_index,
            branches: branch_list(m),
            strategy: str_of(m, "strategy").unwrap_or_else(|| "all".into()),
            count: m.get("count").and_then(Value::as_i64),
            on_fail: str_of(m, "on_fail").unwrap_or_else(|| "fail-fast".into()),
            ..Default::default()
        }
    }

    fn record(&mut self, r: &ExecutionRow, m: &Value) {
        if m.get("branches").is_some() {
            self.branches = branch_list(m);
        }
        let status = r.status.as_ref();
        if let Some(branch) = str_of(m, "branch") {
            let list = match status {
                Some(S::Completed) => Some(&mut self.completed),
                Some(S::Failed) => Some(&mut self.failed),
                Some(S::Skipped) => Some(&mut self.skipped),
                _ => None,
            };
            if let Some(list) = list {
                if !list.contains(&branch) {
                    list.push(branch);
                }
            }
        }
        if status == Some(&S::Joined) {
            self.joined = true;
        }
    }

    fn finish(&mut self) -> bool {
        let not_ended: Vec<String> = self
            .branches
            .iter()
            .filter(|b| {
                !self.completed.contains(b) && !self.failed.contains(b) && !self.skipped.contains(b)
            })
            .cloned()
            .collect();
        let done = self.completed.len() as i64;
        self.decided = match self.strategy.as_str() {
            "first" if done >= 1 => Some("first: a branch completed".to_string()),
            "any" if done >= self.count.unwrap_or(1) => Some(format!(
                "any: {done} of {} completed",
                self.count.unwrap_or(1)
            )),
            _ if !self.failed.is_empty() && self.on_fail == "fail-fast" => {
                Some("fail-fast: a branch failed, the parallel fails".to_string())
            }
            _ => None,
        };
        if self.decided.is_some() {
            self.to_skip = not_ended;
        } else {
            self.outstanding = not_ended;
        }
        !self.joined
    }
}

impl Construct for Loop {
    const ID: &'static str = "loop_id";
    const ONLY: Option<&'static [&'static str]> = Some(&["iteration", "exited"]);

    fn new(loop_id: String, statement_index: Option<i64>, m: &Value) -> Self {
        Loop {
            loop_id,
            statement_index,
            max: m.get("max").and_then(Value::as_i64),
            ..Default::default()
        }
    }

    fn record(&mut self, r: &ExecutionRow, m: &Value) {
        // Only the loop's own records count iterations done: a body record that carries the
        // loop's id is inside an iteration, not the end of one.
        let done = matches!(r.status, Some(S::Iteration | S::Exited));
        if let (true, Some(i)) = (done, m.get("iteration").and_then(Value::as_i64)) {
            self.iteration = Some(self.iteration.map_or(i, |cur| cur.max(i)));
        }
        if let Some(max) = m.get("max").and_then(Value::as_i64) {
            self.max = Some(max);
        }
        if r.status == Some(S::Exited) {
            self.exited = true;
            self.reason = str_of(m, "reason");
        }
    }

    fn finish(&mut self) -> bool {
        self.current = (!self.exited).then(|| self.iteration.unwrap_or(0) + 1);
        !self.exited
    }
}

/// Every construct of a kind in `rows`, by id.
fn constructs<T: Construct>(rows: &[ExecutionRow]) -> Vec<T> {
    let mut by_id: BTreeMap<String, T> = BTreeMap::new();
    for r in rows {
        let Some(m) = meta(r) else { continue };
        let Some(id) = str_of(&m, T::ID) else {
            continue;
        };
        by_id
            .entry(id.clone())
            .or_insert_with(|| T::new(id, r.statement_index, &m))
            .record(r, &m);
    }
    let mut all: Vec<T> = by_id.into_values().collect();
    for c in &mut all {
        c.finish();
    }
    all
}

fn retry_of(r: &ExecutionRow, last_error: Option<String>) -> Retry {
    let m = meta(r).unwrap_or(Value::Null);
    let attempt = m.get("attempt").and_then(Value::as_i64);
    let max = m.get("max").and_then(Value::as_i64);
    let failed = r.status == Some(S::Failed);
    // `max` is the program's `retry: N`: up to N retries after the first attempt, so
    // attempts run from 1 to N + 1.
    let state = match (failed, attempt, max) {
        (false, _, _) => "running",
        (true, Some(a), Some(m)) if a <= m => "next",
        _ => "exhausted",
    };
    Retry {
        id: r.id,
        statement_index: r.statement_index,
        statement_text: r.statement_text.clone(),
        attempt,
        max,
        last_error: if failed {
            r.error_message.clone().or(last_error)
        } else {
            last_error
        },
        state,
        next_attempt: (state == "next").then(|| attempt.unwrap_or(0) + 1),
        backoff: str_of(&m, "backoff").filter(|_| state == "next"),
        handler: None,
    }
}

/// What takes a failure at record `r`, in words a VM acts on: the nearest `try:` whose body
/// it is in takes it (its catch; without a catch, its finally, and the failure goes on); a
/// failure inside a `catch` leaves its `try:` through that try's finally, if it has one; a
/// failure inside a branch goes to its parallel's `on-fail` policy; else the program fails.
/// The log does not say whether a `try:` has a catch or a finally (the program does), so
/// both ways are named.
fn handler_of(store: &mut dyn Store, r: &ExecutionRow) -> Result<String> {
    use crate::language::Kind;
    // An end of a catch or a finally that failed: the failure leaves that clause's try.
    let ended = match ends_of(r) {
        Some(start) => crate::store::record(store, start)?,
        None => None,
    };
    let clause = ended.as_ref().and_then(|s| {
        let k = s.construct();
        matches!(k, Some(Kind::Catch | Kind::Finally)).then(|| (k, s.parent_id))
    });
    let (mut leaving, mut then_finally) = match clause {
        Some((Some(Kind::Catch), t)) => (t, t),
        Some((_, t)) => (t, None),
        None => (None, None),
    };
    let mut at = r.parent_id.filter(|p| *p < r.id);
    while let Some(id) = at {
        let Some(p) = crate::store::record(store, id)? else {
            break;
        };
        let kind = p.construct();
        match kind {
            Some(Kind::Catch) => {
                leaving = p.parent_id;
                then_finally = p.parent_id;
            }
            Some(Kind::Finally) => {
                leaving = p.parent_id;
                then_finally = None;
            }
            Some(Kind::Try) if leaving == Some(id) => {
                let outer = handler_above(store, &p)?;
                return Ok(match then_finally {
                    Some(t) if t == id => {
                        format!("the finally of try: (record {id}) if it has one, then {outer}")
                    }
                    _ => outer,
                });
            }
            Some(Kind::Try) => {
                let outer = handler_above(store, &p)?;
                return Ok(format!(
                    "the catch of try: (record {id}); without a catch, its finally if it has one, then {outer}"
                ));
            }
            Some(Kind::Branch) => {
                let policy = match p.parent_id {
                    Some(q) => crate::store::record(store, q)?
                        .and_then(|q| meta(&q))
                        .and_then(|m| str_of(&m, "on_fail")),
                    None => None,
                }
                .unwrap_or_else(|| "fail-fast".into());
                return Ok(format!(
                    "the parallel's on-fail: {policy} (branch record {id})"
                ));
            }
            _ => {}
        }
        at = p.parent_id.filter(|q| *q < id);
    }
    Ok("the program: finish --status failed --error MSG".into())
}

/// What takes a failure that leaves the start `p` (a `try:`).
fn handler_above(store: &mut dyn Store, p: &ExecutionRow) -> Result<String> {
    // As if the try: itself had failed where it stands.
    let as_failed = ExecutionRow {
        metadata: None,
        ..p.clone()
    };
    handler_of(store, &as_failed)
}

/// The failure the innermost open `catch` caught: the newest failed record inside its `try:`
/// before the catch began.
fn caught_by(store: &mut dyn Store, open: &[&ExecutionRow]) -> Result<Option<Caught>> {
    use crate::language::Kind;
    let catch = open
        .iter()
        .rev()
        .find(|o| o.construct() == Some(Kind::Catch));
    let Some((catch, Some(t))) = catch.map(|c| (c, c.parent_id)) else {
        return Ok(None);
    };
    let failed = store.executions_matching(&ExecQuery {
        after: t,
        before: Some(catch.id),
        only: Some(&["failed"]),
        newest_first: true,
        limit: Some(16),
        ..Default::default()
    })?;
    for f in failed {
        if f.parent_id == Some(t) || store.scope_chain(f.id)?.contains(&t) {
            return Ok(Some(Caught {
                record: f.id,
                error: f.error_message,
            }));
        }
    }
    Ok(None)
}

/// What takes the failure `after` is, unless a retry does (attempts left).
fn failure_handler(store: &mut dyn Store, after: &ExecutionRow) -> Result<Option<String>> {
    if after.status != Some(S::Failed) {
        return Ok(None);
    }
    let m = meta(after).unwrap_or(Value::Null);
    let attempt = m.get("attempt").and_then(Value::as_i64);
    let max = m.get("max").and_then(Value::as_i64);
    if let (Some(a), Some(m)) = (attempt, max) {
        if a <= m {
            return Ok(None);
        }
    }
    handler_of(store, after).map(Some)
}

/// The run's agents, then those of the project and user scopes given.
fn all_agents(
    store: &mut dyn Store,
    other_agents: Vec<(&str, Vec<AgentRow>)>,
) -> Result<Vec<AgentInfo>> {
    let mut agents = Vec::new();
    for (scope, rows) in std::iter::once(("execution", store.agents()?)).chain(other_agents) {
        agents.extend(rows.into_iter().map(|a| AgentInfo {
            memory_bytes: a.memory.as_ref().map(String::len),
            name: a.name,
            scope: a.scope.unwrap_or_else(|| scope.to_string()),
            segments: a.segments,
        }));
    }
    Ok(agents)
}

/// Every gate with its next step, checked against the audit log. A decision about inputs
/// that changed before it was consumed is stale: its next step is `reopen`; one that stands
/// is consumed by this report.
fn gate_nexts(
    store: &mut dyn Store,
    run_dir: &std::path::Path,
    now: &str,
    roster: &mut super::gates::LazyRoster,
) -> Result<Vec<GateNext>> {
    let gates = store.gates(None, now)?;
    let mut report = store.verify_audit()?;
    // A decision about inputs stands on the versions it pinned, before it is consumed here.
    if report.derived.values().any(|d| d.decided_inputs.is_some()) {
        crate::services::inputs::check_sealed(store, run_dir, &mut report)?;
    }
    let mut stale = std::collections::HashMap::new();
    for g in &gates {
        let Some(d) = report.derived.get(&g.id) else {
            continue;
        };
        if IntegrityView::of(&report, &g.id).state != "attested" {
            continue;
        }
        if let Some(why) = crate::services::inputs::settle(store, run_dir, g, d)? {
            stale.insert(g.id.clone(), why);
        }
    }
    gates
        .into_iter()
        .map(|g| {
            // The opening to wait on is the sealed log's newest, never the row's.
            let instance = report
                .derived
                .get(&g.id)
                .map(|d| d.instance)
                .filter(|n| *n > 0);
            Ok(GateNext {
            instance,
            stale: stale.get(&g.id).cloned(),
            integrity: IntegrityView::of(&report, &g.id),
            progress: match report.derived.get(&g.id).filter(|_| g.status.is_pending()) {
                Some(d) => super::gates::team_view(&g, d, now, roster)?.map(|t| t.summary()),
                None => None,
            },
            // A decision that does not stand is no decision: the VM stops, whatever the row
            // says (a pending gate nothing sealed is still only waited on).
            next_step: match IntegrityView::of(&report, &g.id) {
                v if v.state == "tampered"
                    || (v.state == "unattested" && !g.status.is_pending()) =>
                {
                    step("stop", v.detail)
                }
                _ if stale.contains_key(&g.id) => step(
                    "reopen",
                    Some(format!(
                        "gates create {} --reopen (with its prompt, --allow and --inputs), then wait",
                        g.id
                    )),
                ),
                _ => next_step(&g, instance),
            },
            reason: g
                .resolution_comment
                .clone()
                .filter(|_| IntegrityView::of(&report, &g.id).state == "attested"),
            id: g.id,
            status: g.status,
            on_reject: g.on_reject,
            resolved_by: g.resolved_by,
            resolved_at: g.resolved_at,
            timeout_at: g.timeout_at,
        })
        })
        .collect()
}

/// Whether binding `b` was written after the newest record of its frame (the records inside
/// its frame's record, at any depth; every record for the root): no record was logged since.
/// Looks at most at the 32 records that followed it.
fn unlogged(
    store: &mut dyn Store,
    b: &crate::store::BindingRow,
    newest: i64,
    open: &[Event],
) -> Result<bool> {
    let span = store.binding_versions(
        &b.name,
        b.execution_id,
        crate::store::history::Versions::Page {
            before: None,
            limit: 1,
        },
    )?;
    // A version written before the run's first record has no record it follows: 0.
    let Some(at) = span
        .rows
        .first()
        .and_then(|r| r.at_record.or((!r.gap).then_some(0)))
    else {
        return Ok(false);
    };
    if let Some(x) = b.execution_id {
        // A name bound at a record that is no frame (a loop variable, `catch as err`: the
        // VM's own, with `--local`) is no session's output; nor is a block's argument, a
        // const bound before anything inside its call.
        if crate::store::frame_of(store, x, None)? != Some(x)
            || (b.kind.as_deref() == Some("const") && at <= x)
        {
            return Ok(false);
        }
    }
    // A named branch's result (`a = session ...`), its branch still open: logged only by a
    // record inside that branch, whatever the other branches logged since.
    let named_branch = open.iter().find(|o| {
        o.construct == Some(crate::language::Kind::Branch)
            && o.statement_text
                .as_deref()
                .and_then(crate::language::assigned_name)
                == Some(b.name.as_str())
    });
    let frame = match (named_branch, b.execution_id) {
        (Some(br), _) => br.id,
        (None, _) if at >= newest => return Ok(true),
        (None, Some(f)) => f,
        (None, None) => return Ok(false),
    };
    let after = store.executions_matching(&ExecQuery {
        after: at,
        limit: Some(32),
        ..Default::default()
    })?;
    for r in &after {
        if r.id == frame || store.scope_chain(r.id)?.contains(&frame) {
            return Ok(false);
        }
    }
    Ok(after.len() == 32).map(|full| !full)
}

fn binding_info(store: &mut dyn Store, run: &RunPaths, b: crate::store::BindingRow) -> BindingInfo {
    let value = String::from_utf8_lossy(b.value.as_deref().unwrap_or_default()).into_owned();
    let bytes = match &b.attachment_path {
        Some(p) => crate::services::attach::stored_len(&mut *store, &run.dir, p).unwrap_or(0),
        None => value.len() as u64,
    };
    BindingInfo {
        unlogged: false,
        scope: super::get::scope_name(b.execution_id.is_some()),
        first_line: one_line(&value, 100),
        bytes,
        name: b.name,
        kind: b.kind,
        execution_id: b.execution_id,
        attachment_path: b.attachment_path,
    }
}

/// `resume --all`: the full answer, from every record (the position and the retries are read
/// as the bounded answer reads them: the same answer). `other_agents`: project- and
/// user-scope agents, where their databases exist.
fn full(
    run: &RunPaths,
    store: &mut dyn Store,
    other_agents: Vec<(&str, Vec<AgentRow>)>,
    roster: &mut super::gates::LazyRoster,
) -> Result<ResumeDoc> {
    let now = now();
    let resumed = store.record_resume(&now)?;
    let summary = store.run_summary(&now)?;
    let rows = store.executions()?;

    let statements: BTreeMap<i64, Event> = rows
        .iter()
        .filter_map(|r| Some((r.statement_index?, Event::from(r))))
        .collect();

    let newest = rows.last().map_or(0, |r| r.id);
    let open = narrow_position(store)?.open;
    let mut bindings = Vec::new();
    for b in store.bindings()? {
        let late = unlogged(store, &b, newest, &open)?;
        bindings.push(BindingInfo {
            unlogged: late,
            ..binding_info(store, run, b)
        });
    }

    let agents = all_agents(store, other_agents)?;

    let gates = gate_nexts(store, &run.dir, &now, roster)?;
    let mut position = narrow_position(store)?;
    position.mark_gates(&gates);

    Ok(ResumeDoc {
        run: RunPart {
            id: summary.run.id,
            status: resumed.status,
            previous_status: resumed.previous_status,
            program_path: summary.run.program_path,
            error_message: summary.error_message,
        },
        position,
        statements: statements.into_values().collect(),
        parallel: constructs(&rows),
        loops: constructs(&rows),
        retries: outstanding_retries(store)?,
        bindings,
        agents,
        gates,
        gates_logged_resumed: resumed.gates_logged,
    })
}

fn describe(e: &Event) -> String {
    let taken = e
        .metadata
        .as_ref()
        .and_then(|m| str_of(m, "taken"))
        .map(|t| format!(", taken: {}", one_line(&t, 40)))
        .unwrap_or_default();
    format!(
        "{} {} ({}{}{taken}, record {}{}{})",
        e.statement_index.map_or("-".into(), |i| i.to_string()),
        one_line(e.statement_text.as_deref().unwrap_or(""), 50),
        e.status.as_ref().map_or("?", S::as_str),
        e.construct
            .map(|k| format!(" {}", k.name()))
            .unwrap_or_default(),
        e.id,
        e.at.as_deref()
            .map(|a| format!(", {a}"))
            .unwrap_or_default(),
        e.by.as_deref()
            .filter(|p| *p != "unknown")
            .map(|p| format!(", by {}", one_line(p, 40)))
            .unwrap_or_default()
    ) + &e
        .gate_now
        .as_ref()
        .map(|g| format!("; the gate is now {}", g.status))
        .unwrap_or_default()
}

fn run_lines(w: &mut dyn Write, r: &RunPart, p: &Position) -> io::Result<()> {
    let was = if r.previous_status != r.status {
        format!(" (was {})", r.previous_status)
    } else {
        String::new()
    };
    writeln!(
        w,
        "run {}: {}{was}, program {}",
        r.id,
        r.status,
        r.program_path.as_deref().unwrap_or("-")
    )?;
    // The open starts around the current one are where it is; others (a sibling branch of a
    // parallel) are open beside it.
    let mut around = std::collections::HashSet::new();
    let mut up = p.current.as_ref().and_then(|c| c.parent_id);
    while let Some(id) = up {
        around.insert(id);
        up = p.open.iter().find(|o| o.id == id).and_then(|o| o.parent_id);
    }
    for e in p.open.iter().take(p.open.len().saturating_sub(1)) {
        let word = if around.contains(&e.id) {
            "in"
        } else {
            "also open"
        };
        writeln!(w, "{word}: {}", describe(e))?;
    }
    match &p.current {
        Some(e) => writeln!(w, "at: {}", describe(e))?,
        None => writeln!(w, "at: nothing in progress")?,
    }
    match &p.after {
        Some(e) => writeln!(w, "after: {}", describe(e))?,
        None if p.current.is_some() => writeln!(w, "after: nothing done inside it yet")?,
        None => {}
    }
    if let Some(c) = &p.caught {
        writeln!(
            w,
            "caught: {} (record {}): what `catch as err` binds",
            one_line(c.error.as_deref().unwrap_or("(no error recorded)"), 120),
            c.record
        )?;
    }
    if let Some(h) = &p.handler {
        writeln!(
            w,
            "failed: not the statement after it; the failure goes to {h}"
        )?;
    }
    if let Some(e) = &p.last_event {
        writeln!(w, "last: {}", describe(e))?;
    }
    Ok(())
}

fn construct_lines(
    w: &mut dyn Write,
    parallel: &[Parallel],
    loops: &[Loop],
    retries: &[Retry],
) -> io::Result<()> {
    for p in parallel {
        let state = if p.joined {
            "joined".to_string()
        } else if let Some(why) = &p.decided {
            let then = if why.starts_with("fail-fast") {
                "end the parallel --status failed"
            } else {
                "join it"
            };
            match p.to_skip.is_empty() {
                true => format!("decided ({why}): {then}"),
                false => format!(
                    "decided ({why}): end [{}] --status skipped, do not run them; then {then}",
                    p.to_skip.join(" ")
                ),
            }
        } else if p.outstanding.is_empty() {
            "done".to_string()
        } else {
            format!("waiting on [{}]", p.outstanding.join(" "))
        };
        writeln!(
            w,
            "∥ {} [{}] {}/{} {state}",
            p.parallel_id,
            p.branches.join(" "),
            p.completed.len(),
            p.branches.len()
        )?;
        for b in &p.open_branches {
            let then = b
                .handler
                .as_deref()
                .map(|h| format!(" → the failure goes to {h}"))
                .unwrap_or_default();
            writeln!(
                w,
                "  branch {} (record {}): after {}{then}",
                b.branch,
                b.record,
                b.after.as_deref().unwrap_or("nothing done inside it yet")
            )?;
        }
    }
    for l in loops {
        let state = if l.exited {
            format!(
                "exit{}",
                l.reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            )
        } else {
            "running".into()
        };
        // A running loop is in the iteration after the last one done.
        let now = l
            .current
            .map(|c| format!(" (iteration {c})"))
            .unwrap_or_default();
        writeln!(
            w,
            "loop {}:{}/{} {state}{now}",
            l.loop_id,
            l.iteration.unwrap_or(0),
            l.max.map_or("?".into(), |m| m.to_string())
        )?;
    }
    for t in retries {
        let then = match t.state {
            "next" => format!(
                " failed → attempt {}{}",
                t.next_attempt.unwrap_or_default(),
                t.backoff
                    .as_deref()
                    .map(|b| format!(" after {b} backoff"))
                    .unwrap_or_default()
            ),
            "exhausted" => format!(
                " failed, none left → {}",
                t.handler.as_deref().unwrap_or("the program")
            ),
            _ => String::new(),
        };
        writeln!(
            w,
            "retry {} {}: attempt {} of {}{then}",
            t.statement_index.unwrap_or_default(),
            one_line(t.statement_text.as_deref().unwrap_or(""), 40),
            t.attempt.map_or("?".into(), |a| a.to_string()),
            t.max.map_or("?".into(), |m| (m + 1).to_string())
        )?;
    }
    Ok(())
}

fn binding_lines(w: &mut dyn Write, bindings: &[BindingInfo]) -> io::Result<()> {
    for b in bindings {
        let scope = b
            .execution_id
            .map_or("root".into(), |e| format!("exec {e}"));
        let att = match (b.attachment_path.is_some(), b.unlogged) {
            (true, true) => ", attachment, unlogged",
            (true, false) => ", attachment",
            (false, true) => ", unlogged",
            (false, false) => "",
        };
        writeln!(
            w,
            "binding {} ({}, {scope}, {} B{att}): {}",
            b.name,
            b.kind.as_deref().unwrap_or("?"),
            b.bytes,
            b.first_line
        )?;
    }
    Ok(())
}

fn gate_lines(w: &mut dyn Write, gates: &[GateNext]) -> io::Result<()> {
    for g in gates {
        let arg = g
            .next_step
            .argument
            .as_deref()
            .map(|a| format!(" {a}"))
            .unwrap_or_default();
        let left = match (&g.timeout_at, g.status.as_str()) {
            (Some(at), "pending") => match crate::model::seconds_between(&now(), at) {
                Some(left) => format!(" ({} left)", human_duration(left)),
                None => String::new(),
            },
            _ => String::new(),
        };
        let integrity = match g.integrity.state {
            "attested" => String::new(),
            other => format!(" [{}]", other.to_uppercase()),
        };
        let progress = g
            .progress
            .as_deref()
            .map(|p| format!(" [{p}]"))
            .unwrap_or_default();
        let instance = g
            .instance
            .map(|n| format!(" (instance {n})"))
            .unwrap_or_default();
        let reason = g
            .reason
            .as_deref()
            .map(|r| format!("; reason: \"{}\"", one_line(r, 80)))
            .unwrap_or_default();
        writeln!(
            w,
            "gate {} {}{instance}{integrity}{left}{progress} → {}{arg}{reason}",
            g.id, g.status, g.next_step.action
        )?;
    }
    Ok(())
}

fn agent_lines(w: &mut dyn Write, agents: &[AgentInfo]) -> io::Result<()> {
    for a in agents {
        writeln!(
            w,
            "agent {} ({}, {} segments, memory {})",
            a.name,
            a.scope,
            a.segments,
            a.memory_bytes.map_or("none".into(), |b| format!("{b} B"))
        )?;
    }
    Ok(())
}

/// 11 when a gate's decision is stale (its next step is `reopen`).
fn stale_code(gates: &[GateNext]) -> crate::error::Code {
    if gates.iter().any(|g| g.stale.is_some()) {
        crate::error::Code::Stale
    } else {
        crate::error::Code::Ok
    }
}

impl Render for ResumeDoc {
    fn exit_code(&self) -> crate::error::Code {
        stale_code(&self.gates)
    }

    /// The spec's compact narration, one line a fact.
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        run_lines(w, &self.run, &self.position)?;
        for s in &self.statements {
            let mark = match &s.status {
                Some(S::Completed | S::Joined) => "✓",
                Some(S::Failed) => "✗",
                Some(S::Exited) => "exit",
                Some(other) => other.as_str(),
                None => "?",
            };
            writeln!(
                w,
                "{}→ {} {mark}",
                s.statement_index.unwrap_or_default(),
                one_line(s.statement_text.as_deref().unwrap_or(""), 50)
            )?;
        }
        construct_lines(w, &self.parallel, &self.loops, &self.retries)?;
        binding_lines(w, &self.bindings)?;
        agent_lines(w, &self.agents)?;
        gate_lines(w, &self.gates)
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

/// How many unfinished runs `resume` without a run lists, and counts at most (of each status).
const UNFINISHED_LISTED: usize = 20;
const UNFINISHED_COUNTED: u64 = 10_000;

const NAME_THE_RUN: &str =
    "name the run to continue: prose-state resume --run RUN_ID (over MCP: resume with `run`)";

impl Render for Unfinished {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        if self.runs.is_empty() {
            return writeln!(
                w,
                "no unfinished run in this project: start one with prose-state init"
            );
        }
        writeln!(w, "unfinished runs, newest first:")?;
        for r in &self.runs {
            let status = r.status.as_ref().map_or("-", |s| s.as_str());
            let program = r.program.as_deref().unwrap_or("-");
            writeln!(w, "- {} ({status}) {program}", r.run_id)?;
            if let Some(f) = &r.forked_from {
                writeln!(
                    w,
                    "  forked from {} at record {}",
                    f["run"].as_str().unwrap_or("?"),
                    f["record"]
                )?;
            }
            match &r.newest_record {
                Some(e) => writeln!(
                    w,
                    "  newest record {}: {} ({}) at {}",
                    e.id,
                    crate::output::one_line(e.statement_text.as_deref().unwrap_or(""), 60),
                    e.status.as_ref().map_or("-", |s| s.as_str()),
                    e.at.as_deref().unwrap_or("-")
                )?,
                None => writeln!(w, "  no record yet")?,
            }
            if r.pending_gates > 0 {
                writeln!(w, "  pending gates: {}", r.pending_gates)?;
            }
        }
        if self.more > 0 {
            writeln!(w, "and {} more (prose-state runs)", self.more)?;
        }
        writeln!(w, "{}", self.next_step)
    }
}

/// The project's unfinished runs, newest first: the one run's answer when there is exactly
/// one (not recorded as a resume), else the list.
fn unfinished(
    ctx: &crate::context::Context,
    args: &crate::cli::ResumeArgs,
) -> Result<ResumeAnswer> {
    let now = now();
    // Each status asked of the catalog (a project may hold 100,000 finished runs).
    let mut open = Vec::new();
    for status in [RunStatus::Running, RunStatus::Interrupted] {
        let (runs, _) = super::listing::Listing::runs(
            ctx,
            &super::listing::RunQuery {
                now: &now,
                status: Some(&status),
                since: None,
                limit: UNFINISHED_COUNTED,
                scan: false,
            },
        )?;
        open.extend(runs);
    }
    // Newest first, as `runs` lists them.
    open.sort_by(|a, b| b.run.started_at.cmp(&a.run.started_at));
    if let [one] = open.as_slice() {
        if !args.all {
            let (paths, mut store) = ctx.open_run(Some(&one.run.id))?;
            let others = ctx.other_agents()?;
            let limit = args.limit.map_or(DEFAULT_BINDINGS, |l| l as usize);
            return Ok(ResumeAnswer::Brief(Box::new(brief(
                &paths,
                store.as_mut(),
                others,
                args.cursor.as_deref(),
                limit,
                &mut super::gates::LazyRoster::new(ctx),
                false,
            )?)));
        }
    }
    let more = open.len().saturating_sub(UNFINISHED_LISTED);
    let mut listed = Vec::new();
    for r in open.into_iter().take(UNFINISHED_LISTED) {
        let (forked_from, newest_record) = match ctx.open_run(Some(&r.run.id)) {
            Ok((_, mut store)) => (
                crate::store::forked_from(store.as_mut())
                    .unwrap_or(None)
                    .map(|f| json!({"run": f["run"], "record": f["record"], "at": f["at"]})),
                store
                    .executions_matching(&ExecQuery {
                        newest_first: true,
                        limit: Some(1),
                        ..Default::default()
                    })
                    .ok()
                    .and_then(|rows| rows.first().map(|row| slim(Event::from(row)))),
            ),
            Err(_) => (None, None),
        };
        listed.push(Resumable {
            run_id: r.run.id,
            status: r.run.status,
            program: r.run.program_path,
            started_at: r.run.started_at,
            forked_from,
            newest_record,
            pending_gates: r.pending_gates,
        });
    }
    Ok(ResumeAnswer::Runs(Box::new(Unfinished {
        run: None,
        runs: listed,
        more,
        next_step: NAME_THE_RUN,
    })))
}

impl Render for ResumeBrief {
    fn exit_code(&self) -> crate::error::Code {
        stale_code(&self.gates)
    }

    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        run_lines(w, &self.run, &self.position)?;
        construct_lines(w, &self.parallel, &self.loops, &self.retries)?;
        gate_lines(w, &self.gates)?;
        binding_lines(w, &self.bindings)?;
        agent_lines(w, &self.agents)?;
        let c = &self.counts;
        writeln!(
            w,
            "counts: {} records, {} bindings ({} visible here), {} agents, {} gates",
            c.records, c.bindings, c.bindings_visible, c.agents, c.gates
        )?;
        if let Some(next) = &self.next_cursor {
            writeln!(
                w,
                "more bindings: prose-state resume --cursor {}",
                super::guide::shell_word(next)
            )?;
        }
        if self.truncated {
            writeln!(
                w,
                "cut to {} KiB: prose-state resume --all has everything",
                BOUND / 1024
            )?;
        }
        Ok(())
    }
}

fn slim(mut e: Event) -> Event {
    e.statement_text = e.statement_text.map(|t| one_line(&t, TEXT));
    if let Some(m) = &e.metadata {
        let len = m.to_string().len();
        if len > TEXT {
            e.metadata = Some(Value::String(format!("({len} bytes: resume --all)")));
        }
    }
    e
}

fn slim_text(t: Option<String>) -> Option<String> {
    t.map(|t| one_line(&t, TEXT))
}

/// The open constructs and where the VM continues, read narrowly: the start records, and
/// only the end records of a statement some start has. An end of any other statement can
/// close no start (both shapes need the same index and text), so `open_starts` over these
/// rows is `open_starts` over the whole log.
fn narrow_position(store: &mut dyn Store) -> Result<Position> {
    let mut rows = store.executions_matching(&ExecQuery {
        only: Some(STARTS),
        ..Default::default()
    })?;
    if !rows.is_empty() {
        rows.extend(store.executions_matching(&ExecQuery {
            only: Some(ENDS),
            of_started_statements: true,
            ..Default::default()
        })?);
        rows.sort_by_key(|r| r.id);
    }
    let (open, level) = open_starts(&rows);
    let current = open.last().copied();
    let scope = current.map(|c| c.id);
    let from = current.map_or(0, |c| c.id);
    // A completion of the older shape counts at its start's level.
    let named = rows
        .iter()
        .filter(|r| r.id > from && level.get(&r.id) == Some(&scope))
        .max_by_key(|r| r.id);
    const PAGE: i64 = 32;
    let mut before = None;
    let direct = loop {
        let page = store.executions_matching(&ExecQuery {
            after: from,
            before,
            except: Some(STARTS),
            parent: Some(scope),
            newest_first: true,
            limit: Some(PAGE),
            ..Default::default()
        })?;
        let found = page
            .iter()
            .find(|r| level.get(&r.id).is_none_or(|l| *l == scope))
            .cloned();
        if found.is_some() || (page.len() as i64) < PAGE {
            break found;
        }
        before = page.last().map(|r| r.id);
    };
    let after_row = direct.iter().chain(named).max_by_key(|r| r.id).cloned();
    let handler = match &after_row {
        Some(r) => failure_handler(store, r)?,
        None => None,
    };
    let after = after_row.as_ref().map(Event::from);
    let caught = caught_by(store, &open)?;
    let last_event = store
        .executions_matching(&ExecQuery {
            newest_first: true,
            limit: Some(1),
            ..Default::default()
        })?
        .first()
        .map(Event::from);
    Ok(Position {
        current: current.map(Event::from),
        open: open.into_iter().map(Event::from).collect(),
        after,
        last_event,
        handler,
        caught,
    })
}

/// The records that started a construct not ended yet, outermost first (what `doctor` checks
/// of a finished run).
pub(super) fn open_records(store: &mut dyn Store) -> Result<Vec<Event>> {
    Ok(narrow_position(store)?.open)
}

/// The `parallel:` blocks and loops still open (their start record is open), from the records
/// written since they started.
fn open_constructs(store: &mut dyn Store, open: &[Event]) -> Result<(Vec<Parallel>, Vec<Loop>)> {
    let (mut parallel, mut loops) = (Vec::new(), Vec::new());
    for start in open {
        let Some(m) = &start.metadata else { continue };
        // A branch's start carries its parallel's id: it is part of that parallel, not one.
        if start.construct == Some(crate::language::Kind::Branch) || m.get("branch").is_some() {
            continue;
        }
        if let Some(id) = str_of(m, Parallel::ID) {
            let mut found: Option<Parallel> = open_construct(store, start, id.clone(), m)?;
            if let Some(p) = &mut found {
                p.open_branches = open_branches(store, open, &id)?;
            }
            parallel.extend(found);
        } else if let Some(id) = str_of(m, Loop::ID) {
            loops.extend(open_construct(store, start, id, m)?);
        }
    }
    Ok((parallel, loops))
}

/// The branches of parallel `id` that are open (started, not ended), each with the last thing
/// done inside it: after a crash, each goes on from its own `after`, and a failure in one
/// goes to the parallel's `on-fail` policy, not to a run of its statement again.
fn open_branches(store: &mut dyn Store, open: &[Event], id: &str) -> Result<Vec<OpenBranch>> {
    let mut out = Vec::new();
    for b in open {
        let Some(m) = &b.metadata else { continue };
        if str_of(m, Parallel::ID).as_deref() != Some(id) {
            continue;
        }
        let Some(branch) = str_of(m, "branch") else {
            continue;
        };
        let last = store.executions_matching(&ExecQuery {
            after: b.id,
            except: Some(STARTS),
            parent: Some(Some(b.id)),
            newest_first: true,
            limit: Some(1),
            ..Default::default()
        })?;
        let last = last.first();
        let handler = match last {
            Some(r) => failure_handler(store, r)?,
            None => None,
        };
        out.push(OpenBranch {
            branch: one_line(&branch, 60),
            record: b.id,
            after: last.map(|r| describe(&Event::from(r))),
            handler,
        });
    }
    Ok(out)
}

/// The construct `id` that the open record `start` (metadata `m`) begins, if it is still open.
fn open_construct<T: Construct>(
    store: &mut dyn Store,
    start: &Event,
    id: String,
    m: &Value,
) -> Result<Option<T>> {
    let mut c = T::new(id.clone(), start.statement_index, m);
    let since = ExecQuery {
        after: start.id,
        only: T::ONLY,
        with_metadata: true,
        ..Default::default()
    };
    for r in &store.executions_matching(&since)? {
        let Some(m) = meta(r) else { continue };
        if str_of(&m, T::ID).as_deref() == Some(id.as_str()) {
            c.record(r, &m);
        }
    }
    Ok(c.finish().then_some(c))
}

/// The statements with `(retry: N)` still in play: those whose latest record is `retry` (an
/// attempt under way), or a `failed` record that carries its attempt (`{"attempt", "max"}`):
/// the next attempt, or, after the last, what handles the failure.
fn outstanding_retries(store: &mut dyn Store) -> Result<Vec<Retry>> {
    let mut all = store.executions_matching(&ExecQuery {
        only: Some(&["retry"]),
        ..Default::default()
    })?;
    all.extend(
        store
            .executions_matching(&ExecQuery {
                only: Some(&["failed"]),
                with_metadata: true,
                ..Default::default()
            })?
            .into_iter()
            .filter(|r| meta(r).is_some_and(|m| m.get("attempt").is_some())),
    );
    all.sort_by_key(|r| r.id);
    let mut latest: BTreeMap<StatementKey, &ExecutionRow> = BTreeMap::new();
    for r in &all {
        latest.insert(key(r), r);
    }
    let mut out = Vec::new();
    for r in latest.into_values() {
        let later = store.executions_matching(&ExecQuery {
            after: r.id,
            statement: Some(r.statement_index),
            ..Default::default()
        })?;
        if later.iter().any(|l| key(l) == key(r)) {
            continue;
        }
        let failures = store.executions_matching(&ExecQuery {
            before: Some(r.id),
            only: Some(&["failed"]),
            statement: Some(r.statement_index),
            newest_first: true,
            ..Default::default()
        })?;
        let last_error = failures
            .iter()
            .find(|f| key(f) == key(r) && f.error_message.is_some())
            .and_then(|f| f.error_message.clone());
        let mut retry = retry_of(r, last_error);
        if retry.state == "exhausted" {
            // Once something follows it where it stands (a catch began, the try ended), its
            // failure was taken: it is no longer outstanding.
            let taken = store.executions_matching(&ExecQuery {
                after: r.id,
                parent: Some(r.parent_id),
                limit: Some(1),
                ..Default::default()
            })?;
            if !taken.is_empty() {
                continue;
            }
            retry.handler = Some(handler_of(store, r)?);
        }
        out.push(retry);
    }
    out.sort_by_key(|r| r.id);
    Ok(out)
}

/// `resume` by default: read narrowly (see [`ResumeBrief`]), then cut to [`BOUND`] bytes.
fn brief(
    run: &RunPaths,
    store: &mut dyn Store,
    other_agents: Vec<(&str, Vec<AgentRow>)>,
    cursor: Option<&str>,
    limit: usize,
    roster: &mut super::gates::LazyRoster,
    record: bool,
) -> Result<ResumeBrief> {
    let now = now();
    // A resume of a run no one named is an answer, not a resume: nothing is recorded.
    let resumed = if record {
        store.record_resume(&now)?
    } else {
        let status = store.run_info()?.status.unwrap_or(RunStatus::Running);
        crate::store::Resumed {
            previous_status: status.clone(),
            status,
            gates_logged: Vec::new(),
        }
    };
    let info = store.run_info()?;
    let full = narrow_position(store)?;
    let full_last = full.last_event.as_ref().map(|e| e.id);
    let open_now = full.open.clone();
    let (parallel, loops) = open_constructs(store, &full.open)?;
    let retries = outstanding_retries(store)?;
    let position = Position {
        current: full.current.map(slim),
        open: full.open.into_iter().map(slim).collect(),
        after: full.after.map(slim),
        last_event: full.last_event.map(slim),
        handler: full.handler,
        caught: full.caught.map(|c| Caught {
            error: slim_text(c.error),
            ..c
        }),
    };
    let scope = position.current.as_ref().map(|e| e.id);
    // The nearest binding of each name, from the innermost scope up to the root.
    let (chain, visible) = super::get::nearest_bindings(store, scope, cursor, limit as i64 + 1)?;
    let more = visible.len() > limit;
    let mut page = Vec::new();
    let newest = full_last.unwrap_or(0);
    for b in visible.into_iter().take(limit) {
        let late = unlogged(store, &b, newest, &open_now)?;
        let mut b = binding_info(store, run, b);
        b.unlogged = late;
        b.attachment_path = slim_text(b.attachment_path.take());
        page.push(b);
    }
    let counted = store.resume_counts(&chain)?;

    let agents = all_agents(store, other_agents)?;
    let mut gates: Vec<GateNext> = gate_nexts(store, &run.dir, &now, roster)?
        .into_iter()
        .map(|mut g| {
            g.on_reject = slim_text(g.on_reject);
            g.reason = slim_text(g.reason);
            g.next_step.argument = slim_text(g.next_step.argument);
            g.integrity.detail = slim_text(g.integrity.detail);
            g
        })
        .collect();
    // Pending first, then decided ones whose next step is not plain `continue`.
    gates.sort_by_key(
        |g| match (g.status.is_pending(), g.next_step.action.as_str()) {
            (true, _) => 0,
            (false, "continue") => 2,
            _ => 1,
        },
    );
    let mut position = position;
    position.mark_gates(&gates);
    let counts = Counts {
        records: counted.records as usize,
        parallel: parallel.len(),
        loops: loops.len(),
        retries: retries.len(),
        bindings: counted.bindings as usize,
        bindings_visible: counted.bindings_visible as usize,
        agents: agents.len(),
        gates: gates.len(),
    };
    let mut out = ResumeBrief {
        run: RunPart {
            id: info.id,
            status: resumed.status,
            previous_status: resumed.previous_status,
            program_path: info.program_path,
            error_message: slim_text(counted.error_message),
        },
        position,
        parallel,
        loops,
        retries: retries
            .into_iter()
            .map(|mut r| {
                r.statement_text = slim_text(r.statement_text);
                r.last_error = slim_text(r.last_error);
                r
            })
            .collect(),
        gates,
        scope,
        next_cursor: None,
        bindings: page,
        agents,
        counts,
        truncated: false,
        gates_logged_resumed: resumed.gates_logged,
    };
    out.gates_logged_resumed.truncate(32);
    for p in &mut out.parallel {
        for list in [
            &mut p.branches,
            &mut p.completed,
            &mut p.failed,
            &mut p.outstanding,
        ] {
            if list.len() > 32 {
                list.truncate(32);
                out.truncated = true;
            }
            for b in list.iter_mut() {
                *b = one_line(b, 60);
            }
        }
    }
    // Within the bound: bindings go first (their cursor reaches them), then the least urgent
    // of the rest, each counted in `counts`.
    let mut cut_bindings = more;
    while serde_json::to_vec(&out)?.len() > BOUND {
        if out.bindings.pop().is_some() {
            cut_bindings = true;
        } else if out.agents.pop().is_some() {
            out.truncated = true;
        } else if out.gates.len() > 1 {
            out.gates.pop();
            out.truncated = true;
        } else if out.retries.pop().is_some()
            || out.loops.pop().is_some()
            || out.parallel.pop().is_some()
            || out.gates.pop().is_some()
        {
            out.truncated = true;
        } else if out.position.open.len() > 1 {
            // The outermost open constructs go; the innermost is `current`.
            out.position.open.remove(0);
            out.truncated = true;
        } else {
            break;
        }
    }
    if cut_bindings {
        out.next_cursor = out
            .bindings
            .last()
            .map(|b| b.name.clone())
            .or_else(|| cursor.map(str::to_string));
    }
    Ok(out)
}

impl super::Run for crate::cli::ResumeArgs {
    type Output = ResumeAnswer;
    fn run(&self, ctx: &crate::context::Context) -> Result<ResumeAnswer> {
        if ctx.run.is_none() {
            return unfinished(ctx, self);
        }
        let (paths, mut store) = ctx.the_run()?;
        // Project and user agents too, where their stores exist (never created here).
        let others = ctx.other_agents()?;
        if self.all {
            let mut roster = super::gates::LazyRoster::new(ctx);
            let doc = full(&paths, store.as_mut(), others, &mut roster)?;
            return Ok(ResumeAnswer::All(Box::new(doc)));
        }
        let limit = self.limit.map_or(DEFAULT_BINDINGS, |l| l as usize);
        Ok(ResumeAnswer::Brief(Box::new(brief(
            &paths,
            store.as_mut(),
            others,
            self.cursor.as_deref(),
            limit,
            &mut super::gates::LazyRoster::new(ctx),
            true,
        )?)))
    }
}

#[cfg(test)]
mod tests {
    use super::on_reject_step;

    #[test]
    fn on_reject_actions() {
        let s = |t: Option<&str>| {
            let n = on_reject_step(t);
            (n.action, n.argument)
        };
        assert_eq!(s(None), ("throw".into(), None));
        assert_eq!(
            s(Some("throw \"Deployment cancelled\"")),
            ("throw".into(), Some("\"Deployment cancelled\"".into()))
        );
        assert_eq!(s(Some("throw")), ("throw".into(), None));
        assert_eq!(
            s(Some("retry draft")),
            ("retry".into(), Some("draft".into()))
        );
        assert_eq!(s(Some("continue")), ("continue".into(), None));
        assert_eq!(
            s(Some("session \"Revise it\"")),
            ("session".into(), Some("\"Revise it\"".into()))
        );
        assert_eq!(
            s(Some("Deployment cancelled")),
            ("throw".into(), Some("Deployment cancelled".into()))
        );
        assert_eq!(
            s(Some("continue later")),
            ("throw".into(), Some("continue later".into()))
        );
    }
}
