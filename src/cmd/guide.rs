//! `guide`: the state protocol for each caller, in Markdown, built into the binary so that it
//! always describes the commands of the build that prints it.

use crate::cli::{AgentScope, GuideArgs, GuideFor};
use crate::context::Context;
use crate::output::Render;
use anyhow::Result;
use serde::Serialize;
use std::io::{self, Write};

const VM: &str = include_str!("../../guide/vm.md");
const SUBAGENT: &str = include_str!("../../guide/subagent.md");
const APPROVER: &str = include_str!("../../guide/approver.md");
/// What the VM's guide says first through MCP: how its command lines are this server's tools.
const VM_MCP: &str = include_str!("../../guide/vm-mcp.md");
/// The subagent's block for a subagent on MCP: its steps as its session's tool calls.
const SUBAGENT_MCP: &str = include_str!("../../guide/subagent-mcp.md");

/// How a guide writes its steps: as command lines, or as the tool calls of an MCP session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Shell,
    /// `pinned`: the session acts in one execution's scope, and its tools take none.
    Mcp {
        pinned: bool,
    },
}

#[derive(Debug, Serialize)]
pub struct Guide {
    pub guide: &'static str,
    pub version: &'static str,
    pub markdown: String,
}

impl Render for Guide {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        w.write_all(self.markdown.as_bytes())
    }
}

impl super::Run for GuideArgs {
    type Output = Guide;
    fn run(&self, ctx: &Context) -> Result<Guide> {
        self.render(ctx, Flavor::Shell)
    }
}

