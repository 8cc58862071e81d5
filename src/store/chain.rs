//! The audit log checked against what was sealed, and each gate checked against its log:
//! one rule, over rows either backend read.
//!
//! A row is in one of these states:
//! - **legacy**: written before the chain existed (no hash), or in the older unsealed chain
//!   (schema 2 to 4), which the first sealed row seals in turn by chaining to it;
//! - **attested**: in the run's sequence, its hash matching its content and its predecessor,
//!   its seal made with this machine's audit key;
//! - **unattested**: nothing vouches for it. Rows another tool wrote with the spec's own
//!   `INSERT INTO gate_audit_log` (no sequence number, no hash), rows sealed with a key this
//!   machine does not hold, and every sealed row when this machine has no key;
//! - **broken**: a sequence number missing, a row whose hash or seal does not match, a row
//!   outside the sequence that claims a hash, or the log ending before the row this machine
//!   anchored. Everything after the first break is broken too: nothing there can be trusted.

pub use super::derive::{
    derive, escalation, for_each_scope, stale, Derived, Moves, Pin, RowState, Written, CONSUMED,
    ESCALATED, REMINDER, RENUMBERED, VOTE_APPROVE, VOTE_REJECT,
};
use super::seal::{Anchor, Key, SealCheck};
use super::{AuditRow, GateRow};
use crate::model::{sha256_tag, GateStatus};
use std::collections::HashMap;

/// Where a gate stands against its log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Integrity {
    /// Its status is the one its log's attested events give it.
    Attested,
    /// Its decision stands only on rows nothing attests.
    Unattested(String),
    /// Its status or prompt disagrees with its log, or its log is broken.
    Tampered(String),
}

impl Integrity {
    /// Its word, as every reader states it: `attested`, `unattested` or `tampered`.
    pub fn state(&self) -> &'static str {
        match self {
            Integrity::Attested => "attested",
            Integrity::Unattested(_) => "unattested",
            Integrity::Tampered(_) => "tampered",
        }
    }
}

/// The first row that does not match, and why.
#[derive(Debug, Clone)]
pub struct BrokenLink {
    pub id: i64,
    pub reason: String,
}

/// The result of checking one run's audit log and gates.
#[derive(Debug, Default)]
pub struct ChainReport {
    pub rows: usize,
    /// Rows written before the chain existed (schema 1 or raw SQL), before the first chained
    /// row: counted, not verifiable.
    pub unchained_legacy: usize,
    pub attested: usize,
    /// Ids of the rows nothing attests.
    pub unattested: Vec<i64>,
    /// Of those, rows sealed with another machine's key.
    pub other_key: usize,
    /// Sealed rows exist and this machine has no audit key to check them with.
    pub key_missing: bool,
    pub first_broken: Option<BrokenLink>,
    /// The sequence number this machine anchored and found in place, if it anchored any.
    pub anchored: Option<i64>,
    /// Gates whose state is not attested by their log, with why.
    pub gates: Vec<(String, Integrity)>,
    /// Each gate as its sealed events make it.
    pub derived: HashMap<String, Derived>,
    /// Earlier openings (superseded by a reopen) whose decision a check found does not stand,
    /// by gate and instance: their signatures, when decisions must be signed.
    pub earlier: Vec<(String, i64, Integrity)>,
}

impl ChainReport {
    pub fn is_broken(&self) -> bool {
        self.first_broken.is_some()
            || self
                .gates
                .iter()
                .any(|(_, i)| matches!(i, Integrity::Tampered(_)))
    }

    pub fn is_unattested(&self) -> bool {
        !self.unattested.is_empty()
            || self
                .gates
                .iter()
                .any(|(_, i)| matches!(i, Integrity::Unattested(_)))
    }

    /// Records a break, unless an earlier one is recorded: only the first is reported.
    pub fn broken(&mut self, id: i64, reason: String) {
        if self.first_broken.is_none() {
            self.first_broken = Some(BrokenLink { id, reason });
        }
    }

