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

use super::seal::{Anchor, Key, SealCheck};
use super::{AuditRow, GateRow};
use crate::model::{sha256_tag, GateStatus};
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
        let (integrity, derived) = gate_integrity(gate, &events);
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

/// A gate as its sealed events make it: the one account of a gate that only the holder of the
/// audit key can write. The `gates` and `gate_instances` rows are projections of it, kept in
/// the spec's shape for the spec's SQL and for speed, compared with it and never trusted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Derived {
    /// The newest opening with a sealed `created` event; 0 when the gate has none.
    pub instance: i64,
    /// The principals that opening's `created` event allows.
    pub allow: Vec<String>,
    pub prompt_hash: Option<String>,
    /// `on_reject` and the deadline, when the `created` event recorded them (events written
    /// before this release did not).
    pub on_reject: Option<Option<String>>,
    pub timeout_at: Option<Option<String>>,
    /// The first sealed decision of that opening: its status, principal and audit row id.
    pub decision: Option<(GateStatus, String, i64)>,
    /// What that opening asks of its deciders (its `created` event's quorum, veto and
    /// separation of duties).
    pub quorum: crate::team::Quorum,
    /// Its sealed votes short of the decision (`approval` and `rejection` events).
    pub tally: crate::team::Tally,
    /// Who the decision counted (the approvals or rejections it records).
    pub counted: Vec<String>,
    /// Whether a sealed `escalated` event opened it to its escalation entry (which `allow`
    /// then includes, with the new deadline in `timeout_at`).
    pub escalated: bool,
    /// The times of the reminders its sealed `reminder` events announced.
    pub reminded: Vec<String>,
    /// The bindings its decision is about (`gates create --inputs`), as its `created` event
    /// names them.
    pub inputs: Vec<String>,
    /// The scope they are looked up from, as its `created` event seals it: the execution the
    /// gate was opened in (None: the root), where the program goes on.
    pub inputs_scope: Option<i64>,
    /// The content digest of each input when the decision was made, as the decision sealed
    /// it (None: the input did not exist).
    pub decided_inputs: Option<std::collections::BTreeMap<String, Option<String>>>,
    /// Whether the VM consumed the decision (a sealed `consumed` event after it): later
    /// changes of its inputs are the program's own business.
    pub consumed: bool,
    /// The run its `created` event names, and when that event opened it.
    pub run_id: String,
    pub created_at: Option<String>,
    /// What its `created` event recorded of the rest of the row, from this release on (None:
    /// not recorded, so the row's value is shown as the row's): the timeout as given and the
    /// digest of its metadata (None inside: no metadata).
    pub timeout: Option<Option<String>>,
    pub metadata_hash: Option<Option<String>>,
    /// The sealed decision's time and comment (a rejection's reason).
    pub decided_at: Option<String>,
    pub comment: Option<String>,
    /// Each input's version the decision was about, as the decision pinned it: its frame (None:
    /// the root) and the binding's own version number there, as `history` lists it. None for
    /// decisions sealed before versions were pinned (their digest is found in any version).
    pub pinned: Option<std::collections::BTreeMap<String, Pin>>,
    /// The response schema its `created` event seals (`gates create --response-schema`), and
    /// the answer its decision seals with it (`approve --response`): a quorum's answer is
    /// the deciding approval's (each vote's own stays in its vote event).
    pub response_schema: Option<serde_json::Value>,
    pub response: Option<serde_json::Value>,
    /// The binding the decision writes with its answer, and its scope (None: the root), as
    /// the `created` event seals them (`gates create --response-binding`).
    pub response_binding: Option<(String, Option<i64>)>,
    /// The response binding's own version its decision wrote, as the decision seals it: the
    /// newest of them is what the binding holds.
    pub response_version: Option<i64>,
    /// The approvals' edits of the gate's inputs (`approve --edit`), vote by vote and then
    /// the decision's, each with who made it: the input's name, its scope (`execution_id`),
    /// the version edited (`from_version`, null: it was not bound) and the version written
    /// (`version`), and the sizes before (`bytes_before`) and after (`bytes`).
    pub edits: Vec<(String, serde_json::Value)>,
    /// Every sealed answer of that opening, vote by vote and then the decision's, with who
    /// gave it: a quorum's approvers may answer differently, and none is lost.
    pub responses: Vec<(String, serde_json::Value)>,
    /// The openings before this one, oldest first, each as its own sealed events made it
    /// when the next opened (a decided opening is never changed by a later one): what a wait
    /// on an earlier instance answers with.
    pub earlier: Vec<Derived>,
}

