//! The pages: the pending gates, the runs, a run, a gate (with its recent log, the bindings
//! visible from it and the decision forms), and a binding's whole value.

use super::app::{blocking, page_run, App};
use super::error::PageError;
use super::layout::{enc, gate_link, layout, left, secured, visible, Page};
use super::signin::SignedIn;
use crate::model::now;
use crate::store::{BindingRow, ExecutionRow, Store};
use anyhow::Result;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup};
use std::sync::Arc;

/// Recent log entries shown on a gate's page.
pub(super) const RECENT: usize = 20;
/// The most records the run page shows (the newest).
const RUN_LOG: usize = 500;
/// A binding's value is shown up to this many bytes; the whole is a link away.
const SHOWN_BYTES: usize = 2048;
/// A value's page shows at most this much of it (`get` reads the rest).
const WHOLE_MOST: u64 = 16 * 1024 * 1024;

fn pending_table(list: &crate::cmd::gates::GateList) -> Markup {
    html! {
        table #pending {
            thead { tr { th { "Run" } th { "Program" } th { "Gate" } th { "Prompt" } th { "May decide" } th { "Time left" } th { "Created" } } }
            tbody {
                @if list.gates.is_empty() {
                    tr { td colspan="7" { "Nothing is waiting." } }
                }
                @for g in &list.gates {
                    tr {
                        td { (visible(g.gate.run_id.as_deref().unwrap_or("-"))) }
                        td { (visible(g.program_path.as_deref().unwrap_or("-"))) }
                        td { a href=(gate_link(&g.gate)) { (visible(&g.gate.id)) } }
                        td { (visible(&crate::output::one_line(&g.gate.prompt, 80))) }
                        td { (visible(&g.gate.allow.join(", "))) }
                        td data-deadline=[g.gate.timeout_at.as_deref()] { (left(g.time_left_seconds)) }
                        td { (g.gate.created_at.as_deref().map_or_else(|| "-".to_string(), |t| format!("{t} UTC"))) }
                    }
                }
            }
        }
        @if !list.warnings.is_empty() {
            ul.warnings { @for w in &list.warnings { li { (visible(w)) } } }
        }
    }
}

async fn pending_list(app: &Arc<App>) -> Result<crate::cmd::gates::GateList> {
    blocking(app, |app| {
        let args = crate::cli::GatesListArgs {
            status: crate::cli::GateFilter::Pending,
            pending: true,
            expiring: None,
            scan: false,
            limit: Some(500),
        };
        crate::cmd::gates::list(&args, &app.ctx)
    })
    .await
}

pub(super) async fn pending_page(
    State(app): State<Arc<App>>,
    user: SignedIn,
) -> Result<Page, PageError> {
    let list = pending_list(&app).await?;
    Ok(Page(layout(
        "Pending gates",
        Some((&user.principal, &user.csrf)),
        html! {
            h1 { "Pending gates" }
            p.note { "Oldest first. This list follows every change as it is committed. It is read from the project's catalog, for finding: a gate's page and its run's page check it against its sealed log." }
            div #live data-src="/pending" data-events="/events" { (pending_table(&list)) }
        },
    )))
}

/// The pending list alone, for the page's script to swap in.
pub(super) async fn pending_rows(
    State(app): State<Arc<App>>,
    _: SignedIn,
) -> Result<Page, PageError> {
    Ok(Page(pending_table(&pending_list(&app).await?)))
}

pub(super) async fn runs_page(
    State(app): State<Arc<App>>,
    user: SignedIn,
) -> Result<Page, PageError> {
    let list = blocking(&app, |app| {
        let args = crate::cli::RunsArgs {
            status: None,
            limit: 200,
            since: None,
            scan: false,
        };
        crate::cmd::runs::run(&args, &app.ctx)
    })
    .await?;
    Ok(Page(layout(
        "Runs",
        Some((&user.principal, &user.csrf)),
        html! {
            h1 { "Runs" }
            (grid(&["Run", "Status", "Program", "Started", "Last event", "Pending gates"], &list.runs, |r| html! {
                td { a href=(format!("/runs/{}", enc(&r.run.id))) { (visible(&r.run.id)) } }
                td { (r.run.status.as_ref().map_or("-", |s| s.as_str())) }
                td { (visible(r.run.program_path.as_deref().unwrap_or("-"))) }
                td { (r.run.started_at.as_deref().unwrap_or("-")) }
                td { (r.last_event_at.as_deref().unwrap_or("-")) }
                td { (r.pending_gates) }
            }))
            @if !list.warnings.is_empty() {
                ul.warnings { @for w in &list.warnings { li { (visible(w)) } } }
            }
        },
    )))
}

