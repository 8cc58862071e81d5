//! `gates`: list, create, show, wait, audit, verify.

use super::listing::{GateQuery, Listing};
use super::Run;
use crate::cli::{
    GateAuditArgs, GateCreateArgs, GateStatus, GateWaitArgs, GatesArgs, GatesCommand, GatesListArgs,
};
use crate::context::Context;
use crate::error::{not_found, refused, shown, usage, Code};
use crate::model::{check_gate_id, check_metadata, now, now_plus, parse_duration, sha256_tag};
use crate::output::{human_duration, one_line, table, Render};
use crate::store::chain::{ChainReport, Integrity};
use crate::store::{AuditFilter, AuditRow, Created, GateRow, Store};
use crate::team::Quorum;
use anyhow::{Context as _, Result};
use serde::Serialize;
use std::io::{self, Write};

/// The error for a gate the run does not have (exit 3).
pub(super) fn gate_not_found(run_id: &str, gate: &str) -> anyhow::Error {
    not_found(format!("gate not found in run {run_id}: {}", shown(gate)))
}

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
    fn write(&self, w: &mut dyn Write) -> io::Result<()> {
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

impl GateView {
    fn new(gate: GateRow, program_path: Option<String>, now: &str) -> Self {
        let time_left_seconds = time_left(&gate, now);
        GateView {
            gate,
            program_path,
            time_left_seconds,
            integrity: None,
            team: None,
        }
    }

    fn left(&self) -> String {
        match (self.time_left_seconds, self.gate.timeout_at.is_some()) {
            (Some(s), _) => human_duration(s),
            (None, false) if self.gate.status.is_pending() => "no deadline".into(),
            _ => "-".into(),
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct GateList {
    pub gates: Vec<GateView>,
    #[serde(skip)]
    pub warnings: Vec<String>,
}

impl Render for GateList {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        if self.gates.is_empty() {
            return writeln!(w, "no gates");
        }
        let mut header = [
            "RUN",
            "GATE",
            "STATUS",
            "CREATED",
            "TIME LEFT",
            "PROGRAM",
            "PROMPT",
        ]
        .map(String::from)
        .to_vec();
        // The votes of team's gates, when the listing derived them (`--scan`).
        let teams = self.gates.iter().any(|g| g.team.is_some());
        if teams {
            header.insert(6, "PROGRESS".into());
        }
        let rows: Vec<Vec<String>> = self
            .gates
            .iter()
            .map(|g| {
                vec![
                    g.gate.run_id.clone().unwrap_or_default(),
                    g.gate.id.clone(),
                    match g.integrity.as_ref().map(|i| i.state) {
                        Some(state @ ("tampered" | "unattested")) => {
                            format!("{} ({})", g.gate.status, state.to_uppercase())
                        }
                        _ => g.gate.status.to_string(),
                    },
                    g.gate.created_at.clone().unwrap_or_default(),
                    g.left(),
                    g.program_path.clone().unwrap_or_else(|| "-".into()),
                    one_line(&g.gate.prompt, 50),
                ]
            })
            .zip(&self.gates)
            .map(|(mut row, g)| {
                if teams {
                    let progress = g.team.as_ref().map_or("-".into(), |t| t.progress.clone());
                    row.insert(6, progress);
                }
                row
            })
            .collect();
        table(w, &header, &rows)
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }

    /// A listing read from the catalog vouches for nothing: it says so.
    fn notes(&self) -> Vec<String> {
        if self.gates.iter().any(|g| g.integrity.is_none()) {
            vec!["listed from the catalog, not checked against the gates' sealed logs: `gates --scan`, `gates show` or `gates verify` checks them".into()]
        } else {
            Vec::new()
        }
    }
}

/// The time a duration from now comes.
fn in_future(duration: &str) -> Result<String> {
    parse_duration(duration).map(now_plus)
}

pub fn list(args: &GatesListArgs, ctx: &Context) -> Result<GateList> {
    let now = now();
    let horizon = args.expiring.as_deref().map(in_future).transpose()?;
    let status = match (args.status, &horizon) {
        (_, Some(_)) | (GateStatus::Pending, None) => Some("pending"),
        (GateStatus::Approved, None) => Some("approved"),
        (GateStatus::Rejected, None) => Some("rejected"),
        (GateStatus::Timeout, None) => Some("timeout"),
        (GateStatus::All, None) => None,
    };
    // The pending gates of the project's catalog and server: swept and listed in a few
    // queries (only the runs with an overdue gate are opened). Gates of other statuses are
    // listed from the server, and from every SQLite run visited.
    let (found, warnings) = Listing::gates(
        ctx,
        &GateQuery {
            status,
            due_by: horizon.as_deref(),
            limit: args.limit,
            scan: args.scan,
            now: &now,
        },
    )?;
    // `--scan` checks every gate against its sealed log: the runs the server listed are opened
    // and checked here (each once), as the SQLite runs were while they were read.
    let mut found = found;
    if args.scan {
        let mut checked: std::collections::HashMap<String, std::sync::Arc<_>> = Default::default();
        for f in found.iter_mut().filter(|f| f.checked.is_none()) {
            let run = f.gate.run_id.clone().unwrap_or_default();
            if !checked.contains_key(&run) {
                let (_, mut store) = ctx.open_run(Some(&run))?;
                checked.insert(run.clone(), std::sync::Arc::new(store.verify_audit()?));
            }
            f.checked = checked.get(&run).cloned();
        }
    }
    let mut roster = LazyRoster::new(ctx);
    let gates = found
        .into_iter()
        .map(|found| {
            let integrity = found
                .checked
                .as_deref()
                .map(|report| IntegrityView::of(report, &found.gate.id));
            // Checked (`--scan`), a team's gate shows its votes and schedule as its sealed
            // log derives them.
            let g = &found.gate;
            let team = match found
                .checked
                .as_deref()
                .and_then(|report| report.derived.get(&g.id))
            {
                Some(d) => team_view(g, d, &now, &mut roster)?,
                None => None,
            };
            Ok(GateView {
                integrity,
                team,
                ..GateView::new(found.gate, found.program_path, &now)
            })
        })
        .collect::<Result<_>>()?;
    Ok(GateList { gates, warnings })
}

#[derive(Debug, Serialize)]
pub struct GateCreated {
    /// False when this was an identical retry of a gate still pending: nothing was written.
    pub created: bool,
    #[serde(flatten)]
    pub gate: GateView,
}

impl Render for GateCreated {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        let g = &self.gate.gate;
        if self.created {
            writeln!(w, "Gate created: {}", g.id)?;
        } else {
            writeln!(
                w,
                "Gate already pending (identical retry, nothing written): {}",
                g.id
            )?;
        }
        writeln!(w, "Run: {}", g.run_id.as_deref().unwrap_or("-"))?;
        writeln!(w, "Allow: {}", g.allow.join(", "))?;
        if let Some(t) = &self.gate.team {
            t.write(w)?;
        }
        match &g.timeout_at {
            Some(at) => writeln!(w, "Deadline: {at} UTC (in {})", self.gate.left())?,
            None => writeln!(w, "Deadline: none")?,
        }
        writeln!(w, "Execution ID: {}", g.execution_id.unwrap_or_default())?;
        // The opening to wait for (`gates wait --instance N`), once there is more than one.
        if g.instance > 1 {
            writeln!(w, "Instance: {}", g.instance)?;
        }
        Ok(())
    }
}

/// The most reminders a gate may have (each runs the hook once before each deadline).
const MAX_REMINDERS: usize = 10;

/// What a gate made now asks of its deciders: its options, and the project's policy of
/// separation of duties (a policy the book's log cannot vouch for is taken as on, with a
/// warning: it fails closed).
pub fn quorum(args: &GateCreateArgs, ctx: &crate::context::Context) -> Result<Quorum> {
    let mut separate = args.no_self_approve;
    if !separate {
        if let Some(mut book) = ctx.principal_book(false)? {
            match crate::store::principals::book_state(book.as_mut())? {
                Ok(state) => separate = state.separate_duties,
                Err(why) => {
                    crate::output::warn(&format!(
                        "{why}: separation of duties is applied to this gate"
                    ));
                    separate = true;
                }
            }
        }
    }
    let timeout = args.timeout.as_deref().map(parse_duration).transpose()?;
    let needs_deadline = |flag: &str| {
        usage(format!(
            "{flag} needs --timeout: reminders and escalation are counted from the deadline"
        ))
    };
    let escalate_to = match &args.escalate_to {
        None => None,
        Some(_) if timeout.is_none() => return Err(needs_deadline("--escalate-to")),
        Some(e) => {
            let entry = crate::model::normalise_allow(std::slice::from_ref(e))
                .map_err(|err| usage(format!("--escalate-to: {err:#}")))?
                .remove(0);
            if entry.starts_with("agent:") {
                return Err(usage(format!(
                    "--escalate-to {}: agents never approve, so the escalation would add no one",
                    shown(&entry)
                )));
            }
            // `user` is anyone at all: an escalation is to a named principal or a group.
            if entry == "user" {
                return Err(usage(
                    "--escalate-to user: `user` is reserved (anyone at all); escalate to a principal or group:NAME",
                ));
            }
            let allow = crate::model::normalise_allow(&args.allow)?;
            if allow.contains(&entry) || (allow.iter().any(|a| a == "user") && entry != "user") {
                return Err(usage(format!(
                    "--escalate-to {} is already allowed by --allow {}: the escalation would add no one",
                    shown(&entry),
                    shown(&allow.join(","))
                )));
            }
            Some(entry)
        }
    };
    let escalate_after = match &args.escalate_timeout {
        Some(d) => Some(parse_duration(d)?),
        None => escalate_to.as_ref().and(timeout),
    };
    if args.remind.len() > MAX_REMINDERS {
        return Err(usage(format!(
            "at most {MAX_REMINDERS} --remind a gate ({} given)",
            args.remind.len()
        )));
    }
    let mut remind = Vec::new();
    for r in &args.remind {
        let (secs, Some(t)) = (parse_duration(r)?, timeout) else {
            return Err(needs_deadline("--remind"));
        };
        if secs >= t && escalate_after.is_none_or(|a| secs >= a) {
            return Err(usage(format!(
                "--remind {} is not before the deadline: the gate opens {} before it",
                shown(r),
                args.timeout.as_deref().unwrap_or_default()
            )));
        }
        remind.push(secs);
    }
    remind.sort_unstable_by(|a, b| b.cmp(a));
    remind.dedup();
    Ok(Quorum {
        require: args.require,
        veto: args.veto == crate::cli::OnOff::On,
        separate,
        starter: None,
        // Recorded as the one who opened it (the gate's execution record names it); sealed
        // only under separation of duties, where a token proves it.
        creator: Some(match separate {
            true => ctx.actor(&args.principal, &args.token)?,
            false => ctx.writer(&args.principal)?,
        }),
        remind,
        escalate_to,
        escalate_after,
        authenticated_only: false,
    }
    .opened_now())
}

pub fn create(args: &GateCreateArgs, store: &mut dyn Store, quorum: Quorum) -> Result<GateCreated> {
    check_gate_id(&args.gate_id)?;
    crate::model::check_prompt(&args.prompt)?;
    let allow = crate::model::normalise_allow(&args.allow)?;
    // A person decides a gate, never an agent: no allow list names one (`user` is anyone
    // who is not `agent:...`).
    if let Some(agent) = allow.iter().find(|a| a.starts_with("agent:")) {
        return Err(usage(format!(
            "--allow {}: agents never decide a gate; allow a person, a group, or user",
            shown(agent)
        )));
    }
    if let Some(m) = &args.metadata {
        check_metadata(m)?;
    }
    if let Some(a) = &args.on_reject {
        if a.trim().is_empty() {
            return Err(usage("--on-reject is empty"));
        }
    }
    let timeout_at = args.timeout.as_deref().map(in_future).transpose()?;
    let mut inputs = args.inputs.clone();
    for name in &inputs {
        crate::model::check_name(name).map_err(|e| usage(format!("--inputs: {e:#}")))?;
    }
    inputs.sort();
    if let Some(twice) = inputs.windows(2).find(|w| w[0] == w[1]) {
        return Err(usage(format!("--inputs names {} twice", shown(&twice[0]))));
    }
    if inputs.len() > 16 {
        return Err(usage(format!(
            "--inputs names at most 16 bindings, not {}",
            inputs.len()
        )));
    }
    let now = now();
    let allow = serde_json::to_string(&allow)?;
    // A gate opened again is the same statement where it was: its index and scope are the
    // previous opening's, unless given (a VM after a crash knows neither).
    let (mut index, mut scope) = (args.index, args.execution_id);
    if args.reopen && (index.is_none() || scope.is_none()) {
        let before = store.read_gate(&args.gate_id)?.and_then(|g| g.execution_id);
        if let Some(r) = before
            .map(|e| crate::store::record(store, e))
            .transpose()?
            .flatten()
        {
            index = index.or(r.statement_index);
            // Where inputs are looked up is sealed with the opening, and a row is only a
            // row: a gate about inputs is given its scope, never handed one from its row.
            if inputs.is_empty() {
                scope = scope.or(r.parent_id);
            }
        }
    }
    let outcome = store.create_gate(&crate::store::NewGate {
        id: &args.gate_id,
        prompt: &args.prompt,
        allow: &allow,
        timeout: args.timeout.as_deref(),
        timeout_at: timeout_at.as_deref(),
        on_reject: args.on_reject.as_deref(),
        metadata: args.metadata.as_deref(),
        statement_index: index,
        parent_execution: scope,
        prompt_hash: &sha256_tag(&args.prompt),
        inputs: &inputs,
        reopen: args.reopen,
        now: &now,
        quorum: quorum.clone(),
    })?;
    let program = store.run_info()?.program_path;
    let (created, g) = match outcome {
        Created::New(g) => (true, g),
        Created::Retried(g) => (false, g),
        Created::Conflict(g) => {
            return Err(refused(format!(
                "gate already exists in this run ({}{}): {}",
                g.status,
                if g.status.is_pending() {
                    ", with different settings; a pending gate is not opened again"
                } else {
                    "; pass --reopen to open its next instance"
                },
                shown(&g.id)
            )))
        }
    };
    let next = g
        .timeout_at
        .as_deref()
        .and_then(|deadline| crate::team::next_reminder(&quorum.remind, deadline, &now, &[], &now));
    let team = TeamView::of(&quorum, &Default::default(), &g.allow, false, next);
    Ok(GateCreated {
        created,
        gate: GateView {
            team,
            ..GateView::new(g, program, &now)
        },
    })
}

#[derive(Debug, Serialize)]
pub struct GateShown {
    #[serde(flatten)]
    pub gate: GateView,
    pub history: Vec<AuditRow>,
    pub integrity: IntegrityView,
    /// The bindings the decision is about, as they are now (`gates create --inputs`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<crate::services::inputs::InputNow>,
    /// Why the decision no longer stands: an input changed after it and before the VM
    /// consumed it (exit 11). Open the gate again (`gates create --reopen`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<String>,
}

/// Where a gate stands against its audit log, as outputs show it.
#[derive(Debug, Clone, Serialize)]
pub struct IntegrityView {
    /// `attested`, `unattested` or `tampered`.
    pub state: &'static str,
    pub detail: Option<String>,
}

impl IntegrityView {
    /// The gate's standing in a run's report; any break in the run's log taints every gate.
    pub fn of(report: &ChainReport, gate: &str) -> Self {
        match report.gate(gate) {
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

    fn code(&self, accept_unattested: bool) -> Option<Code> {
        match self.state {
            "tampered" => Some(Code::Tampered),
            "unattested" if !accept_unattested => Some(Code::Unattested),
            _ => None,
        }
    }

    fn warnings(&self, gate: &str) -> Vec<String> {
        let detail = self.detail.as_deref().unwrap_or("");
        match self.state {
            "tampered" => vec![format!("gate {gate} is TAMPERED: {detail}")],
            "unattested" => vec![format!("gate {gate} is unattested: {detail}")],
            _ => Vec::new(),
        }
    }
}

impl From<Integrity> for IntegrityView {
    fn from(i: Integrity) -> Self {
        let (state, detail) = match i {
            Integrity::Tampered(d) => ("tampered", Some(d)),
            Integrity::Unattested(d) => ("unattested", Some(d)),
            Integrity::Attested => ("attested", None),
        };
        IntegrityView { state, detail }
    }
}

/// How a gate was decided: `approved by P at T: comment`.
fn resolution(g: &GateRow) -> String {
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

fn audit_table(w: &mut dyn Write, rows: &[AuditRow], with_run: bool) -> io::Result<()> {
    let mut header = vec!["ID", "TIME", "EVENT", "PRINCIPAL", "COMMENT"];
    if with_run {
        header.splice(1..1, ["RUN", "GATE"]);
    }
    let header: Vec<String> = header.iter().map(|s| s.to_string()).collect();
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut v = vec![
                r.id.to_string(),
                r.timestamp.clone().unwrap_or_default(),
                r.event_type.clone(),
                r.principal.clone().unwrap_or_default(),
                one_line(r.comment.as_deref().unwrap_or(""), 50),
            ];
            if with_run {
                v.splice(1..1, [r.run_id.clone(), r.gate_id.clone()]);
            }
            v
        })
        .collect();
    table(w, &header, &rows)
}

impl Render for GateShown {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        let g = &self.gate.gate;
        writeln!(w, "Gate: {}", g.id)?;
        writeln!(w, "Run: {}", g.run_id.as_deref().unwrap_or("-"))?;
        if let Some(p) = &self.gate.program_path {
            writeln!(w, "Program: {p}")?;
        }
        writeln!(w, "Status: {}", g.status)?;
        writeln!(w, "Allow: {}", g.allow.join(", "))?;
        if let Some(t) = &self.gate.team {
            t.write(w)?;
        }
        writeln!(w, "Created: {}", g.created_at.as_deref().unwrap_or("-"))?;
        match (&g.timeout, &g.timeout_at) {
            (Some(t), Some(at)) if g.status.is_pending() => writeln!(
                w,
                "Timeout: {t} (deadline {at} UTC, {} left)",
                self.gate.left()
            )?,
            (Some(t), Some(at)) => writeln!(w, "Timeout: {t} (deadline {at} UTC)")?,
            _ => writeln!(w, "Timeout: none")?,
        }
        writeln!(
            w,
            "On reject: {}",
            g.on_reject.as_deref().unwrap_or("throw")
        )?;
        if g.resolved_by.is_some() {
            writeln!(w, "Resolved: {}", resolution(g))?;
        }
        if let Some(why) = &self.stale {
            writeln!(w, "STALE: {why}: reopen it (gates create --reopen)")?;
        }
        writeln!(w, "Prompt:")?;
        for line in g.prompt.lines() {
            writeln!(w, "  {line}")?;
        }
        if !self.inputs.is_empty() {
            writeln!(w, "Inputs:")?;
            for i in &self.inputs {
                match &i.digest {
                    Some(_) => writeln!(
                        w,
                        "  {} ({} bytes): {}",
                        i.name,
                        i.bytes,
                        one_line(&i.preview, 80)
                    )?,
                    None => writeln!(w, "  {}: (not bound)", i.name)?,
                }
            }
        }
        writeln!(w, "History:")?;
        audit_table(w, &self.history, false)
    }

    /// 9 when the gate disagrees with its log, 10 when its decision is unattested, 11 when it
    /// is stale.
    fn exit_code(&self) -> Code {
        self.integrity
            .code(false)
            .or(self.stale.as_ref().map(|_| Code::Stale))
            .unwrap_or(Code::Ok)
    }

    fn warnings(&self) -> Vec<String> {
        let mut w = self.integrity.warnings(&self.gate.gate.id);
        if let Some(why) = &self.stale {
            w.push(format!(
                "gate {}'s decision is stale: {why}",
                self.gate.gate.id
            ));
        }
        w
    }
}

/// `gates show`, for a viewer through `client` (`cli`, `web`), as the audit log records it.
pub fn show_to(
    gate: &str,
    viewer: Option<&str>,
    client: &str,
    store: &mut dyn Store,
    run_dir: &std::path::Path,
    roster: &mut LazyRoster,
) -> Result<GateShown> {
    check_gate_id(gate)?;
    let now = now();
    let run = store.run_info()?;
    let (row, history) = store
        .view_gate(gate, viewer, client, &now)?
        .ok_or_else(|| gate_not_found(&run.id, gate))?;
    let mut report = store.verify_audit()?;
    // A decision about inputs stands on the versions it pinned: every reader says the same.
    if report
        .derived
        .get(&row.id)
        .is_some_and(|d| d.decided_inputs.is_some())
    {
        crate::services::inputs::check_sealed(store, run_dir, &mut report)?;
    }
    let team = match report.derived.get(&row.id) {
        Some(d) => team_view(&row, d, &now, roster)?,
        None => None,
    };
    let (stale, inputs) = match report.derived.get(&row.id) {
        Some(d) => crate::services::inputs::stale(store, run_dir, d)?,
        None => (None, Vec::new()),
    };
    Ok(GateShown {
        inputs,
        stale,
        integrity: IntegrityView::of(&report, &row.id),
        gate: GateView {
            team,
            ..GateView::new(row, run.program_path, &now)
        },
        history,
    })
}

#[derive(Debug, Serialize)]
pub struct GateWaited {
    #[serde(flatten)]
    pub gate: GateView,
    pub waited_seconds: u64,
    pub integrity: IntegrityView,
    /// Why the decision no longer stands: an input changed after it and before it was
    /// consumed (exit 11). Open the gate again (`gates create --reopen`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<String>,
    /// Waited on as an earlier opening (`--instance N`) that the gate's newest opening, this
    /// one, superseded: the outcome shown is that earlier opening's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<i64>,
    #[serde(skip)]
    pub accept_unattested: bool,
}

impl Render for GateWaited {
    fn warnings(&self) -> Vec<String> {
        self.integrity.warnings(&self.gate.gate.id)
    }

    /// 0 approved, 5 rejected, 6 timed out, 7 still pending; 9 when the gate disagrees with
    /// its log, 10 when its decision is unattested (unless accepted), 11 when it is stale.
    fn exit_code(&self) -> Code {
        if let Some(code) = self.integrity.code(self.accept_unattested) {
            return code;
        }
        if self.stale.is_some() {
            return Code::Stale;
        }
        match self.gate.gate.status.as_str() {
            "approved" => Code::Ok,
            "rejected" => Code::Rejected,
            "timeout" => Code::TimedOut,
            _ => Code::StillPending,
        }
    }

    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        let g = &self.gate.gate;
        // A decision that does not stand is not shown as one: stdout says so too.
        let detail = self.integrity.detail.as_deref().unwrap_or("");
        if let Some(code) = self.integrity.code(self.accept_unattested) {
            let word = if code == Code::Tampered {
                "TAMPERED"
            } else {
                "UNATTESTED"
            };
            return writeln!(
                w,
                "{}: {word}, no decision stands ({} in its row): {detail}",
                g.id, g.status
            );
        }
        if let Some(why) = &self.stale {
            return writeln!(
                w,
                "{}: STALE, no decision stands ({}): {why}; open it again as it was created (gates create {} --reopen, with its prompt, --allow and --inputs)",
                g.id,
                resolution(g),
                g.id
            );
        }
        let superseded = self
            .superseded_by
            .map(|n| {
                format!(
                    " (instance {}; opened again since as instance {n}, which `gates wait {} --instance {n}` waits on)",
                    g.instance, g.id
                )
            })
            .unwrap_or_default();
        match g.status.as_str() {
            "pending" => writeln!(w, "{}: still pending after {}s", g.id, self.waited_seconds),
            _ => writeln!(w, "{}: {}{superseded}", g.id, resolution(g)),
        }
    }
}

/// `gates wait --instance N` on an opening a later one superseded: that opening's own outcome,
/// as its sealed events (`d`, kept in the gate's derivation) made it, against the row
/// `gate_instances` keeps of it: where it stands, why its decision is stale (if it is), and
/// the row to show. Never the newer opening's decision, and nothing is consumed (a
/// consumption is the newest opening's); a decision about inputs is still stale if one
/// changed before it was consumed.
fn superseded(
    store: &mut dyn Store,
    run_dir: &std::path::Path,
    report: &ChainReport,
    gate: &str,
    d: &crate::store::chain::Derived,
    accept_unattested: bool,
) -> Result<(IntegrityView, Option<String>, GateRow)> {
    let row = store.read_gate_opening(gate, d.instance)?;
    let mut found = crate::store::chain::opening_integrity(report, gate, row.as_ref(), d);
    if found == Integrity::Attested {
        if let Some(why) = crate::services::inputs::sealed_problem(store, run_dir, d)? {
            found = why;
        }
    }
    let integrity = IntegrityView::from(found);
    let stale = match integrity.code(accept_unattested) {
        None => crate::services::inputs::stale(store, run_dir, d)?.0,
        Some(_) => None,
    };
    // Its row, as `compare` found it; gone, the opening as its events make it (tampered).
    let row = row.unwrap_or_else(|| GateRow {
        id: gate.to_string(),
        run_id: Some(d.run_id.clone()),
        execution_id: None,
        prompt: String::new(),
        allow: d.allow.clone(),
        timeout: d.timeout.clone().flatten(),
        timeout_at: d.timeout_at.clone().flatten(),
        on_reject: d.on_reject.clone().flatten(),
        status: d.status(),
        created_at: d.created_at.clone(),
        resolved_at: d.decided_at.clone(),
        resolved_by: d.decision.as_ref().map(|(_, by, _)| by.clone()),
        resolution_comment: d.comment.clone(),
        metadata: None,
        instance: d.instance,
    });
    Ok((integrity, stale, row))
}

/// A wait another thread may stop (an MCP task its client cancelled), and told of as it goes:
/// the waiting thread asks before each look, and holds [`Stop::permit`] while it writes what a
/// look settled (a decision about inputs, consumed), so that once [`Stop::stop`] has returned
/// the wait writes nothing. After each look that leaves it waiting, `on_pending` is given the
/// run's id and the gates it still waits for.
pub struct Stop {
    /// Whether the wait was stopped; whether it wrote.
    state: std::sync::Mutex<(bool, bool)>,
    on_pending: Box<OnPending>,
}

/// Told the run's id and the gates a wait still waits for, after a look.
type OnPending = dyn Fn(&str, &[&str]) + Send + Sync;

impl Stop {
    pub fn new(on_pending: impl Fn(&str, &[&str]) + Send + Sync + 'static) -> Self {
        Stop {
            state: std::sync::Mutex::new((false, false)),
            on_pending: Box::new(on_pending),
        }
    }

    /// Stops the wait: once this returns, it writes nothing more (a write in progress is
    /// waited for). True when it had written (settled a look) before.
    pub fn stop(&self) -> bool {
        match self.state.lock() {
            Ok(mut state) => {
                state.0 = true;
                state.1
            }
            Err(_) => false,
        }
    }

    fn stopped(&self) -> bool {
        self.state.lock().map(|s| s.0).unwrap_or(true)
    }

    /// Leave to write, held while writing; an error once the wait was stopped.
    fn permit(&self) -> Result<std::sync::MutexGuard<'_, (bool, bool)>> {
        match self.state.lock() {
            Ok(mut state) if !state.0 => {
                state.1 = true;
                Ok(state)
            }
            _ => Err(anyhow::anyhow!("the wait was stopped: nothing was written")),
        }
    }
}