    /// Where one gate stands.
    pub fn gate(&self, id: &str) -> Integrity {
        self.gates
            .iter()
            .find(|(g, _)| g == id)
            .map_or(Integrity::Attested, |(_, i)| i.clone())
    }
}

/// Checks a run's audit rows (in id order) and its gates, with this machine's key and its
/// anchor of the run's chain.
pub fn check(
    rows: &[AuditRow],
    gates: &[GateRow],
    run_id: Option<&str>,
    key: Option<&Key>,
    anchor: Option<&Anchor>,
) -> ChainReport {
    let mut report = ChainReport {
        rows: rows.len(),
        ..Default::default()
    };
    let mut states = row_states(rows, key, anchor, &mut report);
    // A sealed row of this run's chain names this run: one naming another was written for
    // another run (or under a run id a writer of the database chose) and proves nothing here.
    if let Some(run) = run_id {
        if let Some(r) = rows.iter().find(|r| r.seq.is_some() && r.run_id != run) {
            let shown = crate::error::shown(&r.run_id);
            report.broken(
                r.id,
                format!("a sealed row names run {shown}, not this run"),
            );
            states.insert(r.id, RowState::Broken);
        }
    }
    apply_genesis(rows, &mut states, &mut report);
    for (id, state) in &states {
        match state {
            RowState::Attested => report.attested += 1,
            RowState::Unattested => report.unattested.push(*id),
            _ => {}
        }
    }
    report.unattested.sort_unstable();
    // How copies renumbered the log, from their events this machine vouches for.
    let moves = Moves::of(
        rows.iter()
            .filter(|r| states.get(&r.id).copied() == Some(RowState::Attested)),
    );
    // Each gate's events, gathered in one pass over the log.
    let mut by_gate: HashMap<&str, Vec<(&AuditRow, RowState)>> = HashMap::new();
    for r in rows {
        by_gate
            .entry(r.gate_id.as_str())
            .or_default()
            .push((r, states.get(&r.id).copied().unwrap_or(RowState::Broken)));
    }
    for gate in gates {
        let events = by_gate.remove(gate.id.as_str()).unwrap_or_default();
        let (integrity, derived) = gate_integrity(gate, &events, &moves);
        if integrity != Integrity::Attested {
            report.gates.push((gate.id.clone(), integrity));
        }
        report.derived.insert(gate.id.clone(), derived);
    }
    // A gate its sealed log opened has a row: one deleted is tampering, not nothing.
    let mut gone: Vec<&str> = by_gate
        .iter()
        .filter(|(id, events)| {
            !id.is_empty()
                && events
                    .iter()
                    .any(|(r, s)| *s == RowState::Attested && r.event_type == "created")
        })
        .map(|(id, _)| *id)
        .collect();
    gone.sort_unstable();
    for id in gone {
        // What its log says of it, for a listing to show it by (marked, never left out).
        if let Ok(d) = derive(&by_gate[id], &moves) {
            report.derived.insert(id.to_string(), d);
        }
        report.gates.push((
            id.to_string(),
            Integrity::Tampered("its sealed log opened it, but its gates row is gone".into()),
        ));
    }
    report
}

/// What a genesis records of a row from before the seal: a digest of everything in it but the
/// database's id (a run moved between backends is renumbered).
pub fn pre_seal_digest(r: &AuditRow) -> String {
    sha256_tag(
        &serde_json::json!([
            "prose-before-seal-1",
            r.gate_id,
            r.run_id,
            r.event_type,
            r.principal,
            r.comment,
            r.timestamp,
            r.metadata,
            r.prev_hash,
            r.hash
        ])
        .to_string(),
    )
}

