//! How a gate is shown by every reader (list, show, wait, resume, the approval page): its
//! row and time left, its team's votes and schedule, and where it stands against its log.

use crate::context::Context;
use crate::error::Code;
use crate::output::human_duration;
use crate::store::chain::{ChainReport, Integrity};
use crate::store::GateRow;
use crate::team::Quorum;
use anyhow::Result;
use serde::Serialize;
use std::io::{self, Write};

/// Seconds from `now` until `timeout_at`, for a pending gate with a readable deadline.
/// The principals book's roster, read once and only if a gate's progress needs it: Err
/// inside says why the book's log cannot be trusted (then no group admits anyone, as when a
/// decision is taken).
pub struct LazyRoster<'a> {
    ctx: &'a Context,
    got: Option<std::result::Result<crate::team::Roster, String>>,
}

impl<'a> LazyRoster<'a> {
    pub fn new(ctx: &'a Context) -> Self {
        LazyRoster { ctx, got: None }
    }

    fn get(&mut self) -> Result<crate::team::Roster> {
        if self.got.is_none() {
            let read = match self.ctx.principal_book(false)? {
                None => Ok(Default::default()),
                Some(mut b) => crate::store::principals::book_state(b.as_mut())?.map(|s| s.roster),
            };
            self.got = Some(read);
        }
        Ok(self
            .got
            .as_ref()
            .and_then(|r| r.as_ref().ok())
            .cloned()
            .unwrap_or_default())
    }
}

/// A team's gate's votes and schedule, as the store counts them: the sealed votes that still
/// count (a revoked principal's or a departed member's do not), or whom its decision counted.
/// The one way every reader (list, show, wait, resume, the page) shows a gate's progress.
pub fn team_view(
    g: &GateRow,
    d: &crate::store::chain::Derived,
    now: &str,
    roster: &mut LazyRoster,
) -> Result<Option<TeamView>> {
    let next = crate::store::rules::next_reminder_of(g, d, now);
    let voted = !d.tally.approvals.is_empty() || !d.tally.rejections.is_empty();
    let t = if d.decision.is_none() && voted {
        crate::store::rules::standing_tally(g, d, &roster.get()?)
    } else {
        d.tally_or_counted()
    };
    Ok(TeamView::of(&d.quorum, &t, &g.allow, d.escalated, next).map(|v| v.settled(&g.status)))
}

fn time_left(gate: &GateRow, now: &str) -> Option<i64> {
    if !gate.status.is_pending() {
        return None;
    }
    Some(crate::model::seconds_between(now, gate.timeout_at.as_deref()?)?.max(0))
}

/// A gate as listed or shown: the row, its run's program, and the time left.
#[derive(Debug, Serialize)]
pub struct GateView {
    #[serde(flatten)]
    pub gate: GateRow,
    pub program_path: Option<String>,
    /// Seconds until the deadline, for a pending gate that has one.
    pub time_left_seconds: Option<i64>,
    /// Where the gate stands against its sealed log, when this listing checked (`gates
    /// --scan` over the runs it opens); absent when it was listed from the catalog unchecked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub integrity: Option<IntegrityView>,
    /// For a gate that asks more than one approval, a veto off or separation of duties:
    /// what it asks, and its votes so far.
    #[serde(flatten)]
    pub team: Option<TeamView>,
    /// The answer the gate asks for (its sealed `--response-schema`), and the answer its
    /// sealed decision gave: present when it has them, read from its log, never a row.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response: Option<serde_json::Value>,
    /// A quorum's answers, each with who gave it (the votes', then the decision's), when
    /// more than one was given: the gate's `response` is the deciding one's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub responses: Vec<Answered>,
    /// The binding its decision writes the answer into, as its opening seals it
    /// (`--response-binding`): the program reads the answer there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_binding: Option<ResponseBinding>,
    /// The approvals' edits of the gate's inputs, as their sealed events record them, each
    /// with who made it (`by`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub edits: Vec<serde_json::Value>,
}

/// Where a decision writes its answer: a binding's name and scope (null: the root).
#[derive(Debug, Serialize)]
pub struct ResponseBinding {
    pub name: String,
    pub execution_id: Option<i64>,
}

/// One decider's sealed answer.
#[derive(Debug, Serialize)]
pub struct Answered {
    pub by: String,
    pub response: serde_json::Value,
}

/// What a team's gate asks of its deciders, and where its sealed votes stand.
#[derive(Debug, Serialize)]
pub struct TeamView {
    pub require: u32,
    pub veto: bool,
    /// Who may not approve (the run's starter and the gate's creator), when duties are
    /// separate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub separate_duties: Option<serde_json::Value>,
    pub approvals: Vec<String>,
    pub rejections: Vec<String>,
    /// "2 of 3 approvals: alice, bob".
    pub progress: String,
    /// The allow entries through which a decision may still come (those who approved aside).
    pub waiting_for: Vec<String>,
    /// Where the gate escalates at its deadline, and whether it has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub escalation: Option<serde_json::Value>,
    /// When the next reminder is due (UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_reminder: Option<String>,
    /// Whether the gate is decided (nothing is due, no one waited for).
    #[serde(skip)]
    pub settled: bool,
}

