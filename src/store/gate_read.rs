//! The one way a gate is read to be shown or acted on: what is due swept first, the row of
//! exactly that id, its own sealed history, and what that history derives. A front end shows
//! and acts on the derivation; the row is a projection, compared with it and never trusted.

use super::chain::{self, Derived, Integrity};
use super::{GateRow, Store};
use crate::error::shown;
use anyhow::Result;

/// A gate as a reader may show or act on it.
#[derive(Debug, Clone)]
pub struct GateRead {
    /// The gates row, as stored: a projection.
    pub row: GateRow,
    /// How the row stands against its sealed history.
    pub integrity: Integrity,
    /// The gate as its sealed events make it (`chain::Derived`): what a reader acts on.
    pub derived: Derived,
}

impl GateRead {
    /// Whether its row disagrees with its sealed history (or that history is broken).
    pub fn tampered(&self) -> bool {
        matches!(self.integrity, Integrity::Tampered(_))
    }

    /// Its status and who decided it, as a reader may state them: the row's where the row
    /// agrees with its sealed history or nothing attests either (a gate raw SQL made and
    /// decided, the spec's way); the sealed history's where the row contradicts it, so that
    /// a row edited behind prose-state's back never says who decided.
    pub fn decision(&self) -> (crate::model::GateStatus, Option<&str>) {
        if self.tampered() {
            let by = self.derived.decision.as_ref().map(|(_, by, _)| by.as_str());
            return (self.derived.status(), by);
        }
        (self.row.status.clone(), self.row.resolved_by.as_deref())
    }
}

/// Reads the gate stored under exactly `id`, after the sweep every gate operation runs first,
/// checked against its own sealed history, with what that history derives. The row and the
/// history are read in one snapshot ([`super::consistent`]): a decision committed between two
/// reads would show the row behind its log, as tampering. None when there is no such gate; a
/// row another id answers for (a collation changed behind prose-state's back makes `deploy`
/// find `DEPLOY`) is refused as tampering (exit 9).
pub fn read(store: &mut dyn Store, id: &str, now: &str) -> Result<Option<GateRead>> {
    store.sweep_timeouts(now)?;
    let read = super::consistent(store, |s| {
        let Some(row) = s.read_gate(id)? else {
            return match gone(s, id)? {
                Some(e) => Err(e),
                None => Ok(None),
            };
        };
        if row.id != id {
            return Err(crate::error::tampered(format!(
                "looking up gate {} found gate {}: the gates table was changed behind prose-state's back",
                shown(id),
                shown(&row.id)
            )));
        }
        let (history, moves) = s.gate_history_and_moves(id)?;
        Ok(Some((row, history, moves, s.run_info()?.id)))
    })?;
    let Some((row, history, moves, run)) = read else {
        return Ok(None);
    };
    let key = store.wiring().key_for_reading()?;
    let (integrity, derived) = chain::gate_against_history(&row, &run, &history, &moves, key);
    Ok(Some(GateRead {
        row,
        integrity,
        derived,
    }))
}

/// Why gate `id`, which no row holds, cannot be read: its sealed log opened it (a `created`
/// event that vouches for itself under this machine's key) and its row is gone, deleted behind
/// prose-state's back (exit 9). None when nothing sealed opened it: there is no such gate.
pub fn gone(store: &mut dyn Store, id: &str) -> Result<Option<anyhow::Error>> {
    let history = store.gate_history(id)?;
    let key = store.wiring().key_for_reading()?;
    let opened = history.iter().any(|r| {
        r.gate_id == id
            && r.event_type == "created"
            && chain::self_state(r, key) == super::derive::RowState::Attested
    });
    Ok(opened.then(|| {
        crate::error::tampered(format!(
            "gate {} was opened by its sealed log, and its gates row is gone: it was deleted behind prose-state's back",
            shown(id)
        ))
    }))
}

