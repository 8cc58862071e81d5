//! The principals who authenticate with a token, and the project's settings: kept in
//! `.prose/principals.db` (mode 0600) for a SQLite project, or in the server's
//! `openprose.principals` and `openprose.settings` for a project on PostgreSQL (where every
//! machine of the team checks the same tokens). A token is never stored, only its Argon2id
//! hash; what a token is and how it is checked is `crate::services::auth`'s.

use anyhow::{Context as _, Result};
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};

use super::book_log::{BookEvent, Change};
use super::seal::Key;

/// The log's columns, in [`BookEvent`]'s order (`seq` read as text, as every book column is).
const BOOK_SELECT: &str = "SELECT CAST(seq AS TEXT) AS seq_text, at, actor, event, principal,
    grp, value, prev_hash, hash, seal FROM {p}book_log";

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

/// Where a project's principals are: each method one statement, written once for both
/// stores (see [`BookStatements`]).
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
    fn keep_open(&self) -> bool;
}

/// How a store runs the book's statements: `{p}` stands before each table's name (a server's
/// are in `openprose.`), `$n` for the parameters, and every column is text.
pub(crate) trait BookStatements: Send {
    /// The rows a read returns; none when the book's tables are not there yet (a read never
    /// makes them).
    fn read(&mut self, sql: &str, args: &[&str]) -> Result<Vec<Vec<Option<String>>>>;
    /// Runs a write; how many rows it changed.
    fn write(&mut self, sql: &str, args: &[&str]) -> Result<usize>;
    fn place(&self) -> String;
    /// See [`PrincipalBook::keep_open`].
    fn keep(&self) -> bool;
}

const SELECT: &str = "SELECT name, kind, token_hash, created_at, revoked_at FROM {p}principals";

/// A row of the book's log from `BOOK_SELECT`'s columns.
fn book_row(cells: Vec<Option<String>>) -> BookEvent {
    let mut cells = cells.into_iter();
    let mut text = || cells.next().flatten();
    BookEvent {
        seq: text().and_then(|s| s.parse().ok()).unwrap_or_default(),
        at: text().unwrap_or_default(),
        actor: text(),
        event: text().unwrap_or_default(),
        principal: text(),
        grp: text(),
        value: text(),
        prev_hash: text().unwrap_or_default(),
        hash: text().unwrap_or_default(),
        seal: text().unwrap_or_default(),
    }
}

/// A principal's row from `SELECT`'s columns (each NOT NULL but `revoked_at`).
fn principal_row(cells: Vec<Option<String>>) -> PrincipalRow {
    let mut cells = cells.into_iter();
    let mut text = || cells.next().flatten();
    PrincipalRow {
        name: text().unwrap_or_default(),
        kind: text().unwrap_or_default(),
        token_hash: text().unwrap_or_default(),
        created_at: text().unwrap_or_default(),
        revoked_at: text(),
    }
}

impl<B: BookStatements> PrincipalBook for B {
    fn principals(&mut self) -> Result<Vec<PrincipalRow>> {
        let rows = self.read(&format!("{SELECT} ORDER BY name"), &[])?;
        Ok(rows.into_iter().map(principal_row).collect())
    }

    fn principal(&mut self, name: &str) -> Result<Option<PrincipalRow>> {
        let rows = self.read(&format!("{SELECT} WHERE name = $1"), &[name])?;
        Ok(rows.into_iter().next().map(principal_row))
    }

    fn add_principal(&mut self, p: &PrincipalRow) -> Result<bool> {
        let n = self.write(
            "INSERT INTO {p}principals (name, kind, token_hash, created_at, revoked_at)
             VALUES ($1, $2, $3, $4, NULL)
             ON CONFLICT (name) DO UPDATE SET kind = $2, token_hash = $3, created_at = $4,
                 revoked_at = NULL
             WHERE {p}principals.revoked_at IS NOT NULL",
            &[&p.name, &p.kind, &p.token_hash, &p.created_at],
        )?;
        Ok(n == 1)
    }

    fn revoke_principal(&mut self, name: &str, now: &str) -> Result<bool> {
        let n = self.write(
            "UPDATE {p}principals SET revoked_at = $2 WHERE name = $1 AND revoked_at IS NULL",
            &[name, now],
        )?;
        Ok(n == 1)
    }

