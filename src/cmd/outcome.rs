//! A command's output taken whole, as `--json` prints it: what the MCP server answers a tool
//! call with, and what a test that runs commands in its own process reads.

use super::{Run, Sink};
use crate::context::Context;
use crate::error::Code;
use crate::output::Render;
use anyhow::Result;
use serde_json::Value;

/// What a command gave: the JSON the command line prints, as text and as a value.
pub struct Outcome {
    pub text: String,
    pub value: Value,
    pub code: Code,
    pub warnings: Vec<String>,
    /// The outcome in the command line's words, when it is not a plain success.
    pub said: Option<String>,
    /// A table's column names in the statement's order (`query`).
    pub columns: Option<Vec<String>>,
}

impl Outcome {
    /// An answer the server shaped (a page): its text is its JSON.
    pub fn of(value: Value) -> Self {
        Outcome {
            text: value.to_string(),
            value,
            code: Code::Ok,
            warnings: Vec::new(),
            said: None,
            columns: None,
        }
    }

    /// The answer replaced by its page, text and value alike.
    pub fn set(&mut self, value: Value) {
        self.text = value.to_string();
        self.value = value;
    }
}

/// Takes a command's output as the JSON `--json` prints.
pub struct Json;

impl Sink for Json {
    type Out = Result<Outcome>;
    fn take<R: Run>(&mut self, command: &R, ctx: &Context) -> Result<Outcome> {
        let out = command.run(ctx)?;
        let code = out.exit_code();
        // A note (a listing unchecked) travels with the warnings: an MCP client sees both.
        let mut warnings = out.warnings();
        warnings.extend(out.notes());
        let mut text = Vec::new();
        crate::output::write_json(&mut text, &out)?;
        let value = serde_json::to_value(&out)?;
        let columns = out.columns();
        // An outcome that is not a plain success (a gate rejected, timed out or still
        // pending) is also said in words, as the command line says it.
        let said = if code == Code::Ok {
            None
        } else {
            let mut words = Vec::new();
            out.text(&mut words, false)?;
            let words = String::from_utf8_lossy(&words).trim().to_string();
            (!words.is_empty()).then(|| crate::output::visible(&words).into_owned())
        };
        Ok(Outcome {
            text: String::from_utf8_lossy(&text).into_owned(),
            value,
            code,
            warnings,
            said,
            columns,
        })
    }
}