/// Every earlier opening (superseded by a reopen) of the report's gates against the row
/// `gate_instances` keeps of it (`row_of(gate, instance)`), as `gates wait --instance` judges
/// it (`chain::opening_integrity`): the gates whose earlier opening does not stand, with why,
/// for gates the report has no finding for yet. A projection rewritten behind prose-state's
/// back (a rejection turned into an approval, a decider renamed, a row deleted) is found.
pub fn earlier_openings(
    report: &chain::ChainReport,
    mut row_of: impl FnMut(&str, i64) -> Result<Option<GateRow>>,
) -> Result<Vec<(String, Integrity)>> {
    let mut found = Vec::new();
    for (gate, d) in &report.derived {
        if report.gates.iter().any(|(g, _)| g == gate) {
            continue;
        }
        for opening in &d.earlier {
            let row = row_of(gate, opening.instance)?;
            if let Integrity::Tampered(why) =
                chain::opening_integrity(report, gate, row.as_ref(), opening)
            {
                found.push((gate.clone(), Integrity::Tampered(why)));
                break;
            }
        }
    }
    Ok(found)
}

/// The row a listing shows for gate `id`, whose sealed log (`d`) opened it and whose row is
/// gone: what the log says of it, its prompt unknown (the log keeps its hash). Listed marked
/// tampered, never left out.
pub fn gone_row(id: &str, d: &Derived) -> GateRow {
    GateRow {
        id: id.to_string(),
        run_id: Some(d.run_id.clone()),
        execution_id: None,
        prompt: String::new(),
        allow: d.allow.clone(),
        timeout: d.timeout.clone().flatten(),
        timeout_at: d.timeout_at.clone().flatten(),
        on_reject: d.on_reject.clone().flatten(),
        status: d.status(),
        created_at: d.created_at.clone(),
        resolved_at: d.decision.as_ref().and(d.decided_at.clone()),
        resolved_by: d.decision.as_ref().map(|(_, by, _)| by.clone()),
        resolution_comment: d.decision.as_ref().and(d.comment.clone()),
        metadata: None,
        instance: d.instance,
    }
}

/// What a reader shows of a gate whose row contradicts its sealed log (`integrity` tampered):
/// every field its sealed opening records, as that opening has it (the status, who decided,
/// when and why, the allow list, the deadline), never the row's; the row's own where nothing
/// sealed opened the gate, or for what the log does not record (the prompt, whose digest it
/// seals, the metadata, and the run it is kept in). The gate marked tampered beside it says
/// the rest.
pub fn shown_row(row: GateRow, integrity: &Integrity, d: &Derived) -> GateRow {
    if !matches!(integrity, Integrity::Tampered(_)) {
        return row;
    }
    sealed_view(row, d)
}

/// [`shown_row`] of a gate known to be tampered with: its row, every field its sealed opening
/// `d` records taken from `d` (the row as it is where nothing sealed opened it).
pub fn sealed_view(row: GateRow, d: &Derived) -> GateRow {
    if d.instance == 0 {
        return row;
    }
    let sealed = gone_row(&row.id, d);
    GateRow {
        // Recorded by its created event (events before that release did not): the log's.
        timeout: if d.timeout.is_some() {
            sealed.timeout
        } else {
            row.timeout
        },
        timeout_at: if d.timeout_at.is_some() {
            sealed.timeout_at
        } else {
            row.timeout_at
        },
        on_reject: if d.on_reject.is_some() {
            sealed.on_reject
        } else {
            row.on_reject
        },
        // Where the row lives, which a listing groups it by (a copy made by hand names the
        // run it was copied from in its sealed events).
        run_id: row.run_id,
        prompt: row.prompt,
        metadata: row.metadata,
        execution_id: row.execution_id,
        ..sealed
    }
}

/// What a reader of one run's checked log (`report`) shows of a gate's row: [`shown_row`] of
/// it as [`listed`] judges it.
pub fn shown_in(row: GateRow, report: &chain::ChainReport) -> GateRow {
    let read = listed(row, report);
    shown_row(read.row, &read.integrity, &read.derived)
}

/// A gate a listing read, as its run's checked log (`Store::verify_audit`) has it: a broken
/// log taints every gate of the run. What a listing shows of one run's gates: never its row's
/// word where the log contradicts it (`GateRead::decision`).
pub fn listed(row: GateRow, report: &chain::ChainReport) -> GateRead {
    let integrity = match (report.gate(&row.id), &report.first_broken) {
        (Integrity::Tampered(d), _) => Integrity::Tampered(d),
        (_, Some(b)) => Integrity::Tampered(format!("the run's audit log is broken: {}", b.reason)),
        (other, None) => other,
    };
    let derived = report.derived.get(&row.id).cloned().unwrap_or_default();
    GateRead {
        row,
        integrity,
        derived,
    }
}

