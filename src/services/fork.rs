//! A fork: a new run whose state is its source's as of one execution record, built as a
//! copy of the run (a [`RunDump`]) that `import`'s landing writes whole or not at all.
//!
//! What the fork holds, read from the source's sealed log and its history, never from rows
//! alone:
//! - the execution records up to the point;
//! - every binding, and every run-scoped agent's memory, as it was then (from history), with
//!   the versions up to then; agent segments appended by then; every import;
//! - each gate opened by then, with its sealed events up to then, chained and sealed again in
//!   the fork as marked copies (`carried`: the source run, sequence number and hash). A
//!   decision carried counts in the fork, and its signature verifies against the source run
//!   it was made in. A gate whose log the source does not attest is not carried. Gates opened
//!   later are absent.
//!
//! The fork's first sealed row is its genesis, which records where it came from
//! (`forked_from`: run, record, time, the source's chain head).

use crate::error::{not_found, refused, shown, usage};
use crate::store::chain::{for_each_scope, ChainReport, Integrity, Moves, RowState};
use crate::store::dump::{
    AgentRecord, BindingRecord, GateRecord, RunDump, RunRecord, GENESIS, RUN_EVENT,
};
use crate::store::history::{self, AsOf, HistoryRow, Then};
use crate::store::AuditRow;
use anyhow::Result;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// How a fork is made.
pub struct Plan<'a> {
    /// The execution record the fork is made at.
    pub at: i64,
    pub new_id: &'a str,
    /// Root-scope bindings replaced at the fork point (`--bind NAME=VALUE`).
    pub binds: &'a [(String, String)],
    /// Who forks (recorded in the genesis and as the writer of each `--bind`).
    pub by: &'a str,
    pub now: &'a str,
}

/// What a fork carried.
#[derive(Debug, Default, Serialize)]
pub struct Carried {
    pub records: usize,
    pub bindings: usize,
    pub agents: usize,
    /// Gates carried with their decision (approved, rejected, timeout).
    pub gates_decided: Vec<String>,
    /// Gates carried pending: opened by the point, decided after it (or not at all).
    pub gates_pending: Vec<String>,
    /// Gates opened by the point whose log the source does not attest: not carried.
    pub gates_not_carried: Vec<String>,
    /// Bindings `--bind` replaced.
    pub rebound: Vec<String>,
}

/// Whether a sealed event happened by record `at`: as its metadata records (`after_record`,
/// sealed with it), else, for an event from before that was recorded, by its time against
/// the next record's (strictly earlier; none: the point is the newest record).
///
/// A copy a fork carried says where it stood among the records of the run it was made in
/// (`carried.after_records`: how many preceded it): a fork holds those records first, in the
/// same order, whatever its ids (PostgreSQL numbers a copy's records anew), so it is by the
/// point when that many of this run's records are (`records_by_then`).
/// Its `after_record` is read in the run's numbering now (`moves`: a run moved to a store that
/// renumbered it names its records by their old ids in the events sealed before).
fn by_point(
    r: &AuditRow,
    at: i64,
    records_by_then: usize,
    next_time: Option<&str>,
    moves: &Moves,
) -> bool {
    let mut m: Value = r
        .metadata
        .as_deref()
        .and_then(|m| serde_json::from_str(m).ok())
        .unwrap_or(Value::Null);
    moves.renumber(r.seq, &mut m);
    if let Some(k) = m["carried"]["after_records"].as_u64() {
        return k as usize <= records_by_then;
    }
    match m.get("after_record") {
        Some(Value::Null) => true,
        Some(v) => v.as_i64().is_some_and(|a| a <= at),
        None => match (next_time, r.timestamp.as_deref()) {
            (None, _) => true,
            (Some(next), Some(t)) => t < next,
            (Some(_), None) => false,
        },
    }
}

/// One scope's (or agent's) versions, grouped, in write order.
fn grouped(rows: &[HistoryRow]) -> BTreeMap<(String, i64), Vec<HistoryRow>> {
    let mut out: BTreeMap<(String, i64), Vec<HistoryRow>> = BTreeMap::new();
    for r in rows {
        out.entry((r.name.clone(), r.execution_id.unwrap_or(-1)))
            .or_default()
            .push(r.clone());
    }
    for rows in out.values_mut() {
        rows.sort_by_key(|r| r.n);
    }
    out
}

