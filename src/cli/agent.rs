//! Persistent agents: where an agent's memory lives (`--scope`), and `agent`'s subcommands.

use clap::{Args, Subcommand};
use std::path::PathBuf;

/// Where a persistent agent's memory lives: the language's `persist:` values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentScope {
    /// The run's state.db (needs --run): `persist: true`
    Execution,
    /// <root>/.prose/agents.db (or the project's PostgreSQL server): `persist: project`
    Project,
    /// ~/.prose/agents.db (PROSE_HOME overrides the home directory): `persist: user`
    User,
    /// `persist: "PATH"`: PATH/agents.db under the project root. The path is relative, has a
    /// `/`, and never leaves the root (no `..`); kept as given, without a trailing `/`.
    Path(String),
}

impl AgentScope {
    /// The word, or the path, as `--scope` takes it.
    pub fn as_str(&self) -> &str {
        match self {
            AgentScope::Execution => "execution",
            AgentScope::Project => "project",
            AgentScope::User => "user",
            AgentScope::Path(path) => path,
        }
    }

    /// The `scope` column's value: `custom` for a path, as the spec's schema has it.
    pub fn column(&self) -> &'static str {
        match self {
            AgentScope::Execution => "execution",
            AgentScope::Project => "project",
            AgentScope::User => "user",
            AgentScope::Path(_) => "custom",
        }
    }

    /// `--scope`'s value: execution, project, user, or a path (see [`AgentScope::Path`]).
    pub fn parse(value: &str) -> std::result::Result<Self, String> {
        Ok(match value {
            "execution" => AgentScope::Execution,
            "project" => AgentScope::Project,
            "user" => AgentScope::User,
            path if path.contains('/') => {
                let bad = |why: &str| {
                    Err(format!(
                        "{why}: {} (a path is relative to the project root, as `persist: \
                         \".prose/custom/agent/\"` gives it)",
                        crate::error::shown(path)
                    ))
                };
                if path.chars().any(char::is_control) {
                    return bad("a path has no control character");
                }
                let p = std::path::Path::new(path);
                if p.is_absolute() {
                    return bad("a scope's path is relative to the project root");
                }
                if p.components().any(|c| {
                    !matches!(
                        c,
                        std::path::Component::Normal(_) | std::path::Component::CurDir
                    )
                }) {
                    return bad("a scope's path stays inside the project root (no `..`)");
                }
                if !p
                    .components()
                    .any(|c| matches!(c, std::path::Component::Normal(_)))
                {
                    return bad("a scope's path names a directory");
                }
                AgentScope::Path(path.trim_end_matches('/').to_string())
            }
            other => {
                return Err(format!(
                    "scope is execution, project, user, or a path with a `/`: {}",
                    crate::error::shown(other)
                ))
            }
        })
    }
}

impl std::fmt::Display for AgentScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Where the agent's memory lives: execution (persist: true), project, user, or a path
    /// (persist: "PATH": PATH/agents.db under the project root)
    #[arg(long, value_parser = AgentScope::parse, default_value_t = AgentScope::Execution, global = true)]
    pub scope: AgentScope,

    /// The home directory for user scope [default: $HOME]
    #[arg(
        long,
        env = "PROSE_HOME",
        value_name = "DIR",
        global = true,
        hide_env_values = true
    )]
    pub home: Option<PathBuf>,

    #[command(subcommand)]
    pub command: AgentCommand,
}

#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Print an agent's memory (exit 3 if it has none)
    Memory {
        /// Agent name
        name: String,
    },
    /// Replace an agent's memory: VALUE, `-` or piped stdin, or --file
    Remember {
        /// Agent name
        name: String,
        /// The new memory; `-`, or nothing with piped input, reads stdin
        #[arg(conflicts_with = "file")]
        value: Option<String>,
        /// Read the memory from this file
        #[arg(long, value_name = "PATH")]
        file: Option<PathBuf>,
    },
    /// Append a segment (one invocation's record) and print its number
    Segment {
        /// Agent name
        name: String,
        /// The prompt the agent was given
        #[arg(long, value_name = "TEXT")]
        prompt: String,
        /// What it did
        #[arg(long, value_name = "TEXT")]
        summary: String,
    },
    /// List the agents in the scope
    List,
}