/// With a sealed genesis (a run sealed by this release), the rows from before the chain are
/// exactly those it recorded: any other unsealed row is unattested, whatever its id, and a
/// recorded one changed or removed breaks the log. A run sealed before genesis events
/// existed keeps the older rule (rows before its first sealed row).
fn apply_genesis(rows: &[AuditRow], states: &mut HashMap<i64, RowState>, report: &mut ChainReport) {
    let Some(genesis) = rows
        .iter()
        .filter(|r| {
            r.seq.is_some()
                && r.gate_id == super::dump::RUN_EVENT
                && r.event_type == super::dump::GENESIS
                && states.get(&r.id) == Some(&RowState::Attested)
        })
        .min_by_key(|r| r.seq)
    else {
        return;
    };
    let recorded: Vec<String> = genesis
        .metadata
        .as_deref()
        .and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok())
        .and_then(|m| {
            m["before_seal"].as_array().map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
        })
        .unwrap_or_default();
    let mut left: HashMap<String, usize> = HashMap::new();
    for d in recorded {
        *left.entry(d).or_default() += 1;
    }
    report.unchained_legacy = 0;
    for r in rows.iter().filter(|r| r.seq.is_none()) {
        let state = states.entry(r.id).or_insert(RowState::Unattested);
        let digest = pre_seal_digest(r);
        match left.get_mut(&digest) {
            Some(n) if *n > 0 => {
                *n -= 1;
                if *state != RowState::Broken {
                    *state = RowState::Legacy;
                    if r.hash.is_none() {
                        report.unchained_legacy += 1;
                    }
                }
            }
            _ => {
                if *state == RowState::Legacy {
                    *state = RowState::Unattested;
                }
            }
        }
    }
    if left.values().any(|n| *n > 0) {
        report.broken(
            genesis.id,
            "a row from before the seal was changed or removed".into(),
        );
    }
}

fn row_states(
    rows: &[AuditRow],
    key: Option<&Key>,
    anchor: Option<&Anchor>,
    report: &mut ChainReport,
) -> HashMap<i64, RowState> {
    let mut states = HashMap::new();
    let first_seq_id = rows.iter().find(|r| r.seq.is_some()).map(|r| r.id);
    // The older chain, unsealed: rows before the first sequenced one.
    let mut prev: Option<String> = None;
    for row in rows
        .iter()
        .filter(|r| first_seq_id.is_none_or(|f| r.id < f))
    {
        let state = match (&row.hash, &prev) {
            (None, None) => {
                report.unchained_legacy += 1;
                RowState::Legacy
            }
            (None, Some(_)) => RowState::Unattested,
            (Some(hash), _) => {
                let expected = prev.clone().unwrap_or_default();
                if report.first_broken.is_some() {
                    RowState::Broken
                } else if let Some(why) = link_problem(row, &expected, hash) {
                    report.broken(row.id, why);
                    RowState::Broken
                } else {
                    prev = Some(hash.clone());
                    RowState::Legacy
                }
            }
        };
        states.insert(row.id, state);
    }

    // The sealed chain, in sequence order.
    let Some(first) = first_seq_id else {
        if let Some(a) = anchor {
            report.broken(
                0,
                format!("the log has no sealed rows, but this machine sealed up to seq {}: rows were cut", a.seq),
            );
        }
        return states;
    };
    let mut sequenced: Vec<&AuditRow> = rows.iter().filter(|r| r.seq.is_some()).collect();
    sequenced.sort_by_key(|r| (r.seq, r.id));
    let mut expected_seq = 1;
    let mut prev = prev.unwrap_or_default();
    let mut by_seq: HashMap<i64, &str> = HashMap::new();
    for row in &sequenced {
        let seq = row.seq.unwrap_or_default();
        if report.first_broken.is_some() {
            states.insert(row.id, RowState::Broken);
            continue;
        }
        let hash = row.hash.clone().unwrap_or_default();
        let fail = if seq != expected_seq {
            Some(if seq < expected_seq {
                format!("seq {seq} appears twice")
            } else {
                format!("seq {expected_seq} is missing: rows were deleted")
            })
        } else {
            link_problem(row, &prev, &hash)
        };
        if let Some(reason) = fail {
            report.broken(row.id, reason);
            states.insert(row.id, RowState::Broken);
            continue;
        }
        let state = match key.map(|k| k.check(&hash, row.seal.as_deref())) {
            None => {
                report.key_missing = true;
                // With no key here, a sealed row was sealed on another machine.
                if row.seal.is_some() {
                    report.other_key += 1;
                }
                RowState::Unattested
            }
            Some(SealCheck::Valid) => RowState::Attested,
            Some(SealCheck::OtherKey) => {
                report.other_key += 1;
                RowState::Unattested
            }
            Some(SealCheck::Invalid | SealCheck::Missing) => {
                report.broken(
                    row.id,
                    "its seal does not match: the row was forged, or changed and re-chained".into(),
                );
                RowState::Broken
            }
        };
        states.insert(row.id, state);
        by_seq.insert(seq, row.hash.as_deref().unwrap_or_default());
        prev = hash;
        expected_seq += 1;
    }
    // Rows after the sequence began that are not in it.
    for row in rows.iter().filter(|r| r.id > first && r.seq.is_none()) {
        let state = if row.hash.is_some() || row.seal.is_some() {
            report.broken(
                row.id,
                "a row outside the sequence claims a hash or seal (forged)".into(),
            );
            RowState::Broken
        } else {
            RowState::Unattested
        };
        states.insert(row.id, state);
    }
    if let (Some(a), None) = (anchor, &report.first_broken) {
        let last = expected_seq - 1;
        match by_seq.get(&a.seq) {
            None => report.broken(
                0,
                format!("the log ends at seq {last}, but this machine sealed up to seq {}: rows were cut from its end", a.seq),
            ),
            Some(h) if *h != a.hash => report.broken(
                0,
                format!("the row at seq {} is not the one this machine sealed", a.seq),
            ),
            Some(_) => report.anchored = Some(a.seq),
        }
    }
    states
}

