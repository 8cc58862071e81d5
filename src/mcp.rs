//! `prose-state mcp`: the commands a VM and its subagents use, served as Model Context
//! Protocol tools on stdio, through the protocol's official Rust SDK (rmcp).
//!
//! Nothing here re-implements a command. Each tool is one subcommand of the command line: its
//! input schema is read off that subcommand's clap definition, a call's arguments are turned
//! back into that subcommand's argv and parsed by clap (so every check, default and message is
//! the command line's), and the command runs in this process exactly as it does on its own,
//! its output taken as the JSON `--json` prints. Every guarantee of the command line (one
//! transaction a write, busy retries, the sealed audit log) holds for a tool call because it
//! is the same code.
//!
//! The server acts for one agent: every call is made as the principal `agent:NAME`, and no
//! tool decides a gate (approve and reject are not served). Its stdin carries the protocol,
//! so no command ever reads a value from it.

mod dialect;
mod pages;
mod prompts;
mod request_limit;
mod resources;
mod schemas;
mod tasks;
mod tasks_2025;
mod wait;

pub(crate) use crate::cli::McpRole as Role;
use crate::cli::{Cli, Global, McpArgs};
use crate::cmd::{self, Run, Sink};
use crate::context::Context;
use crate::error::{usage, Code};
use crate::model::Principal;
use crate::output::Render;
use anyhow::Result;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, MetaObject, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{json, Map, Value};
use std::any::TypeId;
use std::path::PathBuf;
use std::sync::Arc;

/// One tool: the subcommand it serves, the roles whose sessions have it, what a model reads
/// about it, and how its answer is bounded.
struct Served {
    name: &'static str,
    path: &'static [&'static str],
    read_only: bool,
    roles: &'static [Role],
    about: &'static str,
    page: Page,
    /// The subcommand's own options the tool does not take (paged lists page themselves).
    skip: &'static [&'static str],
}

