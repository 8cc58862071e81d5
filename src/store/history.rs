//! Every version of a binding, as the `binding_history` table keeps it (filled by triggers, so
//! raw writers' changes are kept too), and the one rule that reads a version back: a
//! `--append`/`--merge` step is kept as its delta, and is rebuilt from the version before it.
//!
//! What a history row proves: nothing by itself. Rows are not sealed, and raw SQL may change
//! them; `verify` reports them as unattested. What is sealed is what a decision seals about
//! its inputs, and a fork's origin, both in the run's audit chain.

use super::BindingRow;
use crate::error::{not_found, refused, shown};
use anyhow::Result;
use serde::Serialize;

/// One row of `binding_history`, as stored.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryRow {
    /// The write sequence: the order of every write of the run.
    pub seq: i64,
    pub name: String,
    pub execution_id: Option<i64>,
    /// The binding's version in its scope: 1, 2, 3, ...
    pub n: i64,
    pub kind: Option<String>,
    #[serde(skip)]
    pub value: Option<Vec<u8>>,
    /// A `--append`/`--merge` step: `{"append": item}` or `{"merge": patch}`, the value being
    /// the previous version's with it applied.
    pub delta: Option<String>,
    pub attachment_path: Option<String>,
    pub source_statement: Option<String>,
    pub written_at: Option<String>,
    /// The newest execution record when it was written.
    pub at_record: Option<i64>,
    /// Who wrote it; None for a raw writer.
    pub principal: Option<String>,
    /// A DELETE of the binding.
    pub deleted: bool,
    /// Versions before this one are not kept (pruned, or written before schema 10).
    pub gap: bool,
}

/// Which history: bindings' (`binding_history`), or run-scoped agents' memory
/// (`agent_history`, the same columns: `kind` holds the scope, `value` the memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    Bindings,
    Agents,
}

impl Kept {
    pub fn table(self) -> &'static str {
        match self {
            Kept::Bindings => "binding_history",
            Kept::Agents => "agent_history",
        }
    }

    /// Whether the schema's trigger of this name keeps this history: its own triggers, and
    /// on SQLite the bindings' version bump whose change of `version` fires them.
    pub fn keeps_by(self, trigger: &str) -> bool {
        match self {
            Kept::Bindings => {
                trigger.starts_with("binding_history") || trigger.starts_with("bindings_version")
            }
            Kept::Agents => trigger.starts_with("agent_history"),
        }
    }
}

/// The columns of a history row, in [`HistoryRow::read`]'s order.
pub const COLUMNS: &str = "seq, name, execution_id, n, kind, value, delta, attachment_path, \
    source_statement, written_at, at_record, principal, deleted, gap";

/// A point in a run's past.
#[derive(Debug, Clone, PartialEq)]
pub enum AsOf {
    /// Just after this execution record was appended, before the next one.
    Record(i64),
    /// At this time (`datetime('now')` form, UTC; one-second resolution).
    Time(String),
}

impl std::fmt::Display for AsOf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AsOf::Record(r) => write!(f, "record {r}"),
            AsOf::Time(t) => write!(f, "{t}"),
        }
    }
}

/// What a binding's history says of one scope at a point in the past.
#[derive(Debug, PartialEq)]
pub enum Then {
    /// The version that stood (an index into the rows).
    Stood(usize),
    /// No version stood: the binding did not exist, or was deleted.
    Absent,
    /// Not known: the versions of then were pruned or never kept.
    Unknown,
}

/// Whether row `r` was written at or before `at`.
fn written_by(r: &HistoryRow, at: &AsOf) -> Option<bool> {
    match at {
        AsOf::Record(id) => r.at_record.map(|w| w <= *id).or(Some(true)),
        AsOf::Time(t) => r.written_at.as_deref().map(|w| w <= t.as_str()),
    }
}

/// Which version of one scope's rows (in write order) stood at `at`.
pub fn then(rows: &[HistoryRow], at: &AsOf) -> Then {
    let mut stood = None;
    for (i, r) in rows.iter().enumerate() {
        match written_by(r, at) {
            Some(true) => {}
            // Writes before a gap version may not have been kept (pruned, a copy without
            // history, a trigger dropped for a while): what stood before it is not known.
            Some(false) if r.gap => return Then::Unknown,
            // A later version written by then: the records went backwards in write order (raw
            // SQL deleted the log's newest records, whose ids a version had recorded), so
            // which version stood then is not known.
            Some(false)
                if rows[i + 1..]
                    .iter()
                    .any(|l| written_by(l, at) == Some(true)) =>
            {
                return Then::Unknown
            }
            Some(false) => break,
            None => return Then::Unknown,
        }
        stood = Some(i);
    }
    match stood {
        Some(i) if rows[i].deleted => Then::Absent,
        Some(i) => Then::Stood(i),
        None if rows.first().is_some_and(|r| r.gap) => Then::Unknown,
        None => Then::Absent,
    }
}

/// The index of version `n` among the rows.
pub fn index_of(rows: &[HistoryRow], n: i64) -> Option<usize> {
    rows.iter().position(|r| r.n == n)
}

