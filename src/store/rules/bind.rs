//! Bindings: bind, release an attachment, relink a value moved to the server, and prune
//! a run's binding history.

use crate::error::{refused, shown};
use crate::store::dump::BindingRecord;
use crate::store::tx::{Tx, Txn};
use crate::store::{BindOutcome, NewBinding};
use anyhow::Result;

use super::ensure_open;

/// The gate whose decision wrote a binding, from the statement it wrote under (`approve G:`).
pub fn decided_by(statement: &str) -> Option<&str> {
    statement.strip_prefix("approve ")?.strip_suffix(':')
}

/// How a gate's sealed openings name a binding a decision of it wrote.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OpeningNames {
    /// The binding was not written by a decision (its statement is not `approve G:`).
    NoDecision,
    /// An opening of G answers into it (`--response-binding`).
    Answer,
    /// An opening of G is about it (`--inputs`): its approver may have edited it.
    Input,
}

/// What a decision wrote (under `statement`, `approve G:`) stands only while the log still
/// holds G's openings as they were sealed, one of them naming the binding (as its answer or
/// an input its approver may edit): with them cut from the log's end, or changed behind the
/// tool's back so that they no longer name it, which gates answer into the binding cannot be
/// told, and it vouches for nothing (exit 9). Says how they name it; a caller whose narrowing
/// of the log by the name found no such opening was misled (see `Rows::gates_naming`).
pub fn decision_opening_kept<R: crate::store::Rows + ?Sized>(
    rows: &mut R,
    name: &str,
    statement: &str,
) -> Result<OpeningNames> {
    use crate::store::chain::{self_state, RowState};
    let Some(gate) = decided_by(statement) else {
        return Ok(OpeningNames::NoDecision);
    };
    let opened = rows.audit(&crate::store::AuditFilter {
        gate_id: Some(gate),
        event: Some("created"),
        ..crate::store::AuditFilter::default()
    })?;
    let broken = || {
        crate::error::tampered(format!(
            "binding {} was written by gate {}'s decision, and the run's audit log holds no opening of that gate that names it as sealed: rows were cut from the log or changed behind prose-state's back (run `prose-state gates verify`)",
            shown(name),
            shown(gate)
        ))
    };
    let key = rows.wiring().key_for_reading()?;
    if opened
        .iter()
        .any(|r| self_state(r, key) == RowState::Broken)
    {
        return Err(broken());
    }
    let mut names = None;
    for r in &opened {
        let m = r.metadata_json();
        if m["response_binding"].as_str() == Some(name) {
            names = Some(OpeningNames::Answer);
        } else if crate::store::rows::names_as_input(&m, name) {
            names = names.or(Some(OpeningNames::Input));
        }
    }
    names.ok_or_else(broken)
}

/// The narrowing of the log by a binding's name found no gate answering into it, yet the
/// decision that wrote it answered into it: the log or the database was changed so that the
/// narrowing misses it (exit 9).
pub fn narrowing_misled(name: &str) -> anyhow::Error {
    crate::error::tampered(format!(
        "binding {} is named by a gate's sealed opening (its answer, or an input), but the log read by its name does not say so: the database was changed behind prose-state's back (run `prose-state gates verify`)",
        shown(name)
    ))
}

/// Upserts a binding. A `const` is not rebound in its scope. `publish` puts the attachment
/// file in place after the checks and before the row is written, so no committed row ever
/// points at a file that is missing or partial.
pub fn bind(
    mut tx: Txn<'_>,
    b: &NewBinding,
    publish: &mut dyn FnMut() -> Result<()>,
) -> Result<BindOutcome> {
    let outcome = write(&mut tx, b, publish, Writer::Bind)?;
    tx.commit()?;
    Ok(outcome)
}

/// Who writes a binding: `bind`, or a decision in its own transaction (which found the run
/// open already): an approver's edit of an input, or the answer into its response binding.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Writer<'a> {
    Bind,
    Edit,
    Answer(&'a str),
}

/// [`bind`] in a transaction the caller commits. A binding a gate's opening names as its
/// response binding is written only by that gate's decision (`Writer::Answer`), never by
/// `bind` nor by an edit.
pub(super) fn write(
    tx: &mut Txn<'_>,
    b: &NewBinding,
    publish: &mut dyn FnMut() -> Result<()>,
    writer: Writer<'_>,
) -> Result<BindOutcome> {
    write_over(tx, b, publish, writer, None)
}