/// How a tool's answer is kept within its bound (see [`pages`]).
#[derive(Clone, Copy, PartialEq)]
enum Page {
    /// Small by nature: one record, one gate, one number.
    Whole,
    /// A list, under this name: `cursor` and `limit`.
    List(&'static str),
    /// One gate with a page of its audit history: `cursor` and `limit` over the events.
    History,
    /// The log: `since` and `limit`.
    Log,
    /// A binding's value: `offset` and `length`.
    Value,
    /// An agent's memory: `offset` and `length`.
    Memory,
}

const VM_ONLY: &[Role] = &[Role::Vm];
const BOTH: &[Role] = &[Role::Vm, Role::Subagent];

const SERVED: &[Served] = &[
    Served {
        roles: VM_ONLY,
        about: "Create a new run (its directory and state). The run made becomes this session's \
                run: later calls need no `run`.",
        ..Served::new("init", &["init"], false)
    },
    Served {
        about: "Write a binding in the root or in the frame of `execution_id` (a block call or \
                branch; a record inside one binds in it). The value: `value` as given, `file` \
                on the server's machine, or `from` a binding; `append`/`merge` update a JSON \
                array/object atomically. A large value becomes an attachment.",
        ..Served::new("bind", &["bind"], false)
    },
    Served {
        page: Page::Value,
        about: "Read a binding, looked up from an execution's scope up to the root, in pages: \
                `value` holds at most `length` bytes from `offset`, `total_bytes` the whole \
                size, `next_offset` the next page (null at the end). A large value's summary is \
                in `summary`. Read only what you need: `length` 0 gives the size alone.",
        ..Served::new("get", &["get"], true)
    },
    Served {
        about: "List a binding's versions, newest first: `version`, time, `after_record`, \
                `by` and the value's start. `next_before` as `before` pages back.",
        ..Served::new("history", &["history"], true)
    },
    Served {
        roles: VM_ONLY,
        about: "Append one record to the run's execution log: `index`, `text`, `status`, \
                `parent`; or `ends` a start (taking its index, text and parent; it lands once). \
                A `key` makes a retried append land once. Returns the record's id.",
        ..Served::new("exec_append", &["exec-append"], false)
    },
    Served {
        page: Page::List("rows"),
        about: "Run one read-only SQL statement on the run: its rows (as `sqlite3 -json`), \
                `columns` in order, a page at a time (`next_cursor`).",
        ..Served::new("query", &["query"], true)
    },
    Served {
        roles: VM_ONLY,
        page: Page::List("gates"),
        skip: &["pending", "limit"],
        about: "List gates, oldest first: pending unless `status` says otherwise, of the \
                session's run (else every run of the project).",
        ..Served::new("gates_list", &["gates"], true)
    },
    Served {
        roles: VM_ONLY,
        about: "Open an approval gate (`approve GATE_ID:`): a person on `allow` decides it, \
                never an agent or a tool.",
        ..Served::new("gates_create", &["gates", "create"], false)
    },
    // Showing a gate logs a `viewed` event: it writes.
    Served {
        roles: VM_ONLY,
        page: Page::History,
        about: "Show one gate with a page of its audit history (`history_total` counts it \
                all). Each call logs that this agent viewed the gate.",
        ..Served::new("gates_show", &["gates", "show"], false)
    },
    Served {
        roles: VM_ONLY,
        about: "Wait for a person to decide a gate: class ok (approved), rejected, timed_out, \
                stale (its inputs changed: open it again), or still_pending when `timeout` ran \
                out (call again). Several: `gates` with `all` or `any`. `instance` (from \
                gates_create or resume): that opening's own outcome.",
        ..Served::new("gates_wait", &["gates", "wait"], false)
    },
    Served {
        page: Page::Memory,
        about: "Read an agent's memory (this session's agent unless a VM names another), in \
                pages from `offset` (`next_offset`).",
        ..Served::new("agent_memory", &["agent", "memory"], true)
    },
    Served {
        about: "Replace an agent's memory with `value`, stored exactly as given (this session's \
                agent unless a VM names another).",
        ..Served::new("agent_remember", &["agent", "remember"], false)
    },
    Served {
        about: "Record a session of an agent (its prompt and what it did) in its log.",
        ..Served::new("agent_segment", &["agent", "segment"], false)
    },
    Served {
        page: Page::List("agents"),
        about: "List the persistent agents of a `scope`, with their segment counts and memory \
                sizes.",
        ..Served::new("agents_list", &["agent", "list"], true)
    },
    Served {
        roles: VM_ONLY,
        page: Page::List("imports"),
        about: "List the run's import registry: each alias and where it came from. Paged by \
                `cursor` and `limit`.",
        ..Served::new("imports_list", &["imports"], true)
    },
    Served {
        roles: VM_ONLY,
        skip: &["inputs_schema", "outputs_schema"],
        about: "Register a `use` import: `alias`, `source` (once; `replace` to change it).",
        ..Served::new("imports_add", &["imports", "add"], false)
    },
    Served {
        roles: VM_ONLY,
        page: Page::List("runs"),
        skip: &["limit"],
        about: "List the project's runs, newest first, with their status and pending gates. \
                Paged by `cursor` and `limit`.",
        ..Served::new("runs_list", &["runs"], true)
    },
    Served {
        roles: VM_ONLY,
        skip: &["all"],
        about: "Where the run stands, to continue it after losing your context (at most 16 \
                KiB): position, open constructs, retries, gates with the `instance` to wait on \
                and `next_step`, counts, and a page of visible bindings (`next_cursor`). \
                Without a run: the project's unfinished runs (one: its answer), then call \
                again with `run`, which becomes the session's.",
        ..Served::new("resume", &["resume"], false)
    },
    Served {
        roles: VM_ONLY,
        about: "Set the run's final status (completed: refused while a gate is pending).",
        ..Served::new("finish", &["finish"], false)
    },
    Served {
        page: Page::Log,
        about: "Read the execution log after event `since` (0: from the start), a page at a \
                time: `next_since` as `since` reads on.",
        ..Served::new("log_since", &["log"], true)
    },
    Served {
        roles: VM_ONLY,
        skip: &["all", "exit_code"],
        about: "Compare two runs (a fork and its source, or any two), read-only: the bindings \
                that differ, the records both logs begin with alike then each run's own, the \
                gates that differ. Lists are bounded: `bindings.next_cursor` as `cursor` \
                continues; `log_since` reads further records.",
        ..Served::new("diff", &["diff"], true)
    },
    Served {
        roles: VM_ONLY,
        about: "Make a new run whose state is this run's as of record `at`: its records up \
                to it, bindings, memory and gates as they stood (decisions carried). `bind` \
                replaces root inputs (`NAME=VALUE`): how a run is retried with a corrected \
                input. The source is untouched; the new run is not the session's.",
        ..Served::new("fork", &["fork"], false)
    },
];

impl Served {
    const fn new(name: &'static str, path: &'static [&'static str], read_only: bool) -> Self {
        Served {
            name,
            path,
            read_only,
            roles: BOTH,
            about: "",
            page: Page::Whole,
            skip: &[],
        }
    }
}

/// An agent tool's `scope`, shorter than the command line's help (every byte is read at each
/// session's start).
const SCOPE: &str = "execution (persist: true), project, user, or a path";

/// Descriptions of arguments, written for a model calling a tool where the command line's
/// help would mislead it (stdin, comma-separated lists, `--options`).
const DESCRIBED: &[(&str, &str, &str)] = &[
    (
        "bind",
        "value",
        "The value, stored exactly as given (`-` is the one character `-`)",
    ),
    (
        "bind",
        "file",
        "Read the value from this file on the server's machine",
    ),
    (
        "bind",
        "if_version",
        "Write only at this version (0: unbound), else refused",
    ),
    (
        "bind",
        "append",
        "Append this (JSON, else a string) to the JSON array",
    ),
    ("bind", "merge", "Merge this JSON object in (RFC 7396)"),
    ("bind", "key", "append/merge once per key"),
    ("bind", "from", "Copy this binding's value (`let a = b`)"),
    (
        "bind",
        "from_execution_id",
        "Look `from` up from this record (default: execution_id)",
    ),
    (
        "bind",
        "execution_id",
        "Bind in this record's frame (default: root)",
    ),
    (
        "bind",
        "local",
        "At the execution_id record itself (loop variable, `catch as err`)",
    ),
    (
        "bind",
        "assign",
        "Write the binding `get` reads from here (`x = ...`)",
    ),
    ("bind", "source", "The statement that made the value"),
    ("bind", "summary", "One-line summary"),
    ("bind", "kind", "A const is never rebound"),
    ("bind", "name", "Binding name"),
    (
        "get",
        "as_of",
        "Read it as it stood after this record id, or at this UTC time",
    ),
    ("get", "version", "Read this version (`history` lists them)"),
    (
        "get",
        "execution_id",
        "Look up from this record's scope (default: the root)",
    ),
    (
        "history",
        "execution_id",
        "The binding seen from this record's scope (default: the root)",
    ),
    ("history", "before", "Only versions older than this one"),
    (
        "exec_append",
        "key",
        "Idempotency key: sent again, appends nothing",
    ),
    ("exec_append", "ends", "The start record this ends"),
    (
        "exec_append",
        "construct",
        "What a start opens if its text does not say",
    ),
    ("exec_append", "text", "Statement text"),
    (
        "exec_append",
        "index",
        "Statement index in its body, from 1",
    ),
    ("exec_append", "parent", "The enclosing record's id"),
    ("exec_append", "metadata", "A JSON object"),
    ("init", "run_id", "The run's id (default: a new one)"),
    ("gates_create", "gate_id", "Gate id (`approve GATE_ID:`)"),
    ("gates_create", "prompt", "What the person decides"),
    ("query", "sql", "One read-only SQL statement"),
    ("imports_add", "alias", "The `use` alias"),
    ("agent_memory", "scope", SCOPE),
    ("agent_remember", "scope", SCOPE),
    ("agent_segment", "scope", SCOPE),
    ("agents_list", "scope", SCOPE),
    ("imports_add", "source", "The `use` source"),
    ("imports_add", "replace", "Replace a different source"),
    ("query", "timeout", "Stop it after this long (30s)"),
    (
        "gates_wait",
        "accept_carried_from",
        "Count a decision a fork this VM made carried from this run",
    ),
    (
        "gates_wait",
        "instance",
        "That opening's decision (from gates_create or resume)",
    ),
    ("init", "program", "The .prose program to keep with the run"),
    (
        "gates_create",
        "escalate_to",
        "At the deadline, open to this principal or group too",
    ),
    (
        "gates_create",
        "escalate_timeout",
        "The deadline after an escalation (default: timeout again)",
    ),
    (
        "gates_create",
        "remind",
        "Remind this long before the deadline (needs timeout)",
    ),
    (
        "gates_create",
        "no_self_approve",
        "The run's starter and the gate's creator may not approve it",
    ),
    (
        "gates_create",
        "on_reject",
        "What the program does on rejection or timeout, as written",
    ),
    (
        "gates_create",
        "require",
        "Approvals needed, by distinct allowed principals",
    ),
    (
        "gates_create",
        "reopen",
        "Open a decided gate again: its next instance (retry, loops)",
    ),
    (
        "gates_create",
        "veto",
        "off: a rejection needs `require` rejections too",
    ),
    (
        "gates_create",
        "timeout",
        "Deadline from now (30s, 4h, 7d, 2h30m, or seconds)",
    ),
    (
        "gates_create",
        "execution_id",
        "The enclosing record: parent of the `approve` record",
    ),
    ("gates_create", "index", "The `approve` statement's index"),
    ("gates_create", "metadata", "A JSON object"),
    (
        "gates_wait",
        "require_signed",
        "Count only a decision the approval page signed",
    ),
    (
        "gates_wait",
        "key",
        "The page's key (ed25519:HEX) to check signatures with",
    ),
    (
        "gates_wait",
        "poll",
        "How often to look (default 1s; 30s when woken by commits)",
    ),
    (
        "gates_wait",
        "any",
        "Ok as soon as one is approved; fails when all failed",
    ),
    (
        "gates_wait",
        "all",
        "Ok when all are approved; fails as soon as one fails",
    ),
    (
        "gates_list",
        "expiring",
        "Only gates whose deadline is within this long",
    ),
    (
        "diff",
        "limit",
        "At most this many entries a list (default 20)",
    ),
    ("diff", "name", "Only the bindings of this name"),
    (
        "fork",
        "at",
        "The record to fork at (its id, as `log_since` shows it)",
    ),
    (
        "fork",
        "backend",
        "Where the fork is kept (default: the project's)",
    ),
    (
        "init",
        "backend",
        "sqlite (a state.db) or postgres (the project's server)",
    ),
    (
        "runs_list",
        "since",
        "Only runs started since this time or within this duration (7d)",
    ),
    ("resume", "limit", "At most this many bindings (default 64)"),
    (
        "resume",
        "cursor",
        "Bindings after this name: a previous answer's `next_cursor`",
    ),
    (
        "agent_remember",
        "value",
        "The new memory, stored exactly as given",
    ),
    (
        "agent_remember",
        "file",
        "Read the memory from this file on the server's machine",
    ),
    (
        "gates_create",
        "allow",
        "Principals who may decide (`user`: any person)",
    ),
    (
        "get",
        "offset",
        "Where the page starts, in bytes (default 0)",
    ),
    (
        "get",
        "length",
        "At most this many bytes (default 16384, at most 262144)",
    ),
    (
        "get",
        "explain",
        "Give the scope chain walked, not the value",
    ),
    (
        "log_since",
        "since",
        "The events after this id (0: from the start)",
    ),
    ("fork", "bind", "Root inputs to replace, `NAME=VALUE` each"),
    ("fork", "run_id", "The new run's id (default: a new one)"),
    (
        "gates_create",
        "inputs",
        "Bindings the decision is about: a change before it is consumed makes it stale",
    ),
    ("diff", "run_a", "The first run's id"),
    (
        "diff",
        "run_b",
        "The second run's id: what only it has is `added`",
    ),
    (
        "diff",
        "cursor",
        "A previous answer's `bindings.next_cursor`",
    ),
];

/// Arguments no tool takes: the server decides where the project is, who acts and how the
/// output is written; `log --follow` never ends, and `init --quiet` prints no JSON.
/// Nor what is the operator's, not a model's: acting on a token file (the server acts for its
/// agent), reading past the catalog, where large values go, counting an unattested decision,
/// which backend holds a run of both.
const NOT_SERVED: &[&str] = &[
    "token_file",
    "home",
    "scan",
    "attach_over",
    "accept_unattested",
    "backend_a",
    "backend_b",
    "help",
    "version",
    "root",
    "json",
    "busy_timeout",
    "principal",
    "follow",
    "poll_ms",
    "quiet",
];

/// The kinds of binding a subagent session writes.
const SUBAGENT_KINDS: [&str; 2] = ["let", "output"];

/// `gates_wait`'s property for several gates (the command line's positionals with --all or
/// --any).
const SEVERAL: &str = "gates";
/// The most gates one `gates_wait` call waits on.
const SEVERAL_MAX: usize = 16;

/// How long `gates_wait` may block a call: by default, and at most.
/// The default stays under the 60 seconds a common client waits for an answer (the
/// TypeScript SDK's default request timeout).
const WAIT_DEFAULT: &str = "45s";
const WAIT_MAX_SECONDS: i64 = 600;

/// One argument of a tool: its property name, and how it goes back into argv.
#[derive(Clone)]
struct Param {
    property: String,
    /// `--long`, or None for a positional.
    long: Option<String>,
    kind: Kind,
    /// Which command of the path it belongs to (options are placed right after its name).
    level: usize,
    /// Not offered to this session: the client cannot give it (a subagent's pinned run and
    /// execution, its agent's name, the home of user-scope memory).
    hidden: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Flag,
    Integer,
    Number,
    Text,
    List,
}

/// A served tool, as listed, and how its calls become argv.
struct ToolSpec {
    served: &'static Served,
    tool: Tool,
    params: Vec<Param>,
    /// Whether the subcommand takes `--as`: then the server's agent is passed.
    takes_principal: bool,
    /// The definition its argv is parsed with, built once.
    parser: std::sync::Mutex<clap::Command>,
}

pub(crate) struct Server {
    tools: Vec<ToolSpec>,
    /// The session's role, fixed at start: it decides which tools and prompts exist.
    role: Role,
    agent: Principal,
    /// The agent's bare name: what agent tools act on when no name is given.
    agent_name: String,
    /// Started without `--agent`: a VM's agent tools need a name; a subagent has none.
    anonymous: bool,
    /// `--scope`: where the session's agent keeps its memory (the agent tools' default).
    scope: Option<crate::cli::AgentScope>,
    /// The global options every call is made with: the project root resolved at start-up,
    /// the busy timeout.
    root: Option<PathBuf>,
    busy_timeout: u64,
    /// The session's run: `--run`/PROSE_RUN at start, then the run `init` made.
    run: std::sync::Mutex<Option<String>>,
    /// A subagent session started with a run is held to it: calls cannot name another.
    run_pinned: bool,
    /// A subagent session's execution: it binds and reads in that scope only.
    execution_id: Option<i64>,
    /// `gates_wait` calls running as MCP tasks (see [`tasks`]).
    tasks: tasks::Tasks,
    /// What the session speaks on the wire (revision 2025-11-25's tasks: [`dialect`]).
    dialect: Arc<dialect::Dialect>,
    /// The revision the session's `initialize` agreed on (None: no handshake yet, or none at
    /// all, as a 2026-07-28 client has none).
    negotiated: std::sync::OnceLock<rmcp::model::ProtocolVersion>,
    /// The waits running (plain calls and tasks), and how many may ([`wait::WaitSlot`]).
    waits: std::sync::atomic::AtomicUsize,
    most_waits: usize,
}

impl Server {
    pub(crate) fn session_run(&self) -> Option<String> {
        self.run.lock().map(|r| r.clone()).unwrap_or(None)
    }