/// Why a row does not chain to `prev` under `hash`, if it does not.
fn link_problem(row: &AuditRow, prev: &str, hash: &str) -> Option<String> {
    if row.prev_hash.as_deref().unwrap_or_default() != prev {
        Some(
            "prev_hash does not match the previous row's hash (a row was removed or inserted)"
                .into(),
        )
    } else if row.chain_hash(prev) != hash {
        Some("content does not match its hash (the row was edited)".into())
    } else {
        None
    }
}

/// Whether a row's time is the sealed one: the same text, or the sealed time in the one form
/// the stores read times back in (PostgreSQL's `timestamptz` reads back as
/// `YYYY-MM-DD HH:MM:SS`). Any other form, even one SQLite's `datetime()` or PostgreSQL reads
/// as the same instant (an offset, `Z`, `24:00`, a Julian day, stray spaces, a fraction),
/// differs: the tool never writes it, so a writer of the database did.
pub fn same_time(row: Option<&str>, sealed: Option<&str>) -> bool {
    match (row, sealed) {
        (None, None) => true,
        (Some(r), Some(s)) => {
            r == s
                || crate::model::Timestamp::parse(s)
                    .or_else(|| crate::model::Timestamp::parse_lenient(s))
                    .is_some_and(|t| t.to_string() == r)
        }
        _ => false,
    }
}

