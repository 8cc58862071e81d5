//! `guide`: the state protocol for each caller, in Markdown, built into the binary so that it
//! always describes the commands of the build that prints it.

use crate::cli::{GuideArgs, GuideFor};
use crate::context::Context;
use crate::output::Render;
use anyhow::Result;
use serde::Serialize;
use std::io::{self, Write};

const VM: &str = include_str!("../../guide/vm.md");
const SUBAGENT: &str = include_str!("../../guide/subagent.md");
const APPROVER: &str = include_str!("../../guide/approver.md");

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
        let (guide, text) = match self.who {
            GuideFor::Vm => ("vm", VM),
            GuideFor::Subagent => ("subagent", SUBAGENT),
            GuideFor::Approver => ("approver", APPROVER),
        };
        // The subagent's block comes filled in with what the VM knows: the run and the
        // execution it spawned the subagent for. What is not given stays a shell variable.
        let run = ctx.run.as_deref().map(shell_word);
        let execution = self.execution_id.map(|id| id.to_string());
        let markdown = text
            .replace("{{version}}", env!("CARGO_PKG_VERSION"))
            .replace("{{run}}", run.as_deref().unwrap_or("\"$PROSE_RUN\""))
            .replace(
                "{{execution_id}}",
                execution.as_deref().unwrap_or("\"$EXECUTION_ID\""),
            );
        Ok(Guide {
            guide,
            version: env!("CARGO_PKG_VERSION"),
            markdown,
        })
    }
}

/// A run id as one shell word: ids are `[A-Za-z0-9._-]`, but a path given as --run may hold
/// anything, so anything else is single-quoted.
fn shell_word(text: &str) -> String {
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