    pub(crate) fn pinned_run(&self) -> Option<String> {
        self.run_pinned.then(|| self.session_run()).flatten()
    }

    /// Which of the session's tools is called `name`.
    fn tool(&self, name: &str) -> Option<usize> {
        self.tools.iter().position(|t| t.tool.name == name)
    }
}

/// Serves until the client closes stdin.
pub fn serve(args: &McpArgs, global: &Global, ctx: &Context) -> Result<()> {
    // `--agent NAME` or `--agent agent:NAME`: a principal of the agent kind either way, its
    // name normalised and checked as every principal's is.
    // The role is the operator's, never the model's: without it no session starts, so that
    // no configuration silently keeps or loses tools.
    let Some(role) = args.role else {
        return Err(usage(
            "mcp needs --role vm (the VM's tools) or --role subagent (read, bind in its scope, its own agent's memory)",
        ));
    };
    // `--agent NAME` or `--agent agent:NAME`: a principal of the agent kind either way, its
    // name normalised and checked as every principal's is. Without it, the role's name: a VM
    // is `agent:vm`; a subagent is anonymous (`agent:subagent`) and has no memory of its own.
    let anonymous = args.agent.is_none();
    let given = Principal::parse(args.agent.as_deref().unwrap_or(role.as_str()), "--agent")?;
    let name = given.as_str();
    let agent_name = name.strip_prefix("agent:").unwrap_or(name).to_string();
    let agent = Principal::parse(&format!("agent:{agent_name}"), "--agent")?;
    if role == Role::Vm && args.execution_id.is_some() {
        return Err(usage(
            "--execution-id pins a subagent session: a VM session (--role vm) takes none",
        ));
    }
    let run_pinned = role == Role::Subagent && ctx.run.is_some();
    // A session pinned to an execution record that does not exist would refuse every bind in
    // its scope: it does not start.
    if let (true, Some(id)) = (run_pinned, args.execution_id) {
        let (_, mut store) = ctx.the_run()?;
        if !store.execution_exists(id)? {
            return Err(crate::error::not_found(format!(
                "execution not found: {id} (--execution-id names the record of the statement \
                 the subagent runs for; the VM appends it before it starts the session)"
            )));
        }
    }
    cmd::stdin_carries_protocol();
    // Calls come one after another to the same run: its connection is kept between them.
    crate::store::keep_connections();
    let dialect = Arc::new(dialect::Dialect::new(role == Role::Vm));
    let server = Handler(Arc::new(Server {
        tools: tools(role, run_pinned, args.execution_id.is_some(), anonymous),
        role,
        agent,
        agent_name,
        anonymous,
        scope: args.scope.clone(),
        root: ctx.root.clone(),
        busy_timeout: global.busy_timeout,
        run: std::sync::Mutex::new(ctx.run.clone()),
        run_pinned,
        execution_id: args.execution_id,
        tasks: tasks::Tasks::default(),
        dialect: Arc::clone(&dialect),
        negotiated: std::sync::OnceLock::new(),
        waits: std::sync::atomic::AtomicUsize::new(0),
        most_waits: wait::most_waits(),
    }));
    // The runtime exists for this command alone: no other command starts one.
    // Each call runs on a blocking thread (`call_tool`), and a waiting `gates_wait` holds its
    // thread while it sleeps: room for a thousand waits at once and the calls beside them
    // (tokio's default is 512; a call past the bound waits, queued, for a thread).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(MOST_CALLS_AT_ONCE)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let (stdin, stdout) = rmcp::transport::io::stdio_pipes();
        let service = server
            .serve((
                request_limit::LimitedLines::new(stdin, Arc::clone(&dialect)),
                dialect::Announcing::new(stdout, dialect),
            ))
            .await
            .map_err(|e| anyhow::anyhow!("mcp: could not start: {e}"))?;
        service
            .waiting()
            .await
            .map_err(|e| anyhow::anyhow!("mcp: {e}"))?;
        anyhow::Ok(())
    })?;
    // A blocking read of stdin may still be pending in the runtime: it is not waited for.
    runtime.shutdown_background();
    Ok(())
}

