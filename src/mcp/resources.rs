//! The run's state as MCP resources an agent reads and subscribes to (`resources/read`,
//! `resources/subscribe`, `subscriptions/listen`).
//!
//! Each resource is read through the tool that answers the same question (`runs_list`,
//! `get`, `gates_list`, `log_since`), with that tool's paging and bounds, in the same role: a
//! resource whose tool a session does not have is not offered to it, and a subagent session
//! held to a run or an execution reads only what its tools reach. The list of a run's bindings
//! has no tool: it is what `get` reaches (every binding; a session held to an execution, the
//! bindings visible from it), paged as the listing tools are.
//!
//! A subscription is woken by the commit that changes its run (`store::wake`: one LISTEN
//! connection or one file watch for the whole process), or at the safety net's interval; the
//! resource is then read again, and an update is sent when what the read gives changed. One
//! thread a subscribed run waits for all the session's subscriptions to it. A stdio server
//! serves one session, so the session's subscriptions are this process's.

use super::{count_arg, pages, Server, ToolSpec};
use crate::error::{code_of, not_found, refused, shown, usage, Code};
use anyhow::Result;
use rmcp::model::{
    ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate, ResourceUpdatedNotificationParam, SubscriptionFilter,
};
use rmcp::service::{Peer, RoleServer, SubscriptionContext, SubscriptionSink};
use rmcp::ErrorData;
use serde_json::{json, Map, Value};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// Every resource URI starts so: `prose://runs/{run}`, then what of the run.
pub const PREFIX: &str = "prose://runs/";
/// The most subscriptions a session holds at once (its `resources/subscribe` ones and the URIs
/// of all its open `subscriptions/listen` streams together).
pub const MAX_SUBSCRIPTIONS: usize = 32;
/// A resource's JSON, as its MIME type says.
const JSON: &str = "application/json";

/// What of a run a URI names, with the paging its query gives.
#[derive(Debug, Clone, PartialEq)]
enum What {
    /// `prose://runs/{run}`: the run as `runs_list` gives it.
    Run,
    /// `.../bindings{?cursor,limit}`.
    Bindings { query: Map<String, Value> },
    /// `.../bindings/{name}{?execution_id,offset,length}`: a page of its value, as `get`.
    Binding {
        name: String,
        query: Map<String, Value>,
    },
    /// `.../gates{?status,cursor,limit}`: as `gates_list`, every status unless asked.
    Gates { query: Map<String, Value> },
    /// `.../gates/{gate}`: one gate as `gates_list` lists it, checked against its sealed log
    /// (with its integrity, answer and edits).
    Gate { id: String },
    /// `.../log{?since,limit}`: the newest events, or the events after `since`.
    Log { query: Map<String, Value> },
}

#[derive(Debug, Clone)]
struct Uri {
    run: String,
    what: What,
}

/// One percent-decoding, of one segment or query part: `%XX` becomes its byte, nothing else
/// changes (a `%25` stays the `%` it decodes to); the bytes must be UTF-8.
fn decode(part: &str, what: &str) -> Result<String> {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(b) = hex else {
                return Err(usage(format!(
                    "bad percent-encoding in the resource URI's {what}: {}",
                    shown(part)
                )));
            };
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| {
        usage(format!(
            "the resource URI's {what} is not UTF-8 once decoded: {}",
            shown(part)
        ))
    })
}

/// The query parameters a kind of resource takes, each a whole number but `status`.
fn takes(what: &What) -> &'static [&'static str] {
    match what {
        What::Run | What::Gate { .. } => &[],
        What::Bindings { .. } => &["cursor", "limit"],
        What::Binding { .. } => &["execution_id", "offset", "length"],
        What::Gates { .. } => &["status", "cursor", "limit"],
        What::Log { .. } => &["since", "limit"],
    }
}

