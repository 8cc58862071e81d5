//! Gates as MCP tasks (the tasks extension, `io.modelcontextprotocol/tasks`, of protocol
//! revision 2026-07-28, as rmcp's task manager implements it).
//!
//! A client that declares the tasks extension gets `gates_wait` as a task: the call answers at
//! once with a task, and the wait runs in the background, exactly the wait the tool runs (the
//! same argv, command and result; woken by the commit), except that it is not bounded by the
//! tool's 60-second default and 10-minute cap: without `timeout` it waits until the gate
//! settles (decided, or timed out by its own deadline; escalation runs as for any wait). The
//! task completes with the tool's result, `require_signed` and exit class included.
//!
//! While a gate is pending, a client that declared URL-mode elicitation is asked, once per gate
//! and task, to open the gate's page on the approval page (`PROSE_SERVE_URL`): the task is
//! `input_required` until the client answers. Whatever it answers (accept, decline, cancel, or
//! any content) decides nothing and is not asked again: the task goes on waiting, and only a
//! decision committed by the page or the command line ends it. Without `PROSE_SERVE_URL`, or
//! for a client without URL elicitation, the task stays `working`.
//!
//! How soon the host learns the decision: the wait is woken by the commit, but the task's new
//! status is not pushed. The extension sends `notifications/tasks` only on a
//! `subscriptions/listen` stream whose filter names the task (`taskIds`), and rmcp 3.11 can do
//! neither: its `SubscriptionFilter` has no `taskIds` (the request's are dropped when it is
//! read, so the acknowledgment cannot list them) and its subscription sink refuses
//! `notifications/tasks`. A host learns the decision at its next `tasks/get`, at the
//! `pollIntervalMs` the task suggests: [`POLL_INTERVAL_MS`], 1000 ms, chosen so: a `tasks/get`
//! is answered from memory (no database query), but each is a request, and 1,000 waiting tasks
//! polled every 50 ms would be 20,000 requests a second (every 1000 ms: 1,000); a person's
//! decision takes seconds to days, so a second more is little, and a host that needs it at once
//! subscribes to the gate's resource (`prose://runs/{run}/gates/{gate}`) and calls `tasks/get`
//! on the update. For that `tasks/get` to find the task complete, a resource update of a run
//! waits first ([`Tasks::settle`], at most [`SETTLE_LIMIT`]) for the session's tasks the change
//! ends: a wait that has not looked yet, or that waits for a gate now decided.
//!
//! `tasks/cancel` stops the wait: the task is `cancelled` and the wait writes nothing more (a
//! write it had begun, a decision about inputs recorded as consumed, is finished first, and a
//! wait that thereby had its answer completes the task with it instead). The stopped wait's
//! blocking thread ends at its next look: the next commit to the run, or the safety net.

