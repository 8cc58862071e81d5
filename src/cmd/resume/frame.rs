//! Where a run stands, rebuilt from its records: the open constructs (its frames), the
//! `parallel:` blocks and loops they carry, the retries outstanding, and what takes a failure.

use super::render::describe;
use super::{
    branch_list, meta, str_of, Caught, Event, GateTakes, Loop, OpenBranch, Parallel, Position,
    Retry,
};
use crate::model::ExecStatus as S;
use crate::output::one_line;
use crate::store::{ExecQuery, ExecutionRow, Store, ENDS, STARTS, STARTS_AND_ENDS};
use anyhow::Result;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

type StatementKey = (Option<i64>, Option<String>, Option<i64>);

fn key(r: &ExecutionRow) -> StatementKey {
    (r.statement_index, r.statement_text.clone(), r.parent_id)
}

/// The starts a terminal record closes: the start it names as its parent when that start is
/// the same statement (the older guide's block shape), else the latest open start with the
/// same index, text and parent.
/// Also gives, for each closing record of the older shape, the level it closes at (its
/// start's parent), so that it counts where its start stood.
fn open_starts(rows: &[ExecutionRow]) -> (Vec<&ExecutionRow>, HashMap<i64, Option<i64>>) {
    let (open, level, _) = open_and_closed(rows);
    (open, level)
}

/// [`open_starts`], with the end record that closed each start that closed.
#[allow(clippy::type_complexity)]
fn open_and_closed(
    rows: &[ExecutionRow],
) -> (
    Vec<&ExecutionRow>,
    HashMap<i64, Option<i64>>,
    HashMap<i64, &ExecutionRow>,
) {
    let mut open: Vec<&ExecutionRow> = Vec::new();
    let mut level: HashMap<i64, Option<i64>> = HashMap::new();
    let mut closed_by: HashMap<i64, &ExecutionRow> = HashMap::new();
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
                    closed_by.insert(open.remove(i).id, r);
                }
                continue;
            }
            // An end of the guide's shape: the latest open start of the same statement at the
            // same level. It comes first: a start cannot end while a start inside it is still
            // open, so where the end also fits the older shape (its parent a start of the same
            // statement, as in a recursive call), it ends the inner one.
            let sibling = open.iter().rposition(|o| key(o) == key(r));
            // A start this version wrote with `--construct` is ended only by `--ends`: a
            // statement of its body with its own text (a branch's one session) is its body.
            let named = r.parent_id.and_then(|p| {
                open.iter()
                    .rposition(|o| o.id == p && same(o, r) && !has_construct(o))
            });
            let closed = match (sibling, named) {
                (Some(s), Some(n)) if s > n => Some(s),
                (_, Some(n)) => {
                    level.insert(r.id, open[n].parent_id);
                    Some(n)
                }
                (s, None) => s,
            };
            if let Some(i) = closed {
                closed_by.insert(open.remove(i).id, r);
            }
        }
    }
    (open, level, closed_by)
}

/// The start record nearest `first` (`first` itself, else up its parents), and the record
/// that ended it if it has ended. An end closes only a start of its own statement, so this
/// reads that statement's starts and ends from the start on, not the log.
fn enclosing_start(
    store: &mut dyn Store,
    first: &ExecutionRow,
) -> Result<Option<(ExecutionRow, Option<ExecutionRow>)>> {
    let mut next = Some(first.clone());
    let start = loop {
        let Some(r) = next else {
            return Ok(None);
        };
        if r.status
            .as_ref()
            .is_some_and(|s| STARTS.contains(&s.as_str()))
        {
            break r;
        }
        // Parents come before their children; a raw row pointing forward ends the walk.
        next = match r.parent_id.filter(|p| *p < r.id) {
            Some(p) => crate::store::record(store, p)?,
            None => None,
        };
    };
    // Only a start or an end can open or close anything: a loop's `iteration` records share
    // its statement and are left in the database.
    let rows = store.executions_matching(&ExecQuery {
        after: start.id - 1,
        statement: Some(start.statement_index),
        only: Some(STARTS_AND_ENDS),
        ..Default::default()
    })?;
    let (_, _, closed_by) = open_and_closed(&rows);
    let end = closed_by.get(&start.id).map(|e| (*e).clone());
    Ok(Some((start, end)))
}

