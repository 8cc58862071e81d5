//! The principals who authenticate with a token, and the project's settings: kept in
//! `.prose/principals.db` (mode 0600) for a SQLite project, or in the server's
//! `openprose.principals` and `openprose.settings` for a project on PostgreSQL (where every
//! machine of the team checks the same tokens). A token is never stored, only its Argon2id
//! hash; what a token is and how it is checked is `crate::services::auth`'s.

use anyhow::{Context as _, Result};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use std::path::{Path, PathBuf};

use super::book_log::{BookEvent, Change};
use super::seal::Key;

/// The log's columns, in [`BookEvent`]'s order.
pub const BOOK_COLUMNS: &str =
    "seq, at, actor, event, principal, grp, value, prev_hash, hash, seal";

/// The file, under `.prose/`.
pub const BOOK_FILE: &str = "principals.db";
const SCHEMA: &str = include_str!("../../schema/principals.sql");
const VERSION: i64 = 2;

/// The setting that makes every decision need a token.
pub const REQUIRE: &str = "require";

/// One principal's row. `kind` is `user` or `agent` (then the name is `agent:NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrincipalRow {
    pub name: String,
    pub kind: String,
    pub token_hash: String,
    pub created_at: String,
    pub revoked_at: Option<String>,
}

/// Where a project's principals are: each method one statement.
pub trait PrincipalBook: Send {
    /// Every principal, by name.
    fn principals(&mut self) -> Result<Vec<PrincipalRow>>;
    fn principal(&mut self, name: &str) -> Result<Option<PrincipalRow>>;
    /// Adds a principal, or gives a revoked one its new token; false when the name is there
    /// and not revoked (nothing written).
    fn add_principal(&mut self, row: &PrincipalRow) -> Result<bool>;
    /// Revokes a principal's token; false when there is no such principal, or it was revoked.
    fn revoke_principal(&mut self, name: &str, now: &str) -> Result<bool>;
    fn setting(&mut self, key: &str) -> Result<Option<String>>;
    fn set_setting(&mut self, key: &str, value: &str) -> Result<()>;
    /// Where the book is, for messages.
    fn book_place(&self) -> String;
    /// The book's sealed log (`book_log`), every row.
    fn book_log(&mut self) -> Result<Vec<BookEvent>>;
    /// Appends `changes` after the log's newest row, sealed with `key`, in one transaction
    /// under the book's write lock.
    fn append_book(&mut self, changes: &[Change], key: &Key) -> Result<()>;

    /// Whether a long-lived process (`serve`) may keep this book open between uses: a
    /// server's connection reads its rows afresh; a local file could be replaced under an
    /// open connection (a book removed by hand would go on authenticating), so it is opened
    /// again each time.
    fn keep_open(&self) -> bool {
        false
    }
}

/// What the book's sealed log says (groups, revocations, the policy), with the revocations
/// its rows record added. The inner Err says why the log cannot be trusted: no group then
/// admits anyone, and the policy cannot be read.
pub fn book_state(
    book: &mut dyn PrincipalBook,
) -> Result<std::result::Result<super::book_log::BookState, String>> {
    let rows = book.book_log()?;
    let key = match rows.is_empty() {
        true => None,
        false => super::seal::key_for_reading()?,
    };
    let mut state = match super::book_log::replay(&rows, key) {
        Ok(s) => s,
        Err(why) => return Ok(Err(why)),
    };
    for p in book.principals()? {
        if p.revoked_at.is_some() {
            state.roster.revoked.insert(p.name);
        }
    }
    Ok(Ok(state))
}

/// Records `changes` in the book's sealed log, with this machine's audit key (made if it
/// has none).
pub fn record(book: &mut dyn PrincipalBook, changes: &[Change]) -> Result<()> {
    if changes.is_empty() {
        return Ok(());
    }
    let key = super::seal::key_for_writing()?;
    book.append_book(changes, key)
}

/// A SQLite project's book, `.prose/principals.db`.
pub struct LocalBook {
    conn: Connection,
    path: PathBuf,
}