/// Where a decided input's version lives: its frame and its own version number there.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pin {
    pub scope: Option<i64>,
    pub version: i64,
}

/// The event that records a decision consumed by the VM (`gates wait` returning it, `resume`
/// reporting it), for a gate with inputs.
pub const CONSUMED: &str = "consumed";

/// Why a decision no longer stands because its inputs changed, if so: it has inputs, it was
/// not consumed yet, and an input's content now (`now`, by name) is not what it sealed.
pub fn stale(
    d: &Derived,
    now: &std::collections::BTreeMap<String, Option<String>>,
) -> Option<String> {
    let decided = d.decided_inputs.as_ref()?;
    if d.consumed || d.inputs.is_empty() {
        return None;
    }
    let changed: Vec<&str> = d
        .inputs
        .iter()
        .filter(|name| decided.get(*name) != now.get(*name))
        .map(String::as_str)
        .collect();
    (!changed.is_empty()).then(|| {
        format!(
            "{} changed after the decision and before it was consumed",
            crate::error::shown(&changed.join(", "))
        )
    })
}

impl Derived {
    /// The votes as they stand: what the decision counted once there is one, else the
    /// sealed votes so far.
    pub fn tally_or_counted(&self) -> crate::team::Tally {
        match &self.decision {
            Some((status, _, _)) if !self.counted.is_empty() => crate::team::Tally {
                approvals: match status {
                    GateStatus::Approved => self.counted.clone(),
                    _ => self.tally.approvals.clone(),
                },
                rejections: match status {
                    GateStatus::Rejected => self.counted.clone(),
                    _ => self.tally.rejections.clone(),
                },
            },
            _ => self.tally.clone(),
        }
    }

    /// The derived status: the sealed decision's, else pending.
    pub fn status(&self) -> GateStatus {
        self.decision
            .as_ref()
            .map_or(GateStatus::Pending, |(s, _, _)| s.clone())
    }

    /// Opening `instance` as its sealed events made it: this one, or an earlier one that a
    /// later opening superseded. None when the log opened no such instance.
    pub fn opening(&self, instance: i64) -> Option<&Derived> {
        if instance == self.instance && instance > 0 {
            return Some(self);
        }
        self.earlier.iter().find(|d| d.instance == instance)
    }
}

