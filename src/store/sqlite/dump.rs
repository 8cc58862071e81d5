//! A run's rows read off its file (`Store::dump`), in the caller's snapshot: every value
//! as stored, however raw SQL typed it.

use super::{
    audit_row, gate_record, import_row, lenient_int, lenient_text, Statements, AUDIT_COLUMNS,
    GATE_COLUMNS,
};
use crate::store::dump::{
    AgentRecord, BindingRecord, ExecRecord, RunDump, RunRecord, SegmentRecord,
};
use anyhow::Result;

/// Every row of a run's file (`Store::dump`), read in the caller's snapshot.
pub(super) fn dump_rows(s: &impl Statements) -> Result<RunDump> {
    let run = s
        .opt(
            "SELECT id, program_path, program_source, started_at, updated_at, status, error_message
             FROM run ORDER BY rowid LIMIT 1",
            [],
            |r| {
                Ok(RunRecord {
                    id: lenient_text(r, 0)?.unwrap_or_default(),
                    program_path: lenient_text(r, 1)?,
                    program_source: lenient_text(r, 2)?,
                    started_at: lenient_text(r, 3)?,
                    updated_at: lenient_text(r, 4)?,
                    status: lenient_text(r, 5)?,
                    error_message: lenient_text(r, 6)?,
                })
            },
        )?
        .unwrap_or_default();
    let executions = s.all(
        "SELECT id, statement_index, statement_text, status, started_at, completed_at,
                error_message, parent_id, metadata, idempotency_key FROM execution ORDER BY id",
        [],
        |r| {
            Ok(ExecRecord {
                id: r.get(0)?,
                statement_index: lenient_int(r, 1)?,
                statement_text: lenient_text(r, 2)?,
                status: lenient_text(r, 3)?,
                started_at: lenient_text(r, 4)?,
                completed_at: lenient_text(r, 5)?,
                error_message: lenient_text(r, 6)?,
                parent_id: lenient_int(r, 7)?,
                metadata: lenient_text(r, 8)?,
                idempotency_key: lenient_text(r, 9)?,
            })
        },
    )?;
    let bindings = s.all(
        "SELECT name, execution_id, kind, CAST(value AS BLOB), source_statement, created_at,
                updated_at, attachment_path
         FROM bindings ORDER BY IFNULL(execution_id, -1), name",
        [],
        |r| {
            Ok(BindingRecord {
                name: lenient_text(r, 0)?,
                execution_id: lenient_int(r, 1)?,
                kind: lenient_text(r, 2)?,
                value: r.get(3)?,
                source_statement: lenient_text(r, 4)?,
                created_at: lenient_text(r, 5)?,
                updated_at: lenient_text(r, 6)?,
                attachment_path: lenient_text(r, 7)?,
            })
        },
    )?;
    let agents = s.all(
        "SELECT name, scope, memory, created_at, updated_at FROM agents ORDER BY name",
        [],
        |r| {
            Ok(AgentRecord {
                name: lenient_text(r, 0)?.unwrap_or_default(),
                scope: lenient_text(r, 1)?,
                memory: lenient_text(r, 2)?,
                created_at: lenient_text(r, 3)?,
                updated_at: lenient_text(r, 4)?,
            })
        },
    )?;
    let segments = s.all(
        "SELECT agent_name, segment_number, timestamp, prompt, summary
         FROM agent_segments ORDER BY id",
        [],
        |r| {
            Ok(SegmentRecord {
                agent_name: lenient_text(r, 0)?,
                segment_number: lenient_int(r, 1)?,
                timestamp: lenient_text(r, 2)?,
                prompt: lenient_text(r, 3)?,
                summary: lenient_text(r, 4)?,
            })
        },
    )?;
    let imports = s.all(
        "SELECT alias, source_url, fetched_at, inputs_schema, outputs_schema
         FROM imports ORDER BY alias",
        [],
        import_row,
    )?;
    let gates = s.all(
        &format!("SELECT {GATE_COLUMNS} FROM gates ORDER BY id"),
        [],
        gate_record,
    )?;
    let gate_instances = s.all(
        &format!(
            "SELECT gate_id, {} FROM gate_instances ORDER BY gate_id, instance",
            &GATE_COLUMNS[GATE_COLUMNS.find(',').unwrap_or(0) + 1..]
        ),
        [],
        gate_record,
    )?;
    let audit = s.all(
        &format!("SELECT {AUDIT_COLUMNS} FROM gate_audit_log ORDER BY id"),
        [],
        audit_row,
    )?;
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
        server_only: Vec::new(),
    })
}
