-- prose-state schema for PostgreSQL: the spec's `openprose` schema (postgres.md), every
-- run-owned table keyed by run_id, with what the spec gets wrong fixed:
--   * `PRIMARY KEY (..., COALESCE(...))` is invalid in PostgreSQL: the keys are unique
--     expression indexes; `ON CONFLICT (name, run_id, (COALESCE(execution_id, -1)))` uses them.
--   * execution.status is the append-only vocabulary (started, iteration, joined, exited,
--     retry too) and statement_index may be NULL (a gate's record has none).
--   * ids are BIGINT; gates and their hash-chained, append-only audit log are added, as in
--     the SQLite schema (postgres.md is an older revision without them).
-- Idempotent: applied whole, under an advisory lock, when the version in
-- openprose.schema_version is older than this build's (POSTGRES_SCHEMA_VERSION).

CREATE SCHEMA IF NOT EXISTS openprose;

CREATE TABLE IF NOT EXISTS openprose.schema_version (
    version INTEGER NOT NULL
);
-- What a binary must understand to read this schema and to write it safely (schema 2).
ALTER TABLE openprose.schema_version ADD COLUMN IF NOT EXISTS min_reader INTEGER;
ALTER TABLE openprose.schema_version ADD COLUMN IF NOT EXISTS min_writer INTEGER;

CREATE TABLE IF NOT EXISTS openprose.run (
    id TEXT PRIMARY KEY,
    program_path TEXT,
    program_source TEXT,
    started_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    status TEXT NOT NULL DEFAULT 'running'
        CHECK (status IN ('running', 'completed', 'failed', 'interrupted')),
    state_mode TEXT NOT NULL DEFAULT 'postgres',
    error_message TEXT,
    metadata JSONB DEFAULT '{}'::jsonb
);

CREATE TABLE IF NOT EXISTS openprose.execution (
    id BIGSERIAL PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES openprose.run(id) ON DELETE CASCADE,
    statement_index BIGINT,
    statement_text TEXT,
    status TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'executing', 'started', 'completed', 'failed', 'skipped',
                          'iteration', 'joined', 'exited', 'retry')),
    started_at TIMESTAMPTZ,
    completed_at TIMESTAMPTZ,
    error_message TEXT,
    parent_id BIGINT REFERENCES openprose.execution(id) ON DELETE CASCADE,
    metadata JSONB DEFAULT '{}'::jsonb
);
-- exec-append --key: a retry with the same key is not appended twice (schema 2).
ALTER TABLE openprose.execution ADD COLUMN IF NOT EXISTS idempotency_key TEXT;
CREATE UNIQUE INDEX IF NOT EXISTS idx_execution_key ON openprose.execution (run_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

CREATE TABLE IF NOT EXISTS openprose.bindings (
    name TEXT NOT NULL,
    run_id TEXT NOT NULL REFERENCES openprose.run(id) ON DELETE CASCADE,
    execution_id BIGINT,
    kind TEXT NOT NULL CHECK (kind IN ('input', 'output', 'let', 'const')),
    value TEXT,
    source_statement TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    attachment_path TEXT,
    metadata JSONB DEFAULT '{}'::jsonb
);
CREATE UNIQUE INDEX IF NOT EXISTS bindings_scope_key
    ON openprose.bindings (name, run_id, (COALESCE(execution_id, -1)));
-- Every insert or update of a binding takes a new version from one sequence, raw writes
-- included, for `bind --if-version` (schema 3).
ALTER TABLE openprose.bindings ADD COLUMN IF NOT EXISTS version BIGINT NOT NULL DEFAULT 0;
CREATE SEQUENCE IF NOT EXISTS openprose.binding_version_seq;
-- The trigger that takes it (`bindings_version`) is made below, with binding_history's.

-- (schema 9) Every version of every binding, the current one included, in write order
-- (`seq`), kept by triggers so that raw writers' changes are kept too; as in the SQLite
-- schema (binding_history there says what each column means). No foreign key to the run: a
-- run's history is deleted with it by prose-state, after its bindings (whose deletion
-- records tombstones).
CREATE TABLE IF NOT EXISTS openprose.binding_history (
    seq BIGSERIAL PRIMARY KEY,
    run_id TEXT NOT NULL,
    name TEXT,
    execution_id BIGINT,
    n BIGINT NOT NULL,
    kind TEXT,
    value TEXT,
    delta TEXT,
    attachment_path TEXT,
    source_statement TEXT,
    written_at TIMESTAMPTZ,
    at_record BIGINT,
    principal TEXT,
    deleted BIGINT NOT NULL DEFAULT 0,
    gap BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS idx_binding_history_name
    ON openprose.binding_history (run_id, name, (COALESCE(execution_id, -1)), n);
CREATE INDEX IF NOT EXISTS idx_binding_history_attachment
    ON openprose.binding_history (run_id, attachment_path) WHERE attachment_path IS NOT NULL;
-- Versions kept of each binding of the run (schema 9), or NULL: all; set at `init` from the
-- project's default (`prune --history KEEP --default`).
ALTER TABLE openprose.run ADD COLUMN IF NOT EXISTS history_keep BIGINT;
-- Who appended each record (schema 9); NULL for a raw writer.
ALTER TABLE openprose.execution ADD COLUMN IF NOT EXISTS principal TEXT;
-- The newest record of a run, found by a lookup (what a history row records).
CREATE INDEX IF NOT EXISTS idx_execution_run_id_id ON openprose.execution(run_id, id);
-- (schema 10) A writer of schemas 10 and 11 says who wrote it, and for an --append/--merge
-- step the step itself, in two settings local to its transaction that its upsert sets
-- (`openprose.principal`, `openprose.delta`): the function takes them for the version it keeps
-- (the step in place of the whole value) and clears them, so they name that one version and
-- never a later statement's. A raw writer sets neither: its version's principal stays NULL.
-- (From schema 12 prose-state keeps its own versions, and fires none of these triggers.)
--
-- (schema 11) One function serves both triggers of a write: `bindings_version`, BEFORE an
-- insert or update, takes the version number and keeps an update's version; and
-- `binding_history_keep`, AFTER an insert or a delete, keeps theirs. An insert's version is
-- kept after it, because an upsert's insert that meets its row becomes an update (firing the
-- BEFORE trigger twice, once for each). So a rebind runs one trigger function, and its
-- upsert's RETURNING already sees the settings cleared. `at_record` is the position of the
-- execution records' id sequence, the newest record of any run when the version was written:
-- readers take the run's newest record at or below it (`history`, `export`, `fork`), which is
-- the run's newest record then, without a lookup of `execution` at every write.
-- (schema 12) prose-state keeps its own writes' versions in the write's own transaction,
-- attributed (src/store/postgres/tx.rs, `write_binding`), and its sessions set
-- `openprose.writer` to 'prose-state' when they start: the history triggers (these two, and
-- agents' and segments' below) keep every other writer's (raw SQL, and a writer of schema
-- 11, which hands its principal and step in the settings above) and fire for none of
-- prose-state's, so no version is kept twice, and a write of prose-state's runs no PL/pgSQL.
CREATE OR REPLACE FUNCTION openprose.bindings_write() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    b openprose.bindings;
    who TEXT;
    step TEXT;
