//! `resume`: one document with everything a VM needs to continue a run from the database
//! alone, computed here from plain rows so that every backend answers alike.

use super::gates::IntegrityView;
use crate::model::{now, ExecStatus as S, RunStatus};
use crate::output::{human_duration, one_line, Render};
use crate::run::RunPaths;
use crate::store::{AgentRow, ExecutionRow, GateRow, Store};
use anyhow::Result;
use serde::Serialize;
use serde_json::Value;
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
}

impl From<&ExecutionRow> for Event {
    fn from(r: &ExecutionRow) -> Self {
        Event {
            id: r.id,
            statement_index: r.statement_index,
            statement_text: r.statement_text.clone(),
            status: r.status.clone(),
            parent_id: r.parent_id,
            at: r.at().map(str::to_string),
            metadata: meta(r),
        }
    }
}

fn meta(r: &ExecutionRow) -> Option<Value> {
    r.metadata
        .as_deref()
        .and_then(|m| serde_json::from_str(m).ok())
}

#[derive(Debug, Serialize)]
pub struct Position {
    /// The latest statement that started (`executing`/`started`) with no later completion of
    /// the same statement (same index, text and parent).
    pub current: Option<Event>,
    /// The latest record of all.
    pub last_event: Option<Event>,
}

#[derive(Debug, Serialize)]
pub struct Parallel {
    pub parallel_id: String,
    pub statement_index: Option<i64>,
    pub branches: Vec<String>,
    pub completed: Vec<String>,
    pub failed: Vec<String>,
    /// Branches neither completed nor failed.
    pub outstanding: Vec<String>,
    pub joined: bool,
}

