use crate::cli::ExecAppendArgs;
use crate::error::{not_found, refused, shown, usage};
use crate::model::{check_key, check_metadata, now};
use crate::output::Render;
use crate::store::{ExecQuery, NewExecution, ENDS, STARTS};
use anyhow::Result;
use serde::Serialize;
use serde_json::Value;
use std::io::{self, Write};

#[derive(Debug, Serialize)]
pub struct Appended {
    pub id: i64,
    pub statement_index: i64,
    pub status: crate::model::ExecStatus,
    pub parent_id: Option<i64>,
    pub at: String,
}

impl Render for Appended {
    /// Just the new record's id, so `ID=$(prose-state exec-append ...)` works.
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        writeln!(w, "{}", self.id)
    }
}

/// What an end takes from its start (`--ends`): the statement, the parent, and the ids of
/// the construct it belongs to.
struct Start {
    index: i64,
    text: String,
    parent: Option<i64>,
    metadata: serde_json::Map<String, Value>,
}

/// The start record `id` that `--ends` names, checked against what else the line gives.
fn start_of(store: &mut dyn crate::store::Store, args: &ExecAppendArgs, id: i64) -> Result<Start> {
    let Some(r) = crate::store::record(store, id)? else {
        return Err(not_found(format!("--ends names no record: {id}")));
    };
    let status = r.status.as_ref().map_or("", |s| s.as_str());
    if !STARTS.contains(&status) {
        return Err(usage(format!(
            "--ends {id} names a `{status}` record, not a start (`executing` or `started`): name the record that opened the construct"
        )));
    }
    if !args.status.is_ending() || args.status == crate::model::ExecStatus::Iteration {
        return Err(usage(format!(
            "--ends takes an ending status (completed, failed, skipped, joined, exited), not {}",
            args.status.as_str()
        )));
    }
    let index = r.statement_index.unwrap_or_default();
    let text = r.statement_text.clone().unwrap_or_default();
    let differs = |what: &str, given: String, start: String| {
        usage(format!(
            "--{what} {} differs from the start's ({}): leave it out with --ends",
            shown(&given),
            shown(&start)
        ))
    };
    if let Some(i) = args.index.filter(|i| *i != index) {
        return Err(differs("index", i.to_string(), index.to_string()));
    }
    if let Some(t) = args.text.as_ref().filter(|t| **t != text) {
        return Err(differs("text", t.clone(), text));
    }
    if let Some(p) = args.parent.filter(|p| Some(*p) != r.parent_id) {
        return Err(differs(
            "parent",
            p.to_string(),
            r.parent_id.map_or("none".into(), |p| p.to_string()),
        ));
    }
    // The ids that tie an end to its construct (a branch's `parallel_id` and `branch`, a
    // loop's `loop_id`) come with it, so that readers of either shape count it.
    let mut metadata = serde_json::Map::new();
    if let Some(Value::Object(m)) = r
        .metadata
        .as_deref()
        .and_then(|m| serde_json::from_str(m).ok())
    {
        for k in ["parallel_id", "branch", "loop_id"] {
            if let Some(v) = m.get(k) {
                metadata.insert(k.to_string(), v.clone());
            }
        }
    }
    // An end already appended: the same one again is its id (the implicit key makes it so);
    // another is refused.
    let ends = store.executions_matching(&ExecQuery {
        after: id,
        only: Some(ENDS),
        statement: Some(r.statement_index),
        with_metadata: true,
        ..Default::default()
    })?;
    for e in ends {
        let named = e
            .metadata
            .as_deref()
            .and_then(|m| serde_json::from_str::<Value>(m).ok())
            .and_then(|m| m.get("ends").and_then(Value::as_i64));
        let same = e.status.as_ref().map(|s| s.as_str()) == Some(args.status.as_str())
            && e.error_message == args.error;
        if named == Some(id) && !same {
            let error = e
                .error_message
                .as_deref()
                .map(|m| format!(", --error {}", shown(m)))
                .unwrap_or_default();
            return Err(refused(format!(
                "record {id} was already ended by record {} ({}{error})",
                e.id,
                e.status.as_ref().map_or("?", |s| s.as_str())
            )));
        }
        if named == Some(id) {
            // The same end again: its id, whatever is open now.
            return Ok(Start {
                index,
                text,
                parent: r.parent_id,
                metadata,
            });
        }
    }
    // A failure that leaves a `try:` (its catch ended failed, or its body failed with no
    // catch) leaves it failed: ended `completed`, the failure would be lost.
    if args.status == crate::model::ExecStatus::Completed
        && r.construct() == Some(crate::language::Kind::Try)
        && super::resume::failure_escapes(store, id, None)?
    {
        return Err(refused(format!(
            "try: record {id} is left by a failure (its catch ended failed, or its body failed with no catch): end it --status failed, and the failure goes on to what takes it there (resume's position.handler)"
        )));
    }
    // A construct ends after everything inside it: a start still open in its body ends
    // first, so that no reader finds the run inside a construct that has ended.
    if let Some(o) = super::resume::open_inside(store, id)?.pop() {
        return Err(refused(format!(
            "record {id} cannot end while record {} ({}) inside it is open: end that first (exec-append --ends {} --status failed where the failure leaves it, skipped where it is abandoned, completed where it is done)",
            o.id,
            crate::output::one_line(o.statement_text.as_deref().unwrap_or(""), 60),
            o.id
        )));
    }
    Ok(Start {
        index,
        text,
        parent: r.parent_id,
        metadata,
    })
}

