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

use super::{AuditRow, GateRow};
use crate::model::{sha256_tag, GateStatus};
use crate::seal::{Anchor, Key, SealCheck};
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowState {
    Legacy,
    Attested,
    Unattested,
    Broken,
}

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

    /// Where one gate stands.
    pub fn gate(&self, id: &str) -> Integrity {
        self.gates
            .iter()
            .find(|(g, _)| g == id)
            .map_or(Integrity::Attested, |(_, i)| i.clone())
    }
}

const DECISIONS: [&str; 3] = ["approved", "rejected", "timeout"];

/// Checks a run's audit rows (in id order) and its gates, with this machine's key and its
/// anchor of the run's chain.
pub fn check(
    rows: &[AuditRow],
    gates: &[GateRow],
    key: Option<&Key>,
    anchor: Option<&Anchor>,
) -> ChainReport {
    let mut report = ChainReport {
        rows: rows.len(),
        ..Default::default()
    };
    let states = row_states(rows, key, anchor, &mut report);
    for (id, state) in &states {
        match state {
            RowState::Attested => report.attested += 1,
            RowState::Unattested => report.unattested.push(*id),
            _ => {}
        }
    }
    report.unattested.sort_unstable();
    for gate in gates {
        let events: Vec<(&AuditRow, RowState)> = rows
            .iter()
            .filter(|r| r.gate_id == gate.id)
            .map(|r| (r, states.get(&r.id).copied().unwrap_or(RowState::Broken)))
            .collect();
        let integrity = gate_integrity(gate, &events);
        if integrity != Integrity::Attested {
            report.gates.push((gate.id.clone(), integrity));
        }
    }
    report
}

fn row_states(
    rows: &[AuditRow],
    key: Option<&Key>,
    anchor: Option<&Anchor>,
    report: &mut ChainReport,
) -> HashMap<i64, RowState> {
    let mut states = HashMap::new();
    let first_seq_id = rows.iter().find(|r| r.seq.is_some()).map(|r| r.id);
    let broken = |report: &mut ChainReport, id: i64, reason: String| {
        if report.first_broken.is_none() {
            report.first_broken = Some(BrokenLink { id, reason });
        }
    };

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
                } else if row.prev_hash.as_deref().unwrap_or_default() != expected {
                    broken(report, row.id, "prev_hash does not match the previous row's hash (a row was removed or inserted)".into());
                    RowState::Broken
                } else if row.chain_hash(&expected) != *hash {
                    broken(
                        report,
                        row.id,
                        "content does not match its hash (the row was edited)".into(),
                    );
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
            broken(
                report,
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
        } else if row.prev_hash.as_deref().unwrap_or_default() != prev {
            Some(
                "prev_hash does not match the previous row's hash (a row was removed or inserted)"
                    .into(),
            )
        } else if row.chain_hash(&prev) != hash {
            Some("content does not match its hash (the row was edited)".into())
        } else {
            None
        };
        if let Some(reason) = fail {
            broken(report, row.id, reason);
            states.insert(row.id, RowState::Broken);
            continue;
        }
        let state = match key.map(|k| k.check(&hash, row.seal.as_deref())) {
            None => {
                report.key_missing = true;
                RowState::Unattested
            }
            Some(SealCheck::Valid) => RowState::Attested,
            Some(SealCheck::OtherKey) => {
                report.other_key += 1;
                RowState::Unattested
            }
            Some(SealCheck::Invalid | SealCheck::Missing) => {
                broken(
                    report,
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
            broken(
                report,
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
            None => broken(
                report,
                0,
                format!("the log ends at seq {last}, but this machine sealed up to seq {}: rows were cut from its end", a.seq),
            ),
            Some(h) if *h != a.hash => broken(
                report,
                0,
                format!("the row at seq {} is not the one this machine sealed", a.seq),
            ),
            Some(_) => report.anchored = Some(a.seq),
        }
    }
    states
}

fn trusted(state: RowState) -> bool {
    matches!(state, RowState::Attested | RowState::Legacy)
}

fn gate_integrity(gate: &GateRow, events: &[(&AuditRow, RowState)]) -> Integrity {
    if events.iter().any(|(_, s)| *s == RowState::Broken) {
        return Integrity::Tampered("its audit events are broken".into());
    }
    // A gate opened again is checked against its current instance's events only (events
    // that name no instance are the first's).
    let events: Vec<(&AuditRow, RowState)> = events
        .iter()
        .filter(|(r, _)| instance_of(r) == gate.instance)
        .copied()
        .collect();
    let events = &events[..];
    // The prompt the gate was created with.
    let created_hash = events
        .iter()
        .filter(|(r, s)| r.event_type == "created" && trusted(*s))
        .find_map(|(r, _)| prompt_hash(r));
    if created_hash.is_some_and(|h| h != sha256_tag(&gate.prompt)) {
        return Integrity::Tampered(
            "its prompt is not the one it was created with (rewritten)".into(),
        );
    }
    let status = gate.status.as_str();
    if let Some((r, _)) = events.iter().find(|(r, s)| {
        trusted(*s) && DECISIONS.contains(&r.event_type.as_str()) && r.event_type != status
    }) {
        return Integrity::Tampered(format!(
            "its log says {} but the gate says {status}",
            r.event_type
        ));
    }
    let by = match &gate.status {
        GateStatus::Pending => return Integrity::Attested,
        GateStatus::Timeout => "system",
        GateStatus::Approved | GateStatus::Rejected => gate.resolved_by.as_deref().unwrap_or(""),
        GateStatus::Other(s) => {
            return Integrity::Tampered(format!("its status {s:?} is none a gate can have"))
        }
    };
    let matching = |want: fn(RowState) -> bool| {
        events
            .iter()
            .any(|(r, s)| want(*s) && r.event_type == status && r.principal.as_deref() == Some(by))
    };
    if matching(trusted) {
        Integrity::Attested
    } else if matching(|s| s == RowState::Unattested) {
        Integrity::Unattested(format!(
            "its {status} event by {by} is not attested (written by another tool, or sealed elsewhere)"
        ))
    } else {
        Integrity::Tampered(format!(
            "it is {status} by {by}, but its log has no {status} event by {by}"
        ))
    }
}

/// The prompt hash a gate's `created` event (of its current instance) recorded, from an event that vouches for itself:
/// its hash matches its content and, when sealed, its seal is this machine's and matches.
/// None when there is no such event (a gate another tool made with the spec's SQL).
pub fn created_prompt_hash(
    history: &[AuditRow],
    instance: i64,
    key: Option<&Key>,
) -> Option<String> {
    history
        .iter()
        .filter(|r| r.event_type == "created" && instance_of(r) == instance)
        .filter(|r| {
            let Some(hash) = &r.hash else { return false };
            if r.chain_hash(r.prev_hash.as_deref().unwrap_or_default()) != *hash {
                return false;
            }
            match (r.seq, key) {
                (None, _) => true,
                (Some(_), Some(k)) => k.check(hash, r.seal.as_deref()) == SealCheck::Valid,
                (Some(_), None) => false,
            }
        })
        .find_map(prompt_hash)
}

fn instance_of(row: &AuditRow) -> i64 {
    row.metadata
        .as_deref()
        .and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok())
        .and_then(|m| m.get("instance").and_then(serde_json::Value::as_i64))
        .unwrap_or(1)
}

fn prompt_hash(row: &AuditRow) -> Option<String> {
    let m: serde_json::Value = serde_json::from_str(row.metadata.as_deref()?).ok()?;
    m.get("prompt_hash")?.as_str().map(str::to_string)
}