/// The most tool calls (and tasks) a session runs at once; more wait, queued, for one to end.
pub const MOST_CALLS_AT_ONCE: usize = 2048;

/// The tools of a session of this role, read off the command line's definition.
fn tools(role: Role, run_pinned: bool, execution_pinned: bool, anonymous: bool) -> Vec<ToolSpec> {
    use clap::CommandFactory;
    let root = Cli::command();
    SERVED
        .iter()
        .filter(|served| served.roles.contains(&role))
        // An anonymous subagent is no persistent agent: it has no memory to keep.
        .filter(|served| !(anonymous && role == Role::Subagent && served.path[0] == "agent"))
        .map(|served| {
            let subagent = role == Role::Subagent;
            // What a subagent session does not choose: its run (when pinned), its execution
            // (when pinned), its agent, and where user-scope memory lives.
            let hidden = |p: &Param| {
                subagent
                    && ((p.level == 0 && run_pinned)
                        || (p.property == "execution_id"
                            && execution_pinned
                            && matches!(served.name, "bind" | "get" | "history"))
                        || (served.path[0] == "agent"
                            && matches!(p.property.as_str(), "name" | "home" | "scope")))
            };
            let mut params = Vec::new();
            let mut takes_principal = false;
            let mut command = &root;
            let mut properties = Map::new();
            let mut required = Vec::new();
            // The top level gives only --run (and for init, nothing: it makes the run; diff
            // names its two runs itself).
            let run = root.get_arguments().find(|arg| arg.get_id() == "run");
            if let Some(arg) = run.filter(|_| !matches!(served.name, "init" | "diff")) {
                let mut p = param(arg, 0);
                p.hidden = hidden(&p);
                if !p.hidden {
                    properties.insert(
                        p.property.clone(),
                        json!({"type": "string"}),
                    );
                }
                params.push(p);
            }
            for (level, name) in served.path.iter().enumerate() {
                command = command
                    .find_subcommand(name)
                    .unwrap_or_else(|| panic!("served subcommand missing: {name}"));
                let leaf = level + 1 == served.path.len();
                for arg in command.get_arguments() {
                    let id = arg.get_id().as_str();
                    if id == "principal" {
                        takes_principal = true;
                    }
                    // A parent's own options (the gate listing's filters) are not the tool's;
                    // its global ones (the agent scope) are.
                    // (`get --version V` takes a value: it is not clap's own --version flag.)
                    let own_version = id == "version" && arg.get_action().takes_values();
                    // A subagent reads no file of the server's machine: its value is what it
                    // passes (a file would hand it whatever the server may read).
                    if (NOT_SERVED.contains(&id) && !own_version)
                        || served.skip.contains(&id)
                        || arg.is_hide_set()
                        || (!leaf && !arg.is_global_set())
                        || (subagent && id == "file")
                    {
                        continue;
                    }
                    let mut p = param(arg, level + 1);
                    p.hidden = hidden(&p);
                    if !p.hidden {
                        if leaf
                            && arg.is_required_set()
                            && (anonymous || !defaults_to_agent(served, &p))
                        {
                            required.push(Value::String(p.property.clone()));
                        }
                        properties.insert(p.property.clone(), schema(arg, &p, served, !anonymous));
                    }
                    params.push(p);
                }
            }
            for (property, schema) in paging(served) {
                properties.insert(property.into(), schema);
            }
            // A subagent writes a result (`let`, `output`); the program's inputs and consts are
            // the VM's to bind (a const a subagent bound would block the VM's assignment).
            if subagent && served.name == "bind" {
                if let Some(kind) = properties.get_mut("kind") {
                    kind["enum"] = json!(SUBAGENT_KINDS);
                }
            }
            if served.name == "gates_wait" {
                // One gate (`gate`), or several (`gates`) with `all` or `any`.
                properties.insert(
                    SEVERAL.into(),
                    json!({"type": "array", "items": {"type": "string"}, "minItems": 1,
                           "maxItems": SEVERAL_MAX,
                           "description": "Several gate ids instead of `gate`, with `all` or `any`"}),
                );
                required.retain(|r| r != "gate");
            }
            let mut input = json!({"type": "object", "properties": properties,
                                   "additionalProperties": false});
            if !required.is_empty() {
                input["required"] = Value::Array(required);
            }
            // A hint's default is left out (readOnlyHint false): each byte is read at every
            // session's start.
            let annotations = if served.read_only {
                ToolAnnotations::new().read_only(true)
            } else {
                ToolAnnotations::new().destructive(false)
            };
            // A schema as rmcp holds it (each is an object).
            let object = |v| Arc::new(serde_json::from_value::<JsonObject>(v).unwrap_or_default());
            let tool = Tool::new(served.name, served.about, object(input))
                .annotate(annotations)
                .with_raw_output_schema(object(schemas::output(served.name)));
            let parser = crate::parse::command_for(served.path[0])
                .unwrap_or_else(|| panic!("served subcommand missing: {}", served.path[0]));
            ToolSpec {
                served,
                tool,
                params,
                takes_principal,
                parser: std::sync::Mutex::new(parser),
            }
        })
        .collect()
}

/// The arguments a tool takes to page its answer: the server's, not the command's.
fn paging(served: &Served) -> Vec<(&'static str, Value)> {
    let limit = |default: u64, max: u64, what: &str| {
        json!({"type": "integer", "minimum": 1, "maximum": max, "default": default,
               "description": format!("At most this many {what}")})
    };
    match served.page {
        Page::List(_) | Page::History => {
            let items = match served.page {
                Page::List(items) => items,
                _ => "history events",
            };
            let cursor = json!({"type": "integer", "minimum": 0, "default": 0,
                                "description": "A previous answer's `next_cursor`"});
            let limit = limit(pages::LIST_DEFAULT, pages::LIST_MAX, items);
            vec![("cursor", cursor), ("limit", limit)]
        }
        Page::Log => vec![("limit", limit(pages::LOG_DEFAULT, pages::LOG_MAX, "events"))],
        Page::Memory => vec![
            (
                "offset",
                json!({"type": "integer", "minimum": 0, "default": 0,
                       "description": "Where the page starts, in bytes: a previous answer's `next_offset`"}),
            ),
            (
                "length",
                json!({"type": "integer", "minimum": 0, "maximum": pages::TEXT_MAX, "default": pages::TEXT_DEFAULT,
                       "description": format!("At most this many bytes (default {}, at most {})", pages::TEXT_DEFAULT, pages::TEXT_MAX)}),
            ),
        ],
        Page::Whole | Page::Value => Vec::new(),
    }
}