/// Reads a URI of this server: the run id and names checked as the command line checks them,
/// each segment and query value percent-decoded once.
fn parse(uri: &str) -> Result<Uri> {
    let Some(rest) = uri.strip_prefix(PREFIX) else {
        return Err(usage(format!(
            "not a resource of this server (they start with {PREFIX}): {}",
            shown(uri)
        )));
    };
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    };
    if path.contains('#') || query.is_some_and(|q| q.contains('#')) {
        return Err(usage(format!(
            "a resource URI has no fragment: {}",
            shown(uri)
        )));
    }
    let segments: Vec<&str> = path.split('/').collect();
    let run = decode(segments[0], "run")?;
    crate::model::check_run_id(&run)?;
    let mut what = match segments[1..] {
        [] => What::Run,
        ["bindings"] => What::Bindings { query: Map::new() },
        ["bindings", name] => {
            let name = decode(name, "binding name")?;
            crate::model::check_name(&name)?;
            What::Binding {
                name,
                query: Map::new(),
            }
        }
        ["gates"] => What::Gates { query: Map::new() },
        ["gates", gate] => {
            let id = decode(gate, "gate id")?;
            crate::model::check_gate_id(&id)?;
            What::Gate { id }
        }
        ["log"] => What::Log { query: Map::new() },
        _ => {
            return Err(not_found(format!(
                "no such resource (see resources/templates/list): {}",
                shown(uri)
            )))
        }
    };
    let allowed = takes(&what);
    let mut given = Map::new();
    for pair in query.into_iter().flat_map(|q| q.split('&')) {
        if pair.is_empty() {
            continue;
        }
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = decode(key, "query")?;
        let value = decode(value, "query")?;
        if !allowed.contains(&key.as_str()) {
            return Err(usage(format!(
                "this resource takes {}: not {}",
                if allowed.is_empty() {
                    "no query".to_string()
                } else {
                    allowed.join(", ")
                },
                shown(&key)
            )));
        }
        if given.contains_key(&key) {
            return Err(usage(format!("{key} is given twice in the resource URI")));
        }
        let value = if key == "status" {
            Value::String(value)
        } else {
            match value.parse::<u64>() {
                Ok(n) => Value::from(n),
                Err(_) => {
                    return Err(usage(format!(
                        "{key} must be a whole number: {}",
                        shown(&value)
                    )))
                }
            }
        };
        given.insert(key, value);
    }
    match &mut what {
        What::Bindings { query }
        | What::Binding { query, .. }
        | What::Gates { query }
        | What::Log { query } => *query = given,
        What::Run | What::Gate { .. } => {}
    }
    Ok(Uri { run, what })
}

/// The resource templates a session of this role reads.
pub fn templates(server: &Server) -> ListResourceTemplatesResult {
    let vm = server.tool("runs_list").is_some();
    let execution_pinned = server.execution_id.is_some();
    let mut list = Vec::new();
    let template = |uri: String, name: &str, about: &str| {
        ResourceTemplate::new(uri, name)
            .with_description(about)
            .with_mime_type(JSON)
    };
    if vm {
        list.push(template(
            format!("{PREFIX}{{run}}"),
            "run",
            "The run as runs_list gives it: its status, program, start, last event and \
             pending gates.",
        ));
    }
    let reach = if execution_pinned {
        "the bindings visible from this session's execution, the nearest of each name"
    } else {
        "every binding of the run, in every scope"
    };
    list.push(template(
        format!("{PREFIX}{{run}}/bindings{{?cursor,limit}}"),
        "bindings",
        &format!(
            "A page of {reach}: each one's name, scope, execution_id, kind, version, size in \
             bytes and first line (at most 100 characters), with no value. At most `limit` \
             (default {}, at most {}) and about 32 KiB from position `cursor`; `next_cursor` \
             continues (null at the end), `total` counts them all.",
            pages::LIST_DEFAULT,
            pages::LIST_MAX
        ),
    ));
    let binding_query = if execution_pinned {
        "{?offset,length}"
    } else {
        "{?execution_id,offset,length}"
    };
    list.push(template(
        format!("{PREFIX}{{run}}/bindings/{{name}}{binding_query}"),
        "binding",
        &format!(
            "A binding's value as the get tool gives it, looked up from {} up to the root: at \
             most `length` bytes (default {}, at most {}) from `offset`, with total_bytes, \
             next_offset and truncated.",
            if execution_pinned {
                "this session's execution"
            } else {
                "`execution_id`'s scope (default: the root)"
            },
            pages::TEXT_DEFAULT,
            pages::TEXT_MAX
        ),
    ));
    list.push(template(
        format!("{PREFIX}{{run}}/gates{{?status,cursor,limit}}"),
        "gates",
        &format!(
            "The run's gates as gates_list gives them, read-only, oldest first: every status \
             unless `status` (pending, approved, rejected, timeout, all) says otherwise. At most \
             `limit` (default {}, at most {}) and about 32 KiB from `cursor`.",
            pages::LIST_DEFAULT,
            pages::LIST_MAX
        ),
    ));
    list.push(template(
        format!("{PREFIX}{{run}}/gates/{{gate}}"),
        "gate",
        "One gate as gates_list lists it (its status, who decided and when): read-only, no \
         view is logged. Subscribe to it to learn of its decision; gates_wait then takes it.",
    ));
    list.push(template(
        format!("{PREFIX}{{run}}/log{{?since,limit}}"),
        "log",
        &format!(
            "The run's execution log as log_since gives it: the newest `limit` events (default \
             {}, at most {}; about 32 KiB), or the events after `since`. `next_since` is where \
             to read on.",
            pages::LOG_DEFAULT,
            pages::LOG_MAX
        ),
    ));
    ListResourceTemplatesResult::with_all_items(list)
}