/// Refuses (4) `approve G:` logged `completed` while G is pending, or after its rejection or
/// timeout: a VM that did would go on as if a person had approved (the guide's record of a
/// rejection is `failed`); and logged `failed` while G is pending or approved: its failure
/// would be read as a rejection no one made (`resume`'s `caught`). Judged by the gate's
/// sealed log; a gate nothing sealed opened, or one tampered with, is left to the checks that
/// read it.
fn approval_logged(
    store: &mut dyn crate::store::Store,
    text: &str,
    status: &crate::model::ExecStatus,
) -> Result<()> {
    use crate::model::{ExecStatus, GateStatus};
    let Some(gate) = crate::language::approved_gate(text) else {
        return Ok(());
    };
    // The statement's record is its outcome: `completed` (approved) or `failed` (rejected or
    // timed out); its opening (`pending`) is `gates create`'s own.
    if !matches!(status, ExecStatus::Completed | ExecStatus::Failed) {
        return Err(usage(format!(
            "`approve {}:` is logged `completed` once its gate is approved, or `failed` once it is rejected or timed out, not `{}` (`gates create` logs its opening)",
            crate::output::visible_line(gate),
            status.as_str()
        )));
    }
    if let Err(e) = crate::model::check_gate_id(gate) {
        return Err(usage(format!(
            "{} names no gate: {e:#}",
            crate::output::one_line(text, 60)
        )));
    }
    let Some(read) = crate::store::gate_read::read(store, gate, &now())? else {
        return Err(crate::error::refused(format!(
            "`approve {}:` is logged after its gate's decision, and no gate {} was opened in this run: `gates create` it first",
            crate::output::visible_line(gate),
            shown(gate)
        )));
    };
    let gate_status = read.derived.status();
    if read.tampered() || read.derived.instance == 0 {
        return Ok(());
    }
    if *status == ExecStatus::Failed {
        return match gate_status {
            GateStatus::Rejected | GateStatus::Timeout => Ok(()),
            other => Err(crate::error::refused(format!(
                "`approve {}:` is logged failed only after its gate's rejection or timeout, and it is {other}: {}",
                crate::output::visible_line(gate),
                if other.is_pending() {
                    "wait for the decision (gates wait) first"
                } else {
                    "an approval is logged `completed`"
                }
            ))),
        };
    }
    let status = gate_status;
    if status == GateStatus::Approved {
        return Ok(());
    }
    Err(crate::error::refused(format!(
        "`approve {}:` is not logged completed while its gate is {status}: {}",
        crate::output::visible_line(gate),
        if status.is_pending() {
            "wait for the decision (gates wait) first"
        } else {
            "a rejection or a timeout is logged `failed --error REASON`, then its on_reject"
        }
    )))
}