/// The value version `rows[i]` holds: its own, or for a delta the previous version's with the
/// step applied (back to the nearest whole value).
pub fn value_at(rows: &[HistoryRow], i: usize) -> Result<Option<Vec<u8>>> {
    let mut base = i;
    while rows[base].delta.is_some() {
        // A prune keeps its oldest version whole, and versions are kept without a hole: a
        // step whose base is not kept was cut or renumbered behind prose-state's back.
        if base == 0 || Some(rows[base - 1].n) != rows[base].n.checked_sub(1) {
            return Err(crate::error::tampered(format!(
                "version {} of binding {} is kept as a step from version {}, which is not kept: its history was changed behind prose-state's back",
                rows[i].n,
                shown(&rows[i].name),
                rows[base].n.saturating_sub(1)
            )));
        }
        base -= 1;
    }
    if base == i {
        return Ok(rows[i].value.clone());
    }
    // Parsed once and written once: a long run of steps costs the steps, not the steps
    // times the value's length.
    let mut current: Option<serde_json::Value> = match &rows[base] {
        r if r.deleted => None,
        // No rule writes a step onto a value that is not JSON, nor one that does not apply:
        // a version that cannot be rebuilt was changed behind prose-state's back (exit 9).
        r => match r.value.as_deref() {
            None => None,
            Some(v) => Some(serde_json::from_slice(v).map_err(|_| {
                crate::error::tampered(format!(
                    "version {} of binding {} is the base of a step and does not hold JSON: its history was changed behind prose-state's back",
                    r.n,
                    shown(&r.name)
                ))
            })?),
        },
    };
    for r in &rows[base + 1..=i] {
        let delta: serde_json::Value = serde_json::from_str(r.delta.as_deref().unwrap_or("null"))
            .map_err(|_| {
            crate::error::tampered(format!(
                "version {} of binding {} holds a step that is not JSON: its history was changed behind prose-state's back",
                r.n,
                shown(&r.name)
            ))
        })?;
        let update = match (delta.get("append"), delta.get("merge")) {
            (Some(item), None) => super::Update::Append(item.clone()),
            (None, Some(patch)) => super::Update::Merge(patch.clone()),
            _ => {
                return Err(crate::error::tampered(format!(
                    "version {} of binding {} holds a step that is neither an append nor a merge: its history was changed behind prose-state's back",
                    r.n,
                    shown(&r.name)
                )))
            }
        };
        current = Some(apply_to(&update, current, &r.name).map_err(|e| {
            crate::error::tampered(format!(
                "version {} of binding {} does not rebuild ({e:#}): its history was changed behind prose-state's back",
                r.n,
                shown(&r.name)
            ))
        })?);
    }
    Ok(current.map(|v| v.to_string().into_bytes()))
}

/// Version `rows[i]` as a bindings row (what `get` reads), its value rebuilt.
pub fn as_row(rows: &[HistoryRow], i: usize) -> Result<BindingRow> {
    row_at(rows, i, rows.first().and_then(|f| f.written_at.clone()))
}

/// `rows[i]` as a bindings row, the binding created when its oldest kept version was written.
fn row_at(rows: &[HistoryRow], i: usize, created_at: Option<String>) -> Result<BindingRow> {
    let r = &rows[i];
    Ok(BindingRow {
        name: r.name.clone(),
        execution_id: r.execution_id,
        kind: r.kind.clone(),
        value: value_at(rows, i)?,
        source_statement: r.source_statement.clone(),
        created_at,
        updated_at: r.written_at.clone(),
        attachment_path: r.attachment_path.clone(),
        version: None,
        own_version: Some(r.n),
    })
}

/// Which of one scope's kept versions a reader reads (`Store::binding_versions`), so that a
/// page of `history` or one version reads those rows, not every version kept.
#[derive(Debug, Clone, Copy)]
pub enum Versions {
    /// At most `limit` of the newest, older than version `before` if given.
    Page { before: Option<i64>, limit: i64 },
    /// Version `n` and those it is rebuilt from: back to the nearest one kept whole.
    Rebuilding(i64),
}

/// Some of one scope's kept versions (in `rows`: oldest first, or newest first for a page),
/// with what the whole of its history says.
#[derive(Debug, Default)]
pub struct Span {
    pub rows: Vec<HistoryRow>,
    /// How many versions are kept.
    pub total: i64,
    /// The oldest kept version (its number, when written, and whether older ones are not
    /// kept), and the newest one's number.
    pub first: Option<HistoryRow>,
    pub last_n: Option<i64>,
}

impl Span {
    /// Every kept version (oldest first), as a span.
    pub fn whole(rows: Vec<HistoryRow>) -> Span {
        Span {
            total: rows.len() as i64,
            first: rows.first().cloned(),
            last_n: rows.last().map(|r| r.n),
            rows,
        }
    }
}

