//! A PostgreSQL project's principals: `openprose.principals` and `openprose.settings` (see
//! `store::principals`, which writes the statements).

use super::PgStore;
use crate::store::principals::BookStatements;
use anyhow::Result;
use postgres::error::SqlState;
use postgres::types::ToSql;

/// A book statement on the server: its tables in `openprose`, and its parameters.
fn on_server<'a>(sql: &str, args: &'a [&'a str]) -> (String, Vec<&'a (dyn ToSql + Sync)>) {
    let args = args.iter().map(|a| a as &(dyn ToSql + Sync)).collect();
    (sql.replace("{p}", "openprose."), args)
}

impl BookStatements for PgStore {
    fn read(&mut self, sql: &str, args: &[&str]) -> Result<Vec<Vec<Option<String>>>> {
        let (sql, args) = on_server(sql, args);
        match self.client.query(&sql, &args) {
            Ok(rows) => Ok(rows
                .iter()
                .map(|r| (0..r.len()).map(|i| r.get(i)).collect())
                .collect()),
            // A schema older than the tables: nothing there yet (a read never upgrades).
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => Ok(Vec::new()),
            Err(e) => Err(self.err()(e)),
        }
    }

    fn write(&mut self, sql: &str, args: &[&str]) -> Result<usize> {
        self.prepare_write()?;
        let (sql, args) = on_server(sql, args);
        let n = self.client.execute(&sql, &args).map_err(self.err())?;
        Ok(n as usize)
    }

    fn place(&self) -> String {
        self.shown_url.clone()
    }

    fn keep(&self) -> bool {
        true
    }

    fn wiring(&self) -> &'static crate::store::Wiring {
        self.wiring
    }

    /// The server (its `system_identifier`, made by `initdb`) and the database's name: a book
    /// copied into another database, or restored onto another server, is not bound there.
    fn place_identity(&mut self, _create: bool) -> Result<Option<String>> {
        let row = self
            .client
            .query_one(
                // Qualified: a function of the same name earlier on a search_path some role
                // set would otherwise answer for the server's own.
                "SELECT system_identifier::pg_catalog.text, pg_catalog.current_database()::pg_catalog.text
                   FROM pg_catalog.pg_control_system()",
                &[],
            )
            .map_err(self.err())?;
        let (system, db): (String, String) = (row.get(0), row.get(1));
        Ok(Some(format!("postgres:{system}/{db}")))
    }
}
