use crate::cli::ExecAppendArgs;
use crate::model::{check_key, check_metadata, now};
use crate::output::Render;
use crate::store::NewExecution;
use anyhow::Result;
use serde::Serialize;
use std::io::{self, Write};

#[derive(Debug, Serialize)]
pub struct Appended {
    pub id: i64,
    pub statement_index: i64,
    pub status: &'static str,
    pub parent_id: Option<i64>,
    pub at: String,
}

impl Render for Appended {
    /// Just the new record's id, so `ID=$(prose-state exec-append ...)` works.
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        writeln!(w, "{}", self.id)
    }
}

impl super::Run for ExecAppendArgs {
    type Output = Appended;
    fn run(&self, ctx: &crate::context::Context) -> Result<Appended> {
        let (_, mut store) = ctx.the_run()?;
        let writer = ctx.writer(&self.principal)?;
        self.metadata.as_deref().map(check_metadata).transpose()?;
        self.key.as_deref().map(check_key).transpose()?;
        let at = now();
        let (started_at, completed_at) = if self.status.is_ending() {
            (None, Some(at.as_str()))
        } else {
            (Some(at.as_str()), None)
        };
        let id = store.append_execution(&NewExecution {
            statement_index: Some(self.index),
            statement_text: &self.text,
            status: self.status.as_str(),
            started_at,
            completed_at,
            error_message: self.error.as_deref(),
            parent_id: self.parent,
            metadata: self.metadata.as_deref(),
            idempotency_key: self.key.as_deref(),
            principal: &writer,
        })?;
        Ok(Appended {
            id,
            statement_index: self.index,
            status: self.status.as_str(),
            parent_id: self.parent,
            at,
        })
    }
}
