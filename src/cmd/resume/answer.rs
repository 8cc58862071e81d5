//! `resume`'s answers, read from the store: everything (`--all`), the bounded answer, and the
//! project's unfinished runs when no run is named; each gate's next step; the command.

use super::frame::{constructs, narrow_position, open_constructs, outstanding_retries};
use super::{on_reject_step, step};
use super::{
    AgentInfo, BindingInfo, Caught, Counts, Event, GateNext, NextStep, Position, Resumable,
    ResumeAnswer, ResumeBrief, ResumeDoc, RunPart, Unfinished, BOUND, DEFAULT_BINDINGS, TEXT,
};
use crate::cmd::gates::IntegrityView;
use crate::model::{now, RunStatus};
use crate::output::one_line;
use crate::run::RunPaths;
use crate::store::{AgentRow, ExecQuery, ExecutionRow, GateRow, Store};
use anyhow::Result;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};

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

/// The run's agents, then those of the project and user scopes given.
/// `newest`: the run's newest record (0: none), against which the run's own agents' newest
/// segments are read as logged or not.
fn all_agents(
    store: &mut dyn Store,
    other_agents: Vec<(&str, Vec<AgentRow>)>,
    newest: i64,
) -> Result<Vec<AgentInfo>> {
    let mut agents = Vec::new();
    let own = store.agents()?;
    let own = own.into_iter().map(|a| {
        // No record when it was appended (none yet) is record 0.
        let unlogged = a.segments > 0 && a.last_segment_at_record.unwrap_or(0) >= newest;
        (a, unlogged)
    });
    let others = other_agents
        .into_iter()
        .flat_map(|(scope, rows)| rows.into_iter().map(move |a| ((scope, a), false)));
    for ((scope, a), unlogged) in own.map(|(a, u)| (("execution", a), u)).chain(others) {
        agents.push(AgentInfo {
            unlogged,
            memory_bytes: a.memory.as_ref().map(String::len),
            name: a.name,
            scope: a.scope.unwrap_or_else(|| scope.to_string()),
            segments: a.segments,
        });
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
    roster: &mut crate::cmd::gates::LazyRoster,
) -> Result<Vec<GateNext>> {
    let gates = store.gates(None, now)?;
    // The run checked as `gates verify` checks it (its log, earlier openings, the versions
    // and values of the bindings its openings name), read again when a finding coincides with
    // the log growing: no gate is said to stand that the verification refuses.
    let (report, _) = crate::services::inputs::verify_run(store, run_dir, None)?;
    // A gate its sealed log opened whose row is gone is shown from its log, tampered (its
    // next step is stop): a row deleted behind prose-state's back hides no gate from the VM.
    let mut gates = gates;
    for (id, d) in &report.derived {
        if d.instance > 0 && !gates.iter().any(|g| g.id == *id) {
            gates.push(crate::store::gate_read::gone_row(id, d));
        }
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
    let tampered = |id: &str| IntegrityView::of(&report, id).state == "tampered";
    // Each gate's newest `approve` record failed or pending, from one read of the log shared
    // by every gate that needs it (read only if one does).
    let mut approve_records: Option<HashMap<String, ExecutionRow>> = None;
    gates
        .into_iter()
        .map(|g| {
            // A gate at odds with its log is stated as its sealed log makes it, never as its
            // row claims, in every field the log records (what the position's records say of
            // it too).
            let g = match report.derived.get(&g.id) {
                Some(d) if tampered(&g.id) => crate::store::gate_read::sealed_view(g, d),
                _ => g,
            };
            // The opening to wait on is the sealed log's newest, never the row's.
            let instance = report
                .derived
                .get(&g.id)
                .map(|d| d.instance)
                .filter(|n| *n > 0);
            // What the sealed decision answered and edited, for a gate whose row agrees.
            let sealed = report
                .derived
                .get(&g.id)
                .filter(|_| IntegrityView::of(&report, &g.id).state == "attested");
            let answer = sealed.and_then(|d| {
                let r = d.response.as_ref()?;
                let json = r.to_string();
                let text = crate::output::visible(&json);
                let mut line: String = text.chars().take(200).collect();
                if line.len() < text.len() {
                    line.push('…');
                }
                // Its frame said: an answer in a block's or a branch's frame is not seen
                // from outside it (the next statement there reads it; a VM after the join
                // does not).
                if let Some((name, scope)) = &d.response_binding {
                    let name = crate::output::visible(name);
                    line.push_str(&match scope {
                        None => format!(" (in binding {name}, in the root)"),
                        Some(e) => format!(
                            " (in binding {name}, in the frame of execution {e}: seen from inside it, `get {name} --execution-id {e}`)"
                        ),
                    });
                }
                Some(line)
            });
            let edited = sealed
                .map(|d| {
                    d.edits
                        .iter()
                        .map(|(by, e)| crate::cmd::gates::edit_line(by, e))
                        .collect()
                })
                .unwrap_or_default();
            let next_step = match IntegrityView::of(&report, &g.id) {
                v if v.state == "tampered"
                    || (v.state == "unattested" && !g.status.is_pending()) =>
                {
                    step("stop", v.detail)
                }
                _ if stale.contains_key(&g.id) => step(
                    "reopen",
                    Some(format!(
                        "gates create {} --reopen (with its prompt and every option it was created with: --allow, --inputs, --require, --response-schema, --response-binding), then wait",
                        g.id
                    )),
                ),
                _ => next_step(&g, instance),
            };
            // `retry`: the step ran again since; `session`: the session ran.
            let retried_since = match next_step.action.as_str() {
                "retry" | "session" => retried_since(store, &mut approve_records, &g.id)?,
                _ => None,
            };
            // A rejection or timeout the VM logged under `throw` or `continue`: that record
            // is its on_reject, taken (a `retry` or `session` still runs its step after it).
            let logged_failed = match next_step.action.as_str() {
                "throw" | "continue"
                    if matches!(
                        g.status,
                        crate::model::GateStatus::Rejected | crate::model::GateStatus::Timeout
                    ) =>
                {
                    logged_failed(store, &mut approve_records, &g.id)?.map(|r| r.id)
                }
                _ => None,
            };
            let opened_records = report
                .derived
                .get(&g.id)
                .map(|d| {
                    d.earlier
                        .iter()
                        .chain(std::iter::once(d))
                        .filter_map(|o| o.opened_record)
                        .collect()
                })
                .unwrap_or_default();
            Ok(GateNext {
            logged_failed,
            opened_records,
            retried_since,
            answer,
            edited,
            instance,
            stale: stale.get(&g.id).cloned(),
            integrity: IntegrityView::of(&report, &g.id),
            progress: match report.derived.get(&g.id).filter(|_| g.status.is_pending()) {
                Some(d) => crate::cmd::gates::team_view(&g, d, now, roster)?.map(|t| t.summary()),
                None => None,
            },
            // A decision that does not stand is no decision: the VM stops, whatever the row
            // says (a pending gate nothing sealed is still only waited on).
            next_step,
            reason: g
                .resolution_comment
                .clone()
                .filter(|_| IntegrityView::of(&report, &g.id).state == "attested"),
            status: g.status,
            // Tampered with and opened by nothing sealed: no one decided it.
            resolved_by: g.resolved_by.filter(|_| {
                !tampered(&g.id) || report.derived.get(&g.id).is_some_and(|d| d.instance > 0)
            }),
            id: g.id,
            on_reject: g.on_reject,
            resolved_at: g.resolved_at,
            timeout_at: g.timeout_at,
        })
        })
        .collect()
}

/// The newest record logged in gate `id`'s frame after its `approve` record failed (its
/// statement's newest record, `failed`, logged after the opening `gates create` appended), if
/// any: the step its `retry` runs again ran.
fn retried_since(
    store: &mut dyn Store,
    records: &mut Option<HashMap<String, ExecutionRow>>,
    id: &str,
) -> Result<Option<i64>> {
    let Some(f) = logged_failed(store, records, id)? else {
        return Ok(None);
    };
    let since = store.executions_matching(&ExecQuery {
        after: f.id,
        parent: Some(f.parent_id),
        newest_first: true,
        limit: Some(1),
        ..Default::default()
    })?;
    Ok(since.first().map(|r| r.id))
}

/// The VM's record of gate `id`'s statement logged `failed` after its newest opening (the
/// guide's record of a rejection or timeout), if it was logged: its `on_reject` was taken
/// there, and the position says where the run went on. `records`: every gate's newest
/// `approve` record failed or pending, read once for all gates.
fn logged_failed(
    store: &mut dyn Store,
    records: &mut Option<HashMap<String, ExecutionRow>>,
    id: &str,
) -> Result<Option<ExecutionRow>> {
    if records.is_none() {
        let mut newest = HashMap::new();
        for r in store.executions_matching(&ExecQuery {
            only: Some(&["failed", "pending"]),
            newest_first: true,
            ..Default::default()
        })? {
            if let Some(g) = r
                .statement_text
                .as_deref()
                .and_then(crate::language::approved_gate)
            {
                newest.entry(g.to_string()).or_insert_with(|| r.clone());
            }
        }
        *records = Some(newest);
    }
    // Its newest opening not logged failed yet: nothing was taken for it.
    Ok(records
        .as_ref()
        .and_then(|m| m.get(id))
        .filter(|r| r.status == Some(crate::model::ExecStatus::Failed))
        .cloned())
}

/// Whether binding `b` was written after the newest record of its frame (the records inside
/// its frame's record, at any depth; every record for the root): no record was logged since.
/// Looks at most at the 32 records that followed it. With branches open, also which of them
/// delivered into it and logged nothing since: a named branch's result (`a = session ...`),
/// or a keyed `--append`/`--merge` whose key is the branch's record (`--key "$BRANCH"`).
fn unlogged(
    store: &mut dyn Store,
    b: &crate::store::BindingRow,
    newest: i64,
    open: &[Event],
) -> Result<Late> {
    let branches: Vec<&Event> = open
        .iter()
        .filter(|o| o.construct == Some(crate::language::Kind::Branch))
        .collect();
    // The newest version, and as many before it as branches are open: each may have appended.
    let span = store.binding_versions(
        &b.name,
        b.execution_id,
        crate::store::history::Versions::Page {
            before: None,
            limit: 1 + branches.len().min(63) as i64,
        },
    )?;
    let key_of = |r: &crate::store::history::HistoryRow| {
        r.delta
            .as_deref()
            .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
            .and_then(|d| d.get("key")?.as_str().map(String::from))
    };
    let mut late = Late::default();
    // A version written before the run's first record has no record it follows: 0.
    let Some(newest_version) = span.rows.first() else {
        return Ok(late);
    };
    let Some(at) = newest_version
        .at_record
        .or((!newest_version.gap).then_some(0))
    else {
        return Ok(late);
    };
    if let Some(x) = b.execution_id {
        // A name bound at a record that is no frame (a loop variable, `catch as err`: the
        // VM's own, with `--local`) is no session's output; nor is a block's argument, a
        // const bound before anything inside its call.
        if crate::store::frame_of(store, x, None)? != Some(x)
            || (b.kind.as_deref() == Some("const") && at <= x)
        {
            return Ok(late);
        }
        // A const bound in its frame before anything was logged inside it (a branch's
        // `item`, while other branches logged) is the VM's argument too.
        if b.kind.as_deref() == Some("const")
            && store
                .executions_matching(&ExecQuery {
                    after: x,
                    before: Some(at + 1),
                    parent: Some(Some(x)),
                    limit: Some(1),
                    ..Default::default()
                })?
                .is_empty()
        {
            return Ok(late);
        }
    }
    // A construct's result the VM binds itself before it ends the construct (`let x = do
    // f()`: bound in the caller's frame `--from` the call's, then the call ended) is no
    // session's output: resume says to end the construct, not to log a session.
    // (Bound outside it: a frame inside the construct, or its own, comes after its start.)
    // (A block's call: a loop's, a reduce's, result is its folds', each logged as a statement.)
    let own_result = open.iter().any(|o| {
        o.construct != Some(crate::language::Kind::Branch)
            && crate::language::is_frame(o.construct, o.status.as_ref().map(|s| s.as_str()))
            && b.execution_id.is_none_or(|e| e < o.id)
            && o.statement_text.as_deref().and_then(result_name) == Some(b.name.as_str())
    });
    if own_result {
        return Ok(late);
    }
    // A named branch's result (`a = session ...`), its branch still open: logged only by a
    // record inside that branch, whatever the other branches logged since.
    let named_branch = branches.iter().find(|o| {
        o.statement_text
            .as_deref()
            .and_then(crate::language::assigned_name)
            == Some(b.name.as_str())
    });
    let key = key_of(newest_version);
    let frame = match (named_branch, b.execution_id) {
        (Some(br), _) => Some(br.id),
        (None, _) if at >= newest => {
            late.newest = Some(key.clone());
            None
        }
        (None, Some(f)) => Some(f),
        (None, None) => None,
    };
    if let Some(frame) = frame {
        if nothing_logged_in(store, frame, at)? {
            late.newest = Some(key.clone());
            if let Some(br) = named_branch {
                late.delivered.push(br.id);
            }
        }
    }
    // The branches whose keyed update landed with nothing logged inside them since.
    for r in &span.rows {
        let (Some(k), Some(at)) = (key_of(r), r.at_record) else {
            continue;
        };
        let Some(br) = branches.iter().find(|o| o.id.to_string() == k) else {
            continue;
        };
        if !late.delivered.contains(&br.id) && nothing_logged_in(store, br.id, at)? {
            late.delivered.push(br.id);
            late.newest.get_or_insert(Some(k));
        }
    }
    Ok(late)
}

/// The name a statement binds its result to: `x = ...`, `let x = ...`, `const x = ...`.
fn result_name(text: &str) -> Option<&str> {
    let t = text.trim_start();
    let t = ["let ", "const "]
        .iter()
        .find_map(|k| t.strip_prefix(k))
        .unwrap_or(t);
    crate::language::assigned_name(t)
}

/// Whether no record inside `frame` (at any depth) followed record `at`, among the 32 records
/// that followed it.
fn nothing_logged_in(store: &mut dyn Store, frame: i64, at: i64) -> Result<bool> {
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
    Ok(after.len() < 32)
}

/// An unlogged binding: `newest`, with the `--key` of its newest `--append`/`--merge` if it
/// had one (`Some(None)`: unlogged, no key; `None`: logged); `delivered`, the open branches
/// whose result it holds and which logged nothing since (their session ran: log its
/// completion, do not run it again, and do not skip it).
#[derive(Default)]
struct Late {
    newest: Option<Option<String>>,
    delivered: Vec<i64>,
}

/// Marks each open branch that delivered into a binding and logged nothing since (`delivered`:
/// its record -> the binding) with that binding, and keeps it off `to_skip`: its session ran,
/// so it is logged, not run again, and not skipped as if it had not.
fn not_skipping(
    mut parallel: Vec<super::Parallel>,
    open: &[Event],
    delivered: &BTreeMap<i64, String>,
) -> Vec<super::Parallel> {
    for p in &mut parallel {
        for b in &mut p.open_branches {
            b.delivered = delivered.get(&b.record).cloned();
        }
        let names: Vec<String> = open
            .iter()
            .filter(|o| delivered.contains_key(&o.id))
            .filter_map(|o| o.metadata.as_ref())
            .filter(|m| m.get("parallel_id").and_then(Value::as_str) == Some(&p.parallel_id))
            .filter_map(|m| m.get("branch").and_then(Value::as_str).map(String::from))
            .collect();
        p.to_skip.retain(|b| !names.contains(b));
    }
    parallel
}

/// The gates whose sealed decisions wrote these bindings as they are now (an answer, an
/// approver's edit), by name and scope: read from the log only where a binding says a
/// decision wrote it (`approve GATE:`), and believed only where the log says so.
fn written_by_gates(
    store: &mut dyn Store,
    rows: &[crate::store::BindingRow],
) -> Result<HashMap<(String, Option<i64>), String>> {
    let said = |b: &crate::store::BindingRow| {
        b.source_statement
            .as_deref()
            .is_some_and(|s| s.starts_with("approve ") && s.ends_with(':'))
    };
    if !rows.iter().any(said) {
        return Ok(HashMap::new());
    }
    let writes = crate::store::gate_read::decision_writes(store)?;
    Ok(rows
        .iter()
        .filter(|b| said(b))
        .filter_map(|b| {
            let at = (b.name.clone(), b.execution_id, b.own_version?);
            let gate = writes.get(&at)?;
            Some(((b.name.clone(), b.execution_id), gate.clone()))
        })
        .collect())
}

fn binding_info(store: &mut dyn Store, run: &RunPaths, b: crate::store::BindingRow) -> BindingInfo {
    let value = String::from_utf8_lossy(b.value.as_deref().unwrap_or_default()).into_owned();
    let bytes = match &b.attachment_path {
        Some(p) => crate::services::attach::stored_len(&mut *store, &run.dir, p).unwrap_or(0),
        None => value.len() as u64,
    };
    BindingInfo {
        unlogged: false,
        unlogged_key: None,
        by_gate: None,
        scope: crate::cmd::get::scope_name(b.execution_id.is_some()),
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
    roster: &mut crate::cmd::gates::LazyRoster,
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
    // Each value shown stands against the log as `get` checks it, as the bounded answer's do.
    let bound = crate::services::inputs::checked_bindings(store, &run.dir, None, |s| s.bindings())?;
    let by_gates = written_by_gates(store, &bound)?;
    let mut delivered = BTreeMap::new();
    for b in bound {
        // Written by a gate's decision: no session's output, nothing to log.
        let by_gate = by_gates.get(&(b.name.clone(), b.execution_id)).cloned();
        let late = match by_gate {
            None => unlogged(store, &b, newest, &open)?,
            Some(_) => Late::default(),
        };
        delivered.extend(late.delivered.iter().map(|d| (*d, b.name.clone())));
        bindings.push(BindingInfo {
            unlogged: late.newest.is_some(),
            unlogged_key: late.newest.flatten(),
            by_gate,
            ..binding_info(store, run, b)
        });
    }

    let agents = all_agents(store, other_agents, newest)?;

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
        parallel: not_skipping(constructs(&rows), &open, &delivered),
        loops: constructs(&rows),
        retries: outstanding_retries(store)?,
        bindings,
        agents,
        gates,
        gates_logged_resumed: resumed.gates_logged,
    })
}

/// How many unfinished runs `resume` without a run lists, and counts at most (of each status).
const UNFINISHED_LISTED: usize = 20;
const UNFINISHED_COUNTED: u64 = 10_000;

const NAME_THE_RUN: &str =
    "name the run to continue: prose-state resume --run RUN_ID (over MCP: resume with `run`)";

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
        let (runs, _) = crate::cmd::listing::Listing::runs(
            ctx,
            &crate::cmd::listing::RunQuery {
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
                &mut crate::cmd::gates::LazyRoster::new(ctx),
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

/// `resume` by default: read narrowly (see [`ResumeBrief`]), then cut to [`BOUND`] bytes.
fn brief(
    run: &RunPaths,
    store: &mut dyn Store,
    other_agents: Vec<(&str, Vec<AgentRow>)>,
    cursor: Option<&str>,
    limit: usize,
    roster: &mut crate::cmd::gates::LazyRoster,
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
        leaves: full.leaves,
        on_reject: full.on_reject,
        caught: full.caught.map(|c| Caught {
            error: slim_text(c.error),
            ..c
        }),
    };
    let scope = position.current.as_ref().map(|e| e.id);
    // The nearest binding of each name, from the innermost scope up to the root; each value
    // shown that a sealed opening names stands against the log as `get` checks it (a forged
    // answer or edit is exit 9 here too, or 10 where the machine cannot vouch), read in one
    // read again with it when a decision committed beside the read.
    let mut chain = Vec::new();
    let visible = crate::services::inputs::checked_bindings(store, &run.dir, Some(scope), |s| {
        let (walked, visible) =
            crate::cmd::get::nearest_bindings(s, scope, cursor, limit as i64 + 1)?;
        chain = walked;
        Ok(visible)
    })?;
    let more = visible.len() > limit;
    let mut page = Vec::new();
    let newest = full_last.unwrap_or(0);
    let visible: Vec<_> = visible.into_iter().take(limit).collect();
    let by_gates = written_by_gates(store, &visible)?;
    let mut delivered = BTreeMap::new();
    for b in visible {
        let by_gate = by_gates.get(&(b.name.clone(), b.execution_id)).cloned();
        let late = match by_gate {
            None => unlogged(store, &b, newest, &open_now)?,
            Some(_) => Late::default(),
        };
        delivered.extend(late.delivered.iter().map(|d| (*d, b.name.clone())));
        let mut b = binding_info(store, run, b);
        b.unlogged = late.newest.is_some();
        b.unlogged_key = late.newest.flatten();
        b.by_gate = by_gate;
        b.attachment_path = slim_text(b.attachment_path.take());
        page.push(b);
    }
    let counted = store.resume_counts(&chain)?;

    let agents = all_agents(store, other_agents, newest)?;
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
        parallel: not_skipping(parallel, &open_now, &delivered),
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

impl crate::cmd::Run for crate::cli::ResumeArgs {
    type Output = ResumeAnswer;
    fn run(&self, ctx: &crate::context::Context) -> Result<ResumeAnswer> {
        if ctx.run.is_none() {
            return unfinished(ctx, self);
        }
        let (paths, mut store) = ctx.the_run()?;
        // Project and user agents too, where their stores exist (never created here).
        let others = ctx.other_agents()?;
        if self.all {
            let mut roster = crate::cmd::gates::LazyRoster::new(ctx);
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
            &mut crate::cmd::gates::LazyRoster::new(ctx),
            true,
        )?)))
    }
}

#[cfg(test)]
mod tests {
    use crate::cmd::resume::on_reject_step;

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
