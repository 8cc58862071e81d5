//! Reads of the execution log over any [`Store`]: a record by id, the frame it lives in,
//! the narrow [`ExecQuery`] both backends run, and the run a fork came from.

use super::{chain, dump, AuditFilter, ExecutionRow, Store};
use anyhow::Result;

/// The statuses that open a construct, and those that close one (`resume`'s record shapes).
pub const STARTS: &[&str] = &["executing", "started"];
pub const ENDS: &[&str] = &["completed", "failed", "skipped", "joined", "exited"];
/// Both, for a read of what can open or close a construct.
pub const STARTS_AND_ENDS: &[&str] = &[
    "executing",
    "started",
    "completed",
    "failed",
    "skipped",
    "joined",
    "exited",
];

/// One execution record, by id.
/// The run this run was forked from, as its sealed genesis records it (`forked_from`: run,
/// record, time): None for a run not forked, or whose genesis this machine cannot attest.
pub fn forked_from(store: &mut dyn Store) -> Result<Option<serde_json::Value>> {
    let key = store.wiring().key_for_reading()?;
    Ok(store
        .audit(&AuditFilter {
            gate_id: Some(dump::RUN_EVENT),
            ..AuditFilter::default()
        })?
        .iter()
        .filter(|r| r.gate_id == dump::RUN_EVENT && r.event_type == dump::GENESIS)
        .find(|r| chain::self_state(r, key) == chain::RowState::Attested)
        .and_then(|r| r.metadata.as_deref())
        .and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok())
        .and_then(|m| m.get("forked_from").cloned())
        .filter(|f| !f.is_null()))
}

pub fn record(store: &mut dyn Store, id: i64) -> Result<Option<ExecutionRow>> {
    Ok(store
        .executions_matching(&ExecQuery {
            after: id - 1,
            before: Some(id + 1),
            ..Default::default()
        })?
        .pop())
}

/// The frame a binding named `name` made at record `id` lives in (`None`: the root): the
/// nearest record, from `id` up its parents, that opens a frame
/// ([`crate::language::is_frame`]). A branch whose statement assigns `name` (a named branch,
/// `a = session ...`) is no frame for it: its result is read after the join.
pub fn frame_of(store: &mut dyn Store, id: i64, name: Option<&str>) -> Result<Option<i64>> {
    let mut at = Some(id);
    while let Some(id) = at {
        let Some(r) = record(store, id)? else {
            return Ok(None);
        };
        let kind = r.construct();
        let status = r.status.as_ref().map(|s| s.as_str());
        let names_it = kind == Some(crate::language::Kind::Branch)
            && name.is_some()
            && r.statement_text
                .as_deref()
                .and_then(crate::language::assigned_name)
                == name;
        if STARTS.contains(&status.unwrap_or(""))
            && crate::language::is_frame(kind, status)
            && !names_it
        {
            return Ok(Some(id));
        }
        // Parents come before their children (`exec-append` checks it); a raw row that
        // points forward ends the walk at the root rather than going round.
        at = r.parent_id.filter(|p| *p < id);
    }
    Ok(None)
}

/// A narrow read of the execution log: `resume` reads only the records its answer holds, so
/// that it costs the same on a run of a thousand records and of a million. Every condition is
/// optional; the SQL is written here once, for both backends.
#[derive(Debug, Clone, Default)]
pub struct ExecQuery {
    /// Records with an id above this.
    pub after: i64,
    /// Records with an id below this.
    pub before: Option<i64>,
    /// Records whose status is one of these.
    pub only: Option<&'static [&'static str]>,
    /// Records whose status is none of these (a NULL status included).
    pub except: Option<&'static [&'static str]>,
    /// Records of this statement index (`Some(None)`: with none).
    pub statement: Option<Option<i64>>,
    /// Records with this parent (`Some(None)`: at the top level).
    pub parent: Option<Option<i64>>,
    /// Records of a statement index some start record has (what could close a start).
    pub of_started_statements: bool,
    /// Records that carry metadata.
    pub with_metadata: bool,
    pub newest_first: bool,
    pub limit: Option<i64>,
}