fn param(arg: &clap::Arg, level: usize) -> Param {
    let id = arg.get_id().as_str();
    // `gates show/wait RUN GATE`: the run is the `run` property; the tool names the gate.
    let property = if id == "ids" { "gate" } else { id }.to_string();
    let parser = arg.get_value_parser().type_id();
    let kind = if !arg.get_action().takes_values() {
        Kind::Flag
    } else if matches!(arg.get_action(), clap::ArgAction::Append) && arg.get_long().is_some() {
        Kind::List
    } else if parser == TypeId::of::<i64>()
        || parser == TypeId::of::<u64>()
        || parser == TypeId::of::<u32>()
    {
        Kind::Integer
    } else if parser == TypeId::of::<f64>() {
        Kind::Number
    } else {
        Kind::Text
    };
    Param {
        property,
        long: arg.get_long().map(|l| format!("--{l}")),
        kind,
        level,
        hidden: false,
    }
}

/// Agent tools act on the server's own agent unless another is named.
fn defaults_to_agent(served: &Served, p: &Param) -> bool {
    served.path[0] == "agent" && p.property == "name"
}

/// `agent_default`: the session has an agent of its own, which agent tools act on by default.
fn schema(arg: &clap::Arg, p: &Param, served: &Served, agent_default: bool) -> Value {
    let values: Vec<Value> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| Value::String(v.get_name().to_string()))
        .collect();
    let item = match p.kind {
        Kind::Flag => json!({"type": "boolean"}),
        Kind::Integer => json!({"type": "integer"}),
        Kind::Number => json!({"type": "number"}),
        Kind::Text | Kind::List if !values.is_empty() => json!({"type": "string", "enum": values}),
        Kind::Text | Kind::List => json!({"type": "string"}),
    };
    let mut s = if p.kind == Kind::List {
        json!({"type": "array", "items": item})
    } else {
        item
    };
    let mut help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
    if defaults_to_agent(served, p) && agent_default {
        help.push_str(" (default: this server's agent)");
    }
    if served.name == "gates_wait" && p.property == "timeout" {
        help = format!(
            "How long this call waits: 30s, 5m or seconds (default {WAIT_DEFAULT}, at most {}m)",
            WAIT_MAX_SECONDS / 60
        );
    }
    if p.property == "gate" {
        help = "The gate id".into();
    }
    if let Some((_, _, text)) = DESCRIBED
        .iter()
        .find(|(tool, property, _)| *tool == served.name && *property == p.property)
    {
        help = (*text).into();
    }
    if !help.is_empty() {
        s["description"] = Value::String(help);
    }
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|d| d.to_string_lossy().into_owned())
        .collect();
    if p.kind == Kind::List && !defaults.is_empty() {
        s["default"] = json!(defaults);
    } else if let [d] = defaults.as_slice() {
        s["default"] = match p.kind {
            Kind::Integer => d.parse::<i64>().map_or(json!(d), Value::from),
            Kind::Number => d.parse::<f64>().map_or(json!(d), Value::from),
            _ => json!(d),
        };
    }
    s
}

