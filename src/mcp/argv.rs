//! A call's arguments turned back into its subcommand's argv: each option as `--long=value`,
//! the positionals after `--`, and the server's own options and bounds.

use super::served::{SEVERAL, SEVERAL_MAX, SUBAGENT_KINDS, WAIT_DEFAULT, WAIT_MAX_SECONDS};
use super::tools::{defaults_to_agent, paging, Kind, Param, ToolSpec};
use super::{pages, Role, Server};
use crate::error::usage;
use anyhow::Result;
use rmcp::model::JsonObject;
use serde_json::Value;

impl Server {
    /// The argv a call stands for: the server's global options, the subcommand, each option
    /// as `--long=value` (so that no value is ever read as an option), then `--` and the
    /// positionals in order.
    /// A `gates_wait` run as a task is not `bounded`: no default `timeout`, no 10-minute cap.
    pub(super) fn argv(
        &self,
        spec: &ToolSpec,
        args: &JsonObject,
        bounded: bool,
    ) -> Result<Vec<String>> {
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
        // A schema is given as itself: the server reads no file for it (`@FILE` is the
        // command line's).
        if spec.served.name == "gates_create" {
            if let Some(Value::String(s)) = args.get("response_schema") {
                if s.trim_start().starts_with('@') {
                    return Err(usage(
                        "response_schema is the schema's JSON itself: the server reads no file for it",
                    ));
                }
            }
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
                let Some(mut value) = value else {
                    if p.long.is_none() {
                        positionals.push(None);
                    }
                    continue;
                };
                // A schema passed as a JSON object (what a model writes) is its text.
                if p.property == "response_schema" && value.is_object() {
                    value = Value::String(value.to_string());
                }
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
pub(super) fn text(value: &Value, property: &str) -> Result<String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        _ => Err(usage(format!("{property} must be a string or a number"))),
    }
}
