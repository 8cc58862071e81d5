-- prose-state schema for agents.db: project-scoped agent memory (<root>/.prose/agents.db) and
-- user-scoped agent memory (~/.prose/agents.db). The same two tables as in a run's state.db,
-- so the spec's SQL for persistent agents works on either. Idempotent, like schema/sqlite.sql;
-- versioned in PRAGMA user_version (AGENTS_SCHEMA_VERSION in src/store/sqlite.rs), stamped
-- as in schema/sqlite.sql.

CREATE TABLE IF NOT EXISTS agents (
    name TEXT PRIMARY KEY,
    scope TEXT,  -- project or user
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
    UNIQUE(agent_name, segment_number)
);
