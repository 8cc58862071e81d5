//! The guides as MCP prompts. A prompt is the `guide` command's own text, rendered by that
//! command (its argv built here and parsed by its parser, as a tool call is), with what the
//! session knows filled in: its run, its execution, its agent.

use super::pages::PROMPT_BYTES;
use super::{Role, Server, SUBAGENT_KINDS};
use crate::cmd::guide::Flavor;
use rmcp::model::{GetPromptResult, Prompt, PromptArgument, PromptMessage, Role as Speaker};
use rmcp::ErrorData;
use serde_json::{Map, Value};

/// Each guide, and the roles whose sessions list it: a VM hands the subagent's guide to the
/// subagents it starts and the approver's to a person; a subagent needs only its own.
const GUIDES: &[(&str, &[Role], &str)] = &[
    ("vm", &[Role::Vm], "The VM's protocol (the `guide vm` text): how each construct of a program is recorded, resumed and finished, opened by how its command lines map to this server's tools"),
    ("subagent", &[Role::Vm, Role::Subagent], "The block a subagent follows: where it writes its output and its memory, filled in with the run, execution, binding and agent; as the tool calls of a subagent's own MCP session (via mcp, the default in a subagent session) or as command lines for a subagent with a shell (via shell, the default in a VM session)"),
    ("approver", &[Role::Vm], "For the person who decides gates: how to list, read and approve or reject them (outside MCP: no tool decides a gate)"),
];

fn argument(name: &str, description: &str) -> PromptArgument {
    PromptArgument::new(name)
        .with_description(description)
        .with_required(false)
}

pub fn list(role: Role) -> Vec<Prompt> {
    GUIDES
        .iter()
        .filter(|(_, roles, _)| roles.contains(&role))
        .map(|(name, _, about)| {
            let mut args = vec![argument("run", "The run id (default: the session's run)")];
            if *name == "subagent" {
                args.push(argument("execution_id", "The execution the subagent works in (default: the session's)"));
                args.push(argument("name", "The binding the subagent writes"));
                args.push(argument("assign", "true: the binding is an assignment (`x = ...`), written where the program declared it"));
                args.push(argument("kind", "The binding's kind: output for `output x = ...` (let or output)"));
                args.push(argument("agent", "The persistent agent the subagent is (default: a subagent session's own agent)"));
                args.push(argument("scope", "Where that agent's memory lives, as the program's persist: says: execution (persist: true), project, user, or a path (default: the session's --scope, else execution)"));
                args.push(argument("via", "How the subagent reaches its state: mcp (its own subagent session's tools) or shell (command lines)"));
            }
            args.push(argument(
                "offset",
                &format!("Where to start, in bytes: a guide comes in pages of at most {PROMPT_BYTES} bytes"),
            ));
            Prompt::new(*name, Some((*about).to_string()), Some(args))
        })
        .collect()
}

fn invalid(message: String) -> ErrorData {
    ErrorData::invalid_params(message, None)
}

