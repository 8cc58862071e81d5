//! The principals who authenticate with a token, and the project's settings: kept in
//! `.prose/principals.db` (mode 0600) for a SQLite project, or in the server's
//! `openprose.principals` and `openprose.settings` for a project on PostgreSQL (where every
//! machine of the team checks the same tokens). A token is never stored, only its Argon2id
//! hash; what a token is and how it is checked is `crate::services::auth`'s.

use anyhow::{Context as _, Result};
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};

use super::book_log::{BookEvent, BookState, Change, Voucher};
use super::signatures::SignsBook;

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
    /// Where the book is when its place has no identity (a SQLite project with no id yet):
    /// its canonical path. See [`anchor_name`].
    fn path_place(&self) -> String;
    /// The book's sealed log (`book_log`), every row.
    fn book_log(&mut self) -> Result<Vec<BookEvent>>;
    /// Appends `change` after the log's newest row, vouched for by `by`.
    fn append_book(&mut self, change: &Change, by: Voucher) -> Result<()>;
    /// The identity of the book's place, which its log binds it to: the project's id for a
    /// SQLite project (`.prose/project-id`, made when `create` and missing), the server's
    /// `system_identifier` and the database's name on PostgreSQL.
    fn identity(&mut self, create: bool) -> Result<Option<String>>;

    /// Whether a long-lived process (`serve`) may keep this book open between uses: a
    /// server's connection reads its rows afresh; a local file could be replaced under an
    /// open connection (a book removed by hand would go on authenticating), so it is opened
    /// again each time.
    fn keep_open(&self) -> bool;
    /// What the process carries to its stores: the audit key the log is sealed with.
    fn wiring(&self) -> &'static super::Wiring;
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
    /// Where the book is when its place has no identity (see [`PrincipalBook::path_place`]).
    fn anchored_place(&self) -> String {
        self.place()
    }
    /// See [`PrincipalBook::keep_open`].
    fn keep(&self) -> bool;
    /// See [`PrincipalBook::identity`].
    fn place_identity(&mut self, create: bool) -> Result<Option<String>>;
    /// See [`PrincipalBook::wiring`].
    fn wiring(&self) -> &'static super::Wiring;
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

    fn wiring(&self) -> &'static super::Wiring {
        BookStatements::wiring(self)
    }

    fn path_place(&self) -> String {
        self.anchored_place()
    }

    fn book_log(&mut self) -> Result<Vec<BookEvent>> {
        let rows = self.read(&format!("{BOOK_SELECT} ORDER BY seq"), &[])?;
        Ok(rows.into_iter().map(book_row).collect())
    }

    fn append_book(&mut self, c: &Change, by: Voucher) -> Result<()> {
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
            let e = super::book_log::sealed(tip.as_ref(), c, by);
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
        Ok(())
    }

    fn identity(&mut self, create: bool) -> Result<Option<String>> {
        self.place_identity(create)
    }

    fn keep_open(&self) -> bool {
        self.keep()
    }
}

/// What the book's sealed log says (tokens, groups, revocations, the policies, the pin),
/// with the revocations its rows record added (a row may take a token away, never give one).
/// The inner Err says why the log cannot be trusted here: broken, cut at its end (it no
/// longer holds the row this user anchored), or bound to another place (copied here). Such a
/// book admits no one, and nothing that needs it can be read.
pub fn book_state(book: &mut dyn PrincipalBook) -> Result<std::result::Result<BookState, String>> {
    let here = book.identity(false)?;
    let place = anchor_name(book, here.as_deref());
    read_log(book, &place, Binding::Here(here.as_deref()))
}

/// [`book_state`], as the holder of a signing key about to pin it reads the book: rows sealed
/// with an audit key it does not hold are taken as they chain (its pin will vouch for them).
pub fn book_state_to_pin(
    book: &mut dyn PrincipalBook,
) -> Result<std::result::Result<BookState, String>> {
    let here = book.identity(false)?;
    let place = anchor_name(book, here.as_deref());
    read_log(book, &place, Binding::Pinning(here.as_deref()))
}

/// What the book's anchor is named by: the identity of its place (`here`, see
/// [`PrincipalBook::identity`]), which no spelling of a path or a URL changes, and which a
/// book copied or rolled back to another directory with its project's id keeps; for a SQLite
/// project with no id yet, the book's canonical path.
fn anchor_name(book: &dyn PrincipalBook, here: Option<&str>) -> String {
    here.map_or_else(|| book.path_place(), str::to_string)
}