impl ExecQuery {
    /// The WHERE condition and the ORDER BY/LIMIT tail, and the integer parameters in order:
    /// parameter `i` (from 0) is written `ph(i)`. `run` is the backend's own condition on a
    /// row of the run (`""` on SQLite, `run_id = $1 AND ` on PostgreSQL); statuses are this
    /// fixed vocabulary, written as literals.
    pub fn sql(&self, run: &str, pg: bool, ph: impl Fn(usize) -> String) -> (String, Vec<i64>) {
        let list = |v: &[&str]| {
            v.iter()
                .map(|s| format!("'{s}'"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut params = vec![self.after];
        let mut cond = vec![format!("{run}id > {}", ph(0))];
        let param = |v: i64, params: &mut Vec<i64>| {
            params.push(v);
            ph(params.len() - 1)
        };
        if let Some(before) = self.before {
            cond.push(format!("id < {}", param(before, &mut params)));
        }
        if let Some(only) = self.only {
            // Beside the statements of the starts, the status is only a filter: SQLite would
            // otherwise walk every `completed` record through the status index.
            let plus = if self.of_started_statements && !pg {
                "+"
            } else {
                ""
            };
            cond.push(format!("{plus}status IN ({})", list(only)));
        }
        if let Some(except) = self.except {
            cond.push(format!(
                "(status IS NULL OR status NOT IN ({}))",
                list(except)
            ));
        }
        match self.statement {
            Some(Some(i)) => cond.push(format!("statement_index = {}", param(i, &mut params))),
            Some(None) => cond.push("statement_index IS NULL".into()),
            None => {}
        }
        match self.parent {
            Some(Some(p)) => cond.push(format!("parent_id = {}", param(p, &mut params))),
            Some(None) => cond.push("parent_id IS NULL".into()),
            None => {}
        }
        if self.of_started_statements {
            let starts = list(STARTS);
            cond.push(format!(
                "(statement_index IN (SELECT s.statement_index FROM {table} s
                    WHERE {srun}s.status IN ({starts}))
                  OR (statement_index IS NULL AND EXISTS (SELECT 1 FROM {table} s
                    WHERE {srun}s.statement_index IS NULL AND s.status IN ({starts}))))",
                table = if pg {
                    "openprose.execution"
                } else {
                    "execution"
                },
                srun = run.replace("run_id", "s.run_id"),
            ));
        }
        if self.with_metadata {
            cond.push(if pg {
                "metadata IS NOT NULL AND metadata <> '{}'::jsonb".into()
            } else {
                "metadata IS NOT NULL AND metadata NOT IN ('', '{}')".into()
            });
        }
        let mut sql = format!(
            "WHERE {} ORDER BY id{}",
            cond.join(" AND "),
            if self.newest_first { " DESC" } else { "" }
        );
        if let Some(limit) = self.limit {
            sql.push_str(&format!(" LIMIT {}", param(limit, &mut params)));
        }
        (sql, params)
    }
}

/// What a bounded `resume` counts without reading the rows, and the run's error, in one
/// statement.
#[derive(Debug, Clone, Default)]
pub struct ResumeCounts {
    pub error_message: Option<String>,
    pub records: i64,
    pub bindings: i64,
    /// Bindings visible from the scope chain given: the nearest of each name.
    pub bindings_visible: i64,
}

/// The scope condition of a narrow bindings read: the root, and the given scopes (ids from the
/// database, written as literals).
pub fn scope_list(chain: &[i64]) -> String {
    id_list(&[&[-1], chain].concat())
}

/// Ids from the database, written as a list of SQL literals.
pub fn id_list(ids: &[i64]) -> String {
    ids.iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
