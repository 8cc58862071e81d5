//! The command line's JSON contract for stored rows. The store's row types carry no
//! serialisation of their own: each field's JSON name is written here, once, so that renaming
//! a store field cannot silently change what `--json` prints (the compiler stops it here).

use crate::store::principals::PrincipalRow;
use crate::store::{
    AgentRow, AuditRow, BindingRow, Checkpointed, GateRow, ImportRow, Migration, RunStats,
    RunSummary, ServerStats,
};
use serde::ser::{Serialize, SerializeStruct, Serializer};

/// `impl Serialize` for a row type written field by field: `Type as "Name" { "json": field,
/// ... }` (a field may be a path, `run.id`, and shown through a wrapper, `value as Lossy`),
/// in this order.
macro_rules! as_written {
    ($ty:ty as $name:literal { $($json:literal: $($field:ident).+ $(as $wrap:ident)?),* $(,)? }) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut r = s.serialize_struct($name, [$($json),*].len())?;
                $(r.serialize_field($json, &$($wrap)?(&self.$($field).+))?;)*
                r.end()
            }
        }
    };
}

/// A binding's value as JSON shows it: rows written by raw SQL may hold bytes that are not
/// UTF-8, shown lossily.
struct Lossy<'a>(&'a Option<Vec<u8>>);

impl Serialize for Lossy<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.as_deref().map(String::from_utf8_lossy).serialize(s)
    }
}

as_written! { BindingRow as "Binding" {
    "name": name, "execution_id": execution_id, "kind": kind, "value": value as Lossy,
    "source_statement": source_statement, "created_at": created_at, "updated_at": updated_at,
    "attachment_path": attachment_path, "version": own_version,
} }

as_written! { GateRow as "Gate" {
    "id": id, "run_id": run_id, "execution_id": execution_id, "prompt": prompt, "allow": allow,
    "timeout": timeout, "timeout_at": timeout_at, "on_reject": on_reject, "status": status,
    "created_at": created_at, "resolved_at": resolved_at, "resolved_by": resolved_by,
    "resolution_comment": resolution_comment, "metadata": metadata, "instance": instance,
} }

as_written! { AuditRow as "AuditEvent" {
    "id": id, "gate_id": gate_id, "run_id": run_id, "event_type": event_type,
    "principal": principal, "comment": comment, "timestamp": timestamp, "metadata": metadata,
    "prev_hash": prev_hash, "hash": hash, "seq": seq, "seal": seal,
} }

as_written! { AgentRow as "Agent" {
    "name": name, "scope": scope, "memory": memory, "created_at": created_at,
    "updated_at": updated_at, "segments": segments,
} }

as_written! { ImportRow as "Import" {
    "alias": alias, "source_url": source_url, "fetched_at": fetched_at,
    "inputs_schema": inputs_schema, "outputs_schema": outputs_schema,
} }

// `runs`: a run's row, with what the listing adds to it.
as_written! { RunSummary as "Run" {
    "id": run.id, "program_path": run.program_path, "status": run.status,
    "started_at": run.started_at, "updated_at": run.updated_at, "error_message": error_message,
    "last_event_at": last_event_at, "pending_gates": pending_gates,
} }

// `stats`: a run's figures.
as_written! { RunStats as "RunStats" {
    "run_id": run_id, "backend": store.backend, "schema_version": store.schema_version,
    "db_bytes": store.db_bytes, "wal_bytes": store.wal_bytes, "tables": store.tables,
    "execution_status": store.execution_status,
    "binding_inline_bytes": store.binding_inline_bytes, "settings": store.settings,
    "attachment_files": attachment_files, "attachment_bytes": attachment_bytes,
    "server": store.server,
} }

// `stats`: what a run keeps on a PostgreSQL server (null on SQLite), and the server's sizes.
as_written! { ServerStats as "ServerStats" {
    "attachments": attachments, "attachment_bytes": attachment_bytes, "row_bytes": row_bytes,
    "tables_bytes": tables_bytes, "database_bytes": database_bytes,
} }

// `principals list`: a principal, never its token's hash.
as_written! { PrincipalRow as "Listed" {
    "name": name, "kind": kind, "created_at": created_at, "revoked_at": revoked_at,
} }

// `checkpoint` and `migrate`: what each run's store answered.
as_written! { Checkpointed as "Checkpointed" {
    "mode": mode, "busy": busy, "wal_frames": wal_frames,
    "checkpointed_frames": checkpointed_frames,
} }

as_written! { Migration as "Migration" {
    "from": from, "to": to, "steps": steps, "applied": applied,
} }
