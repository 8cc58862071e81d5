//! The inputs a gate's decision is about (`gates create --inputs`): what each holds now, read
//! where it is kept (inline, a file, a blob on the server), as the content digest a decision
//! seals and a stale check compares.

mod current;
pub use current::{check_current, claims_decision};

use crate::store::chain::{Derived, Pin};
use crate::store::{GateRow, Store};
use anyhow::Result;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

/// Each input's content digest, by name (None: no such binding).
pub type Digests = BTreeMap<String, Option<String>>;

/// How much of an input's value is shown beside a prompt.
const PREVIEW_CHARS: usize = 200;

/// One input as it is now.
#[derive(Debug, Clone, Serialize)]
pub struct InputNow {
    pub name: String,
    /// `sha256:...` of its value's bytes; None when no binding of the name is in scope.
    pub digest: Option<String>,
    /// The start of its value, or an attachment's summary.
    pub preview: String,
    pub bytes: u64,
    /// Where it was found, and its write version there: what a consumption checks has not
    /// moved in its own transaction.
    #[serde(skip)]
    pub at: Option<(Option<i64>, i64)>,
    /// The version it is, in its frame: what a decision about it pins (None: not found, or
    /// its history does not keep the version it holds).
    #[serde(skip)]
    pub pin: Option<Pin>,
}

/// The content digest of a binding row's value (`sha256:...`), read where it is kept, and its
/// size.
fn digest_of(
    store: &mut dyn Store,
    run_dir: &Path,
    name: &str,
    row: &crate::store::BindingRow,
) -> Result<(String, u64)> {
    let (digest, bytes) = match row.attachment_path.as_deref().filter(|p| !p.is_empty()) {
        Some(path) => {
            let mut reader = super::transfer::value(store, run_dir, path, name)?;
            let mut h = Sha256::new();
            let n = std::io::copy(&mut reader, &mut h)?;
            (h.finalize(), n)
        }
        None => {
            let v = row.value.as_deref().unwrap_or_default();
            (Sha256::digest(v), v.len() as u64)
        }
    };
    Ok((format!("sha256:{}", crate::model::hex(&digest)), bytes))
}

/// The version of `name` in `scope` that holds `digest`: the newest kept one that does (the
/// binding's own number, as `history` lists it).
fn version_holding(
    store: &mut dyn Store,
    run_dir: &Path,
    name: &str,
    scope: Option<i64>,
    digest: &str,
) -> Result<Option<i64>> {
    let rows = store.binding_history(name, scope)?;
    for i in (0..rows.len()).rev() {
        if rows[i].deleted {
            continue;
        }
        let row = crate::store::history::as_row(&rows, i)?;
        if digest_of(store, run_dir, name, &row)?.0 == digest {
            return Ok(Some(rows[i].n));
        }
    }
    Ok(None)
}

/// The digest of version `pin` of `name`, as its scope's history (`rows`: all of it, as read)
/// keeps it: Ok(None) when that version is not kept (pruned, or from before history), and
/// whether versions before the oldest kept one were pruned.
fn digest_in(
    store: &mut dyn Store,
    run_dir: &Path,
    name: &str,
    pin: &Pin,
    rows: &[crate::store::history::HistoryRow],
) -> Result<(Option<String>, bool)> {
    let pruned = rows.first().is_some_and(|r| r.gap);
    match rows.iter().position(|r| r.n == pin.version && !r.deleted) {
        Some(i) => {
            let row = crate::store::history::as_row(rows, i)?;
            Ok((Some(digest_of(store, run_dir, name, &row)?.0), pruned))
        }
        None => Ok((None, pruned)),
    }
}

/// The scopes an input lookup from `scope` walks, nearest first, the root last.
pub fn chain(store: &mut dyn Store, scope: Option<i64>) -> Result<Vec<Option<i64>>> {
    let mut chain: Vec<Option<i64>> = match scope {
        Some(id) => store.scope_chain(id)?.into_iter().map(Some).collect(),
        None => Vec::new(),
    };
    chain.push(None);
    Ok(chain)
}

/// A gate's inputs as they are now, looked up from the scope its `created` event sealed (the
/// execution it was opened in, where the program goes on) up to the root.
pub fn read(store: &mut dyn Store, run_dir: &Path, d: &Derived) -> Result<Vec<InputNow>> {
    read_for(store, run_dir, d, false)
}

/// [`read`], for a decision: with the version of each input in its frame, which the
/// decision pins.
pub fn read_to_decide(store: &mut dyn Store, run_dir: &Path, d: &Derived) -> Result<Vec<InputNow>> {
    read_for(store, run_dir, d, true)
}

fn read_for(
    store: &mut dyn Store,
    run_dir: &Path,
    d: &Derived,
    pin_versions: bool,
) -> Result<Vec<InputNow>> {
    let mut out = Vec::new();
    for name in &d.inputs {
        let Some(found) = store.resolve(name, d.inputs_scope)? else {
            out.push(InputNow {
                name: name.clone(),
                digest: None,
                preview: String::new(),
                bytes: 0,
                at: None,
                pin: None,
            });
            continue;
        };
        let row = found.row;
        // What a person decides on is what the history keeps: a value changed in place is
        // not decided on (shown, the gate is marked tampered: `check_run`).
        if pin_versions {
            check_current(store, name, &row)?;
        }
        let text = String::from_utf8_lossy(row.value.as_deref().unwrap_or_default()).into_owned();
        let (digest, bytes) = digest_of(store, run_dir, name, &row)?;
        let pin = if pin_versions {
            version_holding(store, run_dir, name, row.execution_id, &digest)?.map(|version| Pin {
                scope: row.execution_id,
                version,
            })
        } else {
            None
        };
        let mut preview: String = text.chars().take(PREVIEW_CHARS).collect();
        if text.chars().nth(PREVIEW_CHARS).is_some() {
            preview.push('…');
        }
        out.push(InputNow {
            name: name.clone(),
            digest: Some(digest),
            preview,
            bytes,
            at: row.version.map(|v| (row.execution_id, v)),
            pin,
        });
    }
    Ok(out)
}