BEGIN
    IF TG_WHEN = 'BEFORE' THEN
        NEW.version := nextval('openprose.binding_version_seq');
        IF TG_OP = 'INSERT' THEN
            RETURN NEW;
        END IF;
    END IF;
    IF TG_OP = 'DELETE' THEN b := OLD; ELSE b := NEW; END IF;
    who := NULLIF(current_setting('openprose.principal', true), '');
    step := NULLIF(current_setting('openprose.delta', true), '');
    IF who IS NOT NULL THEN
        PERFORM set_config('openprose.principal', '', true), set_config('openprose.delta', '', true);
    END IF;
    INSERT INTO openprose.binding_history (run_id, name, execution_id, n, kind, value, delta,
        attachment_path, source_statement, written_at, at_record, principal, deleted)
    VALUES (b.run_id, b.name, b.execution_id,
        (SELECT COALESCE(MAX(h.n), 0) + 1 FROM openprose.binding_history h
          WHERE h.run_id = b.run_id AND h.name = b.name
            AND COALESCE(h.execution_id, -1) = COALESCE(b.execution_id, -1)),
        b.kind,
        CASE WHEN TG_OP = 'DELETE' OR step IS NOT NULL THEN NULL ELSE b.value END,
        step,
        CASE WHEN TG_OP = 'DELETE' THEN NULL ELSE b.attachment_path END,
        CASE WHEN TG_OP = 'DELETE' THEN NULL ELSE b.source_statement END,
        now(),
        (SELECT CASE WHEN s.is_called THEN s.last_value END FROM openprose.execution_id_seq s),
        who,
        CASE WHEN TG_OP = 'DELETE' THEN 1 ELSE 0 END);
    -- (schema 10) A binding's change wakes the run's waiters (MCP resource subscriptions),
    -- as gates' and records' do (openprose.notify_change, below), without a trigger more.
    PERFORM pg_notify('openprose_change', b.run_id);
    IF TG_WHEN = 'BEFORE' THEN
        RETURN NEW;
    END IF;
    RETURN NULL;