impl LocalBook {
    /// Opens the book of the project whose `.prose/` is `prose`. A read of a project with no
    /// book yet gets None; the first write (`create`) makes it, readable by its owner alone.
    pub fn open(prose: &Path, create: bool) -> Result<Option<Self>> {
        let path = prose.join(BOOK_FILE);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(crate::error::refused(format!(
                    "the principals file is a symlink: {}",
                    path.display()
                )));
            }
            Ok(_) => {}
            Err(_) if !create => return Ok(None),
            Err(_) => {
                std::fs::create_dir_all(prose)
                    .with_context(|| format!("could not create {}", prose.display()))?;
                super::seal::owner_only()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)
                    .with_context(|| format!("could not create {}", path.display()))?;
            }
        }
        let conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .with_context(|| format!("could not open {}", path.display()))?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version > VERSION {
            return Err(crate::error::refused(format!(
                "{} is of a newer prose-state (version {version}): upgrade prose-state",
                path.display()
            )));
        }
        if version < VERSION {
            conn.execute_batch(&format!(
                "BEGIN IMMEDIATE; {SCHEMA} PRAGMA user_version = {VERSION}; COMMIT;"
            ))
            .with_context(|| format!("could not set up {}", path.display()))?;
        }
        Ok(Some(LocalBook { conn, path }))
    }
}

fn row(r: &rusqlite::Row) -> rusqlite::Result<PrincipalRow> {
    Ok(PrincipalRow {
        name: r.get(0)?,
        kind: r.get(1)?,
        token_hash: r.get(2)?,
        created_at: r.get(3)?,
        revoked_at: r.get(4)?,
    })
}

fn book_row(r: &rusqlite::Row) -> rusqlite::Result<BookEvent> {
    Ok(BookEvent {
        seq: r.get(0)?,
        at: r.get(1)?,
        actor: r.get(2)?,
        event: r.get(3)?,
        principal: r.get(4)?,
        grp: r.get(5)?,
        value: r.get(6)?,
        prev_hash: r.get(7)?,
        hash: r.get(8)?,
        seal: r.get(9)?,
    })
}

const SELECT: &str = "SELECT name, kind, token_hash, created_at, revoked_at FROM principals";

impl PrincipalBook for LocalBook {
    fn principals(&mut self) -> Result<Vec<PrincipalRow>> {
        let mut s = self.conn.prepare(&format!("{SELECT} ORDER BY name"))?;
        let rows = s.query_map([], row)?.collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    fn principal(&mut self, name: &str) -> Result<Option<PrincipalRow>> {
        Ok(self
            .conn
            .query_row(&format!("{SELECT} WHERE name = ?1"), [name], row)
            .optional()?)
    }

    fn add_principal(&mut self, p: &PrincipalRow) -> Result<bool> {
        let n = self.conn.execute(
            "INSERT INTO principals (name, kind, token_hash, created_at, revoked_at)
             VALUES (?1, ?2, ?3, ?4, NULL)
             ON CONFLICT (name) DO UPDATE SET kind = ?2, token_hash = ?3, created_at = ?4,
                 revoked_at = NULL
             WHERE principals.revoked_at IS NOT NULL",
            params![p.name, p.kind, p.token_hash, p.created_at],
        )?;
        Ok(n == 1)
    }

    fn revoke_principal(&mut self, name: &str, now: &str) -> Result<bool> {
        let n = self.conn.execute(
            "UPDATE principals SET revoked_at = ?2 WHERE name = ?1 AND revoked_at IS NULL",
            params![name, now],
        )?;
        Ok(n == 1)
    }

    fn setting(&mut self, key: &str) -> Result<Option<String>> {
        Ok(self
            .conn
            .query_row("SELECT value FROM settings WHERE key = ?1", [key], |r| {
                r.get(0)
            })
            .optional()?)
    }

    fn set_setting(&mut self, key: &str, value: &str) -> Result<()> {
        self.conn.execute(
            "INSERT INTO settings (key, value) VALUES (?1, ?2)
             ON CONFLICT (key) DO UPDATE SET value = ?2",
            params![key, value],
        )?;
        Ok(())
    }

    fn book_place(&self) -> String {
        self.path.display().to_string()
    }

    fn book_log(&mut self) -> Result<Vec<BookEvent>> {
        let mut s = self
            .conn
            .prepare(&format!("SELECT {BOOK_COLUMNS} FROM book_log ORDER BY seq"))?;
        let rows = s
            .query_map([], book_row)?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    fn append_book(&mut self, changes: &[Change], key: &Key) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let mut tip = tx
            .query_row(
                &format!("SELECT {BOOK_COLUMNS} FROM book_log ORDER BY seq DESC LIMIT 1"),
                [],
                book_row,
            )
            .optional()?;
        for c in changes {
            let e = super::book_log::sealed(tip.as_ref(), c, key);
            tx.execute(
                &format!("INSERT INTO book_log ({BOOK_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"),
                params![e.seq, e.at, e.actor, e.event, e.principal, e.grp, e.value, e.prev_hash, e.hash, e.seal],
            )?;
            tip = Some(e);
        }
        tx.commit()?;
        Ok(())
    }
}
