//! A whole run as rows, read from one store and written into another: what `export` and
//! `import` move. Backend-neutral: every column both schemas have (the spec's SQLite columns),
//! timestamps as text in `datetime('now')` form, ids as the source stored them.
//!
//! What makes two copies of a run the same run ([`RunDump::digest`]): every row's content,
//! with execution ids replaced by their place in the log (a server renumbers them), binding
//! values by their bytes wherever they are kept (inline, a file, the server), seals and
//! binding versions left out (each store makes its own), and the `imported` events that
//! record the copies themselves left out.

pub use super::ImportRow as ImportRecord;
use super::{AuditRow, GateRow};
use crate::error::shown;
use crate::model::GateStatus;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};

/// The gate id of audit events about the run itself rather than one gate (`imported`).
pub const RUN_EVENT: &str = "";

/// The event that seals a run (`rules::genesis`): the first row of its sealed sequence.
pub const GENESIS: &str = "sealed";

/// The event type recorded when a run is imported.
pub const IMPORTED: &str = "imported";

/// The run's event (gate id `""`) sealing how a copy renumbered its log (`chain::Moves`):
/// `{"head": SEQ, "ids": {"OLD": NEW, ...}}`, `head` the newest event the copy took in.
pub const RENUMBERED: &str = "renumbered";

