//! Each tool's output schema: the structured content its successful calls return. A client
//! (the reference Python SDK does) checks every result against it, so the tests that drive
//! each tool through that client hold these to the truth.

use serde_json::{json, Value};

fn nullable(t: &str) -> Value {
    json!({"type": [t, "null"]})
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required})
}

/// The page fields of a list tool, around its items under `field`.
fn list(field: &str, item: Value) -> Value {
    let mut page = object(
        json!({
            "total": {"type": "integer", "description": "Items in the whole list"},
            "cursor": {"type": "integer", "description": "Where this page starts"},
            "next_cursor": {"type": ["integer", "null"],
                "description": "Pass as `cursor` for the next page; null at the end"},
            "truncated": {"type": "boolean", "description": "Whether more follows this page"},
        }),
        &[field, "total", "next_cursor", "truncated"],
    );
    page["properties"][field] = json!({"type": "array", "items": item});
    page
}

/// The page fields of a text read in parts, besides the object's own `properties`.
fn text_page(properties: Value, field: &str) -> Value {
    let required = [
        field,
        "offset",
        "length",
        "total_bytes",
        "next_offset",
        "truncated",
    ];
    let mut page = object(properties, &required);
    let p = &mut page["properties"];
    p[field] = json!({"type": "string", "description": "This page's bytes, as text"});
    p["offset"] = json!({"type": "integer"});
    p["length"] = json!({"type": "integer", "description": "This page's length in bytes"});
    p["total_bytes"] =
        json!({"type": "integer", "description": "The whole text's length in bytes"});
    p["next_offset"] = json!({"type": ["integer", "null"],
        "description": "Pass as `offset` for the next page; null at the end"});
    p["truncated"] = json!({"type": "boolean"});
    page
}

/// A binding's own version, as `bind` and `get` give it.
fn own_version() -> Value {
    json!({"type": ["integer", "null"], "description":
        "The binding's own version in its scope (1, 2, 3, ...): what `history` lists, `get` with `version` reads and `bind`'s `if_version` compares"})
}

fn gate() -> Value {
    object(
        json!({
            "id": {"type": "string"}, "run_id": {"type": "string"},
            "execution_id": nullable("integer"), "prompt": {"type": "string"},
            "allow": {"type": "array", "items": {"type": "string"}},
            "timeout_at": nullable("string"), "on_reject": nullable("string"),
            "status": {"type": "string", "enum": ["pending", "approved", "rejected", "timeout"]},
            "resolved_by": nullable("string"), "resolution_comment": nullable("string"),
            "instance": {"type": "integer"},
            // A team's gate (a quorum, a group, separation of duties, an escalation) or one
            // with reminders: what it asks, and where its sealed votes stand.
            "require": {"type": "integer"}, "veto": {"type": "boolean"},
            "approvals": {"type": "array", "items": {"type": "string"}},
            "rejections": {"type": "array", "items": {"type": "string"}},
            "progress": {"type": "string", "description": "The votes so far, e.g. \"1 of 2 approvals: bob\""},
            "waiting_for": {"type": "array", "items": {"type": "string"},
                "description": "The allow entries a decision may still come through"},
            "escalation": {"type": "object", "description":
                "Where the gate opens at its deadline instead of timing out (`to`), and whether it has (`escalated`)"},
            "next_reminder": {"type": "string", "description": "When the next reminder is due (UTC)"},
            "separate_duties": {"type": "object"},
        }),
        &["id", "run_id", "status"],
    )
}

/// A tool's output schema as it is listed: each top-level field with its type, and the
/// fields always present. What a field holds is the tool's description's and `docs/mcp.md`'s
/// to say: the list is read at every session's start, and its size is budgeted
/// (`tests/mcp.rs`).
pub fn output(tool: &str) -> Value {
    listed(full(tool))
}