/// Refuses (4) a `catch` or `finally` started while a start inside its `try:` (the parent
/// given) is still open: a failure reaches its handler only after it has left everything in
/// the try's body, each construct it left ended `failed`. So no reader finds the run both
/// inside the body and in its handler.
fn handler_after_its_body(
    store: &mut dyn crate::store::Store,
    text: &str,
    metadata: Option<&str>,
    parent: Option<i64>,
) -> Result<()> {
    use crate::language::Kind;
    let metadata = metadata.and_then(|m| serde_json::from_str::<Value>(m).ok());
    let kind = crate::language::construct_of(Some(text), metadata.as_ref());
    let (Some(Kind::Catch | Kind::Finally), Some(t)) = (kind, parent) else {
        return Ok(());
    };
    // The same handler already started (this start again, after a crash) is not what it
    // follows; an open `catch` is, for its `finally`. A `catch` after its `finally` is
    // refused as such (`inside_an_open_construct`).
    let mut body = super::resume::open_inside(store, t)?
        .into_iter()
        .filter(|o| {
            o.parent_id != Some(t)
                || !(o.construct == kind
                    || (kind == Some(Kind::Catch) && o.construct == Some(Kind::Finally)))
        });
    let Some(o) = body.next_back() else {
        return Ok(());
    };
    let (what, end) = match o.construct {
        Some(Kind::Catch) if o.parent_id == Some(t) => (
            "its catch has ended",
            "completed, or failed where the failure leaves it",
        ),
        _ => ("the failure has left the try's body", "failed"),
    };
    Err(refused(format!(
        "{} starts only after {what}, and record {} ({}) inside try record {t} is open: end it first (exec-append --ends {} --status {end})",
        crate::output::one_line(text, 40),
        o.id,
        crate::output::one_line(o.statement_text.as_deref().unwrap_or(""), 60),
        o.id
    )))
}

/// Refuses (4) a record inside a construct that has ended (`parent`, or the start it is
/// inside), and one in a `try:`'s body once its handler began: a body record after its
/// `catch` or `finally` started, a `catch` after its `finally` did. Otherwise a reader would
/// find the run inside the body and in its handler at once. The record again under its
/// `--key` (a step run again after a crash) is the rules' to answer.
fn inside_an_open_construct(
    store: &mut dyn crate::store::Store,
    text: &str,
    index: i64,
    metadata: Option<&str>,
    parent: i64,
    key: Option<&str>,
) -> Result<()> {
    use crate::language::Kind;
    let refusal = (|| -> Result<Option<anyhow::Error>> {
        let Some(p) = crate::store::record(store, parent)? else {
            return Ok(None);
        };
        if let Err(e) = super::resume::not_after_its_end(store, &p, "a record") {
            return Ok(Some(e));
        }
        let status = p.status.as_ref().map_or("", |s| s.as_str());
        if !STARTS.contains(&status) {
            return Ok(Some(refused(format!(
                "--parent {parent} names a `{status}` record ({}), not a start: records are appended inside a construct's start (`started` or `executing`)",
                crate::output::one_line(p.statement_text.as_deref().unwrap_or(""), 40)
            ))));
        }
        // The older shape's end of the try itself is its own statement under it.
        let its_end = p.statement_index == Some(index) && p.statement_text.as_deref() == Some(text);
        if p.construct() != Some(Kind::Try) || its_end {
            return Ok(None);
        }
        let metadata = metadata.and_then(|m| serde_json::from_str::<Value>(m).ok());
        let kind = crate::language::construct_of(Some(text), metadata.as_ref());
        let handlers = store.executions_matching(&ExecQuery {
            after: parent,
            parent: Some(Some(parent)),
            only: Some(STARTS),
            ..Default::default()
        })?;
        let after = |k: Kind| handlers.iter().find(|h| h.construct() == Some(k));
        // A try has one catch and one finally: a second of either is refused as what it
        // follows (the same start again under its `--key` is a retry, answered below).
        let began = match kind {
            Some(Kind::Finally) => after(Kind::Finally),
            Some(Kind::Catch) => after(Kind::Finally).or_else(|| after(Kind::Catch)),
            _ => after(Kind::Catch).or_else(|| after(Kind::Finally)),
        };
        Ok(began.map(|h| {
            let handler = crate::output::one_line(h.statement_text.as_deref().unwrap_or(""), 40);
            if h.construct() == kind {
                return refused(format!(
                    "try: record {parent} already has its {handler} (record {}): a try has one",
                    h.id
                ));
            }
            refused(format!(
                "{} comes before {handler} in try: record {parent}, and that began at record {}: nothing is appended to what a handler follows",
                crate::output::one_line(text, 40),
                h.id
            ))
        }))
    })()?;
    let Some(refusal) = refusal else {
        return Ok(());
    };
    if let Some(key) = key {
        let mut tx = store.begin(crate::store::TxKind::Write)?;
        if tx.keyed_execution(key)?.is_some() {
            return Ok(());
        }
    }
    Err(refusal)
}