#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunRecord {
    pub id: String,
    pub program_path: Option<String>,
    pub program_source: Option<String>,
    pub started_at: Option<String>,
    pub updated_at: Option<String>,
    pub status: Option<String>,
    pub error_message: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BindingRecord {
    pub name: Option<String>,
    pub execution_id: Option<i64>,
    pub kind: Option<String>,
    /// Bytes: a row written by raw SQL into SQLite may hold text that is not UTF-8.
    pub value: Option<Vec<u8>>,
    pub source_statement: Option<String>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    pub attachment_path: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AgentRecord {
    pub name: String,
    pub scope: Option<String>,
    pub memory: Option<String>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SegmentRecord {
    pub agent_name: Option<String>,
    pub segment_number: Option<i64>,
    pub timestamp: Option<String>,
    pub prompt: Option<String>,
    pub summary: Option<String>,
    /// The newest execution record when it was appended (schema 10).
    pub at_record: Option<i64>,
}

/// A gates row, or a `gate_instances` row (an earlier opening), as stored: `allow` is the
/// stored text, not parsed. The catalog's log carries a run's pending gates in this form.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GateRecord {
    pub id: String,
    /// The run the row names (a copy is written under the run's own id).
    pub run_id: Option<String>,
    pub execution_id: Option<i64>,
    pub prompt: Option<String>,
    pub allow: Option<String>,
    pub timeout: Option<String>,
    pub timeout_at: Option<String>,
    pub on_reject: Option<String>,
    #[serde(deserialize_with = "status_text")]
    pub status: Option<GateStatus>,
    pub created_at: Option<String>,
    pub resolved_at: Option<String>,
    pub resolved_by: Option<String>,
    pub resolution_comment: Option<String>,
    pub metadata: Option<String>,
    pub instance: i64,
}

fn status_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<GateStatus>, D::Error> {
    let text: Option<String> = serde::Deserialize::deserialize(d)?;
    Ok(text.as_deref().map(GateStatus::parse))
}

impl GateRecord {
    /// A gates (or gate_instances) row in its table's column order, as stored: the one mapper
    /// of a gate, for a copy of the run as for the rules.
    pub fn read(c: &dyn Cells) -> Self {
        GateRecord {
            id: c.text(0).unwrap_or_default(),
            run_id: c.text(1),
            execution_id: c.int(2),
            prompt: c.text(3),
            allow: c.text(4),
            timeout: c.text(5),
            timeout_at: c.text(6),
            on_reject: c.text(7),
            status: c.text(8).as_deref().map(GateStatus::parse),
            created_at: c.text(9),
            resolved_at: c.text(10),
            resolved_by: c.text(11),
            resolution_comment: c.text(12),
            metadata: c.text(13),
            instance: c.int(14).unwrap_or(1),
        }
    }

    /// The row as the rules read it (an allow list that is not a JSON array of strings admits
    /// nobody).
    pub fn into_row(self) -> GateRow {
        GateRow {
            allow: self.allow_list(),
            status: self.status.unwrap_or_else(|| GateStatus::parse("")),
            id: self.id,
            run_id: self.run_id,
            execution_id: self.execution_id,
            prompt: self.prompt.unwrap_or_default(),
            timeout: self.timeout,
            timeout_at: self.timeout_at,
            on_reject: self.on_reject,
            created_at: self.created_at,
            resolved_at: self.resolved_at,
            resolved_by: self.resolved_by,
            resolution_comment: self.resolution_comment,
            metadata: self.metadata,
            instance: self.instance,
        }
    }

    /// Who the allow list admits (nobody, when it is not a JSON array of strings).
    pub fn allow_list(&self) -> Vec<String> {
        self.allow
            .as_deref()
            .and_then(|a| serde_json::from_str::<Vec<String>>(a).ok())
            .unwrap_or_default()
    }

    /// The row as the rules read it, as a row of the run `run_id`.
    pub fn row(&self, run_id: &str) -> GateRow {
        GateRow {
            run_id: Some(run_id.to_string()),
            ..self.clone().into_row()
        }
    }
}

/// One run, whole.
#[derive(Debug, Clone, Default)]
pub struct RunDump {
    pub run: RunRecord,
    /// Oldest first (by id).
    pub executions: Vec<super::ExecutionRow>,
    pub bindings: Vec<BindingRecord>,
    pub agents: Vec<AgentRecord>,
    pub segments: Vec<SegmentRecord>,
    pub imports: Vec<ImportRecord>,
    pub gates: Vec<GateRecord>,
    pub gate_instances: Vec<GateRecord>,
    /// By id.
    pub audit: Vec<AuditRow>,
    /// Every kept version of every binding, in write order (schema 10; empty for a copy made
    /// before it).
    pub history: Vec<super::history::HistoryRow>,
    /// Every kept version of every run-scoped agent's memory, in write order (schema 10).
    pub agent_history: Vec<super::history::HistoryRow>,
    /// Values in columns only a server has (the spec's `metadata` jsonb columns, an import's
    /// `content_hash`), which prose-state never writes: named here, so that a copy into a
    /// store without them says what it leaves behind.
    pub server_only: Vec<String>,
}

/// A stored row of either backend, read column by column as stored, never failing: a value
/// raw SQL gave another type reads as text, and as a number where it spells one.
pub trait Cells {
    fn text(&self, i: usize) -> Option<String>;
    fn int(&self, i: usize) -> Option<i64>;
    /// A value's bytes (SQLite may hold text that is not UTF-8).
    fn bytes(&self, i: usize) -> Option<Vec<u8>>;
}

/// A table of a run as a copy reads it: its columns in its record's order, named as stored
/// (each backend selects a time, a column named `*_at` or `timestamp`, a JSON column,
/// `metadata` or `*_schema`, and a binding's `value` in the one form both give), and the
/// order of its rows (empty: the run's own row, the first there is).
pub struct Table {
    pub name: &'static str,
    pub order: &'static str,
    pub columns: &'static str,
}

/// Each column of a list (a [`Table`]'s), and whether it is a time and whether it is JSON.
pub fn columns(list: &str) -> impl Iterator<Item = (&str, bool, bool)> {
    list.split(", ").map(|c| {
        let time = c.ends_with("_at") || c == "timestamp";
        (c, time, c == "metadata" || c.ends_with("_schema"))
    })
}

/// A `gate_instances` row's columns, in [`GATE_COLUMNS`]' order (its `gate_id` where a gate
/// has its `id`), so that one mapper reads both.
pub const INSTANCE_COLUMNS: &str = "gate_id, run_id, execution_id, prompt, allow, timeout, \
    timeout_at, on_reject, status, created_at, resolved_at, resolved_by, resolution_comment, \
    metadata, instance";

/// A gate's columns, in [`GateRecord::read`]'s order.
pub const GATE_COLUMNS: &str = "id, run_id, execution_id, prompt, allow, timeout, timeout_at, \
    on_reject, status, created_at, resolved_at, resolved_by, resolution_comment, metadata, instance";

/// The execution table's columns, in [`super::ExecutionRow::read`]'s order.
pub const EXECUTION_COLUMNS: &str = "id, statement_index, statement_text, status, started_at, \
    completed_at, error_message, parent_id, metadata, idempotency_key, principal";

/// The tables a copy of a run reads (its audit log aside), in [`RunDump::read`]'s order.
pub const TABLES: [Table; 10] = [
    Table {
        name: "run",
        order: "",
        columns: "id, program_path, program_source, started_at, updated_at, status, error_message",
    },
    Table {
        name: "execution",
        order: "id",
        columns: EXECUTION_COLUMNS,
    },
    Table {
        name: "bindings",
        order: "COALESCE(execution_id, -1), name",
        columns: "name, execution_id, kind, value, source_statement, created_at, updated_at, \
            attachment_path",
    },
    Table {
        name: "agents",
        order: "name",
        columns: "name, scope, memory, created_at, updated_at",
    },
    Table {
        name: "agent_segments",
        order: "id",
        columns: "agent_name, segment_number, timestamp, prompt, summary, at_record",
    },
    Table {
        name: "imports",
        order: "alias",
        columns: "alias, source_url, fetched_at, inputs_schema, outputs_schema",
    },
    Table {
        name: "gates",
        order: "id",
        columns: GATE_COLUMNS,
    },
    Table {
        name: "gate_instances",
        order: "gate_id, instance",
        columns: INSTANCE_COLUMNS,
    },
    Table {
        name: "binding_history",
        order: "seq",
        columns: super::history::COLUMNS,
    },
    Table {
        name: "agent_history",
        order: "seq",
        columns: super::history::COLUMNS,
    },
];

/// What reads a run's tables for a copy of it: a backend's `dump`.
pub trait TableSource {
    /// Every row of `table`, in its order, each through `read`.
    fn rows<T>(&mut self, table: &Table, read: fn(&dyn Cells) -> T) -> anyhow::Result<Vec<T>>;
}

impl RunRecord {
    pub fn read(c: &dyn Cells) -> Self {
        RunRecord {
            id: c.text(0).unwrap_or_default(),
            program_path: c.text(1),
            program_source: c.text(2),
            started_at: c.text(3),
            updated_at: c.text(4),
            status: c.text(5),
            error_message: c.text(6),
        }
    }
}

impl BindingRecord {
    pub fn read(c: &dyn Cells) -> Self {
        BindingRecord {
            name: c.text(0),
            execution_id: c.int(1),
            kind: c.text(2),
            value: c.bytes(3),
            source_statement: c.text(4),
            created_at: c.text(5),
            updated_at: c.text(6),
            attachment_path: c.text(7),
        }
    }
}

impl AgentRecord {
    pub fn read(c: &dyn Cells) -> Self {
        AgentRecord {
            name: c.text(0).unwrap_or_default(),
            scope: c.text(1),
            memory: c.text(2),
            created_at: c.text(3),
            updated_at: c.text(4),
        }
    }
}

impl SegmentRecord {
    pub fn read(c: &dyn Cells) -> Self {
        SegmentRecord {
            agent_name: c.text(0),
            segment_number: c.int(1),
            timestamp: c.text(2),
            prompt: c.text(3),
            summary: c.text(4),
            at_record: c.int(5),
        }
    }
}

impl ImportRecord {
    pub fn read(c: &dyn Cells) -> Self {
        ImportRecord {
            alias: c.text(0).unwrap_or_default(),
            source_url: c.text(1),
            fetched_at: c.text(2),
            inputs_schema: c.text(3),
            outputs_schema: c.text(4),
        }
    }
}

/// A JSON column's value compared as JSON (a server's jsonb reorders keys and spacing); text
/// that is not JSON as itself.
fn as_json(text: &Option<String>) -> Value {
    match text {
        None => Value::Null,
        Some(t) => serde_json::from_str::<Value>(t).unwrap_or_else(|_| json!({ "text": t })),
    }
}

impl RunDump {
    /// Every row of the run but its audit log (which, and what only a server keeps, the
    /// backend's own `dump` adds).
    pub fn read(s: &mut impl TableSource) -> anyhow::Result<RunDump> {
        let [run, executions, bindings, agents, segments, imports, gates, instances, history, agent_history] =
            &TABLES;
        Ok(RunDump {
            run: s
                .rows(run, RunRecord::read)?
                .into_iter()
                .next()
                .unwrap_or_default(),
            executions: s.rows(executions, super::ExecutionRow::read)?,
            bindings: s.rows(bindings, BindingRecord::read)?,
            agents: s.rows(agents, AgentRecord::read)?,
            segments: s.rows(segments, SegmentRecord::read)?,
            imports: s.rows(imports, ImportRecord::read)?,
            gates: s.rows(gates, GateRecord::read)?,
            gate_instances: s.rows(instances, GateRecord::read)?,
            history: s.rows(history, super::history::HistoryRow::read)?,
            agent_history: s.rows(agent_history, super::history::HistoryRow::read)?,
            audit: Vec::new(),
            server_only: Vec::new(),
        })
    }

    /// Refuses (exit 2, naming it) a run holding a name that could not become a path under it:
    /// a binding or agent name, from wherever the rows came (an import's source, or a live
    /// run's rows that raw SQL wrote). Checked before anything is written, so such a copy is
    /// never made, and lands nowhere.
    pub fn check_names(&self) -> anyhow::Result<()> {
        use crate::model::{path_in, PathName};
        let here = std::path::Path::new("");
        let refuse = |e: anyhow::Error| {
            crate::error::usage(format!(
                "run {} holds a name that is refused (nothing was written): {e}",
                crate::error::shown(&self.run.id)
            ))
        };
        let history = self.history.iter().map(|h| Some(h.name.as_str()));
        for name in self
            .bindings
            .iter()
            .map(|b| b.name.as_deref())
            .chain(history)
        {
            path_in(here, name.unwrap_or_default(), PathName::Binding).map_err(refuse)?;
        }
        let agents = self.agents.iter().map(|a| Some(a.name.as_str()));
        let segments = self.segments.iter().map(|s| s.agent_name.as_deref());
        for name in agents.chain(segments) {
            path_in(here, name.unwrap_or_default(), PathName::Agent).map_err(refuse)?;
        }
        Ok(())
    }

    /// Refuses a copy holding two rows under one key, which the stores' own rows never do
    /// (two bindings of one name in one scope, two agents of one name, two imports of one
    /// alias): checked before anything is written, as a store's unique keys would.
    pub fn check_keys(&self) -> anyhow::Result<()> {
        let mut seen = std::collections::HashSet::new();
        let bindings = self.bindings.iter().filter_map(|b| {
            let name = b.name.as_deref()?;
            Some(match b.execution_id {
                Some(id) => format!("binding {} in the scope of execution {id}", shown(name)),
                None => format!("binding {} in the root scope", shown(name)),
            })
        });
        let agents = self
            .agents
            .iter()
            .map(|a| format!("agent {}", shown(&a.name)));
        let imports = self
            .imports
            .iter()
            .map(|i| format!("import {}", shown(&i.alias)));
        match bindings
            .chain(agents)
            .chain(imports)
            .find(|k| !seen.insert(k.clone()))
        {
            Some(twice) => Err(anyhow::anyhow!(
                "the copy of run {} holds {twice} twice; nothing was written",
                shown(&self.run.id)
            )),
            None => Ok(()),
        }
    }

    /// Whether an audit row records a copy of the run (its import, how it renumbered), or the
    /// sealing of this copy (left out of the digest: a run imported from files gets its
    /// genesis here).
    pub fn is_import_event(row: &AuditRow) -> bool {
        row.gate_id == RUN_EVENT
            && [IMPORTED, RENUMBERED, GENESIS].contains(&row.event_type.as_str())
    }

    /// What makes two copies of a run the same run: sha256 over the content (see the module
    /// documentation). `values` gives each attachment path's content digest.
    pub fn digest(&self, values: &HashMap<String, String>) -> String {
        let place: HashMap<i64, usize> = self
            .executions
            .iter()
            .enumerate()
            .map(|(i, e)| (e.id, i))
            .collect();
        // An id no record has (raw SQL) stays as it is, marked.
        let exec = |id: Option<i64>| match id {
            None => Value::Null,
            Some(id) => place
                .get(&id)
                .map_or_else(|| json!(["missing", id]), |p| json!(p)),
        };
        let run = &self.run;
        let executions: Vec<Value> = self
            .executions
            .iter()
            .map(|e| {
                json!([
                    e.statement_index,
                    e.statement_text,
                    e.status,
                    e.started_at,
                    e.completed_at,
                    e.error_message,
                    exec(e.parent_id),
                    as_json(&e.metadata),
                    e.idempotency_key
                ])
            })
            .collect();
        let bindings = sorted(self.bindings.iter().map(|b| {
            let value = match &b.attachment_path {
                Some(p) => json!({ "attachment": values.get(p) }),
                None => json!({ "value": b.value.as_deref().map(crate::model::hex) }),
            };
            json!([
                b.name,
                exec(b.execution_id),
                b.kind,
                value,
                b.source_statement,
                b.created_at,
                b.updated_at,
                // An attachment's summary names where the value is kept, which a copy
                // changes: compared with that left out.
                b.attachment_path.as_ref().map(|p| summary_without(b, p))
            ])
        }));
        let agents = sorted(
            self.agents
                .iter()
                .map(|a| json!([a.name, a.scope, a.memory, a.created_at, a.updated_at])),
        );
        let segments = sorted(self.segments.iter().map(|s| {
            json!([
                s.agent_name,
                s.segment_number,
                s.timestamp,
                s.prompt,
                s.summary,
                exec(s.at_record)
            ])
        }));
        let imports = sorted(self.imports.iter().map(|i| {
            json!([
                i.alias,
                i.source_url,
                i.fetched_at,
                as_json(&i.inputs_schema),
                as_json(&i.outputs_schema)
            ])
        }));
        let gate = |g: &GateRecord| {
            json!([
                g.id,
                g.instance,
                exec(g.execution_id),
                g.prompt,
                g.allow,
                g.timeout,
                g.timeout_at,
                g.on_reject,
                g.status,
                g.created_at,
                g.resolved_at,
                g.resolved_by,
                g.resolution_comment,
                g.metadata
            ])
        };
        let version = |h: &super::history::HistoryRow| {
            let value = match &h.attachment_path {
                Some(p) => json!({ "attachment": values.get(p) }),
                None => json!({ "value": h.value.as_deref().map(crate::model::hex) }),
            };
            let summary = h.attachment_path.as_ref().and_then(|p| {
                h.value
                    .as_deref()
                    .map(|v| String::from_utf8_lossy(v).replace(p.as_str(), ""))
            });
            json!([
                h.name,
                exec(h.execution_id),
                h.n,
                h.kind,
                value,
                h.delta,
                summary,
                h.source_statement,
                h.written_at,
                exec(h.at_record),
                h.principal,
                h.deleted,
                h.gap
            ])
        };
        let history = sorted(self.history.iter().map(version));
        let agent_history = sorted(self.agent_history.iter().map(version));
        let gates = sorted(self.gates.iter().map(gate));
        let instances = sorted(self.gate_instances.iter().map(gate));
        let audit: Vec<Value> = self
            .audit
            .iter()
            .filter(|r| !Self::is_import_event(r))
            .map(|r| {
                json!([
                    r.seq,
                    r.gate_id,
                    r.event_type,
                    r.principal,
                    r.comment,
                    r.timestamp,
                    r.metadata,
                    r.prev_hash,
                    r.hash
                ])
            })
            .collect();
        let whole = json!({
            "run": [run.id, run.program_path, run.program_source, run.started_at,
                    run.updated_at, run.status, run.error_message],
            "executions": executions,
            "bindings": bindings,
            "agents": agents,
            "segments": segments,
            "imports": imports,
            "gates": gates,
            "gate_instances": instances,
            "audit": audit,
            "history": history,
            "agent_history": agent_history,
        });
        crate::model::sha256_tag(&whole.to_string())
    }

    /// Counts of what the run holds, by table.
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        BTreeMap::from([
            ("executions", self.executions.len()),
            ("bindings", self.bindings.len()),
            (
                "attachments",
                self.bindings
                    .iter()
                    .filter(|b| b.attachment_path.is_some())
                    .count(),
            ),
            ("agents", self.agents.len()),
            ("agent_segments", self.segments.len()),
            ("imports", self.imports.len()),
            ("gates", self.gates.len()),
            ("gate_instances", self.gate_instances.len()),
            ("audit_events", self.audit.len()),
            ("binding_versions", self.history.len()),
        ])
    }

    /// Every value the run keeps outside its rows, once each: the bindings' and their earlier
    /// versions' attachments, with the binding each belongs to.
    pub fn values(&self) -> Vec<(&str, &str, Option<i64>)> {
        let mut seen = std::collections::HashSet::new();
        let current = self.bindings.iter().filter_map(|b| {
            Some((
                b.attachment_path.as_deref()?,
                b.name.as_deref().unwrap_or_default(),
                b.execution_id,
            ))
        });
        let earlier = self.history.iter().filter_map(|h| {
            Some((
                h.attachment_path.as_deref()?,
                h.name.as_str(),
                h.execution_id,
            ))
        });
        current
            .chain(earlier)
            .filter(|(p, _, _)| seen.insert(*p))
            .collect()
    }
}

