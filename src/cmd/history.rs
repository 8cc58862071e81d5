//! `history NAME`: every kept version of a binding, newest first, with when, from which
//! record and by whom; and the reads of the past that `get --version` and `get --as-of` make.

use crate::cli::HistoryArgs;
use crate::error::{not_found, refused, shown, usage};
use crate::output::{visible, Render};
use crate::store::history::{self, AsOf, HistoryRow, Then};
use crate::store::{Found, Store};
use anyhow::Result;
use serde::Serialize;
use std::io::{self, Write};

/// How much of a version's value a listing shows.
const PREVIEW_CHARS: usize = 80;

/// One version, as listed.
#[derive(Serialize)]
pub struct Version {
    /// Its number in its scope: 1, 2, 3, ...
    pub version: i64,
    pub kind: Option<String>,
    /// When it was written (UTC, to the second).
    pub written_at: Option<String>,
    /// The newest execution record when it was written (null: before the first).
    pub after_record: Option<i64>,
    /// Who wrote it: the principal it was written as, or `unknown` (raw SQL, or no one
    /// given). Claimed, not proved.
    pub by: String,
    /// `set` (a whole value), `append` or `merge` (a step from the version before), or
    /// `deleted`.
    pub change: &'static str,
    /// The start of its value (an attachment's summary), at most 80 characters.
    pub preview: String,
    /// Its value's length in bytes (for a step, the step's).
    pub bytes: u64,
    /// Where its value is kept, for one kept as an attachment.
    pub attachment: Option<String>,
    pub source_statement: Option<String>,
    /// Writes before this version may not all be kept: it is the oldest kept (pruned, or a
    /// copy without history), or it follows a time when its history's trigger was missing
    /// (made again by `doctor --fix`). Reading or forking before it is refused.
    pub older_not_kept: bool,
}

#[derive(Serialize)]
pub struct History {
    pub name: String,
    /// The scope whose versions these are: null for the root.
    pub execution_id: Option<i64>,
    /// How many versions are kept.
    pub total: usize,
    /// Versions before the oldest one kept were pruned, or written before history was kept.
    pub older_not_kept: bool,
    /// Newest first, at most `--limit`.
    pub versions: Vec<Version>,
    /// Pass as `--before` for the next page (null: no older version is kept).
    pub next_before: Option<i64>,
}

impl Render for History {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        let scope = match self.execution_id {
            Some(id) => format!("execution {id}"),
            None => "the root scope".to_string(),
        };
        writeln!(
            w,
            "{} in {scope}: {} version{} kept",
            visible(&self.name),
            self.total,
            if self.total == 1 { "" } else { "s" }
        )?;
        super::table_of(
            w,
            &["VERSION", "WRITTEN", "RECORD", "BY", "CHANGE", "VALUE"],
            &self.versions,
            |v| {
                vec![
                    v.version.to_string(),
                    v.written_at.clone().unwrap_or_default(),
                    v.after_record.map_or("-".to_string(), |r| r.to_string()),
                    visible(&v.by).into_owned(),
                    v.change.to_string(),
                    visible(&v.preview).into_owned(),
                ]
            },
        )?;
        for v in self.versions.iter().filter(|v| v.older_not_kept) {
            if self.next_before.is_some()
                || Some(v.version) != self.versions.last().map(|l| l.version)
            {
                writeln!(w, "writes before version {} may not all be kept (its history was not kept for a while)", v.version)?;
            }
        }
        if let Some(before) = self.next_before {
            writeln!(w, "older versions: --before {before}")?;
        } else if self.older_not_kept {
            writeln!(
                w,
                "versions before the oldest shown are not kept (pruned, or written before history was kept)"
            )?;
        }
        Ok(())
    }
}

fn change(r: &HistoryRow) -> &'static str {
    if r.deleted {
        return "deleted";
    }
    match r.delta.as_deref().map(|d| d.starts_with("{\"append\"")) {
        Some(true) => "append",
        Some(false) => "merge",
        None => "set",
    }
}

fn version_of(r: &HistoryRow) -> Version {
    let shown_bytes = r
        .delta
        .as_deref()
        .map(str::as_bytes)
        .or(r.value.as_deref())
        .unwrap_or_default();
    let text = String::from_utf8_lossy(shown_bytes);
    let mut preview: String = text.chars().take(PREVIEW_CHARS).collect();
    if text.chars().nth(PREVIEW_CHARS).is_some() {
        preview.push('…');
    }
    // Every text a row holds is bounded, whatever raw SQL wrote there: the answer stays
    // within an MCP answer's size. Cut, not escaped: the text output escapes it, the JSON
    // keeps it exact.
    let short = |t: &str, n: usize| -> String {
        let mut s: String = t.chars().take(n).collect();
        if t.chars().nth(n).is_some() {
            s.push('…');
        }
        s
    };
    Version {
        version: r.n,
        kind: r.kind.as_deref().map(|k| short(k, 20)),
        written_at: r.written_at.as_deref().map(|w| short(w, 32)),
        after_record: r.at_record,
        by: short(history::writer(r), 80),
        change: change(r),
        preview,
        bytes: shown_bytes.len() as u64,
        attachment: r.attachment_path.as_deref().map(|a| short(a, 120)),
        source_statement: r
            .source_statement
            .as_deref()
            .map(|s| short(s, PREVIEW_CHARS)),
        older_not_kept: r.gap,
    }
}

