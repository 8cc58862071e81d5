-- prose-state schema for a run's state.db (SQLite).
--
-- This is the OpenProse spec's core schema (sqlite.md), kept column for column so that the
-- spec's own SQL reads and writes it, with what the spec gets wrong fixed:
--   * bindings: `PRIMARY KEY (name, IFNULL(execution_id, -1))` does not load in SQLite; the
--     same key is a UNIQUE index on the expression, which `INSERT OR REPLACE` and
--     `ON CONFLICT (name, IFNULL(execution_id, -1))` both honour.
--   * an index on execution(parent_id) for walking scopes downward and listing children.
--   * (schema 2) the gate audit log is hash-chained and append-only by trigger.
--   * (schema 3) run.error_message, set by `finish --error`.
--   * (schema 4) execution.idempotency_key, so a retried `exec-append --key` is safe.
--   * (schema 7) indexes for `resume`'s narrow reads.
--   * (schema 10) binding_history, every version of every binding, kept by triggers; who
--     wrote each execution record (execution.principal).
--   * (schema 11) an index of the gates' openings by the binding they answer into.
--
-- Every statement is idempotent (IF NOT EXISTS): the same text creates a new database and
-- completes an older one during the forward upgrade (src/store/sqlite_schema.rs), which runs
-- on the first write, never on a read. Columns are never dropped or retyped; user tables
-- (x_*) and user-added columns are kept. PRAGMA user_version holds the stamp
-- version + 1000 * min_writer + 1000000 * min_reader (src/store/sqlite_schema.rs): the schema
-- version, and what a binary must understand to write this file safely and to read it.

CREATE TABLE IF NOT EXISTS run (
    id TEXT PRIMARY KEY,
    program_path TEXT,
    program_source TEXT,
    started_at TEXT DEFAULT (datetime('now')),
    updated_at TEXT DEFAULT (datetime('now')),
    status TEXT DEFAULT 'running',  -- running, completed, failed, interrupted
    state_mode TEXT DEFAULT 'sqlite',
    error_message TEXT,             -- why a run failed or was interrupted (schema 3)
    history_keep INTEGER            -- versions kept of each binding, or NULL: all (schema 10)
);

