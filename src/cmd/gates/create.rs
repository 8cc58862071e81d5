//! `gates create`: what a new gate asks of its deciders (its quorum), and the gate made.

use super::in_future;
use super::view::{GateView, TeamView};
use crate::cli::GateCreateArgs;
use crate::error::{refused, shown, usage};
use crate::model::{check_gate_id, check_metadata, now, parse_duration, sha256_tag};
use crate::output::Render;
use crate::store::{Created, Store};
use crate::team::Quorum;
use anyhow::Result;
use serde::Serialize;
use std::io::{self, Write};

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
        // The opening to wait for (`gates wait --instance N`), the first one too: the guide's
        // wait names it.
        writeln!(w, "Instance: {}", g.instance)?;
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
        if let Err(why) = crate::language::check_on_reject(a) {
            return Err(usage(format!(
                "--on-reject {}: {why}; the language's on_reject is throw [\"message\"], retry [LABEL], continue, session \"prompt\", or a \"message\" alone",
                shown(a)
            )));
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
    let schema = args
        .response_schema
        .as_deref()
        .map(|a| {
            let what = "--response-schema";
            let text = crate::response::text_of(what, a, crate::response::SCHEMA_MAX_BYTES)?;
            crate::response::parse_schema(what, &text)
        })
        .transpose()?;
    if let Some(name) = &args.response_binding {
        crate::model::check_name(name).map_err(|e| usage(format!("--response-binding: {e:#}")))?;
        if schema.is_none() {
            return Err(usage(
                "--response-binding needs --response-schema: the binding holds the answer it asks for",
            ));
        }
        // The decision would change an input it is about as it is taken: stale at once.
        if inputs.contains(name) {
            return Err(usage(format!(
                "--response-binding {}: it is one of --inputs, which the decision is about; the answer goes to a binding of its own",
                shown(name)
            )));
        }
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
            if inputs.is_empty() && args.response_binding.is_none() {
                scope = scope.or(r.parent_id);
            }
        }
    }
    // A gate is opened inside a construct before its end; the same opening again (a retry)
    // is the rules' to answer.
    if let Some(at) = args
        .execution_id
        .map(|e| crate::store::record(store, e))
        .transpose()?
        .flatten()
    {
        if let Err(e) = crate::cmd::resume::not_after_its_end(store, &at, "a gate") {
            if args.reopen || store.read_gate(&args.gate_id)?.is_none() {
                return Err(e);
            }
        }
    }
    // The answer is written where `bind` from the gate's record writes: the language's frame.
    let response_scope = match (&args.response_binding, scope) {
        (Some(name), Some(at)) => {
            if !store.execution_exists(at)? {
                return Err(crate::error::not_found(format!(
                    "execution not found: {at}"
                )));
            }
            crate::store::frame_of(store, at, Some(name))?
        }
        _ => None,
    };
    // Nothing else claims the answer's line of frames: the rule checks it in its transaction
    // (`rules::gates::answer_line_free`).
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
        response_schema: schema.as_ref().map(|s| &s.value),
        response_binding: args
            .response_binding
            .as_deref()
            .map(|n| (n, response_scope)),
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
            response_schema: schema.map(|s| s.value),
            response_binding: args.response_binding.clone().map(|name| {
                super::view::ResponseBinding {
                    name,
                    execution_id: response_scope,
                }
            }),
            ..GateView::new(g, program, &now)
        },
    })
}