/// [`write`], over the binding's head as this transaction already read it, if it did (an edit
/// reads it for the kind it keeps). A head not given is read after the refusals that need
/// none, as a bind's always was: a refused bind waits for no row lock.
pub(super) fn write_over(
    tx: &mut Txn<'_>,
    b: &NewBinding,
    publish: &mut dyn FnMut() -> Result<()>,
    writer: Writer<'_>,
    read: Option<Option<crate::store::BindingHead>>,
) -> Result<BindOutcome> {
    if writer == Writer::Bind {
        // `approve G:` is the statement a gate's decision writes under: what says a value is a
        // decision's answer or its approver's edit is not a bind's to claim.
        // Any spelling a reader might take for it too (padded, cased, a line after it).
        let first = b
            .source_statement
            .and_then(|s| s.trim().lines().next())
            .map(str::trim_end);
        let looks = first.map(str::to_lowercase);
        if looks.as_deref().and_then(decided_by).is_some() {
            // The gate as written: between `approve ` and the colon.
            let gate = first
                .and_then(|f| f.get(8..f.len().saturating_sub(1)))
                .unwrap_or_default();
            return Err(crate::error::usage(format!(
                "--source {} reads as the statement gate {}'s decision writes under (`approve G:`): a bind does not claim it",
                shown(b.source_statement.unwrap_or_default()),
                shown(gate.trim())
            )));
        }
        ensure_open(&mut **tx)?;
    }
    let by_gate = match writer {
        Writer::Answer(gate) => Some(gate),
        _ => None,
    };
    let gates = match by_gate {
        None => tx.response_gates(b.name)?,
        Some(_) => Vec::new(),
    };
    if let Some((gate, _)) = gates.iter().find(|(_, s)| *s == b.execution_id) {
        return Err(refused(format!(
            "binding {} is the answer of gate {}: only a decision on it writes it",
            shown(b.name),
            shown(gate)
        )));
    }
    // Nor is a gate's answer hidden: no binding of its name below its scope. Read in this
    // transaction, which a gate's opening is serialised with, so neither slips past the other.
    if let (Some(at), false) = (b.execution_id, gates.is_empty()) {
        let chain = tx.scope_chain(at)?;
        let above = |s: &Option<i64>| s.is_none_or(|e| e != at && chain.contains(&e));
        if let Some((gate, _)) = gates.iter().find(|(_, s)| above(s)) {
            return Err(refused(format!(
                "binding {} is the answer of gate {} in a scope around this one: a binding of that name here would hide it",
                shown(b.name),
                shown(gate)
            )));
        }
    }
    let existing = match read {
        Some(head) => head,
        None => tx.binding_head(b.name, b.execution_id)?,
    };
    // What a decision wrote (its statement `approve G:`) is overwritten only while the log
    // still holds G's opening: with it cut from the log's end, which gates answer into this
    // binding cannot be told, and nothing is written over it (exit 9).
    if let Some(statement) = existing.as_ref().and_then(|h| h.3.as_deref()) {
        let names = decision_opening_kept(&mut **tx, b.name, statement)?;
        if by_gate.is_none() && names == OpeningNames::Answer && gates.is_empty() {
            return Err(narrowing_misled(b.name));
        }
    }
    // Compare-and-set on the binding's own version, as `history` numbers it (0: no binding of
    // the name in this scope). Versions are never renumbered (pruning keeps the newest), so
    // a version once read is never seen again after a write.
    if let Some(want) = b.if_version {
        let have = match &existing {
            None => Some(0),
            Some(_) => tx.binding_own_version(b.name, b.execution_id)?,
        };
        match have {
            Some(have) if have == want => {}
            Some(have) => {
                return Err(refused(format!(
                    "binding {} is at version {have}, not {want}: it changed since it was read (read it again, then retry)",
                    shown(b.name)
                )))
            }
            None => {
                return Err(refused(format!(
                    "binding {} has no version in its history (written while its history was not kept: `prose-state doctor --fix` starts it again), so it is not at version {want}",
                    shown(b.name)
                )))
            }
        }
    }
    if let Some((Some(kind), attached, _, _)) = &existing {
        // The same const bound again with the same value (a block's arguments bound again
        // after a crash) changes nothing: it is that binding, as it is.
        if kind == "const"
            && b.update.is_none()
            && attached.is_none()
            && b.attachment_path.is_none()
        {
            let current = tx.binding_value(b.name, b.execution_id)?;
            if current.as_deref() == Some(b.value) && b.kind == "const" {
                return Ok(BindOutcome {
                    released: Vec::new(),
                    written: current,
                    version: tx.binding_own_version(b.name, b.execution_id)?,
                });
            }
        }
        if kind == "const" {
            let scope = match b.execution_id {
                Some(id) => format!("execution {id}"),
                None => "the root scope".to_string(),
            };
            return Err(refused(format!(
                "binding is const in {scope} and cannot be rebound: {}",
                shown(b.name)
            )));
        }
    }
    // A keyed update already applied (a step run again after a crash) is not applied twice.
    if let (Some(key), Some(_), Some(_)) = (b.key, b.update, &existing) {
        let kept = tx.kept_versions(
            crate::store::history::Kept::Bindings,
            b.name,
            b.execution_id,
        )?;
        let carries = |r: &crate::store::history::HistoryRow| {
            r.delta
                .as_deref()
                .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
                .is_some_and(|d| d.get("key").and_then(|k| k.as_str()) == Some(key))
        };
        if kept.iter().any(carries) {
            let current = tx.binding_value(b.name, b.execution_id)?;
            return Ok(BindOutcome {
                released: Vec::new(),
                written: current,
                version: tx.binding_own_version(b.name, b.execution_id)?,
            });
        }
    }
    let mut delta = None;
    let (computed, kind) = match b.update {
        Some(update) => {
            if existing.as_ref().is_some_and(|h| h.1.is_some()) {
                return Err(refused(format!(
                    "binding {} holds an attachment: --append and --merge work on JSON values kept inline",
                    shown(b.name)
                )));
            }
            let current = tx.binding_value(b.name, b.execution_id)?;
            let value = crate::store::history::apply_update(update, current.as_deref(), b.name)?;
            // History keeps the step, not the whole value again (which would grow with the
            // square of the steps), after a version it applies to.
            let mut step = match update {
                crate::store::Update::Append(item) => serde_json::json!({ "append": item }),
                crate::store::Update::Merge(patch) => serde_json::json!({ "merge": patch }),
            };
            if let Some(key) = b.key {
                step["key"] = serde_json::Value::from(key);
                // The key is kept with the step: a binding made by a keyed update starts as
                // its empty value (a version of its own), so that the first step is one too.
                if existing.is_none() {
                    let empty = match update {
                        crate::store::Update::Append(_) => "[]",
                        crate::store::Update::Merge(_) => "{}",
                    };
                    let first = BindingRecord {
                        name: Some(b.name.to_string()),
                        execution_id: b.execution_id,
                        kind: Some(b.kind.to_string()),
                        value: Some(empty.as_bytes().to_vec()),
                        source_statement: b.source_statement.map(str::to_string),
                        created_at: Some(b.now.to_string()),
                        updated_at: Some(b.now.to_string()),
                        attachment_path: None,
                    };
                    tx.put_binding(&first, Some(b.principal), None)?;
                }
                delta = Some(step);
            } else {
                delta = existing.as_ref().map(|_| step);
            }
            // An update keeps the binding's kind.
            let kind = existing.as_ref().and_then(|h| h.0.clone());
            (Some(value), kind)
        }
        None => (None, None),
    };
    let written = NewBinding {
        value: computed.as_deref().unwrap_or(b.value),
        kind: kind.as_deref().unwrap_or(b.kind),
        ..*b
    };
    publish()?;
    let record = BindingRecord {
        name: Some(written.name.to_string()),
        execution_id: written.execution_id,
        kind: Some(written.kind.to_string()),
        value: Some(written.value.as_bytes().to_vec()),
        source_statement: written.source_statement.map(str::to_string),
        created_at: Some(written.now.to_string()),
        updated_at: Some(written.now.to_string()),
        attachment_path: written.attachment_path.map(str::to_string),
    };
    let delta = delta.map(|d| d.to_string());
    let version = tx.put_binding(&record, Some(b.principal), delta.as_deref())?;
    // The run's bound on versions kept (the project's default at `init`): once a binding
    // holds twice as many, the older ones go in this write's transaction, so that the bound
    // costs a cut now and then, not one at every write.
    let mut released = Vec::new();
    if let Some(keep) = tx.history_keep()?.filter(|k| *k > 0) {
        let kind = crate::store::history::Kept::Bindings;
        if tx.versions_kept(kind, b.name, b.execution_id)? > 2 * keep {
            let rows = tx.kept_versions(kind, b.name, b.execution_id)?;
            let gone = cut_to(
                &mut **tx,
                kind,
                b.name,
                b.execution_id,
                &rows,
                keep as usize,
            )?;
            released.extend(gone.iter().filter_map(|r| r.attachment_path.clone()));
        }
    }
    let replaced_attachment = existing
        .and_then(|(_, old, _, _)| old)
        .filter(|old| Some(old.as_str()) != b.attachment_path);
    released.extend(replaced_attachment);
    released.sort();
    released.dedup();
    Ok(BindOutcome {
        released,
        written: computed,
        // The binding's own new version, for a caller that will compare-and-set again: every
        // bind reports it (`bind --json` shows it, `history` lists it).
        version: Some(version),
    })
}

