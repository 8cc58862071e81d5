//! `agent memory|remember|segment|list`: persistent agent memory in one of three scopes.

use crate::cli::{AgentArgs, AgentCommand};
use crate::error::{not_found, shown, usage};
use crate::model::{check_name, now};
use crate::output::{one_line, Render};
use crate::store::{AgentRow, AgentStore};
use anyhow::Result;
use serde::Serialize;
use std::io::{self, Read, Write};

fn check_agent(name: &str) -> Result<()> {
    check_name(name).map_err(|_| {
        usage(format!(
            "invalid agent name (a letter or _ first, then letters, digits, _ . -): {}",
            shown(name)
        ))
    })
}

/// An agent's memory, printed exactly as stored.
#[derive(Debug, Serialize)]
pub struct Memory {
    #[serde(flatten)]
    pub agent: AgentRow,
}

impl Render for Memory {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        w.write_all(self.agent.memory.unwrap_or_default().as_bytes())
    }
}

pub fn memory(name: &str, scope: &str, store: Option<&mut Box<dyn AgentStore>>) -> Result<Memory> {
    check_agent(name)?;
    match store.map(|s| s.agent(name)).transpose()?.flatten() {
        Some(a) if a.memory.is_some() => Ok(Memory { agent: a }),
        _ => Err(not_found(format!(
            "agent has no memory in {scope} scope: {}",
            shown(name)
        ))),
    }
}

#[derive(Debug, Serialize)]
pub struct Remembered {
    pub name: String,
    pub scope: String,
    pub bytes: usize,
    pub location: String,
}

impl Render for Remembered {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        writeln!(
            w,
            "Memory written: {} ({} scope, {} bytes, {})",
            self.name, self.scope, self.bytes, self.location
        )
    }
}

pub fn remember(
    name: &str,
    scope: &str,
    (mut input, from_stdin): (Box<dyn Read>, bool),
    location: &str,
    store: &mut dyn AgentStore,
) -> Result<Remembered> {
    check_agent(name)?;
    let mut bytes = Vec::new();
    input
        .read_to_end(&mut bytes)
        .map_err(|e| anyhow::Error::new(e).context("could not read the memory"))?;
    if bytes.is_empty() && from_stdin {
        return Err(usage(
            "no value given: stdin ended before any byte; give MEMORY, --file PATH or pipe it (an empty memory is MEMORY \"\")",
        ));
    }
    let memory = String::from_utf8(bytes).map_err(|e| {
        usage(format!(
            "memory is not valid UTF-8 (at byte {}); memory holds text",
            e.utf8_error().valid_up_to()
        ))
    })?;
    store.remember(name, scope, &memory, &now())?;
    Ok(Remembered {
        name: name.to_string(),
        scope: scope.to_string(),
        bytes: memory.len(),
        location: location.to_string(),
    })
}

#[derive(Debug, Serialize)]
pub struct SegmentAdded {
    pub name: String,
    pub scope: String,
    pub segment_number: i64,
}

impl Render for SegmentAdded {
    /// Just the number, so `N=$(prose-state agent segment ...)` works.
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        writeln!(w, "{}", self.segment_number)
    }
}

pub fn segment(
    name: &str,
    scope: &str,
    prompt: &str,
    summary: &str,
    store: &mut dyn AgentStore,
) -> Result<SegmentAdded> {
    check_agent(name)?;
    let segment_number = store.append_segment(name, scope, prompt, summary, &now())?;
    Ok(SegmentAdded {
        name: name.to_string(),
        scope: scope.to_string(),
        segment_number,
    })
}

/// An agent as listed: no memory text, its size.
#[derive(Debug, Serialize)]
pub struct AgentSummary {
    pub name: String,
    pub scope: Option<String>,
    pub segments: i64,
    pub memory_bytes: Option<usize>,
    pub updated_at: Option<String>,
}

impl From<AgentRow> for AgentSummary {
    fn from(a: AgentRow) -> Self {
        AgentSummary {
            memory_bytes: a.memory.as_ref().map(String::len),
            name: a.name,
            scope: a.scope,
            segments: a.segments,
            updated_at: a.updated_at,
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct AgentList(pub Vec<AgentSummary>);

impl Render for AgentList {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        if self.0.is_empty() {
            return writeln!(w, "no agents");
        }
        let header = ["AGENT", "SCOPE", "SEGMENTS", "MEMORY", "UPDATED"];
        super::table_of(w, &header, &self.0, |a| {
            vec![
                one_line(&a.name, 40),
                a.scope.clone().unwrap_or_default(),
                a.segments.to_string(),
                a.memory_bytes.map_or("none".into(), |b| format!("{b} B")),
                a.updated_at.clone().unwrap_or_default(),
            ]
        })
    }
}

pub fn list(store: Option<&mut Box<dyn AgentStore>>) -> Result<AgentList> {
    let rows = store.map(|s| s.agents()).transpose()?.unwrap_or_default();
    Ok(AgentList(
        rows.into_iter().map(AgentSummary::from).collect(),
    ))
}

crate::output::one_of!(
    /// What `agent` and its subcommands print.
    AgentOutput {
        Memory(Memory),
        List(AgentList),
        Remembered(Remembered),
        Segment(SegmentAdded),
    }
);

impl super::Run for AgentArgs {
    type Output = AgentOutput;
    fn run(&self, ctx: &crate::context::Context) -> Result<AgentOutput> {
        let writes = matches!(
            self.command,
            AgentCommand::Remember { .. } | AgentCommand::Segment { .. }
        );
        let scope = self.scope.column();
        let (mut store, location) = ctx.agent_store(&self.scope, self.home.as_deref(), writes)?;
        let opened = || anyhow::anyhow!("agents db was not opened");
        Ok(match &self.command {
            AgentCommand::Memory { name } => {
                AgentOutput::Memory(memory(name, scope, store.as_mut())?)
            }
            AgentCommand::List => AgentOutput::List(list(store.as_mut())?),
            AgentCommand::Remember { name, value, file } => {
                let input = super::value_source(ctx, value.as_deref(), file.as_deref())?;
                let store = store.as_deref_mut().ok_or_else(opened)?;
                AgentOutput::Remembered(remember(name, scope, input, &location, store)?)
            }
            AgentCommand::Segment {
                name,
                prompt,
                summary,
            } => {
                let store = store.as_deref_mut().ok_or_else(opened)?;
                AgentOutput::Segment(segment(name, scope, prompt, summary, store)?)
            }
        })
    }
}
