//! Gates as MCP tasks in the form of protocol revision 2025-11-25 (its base protocol's tasks,
//! which the 2026-07-28 extension replaced; see [`super::tasks`] for that one).
//!
//! On a session negotiated at 2025-11-25 the server declares `capabilities.tasks` (listing,
//! cancelling, and task-augmented `tools/call`) and lists `gates_wait` with
//! `execution.taskSupport: "optional"`; no other tool runs as a task. A `tools/call` of
//! `gates_wait` carrying `task` is answered at once with `CreateTaskResult` (`{task}`), and the
//! wait runs in the background exactly as the 2026-07-28 task's does: the same command, woken
//! by the commit, bounded only by a `timeout` the call gives (else by the gate's own
//! deadline). Then:
//!
//! - `tasks/get` gives the task (`taskId`, `status`, `statusMessage`, `createdAt`,
//!   `lastUpdatedAt`, `ttl`, `pollInterval`);
//! - `tasks/result` waits until the task has ended and gives the tool's result (with
//!   `_meta["io.modelcontextprotocol/related-task"]`), or the error it failed with;
//! - `tasks/list` gives the session's tasks, oldest first, 50 a page;
//! - `tasks/cancel` stops the wait (a write under way ends first) and gives the task as it
//!   ended; a task that has ended cannot be cancelled (-32602).
//!
//! The approval page: a client that declares URL-mode elicitation is sent `elicitation/create`
//! (mode `url`, related to the task) once per pending gate, as a plain call is. The task stays
//! `working` meanwhile, not `input_required`: the wait does not need the answer, which decides
//! nothing. `ttl` is `null` (a person may take days: the gate's deadline ends the wait, not the
//! task's), whatever the request asks; `pollInterval` is 1000 ms (see [`super::tasks`] for why).
//! No `notifications/tasks/status` is sent: a host learns of the end at its next `tasks/get`,
//! or at once from a `tasks/result` it is waiting on.

use super::tasks::{Asking, POLL_INTERVAL_MS};
use super::wait::RELATED_TASK;
use super::Server;
use crate::error::shown;
use rmcp::model::{CustomResult, DetailedTask, ErrorCode, TaskPayload};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::ErrorData;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// The most tasks one `tasks/list` page gives.
const PAGE: usize = 50;

/// How often a `tasks/result` (or `tasks/cancel`) looks again at a task that has not ended:
/// a read of memory, no query.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// How long `tasks/cancel` waits for the stopped wait to end (a write under way ends first, and
/// a wait that had its answer gives it: see [`super::tasks`]).
const CANCEL_LIMIT: Duration = Duration::from_secs(3);

/// The server's `capabilities.tasks` on a 2025-11-25 session.
pub(super) fn capability() -> Value {
    json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}})
}

/// Answers a request [`super::dialect`] renamed (`method` without its prefix).
pub(super) async fn answer(
    server: &Arc<Server>,
    method: &str,
    params: Option<Value>,
    context: RequestContext<RoleServer>,
) -> Result<CustomResult, ErrorData> {
    if !server.dialect.tasks_2025() {
        return Err(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("no such method: {}", shown(method)),
            None,
        ));
    }
    let params = params.unwrap_or_else(|| json!({}));
    let value = match method {
        "tools/list" => list_tools(server),
        "tools/call" => call(server, &params, &context)?,
        "tasks/get" => wire(&server.tasks.detailed(task_id(&params)?)?),
        "tasks/result" => result(server, task_id(&params)?, &context).await?,
        "tasks/list" => list(server, &params)?,
        "tasks/cancel" => cancel(server, task_id(&params)?).await?,
        _ => {
            return Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("no such method: {}", shown(method)),
                None,
            ))
        }
    };
    Ok(CustomResult(value))
}

fn task_id(params: &Value) -> Result<&str, ErrorData> {
    params["taskId"]
        .as_str()
        .ok_or_else(|| ErrorData::invalid_params("taskId: a string is required", None))
}

/// The session's tools, `gates_wait` declaring that it may run as a task.
fn list_tools(server: &Server) -> Value {
    let tools: Vec<Value> = server
        .tools
        .iter()
        .map(|t| {
            let mut tool = serde_json::to_value(&t.tool).unwrap_or_default();
            if t.served.name == "gates_wait" {
                tool["execution"] = json!({"taskSupport": "optional"});
            }
            tool
        })
        .collect();
    json!({ "tools": tools })
}