/// A table with a header of `heads`, and a row of `cells` for each of `items`.
pub(super) fn grid<T>(heads: &[&str], items: &[T], cells: impl Fn(&T) -> Markup) -> Markup {
    html! {
        table {
            thead { tr { @for h in heads { th { (h) } } } }
            tbody { @for i in items { tr { (cells(i)) } } }
        }
    }
}

pub(super) fn log_table(rows: &[ExecutionRow]) -> Markup {
    grid(&["#", "Statement", "Status", "At", "Parent"], rows, |e| {
        html! {
            td { (e.id) }
            td { (visible(&crate::output::one_line(e.statement_text.as_deref().unwrap_or("-"), 100))) }
            td { (e.status.as_ref().map_or("-".to_string(), |s| s.to_string())) }
            td { (e.at().unwrap_or("-")) }
            td { (e.parent_id.map_or("-".to_string(), |p| p.to_string())) }
        }
    })
}

/// The newest `n` records of the run's log, in order.
pub(super) fn newest(store: &mut dyn Store, n: usize) -> Result<Vec<ExecutionRow>> {
    let mut log = store.executions_matching(&crate::store::ExecQuery {
        newest_first: true,
        limit: Some(n as i64),
        ..Default::default()
    })?;
    log.reverse();
    Ok(log)
}

pub(super) async fn run_page(
    State(app): State<Arc<App>>,
    Path(run): Path<String>,
    user: SignedIn,
) -> Result<Page, PageError> {
    let (info, log, gates) = blocking(&app, move |app| {
        let (paths, mut store) = page_run(&app.ctx, &run)?;
        let info = store.run_info()?;
        // One more than shown, to know whether any were left out.
        let log = newest(store.as_mut(), RUN_LOG + 1)?;
        // Each gate as its run's sealed log has it: the rows first, then the run checked as
        // `gates verify` checks it, so that a row rewritten behind prose-state's back is
        // caught by the check.
        let gates = store.gates(None, &now())?;
        let (report, _) = crate::services::inputs::verify_run(store.as_mut(), &paths.dir, None)?;
        let mut gates: Vec<_> = gates
            .into_iter()
            .map(|g| crate::store::gate_read::listed(g, &report))
            .collect();
        // A gate its sealed log opened whose row is gone: shown from its log, marked.
        for (id, d) in &report.derived {
            if d.instance > 0 && !gates.iter().any(|g| g.row.id == *id) {
                let row = crate::store::gate_read::gone_row(id, d);
                gates.push(crate::store::gate_read::listed(row, &report));
            }
        }
        Ok((info, log, gates))
    })
    .await?;
    Ok(Page(layout(
        &info.id,
        Some((&user.principal, &user.csrf)),
        html! {
            h1 { "Run " (visible(&info.id)) }
            dl {
                dt { "Status" } dd { (info.status.as_ref().map_or("-", |s| s.as_str())) }
                dt { "Program" } dd { (visible(info.program_path.as_deref().unwrap_or("-"))) }
                dt { "Started" } dd { (info.started_at.as_deref().unwrap_or("-")) }
                dt { "Updated" } dd { (info.updated_at.as_deref().unwrap_or("-")) }
            }
            h2 { "Gates" }
            (grid(&["Gate", "Status", "Decided by", "Audit", "Prompt"], &gates, |g| {
                let (status, by) = g.decision();
                // A decision nothing here attests is marked where it is stated, not only in
                // the Audit column.
                let state = g.integrity.state();
                let only_row = state == "unattested" && by.is_some();
                html! {
                    td { a href=(gate_link(&g.row)) { (visible(&g.row.id)) } }
                    td { (super::layout::status_shown(&status, state)) }
                    td { (visible(by.unwrap_or("-"))) @if only_row { " (in its row only)" } }
                    td { (integrity_cell(&g.integrity, g.derived.instance > 0)) }
                    td { (visible(&crate::output::one_line(&g.row.prompt, 80))) }
                }
            }))
            h2 { "Execution log" }
            @if log.len() > RUN_LOG {
                p { "The newest " (RUN_LOG) " records; the whole log: "
                    code { "prose-state log --run " (visible(&info.id)) } }
            }
            (log_table(&log[log.len().saturating_sub(RUN_LOG)..]))
        },
    )))
}

/// Where a gate stands against its sealed log, in a listing's cell: what is not attested
/// says why.
fn integrity_cell(i: &crate::store::chain::Integrity, sealed: bool) -> Markup {
    use crate::store::chain::Integrity;
    match i {
        Integrity::Attested if sealed => html! { "attested" },
        Integrity::Attested => {
            html! { strong { "unsealed" } ": no sealed event opened it; nothing vouches for it" }
        }
        Integrity::Unattested(why) => html! { strong { "unattested" } ": " (visible(why)) },
        Integrity::Tampered(why) => html! { strong.tampered { "TAMPERED" } ": " (visible(why)) },
    }
}