pub fn digests(inputs: &[InputNow]) -> Digests {
    inputs
        .iter()
        .map(|i| (i.name.clone(), i.digest.clone()))
        .collect()
}

/// The versions a decision about these inputs pins: each found input whose version its
/// history keeps.
pub fn pins(inputs: &[InputNow]) -> BTreeMap<String, Pin> {
    inputs
        .iter()
        .filter_map(|i| Some((i.name.clone(), i.pin.clone()?)))
        .collect()
}

/// What a consumption checks has not moved: each input's name, where it was found and at
/// which version.
pub fn positions(inputs: &[InputNow]) -> Vec<crate::store::InputAt> {
    inputs.iter().map(|i| (i.name.clone(), i.at)).collect()
}

/// A decided gate's decision, checked against its inputs as they are now: stale (why), or
/// standing, in which case the VM has now consumed it (recorded once). What a reader that
/// hands the decision to the VM (`gates wait`, `resume`) calls.
pub fn settle(
    store: &mut dyn Store,
    run_dir: &Path,
    gate: &GateRow,
    d: &Derived,
) -> Result<Option<String>> {
    if d.inputs.is_empty() || d.decision.is_none() || d.consumed {
        return Ok(None);
    }
    let walked = chain(store, d.inputs_scope)?;
    for _ in 0..3 {
        let (stale, now) = stale(store, run_dir, d)?;
        if stale.is_some() {
            return Ok(stale);
        }
        let at = crate::model::now();
        if store.consume_decision(&gate.id, d.instance, &positions(&now), &walked, &at)? {
            return Ok(None);
        }
        // A finished run takes no more writes: the decision, standing as just read, is handed
        // over with no consumption recorded (nothing the VM does in it can follow anyway).
        if store.run_info()?.status.is_some_and(|s| s.is_finished()) {
            return Ok(None);
        }
        // An input moved between the read and the write: read it again. (Or another reader
        // consumed it first: then the next read says so.)
        let Some(fresh) = crate::store::gate_read::read(store, &gate.id, &at)? else {
            return Ok(None);
        };
        if fresh.derived.consumed || fresh.derived.decision.is_none() {
            return Ok(None);
        }
    }
    Err(crate::error::busy(format!(
        "the inputs of gate {} kept changing while its decision was read: read it again",
        crate::error::shown(&gate.id)
    )))
}

/// Checks every sealed decision about inputs against the bindings' history (`gates verify`):
/// the version each decision sealed must still be there, unchanged. History rows are not
/// sealed themselves; a decision's digest is, so an edit of the version a decision was made
/// about is found (tampered), and one whose versions were pruned is unattested. Adds what it
/// finds to the report, for gates that have no finding yet.
pub fn check_sealed(
    store: &mut dyn Store,
    run_dir: &Path,
    report: &mut crate::store::chain::ChainReport,
) -> Result<()> {
    let mut findings = Vec::new();
    // The kept versions of every binding a sealed opening names, against what the log says
    // of them: a gate whose input or answer has a changed history does not stand. First, so
    // that a version moved out of its row (into a file, say) is found as such.
    for name in crate::store::kept::names(report) {
        let Some(why) = kept_problem(store, run_dir, &name, report)? else {
            continue;
        };
        for (gate, d) in &report.derived {
            let names_it = opening_names(d, &name);
            let found = report.gates.iter().chain(&findings).any(|(g, _)| g == gate);
            if names_it && !found {
                findings.push((
                    gate.clone(),
                    crate::store::chain::Integrity::Tampered(why.clone()),
                ));
            }
        }
    }
    for (gate, d) in &report.derived {
        let found = report.gates.iter().chain(&findings).any(|(g, _)| g == gate);
        if d.decided_inputs.is_none() || found {
            continue;
        }
        if let Some(why) = sealed_problem(store, run_dir, d)? {
            findings.push((gate.clone(), why));
        }
    }
    report.gates.extend(findings);
    Ok(())
}

/// [`super::transfer::verify`], and the versions the copy's sealed decisions were made about or wrote, read
/// from `src` (the store the copy was read from, whose directory is `src_dir`), against what
/// those decisions sealed (`inputs::check_sealed`, as `gates verify` checks them): a history
/// rewritten to agree with a forged value is refused too (exit 9).
pub fn verify_copy(
    d: &crate::store::dump::RunDump,
    src: &mut dyn Store,
    src_dir: &Path,
) -> Result<crate::store::chain::ChainReport> {
    let mut report = super::transfer::verify(d, src.wiring())?;
    if crate::store::kept::names(&report).is_empty() {
        return Ok(report);
    }
    check_sealed(src, src_dir, &mut report)?;
    if let Some((gate, crate::store::chain::Integrity::Tampered(why))) = report
        .gates
        .iter()
        .find(|(_, i)| matches!(i, crate::store::chain::Integrity::Tampered(_)))
    {
        return Err(crate::error::tampered(format!(
            "gate {} of run {}: {why}; a copy that does not verify is not taken",
            crate::error::shown(gate),
            crate::error::shown(&d.run.id)
        )));
    }
    Ok(report)
}

