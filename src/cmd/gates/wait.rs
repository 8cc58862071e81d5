//! `gates wait`: waiting for one gate's decision or several's, in looks that live through
//! outages, and a wait another thread may stop (an MCP task).

use super::gate_not_found;
use super::verify::signed_by;
use super::view::{resolution, team_view, GateView, IntegrityView, LazyRoster};
use crate::cli::GateWaitArgs;
use crate::context::Context;
use crate::error::{usage, Code};
use crate::model::{check_gate_id, now, parse_duration, GateStatus};
use crate::output::Render;
use crate::store::chain::{ChainReport, Integrity};
use crate::store::{GateRow, Store};
use anyhow::{Context as _, Result};
use serde::Serialize;
use std::io::{self, Write};

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
    /// The status its row claims, which a decision that does not stand is told by ("approved
    /// in its row"); what is shown and acted on is the sealed log's.
    #[serde(skip)]
    pub row_status: crate::model::GateStatus,
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
                g.id, self.row_status
            );
        }
        if let Some(why) = &self.stale {
            return writeln!(
                w,
                "{}: STALE, no decision stands ({}): {why}; open it again as it was created (gates create {} --reopen, with its prompt and every option it was created with: --allow, --inputs, --require, --response-schema, --response-binding)",
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
            "pending" => {
                // A team's gate says where its votes stand, as `gates show` does.
                let votes = match &self.gate.team {
                    Some(t) if t.require > 1 || !t.waiting_for.is_empty() => format!(
                        " ({}; waiting for {})",
                        t.progress,
                        crate::output::visible(&t.waiting_for.join(", "))
                    ),
                    _ => String::new(),
                };
                writeln!(
                    w,
                    "{}: still pending after {}s{votes}",
                    g.id, self.waited_seconds
                )
            }
            _ => {
                writeln!(w, "{}: {}{superseded}", g.id, resolution(g))?;
                for line in self.gate.edit_lines() {
                    writeln!(w, "edited: {line}")?;
                }
                if let Some(r) = &self.gate.response {
                    writeln!(w, "response: {}", super::view::visible_json(r))?;
                    if let Some(b) = &self.gate.response_binding {
                        writeln!(w, "written to binding: {}", crate::output::visible(&b.name))?;
                    }
                }
                // A quorum's approvers may answer differently: each vote's answer, so that the
                // deciding one is not taken for everyone's.
                for a in &self.gate.responses {
                    let answer = super::view::visible_json(&a.response);
                    writeln!(w, "response by {}: {answer}", crate::output::visible(&a.by))?;
                }
                Ok(())
            }
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
) -> Result<(IntegrityView, Option<String>, GateRow, GateStatus)> {
    let row = store.read_gate_opening(gate, d.instance)?;
    // What its row claims, which a decision that does not stand is told by.
    let claimed = row
        .as_ref()
        .map_or_else(|| d.status(), |r| r.status.clone());
    let mut found = crate::store::chain::opening_integrity(report, gate, row.as_ref(), d);
    if found == Integrity::Attested {
        if let Some(why) = crate::services::inputs::sealed_problem(store, run_dir, d)? {
            found = why;
        }
    }
    // Its row, as `compare` found it; gone, the opening as its events make it (tampered);
    // at odds with them, shown as they have it.
    let row = match row {
        Some(row) => crate::store::gate_read::shown_row(row, &found, d),
        None => crate::store::gate_read::gone_row(gate, d),
    };
    let integrity = IntegrityView::from(found);
    let stale = match integrity.code(accept_unattested) {
        None => crate::services::inputs::stale(store, run_dir, d)?.0,
        Some(_) => None,
    };
    Ok((integrity, stale, row, claimed))
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
    let stop = ctx.stop();
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
            let mut found: Vec<(String, String)> = Vec::new();
            // Whether a gate settling names bindings (by its own sealed history).
            let mut naming = false;
            for (i, id) in gates.iter().enumerate() {
                if settled[i].is_some() {
                    continue;
                }
                // The gate of exactly this id, against its sealed history: a row another id
                // answers for (a collation changed by SQL) is refused as tampering.
                let read = crate::store::gate_read::read(s, id, &now)?
                    .ok_or_else(|| gate_not_found(&run.id, id))?;
                let reopened = args.instance.is_some_and(|w| read.row.instance != w);
                // A pending gate whose named bindings do not stand as `gates verify` checks
                // them (a forged answer, a vote's edit rewritten) is settled as tampered now.
                if read.row.status.is_pending() && !read.tampered() {
                    if let Some(why) =
                        crate::services::inputs::gate_problem(s, &run_dir, &read.derived)?
                    {
                        found.push((id.to_string(), why));
                        ready.push((i, read.row));
                        naming |= names_bindings(&read.derived);
                        continue;
                    }
                }
                // Settled: decided, or contradicting its log (never decidable, so never waited
                // on), or out of time, or reopened.
                let settles = !read.row.status.is_pending() || read.tampered();
                if settles || out_of_time || reopened {
                    naming |= names_bindings(&read.derived);
                    ready.push((i, read.row));
                }
            }
            if ready.is_empty() {
                return Ok(());
            }
            // A stopped wait writes nothing: the settling below holds the leave to.
            let _permit = stop.as_ref().map(|s| s.permit()).transpose()?;
            // A decision counts only if its log attests it. A gate whose openings name
            // bindings stands only as `gates verify` checks the run: the versions its
            // decisions pinned or wrote, and the values held now (an answer deleted or
            // renamed, an edited input changed in place), made again when a finding coincides
            // with the log growing (a decision committed beside it). The log is read once for
            // both where the gate's own history names bindings; where only the whole log's
            // derivation does, it is checked again as the run.
            let verify_run = |s: &mut dyn Store| {
                crate::services::inputs::verify_run(s, &run_dir, signed.as_ref()).map(|r| r.0)
            };
            let mut report = if naming {
                verify_run(s)?
            } else {
                let report = s.verify_signed(signed.as_ref())?;
                let names_any = ready
                    .iter()
                    .any(|(_, g)| report.derived.get(&g.id).is_some_and(names_bindings));
                if names_any {
                    verify_run(s)?
                } else {
                    report
                }
            };
            for (gate, why) in found {
                if !matches!(report.gate(&gate), Integrity::Tampered(_)) {
                    report.gates.retain(|(g, _)| *g != gate);
                    report.gates.push((gate, Integrity::Tampered(why)));
                }
            }
            // Waiting on several, a gate tampered with is settled as such now, even pending:
            // the wait never returns past it.
            if several {
                for (i, id) in gates.iter().enumerate() {
                    let tampered = matches!(report.gate(id), Integrity::Tampered(_))
                        || report.first_broken.is_some();
                    if settled[i].is_none() && tampered && !ready.iter().any(|(j, _)| *j == i) {
                        if let Some(read) = crate::store::gate_read::read(s, id, &now)? {
                            ready.push((i, read.row));
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
                        let (integrity, stale, row, claimed) =
                            superseded(s, &run_dir, &report, &gate.id, &d, args.accept_unattested)?;
                        let team = team_view(&row, &d, &now, &mut LazyRoster::new(ctx))?;
                        settled[i] = Some(GateWaited {
                            row_status: claimed,
                            stale,
                            integrity,
                            gate: GateView {
                                team,
                                ..GateView::new(row, run.program_path.clone(), &now)
                            }
                            .answered(Some(&d)),
                            waited_seconds: start.elapsed().as_secs(),
                            superseded_by: Some(newest),
                            accept_unattested: args.accept_unattested,
                        });
                        continue;
                    }
                    // An opening not made yet (a VM that crashed before its `--reopen`) is
                    // the caller's mistake, not the log's: the log's end is anchored, and
                    // `gates verify` would find one cut from it.
                    if want > newest
                        && report.first_broken.is_none()
                        && !matches!(report.gate(&gate.id), Integrity::Tampered(_))
                    {
                        return Err(crate::error::not_found(format!(
                            "gate {} has no opening {want} yet: its sealed log's newest is instance {newest} (`gates create {} --reopen` opens the next; `--instance {newest}` waits on that one)",
                            crate::error::shown(&gate.id),
                            gate.id
                        )));
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
                // A row at odds with its sealed log is shown as the log has it (marked).
                let row_status = gate.status.clone();
                let gate = crate::store::gate_read::shown_in(gate, &report);
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
                let answered = report.derived.get(&gate.id).cloned();
                settled[i] = Some(GateWaited {
                    row_status,
                    stale,
                    integrity,
                    gate: GateView {
                        team,
                        ..GateView::new(gate, run.program_path.clone(), &now)
                    }
                    .answered(answered.as_ref()),
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
                    stop.tell(&run.id, &pending);
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
        if waker.how() == "listen" && ctx.opts.wiring.keeps() {
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

/// Whether any opening of a gate (its earlier ones too) names bindings: inputs its decision
/// is about, or a binding its decision answers into.
fn names_bindings(d: &crate::store::chain::Derived) -> bool {
    d.earlier
        .iter()
        .chain(std::iter::once(d))
        .any(|o| !o.inputs.is_empty() || o.response_binding.is_some())
}
