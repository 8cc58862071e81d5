//! A gate as its sealed events make it (`derive`): the one account of a gate's openings,
//! votes, decision, answer and edits that only the holder of the audit key can write. The
//! chain (`chain`) says which events are sealed; this reads what they say.

use super::AuditRow;
use crate::model::GateStatus;

/// Where a row stands in the chain: what `chain` found of its seal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowState {
    Legacy,
    Attested,
    Unattested,
    Broken,
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
    /// The execution record this opening appended (`approve G:`, pending): the run's newest
    /// record when its `created` event was sealed (`after_record`, read through the moves).
    pub opened_record: Option<i64>,
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
    /// Each quorum vote's pinned versions of the inputs, with the digests it sealed of them
    /// (as a decision's `pinned` and `decided_inputs`): what the voter was shown.
    pub voted: Vec<VotedPins>,
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
    /// (`version`), the sizes before (`bytes_before`) and after (`bytes`), and the digests of
    /// the value written (`digest`) and of the version edited (`digest_before`, as the decider
    /// was shown it).
    pub edits: Vec<(String, serde_json::Value)>,
    /// When each of `edits` was written, by its event (in the same order): the event's time
    /// and its newest record (`after_record`), which the edit's history row holds too.
    pub edits_at: Vec<Written>,
    /// When the decision was written, by its event: what its answer's history row holds.
    pub decided: Option<Written>,
    /// Every sealed answer of that opening, vote by vote and then the decision's, with who
    /// gave it: a quorum's approvers may answer differently, and none is lost.
    pub responses: Vec<(String, serde_json::Value)>,
    /// The openings before this one, oldest first, each as its own sealed events made it
    /// when the next opened (a decided opening is never changed by a later one): what a wait
    /// on an earlier instance answers with.
    pub earlier: Vec<Derived>,
}

/// When a sealed event was written: its time, and the newest execution record then
/// (`after_record`), read through the run's moves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    pub at: Option<String>,
    pub record: Option<i64>,
}

/// A vote's pinned versions and the digests it sealed of them.
pub type VotedPins = (
    std::collections::BTreeMap<String, Pin>,
    std::collections::BTreeMap<String, Option<String>>,
);

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
/// How copies renumbered the run's log, as the sealed `renumbered` events this machine vouches
/// for say. A store that numbers execution ids itself (PostgreSQL) gives a run it takes in
/// (`import`, `fork`) new ids, and each event sealed before then names executions by their old
/// ones: the copy seals the old and new id of each execution the log names, in one `renumbered`
/// event after the events it took in, and every derivation reads a sealed id through them, so
/// that a decision's frames are the same executions after any number of moves. No row edit
/// changes it: the map is in the sealed chain.
#[derive(Debug, Clone, Default)]
pub struct Moves(Vec<Move>);

#[derive(Debug, Clone)]
struct Move {
    /// Where the `imported` event is in the chain.
    seq: i64,
    /// The newest event of the chain the import took in: the events it renumbered.
    head: i64,
    ids: std::collections::HashMap<i64, i64>,
}

pub use super::dump::RENUMBERED;

impl Moves {
    /// From the run's `renumbered` events this machine vouches for (the caller gives no
    /// other). Only those in the line of the newest count: a copy that replaced a run (the
    /// server's log keeps what it replaced) took in a chain without the moves after its head.
    pub fn of<'a>(events: impl IntoIterator<Item = &'a AuditRow>) -> Moves {
        let mut all: Vec<Move> = events
            .into_iter()
            .filter(|r| is_renumbering(r))
            .filter_map(|r| {
                let moved: serde_json::Value = serde_json::from_str(r.metadata.as_deref()?).ok()?;
                let ids = moved["ids"]
                    .as_object()?
                    .iter()
                    .filter_map(|(k, v)| Some((k.parse().ok()?, v.as_i64()?)))
                    .collect();
                Some(Move {
                    seq: r.seq?,
                    head: moved["head"].as_i64()?,
                    ids,
                })
            })
            .collect();
        all.sort_by_key(|m| m.seq);
        let mut line = Vec::new();
        let mut within = i64::MAX;
        for m in all.into_iter().rev() {
            if m.seq <= within {
                within = m.head;
                line.push(m);
            }
        }
        line.reverse();
        Moves(line)
    }

    /// Execution `id`, as an event sealed at `seq` names it, in the run's numbering now.
    pub fn now(&self, seq: Option<i64>, id: i64) -> i64 {
        let Some(seq) = seq else { return id };
        self.0
            .iter()
            .filter(|m| seq <= m.head)
            .fold(id, |id, m| m.ids.get(&id).copied().unwrap_or(id))
    }

    /// Sealed metadata (of an event at `seq`) with each execution id it names as it is now:
    /// through the map a fork sealed with the event it carried (`carried.moved`: the ids as
    /// its source had them then), then through the run's own moves.
    pub fn renumber(&self, seq: Option<i64>, m: &mut serde_json::Value) {
        let carried: std::collections::HashMap<i64, i64> = m["carried"]["moved"]
            .as_object()
            .map(|o| {
                o.iter()
                    .filter_map(|(k, v)| Some((k.parse().ok()?, v.as_i64()?)))
                    .collect()
            })
            .unwrap_or_default();
        if !self.0.is_empty() || !carried.is_empty() {
            for_each_scope(m, &mut |id| {
                self.now(seq, carried.get(&id).copied().unwrap_or(id))
            });
        }
    }
}