impl Server {
    /// The argv a call stands for: the server's global options, the subcommand, each option
    /// as `--long=value` (so that no value is ever read as an option), then `--` and the
    /// positionals in order.
    /// A `gates_wait` run as a task is not `bounded`: no default `timeout`, no 10-minute cap.
    fn argv(&self, spec: &ToolSpec, args: &JsonObject, bounded: bool) -> Result<Vec<String>> {
        let paging = paging(spec.served);
        for key in args.keys() {
            let offered = spec.params.iter().any(|p| &p.property == key && !p.hidden)
                || paging.iter().any(|(property, _)| property == key)
                || (spec.served.name == "gates_wait" && key == SEVERAL);
            if !offered {
                return Err(usage(format!(
                    "unknown argument for tool {}: {}",
                    spec.served.name,
                    crate::error::shown(key)
                )));
            }
        }
        if self.role == Role::Subagent && spec.served.name == "bind" {
            if let Some(kind) = args.get("kind").and_then(Value::as_str) {
                if !SUBAGENT_KINDS.contains(&kind) {
                    return Err(usage(format!(
                        "a subagent binds let or output, not {}: the program's inputs and consts are the VM's",
                        crate::error::shown(kind)
                    )));
                }
            }
        }
        let numeric_wait;
        let args = if spec.served.name == "gates_wait" {
            numeric_wait = wait_timeout_in_words(args)?;
            &numeric_wait
        } else {
            args
        };
        // `gates`: each id a positional of its own, after `--`.
        let several: Vec<String> = match args.get(SEVERAL) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(ids)) if !ids.is_empty() && args.get("gate").is_none() => ids
                .iter()
                .map(|id| text(id, SEVERAL))
                .collect::<Result<_>>()?,
            Some(_) => {
                return Err(usage(
                    "gates is a non-empty array of gate ids, given instead of gate",
                ))
            }
        };
        if spec.served.name == "gates_wait" && several.is_empty() && args.get("gate").is_none() {
            return Err(usage(
                "gate (one gate id) or gates (several, with all or any) is needed",
            ));
        }
        // Each settled gate is in the answer: a bounded list keeps it within an answer's size.
        if several.len() > SEVERAL_MAX {
            return Err(usage(format!(
                "gates names at most {SEVERAL_MAX} gates a call ({} given)",
                several.len()
            )));
        }
        let mode = |m: &str| args.get(m) == Some(&Value::Bool(true));
        if !several.is_empty() && !mode("all") && !mode("any") {
            return Err(usage("gates (several gate ids) needs all or any: true"));
        }
        let mut argv = vec!["prose-state".to_string(), "--json".to_string()];
        if let Some(root) = &self.root {
            argv.push(format!("--root={}", root.display()));
        }
        argv.push(format!("--busy-timeout={}", self.busy_timeout));
        let named = |p: &Param| args.get(&p.property).filter(|v| !v.is_null() && !p.hidden);
        let run = match spec.params.iter().find(|p| p.level == 0).and_then(named) {
            Some(run) => Some(text(run, "run")?),
            None => self
                .session_run()
                .filter(|_| !matches!(spec.served.name, "init" | "diff")),
        };
        argv.extend(run.map(|run| format!("--run={run}")));
        let mut positionals = Vec::new();
        for (level, name) in spec.served.path.iter().enumerate() {
            argv.push(name.to_string());
            for p in spec.params.iter().filter(|p| p.level == level + 1) {
                let value = named(p).cloned().or_else(|| {
                    if defaults_to_agent(spec.served, p) && !self.anonymous {
                        Some(Value::String(self.agent_name.clone()))
                    } else if spec.served.path[0] == "agent" && p.property == "scope" {
                        self.scope
                            .as_ref()
                            .map(|s| Value::String(s.as_str().into()))
                    } else if p.hidden && p.property == "execution_id" {
                        self.execution_id.map(Value::from)
                    } else {
                        None
                    }
                });
                let Some(value) = value else {
                    if p.long.is_none() {
                        positionals.push(None);
                    }
                    continue;
                };
                match (&p.long, p.kind) {
                    (None, _) => positionals.push(Some(text(&value, &p.property)?)),
                    (Some(long), Kind::Flag) => match value {
                        Value::Bool(true) => argv.push(long.clone()),
                        Value::Bool(false) => {}
                        _ => return Err(usage(format!("{} must be true or false", p.property))),
                    },
                    (Some(long), Kind::List) => {
                        let items = match value {
                            Value::Array(items) => items,
                            one => vec![one],
                        };
                        for item in items {
                            argv.push(format!("{long}={}", text(&item, &p.property)?));
                        }
                    }
                    (Some(long), _) => argv.push(format!("{long}={}", text(&value, &p.property)?)),
                }
            }
        }
        if spec.served.name == "gates_wait" && bounded {
            let given = args.get("timeout").and_then(Value::as_str);
            let seconds = match given {
                Some("0") => 0,
                other => crate::model::parse_duration(other.unwrap_or(WAIT_DEFAULT))?,
            };
            if seconds > WAIT_MAX_SECONDS {
                return Err(usage(format!(
                    "a tool call waits at most {}m: call gates_wait again to go on waiting",
                    WAIT_MAX_SECONDS / 60
                )));
            }
            if given.is_none() {
                argv.push(format!("--timeout={WAIT_DEFAULT}"));
            }
        }
        if spec.takes_principal {
            argv.push(format!("--as={}", self.agent.as_str()));
        }
        match spec.served.name {
            // A value is read in pages: the first one unless another is asked for.
            "get" if args.get("explain") != Some(&Value::Bool(true)) => {
                if args.get("offset").and_then(Value::as_u64).is_none() {
                    argv.push("--offset=0".into());
                }
                match args.get("length").and_then(Value::as_u64) {
                    None => argv.push(format!("--length={}", pages::TEXT_DEFAULT)),
                    Some(n) if n > pages::TEXT_MAX => {
                        return Err(usage(format!(
                            "length is at most {} bytes a page: read on from next_offset",
                            pages::TEXT_MAX
                        )))
                    }
                    Some(_) => {}
                }
            }
            // The server pages the list itself: the command gives all of it.
            "runs_list" => argv.push("--limit=1000000".into()),
            _ => {}
        }
        // Positionals in order: a later one given without an earlier one would take its place.
        if let Some(gap) = positionals.iter().position(Option::is_none) {
            if positionals[gap..].iter().any(Option::is_some) {
                let names: Vec<&str> = spec
                    .params
                    .iter()
                    .filter(|p| p.long.is_none() && p.level > 0)
                    .map(|p| p.property.as_str())
                    .collect();
                return Err(usage(format!(
                    "{} is needed when a later argument is given",
                    names.get(gap).copied().unwrap_or("an argument")
                )));
            }
        }
        let positionals: Vec<String> = positionals.into_iter().flatten().chain(several).collect();
        if !positionals.is_empty() {
            argv.push("--".into());
            argv.extend(positionals);
        }
        Ok(argv)
    }

    /// Runs one call: its argv parsed by clap, the command run as it runs on its own.
    fn call(&self, spec: &ToolSpec, args: &JsonObject) -> Result<Outcome> {
        self.call_with(spec, args, true)
    }

    /// A call, `bounded` as a tool call is or not (a `gates_wait` task, see [`tasks`]).
    fn call_with(&self, spec: &ToolSpec, args: &JsonObject, bounded: bool) -> Result<Outcome> {
        self.call_inner(spec, args, bounded).map_err(|e| {
            // Told in this session's words: its run is the `run` argument, or the one `init`
            // made or `resume` named.
            if format!("{e:#}").starts_with("no run given") {
                usage(if self.role == Role::Vm {
                    "no run: pass `run` (call `resume` with `run` to continue one, or `init` to make one; either becomes the session's)"
                } else {
                    "no run: pass `run`, the run the VM gave you"
                })
            } else {
                e
            }
        })
    }

    /// The call's command line, parsed: a call the command line would refuse as usage is
    /// refused here, before anything runs.
    fn parsed(&self, spec: &ToolSpec, args: &JsonObject, bounded: bool) -> Result<Cli> {
        let argv = self.argv(spec, args, bounded)?;
        let mut parser = spec
            .parser
            .lock()
            .map_err(|_| anyhow::anyhow!("a call failed while parsing"))?;
        crate::parse::parse_with(&mut parser, argv.into_iter().map(Into::into).collect())
            .map_err(crate::error::usage)
    }

    fn call_inner(&self, spec: &ToolSpec, args: &JsonObject, bounded: bool) -> Result<Outcome> {
        let cli = self.parsed(spec, args, bounded)?;
        let ctx = Context::resolve(&cli.global);
        // A run the client names is a run id of this project (or its server), never a path:
        // `diff` names two.
        let client_run = spec.served.name == "diff"
            || spec
                .params
                .iter()
                .any(|p| p.level == 0 && args.get(&p.property).is_some_and(|v| !v.is_null()));
        let ctx = if client_run { ctx.run_ids_only() } else { ctx };
        // The page asked for is checked before the command runs (showing a gate writes), each
        // argument against the bounds its schema states: where a page starts, then its size.
        let counts = paging(spec.served)
            .iter()
            .map(|(key, schema)| count_arg(args, key, schema))
            .collect::<Result<Vec<u64>>>()?;
        let (cursor, limit) = match counts[..] {
            [start, size] => (start, size),
            [size] => (0, size),
            _ => (0, 0),
        };
        if let crate::cli::Command::Log(a) = &cli.command {
            return log_page(a, &ctx, limit);
        }
        if let crate::cli::Command::Get(a) = &cli.command {
            if !a.explain {
                return value_page(a, &ctx);
            }
        }
        let mut outcome = cmd::dispatch(&cli.command, &ctx, &mut Json)
            .unwrap_or_else(|| Err(usage(format!("not a tool: {}", spec.served.name))))?;
        match spec.served.page {
            Page::List(field) => {
                let items = match outcome.value.take() {
                    Value::Array(items) => items,
                    other => vec![other],
                };
                let mut page = pages::list(items, field, cursor, limit);
                // A row is an object, whose keys a JSON reader need not keep in order: the
                // statement's column order is given beside the rows.
                if let (Some(columns), Value::Object(page)) = (outcome.columns.take(), &mut page) {
                    page.insert("columns".into(), json!(columns));
                }
                outcome.set(page);
            }
            Page::History => {
                if let Value::Object(mut gate) = outcome.value.take() {
                    let history = match gate.remove("history") {
                        Some(Value::Array(events)) => events,
                        _ => Vec::new(),
                    };
                    if let Value::Object(mut page) = pages::list(history, "history", cursor, limit)
                    {
                        let total = page.remove("total").unwrap_or_default();
                        gate.insert("history_total".into(), total);
                        gate.extend(page);
                    }
                    outcome.set(Value::Object(gate));
                }
            }
            // `cursor` and `limit` are the offset and the length.
            Page::Memory => {
                if let Value::Object(mut memory) = outcome.value.take() {
                    let whole = memory
                        .get("memory")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    pages::put_page(&mut memory, "memory", whole.as_bytes(), cursor, limit);
                    outcome.set(Value::Object(memory));
                }
            }
            Page::Whole | Page::Log | Page::Value => {}
        }
        // The run `init` made is the session's from now on; so is the run a session without
        // one resumes by name (a VM restarted after a crash).
        let adopted = match spec.served.name {
            "init" => outcome.value["run_id"].as_str(),
            "resume" if client_run => outcome.value["run"]["id"].as_str(),
            _ => None,
        };
        if let (Some(run), Code::Ok | Code::Stale) = (adopted, outcome.code) {
            if let Ok(mut session) = self.run.lock() {
                if spec.served.name == "init" || session.is_none() {
                    *session = Some(run.to_string());
                }
            }
        }
        Ok(outcome)
    }
}

