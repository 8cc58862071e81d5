//! A gate's page: what the decision is about, the bindings its execution sees, its recent
//! log and history, and the decision forms (`decide`).

use super::app::{blocking, page_run, App};
use super::decide;
use super::error::PageError;
use super::layout::{enc, gate_link, layout, left, status_shown, visible, Page};
use super::pages::{binding_markup, grid, log_table, newest, RECENT};
use super::signin::SignedIn;
use crate::store::{BindingRow, ExecutionRow};
use anyhow::Result;
use axum::extract::{Path, State};
use maud::{html, Markup};
use std::sync::Arc;

/// What a gate's page shows, read once.
struct GateViewData {
    shown: crate::cmd::gates::GateShown,
    recent: Vec<ExecutionRow>,
    bindings: Vec<BindingRow>,
    /// Groups and revocations now (who may decide through a group).
    roster: crate::team::Roster,
    /// The inputs the approval form offers for editing: name and value.
    editable: Vec<(String, String)>,
}

pub(super) async fn gate_page(
    State(app): State<Arc<App>>,
    Path((run, gate)): Path<(String, String)>,
    user: SignedIn,
) -> Result<Page, PageError> {
    let viewer = user.principal.as_str().to_string();
    let d = blocking(&app, move |app| gate_view(app, &run, &gate, &viewer)).await?;
    Ok(Page(gate_markup(&app, &d, &user)))
}

/// What gate `gate` of run `run` shows `viewer` (its audit log records the view).
fn gate_view(app: &App, run: &str, gate: &str, viewer: &str) -> Result<GateViewData> {
    let (paths, mut store) = page_run(&app.ctx, run)?;
    let shown = crate::cmd::gates::show_to(
        gate,
        Some(viewer),
        "web",
        store.as_mut(),
        &paths.dir,
        &mut crate::cmd::gates::LazyRoster::new(&app.ctx),
    )?;
    let scope = shown.gate.gate.execution_id;
    let inputs: Vec<String> = shown.inputs.iter().map(|i| i.name.clone()).collect();
    // The bindings its execution sees (an execution that does not exist has no chain: the
    // root alone); every root binding for a gate with no execution.
    // Each value a sealed opening names is checked as `get` checks it (a forged answer or edit
    // is refused, 409, never shown).
    let bindings =
        crate::services::inputs::checked_bindings(store.as_mut(), &paths.dir, Some(scope), |s| {
            Ok(crate::cmd::get::nearest_bindings(s, scope, None, i64::MAX)?.1)
        })?;
    let editable = super::decide::editable_of(&bindings, &inputs);
    Ok(GateViewData {
        recent: newest(store.as_mut(), RECENT)?,
        bindings,
        // In the order the gate names them.
        editable: inputs
            .iter()
            .filter_map(|n| Some((n.clone(), editable.get(n)?.clone())))
            .collect(),
        shown,
        // A book whose log cannot be trusted admits no one through a group (the decision's
        // own rule): the page offers no form on that account.
        roster: app
            .with_book(|b| crate::cmd::decide::roster(Some(b)))?
            .unwrap_or_default(),
    })
}