/// Refuses (exit 9) a run [`verify_run`] finds a gate of tampered: what `export` and `diff`
/// do not carry out or compare (`not`: "not exported", say).
pub fn refuse_tampered(
    store: &mut dyn Store,
    run_dir: &Path,
    run_id: &str,
    not: &str,
) -> Result<()> {
    checked_untampered(store, run_dir, run_id, not).map(|_| ())
}

/// [`refuse_tampered`], answering with the run's check (what each gate's integrity is).
pub fn checked_untampered(
    store: &mut dyn Store,
    run_dir: &Path,
    run_id: &str,
    not: &str,
) -> Result<crate::store::chain::ChainReport> {
    let (report, _) = verify_run(store, run_dir, None)?;
    if let Some((gate, crate::store::chain::Integrity::Tampered(why))) = report
        .gates
        .iter()
        .find(|(_, i)| matches!(i, crate::store::chain::Integrity::Tampered(_)))
    {
        return Err(crate::error::tampered(format!(
            "gate {} of run {}: {why}; a run that does not verify is {not} (see `gates verify`)",
            crate::error::shown(gate),
            crate::error::shown(run_id)
        )));
    }
    Ok(report)
}

/// A run's whole check, as `gates verify` makes it and every reader that vouches for a run's
/// gates together shows it (a listing of one run, the page's run view, `doctor`): its log
/// ([`Store::verify_signed`]), then, when its sealed openings name bindings, their kept
/// versions against what the decisions sealed ([`check_sealed`]) and the values they hold now
/// ([`check_values`]). What those find marks the gates naming them tampered; the values found
/// changed are returned by name, with why.
pub fn verify_run(
    store: &mut dyn Store,
    run_dir: &Path,
    signed: Option<&crate::store::signatures::SignedBy>,
) -> Result<(crate::store::chain::ChainReport, Vec<(String, String)>)> {
    // The log, the history and the values are read at different moments: a decision
    // committing between them (a gate reopened and answered beside the check) can make them
    // disagree with nothing tampered. A check that finds something while the log's newest row
    // moved is made again, three times at most; a finding the log's growth does not explain
    // stands.
    // (A log whose newest row cannot be told, broken, is checked once.)
    let newest_row = |store: &mut dyn Store| store.sealed_names_at().ok().map(|(_, n)| n);
    let mut newest = newest_row(store);
    let mut tries = 0;
    loop {
        let mut report = store.verify_signed(signed)?;
        let values = check_run(store, run_dir, &mut report)?;
        // A broken log is read in one snapshot: never a decision committing beside the read.
        let found = report.first_broken.is_none() && (report.is_broken() || !values.is_empty());
        if !found || tries == 3 || newest.is_none() {
            return Ok((report, values));
        }
        let grown = newest_row(store);
        if grown == newest {
            return Ok((report, values));
        }
        (newest, tries) = (grown, tries + 1);
    }
}

/// What [`verify_run`] checks past the log, for a report of it already made: the rows
/// `gate_instances` keeps of earlier openings (as `gates wait --instance` reads them), then the
/// bindings the sealed openings name. Nothing more when the log is broken (every gate is then).
pub fn check_run(
    store: &mut dyn Store,
    run_dir: &Path,
    report: &mut crate::store::chain::ChainReport,
) -> Result<Vec<(String, String)>> {
    if report.first_broken.is_some() {
        return Ok(Vec::new());
    }
    let earlier = crate::store::gate_read::earlier_openings(report, |gate, instance| {
        let rows = store.gate_rows(crate::store::GateSelect::Opening(gate, instance))?;
        Ok(rows.into_iter().next().map(|r| r.into_row()))
    })?;
    report.gates.extend(earlier);
    // With no gate at all, no binding's claim that a decision wrote it can stand or be
    // checked: `get` refuses each (`check_read_now`). With gates, every claim is checked here
    // too, whether or not an opening names a binding.
    if report.derived.is_empty() && report.gates.is_empty() {
        return Ok(Vec::new());
    }
    if !crate::store::kept::names(report).is_empty() {
        check_sealed(store, run_dir, report)?;
    }
    check_values(store, run_dir, report)
}