/// Checks a lookup of `name` from `start` (None: the root) against the sealed log, where a
/// gate's sealed opening names a binding of that name as the one its decision writes: each
/// such binding in the scopes the lookup passed through, up to and including the one it found
/// the name in (`found`; None: not found, every scope), must hold exactly the bytes of the
/// newest answer a sealed decision of such an opening wrote (by the version each sealed), or
/// it was changed behind prose-state's back (exit 9): changed, moved, renamed or gone, so that
/// an outer binding of the name is never read in its place. Before any decision has answered,
/// it holds what it held. The log is checked whole, as `gates verify` checks it: a log that
/// is broken, or a gate naming the binding that disagrees with its log, vouches for no answer
/// (exit 9).
pub fn check_response_binding(
    store: &mut dyn Store,
    name: &str,
    start: Option<i64>,
    found: Option<Option<i64>>,
) -> Result<()> {
    // The common case, a name no gate names, costs one narrow read and the check of it.
    let named = store.naming(name)?.response;
    check_response_binding_named(store, name, start, found, named, Read::Now(None), None)
}

/// How a name is read: as it is now (with the very row to be printed, when the caller holds
/// it: that row is what is checked), or in the past: the versions of the binding the name
/// finds now (`get --version`, `history`: None), or what it found at a point of the run
/// (`get --as-of`: that point).
#[derive(Clone, Copy)]
pub enum Read<'a> {
    Now(Option<&'a crate::store::BindingRow>),
    Past(Option<&'a super::history::AsOf>),
}

/// [`check_response_binding`], with the gates that answer into `name` already read
/// (`Rows::gates_naming`). A read of the past (`get --version`, `--as-of`, `history`) is
/// checked the same way, the answers as they stand included (a broken state vouches for no
/// answer, then or now), except that an outer binding `--as-of` found at a point before the
/// gate's opening is what the name meant then. `checked`: the log as the caller already checked it (`Store::verify_audit`),
/// read here otherwise.
pub fn check_response_binding_named(
    store: &mut dyn Store,
    name: &str,
    start: Option<i64>,
    found: Option<Option<i64>>,
    named: Vec<(String, Option<i64>)>,
    read: Read<'_>,
    checked: Option<&chain::ChainReport>,
) -> Result<()> {
    if named.is_empty() {
        return Ok(());
    }
    let (as_of, printed) = match read {
        Read::Past(at) => (at, None),
        Read::Now(printed) => (None, printed),
    };
    // Some opening names it as a gate's answer: the log is checked whole first (a broken log
    // vouches for no answer, exit 9), and the scopes its sealed openings answer into, read
    // through its moves, join those the narrow read found.
    let verified;
    let report = match checked {
        Some(report) => report,
        None => {
            verified = store.verify_audit()?;
            &verified
        }
    };
    log_whole(report, name, "is a gate's answer")?;
    let mut named = named;
    for (gate, d) in &report.derived {
        for opening in d.earlier.iter().chain(std::iter::once(d)) {
            if let Some((n, scope)) = &opening.response_binding {
                let at = (gate.clone(), *scope);
                if n == name && !named.contains(&at) {
                    named.push(at);
                }
            }
        }
    }
    let mut passed: Vec<Option<i64>> = match start {
        Some(id) => store.scope_chain(id)?.into_iter().map(Some).collect(),
        None => Vec::new(),
    };
    passed.push(None);
    let full = passed.clone();
    if let Some(at) = found {
        if let Some(i) = passed.iter().position(|s| *s == at) {
            passed.truncate(i + 1);
        }
    }
    // A binding found below a response binding's scope hides the answer, and no rule writes
    // one there once the gate is open (`bind` refuses it; the gate's opening refused one
    // already there): it was put there behind prose-state's back.
    if let Some(at) = found {
        if let Some(i) = full.iter().position(|s| *s == at) {
            if let Some((gate, scope)) = named
                .iter()
                .find(|(_, s)| *s != at && full[i..].contains(s))
            {
                let place = at.map_or("the root".to_string(), |e| format!("execution {e}"));
                return Err(crate::error::tampered(format!(
                    "binding {} in {place} hides gate {}'s answer in {}: no rule writes a binding of that name there, so it was written behind prose-state's back",
                    shown(name),
                    shown(gate),
                    scope.map_or("the root".to_string(), |e| format!("execution {e}"))
                )));
            }
        }
    }
    let mut scopes: Vec<Option<i64>> = named.iter().map(|(_, s)| *s).collect();
    scopes.retain(|s| passed.contains(s));
    scopes.dedup();
    if scopes.is_empty() {
        return Ok(());
    }
    // The log as `gates verify` checks it (every seal, the chain, this machine's anchor, each
    // gate's row against its events), then the bindings. A decision committing between the two
    // reads shows the binding ahead of the log: looked at again, it agrees; a change stays.
    // The log already checked is the first look; a later one only after a disagreement.
    let (mut attempt, mut again) = (0, None);
    loop {
        let report = again.as_ref().unwrap_or(report);
        match answered_as_sealed(store, report, name, &named, &scopes, printed) {
            Ok(()) => break,
            Err(_) if attempt < 2 && report.first_broken.is_none() => {
                attempt += 1;
                again = Some(store.verify_audit()?);
            }
            Err(e) => return Err(e),
        }
    }
    // A gate opened again since its answer (a `retry`, a loop's next pass) has not answered
    // the opening that stands: the earlier answer is its history's (`history`, `get
    // --version`), not what the name holds now.
    if let (Some(at), Read::Now(_)) = (found, read) {
        for (gate, _) in named.iter().filter(|(_, s)| *s == at) {
            let Some(d) = report.derived.get(gate) else {
                continue;
            };
            let openings: Vec<&Derived> = d
                .earlier
                .iter()
                .chain(std::iter::once(d))
                .filter(|o| o.response_binding.as_ref() == Some(&(name.to_string(), at)))
                .collect();
            let answered = openings
                .iter()
                .rposition(|o| o.response.is_some() && o.response_version.is_some());
            if let Some(a) = answered.filter(|a| *a + 1 < openings.len()) {
                let now = openings[openings.len() - 1];
                return Err(crate::error::not_found(format!(
                    "binding {} is gate {}'s answer, and the gate was opened again (instance {}) after instance {} answered: no decision has answered instance {} (the earlier answer is in `history {}`)",
                    shown(name),
                    shown(gate),
                    now.instance,
                    openings[a].instance,
                    now.instance,
                    shown(name)
                )));
            }
        }
    }
    // A response binding nearer than where the name was found holds no answer (no decision
    // has answered, or one without an answer; at `--as-of`'s point, none had yet): the outer
    // binding of the same name is not read in its place. Only a point before the opening
    // reads past it: the outer binding is what the name meant then.
    if let Some(at) = found {
        let nearer = &passed[..passed.iter().position(|s| *s == at).unwrap_or(0)];
        let opened_by = |gate: &str, scope: Option<i64>| {
            let Some(point) = as_of else { return true };
            let Some(d) = report.derived.get(gate) else {
                return true;
            };
            d.earlier
                .iter()
                .chain(std::iter::once(d))
                .filter(|o| o.response_binding.as_ref() == Some(&(name.to_string(), scope)))
                .any(|o| opened_then(o, scope, point))
        };
        if let Some((gate, scope)) = named
            .iter()
            .find(|(g, s)| nearer.contains(s) && opened_by(g, *s))
        {
            let place = scope.map_or("the root".to_string(), |e| format!("execution {e}"));
            let (has, then) = match as_of {
                Some(point) => ("had", format!(" at {point}")),
                None => ("has", String::new()),
            };
            return Err(crate::error::not_found(format!(
                "binding {} in {place} is gate {}'s answer, and no decision {has} answered it{then}: the {} of an outer scope is not read in its place",
                shown(name),
                shown(gate),
                shown(name)
            )));
        }
    }
    Ok(())
}

/// Refuses (3) version `n` of response binding `name` in `scope`, read as it stood at
/// `point` (`get --as-of`), when it is the answer of a gate's opening that a later opening of
/// the gate, made by then, stood after: at that point the answer was no longer the name's.
pub fn check_standing_at(
    report: &chain::ChainReport,
    name: &str,
    scope: Option<i64>,
    n: i64,
    point: &super::history::AsOf,
) -> Result<()> {
    use super::history::AsOf;
    let made_by = |o: &Derived| match point {
        AsOf::Record(r) => o.opened_record.is_none_or(|a| a <= *r),
        AsOf::Time(t) => o.created_at.as_deref().is_none_or(|c| c <= t.as_str()),
    };
    for (gate, d) in &report.derived {
        let openings: Vec<&Derived> = d
            .earlier
            .iter()
            .chain(std::iter::once(d))
            .filter(|o| o.response_binding.as_ref() == Some(&(name.to_string(), scope)))
            .collect();
        let Some(k) = openings.iter().position(|o| o.response_version == Some(n)) else {
            continue;
        };
        if let Some(later) = openings[k + 1..].iter().rev().find(|o| made_by(o)) {
            return Err(crate::error::not_found(format!(
                "binding {} is gate {}'s answer, and at {point} the gate had been opened again (instance {}) after instance {} answered: no decision had answered instance {} then",
                shown(name),
                shown(gate),
                later.instance,
                openings[k].instance,
                later.instance
            )));
        }
    }
    Ok(())
}

/// Whether an opening answering into `scope` (its frame) stood at `point`: its `created`
/// event written by then. A point given as a record counts from the frame's own record (the
/// gate is opened inside it): a point inside the frame before the gate opened is read as
/// after, so that no outer value is ever read in an answer's place.
fn opened_then(opening: &Derived, scope: Option<i64>, point: &super::history::AsOf) -> bool {
    use super::history::AsOf;
    match point {
        AsOf::Record(r) => scope.is_none_or(|frame| frame <= *r),
        AsOf::Time(t) => opening
            .created_at
            .as_deref()
            .is_none_or(|created| created <= t.as_str()),
    }
}

/// Each response binding of `name` in `scopes` against the report's sealed decisions: a log
/// that is broken, or a gate naming it that is tampered, vouches for no answer (exit 9).
fn answered_as_sealed(
    store: &mut dyn Store,
    report: &chain::ChainReport,
    name: &str,
    named: &[(String, Option<i64>)],
    scopes: &[Option<i64>],
    printed: Option<&crate::store::BindingRow>,
) -> Result<()> {
    log_whole(report, name, "is a gate's answer")?;
    for scope in scopes {
        let mut newest: Option<(i64, String, serde_json::Value)> = None;
        for (gate, _) in named.iter().filter(|(_, at)| at == scope) {
            if let Integrity::Tampered(why) = report.gate(gate) {
                return Err(crate::error::tampered(format!(
                    "binding {} is gate {}'s answer, and the gate disagrees with its sealed log: {why}",
                    shown(name),
                    shown(gate)
                )));
            }
            let Some(d) = report.derived.get(gate) else {
                continue;
            };
            for opening in d.earlier.iter().chain(std::iter::once(d)) {
                let names = opening.response_binding.as_ref() == Some(&(name.to_string(), *scope));
                if let (true, Some(answer), Some(version)) =
                    (names, &opening.response, opening.response_version)
                {
                    if newest.as_ref().is_none_or(|(v, _, _)| version > *v) {
                        newest = Some((version, gate.clone(), answer.clone()));
                    }
                }
            }
        }
        // The row the reader prints is the one checked, never a second read of it: a view in
        // place of the table, or a writer racing the reader, could make the two differ.
        let value = match printed.filter(|r| r.execution_id == *scope) {
            Some(row) => Some(row.clone()),
            None => store
                .resolve(name, *scope)?
                .filter(|f| f.row.execution_id == *scope)
                .map(|f| f.row),
        };
        let Some((version, gate, answer)) = newest else {
            // No sealed decision has answered into this scope (the gate is pending, was
            // rejected without an answer, or a quorum has votes only), and the opening refused
            // a binding already there: one held there now was put there behind prose-state's
            // back.
            if let (Some(_), Some((gate, _))) = (&value, named.iter().find(|(_, at)| at == scope)) {
                return Err(crate::error::tampered(format!(
                    "binding {} is gate {}'s answer, and no sealed decision has answered into it: it was written behind prose-state's back",
                    shown(name),
                    shown(gate)
                )));
            }
            continue;
        };
        // Its newest kept version is the one the decision sealed, or one its history vouches
        // for after it (`doctor --fix` restating it): a version renumbered, or one no decision
        // wrote, was put in its history behind prose-state's back.
        if let Some(row) = &value {
            if row.own_version != Some(version) {
                let rows = store.binding_history(name, *scope)?;
                if let Some(why) = super::kept::problem(report, name, *scope, &rows) {
                    return Err(crate::error::tampered(format!(
                        "binding {} is gate {}'s answer, and {why}: its history was changed behind prose-state's back",
                        shown(name),
                        shown(&gate)
                    )));
                }
            }
        }
        // Exactly the bytes the decision wrote (its answer as compact JSON), kept inline: the
        // same JSON spelled otherwise was not written by the decision either.
        let held = value
            .as_ref()
            .filter(|r| r.attachment_path.as_deref().is_none_or(str::is_empty))
            .and_then(|r| r.value.as_deref());
        if held != Some(answer.to_string().as_bytes()) {
            return Err(crate::error::tampered(format!(
                "binding {} is not the answer gate {}'s sealed decision gave it: it was changed behind prose-state's back",
                shown(name),
                shown(&gate)
            )));
        }
    }
    Ok(())
}

/// Checks version `n` of binding `name` in `scope`, as a read of the past found it (`held`:
/// its value's bytes, None when kept elsewhere): when a sealed decision wrote that version as
/// its answer (`response_version`), it holds exactly those bytes, or it was changed behind
/// prose-state's back (exit 9), as is a broken log or a naming gate at odds with its log.
pub fn check_answer_version(
    store: &mut dyn Store,
    name: &str,
    scope: Option<i64>,
    n: i64,
    held: Option<&[u8]>,
) -> Result<()> {
    let named: Vec<String> = store
        .naming(name)?
        .response
        .into_iter()
        .filter(|(_, at)| *at == scope)
        .map(|(g, _)| g)
        .collect();
    if named.is_empty() {
        return Ok(());
    }
    let report = store.verify_audit()?;
    log_whole(&report, name, "is a gate's answer")?;
    // A version no sealed decision wrote there (nor `doctor --fix` restating the answer) is
    // the whole history's to judge (`store::kept`, which every read of the past runs).
    for gate in &named {
        if let Integrity::Tampered(why) = report.gate(gate) {
            return Err(crate::error::tampered(format!(
                "binding {} is gate {}'s answer, and the gate disagrees with its sealed log: {why}",
                shown(name),
                shown(gate)
            )));
        }
        let Some(d) = report.derived.get(gate) else {
            continue;
        };
        for opening in d.earlier.iter().chain(std::iter::once(d)) {
            let wrote = opening.response_binding.as_ref() == Some(&(name.to_string(), scope))
                && opening.response_version == Some(n);
            if let (true, Some(answer)) = (wrote, &opening.response) {
                if held != Some(answer.to_string().as_bytes()) {
                    return Err(crate::error::tampered(format!(
                        "version {n} of binding {} is not the answer gate {}'s sealed decision wrote: it was changed behind prose-state's back",
                        shown(name),
                        shown(gate)
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Checks who history says wrote each of `rows` (versions of binding `name` in `scope`)
/// against the sealed log: a version a sealed decision wrote (an approver's edit of a gate's
/// input, a decision's answer into its response binding) must name the principal the decision
/// sealed, and hold as many bytes as it sealed (an answer: exactly its bytes), or history was
/// changed behind prose-state's back (exit 9), as is a broken log.
pub fn check_writers(
    store: &mut dyn Store,
    name: &str,
    scope: Option<i64>,
    rows: &[&super::history::HistoryRow],
) -> Result<()> {
    // Only a binding some gate's sealed opening names (as an input or its response binding)
    // can have a version a decision wrote: the openings narrow the read.
    let [member, escaped] = super::spellings(name);
    let naming = store.audit(&super::AuditFilter {
        event: Some("created"),
        mentions: Some(&[&member, &escaped]),
        ..super::AuditFilter::default()
    })?;
    if naming.is_empty() {
        // No opening the narrowing found names it, so no version is a decision's: one whose
        // statement says a decision of G wrote it is judged by G's own sealed openings, which
        // name it only if the narrowing was misled (exit 9).
        let mut judged = std::collections::BTreeSet::new();
        for statement in rows.iter().filter_map(|r| r.source_statement.as_deref()) {
            if judged.insert(statement)
                && super::rules::decision_opening_kept(store, name, statement)?
                    != super::rules::OpeningNames::NoDecision
            {
                return Err(super::rules::narrowing_misled(name));
            }
        }
        return Ok(());
    }
    if rows.is_empty() {
        return Ok(());
    }
    let report = store.verify_audit()?;
    log_whole(&report, name, "was written by a gate's decision")?;
    // Version -> (the writer the log sealed, the gate, its bytes, the exact value if sealed).
    let sealed: std::collections::HashMap<i64, _> = super::kept::sealed_writes(&report)
        .into_iter()
        .filter(|w| w.name == name && w.scope == scope)
        .filter_map(|w| Some((w.version, (w.by?, w.gate, w.bytes, w.exact))))
        .collect();
    // (A version in an answer's scope that no decision wrote is `store::kept`'s to judge,
    // which `history` runs first.)
    for r in rows {
        let Some((by, gate, bytes, exact)) = sealed.get(&r.n) else {
            continue;
        };
        let held = r.value.as_deref();
        let wrong = if r.principal.as_deref() != Some(*by) {
            Some(format!(
                "says {} wrote it, and gate {}'s sealed decision says {}",
                shown(r.principal.as_deref().unwrap_or("no one")),
                shown(gate),
                shown(by)
            ))
        } else if let Some(text) = exact.as_ref().filter(|t| held != Some(t.as_bytes())) {
            Some(format!(
                "is not the answer gate {}'s sealed decision wrote ({} bytes)",
                shown(gate),
                text.len()
            ))
        } else if let (Some(n), Some(v)) = (bytes, held.filter(|_| r.attachment_path.is_none())) {
            (v.len() as i64 != *n).then(|| {
                format!(
                    "holds {} bytes, and gate {}'s sealed decision wrote {n}",
                    v.len(),
                    shown(gate)
                )
            })
        } else {
            None
        };
        if let Some(why) = wrong {
            return Err(crate::error::tampered(format!(
                "version {} of binding {} {why}: its history was changed behind prose-state's back",
                r.n,
                shown(name)
            )));
        }
    }
    Ok(())
}

/// Versions sealed decisions wrote: (binding, scope, version) -> the gate.
pub type DecisionWrites = std::collections::HashMap<(String, Option<i64>, i64), String>;

/// Which versions sealed decisions wrote, by (binding, scope, version): each an approver's
/// edit or a decision's answer, with the gate whose decision wrote it (the log checked whole,
/// as `gates verify` checks it; a gate that disagrees with its log vouches for none).
pub fn decision_writes(store: &mut dyn Store) -> Result<DecisionWrites> {
    let report = store.verify_audit()?;
    let mut writes = std::collections::HashMap::new();
    if report.first_broken.is_some() {
        return Ok(writes);
    }
    for w in super::kept::sealed_writes(&report) {
        if !matches!(report.gate(w.gate), Integrity::Tampered(_)) {
            let at = (w.name.to_string(), w.scope, w.version);
            writes.insert(at, w.gate.to_string());
        }
    }
    Ok(writes)
}

/// A binding some sealed opening names (`naming`: a gate's answer, or an input a gate is
/// about) is read only where this machine can vouch for the gates naming it: with no audit
/// key, or with one that did not seal their events, a decision (and the answer or edit it
/// wrote) cannot be told from a forgery, as `gates show` and `gates wait` say (exit 10).
pub fn check_vouched(
    report: &chain::ChainReport,
    name: &str,
    naming: &crate::store::rows::Naming,
) -> Result<()> {
    // A broken log is the later checks' to name (exit 9).
    if report.first_broken.is_some() {
        return Ok(());
    }
    let gates = naming.response.iter().map(|(g, _)| g).chain(&naming.about);
    let unvouched = |why: &str| {
        crate::error::unattested(format!(
            "binding {} is named by a gate's opening, and {why}: what its decisions wrote cannot be vouched for here (give this machine the team's audit key)",
            shown(name)
        ))
    };
    if report.key_missing {
        return Err(unvouched("this machine holds no audit key"));
    }
    for gate in gates {
        if let Integrity::Unattested(why) = report.gate(gate) {
            return Err(unvouched(&format!(
                "gate {} is unattested ({why})",
                shown(gate)
            )));
        }
    }
    Ok(())
}

/// A broken log vouches for no answer (exit 9): `name` `is` what makes that matter.
pub fn log_whole(report: &chain::ChainReport, name: &str, is: &str) -> Result<()> {
    match &report.first_broken {
        Some(b) => Err(crate::error::tampered(format!(
            "binding {} {is}, and the run's audit log is broken ({}): run `prose-state gates verify`",
            shown(name),
            b.reason
        ))),
        None => Ok(()),
    }
}
