//! A PostgreSQL project's principals: `openprose.principals` and `openprose.settings`, one
//! statement a method (see `store::principals`).

use super::{PgStore, Statements};
use crate::store::book_log::{BookEvent, Change};
use crate::store::principals::{PrincipalBook, PrincipalRow, BOOK_COLUMNS};
use crate::store::seal::Key;
use anyhow::Result;
use postgres::error::SqlState;

const SELECT: &str =
    "SELECT name, kind, token_hash, created_at, revoked_at FROM openprose.principals";

fn row(r: &postgres::Row) -> PrincipalRow {
    PrincipalRow {
        name: r.get(0),
        kind: r.get(1),
        token_hash: r.get(2),
        created_at: r.get(3),
        revoked_at: r.get(4),
    }
}

fn book_row(r: &postgres::Row) -> BookEvent {
    BookEvent {
        seq: r.get(0),
        at: r.get(1),
        actor: r.get(2),
        event: r.get(3),
        principal: r.get(4),
        grp: r.get(5),
        value: r.get(6),
        prev_hash: r.get(7),
        hash: r.get(8),
        seal: r.get(9),
    }
}

/// A read of a schema older than the tables: nothing there yet (a read never upgrades).
fn absent(e: &postgres::Error) -> bool {
    e.code() == Some(&SqlState::UNDEFINED_TABLE)
}

impl PrincipalBook for PgStore {
    fn principals(&mut self) -> Result<Vec<PrincipalRow>> {
        match self.client.query(&format!("{SELECT} ORDER BY name"), &[]) {
            Ok(rows) => Ok(rows.iter().map(row).collect()),
            Err(e) if absent(&e) => Ok(Vec::new()),
            Err(e) => Err(self.err()(e)),
        }
    }

    fn principal(&mut self, name: &str) -> Result<Option<PrincipalRow>> {
        match self
            .client
            .query_opt(&format!("{SELECT} WHERE name = $1"), &[&name])
        {
            Ok(r) => Ok(r.as_ref().map(row)),
            Err(e) if absent(&e) => Ok(None),
            Err(e) => Err(self.err()(e)),
        }
    }

    fn add_principal(&mut self, p: &PrincipalRow) -> Result<bool> {
        self.prepare_write()?;
        let n = self.all(
            "INSERT INTO openprose.principals (name, kind, token_hash, created_at, revoked_at)
             VALUES ($1, $2, $3, $4, NULL)
             ON CONFLICT (name) DO UPDATE SET kind = $2, token_hash = $3, created_at = $4,
                 revoked_at = NULL
             WHERE openprose.principals.revoked_at IS NOT NULL
             RETURNING 1",
            &[&p.name, &p.kind, &p.token_hash, &p.created_at],
            |_| (),
        )?;
        Ok(n.len() == 1)
    }

    fn revoke_principal(&mut self, name: &str, now: &str) -> Result<bool> {
        self.prepare_write()?;
        let n = self.all(
            "UPDATE openprose.principals SET revoked_at = $2
             WHERE name = $1 AND revoked_at IS NULL RETURNING 1",
            &[&name, &now],
            |_| (),
        )?;
        Ok(n.len() == 1)
    }

    fn setting(&mut self, key: &str) -> Result<Option<String>> {
        match self.client.query_opt(
            "SELECT value FROM openprose.settings WHERE key = $1",
            &[&key],
        ) {
            Ok(r) => Ok(r.map(|r| r.get(0))),
            Err(e) if absent(&e) => Ok(None),
            Err(e) => Err(self.err()(e)),
        }
    }

    fn set_setting(&mut self, key: &str, value: &str) -> Result<()> {
        self.prepare_write()?;
        self.exec(
            "INSERT INTO openprose.settings (key, value) VALUES ($1, $2)
             ON CONFLICT (key) DO UPDATE SET value = $2",
            &[&key, &value],
        )
    }

    fn book_place(&self) -> String {
        self.shown_url.clone()
    }

    fn keep_open(&self) -> bool {
        true
    }

    fn book_log(&mut self) -> Result<Vec<BookEvent>> {
        match self.client.query(
            &format!("SELECT {BOOK_COLUMNS} FROM openprose.book_log ORDER BY seq"),
            &[],
        ) {
            Ok(rows) => Ok(rows.iter().map(book_row).collect()),
            Err(e) if absent(&e) => Ok(Vec::new()),
            Err(e) => Err(self.err()(e)),
        }
    }

    fn append_book(&mut self, changes: &[Change], key: &Key) -> Result<()> {
        self.prepare_write()?;
        let done = (|| {
            let mut tx = self.client.transaction()?;
            // One writer at a time: each row chains to the one before it.
            tx.batch_execute("LOCK TABLE openprose.book_log IN EXCLUSIVE MODE")?;
            let mut tip = tx
                .query_opt(
                    &format!(
                        "SELECT {BOOK_COLUMNS} FROM openprose.book_log ORDER BY seq DESC LIMIT 1"
                    ),
                    &[],
                )?
                .as_ref()
                .map(book_row);
            for c in changes {
                let e = crate::store::book_log::sealed(tip.as_ref(), c, key);
                tx.execute(
                    &format!(
                        "INSERT INTO openprose.book_log ({BOOK_COLUMNS})
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
                    ),
                    &[
                        &e.seq,
                        &e.at,
                        &e.actor,
                        &e.event,
                        &e.principal,
                        &e.grp,
                        &e.value,
                        &e.prev_hash,
                        &e.hash,
                        &e.seal,
                    ],
                )?;
                tip = Some(e);
            }
            tx.commit()
        })();
        done.map_err(self.err())
    }
}