/// The values bindings the report's sealed openings name hold now, each checked as `get`
/// checks it (`check_read_now`): those that do not stand (a value changed in place behind the
/// tool's back, its history left as the decision wrote it), by name, with why. Each gate
/// naming one is marked tampered in the report. What `gates verify` and `doctor` report.
pub fn check_values(
    store: &mut dyn Store,
    run_dir: &Path,
    report: &mut crate::store::chain::ChainReport,
) -> Result<Vec<(String, String)>> {
    use crate::error::{code_of, Code};
    let names = crate::store::kept::names(report);
    let mut problems = Vec::new();
    // The gate a binding that claims a decision names (`approve G:`), by binding name.
    let mut claimed: Vec<(String, String)> = Vec::new();
    // A claim of a gate this machine cannot vouch for is that gate's unattested state,
    // reported as such (10), not a tampered binding.
    let vouched = |b: &crate::store::BindingRow| {
        let gate = b
            .source_statement
            .as_deref()
            .and_then(crate::store::rules::decided_by);
        gate.is_some_and(|g| {
            !matches!(
                report.gate(g),
                crate::store::chain::Integrity::Unattested(_)
            )
        })
    };
    for b in store
        .bindings()?
        .iter()
        .filter(|b| names.contains(&b.name) || (claims_decision(b) && vouched(b)))
    {
        match check_read_in(store, run_dir, &names, b.execution_id, b, Some(report)) {
            Ok(()) => {}
            Err(e) if code_of(&e) == Some(Code::Tampered) => {
                if let Some(g) = b
                    .source_statement
                    .as_deref()
                    .and_then(crate::store::rules::decided_by)
                {
                    claimed.push((b.name.clone(), g.to_string()));
                }
                problems.push((b.name.clone(), format!("{e:#}")))
            }
            // What this machine cannot vouch for is reported as such elsewhere.
            Err(e) if code_of(&e) == Some(Code::Unattested) => {}
            // An answer no decision of the standing opening gave (the gate opened again since
            // it answered) is no answer to read, and nothing changed behind the tool's back.
            Err(e) if code_of(&e) == Some(Code::NotFound) => {}
            Err(e) => return Err(e),
        }
    }
    // Each scope a sealed decision answered into holds a binding of that name (its newest
    // answer, which the rows above were checked against): one deleted, or renamed away, is
    // gone behind prose-state's back. (`get` of it says so too.)
    let mut answered: Vec<(String, Option<i64>)> = Vec::new();
    for d in report.derived.values() {
        for o in d.earlier.iter().chain(std::iter::once(d)) {
            if let (Some((name, scope)), Some(_)) = (&o.response_binding, o.response_version) {
                if !answered.contains(&(name.clone(), *scope)) {
                    answered.push((name.clone(), *scope));
                }
            }
        }
    }
    for (name, scope) in answered {
        let held = store
            .resolve(&name, scope)?
            .is_some_and(|f| f.row.execution_id == scope);
        if !held && !problems.iter().any(|(n, _)| *n == name) {
            problems.push((
                name.clone(),
                format!(
                    "binding {} in {}, a gate's sealed answer, is gone: it was deleted or renamed behind prose-state's back",
                    crate::error::shown(&name),
                    scope.map_or("the root".to_string(), |e| format!("execution {e}"))
                ),
            ));
        }
    }
    for (name, why) in &problems {
        // The gates naming it, and the gate it claims wrote it (a binding no opening names
        // passed off as a decision's is that gate's record tampered with).
        let naming: Vec<String> = report
            .derived
            .iter()
            .filter(|(g, d)| {
                opening_names(d, name) || claimed.iter().any(|(n, c)| n == name && c == *g)
            })
            .map(|(g, _)| g.clone())
            .collect();
        for gate in naming {
            let tampered = report.gates.iter().any(|(g, i)| {
                *g == gate && matches!(i, crate::store::chain::Integrity::Tampered(_))
            });
            if !tampered {
                report.gates.retain(|(g, _)| *g != gate);
                report
                    .gates
                    .push((gate, crate::store::chain::Integrity::Tampered(why.clone())));
            }
        }
    }
    Ok(problems)
}

/// Whether any opening of a gate (`d`, its earlier ones too) names binding `name`, as an input
/// or as its answer.
fn opening_names(d: &Derived, name: &str) -> bool {
    d.earlier.iter().chain(std::iter::once(d)).any(|o| {
        o.inputs.iter().any(|i| i == name)
            || o.response_binding.as_ref().is_some_and(|(n, _)| n == name)
    })
}

/// Why one opening's sealed decision about inputs (`d`: the newest opening of a gate, or an
/// earlier one) does not stand against the bindings' history, if it does not (see
/// [`check_sealed`]).
pub fn sealed_problem(
    store: &mut dyn Store,
    run_dir: &Path,
    d: &Derived,
) -> Result<Option<crate::store::chain::Integrity>> {
    use crate::store::chain::Integrity;
    let Some(sealed) = &d.decided_inputs else {
        return Ok(None);
    };
    for (name, digest) in sealed {
        let Some(digest) = digest else { continue };
        // A pinned decision is about one version: that version, and no other, must hold
        // what it sealed.
        if let Some(pin) = d.pinned.as_ref().and_then(|p| p.get(name)) {
            if let Some(why) = pinned_problem(store, run_dir, name, pin, digest)? {
                return Ok(Some(why));
            }
            continue;
        }
        let mut kept = false;
        let mut pruned = false;
        for scope in store.history_scopes(name)? {
            let rows = store.binding_history(name, scope)?;
            pruned |= rows.first().is_some_and(|r| r.gap);
            for i in 0..rows.len() {
                if rows[i].deleted {
                    continue;
                }
                let row = crate::store::history::as_row(&rows, i)?;
                if digest_of(store, run_dir, name, &row)?.0 == *digest {
                    kept = true;
                    break;
                }
            }
            if kept {
                break;
            }
        }
        if !kept {
            return Ok(Some(if pruned {
                Integrity::Unattested(format!(
                    "the version of its input {} that its decision sealed is not kept (pruned, or written before history was kept)",
                    crate::error::shown(name)
                ))
            } else {
                Integrity::Tampered(format!(
                    "the version of its input {} that its decision sealed is in no kept version of it: the binding's history was changed behind prose-state's back",
                    crate::error::shown(name)
                ))
            }));
        }
    }
    Ok(None)
}

/// Why version `pin` of input `name` does not hold what a decision sealed (`digest`), if it
/// does not: tampered when it is kept and differs (or is gone though nothing was pruned),
/// unattested when it was pruned.
pub fn pinned_problem(
    store: &mut dyn Store,
    run_dir: &Path,
    name: &str,
    pin: &Pin,
    digest: &str,
) -> Result<Option<crate::store::chain::Integrity>> {
    let rows = store.binding_history(name, pin.scope)?;
    pinned_problem_in(store, run_dir, name, pin, digest, &rows)
}

