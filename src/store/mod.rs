//! The only code that speaks SQL. Commands call a [`Store`] with typed values; each backend
//! owns its connection settings, SQL text and row mapping.

pub mod book_log;
pub mod catalog;
pub mod chain;
mod derive;
pub mod dump;
pub mod effects;
pub mod gate_read;
pub mod history;
pub mod kept;
pub mod postgres;
pub mod principals;
pub mod rows;
pub mod rules;
pub mod seal;
pub mod signatures;
pub mod sqlite;
mod sqlite_rows;

/// Runs `reads` in one read-only snapshot of `store` ([`Snapshot::begin_read`]), ended however
/// they go: reads compared with each other (a gate's row with its sealed log, the log with
/// every gate) never straddle another writer's commit. In a snapshot already taken
/// ([`Store::snapshot`]) they simply run in it.
pub fn consistent<S: Snapshot + ?Sized, T>(
    store: &mut S,
    reads: impl FnOnce(&mut S) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let began = store.begin_read()?;
    let out = reads(store);
    if began {
        let ended = store.end_read();
        let out = out?;
        ended?;
        return Ok(out);
    }
    out
}

/// Connections kept for the next open, under a key saying what they may be used again for
/// (SQLite: the file; PostgreSQL: the server), in a process whose [`Wiring`] keeps them; at
/// most `most` are kept, the newest.
pub struct Kept<C> {
    kept: std::sync::Mutex<Vec<(String, C)>>,
    most: usize,
}

impl<C> Kept<C> {
    pub const fn new(most: usize) -> Self {
        Kept {
            kept: std::sync::Mutex::new(Vec::new()),
            most,
        }
    }

    /// A kept connection under `key`, if any; the kept ones `stale` names are closed first.
    pub fn take(&self, key: &str, stale: impl Fn(&str, &C) -> bool) -> Option<C> {
        let mut kept = self.kept.lock().ok()?;
        kept.retain(|(k, c)| !stale(k, c));
        let at = kept.iter().rposition(|(k, _)| k == key)?;
        Some(kept.swap_remove(at).1)
    }

    /// How many are kept.
    #[cfg(test)]
    pub fn count(&self) -> usize {
        self.kept.lock().map_or(0, |k| k.len())
    }

    /// Closes every kept connection.
    pub fn clear(&self) {
        if let Ok(mut kept) = self.kept.lock() {
            kept.clear();
        }
    }

    /// Keeps a connection.
    pub fn give(&self, key: String, conn: C) {
        if let Ok(mut kept) = self.kept.lock() {
            if kept.len() >= self.most {
                kept.remove(0);
            }
            kept.push((key, conn));
        }
    }
}

/// A store's connection, held until the store drops, whose `Drop` takes it (to keep it for the
/// next open, or to close it). An `Option` only so that it can be taken then: until then it is
/// always there, and the holder reads it as the connection itself.
pub struct Held<C>(Option<C>);

impl<C> Held<C> {
    pub fn new(conn: C) -> Self {
        Held(Some(conn))
    }

    /// The connection, for the store's `Drop` (nothing reads it after).
    pub fn take(&mut self) -> Option<C> {
        self.0.take()
    }
}

impl<C> std::ops::Deref for Held<C> {
    type Target = C;
    fn deref(&self) -> &C {
        self.0
            .as_ref()
            .expect("a store's connection is held until the store drops")
    }
}

impl<C> std::ops::DerefMut for Held<C> {
    fn deref_mut(&mut self) -> &mut C {
        self.0
            .as_mut()
            .expect("a store's connection is held until the store drops")
    }
}

pub mod sqlite_schema;
pub mod tx;
pub mod wake;
mod wiring;

pub use wiring::Wiring;

pub use rows::{GateSelect, Rows};
pub use tx::{Tx, TxKind};

mod catalog_traits;
mod exec_log;
mod store_trait;
mod types;

pub use catalog_traits::{Catalog, RunFilter, ServerCatalog};
pub use exec_log::{
    forked_from, frame_of, id_list, record, scope_list, ExecQuery, ResumeCounts, ENDS, STARTS,
    STARTS_AND_ENDS,
};
pub use store_trait::{AgentStore, Snapshot, Store};
pub use types::{
    run_stats, server_blob, spellings, AgentRow, Attempt, AuditFilter, AuditRow, Authority,
    BindOutcome, BindingHead, BindingRow, BlobInfo, Checkpointed, Created, Decided, Decision,
    ExecutionRow, Finished, Found, GateRow, ImportAdded, ImportRow, InputAt, NewBinding,
    NewExecution, NewGate, NewRun, OpenOptions, QueryResult, Resumed, RunInfo, RunStats,
    RunSummary, ServerStats, StoreStats, Update, Upload, QUERY_MOST_BYTES, SERVER_PREFIX,
    STATS_TABLES,
};
pub(crate) use types::{too_large, QueryBudget};