/// Whether a start says what it opens in its metadata (`exec-append --construct`).
fn has_construct(r: &ExecutionRow) -> bool {
    meta(r).is_some_and(|m| m.get("construct").is_some())
}

/// The start an end names (`exec-append --ends`), if it names one.
fn ends_of(r: &ExecutionRow) -> Option<i64> {
    meta(r)?.get("ends")?.as_i64()
}

/// A `parallel:` block or a loop, gathered from the records that carry its id.
pub(super) trait Construct: Sized {
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
pub(super) fn constructs<T: Construct>(rows: &[ExecutionRow]) -> Vec<T> {
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

/// What takes the failure a `finally` ran on, when `after` is that finally's end
/// (`completed`) on a failure's way out of its try: its catch ended `failed` (a rethrow), or
/// its body failed and it has no catch. The failure goes on from the try, not to the
/// statement after it.
fn after_finally(store: &mut dyn Store, after: &ExecutionRow) -> Result<Option<String>> {
    use crate::language::Kind;
    let Some(start) = ends_of(after) else {
        return Ok(None);
    };
    let Some(f) = crate::store::record(store, start)? else {
        return Ok(None);
    };
    let Some(t) = f.parent_id.filter(|_| f.construct() == Some(Kind::Finally)) else {
        return Ok(None);
    };
    let Some(try_row) = crate::store::record(store, t)? else {
        return Ok(None);
    };
    if !failure_escapes(store, t, Some(f.id))? {
        return Ok(None);
    }
    Ok(Some(format!(
        "{} (the failure the finally of try: (record {t}) ran on goes on)",
        handler_above(store, &try_row)?
    )))
}

/// Whether a failure leaves `try:` record `t` (its records before `before`): its catch
/// ended `failed` (a rethrow, or a failure inside it), or, with no catch, its body failed.
pub(crate) fn failure_escapes(store: &mut dyn Store, t: i64, before: Option<i64>) -> Result<bool> {
    use crate::language::Kind;
    let inside = store.executions_matching(&ExecQuery {
        after: t,
        before,
        parent: Some(Some(t)),
        ..Default::default()
    })?;
    let started = |r: &ExecutionRow| {
        r.status
            .as_ref()
            .is_some_and(|s| STARTS.contains(&s.as_str()))
    };
    let catch = inside
        .iter()
        .find(|r| started(r) && r.construct() == Some(Kind::Catch));
    let failed = |r: &&ExecutionRow| r.status == Some(S::Failed);
    if let Some(c) = catch {
        return Ok(inside
            .iter()
            .filter(failed)
            .any(|e| ends_of(e) == Some(c.id)));
    }
    // No catch: a failure of its body that goes to a handler (not one a retry or its gate's
    // `on_reject` takes) leaves it.
    for e in inside.iter().filter(failed) {
        if failure_of(store, e)?.0.is_some() {
            return Ok(true);
        }
    }
    Ok(false)
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
    caught_in(store, t, Some(catch.id))
}

/// The failure a catch of `try:` record `t` takes: the newest failed record inside it (before
/// `before`, where its catch began) that says why.
fn caught_in(store: &mut dyn Store, t: i64, before: Option<i64>) -> Result<Option<Caught>> {
    let failed = store.executions_matching(&ExecQuery {
        after: t,
        before,
        only: Some(&["failed"]),
        newest_first: true,
        limit: Some(16),
        ..Default::default()
    })?;
    // The failure the catch takes is the newest that says why: the end of a construct the
    // failure left (`--ends N --status failed`, no error of its own) only passes it on.
    let mut passed_on = None;
    for f in failed {
        if f.parent_id == Some(t) || store.scope_chain(f.id)?.contains(&t) {
            let caught = Caught {
                record: f.id,
                error: thrown_by_gate(store, &f)?.or_else(|| f.error_message.clone()),
            };
            if f.error_message.is_some() || ends_of(&f).is_none() {
                return Ok(Some(caught));
            }
            passed_on.get_or_insert(caught);
        }
    }
    Ok(passed_on)
}

/// The message a gate's `on_reject: throw "msg"` raises, when `failed` is its `approve`
/// record failed on its rejection or timeout: what `catch as err` binds (the person's reason
/// is the record's error, and the gate's). From the gate's sealed log only.
fn thrown_by_gate(store: &mut dyn Store, failed: &ExecutionRow) -> Result<Option<String>> {
    let text = failed.statement_text.as_deref().unwrap_or("");
    let Some(id) = crate::language::approved_gate(text) else {
        return Ok(None);
    };
    let Some(on_reject) = sealed_rejection(store, id)? else {
        return Ok(None);
    };
    let step = super::on_reject_step(on_reject.as_deref());
    Ok(match (step.action.as_str(), step.argument) {
        ("throw", Some(arg)) => crate::language::string_value(&arg).or(Some(arg)),
        _ => None,
    })
}

/// Gate `id`'s sealed `on_reject` (None inside: none given), when its sealed log says it was
/// rejected or timed out and stands (not tampered, opened by a sealed event): what a failed
/// `approve` record of it was taken by. None otherwise.
fn sealed_rejection(store: &mut dyn Store, id: &str) -> Result<Option<Option<String>>> {
    if crate::model::check_gate_id(id).is_err() {
        return Ok(None);
    }
    let Some(read) = crate::store::gate_read::read(store, id, &crate::model::now())? else {
        return Ok(None);
    };
    let d = &read.derived;
    let failed_on_it = matches!(
        d.status(),
        crate::model::GateStatus::Rejected | crate::model::GateStatus::Timeout
    );
    if read.tampered() || d.instance == 0 || !failed_on_it {
        return Ok(None);
    }
    Ok(Some(d.on_reject.clone().flatten()))
}

/// The `on_reject` that takes the failure `after` is, when it is an `approve` record failed
/// on its gate's rejection or timeout (the guide's record) and the gate's sealed `on_reject`
/// is not `throw`: `continue`, `retry STEP` or `session …`, what the gate's `next_step`
/// says. A failure a gate's `throw` raises (its default) goes to a handler as any other.
/// Read from the gate's sealed log only: a row says nothing here.
fn taken_by_gate(store: &mut dyn Store, after: &ExecutionRow) -> Result<Option<GateTakes>> {
    let text = after.statement_text.as_deref().unwrap_or("");
    let named = crate::language::approved_gate(text);
    if after.status != Some(S::Failed) || named.is_none() {
        return Ok(None);
    }
    let id = meta(after)
        .and_then(|m| str_of(&m, "gate_id"))
        .or(named.map(str::to_string));
    let Some(id) = id else {
        return Ok(None);
    };
    let Some(on_reject) = sealed_rejection(store, &id)? else {
        return Ok(None);
    };
    let step = super::on_reject_step(on_reject.as_deref());
    Ok((step.action != "throw").then(|| GateTakes {
        gate: id,
        on_reject: on_reject.unwrap_or_default().trim().to_string(),
    }))
}

/// What takes the failure `after` is: its gate's `on_reject` ([`taken_by_gate`]), else a
/// handler ([`failure_handler`]); never both. The gate is read once.
fn failure_of(
    store: &mut dyn Store,
    after: &ExecutionRow,
) -> Result<(Option<String>, Option<GateTakes>)> {
    Ok(match taken_by_gate(store, after)? {
        Some(taken) => (None, Some(taken)),
        None => (failure_handler(store, after)?, None),
    })
}

/// What takes the failure `after` is, unless a retry does (attempts left); a failed `approve`
/// its gate's `on_reject` takes is [`failure_of`]'s.
fn failure_handler(store: &mut dyn Store, after: &ExecutionRow) -> Result<Option<String>> {
    if after.status == Some(S::Completed) {
        return after_finally(store, after);
    }
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

/// The start records, and the end records of a statement some start has, in id order: all
/// `open_starts` needs (an end of any other statement closes no start). No ends are read
/// where no start is.
/// `after`: only the records after it (0: all).
fn starts_and_ends(store: &mut dyn Store, after: i64) -> Result<Vec<ExecutionRow>> {
    let mut rows = store.executions_matching(&ExecQuery {
        after,
        only: Some(STARTS),
        ..Default::default()
    })?;
    if !rows.is_empty() {
        rows.extend(store.executions_matching(&ExecQuery {
            after,
            only: Some(ENDS),
            of_started_statements: true,
            ..Default::default()
        })?);
        rows.sort_by_key(|r| r.id);
    }
    Ok(rows)
}

/// The open constructs and where the VM continues, read narrowly: the start records, and
/// only the end records of a statement some start has. An end of any other statement can
/// close no start (both shapes need the same index and text), so `open_starts` over these
/// rows is `open_starts` over the whole log.
pub(super) fn narrow_position(store: &mut dyn Store) -> Result<Position> {
    let rows = starts_and_ends(store, 0)?;
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
    let (handler, on_reject) = match &after_row {
        Some(r) => failure_of(store, r)?,
        None => (None, None),
    };
    // What the failure leaves before its handler: the open constructs around it, innermost
    // first, up to the `try:` or branch whose handler takes it (or all, for the program).
    let mut leaves = Vec::new();
    let mut takes = None;
    if handler.is_some() {
        use crate::language::Kind;
        let mut at = after_row.as_ref().and_then(|r| r.parent_id);
        while let Some(o) = at.and_then(|id| open.iter().find(|o| o.id == id)) {
            if matches!(o.construct(), Some(Kind::Try | Kind::Branch)) {
                takes = Some(*o);
                break;
            }
            leaves.push(o.id);
            at = o.parent_id;
        }
    }
    let after = after_row.as_ref().map(Event::from);
    // A failure on its way to a `try:`'s handler is what its `catch as err` binds next, not
    // what an outer catch the run is still in caught.
    let caught = match (takes, &after_row) {
        (Some(t), _) if t.construct() == Some(crate::language::Kind::Try) => {
            caught_in(store, t.id, None)?
        }
        // On its way to the program's end: the message the run fails with, a gate's `throw`
        // message before the person's reason.
        (None, Some(f)) if handler.is_some() && f.status == Some(S::Failed) => {
            match thrown_by_gate(store, f)?.or_else(|| f.error_message.clone()) {
                Some(error) => Some(Caught {
                    record: f.id,
                    error: Some(error),
                }),
                None => caught_by(store, &open)?,
            }
        }
        _ => caught_by(store, &open)?,
    };
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
        leaves,
        on_reject,
        caught,
    })
}

/// The starts still open inside start `id` (its body, at any depth), outermost first, as the
/// run's records read (`open_starts`): what must end before `id` can (`exec-append --ends`).
/// Only the records from `id` on are read: everything inside it comes after it, and an end
/// closes a start of its own parent's children, or the start it names or is under, so the
/// records before `id` close nothing inside it.
pub(crate) fn open_inside(store: &mut dyn Store, id: i64) -> Result<Vec<Event>> {
    let rows = starts_and_ends(store, id - 1)?;
    let parent: HashMap<i64, Option<i64>> = rows.iter().map(|r| (r.id, r.parent_id)).collect();
    let (open, _) = open_starts(&rows);
    let inside = |mut at: Option<i64>| {
        // A chain of parents is as long as the log at most; a loop in it (raw SQL) ends.
        for _ in 0..=rows.len() {
            match at {
                Some(p) if p == id => return true,
                Some(p) => at = parent.get(&p).copied().flatten(),
                None => return false,
            }
        }
        false
    };
    Ok(open
        .iter()
        .filter(|o| o.id != id && inside(o.parent_id))
        .map(|o| Event::from(*o))
        .collect())
}

/// The records that started a construct not ended yet, outermost first (what `doctor` checks
/// of a finished run).
pub(crate) fn open_records(store: &mut dyn Store) -> Result<Vec<Event>> {
    Ok(narrow_position(store)?.open)
}

/// The `parallel:` blocks and loops still open (their start record is open), from the records
/// written since they started.
pub(super) fn open_constructs(
    store: &mut dyn Store,
    open: &[Event],
) -> Result<(Vec<Parallel>, Vec<Loop>)> {
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
            Some(r) => failure_of(store, r)?.0,
            None => None,
        };
        // The innermost construct still open inside it (a block call, a loop, a try): where
        // the branch goes on, with what was done there (`position` when it is the innermost).
        let mut inner: Vec<i64> = vec![b.id];
        let mut deepest = None;
        for o in open.iter().filter(|o| o.id > b.id) {
            if o.parent_id.is_some_and(|p| inner.contains(&p)) {
                inner.push(o.id);
                deepest = Some(o);
            }
        }
        out.push(OpenBranch {
            branch: one_line(&branch, 60),
            record: b.id,
            after: last.map(|r| describe(&Event::from(r))),
            handler,
            inside: deepest.map(|o| format!("{} (record {}): go on inside it", describe(o), o.id)),
            delivered: None,
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
pub(super) fn outstanding_retries(store: &mut dyn Store) -> Result<Vec<Retry>> {
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

/// Refuses (4) a write into a construct that has ended (`id`, or the start it is inside):
/// `what` would land where no reader finds the run any more, as an abandoned (`skipped`)
/// branch's late result would. Everything inside a construct is written before its end.
pub(crate) fn not_after_its_end(
    store: &mut dyn Store,
    at: &ExecutionRow,
    what: &str,
) -> Result<()> {
    let Some((start, Some(end))) = enclosing_start(store, at)? else {
        return Ok(());
    };
    let status = end.status.as_ref().map_or("?", |s| s.as_str());
    Err(crate::error::refused(format!(
        "record {} ({}) has ended (record {}, {status}): {what} inside it is written before its end{}",
        start.id,
        one_line(start.statement_text.as_deref().unwrap_or(""), 60),
        end.id,
        if status == "skipped" {
            ", and a skipped construct writes nothing"
        } else {
            ""
        }
    )))
}

/// Refuses (4) the result of a branch that was abandoned: a bind of `name` at a `parallel:`
/// start (`at`, where a named branch's result is bound) when the branch of the parallel that
/// assigns `name` (`name = session ...`) has ended `skipped`. Its session's late answer is
/// not the program's: the race was decided without it.
pub(crate) fn not_an_abandoned_result(
    store: &mut dyn Store,
    p: &ExecutionRow,
    name: &str,
) -> Result<()> {
    use crate::language::Kind;
    if p.construct() != Some(Kind::Parallel) {
        return Ok(());
    }
    let under = store.executions_matching(&ExecQuery {
        after: p.id,
        parent: Some(Some(p.id)),
        ..Default::default()
    })?;
    let branch = under.iter().find(|r| {
        r.status
            .as_ref()
            .is_some_and(|s| STARTS.contains(&s.as_str()))
            && r.construct() == Some(Kind::Branch)
            && r.statement_text
                .as_deref()
                .and_then(crate::language::assigned_name)
                == Some(name)
    });
    let Some(b) = branch else {
        return Ok(());
    };
    let skipped = under
        .iter()
        .find(|e| ends_of(e) == Some(b.id) && e.status == Some(S::Skipped));
    match skipped {
        Some(e) => Err(crate::error::refused(format!(
            "branch record {} ({}) was skipped at record {}: an abandoned branch's result is not bound",
            b.id,
            one_line(b.statement_text.as_deref().unwrap_or(""), 60),
            e.id
        ))),
        None => Ok(()),
    }
}