/// The session's run's resources, when it has a run.
pub fn list(server: &Server) -> Result<ListResourcesResult> {
    let Some(run) = server.session_run() else {
        return Ok(ListResourcesResult::default());
    };
    let id = run_id_of(server, &run)?;
    let base = format!("{PREFIX}{}", encode(&id));
    let mut list = Vec::new();
    let resource = |uri: String, name: &str| Resource::new(uri, name).with_mime_type(JSON);
    if server.tool("runs_list").is_some() {
        list.push(resource(base.clone(), "run"));
    }
    list.push(resource(format!("{base}/bindings"), "bindings"));
    list.push(resource(format!("{base}/gates"), "gates"));
    list.push(resource(format!("{base}/log"), "log"));
    Ok(ListResourcesResult::with_all_items(list))
}

/// A run id as a URI segment (run ids hold only letters, digits, `_ . -`: nothing to escape,
/// but a session's run given as something else is escaped rather than trusted).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The id of the run `run` names (a session's `--run` may be a directory or a state.db path).
fn run_id_of(server: &Server, run: &str) -> Result<String> {
    if crate::model::check_run_id(run).is_ok() {
        return Ok(run.to_string());
    }
    Ok(crate::run::locate(server.root.as_deref(), Some(run))?.id)
}

/// The tool a resource is read through, if the session has it.
fn tool<'a>(server: &'a Server, name: &str, uri: &Uri) -> Result<&'a ToolSpec> {
    match server.tool(name) {
        Some(i) => Ok(&server.tools[i]),
        None => Err(refused(format!(
            "a {} session cannot read {}: it has no {name} tool",
            server.role.as_str(),
            describe(uri)
        ))),
    }
}

fn describe(uri: &Uri) -> &'static str {
    match uri.what {
        What::Run => "a run",
        What::Bindings { .. } => "a run's bindings",
        What::Binding { .. } => "a binding",
        What::Gates { .. } => "a run's gates",
        What::Gate { .. } => "a gate",
        What::Log { .. } => "a run's log",
    }
}

/// A tool's arguments naming the URI's run: `run`, or, for a session held to its run, nothing
/// (after checking the URI names that run).
fn run_args(server: &Server, uri: &Uri) -> Result<Map<String, Value>> {
    let mut args = Map::new();
    match server.pinned_run() {
        Some(pinned) => {
            let id = run_id_of(server, &pinned)?;
            if id != uri.run {
                return Err(refused(format!(
                    "this session is held to run {}: it cannot read run {}",
                    shown(&id),
                    shown(&uri.run)
                )));
            }
        }
        None => {
            args.insert("run".into(), Value::String(uri.run.clone()));
        }
    }
    Ok(args)
}

/// Whether a session of this role may read the URI at all (no database read): the same
/// question [`read`] asks first.
fn allowed(server: &Server, uri: &Uri) -> Result<()> {
    let name = match &uri.what {
        What::Run => "runs_list",
        What::Bindings { .. } | What::Binding { .. } => "get",
        What::Gates { .. } | What::Gate { .. } => "gates_list",
        What::Log { .. } => "log_since",
    };
    tool(server, name, uri)?;
    if let What::Binding { query, .. } = &uri.what {
        if server.execution_id.is_some() && query.contains_key("execution_id") {
            return Err(refused(
                "this session is held to its execution: a binding is looked up from it, never from another execution_id",
            ));
        }
    }
    Ok(())
}

