//! `log`: the execution log, one line an event, in the spec's compact narration
//! (`3→ research ✓`, `∥ [a b c] done`, `loop:2/5 exit`), or JSON Lines with `--json`.

use super::resume::{branch_list, meta, str_of};
use crate::model::{ExecStatus, ExecStatus as S};
use crate::output::{one_line, visible_line, Render};
use crate::store::{ExecutionRow, Store};
use anyhow::Result;
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::io::{self, Write};

/// One event of the log.
#[derive(Debug, Serialize)]
pub struct LogLine {
    pub id: i64,
    pub statement_index: Option<i64>,
    pub statement_text: Option<String>,
    pub status: Option<ExecStatus>,
    pub parent_id: Option<i64>,
    pub at: Option<String>,
    pub error_message: Option<String>,
    pub metadata: Option<Value>,
    /// Who appended it (`--as`, PROSE_PRINCIPAL, the MCP agent); null for a raw writer or a
    /// record from before this was recorded. Claimed, not proved.
    pub by: Option<String>,
    /// The compact narration of this event.
    pub narration: String,
    #[serde(skip)]
    mark: Mark,
    /// How deep it is under `parent` (0 at the top level): the text is indented by it.
    #[serde(skip)]
    depth: usize,
}

#[derive(Debug, Clone, Copy, Default)]
enum Mark {
    #[default]
    Plain,
    Good,
    Bad,
}

impl Render for LogLine {
    fn text(self, w: &mut dyn Write, tty: bool) -> io::Result<()> {
        // Colour only on a terminal, and never with NO_COLOR set.
        let colour = tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        let time = self
            .at
            .as_deref()
            .and_then(|a| a.get(11..))
            .unwrap_or("--:--:--");
        let (on, off) = match (colour, self.mark) {
            (true, Mark::Good) => ("\x1b[32m", "\x1b[0m"),
            (true, Mark::Bad) => ("\x1b[31m", "\x1b[0m"),
            _ => ("", ""),
        };
        let by = match self.by.as_deref() {
            Some(p) if p != "unknown" => format!(" · {}", visible_line(p)),
            _ => String::new(),
        };
        // Two spaces a level, at most 32 levels shown (deeper ones line up at the last).
        let indent = "  ".repeat(self.depth.min(32));
        writeln!(
            w,
            "{} {indent}{on}{}{off}{by}",
            visible_line(time),
            visible_line(&self.narration)
        )
    }

    /// It writes colour, so it makes its stored strings visible itself.
    fn escapes_itself(&self) -> bool {
        true
    }
}

/// Follows a run's log: remembers what it has shown, and the state the narration needs.
#[derive(Default)]
pub struct Log {
    last_id: i64,
    branches: HashMap<String, Vec<String>>,
    loop_max: HashMap<String, i64>,
    /// Iterations done, per loop.
    loop_done: HashMap<String, i64>,
    /// The loop each loop start record opened, by record id: its body's records name it as
    /// their parent.
    loop_of: HashMap<i64, String>,
    /// Each record's depth under `parent` (0 at the top level), of the records shown and the
    /// parents looked up.
    depth_of: HashMap<i64, usize>,
}

impl Log {
    /// The events appended since the last call.
    pub fn next(&mut self, store: &mut dyn Store) -> Result<Vec<LogLine>> {
        let rows = store.executions_after(self.last_id)?;
        let mut lines = Vec::with_capacity(rows.len());
        for r in rows {
            let depth = self.depth(store, &r)?;
            let mut line = self.narrate(r);
            line.depth = depth;
            lines.push(line);
        }
        Ok(lines)
    }

    /// How deep `r` is: one below its parent. A parent not shown (before `--since`) is looked
    /// up once, by its chain of parents.
    fn depth(&mut self, store: &mut dyn Store, r: &ExecutionRow) -> Result<usize> {
        let depth = match r.parent_id {
            None => 0,
            Some(p) => match self.depth_of.get(&p) {
                Some(d) => d + 1,
                None => {
                    // Nearest first: the parent, its parent, ... up to the top level.
                    let chain = store.scope_chain(p)?;
                    let n = chain.len();
                    for (i, id) in chain.into_iter().enumerate() {
                        self.depth_of.insert(id, n - 1 - i);
                    }
                    n
                }
            },
        };
        self.depth_of.insert(r.id, depth);
        Ok(depth)
    }

    /// A loop's `max`, or `?` while none was recorded.
    fn max_of(&self, lid: &str) -> String {
        self.loop_max
            .get(lid)
            .map_or("?".to_string(), |m| m.to_string())
    }

