//! The command line's JSON contract for stored rows. The store's row types carry no
//! serialisation of their own: each field's JSON name is written here, once, so that renaming
//! a store field cannot silently change what `--json` prints (the compiler stops it here).

use crate::store::{AgentRow, AuditRow, BindingRow, GateRow, ImportRow};
use serde::ser::{Serialize, SerializeStruct, Serializer};

impl Serialize for BindingRow {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut r = s.serialize_struct("Binding", 9)?;
        r.serialize_field("name", &self.name)?;
        r.serialize_field("execution_id", &self.execution_id)?;
        r.serialize_field("kind", &self.kind)?;
        // Rows written by raw SQL may hold bytes that are not UTF-8: shown lossily.
        r.serialize_field(
            "value",
            &self
                .value
                .as_deref()
                .map(|v| String::from_utf8_lossy(v).into_owned()),
        )?;
        r.serialize_field("source_statement", &self.source_statement)?;
        r.serialize_field("created_at", &self.created_at)?;
        r.serialize_field("updated_at", &self.updated_at)?;
        r.serialize_field("attachment_path", &self.attachment_path)?;
        r.serialize_field("version", &self.version)?;
        r.end()
    }
}

impl Serialize for GateRow {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut r = s.serialize_struct("Gate", 15)?;
        r.serialize_field("id", &self.id)?;
        r.serialize_field("run_id", &self.run_id)?;
        r.serialize_field("execution_id", &self.execution_id)?;
        r.serialize_field("prompt", &self.prompt)?;
        r.serialize_field("allow", &self.allow)?;
        r.serialize_field("timeout", &self.timeout)?;
        r.serialize_field("timeout_at", &self.timeout_at)?;
        r.serialize_field("on_reject", &self.on_reject)?;
        r.serialize_field("status", &self.status)?;
        r.serialize_field("created_at", &self.created_at)?;
        r.serialize_field("resolved_at", &self.resolved_at)?;
        r.serialize_field("resolved_by", &self.resolved_by)?;
        r.serialize_field("resolution_comment", &self.resolution_comment)?;
        r.serialize_field("metadata", &self.metadata)?;
        r.serialize_field("instance", &self.instance)?;
        r.end()
    }
}

impl Serialize for AuditRow {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut r = s.serialize_struct("AuditEvent", 12)?;
        r.serialize_field("id", &self.id)?;
        r.serialize_field("gate_id", &self.gate_id)?;
        r.serialize_field("run_id", &self.run_id)?;
        r.serialize_field("event_type", &self.event_type)?;
        r.serialize_field("principal", &self.principal)?;
        r.serialize_field("comment", &self.comment)?;
        r.serialize_field("timestamp", &self.timestamp)?;
        r.serialize_field("metadata", &self.metadata)?;
        r.serialize_field("prev_hash", &self.prev_hash)?;
        r.serialize_field("hash", &self.hash)?;
        r.serialize_field("seq", &self.seq)?;
        r.serialize_field("seal", &self.seal)?;
        r.end()
    }
}

impl Serialize for AgentRow {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut r = s.serialize_struct("Agent", 6)?;
        r.serialize_field("name", &self.name)?;
        r.serialize_field("scope", &self.scope)?;
        r.serialize_field("memory", &self.memory)?;
        r.serialize_field("created_at", &self.created_at)?;
        r.serialize_field("updated_at", &self.updated_at)?;
        r.serialize_field("segments", &self.segments)?;
        r.end()
    }
}

impl Serialize for ImportRow {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut r = s.serialize_struct("Import", 5)?;
        r.serialize_field("alias", &self.alias)?;
        r.serialize_field("source_url", &self.source_url)?;
        r.serialize_field("fetched_at", &self.fetched_at)?;
        r.serialize_field("inputs_schema", &self.inputs_schema)?;
        r.serialize_field("outputs_schema", &self.outputs_schema)?;
        r.end()
    }
}