CREATE TABLE IF NOT EXISTS execution (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    statement_index INTEGER,
    statement_text TEXT,
    status TEXT,  -- pending, executing, started, completed, failed, skipped, iteration, joined, exited, retry
    started_at TEXT,
    completed_at TEXT,
    error_message TEXT,
    parent_id INTEGER REFERENCES execution(id),
    metadata TEXT,  -- JSON object
    idempotency_key TEXT, -- exec-append --key: a retry with the same key is not appended twice (schema 4)
    principal TEXT        -- who appended it; NULL for a raw writer (schema 10)
);
CREATE INDEX IF NOT EXISTS idx_execution_parent ON execution(parent_id);
CREATE UNIQUE INDEX IF NOT EXISTS idx_execution_key ON execution(idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- (schema 7) what `resume` reads narrowly, so that it costs the same on any run's size:
-- the records that open constructs (by status) and those that may close them (by statement).
CREATE INDEX IF NOT EXISTS idx_execution_status ON execution(status);
CREATE INDEX IF NOT EXISTS idx_execution_statement ON execution(statement_index);

CREATE TABLE IF NOT EXISTS bindings (
    name TEXT,
    execution_id INTEGER,  -- NULL for root scope
    kind TEXT,             -- input, output, let, const
    value TEXT,
    source_statement TEXT,
    created_at TEXT DEFAULT (datetime('now')),
    updated_at TEXT DEFAULT (datetime('now')),
    attachment_path TEXT,  -- relative to the run directory
    version INTEGER NOT NULL DEFAULT 0  -- bumped by every write, raw ones too (schema 5)
);
CREATE UNIQUE INDEX IF NOT EXISTS idx_bindings_scope ON bindings(name, IFNULL(execution_id, -1));
-- (schema 7) the bindings of an execution scope, counted without reading the root's.
CREATE INDEX IF NOT EXISTS idx_bindings_execution ON bindings(execution_id);

-- Every insert or update of a binding takes a new version, higher than any before in the
-- database (a REPLACE that deletes and re-inserts included), so `bind --if-version` cannot be
-- fooled by two writes in one second, or by a value written back (schema 5). Every trigger
-- here is for raw writers: prose-state's connections fire none, and its writes take their
-- version and keep their history themselves, in the same transaction (src/store/sqlite/tx.rs,
-- `write_binding`; docs/database.md, "Triggers and prose-state's own writes").
CREATE INDEX IF NOT EXISTS idx_bindings_version ON bindings(version);
CREATE TRIGGER IF NOT EXISTS bindings_version_insert AFTER INSERT ON bindings
BEGIN
    UPDATE bindings SET version = (SELECT IFNULL(MAX(version), 0) + 1 FROM bindings)
     WHERE rowid = NEW.rowid;
END;
CREATE TRIGGER IF NOT EXISTS bindings_version_update AFTER UPDATE ON bindings
WHEN NEW.version = OLD.version
BEGIN
    UPDATE bindings SET version = (SELECT IFNULL(MAX(version), 0) + 1 FROM bindings)
     WHERE rowid = NEW.rowid;
END;

-- (schema 10) Every version of every binding, the current one included, in write order
-- (`seq`): prose-state writes its own writes' versions, and triggers keep raw writers'. The spec's
-- `INSERT OR REPLACE` deletes and re-inserts; without recursive_triggers its delete fires no
-- trigger, and its insert takes a new version like any other. `n` numbers a binding's
-- versions 1, 2, 3, ... in its scope; `at_record` is the newest execution record when it was
-- written (what `get --as-of` and `fork --at` order by); `principal` is who wrote it (NULL: a
-- raw writer); a `--append`/`--merge` step is kept
-- as its `delta` (the item, the patch) with `value` NULL; `deleted` marks a DELETE; `gap`
-- marks the oldest version kept when older ones were pruned or never kept.
CREATE TABLE IF NOT EXISTS binding_history (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT,
    execution_id INTEGER,
    n INTEGER NOT NULL,
    kind TEXT,
    value TEXT,
    delta TEXT,
    attachment_path TEXT,
    source_statement TEXT,
    written_at TEXT,
    at_record INTEGER,
    principal TEXT,
    deleted INTEGER NOT NULL DEFAULT 0,
    gap INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS idx_binding_history_name
    ON binding_history(name, IFNULL(execution_id, -1), n);
CREATE INDEX IF NOT EXISTS idx_binding_history_attachment
    ON binding_history(attachment_path) WHERE attachment_path IS NOT NULL;
-- A new version: every version bump (an insert's and an update's, raw ones too).
CREATE TRIGGER IF NOT EXISTS binding_history_version AFTER UPDATE OF version ON bindings
WHEN NEW.version IS NOT OLD.version
BEGIN
    INSERT INTO binding_history (name, execution_id, n, kind, value, attachment_path,
                                 source_statement, written_at, at_record)
    VALUES (NEW.name, NEW.execution_id,
            (SELECT IFNULL(MAX(n), 0) + 1 FROM binding_history
              WHERE name = NEW.name AND IFNULL(execution_id, -1) = IFNULL(NEW.execution_id, -1)),
            NEW.kind, NEW.value, NEW.attachment_path, NEW.source_statement, datetime('now'),
            (SELECT MAX(id) FROM execution));
END;
CREATE TRIGGER IF NOT EXISTS binding_history_delete AFTER DELETE ON bindings
BEGIN
    INSERT INTO binding_history (name, execution_id, n, kind, written_at, at_record, deleted)
    VALUES (OLD.name, OLD.execution_id,
            (SELECT IFNULL(MAX(n), 0) + 1 FROM binding_history
              WHERE name = OLD.name AND IFNULL(execution_id, -1) = IFNULL(OLD.execution_id, -1)),
            OLD.kind, datetime('now'), (SELECT MAX(id) FROM execution), 1);
END;
-- A database from before schema 10: each binding's current value is its first version kept,
-- known to stand from the newest record of the upgrade on.
INSERT INTO binding_history (name, execution_id, n, kind, value, attachment_path,
                             source_statement, written_at, at_record, gap)
SELECT b.name, b.execution_id, 1, b.kind, b.value, b.attachment_path, b.source_statement,
       b.updated_at, (SELECT MAX(id) FROM execution), 1
  FROM bindings b
 WHERE NOT EXISTS (SELECT 1 FROM binding_history h
                    WHERE h.name = b.name
                      AND IFNULL(h.execution_id, -1) = IFNULL(b.execution_id, -1));

CREATE TABLE IF NOT EXISTS agents (
    name TEXT PRIMARY KEY,
    scope TEXT,  -- execution, project, user, custom
    memory TEXT,
    created_at TEXT DEFAULT (datetime('now')),
    updated_at TEXT DEFAULT (datetime('now'))
);

CREATE TABLE IF NOT EXISTS agent_segments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_name TEXT REFERENCES agents(name),
    segment_number INTEGER,
    timestamp TEXT DEFAULT (datetime('now')),
    prompt TEXT,
    summary TEXT,
    at_record INTEGER,  -- the newest execution record when it was appended (schema 10)
    UNIQUE(agent_name, segment_number)
);
CREATE TRIGGER IF NOT EXISTS agent_segments_at_record AFTER INSERT ON agent_segments
WHEN NEW.at_record IS NULL
BEGIN
    UPDATE agent_segments SET at_record = (SELECT MAX(id) FROM execution) WHERE id = NEW.id;
END;
-- (schema 10) Every version of every run-scoped agent's memory, kept as binding_history keeps
-- bindings' (the same columns: `kind` holds the scope, `value` the memory): what a fork
-- rebuilds the agents from. A touch that changes neither makes no version.
CREATE TABLE IF NOT EXISTS agent_history (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT,
    execution_id INTEGER,
    n INTEGER NOT NULL,
    kind TEXT,
    value TEXT,
    delta TEXT,
    attachment_path TEXT,
    source_statement TEXT,
    written_at TEXT,
    at_record INTEGER,
    principal TEXT,
    deleted INTEGER NOT NULL DEFAULT 0,
    gap INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS idx_agent_history_name ON agent_history(name, n);
CREATE TRIGGER IF NOT EXISTS agent_history_insert AFTER INSERT ON agents
BEGIN
    INSERT INTO agent_history (name, n, kind, value, written_at, at_record)
    VALUES (NEW.name, (SELECT IFNULL(MAX(n), 0) + 1 FROM agent_history WHERE name = NEW.name),
            NEW.scope, NEW.memory, datetime('now'), (SELECT MAX(id) FROM execution));
END;
CREATE TRIGGER IF NOT EXISTS agent_history_update AFTER UPDATE ON agents
WHEN NEW.memory IS NOT OLD.memory OR NEW.scope IS NOT OLD.scope OR NEW.name IS NOT OLD.name
BEGIN
    INSERT INTO agent_history (name, n, kind, value, written_at, at_record)
    VALUES (NEW.name, (SELECT IFNULL(MAX(n), 0) + 1 FROM agent_history WHERE name = NEW.name),
            NEW.scope, NEW.memory, datetime('now'), (SELECT MAX(id) FROM execution));
END;
CREATE TRIGGER IF NOT EXISTS agent_history_delete AFTER DELETE ON agents
BEGIN
    INSERT INTO agent_history (name, n, kind, written_at, at_record, deleted)
    VALUES (OLD.name, (SELECT IFNULL(MAX(n), 0) + 1 FROM agent_history WHERE name = OLD.name),
            OLD.scope, datetime('now'), (SELECT MAX(id) FROM execution), 1);
END;
INSERT INTO agent_history (name, n, kind, value, written_at, at_record, gap)
SELECT a.name, 1, a.scope, a.memory, a.updated_at, (SELECT MAX(id) FROM execution), 1
  FROM agents a
 WHERE NOT EXISTS (SELECT 1 FROM agent_history h WHERE h.name = a.name);

CREATE TABLE IF NOT EXISTS imports (
    alias TEXT PRIMARY KEY,
    source_url TEXT,
    fetched_at TEXT,
    inputs_schema TEXT,   -- JSON
    outputs_schema TEXT   -- JSON
);

CREATE TABLE IF NOT EXISTS gates (
    id TEXT PRIMARY KEY,
    run_id TEXT REFERENCES run(id),
    execution_id INTEGER REFERENCES execution(id),
    prompt TEXT,
    allow TEXT DEFAULT '["user"]',
    timeout TEXT,
    timeout_at TEXT,
    on_reject TEXT,
    status TEXT DEFAULT 'pending',  -- pending, approved, rejected, timeout
    created_at TEXT DEFAULT (datetime('now')),
    resolved_at TEXT,
    resolved_by TEXT,
    resolution_comment TEXT,
    metadata TEXT,
    instance INTEGER NOT NULL DEFAULT 1, -- which opening of the gate this row is (schema 5)
    remind_at TEXT                       -- when its next reminder is due (schema 9)
);
-- Earlier openings of gates opened again (`gates create --reopen`), each as it ended (schema 5).
CREATE TABLE IF NOT EXISTS gate_instances (
    gate_id TEXT NOT NULL,
    instance INTEGER NOT NULL,
    run_id TEXT,
    execution_id INTEGER,
    prompt TEXT,
    allow TEXT,
    timeout TEXT,
    timeout_at TEXT,
    on_reject TEXT,
    status TEXT,
    created_at TEXT,
    resolved_at TEXT,
    resolved_by TEXT,
    resolution_comment TEXT,
    metadata TEXT,
    PRIMARY KEY (gate_id, instance)
);
CREATE INDEX IF NOT EXISTS idx_gates_status ON gates(status);
CREATE INDEX IF NOT EXISTS idx_gates_run ON gates(run_id);
CREATE INDEX IF NOT EXISTS idx_gates_timeout ON gates(timeout_at) WHERE timeout_at IS NOT NULL;

CREATE TABLE IF NOT EXISTS gate_audit_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    gate_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    event_type TEXT NOT NULL,  -- created, viewed, approved, rejected, timeout, resumed
    principal TEXT,
    comment TEXT,
    timestamp TEXT DEFAULT (datetime('now')),
    metadata TEXT,
    prev_hash TEXT,  -- the previous row's hash (schema 2)
    hash TEXT,       -- sha256 over this row's content and prev_hash (schema 2)
    seq INTEGER,     -- the row's place in the run's chain, 1, 2, 3, ... (schema 5)
    seal TEXT        -- HMAC of hash under a key the database does not hold (schema 5)
);
CREATE INDEX IF NOT EXISTS idx_gate_audit_gate ON gate_audit_log(gate_id);
CREATE INDEX IF NOT EXISTS idx_gate_audit_run ON gate_audit_log(run_id);
-- The openings (`created` events) found without reading the views and votes beside them: a
-- `bind` asks whether a gate names the binding as its response binding.
CREATE INDEX IF NOT EXISTS idx_gate_audit_event ON gate_audit_log(event_type);
-- The openings that answer into a binding (`--response-binding`), found by the name alone: a
-- `bind` or `get` of any name asks whether some gate answers into it, and the run's openings
-- grow with its gates (schema 11). Only openings whose metadata is JSON are indexed, so a row
-- a raw writer spoiled fails no write. (Writing this table needs SQLite's JSON functions,
-- built in since 3.38.)
CREATE INDEX IF NOT EXISTS idx_gate_audit_answers
    ON gate_audit_log(json_extract(metadata, '$.response_binding'))
    WHERE event_type = 'created' AND json_valid(metadata);
CREATE UNIQUE INDEX IF NOT EXISTS idx_gate_audit_seq ON gate_audit_log(run_id, seq)
    WHERE seq IS NOT NULL;
-- The chain's head and a row by its place, found by a lookup instead of a scan of the whole
-- log at every gate operation (schema 6).
CREATE INDEX IF NOT EXISTS idx_gate_audit_seq_alone ON gate_audit_log(seq)
    WHERE seq IS NOT NULL;

-- The audit log is append-only in fact, not only by convention (schema 2).
CREATE TRIGGER IF NOT EXISTS gate_audit_log_no_update BEFORE UPDATE ON gate_audit_log
BEGIN
    SELECT RAISE(ABORT, 'gate_audit_log is append-only: UPDATE refused');
END;
CREATE TRIGGER IF NOT EXISTS gate_audit_log_no_delete BEFORE DELETE ON gate_audit_log
BEGIN
    SELECT RAISE(ABORT, 'gate_audit_log is append-only: DELETE refused');
END;
