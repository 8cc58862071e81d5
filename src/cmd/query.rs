use crate::cli::QueryArgs;
use crate::output::{one_line, Render};
use crate::store::QueryResult;
use anyhow::Result;
use serde::Serialize;
use std::io::{self, Write};

#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct Queried(pub QueryResult);

impl Render for Queried {
    /// A table on a terminal; elsewhere the same JSON as `--json`, since the callers this
    /// replaces read `sqlite3 -json`.
    fn text(self, w: &mut dyn Write, tty: bool) -> io::Result<()> {
        if !tty {
            crate::output::write_json(w, &self)?;
            return writeln!(w);
        }
        let rows = &self.0.rows;
        super::table_of(w, &self.0.columns, rows, |r| {
            r.iter()
                .map(|v| match v {
                    serde_json::Value::Null => String::new(),
                    serde_json::Value::String(s) => one_line(s, 60),
                    other => other.to_string(),
                })
                .collect()
        })?;
        writeln!(
            w,
            "({} row{})",
            rows.len(),
            if rows.len() == 1 { "" } else { "s" }
        )
    }

    fn columns(&self) -> Option<Vec<String>> {
        Some(self.0.columns.clone())
    }

    /// JSON escapes its own; the table's cells are made visible by `table`.
    fn escapes_itself(&self) -> bool {
        true
    }
}

impl super::Run for QueryArgs {
    type Output = Queried;
    fn run(&self, ctx: &crate::context::Context) -> Result<Queried> {
        let (_, mut store) = ctx.the_run()?;
        let limit =
            std::time::Duration::from_secs(crate::model::parse_duration(&self.timeout)? as u64);
        Ok(Queried(store.query_readonly(&self.sql, limit)?))
    }
}