fn called(server: &Server, spec: &ToolSpec, args: &Map<String, Value>) -> Result<Value> {
    answered(spec, server.call(spec, args)?)
}

/// A call's JSON, where it answered ok.
fn answered(spec: &ToolSpec, outcome: crate::cmd::outcome::Outcome) -> Result<Value> {
    if outcome.code != Code::Ok {
        return Err(anyhow::anyhow!(
            "{} answered with class {}",
            spec.served.name,
            super::class(outcome.code)
        ));
    }
    Ok(outcome.value)
}

/// Reads a resource: its JSON, within the bound of the tool it is read through.
fn read(server: &Server, uri: &Uri) -> Result<Value> {
    allowed(server, uri)?;
    let mut args = run_args(server, uri)?;
    match &uri.what {
        What::Run => {
            let spec = tool(server, "runs_list", uri)?;
            args.insert("limit".into(), json!(1));
            let page = called(server, spec, &args)?;
            match page["runs"].get(0) {
                Some(run) => Ok(run.clone()),
                None => Err(not_found(format!("run not found: {}", shown(&uri.run)))),
            }
        }
        What::Binding { name, query } => {
            let spec = tool(server, "get", uri)?;
            args.insert("name".into(), Value::String(name.clone()));
            args.extend(query.clone());
            called(server, spec, &args)
        }
        What::Gates { query } => {
            let spec = tool(server, "gates_list", uri)?;
            // A listing of a run the server does not hold is empty: the run must exist.
            open(server, uri)?;
            args.insert("status".into(), json!("all"));
            args.extend(query.clone());
            called(server, spec, &args)
        }
        What::Gate { id } => {
            // Checked against its sealed log, with its answer and edits, as every listing of
            // one run is.
            let spec = tool(server, "gates_list", uri)?;
            open(server, uri)?;
            args.insert("status".into(), json!("all"));
            args.insert("limit".into(), json!(pages::LIST_MAX));
            let mut cursor = 0;
            loop {
                args.insert("cursor".into(), json!(cursor));
                let page = called(server, spec, &args)?;
                let found = page["gates"]
                    .as_array()
                    .and_then(|gates| gates.iter().find(|g| g["id"] == json!(id)));
                if let Some(gate) = found {
                    return Ok(gate.clone());
                }
                match page["next_cursor"].as_u64() {
                    Some(next) if next > cursor => cursor = next,
                    _ => {
                        return Err(not_found(format!(
                            "gate not found: {} in run {}",
                            shown(id),
                            shown(&uri.run)
                        )))
                    }
                }
            }
        }
        What::Log { query } => {
            let spec = tool(server, "log_since", uri)?;
            let bound =
                json!({"minimum": 1, "maximum": pages::LOG_MAX, "default": pages::LOG_DEFAULT});
            let limit = count_arg(query, "limit", &bound)?;
            // The tail: after the record before the newest `limit`.
            let since = match query.get("since") {
                Some(since) => since.as_i64().unwrap_or(0),
                None => {
                    let (_, mut store) = open(server, uri)?;
                    let newest = store.executions_matching(&crate::store::ExecQuery {
                        newest_first: true,
                        limit: Some(limit as i64),
                        ..Default::default()
                    })?;
                    newest.iter().map(|r| r.id).min().map_or(0, |id| id - 1)
                }
            };
            args.insert("since".into(), json!(since));
            args.insert("limit".into(), json!(limit));
            let mut page = called(server, spec, &args)?;
            page["since"] = json!(since);
            Ok(page)
        }
        What::Bindings { query } => {
            let bound = json!({"minimum": 0, "default": 0});
            let cursor = count_arg(query, "cursor", &bound)?;
            let bound =
                json!({"minimum": 1, "maximum": pages::LIST_MAX, "default": pages::LIST_DEFAULT});
            let limit = count_arg(query, "limit", &bound)?;
            let (paths, mut store) = open(server, uri)?;
            // Each value a sealed opening names is checked as `get` checks it.
            let start = server.execution_id.map(Some);
            let rows = crate::services::inputs::checked_bindings(
                store.as_mut(),
                &paths.dir,
                start,
                |s| {
                    Ok(match server.execution_id {
                        Some(e) => crate::cmd::get::nearest_bindings(s, Some(e), None, i64::MAX)?.1,
                        None => s.bindings()?,
                    })
                },
            )?;
            let items = rows
                .into_iter()
                .map(|b| {
                    let value = String::from_utf8_lossy(b.value.as_deref().unwrap_or_default())
                        .into_owned();
                    let bytes = match &b.attachment_path {
                        Some(p) => {
                            crate::services::attach::stored_len(store.as_mut(), &paths.dir, p)
                                .unwrap_or(0)
                        }
                        None => value.len() as u64,
                    };
                    json!({
                        "name": b.name,
                        "scope": if b.execution_id.is_some() { "execution" } else { "root" },
                        "execution_id": b.execution_id,
                        "kind": b.kind,
                        "version": b.own_version,
                        "bytes": bytes,
                        "attachment_path": b.attachment_path,
                        "first_line": crate::output::one_line(&value, 100),
                    })
                })
                .collect();
            Ok(pages::list(items, "bindings", cursor, limit))
        }
    }
}

