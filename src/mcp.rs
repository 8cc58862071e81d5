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
//!
//! Here, the server and its protocol handler; `served` says which commands are tools, for
//! which roles, `tools` reads their schemas off clap, `argv` turns a call back into argv,
//! and `call` runs it and gives its result.

mod argv;
mod call;
mod dialect;
mod pages;
mod prompts;
mod request_limit;
mod resources;
mod schemas;
mod served;
mod tasks;
mod tasks_2025;
mod tools;
mod wait;

pub(crate) use crate::cli::McpRole as Role;
pub use call::class;

// What the other submodules (tasks, wait, resources, prompts) reach as `super::...`.
use crate::cmd::outcome::Outcome;
use argv::text;
use call::{count_arg, result};
use served::{SEVERAL, SUBAGENT_KINDS};
use tools::{tools, ToolSpec};

use crate::cli::{Global, McpArgs};
use crate::context::Context;
use crate::error::usage;
use crate::model::Principal;
use anyhow::Result;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;

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
    /// The session's resource subscriptions ([`resources`]).
    subscriptions: resources::Subscriptions,
    /// What the process carries to the stores its calls open: made keeping connections
    /// (`Context::resolve_keeping`), since calls come one after another to the same runs.
    wiring: &'static crate::store::Wiring,
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
        subscriptions: Default::default(),
        wiring: ctx.opts.wiring,
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
        resources::unsubscribe(&self.0, &request.uri);
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