/// Whether a row is a run's `renumbered` event.
pub fn is_renumbering(r: &AuditRow) -> bool {
    r.gate_id.is_empty() && r.event_type == RENUMBERED
}

/// Each execution id a sealed event's metadata names, replaced by `f`'s: the newest record when
/// it was written (`after_record`), the frames of a `created` event's inputs and response
/// binding, and of a decision's (or vote's) pinned versions and edits. The one list of where
/// the log names executions.
pub fn for_each_scope(m: &mut serde_json::Value, f: &mut dyn FnMut(i64) -> i64) {
    let mut at = |v: Option<&mut serde_json::Value>| {
        if let Some(v) = v {
            if let Some(id) = v.as_i64() {
                *v = f(id).into();
            }
        }
    };
    at(m.get_mut("after_record"));
    at(m.get_mut("inputs_scope"));
    at(m.get_mut("response_scope"));
    if let Some(pins) = m.get_mut("pinned").and_then(|p| p.as_object_mut()) {
        for pin in pins.values_mut() {
            at(pin.get_mut("scope"));
        }
    }
    if let Some(edits) = m.get_mut("edits").and_then(|e| e.as_array_mut()) {
        for e in edits {
            at(e.get_mut("execution_id"));
        }
    }
}

pub fn derive(events: &[(&AuditRow, RowState)], moves: &Moves) -> Result<Derived, String> {
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
        let mut m: serde_json::Value = r
            .metadata
            .as_deref()
            .and_then(|m| serde_json::from_str(m).ok())
            .unwrap_or_default();
        moves.renumber(r.seq, &mut m);
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
                    opened_record: m["after_record"].as_i64(),
                    timeout: m.get("timeout").map(|v| v.as_str().map(str::to_string)),
                    metadata_hash: m
                        .get("metadata_hash")
                        .map(|v| v.as_str().map(str::to_string)),
                    decided_at: None,
                    comment: None,
                    pinned: None,
                    voted: Vec::new(),
                    response_schema: m.get("response_schema").cloned(),
                    response: None,
                    response_binding: m["response_binding"]
                        .as_str()
                        .map(|n| (n.to_string(), m["response_scope"].as_i64())),
                    response_version: None,
                    edits: Vec::new(),
                    edits_at: Vec::new(),
                    decided: None,
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
                let written = Written {
                    at: r.timestamp.clone(),
                    record: m["after_record"].as_i64(),
                };
                for e in m["edits"].as_array().into_iter().flatten() {
                    d.edits.push((by.clone(), e.clone()));
                    d.edits_at.push(written.clone());
                }
                if !d.inputs.is_empty() {
                    let pins = serde_json::from_value(m["pinned"].clone());
                    let digests = serde_json::from_value(m["inputs"].clone());
                    if let (Ok(pins), Ok(digests)) = (pins, digests) {
                        d.voted.push((pins, digests));
                    }
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
                let written = Written {
                    at: r.timestamp.clone(),
                    record: m["after_record"].as_i64(),
                };
                for e in m["edits"].as_array().into_iter().flatten() {
                    d.edits.push((by.clone(), e.clone()));
                    d.edits_at.push(written.clone());
                }
                d.decided = Some(written);
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