impl super::Run for ExecAppendArgs {
    type Output = Appended;
    fn run(&self, ctx: &crate::context::Context) -> Result<Appended> {
        let (_, mut store) = ctx.the_run()?;
        let writer = ctx.writer(&self.principal)?;
        self.metadata.as_deref().map(check_metadata).transpose()?;
        self.key.as_deref().map(check_key).transpose()?;
        let mut metadata = match self.metadata.as_deref() {
            Some(m) => match serde_json::from_str(m)? {
                Value::Object(m) => m,
                _ => unreachable!("checked above"),
            },
            None => serde_json::Map::new(),
        };
        // A retry's count: whole numbers from 1, `(retry: N)` being attempts 1 to N + 1 (a
        // loop's `max` is its own).
        let count = |k: &str| metadata.get(k).map(|v| v.as_u64().filter(|n| *n >= 1));
        let retry = metadata.contains_key("attempt");
        for k in ["attempt", "max"].into_iter().filter(|_| retry) {
            if let Some(None) = count(k) {
                return Err(usage(format!(
                    "--metadata \"{k}\" is a whole number from 1, not {}",
                    metadata[k]
                )));
            }
        }
        if let (Some(Some(a)), Some(Some(m))) = (count("attempt"), count("max")) {
            if a > m + 1 {
                return Err(usage(format!(
                    "--metadata \"attempt\": {a} is past \"max\": {m} (`(retry: {m})` is attempts 1 to {})",
                    m + 1
                )));
            }
        }
        for k in ["ends", "construct"] {
            if metadata.contains_key(k) {
                return Err(usage(format!(
                    "--metadata may not set \"{k}\": give --{k} instead"
                )));
            }
        }
        if let Some(kind) = &self.construct {
            if !STARTS.contains(&self.status.as_str()) {
                return Err(usage(format!(
                    "--construct names what a start opens: give it with --status started or executing, not {}",
                    self.status.as_str()
                )));
            }
            metadata.insert("construct".into(), Value::String(kind.clone()));
        }
        let (index, text, parent, key) = match self.ends {
            Some(id) => {
                let start = start_of(store.as_mut(), self, id)?;
                for (k, v) in start.metadata {
                    metadata.entry(k).or_insert(v);
                }
                metadata.insert("ends".into(), Value::from(id));
                (
                    start.index,
                    start.text,
                    start.parent,
                    Some(format!("ends {id}")),
                )
            }
            None => (
                self.index.expect("clap requires --index without --ends"),
                self.text
                    .clone()
                    .expect("clap requires --text without --ends"),
                self.parent,
                self.key.clone(),
            ),
        };
        // As given, unless something was added to it.
        let metadata = if self.ends.is_none() && self.construct.is_none() {
            self.metadata.clone()
        } else {
            Some(Value::Object(metadata).to_string())
        };
        approval_logged(store.as_mut(), &text, &self.status)?;
        if STARTS.contains(&self.status.as_str()) {
            handler_after_its_body(store.as_mut(), &text, metadata.as_deref(), parent)?;
        }
        if let (None, Some(p)) = (self.ends, parent) {
            inside_an_open_construct(
                store.as_mut(),
                &text,
                index,
                metadata.as_deref(),
                p,
                key.as_deref(),
            )?;
        }
        let at = now();
        let (started_at, completed_at) = if self.status.is_ending() {
            (None, Some(at.as_str()))
        } else {
            (Some(at.as_str()), None)
        };
        let id = store.append_execution(&NewExecution {
            statement_index: Some(index),
            statement_text: &text,
            status: self.status.as_str(),
            started_at,
            completed_at,
            error_message: self.error.as_deref(),
            parent_id: parent,
            metadata: metadata.as_deref(),
            idempotency_key: key.as_deref(),
            principal: &writer,
        })?;
        Ok(Appended {
            id,
            statement_index: index,
            status: self.status.clone(),
            parent_id: parent,
            at,
        })
    }
}