#[derive(Debug, Serialize)]
pub struct Loop {
    pub loop_id: String,
    pub statement_index: Option<i64>,
    /// The latest iteration recorded.
    pub iteration: Option<i64>,
    pub max: Option<i64>,
    pub exited: bool,
    pub reason: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Retry {
    pub id: i64,
    pub statement_index: Option<i64>,
    pub statement_text: Option<String>,
    pub attempt: Option<i64>,
    pub max: Option<i64>,
    /// The error of the last failure before this retry.
    pub last_error: Option<String>,
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
    /// sealed log, or whose decision nothing attests (its decision cannot be relied on)
    pub action: String,
    /// The message, label or prompt the action carries, as written.
    pub argument: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct GateNext {
    pub id: String,
    pub status: crate::model::GateStatus,
    pub next_step: NextStep,
    pub on_reject: Option<String>,
    pub resolved_by: Option<String>,
    pub resolved_at: Option<String>,
    pub timeout_at: Option<String>,
    /// Where the gate stands against its audit log (as `gates show` reports it). A tampered
    /// gate's next step is `stop`, whatever its status says.
    pub integrity: IntegrityView,
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
    let step = |action: &str, argument| NextStep {
        action: action.into(),
        argument,
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

fn next_step(g: &GateRow) -> NextStep {
    match g.status.as_str() {
        "approved" => NextStep {
            action: "continue".into(),
            argument: None,
        },
        "pending" => NextStep {
            action: "wait".into(),
            argument: None,
        },
        _ => on_reject_step(g.on_reject.as_deref()),
    }
}

fn is_start(status: Option<&S>) -> bool {
    matches!(status, Some(S::Executing | S::Started))
}

fn is_end(status: Option<&S>) -> bool {
    matches!(
        status,
        Some(S::Completed | S::Failed | S::Skipped | S::Joined | S::Exited)
    )
}

type StatementKey = (Option<i64>, Option<String>, Option<i64>);

fn key(r: &ExecutionRow) -> StatementKey {
    (r.statement_index, r.statement_text.clone(), r.parent_id)
}

fn str_of(v: &Value, k: &str) -> Option<String> {
    match v.get(k)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

fn position(rows: &[ExecutionRow]) -> Position {
    let mut open: HashMap<StatementKey, &ExecutionRow> = HashMap::new();
    for r in rows {
        let status = r.status.as_ref();
        if is_start(status) {
            open.insert(key(r), r);
        } else if is_end(status) {
            open.remove(&key(r));
        }
    }
    Position {
        current: open.values().max_by_key(|r| r.id).map(|r| Event::from(*r)),
        last_event: rows.last().map(Event::from),
    }
}

fn parallels(rows: &[ExecutionRow]) -> Vec<Parallel> {
    let mut by_id: BTreeMap<String, Parallel> = BTreeMap::new();
    for r in rows {
        let Some(m) = meta(r) else { continue };
        let Some(pid) = str_of(&m, "parallel_id") else {
            continue;
        };
        let p = by_id.entry(pid.clone()).or_insert_with(|| Parallel {
            parallel_id: pid,
            statement_index: r.statement_index,
            branches: Vec::new(),
            completed: Vec::new(),
            failed: Vec::new(),
            outstanding: Vec::new(),
            joined: false,
        });
        if let Some(Value::Array(bs)) = m.get("branches") {
            p.branches = bs
                .iter()
                .map(|b| b.as_str().map_or_else(|| b.to_string(), str::to_string))
                .collect();
        }
        let status = r.status.as_ref();
        if let Some(branch) = str_of(&m, "branch") {
            let list = match status {
                Some(S::Completed) => Some(&mut p.completed),
                Some(S::Failed) => Some(&mut p.failed),
                _ => None,
            };
            if let Some(list) = list {
                if !list.contains(&branch) {
                    list.push(branch);
                }
            }
        }
        if status == Some(&S::Joined) {
            p.joined = true;
        }
    }
    by_id
        .into_values()
        .map(|mut p| {
            p.outstanding = p
                .branches
                .iter()
                .filter(|b| !p.completed.contains(b) && !p.failed.contains(b))
                .cloned()
                .collect();
            p
        })
        .collect()
}

fn loops(rows: &[ExecutionRow]) -> Vec<Loop> {
    let mut by_id: BTreeMap<String, Loop> = BTreeMap::new();
    for r in rows {
        let Some(m) = meta(r) else { continue };
        let Some(lid) = str_of(&m, "loop_id") else {
            continue;
        };
        let l = by_id.entry(lid.clone()).or_insert_with(|| Loop {
            loop_id: lid,
            statement_index: r.statement_index,
            iteration: None,
            max: None,
            exited: false,
            reason: None,
        });
        if let Some(i) = m.get("iteration").and_then(Value::as_i64) {
            l.iteration = Some(l.iteration.map_or(i, |cur| cur.max(i)));
        }
        if let Some(max) = m.get("max").and_then(Value::as_i64) {
            l.max = Some(max);
        }
        if r.status == Some(S::Exited) {
            l.exited = true;
            l.reason = str_of(&m, "reason");
        }
    }
    by_id.into_values().collect()
}

fn retries(rows: &[ExecutionRow]) -> Vec<Retry> {
    let mut latest: HashMap<StatementKey, &ExecutionRow> = HashMap::new();
    let mut last_error: HashMap<StatementKey, String> = HashMap::new();
    for r in rows {
        if let (Some(S::Failed), Some(e)) = (&r.status, &r.error_message) {
            last_error.insert(key(r), e.clone());
        }
        latest.insert(key(r), r);
    }
    let mut out: Vec<Retry> = latest
        .values()
        .filter(|r| r.status == Some(S::Retry))
        .map(|r| {
            let m = meta(r).unwrap_or(Value::Null);
            Retry {
                id: r.id,
                statement_index: r.statement_index,
                statement_text: r.statement_text.clone(),
                attempt: m.get("attempt").and_then(Value::as_i64),
                max: m.get("max").and_then(Value::as_i64),
                last_error: last_error.get(&key(r)).cloned(),
            }
        })
        .collect();
    out.sort_by_key(|r| r.id);
    out
}

fn agent_infos(scope: &str, rows: Vec<AgentRow>) -> impl Iterator<Item = AgentInfo> + '_ {
    rows.into_iter().map(move |a| AgentInfo {
        memory_bytes: a.memory.as_ref().map(String::len),
        name: a.name,
        scope: a.scope.unwrap_or_else(|| scope.to_string()),
        segments: a.segments,
    })
}

/// `other_agents`: project- and user-scope agents, where their databases exist.
pub fn run(
    run: &RunPaths,
    store: &mut dyn Store,
    other_agents: Vec<(&str, Vec<AgentRow>)>,
) -> Result<ResumeDoc> {
    let now = now();
    let resumed = store.record_resume(&now)?;
    let summary = store.run_summary(&now)?;
    let rows = store.executions()?;

    let mut statements: BTreeMap<i64, Event> = BTreeMap::new();
    for r in &rows {
        if let Some(i) = r.statement_index {
            statements.insert(i, Event::from(r));
        }
    }

    let bindings = store
        .bindings()?
        .into_iter()
        .map(|b| {
            let value =
                String::from_utf8_lossy(b.value.as_deref().unwrap_or_default()).into_owned();
            let bytes = match &b.attachment_path {
                Some(p) => crate::attach::stored_len(&mut *store, &run.dir, p).unwrap_or(0),
                None => value.len() as u64,
            };
            BindingInfo {
                scope: if b.execution_id.is_some() {
                    "execution"
                } else {
                    "root"
                },
                first_line: one_line(&value, 100),
                bytes,
                name: b.name,
                kind: b.kind,
                execution_id: b.execution_id,
                attachment_path: b.attachment_path,
            }
        })
        .collect();

    let mut agents: Vec<AgentInfo> = agent_infos("execution", store.agents()?).collect();
    for (scope, rows) in other_agents {
        agents.extend(agent_infos(scope, rows));
    }

    let gates = store.gates(None, &now)?;
    let report = store.verify_audit()?;
    let gates = gates
        .into_iter()
        .map(|g| GateNext {
            integrity: IntegrityView::of(&report, &g.id),
            // A decision that does not stand is no decision: the VM stops, whatever the row
            // says (a pending gate nothing sealed is still only waited on).
            next_step: match IntegrityView::of(&report, &g.id) {
                v if v.state == "tampered"
                    || (v.state == "unattested" && !g.status.is_pending()) =>
                {
                    NextStep {
                        action: "stop".into(),
                        argument: v.detail,
                    }
                }
                _ => next_step(&g),
            },
            id: g.id,
            status: g.status,
            on_reject: g.on_reject,
            resolved_by: g.resolved_by,
            resolved_at: g.resolved_at,
            timeout_at: g.timeout_at,
        })
        .collect();

    Ok(ResumeDoc {
        run: RunPart {
            id: summary.run.id,
            status: resumed.status,
            previous_status: resumed.previous_status,
            program_path: summary.run.program_path,
            error_message: summary.error_message,
        },
        position: position(&rows),
        statements: statements.into_values().collect(),
        parallel: parallels(&rows),
        loops: loops(&rows),
        retries: retries(&rows),
        bindings,
        agents,
        gates,
        gates_logged_resumed: resumed.gates_logged,
    })
}

fn describe(e: &Event) -> String {
    format!(
        "{} {} ({}, record {}{})",
        e.statement_index.map_or("-".into(), |i| i.to_string()),
        one_line(e.statement_text.as_deref().unwrap_or(""), 50),
        e.status.as_ref().map_or("?", S::as_str),
        e.id,
        e.at.as_deref()
            .map(|a| format!(", {a}"))
            .unwrap_or_default()
    )
}

impl Render for ResumeDoc {
    /// The spec's compact narration, one line a fact.
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        let r = &self.run;
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
        match &self.position.current {
            Some(e) => writeln!(w, "at: {}", describe(e))?,
            None => writeln!(w, "at: nothing in progress")?,
        }
        if let Some(e) = &self.position.last_event {
            writeln!(w, "last: {}", describe(e))?;
        }
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
        for p in &self.parallel {
            let state = if p.joined {
                "joined".to_string()
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
        }
        for l in &self.loops {
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
            writeln!(
                w,
                "loop {}:{}/{} {state}",
                l.loop_id,
                l.iteration.unwrap_or(0),
                l.max.map_or("?".into(), |m| m.to_string())
            )?;
        }
        for t in &self.retries {
            writeln!(
                w,
                "retry {} {}: attempt {}/{}",
                t.statement_index.unwrap_or_default(),
                one_line(t.statement_text.as_deref().unwrap_or(""), 40),
                t.attempt.map_or("?".into(), |a| a.to_string()),
                t.max.map_or("?".into(), |m| m.to_string())
            )?;
        }
        for b in &self.bindings {
            let scope = b
                .execution_id
                .map_or("root".into(), |e| format!("exec {e}"));
            let att = if b.attachment_path.is_some() {
                ", attachment"
            } else {
                ""
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
        for a in &self.agents {
            writeln!(
                w,
                "agent {} ({}, {} segments, memory {})",
                a.name,
                a.scope,
                a.segments,
                a.memory_bytes.map_or("none".into(), |b| format!("{b} B"))
            )?;
        }
        for g in &self.gates {
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
            writeln!(
                w,
                "gate {} {}{integrity}{left} → {}{arg}",
                g.id, g.status, g.next_step.action
            )?;
        }
        Ok(())
    }
}

/// `resume`: the run of `--run`.
pub struct Resume;

impl super::Run for Resume {
    type Output = ResumeDoc;
    fn run(&self, ctx: &crate::context::Context) -> Result<ResumeDoc> {
        let (paths, mut store) = ctx.the_run()?;
        // Project and user agents too, where their stores exist (never created here).
        let others = ctx.other_agents()?;
        run(&paths, store.as_mut(), others)
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