END;
$$;
DROP TRIGGER IF EXISTS bindings_version ON openprose.bindings;
CREATE TRIGGER bindings_version BEFORE INSERT OR UPDATE ON openprose.bindings
    FOR EACH ROW WHEN (current_setting('openprose.writer', true) IS DISTINCT FROM 'prose-state')
    EXECUTE FUNCTION openprose.bindings_write();
DROP TRIGGER IF EXISTS binding_history_keep ON openprose.bindings;
CREATE TRIGGER binding_history_keep AFTER INSERT OR DELETE ON openprose.bindings
    FOR EACH ROW WHEN (current_setting('openprose.writer', true) IS DISTINCT FROM 'prose-state')
    EXECUTE FUNCTION openprose.bindings_write();
-- The functions of schemas 3 to 10, which these replace.
DROP FUNCTION IF EXISTS openprose.bindings_version();
DROP FUNCTION IF EXISTS openprose.binding_history_keep();
-- A server from before schema 9: each binding's current value is its first version kept.
INSERT INTO openprose.binding_history (run_id, name, execution_id, n, kind, value,
    attachment_path, source_statement, written_at, at_record, gap)
SELECT b.run_id, b.name, b.execution_id, 1, b.kind, b.value, b.attachment_path,
       b.source_statement, b.updated_at,
       (SELECT MAX(e.id) FROM openprose.execution e WHERE e.run_id = b.run_id), 1
  FROM openprose.bindings b
 WHERE NOT EXISTS (SELECT 1 FROM openprose.binding_history h
                    WHERE h.run_id = b.run_id AND h.name = b.name
                      AND COALESCE(h.execution_id, -1) = COALESCE(b.execution_id, -1));

CREATE TABLE IF NOT EXISTS openprose.agents (
    name TEXT NOT NULL,
    run_id TEXT,  -- NULL for project-scoped agents
    scope TEXT NOT NULL CHECK (scope IN ('execution', 'project', 'user', 'custom')),
    memory TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    metadata JSONB DEFAULT '{}'::jsonb
);
CREATE UNIQUE INDEX IF NOT EXISTS agents_key
    ON openprose.agents (name, (COALESCE(run_id, '__project__')));

CREATE TABLE IF NOT EXISTS openprose.agent_segments (
    id BIGSERIAL PRIMARY KEY,
    agent_name TEXT NOT NULL,
    run_id TEXT,
    segment_number BIGINT NOT NULL,
    timestamp TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    prompt TEXT,
    summary TEXT,
    metadata JSONB DEFAULT '{}'::jsonb
);
CREATE UNIQUE INDEX IF NOT EXISTS agent_segments_key
    ON openprose.agent_segments (agent_name, (COALESCE(run_id, '__project__')), segment_number);
-- (schema 9) The newest execution record of the run when a segment was appended; from
-- schema 11 the id sequence's position then, read as binding_history's `at_record` is.
ALTER TABLE openprose.agent_segments ADD COLUMN IF NOT EXISTS at_record BIGINT;
CREATE OR REPLACE FUNCTION openprose.agent_segments_at_record() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.at_record IS NULL AND NEW.run_id IS NOT NULL THEN
        NEW.at_record := (SELECT CASE WHEN s.is_called THEN s.last_value END
                           FROM openprose.execution_id_seq s);
    END IF;
    RETURN NEW;