/// Where a book is read, as its binding is checked.
#[derive(Debug, Clone, Copy)]
pub enum Binding<'a> {
    /// At the place with this identity (None: a project with no id).
    Here(Option<&'a str>),
    /// There, by the key's holder about to pin it: rows sealed with an audit key this reader
    /// does not hold are taken as they chain, since the pin's signature vouches for them.
    Pinning(Option<&'a str>),
    /// Anywhere, and against no anchor: a re-binding, which accepts the book as it is here.
    Rebinding,
}

/// Whether a book whose log says `state` may be read at the place whose identity is `here`:
/// a book bound elsewhere may not (one never bound, from before books were, may).
pub fn bound_here(state: &BookState, here: Option<&str>) -> std::result::Result<(), String> {
    match &state.bound {
        Some(bound) if here != Some(bound.as_str()) => Err(format!(
            "the principals book is bound to {} and this is {}: it was copied or moved here (if it was moved or restored on purpose, re-bind it with `prose-state principals rebind`)",
            crate::error::shown(bound),
            here.map_or("a project with no id".to_string(), crate::error::shown),
        )),
        _ => Ok(()),
    }
}

/// The log as [`book_state`] reads it.
fn read_log(
    book: &mut dyn PrincipalBook,
    place: &str,
    binding: Binding,
) -> Result<std::result::Result<BookState, String>> {
    // The anchor before the log: an anchor is moved only after the rows it names commit, so
    // the log read after it holds them. Read the other way round, a writer appending and
    // anchoring between the two reads would look like rows cut from the end.
    let home = book.wiring().home();
    let anchor = match binding {
        Binding::Here(_) | Binding::Pinning(_) => {
            super::seal::anchored(home.as_deref(), place, BOOK_ANCHOR)
        }
        Binding::Rebinding => None,
    };
    let rows = book.book_log()?;
    let key = match rows.is_empty() {
        true => None,
        false => book.wiring().key_for_reading()?,
    };
    let trusted = || super::signatures::own_public(home.as_deref());
    let state = match judge(
        &rows,
        &book.principals()?,
        key,
        anchor.as_ref(),
        binding,
        &trusted,
    ) {
        Ok(s) => s,
        Err(why) => return Ok(Err(why)),
    };
    // A reader moves its anchor forward to a tip it checked whole: the approval page, run as
    // the approver, anchors a signed book it never wrote.
    if let (Binding::Here(_), None, Some((seq, hash))) = (binding, &state.unchecked, &state.tip) {
        if anchor.as_ref().is_none_or(|a| a.seq < *seq) {
            let head = super::seal::Anchor {
                seq: *seq,
                hash: hash.clone(),
                named: None,
            };
            let _ = super::seal::anchor(home.as_deref(), place, BOOK_ANCHOR, &head);
        }
    }
    Ok(Ok(state))
}

/// What a book's log (`rows`) says, read with `key` (None: this user has no audit key), at
/// the place `binding` names, against `anchor` (the row this user last saw vouched for), by a
/// reader whose own serve key is `trusted()`, with the revocations the book's `principals`
/// rows add. Err, with why, when the log cannot be
/// trusted there: broken, bound elsewhere, or cut below the anchor.
pub fn judge(
    rows: &[BookEvent],
    principals: &[PrincipalRow],
    key: Option<&super::seal::Key>,
    anchor: Option<&super::seal::Anchor>,
    binding: Binding,
    trusted: &dyn Fn() -> Option<String>,
) -> std::result::Result<BookState, String> {
    let other_keys = matches!(binding, Binding::Rebinding | Binding::Pinning(_));
    let mut state = super::book_log::replay(rows, key, other_keys, trusted)?;
    if let Binding::Here(here) | Binding::Pinning(here) = binding {
        bound_here(&state, here)?;
    }
    // Anchored: the row this user last saw vouched for must still be there, so a log cut at
    // its end (or removed whole) is found by whoever holds the anchor.
    if let Some(a) = anchor {
        if !rows.iter().any(|r| r.seq == a.seq && r.hash == a.hash) {
            return Err(format!(
                "the principals book's log no longer holds row {} as this user last saw it: rows were cut or changed (a book emptied, restored or made anew on purpose is accepted as it is by `prose-state principals rebind`)",
                a.seq
            ));
        }
    }
    for p in principals {
        if p.revoked_at.is_some() {
            state.roster.revoked.insert(p.name.clone());
        }
    }
    Ok(state)
}

/// Why a book's row is no token its log issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unissued {
    /// The log issued the principal a token, with another hash: as any wrong token.
    OtherHash,
    /// The log issued the principal no live token; why, to say.
    NotIssued(String),
}

/// The live rows of the book (not revoked in their row) that are no token its log issued,
/// each with why: what `principals` and `doctor` say of a row written behind prose-state's
/// back.
pub fn not_issued(state: &BookState, rows: &[PrincipalRow]) -> Vec<(String, String)> {
    rows.iter()
        .filter(|r| r.revoked_at.is_none())
        .filter_map(|r| {
            let why = match unissued(state, r)? {
                Unissued::OtherHash => {
                    "its token's hash is not the one the book's sealed log issued".to_string()
                }
                Unissued::NotIssued(why) => why,
            };
            Some((r.name.clone(), why))
        })
        .collect()
}