thread_local! {
    /// The [`Stop`] of the wait this thread runs, if another thread may stop it.
    static STOP: std::cell::RefCell<Option<std::sync::Arc<Stop>>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` (a `gates wait`) on this thread so that `stop` can stop it.
pub fn stoppable<T>(stop: std::sync::Arc<Stop>, f: impl FnOnce() -> T) -> T {
    /// Takes the stop off the thread however `f` ends (a pool's thread runs other calls next).
    struct Unset;
    impl Drop for Unset {
        fn drop(&mut self) {
            STOP.with(|s| *s.borrow_mut() = None);
        }
    }
    STOP.with(|s| *s.borrow_mut() = Some(stop));
    let _unset = Unset;
    f()
}

/// Waits for a gate to be decided. Each look is a short statement on a store opened by
/// `open`; a look that fails with a conflict or a lost connection (exit 75: a server
/// restarting, an outage) is retried on a new connection at the next poll, so the wait
/// lives through outages. Other errors end it.
///
/// Looks take turns ([`crate::store::wake::turn`]): at most a few of a process's waiters look
/// at once. Woken by the commit in a process that keeps connections (the MCP server), a
/// PostgreSQL wait holds no connection while asleep: its store is put back, kept for the next
/// open, before it sleeps, and its next look takes one. Polling, or on SQLite, or in a
/// command (which keeps none), the wait keeps its store between looks.
pub fn wait(args: &GateWaitArgs, ctx: &Context) -> Result<WaitOutput> {
    let several = args.all || args.any;
    let (run_arg, gates): (Option<&str>, Vec<&str>) = match (several, args.ids.as_slice()) {
        (false, [gate]) => (ctx.run.as_deref(), vec![gate.as_str()]),
        (false, [run, gate]) => (Some(run.as_str()), vec![gate.as_str()]),
        (false, _) => {
            return Err(usage(
                "gates wait takes [RUN] GATE; to wait on several gates pass --all or --any",
            ))
        }
        (true, ids) => (ctx.run.as_deref(), ids.iter().map(String::as_str).collect()),
    };
    for g in &gates {
        check_gate_id(g)?;
    }
    if several && run_arg.is_none() {
        return Err(usage(
            "gates wait --all/--any waits on gates of one run: name it with --run or PROSE_RUN",
        ));
    }
    let poll = args
        .poll
        .as_deref()
        .map(|p| parse_duration(p).map(|s| std::time::Duration::from_secs(s as u64)))
        .transpose()?;
    // Woken by the commit that decides a gate; else it looks every --poll (default 1s).
    let mut changes: Option<Box<dyn crate::store::wake::Changes>> = None;
    let limit = match args.timeout.as_deref() {
        // One look, no wait: what a VM that must not block asks.
        Some("0" | "0s") => Some(std::time::Duration::ZERO),
        Some(t) => Some(std::time::Duration::from_secs(parse_duration(t)? as u64)),
        None => None,
    };
    let signed = args
        .require_signed
        .then(|| signed_by(ctx, args.key.as_deref(), args.accept_carried_from.clone()))
        .transpose()?;
    let open = || ctx.open_run(run_arg);
    let start = std::time::Instant::now();
    let mut store: Option<Box<dyn Store>> = None;
    let mut run_dir = std::path::PathBuf::new();
    let mut run: Option<crate::store::RunInfo> = None;
    let mut settled: Vec<Option<GateWaited>> = gates.iter().map(|_| None).collect();
    let stop = STOP.with(|s| s.borrow().clone());
    loop {
        if stop.as_ref().is_some_and(|s| s.stopped()) {
            return Err(anyhow::anyhow!("the wait was stopped"));
        }
        let now = now();
        let out_of_time = limit.is_some_and(|l| start.elapsed() >= l);
        // Held until the store is put back (below), so that no more stores than turns are
        // open for looks at once.
        let turn = crate::store::wake::turn();
        let look = (|| -> Result<()> {
            if store.is_none() {
                let (paths, s) = open()?;
                run_dir = paths.dir;
                if changes.is_none() {
                    changes = Some(s.changes());
                }
                store = Some(s);
            }
            let s = store.as_mut().map(|s| s.as_mut()).context("store")?;
            if run.is_none() {
                run = Some(s.run_info()?);
            }
            let run = run.clone().context("run")?;
            let mut ready = Vec::new();
            for (i, id) in gates.iter().enumerate() {
                if settled[i].is_some() {
                    continue;
                }
                let gate = s
                    .gate(id, &now)?
                    .ok_or_else(|| gate_not_found(&run.id, id))?;
                // The row another id answers for (a collation changed by SQL) is not this gate.
                if gate.id != *id {
                    return Err(crate::error::tampered(format!(
                        "looking up gate {} found gate {}: the gates table was changed behind prose-state's back",
                        shown(id),
                        shown(&gate.id)
                    )));
                }
                let reopened = args.instance.is_some_and(|w| gate.instance != w);
                if !gate.status.is_pending() || out_of_time || reopened {
                    ready.push((i, gate));
                }
            }
            if ready.is_empty() {
                return Ok(());
            }
            // A stopped wait writes nothing: the settling below holds the leave to.
            let _permit = stop.as_ref().map(|s| s.permit()).transpose()?;
            // A decision counts only if its log attests it.
            let mut report = s.verify_signed(signed.as_ref())?;
            // A decision about inputs stands on the very versions it pinned.
            let about_inputs = ready.iter().any(|(_, g)| {
                report
                    .derived
                    .get(&g.id)
                    .is_some_and(|d| d.decided_inputs.is_some())
            });
            if about_inputs {
                crate::services::inputs::check_sealed(s, &run_dir, &mut report)?;
            }
            // Waiting on several, a gate tampered with is settled as such now, even pending:
            // the wait never returns past it.
            if several {
                for (i, id) in gates.iter().enumerate() {
                    let tampered = matches!(report.gate(id), Integrity::Tampered(_))
                        || report.first_broken.is_some();
                    if settled[i].is_none() && tampered && !ready.iter().any(|(j, _)| *j == i) {
                        if let Some(gate) = s.gate(id, &now)? {
                            ready.push((i, gate));
                        }
                    }
                }
            }
            for (i, gate) in ready {
                // Waiting on one opening: a newer one (whoever opened it) is not its answer.
                if let Some(want) = args.instance {
                    let newest = report.derived.get(&gate.id).map_or(0, |d| d.instance);
                    // One a later opening superseded answers with its own outcome.
                    let earlier = report
                        .derived
                        .get(&gate.id)
                        .filter(|_| want < newest)
                        .and_then(|d| d.opening(want))
                        .cloned();
                    if let Some(d) = earlier {
                        let (integrity, stale, row) =
                            superseded(s, &run_dir, &report, &gate.id, &d, args.accept_unattested)?;
                        let team = team_view(&row, &d, &now, &mut LazyRoster::new(ctx))?;
                        settled[i] = Some(GateWaited {
                            stale,
                            integrity,
                            gate: GateView {
                                team,
                                ..GateView::new(row, run.program_path.clone(), &now)
                            },
                            waited_seconds: start.elapsed().as_secs(),
                            superseded_by: Some(newest),
                            accept_unattested: args.accept_unattested,
                        });
                        continue;
                    }
                    if newest != want && !matches!(report.gate(&gate.id), Integrity::Tampered(_)) {
                        report.gates.retain(|(g, _)| g != &gate.id);
                        report.gates.push((
                            gate.id.clone(),
                            Integrity::Tampered(format!(
                                "it was waited on as instance {want}, but its sealed log's newest opening is instance {newest}"
                            )),
                        ));
                    }
                }
                let team = match report.derived.get(&gate.id) {
                    Some(d) => team_view(&gate, d, &now, &mut LazyRoster::new(ctx))?,
                    None => None,
                };
                let integrity = IntegrityView::of(&report, &gate.id);
                // A decision about inputs: stale if one changed before it was consumed;
                // else this wait hands it to the VM, which consumes it.
                let stale = match report.derived.get(&gate.id) {
                    Some(d) if integrity.code(args.accept_unattested).is_none() => {
                        crate::services::inputs::settle(s, &run_dir, &gate, d)?
                    }
                    _ => None,
                };
                settled[i] = Some(GateWaited {
                    stale,
                    integrity,
                    gate: GateView {
                        team,
                        ..GateView::new(gate, run.program_path.clone(), &now)
                    },
                    waited_seconds: start.elapsed().as_secs(),
                    superseded_by: None,
                    accept_unattested: args.accept_unattested,
                });
            }
            Ok(())
        })();
        match look {
            Ok(()) => {
                let codes: Vec<Code> = settled.iter().flatten().map(|w| w.exit_code()).collect();
                let all_settled = codes.len() == gates.len();
                let done = all_settled
                    || codes.contains(&Code::Tampered)
                    || (args.all && codes.iter().any(|c| *c != Code::Ok))
                    || (args.any && codes.contains(&Code::Ok));
                if done {
                    drop(store.take());
                    drop(turn);
                    let mut waited: Vec<GateWaited> = settled.into_iter().flatten().collect();
                    if !several {
                        return Ok(WaitOutput::One(Box::new(waited.remove(0))));
                    }
                    // Gates not looked at to the end are reported as they are now: pending.
                    let waited_ids: Vec<&str> =
                        waited.iter().map(|w| w.gate.gate.id.as_str()).collect();
                    let not_settled = gates
                        .iter()
                        .filter(|g| !waited_ids.contains(g))
                        .map(|g| g.to_string())
                        .collect();
                    return Ok(WaitOutput::Several(SeveralWaited {
                        mode: if args.all { "all" } else { "any" },
                        gates: waited,
                        not_settled,
                    }));
                }
                if let (Some(stop), Some(run)) = (&stop, &run) {
                    let pending: Vec<&str> = gates
                        .iter()
                        .zip(&settled)
                        .filter(|(_, s)| s.is_none())
                        .map(|(g, _)| *g)
                        .collect();
                    (stop.on_pending)(&run.id, &pending);
                }
            }
            Err(e) if crate::error::code_of(&e) == Some(Code::Busy) && !out_of_time => {
                // A new connection at the next poll.
                store = None;
            }
            Err(e) => {
                drop(store.take());
                drop(turn);
                return Err(e);
            }
        }
        let mut polling = crate::store::wake::Polling;
        let waker = changes.as_deref_mut().unwrap_or(&mut polling);
        // Asleep until a commit wakes it, a wait in the MCP server holds no connection: its
        // store goes back to the kept ones. A polling wait, which looks every second, keeps
        // its own; so does a command's (it keeps none: each look would connect anew), and a
        // SQLite wait, which has no server connection to give back (its file watch and
        // `data_version` confirmation are the waker's, not the store's).
        if waker.how() == "listen" && crate::store::keeping() {
            store = None;
        }
        drop(turn);
        let mut nap = crate::store::wake::interval(poll, waker, std::time::Duration::from_secs(1));
        if let Some(l) = limit {
            nap = nap.min(l.saturating_sub(start.elapsed()));
        }
        waker.wait(nap);
    }
}

/// `gates wait --all|--any`: each gate's own outcome, as far as the wait looked.
#[derive(Debug, Serialize)]
pub struct SeveralWaited {
    /// `all` or `any`.
    pub mode: &'static str,
    /// The gates whose outcome the wait settled, in the order they were named.
    pub gates: Vec<GateWaited>,
    /// The named gates still pending when the wait had its answer (it did not wait for them).
    pub not_settled: Vec<String>,
}

impl Render for SeveralWaited {
    fn warnings(&self) -> Vec<String> {
        self.gates.iter().flat_map(|g| g.warnings()).collect()
    }

    /// `--all`: 0 when every gate is approved; `--any`: 0 when one is. Otherwise the most
    /// serious of the gates' own codes, in the order 9, 10, 11, 5, 6, 7.
    fn exit_code(&self) -> Code {
        let codes: Vec<Code> = self.gates.iter().map(|g| g.exit_code()).collect();
        // A named gate tampered with fails the wait, whatever another gate's outcome.
        if codes.contains(&Code::Tampered) {
            return Code::Tampered;
        }
        let ok = match self.mode {
            "all" => self.not_settled.is_empty() && codes.iter().all(|c| *c == Code::Ok),
            _ => codes.contains(&Code::Ok),
        };
        if ok {
            return Code::Ok;
        }
        [
            Code::Tampered,
            Code::Unattested,
            Code::Stale,
            Code::Rejected,
            Code::TimedOut,
            Code::StillPending,
        ]
        .into_iter()
        .find(|c| codes.contains(c))
        .unwrap_or(Code::StillPending)
    }

    fn text(self, w: &mut dyn Write, tty: bool) -> io::Result<()> {
        let code = self.exit_code();
        let mode = self.mode;
        for g in self.gates {
            g.text(w, tty)?;
        }
        for g in &self.not_settled {
            writeln!(w, "{g}: still pending, not waited on further")?;
        }
        writeln!(
            w,
            "{}: exit {}",
            if mode == "all" {
                "all of them"
            } else {
                "any of them"
            },
            code as i32
        )
    }
}

crate::output::one_of!(
    /// What `gates wait` prints: one gate's outcome, or several's.
    WaitOutput {
        One(Box<GateWaited>),
        Several(SeveralWaited),
    }
);

#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct AuditList {
    pub rows: Vec<AuditRow>,
    #[serde(skip)]
    pub warnings: Vec<String>,
}

impl Render for AuditList {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        if self.rows.is_empty() {
            return writeln!(w, "no audit events");
        }
        audit_table(w, &self.rows, true)
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }
}

pub fn audit(args: &GateAuditArgs, ctx: &Context) -> Result<AuditList> {
    if let Some(g) = &args.gate {
        check_gate_id(g)?;
    }
    let since = args
        .since
        .as_deref()
        .map(|d| parse_duration(d).map(|s| now_plus(-s)))
        .transpose()?;
    // The filter names a principal as decisions record it: normalised.
    let principal = args
        .principal
        .as_deref()
        .map(crate::model::Principal::normalise);
    let filter = AuditFilter {
        gate_id: args.gate.as_deref(),
        principal: principal.as_deref(),
        since: since.as_deref(),
    };
    // Runs on the project's server: one query; the others, one store at a time.
    let (rows, warnings) = Listing::audits(ctx, &filter)?;
    Ok(AuditList { rows, warnings })
}

#[derive(Debug, Serialize)]
pub struct RunChain {
    pub run_id: String,
    pub db: String,
    /// `intact`, `unattested` or `broken`.
    pub verdict: &'static str,
    pub rows: usize,
    pub unchained_legacy: usize,
    /// Rows sealed with this machine's key, in an unbroken sequence.
    pub attested: usize,
    /// Ids of rows nothing attests (another tool's, or sealed elsewhere).
    pub unattested: Vec<i64>,
    /// Of those, rows sealed with another machine's key.
    pub sealed_elsewhere: usize,
    /// Sealed rows exist and this machine has no audit key to check them.
    pub key_missing: bool,
    /// The sequence number this machine anchored and found in place.
    pub anchored_seq: Option<i64>,
    pub first_broken: Option<Broken>,
    /// Gates that disagree with their log, or whose decision is unattested.
    pub gates: Vec<GateProblem>,
}

/// The first row of a chain that does not match, and why (id 0: no one row, the log's end).
#[derive(Debug, Serialize)]
pub struct Broken {
    pub id: i64,
    pub reason: String,
}

#[derive(Debug, Serialize)]
pub struct GateProblem {
    pub gate: String,
    /// `unattested` or `tampered`.
    pub state: &'static str,
    pub detail: String,
}

impl RunChain {
    fn new(run_id: String, db: String, report: ChainReport) -> Self {
        let verdict = if report.is_broken() {
            "broken"
        } else if report.is_unattested() {
            "unattested"
        } else {
            "intact"
        };
        let gates = report
            .gates
            .iter()
            .map(|(gate, i)| {
                let (state, detail) = match i {
                    Integrity::Tampered(d) => ("tampered", d.clone()),
                    Integrity::Unattested(d) => ("unattested", d.clone()),
                    Integrity::Attested => ("attested", String::new()),
                };
                GateProblem {
                    gate: gate.clone(),
                    state,
                    detail,
                }
            })
            .collect();
        RunChain {
            run_id,
            db,
            verdict,
            rows: report.rows,
            unchained_legacy: report.unchained_legacy,
            attested: report.attested,
            unattested: report.unattested,
            sealed_elsewhere: report.other_key,
            key_missing: report.key_missing,
            anchored_seq: report.anchored,
            first_broken: report.first_broken.map(|b| Broken {
                id: b.id,
                reason: b.reason,
            }),
            gates,
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct Verified {
    pub runs: Vec<RunChain>,
    #[serde(skip)]
    pub warnings: Vec<String>,
}

impl Render for Verified {
    /// 0 when every log is intact and attested; 9 when any is broken or any gate disagrees
    /// with its log; else 1 when a run could not be read; else 10 when anything is unattested.
    fn exit_code(&self) -> Code {
        let any = |v: &str| self.runs.iter().any(|r| r.verdict == v);
        if any("broken") {
            Code::Tampered
        } else if !self.warnings.is_empty() {
            Code::Error
        } else if any("unattested") {
            Code::Unattested
        } else {
            Code::Ok
        }
    }

    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        if self.runs.is_empty() && self.warnings.is_empty() {
            return writeln!(w, "no runs");
        }
        for r in &self.runs {
            let mut notes = Vec::new();
            if r.unchained_legacy > 0 {
                notes.push(format!(
                    "{} unchained rows from before the chain",
                    r.unchained_legacy
                ));
            }
            if !r.unattested.is_empty() {
                notes.push(format!("{} unattested", r.unattested.len()));
            }
            if r.sealed_elsewhere > 0 {
                notes.push(format!("{} sealed on another machine", r.sealed_elsewhere));
            }
            if r.key_missing {
                notes.push("no audit key here to check seals".to_string());
            }
            let notes: String = notes.iter().map(|n| format!(", {n}")).collect();
            match (&r.first_broken, r.verdict) {
                (Some(b), _) if b.id > 0 => {
                    writeln!(w, "{}: BROKEN at row {}: {}", r.run_id, b.id, b.reason)?
                }
                (Some(b), _) => writeln!(w, "{}: BROKEN: {}", r.run_id, b.reason)?,
                (None, verdict) => writeln!(w, "{}: {verdict} ({} rows{notes})", r.run_id, r.rows)?,
            }
            for g in &r.gates {
                let state = if g.state == "tampered" {
                    "TAMPERED"
                } else {
                    g.state
                };
                writeln!(w, "  gate {}: {state}: {}", g.gate, g.detail)?;
            }
        }
        Ok(())
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }
}

/// What decisions must be signed by (`--signed`, `--require-signed`): the key (`--key`, else
/// the one the project pinned; a usage error when there is none), for this project's place.
fn signed_by(
    ctx: &Context,
    given: Option<&str>,
    accept_carried: Option<String>,
) -> Result<crate::store::signatures::SignedBy> {
    Ok(crate::store::signatures::SignedBy {
        key: pinned_key(ctx, given)?,
        place: ctx.signature_place(false)?,
        accept_carried,
    })
}

/// The key decisions must be signed by: `--key`, else the one the project pinned.
fn pinned_key(ctx: &Context, given: Option<&str>) -> Result<ed25519_dalek::VerifyingKey> {
    if let Some(k) = given {
        return crate::services::sign::parse_public(k);
    }
    let mut book = ctx.principal_book(false)?;
    let pinned = match book.as_deref_mut() {
        Some(b) => crate::services::sign::pinned(b)?,
        None => None,
    };
    pinned.ok_or_else(|| {
        crate::error::usage(
            "this project pinned no signing key to check decisions against: \
             `prose-state principals require --signed` pins the approval page's",
        )
    })
}

pub fn verify(args: &crate::cli::GateVerifyArgs, ctx: &Context) -> Result<Verified> {
    verify_gates(args, &[], ctx)
}

/// `gates verify [[RUN] GATE]`: with no gate, every run's audit chain (of `--run`'s alone, when
/// given) and every gate against its log. With a gate (`ids`: `[RUN] GATE`, the run by
/// default `--run`, else PROSE_RUN), its run's chain, which is one for all the run's gates (a
/// break anywhere is a break in the gate's history), and that gate alone against its log; a
/// gate the run has neither as a row nor in its log is exit 3.
pub fn verify_gates(
    args: &crate::cli::GateVerifyArgs,
    ids: &[String],
    ctx: &Context,
) -> Result<Verified> {
    let signed = args
        .signed
        .then(|| signed_by(ctx, args.key.as_deref(), args.accept_carried_from.clone()))
        .transpose()?;
    let (chains, mut warnings) = match ids {
        [] => Listing::chains(ctx, signed.as_ref())?,
        [gate] => (one_gate(ctx, None, gate, signed.as_ref())?, Vec::new()),
        [run, gate] => (one_gate(ctx, Some(run), gate, signed.as_ref())?, Vec::new()),
        _ => {
            return Err(crate::error::usage(
                "gates verify takes at most a run and a gate: gates verify [[RUN] GATE]",
            ))
        }
    };
    let mut runs = Vec::new();
    for mut c in chains {
        // The versions sealed decisions were made about, against the bindings' history.
        if c.report
            .derived
            .values()
            .any(|d| d.decided_inputs.is_some())
        {
            let dir =
                c.db.parent()
                    .map_or_else(|| ctx.runs_dir().join(&c.run_id), |d| d.to_path_buf());
            let paths = crate::run::RunPaths::in_dir(dir);
            let checked = ctx.open(&paths).and_then(|mut store| {
                crate::services::inputs::check_sealed(store.as_mut(), &paths.dir, &mut c.report)
            });
            if let Err(e) = checked {
                warnings.push(format!(
                    "run {}: its decisions' inputs could not be checked against history: {e:#}",
                    c.run_id
                ));
            }
        }
        runs.push(RunChain::new(
            c.run_id,
            c.db.display().to_string(),
            c.report,
        ));
    }
    Ok(Verified { runs, warnings })
}

/// The chain of `gate`'s run (`run`, else `--run`/PROSE_RUN), its gates narrowed to `gate`.
fn one_gate(
    ctx: &Context,
    run: Option<&str>,
    gate: &str,
    signed: Option<&crate::store::signatures::SignedBy>,
) -> Result<Vec<crate::cmd::listing::CheckedChain>> {
    check_gate_id(gate)?;
    let (paths, mut store) = ctx.open_run(run.or(ctx.run.as_deref()))?;
    let run_id = store.run_info()?.id;
    let mut report = store.verify_signed(signed)?;
    if store.read_gate(gate)?.is_none() && !report.derived.contains_key(gate) {
        return Err(gate_not_found(&run_id, gate));
    }
    report.gates.retain(|(g, _)| g == gate);
    report.earlier.retain(|(g, ..)| g == gate);
    report.derived.retain(|g, _| g == gate);
    Ok(vec![crate::cmd::listing::CheckedChain {
        run_id,
        db: paths.db,
        report,
    }])
}

/// What `gates sweep` did.
#[derive(Serialize)]
pub struct SweptGates {
    /// Runs that had something due.
    pub runs: usize,
    #[serde(flatten)]
    pub done: crate::store::rules::Swept,
    #[serde(skip)]
    pub warnings: Vec<String>,
}

impl Render for SweptGates {
    /// 1 when a run could not be swept.
    fn exit_code(&self) -> Code {
        if self.warnings.is_empty() {
            Code::Ok
        } else {
            Code::Error
        }
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }

    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        let d = &self.done;
        if self.runs == 0 {
            return match self.warnings.len() {
                0 => writeln!(w, "nothing due"),
                n => writeln!(w, "nothing due in the runs read ({n} could not be read)"),
            };
        }
        writeln!(
            w,
            "swept {} run{}: {} timed out, {} escalated, {} reminder{} announced",
            self.runs,
            if self.runs == 1 { "" } else { "s" },
            d.timed_out,
            d.escalated,
            d.reminders,
            if d.reminders == 1 { "" } else { "s" }
        )
    }
}

crate::output::one_of!(
    /// What `gates` and its subcommands print.
    GatesOutput {
        List(GateList),
        Created(GateCreated),
        Shown(GateShown),
        Waited(WaitOutput),
        Audit(AuditList),
        Verified(Verified),
        Swept(SweptGates),
    }
);

impl Run for GatesArgs {
    type Output = GatesOutput;
    fn run(&self, ctx: &Context) -> Result<GatesOutput> {
        Ok(match &self.command {
            None => GatesOutput::List(list(&self.list, ctx)?),
            Some(GatesCommand::Create(a)) => {
                GatesOutput::Created(create(a, ctx.the_run()?.1.as_mut(), quorum(a, ctx)?)?)
            }
            Some(GatesCommand::Show(a)) => {
                let (paths, mut store) = ctx.open_run(a.target.run().or(ctx.run.as_deref()))?;
                let viewer = ctx.principal(&a.principal)?;
                GatesOutput::Shown(show_to(
                    a.target.gate(),
                    viewer.as_ref().map(|v| v.as_str()),
                    "cli",
                    store.as_mut(),
                    &paths.dir,
                    &mut LazyRoster::new(ctx),
                )?)
            }
            Some(GatesCommand::Wait(a)) => GatesOutput::Waited(wait(a, ctx)?),
            Some(GatesCommand::Audit(a)) => GatesOutput::Audit(audit(a, ctx)?),
            Some(GatesCommand::Verify(a)) => GatesOutput::Verified(verify_gates(a, &a.ids, ctx)?),
            Some(GatesCommand::Sweep(a)) => {
                let (runs, done, warnings) = Listing::sweep(ctx, &now(), a.scan)?;
                GatesOutput::Swept(SweptGates {
                    runs,
                    done,
                    warnings,
                })
            }
        })
    }
}