END;
$$;
DROP TRIGGER IF EXISTS agent_segments_at_record ON openprose.agent_segments;
CREATE TRIGGER agent_segments_at_record BEFORE INSERT ON openprose.agent_segments
    FOR EACH ROW WHEN (current_setting('openprose.writer', true) IS DISTINCT FROM 'prose-state')
    EXECUTE FUNCTION openprose.agent_segments_at_record();
-- (schema 9) Every version of every run-scoped agent's memory, as binding_history keeps
-- bindings' (the same columns: `kind` holds the scope, `value` the memory).
CREATE TABLE IF NOT EXISTS openprose.agent_history (
    seq BIGSERIAL PRIMARY KEY,
    run_id TEXT NOT NULL,
    name TEXT,
    execution_id BIGINT,
    n BIGINT NOT NULL,
    kind TEXT,
    value TEXT,
    delta TEXT,
    attachment_path TEXT,
    source_statement TEXT,
    written_at TIMESTAMPTZ,
    at_record BIGINT,
    principal TEXT,
    deleted BIGINT NOT NULL DEFAULT 0,
    gap BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS idx_agent_history_name ON openprose.agent_history (run_id, name, n);
CREATE OR REPLACE FUNCTION openprose.agent_history_keep() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    a openprose.agents;
BEGIN
    IF TG_OP = 'DELETE' THEN a := OLD; ELSE a := NEW; END IF;
    IF a.run_id IS NULL THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.memory IS NOT DISTINCT FROM OLD.memory
        AND NEW.scope IS NOT DISTINCT FROM OLD.scope AND NEW.name = OLD.name THEN
        RETURN NULL;
    END IF;
    INSERT INTO openprose.agent_history (run_id, name, n, kind, value, written_at, at_record,
        deleted)
    VALUES (a.run_id, a.name,
        (SELECT COALESCE(MAX(h.n), 0) + 1 FROM openprose.agent_history h
          WHERE h.run_id = a.run_id AND h.name = a.name),
        a.scope, CASE WHEN TG_OP = 'DELETE' THEN NULL ELSE a.memory END, now(),
        (SELECT CASE WHEN s.is_called THEN s.last_value END FROM openprose.execution_id_seq s),
        CASE WHEN TG_OP = 'DELETE' THEN 1 ELSE 0 END);
    RETURN NULL;
END;
$$;
DROP TRIGGER IF EXISTS agent_history_keep ON openprose.agents;
CREATE TRIGGER agent_history_keep AFTER INSERT OR UPDATE OR DELETE ON openprose.agents
    FOR EACH ROW WHEN (current_setting('openprose.writer', true) IS DISTINCT FROM 'prose-state')
    EXECUTE FUNCTION openprose.agent_history_keep();
INSERT INTO openprose.agent_history (run_id, name, n, kind, value, written_at, at_record, gap)
SELECT a.run_id, a.name, 1, a.scope, a.memory, a.updated_at,
       (SELECT MAX(e.id) FROM openprose.execution e WHERE e.run_id = a.run_id), 1
  FROM openprose.agents a
 WHERE a.run_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM openprose.agent_history h
                    WHERE h.run_id = a.run_id AND h.name = a.name);

CREATE TABLE IF NOT EXISTS openprose.imports (
    alias TEXT NOT NULL,
    run_id TEXT NOT NULL REFERENCES openprose.run(id) ON DELETE CASCADE,
    source_url TEXT NOT NULL,
    fetched_at TIMESTAMPTZ,
    inputs_schema JSONB,
    outputs_schema JSONB,
    content_hash TEXT,
    metadata JSONB DEFAULT '{}'::jsonb,
    PRIMARY KEY (alias, run_id)
);