/// A task-augmented `tools/call`: `gates_wait` starts as a task; any other tool is no task.
fn call(
    server: &Arc<Server>,
    params: &Value,
    context: &RequestContext<RoleServer>,
) -> Result<Value, ErrorData> {
    let name = params["name"]
        .as_str()
        .ok_or_else(|| ErrorData::invalid_params("name: a string is required", None))?;
    let Some(index) = server.tool(name) else {
        return Err(ErrorData::invalid_params(
            format!("no such tool: {}", shown(name)),
            None,
        ));
    };
    if server.tools[index].served.name != "gates_wait" {
        return Err(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!(
                "tool {} does not run as a task (its execution.taskSupport is forbidden): \
                 call it without `task`",
                shown(name)
            ),
            None,
        ));
    }
    let Some(task) = params["task"].as_object() else {
        return Err(ErrorData::invalid_params(
            "task: an object is required",
            None,
        ));
    };
    if task.get("ttl").is_some_and(|ttl| {
        !ttl.is_null() && !ttl.as_f64().is_some_and(|t| t >= 0.0 && t.fract() == 0.0)
    }) {
        return Err(ErrorData::invalid_params(
            "task.ttl: a whole number of milliseconds is required",
            None,
        ));
    }
    let args = match params.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(args)) => args.clone(),
        Some(_) => {
            return Err(ErrorData::invalid_params(
                "arguments: an object is required",
                None,
            ))
        }
    };
    let asking = if context
        .client_capabilities()
        .and_then(|c| c.elicitation)
        .is_some_and(|e| e.url.is_some())
    {
        Asking::Elicit(context.peer.clone())
    } else {
        Asking::No
    };
    // A call the tool refuses is a task too, that completes with the tool's error result.
    let task = super::tasks::spawn(Arc::clone(server), index, args, asking);
    Ok(json!({ "task": wire(&server.tasks.detailed(&task.task_id)?) }))
}

/// The task as the revision shapes it. A task whose tool result is an error (`isError`) is
/// `failed`, as the revision has it (the 2026-07-28 extension calls it `completed`); its
/// `tasks/result` is that result.
fn wire(task: &DetailedTask) -> Value {
    let t = &task.task;
    let failed = matches!(&task.payload, TaskPayload::Completed { result }
        if result.get("isError") == Some(&Value::Bool(true)));
    let mut v = json!({
        "taskId": t.task_id,
        "status": if failed { json!("failed") } else { json!(t.status) },
        "createdAt": t.created_at,
        "lastUpdatedAt": t.last_updated_at,
        "ttl": t.ttl_ms,
        "pollInterval": t.poll_interval_ms.unwrap_or(POLL_INTERVAL_MS),
    });
    if let Some(message) = &t.status_message {
        v["statusMessage"] = json!(message);
    }
    v
}

/// Waits until the task has ended; its result, or the error it ended with.
async fn result(
    server: &Server,
    id: &str,
    context: &RequestContext<RoleServer>,
) -> Result<Value, ErrorData> {
    loop {
        let task = server.tasks.detailed(id)?;
        match task.payload {
            TaskPayload::Completed { mut result } => {
                // The shape of the revision: no 2026-07-28 discriminator.
                if result.get("resultType").and_then(Value::as_str) == Some("complete") {
                    result.remove("resultType");
                }
                let meta = result
                    .entry("_meta")
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                    .map(|m| m.insert(RELATED_TASK.into(), json!({ "taskId": id })));
                debug_assert!(meta.is_some());
                return Ok(Value::Object(result));
            }
            TaskPayload::Failed { error } => {
                return Err(
                    serde_json::from_value(Value::Object(error)).unwrap_or_else(|_| {
                        ErrorData::internal_error(format!("task {} failed", shown(id)), None)
                    }),
                )
            }
            TaskPayload::Cancelled => {
                return Err(ErrorData::invalid_params(
                    format!("task {} was cancelled: it has no result", shown(id)),
                    None,
                ))
            }
            _ => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(LOOK_EVERY) => {}
            _ = context.ct.cancelled() => {
                return Err(ErrorData::invalid_request("the request was cancelled", None))
            }
        }
    }
}

/// A page of the session's tasks, oldest first; the cursor is where the next page starts.
fn list(server: &Server, params: &Value) -> Result<Value, ErrorData> {
    let from = match params.get("cursor") {
        None | Some(Value::Null) => 0,
        Some(c) => c
            .as_str()
            .filter(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|c| c.parse::<usize>().ok())
            .ok_or_else(|| ErrorData::invalid_params("cursor: not one this server gave", None))?,
    };
    let ids = server.tasks.ids();
    let tasks: Vec<Value> = ids
        .iter()
        .skip(from)
        .take(PAGE)
        .filter_map(|id| server.tasks.detailed(id).ok())
        .map(|t| wire(&t))
        .collect();
    let mut page = json!({ "tasks": tasks });
    if from + PAGE < ids.len() {
        page["nextCursor"] = json!((from + PAGE).to_string());
    }
    Ok(page)
}

/// Stops the task's wait, and gives the task as it ended.
async fn cancel(server: &Server, id: &str) -> Result<Value, ErrorData> {
    let task = server.tasks.detailed(id)?;
    if task.status().is_terminal() {
        return Err(ErrorData::invalid_params(
            format!(
                "task {} has ended ({}): it cannot be cancelled",
                shown(id),
                json!(task.status()).as_str().unwrap_or("ended")
            ),
            None,
        ));
    }
    server.tasks.cancel(id)?;
    let until = tokio::time::Instant::now() + CANCEL_LIMIT;
    loop {
        let task = server.tasks.detailed(id)?;
        if task.status().is_terminal() || tokio::time::Instant::now() >= until {
            return Ok(wire(&task));
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}