impl GuideArgs {
    /// The guide, filled in, with its steps written for `flavor`.
    pub fn render(&self, ctx: &Context, flavor: Flavor) -> Result<Guide> {
        let vm_mcp;
        let (guide, text) = match (self.who, flavor) {
            (GuideFor::Vm, Flavor::Shell) => ("vm", VM),
            (GuideFor::Vm, Flavor::Mcp { .. }) => {
                vm_mcp = format!("{VM_MCP}{VM}");
                ("vm", vm_mcp.as_str())
            }
            (GuideFor::Subagent, Flavor::Shell) => ("subagent", SUBAGENT),
            (GuideFor::Subagent, Flavor::Mcp { .. }) => ("subagent", SUBAGENT_MCP),
            (GuideFor::Approver, _) => ("approver", APPROVER),
        };
        // The subagent's block comes filled in with what the VM knows: the run and the
        // execution it spawned the subagent for. What is not given stays a shell variable.
        let run = ctx.run.as_deref().map(shell_word);
        let (scope, mut place) = match self.execution_id {
            Some(id) => (format!(" --execution-id {id}"), format!("execution {id}")),
            None => (String::new(), "the root scope".to_string()),
        };
        // Where its binding lands: the language's frame around that execution (an `if` or a
        // loop's record is none: a binding made there lives in the frame around it).
        let mut lands = place.clone();
        for name in self.name.iter().chain(&self.agent) {
            crate::model::check_name(name)?;
        }
        // A binding some gate answers into, from where the subagent would write it: only that
        // gate's decision writes it there (its `bind` would be refused, exit 4), so no guide
        // tells a subagent to write it.
        // (A guide is text: a run it cannot open is only filled in.)
        let mut store = match (self.who, ctx.run.as_deref()) {
            (GuideFor::Subagent, Some(run)) => ctx.open_run(Some(run)).ok().map(|(_, s)| s),
            _ => None,
        };
        if let (Some(store), Some(id)) = (store.as_mut(), self.execution_id) {
            if store.execution_exists(id)? {
                let frame = crate::store::frame_of(store.as_mut(), id, self.name.as_deref())?;
                if frame != Some(id) {
                    lands = match frame {
                        Some(f) => format!("the frame of execution {f}"),
                        None => "the root scope".to_string(),
                    };
                    // Said of the binding it is given: a branch's own `let`s stay in the
                    // branch, where its named result lands at the parallel.
                    let what = match self.name.as_deref() {
                        Some(n) => format!("{n} bound there"),
                        None => "what you bind there".to_string(),
                    };
                    place = format!("execution {id} ({what} lands in {lands})");
                }
            }
        }
        if let (Some(name), Some(mut store)) = (self.name.as_deref(), store) {
            let naming = store.naming(name)?;
            if !naming.response.is_empty() {
                let mut passed: Vec<Option<i64>> = match self.execution_id {
                    Some(id) => store.scope_chain(id)?.into_iter().map(Some).collect(),
                    None => Vec::new(),
                };
                passed.push(None);
                if let Some((gate, _)) = naming.response.iter().find(|(_, s)| passed.contains(s)) {
                    return Err(crate::error::refused(format!(
                        "{} is gate {}'s answer binding from {place}: only its decision writes it (a subagent's bind of it is refused, exit 4); give the subagent another binding",
                        crate::error::shown(name),
                        crate::error::shown(gate)
                    )));
                }
            }
        }
        // The persistent agent's part is there only for a persistent agent.
        let text = match (text.split_once("{{#agent}}\n"), &self.agent) {
            (Some((before, rest)), agent) => {
                let (part, after) = rest.split_once("{{/agent}}\n").unwrap_or((rest, ""));
                let part = if agent.is_some() { part } else { "" };
                format!("{before}{part}{after}")
            }
            (None, _) => text.to_string(),
        };
        // Where the memory is, on this project's backend: a team's project agents are on its
        // PostgreSQL server.
        let (agent_scope, agent_where) = match &self.scope {
            AgentScope::Execution => (String::new(), "the run".to_string()),
            AgentScope::Project if ctx.uses_postgres() => (
                " --scope project".into(),
                "the project, on its PostgreSQL server (it outlives the run)".into(),
            ),
            AgentScope::Project => (
                " --scope project".into(),
                "the project (`.prose/agents.db`; it outlives the run)".into(),
            ),
            AgentScope::User => (
                " --scope user".into(),
                "your user's home (`~/.prose/agents.db`; it outlives the project)".into(),
            ),
            AgentScope::Path(path) => (
                format!(" --scope {}", shell_word(path)),
                format!("`{path}/agents.db` in the project (it outlives the run)"),
            ),
        };
        let json = |s: &str| serde_json::Value::from(s).to_string();
        let name = self.name.as_deref();
        let agent = self
            .agent
            .as_deref()
            .map_or("\"$AGENT\"".into(), shell_word);
        let pinned = matches!(flavor, Flavor::Mcp { pinned: true });
        let scope_json = match (self.execution_id, pinned) {
            (Some(id), false) => format!(", \"execution_id\": {id}"),
            _ => String::new(),
        };
        // A subagent's MCP session keeps its agent's memory where the session was started
        // to (`mcp --scope`): its agent tools take no scope.
        let agent_scope_json = match &self.scope {
            _ if matches!(flavor, Flavor::Mcp { .. }) => String::new(),
            AgentScope::Execution => String::new(),
            other => format!(", \"scope\": {}", json(other.as_str())),
        };
        let markdown = text
            .replace(
                "{{pinned}}",
                if pinned {
                    " (this session's own: its tools act there and take no `execution_id`)"
                } else {
                    ""
                },
            )
            .replace(
                "{{assign_note}}",
                if self.assign {
                    " (an assignment: it is written where the program declared it)"
                } else {
                    ""
                },
            )
            .replace(
                "{{assign_json}}",
                if self.assign {
                    ", \"assign\": true"
                } else {
                    ""
                },
            )
            .replace("{{assign}}", if self.assign { " --assign" } else { "" })
            .replace(
                "{{kind_json}}",
                &self
                    .kind
                    .map(|k| format!(", \"kind\": \"{}\"", k.as_str()))
                    .unwrap_or_default(),
            )
            .replace(
                "{{kind}}",
                &self
                    .kind
                    .map(|k| format!(" --kind {}", k.as_str()))
                    .unwrap_or_default(),
            )
            .replace("{{scope_json}}", &scope_json)
            .replace(
                "{{agent_scope_first}}",
                agent_scope_json.trim_start_matches(", "),
            )
            .replace("{{agent_scope_json}}", &agent_scope_json)
            .replace("{{name_json}}", &name.map_or(json("NAME"), json))
            .replace("{{agent_scope}}", &agent_scope)
            .replace("{{agent_where}}", &agent_where)
            .replace("{{constructs}}", &crate::language::guide_table())
            .replace("{{version}}", env!("CARGO_PKG_VERSION"))
            .replace(
                "{{run}}",
                run.as_deref().unwrap_or(match flavor {
                    Flavor::Shell => "\"$PROSE_RUN\"",
                    // A session without a run names it in each call.
                    Flavor::Mcp { .. } => {
                        "RUN_ID (the run the VM gave you: pass it as `run` in each call)"
                    }
                }),
            )
            .replace("{{scope}}", &scope)
            .replace("{{where}}", &place)
            .replace("{{lands}}", &lands)
            .replace(
                "{{name_line}}",
                &name.map_or(
                    "none named (your statement binds nothing; below, $NAME stands for a name the VM gives you)".into(),
                    shell_word,
                ),
            )
            .replace("{{name}}", &name.map_or("\"$NAME\"".into(), shell_word))
            .replace("{{agent}}", &agent);
        Ok(Guide {
            guide,
            version: env!("CARGO_PKG_VERSION"),
            markdown,
        })
    }
}

/// A run id as one shell word: ids are `[A-Za-z0-9._-]`, but a path given as --run may hold
/// anything, so anything else is single-quoted.
pub fn shell_word(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c))
    {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}