/// Where a gate's row stands against what its events derive: Attested when the row is the
/// derivation's projection; Tampered when it contradicts a sealed event; Unattested when
/// only unsealed rows explain it (the spec's own SQL deciding or creating a gate), or when
/// nothing sealed the gate at all.
///
/// Every column of the row is compared (the destructuring below names each one, so a column
/// added to [`GateRow`] does not compile until it is either derived or said to be no part of
/// a decision): whatever any reader shows or acts on of an attested gate is what its sealed
/// events say.
pub fn compare(gate: &GateRow, d: &Derived, events: &[(&AuditRow, RowState)]) -> Integrity {
    let GateRow {
        id: _,              // what the events were gathered by
        run_id,             // the run its created event names
        execution_id: _,    // a number each store assigns: a run moved is renumbered
        prompt,             // its hash is sealed
        allow,              // sealed (widened by a sealed escalation)
        timeout,            // recorded by created events from this release on
        timeout_at,         // sealed: the one deadline
        on_reject,          // sealed
        status,             // the sealed decision's
        created_at,         // the created event's time
        resolved_at,        // the sealed decision's time
        resolved_by,        // the sealed decision's principal
        resolution_comment, // the sealed decision's comment
        metadata,           // its digest, recorded by created events from this release on
        instance,           // the newest sealed opening
    } = gate;
    // Nothing sealed opened it: pending, it claims nothing; decided, no decision of it stands.
    if d.instance == 0 && status.is_pending() {
        return Integrity::Attested;
    }
    if d.instance == 0 {
        // Decided: by an event nothing here attests (the spec's own SQL, another machine's
        // seal), unattested; by no event at all (a bare UPDATE), made up.
        let (st, by) = (status.as_str(), resolved_by.as_deref().unwrap_or(""));
        let explained = events.iter().any(|(r, s)| {
            *s != RowState::Broken
                && r.event_type == st
                && r.principal.as_deref() == Some(by)
                && instance_of(r) == *instance
        });
        if let GateStatus::Other(s) = status {
            return Integrity::Tampered(format!("its status {s:?} is none a gate can have"));
        }
        if !explained {
            return Integrity::Tampered(format!(
                "it is {st} by {}, but its log has no {st} event by them",
                crate::error::shown(by)
            ));
        }
        let opened = events.iter().any(|(r, _)| r.event_type == "created");
        return Integrity::Unattested(if opened {
            "its created event cannot be checked here (sealed on another machine, or no audit key here): nothing vouches for it".into()
        } else {
            "it has no sealed created event (made by another tool, or before the run was sealed): nothing vouches for it".into()
        });
    }
    if *instance < d.instance {
        return Integrity::Tampered(format!(
            "its row is instance {instance}, but its log opened instance {} (rolled back)",
            d.instance
        ));
    }
    if *instance > d.instance {
        // An opening some event made that nothing here attests (a teammate's key): unattested.
        // One no event made at all: a reopen written only into the row.
        let opened = events.iter().any(|(r, s)| {
            *s != RowState::Broken && r.event_type == "created" && instance_of(r) == *instance
        });
        if !opened {
            return Integrity::Tampered(format!(
                "its row is instance {instance}, but its log opened no such instance (newest sealed: {})",
                d.instance
            ));
        }
        return Integrity::Unattested(format!(
            "its instance {instance} has no sealed created event"
        ));
    }
    if d.prompt_hash.as_deref() != Some(sha256_tag(prompt).as_str()) {
        return Integrity::Tampered(
            "its prompt is not the one it was created with (rewritten)".into(),
        );
    }
    if *allow != d.allow {
        return Integrity::Tampered(format!(
            "its allow list ({}) is not the one it was created with ({})",
            crate::error::shown(&allow.join(", ")),
            crate::error::shown(&d.allow.join(", "))
        ));
    }
    let changed = |what: &str| {
        Integrity::Tampered(format!("its {what} is not the one its sealed log gives it"))
    };
    if d.on_reject.as_ref().is_some_and(|o| o != on_reject) {
        return changed("on_reject");
    }
    // One deadline: the sealed one, exactly (in any other form, earlier or later, it is a
    // change; the overdue query reads the row, so only the sealed text may stand there).
    if let Some(sealed) = &d.timeout_at {
        if !same_time(timeout_at.as_deref(), sealed.as_deref()) {
            return changed("deadline");
        }
    }
    if d.timeout.as_ref().is_some_and(|t| t != timeout) {
        return changed("timeout");
    }
    if d.metadata_hash
        .as_ref()
        .is_some_and(|h| *h != metadata.as_deref().map(sha256_tag))
    {
        return changed("metadata");
    }
    if run_id.as_deref() != Some(d.run_id.as_str()) {
        return changed("run");
    }
    if !same_time(created_at.as_deref(), d.created_at.as_deref()) {
        return changed("opening time");
    }
    let shown_status = status.as_str();
    let by = resolved_by.as_deref().unwrap_or("");
    if let Some((st, who, _)) = &d.decision {
        if *status != *st || by != who {
            return Integrity::Tampered(format!(
                "its log says {st} by {} but the gate says {shown_status}{}",
                crate::error::shown(who),
                if status.is_pending() {
                    String::new()
                } else {
                    format!(" by {}", crate::error::shown(by))
                }
            ));
        }
        if !same_time(resolved_at.as_deref(), d.decided_at.as_deref()) {
            return changed("decision time");
        }
        if *resolution_comment != d.comment {
            return changed("decision's comment");
        }
        return Integrity::Attested;
    }
    match status {
        GateStatus::Pending => {
            // Pending, it has no decision to show: a decider, time or comment is made up.
            return if resolved_by.is_some() || resolved_at.is_some() || resolution_comment.is_some()
            {
                Integrity::Tampered(
                    "it is pending, but its row shows a decider, decision time or comment".into(),
                )
            } else {
                Integrity::Attested
            };
        }
        GateStatus::Other(s) => {
            return Integrity::Tampered(format!("its status {s:?} is none a gate can have"))
        }
        _ => {}
    }
    let explained = events.iter().any(|(r, s)| {
        *s != RowState::Attested
            && *s != RowState::Broken
            && r.event_type == shown_status
            && r.principal.as_deref() == Some(by)
            && instance_of(r) == *instance
    });
    if explained {
        Integrity::Unattested(format!(
            "its {shown_status} event by {} is not sealed (written by another tool, from before the chain, or sealed elsewhere)",
            crate::error::shown(by)
        ))
    } else {
        Integrity::Tampered(format!(
            "it is {shown_status} by {}, but its log has no {shown_status} event by them",
            crate::error::shown(by)
        ))
    }
}

