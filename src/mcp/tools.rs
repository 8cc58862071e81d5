//! A session's tools, read off the command line's definition: each one's arguments, its
//! input schema, and the paging arguments the server adds.

use super::served::{
    Page, Served, DESCRIBED, NOT_SERVED, SERVED, SEVERAL, SEVERAL_MAX, SUBAGENT_KINDS,
    WAIT_DEFAULT, WAIT_MAX_SECONDS,
};
use super::{pages, schemas, Role};
use crate::cli::Cli;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{json, Map, Value};
use std::any::TypeId;
use std::sync::Arc;

/// One argument of a tool: its property name, and how it goes back into argv.
#[derive(Clone)]
pub(super) struct Param {
    pub(super) property: String,
    /// `--long`, or None for a positional.
    pub(super) long: Option<String>,
    pub(super) kind: Kind,
    /// Which command of the path it belongs to (options are placed right after its name).
    pub(super) level: usize,
    /// Not offered to this session: the client cannot give it (a subagent's pinned run and
    /// execution, its agent's name, the home of user-scope memory).
    pub(super) hidden: bool,
}

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Kind {
    Flag,
    Integer,
    Number,
    Text,
    List,
}

/// A served tool, as listed, and how its calls become argv.
pub(super) struct ToolSpec {
    pub(super) served: &'static Served,
    pub(super) tool: Tool,
    pub(super) params: Vec<Param>,
    /// Whether the subcommand takes `--as`: then the server's agent is passed.
    pub(super) takes_principal: bool,
    /// The definition its argv is parsed with, built once.
    pub(super) parser: std::sync::Mutex<clap::Command>,
}

/// The tools of a session of this role, read off the command line's definition.
pub(super) fn tools(
    role: Role,
    run_pinned: bool,
    execution_pinned: bool,
    anonymous: bool,
) -> Vec<ToolSpec> {
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
pub(super) fn paging(served: &Served) -> Vec<(&'static str, Value)> {
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
pub(super) fn defaults_to_agent(served: &Served, p: &Param) -> bool {
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