    fn narrate(&mut self, r: ExecutionRow) -> LogLine {
        self.last_id = self.last_id.max(r.id);
        let meta = meta(&r);
        let m = meta.clone().unwrap_or(Value::Null);
        let status = r.status.clone().unwrap_or_else(|| S::Other("?".into()));
        let text = one_line(r.statement_text.as_deref().unwrap_or(""), 50);
        let idx = r.statement_index.map_or("-".to_string(), |i| i.to_string());
        let (mark, tick) = match &status {
            S::Completed | S::Joined => (Mark::Good, "✓".to_string()),
            S::Failed => (
                Mark::Bad,
                match &r.error_message {
                    Some(e) => format!("✗ {}", one_line(e, 60)),
                    None => "✗".to_string(),
                },
            ),
            S::Executing | S::Started => (Mark::Plain, "…".to_string()),
            other => (Mark::Plain, other.to_string()),
        };
        let plain = format!("{idx}→ {text} {tick}");
        let narration = if let Some(pid) = str_of(&m, "parallel_id") {
            if let Some(Value::Array(_)) = m.get("branches") {
                self.branches.insert(pid.clone(), branch_list(&m));
            }
            let all = self
                .branches
                .get(&pid)
                .map(|b| b.join(" "))
                .unwrap_or(pid.clone());
            match (&status, str_of(&m, "branch")) {
                (S::Joined, _) => format!("∥ [{all}] done"),
                (_, Some(branch)) => format!("∥ {branch} {tick}"),
                (S::Started | S::Executing, None) => format!("∥ [{all}] start"),
                (_, None) => format!("∥ [{all}] {tick}"),
            }
        } else if let Some(lid) = str_of(&m, "loop_id") {
            if let Some(max) = m.get("max").and_then(Value::as_i64) {
                self.loop_max.insert(lid.clone(), max);
            }
            let max = self.max_of(&lid);
            let done = self.loop_done.get(&lid).copied().unwrap_or(0);
            let i = m.get("iteration").and_then(Value::as_i64);
            let started = self.loop_of.values().any(|l| *l == lid);
            match status {
                S::Exited => {
                    let why = str_of(&m, "reason")
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default();
                    format!("loop:{}/{max} exit{why}", i.unwrap_or(done))
                }
                S::Iteration => {
                    let i = i.unwrap_or(done + 1);
                    self.loop_done.insert(lid.clone(), i);
                    format!("loop:{i}/{max}")
                }
                S::Started | S::Executing if !started => {
                    self.loop_of.insert(r.id, lid.clone());
                    format!("loop:0/{max} start")
                }
                // A record of the loop's body that names the loop: the iteration it is in.
                _ => format!("{plain} · loop:{}/{max}", i.unwrap_or(done + 1)),
            }
        } else if status == S::Retry {
            let [attempt, max] = ["attempt", "max"].map(|k| {
                m.get(k)
                    .and_then(Value::as_i64)
                    .map_or("?".into(), |a| a.to_string())
            });
            format!("{idx}→ {text} ↻ {attempt}/{max}")
        } else if str_of(&m, "gate_id").is_some() && status == S::Pending {
            // An event, true whenever it is read: the gate opened here. Its decision is the
            // VM's record of the statement, later in the log.
            format!("⏸ {text} opened")
        } else if let Some(lid) = r.parent_id.and_then(|p| self.loop_of.get(&p)) {
            // A record of a loop's body (parented on the loop's start): its iteration.
            let done = self.loop_done.get(lid).copied().unwrap_or(0);
            let max = self.max_of(lid);
            format!("{plain} · loop:{}/{max}", done + 1)
        } else {
            plain
        };
        LogLine {
            id: r.id,
            at: r.at().map(str::to_string),
            statement_index: r.statement_index,
            statement_text: r.statement_text,
            status: r.status,
            parent_id: r.parent_id,
            error_message: r.error_message,
            metadata: meta,
            by: r.principal,
            narration,
            mark,
            depth: 0,
        }
    }
}

/// Prints the log through `out`, one line an event; with `--follow`, goes on printing new
/// events until interrupted. Each look is one short statement: no read transaction is held
/// between polls, so writers are never held up.
pub fn follow(
    args: &crate::cli::LogArgs,
    ctx: &crate::context::Context,
    out: &mut dyn FnMut(LogLine) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    let (_, mut store) = ctx.the_run()?;
    let mut log = Log {
        last_id: args.since,
        ..Log::default()
    };
    // Woken by each commit; else looks every --poll-ms.
    let mut changes = args.follow.then(|| store.changes());
    loop {
        for line in log.next(store.as_mut())? {
            out(line)?;
        }
        let Some(changes) = changes.as_mut() else {
            return Ok(());
        };
        let every = crate::store::wake::interval(
            args.poll_ms.map(std::time::Duration::from_millis),
            changes.as_ref(),
            std::time::Duration::from_millis(500),
        );
        changes.wait(every);
    }
}
