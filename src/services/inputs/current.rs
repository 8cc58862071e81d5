//! Whether a binding's row is the version of its history it says it is, and whether it claims
//! a decision wrote it.

use crate::store::Store;
use anyhow::Result;

/// Refuses (exit 9) binding `row` (of `name`) when it is not its history's newest version,
/// the one its `own_version` says it is: a value (or file, or kind) changed in place behind
/// prose-state's back, or that version rewritten in the history. A row whose history keeps
/// nothing (written before history was kept) is not judged here.
pub fn check_current(
    store: &mut dyn Store,
    name: &str,
    row: &crate::store::BindingRow,
) -> Result<()> {
    use crate::store::history;
    let Some(n) = row.own_version else {
        return Ok(());
    };
    let changed = || {
        crate::error::tampered(format!(
            "binding {} in {} is not version {n} of its history, which it says it is: it was changed in place behind prose-state's back",
            crate::error::shown(name),
            row.execution_id
                .map_or("the root".to_string(), |e| format!("execution {e}"))
        ))
    };
    let span = store.binding_versions(name, row.execution_id, history::Versions::Rebuilding(n))?;
    let Ok(kept) = history::version(&span, name, n) else {
        return Err(changed());
    };
    let same_value = match (&row.value, &kept.value) {
        (Some(a), Some(b)) if a != b => {
            // The same JSON, written by two serialisers (a step rebuilt), is the same value.
            let parse = |v: &[u8]| serde_json::from_slice::<serde_json::Value>(v).ok();
            parse(a).is_some_and(|a| Some(a) == parse(b))
        }
        (a, b) => a == b,
    };
    // Every field a reader shows of the row is its version's: the time it was written and
    // the statement that wrote it too (what `get --json` shows of an answer, say).
    // A version `doctor --fix` restated when it resumed the history (marked as following
    // versions not kept) was recorded then, not when the row was written.
    let restated = span.rows.iter().any(|r| r.n == n && r.gap);
    // A raw writer's version (no writer recorded) is stamped by its trigger's clock, in its own
    // second: its time says nothing of the row's (the spec's own UPDATE leaves `updated_at`).
    let raw = span.rows.iter().any(|r| r.n == n && r.principal.is_none());
    let same_time =
        restated || raw || kept.updated_at.is_none() || row.updated_at == kept.updated_at;
    if !same_value
        || row.attachment_path != kept.attachment_path
        || row.kind != kept.kind
        || !same_time
        || row.source_statement != kept.source_statement
    {
        return Err(changed());
    }
    Ok(())
}

/// Whether a binding's statement says a gate's decision wrote it (`approve G:`).
pub fn claims_decision(b: &crate::store::BindingRow) -> bool {
    b.source_statement
        .as_deref()
        .and_then(crate::store::rules::decided_by)
        .is_some()
}