/// Runs `remove` if no binding references the attachment any more, in a serialised
/// transaction, so a concurrent bind cannot take the file up while it goes.
pub fn release_attachment(
    mut tx: Txn<'_>,
    attachment_path: &str,
    remove: &mut dyn FnMut() -> Result<()>,
) -> Result<bool> {
    let referenced = tx.attachment_referenced(attachment_path)?;
    let released = !referenced
        && match crate::store::server_blob(attachment_path) {
            // Kept in the store: its chunks go in this transaction, unless an upload still
            // holds it (a writer that has not linked it yet).
            Some(blob) => tx.delete_blob(blob)?,
            None => {
                remove()?;
                true
            }
        };
    tx.commit()?;
    Ok(released)
}

/// Cuts one binding's (or agent's) kept versions `rows` to its newest `keep`: the oldest kept
/// made whole (a step rebuilt into its value) and marked as having older versions not kept.
/// The versions that went (none when it holds no more than `keep`).
fn cut_to<'r>(
    tx: &mut dyn Tx,
    kept: crate::store::history::Kept,
    name: &str,
    scope: Option<i64>,
    rows: &'r [crate::store::history::HistoryRow],
    keep: usize,
) -> Result<&'r [crate::store::history::HistoryRow]> {
    let cut = rows.len().saturating_sub(keep);
    if cut == 0 {
        return Ok(&[]);
    }
    let whole = match rows[cut].delta {
        Some(_) => Some(crate::store::history::value_at(rows, cut)?),
        None => None,
    };
    tx.cut_history(
        kept,
        name,
        scope,
        rows[cut].n,
        whole.as_ref().map(|v| v.as_deref()),
    )?;
    Ok(&rows[..cut])
}

