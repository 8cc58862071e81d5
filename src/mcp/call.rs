//! A tool call run: its argv parsed by clap, the command run as it runs on its own (the log
//! and a value read a page at a time), and its outcome as the tool's result.

use super::served::Page;
use super::tools::{paging, ToolSpec};
use super::{pages, Role, Server};
use crate::cli::Cli;
use crate::cmd::outcome::{Json, Outcome};
use crate::cmd::{self, Run};
use crate::context::{Context, Stop};
use crate::error::{usage, Code};
use anyhow::Result;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, MetaObject};
use serde_json::{json, Map, Value};
use std::sync::Arc;

impl Server {
    /// Runs one call: its argv parsed by clap, the command run as it runs on its own.
    pub(super) fn call(&self, spec: &ToolSpec, args: &JsonObject) -> Result<Outcome> {
        self.call_with(spec, args, true, None)
    }

    /// A call, `bounded` as a tool call is or not (a `gates_wait` task, see [`tasks`]), its
    /// wait stopped by `stop` if given.
    pub(super) fn call_with(
        &self,
        spec: &ToolSpec,
        args: &JsonObject,
        bounded: bool,
        stop: Option<Arc<Stop>>,
    ) -> Result<Outcome> {
        self.call_parsed(spec, args, bounded, stop, |_| {}).map_err(|e| {
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
    pub(super) fn parsed(&self, spec: &ToolSpec, args: &JsonObject, bounded: bool) -> Result<Cli> {
        let argv = self.argv(spec, args, bounded)?;
        let mut parser = spec
            .parser
            .lock()
            .map_err(|_| anyhow::anyhow!("a call failed while parsing"))?;
        crate::parse::parse_with(&mut parser, argv.into_iter().map(Into::into).collect())
            .map_err(crate::error::usage)
    }

    fn call_parsed(
        &self,
        spec: &ToolSpec,
        args: &JsonObject,
        bounded: bool,
        stop: Option<Arc<Stop>>,
        adjust: impl FnOnce(&mut Cli),
    ) -> Result<Outcome> {
        let mut cli = self.parsed(spec, args, bounded)?;
        adjust(&mut cli);
        let ctx = Context::resolve_in(&cli.global, self.wiring)
            .stdin_is_protocol()
            .stoppable_by(stop);
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
pub(super) fn count_arg(args: &JsonObject, key: &str, schema: &Value) -> Result<u64> {
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

pub(super) fn result(outcome: Result<Outcome>) -> CallToolResult {
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
