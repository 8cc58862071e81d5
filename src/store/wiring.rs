//! What a process carries to every store it opens, built once where the process starts (a
//! command's `Context`, the MCP server, the page) and passed down in [`OpenOptions`]:
//! - who is told what a commit caused (the gate hook, `services::notify`);
//! - what watches a run's commits from outside it (the project catalog);
//! - whether connections are kept for the next open (a long-lived process), and where;
//! - the audit key, once read or made.
//!
//! Nothing here is looked up from a global: two wirings in one process (two tests, say) share
//! nothing. A wiring lives as long as the process (`leak`), so that the options that carry it
//! stay `Copy`.
//!
//! [`OpenOptions`]: super::OpenOptions

use super::effects::Notice;
use super::seal::Key;
use super::sqlite::Watcher;
use super::Kept;
use anyhow::{anyhow, Result};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// How many connections a command leaves to its exit (see `Drop for SqliteStore`).
const LEFT_MOST: usize = 4;

/// What a process carries to its stores (see the module's documentation).
#[derive(Default)]
pub struct Wiring {
    notices: Option<Box<Announce>>,
    watcher: Option<Watcher>,
    kept: Option<Pools>,
    /// A command's: it leaves its first few connections to its exit (see `leave_to_exit`).
    ends_soon: bool,
    left_to_exit: AtomicUsize,
    key: OnceLock<Key>,
    home: Option<PathBuf>,
}

/// Told what a transaction caused, once its commit is durable.
type Announce = dyn Fn(Vec<Notice>) + Send + Sync;

/// Connections kept for the next open: SQLite's by file, PostgreSQL's by server URL.
pub(super) struct Pools {
    pub(super) sqlite: Kept<rusqlite::Connection>,
    /// Server connections kept for the next open in a long-lived process (the MCP server), by
    /// URL: a connection (and its TLS session) costs several round trips, most of a small call.
    ///
    /// The URL is the whole key: the user, password, host, database, TLS (`sslmode`) and any
    /// session options it carries (`options=-c search_path=...`) are all in it, and no other
    /// setting makes a session (the busy timeout is set by every open, see `start`). What a
    /// session carries from one user to the next is what `Drop` and `start` put in order: no
    /// transaction (a `Transaction` rolls back when dropped; a snapshot is rolled back), no
    /// session advisory lock (an upload's are released), the settings `start` sets at every open
    /// (time zone, lock timeout, messages); settings a transaction sets are local to it, and the
    /// only statements left prepared are prose-state's own, kept with the session (a bind's
    /// write, planned once a session instead of at every call; the driver names them, and closes
    /// any other when it drops; the typed statements are unnamed). A session that ran SQL of the caller's (`query`), which a
    /// read-only transaction does not stop taking a session advisory lock or preparing a
    /// statement by name, is closed instead. LISTEN is never sent on them: the listening
    /// connection is one of its own (`listening_client`), never kept here.
    ///
    /// At most [`LOOKS_AT_ONCE`](super::wake::LOOKS_AT_ONCE) are kept, over all URLs, the
    /// newest: the number of waiters' looks a process runs at once, so that waiters woken
    /// together take kept connections instead of opening new ones, and few enough that a
    /// process holds at most that many idle sessions of a server whose `max_connections`
    /// many processes share.
    pub(super) postgres: Kept<(postgres::Client, super::postgres::Prepared)>,
}

impl std::fmt::Debug for Wiring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wiring")
            .field("announces", &self.notices.is_some())
            .field("watches", &self.watcher.is_some())
            .field("keeps", &self.kept.is_some())
            .finish()
    }
}

impl Wiring {
    /// Commits announce nothing, nothing watches them, no connection is kept.
    pub fn new() -> Self {
        Self::default()
    }

    /// Commits' notices go to `announce`.
    pub fn announcing(mut self, announce: impl Fn(Vec<Notice>) + Send + Sync + 'static) -> Self {
        self.notices = Some(Box::new(announce));
        self
    }

    /// Runs' commits are watched by what `watcher` makes (the project catalog).
    pub fn watching(mut self, watcher: Watcher) -> Self {
        self.watcher = Some(watcher);
        self
    }

    /// Connections are kept for the next open: a long-lived process (the MCP server), whose
    /// calls come one after another to the same runs.
    pub fn keeping(mut self) -> Self {
        self.kept = Some(Pools {
            sqlite: Kept::new(32),
            postgres: Kept::new(super::wake::LOOKS_AT_ONCE),
        });
        self
    }

    /// Closes every connection it keeps: for one who is about to replace the files and the
    /// databases they are to (a test restoring a snapshot).
    pub fn let_go(&self) {
        if let Some(pools) = &self.kept {
            pools.sqlite.clear();
            pools.postgres.clear();
        }
    }

    /// The user's prose directory (the audit key, the anchors) is `home`, not the one the
    /// environment names (`$PROSE_HOME/.prose`, else `~/.prose`): what a test in the same
    /// process as others gives each of its users.
    pub fn at_home(mut self, home: PathBuf) -> Self {
        self.home = Some(home);
        self
    }

    /// The user's prose directory: where the audit key, the anchors and the page's signing key
    /// are.
    pub fn home(&self) -> Option<PathBuf> {
        self.home.clone().or_else(super::seal::prose_home)
    }