/// [`pinned_problem`], from the pin's scope's history as already read (`rows`: all of it).
fn pinned_problem_in(
    store: &mut dyn Store,
    run_dir: &Path,
    name: &str,
    pin: &Pin,
    digest: &str,
    rows: &[crate::store::history::HistoryRow],
) -> Result<Option<crate::store::chain::Integrity>> {
    use crate::store::chain::Integrity;
    // A version that cannot be rebuilt from its history was changed there: the decision on
    // it does not stand (tampered), rather than the check failing.
    let (kept, pruned) = match digest_in(store, run_dir, name, pin, rows) {
        Ok(found) => found,
        Err(e) if crate::error::code_of(&e) == Some(crate::error::Code::Tampered) => {
            return Ok(Some(Integrity::Tampered(format!("{e:#}"))));
        }
        Err(e) => return Err(e),
    };
    Ok(match kept {
        Some(k) if k == digest => None,
        Some(_) => Some(Integrity::Tampered(format!(
            "version {} of its input {}, which its decision sealed, does not hold what was decided: the binding's history was changed behind prose-state's back",
            pin.version,
            crate::error::shown(name)
        ))),
        None if pruned => Some(Integrity::Unattested(format!(
            "version {} of its input {}, which its decision sealed, is not kept (pruned)",
            pin.version,
            crate::error::shown(name)
        ))),
        None => Some(Integrity::Tampered(format!(
            "version {} of its input {}, which its decision sealed, is gone from its history",
            pin.version,
            crate::error::shown(name)
        ))),
    })
}

/// Runs `read` (a lookup and the checks of what it found against the sealed log, given the
/// run's [`Store::sealed_names`]) and, when it says the log was tampered with (exit 9) while the
/// log grew (a decision committed beside it: the log, the bindings and this machine's anchor
/// were then read at different moments), runs it again, three times at most. Nothing else is
/// read again: a disagreement the log's growth does not explain stands.
pub fn settled<T>(
    store: &mut dyn Store,
    mut read: impl FnMut(&mut dyn Store, &std::collections::BTreeSet<String>) -> Result<T>,
) -> Result<T> {
    let (mut names, mut newest) = store.sealed_names_at()?;
    let mut tries = 0;
    loop {
        match read(store, &names) {
            Err(e)
                if tries < 3 && crate::error::code_of(&e) == Some(crate::error::Code::Tampered) =>
            {
                let (now, grown) = store.sealed_names_at()?;
                if grown == newest {
                    return Err(e);
                }
                (names, newest) = (now, grown);
                tries += 1;
            }
            done => return done,
        }
    }
}

/// The bindings a listing shows (`read`: the rows it reads), each value a sealed opening names
/// checked as `get` checks it (`check_read_now`: a forged answer or edit is exit 9, or 10 where
/// this machine cannot vouch), read again when a decision committed beside the read. `start`:
/// the scope the listing looks from, or None for each row's own scope. What resume, the gate's
/// page and the MCP bindings resource show.
pub fn checked_bindings(
    store: &mut dyn Store,
    run_dir: &Path,
    start: Option<Option<i64>>,
    mut read: impl FnMut(&mut dyn Store) -> Result<Vec<crate::store::BindingRow>>,
) -> Result<Vec<crate::store::BindingRow>> {
    settled(store, |s, names| {
        let rows = read(s)?;
        // Every row a sealed opening names, and every row that says a decision wrote it
        // (`approve G:`), whatever its name: one no opening of G names is refused, as `get`
        // refuses it. An outer binding found where a gate's answer is still to come is not
        // visible from here (`get` of it is exit 3): left out, the rest listed.
        let mut visible = Vec::with_capacity(rows.len());
        for b in rows {
            if names.contains(&b.name) || claims_decision(&b) {
                match check_read_now(s, run_dir, names, start.unwrap_or(b.execution_id), &b) {
                    Err(e) if crate::error::code_of(&e) == Some(crate::error::Code::NotFound) => {
                        continue
                    }
                    other => other?,
                }
            }
            visible.push(b);
        }
        Ok(visible)
    })
}

/// What binding `row` (of `name`, found by a lookup from `start`), read as it is now, must
/// stand against before anything shows or acts on it: the very row shown is checked. A name no
/// sealed opening names costs the check of that (`Store::naming`). One some opening names is
/// read only where this machine can vouch for the gates naming it (exit 10), from a log that
/// verifies whole (exit 9); as a gate's answer it holds exactly what the newest sealed
/// decision answered, in the scope the gate answers into; a value that says a decision wrote
/// it (`approve G:`) is judged by G's own openings; and a version a decision pinned (an
/// approver's edit among them) holds what was decided. `names`: the run's
/// [`Store::sealed_names`]. `get`, `resume` and `diff` read by it.
pub fn check_read_now(
    store: &mut dyn Store,
    run_dir: &Path,
    names: &std::collections::BTreeSet<String>,
    start: Option<i64>,
    row: &crate::store::BindingRow,
) -> Result<()> {
    check_read_in(store, run_dir, names, start, row, None)
}