CREATE TABLE IF NOT EXISTS openprose.gates (
    id TEXT NOT NULL,
    run_id TEXT NOT NULL REFERENCES openprose.run(id) ON DELETE CASCADE,
    execution_id BIGINT REFERENCES openprose.execution(id),
    prompt TEXT,
    allow TEXT DEFAULT '["user"]',
    timeout TEXT,
    timeout_at TIMESTAMPTZ,
    on_reject TEXT,
    status TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'approved', 'rejected', 'timeout')),
    created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    resolved_at TIMESTAMPTZ,
    resolved_by TEXT,
    resolution_comment TEXT,
    metadata TEXT,
    PRIMARY KEY (run_id, id)
);
-- Which opening of the gate the row is, and the earlier openings (schema 3).
ALTER TABLE openprose.gates ADD COLUMN IF NOT EXISTS instance BIGINT NOT NULL DEFAULT 1;
-- When the gate's next reminder is due (schema 8).
ALTER TABLE openprose.gates ADD COLUMN IF NOT EXISTS remind_at TIMESTAMPTZ;
CREATE TABLE IF NOT EXISTS openprose.gate_instances (
    gate_id TEXT NOT NULL,
    instance BIGINT NOT NULL,
    run_id TEXT NOT NULL REFERENCES openprose.run(id) ON DELETE CASCADE,
    execution_id BIGINT,
    prompt TEXT,
    allow TEXT,
    timeout TEXT,
    timeout_at TIMESTAMPTZ,
    on_reject TEXT,
    status TEXT,
    created_at TIMESTAMPTZ,
    resolved_at TIMESTAMPTZ,
    resolved_by TEXT,
    resolution_comment TEXT,
    metadata TEXT,
    PRIMARY KEY (run_id, gate_id, instance)
);

-- Append-only; metadata is TEXT so the hash chain covers exactly the bytes stored.
CREATE TABLE IF NOT EXISTS openprose.gate_audit_log (
    id BIGSERIAL PRIMARY KEY,
    gate_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    principal TEXT,
    comment TEXT,
    timestamp TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    metadata TEXT,
    prev_hash TEXT,
    hash TEXT
);
-- The chain's own sequence per run, and the row's seal (schema 3).
ALTER TABLE openprose.gate_audit_log ADD COLUMN IF NOT EXISTS seq BIGINT;
ALTER TABLE openprose.gate_audit_log ADD COLUMN IF NOT EXISTS seal TEXT;
CREATE UNIQUE INDEX IF NOT EXISTS idx_gate_audit_seq ON openprose.gate_audit_log (run_id, seq)
    WHERE seq IS NOT NULL;

CREATE OR REPLACE FUNCTION openprose.gate_audit_log_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'gate_audit_log is append-only: % refused', TG_OP;
END;
$$;
DROP TRIGGER IF EXISTS gate_audit_log_append_only ON openprose.gate_audit_log;
CREATE TRIGGER gate_audit_log_append_only BEFORE UPDATE OR DELETE ON openprose.gate_audit_log
    FOR EACH ROW EXECUTE FUNCTION openprose.gate_audit_log_append_only();