/// A whole-number paging argument: its schema's `default` when not given; refused outside
/// its `minimum..=maximum`.
fn count_arg(args: &JsonObject, key: &str, schema: &Value) -> Result<u64> {
    let bound = |k: &str, or: u64| schema[k].as_u64().unwrap_or(or);
    let (min, max) = (bound("minimum", 0), bound("maximum", u64::MAX));
    match args.get(key) {
        None | Some(Value::Null) => Ok(bound("default", 0)),
        Some(v) => match v.as_u64() {
            Some(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(usage(format!(
                "{key} must be a whole number from {min} to {max}: {v}"
            ))),
        },
    }
}

/// One page of the log after `since`: at most `limit` events and about [`pages::PAGE_BYTES`].
fn log_page(args: &crate::cli::LogArgs, ctx: &Context, limit: u64) -> Result<Outcome> {
    let mut events = Vec::new();
    let mut bytes = 0;
    let mut truncated = false;
    let mut last = args.since;
    // The command reads on while its reader takes lines: once the page is full, the reader
    // stops it.
    let read = cmd::log::follow(args, ctx, &mut |line| {
        let value = serde_json::to_value(&line).map_err(std::io::Error::from)?;
        let size = value.to_string().len() + 1;
        if events.len() as u64 >= limit || (!events.is_empty() && bytes + size > pages::PAGE_BYTES)
        {
            truncated = true;
            return Err(std::io::Error::other("page full"));
        }
        bytes += size;
        last = value["id"].as_i64().unwrap_or(last);
        events.push(value);
        Ok(())
    });
    if !truncated {
        read?;
    }
    Ok(Outcome::of(json!({
        "events": events,
        "next_since": last,
        "truncated": truncated,
    })))
}

/// One page of a binding's value: the command reads just that part, and the page says where
/// it stands. A large value's summary, which the command gives as its `value`, has a field
/// of its own.
fn value_page(args: &crate::cli::GetArgs, ctx: &Context) -> Result<Outcome> {
    use crate::cmd::get::Lookup;
    let found = |args: &crate::cli::GetArgs| match args.run(ctx)? {
        Lookup::Value(got) => Ok(*got),
        Lookup::Explained(_) => Err(anyhow::anyhow!("get gave no value")),
    };
    let mut tries = 0;
    let (got, summary) = loop {
        let got = found(args)?;
        if got
            .row
            .attachment_path
            .as_deref()
            .unwrap_or_default()
            .is_empty()
        {
            break (got, None);
        }
        // An attachment's row holds its summary as its value, which the part read replaced:
        // the row is read again without a part (the file is opened, not read), and kept only
        // if it is the same version as the page's.
        let whole = found(&crate::cli::GetArgs {
            name: args.name.clone(),
            execution_id: args.execution_id,
            explain: false,
            offset: None,
            length: None,
            version: args.version,
            as_of: args.as_of.clone(),
        })?;
        if whole.row.version == got.row.version {
            let summary = whole
                .row
                .value
                .as_deref()
                .map(|s| String::from_utf8_lossy(s).into_owned());
            break (got, summary);
        }
        tries += 1;
        if tries == 3 {
            return Err(crate::error::busy(
                "the binding was rebound while it was read, three times: nothing was written, read it again",
            ));
        }
    };
    let mut out = match serde_json::to_value(&got)? {
        Value::Object(out) => out,
        _ => Map::new(),
    };
    out.remove("bytes");
    out.insert("summary".into(), json!(summary));
    let part = got.row.value.unwrap_or_default();
    pages::put_part(&mut out, "value", &part, got.offset.unwrap_or(0), got.bytes);
    Ok(Outcome::of(Value::Object(out)))
}

/// `gates_wait`'s arguments with its timeout as the command line takes it: a whole number
/// of seconds (`"timeout": 30`, what a client is likely to send) becomes `30s`; any other
/// number is refused, naming the forms taken.
fn wait_timeout_in_words(args: &JsonObject) -> Result<JsonObject> {
    let mut args = args.clone();
    if let Some(Value::Number(n)) = args.get("timeout") {
        let Some(seconds) = n.as_u64() else {
            return Err(usage(format!(
                "timeout must be a duration (30s, 5m) or a whole number of seconds: {n}"
            )));
        };
        // 0: look once and answer at once, as `gates wait --timeout 0` does.
        let words = match seconds {
            0 => "0".to_string(),
            s => format!("{s}s"),
        };
        args.insert("timeout".into(), Value::String(words));
    }
    Ok(args)
}

/// A value given to an option or positional, as its text.
fn text(value: &Value, property: &str) -> Result<String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        _ => Err(usage(format!("{property} must be a string or a number"))),
    }
}

/// What a command gave: the JSON the command line prints, as text and as a value.
struct Outcome {
    text: String,
    value: Value,
    code: Code,
    warnings: Vec<String>,
    /// The outcome in the command line's words, when it is not a plain success.
    said: Option<String>,
    /// A table's column names in the statement's order (`query`).
    columns: Option<Vec<String>>,
}

impl Outcome {
    /// An answer the server shaped (a page): its text is its JSON.
    fn of(value: Value) -> Self {
        Outcome {
            text: value.to_string(),
            value,
            code: Code::Ok,
            warnings: Vec::new(),
            said: None,
            columns: None,
        }
    }

    /// The answer replaced by its page, text and value alike.
    fn set(&mut self, value: Value) {
        self.text = value.to_string();
        self.value = value;
    }
}

/// Takes a command's output as the JSON `--json` prints.
struct Json;

impl Sink for Json {
    type Out = Result<Outcome>;
    fn take<R: Run>(&mut self, command: &R, ctx: &Context) -> Result<Outcome> {
        let out = command.run(ctx)?;
        let code = out.exit_code();
        let warnings = out.warnings();
        let mut text = Vec::new();
        crate::output::write_json(&mut text, &out)?;
        let value = serde_json::to_value(&out)?;
        let columns = out.columns();
        // An outcome that is not a plain success (a gate rejected, timed out or still
        // pending) is also said in words, as the command line says it.
        let said = if code == Code::Ok {
            None
        } else {
            let mut words = Vec::new();
            out.text(&mut words, false)?;
            let words = String::from_utf8_lossy(&words).trim().to_string();
            (!words.is_empty()).then(|| crate::output::visible(&words).into_owned())
        };
        Ok(Outcome {
            text: String::from_utf8_lossy(&text).into_owned(),
            value,
            code,
            warnings,
            said,
            columns,
        })
    }
}

/// The exit-code class a result or error carries, by the command line's exit code.
pub fn class(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Error => "error",
        Code::Usage => "usage",
        Code::NotFound => "not_found",
        Code::Refused => "refused",
        Code::Rejected => "rejected",
        Code::TimedOut => "timed_out",
        Code::StillPending => "still_pending",
        Code::Unknown => "unknown",
        Code::Tampered => "tampered",
        Code::Unattested => "unattested",
        Code::Stale => "stale",
        Code::Busy => "busy",
    }
}

fn meta(code: Code, warnings: &[String]) -> MetaObject {
    let mut m = Map::new();
    m.insert("exit_code".into(), json!(code as u8));
    m.insert("class".into(), json!(class(code)));
    if !warnings.is_empty() {
        m.insert("warnings".into(), json!(warnings));
    }
    MetaObject(m)
}