fn gate_markup(app: &App, d: &GateViewData, user: &SignedIn) -> Markup {
    let g = &d.shown.gate.gate;
    let principal = &user.principal;
    let run = g.run_id.as_deref().unwrap_or("");
    let hash = crate::model::sha256_tag(&g.prompt);
    let may = !crate::team::admitting(&g.allow, principal, &d.roster).is_empty();
    let team = d.shown.gate.team.as_ref();
    let me = principal.as_str().to_string();
    let voted = team.is_some_and(|t| t.approvals.contains(&me) || t.rejections.contains(&me));
    let duties = team.and_then(|t| t.separate_duties.as_ref());
    let own = [
        ("starter", "you started its run"),
        ("creator", "you created it"),
    ]
    .into_iter()
    .find(|(role, _)| duties.is_some_and(|s| s[role].as_str() == Some(me.as_str())))
    .map(|(_, why)| why);
    let utc = |t: Option<&str>| t.map_or_else(|| "-".to_string(), |t| format!("{t} UTC"));
    layout(
        &g.id,
        Some((principal, &user.csrf)),
        html! {
            p { a href=(format!("/runs/{}", enc(run))) { "Run " (visible(run)) } }
            h1 { "Gate " (visible(&g.id)) }
            dl #facts data-events=(format!("/runs/{}/events", enc(run))) data-status=(format!("{}/status", gate_link(g))) {
                dt { "Status" } dd #status { (status_shown(&g.status, d.shown.integrity.state)) }
                dt { "May decide" } dd {
                    (visible(&g.allow.join(", ")))
                    @if g.allow.iter().any(|a| a == "user") {
                        " (user: any person, never an agent)"
                    }
                }
                @if let Some(t) = team {
                    dt { "Approvals" } dd #progress {
                        (visible(&t.progress))
                        @if !t.waiting_for.is_empty() { "; waiting for " (visible(&t.waiting_for.join(", "))) }
                        @if t.veto { "; one rejection rejects it" }
                    }
                    @if let Some(e) = &t.escalation {
                        dt { "Escalation" } dd #escalation {
                            @let to = visible(e["to"].as_str().unwrap_or_default());
                            @if e["escalated"] == true { "escalated to " (to) " at its first deadline" }
                            @else if g.status.is_pending() { "to " (to) " at the deadline, instead of timing out" }
                            @else { "to " (to) ", not reached" }
                        }
                    }
                    @if let Some(at) = &t.next_reminder {
                        dt { "Next reminder" } dd #reminder { (at) " UTC" }
                    }
                    @if let Some(s) = &t.separate_duties {
                        dt { "Separation of duties" } dd {
                            "neither " (visible(s["starter"].as_str().unwrap_or("the run's starter")))
                            " (started the run) nor " (visible(s["creator"].as_str().unwrap_or("unknown")))
                            " (created the gate) may approve"
                        }
                    }
                }
                dt { "On reject" } dd { (visible(g.on_reject.as_deref().unwrap_or("-"))) }
                dt { "Deadline" } dd {
                    (g.timeout_at.as_deref().map_or_else(|| "none".to_string(), |t| format!("{t} UTC")))
                    @if g.status.is_pending() && g.timeout_at.is_some() {
                        " (" span #countdown data-deadline=[g.timeout_at.as_deref()] { (left(d.shown.gate.time_left_seconds)) } " left)"
                    }
                }
                dt { "Created" } dd { (utc(g.created_at.as_deref())) }
                @if let Some(by) = &g.resolved_by {
                    dt { "Decided by" } dd #decided-by {
                        (visible(by)) " at " (utc(g.resolved_at.as_deref()))
                        @if d.shown.integrity.state == "unattested" { " (in its row only: nothing here attests it)" }
                    }
                    dt { "Comment" } dd { (visible(g.resolution_comment.as_deref().unwrap_or("-"))) }
                }
                @if let Some(a) = &d.shown.gate.response {
                    dt { "Answer" } dd { pre #answer-given { (visible(&serde_json::to_string_pretty(a).unwrap_or_default())) } }
                }
                @if let Some(b) = &d.shown.gate.response_binding {
                    dt { "Answer goes to" } dd { "the binding " code { (visible(&b.name)) } }
                }
                @if !d.shown.gate.edits.is_empty() {
                    dt { "Edited" } dd #edited {
                        @for e in &d.shown.gate.edits {
                            (visible(&crate::cmd::gates::edit_line(e["by"].as_str().unwrap_or("?"), e))) br;
                        }
                    }
                }
                dt { "Audit" } dd #audit { (d.shown.integrity.state) (d.shown.integrity.detail.as_deref().map(|x| format!(": {x}")).unwrap_or_default()) }
            }
            @if let Some(why) = &d.shown.stale {
                p.note #stale { "This decision is stale: " (visible(why)) ". It no longer stands; the run opens the gate again." }
            }
            h2 { "Prompt" }
            pre #prompt { (visible(&g.prompt)) }
            p.hash { "SHA-256 of the prompt: " code #prompt-hash { (hash) } }
            @if !d.shown.inputs.is_empty() {
                h2 { "What this decision is about" }
                (grid(&["Binding", "Bytes", "Value (its start)"], &d.shown.inputs, |i| html! {
                    td { (visible(&i.name)) }
                    td { (i.bytes) }
                    td.input { @if i.digest.is_some() { (visible(&i.preview)) } @else { "not bound" } }
                }))
            }
            h2 { "Bindings in scope" }
            @if d.bindings.is_empty() { p { "None." } }
            @for b in &d.bindings {
                (binding_markup(run, b))
            }
            // What a reviewer must read comes first: the decision follows it.
            @if !g.status.is_pending() && d.shown.integrity.state == "unattested" {
                p.note #unattested { "No decision of this gate is attested here: its row's was written outside prose-state (the spec's own SQL, another tool, another machine's key), and the run's VM is told so (gates wait exits 10). It cannot be decided here." }
            } @else if g.status.is_pending() && d.shown.integrity.state == "tampered" {
                // The gate as re-derived from its sealed log disagrees with its row: no form.
                p.note #tampered { "This gate disagrees with its sealed log; it cannot be decided here." }
            } @else if g.status.is_pending() {
                @if !may {
                    p.note { (principal.as_str()) " may not decide this gate." }
                } @else if voted {
                    p.note #voted { "You have already voted on this gate; your vote is counted (" (visible(team.map(|t| t.progress.as_str()).unwrap_or(""))) ")." }
                } @else {
                    @if let Some(why) = own {
                        p.note #own { "You may not approve this gate: " (why) " (separation of duties). You may still reject it." }
                    }
                    (decide::forms(app, user, g, &d.shown.inputs, d.shown.gate.response_schema.as_ref(), &d.editable))
                }
            }
            h2 { "Recent log" }
            (log_table(&d.recent))
            h2 { "History" }
            (grid(&["Event", "Principal", "Comment", "At"], &d.shown.history, |e| html! {
                // An event its own seal does not vouch for is marked, never shown as the gate's.
                td { (visible(&e.row.event_type)) @if let Some(s) = e.sealed { " " strong.tampered { "(" (s.to_uppercase()) ")" } } }
                td { (visible(e.row.principal.as_deref().unwrap_or("-"))) }
                td { (visible(e.row.comment.as_deref().unwrap_or("-"))) }
                td { (utc(e.row.timestamp.as_deref())) }
            }))
        },
    )
}