    /// The process is a command, which ends once its work is done: it leaves its first few
    /// connections to its exit, which frees what they hold at once, rather than close them
    /// one by one (see `Drop for SqliteStore`).
    pub fn ending_soon(mut self) -> Self {
        self.ends_soon = true;
        self
    }

    /// The wiring, for the rest of the process.
    pub fn leak(self) -> &'static Wiring {
        Box::leak(Box::new(self))
    }

    /// Hands over what a transaction that just committed caused (`tx::Txn::commit`).
    pub(crate) fn deliver(&self, notices: Vec<Notice>) {
        if let (false, Some(announce)) = (notices.is_empty(), &self.notices) {
            announce(notices);
        }
    }

    /// What makes the watcher of a run's commits, if anything watches them.
    pub fn watcher(&self) -> Option<Watcher> {
        self.watcher
    }

    /// Whether stores keep their connections for the next open.
    pub fn keeps(&self) -> bool {
        self.kept.is_some()
    }

    pub(super) fn pools(&self) -> Option<&Pools> {
        self.kept.as_ref()
    }

    /// Whether the process may leave one more connection to its exit rather than close it:
    /// only a command's ([`Self::ending_soon`]), and never one that keeps connections.
    pub(super) fn leave_to_exit(&self) -> bool {
        self.ends_soon
            && !self.keeps()
            && self.left_to_exit.fetch_add(1, Ordering::Relaxed) < LEFT_MOST
    }

    /// The audit key, to seal with: read, or created on first use (mode 0600, in a 0700
    /// directory under `PROSE_HOME`, else `~/.prose`).
    pub fn key_for_writing(&self) -> Result<&Key> {
        if let Some(k) = self.key.get() {
            return Ok(k);
        }
        let home = self.home().ok_or_else(|| {
            anyhow!("no home for the audit key: set PROSE_HOME or HOME (gate events are sealed with a key kept there)")
        })?;
        let key = match super::seal::read_key(&home)? {
            Some(k) => k,
            None => Key::from_bytes(super::seal::create_secret(
                &home,
                super::seal::KEY_FILE,
                "the audit key",
            )?),
        };
        Ok(self.key.get_or_init(|| key))
    }

    /// The audit key, to verify with: None when this user has none (a read creates nothing;
    /// a key that does not exist yet is looked for again next time).
    pub fn key_for_reading(&self) -> Result<Option<&Key>> {
        if let Some(k) = self.key.get() {
            return Ok(Some(k));
        }
        let Some(home) = self.home() else {
            return Ok(None);
        };
        Ok(super::seal::read_key(&home)?.map(|key| self.key.get_or_init(|| key)))
    }
}

#[cfg(test)]
mod tests {
    use super::Wiring;
    use crate::store::effects::Event;
    use crate::store::sqlite::SqliteStore;
    use crate::store::{AgentStore, NewRun, OpenOptions, TxKind};
    use std::sync::{Arc, Mutex};

    /// Two wirings in one process share nothing: a commit is announced to the wiring of the
    /// store that made it and to no other, and only a keeping wiring keeps the connection a
    /// store leaves (which a store of the other wiring never takes).
    #[test]
    fn two_wirings_in_one_process_share_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state.db");
        let heard: Arc<Mutex<Vec<(&str, String)>>> = Arc::default();
        let wired = |name: &'static str| {
            let heard = Arc::clone(&heard);
            Wiring::new().announcing(move |notices| {
                let mut heard = heard.lock().unwrap();
                heard.extend(notices.into_iter().map(|n| (name, n.gate.id)));
            })
        };
        let (a, b) = (wired("a").keeping().leak(), wired("b").leak());
        let opts = |wiring| OpenOptions {
            busy_timeout: std::time::Duration::from_secs(5),
            wiring,
        };
        let run = NewRun {
            id: "run-1",
            program_path: None,
            program_source: None,
            created_at: "2026-01-01 00:00:00",
            history_keep: None,
        };
        drop(SqliteStore::create(&db, &run, opts(b)).unwrap());
        let gate: crate::store::dump::GateRecord = serde_json::from_value(serde_json::json!({
            "id": "g", "run_id": null, "execution_id": null, "prompt": null, "allow": null,
            "timeout": null, "timeout_at": null, "on_reject": null, "status": null,
            "created_at": null, "resolved_at": null, "resolved_by": null,
            "resolution_comment": null, "metadata": null, "instance": 1
        }))
        .unwrap();
        let gate = gate.row("run-1");
        for (wiring, id) in [(a, "from a"), (b, "from b")] {
            let mut store = SqliteStore::open(&db, opts(wiring)).unwrap();
            let mut tx = store.txn(TxKind::Write).unwrap();
            let mut g = gate.clone();
            g.id = id.to_string();
            tx.notice(Event::Opened, &g);
            tx.commit().unwrap();
        }
        assert_eq!(
            *heard.lock().unwrap(),
            [("a", "from a".to_string()), ("b", "from b".to_string())]
        );
        // a's store left its connection in a's pool; b keeps none, and takes none of a's.
        let kept = |w: &Wiring| w.pools().map(|p| p.sqlite.count());
        assert_eq!((kept(a), kept(b)), (Some(1), None));
        drop(SqliteStore::open(&db, opts(b)).unwrap());
        assert_eq!((kept(a), kept(b)), (Some(1), None));
        drop(SqliteStore::open(&db, opts(a)).unwrap());
        assert_eq!(kept(a), Some(1), "taken, then given back");
    }
}
