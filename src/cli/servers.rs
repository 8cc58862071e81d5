//! The two servers, `mcp` (an agent's tools) and `serve` (the approval page), and `guide`,
//! the protocol written out for whoever uses them.

use super::agent::AgentScope;
use super::at_least;
use super::state::Kind;
use clap::{Args, ValueEnum};

#[derive(Debug, Args)]
pub struct McpArgs {
    /// The agent this server acts for: every call is made as the principal agent:NAME.
    /// Without it a VM session acts as agent:vm, and a subagent session is anonymous
    /// (agent:subagent), with no agent memory tools
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// Where the session's agent keeps its memory, as the program's `persist:` says:
    /// execution (persist: true, kept with the run), project, user, or a path (PATH/agents.db
    /// under the project root). The agent tools' default (a subagent session's only scope)
    #[arg(long, value_parser = AgentScope::parse, value_name = "SCOPE", requires = "agent")]
    pub scope: Option<AgentScope>,
    /// The role the session plays, fixed for its life (required): vm (the VM's tools) or
    /// subagent (read, bind in its scope, its own agent's memory; no finish, init,
    /// exec_append or gates_create)
    #[arg(long, value_enum, value_name = "ROLE")]
    pub role: Option<McpRole>,
    /// A subagent session's execution: it binds and reads in this execution's scope only
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = at_least(1))]
    pub execution_id: Option<i64>,
}

words! {
    /// The roles an MCP session may play.
    McpRole {
        /// The orchestrating VM: every served tool
        Vm => "vm",
        /// A subagent: read, bind in its scope, its own agent's memory and segments
        Subagent => "subagent",
    }
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address and port to listen on (port 0: any free port, printed at start)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7433")]
    pub listen: String,
    /// Allow an address other than loopback without TLS: tokens and sessions then cross
    /// the network in clear (a warning is printed)
    #[arg(long, conflicts_with = "tls_cert")]
    pub insecure_http: bool,
    /// Serve HTTPS with this certificate chain (PEM); needs --tls-key
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The certificate's private key (PEM); needs --tls-cert
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Print the public key this server signs decisions with (made on first use) and exit
    #[arg(long)]
    pub show_key: bool,
    /// Connections served at once; the next waits until one closes
    #[arg(long, value_name = "N", default_value_t = 256, env = "PROSE_SERVE_MAX_CONNECTIONS",
          value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub max_connections: u32,
    /// Seconds a client has to send a request's headers (and to finish a TLS handshake)
    /// before its connection is closed; also how long an idle connection is kept
    #[arg(long, value_name = "SECONDS", default_value_t = 10, env = "PROSE_SERVE_HEADER_TIMEOUT",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub header_timeout: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GuideFor {
    /// The orchestrating VM: every moment of a program, in prose-state commands
    Vm,
    /// The block to paste into a subagent's prompt (filled in with --run and --execution-id)
    Subagent,
    /// A person who finds, reads and decides gates
    Approver,
}

#[derive(Debug, Args)]
pub struct GuideArgs {
    /// Whose guide
    #[arg(value_enum, default_value_t = GuideFor::Vm)]
    pub who: GuideFor,
    /// The execution the subagent works in (fills in its guide)
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = at_least(1))]
    pub execution_id: Option<i64>,
    /// The binding the subagent writes (fills in its guide)
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// The binding is an assignment (`x = ...`): written where the program declared it
    #[arg(long, requires = "name")]
    pub assign: bool,
    /// The binding's kind, as the statement says: `output` for `output x = ...`
    #[arg(long, value_enum, value_name = "KIND", requires = "name")]
    pub kind: Option<Kind>,
    /// The persistent agent the subagent is (fills in its guide)
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// Where that agent's memory lives: execution (persist: true), project, user, or a path
    #[arg(long, value_parser = AgentScope::parse, default_value_t = AgentScope::Execution, requires = "agent")]
    pub scope: AgentScope,
}