pub fn get(
    server: &Server,
    name: &str,
    args: &Map<String, Value>,
) -> Result<GetPromptResult, ErrorData> {
    // The arguments a prompt takes are the ones it is listed with.
    let Some(prompt) = list(server.role).into_iter().find(|p| p.name == name) else {
        return Err(invalid(format!(
            "no such prompt: {}",
            crate::error::shown(name)
        )));
    };
    let allowed = prompt.arguments.unwrap_or_default();
    for key in args.keys() {
        if !allowed.iter().any(|a| a.name == *key) {
            return Err(invalid(format!(
                "unknown argument for prompt {name}: {}",
                crate::error::shown(key)
            )));
        }
    }
    let given = |key: &str| -> Result<Option<String>, ErrorData> {
        match args.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(_) => Err(invalid(format!("{key} must be a string"))),
        }
    };
    let mut argv = vec!["prose-state".to_string(), "--json".to_string()];
    if let Some(root) = &server.root {
        argv.push(format!("--root={}", root.display()));
    }
    // A subagent session's own run and execution are its, whatever is asked.
    let pinned_run = server.pinned_run();
    let run = pinned_run
        .clone()
        .or(given("run")?)
        .or_else(|| server.session_run());
    argv.extend(run.map(|run| format!("--run={run}")));
    argv.push("guide".into());
    argv.push(name.into());
    if name == "subagent" {
        // A session pinned to an execution is that execution's: naming another is refused,
        // never silently replaced.
        let asked = given("execution_id")?;
        if let (Some(mine), Some(asked)) = (server.execution_id, &asked) {
            if asked.trim() != mine.to_string() {
                return Err(invalid(format!(
                    "execution_id is this subagent session's own ({mine}): the prompt cannot name another"
                )));
            }
        }
        let execution = server.execution_id.map(|id| id.to_string()).or(asked);
        argv.extend(execution.map(|id| format!("--execution-id={id}")));
        argv.extend(given("name")?.map(|binding| format!("--name={binding}")));
        if let Some(kind) = given("kind")? {
            if !SUBAGENT_KINDS.contains(&kind.as_str()) {
                return Err(invalid(format!(
                    "kind is let or output (a subagent's): {}",
                    crate::error::shown(&kind)
                )));
            }
            argv.push(format!("--kind={kind}"));
        }
        match args.get("assign") {
            None | Some(Value::Null) | Some(Value::Bool(false)) => {}
            Some(Value::Bool(true)) => argv.push("--assign".into()),
            Some(Value::String(s)) if s == "true" => argv.push("--assign".into()),
            Some(Value::String(s)) if s == "false" || s.is_empty() => {}
            Some(_) => return Err(invalid("assign must be true or false".into())),
        }
        // A subagent session is its own agent (none when anonymous), kept where the session
        // keeps it; a VM names the agent and its scope.
        if server.role == Role::Subagent {
            let own = [
                (
                    "agent",
                    (!server.anonymous).then(|| server.agent_name.clone()),
                ),
                (
                    "scope",
                    server.scope.as_ref().map(|s| s.as_str().to_string()),
                ),
            ];
            for (key, mine) in own {
                if let Some(asked) = given(key)? {
                    if mine.as_deref() != Some(asked.as_str()) {
                        return Err(invalid(format!(
                            "{key} is this subagent session's own ({}): the prompt cannot name another",
                            mine.as_deref().unwrap_or("none")
                        )));
                    }
                }
            }
        }
        let (agent, scope) = match server.role {
            Role::Subagent if server.anonymous => (None, None),
            Role::Subagent => (
                Some(server.agent_name.clone()),
                server.scope.as_ref().map(|s| s.as_str().to_string()),
            ),
            Role::Vm => (given("agent")?, given("scope")?),
        };
        if scope.is_some() && agent.is_none() {
            return Err(invalid(
                "scope is where a persistent agent's memory lives: give agent too".into(),
            ));
        }
        argv.extend(agent.map(|agent| format!("--agent={agent}")));
        argv.extend(scope.map(|scope| format!("--scope={scope}")));
    }
    let offset: usize = match given("offset")? {
        None => 0,
        Some(o) => o.parse().map_err(|_| {
            invalid(format!(
                "offset must be a whole number of bytes: {}",
                crate::error::shown(&o)
            ))
        })?,
    };
    let cli = {
        let mut parser = crate::parse::command_for("guide")
            .ok_or_else(|| ErrorData::internal_error("no guide command", None))?;
        crate::parse::parse_with(&mut parser, argv.into_iter().map(Into::into).collect())
            .map_err(invalid)?
    };
    let crate::cli::Command::Guide(guide) = &cli.command else {
        return Err(ErrorData::internal_error("not the guide command", None));
    };
    // A run the client names is a run id, never a path (as for the tools).
    let ctx = crate::context::Context::resolve_in(&cli.global, server.wiring).stdin_is_protocol();
    let ctx = if pinned_run.is_none() && given("run")?.is_some() {
        let ctx = ctx.run_ids_only();
        // A run the client names must be one: the guide would otherwise fill in a run that
        // does not exist.
        ctx.the_run()
            .map_err(|e| invalid(format!("run: {e:#}").replace(['\n', '\r'], " ")))?;
        ctx
    } else {
        ctx
    };
    // Through MCP the VM's guide says how its lines are this server's tools; a subagent's
    // block is written for an MCP session or for a shell, as asked.
    let flavor = match (name, given("via")?.as_deref(), server.role) {
        ("vm", _, _) => Flavor::Mcp { pinned: false },
        ("subagent", Some("mcp"), _) | ("subagent", None, Role::Subagent) => Flavor::Mcp {
            pinned: guide.execution_id.is_some(),
        },
        ("subagent", Some("shell") | None, _) => Flavor::Shell,
        ("subagent", Some(other), _) => {
            return Err(invalid(format!(
                "via is mcp or shell: {}",
                crate::error::shown(other)
            )))
        }
        _ => Flavor::Shell,
    };
    let markdown = guide
        .render(&ctx, flavor)
        .map_err(|e| invalid(format!("{e:#}").replace(['\n', '\r'], " ")))?
        .markdown;
    let (text, note) = page(&markdown, offset);
    let mut result = GetPromptResult::new(vec![PromptMessage::new_text(Speaker::User, text)]);
    result.description = Some(note);
    Ok(result)
}

/// One page of a guide, from `offset`, cut on a line's end where it can be, and a line
/// saying where it stands.
fn page(markdown: &str, offset: usize) -> (String, String) {
    let total = markdown.len();
    let start = offset.min(total);
    // Back to a character's start, should the offset fall inside one.
    let start = (0..=start)
        .rev()
        .find(|&i| markdown.is_char_boundary(i))
        .unwrap_or(0);
    let rest = &markdown[start..];
    if rest.len() <= PROMPT_BYTES {
        return (
            rest.to_string(),
            format!("bytes {start}-{total} of {total}: the whole guide from here"),
        );
    }
    let mut end = PROMPT_BYTES;
    while !rest.is_char_boundary(end) {
        end -= 1;
    }
    if let Some(nl) = rest[..end].rfind('\n') {
        end = nl + 1;
    }
    let next = start + end;
    let mut text = rest[..end].to_string();
    let note = format!(
        "bytes {start}-{next} of {total}: cut; get this prompt again with offset {next} for the rest"
    );
    text.push_str(&format!("\n[{note}]\n"));
    (text, note)
}
