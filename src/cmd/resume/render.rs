//! `resume`'s answers as text: the spec's compact narration, one line a fact.

use super::{
    str_of, AgentInfo, BindingInfo, Event, GateNext, Loop, Parallel, Position, ResumeBrief,
    ResumeDoc, Retry, RunPart, Unfinished, BOUND,
};
use crate::model::{now, ExecStatus as S};
use crate::output::{human_duration, one_line, visible_line, Render};
use std::io::{self, Write};

pub(super) fn describe(e: &Event) -> String {
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
        .map(|g| {
            // A decision that does not stand is no decision: stop, as its next step says.
            if let Some(why) = &g.stop {
                return format!(
                    "; the gate is {} in its row, and no decision stands ({}): stop, tell the user",
                    g.status,
                    one_line(why, 120)
                );
            }
            // What the VM logs of the statement now, as the construct table says.
            let then = match g.status {
                crate::model::GateStatus::Approved => ": log it `completed`, then go on",
                crate::model::GateStatus::Pending => "",
                _ => ": log it `failed --error REASON`, then its on_reject",
            };
            format!("; the gate is now {}{then}", g.status)
        })
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
        let program = p
            .handler
            .as_deref()
            .is_some_and(|h| h.starts_with("the program"));
        writeln!(
            w,
            "caught: {} (record {}): {}",
            one_line(c.error.as_deref().unwrap_or("(no error recorded)"), 120),
            c.record,
            if program {
                "the MSG the run fails with"
            } else {
                "what `catch as err` binds"
            }
        )?;
    }
    // A finished run takes no more steps: what would take a failure is not said.
    if let Some(h) = p.handler.as_ref().filter(|_| !r.status.is_finished()) {
        let leaves: Vec<String> = p
            .leaves
            .iter()
            .map(|id| {
                let text = p.open.iter().find(|o| o.id == *id);
                let text = text.and_then(|o| o.statement_text.as_deref()).unwrap_or("");
                format!("record {id} ({})", one_line(text, 40))
            })
            .collect();
        let first = match leaves.is_empty() {
            true => String::new(),
            false => format!(
                "; first end what it leaves, innermost first (exec-append --ends ID --status failed): {}",
                leaves.join(", ")
            ),
        };
        writeln!(
            w,
            "failed: not the statement after it; the failure goes to {h}{first}"
        )?;
    }
    if let Some(o) = &p.on_reject {
        writeln!(
            w,
            "failed on gate {}'s decision: its on_reject `{}` takes it, not a catch (the gate's next step below)",
            visible_line(&o.gate),
            visible_line(&o.on_reject)
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
            let end = if why.starts_with("fail-fast") {
                "end the parallel --status failed"
            } else {
                "join it"
            };
            // A branch whose session ran and was not logged is logged before the end.
            let ran: Vec<&str> = p
                .open_branches
                .iter()
                .filter(|b| b.delivered.is_some())
                .map(|b| b.branch.as_str())
                .collect();
            let then = match ran.is_empty() {
                true => end.to_string(),
                false => format!("log [{}] completed, then {end}", ran.join(" ")),
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
            if let Some(name) = &b.delivered {
                writeln!(
                    w,
                    "  branch {} (record {}): its result went into {} after its last record: its session ran; log its completion, do not run it again",
                    b.branch,
                    b.record,
                    crate::output::visible_line(name)
                )?;
                continue;
            }
            match &b.inside {
                Some(inside) => writeln!(
                    w,
                    "  branch {} (record {}): inside {inside}",
                    b.branch, b.record
                )?,
                None => writeln!(
                    w,
                    "  branch {} (record {}): after {}{then}",
                    b.branch,
                    b.record,
                    b.after.as_deref().unwrap_or("nothing done inside it yet")
                )?,
            }
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
        let mut att = match (b.attachment_path.is_some(), b.unlogged) {
            (true, true) => ", attachment, unlogged",
            (true, false) => ", attachment",
            (false, true) => ", unlogged",
            (false, false) => "",
        }
        .to_string();
        if let Some(k) = &b.unlogged_key {
            att.push_str(&format!(
                " (its newest update keyed {})",
                crate::output::visible_line(k)
            ));
        }
        if let Some(g) = &b.by_gate {
            att.push_str(&format!(
                ", written by gate {}'s decision",
                crate::output::visible_line(g)
            ));
        }
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

/// `ran_unlogged`: a binding or an agent's session is `unlogged` (it ran and was not logged):
/// a `retry` not yet run again says to log that first, so that a step that ran is not run
/// twice.
fn gate_lines(w: &mut dyn Write, gates: &[GateNext], ran_unlogged: bool) -> io::Result<()> {
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
        // An approval's words are its comment; a rejection's, its reason.
        let label = match g.status {
            crate::model::GateStatus::Approved => "comment",
            _ => "reason",
        };
        let reason = g
            .reason
            .as_deref()
            .map(|r| format!("; {label}: \"{}\"", one_line(r, 80)))
            .unwrap_or_default();
        let taken = g
            .logged_failed
            .map(|r| format!("; logged failed (record {r}): taken there, not again"))
            .unwrap_or_default();
        let retried = g
            .retried_since
            .map(|r| match g.next_step.action.as_str() {
                "session" => format!("; the session ran (record {r}): go on after it, not again"),
                _ => format!(
                    "; the step ran again since (record {r}): open the gate again now (gates create {} --reopen)",
                    g.id
                ),
            })
            .unwrap_or_default();
        let retried = match (g.next_step.action.as_str(), g.retried_since) {
            ("retry", None) if ran_unlogged => "; an unlogged session below may be the step run again: log its statement first (the step is not run twice), then resume again".to_string(),
            _ => retried,
        };
        writeln!(
            w,
            "gate {} {}{instance}{integrity}{left}{progress} → {}{arg}{reason}{taken}{retried}",
            g.id, g.status, g.next_step.action
        )?;
        if let Some(a) = &g.answer {
            writeln!(w, "  answer: {a}")?;
        }
        for e in &g.edited {
            writeln!(w, "  edited: {e}")?;
        }
    }
    Ok(())
}

fn agent_lines(w: &mut dyn Write, agents: &[AgentInfo]) -> io::Result<()> {
    for a in agents {
        writeln!(
            w,
            "agent {} ({}, {} segments, memory {}){}",
            a.name,
            a.scope,
            a.segments,
            a.memory_bytes.map_or("none".into(), |b| format!("{b} B")),
            if a.unlogged {
                ", unlogged: its newest segment came after the last record, so its session ran; log that statement, do not run it again"
            } else {
                ""
            }
        )?;
    }
    Ok(())
}

/// 9 when a gate disagrees with its sealed log (its next step is `stop`), else 11 when a
/// gate's decision is stale (its next step is `reopen`).
fn stale_code(gates: &[GateNext]) -> crate::error::Code {
    if gates.iter().any(|g| g.integrity.state == "tampered") {
        crate::error::Code::Tampered
    } else if gates.iter().any(|g| g.stale.is_some()) {
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
        let ran =
            self.bindings.iter().any(|b| b.unlogged) || self.agents.iter().any(|a| a.unlogged);
        gate_lines(w, &self.gates, ran)
    }
}

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

impl Render for ResumeBrief {
    fn exit_code(&self) -> crate::error::Code {
        stale_code(&self.gates)
    }

    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        run_lines(w, &self.run, &self.position)?;
        construct_lines(w, &self.parallel, &self.loops, &self.retries)?;
        let ran =
            self.bindings.iter().any(|b| b.unlogged) || self.agents.iter().any(|a| a.unlogged);
        gate_lines(w, &self.gates, ran)?;
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
                crate::cmd::guide::shell_word(next)
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