/// The URI's run, opened as a tool call opens it: a run id of this project (or its server)
/// named by the client, or the run a session is held to.
fn open(
    server: &Server,
    uri: &Uri,
) -> Result<(crate::run::RunPaths, Box<dyn crate::store::Store>)> {
    let pinned = server.pinned_run();
    let global = crate::cli::Global {
        root: server.root.clone(),
        run: Some(pinned.clone().unwrap_or_else(|| uri.run.clone())),
        json: true,
        busy_timeout: server.busy_timeout,
    };
    let ctx = crate::context::Context::resolve_in(&global, server.wiring).stdin_is_protocol();
    let ctx = if pinned.is_some() {
        ctx
    } else {
        ctx.run_ids_only()
    };
    ctx.the_run()
}

/// An error as a protocol error: one line, its exit code and class in `data`.
fn protocol_error(e: &anyhow::Error) -> ErrorData {
    let code = code_of(e).unwrap_or(Code::Error);
    let message = format!("{e:#}").replace(['\n', '\r'], " ");
    let data = Some(json!({"exit_code": code as u8, "class": super::class(code)}));
    match code {
        Code::NotFound => ErrorData::resource_not_found(message, data),
        Code::Usage | Code::Refused => ErrorData::invalid_params(message, data),
        _ => ErrorData::internal_error(message, data),
    }
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T, ErrorData> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ErrorData::internal_error(format!("resource read failed: {e}"), None))?
        .map_err(|e| protocol_error(&e))
}

/// `resources/list`.
pub async fn list_resources(server: Arc<Server>) -> Result<ListResourcesResult, ErrorData> {
    blocking(move || list(&server)).await
}

/// `resources/read`: the resource's JSON as one text content.
pub async fn read_resource(
    server: Arc<Server>,
    uri: String,
) -> Result<ReadResourceResult, ErrorData> {
    blocking(move || {
        let parsed = parse(&uri)?;
        let value = read(&server, &parsed)?;
        Ok(ReadResourceResult::new(vec![
            ResourceContents::TextResourceContents {
                uri,
                mime_type: Some(JSON.into()),
                text: value.to_string(),
                meta: None,
            },
        ]))
    })
    .await
}

// ---- Subscriptions ----

/// Where an update goes: the session (`resources/subscribe`) or one listen stream.
#[derive(Clone)]
enum To {
    Session(Peer<RoleServer>),
    Stream(SubscriptionSink),
}

struct Sub {
    /// The listen stream's number, or None for `resources/subscribe`.
    stream: Option<u64>,
    uri: String,
    parsed: Uri,
    to: To,
    /// What the last read gave (a digest), to tell a change from a wake that changed nothing.
    last: Option<u64>,
}

/// A session's subscriptions, and the threads that watch their runs.
#[derive(Default)]
pub struct Subscriptions(Mutex<State>);

#[derive(Default)]
struct State {
    subs: Vec<Sub>,
    /// Places taken by listen streams accepted and not yet registered.
    reserved: usize,
    /// The runs a thread waits on.
    watched: HashSet<String>,
    next_stream: u64,
}