impl TeamView {
    /// Its lines in a gate's text: the progress, and who may not approve.
    pub(super) fn write(&self, w: &mut dyn Write) -> io::Result<()> {
        let veto = if self.veto {
            "; one rejection rejects it"
        } else {
            ""
        };
        writeln!(w, "Approvals: {}{veto}", self.progress)?;
        if !self.waiting_for.is_empty() {
            writeln!(w, "Waiting for: {}", self.waiting_for.join(", "))?;
        }
        if let Some(e) = &self.escalation {
            let to = e["to"].as_str().unwrap_or_default();
            match (e["escalated"].as_bool(), self.settled) {
                (Some(true), _) => writeln!(w, "Escalated: to {to}, at its first deadline")?,
                (_, false) => writeln!(
                    w,
                    "Escalation: to {to} at the deadline, instead of timing out"
                )?,
                (_, true) => writeln!(w, "Escalation: to {to}, not reached")?,
            }
        }
        if let Some(at) = &self.next_reminder {
            writeln!(w, "Next reminder: {at} UTC")?;
        }
        if let Some(s) = &self.separate_duties {
            writeln!(
                w,
                "Separation of duties: neither {} (started the run) nor {} (created the gate) may approve",
                s["starter"].as_str().unwrap_or("the run's starter"),
                s["creator"].as_str().unwrap_or("unknown")
            )?;
        }
        Ok(())
    }

    /// For a gate no longer pending: no one is waited for, and nothing is due.
    pub fn settled(mut self, status: &crate::model::GateStatus) -> Self {
        if !status.is_pending() {
            self.waiting_for.clear();
            self.next_reminder = None;
            self.settled = true;
        }
        self
    }

    /// Its votes and schedule in one line, for `resume`.
    pub fn summary(&self) -> String {
        let mut s = self.progress.clone();
        if !self.waiting_for.is_empty() {
            s += &format!("; waiting for {}", self.waiting_for.join(", "));
        }
        if let Some(e) = &self.escalation {
            let to = e["to"].as_str().unwrap_or_default();
            s += &match e["escalated"].as_bool() {
                Some(true) => format!("; escalated to {to}"),
                _ => format!("; escalates to {to} at the deadline"),
            };
        }
        if let Some(at) = &self.next_reminder {
            s += &format!("; next reminder {at} UTC");
        }
        s
    }

    /// The view of a gate whose allow list is `allow`, when it is a team's gate or has
    /// reminders: `escalated` and `next_reminder` as its sealed log says.
    pub fn of(
        q: &Quorum,
        tally: &crate::team::Tally,
        allow: &[String],
        escalated: bool,
        next_reminder: Option<String>,
    ) -> Option<Self> {
        let shown = q.is_team(allow) || !q.remind.is_empty();
        shown.then(|| TeamView {
            require: q.require,
            veto: q.veto,
            separate_duties: q
                .separate
                .then(|| serde_json::json!({"starter": q.starter, "creator": q.creator})),
            approvals: tally.approvals.clone(),
            rejections: tally.rejections.clone(),
            progress: tally.progress(q),
            waiting_for: allow
                .iter()
                .filter(|a| !tally.approvals.contains(a) && !tally.rejections.contains(a))
                .cloned()
                .collect(),
            escalation: q.escalate_to.as_ref().map(|to| {
                serde_json::json!({
                    "to": to, "after_seconds": q.escalate_after, "escalated": escalated
                })
            }),
            next_reminder,
            settled: false,
        })
    }
}

/// A JSON value on one line, as a terminal may show it: compact, with every control and
/// invisible character escaped (JSON escapes only the control ones).
pub(crate) fn visible_json(v: &serde_json::Value) -> String {
    crate::output::visible_line(&v.to_string()).into_owned()
}

impl GateView {
    pub(super) fn new(gate: GateRow, program_path: Option<String>, now: &str) -> Self {
        let time_left_seconds = time_left(&gate, now);
        GateView {
            gate,
            program_path,
            time_left_seconds,
            integrity: None,
            team: None,
            response_schema: None,
            response: None,
            responses: Vec::new(),
            response_binding: None,
            edits: Vec::new(),
        }
    }

