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

mod request_limit;

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

/// One tool: the subcommand it serves, and what its result is called when the command's JSON
/// is not an object (a tool's structured result must be one).
struct Served {
    name: &'static str,
    path: &'static [&'static str],
    read_only: bool,
    wrap: &'static str,
}

const SERVED: &[Served] = &[
    Served::new("init", &["init"], false),
    Served::new("bind", &["bind"], false),
    Served::new("get", &["get"], true),
    Served::new("exec_append", &["exec-append"], false),
    Served {
        wrap: "rows",
        ..Served::new("query", &["query"], true)
    },
    Served::new("gates_create", &["gates", "create"], false),
    // Showing a gate logs a `viewed` event: it writes.
    Served::new("gates_show", &["gates", "show"], false),
    Served::new("gates_wait", &["gates", "wait"], true),
    Served::new("agent_memory", &["agent", "memory"], true),
    Served::new("agent_remember", &["agent", "remember"], false),
    Served::new("agent_segment", &["agent", "segment"], false),
    Served::new("resume", &["resume"], false),
    Served::new("finish", &["finish"], false),
    Served {
        wrap: "events",
        ..Served::new("log_since", &["log"], true)
    },
];

impl Served {
    const fn new(name: &'static str, path: &'static [&'static str], read_only: bool) -> Self {
        Served {
            name,
            path,
            read_only,
            wrap: "result",
        }
    }
}

/// Arguments no tool takes: the server decides where the project is, who acts and how the
/// output is written; `log --follow` never ends, and `init --quiet` prints no JSON.
const NOT_SERVED: &[&str] = &[
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

/// How long `gates_wait` may block a call: by default, and at most.
const WAIT_DEFAULT: &str = "60s";
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

struct Server {
    tools: Vec<ToolSpec>,
    agent: Principal,
    /// The agent's bare name: what agent tools act on when no name is given.
    agent_name: String,
    /// The global options every call is made with: the project root resolved at start-up,
    /// the server's default run, the busy timeout.
    root: Option<PathBuf>,
    run: Option<String>,
    busy_timeout: u64,
}

/// Serves until the client closes stdin.
pub fn serve(args: &McpArgs, global: &Global, ctx: &Context) -> Result<()> {
    // `--agent NAME` or `--agent agent:NAME`: a principal of the agent kind either way, its
    // name normalised and checked as every principal's is.
    let given = Principal::parse(&args.agent, "--agent")?;
    let agent = if given.as_str().starts_with("agent:") {
        given
    } else {
        Principal::parse(&format!("agent:{}", given.as_str()), "--agent")?
    };
    let agent_name = agent
        .as_str()
        .strip_prefix("agent:")
        .unwrap_or(agent.as_str())
        .to_string();
    cmd::stdin_carries_protocol();
    // Calls come one after another to the same run: its connection is kept between them.
    crate::store::keep_connections();
    let server = Handler(Arc::new(Server {
        tools: tools(),
        agent,
        agent_name,
        root: ctx.root.clone(),
        run: ctx.run.clone(),
        busy_timeout: global.busy_timeout,
    }));
    // The runtime exists for this command alone: no other command starts one.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let (stdin, stdout) = rmcp::transport::io::stdio_pipes();
        let service = server
            .serve((request_limit::LimitedLines::new(stdin), stdout))
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

/// Every served tool, read off the command line's definition.
fn tools() -> Vec<ToolSpec> {
    use clap::CommandFactory;
    let root = Cli::command();
    SERVED
        .iter()
        .map(|served| {
            let mut params = Vec::new();
            let mut takes_principal = false;
            let mut command = &root;
            // The top level gives only --run (and for init, nothing: it makes the run).
            for arg in root.get_arguments() {
                if arg.get_id() == "run" && served.name != "init" {
                    params.push(param(arg, 0));
                }
            }
            let mut properties = Map::new();
            let mut required = Vec::new();
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
                    if NOT_SERVED.contains(&id) || arg.is_hide_set() || (!leaf && !arg.is_global_set()) {
                        continue;
                    }
                    let p = param(arg, level + 1);
                    if leaf && arg.is_required_set() && !defaults_to_agent(served, &p) {
                        required.push(Value::String(p.property.clone()));
                    }
                    properties.insert(p.property.clone(), schema(arg, &p, served));
                    params.push(p);
                }
            }
            for p in &params {
                if p.level == 0 {
                    properties.insert(
                        p.property.clone(),
                        json!({"type": "string", "description":
                            "The run: its id, directory or state.db (default: the server's --run or PROSE_RUN)"}),
                    );
                }
            }
            let mut input = Map::new();
            input.insert("type".into(), json!("object"));
            input.insert("properties".into(), Value::Object(properties));
            if !required.is_empty() {
                input.insert("required".into(), Value::Array(required));
            }
            input.insert("additionalProperties".into(), json!(false));
            let about = command
                .get_long_about()
                .or(command.get_about())
                .map(|a| a.to_string())
                .unwrap_or_default();
            let description = format!(
                "{about} (the command `prose-state {}`; the result is its --json output)",
                served.path.join(" ")
            );
            let mut annotations = ToolAnnotations::new().read_only(served.read_only);
            if !served.read_only {
                annotations = annotations.destructive(false);
            }
            let tool = Tool::new(served.name, description, Arc::new(input)).annotate(annotations);
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

fn param(arg: &clap::Arg, level: usize) -> Param {
    let id = arg.get_id().as_str();
    // `gates show/wait RUN GATE`: the run is the `run` property; the tool names the gate.
    let property = if id == "ids" { "gate" } else { id }.to_string();
    let parser = arg.get_value_parser().type_id();
    let kind = if !arg.get_action().takes_values() {
        Kind::Flag
    } else if matches!(arg.get_action(), clap::ArgAction::Append) && arg.get_long().is_some() {
        Kind::List
    } else if parser == TypeId::of::<i64>() || parser == TypeId::of::<u64>() {
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
    }
}

/// Agent tools act on the server's own agent unless another is named.
fn defaults_to_agent(served: &Served, p: &Param) -> bool {
    served.path[0] == "agent" && p.property == "name"
}

fn schema(arg: &clap::Arg, p: &Param, served: &Served) -> Value {
    let mut s = Map::new();
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
    if p.kind == Kind::List {
        s.insert("type".into(), json!("array"));
        s.insert("items".into(), item);
    } else if let Value::Object(item) = item {
        s.extend(item);
    }
    let mut help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
    if defaults_to_agent(served, p) {
        help.push_str(" (default: this server's agent)");
    }
    if served.name == "gates_wait" && p.property == "timeout" {
        help = format!(
            "How long to wait: a duration (30s, 5m) or a whole number of seconds (default \
             {WAIT_DEFAULT}, at most {}m); exit class still_pending when it runs out",
            WAIT_MAX_SECONDS / 60
        );
    }
    if p.property == "gate" {
        help = "The gate id".into();
    }
    if !help.is_empty() {
        s.insert("description".into(), Value::String(help));
    }
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|d| d.to_string_lossy().into_owned())
        .collect();
    if p.kind == Kind::List && !defaults.is_empty() {
        s.insert("default".into(), json!(defaults));
    } else if let [d] = defaults.as_slice() {
        let d = match p.kind {
            Kind::Integer => d.parse::<i64>().map_or(json!(d), Value::from),
            Kind::Number => d.parse::<f64>().map_or(json!(d), Value::from),
            _ => json!(d),
        };
        s.insert("default".into(), d);
    }
    Value::Object(s)
}

impl Server {
    /// The argv a call stands for: the server's global options, the subcommand, each option
    /// as `--long=value` (so that no value is ever read as an option), then `--` and the
    /// positionals in order.
    fn argv(&self, spec: &ToolSpec, args: &JsonObject) -> Result<Vec<String>> {
        for key in args.keys() {
            if !spec.params.iter().any(|p| &p.property == key) {
                return Err(usage(format!(
                    "unknown argument for tool {}: {}",
                    spec.served.name,
                    crate::error::shown(key)
                )));
            }
        }
        let numeric_wait;
        let args = if spec.served.name == "gates_wait" {
            numeric_wait = wait_timeout_in_words(args)?;
            &numeric_wait
        } else {
            args
        };
        let mut argv = vec!["prose-state".to_string(), "--json".to_string()];
        if let Some(root) = &self.root {
            argv.push(format!("--root={}", root.display()));
        }
        argv.push(format!("--busy-timeout={}", self.busy_timeout));
        let named = |p: &Param| args.get(&p.property).filter(|v| !v.is_null());
        match spec.params.iter().find(|p| p.level == 0).and_then(named) {
            Some(run) => argv.push(format!("--run={}", text(run, "run")?)),
            None => {
                if let Some(run) = self.run.as_ref().filter(|_| spec.served.name != "init") {
                    argv.push(format!("--run={run}"));
                }
            }
        }
        let mut positionals = Vec::new();
        for (level, name) in spec.served.path.iter().enumerate() {
            argv.push(name.to_string());
            for p in spec.params.iter().filter(|p| p.level == level + 1) {
                let value = named(p).cloned().or_else(|| {
                    defaults_to_agent(spec.served, p)
                        .then(|| Value::String(self.agent_name.clone()))
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
        if spec.served.name == "gates_wait" {
            let given = args.get("timeout").and_then(Value::as_str);
            let seconds = crate::model::parse_duration(given.unwrap_or(WAIT_DEFAULT))?;
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
        let positionals: Vec<String> = positionals.into_iter().flatten().collect();
        if !positionals.is_empty() {
            argv.push("--".into());
            argv.extend(positionals);
        }
        Ok(argv)
    }

    /// Runs one call: its argv parsed by clap, the command run as it runs on its own.
    fn call(&self, spec: &ToolSpec, args: &JsonObject) -> Result<Outcome> {
        let argv = self.argv(spec, args)?;
        let cli = {
            let mut parser = spec
                .parser
                .lock()
                .map_err(|_| anyhow::anyhow!("a call failed while parsing"))?;
            crate::parse::parse_with(&mut parser, argv.into_iter().map(Into::into).collect())
                .map_err(crate::error::usage)?
        };
        let ctx = Context::resolve(&cli.global);
        // A run the client names is a run id of this project (or its server), never a path.
        let client_run = spec
            .params
            .iter()
            .any(|p| p.level == 0 && args.get(&p.property).is_some_and(|v| !v.is_null()));
        let ctx = if client_run { ctx.run_ids_only() } else { ctx };
        if let crate::cli::Command::Log(a) = &cli.command {
            let mut events = Vec::new();
            let mut text = Vec::new();
            cmd::log::follow(a, &ctx, &mut |line| {
                crate::output::write_json(&mut text, &line)?;
                text.push(b'\n');
                events.push(serde_json::to_value(&line).map_err(std::io::Error::from)?);
                Ok(())
            })?;
            return Ok(Outcome {
                text: String::from_utf8_lossy(&text).into_owned(),
                value: Value::Array(events),
                code: Code::Ok,
                warnings: Vec::new(),
            });
        }
        cmd::dispatch(&cli.command, &ctx, &mut Json)
            .unwrap_or_else(|| Err(usage(format!("not a tool: {}", spec.served.name))))
    }
}

/// A value given to an option or positional, as its text.
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
        args.insert("timeout".into(), Value::String(format!("{seconds}s")));
    }
    Ok(args)
}

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
        Ok(Outcome {
            text: String::from_utf8_lossy(&text).into_owned(),
            value: serde_json::to_value(&out)?,
            code,
            warnings,
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

fn result(spec: &ToolSpec, outcome: Result<Outcome>) -> CallToolResult {
    match outcome {
        Ok(o) => {
            let structured = match o.value {
                Value::Object(_) => o.value,
                other => json!({ spec.served.wrap: other }),
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
            // The text is the command line's JSON, byte for byte.
            r.content = vec![ContentBlock::text(o.text.trim_end().to_string())];
            r.meta = Some(meta(o.code, &o.warnings));
            r
        }
        Err(e) => {
            let code = crate::error::code_of(&e).unwrap_or(Code::Error);
            let message = format!("{e:#}").replace(['\n', '\r'], " ");
            let mut r = CallToolResult::structured_error(json!({
                "error": message,
                "exit_code": code as u8,
                "class": class(code),
            }));
            r.meta = Some(meta(code, &[]));
            r
        }
    }
}

/// The server as rmcp holds it: shared with the threads its calls run on.
struct Handler(Arc<Server>);

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "prose-state",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(format!(
                "The durable state of an OpenProse run, acting as {}. Each tool is a \
                 prose-state command and returns the JSON it prints with --json; a failed call \
                 carries its exit class (usage, not_found, refused, busy, ...). Busy means \
                 nothing was written: retry. The `guide` command of prose-state (guide \
                 subagent) gives the protocol.",
                self.0.agent.as_str()
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

    /// The one request of our own: what an over-long request was replaced by (see
    /// [`request_limit`]), answered with an error naming the limit.
    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, ErrorData> {
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

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.0
            .tools
            .iter()
            .find(|t| t.tool.name == name)
            .map(|t| t.tool.clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(index) = self
            .0
            .tools
            .iter()
            .position(|t| t.tool.name == request.name)
        else {
            return Err(ErrorData::invalid_params(
                format!("no such tool: {}", request.name),
                None,
            ));
        };
        let args = request.arguments.unwrap_or_default();
        // The commands are blocking code, and the PostgreSQL client runs a runtime of its own:
        // each call runs on the blocking pool, never on the runtime's thread, so calls in
        // flight (a gate wait polls for minutes) do not hold one another up, and a call that
        // panics is answered with an error rather than never.
        let server = Arc::clone(&self.0);
        let outcome = tokio::task::spawn_blocking(move || {
            let spec = &server.tools[index];
            result(spec, server.call(spec, &args))
        })
        .await
        .map_err(|e| ErrorData::internal_error(format!("tool call failed: {e}"), None))?;
        Ok(outcome.into())
    }
}