/// The scopes a lookup from `start` walks, nearest first, the root last.
fn walk(store: &mut dyn Store, start: Option<i64>) -> Result<Vec<Option<i64>>> {
    let mut scopes: Vec<Option<i64>> = match start {
        Some(id) => {
            if !store.execution_exists(id)? {
                return Err(not_found(format!("execution not found: {id}")));
            }
            store.scope_chain(id)?.into_iter().map(Some).collect()
        }
        None => Vec::new(),
    };
    scopes.push(None);
    Ok(scopes)
}

/// The scope whose history `history NAME` and `get --version` read: the nearest one from
/// `start` (the root last) that has kept any version of the name, deleted ones included.
pub fn scope_of(store: &mut dyn Store, name: &str, start: Option<i64>) -> Result<Option<i64>> {
    crate::model::check_name(name)?;
    let kept = store.history_scopes(name)?;
    walk(store, start)?
        .into_iter()
        .find(|s| kept.contains(s))
        .ok_or_else(|| not_written_here(name, start, &kept))
}

/// Why a name has no history a lookup from `start` sees: never written anywhere, or written
/// only in scopes off its way (then it names them, and the flag that reaches them).
fn not_written_here(name: &str, start: Option<i64>, kept: &[Option<i64>]) -> anyhow::Error {
    let mut scopes: Vec<i64> = kept.iter().flatten().copied().collect();
    scopes.sort_unstable();
    scopes.dedup();
    let here = match start {
        Some(id) => format!("from execution {id}"),
        None => "in the root scope".to_string(),
    };
    if scopes.is_empty() {
        return not_found(format!(
            "binding has no history (it was never written here): {}",
            shown(name)
        ));
    }
    const SHOWN: usize = 5;
    let mut ids: Vec<String> = scopes.iter().take(SHOWN).map(i64::to_string).collect();
    if scopes.len() > SHOWN {
        ids.push(format!("and {} more", scopes.len() - SHOWN));
    }
    not_found(format!(
        "binding has no history visible {here}; it was written in the scope of execution{} {} \
         (pass --execution-id {}): {}",
        if scopes.len() == 1 { "" } else { "s" },
        ids.join(", "),
        scopes[0],
        shown(name)
    ))
}

/// Version `n` of the binding a lookup from `start` finds, as a bindings row.
pub fn version(store: &mut dyn Store, name: &str, start: Option<i64>, n: i64) -> Result<Found> {
    let scope = scope_of(store, name, start)?;
    let span = store.binding_versions(name, scope, history::Versions::Rebuilding(n))?;
    let row = history::version(&span, name, n)?;
    answer_version(store, name, scope, n, &row)?;
    found(store, start, scope, row)
}

/// A version a gate's decision wrote as its answer is read only as that decision wrote it.
fn answer_version(
    store: &mut dyn Store,
    name: &str,
    scope: Option<i64>,
    n: i64,
    row: &crate::store::BindingRow,
) -> Result<()> {
    let inline = row.attachment_path.as_deref().is_none_or(str::is_empty);
    let held = row.value.as_deref().filter(|_| inline);
    crate::store::gate_read::check_answer_version(store, name, scope, n, held)
}

fn found(
    store: &mut dyn Store,
    start: Option<i64>,
    scope: Option<i64>,
    row: crate::store::BindingRow,
) -> Result<Found> {
    let depth = match (start, scope) {
        (Some(s), Some(e)) => store
            .scope_chain(s)?
            .iter()
            .position(|c| *c == e)
            .map(|d| d as u64),
        _ => None,
    };
    Ok(Found { row, depth })
}

/// `--as-of RECORD|TIME`: a record id of the run, or a time.
pub fn parse_as_of(store: &mut dyn Store, text: &str) -> Result<AsOf> {
    let t = text.trim();
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit()) {
        let id: i64 = t
            .parse()
            .map_err(|_| usage(format!("--as-of record is out of range: {}", shown(t))))?;
        if !store.execution_exists(id)? {
            return Err(not_found(format!(
                "--as-of names no execution record of this run: {id}"
            )));
        }
        return Ok(AsOf::Record(id));
    }
    crate::model::Timestamp::parse_lenient(t)
        .map(|at| AsOf::Time(at.to_string()))
        .ok_or_else(|| {
            usage(format!(
                "--as-of is neither a record id nor a time ('2026-11-24 10:15:00'): {}",
                shown(text)
            ))
        })
}