CREATE INDEX IF NOT EXISTS idx_execution_run_id ON openprose.execution(run_id);
CREATE INDEX IF NOT EXISTS idx_execution_parent_id ON openprose.execution(parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_execution_metadata_gin ON openprose.execution USING GIN (metadata jsonb_path_ops);
CREATE INDEX IF NOT EXISTS idx_bindings_run_id ON openprose.bindings(run_id);
CREATE INDEX IF NOT EXISTS idx_agent_segments_lookup ON openprose.agent_segments(agent_name, run_id);
CREATE INDEX IF NOT EXISTS idx_gates_status ON openprose.gates(status);
CREATE INDEX IF NOT EXISTS idx_gate_audit_run ON openprose.gate_audit_log(run_id, id);
-- A run's openings (`created` events), found without reading its views and votes: a `bind`
-- asks whether a gate names the binding as its response binding.
CREATE INDEX IF NOT EXISTS idx_gate_audit_event ON openprose.gate_audit_log(run_id, event_type);
-- (schema 6) what `resume` reads narrowly: records by status and by statement, bindings by
-- scope and by name.
CREATE INDEX IF NOT EXISTS idx_execution_run_status ON openprose.execution(run_id, status);
CREATE INDEX IF NOT EXISTS idx_execution_run_statement ON openprose.execution(run_id, statement_index);
CREATE INDEX IF NOT EXISTS idx_bindings_run_execution ON openprose.bindings(run_id, execution_id);
CREATE INDEX IF NOT EXISTS idx_bindings_run_name ON openprose.bindings(run_id, name COLLATE "C");

-- Large binding values, kept on the server so that every machine with the URL reads them
-- (schema 4). A value is a blob: its bytes in chunks of `chunk_bytes` (the last may be
-- shorter), numbered from 0, and one `attachments` row written in the same transaction as
-- the last chunk, which says the blob is whole. A binding links a blob by
-- `attachment_path = 'server:' || blob`. Chunks are stored uncompressed (STORAGE EXTERNAL):
-- values arrive at line speed, and a range read fetches only the chunks it needs. No foreign
-- key to the run: its check would hold the run's row (FOR KEY SHARE) for a whole upload, and
-- `finish` and every gate decision (FOR UPDATE) would wait for it. A run's values are deleted
-- with it by prose-state.
CREATE TABLE IF NOT EXISTS openprose.attachment_chunks (
    run_id TEXT NOT NULL,
    blob TEXT NOT NULL,
    seq INTEGER NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (run_id, blob, seq)
);
ALTER TABLE openprose.attachment_chunks ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE TABLE IF NOT EXISTS openprose.attachments (
    run_id TEXT NOT NULL,
    blob TEXT NOT NULL,
    bytes BIGINT NOT NULL,
    chunk_bytes INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    PRIMARY KEY (run_id, blob)
);

-- Cross-run listings read the server's tables in one query (schema 4): runs newest first,
-- and pending gates by deadline (the sweep before every listing looks only at those).
CREATE INDEX IF NOT EXISTS idx_run_started ON openprose.run (started_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS idx_gates_pending_deadline ON openprose.gates (timeout_at)
    WHERE status = 'pending';
-- `gates --limit N` lists the N oldest pending gates across runs without sorting them all
-- (schema 5).
CREATE INDEX IF NOT EXISTS idx_gates_pending_created ON openprose.gates (created_at, run_id, id)
    WHERE status = 'pending';

-- Principals who authenticate with a token (schema 5): the token is never stored, only its
-- Argon2id hash; and the project's settings (`require`: every decision needs a token). Every
-- machine of the team checks tokens against these rows.
CREATE TABLE IF NOT EXISTS openprose.principals (
    name TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('user', 'agent')),
    token_hash TEXT NOT NULL,
    created_at TEXT NOT NULL,
    revoked_at TEXT
);
CREATE TABLE IF NOT EXISTS openprose.settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
-- The principals book's sealed log (schema 7): groups, revocations and the
-- separation-of-duties policy, chained and sealed with the audit key (see
-- schema/principals.sql's book_log).
CREATE TABLE IF NOT EXISTS openprose.book_log (
    seq BIGINT PRIMARY KEY,
    at TEXT NOT NULL,
    actor TEXT,
    event TEXT NOT NULL,
    principal TEXT,
    grp TEXT,
    value TEXT,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    seal TEXT NOT NULL
);

-- (schema 9) Waiters woken by the commit (src/store/wake.rs): a change to a run's gates, its
-- audit log or its execution log notifies `openprose_change` with the run's id, inside the
-- committing transaction, so it is heard only if the write commits; raw writers' too. A
-- transaction's notifications of one run are sent once.
CREATE OR REPLACE FUNCTION openprose.notify_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('openprose_change', OLD.run_id);
    ELSE
        PERFORM pg_notify('openprose_change', NEW.run_id);
    END IF;
    RETURN NULL;
END;
$$;
DROP TRIGGER IF EXISTS gates_notify ON openprose.gates;
CREATE TRIGGER gates_notify AFTER INSERT OR UPDATE OR DELETE ON openprose.gates
    FOR EACH ROW EXECUTE FUNCTION openprose.notify_change();
DROP TRIGGER IF EXISTS gate_audit_log_notify ON openprose.gate_audit_log;
CREATE TRIGGER gate_audit_log_notify AFTER INSERT ON openprose.gate_audit_log
    FOR EACH ROW EXECUTE FUNCTION openprose.notify_change();
DROP TRIGGER IF EXISTS execution_notify ON openprose.execution;
CREATE TRIGGER execution_notify AFTER INSERT OR UPDATE ON openprose.execution
    FOR EACH ROW EXECUTE FUNCTION openprose.notify_change();
