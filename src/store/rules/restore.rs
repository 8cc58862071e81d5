//! Restore: a whole run written from a copy (`import`, `export`), and its triggers made
//! again.

use crate::error::{refused, shown};
use crate::store::tx::Txn;
use anyhow::{anyhow, Result};

use super::sweep::next_reminder_of;
use super::{append_audit, disagreement, is_team_opening, load_exact, Event};

/// A copy of a run to write into a store (`import`, and `export`'s new file).
pub struct Restore<'a> {
    pub dump: &'a crate::store::dump::RunDump,
    /// The path each attachment has in the destination, by its path in the source.
    pub paths: &'a std::collections::HashMap<String, String>,
    /// The destination was made for this copy (a new file holding only the run's row).
    pub fresh: bool,
    /// Replace a different run under the same id: its rows and values go first (its audit
    /// log, append-only, stays, and must agree with the copy's).
    pub replace: bool,
    /// Seal every chained row again with this machine's key (an import); else the rows keep
    /// their seals (an export is a copy, as it was).
    pub reseal: bool,
    /// The `imported` event to append: who imported, and its metadata. None for an export.
    pub event: Option<(Option<&'a str>, serde_json::Value)>,
    pub now: &'a str,
}

/// Writes a whole run in one transaction: the run's row, its log (renumbered where the store
/// numbers ids itself, every reference moved with it), bindings pointed at their values' new
/// places, gates, agents, imports, and the audit chain with its sequence and hashes as they
/// were (resealed on import), then the `imported` event chained after it. Nothing is written
/// if any of it is refused.
pub fn restore(mut tx: Txn<'_>, r: &Restore) -> Result<()> {
    use crate::store::dump::{IMPORTED, RUN_EVENT};
    use std::collections::HashMap;
    let d = r.dump;
    let run_id = d.run.id.as_str();
    d.check_keys()?;
    if !r.fresh && tx.run_row()?.is_some() {
        if !r.replace {
            return Err(refused(format!(
                "run {} already exists here with other content: import --replace to replace it",
                shown(run_id)
            )));
        }
        tx.clear_run()?;
    }
    tx.put_run(&d.run)?;
    let keep = tx.keeps_ids();
    let mut ids: HashMap<i64, i64> = HashMap::new();
    let moved = |ids: &HashMap<i64, i64>, id: Option<i64>, what: &dyn Fn() -> String| {
        match id {
        None => Ok(None),
        Some(id) if keep => Ok(Some(id)),
        Some(id) => ids.get(&id).copied().map(Some).ok_or_else(|| {
            refused(format!(
                "{} names execution {id}, which the run's log does not have before it; nothing was imported",
                what()
            ))
        }),
    }
    };
    for e in &d.executions {
        let mut e2 = e.clone();
        e2.parent_id = moved(&ids, e.parent_id, &|| format!("execution {}", e.id))?;
        let id = tx
            .put_execution(keep.then_some(e.id), &e2)?
            .ok_or_else(|| {
                anyhow!(
                "execution {}: its idempotency key is another record's too; nothing was imported",
                e.id
            )
            })?;
        ids.insert(e.id, id);
    }
    for b in &d.bindings {
        let mut b2 = b.clone();
        let name = || format!("binding {}", shown(b.name.as_deref().unwrap_or_default()));
        b2.execution_id = moved(&ids, b.execution_id, &name)?;
        if let Some(old) = &b.attachment_path {
            let new = r
                .paths
                .get(old)
                .ok_or_else(|| anyhow!("{}: its value was not copied", name()))?;
            // The summary names where the value is kept: it names the new place.
            b2.value = b.value.as_deref().map(|v| {
                String::from_utf8_lossy(v)
                    .replace(old.as_str(), new)
                    .into_bytes()
            });
            b2.attachment_path = Some(new.clone());
        }
        tx.put_binding(&b2, None, None)?;
    }
    // Every version as the copy kept it (the bindings' writes above made their own); a copy
    // that carries none (made before history was kept) starts each binding's here.
    use crate::store::history::Kept;
    if d.history.is_empty() {
        tx.mark_history_gap(Kept::Bindings)?;
    } else {
        tx.clear_history(Kept::Bindings)?;
        for h in &d.history {
            let mut h2 = h.clone();
            let name = || format!("a version of binding {}", shown(&h.name));
            h2.execution_id = moved(&ids, h.execution_id, &name)?;
            h2.at_record = moved(&ids, h.at_record, &name)?;
            if let Some(old) = &h.attachment_path {
                let new = r
                    .paths
                    .get(old)
                    .ok_or_else(|| anyhow!("{}: its value was not copied", name()))?;
                h2.value = h.value.as_deref().map(|v| {
                    String::from_utf8_lossy(v)
                        .replace(old.as_str(), new)
                        .into_bytes()
                });
                h2.attachment_path = Some(new.clone());
            }
            tx.put_history(Kept::Bindings, &h2)?;
        }
    }
    for (gates, instance) in [(&d.gates, false), (&d.gate_instances, true)] {
        for g in gates {
            let mut g2 = g.clone();
            g2.run_id = Some(run_id.to_string());
            g2.execution_id = moved(&ids, g.execution_id, &|| format!("gate {}", shown(&g.id)))?;
            tx.put_gate(&g2, instance)?;
        }
    }
    for a in &d.agents {
        tx.put_agent(a)?;
    }
    if d.agent_history.is_empty() {
        tx.mark_history_gap(Kept::Agents)?;
    } else {
        tx.clear_history(Kept::Agents)?;
        for h in &d.agent_history {
            let mut h2 = h.clone();
            h2.at_record = moved(&ids, h.at_record, &|| {
                format!("a version of agent {}", shown(&h.name))
            })?;
            tx.put_history(Kept::Agents, &h2)?;
        }
    }
    for s in &d.segments {
        let mut s2 = s.clone();
        s2.at_record = moved(&ids, s.at_record, &|| "an agent segment".to_string())?;
        tx.put_segment(&s2)?;
    }
    for i in &d.imports {
        tx.put_import(i)?;
    }
    let wiring = tx.wiring();
    let key = r.reseal.then(|| wiring.key_for_writing()).transpose()?;
    for row in &d.audit {
        if !keep && row.seq.is_none() && row.hash.is_some() {
            return Err(refused(format!(
                "the audit log of run {} has rows from before prose-state schema 5, whose hashes cover their row ids, which this store numbers itself; import it into SQLite instead (nothing was imported)",
                shown(run_id)
            )));
        }
        if let Some(seq) = row.seq {
            // The server's log is append-only: a run pruned there and brought back finds its
            // events still in place, the same ones; another run's are refused.
            match tx.audit_at_seq(seq)? {
                Some(hash) if hash == row.hash => continue,
                Some(_) => {
                    return Err(refused(format!(
                        "the audit log here already holds a different event at seq {seq} of run {} (it is append-only, so a run with another history cannot take this id); nothing was imported",
                        shown(run_id)
                    )))
                }
                None => {}
            }
        }
        let mut row2 = row.clone();
        if is_team_opening(row) {
            tx.require_team_readers()?;
        }
        row2.id = if keep { row.id } else { tx.next_audit_id()? };
        if let (Some(k), Some(hash), Some(_)) = (&key, &row.hash, row.seq) {
            row2.seal = Some(k.seal(hash));
        }
        tx.insert_audit(&row2)?;
    }
    if !keep {
        seal_renumbering(&mut tx, d, &ids, r.now)?;
    }
    // A copy carries no `remind_at` (only when to look): each pending gate's next reminder is
    // read again from its sealed log, as it stands here.
    for g in d
        .gates
        .iter()
        .filter(|g| g.status.as_ref().is_some_and(|s| s.is_pending()))
    {
        let Some(row) = load_exact(&mut *tx, &g.id)? else {
            continue;
        };
        let (tampered, derived) = disagreement(&mut *tx, &row)?;
        // The earliest not yet announced, due or not: the next reader announces a due one.
        let next = match tampered {
            None => next_reminder_of(&row, &derived, "1970-01-01 00:00:00"),
            Some(_) => None,
        };
        if next.is_some() {
            tx.set_gate_schedule(&row.id, None, next.as_deref())?;
        }
    }
    if let Some((principal, metadata)) = &r.event {
        let e = Event::system(RUN_EVENT, run_id, IMPORTED, r.now).by(*principal, None);
        append_audit(&mut *tx, &e, metadata.clone())?;
    }
    tx.commit()
}