/// Where an earlier opening of gate `gate` stands, one a later opening superseded: `d`, its
/// own sealed events as [`Derived::earlier`] keeps them, against `row`, what `gate_instances`
/// keeps of it (compared as a current gate's row is, by [`compare`]), and what a check of its
/// decision's signature found (`report.earlier`). The run's log broken, its row gone, or an
/// opening superseded before it was decided (no rule reopens a pending gate) is tampered.
pub fn opening_integrity(
    report: &ChainReport,
    gate: &str,
    row: Option<&GateRow>,
    d: &Derived,
) -> Integrity {
    if let Some(b) = &report.first_broken {
        return Integrity::Tampered(format!("the run's audit log is broken: {}", b.reason));
    }
    if d.decision.is_none() {
        return Integrity::Tampered(format!(
            "its log opens it again while instance {} has no sealed decision",
            d.instance
        ));
    }
    let Some(row) = row else {
        return Integrity::Tampered(format!(
            "its log opened instance {}, but the row gate_instances keeps of it is gone",
            d.instance
        ));
    };
    match compare(row, d, &[]) {
        Integrity::Attested => report
            .earlier
            .iter()
            .find(|(g, i, _)| g == gate && *i == d.instance)
            .map_or(Integrity::Attested, |(_, _, why)| why.clone()),
        Integrity::Tampered(why) => Integrity::Tampered(format!("instance {}: {why}", d.instance)),
        Integrity::Unattested(why) => {
            Integrity::Unattested(format!("instance {}: {why}", d.instance))
        }
    }
}

fn gate_integrity(
    gate: &GateRow,
    events: &[(&AuditRow, RowState)],
    moves: &Moves,
) -> (Integrity, Derived) {
    if events.iter().any(|(_, s)| *s == RowState::Broken) {
        return (
            Integrity::Tampered("its audit events are broken".into()),
            Derived::default(),
        );
    }
    match derive(events, moves) {
        Ok(d) => (compare(gate, &d, events), d),
        Err(why) => (Integrity::Tampered(why), Derived::default()),
    }
}