fn lock(server: &Server) -> std::sync::MutexGuard<'_, State> {
    server
        .subscriptions
        .0
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// What a read gave, as a digest: a busy store tells nothing (None); a field that only the
/// clock changes (`time_left_seconds`) is left out.
fn digest(read: &Result<Value>) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    fn steady(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("time_left_seconds");
                m.values_mut().for_each(steady);
            }
            Value::Array(a) => a.iter_mut().for_each(steady),
            _ => {}
        }
    }
    let text = match read {
        Ok(v) => {
            let mut v = v.clone();
            steady(&mut v);
            v.to_string()
        }
        Err(e) if code_of(e) == Some(Code::Busy) => return None,
        Err(e) => format!("error: {e:#}"),
    };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    Some(h.finish())
}

/// Registers subscriptions to `uris` (already parsed and allowed), each read once now; a run
/// no thread waits on yet gets one. The first read failing registers none of them.
fn register(
    server: &Arc<Server>,
    runtime: &tokio::runtime::Handle,
    uris: Vec<(String, Uri)>,
    stream: Option<u64>,
    to: To,
) -> Result<()> {
    // The waiter is made before the first read, so that no commit after it is missed.
    let mut waiters = HashMap::new();
    for (_, uri) in &uris {
        if !waiters.contains_key(&uri.run) && !lock(server).watched.contains(&uri.run) {
            let (_, store) = open(server, uri)?;
            waiters.insert(uri.run.clone(), store.changes());
        }
    }
    let mut subs = Vec::new();
    for (text, uri) in uris {
        let read = match read(server, &uri) {
            Err(e) if code_of(&e) != Some(Code::Busy) => return Err(e.context(text)),
            read => read,
        };
        subs.push(Sub {
            stream,
            last: digest(&read),
            uri: text,
            parsed: uri,
            to: to.clone(),
        });
    }
    let mut start = Vec::new();
    let mut touched = Vec::new();
    {
        let mut st = lock(server);
        // A `resources/subscribe` checked the bound before its first read: checked again
        // here, where it takes its place (a listen stream's places were taken when accepted).
        if stream.is_none() {
            subs.retain(|s| !st.subs.iter().any(|h| h.stream.is_none() && h.uri == s.uri));
            let held = st.subs.len() + st.reserved;
            if held + subs.len() > MAX_SUBSCRIPTIONS {
                return Err(too_many(held));
            }
        }
        for sub in subs {
            let run = sub.parsed.run.clone();
            touched.push((run.clone(), sub.uri.clone()));
            st.subs.push(sub);
            if st.watched.insert(run.clone()) {
                start.push((run.clone(), waiters.remove(&run)));
            }
        }
    }
    for (run, changes) in start {
        watch(Arc::clone(server), runtime.clone(), run, changes);
    }
    // A thread already waiting may have looked after a commit and before these subscriptions
    // were there: each is read once more, and an update sent if it changed since its first
    // read.
    for (run, uri) in touched {
        look(server, runtime, &run, Some(&uri));
    }
    Ok(())
}

/// Reads again the session's subscriptions to `run` (only `uri`'s, when given), one read a
/// URI, and sends an update for each whose read changed.
fn look(server: &Server, runtime: &tokio::runtime::Handle, run: &str, uri: Option<&str>) {
    let mine: Vec<(String, Uri)> = lock(server)
        .subs
        .iter()
        .filter(|s| s.parsed.run == run && uri.is_none_or(|u| s.uri == u))
        .map(|s| (s.uri.clone(), s.parsed.clone()))
        .collect();
    let mut now: HashMap<String, Option<u64>> = HashMap::new();
    for (text, parsed) in mine {
        now.entry(text)
            .or_insert_with(|| digest(&read(server, &parsed)));
    }
    let mut send = Vec::new();
    {
        let mut st = lock(server);
        for sub in st.subs.iter_mut().filter(|s| s.parsed.run == run) {
            if let Some(Some(d)) = now.get(&sub.uri) {
                if sub.last != Some(*d) {
                    sub.last = Some(*d);
                    send.push((sub.uri.clone(), sub.to.clone()));
                }
            }
        }
    }
    if !send.is_empty() {
        // A gate task of this session that this change completes is complete before the
        // update goes out: a host that asks `tasks/get` on the update finds the decision.
        server.tasks.settle(
            run,
            |gate| decided(server, run, gate),
            super::tasks::SETTLE_LIMIT,
        );
    }
    for (uri, to) in send {
        runtime.spawn(async move {
            // A stream or session gone is ended by its own request: nothing to do here.
            let _ = match to {
                To::Session(peer) => peer
                    .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                    .await
                    .map_err(|_| ()),
                To::Stream(sink) => sink.notify_resource_updated(uri).await.map_err(|_| ()),
            };
        });
    }
}