use super::wait::{gates_named, looked_at, page_message, revision, tell, Aborting, Pending};
use super::{result, text, Outcome, Server, ToolSpec, SEVERAL};
use crate::context::Stop;
use crate::error::shown;
use futures_util::future::{select, Either};
use rmcp::model::{
    CallToolResponse, CallToolResult, CreateTaskResult, ElicitRequest, ElicitRequestParams,
    GetTaskResult, InputRequest, InputResponses, JsonObject,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::task_manager::{TaskContext, TaskExit, TaskManager, TaskOptions};
use rmcp::ErrorData;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The `pollIntervalMs` a gate task suggests: how often a host following the hint asks
/// `tasks/get`, so the longest a plain host learns a decision after the task has it. See the
/// module's documentation for why 1000 ms.
pub(super) const POLL_INTERVAL_MS: u64 = 1_000;

/// How long a resource update waits for the gate tasks it concerns to complete first (see
/// [`Tasks::settle`]): past it, the update goes out anyway.
pub(super) const SETTLE_LIMIT: Duration = Duration::from_secs(2);

/// The session's tasks, and the gates each running one still waits for.
#[derive(Default)]
pub(super) struct Tasks {
    manager: TaskManager,
    /// Task id: the run and the gates its wait found pending at its last look (None until its
    /// first look).
    waiting: Mutex<HashMap<String, Waiting>>,
    /// Every task's id, in the order they were started (for `tasks/list`, revision 2025-11-25).
    started: Mutex<Vec<String>>,
}

type Waiting = Option<(String, Vec<String>)>;

impl Tasks {
    pub(super) fn get(&self, id: &str) -> Result<GetTaskResult, ErrorData> {
        Ok(GetTaskResult::new(self.detailed(id)?))
    }

    /// The task's state and, once it ended, its outcome; an unknown id is named as errors
    /// show a value (quoted, escaped, cut short).
    pub(super) fn detailed(&self, id: &str) -> Result<rmcp::model::DetailedTask, ErrorData> {
        self.manager.get_task(id).map_err(|_| unknown(id))
    }

    fn started(&self, id: &str) {
        self.started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(id.to_string());
    }

    /// The ids of the session's tasks, oldest first.
    pub(super) fn ids(&self) -> Vec<String> {
        self.started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The client's answers to the task's input requests: handed to the request, which reads
    /// nothing in them.
    pub(super) fn update(&self, id: &str, answers: InputResponses) -> Result<(), ErrorData> {
        self.detailed(id)?;
        self.manager.update_task(id, answers)
    }

    pub(super) fn cancel(&self, id: &str) -> Result<(), ErrorData> {
        self.detailed(id)?;
        self.manager.cancel_task(id)
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiting>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the task has ended (or is gone): its `tasks/get` gives its final state.
    fn ended(&self, id: &str) -> bool {
        self.manager
            .get_task(id)
            .map_or(true, |t| t.status().is_terminal())
    }

    /// Waits (on the calling thread, at most `limit`) until no running task may be about to
    /// end on a change of `run` the caller has read: each task whose wait has not looked yet
    /// has looked, and each task waiting on `run` for a gate `decided` says is decided has
    /// ended (its `tasks/get` gives the decision) or looked again and no longer waits for it
    /// (a `--all` wait on other gates). Called before a resource update of `run` is sent, so
    /// that a host that calls `tasks/get` on the update finds the task complete. `decided`
    /// reads the store; it is asked once a gate.
    pub(super) fn settle(&self, run: &str, decided: impl Fn(&str) -> bool, limit: Duration) {
        let until = Instant::now() + limit;
        let mut known: HashMap<String, bool> = HashMap::new();
        loop {
            let now: Vec<(String, Waiting)> = {
                let mut waiting = self.waiting();
                waiting.retain(|id, _| !self.ended(id));
                waiting
                    .iter()
                    .filter(|(_, w)| w.as_ref().is_none_or(|(r, _)| r == run))
                    .map(|(id, w)| (id.clone(), w.clone()))
                    .collect()
            };
            let mut left = false;
            for (_, w) in &now {
                let Some((_, gates)) = w else {
                    left = true;
                    continue;
                };
                for gate in gates {
                    let done = *known.entry(gate.clone()).or_insert_with(|| decided(gate));
                    left |= done;
                }
            }
            if !left || Instant::now() >= until {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Whether a call runs as a task: `gates_wait`, from a client that declared the extension.
/// Only on a session of revision 2026-07-28 or later, the extension's: an older session's
/// client gets no task of this shape, whatever it declares.
pub(super) fn wanted(
    server: &Server,
    spec: &ToolSpec,
    context: &RequestContext<RoleServer>,
) -> bool {
    spec.served.name == "gates_wait"
        && revision(server, context)
            .is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2026_07_28)
        && context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks())
}

/// The extension's methods exist on its revision's sessions alone.
pub(super) fn extension_only(
    server: &Server,
    context: &RequestContext<RoleServer>,
    method: &str,
) -> Result<(), ErrorData> {
    if revision(server, context).is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2026_07_28) {
        return Ok(());
    }
    Err(ErrorData::new(
        rmcp::model::ErrorCode::METHOD_NOT_FOUND,
        format!("no such method on this session's revision: {method}"),
        None,
    ))
}

/// Starts `gates_wait` as a task; a call the tool would refuse is answered at once, as the tool
/// answers it.
pub(super) fn start(
    server: Arc<Server>,
    index: usize,
    args: JsonObject,
    context: &RequestContext<RoleServer>,
) -> CallToolResponse {
    if let Err(e) = server.argv(&server.tools[index], &args, false) {
        return result(Err(e)).into();
    }
    let asking = if context
        .client_capabilities()
        .and_then(|c| c.elicitation)
        .is_some_and(|e| e.url.is_some())
    {
        Asking::Input
    } else {
        Asking::No
    };
    CallToolResponse::Task(CreateTaskResult::new(spawn(server, index, args, asking)))
}

/// How a task offers the person the gate's page while it waits.
pub(super) enum Asking {
    /// Not at all: the client takes no URL elicitation.
    No,
    /// As the task's input request (the 2026-07-28 extension): the task is `input_required`
    /// until the client answers.
    Input,
    /// As `elicitation/create` sent to the client, related to the task (revision 2025-11-25):
    /// the task stays `working`, since the wait does not need the answer.
    Elicit(rmcp::service::Peer<RoleServer>),
}

/// Spawns the wait of `gates_wait` (the tool `index`) as a task of the session, and gives its
/// first state.
pub(super) fn spawn(
    server: Arc<Server>,
    index: usize,
    args: JsonObject,
    asking: Asking,
) -> rmcp::model::Task {
    let named: Vec<String> = match (args.get("gate"), args.get(SEVERAL)) {
        (Some(gate), _) => text(gate, "gate").into_iter().collect(),
        (None, Some(Value::Array(gates))) => {
            gates.iter().filter_map(|g| text(g, SEVERAL).ok()).collect()
        }
        _ => Vec::new(),
    };
    let options = TaskOptions::new()
        // A person may take days; the gate's own deadline, not the task's, ends the wait.
        .with_ttl_ms(None)
        .with_poll_interval_ms(POLL_INTERVAL_MS)
        .with_status_message(format!("waiting for {} to be decided", gates_named(&named)));
    let waiter = Arc::clone(&server);
    // A call refused as usage holds no room: the task ends with the refusal.
    let slot = server
        .parsed(&server.tools[index], &args, false)
        .and_then(|_| super::wait::WaitSlot::take(&server));
    let task = server.tasks.manager.spawn(options, move |ctx| {
        Box::pin(async move {
            match slot {
                // The task ends with the refusal, as a call the tool refuses does.
                Err(e) => {
                    let refused = result(Err(e));
                    say_ended(&ctx, &refused);
                    Ok(refused)
                }
                Ok(_slot) => run(waiter, index, args, asking, ctx).await,
            }
        })
    });
    // Not looked yet (its first look may have come first: then it stays as that look left it).
    server
        .tasks
        .waiting()
        .entry(task.task_id.clone())
        .or_insert(None);
    server.tasks.started(&task.task_id);
    task
}

/// The error for a task id the session does not have.
fn unknown(id: &str) -> ErrorData {
    ErrorData::invalid_params(format!("unknown task: {}", shown(id)), None)
}

/// The task: the tool's wait on the blocking pool, stoppable by `tasks/cancel`; the person
/// asked to open the page meanwhile, when the client takes URL elicitation (`url_mode`).
async fn run(
    server: Arc<Server>,
    index: usize,
    args: JsonObject,
    asking: Asking,
    ctx: TaskContext,
) -> Result<CallToolResult, TaskExit> {
    let (looked, pending) = watch::channel::<Pending>(None);
    let id = ctx.task_id().to_string();
    let registry = Arc::clone(&server);
    let stop = Arc::new(Stop::new(move |run, gates| {
        let now = looked_at(run, gates);
        registry.tasks.waiting().insert(id.clone(), now.clone());
        tell(&looked, now);
    }));
    let _asking = match asking {
        Asking::No => None,
        Asking::Input => Some(Aborting(tokio::spawn(ask_to_open(ctx.clone(), pending)))),
        Asking::Elicit(peer) => Some(Aborting(tokio::spawn(super::wait::ask_to_open(
            peer,
            pending,
            Some(ctx.task_id().to_string()),
        )))),
    };
    let waiting = {
        let stop = Arc::clone(&stop);
        tokio::task::spawn_blocking(move || {
            server.call_with(&server.tools[index], &args, false, Some(stop))
        })
    };
    match select(waiting, Box::pin(ctx.cancelled())).await {
        Either::Left((outcome, _)) => {
            let answer = answer(outcome);
            // The task's status says it ended, and how, no longer what it waited for.
            if let Ok(r) = &answer {
                say_ended(&ctx, r);
            }
            answer
        }
        Either::Right(((), waiting)) => {
            // Stopped: once `stop` returns the wait writes nothing (a write under way ends first).
            let stopping = Arc::clone(&stop);
            let wrote = tokio::task::spawn_blocking(move || stopping.stop())
                .await
                .unwrap_or(false);
            // A wait that had its answer before it was stopped gives it: one that settled a
            // look (and may have recorded a decision as consumed) is given a moment to return.
            let grace = if wrote {
                std::time::Duration::from_secs(2)
            } else {
                std::time::Duration::ZERO
            };
            if let Ok(Ok(Ok(outcome))) = tokio::time::timeout(grace, waiting).await {
                return Ok(result(Ok(outcome)));
            }
            ctx.set_status_message("cancelled: the wait stopped, and decided nothing");
            Err(TaskExit::Cancelled)
        }
    }
}

/// The task's status message once it has its result: how it ended (`ended: CLASS`).
fn say_ended(ctx: &TaskContext, r: &CallToolResult) {
    let class = r
        .meta
        .as_ref()
        .and_then(|m| m.0.get("class"))
        .and_then(Value::as_str)
        .unwrap_or("error");
    ctx.set_status_message(format!("ended: {class}"));
}

fn answer(
    outcome: Result<anyhow::Result<Outcome>, tokio::task::JoinError>,
) -> Result<CallToolResult, TaskExit> {
    match outcome {
        Ok(outcome) => Ok(result(outcome)),
        Err(e) => Err(TaskExit::Error(ErrorData::internal_error(
            format!("gates_wait failed: {e}"),
            None,
        ))),
    }
}

/// Asks the client, once per gate, to open the page of each gate the wait finds pending (none
/// without `PROSE_SERVE_URL`). An answer decides nothing: it only changes the task's status
/// message, and the gate is not asked about again.
async fn ask_to_open(ctx: TaskContext, mut pending: watch::Receiver<Pending>) {
    let mut asked = HashSet::new();
    let mut asking = tokio::task::JoinSet::new();
    while pending.changed().await.is_ok() {
        let Some((run, gates)) = pending.borrow_and_update().clone() else {
            continue;
        };
        ctx.set_status_message(format!(
            "waiting for {} of run {} to be decided",
            gates_named(&gates),
            shown(&run)
        ));
        for gate in gates {
            if !asked.insert(gate.clone()) {
                continue;
            }
            let Some(url) = crate::services::notify::gate_page(&run, &gate) else {
                continue;
            };
            let ctx = ctx.clone();
            let run = run.clone();
            asking.spawn(async move {
                let key = format!("page:{gate}");
                let request = InputRequest::Elicitation(ElicitRequest::new(
                    ElicitRequestParams::UrlElicitationParams {
                        meta: None,
                        message: page_message(&run, &gate),
                        url,
                        elicitation_id: key.clone(),
                    },
                ));
                // Cancelled (the task ended) or answered: either way nothing is decided here.
                if let Ok(answer) = ctx.request_input(key, request).await {
                    let how = match answer["action"].as_str() {
                        Some("accept") => "the client accepted opening its page",
                        _ => "the client declined to open its page; it is not asked again",
                    };
                    ctx.set_status_message(format!(
                        "waiting for gate {} of run {} to be decided on the approval page or \
                         with the command line ({how})",
                        shown(&gate),
                        shown(&run)
                    ));
                }
            });
        }
    }
}
