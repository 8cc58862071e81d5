//! `gates_wait` as a plain tool call (a client that runs it as no task): bounded, with
//! progress notifications while it waits and, on a session that has them, the approval page
//! offered through `elicitation/create`.
//!
//! **Progress.** A call whose request carries a `progressToken` is sent
//! `notifications/progress` at once and then every [`PROGRESS_EVERY`] while the wait goes on,
//! its `progress` the seconds waited and its `message` the gates still pending. A host that
//! extends its request timeout on progress (the TypeScript SDK's `resetTimeoutOnProgress`)
//! thereby waits as long as the call does; one that does not is still answered within the
//! default bound (45 s, under the common 60-second client timeout).
//!
//! **The page.** On a session negotiated with an `initialize` handshake (revisions up to
//! 2025-11-25), a client that declares URL-mode elicitation is sent `elicitation/create` (mode
//! `url`) once per pending gate and call, naming the gate's page on the approval page
//! (`PROSE_SERVE_URL`). As in a task, the answer decides nothing: only a decision committed by
//! the page or the command line ends the wait. A 2026-07-28 session meets the page as a task's
//! input request instead (see [`super::tasks`]).

use super::{result, Server};
use crate::context::Stop;
use crate::error::shown;
use futures_util::future::{select, Either};
use rmcp::model::{
    CallToolResult, ElicitRequest, ElicitRequestParams, JsonObject, ProgressNotificationParam,
    ProgressToken, ProtocolVersion, ServerRequest,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The `_meta` key that relates a message to a task.
pub(super) const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// The session's revision: the one its `initialize` handshake agreed on, whatever a request's
/// `_meta` says; without a handshake (a 2026-07-28 client), the request's own.
pub(super) fn revision(
    server: &Server,
    context: &RequestContext<RoleServer>,
) -> Option<rmcp::model::ProtocolVersion> {
    match server.negotiated.get() {
        Some(agreed) => Some(agreed.clone()),
        None => context.protocol_version(),
    }
}

/// What the person asked to open a gate's page reads.
pub(super) fn page_message(run: &str, gate: &str) -> String {
    format!(
        "Gate {} of run {} is waiting for a person's decision. Open the approval page to read \
         it and decide it there, signed in. Answering here decides nothing.",
        shown(gate),
        shown(run)
    )
}

/// "gate \"a\"" or "gates \"a\", \"b\"", each id as errors show it.
pub(super) fn gates_named(gates: &[String]) -> String {
    let ids: Vec<String> = gates.iter().map(|g| shown(g)).collect();
    match ids.as_slice() {
        [] => "the gate".to_string(),
        [one] => format!("gate {one}"),
        _ => format!("gates {}", ids.join(", ")),
    }
}

/// Aborts a spawned future when dropped: the asking ends with the task, however it ends.
pub(super) struct Aborting(pub(super) tokio::task::JoinHandle<()>);

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The run and the gates a wait still waits for, after its last look.
pub(super) type Pending = Option<(String, Vec<String>)>;

/// What a wait's look found: the run, and the gates it still waits for.
pub(super) fn looked_at(run: &str, gates: &[&str]) -> Pending {
    Some((
        run.to_string(),
        gates.iter().map(|g| g.to_string()).collect(),
    ))
}

/// Tells the watchers of a wait what its look found, if that changed.
pub(super) fn tell(looked: &watch::Sender<Pending>, now: Pending) {
    looked.send_if_modified(|seen| {
        let changed = *seen != now;
        *seen = now;
        changed
    });
}

/// How often a waiting call with a progress token is sent progress (and once at once): well
/// under the 60 seconds after which a common client gives up on a request that shows none.
pub(super) const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// [`PROGRESS_EVERY`], which a test build may shorten (`PROSE_STATE_TEST_PROGRESS_MS`); a
/// release build takes no interval from outside.
fn progress_every() -> Duration {
    #[cfg(debug_assertions)]
    if let Some(ms) = std::env::var("PROSE_STATE_TEST_PROGRESS_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
    {
        return Duration::from_millis(ms);
    }
    PROGRESS_EVERY
}

/// Each wait of a session, plain or a task, holds open files while it sleeps (about four:
/// its connection and what wakes it): a session runs at most as many at once as its limit on
/// open files leaves room for, after [`FILES_KEPT`] for everything else. Past it, a wait is
/// refused as busy (nothing written: retry when one ended), never let fail every other call
/// for want of a file.
pub(super) const FILES_A_WAIT: usize = 5;

/// The open files kept for everything but the waits: the run's connection, the catalog,
/// stdio, a bind's file.
pub(super) const FILES_KEPT: usize = 64;

/// How many waits the session may run at once: the process's limit on open files is raised
/// to its hard limit (at most 65,536) first, as servers do, so the common soft limit of 1,024
/// does not decide it.
pub(super) fn most_waits() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given, which lives for the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 16;
    }
    let wanted = limit.rlim_max.min(65_536);
    if limit.rlim_cur < wanted {
        let raised = libc::rlimit {
            rlim_cur: wanted,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads the struct it is given, which lives for the call.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit.rlim_cur = wanted;
        }
    }
    let files = usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX);
    (files.saturating_sub(FILES_KEPT) / FILES_A_WAIT).clamp(1, super::MOST_CALLS_AT_ONCE)
}

/// One of the session's waits, given back when dropped.
pub(super) struct WaitSlot(Arc<Server>);

