//! `imports` and `imports add`: the import registry.

use crate::cli::{ImportAddArgs, ImportsArgs, ImportsCommand};
use crate::error::{refused, shown, usage};
use crate::model::{check_name, now};
use crate::output::{one_line, Render};
use crate::store::{ImportAdded, ImportRow, Store};
use anyhow::Result;
use serde::Serialize;
use std::io::{self, Write};

#[derive(Debug, Serialize)]
pub struct Added {
    /// added, unchanged or replaced
    pub outcome: &'static str,
    #[serde(flatten)]
    pub import: ImportRow,
}

impl Render for Added {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        writeln!(
            w,
            "Import {}: {} ({})",
            self.outcome,
            self.import.alias,
            self.import.source_url.as_deref().unwrap_or("-")
        )
    }
}

fn check_schema(flag: &str, text: Option<&str>) -> Result<()> {
    if let Some(t) = text {
        serde_json::from_str::<serde_json::Value>(t)
            .map_err(|e| usage(format!("invalid {flag} (not JSON: {e}): {}", shown(t))))?;
    }
    Ok(())
}

pub fn add(req: &ImportAddArgs, store: &mut dyn Store) -> Result<Added> {
    check_name(&req.alias)
        .map_err(|_| usage(format!("invalid import alias: {}", shown(&req.alias))))?;
    if req.source.trim().is_empty() || req.source.chars().any(char::is_control) {
        return Err(usage(format!("invalid --source: {}", shown(&req.source))));
    }
    check_schema("--inputs-schema", req.inputs_schema.as_deref())?;
    check_schema("--outputs-schema", req.outputs_schema.as_deref())?;
    let import = ImportRow {
        alias: req.alias.clone(),
        source_url: Some(req.source.clone()),
        fetched_at: Some(now()),
        inputs_schema: req.inputs_schema.clone(),
        outputs_schema: req.outputs_schema.clone(),
    };
    let (outcome, import) = match store.add_import(&import, req.replace)? {
        ImportAdded::Added(i) => ("added", i),
        ImportAdded::Unchanged(i) => ("unchanged", i),
        ImportAdded::Replaced(i) => ("replaced", i),
        ImportAdded::Conflict(i) => {
            return Err(refused(format!(
                "import alias already registered from {} (pass --replace to change it): {}",
                i.source_url.as_deref().unwrap_or("-"),
                shown(&i.alias)
            )))
        }
    };
    Ok(Added { outcome, import })
}

#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct ImportList(pub Vec<ImportRow>);

impl Render for ImportList {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        if self.0.is_empty() {
            return writeln!(w, "no imports");
        }
        let header = ["ALIAS", "SOURCE", "FETCHED"];
        super::table_of(w, &header, &self.0, |i| {
            vec![
                i.alias.clone(),
                one_line(i.source_url.as_deref().unwrap_or(""), 60),
                i.fetched_at.clone().unwrap_or_default(),
            ]
        })
    }
}

crate::output::one_of!(
    /// What `imports` and `imports add` print.
    ImportsOutput {
        List(ImportList),
        Added(Added),
    }
);

impl super::Run for ImportsArgs {
    type Output = ImportsOutput;
    fn run(&self, ctx: &crate::context::Context) -> Result<ImportsOutput> {
        let (_, mut store) = ctx.the_run()?;
        Ok(match &self.command {
            None => ImportsOutput::List(ImportList(store.imports()?)),
            Some(ImportsCommand::Add(a)) => ImportsOutput::Added(add(a, store.as_mut())?),
        })
    }
}