/// The binding a lookup from `start` would have found at `at`.
pub fn as_of(store: &mut dyn Store, name: &str, start: Option<i64>, at: &AsOf) -> Result<Found> {
    crate::model::check_name(name)?;
    let kept = store.history_scopes(name)?;
    for scope in walk(store, start)? {
        if !kept.contains(&scope) {
            continue;
        }
        let rows = store.binding_history(name, scope)?;
        match history::then(&rows, at) {
            Then::Stood(i) => {
                let row = history::as_row(&rows, i)?;
                answer_version(store, name, scope, rows[i].n, &row)?;
                return found(store, start, scope, row);
            }
            Then::Absent => {}
            Then::Unknown => {
                let place = match scope {
                    Some(id) => format!("execution {id}'s scope"),
                    None => "the root scope".to_string(),
                };
                return Err(refused(format!(
                    "binding {} in {place} as of {at} is not known: its versions of then are not kept (pruned, written before history was kept, while its history's trigger was missing, or before raw SQL deleted the log's newest records)",
                    shown(name)
                )));
            }
        }
    }
    Err(not_found(format!(
        "binding did not exist as of {at}: {}",
        shown(name)
    )))
}

impl super::Run for HistoryArgs {
    type Output = History;
    fn run(&self, ctx: &crate::context::Context) -> Result<History> {
        let (run, mut store) = ctx.the_run()?;
        // Read again when a decision committed beside the read made the versions and the log
        // disagree.
        crate::services::inputs::settled(store.as_mut(), |store, _| self.read(&run, store))
    }
}

impl HistoryArgs {
    fn read(
        &self,
        run: &crate::run::RunPaths,
        store: &mut dyn crate::store::Store,
    ) -> Result<History> {
        let scope = match scope_of(store, &self.name, self.execution_id) {
            Ok(scope) => scope,
            // No history here of a name a gate names: the log may say why (a version moved).
            Err(e) => {
                let naming = store.naming(&self.name)?;
                if naming.input || !naming.response.is_empty() {
                    let report = store.verify_audit()?;
                    crate::services::inputs::check_kept(store, &run.dir, &self.name, &report)?;
                }
                return Err(e);
            }
        };
        // A name a sealed opening names (a gate's input or answer): its kept versions are
        // listed only as the sealed log vouches for them, and none from a scope that hides an
        // answer.
        let naming = store.naming(&self.name)?;
        let named_by_none = naming.response.is_empty() && !naming.input;
        if naming.input || !naming.response.is_empty() {
            let report = store.verify_audit()?;
            crate::store::gate_read::check_vouched(&report, &self.name, &naming)?;
            crate::store::gate_read::check_response_binding_named(
                store,
                &self.name,
                self.execution_id,
                Some(scope),
                naming.response,
                crate::store::gate_read::Read::Past(None),
                Some(&report),
            )?;
            crate::services::inputs::check_kept(store, &run.dir, &self.name, &report)?;
        }
        // The page and one more (is there an older page?), newest first: no other version read.
        let span = store.binding_versions(
            &self.name,
            scope,
            history::Versions::Page {
                before: self.before,
                limit: self.limit as i64 + 1,
            },
        )?;
        let older_not_kept = span.first.as_ref().is_some_and(|r| r.gap);
        let mut page: Vec<&HistoryRow> = span.rows.iter().collect();
        let more = page.len() > self.limit as usize;
        page.truncate(self.limit as usize);
        // Who wrote a version a sealed decision wrote is the decision's to say.
        crate::store::gate_read::check_writers(store, &self.name, scope, &page)?;
        // A version that says a decision wrote it stands only where its gate's sealed openings
        // name the binding, as `get` judges the value (exit 9 where none does).
        for r in &page {
            if let Some(statement) = r.source_statement.as_deref() {
                let names =
                    crate::store::rules::decision_opening_kept(store, &self.name, statement)?;
                if named_by_none && names != crate::store::rules::OpeningNames::NoDecision {
                    return Err(crate::store::rules::narrowing_misled(&self.name));
                }
            }
        }
        Ok(History {
            name: self.name.clone(),
            execution_id: scope,
            total: span.total as usize,
            older_not_kept,
            next_before: if more { page.last().map(|r| r.n) } else { None },
            versions: page.into_iter().map(version_of).collect(),
        })
    }
}