    fn setting(&mut self, key: &str) -> Result<Option<String>> {
        let rows = self.read("SELECT value FROM {p}settings WHERE key = $1", &[key])?;
        Ok(rows
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().next().flatten()))
    }

    fn set_setting(&mut self, key: &str, value: &str) -> Result<()> {
        self.write(
            "INSERT INTO {p}settings (key, value) VALUES ($1, $2)
             ON CONFLICT (key) DO UPDATE SET value = $2",
            &[key, value],
        )
        .map(drop)
    }

    fn book_place(&self) -> String {
        self.place()
    }

    fn book_log(&mut self) -> Result<Vec<BookEvent>> {
        let rows = self.read(&format!("{BOOK_SELECT} ORDER BY seq"), &[])?;
        Ok(rows.into_iter().map(book_row).collect())
    }

    fn append_book(&mut self, changes: &[Change], key: &Key) -> Result<()> {
        for c in changes {
            // Chained after the newest row (by number: `seq_text` is not what is ordered): a
            // writer that loses the race for its number (the primary key) reads the new newest
            // row and chains after that.
            for attempt in 0.. {
                if attempt == 100 {
                    return Err(crate::error::busy(
                        "the principals book's log kept changing under this write; try again",
                    ));
                }
                let tip = self
                    .read(&format!("{BOOK_SELECT} ORDER BY seq DESC LIMIT 1"), &[])?
                    .into_iter()
                    .next()
                    .map(book_row);
                let e = super::book_log::sealed(tip.as_ref(), c, key);
                let seq = e.seq.to_string();
                let cell = |v: &Option<String>| v.clone().unwrap_or_default();
                let (actor, principal, grp, value) = (
                    cell(&e.actor),
                    cell(&e.principal),
                    cell(&e.grp),
                    cell(&e.value),
                );
                let n = self.write(
                    "INSERT INTO {p}book_log
                         (seq, at, actor, event, principal, grp, value, prev_hash, hash, seal)
                     VALUES (CAST(CAST($1 AS TEXT) AS BIGINT), $2, NULLIF($3, ''), $4,
                             NULLIF($5, ''), NULLIF($6, ''), NULLIF($7, ''), $8, $9, $10)
                     ON CONFLICT (seq) DO NOTHING",
                    &[
                        &seq,
                        &e.at,
                        &actor,
                        &e.event,
                        &principal,
                        &grp,
                        &value,
                        &e.prev_hash,
                        &e.hash,
                        &e.seal,
                    ],
                )?;
                if n == 1 {
                    break;
                }
            }
        }
        Ok(())
    }

    fn keep_open(&self) -> bool {
        self.keep()
    }
}

/// What the book's sealed log says (groups, revocations, the policy), with the revocations
/// its rows record added. The inner Err says why the log cannot be trusted: no group then
/// admits anyone, and the policy cannot be read.
pub fn book_state(
    book: &mut dyn PrincipalBook,
) -> Result<std::result::Result<super::book_log::BookState, String>> {
    let rows = book.book_log()?;
    // Anchored: the row this machine last sealed must still be there, so a log cut at its end
    // (or removed whole) is found by whoever holds the anchor.
    if let Some(a) = super::seal::anchored(&book.book_place(), BOOK_ANCHOR) {
        if !rows.iter().any(|r| r.seq == a.seq && r.hash == a.hash) {
            return Ok(Err(format!(
                "the principals book's log no longer holds row {} as this machine sealed it: rows were cut or changed",
                a.seq
            )));
        }
    }
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
    // A book whose log is empty begins anew here (made where none was): no earlier anchor
    // speaks for it.
    if book.book_log()?.is_empty() {
        super::seal::forget_anchor(&book.book_place(), BOOK_ANCHOR);
    }
    book.append_book(changes, key)?;
    // The anchor moves to the newest row, outside the book (`~/.prose/anchors/`).
    if let Some(tip) = book.book_log()?.into_iter().max_by_key(|r| r.seq) {
        let head = super::seal::Anchor {
            seq: tip.seq,
            hash: tip.hash,
        };
        if let Err(e) = super::seal::anchor(&book.book_place(), BOOK_ANCHOR, &head) {
            crate::output::warn(&format!(
                "could not anchor the principals book's log: {e:#}"
            ));
        }
    }
    Ok(())
}

/// The name the book's anchor is kept under, beside the runs' (`seal::anchor`).
const BOOK_ANCHOR: &str = "principals-book";

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
        crate::store::sqlite::configure();
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

impl BookStatements for LocalBook {
    fn read(&mut self, sql: &str, args: &[&str]) -> Result<Vec<Vec<Option<String>>>> {
        let mut s = self.conn.prepare(&local(sql))?;
        let n = s.column_count();
        let rows = s
            .query_map(rusqlite::params_from_iter(args), |r| {
                (0..n).map(|i| r.get(i)).collect()
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    fn write(&mut self, sql: &str, args: &[&str]) -> Result<usize> {
        Ok(self
            .conn
            .execute(&local(sql), rusqlite::params_from_iter(args))?)
    }

    fn place(&self) -> String {
        self.path.display().to_string()
    }

    fn keep(&self) -> bool {
        false
    }
}

/// A book statement as SQLite takes it: its tables in the file's main schema, `?n` parameters.
fn local(sql: &str) -> String {
    sql.replace("{p}", "").replace('$', "?")
}