/// Version `n` as a bindings row, from a span read with [`Versions::Rebuilding`] (or
/// [`Span::whole`]).
pub fn version(span: &Span, name: &str, n: i64) -> Result<BindingRow> {
    let (rows, first, last_n) = (&span.rows, span.first.as_ref(), span.last_n);
    let Some(i) = index_of(rows, n) else {
        let kept = match (first, last_n) {
            (Some(f), Some(l)) => format!("versions {} to {l} are kept", f.n),
            _ => "it has no history".to_string(),
        };
        return Err(not_found(format!(
            "binding {} has no version {n} ({kept})",
            shown(name)
        )));
    };
    if rows[i].deleted {
        return Err(not_found(format!(
            "version {n} of binding {} is its deletion: it holds no value",
            shown(name)
        )));
    }
    row_at(rows, i, first.and_then(|f| f.written_at.clone()))
}

/// Who wrote a version, as shown: the principal, or `unknown` for a raw writer.
pub fn writer(r: &HistoryRow) -> &str {
    r.principal.as_deref().unwrap_or("unknown")
}

/// The value an update writes, from the stored one: an array with one more item, or an object
/// with the patch merged in (RFC 7396). A stored value of the wrong shape is refused.
pub(super) fn apply_update(
    update: &super::Update,
    current: Option<&str>,
    name: &str,
) -> Result<String> {
    let stored = match current {
        None => None,
        Some(text) => Some(serde_json::from_str(text).map_err(|_| {
            refused(format!(
                "binding {} does not hold JSON, so it cannot be updated in place",
                shown(name)
            ))
        })?),
    };
    Ok(apply_to(update, stored, name)?.to_string())
}

/// `update` applied to a value already parsed (None: the binding does not exist yet). The
/// text `apply_update` gives is this value's: a run of steps applied in memory, written once,
/// is the text the same steps written one by one gave.
fn apply_to(
    update: &super::Update,
    current: Option<serde_json::Value>,
    name: &str,
) -> Result<serde_json::Value> {
    use serde_json::Value;
    Ok(match update {
        super::Update::Append(item) => match current.unwrap_or(Value::Array(Vec::new())) {
            Value::Array(mut items) => {
                items.push(item.clone());
                Value::Array(items)
            }
            _ => {
                return Err(refused(format!(
                    "binding {} is not a JSON array: --append needs one",
                    shown(name)
                )))
            }
        },
        super::Update::Merge(patch) => match current.unwrap_or(Value::Object(Default::default())) {
            target @ Value::Object(_) => merge_patch(target, patch),
            _ => {
                return Err(refused(format!(
                    "binding {} is not a JSON object: --merge needs one",
                    shown(name)
                )))
            }
        },
    })
}

/// JSON Merge Patch (RFC 7396).
fn merge_patch(target: serde_json::Value, patch: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    let Value::Object(patch) = patch else {
        return patch.clone();
    };
    let mut target = match target {
        Value::Object(map) => map,
        _ => Default::default(),
    };
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
        } else {
            let old = target.remove(key).unwrap_or(Value::Null);
            target.insert(key.clone(), merge_patch(old, value));
        }
    }
    Value::Object(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Update;
    use serde_json::json;

    fn row(n: i64, value: Option<&str>, delta: Option<String>) -> HistoryRow {
        HistoryRow {
            seq: n,
            name: "acc".into(),
            execution_id: None,
            n,
            kind: Some("let".into()),
            value: value.map(|v| v.as_bytes().to_vec()),
            delta,
            attachment_path: None,
            source_statement: None,
            written_at: None,
            at_record: None,
            principal: None,
            deleted: false,
            gap: false,
        }
    }

    /// Every version rebuilt from its steps, applied in memory, is byte for byte the text the
    /// same steps gave when written one by one (what `bind --append`/`--merge` stored), over
    /// random runs of appends and merges (nested objects, nulls that delete, numbers, text
    /// with escapes) from a whole value.
    #[test]
    fn steps_applied_in_memory_give_the_text_written_step_by_step() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for round in 0..200 {
            let merging = round % 2 == 1;
            let start = if merging { r#"{"a":1}"# } else { "[]" };
            let mut rows = vec![row(1, Some(start), None)];
            let mut written = vec![start.to_string()];
            for n in 2..(2 + next(40) as i64) {
                let item = match next(5) {
                    0 => json!(null),
                    1 => json!(next(1000) as f64 / 7.0),
                    2 => json!(format!("t\"\\\u{202e}{}", next(9))),
                    3 => json!({"k": next(3), "deep": {"x": [next(4)]}}),
                    _ => json!([next(10), "s"]),
                };
                let update = if merging {
                    let key = ["a", "b", "c", "deep"][next(4) as usize];
                    Update::Merge(json!({ key: item }))
                } else {
                    Update::Append(item)
                };
                let text = apply_update(&update, Some(written.last().unwrap()), "acc").unwrap();
                let delta = match &update {
                    Update::Append(i) => json!({ "append": i }),
                    Update::Merge(p) => json!({ "merge": p }),
                };
                rows.push(row(n, None, Some(delta.to_string())));
                written.push(text);
            }
            for (i, want) in written.iter().enumerate() {
                let got = value_at(&rows, i).unwrap().unwrap();
                assert_eq!(
                    String::from_utf8(got).unwrap(),
                    *want,
                    "round {round}, version {}",
                    i + 1
                );
            }
        }
    }
}