fn result(outcome: Result<Outcome>) -> CallToolResult {
    match outcome {
        Ok(o) => {
            // A tool's structured result must be an object.
            let structured = match o.value {
                Value::Object(_) => o.value,
                other => json!({ "result": other }),
            };
            // A decision the command reports with a non-zero exit (a gate rejected, timed
            // out or still pending; a tampered gate) is a result, not a failure: its class
            // says which.
            let tampered = matches!(o.code, Code::Tampered | Code::Unattested | Code::Error);
            let mut r = if tampered {
                CallToolResult::structured_error(structured)
            } else {
                CallToolResult::structured(structured)
            };
            // The text is the command line's JSON, byte for byte; an outcome that is not a
            // plain success is said in words after it (a host may show only the text).
            r.content = vec![ContentBlock::text(o.text.trim_end().to_string())];
            if let Some(said) = o.said {
                r.content
                    .push(ContentBlock::text(format!("{}: {said}", class(o.code))));
            }
            r.meta = Some(meta(o.code, &o.warnings));
            r
        }
        Err(e) => {
            // A failure carries no structured content: a client checks structured content
            // against the tool's output schema, which describes the tool's answer, and would
            // fail the call without showing why. The message and its class are the text
            // (JSON), and the class is in `_meta` as well.
            let code = crate::error::code_of(&e).unwrap_or(Code::Error);
            let message = format!("{e:#}").replace(['\n', '\r'], " ");
            let error = json!({
                "error": message,
                "exit_code": code as u8,
                "class": class(code),
            });
            let mut r = CallToolResult::error(vec![ContentBlock::text(error.to_string())]);
            r.meta = Some(meta(code, &[]));
            r
        }
    }
}

/// The server as rmcp holds it: shared with the threads its calls run on.
struct Handler(Arc<Server>);

impl ServerHandler for Handler {
    /// The handshake of revisions up to 2025-11-25: the tasks extension (of 2026-07-28) is not
    /// declared on a session negotiated below it, so that no client meets one revision's
    /// shapes on another's session.
    async fn initialize(
        &self,
        request: rmcp::model::InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::InitializeResult, ErrorData> {
        // A session is opened once: a second handshake cannot change what the first agreed.
        if self.0.negotiated.get().is_some() {
            return Err(ErrorData::invalid_request(
                "the session is already initialized: start a new session for another revision",
                None,
            ));
        }
        context.peer.set_peer_info(request.clone());
        let mut info = self.negotiate_initialize(&request)?;
        let _ = self.0.negotiated.set(info.protocol_version.clone());
        if info.protocol_version < rmcp::model::ProtocolVersion::V_2026_07_28 {
            if let Some(extensions) = info.capabilities.extensions.as_mut() {
                extensions.remove(rmcp::model::TASKS_EXTENSION_ID);
            }
            // An empty list of extensions is no field of the revision's.
            info.capabilities.extensions.take_if(|e| e.is_empty());
        }
        Ok(info)
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_prompts()
                // `gates_wait` as a task (src/mcp/tasks.rs).
                .enable_tasks()
                // Resources and their subscriptions: src/mcp/resources.rs.
                .enable_resources()
                .enable_resources_subscribe()
                .build(),
        )
        .with_server_info(Implementation::new(
            "prose-state",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(format!(
            "The durable state of an OpenProse run, acting as {} in the {role} role. Each tool \
                 is a prose-state command and returns its JSON; a failed call carries its exit \
                 class (usage, not_found, refused, busy, ...). Busy means nothing was written: \
                 retry. Long answers come in pages: each says whether it was cut (`truncated`) \
                 and gives the cursor to continue. The run's state is also served as resources \
                 (`prose://runs/{{run}}/...`, see resources/templates/list) that can be \
                 subscribed to. The protocol is this server's prompt `{role}`.",
            self.0.agent.as_str(),
            role = self.0.role.as_str(),
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult {
            tools: self.0.tools.iter().map(|t| t.tool.clone()).collect(),
            ..ListToolsResult::default()
        })
    }

    /// The requests of our own: what an over-long request was replaced by (see
    /// [`request_limit`]), answered with an error naming the limit; and a 2025-11-25 session's
    /// task requests, renamed on their way in ([`dialect`], answered by [`tasks_2025`]).
    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, ErrorData> {
        if let Some(method) = request.method.strip_prefix(dialect::PREFIX) {
            return tasks_2025::answer(&self.0, method, request.params, context).await;
        }
        if request.method == request_limit::TOO_LARGE_METHOD {
            let bytes = request
                .params
                .as_ref()
                .and_then(|p| p["bytes"].as_u64())
                .unwrap_or(0);
            return Err(ErrorData::invalid_request(
                request_limit::too_large_message(bytes),
                Some(json!({"limit": request_limit::MAX_REQUEST_BYTES, "bytes": bytes})),
            ));
        }
        Err(ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!("no such method: {}", crate::error::shown(&request.method)),
            None,
        ))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, ErrorData> {
        Ok(rmcp::model::ListPromptsResult {
            prompts: prompts::list(self.0.role),
            ..Default::default()
        })
    }

    async fn get_prompt(
        &self,
        request: rmcp::model::GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, ErrorData> {
        let server = Arc::clone(&self.0);
        let args = request.arguments.unwrap_or_default();
        // The guide may read the run (its id): on the blocking pool, as a tool call is.
        tokio::task::spawn_blocking(move || prompts::get(&server, &request.name, &args))
            .await
            .map_err(|e| ErrorData::internal_error(format!("prompt failed: {e}"), None))?
            .map(Into::into)
    }

    // ---- Resources and subscriptions (src/mcp/resources.rs) ----

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, ErrorData> {
        resources::list_resources(Arc::clone(&self.0)).await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, ErrorData> {
        Ok(resources::templates(&self.0))
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, ErrorData> {
        resources::read_resource(Arc::clone(&self.0), request.uri)
            .await
            .map(Into::into)
    }

    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(resources::accept(&self.0, requested))
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), ErrorData> {
        resources::listen(Arc::clone(&self.0), context).await
    }

    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        resources::subscribe(Arc::clone(&self.0), request.uri, context.peer).await
    }

    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        resources::unsubscribe(&request.uri);
        Ok(())
    }

    // ---- end of resources ----

    fn get_tool(&self, name: &str) -> Option<Tool> {
        Some(self.0.tools[self.0.tool(name)?].tool.clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(index) = self.0.tool(&request.name) else {
            return Err(ErrorData::invalid_params(
                format!("no such tool: {}", request.name),
                None,
            ));
        };
        let args = request.arguments.unwrap_or_default();
        // Gates as MCP tasks (src/mcp/tasks.rs): `gates_wait` from a client that declared
        // the tasks extension runs as a task.
        if tasks::wanted(&self.0, &self.0.tools[index], &context) {
            return Ok(tasks::start(Arc::clone(&self.0), index, args, &context));
        }
        if self.0.tools[index].served.name == "gates_wait" {
            return Ok(wait::plain(Arc::clone(&self.0), index, args, context)
                .await
                .into());
        }
        // The commands are blocking code, and the PostgreSQL client runs a runtime of its own:
        // each call runs on the blocking pool, never on the runtime's thread, so calls in
        // flight (a gate wait polls for minutes) do not hold one another up, and a call that
        // panics is answered with an error rather than never.
        let server = Arc::clone(&self.0);
        let outcome =
            tokio::task::spawn_blocking(move || result(server.call(&server.tools[index], &args)))
                .await
                .map_err(|e| ErrorData::internal_error(format!("tool call failed: {e}"), None))?;
        Ok(outcome.into())
    }

    // Gates as MCP tasks (src/mcp/tasks.rs): the task's state, the client's answers to its
    // input requests, its cancellation.
    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        tasks::extension_only(&self.0, &context, "tasks/get")?;
        self.0.tasks.get(&request.task_id)
    }

    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        tasks::extension_only(&self.0, &context, "tasks/update")?;
        self.0
            .tasks
            .update(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        tasks::extension_only(&self.0, &context, "tasks/cancel")?;
        self.0.tasks.cancel(&request.task_id)
    }
}
