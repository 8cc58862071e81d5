use crate::cli::ExecAppendArgs;
use crate::model::{check_key, check_metadata, now};
use crate::output::Render;
use crate::store::{NewExecution, Store};
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

pub fn run(args: &ExecAppendArgs, store: &mut dyn Store) -> Result<Appended> {
    if let Some(metadata) = &args.metadata {
        check_metadata(metadata)?;
    }
    if let Some(key) = &args.key {
        check_key(key)?;
    }
    let at = now();
    let (started_at, completed_at) = if args.status.is_ending() {
        (None, Some(at.as_str()))
    } else {
        (Some(at.as_str()), None)
    };
    let id = store.append_execution(&NewExecution {
        statement_index: Some(args.index),
        statement_text: &args.text,
        status: args.status.as_str(),
        started_at,
        completed_at,
        error_message: args.error.as_deref(),
        parent_id: args.parent,
        metadata: args.metadata.as_deref(),
        idempotency_key: args.key.as_deref(),
    })?;
    Ok(Appended {
        id,
        statement_index: args.index,
        status: args.status.as_str(),
        parent_id: args.parent,
        at,
    })
}

impl super::Run for ExecAppendArgs {
    type Output = Appended;
    fn run(&self, ctx: &crate::context::Context) -> Result<Appended> {
        run(self, ctx.the_run()?.1.as_mut())
    }
}