/// What pruning a run's binding history did (or, in a dry run, would do).
#[derive(Debug, Default, serde::Serialize)]
pub struct HistoryPruned {
    /// Versions deleted.
    pub versions: usize,
    /// Bindings that lost versions.
    pub bindings: usize,
    /// The bytes of the values kept in rows that went.
    pub bytes: u64,
    /// Values kept outside the rows that only the deleted versions named: released after the
    /// commit, unless something names them again by then.
    #[serde(skip)]
    pub released: Vec<String>,
}

/// Keeps the newest `keep` versions of each binding of the run (at least 1: the current one)
/// and deletes the older ones, in one transaction. The oldest version kept becomes whole (a
/// step is rebuilt into its value) and is marked as having versions before it that are not
/// kept, so that a read of a time before it says so instead of finding nothing. A finished
/// run is pruned too: this is upkeep, not a write of its state. Without `apply`, nothing is
/// written.
pub fn prune_history(mut tx: Txn<'_>, keep: i64, apply: bool) -> Result<HistoryPruned> {
    use crate::store::history::Kept;
    let mut out = HistoryPruned::default();
    let over = [Kept::Bindings, Kept::Agents]
        .into_iter()
        .map(|k| {
            Ok(tx
                .history_over(k, keep.max(1))?
                .into_iter()
                .map(move |b| (k, b)))
        })
        .collect::<Result<Vec<_>>>()?;
    for (kept, (name, scope)) in over.into_iter().flatten() {
        let rows = tx.kept_versions(kept, &name, scope)?;
        let gone = cut_to(&mut *tx, kept, &name, scope, &rows, keep.max(1) as usize)?;
        if gone.is_empty() {
            continue;
        }
        out.bindings += 1;
        out.versions += gone.len();
        out.bytes += gone
            .iter()
            .map(|r| r.value.as_ref().map_or(0, Vec::len) + r.delta.as_ref().map_or(0, String::len))
            .sum::<usize>() as u64;
        out.released
            .extend(gone.iter().filter_map(|r| r.attachment_path.clone()));
    }
    out.released.sort();
    out.released.dedup();
    // Only those nothing names any more (the current value or a version kept may share one).
    let mut released = Vec::new();
    for rel in std::mem::take(&mut out.released) {
        if !tx.attachment_referenced(&rel)? {
            released.push(rel);
        }
    }
    out.released = released;
    if apply {
        tx.commit()?;
    }
    Ok(out)
}

/// Moves a binding's value to where it is now kept (`doctor --fix` uploading a local
/// attachment file to the server): the row of (name, scope) is pointed at `new` only if it
/// still points at `old`, so a rebind that came first is never undone. The value is the same
/// bytes, so a finished run takes this too.
pub fn relink(
    mut tx: Txn<'_>,
    name: &str,
    execution_id: Option<i64>,
    old: &str,
    new: &str,
) -> Result<bool> {
    let moved = match tx.binding_head(name, execution_id)? {
        Some((_, Some(path), _, _)) if path == old => {
            tx.set_attachment_path(name, execution_id, new)?;
            tx.relink_history(old, new)?;
            true
        }
        _ => false,
    };
    tx.commit()?;
    Ok(moved)
}
