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
    key TEXT PRIMARY KEY,               -- require: '1' when every decision needs a token;
    value TEXT NOT NULL                 -- signed_key: the pinned key (shown; the log's counts)
);

-- The book's sealed log (version 2): every token issued (with the digest of its hash) or
-- revoked, every member added to or removed from a group, every policy (require, separation
-- of duties), the pinned signing key, and the place the book is bound to, chained as a run's
-- gate events are. Tokens, groups, the policies and the pin are read from this log alone: a
-- row of the book that disagrees with it counts for nothing, and a row written here by raw SQL
-- breaks it, after which it admits no one (docs/gates-and-trust.md).
CREATE TABLE IF NOT EXISTS book_log (
    seq INTEGER PRIMARY KEY,            -- 1, 2, 3, ...: a missing number is a removed row
    at TEXT NOT NULL,                   -- when (UTC)
    actor TEXT,                         -- who ran the command (as claimed)
    event TEXT NOT NULL,                -- add, revoke, group_add, group_remove, policy, bind
    principal TEXT,
    grp TEXT,                           -- the group; for policy, the policy's name
    value TEXT,                         -- add: the token hash's digest; policy: on, off or the key; bind: the place
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,                 -- sha256 of ["prose-book-1", prev_hash, seq, event, principal, grp, value, actor, at]
    seal TEXT NOT NULL                  -- hmac-sha256:KEYID:HEX of hash under the audit key, or once a key is pinned ed25519:SIG (its signature)
);
