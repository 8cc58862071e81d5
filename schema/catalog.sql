-- prose-state schema for <root>/.prose/catalog.db: the project's catalog of its SQLite runs,
-- so that a cross-run listing (`gates`, `runs`, `prune`) is one query, not one database open
-- per run. It is never the source of truth: every fact in it is copied from a run's state.db,
-- and the whole file can be deleted at any time (the next listing rebuilds it). Versioned in
-- PRAGMA user_version (CATALOG_VERSION in src/store/catalog.rs); an older catalog is rebuilt,
-- a newer one is left alone and the listing visits every run instead.
--
-- How it stays true (src/store/catalog.rs): a write that changes a fact kept here appends a
-- ticket line to catalog.log inside its run's write transaction, before its commit, and after
-- the commit a line with the facts it committed. A listing folds the log in: a ticket line
-- becomes a `tickets` row, a facts line updates its run's rows and deletes its ticket. A run
-- with a ticket left (its writer died between the two) or marked `stale` is re-read by the
-- next listing, under the run's own write lock, so no writer can be between its ticket and
-- its commit then.

CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,            -- the run directory's name
    kind TEXT NOT NULL,             -- sqlite; server (a record of a run kept on PostgreSQL);
                                    -- unreadable (visited, so that listings report it)
    run_id TEXT,                    -- the run row's id
    program_path TEXT,
    status TEXT,
    started_at TEXT,
    updated_at TEXT,
    error_message TEXT,
    pending INTEGER NOT NULL DEFAULT 0,  -- pending gates, overdue ones included
    next_deadline TEXT,             -- the earliest deadline of a pending gate
    applied INTEGER NOT NULL DEFAULT 0,  -- the newest ticket whose facts the row holds
    stale INTEGER NOT NULL DEFAULT 0,    -- to be read again from the run
    problem TEXT,                   -- why an unreadable run could not be read
    stamp TEXT                      -- state.db's and its log's identity, size and time when
                                    -- the facts were read: a run shown whose files differ
                                    -- is read again (a write behind prose-state's back)
);
CREATE INDEX IF NOT EXISTS catalog_runs_started ON runs(started_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS catalog_runs_stale ON runs(stale) WHERE stale <> 0;
CREATE INDEX IF NOT EXISTS catalog_runs_odd ON runs(kind) WHERE kind <> 'sqlite';
-- Run directories whose name is not the id their database records (copied by hand): listed
-- under their directory's name, and named in every listing's warnings.
CREATE INDEX IF NOT EXISTS catalog_runs_copies ON runs(id) WHERE run_id <> id;

-- The pending gates of the runs above, each as its run's gates row holds it.
CREATE TABLE IF NOT EXISTS gates (
    run TEXT NOT NULL,              -- the run directory's name (runs.id)
    id TEXT NOT NULL,
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
    instance INTEGER,
    due TEXT,                       -- datetime(timeout_at); '' when it does not parse (counts
                                    -- as passed: gates fail closed); NULL: no deadline
    PRIMARY KEY (run, id)
);
CREATE INDEX IF NOT EXISTS catalog_gates_order ON gates(created_at, run, id);
CREATE INDEX IF NOT EXISTS catalog_gates_due ON gates(due) WHERE due IS NOT NULL;

-- Writes between their ticket and their catalog update (a dead writer's stays).
CREATE TABLE IF NOT EXISTS tickets (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run TEXT NOT NULL,
    nonce TEXT                      -- a writer's ticket, from its line in catalog.log; NULL:
                                    -- a listing's own, taken to read a run
);
CREATE INDEX IF NOT EXISTS catalog_tickets_run ON tickets(run);
CREATE UNIQUE INDEX IF NOT EXISTS catalog_tickets_nonce ON tickets(nonce) WHERE nonce IS NOT NULL;

-- log_folded: the newest catalog.log.N folded in (a fold killed after its commit leaves its
-- copy; never applied twice).
-- boot_id: the machine's boot when the catalog was last read: on another boot (a power loss
-- may have taken the last commits, at synchronous = NORMAL) every run's files are compared.
-- runs_mtime: the runs directory's modification time when its entries were last compared
-- with the rows above (kept only once it is a few seconds old, so that a run made in the
-- same clock tick is never missed), or after the last change `init` announced in
-- catalog.log, when that change started from the time recorded here.
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT
);

-- `stats` of each SQLite run as last read, with the files it was read from (state.db, its
-- log and the attachments directory: identity, size and time): a run whose files are still
-- as they were is not opened again.
CREATE TABLE IF NOT EXISTS run_stats (
    id TEXT PRIMARY KEY,            -- runs.id
    files TEXT NOT NULL,
    stats TEXT NOT NULL             -- JSON
) WITHOUT ROWID;