/// [`check_read_now`], against the log as the caller already checked it (`checked`: its
/// [`Store::verify_audit`]), read here otherwise: a whole-run check reads it once.
fn check_read_in(
    store: &mut dyn Store,
    run_dir: &Path,
    names: &std::collections::BTreeSet<String>,
    start: Option<i64>,
    row: &crate::store::BindingRow,
    checked: Option<&crate::store::chain::ChainReport>,
) -> Result<()> {
    use crate::store::gate_read::{self, Read};
    use crate::store::rules::{self, OpeningNames};
    let name = row.name.as_str();
    let naming = store.naming_among(names, name)?;
    let verified;
    let report = match (naming.input || !naming.response.is_empty(), checked) {
        (false, _) => None,
        (true, Some(report)) => Some(report),
        (true, None) => {
            verified = store.verify_audit()?;
            Some(&verified)
        }
    };
    if let Some(report) = &report {
        gate_read::check_vouched(report, name, &naming)?;
        // A name a sealed opening names is what its history keeps, and that history stands
        // as `gates verify` checks it: no reader shows what the verification refuses.
        check_current(store, name, row)?;
        check_kept(store, run_dir, name, report)?;
    }
    let named_by_none = naming.response.is_empty() && !naming.input;
    let answers_here = |gate: &str| {
        naming
            .response
            .iter()
            .any(|(g, at)| g == gate && *at == row.execution_id)
    };
    // A value a decision wrote (its statement `approve G:`) is judged by its gate's own
    // openings, whatever the narrowing found (another opening, forged, may be what it found):
    // cut from the log's end, or changed so that none names it, it vouches for nothing; one
    // that names it which the narrowing by its name did not find was hidden from it; and as
    // G's answer it stands only in the scope G answers into (a frame re-parented behind the
    // tool's back may lead a lookup to another scope's binding that claims to be it).
    if let Some(statement) = row.source_statement.as_deref() {
        let names = rules::decision_opening_kept(store, name, statement)?;
        if named_by_none && names != OpeningNames::NoDecision {
            return Err(rules::narrowing_misled(name));
        }
        let gate = rules::decided_by(statement).unwrap_or_default();
        // As an approver's edit of an input G is about, it is a version G's sealed decision
        // (or vote) wrote: a later version claiming the statement (raw SQL whose trigger copied
        // it, say) is passed off as the approver's.
        if let (OpeningNames::Input, Some(report)) = (names, &report) {
            // The sealed edit (of a decision or a vote) that wrote the very version held, and
            // the row holds what it sealed of it: its digest (its size, sealed before digests).
            let held = row.value.as_deref().unwrap_or_default();
            let edit = crate::store::kept::sealed_writes(report)
                .into_iter()
                .find(|w| {
                    w.gate == gate
                        && w.name == name
                        && w.scope == row.execution_id
                        && Some(w.version) == row.own_version
                        && w.exact.is_none()
                });
            if let Some(w) = &edit {
                let inline = row.attachment_path.as_deref().is_none_or(str::is_empty);
                let same = match (w.digest, w.bytes) {
                    _ if !inline => false,
                    (Some(d), _) => crate::model::sha256_tag_bytes(held) == d,
                    (None, Some(n)) => held.len() as i64 == n,
                    (None, None) => true,
                };
                if !same {
                    return Err(crate::error::tampered(format!(
                        "binding {} holds version {} of gate {}'s sealed edit, and not what the edit sealed: it was changed behind prose-state's back",
                        crate::error::shown(name),
                        w.version,
                        crate::error::shown(gate)
                    )));
                }
            }
            // `doctor --fix` restating G's edit (starting the history again) is G's value.
            let restated = edit.is_none() && {
                let n = row.own_version;
                let rows = store.binding_history(name, row.execution_id)?;
                let writes: Vec<_> = crate::store::kept::sealed_writes(report)
                    .into_iter()
                    .filter(|w| w.name == name && w.scope == row.execution_id)
                    .collect();
                rows.iter()
                    .find(|r| Some(r.n) == n)
                    .is_some_and(|r| crate::store::kept::restates(&writes, r, gate))
            };
            if edit.is_none() && !restated {
                return Err(crate::error::tampered(format!(
                    "binding {} holds version {} and says gate {}'s decision wrote it, and no sealed decision of that gate wrote that version: it was written behind prose-state's back",
                    crate::error::shown(name),
                    row.own_version.map_or("-".to_string(), |n| n.to_string()),
                    crate::error::shown(gate)
                )));
            }
        }
        if names == OpeningNames::Answer && !answers_here(gate) {
            return Err(crate::error::tampered(format!(
                "binding {} in {} says gate {}'s decision wrote it, and that gate answers into no binding of that name there: it was written behind prose-state's back",
                crate::error::shown(name),
                row.execution_id
                    .map_or("the root".to_string(), |e| format!("execution {e}")),
                crate::error::shown(gate)
            )));
        }
    }
    gate_read::check_response_binding_named(
        store,
        name,
        start,
        Some(row.execution_id),
        naming.response.clone(),
        Read::Now(Some(row)),
        report,
    )?;
    // The version a sealed decision was about (an approver's edit among them) holds what was
    // decided.
    if let (Some(report), true) = (&report, row.own_version.is_some() && naming.input) {
        check_decided_now(store, run_dir, name, row, report)?;
    }
    Ok(())
}