/// Why the book's row `row` is no token the log (`state`) issued, if it is not: the log must
/// have issued that principal a token with this hash's digest, and not revoked it. (Whether
/// a secret matches the hash is the caller's one Argon2 check.)
pub fn unissued(state: &BookState, row: &PrincipalRow) -> Option<Unissued> {
    let digest = crate::model::sha256_tag(&row.token_hash);
    match state.tokens.get(&row.name) {
        Some(Some(sealed))
            if !state.roster.revoked.contains(&row.name)
                && row.revoked_at.is_none()
                && crate::model::same_secret(sealed, &digest) =>
        {
            None
        }
        Some(Some(_)) if !state.roster.revoked.contains(&row.name) && row.revoked_at.is_none() => {
            Some(Unissued::OtherHash)
        }
        _ => Some(Unissued::NotIssued(format!(
            "the token of {} is not one the principals book's sealed log issued (written behind prose-state's back, revoked, or issued before issuances were logged): issue it again with `prose-state principals revoke` and `principals add`",
            crate::error::shown(&row.name)
        ))),
    }
}

/// Records `changes` in the book's sealed log, each vouched for as the log requires: by the
/// pinned key's holder (`signer`) once a key is pinned, and a pin by the key it pins; by this
/// user's audit key (made if none) otherwise. Refused, before anything is written, when this
/// process cannot vouch for them (exit 4) or the log cannot be trusted (exit 9; a book whose
/// log is foreign may only be re-bound, `rebind`). A book not yet bound to its place (a new
/// one, or one from before books were bound) is bound first. `rows` writes the book's rows,
/// after every check and before the log: a log append that fails then leaves rows the log
/// does not vouch for, which count for nothing.
pub fn record(
    book: &mut dyn PrincipalBook,
    changes: &[Change],
    signer: Option<&dyn SignsBook>,
    rebind: bool,
    rows: &mut dyn FnMut(&mut dyn PrincipalBook) -> Result<()>,
) -> Result<()> {
    if changes.is_empty() && !rebind {
        return Ok(());
    }
    // A book emptied behind this user's back is found by its anchor (below), never begun
    // anew: only a re-binding forgets the anchor.
    // A re-binding accepts the book as it is here, moved or restored on purpose by someone
    // who may change it: its log must still be whole (chained, sealed or signed), but no
    // earlier anchor or binding of this place speaks for it.
    let pinning = changes
        .iter()
        .any(|c| super::book_log::pins(c.event, c.grp, c.value).is_some());
    let state = if rebind {
        let place = book.path_place();
        read_log(book, &place, Binding::Rebinding)?
    } else if pinning {
        book_state_to_pin(book)?
    } else {
        book_state(book)?
    };
    let state = match state {
        Ok(s) => s,
        Err(why) => {
            return Err(crate::error::tampered(format!(
                "{why}: the principals book cannot be changed until it is put right"
            )))
        }
    };
    let here = book.identity(true)?.ok_or_else(|| {
        anyhow::anyhow!("the principals book's place has no identity to bind it to")
    })?;
    let place = anchor_name(book, Some(&here));
    let mut all: Vec<Change> = Vec::new();
    let at = changes.first().map_or("", |c| c.at);
    let actor = changes.first().and_then(|c| c.actor);
    // An authorization, then a pin, go first, so that every row after the pin is its key's
    // (a binding included).
    let pins = |c: &&Change| super::book_log::pins(c.event, c.grp, c.value).is_some();
    let authorizes = |c: &&Change| {
        c.event == super::book_log::POLICY && c.grp == Some(super::book_log::KEY_AUTHORIZED)
    };
    all.extend(changes.iter().filter(authorizes));
    all.extend(changes.iter().filter(pins));
    if state.bound.as_deref() != Some(here.as_str()) {
        all.push(Change {
            event: super::book_log::BIND,
            principal: None,
            grp: None,
            value: Some(&here),
            actor,
            at,
        });
    }
    all.extend(changes.iter().filter(|c| !pins(c) && !authorizes(c)));
    // Who vouches for each row, decided before anything is written.
    let mut pinned = state.pinned.clone();
    let mut audit = None;
    let mut plan = Vec::with_capacity(all.len());
    for c in &all {
        let pin = super::book_log::pins(c.event, c.grp, c.value);
        let needs = pinned.as_deref().or(pin);
        let by = match needs {
            Some(key) => match signer.filter(|s| s.public() == key) {
                Some(s) => Voucher::Signing(s),
                None => {
                    return Err(crate::error::refused(format!(
                        "{}: it must be signed by {key}, which this user does not hold; run it as the user the approval page runs as (`prose-state serve --show-key` prints its key)",
                        if pinned.is_some() {
                            "the principals book is pinned to a signing key, and every change to it is the key holder's"
                        } else {
                            "a signing key is pinned by its holder"
                        }
                    )))
                }
            },
            None => Voucher::Audit(match audit {
                Some(k) => k,
                None => audit.insert(book.wiring().key_for_writing()?),
            }),
        };
        if c.event == super::book_log::POLICY && c.grp == Some(super::book_log::SIGNED_KEY) {
            pinned = pin.map(str::to_string);
        }
        plan.push((c, by));
    }
    rows(book)?;
    let home = book.wiring().home();
    if rebind {
        super::seal::forget_anchor(home.as_deref(), &place, BOOK_ANCHOR);
    }
    for (c, by) in plan {
        book.append_book(c, by)?;
    }
    // The anchor moves to the newest row, outside the book (`~/.prose/anchors/`).
    if let Some(tip) = book.book_log()?.into_iter().max_by_key(|r| r.seq) {
        let head = super::seal::Anchor {
            seq: tip.seq,
            hash: tip.hash,
            named: None,
        };
        if let Err(e) = super::seal::anchor(home.as_deref(), &place, BOOK_ANCHOR, &head) {
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
    wiring: &'static super::Wiring,
}

impl LocalBook {
    /// Opens the book of the project whose `.prose/` is `prose`. A read of a project with no
    /// book yet gets None; the first write (`create`) makes it, readable by its owner alone.
    pub fn open(
        prose: &Path,
        create: bool,
        wiring: &'static super::Wiring,
    ) -> Result<Option<Self>> {
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
        Ok(Some(LocalBook { conn, path, wiring }))
    }
}

impl BookStatements for LocalBook {
    fn read(&mut self, sql: &str, args: &[&str]) -> Result<Vec<Vec<Option<String>>>> {
        // A table that is not there (dropped by hand) holds nothing, as on a server: its log
        // then no longer holds the anchored row.
        let mut s = match self.conn.prepare(&local(sql)) {
            Ok(s) => s,
            Err(e) if e.to_string().starts_with("no such table") => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
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

    fn anchored_place(&self) -> String {
        std::fs::canonicalize(&self.path)
            .unwrap_or_else(|_| self.path.clone())
            .display()
            .to_string()
    }

    fn keep(&self) -> bool {
        false
    }

    fn wiring(&self) -> &'static super::Wiring {
        self.wiring
    }

    fn place_identity(&mut self, create: bool) -> Result<Option<String>> {
        let prose = self.path.parent().unwrap_or(Path::new("."));
        project_id(prose, create)
    }
}

/// The file under `.prose/` that names the project: a random id made by `init` (or the
/// principals book's first change), which the book binds itself to.
pub const PROJECT_ID_FILE: &str = "project-id";

/// The project's id (`project:` and 32 hex digits) from `.prose/project-id`; made when
/// `create` and there is none. A file that does not hold one names no project.
pub fn project_id(prose: &Path, create: bool) -> Result<Option<String>> {
    let path = prose.join(PROJECT_ID_FILE);
    let valid = |t: &str| {
        let t = t.trim();
        (t.strip_prefix("project:").is_some_and(|h| {
            h.len() == 32
                && h.bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        }))
        .then(|| t.to_string())
    };
    if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(crate::error::refused(format!(
            "the project's id file is a symlink: {}",
            path.display()
        )));
    }
    match std::fs::read_to_string(&path) {
        Ok(t) => return Ok(valid(&t)),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(anyhow::anyhow!("could not read {}: {e}", path.display()))
        }
        Err(_) if !create => return Ok(None),
        Err(_) => {}
    }
    std::fs::create_dir_all(prose)
        .with_context(|| format!("could not create {}", prose.display()))?;
    let mut bytes = [0u8; 16];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut bytes);
    let id = format!("project:{}", crate::model::hex(&bytes));
    // Made whole or not at all, and never over one another process made first.
    let tmp = prose.join(format!(".{PROJECT_ID_FILE}.{}", std::process::id()));
    std::fs::write(&tmp, format!("{id}\n"))
        .with_context(|| format!("could not write {}", tmp.display()))?;
    let linked = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(Some(id)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => project_id(prose, false),
        Err(e) => Err(anyhow::anyhow!("could not write {}: {e}", path.display())),
    }
}

/// A book statement as SQLite takes it: its tables in the file's main schema, `?n` parameters.
fn local(sql: &str) -> String {
    sql.replace("{p}", "").replace('$', "?")
}