/// Whether the store now holds gate `gate` of `run` as no longer pending (approved, rejected
/// or timed out); a read that fails says no.
fn decided(server: &Server, run: &str, gate: &str) -> bool {
    let uri = Uri {
        run: run.to_string(),
        what: What::Gate {
            id: gate.to_string(),
        },
    };
    read(server, &uri).is_ok_and(|g| g["status"].as_str().is_some_and(|s| s != "pending"))
}

/// The thread that waits on one run for the session's subscriptions to it: at each wake (or
/// the safety net's interval) each subscribed resource is read again, and an update sent for
/// each that changed. It ends at its next wake once no subscription to the run is left. Given
/// no waiter, it makes its own and looks once before it first waits.
fn watch(
    server: Arc<Server>,
    runtime: tokio::runtime::Handle,
    run: String,
    changes: Option<Box<dyn crate::store::wake::Changes>>,
) {
    let name = run.clone();
    let held = Arc::clone(&server);
    let spawned = std::thread::Builder::new()
        .name("prose-subscribe".into())
        .spawn(move || {
            let mut changes = match changes {
                Some(c) => c,
                None => {
                    let uri = Uri {
                        run: run.clone(),
                        what: What::Run,
                    };
                    let c = open(&server, &uri).map(|(_, store)| store.changes());
                    look(&server, &runtime, &run, None);
                    c.unwrap_or_else(|_| Box::new(crate::store::wake::Polling))
                }
            };
            loop {
                let every = crate::store::wake::interval(
                    None,
                    changes.as_ref(),
                    std::time::Duration::from_secs(1),
                );
                changes.wait(every);
                {
                    let mut st = lock(&server);
                    if !st.subs.iter().any(|s| s.parsed.run == run) {
                        st.watched.remove(&run);
                        return;
                    }
                }
                look(&server, &runtime, &run, None);
            }
        });
    // A thread that could not be started leaves its run unwatched: the next subscription to
    // it tries again.
    if spawned.is_err() {
        lock(&held).watched.remove(&name);
    }
}

fn too_many(held: usize) -> anyhow::Error {
    refused(format!(
        "this session holds {held} subscriptions, the most it may ({MAX_SUBSCRIPTIONS}): unsubscribe from one first"
    ))
}

/// `resources/subscribe` (protocol revisions before 2026-07-28): updates go to the session as
/// `notifications/resources/updated`. Subscribing again to a URI already subscribed to is
/// nothing new.
pub async fn subscribe(
    server: Arc<Server>,
    uri: String,
    peer: Peer<RoleServer>,
) -> Result<(), ErrorData> {
    let runtime = tokio::runtime::Handle::current();
    blocking(move || {
        let parsed = parse(&uri)?;
        allowed(&server, &parsed)?;
        {
            let st = lock(&server);
            if st.subs.iter().any(|s| s.stream.is_none() && s.uri == uri) {
                return Ok(());
            }
            let held = st.subs.len() + st.reserved;
            if held >= MAX_SUBSCRIPTIONS {
                return Err(too_many(held));
            }
        }
        register(
            &server,
            &runtime,
            vec![(uri, parsed)],
            None,
            To::Session(peer),
        )
    })
    .await
}

/// `resources/unsubscribe`: a URI not subscribed to is no error.
pub fn unsubscribe(server: &Server, uri: &str) {
    lock(server)
        .subs
        .retain(|s| !(s.stream.is_none() && s.uri == uri));
}