/// How far up a scope chain a lookup walks before it stops: a guard against a parent_id
/// cycle written by raw SQL, far beyond any real nesting. Bound as a parameter of the scope
/// query on every backend.
pub const MAX_SCOPE_DEPTH: i32 = 1_000_000;

/// What a database records of its schema: its version, and what a binary must understand
/// to read it and to write it safely (like SQLite's own read and write format versions).
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    pub version: i64,
    pub min_reader: i64,
    pub min_writer: i64,
}

/// What `migrate` found, or did.
#[derive(Debug)]
pub struct Migration {
    /// The schema version before.
    pub from: i64,
    /// The version after (this build's when anything is to do).
    pub to: i64,
    pub steps: Vec<String>,
    pub applied: bool,
}

/// The triggers a schema script creates, by name, each with its own statement as the script
/// holds it (to the `END;` of a body, or the statement's `;`): what a database at that schema
/// must hold, and how each is made again, read from the schema itself.
pub fn schema_triggers(sql: &str) -> Vec<(&str, &str)> {
    let mut found = Vec::new();
    let mut rest = sql;
    let mut at = 0;
    while let Some(i) = rest.find("CREATE TRIGGER ") {
        let start = at + i;
        let head = &sql[start + "CREATE TRIGGER ".len()..];
        let head = head.strip_prefix("IF NOT EXISTS ").unwrap_or(head);
        let name = head.split_whitespace().next().unwrap_or_default();
        let first_semicolon = sql[start..].find(';').map_or(sql.len(), |e| start + e + 1);
        let body = sql[start..first_semicolon].find("\nBEGIN");
        let end = match body {
            Some(_) => sql[start..]
                .find("\nEND;")
                .map_or(sql.len(), |e| start + e + 5),
            None => first_semicolon,
        };
        found.push((name, &sql[start..end]));
        at = end;
        rest = &sql[end..];
    }
    found
}

/// What this binary may do with a database, by its stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// This build's version.
    Current,
    /// Older: read as it is (never changed by a read); upgraded by the first write.
    Older,
    /// Newer, with changes this build may write alongside.
    NewerWritable,
    /// Newer, with changes this build cannot write safely: reads only.
    NewerReadOnly,
}

/// The one rule for schema versions, on every backend. Err: the file cannot even be read,
/// with why.
pub fn access_for(stamp: &Stamp, ours: i64) -> std::result::Result<Access, String> {
    use std::cmp::Ordering;
    match stamp.version.cmp(&ours) {
        Ordering::Equal => Ok(Access::Current),
        Ordering::Less => Ok(Access::Older),
        Ordering::Greater if stamp.min_reader > ours => Err(format!(
            "db has schema version {}, which needs prose-state schema {} or later to read (this one has {ours})",
            stamp.version, stamp.min_reader
        )),
        Ordering::Greater if stamp.min_writer > ours => Ok(Access::NewerReadOnly),
        Ordering::Greater => Ok(Access::NewerWritable),
    }
}

/// The refusal of a write to a database this build may only read.
pub fn refuse_write(stamp_version: i64, ours: i64, location: &str) -> anyhow::Error {
    crate::error::refused(format!(
        "db has schema version {stamp_version}, whose changes this prose-state (schema {ours}) cannot write safely; upgrade prose-state to write it (reads work), the db was left unchanged: {location}"
    ))
}

pub use crate::model::Backend;

#[cfg(test)]
mod tests {
    /// Every trigger each schema makes is read whole from it: a SQLite body to its `END;`, a
    /// PostgreSQL statement to its `;`, and no other statement taken for one.
    #[test]
    fn schema_triggers_reads_each_trigger_whole() {
        let lite = super::schema_triggers(include_str!("../../schema/sqlite.sql"));
        let names: Vec<&str> = lite.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "bindings_version_insert",
                "bindings_version_update",
                "binding_history_version",
                "binding_history_delete",
                "agent_segments_at_record",
                "agent_history_insert",
                "agent_history_update",
                "agent_history_delete",
                "gate_audit_log_no_update",
                "gate_audit_log_no_delete"
            ]
        );
        for (name, sql) in &lite {
            assert!(sql.starts_with("CREATE TRIGGER IF NOT EXISTS "), "{name}");
            assert!(sql.ends_with("\nEND;"), "{name}: {sql}");
            assert_eq!(sql.matches("CREATE ").count(), 1, "{name}");
        }
        let pg = super::schema_triggers(include_str!("../../schema/postgres.sql"));
        assert_eq!(pg.len(), 8);
        for (name, sql) in &pg {
            assert!(
                sql.starts_with(&format!("CREATE TRIGGER {name} ")),
                "{name}"
            );
            assert!(sql.ends_with(");"), "{name}: {sql}");
        }
    }
}