/// `schema` cut to the fields always present, each with its `type` (and `enum`) alone: a
/// nested object or array only as its type.
fn listed(schema: Value) -> Value {
    let mut out = json!({"type": "object"});
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(properties) = schema["properties"].as_object() {
        let fields: serde_json::Map<String, Value> = properties
            .iter()
            .filter(|(name, _)| required.contains(&name.as_str()))
            .map(|(name, field)| {
                let mut kept = serde_json::Map::new();
                for key in ["type", "enum"] {
                    if let Some(v) = field.get(key) {
                        kept.insert(key.into(), v.clone());
                    }
                }
                (name.clone(), Value::Object(kept))
            })
            .collect();
        out["properties"] = Value::Object(fields);
    }
    if let Some(required) = schema.get("required") {
        out["required"] = required.clone();
    }
    out
}

/// A tool's output schema in full, with what each field holds.
pub fn full(tool: &str) -> Value {
    match tool {
        "init" => object(
            json!({"run_id": {"type": "string"}, "dir": {"type": "string"}, "db": nullable("string"),
                   "program": nullable("string")}),
            &["run_id"],
        ),
        "bind" => object(
            json!({"name": {"type": "string"}, "execution_id": nullable("integer"),
                   "kind": nullable("string"), "attachment_path": nullable("string"),
                   "bytes": {"type": "integer"}, "summary": nullable("string"),
                   "version": own_version()}),
            &["name", "bytes"],
        ),
        "get" => {
            let p = json!({
                "name": {"type": "string"}, "execution_id": nullable("integer"),
                "kind": nullable("string"), "source_statement": nullable("string"),
                "version": own_version(),
                "scope": {"type": "string", "enum": ["root", "execution"]},
                "depth": nullable("integer"),
                "summary": {"type": ["string", "null"],
                    "description": "A large value's one-line summary (null for a value kept inline)"},
                "attachment": nullable("string"), "attachment_path": nullable("string"),
                // With `explain`: the scope chain walked instead of the value.
                "chain": {"type": "array", "items": {"type": "integer"}},
            });
            let mut page = text_page(p, "value");
            // An explained lookup has no value: only the name is always there.
            page["required"] = json!(["name"]);
            page
        }
        "exec_append" => object(
            json!({"id": {"type": "integer"}, "statement_index": nullable("integer"),
                   "status": {"type": "string"}, "parent_id": nullable("integer")}),
            &["id", "status"],
        ),
        "query" => {
            let mut page = list("rows", json!({"type": "object"}));
            page["properties"]["columns"] = json!({"type": "array", "items": {"type": "string"},
                "description": "The statement's columns, in its order"});
            if let Some(required) = page["required"].as_array_mut() {
                required.push(json!("columns"));
            }
            page
        }
        "gates_list" => list("gates", gate()),
        "gates_create" => gate(),
        "gates_wait" => {
            // One gate's outcome, or with `gates` and `all`/`any` each settled gate's.
            let mut s = gate();
            let p = &mut s["properties"];
            p["mode"] = json!({"type": "string", "enum": ["all", "any"]});
            p["gates"] = json!({"type": "array", "items": gate(),
                "description": "With several gates: each settled gate's outcome, in the order named"});
            p["not_settled"] = json!({"type": "array", "items": {"type": "string"},
                "description": "With several gates: those still pending when the wait had its answer"});
            p["superseded_by"] = json!({"type": "integer", "description":
                "Waited on an earlier `instance` that a reopening superseded: the newest instance (the outcome given is the earlier opening's own)"});
            s["required"] = json!([]);
            s["anyOf"] = json!([{"required": ["id", "run_id", "status"]},
                                {"required": ["mode", "gates", "not_settled"]}]);
            s
        }
        "gates_show" => {
            let mut g = gate();
            let p = &mut g["properties"];
            p["history"] = json!({"type": "array", "description":
                "A page of the gate's audit events, oldest first",
                "items": object(json!({"id": {"type": "integer"}, "event_type": {"type": "string"},
                    "principal": nullable("string"), "comment": nullable("string"),
                    "timestamp": nullable("string")}), &["id", "event_type"])});
            p["history_total"] =
                json!({"type": "integer", "description": "Events in the gate's whole history"});
            p["cursor"] = json!({"type": "integer", "description": "Where this page starts"});
            p["next_cursor"] = json!({"type": ["integer", "null"],
                "description": "Pass as `cursor` for the next page of the history; null at the end"});
            p["truncated"] =
                json!({"type": "boolean", "description": "Whether more events follow this page"});
            p["integrity"] = object(
                json!({"state": {"type": "string", "enum": ["attested", "unsealed", "unattested", "tampered"]},
                       "detail": nullable("string")}),
                &["state"],
            );
            let more = ["history", "history_total", "next_cursor", "truncated"];
            if let Some(required) = g["required"].as_array_mut() {
                required.extend(more.map(Value::from));
            }
            g
        }
        "agent_memory" => text_page(
            json!({"name": {"type": "string"}, "scope": {"type": "string"},
                   "segments": {"type": "integer"}, "updated_at": nullable("string")}),
            "memory",
        ),
        "agent_remember" => object(
            json!({"name": {"type": "string"}, "scope": {"type": "string"}, "bytes": {"type": "integer"}}),
            &["name", "scope"],
        ),
        "agent_segment" => object(
            json!({"name": {"type": "string"}, "scope": {"type": "string"},
                   "segment_number": {"type": "integer"}}),
            &["name", "segment_number"],
        ),
        "agents_list" => list(
            "agents",
            object(
                json!({"name": {"type": "string"}, "scope": {"type": "string"},
                       "segments": {"type": "integer"}, "memory_bytes": {"type": "integer"}}),
                &["name"],
            ),
        ),
        "imports_list" => list(
            "imports",
            object(
                json!({"alias": {"type": "string"}, "source_url": {"type": "string"}}),
                &["alias"],
            ),
        ),
        "runs_list" => list(
            "runs",
            object(
                json!({"id": {"type": "string"}, "status": {"type": "string"},
                       "pending_gates": {"type": "integer"}}),
                &["id", "status"],
            ),
        ),
        // Without a run named: `run` null and the unfinished `runs`.
        "resume" => object(
            json!({"run": {"type": ["object", "null"]}, "runs": {"type": "array"}}),
            &["run"],
        ),
        "finish" => object(
            json!({"run_id": {"type": "string"}, "status": {"type": "string"},
                   "previous_status": nullable("string")}),
            &["run_id", "status"],
        ),
        "log_since" => object(
            json!({
                "events": {"type": "array", "items": object(
                    json!({"id": {"type": "integer"}, "status": {"type": "string"},
                           "statement_text": nullable("string"), "narration": {"type": "string"}}),
                    &["id"])},
                "next_since": {"type": "integer",
                    "description": "Pass as `since` to read on from here"},
                "truncated": {"type": "boolean", "description": "Whether more events are already there"},
            }),
            &["events", "next_since", "truncated"],
        ),
        "history" => object(
            json!({
                "name": {"type": "string"},
                "execution_id": nullable("integer"),
                "total": {"type": "integer", "description": "Versions kept"},
                "older_not_kept": {"type": "boolean"},
                "versions": {"type": "array", "items": object(
                    json!({"version": {"type": "integer"}, "written_at": nullable("string"),
                           "after_record": nullable("integer"), "by": {"type": "string"},
                           "change": {"type": "string", "enum": ["set", "append", "merge", "deleted"]},
                           "preview": {"type": "string"}, "bytes": {"type": "integer"}}),
                    &["version", "by", "change", "preview", "bytes"])},
                "next_before": {"type": ["integer", "null"],
                    "description": "Pass as `before` for older versions; null: none"},
            }),
            &["name", "total", "versions", "next_before"],
        ),
        "fork" => object(
            json!({
                "run_id": {"type": "string", "description": "The new run"},
                "source": {"type": "string"}, "at": {"type": "integer"},
                "records": {"type": "integer"}, "bindings": {"type": "integer"},
                "gates_decided": {"type": "array", "items": {"type": "string"}},
                "gates_pending": {"type": "array", "items": {"type": "string"}},
                "gates_not_carried": {"type": "array", "items": {"type": "string"}},
                "rebound": {"type": "array", "items": {"type": "string"}},
            }),
            &["run_id", "source", "at", "records", "bindings"],
        ),
        "diff" => {
            let int = || json!({"type": "integer"});
            let or_null = |v: Value| json!({"anyOf": [v, {"type": "null"}]});
            let change = || json!({"type": "string", "enum": ["added", "removed", "changed"]});
            let differs = || json!({"type": "array", "items": {"type": "string"}});
            let run = object(
                json!({"run": {"type": "string"}, "backend": {"type": "string", "enum": ["sqlite", "postgres"]},
                       "records": int(), "bindings": int(), "gates": int()}),
                &["run", "backend", "records", "bindings", "gates"],
            );
            let value = object(
                json!({"kind": nullable("string"), "bytes": int(), "attachment": {"type": "boolean"},
                       "preview": {"type": "string", "description": "The value's first characters (at most 60)"}}),
                &["kind", "bytes", "attachment", "preview"],
            );
            let binding = object(
                json!({"change": change(), "name": {"type": "string"},
                       "scope": {"type": "string", "enum": ["root", "execution"]},
                       "position": {"type": ["integer", "null"],
                           "description": "The scope's record by its place in the log (1: the first)"},
                       "execution_id_a": nullable("integer"), "execution_id_b": nullable("integer"),
                       "differs": differs(), "a": or_null(value.clone()), "b": or_null(value)}),
                &["change", "name", "scope", "position", "differs", "a", "b"],
            );
            let record = object(
                json!({"position": int(), "id": int(), "statement_index": nullable("integer"),
                       "statement_text": nullable("string"), "status": nullable("string"),
                       "parent_position": nullable("integer"), "parent_id": nullable("integer")}),
                &["position", "id"],
            );
            let tail = object(
                json!({"after_common": int(), "shown": {"type": "array", "items": record},
                       "left_out": int(), "next_since": {"type": ["integer", "null"],
                           "description": "With records left out: pass as `since` to `log_since` (with this run as `run`)"}}),
                &["after_common", "shown", "left_out", "next_since"],
            );
            let gate_side = object(
                json!({"status": {"type": "string"}, "resolved_by": nullable("string"), "instance": int()}),
                &["status", "resolved_by", "instance"],
            );
            let gate = object(
                json!({"change": change(), "id": {"type": "string"}, "differs": differs(),
                       "a": or_null(gate_side.clone()), "b": or_null(gate_side)}),
                &["change", "id", "differs", "a", "b"],
            );
            let counts = ["differ", "added", "removed", "changed", "shown", "left_out"];
            let mut bindings = object(
                json!({"differ": int(), "added": int(), "removed": int(), "changed": int(),
                       "cursor": int(), "shown": {"type": "array", "items": binding},
                       "left_out": int(), "next_cursor": {"type": ["integer", "null"],
                           "description": "Pass as `cursor` for the next bindings; null on the last"}}),
                &counts,
            );
            if let Some(required) = bindings["required"].as_array_mut() {
                required.push(json!("next_cursor"));
            }
            object(
                json!({
                    "a": run.clone(), "b": run,
                    "identical": {"type": "boolean", "description": "Whether nothing compared differs"},
                    "name": nullable("string"),
                    "bindings": bindings,
                    "records": object(
                        json!({"common": {"type": "integer",
                                   "description": "How many records both logs begin with, the same"},
                               "a": tail.clone(), "b": tail}),
                        &["common", "a", "b"],
                    ),
                    "gates": object(
                        json!({"differ": int(), "added": int(), "removed": int(), "changed": int(),
                               "shown": {"type": "array", "items": gate}, "left_out": int()}),
                        &counts,
                    ),
                }),
                &["a", "b", "identical", "bindings", "records", "gates"],
            )
        }
        _ => json!({"type": "object"}),
    }
}
