-- prose-state's principals of a SQLite project (.prose/principals.db, mode 0600): who may
-- authenticate with a token, and the project's settings. A token is never stored: only its
-- Argon2id hash (a PHC string). On PostgreSQL the same tables are openprose.principals and
-- openprose.settings.
CREATE TABLE IF NOT EXISTS principals (
    name TEXT PRIMARY KEY,              -- the principal, as decisions record it (agent:NAME for agents)
    kind TEXT NOT NULL CHECK (kind IN ('user', 'agent')),
    token_hash TEXT NOT NULL,           -- Argon2id of the token's secret
    created_at TEXT NOT NULL,           -- when this token was issued (UTC)
    revoked_at TEXT                     -- set by `principals revoke`: the token no longer works
);

CREATE TABLE IF NOT EXISTS settings (
    key TEXT PRIMARY KEY,               -- require: '1' when every decision needs a token
    value TEXT NOT NULL
);