/// The versions of each name that stood at `at`: for each, the versions up to then and the
/// index of the one that stood (None: absent then). Names whose versions of then are not
/// kept are listed in `missing`.
type AsThen = Vec<(Vec<HistoryRow>, Option<usize>)>;

fn as_then(rows: &[HistoryRow], at: i64, what: &str, missing: &mut Vec<String>) -> AsThen {
    let point = AsOf::Record(at);
    let mut out = Vec::new();
    for ((name, scope), rows) in grouped(rows) {
        // A scope opened after the point holds nothing then.
        if scope > at {
            continue;
        }
        let kept = rows
            .iter()
            .take_while(|r| r.at_record.is_none_or(|w| w <= at))
            .count();
        match history::then(&rows, &point) {
            Then::Stood(i) => out.push((rows[..=i].to_vec(), Some(i))),
            Then::Absent if kept > 0 => out.push((rows[..kept].to_vec(), None)),
            Then::Absent => {}
            Then::Unknown => missing.push(match scope {
                -1 => format!("{what} {}", shown(&name)),
                s => format!("{what} {} (execution {s})", shown(&name)),
            }),
        }
    }
    out
}

/// Builds the fork of `src` (whose chain `report` checked) as `plan` says.
pub fn build(src: &RunDump, report: &ChainReport, plan: &Plan) -> Result<(RunDump, Carried)> {
    let at = plan.at;
    let Some(point) = src.executions.iter().position(|e| e.id == at) else {
        return Err(not_found(format!(
            "--at names no execution record of run {}: {at}",
            shown(&src.run.id)
        )));
    };
    let next_time = src
        .executions
        .get(point + 1)
        .and_then(|e| e.started_at.clone().or_else(|| e.completed_at.clone()));
    let mut carried = Carried::default();
    let executions: Vec<_> = src.executions[..=point].to_vec();
    carried.records = executions.len();

    // Bindings and agents as they were, from history.
    let mut missing = Vec::new();
    let bindings_then = as_then(&src.history, at, "binding", &mut missing);
    let agents_then = as_then(&src.agent_history, at, "agent", &mut missing);
    // A binding with no history at all (raw SQL removed it) is not known then either.
    for b in &src.bindings {
        let name = b.name.clone().unwrap_or_default();
        let scope = b.execution_id.unwrap_or(-1);
        if scope <= at
            && !src
                .history
                .iter()
                .any(|h| h.name == name && h.execution_id.unwrap_or(-1) == scope)
        {
            missing.push(format!("binding {} (no history)", shown(&name)));
        }
    }
    if !missing.is_empty() {
        missing.truncate(10);
        return Err(refused(format!(
            "run {} cannot be forked at record {at}: what these held then is not kept (pruned, or written before history was kept): {}",
            shown(&src.run.id),
            missing.join(", ")
        )));
    }
    let mut history = Vec::new();
    let mut bindings = Vec::new();
    for (rows, stood) in &bindings_then {
        if let Some(i) = stood {
            let row = history::as_row(rows, *i)?;
            bindings.push(BindingRecord {
                name: Some(row.name),
                execution_id: row.execution_id,
                kind: row.kind,
                value: row.value,
                source_statement: row.source_statement,
                created_at: row.created_at,
                updated_at: row.updated_at,
                attachment_path: row.attachment_path,
            });
        }
        history.extend(rows.iter().cloned());
    }
    // `--bind`: a root-scope binding replaced at the fork point, as a new version by who forks.
    for (name, value) in plan.binds {
        crate::model::check_name(name)?;
        let prior = history
            .iter()
            .filter(|h| &h.name == name && h.execution_id.is_none())
            .max_by_key(|h| h.n)
            .cloned();
        let kind = bindings
            .iter()
            .find(|b| b.name.as_deref() == Some(name) && b.execution_id.is_none())
            .and_then(|b| b.kind.clone())
            .unwrap_or_else(|| "input".to_string());
        bindings.retain(|b| !(b.name.as_deref() == Some(name) && b.execution_id.is_none()));
        bindings.push(BindingRecord {
            name: Some(name.clone()),
            execution_id: None,
            kind: Some(kind.clone()),
            value: Some(value.as_bytes().to_vec()),
            // The row is its newest version whole: the statement its history records too.
            source_statement: Some(format!("fork --bind {name}")),
            created_at: Some(plan.now.to_string()),
            updated_at: Some(plan.now.to_string()),
            attachment_path: None,
        });
        history.push(HistoryRow {
            seq: 0,
            name: name.clone(),
            execution_id: None,
            n: prior.as_ref().map_or(1, |p| p.n + 1),
            kind: Some(kind),
            value: Some(value.as_bytes().to_vec()),
            delta: None,
            attachment_path: None,
            source_statement: Some(format!("fork --bind {name}")),
            written_at: Some(plan.now.to_string()),
            at_record: Some(at),
            principal: Some(plan.by.to_string()),
            deleted: false,
            gap: false,
        });
        carried.rebound.push(name.clone());
    }
    carried.bindings = bindings.len();
    let mut agents = Vec::new();
    let mut agent_history = Vec::new();
    for (rows, stood) in &agents_then {
        if let Some(i) = stood {
            let r = &rows[*i];
            agents.push(AgentRecord {
                name: r.name.clone(),
                scope: r.kind.clone(),
                memory: r
                    .value
                    .as_deref()
                    .map(|v| String::from_utf8_lossy(v).into_owned()),
                created_at: rows.first().and_then(|f| f.written_at.clone()),
                updated_at: r.written_at.clone(),
            });
        }
        agent_history.extend(rows.iter().cloned());
    }
    carried.agents = agents.len();
    let segments = src
        .segments
        .iter()
        .filter(|s| s.at_record.is_none_or(|r| r <= at))
        .filter(|s| {
            agents
                .iter()
                .any(|a| Some(&a.name) == s.agent_name.as_ref())
        })
        .cloned()
        .collect();

    // The fork's chain: its genesis, then each carried gate's events as marked copies.
    let source_head = src
        .audit
        .iter()
        .filter(|r| r.seq.is_some())
        .max_by_key(|r| r.seq)
        .map(|r| json!({"seq": r.seq, "hash": r.hash}));
    let mut audit = vec![AuditRow {
        id: 1,
        gate_id: RUN_EVENT.to_string(),
        run_id: plan.new_id.to_string(),
        event_type: GENESIS.to_string(),
        principal: Some("system".to_string()),
        comment: None,
        timestamp: Some(plan.now.to_string()),
        metadata: Some(
            json!({
                "after_record": at,
                "before_seal": [],
                "started_by": plan.by,
                "forked_from": {
                    "run": src.run.id, "record": at, "at": plan.now,
                    "source_head": source_head,
                    "rebound": carried.rebound,
                },
            })
            .to_string(),
        ),
        prev_hash: None,
        hash: None,
        seq: Some(1),
        seal: None,
    }];
    let attested = |r: &AuditRow| r.seq.is_some() && !report.unattested.contains(&r.id);
    // How copies renumbered the source, from its events it attests (`chain::Moves`).
    let moves = Moves::of(src.audit.iter().filter(|r| attested(r)));
    let mut gates = Vec::new();
    let mut gate_instances = Vec::new();
    let mut events: Vec<&AuditRow> = Vec::new();
    let mut own_but_degraded: Vec<String> = Vec::new();
    for g in &src.gates {
        let mut mine: Vec<&AuditRow> = src
            .audit
            .iter()
            .filter(|r| r.gate_id == g.id && r.seq.is_some())
            .collect();
        mine.sort_by_key(|r| r.seq);
        let then: Vec<&AuditRow> = mine
            .iter()
            .copied()
            .take_while(|r| by_point(r, at, point + 1, next_time.as_deref(), &moves))
            .collect();
        if !then.iter().any(|r| r.event_type == "created") {
            continue;
        }
        let trusted =
            matches!(report.gate(&g.id), Integrity::Attested) && then.iter().all(|r| attested(r));
        if !trusted {
            carried.gates_not_carried.push(g.id.clone());
            // Its events sealed here, the gate only degraded since (its kept versions pruned):
            // what its decisions wrote is this machine's own, carried as plain values below.
            if then.iter().all(|r| attested(r)) {
                own_but_degraded.push(g.id.clone());
            }
            continue;
        }
        let states: Vec<(&AuditRow, RowState)> =
            then.iter().map(|r| (*r, RowState::Attested)).collect();
        let d = crate::store::chain::derive(&states, &moves).map_err(|why| {
            refused(format!(
                "gate {} of run {} cannot be carried: {why}",
                shown(&g.id),
                shown(&src.run.id)
            ))
        })?;
        // A gate's response binding is written by its decisions only, in a fork too.
        for opening in d.earlier.iter().chain(std::iter::once(&d)) {
            if let Some((name, None)) = &opening.response_binding {
                if plan.binds.iter().any(|(n, _)| n == name) {
                    return Err(refused(format!(
                        "--bind {}: it is the answer of gate {}, which only a decision on it writes",
                        shown(name),
                        shown(&g.id)
                    )));
                }
            }
        }
        // The opening that stood then, as it was recorded.
        let opening = if g.instance == d.instance {
            Some(g.clone())
        } else {
            src.gate_instances
                .iter()
                .find(|i| i.id == g.id && i.instance == d.instance)
                .cloned()
        };
        let Some(mut row) = opening else {
            carried.gates_not_carried.push(g.id.clone());
            continue;
        };
        let decision = d
            .decision
            .as_ref()
            .and_then(|(_, _, id)| then.iter().find(|r| r.id == *id));
        row.run_id = Some(plan.new_id.to_string());
        row.status = Some(d.status());
        row.allow = Some(serde_json::to_string(&d.allow)?);
        if let Some(Some(deadline)) = &d.timeout_at {
            row.timeout_at = Some(deadline.clone());
        }
        row.resolved_by = decision.and_then(|r| r.principal.clone());
        row.resolved_at = decision.and_then(|r| r.timestamp.clone());
        row.resolution_comment = decision.and_then(|r| r.comment.clone());
        match decision {
            Some(_) => carried.gates_decided.push(g.id.clone()),
            None => carried.gates_pending.push(g.id.clone()),
        }
        gates.push(row);
        gate_instances.extend(
            src.gate_instances
                .iter()
                .filter(|i| i.id == g.id && i.instance < d.instance)
                .map(|i| GateRecord {
                    run_id: Some(plan.new_id.to_string()),
                    ..i.clone()
                }),
        );
        // A decision whose inputs the fork rebinds is carried unconsumed: in the fork it
        // stands only if its inputs still hold what it sealed (else it is stale, exit 11).
        let rebinds_input = d
            .inputs
            .iter()
            .any(|i| plan.binds.iter().any(|(n, _)| n == i));
        events.extend(
            then.into_iter()
                .filter(|r| !(rebinds_input && r.event_type == crate::store::chain::CONSUMED)),
        );
    }
    events.sort_by_key(|r| r.seq);
    for r in events {
        let mut m: Value = r
            .metadata
            .as_deref()
            .and_then(|m| serde_json::from_str(m).ok())
            .unwrap_or_else(|| json!({}));
        // A copy names the event it copies where that was made: a copy of a copy (a fork of
        // a fork) keeps what its source's copy names, so a signature made there still
        // verifies against that run, and it still knows how many records preceded it.
        // The executions it names as they are in the source now (the source was renumbered
        // since it was sealed): the fork reads them through `carried.moved`, sealed with it,
        // and the event's own fields (its signature covers some) stay as they were.
        let mut now = m.clone();
        moves.renumber(r.seq, &mut now);
        if let Some(o) = m.as_object_mut().filter(|o| !o.contains_key("carried")) {
            let after_records = now.get("after_record").map(|a| match a.as_i64() {
                Some(a) => src.executions.iter().filter(|e| e.id <= a).count(),
                None => 0,
            });
            o.insert(
                "carried".into(),
                json!({"run": src.run.id, "seq": r.seq, "hash": r.hash, "after_records": after_records}),
            );
        }
        let (mut sealed, mut moved) = (Vec::new(), serde_json::Map::new());
        for_each_scope(&mut m.clone(), &mut |id| {
            sealed.push(id);
            id
        });
        let mut i = 0;
        for_each_scope(&mut now, &mut |id| {
            if let Some(was) = sealed.get(i).filter(|was| **was != id) {
                moved.insert(was.to_string(), id.into());
            }
            i += 1;
            id
        });
        if let Some(c) = m.get_mut("carried").and_then(Value::as_object_mut) {
            match moved.is_empty() {
                true => c.remove("moved"),
                false => c.insert("moved".into(), Value::Object(moved)),
            };
        }
        audit.push(AuditRow {
            id: audit.len() as i64 + 1,
            run_id: plan.new_id.to_string(),
            metadata: Some(m.to_string()),
            seq: Some(audit.len() as i64 + 1),
            prev_hash: None,
            hash: None,
            seal: None,
            ..r.clone()
        });
    }
    let mut prev = String::new();
    for r in &mut audit {
        r.prev_hash = Some(prev.clone());
        let hash = r.chain_hash(&prev);
        r.hash = Some(hash.clone());
        prev = hash;
    }
    // What a gate the fork does not carry wrote (its answer, its approver's edits) comes as
    // plain values: a claim that a decision wrote them (`approve G:`) would name a decision the
    // fork does not hold, and every read of them would refuse it. A gate carried pending keeps
    // the claims of its votes' edits made by the point, whose events it carries.
    let uncarried = |statement: &Option<String>| -> Option<String> {
        let g = crate::store::rules::decided_by(statement.as_deref()?)?;
        let kept = carried
            .gates_decided
            .iter()
            .chain(&carried.gates_pending)
            .any(|c| c == g);
        (!kept).then(|| g.to_string())
    };
    // But a value a decision wrote whose events this machine does not attest (sealed on
    // another machine, or written by raw SQL) is not carried as a plain value either: it
    // would read in the fork as any session's, its writer the approver named, with nothing
    // left to check it against. The fork is refused (10), as `get` of it is. (A gate whose
    // events were sealed here, degraded since by a prune, wrote this machine's own values.)
    let claimed = bindings
        .iter()
        .map(|b| (b.name.as_deref().unwrap_or_default(), &b.source_statement))
        .chain(
            history
                .iter()
                .map(|h| (h.name.as_str(), &h.source_statement)),
        )
        .find_map(|(name, s)| {
            uncarried(s)
                .filter(|g| !own_but_degraded.iter().any(|o| o == g))
                .map(|g| (name, g))
        });
    if let Some((name, gate)) = claimed {
        return Err(crate::error::unattested(format!(
            "binding {} was written by gate {}'s decision, whose log this machine does not attest (sealed elsewhere, or never sealed): a fork would carry it as a plain value; fork at a record before that decision, or vouch for the copy first (`import --vouch`)",
            shown(name),
            shown(&gate)
        )));
    }
    for b in bindings
        .iter_mut()
        .filter(|b| uncarried(&b.source_statement).is_some())
    {
        b.source_statement = None;
    }
    for h in history
        .iter_mut()
        .filter(|h| uncarried(&h.source_statement).is_some())
    {
        h.source_statement = None;
    }
    let fork = RunDump {
        run: RunRecord {
            id: plan.new_id.to_string(),
            program_path: src.run.program_path.clone(),
            program_source: src.run.program_source.clone(),
            started_at: Some(plan.now.to_string()),
            updated_at: Some(plan.now.to_string()),
            status: Some("running".to_string()),
            error_message: None,
        },
        executions,
        bindings,
        agents,
        segments,
        imports: src.imports.clone(),
        gates,
        gate_instances,
        audit,
        history,
        agent_history,
        server_only: Vec::new(),
    };
    Ok((fork, carried))
}

/// `--bind NAME=VALUE`, parsed.
pub fn parse_bind(text: &str) -> Result<(String, String)> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| usage(format!("--bind takes NAME=VALUE: {}", shown(text))))?;
    crate::model::check_name(name)?;
    Ok((name.to_string(), value.to_string()))
}
