//! A run's rows read off the server (`Store::dump`), in the store's snapshot.

use super::{gate_record, PgStore, Statements, GATE_SELECT};
use crate::store::dump::{
    AgentRecord, BindingRecord, ExecRecord, RunDump, RunRecord, SegmentRecord,
};
use crate::store::{AuditFilter, Store};
use anyhow::Result;

const RUN: &str = concat!(
    "SELECT id, program_path, program_source, ",
    ts!("started_at"),
    ", ",
    ts!("updated_at"),
    ", status, error_message FROM openprose.run WHERE id = $1"
);

const EXECUTIONS: &str = concat!(
    "SELECT id, statement_index, statement_text, status, ",
    ts!("started_at"),
    ", ",
    ts!("completed_at"),
    ", error_message, parent_id, metadata::text, idempotency_key
     FROM openprose.execution WHERE run_id = $1 ORDER BY id"
);

const AGENTS: &str = concat!(
    "SELECT name, scope, memory, ",
    ts!("created_at"),
    ", ",
    ts!("updated_at"),
    " FROM openprose.agents WHERE run_id = $1 ORDER BY name"
);

const SEGMENTS: &str = concat!(
    "SELECT agent_name, segment_number, ",
    ts!("timestamp"),
    ", prompt, summary FROM openprose.agent_segments WHERE run_id = $1 ORDER BY id"
);

const GATE_INSTANCES: &str = concat!(
    "SELECT ",
    gate_columns!("gate_id"),
    " FROM openprose.gate_instances g WHERE run_id = $1 ORDER BY gate_id, instance"
);

/// What the spec's server-only columns hold for the run, where it is not their default.
const SERVER_ONLY: &str = "SELECT
    (SELECT COUNT(*) FROM openprose.run WHERE id = $1 AND metadata IS NOT NULL AND metadata <> '{}'::jsonb),
    (SELECT COUNT(*) FROM openprose.bindings WHERE run_id = $1 AND metadata IS NOT NULL AND metadata <> '{}'::jsonb),
    (SELECT COUNT(*) FROM openprose.agents WHERE run_id = $1 AND metadata IS NOT NULL AND metadata <> '{}'::jsonb),
    (SELECT COUNT(*) FROM openprose.agent_segments WHERE run_id = $1 AND metadata IS NOT NULL AND metadata <> '{}'::jsonb),
    (SELECT COUNT(*) FROM openprose.imports WHERE run_id = $1
        AND ((metadata IS NOT NULL AND metadata <> '{}'::jsonb) OR content_hash IS NOT NULL))";

impl PgStore {
    pub(super) fn dump_rows(&mut self) -> Result<RunDump> {
        let run_id = self.run()?.to_string();
        let run = self
            .opt(RUN, &[&run_id], |r| RunRecord {
                id: r.get(0),
                program_path: r.get(1),
                program_source: r.get(2),
                started_at: r.get(3),
                updated_at: r.get(4),
                status: r.get(5),
                error_message: r.get(6),
            })?
            .unwrap_or_default();
        let executions = self.all(EXECUTIONS, &[&run_id], |r| ExecRecord {
            id: r.get(0),
            statement_index: r.get(1),
            statement_text: r.get(2),
            status: r.get(3),
            started_at: r.get(4),
            completed_at: r.get(5),
            error_message: r.get(6),
            parent_id: r.get(7),
            metadata: r.get(8),
            idempotency_key: r.get(9),
        })?;
        let bindings = self
            .bindings()?
            .into_iter()
            .map(|b| BindingRecord {
                name: Some(b.name),
                execution_id: b.execution_id,
                kind: b.kind,
                value: b.value,
                source_statement: b.source_statement,
                created_at: b.created_at,
                updated_at: b.updated_at,
                attachment_path: b.attachment_path,
            })
            .collect();
        let agents = self.all(AGENTS, &[&run_id], |r| AgentRecord {
            name: r.get(0),
            scope: r.get(1),
            memory: r.get(2),
            created_at: r.get(3),
            updated_at: r.get(4),
        })?;
        let segments = self.all(SEGMENTS, &[&run_id], |r| SegmentRecord {
            agent_name: r.get(0),
            segment_number: r.get(1),
            timestamp: r.get(2),
            prompt: r.get(3),
            summary: r.get(4),
        })?;
        let imports = self.imports()?;
        let gates = self.all(
            &format!("{GATE_SELECT} WHERE run_id = $1 ORDER BY id"),
            &[&run_id],
            gate_record,
        )?;
        let gate_instances = self.all(GATE_INSTANCES, &[&run_id], gate_record)?;
        let counts: Vec<i64> = self.one(SERVER_ONLY, &[&run_id], |r| {
            (0..5).map(|i| r.get(i)).collect()
        })?;
        let what = [
            "the run's metadata",
            "bindings' metadata",
            "agents' metadata",
            "agent segments' metadata",
            "imports' metadata or content_hash",
        ];
        let server_only = what
            .iter()
            .zip(counts)
            .filter(|(_, n)| *n > 0)
            .map(|(what, n)| format!("{what} ({n} rows)"))
            .collect();
        let audit = self.audit(&AuditFilter::default())?;
        Ok(RunDump {
            run,
            executions,
            bindings,
            agents,
            segments,
            imports,
            gates,
            gate_instances,
            audit,
            server_only,
        })
    }
}