pub(super) fn binding_markup(run: &str, b: &BindingRow) -> Markup {
    let scope = b.execution_id.map_or("root".to_string(), |e| e.to_string());
    let link = format!("/runs/{}/bindings/{}/{}", enc(run), scope, enc(&b.name));
    html! {
        section.binding {
            h3 { (visible(&b.name)) " " small { "(" (b.kind.as_deref().unwrap_or("let")) ", scope " (scope) ")" } }
            @match (&b.value, &b.attachment_path) {
                (_, Some(path)) => p { "In an attachment: " code { (visible(path)) } " · " a href=(link) { "the whole value" } },
                (Some(v), None) => {
                    @let text = String::from_utf8_lossy(v);
                    @if v.len() > SHOWN_BYTES {
                        @let cut = text.char_indices().take_while(|(i, _)| *i < SHOWN_BYTES).last().map_or(0, |(i, c)| i + c.len_utf8());
                        pre { (visible(&text[..cut])) }
                        p.note { "Truncated at " (SHOWN_BYTES) " of " (v.len()) " bytes · " a href=(link) { "the whole value" } }
                    } @else {
                        pre { (visible(&text)) }
                    }
                },
                (None, None) => p { "(no value)" },
            }
        }
    }
}

/// A binding's whole value, as plain text that a browser never runs or renders, its hidden
/// characters escaped as on every page (`\u{202e}`): a browser would otherwise lay a bidi
/// override out, and show the person other text than the one stored. Its exact bytes are
/// `prose-state get`'s.
pub(super) async fn binding_value(
    State(app): State<Arc<App>>,
    Path((run, execution, name)): Path<(String, String, String)>,
    _: SignedIn,
) -> Result<Response, PageError> {
    let execution = (execution != "root").then(|| execution.parse::<i64>());
    let execution = execution
        .transpose()
        .map_err(|_| PageError::new(StatusCode::NOT_FOUND, "no such scope"))?;
    let value = blocking(&app, move |app| {
        let (paths, mut store) = page_run(&app.ctx, &run)?;
        // The binding at exactly that scope: its own scope is the nearest to it.
        if !store
            .bindings()?
            .iter()
            .any(|b| b.name == name && b.execution_id == execution)
        {
            return Err(crate::error::not_found("no such binding"));
        }
        let args = crate::cli::GetArgs {
            name,
            execution_id: execution,
            explain: false,
            offset: Some(0),
            length: Some(WHOLE_MOST),
            version: None,
            as_of: None,
        };
        let got = crate::cmd::get::run(&args, &paths, store.as_mut())?;
        let value = got.row.value.unwrap_or_default();
        Ok(visible(&String::from_utf8_lossy(&value)))
    })
    .await?;
    let mut r =
        secured(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], value).into_response());
    r.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox; default-src 'none'"),
    );
    Ok(r)
}

/// A run's changes, as server-sent events: `change` each time a commit to the run may have
/// changed what its pages show (woken by the commit: `store::wake`), `ping` at least every
/// 25 seconds. The gate page's script looks again at each `change`. An event stream is
/// long-lived by design: it gives its place under the connection cap back, and counts under a
/// bound of its own instead (`EVENT_STREAMS`); past it, 503, and the page polls.
pub(super) async fn run_events(
    State(app): State<Arc<App>>,
    Path(run): Path<String>,
    user: SignedIn,
    axum::Extension(slot): axum::Extension<super::listen::Slot>,
) -> Result<Response, PageError> {
    let Ok(permit) = app.events.clone().try_acquire_owned() else {
        return Err(PageError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many event streams: this page refreshes by polling",
        ));
    };
    // The run first, as every page names it: one not of this project learns nothing.
    let changes = blocking(&app, move |app| {
        let (_, store) = page_run(&app.ctx, &run)?;
        Ok(store.changes())
    })
    .await?;
    event_stream(&app, user.session, changes, permit, slot)
}