impl WaitSlot {
    /// A wait's room, or the busy refusal naming the limit.
    pub(super) fn take(server: &Arc<Server>) -> anyhow::Result<WaitSlot> {
        use std::sync::atomic::Ordering;
        let before = server.waits.fetch_add(1, Ordering::AcqRel);
        if before >= server.most_waits {
            server.waits.fetch_sub(1, Ordering::AcqRel);
            return Err(crate::error::busy(format!(
                "this session already runs {before} wait{}, as many as its limit on open files \
                 allows: wait for several gates in one call (`gates` with `all` or `any`), or \
                 retry when a wait has ended",
                if before == 1 { "" } else { "s" }
            )));
        }
        Ok(WaitSlot(Arc::clone(server)))
    }
}

impl Drop for WaitSlot {
    fn drop(&mut self) {
        self.0
            .waits
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Runs `gates_wait` (the tool `index`) as a plain call: the command's wait on the blocking
/// pool, with progress and the page offered meanwhile; stopped, writing nothing more, when
/// the client cancels the request.
pub(super) async fn plain(
    server: Arc<Server>,
    index: usize,
    args: JsonObject,
    context: RequestContext<RoleServer>,
) -> CallToolResult {
    // A call refused as usage holds no room.
    if let Err(e) = server.parsed(&server.tools[index], &args, true) {
        return result(Err(e));
    }
    let _slot = match WaitSlot::take(&server) {
        Ok(slot) => slot,
        Err(e) => return result(Err(e)),
    };
    let token = context.meta.get_progress_token();
    let handshake = revision(&server, &context).is_none_or(|v| v < ProtocolVersion::V_2026_07_28);
    let url_mode = handshake
        && context
            .client_capabilities()
            .and_then(|c| c.elicitation)
            .is_some_and(|e| e.url.is_some());
    let (looked, pending) = watch::channel::<Pending>(None);
    let stop = Arc::new(Stop::new(move |run, gates| {
        tell(&looked, looked_at(run, gates))
    }));
    let peer = context.peer.clone();
    let _progress = token.map(|t| {
        Aborting(tokio::spawn(progress(
            peer.clone(),
            t,
            pending.clone(),
            progress_every(),
        )))
    });
    let _asking =
        url_mode.then(|| Aborting(tokio::spawn(ask_to_open(peer.clone(), pending, None))));
    let waiting = {
        let stop = Arc::clone(&stop);
        tokio::task::spawn_blocking(move || {
            result(server.call_with(&server.tools[index], &args, true, Some(stop)))
        })
    };
    match select(waiting, Box::pin(context.ct.cancelled())).await {
        Either::Left((Ok(answer), _)) => answer,
        Either::Left((Err(e), _)) => result(Err(anyhow::anyhow!("gates_wait failed: {e}"))),
        // Cancelled: nothing more is written, and no answer is sent for a cancelled request.
        Either::Right(((), waiting)) => {
            let stopping = Arc::clone(&stop);
            let _ = tokio::task::spawn_blocking(move || stopping.stop()).await;
            drop(waiting);
            result(Err(crate::error::usage("the request was cancelled")))
        }
    }
}

/// Sends progress at once and then every `every` until dropped: the seconds waited, and the
/// gates the wait found pending at its last look.
async fn progress(
    peer: Peer<RoleServer>,
    token: ProgressToken,
    pending: watch::Receiver<Pending>,
    every: Duration,
) {
    let start = Instant::now();
    loop {
        let message = match pending.borrow().clone() {
            Some((run, gates)) => format!(
                "waiting for {} of run {} to be decided",
                gates_named(&gates),
                shown(&run)
            ),
            None => "waiting for the gate to be decided".to_string(),
        };
        let waited = start.elapsed().as_millis() as f64 / 1000.0;
        let note = ProgressNotificationParam::new(token.clone(), waited).with_message(message);
        if peer.notify_progress(note).await.is_err() {
            return;
        }
        tokio::time::sleep(every).await;
    }
}

/// Asks the client, once per gate this call (or the 2025-11-25 task `task`) finds pending, to
/// open the gate's page (none without `PROSE_SERVE_URL`). The answer decides nothing.
pub(super) async fn ask_to_open(
    peer: Peer<RoleServer>,
    mut pending: watch::Receiver<Pending>,
    task: Option<String>,
) {
    let mut asked = HashSet::new();
    let mut asking = tokio::task::JoinSet::new();
    while pending.changed().await.is_ok() {
        let Some((run, gates)) = pending.borrow_and_update().clone() else {
            continue;
        };
        for gate in gates {
            if !asked.insert(gate.clone()) {
                continue;
            }
            let Some(url) = crate::services::notify::gate_page(&run, &gate) else {
                continue;
            };
            let peer = peer.clone();
            let message = page_message(&run, &gate);
            let run = run.clone();
            // A task's request says which task it is for (`io.modelcontextprotocol/related-task`).
            let meta = task.as_ref().map(|id| {
                let mut m = JsonObject::new();
                m.insert(
                    RELATED_TASK.to_string(),
                    serde_json::json!({ "taskId": id }),
                );
                rmcp::model::RequestMetaObject(rmcp::model::MetaObject(m))
            });
            asking.spawn(async move {
                let request = ElicitRequest::new(ElicitRequestParams::UrlElicitationParams {
                    meta,
                    message,
                    url,
                    elicitation_id: format!("page:{run}:{gate}"),
                });
                let _ = peer
                    .send_request(ServerRequest::ElicitRequest(request))
                    .await;
            });
        }
    }
}