/// Seals how a copy renumbered its log, when its sealed events name executions (the frames of
/// a gate's inputs and answer, a decision's pinned versions and edits): one `renumbered` event
/// after the events it took in, with the old and new id of each execution they name, as the
/// copy's own `renumbered` events had made them (`chain::Moves`). An id kept as it was, or one
/// the copy's log does not have (it names no execution here either), is left out; a copy that
/// changed none writes no event.
fn seal_renumbering(
    tx: &mut Txn<'_>,
    d: &crate::store::dump::RunDump,
    ids: &std::collections::HashMap<i64, i64>,
    now: &str,
) -> Result<()> {
    use crate::store::chain::{for_each_scope, Moves, RENUMBERED};
    let moves = Moves::of(&d.audit);
    let mut named = std::collections::BTreeMap::new();
    for row in d.audit.iter().filter(|r| r.seq.is_some()) {
        let Some(mut m) = row
            .metadata
            .as_deref()
            .and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok())
        else {
            continue;
        };
        moves.renumber(row.seq, &mut m);
        for_each_scope(&mut m, &mut |then| {
            if let Some(new) = ids.get(&then).filter(|new| **new != then) {
                named.insert(then.to_string(), *new);
            }
            then
        });
    }
    let Some(head) = d.audit.iter().filter_map(|r| r.seq).max() else {
        return Ok(());
    };
    if named.is_empty() {
        return Ok(());
    }
    let e = Event::system(crate::store::dump::RUN_EVENT, &d.run.id, RENUMBERED, now);
    append_audit(
        &mut **tx,
        &e,
        serde_json::json!({"head": head, "ids": named}),
    )?;
    Ok(())
}

/// Makes the schema's missing triggers again (doctor --fix) and, where a history's trigger
/// was missing, starts each binding's (or memory's) history again at a version marked as
/// following a time when writes may not have been kept: reading or forking before it is then
/// "not known", never a value history did not see.
pub fn restore_triggers(mut tx: Txn<'_>, now: &str) -> Result<Vec<String>> {
    use crate::store::history::Kept;
    let missing = tx.missing_triggers()?;
    if missing.is_empty() {
        return Ok(missing);
    }
    tx.make_triggers(&missing)?;
    for kept in [Kept::Bindings, Kept::Agents] {
        if missing.iter().any(|t| kept.keeps_by(t)) {
            tx.resume_history(kept, now)?;
        }
    }
    tx.commit()?;
    Ok(missing)
}