/// Changes to any run of the project, as server-sent events (the pending list's): on a
/// server, every run's commits; on SQLite, the project catalog's, which each run's commit of
/// its gates updates (a raw write to a run's gates reaches the list at the next look).
pub(super) async fn pending_events(
    State(app): State<Arc<App>>,
    user: SignedIn,
    axum::Extension(slot): axum::Extension<super::listen::Slot>,
) -> Result<Response, PageError> {
    let Ok(permit) = app.events.clone().try_acquire_owned() else {
        return Err(PageError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many event streams: this page refreshes by polling",
        ));
    };
    let changes = blocking(&app, move |app| {
        Ok(if app.ctx.uses_postgres() {
            let url = app.ctx.postgres_url()?;
            crate::store::wake::listen_all(&url, || crate::store::postgres::listening_client(&url))
        } else {
            let prose = app.ctx.runs_dir().parent().unwrap_or(app.ctx.runs_dir());
            crate::store::wake::watch_catalog(prose)
        })
    })
    .await?;
    event_stream(&app, user.session, changes, permit, slot)
}

/// An event stream's `ping`, at least this often (the page's safety net for a change not heard).
const PING: std::time::Duration = std::time::Duration::from_secs(25);
/// How often an event stream looks whether its client is gone.
const STREAM_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// An event stream of `changes` (see `run_events`) for `session`, holding `permit` while it
/// lasts (given back within `STREAM_CHECK` of its client closing it) and giving `slot` back.
/// It lasts no longer than the session: each event is sent only if the session is still
/// signed in (not signed out, idle or its token revoked or replaced); otherwise the stream ends.
fn event_stream(
    app: &Arc<App>,
    session: String,
    changes: Box<dyn crate::store::wake::Changes>,
    permit: tokio::sync::OwnedSemaphorePermit,
    slot: super::listen::Slot,
) -> Result<Response, PageError> {
    use axum::response::sse::{Event, Sse};
    slot.release();
    let (tx, rx) = tokio::sync::mpsc::channel::<&'static str>(1);
    std::thread::Builder::new()
        .name("prose-events".into())
        .spawn(move || {
            let _permit = permit;
            let mut changes = changes;
            let mut sent = std::time::Instant::now();
            loop {
                // Waited in slices of a second: a stream its client closed gives its place
                // under the bound back within one, not at its next ping.
                let woke = changes.wait(STREAM_CHECK);
                if tx.is_closed() {
                    return;
                }
                let event = match (woke, sent.elapsed() >= PING) {
                    (true, _) => "change",
                    (false, true) => "ping",
                    (false, false) => continue,
                };
                sent = std::time::Instant::now();
                // A full channel: the client has a change to read already.
                match tx.try_send(event) {
                    Ok(()) | Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {}
                    Err(_) => return,
                }
            }
        })
        .map_err(|e| anyhow::anyhow!("could not start an event stream: {e}"))?;
    let state = (rx, Arc::clone(app), session);
    let stream = futures_util::stream::unfold(state, |(mut rx, app, session)| async move {
        let event = rx.recv().await?;
        super::signin::still_signed_in(&app, &session).await.ok()?;
        Some((
            Ok::<_, std::convert::Infallible>(Event::default().event(event).data(event)),
            (rx, app, session),
        ))
    });
    Ok(Sse::new(stream).into_response())
}

/// What may change on a gate's page while it is open, read without writing anything (a view
/// is not logged: this is what the page's script asks at each `change` event): the status, who
/// decided, whether the decision is stale, and how the gate stands against its sealed log.
/// Plain text lines `status` (as the page shows it, marked), `decided_by`, `stale`,
/// `integrity` (`attested`, `unsealed`, `unattested` or `tampered`).
pub(super) async fn gate_status(
    State(app): State<Arc<App>>,
    Path((run, gate)): Path<(String, String)>,
    _: SignedIn,
) -> Result<Response, PageError> {
    let text = blocking(&app, move |app| {
        let (paths, mut store) = page_run(&app.ctx, &run)?;
        crate::model::check_gate_id(&gate)?;
        let Some(g) = crate::store::gate_read::read(store.as_mut(), &gate, &now())? else {
            return Err(crate::error::not_found("no such gate"));
        };
        let (stale, _) = crate::services::inputs::stale(store.as_mut(), &paths.dir, &g.derived)?;
        // The run checked as the gate's page checks it (`gates verify`: its log, its earlier
        // openings' rows, the bindings its openings name), and the gate shown as its sealed
        // log has it where its row contradicts it.
        let (report, _) = crate::services::inputs::verify_run(store.as_mut(), &paths.dir, None)?;
        let integrity = crate::cmd::gates::IntegrityView::of(&report, &gate).state;
        let row = crate::store::gate_read::shown_in(g.row, &report);
        Ok(format!(
            "status {}\ndecided_by {}\nstale {}\nintegrity {integrity}\n",
            super::layout::status_shown(&row.status, integrity),
            row.resolved_by.as_deref().map(visible).unwrap_or_default(),
            stale.as_deref().map(visible).unwrap_or_default()
        ))
    })
    .await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        )],
        text,
    )
        .into_response())
}