    /// With the answer its sealed log asks for and holds (`d`, the opening shown).
    pub(super) fn answered(self, d: Option<&crate::store::chain::Derived>) -> Self {
        GateView {
            response_schema: d.and_then(|d| d.response_schema.clone()),
            response: d.and_then(|d| d.response.clone()),
            responses: d
                .filter(|d| d.responses.len() > 1)
                .map(|d| {
                    d.responses
                        .iter()
                        .map(|(by, response)| Answered {
                            by: by.clone(),
                            response: response.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            response_binding: d.and_then(|d| d.response_binding.as_ref()).map(|(n, e)| {
                ResponseBinding {
                    name: n.clone(),
                    execution_id: *e,
                }
            }),
            edits: d
                .map(|d| {
                    d.edits
                        .iter()
                        .map(|(by, e)| {
                            let mut e = e.clone();
                            e["by"] = by.clone().into();
                            e
                        })
                        .collect()
                })
                .unwrap_or_default(),
            ..self
        }
    }

    /// Its edits, one line each (`edit_line`).
    pub(super) fn edit_lines(&self) -> Vec<String> {
        self.edits
            .iter()
            .map(|e| edit_line(e["by"].as_str().unwrap_or_default(), e))
            .collect()
    }

    pub(super) fn left(&self) -> String {
        match (self.time_left_seconds, self.gate.timeout_at.is_some()) {
            (Some(s), _) => human_duration(s),
            (None, false) if self.gate.status.is_pending() => "no deadline".into(),
            _ => "-".into(),
        }
    }
}

/// Where a gate stands against its audit log, as outputs show it.
#[derive(Debug, Clone, Serialize)]
pub struct IntegrityView {
    /// `attested`, `unsealed` (pending, opened by no sealed event), `unattested` or
    /// `tampered`.
    pub state: &'static str,
    pub detail: Option<String>,
}

impl IntegrityView {
    /// The gate's standing in a run's report; any break in the run's log taints every gate.
    /// A pending gate nothing sealed opened (made with the spec's own SQL, or a row inserted
    /// behind prose-state's back) claims nothing, and nothing vouches for it: `unsealed`, never
    /// `attested`. It is waited on as pending; any decision of it is unattested (exit 10).
    pub fn of(report: &ChainReport, gate: &str) -> Self {
        let sealed = report.derived.get(gate).is_some_and(|d| d.instance > 0);
        match report.gate(gate) {
            Integrity::Attested if !sealed && report.first_broken.is_none() => IntegrityView {
                state: "unsealed",
                detail: Some(
                    "no sealed created event opened it (made by another tool, or inserted behind prose-state's back): nothing vouches for it".into(),
                ),
            },
            Integrity::Tampered(d) => Self::from(Integrity::Tampered(d)),
            _ if report.first_broken.is_some() => IntegrityView {
                state: "tampered",
                detail: report
                    .first_broken
                    .as_ref()
                    .map(|b| format!("the run's audit log is broken: {}", b.reason)),
            },
            other => Self::from(other),
        }
    }

    pub(super) fn code(&self, accept_unattested: bool) -> Option<Code> {
        match self.state {
            "tampered" => Some(Code::Tampered),
            "unattested" if !accept_unattested => Some(Code::Unattested),
            _ => None,
        }
    }

    pub(super) fn warnings(&self, gate: &str) -> Vec<String> {
        let detail = self.detail.as_deref().unwrap_or("");
        match self.state {
            "tampered" => vec![format!("gate {gate} is TAMPERED: {detail}")],
            "unattested" => vec![format!("gate {gate} is unattested: {detail}")],
            "unsealed" => vec![format!("gate {gate} is unsealed: {detail}")],
            _ => Vec::new(),
        }
    }
}

impl From<Integrity> for IntegrityView {
    fn from(i: Integrity) -> Self {
        let state = i.state();
        let detail = match i {
            Integrity::Tampered(d) | Integrity::Unattested(d) => Some(d),
            Integrity::Attested => None,
        };
        IntegrityView { state, detail }
    }
}

/// How a gate was decided: `approved by P at T: comment`.
pub(super) fn resolution(g: &GateRow) -> String {
    format!(
        "{} by {} at {}{}",
        g.status,
        g.resolved_by.as_deref().unwrap_or("-"),
        g.resolved_at.as_deref().unwrap_or("-"),
        g.resolution_comment
            .as_deref()
            .map(|c| format!(": {c}"))
            .unwrap_or_default()
    )
}

/// A sealed edit in one line: `NAME by P: version A -> B (X -> Y bytes)` (`-`: not bound
/// before; `?`: a size not known, the value edited being an attachment).
pub fn edit_line(by: &str, e: &serde_json::Value) -> String {
    let unbound = e["from_version"].is_null();
    let num = |k: &str| match e[k].as_i64() {
        Some(n) => n.to_string(),
        None if unbound || k != "bytes_before" => "-".to_string(),
        None => "?".to_string(),
    };
    format!(
        "{} by {}: version {} -> {} ({} -> {} bytes)",
        crate::output::visible(e["name"].as_str().unwrap_or_default()),
        crate::output::visible(by),
        num("from_version"),
        num("version"),
        num("bytes_before"),
        num("bytes"),
    )
}