/// Refuses (exit 9) to read binding `row` as it is now (against `report`, the run's log as
/// checked whole) when its version is one a sealed decision pinned (an approver's edit, or the version a decision was about) and it no longer
/// holds what was decided: changed in place, its version left as it was. A later version (a
/// program's own write after the decision) is not a decided one. A broken log vouches for no
/// version (exit 9).
pub fn check_decided_now(
    store: &mut dyn Store,
    run_dir: &Path,
    name: &str,
    row: &crate::store::BindingRow,
    report: &crate::store::chain::ChainReport,
) -> Result<()> {
    let Some(n) = row.own_version else {
        return Ok(());
    };
    let want = Pin {
        scope: row.execution_id,
        version: n,
    };
    // A log that does not verify cannot say what was decided: it vouches for no version.
    crate::store::gate_read::log_whole(report, name, "is an input a gate decided on")?;
    let mut held = None;
    for (gate, digest) in decided_pins(report, name, &want) {
        if held.is_none() {
            held = Some(digest_of(store, run_dir, name, row)?.0);
        }
        if held.as_deref() != Some(digest) {
            return Err(crate::error::tampered(format!(
                "binding {} holds version {n}, which gate {}'s decision sealed, and it no longer holds what was decided: it was changed behind prose-state's back",
                crate::error::shown(name),
                crate::error::shown(gate)
            )));
        }
    }
    Ok(())
}