/// A row that vouches for itself alone: in the sequence, its hash matching its content and
/// previous hash, its seal this machine's and matching. What a write checks a gate's history
/// with, where the whole chain (`check`) would cost a read of the run's whole log; `check`
/// still finds rows removed between them.
pub fn self_state(r: &AuditRow, key: Option<&Key>) -> RowState {
    let (Some(hash), Some(_)) = (&r.hash, r.seq) else {
        return RowState::Unattested;
    };
    if r.chain_hash(r.prev_hash.as_deref().unwrap_or_default()) != *hash {
        return RowState::Broken;
    }
    match key.map(|k| k.check(hash, r.seal.as_deref())) {
        Some(SealCheck::Valid) => RowState::Attested,
        Some(SealCheck::Invalid | SealCheck::Missing) => RowState::Broken,
        _ => RowState::Unattested,
    }
}

/// A gate checked against its own history by [`self_state`], with what its events derive
/// (their execution ids read through the run's `moves`, its `renumbered` events, each of which
/// counts only if it vouches for itself the same way). A sealed row that names another run
/// (copied in from one, its seal genuine there) is broken here: a run's gates are derived from
/// its own events alone.
pub fn gate_against_history(
    gate: &GateRow,
    run_id: &str,
    history: &[AuditRow],
    moves: &[AuditRow],
    key: Option<&Key>,
) -> (Integrity, Derived) {
    let moves = Moves::of(
        moves
            .iter()
            .filter(|r| r.run_id == run_id && self_state(r, key) == RowState::Attested),
    );
    let events: Vec<(&AuditRow, RowState)> = history
        .iter()
        .map(|r| match self_state(r, key) {
            RowState::Attested if r.run_id != run_id => (r, RowState::Broken),
            state => (r, state),
        })
        .collect();
    gate_integrity(gate, &events, &moves)
}

fn instance_of(row: &AuditRow) -> i64 {
    row.metadata
        .as_deref()
        .and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok())
        .and_then(|m| m.get("instance").and_then(serde_json::Value::as_i64))
        .unwrap_or(1)
}

/// The bindings the openings among `rows` name (each one's response binding and inputs):
/// the rows of a run's sealed chain after `from` (this machine's anchor; None: the whole
/// chain), which must follow it and each other in sequence, each matching its hash and its
/// predecessor, and sealed (with this machine's key where it holds one; a row another key
/// sealed, or any when it holds none, counts as read). What names a binding is then told from
/// the sealed log and this machine's anchor, never from a narrowing of rows raw SQL can
/// change; a row missing, changed or forged is why not (Err).
pub fn names_after(
    rows: &[AuditRow],
    from: Option<&Anchor>,
    key: Option<&Key>,
) -> Result<std::collections::BTreeSet<String>, String> {
    let mut sequenced: Vec<&AuditRow> = rows.iter().filter(|r| r.seq.is_some()).collect();
    sequenced.sort_by_key(|r| (r.seq, r.id));
    let first = from.map_or(1, |a| a.seq + 1);
    let mut prev = from.map(|a| a.hash.clone());
    let mut named = std::collections::BTreeSet::new();
    for (expected, row) in (first..).zip(sequenced) {
        let seq = row.seq.unwrap_or_default();
        if seq != expected {
            return Err(if seq < expected {
                format!("seq {seq} appears twice")
            } else {
                format!("seq {expected} is missing: rows were deleted")
            });
        }
        let hash = row.hash.clone().unwrap_or_default();
        // The first row of the whole chain follows the older, unsealed one, if any: its link
        // is `check`'s to judge; its own content and seal are judged here.
        let link = prev
            .clone()
            .unwrap_or_else(|| row.prev_hash.clone().unwrap_or_default());
        if let Some(why) = link_problem(row, &link, &hash) {
            return Err(format!("at seq {seq}: {why}"));
        }
        if let Some(SealCheck::Invalid | SealCheck::Missing) =
            key.map(|k| k.check(&hash, row.seal.as_deref()))
        {
            return Err(format!("at seq {seq}: its seal does not match"));
        }
        if row.event_type == "created" {
            let m = row.metadata_json();
            if let Some(answer) = m["response_binding"].as_str() {
                named.insert(answer.to_string());
            }
            for input in m["inputs"].as_array().into_iter().flatten() {
                if let Some(input) = input.as_str() {
                    named.insert(input.to_string());
                }
            }
        }
        prev = Some(hash);
    }
    Ok(named)
}