/// Derives a gate from its events: only sealed (attested) events count, in sequence order.
/// An opening begins at its sealed `created` event, which fixes its allow list, prompt hash,
/// deadline and `on_reject`; the first sealed decision of the newest opening by a principal
/// that event allows is the decision. Sealed events that contradict each other (a decision
/// by a principal not allowed, two decisions, a decision for another opening, openings out
/// of order) can only come from a holder of the key: Err, with why.
pub fn derive(events: &[(&AuditRow, RowState)]) -> Result<Derived, String> {
    let mut sealed: Vec<&AuditRow> = events
        .iter()
        .filter(|(_, s)| *s == RowState::Attested)
        .map(|(r, _)| *r)
        .collect();
    sealed.sort_by_key(|r| (r.seq, r.id));
    let mut d = Derived::default();
    for r in sealed {
        // Views, refusals and resumptions decide nothing: their metadata is not read.
        if !matches!(
            r.event_type.as_str(),
            "created"
                | "approved"
                | "rejected"
                | "timeout"
                | VOTE_APPROVE
                | VOTE_REJECT
                | ESCALATED
                | REMINDER
                | CONSUMED
        ) {
            continue;
        }
        let m: serde_json::Value = r
            .metadata
            .as_deref()
            .and_then(|m| serde_json::from_str(m).ok())
            .unwrap_or_default();
        let instance = m
            .get("instance")
            .and_then(serde_json::Value::as_i64)
            .unwrap_or(1);
        let kind = r.event_type.as_str();
        // An event for an opening nothing here vouches for (its `created` event sealed on
        // another machine, or from before the seal) decides nothing this machine can stand
        // behind: the row's instance then has no sealed opening (unattested). One for an
        // earlier opening contradicts the log.
        if kind != "created" && instance != d.instance {
            if instance > d.instance {
                continue;
            }
            let what = match kind {
                ESCALATED | REMINDER => format!("an {kind} event"),
                CONSUMED => "a consumed event".to_string(),
                VOTE_APPROVE | VOTE_REJECT => "a vote".to_string(),
                _ => format!("a {kind} event"),
            };
            return Err(format!(
                "its log has {what} for instance {instance}, in the opening of instance {}",
                d.instance
            ));
        }
        match kind {
            "created" => {
                if instance != d.instance + 1 {
                    return Err(format!(
                        "its log opens instance {instance} after instance {}",
                        d.instance
                    ));
                }
                // An opening follows a decided one: the tool never reopens a gate its sealed
                // log says is pending.
                if d.instance > 0 && d.decision.is_none() {
                    return Err(format!(
                        "its log opens instance {instance} while instance {} has no sealed decision",
                        d.instance
                    ));
                }
                let allow = m["allow"]
                    .as_array()
                    .and_then(|a| {
                        a.iter()
                            .map(|v| v.as_str().map(str::to_string))
                            .collect::<Option<Vec<_>>>()
                    })
                    .ok_or("its created event has no allow list")?;
                // Recorded by `created` events from this release on (they carry both keys).
                let recorded = |k: &str| {
                    m.get("timeout_at")
                        .and(m.get(k))
                        .map(|v| v.as_str().map(str::to_string))
                };
                // The opening that ends is kept as it ended.
                let mut earlier = std::mem::take(&mut d.earlier);
                if d.instance > 0 {
                    earlier.push(std::mem::take(&mut d));
                }
                d = Derived {
                    instance,
                    allow,
                    prompt_hash: m["prompt_hash"].as_str().map(str::to_string),
                    on_reject: recorded("on_reject"),
                    timeout_at: recorded("timeout_at"),
                    decision: None,
                    quorum: crate::team::Quorum::from_created(&m)?,
                    tally: Default::default(),
                    counted: Vec::new(),
                    escalated: false,
                    reminded: Vec::new(),
                    inputs: m["inputs"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|v| v.as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_default(),
                    inputs_scope: m["inputs_scope"].as_i64(),
                    decided_inputs: None,
                    consumed: false,
                    run_id: r.run_id.clone(),
                    created_at: r.timestamp.clone(),
                    timeout: m.get("timeout").map(|v| v.as_str().map(str::to_string)),
                    metadata_hash: m
                        .get("metadata_hash")
                        .map(|v| v.as_str().map(str::to_string)),
                    decided_at: None,
                    comment: None,
                    pinned: None,
                    response_schema: m.get("response_schema").cloned(),
                    response: None,
                    response_binding: m["response_binding"]
                        .as_str()
                        .map(|n| (n.to_string(), m["response_scope"].as_i64())),
                    response_version: None,
                    edits: Vec::new(),
                    responses: Vec::new(),
                    earlier,
                };
            }
            CONSUMED => {
                if r.principal.as_deref() != Some("system") || d.decision.is_none() || d.consumed {
                    return Err(
                        "its log has a consumed event that no rule writes (before its decision, twice, or not by system)"
                            .into(),
                    );
                }
                d.consumed = true;
            }
            ESCALATED | REMINDER => {
                if r.principal.as_deref() != Some("system") || d.decision.is_some() {
                    return Err(format!(
                        "its log has an {kind} event that no rule writes (by {}, or after its decision)",
                        crate::error::shown(r.principal.as_deref().unwrap_or(""))
                    ));
                }
                if kind == REMINDER {
                    let at = m["at"].as_str().unwrap_or_default().to_string();
                    if d.reminded.contains(&at) {
                        return Err(format!("its log announces the reminder at {at} twice"));
                    }
                    d.reminded.push(at);
                    continue;
                }
                let expected = escalation(&d).ok_or_else(|| {
                    "its log escalates a gate that has no escalation, or escalates it twice"
                        .to_string()
                })?;
                if m["to"].as_str() != d.quorum.escalate_to.as_deref()
                    || m["timeout_at"].as_str() != Some(expected.as_str())
                {
                    return Err(
                        "its escalated event is not the escalation its created event asks for"
                            .into(),
                    );
                }
                d.allow = d.quorum.escalated_allow(&d.allow);
                d.timeout_at = Some(Some(expected));
                d.escalated = true;
            }
            VOTE_APPROVE | VOTE_REJECT => {
                let approve = kind == VOTE_APPROVE;
                if d.decision.is_some() {
                    return Err(format!("its log has a {kind} event after its decision"));
                }
                let by = r.principal.clone().unwrap_or_default();
                vote_allowed(&d, r, &m, &by, approve)?;
                if d.quorum.decided_by_one(approve) || !d.tally.add(&by, approve) {
                    return Err(format!(
                        "its log has a {kind} event by {} that no rule writes",
                        crate::error::shown(&by)
                    ));
                }
                answer_asked(&d, &m, approve)?;
                for e in m["edits"].as_array().into_iter().flatten() {
                    d.edits.push((by.clone(), e.clone()));
                }
                if let Some(answer) = m.get("response") {
                    d.responses.push((by, answer.clone()));
                }
            }
            "approved" | "rejected" | "timeout" => {
                if let Some((status, by, _)) = &d.decision {
                    return Err(format!(
                        "its log decides instance {instance} twice ({status} by {}, then {kind})",
                        crate::error::shown(by)
                    ));
                }
                let by = r.principal.clone().unwrap_or_default();
                if kind == "timeout" {
                    if by != "system" {
                        return Err(format!(
                            "its log has a timeout event by {}, whom its created event does not allow",
                            crate::error::shown(&by)
                        ));
                    }
                } else {
                    let approve = kind == "approved";
                    vote_allowed(&d, r, &m, &by, approve)?;
                    answer_asked(&d, &m, approve)?;
                    d.counted = counted(&d, &m, &by, approve)?;
                }
                if !d.inputs.is_empty() {
                    d.decided_inputs = serde_json::from_value(m["inputs"].clone()).ok();
                    d.pinned = match m.get("pinned") {
                        None => None,
                        Some(p) => Some(serde_json::from_value(p.clone()).map_err(|_| {
                            "its decision's pinned versions are not what a decision writes"
                                .to_string()
                        })?),
                    };
                }
                d.decided_at = r.timestamp.clone();
                d.comment = r.comment.clone();
                d.response = m.get("response").cloned();
                d.response_version = m["response_version"].as_i64();
                for e in m["edits"].as_array().into_iter().flatten() {
                    d.edits.push((by.clone(), e.clone()));
                }
                if let Some(answer) = &d.response {
                    let by = r.principal.clone().unwrap_or_default();
                    d.responses.push((by, answer.clone()));
                }
                d.decision = Some((GateStatus::parse(kind), by, r.id));
            }
            _ => {}
        }
    }
    Ok(d)
}

/// A decision or vote answers as its opening asks: an approval of a gate with a response
/// schema carries an answer (an answer of `null` is one), and a gate without one takes none.
/// (What the answer is was checked against the schema by the rule that sealed it.)
fn answer_asked(d: &Derived, m: &serde_json::Value, approve: bool) -> Result<(), String> {
    match (&d.response_schema, m.get("response")) {
        (Some(_), None) if approve => {
            Err("its approval carries no answer, and its opening asks for one".into())
        }
        (None, Some(_)) => {
            Err("its decision carries an answer its opening does not ask for".into())
        }
        _ => Ok(()),
    }
}

/// The sealed events of a gate's schedule: its escalation (once, at its deadline) and each
/// reminder before a deadline. Both by `system`, and neither decides anything.
pub const ESCALATED: &str = "escalated";
pub const REMINDER: &str = "reminder";

/// The deadline an escalation of this opening sets: its sealed deadline plus the escalation's
/// timeout. None when it has no escalation, no deadline, or escalated already.
pub fn escalation(d: &Derived) -> Option<String> {
    let after = d.quorum.escalate_after?;
    let at = d.timeout_at.as_ref()?.as_deref()?;
    d.quorum.escalate_to.as_ref()?;
    (!d.escalated).then_some(())?;
    Some(
        crate::model::Timestamp::parse_lenient(at)?
            .plus_seconds(after)
            .to_string(),
    )
}

/// A vote short of a gate's quorum: an approval (`approval`) or, without a veto, a rejection
/// (`rejection`). Never `approved` or `rejected`, which older readers take as the decision.
pub const VOTE_APPROVE: &str = "approval";
pub const VOTE_REJECT: &str = "rejection";

/// Whether a sealed vote or decision by `by` is one the opening allows: an allowed principal
/// (through a group only as the vote recorded it), authenticated where the opening counts only
/// authenticated decisions, and, approving, none that separation of duties excludes.
fn vote_allowed(
    d: &Derived,
    r: &AuditRow,
    m: &serde_json::Value,
    by: &str,
    approve: bool,
) -> Result<(), String> {
    let via: Vec<String> = m["via"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let kind = &r.event_type;
    let allowed = crate::model::Principal::parse(by, "principal")
        .is_ok_and(|p| crate::team::admitted_as_recorded(&d.allow, &p, &via));
    if !allowed {
        return Err(format!(
            "its log has a {kind} event by {}, whom its created event does not allow",
            crate::error::shown(by)
        ));
    }
    if d.quorum.needs_authentication(&d.allow) && m.get("authenticated").is_none() {
        return Err(format!(
            "its log counts an unauthenticated {kind} event by {}",
            crate::error::shown(by)
        ));
    }
    if approve && d.quorum.excluded().contains(&by) {
        return Err(format!(
            "its log has a {kind} event by {}, whom separation of duties excludes",
            crate::error::shown(by)
        ));
    }
    Ok(())
}

/// Whom a sealed decision counts: the approvals (or, without a veto, rejections) it records,
/// each a sealed vote of the opening or the decider's own, distinct and as many as the quorum
/// asks. A decision of a single-approver gate counts its decider.
fn counted(
    d: &Derived,
    m: &serde_json::Value,
    by: &str,
    approve: bool,
) -> Result<Vec<String>, String> {
    let key = if approve { "approvals" } else { "rejections" };
    let single = d.quorum.decided_by_one(approve);
    let listed: Vec<String> = match m.get(key).and_then(serde_json::Value::as_array) {
        Some(a) => a
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or_else(|| format!("its decision's {key} are not principals"))?,
        None if single => vec![by.to_string()],
        None => return Err(format!("its decision records no {key}")),
    };
    let votes = d.tally.votes(approve);
    let mut seen = std::collections::BTreeSet::new();
    let fine = listed
        .iter()
        .all(|p| seen.insert(p.as_str()) && (p == by || votes.contains(p)))
        && listed.iter().any(|p| p == by)
        && (single || listed.len() >= d.quorum.require as usize);
    if !fine {
        return Err(format!(
            "its decision counts {} where its sealed votes do not make a quorum of {}",
            crate::error::shown(&listed.join(", ")),
            d.quorum.require
        ));
    }
    Ok(listed)
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
        return Integrity::Unattested(
            "it has no sealed created event (made by another tool, or before the run was sealed): nothing vouches for it"
                .into(),
        );
    }
    if *instance < d.instance {
        return Integrity::Tampered(format!(
            "its row is instance {instance}, but its log opened instance {} (rolled back)",
            d.instance
        ));
    }
    if *instance > d.instance {
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

fn gate_integrity(gate: &GateRow, events: &[(&AuditRow, RowState)]) -> (Integrity, Derived) {
    if events.iter().any(|(_, s)| *s == RowState::Broken) {
        return (
            Integrity::Tampered("its audit events are broken".into()),
            Derived::default(),
        );
    }
    match derive(events) {
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

/// A gate checked against its own history by [`self_state`], with what its events derive.
/// A sealed row that names another run (copied in from one, its seal genuine there) is broken
/// here: a run's gates are derived from its own events alone.
pub fn gate_against_history(
    gate: &GateRow,
    run_id: &str,
    history: &[AuditRow],
    key: Option<&Key>,
) -> (Integrity, Derived) {
    let events: Vec<(&AuditRow, RowState)> = history
        .iter()
        .map(|r| match self_state(r, key) {
            RowState::Attested if r.run_id != run_id => (r, RowState::Broken),
            state => (r, state),
        })
        .collect();
    gate_integrity(gate, &events)
}

fn instance_of(row: &AuditRow) -> i64 {
    row.metadata
        .as_deref()
        .and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok())
        .and_then(|m| m.get("instance").and_then(serde_json::Value::as_i64))
        .unwrap_or(1)
}

/// What moving this machine's anchor of a run's chain comes to, once the transaction `tx`
/// that sealed events commits: to the run's newest row, when that row is sealed with this
/// machine's key; None when it stays. Read in the transaction, done after its commit
/// (`tx::Txn::commit`), so that an anchor never names a row a reader cannot see yet. An
/// anchor that cannot be written costs a warning, never the committed write.
pub(crate) fn anchor_move(tx: &mut dyn super::Tx, place: String) -> Option<Box<dyn FnOnce()>> {
    let (seq, hash, seal) = match tx.chain_tip() {
        Ok(tip) => tip?,
        Err(e) => {
            let why = format!("could not read the audit chain's head: {e:#}");
            return Some(Box::new(move || crate::output::warn(&why)));
        }
    };
    let key = super::seal::key_for_reading().ok()??;
    if key.check(&hash, seal.as_deref()) != SealCheck::Valid {
        return None;
    }
    // Anchored under the run's own id (a row's `run_id` is what a writer of the database
    // chose), as `verify_signed` reads it.
    let (run_id, _) = tx.run_row().ok()??;
    // Never past a break: if the row this machine anchored is gone or changed, the anchor
    // stays where it is, and the break is remembered outside the run, so that a log put
    // back afterwards still fails verification here.
    if let Some(old) = super::seal::anchored(&place, &run_id) {
        if old.seq < seq && tx.audit_at_seq(old.seq).ok().flatten().flatten() != Some(old.hash) {
            return Some(Box::new(move || {
                let why = format!(
                    "this machine saw the row it anchored (seq {}) changed or gone",
                    old.seq
                );
                let _ = super::seal::mark_broken(&place, &run_id, &why);
                crate::output::warn(
                    "the audit log no longer holds the row this machine anchored: run `prose-state gates verify`",
                );
            }));
        }
    }
    Some(Box::new(move || {
        if let Err(e) = super::seal::anchor(&place, &run_id, &Anchor { seq, hash }) {
            crate::output::warn(&format!("could not anchor the audit chain: {e:#}"));
        }
    }))
}