/// Rows in an order of their own (their JSON text's), whatever order the store gave them.
fn sorted(rows: impl Iterator<Item = Value>) -> Vec<Value> {
    let mut rows: Vec<Value> = rows.collect();
    rows.sort_by_key(|v| v.to_string());
    rows
}

/// An attachment's summary (its row's value) with its own path left out.
fn summary_without(b: &BindingRecord, path: &str) -> Option<String> {
    b.value
        .as_deref()
        .map(|v| String::from_utf8_lossy(v).replace(path, "<attachment>"))
}

impl super::history::HistoryRow {
    /// A row in [`COLUMNS`]' order, as stored: the one mapper of a version, for a copy of the
    /// run as for its reads.
    pub fn read(c: &dyn Cells) -> Self {
        super::history::HistoryRow {
            seq: c.int(0).unwrap_or_default(),
            name: c.text(1).unwrap_or_default(),
            execution_id: c.int(2),
            n: c.int(3).unwrap_or_default(),
            kind: c.text(4),
            value: c.bytes(5),
            delta: c.text(6),
            attachment_path: c.text(7),
            source_statement: c.text(8),
            written_at: c.text(9),
            at_record: c.int(10),
            principal: c.text(11),
            deleted: c.int(12).unwrap_or(0) != 0,
            gap: c.int(13).unwrap_or(0) != 0,
        }
    }
}