/// What a `subscriptions/listen` stream is given: the URIs of the request that parse, that
/// this session may read, and that fit within the session's bound, in the order asked (a
/// URI asked twice counts once). The rest are left out of the acknowledgment.
pub fn accept(server: &Server, requested: &SubscriptionFilter) -> SubscriptionFilter {
    let mut st = lock(server);
    let mut room = MAX_SUBSCRIPTIONS.saturating_sub(st.subs.len() + st.reserved);
    let mut uris: Vec<String> = Vec::new();
    for uri in requested.resource_subscriptions.iter().flatten() {
        if room == 0 || uris.contains(uri) {
            continue;
        }
        let ok = parse(uri).and_then(|p| {
            allowed(server, &p)?;
            if let Some(pinned) = server.pinned_run() {
                if crate::model::check_run_id(&pinned).is_ok() && pinned != p.run {
                    return Err(refused("another run"));
                }
            }
            Ok(())
        });
        if ok.is_ok() {
            uris.push(uri.clone());
            room -= 1;
        }
    }
    st.reserved += uris.len();
    if uris.is_empty() {
        SubscriptionFilter::default()
    } else {
        SubscriptionFilter::builder()
            .resource_subscriptions(uris)
            .build()
    }
}

/// One `subscriptions/listen` stream: its URIs registered (each read once; a first read that
/// fails ends the stream with that error), one update sent for each, then an update at each
/// change until the stream is cancelled.
pub async fn listen(server: Arc<Server>, context: SubscriptionContext) -> Result<(), ErrorData> {
    // The acknowledgment repeats a URI asked twice: it is one subscription.
    let mut uris: Vec<String> = Vec::new();
    for uri in context.accepted().resource_subscriptions.iter().flatten() {
        if !uris.contains(uri) {
            uris.push(uri.clone());
        }
    }
    let accepted = uris.clone();
    let stream = {
        let mut st = lock(&server);
        st.reserved = st.reserved.saturating_sub(uris.len());
        st.next_stream += 1;
        st.next_stream
    };
    let runtime = tokio::runtime::Handle::current();
    let sink = context.sink().clone();
    let registered = {
        let server = Arc::clone(&server);
        blocking(move || {
            let parsed = uris
                .into_iter()
                .map(|u| parse(&u).map(|p| (u, p)))
                .collect::<Result<Vec<_>>>()?;
            register(&server, &runtime, parsed, Some(stream), To::Stream(sink))
        })
        .await
    };
    if let Err(e) = registered {
        lock(&server).subs.retain(|s| s.stream != Some(stream));
        return Err(e);
    }
    // The acknowledgment went out before the first reads: what committed in between is not
    // missed, because each URI gets one update now (read it again).
    for uri in accepted {
        if context.sink().notify_resource_updated(uri).await.is_err() {
            break;
        }
    }
    context.cancelled().await;
    lock(&server).subs.retain(|s| s.stream != Some(stream));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class_of(uri: &str) -> &'static str {
        match parse(uri) {
            Ok(_) => "ok",
            Err(e) => super::super::class(code_of(&e).unwrap_or(Code::Error)),
        }
    }

    #[test]
    fn a_uri_is_decoded_once_and_its_names_checked() {
        let u =
            parse("prose://runs/r1/bindings/research.findings?execution_id=4&offset=0").unwrap();
        assert_eq!(u.run, "r1");
        let What::Binding { name, query } = u.what else {
            panic!("a binding")
        };
        assert_eq!(name, "research.findings");
        assert_eq!(query["execution_id"], json!(4));
        // `%41` is `A`; `%252F` is `%2F` once decoded, which no gate id holds.
        assert!(
            matches!(parse("prose://runs/r1/gates/%41b").unwrap().what, What::Gate { id } if id == "Ab")
        );
        for (uri, want) in [
            ("prose://runs/r1/gates/a%252Fb", "usage"),
            ("prose://runs/r1/gates/a%2Fb", "usage"),
            ("prose://runs/..%2F..%2Fetc", "usage"),
            ("prose://runs/r1/bindings/%ZZ", "usage"),
            ("prose://runs/r1/bindings/%", "usage"),
            ("prose://runs/r1/bindings/%FF", "usage"),
            ("prose://runs/r1/gates?status=all&status=pending", "usage"),
            ("prose://runs/r1/gates?limit=-1", "usage"),
            ("prose://runs/r1/gates/g?cursor=1", "usage"),
            ("prose://runs/r1/log#x", "usage"),
            ("prose://runs/", "usage"),
            ("file:///etc/passwd", "usage"),
            ("prose://runs/r1/secrets", "not_found"),
            ("prose://runs/r1/gates/g/more", "not_found"),
            ("prose://runs/r1/log?since=3&limit=10", "ok"),
            ("prose://runs/r1", "ok"),
        ] {
            assert_eq!(class_of(uri), want, "{uri}");
        }
    }
}