/// What moving this machine's anchor of a run's chain comes to, once the transaction `tx`
/// that sealed events commits: to the run's newest row, when that row is sealed with this
/// machine's key; None when it stays. Read in the transaction, done after its commit
/// (`tx::Txn::commit`), so that an anchor never names a row a reader cannot see yet. An
/// anchor that cannot be written costs a warning, never the committed write.
pub(crate) fn anchor_move(tx: &mut dyn super::Tx, place: String) -> Option<Box<dyn FnOnce()>> {
    let key = tx.wiring().key_for_reading().ok()??;
    // Anchored under the run's own id (a row's `run_id` is what a writer of the database
    // chose), as `verify_signed` reads it.
    let (run_id, _) = tx.run_row().ok()??;
    let home = tx.wiring().home();
    let old = super::seal::anchored(home.as_deref(), &place, &run_id);
    // One read: the row the old anchor names and every row after it, up to the new head (the
    // whole chain when there is no anchor, or one from before the names were kept). What the
    // openings name, up to the new head, is the old anchor's names and those of the rows
    // after it, checked here. A chain after the anchor that does not hold together moves
    // nothing: the break is `gates verify`'s to name.
    let base = old.clone().filter(|a| a.named.is_some());
    let after = crate::store::AuditFilter {
        after_seq: Some(base.as_ref().map_or(0, |a| a.seq - 1)),
        ..crate::store::AuditFilter::default()
    };
    let mut rows = match tx.audit(&after) {
        Ok(rows) => rows,
        Err(e) => {
            let why = format!("could not read the audit chain to anchor it: {e:#}");
            return Some(Box::new(move || crate::output::warn(&why)));
        }
    };
    // The head: the newest row of the sequence, when this machine's key sealed it.
    let head = rows
        .iter()
        .filter(|r| r.seq.is_some())
        .max_by_key(|r| r.seq)?;
    let (seq, hash) = (head.seq?, head.hash.clone()?);
    if key.check(&hash, head.seal.as_deref()) != SealCheck::Valid {
        return None;
    }
    let base = base.filter(|a| a.seq <= seq);
    // Never past a break: if the row this machine anchored is gone or changed, the anchor
    // stays where it is, and the break is remembered outside the run, so that a log put
    // back afterwards still fails verification here.
    if let Some(old) = old.filter(|a| a.seq < seq) {
        let held = rows.iter().find(|r| r.seq == Some(old.seq));
        if held.and_then(|r| r.hash.as_deref()) != Some(old.hash.as_str()) {
            return Some(Box::new(move || {
                let why = format!(
                    "this machine saw the row it anchored (seq {}) changed or gone",
                    old.seq
                );
                let _ = super::seal::mark_broken(home.as_deref(), &place, &run_id, &why);
                crate::output::warn(
                    "the audit log no longer holds the row this machine anchored: run `prose-state gates verify`",
                );
            }));
        }
    }
    if let Some(a) = &base {
        rows.retain(|r| r.seq.is_some_and(|s| s > a.seq));
    }
    let mut named = match names_after(&rows, base.as_ref(), Some(key)) {
        Ok(named) => named,
        Err(why) => {
            let why = format!("the audit chain was not anchored: {why}");
            return Some(Box::new(move || crate::output::warn(&why)));
        }
    };
    named.extend(base.and_then(|a| a.named).unwrap_or_default());
    Some(Box::new(move || {
        let head = Anchor {
            seq,
            hash,
            named: Some(named),
        };
        if let Err(e) = super::seal::anchor(home.as_deref(), &place, &run_id, &head) {
            crate::output::warn(&format!("could not anchor the audit chain: {e:#}"));
        }
    }))
}