/// Why gate `d` (as its own sealed history derives it) may not be acted on for what the
/// bindings its openings name hold, if it may not: their kept versions and the values they
/// hold now, checked as `gates verify` checks them (`kept_problem`, and `check_read_now` for
/// each row of those names). A pending gate's forged answer, or a vote's edit rewritten, is
/// found before anyone waits on it or decides it. None when its openings name no binding.
pub fn gate_problem(store: &mut dyn Store, run_dir: &Path, d: &Derived) -> Result<Option<String>> {
    use crate::error::{code_of, Code};
    let mut names: Vec<&str> = Vec::new();
    for o in d.earlier.iter().chain(std::iter::once(d)) {
        let answer = o.response_binding.as_ref().map(|(n, _)| n.as_str());
        for n in o.inputs.iter().map(String::as_str).chain(answer) {
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    if names.is_empty() {
        return Ok(None);
    }
    // The log, the history and the values are read at different moments: a vote committing
    // between them (another approver's edit) can make them disagree with nothing tampered. A
    // finding made while the log's newest row moved is looked for again, three times at most.
    let newest_row = |store: &mut dyn Store| store.sealed_names_at().ok().map(|(_, n)| n);
    let mut tries = 0;
    loop {
        let newest = newest_row(store);
        let found = (|| -> Result<Option<String>> {
            let report = store.verify_audit()?;
            // A name held now is checked whole with its row (`check_read_in` checks its kept
            // versions); one held nowhere, by its kept versions alone.
            let rows: Vec<_> = store
                .bindings()?
                .into_iter()
                .filter(|b| names.contains(&b.name.as_str()))
                .collect();
            for name in names.iter().filter(|n| !rows.iter().any(|b| b.name == **n)) {
                if let Some(why) = kept_problem(store, run_dir, name, &report)? {
                    return Ok(Some(why));
                }
            }
            let sealed = crate::store::kept::names(&report);
            for b in &rows {
                match check_read_in(store, run_dir, &sealed, b.execution_id, b, Some(&report)) {
                    Err(e) if code_of(&e) == Some(Code::Tampered) => {
                        return Ok(Some(format!("{e:#}")))
                    }
                    Err(e) if matches!(code_of(&e), Some(Code::Unattested | Code::NotFound)) => {}
                    other => other?,
                }
            }
            Ok(None)
        })()?;
        if found.is_none() || tries == 3 || newest.is_none() || newest_row(store) == newest {
            return Ok(found);
        }
        tries += 1;
    }
}

/// Why the kept versions of binding `name` do not stand against what the report's sealed
/// decisions say of them, if they do not (exit 9 then, for every reader): every field of each
/// version a decision wrote, the numbering and records of each scope the log names, the
/// answers' scopes holding only what decisions wrote (`store::kept`), and each pinned version
/// holding what its decision sealed, so that no version of the past is rebuilt on a changed
/// one.
pub fn kept_problem(
    store: &mut dyn Store,
    run_dir: &Path,
    name: &str,
    report: &crate::store::chain::ChainReport,
) -> Result<Option<String>> {
    use crate::store::kept;
    // No execution has an id below 1: a version kept there was put there by hand (where the
    // root's key, -1, would read it as the root's).
    let kept_in = store.history_scopes(name)?;
    if let Some(Some(x)) = kept_in.iter().find(|s| s.is_some_and(|x| x < 1)) {
        return Ok(Some(format!(
            "binding {} has versions kept in scope {x}, which is no execution",
            crate::error::shown(name)
        )));
    }
    // The scopes the log says something of, checked whole; every other scope a version of
    // the name is kept in, for versions claiming a decision no sealed decision made.
    let sealed = kept::scopes(report, name);
    let mut scopes = sealed.clone();
    for s in kept_in {
        if !scopes.contains(&s) {
            scopes.push(s);
        }
    }
    // Each scope's history read once: the pinned versions below are rebuilt from it.
    let mut read = Vec::new();
    for scope in scopes {
        let rows = store.binding_history(name, scope)?;
        let why = match sealed.contains(&scope) {
            true => kept::problem(report, name, scope, &rows),
            false => kept::claim_problem(report, name, scope, &rows),
        };
        if let Some(why) = why {
            return Ok(Some(format!(
                "{why}: its history was changed behind prose-state's back"
            )));
        }
        read.push((scope, rows));
    }
    // Each value of the name held now is its history's newest version: a version before it
    // rewritten (a step rebuilt on it no longer gives it), or a decision's version deleted and
    // the value put back, is found by every reader that checks the name, not only by `get`.
    for (scope, rows) in &read {
        if rows.is_empty() {
            continue;
        }
        let held = store
            .resolve(name, *scope)?
            .filter(|f| f.row.execution_id == *scope);
        if let Some(found) = held {
            if let Err(e) = check_current(store, name, &found.row) {
                if crate::error::code_of(&e) == Some(crate::error::Code::Tampered) {
                    return Ok(Some(format!("{e:#}")));
                }
                return Err(e);
            }
        }
    }
    for (gate, pin, digest) in kept::pins(report, name) {
        let fetched;
        let rows = match read.iter().find(|(s, _)| *s == pin.scope) {
            Some((_, rows)) => rows,
            None => {
                fetched = store.binding_history(name, pin.scope)?;
                &fetched
            }
        };
        if let Some(crate::store::chain::Integrity::Tampered(why)) =
            pinned_problem_in(store, run_dir, name, &pin, digest, rows)?
        {
            return Ok(Some(format!(
                "gate {} decided on version {} of {}, and {why}",
                crate::error::shown(gate),
                pin.version,
                crate::error::shown(name)
            )));
        }
    }
    Ok(None)
}

/// [`kept_problem`] as a refusal (exit 9).
pub fn check_kept(
    store: &mut dyn Store,
    run_dir: &Path,
    name: &str,
    report: &crate::store::chain::ChainReport,
) -> Result<()> {
    match kept_problem(store, run_dir, name, report)? {
        Some(why) => Err(crate::error::tampered(why)),
        None => Ok(()),
    }
}

/// Each gate whose sealed decision, at any of its openings, vouches for version `want` of
/// `name` (pinned it, or its edit replaced it), with the digest it sealed for it: the one walk
/// both checks of a decided version make.
fn decided_pins<'a>(
    report: &'a crate::store::chain::ChainReport,
    name: &str,
    want: &Pin,
) -> Vec<(&'a str, &'a str)> {
    crate::store::kept::pins(report, name)
        .into_iter()
        .filter(|(_, pin, _)| pin == want)
        .map(|(gate, _, digest)| (gate, digest))
        .collect()
}

/// Refuses (exit 9) to read version `n` of `name` in `scope` when a sealed decision pinned
/// that version and it no longer holds what was decided.
pub fn check_decided_version(
    store: &mut dyn Store,
    run_dir: &Path,
    name: &str,
    scope: Option<i64>,
    n: i64,
) -> Result<()> {
    let report = store.verify_audit()?;
    // A log that does not verify cannot say which versions were decided: none is read.
    if report.is_broken() && report.derived.values().any(|d| d.instance == 0) {
        return Err(crate::error::tampered(
            "the run's audit log does not verify (see `gates verify`): which versions its decisions were about cannot be told, so no past version is read",
        ));
    }
    // The versions around it first: a version of the past is rebuilt from its neighbours,
    // and read by numbers, records and times that a changed row would move.
    check_kept(store, run_dir, name, &report)?;
    // The version read says a decision wrote it (`approve G:`), whatever its name: it is one a
    // sealed decision of G wrote.
    let span =
        store.binding_versions(name, scope, crate::store::history::Versions::Rebuilding(n))?;
    if let Some(r) = span.rows.iter().find(|r| r.n == n) {
        let gate = r
            .source_statement
            .as_deref()
            .and_then(crate::store::rules::decided_by);
        if let Some(gate) = gate {
            let sealed = crate::store::kept::sealed_writes(&report)
                .iter()
                .any(|w| w.gate == gate && w.name == name && w.version == n);
            let attested = report.derived.get(gate).is_some_and(|g| g.instance > 0);
            if attested && !(sealed || r.gap && r.principal.is_none()) {
                return Err(crate::error::tampered(format!(
                    "version {n} of binding {} says gate {}'s decision wrote it, and no sealed decision of that gate wrote that version: it was written behind prose-state's back",
                    crate::error::shown(name),
                    crate::error::shown(gate)
                )));
            }
        }
    }
    let want = Pin { scope, version: n };
    let pins: Vec<(String, String)> = decided_pins(&report, name, &want)
        .into_iter()
        .map(|(g, d)| (g.to_string(), d.to_string()))
        .collect();
    for (gate, digest) in pins {
        if let Some(crate::store::chain::Integrity::Tampered(why)) =
            pinned_problem(store, run_dir, name, &want, &digest)?
        {
            return Err(crate::error::tampered(format!(
                "gate {} decided on this version, and {why}",
                crate::error::shown(&gate)
            )));
        }
    }
    Ok(())
}

/// Whether the gate's decision no longer stands because an input changed (see
/// `chain::stale`), and its inputs as they are now.
pub fn stale(
    store: &mut dyn Store,
    run_dir: &Path,
    d: &Derived,
) -> Result<(Option<String>, Vec<InputNow>)> {
    if d.inputs.is_empty() {
        return Ok((None, Vec::new()));
    }
    let now = read(store, run_dir, d)?;
    // The very version the decision pinned, holding other bytes, was changed in place behind
    // the tool's back: that is tampering (exit 9), not an input that moved on (stale).
    if let (Some(pinned), Some(decided)) = (&d.pinned, &d.decided_inputs) {
        for i in &now {
            let Some(pin) = pinned.get(&i.name) else {
                continue;
            };
            if decided.get(&i.name) == Some(&i.digest) {
                continue;
            }
            let held_pinned = store.resolve(&i.name, d.inputs_scope)?.is_some_and(|f| {
                f.row.execution_id == pin.scope && f.row.own_version == Some(pin.version)
            });
            if held_pinned {
                return Err(crate::error::tampered(format!(
                    "input {} holds the version the decision sealed, and it no longer holds what was decided: it was changed behind prose-state's back",
                    crate::error::shown(&i.name)
                )));
            }
        }
    }
    Ok((crate::store::chain::stale(d, &digests(&now)), now))
}
