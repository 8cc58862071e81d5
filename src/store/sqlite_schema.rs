//! A SQLite database's schema: its version, what a binary must understand to read or write
//! it, read shims over an older file, and the forward upgrade.
//!
//! - A read never changes the file. An older file is read through temporary views
//!   (`CREATE TEMP VIEW`, private to the connection) that add the columns and tables it lacks
//!   as NULLs.
//! - The first write upgrades an older file, in one transaction: missing tables, columns and
//!   indexes are added. A missing column whose default is not a constant (`datetime('now')`)
//!   cannot be added by `ALTER TABLE`, so its table is rebuilt with the embedded definition,
//!   every row and every user column kept. A refused or failed upgrade leaves the file
//!   byte-identical, journal mode included: WAL is switched on only after it commits.
//! - A newer file is read and written as long as this binary is at least the `min_reader`
//!   and `min_writer` the newer binary recorded in the file's stamp.
//!
//! The stamp is `PRAGMA user_version` = version + 1000 × min_writer + 1000000 × min_reader,
//! in the header like SQLite's own read and write format versions: reading it is the one
//! pragma read every open already makes, and it commits with the upgrade that sets it.

use super::{access_for, Access, Stamp};
use crate::error::refused;
use anyhow::{anyhow, Context, Result};
use rusqlite::{params, Connection, TransactionBehavior};
use std::path::Path;

/// One kind of database prose-state keeps: its embedded schema, its version, what a binary
/// must understand to read and write it, and the tables that show a file is one of them.
pub struct Schema {
    pub sql: &'static str,
    pub version: i64,
    pub min_reader: i64,
    pub min_writer: i64,
    pub what: &'static str,
    pub core: &'static [&'static str],
    /// An empty file is a new one (agents.db is created on first use).
    pub empty_is_new: bool,
}

/// The column as `pragma_table_info` reports it.
pub struct ColumnDef {
    pub name: String,
    pub decl_type: String,
    /// The default as written, without the parentheses around an expression.
    pub default: Option<String>,
    pub pk: bool,
}

pub fn columns(
    conn: &Connection,
    schema_name: &str,
    table: &str,
) -> rusqlite::Result<Vec<ColumnDef>> {
    let mut stmt = conn.prepare_cached(
        "SELECT name, type, dflt_value, pk FROM pragma_table_info(?1, ?2) ORDER BY cid",
    )?;
    let rows = stmt.query_map(params![table, schema_name], |r| {
        Ok(ColumnDef {
            name: r.get(0)?,
            decl_type: r.get(1)?,
            default: r.get(2)?,
            pk: r.get::<_, i64>(3)? > 0,
        })
    })?;
    rows.collect()
}

/// Whether a default, as `pragma_table_info` gives it, is a literal that `ALTER TABLE ADD
/// COLUMN` accepts: a number, a string or blob literal, NULL, TRUE or FALSE. Anything else is
/// an expression (`datetime('now')`, reported without its parentheses), which it refuses.
pub fn is_literal(default: &str) -> bool {
    let d = default.trim();
    let upper = d.to_ascii_uppercase();
    if matches!(upper.as_str(), "NULL" | "TRUE" | "FALSE") {
        return true;
    }
    let quoted = |q: char| {
        d.len() >= 2
            && d.starts_with(q)
            && d.ends_with(q)
            && !d[1..d.len() - 1].replace("''", "").contains(q)
    };
    if quoted('\'') || ((upper.starts_with("X'")) && d.ends_with('\'')) {
        return true;
    }
    let unsigned = d.strip_prefix(['+', '-']).unwrap_or(d);
    !unsigned.is_empty()
        && unsigned.chars().all(|c| c.is_ascii_digit() || c == '.')
        && unsigned.parse::<f64>().is_ok()
}

/// A default as DDL: a literal as it is, an expression in the parentheses
/// `pragma_table_info` dropped.
pub fn default_ddl(default: &str) -> String {
    if is_literal(default) {
        default.trim().to_string()
    } else {
        format!("({})", default.trim())
    }
}

fn quoted(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// The columns of `ours` that `present` lacks.
fn missing<'a>(ours: &'a [ColumnDef], present: &[ColumnDef]) -> Vec<&'a ColumnDef> {
    ours.iter()
        .filter(|c| !present.iter().any(|p| p.name.eq_ignore_ascii_case(&c.name)))
        .collect()
}

/// `ALTER TABLE ... ADD COLUMN` of `col` on `table`, with its type and `default` (DDL).
fn add_column(table: &str, col: &ColumnDef, default: Option<String>) -> String {
    let mut ddl = format!(
        "ALTER TABLE main.{} ADD COLUMN {}",
        quoted(table),
        quoted(&col.name)
    );
    if !col.decl_type.is_empty() {
        ddl.push(' ');
        ddl.push_str(&col.decl_type);
    }
    if let Some(default) = default {
        ddl.push_str(" DEFAULT ");
        ddl.push_str(&default);
    }
    ddl
}

/// The embedded schema's tables (name, CREATE statement and columns), and its indexes and
/// triggers (kind, name and table).
struct Expected {
    tables: Vec<(String, String, Vec<ColumnDef>)>,
    others: Vec<(String, String, String)>,
}

fn expected(schema: &Schema) -> Result<Expected> {
    let conn = Connection::open_in_memory()?;
    conn.execute_batch(&schema.stored_sql())?;
    let mut stmt = conn.prepare(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid",
    )?;
    let found: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut tables = Vec::new();
    for (name, sql) in found {
        let cols = columns(&conn, "main", &name)?;
        tables.push((name, sql, cols));
    }
    let others = conn
        .prepare(
            "SELECT type, name, tbl_name FROM sqlite_master
             WHERE type IN ('index', 'trigger') AND name NOT LIKE 'sqlite_%' ORDER BY rowid",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(Expected { tables, others })
}

impl Schema {
    /// The schema as it is stored in a database: without its comments and indentation.
    /// SQLite keeps each CREATE statement's text and parses all of it whenever a process
    /// first touches the database, which every command is; shorter text opens faster.
    pub fn stored_sql(&self) -> String {
        let mut out = String::with_capacity(self.sql.len());
        for line in self.sql.lines() {
            // No string literal in the embedded schema holds `--`.
            let code = line.split("--").next().unwrap_or("").trim();
            if !code.is_empty() {
                out.push_str(code);
                out.push('\n');
            }
        }
        out
    }

    /// The `user_version` this build stamps.
    pub const fn stamp(&self) -> i64 {
        self.version + 1_000 * self.min_writer + 1_000_000 * self.min_reader
    }
}

/// A stamp read back. Versions before 4 stamped the bare version (what they ask of readers and
/// writers is then nothing newer than themselves). A newer version whose stamp does not say
/// what it asks came from no release that knows the rule: it is taken to ask for itself.
pub fn decode(stamp: i64) -> Stamp {
    let version = stamp.rem_euclid(1_000);
    let mut min_writer = (stamp / 1_000).rem_euclid(1_000);
    let mut min_reader = stamp / 1_000_000;
    if min_writer == 0 || min_reader == 0 {
        let unknown = if version > 3 { version } else { 0 };
        min_writer = if min_writer == 0 { unknown } else { min_writer };
        min_reader = if min_reader == 0 { unknown } else { min_reader };
    }
    Stamp {
        version,
        min_reader,
        min_writer,
    }
}

pub fn stamp(conn: &Connection) -> rusqlite::Result<Stamp> {
    let raw: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    Ok(decode(raw))
}

/// What this binary may do with the database at `path`, checked without writing anything.
pub fn check(
    conn: &Connection,
    schema: &Schema,
    path: &Path,
    err: &dyn Fn(rusqlite::Error) -> anyhow::Error,
) -> Result<Access> {
    let stamp = stamp(conn).map_err(err)?;
    let access = access_for(&stamp, schema.version).map_err(|why| {
        refused(format!(
            "{why}; upgrade prose-state, the db was left unchanged: {}",
            path.display()
        ))
    })?;
    if access == Access::Older {
        let tables: Vec<String> = conn
            .prepare("SELECT name FROM main.sqlite_master WHERE type = 'table'")
            .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
            .map_err(err)?;
        let ours = tables.iter().any(|t| schema.core.contains(&t.as_str()))
            || (schema.empty_is_new && tables.is_empty());
        if !ours {
            return Err(anyhow!(
                "not a {} (it has none of the {} tables): {}",
                schema.what,
                schema.core.join(", "),
                path.display()
            ));
        }
    }
    Ok(access)
}

/// Names of the temporary views of this connection.
const SHIM_MARK: &str = "prose read shim";

/// Lets an older file be read by this build's statements, changing nothing in it: a
/// temporary view shadows each table that lacks columns (NULL for each) or is missing.
pub fn install_read_shims(conn: &Connection, schema: &Schema) -> Result<()> {
    let expected = expected(schema)?;
    let mut ddl = String::new();
    for (table, _, cols) in &expected.tables {
        let present = columns(conn, "main", table)?;
        let missing = missing(cols, &present);
        if missing.is_empty() {
            continue;
        }
        let nulls: Vec<String> = missing
            .iter()
            .map(|c| format!("NULL AS {}", quoted(&c.name)))
            .collect();
        let body = if present.is_empty() {
            format!("SELECT {} LIMIT 0", nulls.join(", "))
        } else {
            // Statements that order by rowid need it through the view too.
            let integer_key = present
                .iter()
                .any(|p| p.pk && p.decl_type.eq_ignore_ascii_case("INTEGER"));
            let rowid = if integer_key { "" } else { "rowid AS rowid, " };
            format!(
                "SELECT {rowid}*, {} FROM main.{}",
                nulls.join(", "),
                quoted(table)
            )
        };
        ddl.push_str(&format!(
            "CREATE TEMP VIEW IF NOT EXISTS {} AS {body} /* {SHIM_MARK} */;\n",
            quoted(table)
        ));
    }
    if !ddl.is_empty() {
        conn.execute_batch(&ddl)?;
    }
    Ok(())
}

fn drop_read_shims(conn: &Connection) -> rusqlite::Result<()> {
    let views: Vec<String> = conn
        .prepare("SELECT name FROM temp.sqlite_master WHERE type = 'view' AND sql LIKE ?1")?
        .query_map([format!("%{SHIM_MARK}%")], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for v in views {
        conn.execute_batch(&format!("DROP VIEW temp.{}", quoted(&v)))?;
    }
    Ok(())
}

/// One change an upgrade makes.
#[derive(Debug, Clone)]
pub struct Step {
    pub table: String,
    /// What is done, in words.
    pub action: String,
    /// The table is rebuilt (every row copied): only `prose-state migrate` does that.
    pub rebuild: bool,
}

/// What upgrading this older file would change, table by table.
pub fn plan(conn: &Connection, schema: &Schema) -> Result<Vec<Step>> {
    plan_against(conn, &expected(schema)?)
}

fn plan_against(conn: &Connection, expected: &Expected) -> Result<Vec<Step>> {
    let mut steps = Vec::new();
    for (table, _, cols) in &expected.tables {
        let present = columns(conn, "main", table)?;
        if present.is_empty() {
            steps.push(Step {
                table: table.clone(),
                action: format!("create table {table}"),
                rebuild: false,
            });
            continue;
        }
        let missing = missing(cols, &present);
        if missing.is_empty() {
            continue;
        }
        let names: Vec<&str> = missing.iter().map(|c| c.name.as_str()).collect();
        let rebuild = !missing
            .iter()
            .all(|c| !c.pk && c.default.as_deref().is_none_or(is_literal));
        steps.push(Step {
            table: table.clone(),
            action: if rebuild {
                format!(
                    "rebuild table {table} to add {} (a default that is not a constant, which ALTER TABLE cannot add; every row is copied)",
                    names.join(", ")
                )
            } else {
                format!("add to {table}: {}", names.join(", "))
            },
            rebuild,
        });
    }
    // Indexes and triggers missing from tables that are kept (a new table comes with its own).
    for (kind, name, table) in &expected.others {
        if steps
            .iter()
            .any(|s| &s.table == table && s.action.starts_with("create table"))
        {
            continue;
        }
        let present: i64 = conn.query_row(
            "SELECT COUNT(*) FROM main.sqlite_master WHERE type = ?1 AND name = ?2",
            [kind, name],
            |r| r.get(0),
        )?;
        if present == 0 {
            steps.push(Step {
                table: table.clone(),
                action: format!("create {kind} {name} on {table}"),
                rebuild: false,
            });
        }
    }
    Ok(steps)
}

/// Brings an older database up to this build's schema in one transaction (see the module
/// comment), then puts it in WAL mode. Without `allow_rebuild` (an automatic upgrade by a
/// write), a change that needs a table rebuilt is refused: `prose-state migrate` does it.
pub fn upgrade(
    conn: &mut Connection,
    schema: &Schema,
    path: &Path,
    err: &dyn Fn(rusqlite::Error) -> anyhow::Error,
    allow_rebuild: bool,
) -> Result<()> {
    let expected = expected(schema)?;
    drop_read_shims(conn).map_err(err)?;
    // Both are connection settings that cannot change inside a transaction. Foreign keys off
    // so a rebuilt table can be dropped and renamed; legacy renames so a user's view that
    // names the table does not fail the rename.
    conn.execute_batch("PRAGMA foreign_keys = OFF; PRAGMA legacy_alter_table = ON;")
        .map_err(err)?;
    let result = upgrade_in_transaction(conn, schema, &expected, path, err, allow_rebuild);
    conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA legacy_alter_table = OFF;")
        .map_err(err)?;
    if result? {
        // Outside the transaction, as SQLite requires; the mode is persistent. A file that
        // cannot be switched (a read-only directory for the -wal file) stays in its old mode,
        // which is just as safe, only slower with many writers.
        let _ =
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0));
    }
    Ok(())
}

/// Returns whether it upgraded (false: another process did it first).
fn upgrade_in_transaction(
    conn: &mut Connection,
    schema: &Schema,
    expected: &Expected,
    path: &Path,
    err: &dyn Fn(rusqlite::Error) -> anyhow::Error,
    allow_rebuild: bool,
) -> Result<bool> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(err)?;
    // Checked again under the lock: another process may have upgraded it meanwhile.
    match check(&tx, schema, path, err)? {
        Access::Older => {}
        _ => return Ok(false),
    }
    let rebuilds: Vec<String> = plan_against(&tx, expected)?
        .into_iter()
        .filter(|s| s.rebuild)
        .map(|s| s.table)
        .collect();
    if !allow_rebuild && !rebuilds.is_empty() {
        return Err(refused(format!(
            "this db needs tables rebuilt ({}) to reach schema {}; run `prose-state migrate --yes` (see what it does without --yes), the db was left unchanged: {}",
            rebuilds.join(", "),
            schema.version,
            path.display()
        )));
    }
    for (table, create_sql, cols) in &expected.tables {
        let present = columns(&tx, "main", table).map_err(err)?;
        if present.is_empty() {
            continue; // created whole by the schema below
        }
        let missing = missing(cols, &present);
        if missing.is_empty() {
            continue;
        }
        if !rebuilds.contains(table) {
            for col in missing {
                // Identifiers come from the embedded schema, never from input.
                let ddl = add_column(table, col, col.default.as_deref().map(default_ddl));
                tx.execute_batch(&ddl)
                    .map_err(err)
                    .with_context(|| format!("could not add column {table}.{}", col.name))?;
            }
        } else {
            rebuild(&tx, table, create_sql, cols, &present)
                .map_err(err)
                .with_context(|| {
                    format!("could not rebuild table {table} to add its missing columns")
                })?;
        }
    }
    tx.execute_batch(&schema.stored_sql())
        .map_err(err)
        .context("could not upgrade the db schema (was it changed by hand?)")?;
    tx.pragma_update(None, "user_version", schema.stamp())
        .map_err(err)?;
    tx.commit().map_err(err)?;
    Ok(true)
}

/// Rebuilds `table` with the embedded definition (so every default is the schema's own),
/// keeping every row, every user column and every user index and trigger on it.
fn rebuild(
    tx: &Connection,
    table: &str,
    create_sql: &str,
    ours: &[ColumnDef],
    present: &[ColumnDef],
) -> rusqlite::Result<()> {
    let new = format!("_prose_rebuild_{table}");
    let body = &create_sql[create_sql.find('(').unwrap_or(0)..];
    tx.execute_batch(&format!("CREATE TABLE main.{} {body}", quoted(&new)))?;
    for col in present
        .iter()
        .filter(|p| !ours.iter().any(|c| c.name.eq_ignore_ascii_case(&p.name)))
    {
        // A user column keeps its type and a literal default; an expression default cannot
        // be given to ALTER TABLE, so such a column is kept without it.
        let default = col.default.as_deref().filter(|d| is_literal(d));
        tx.execute_batch(&add_column(
            &new,
            col,
            default.map(|d| d.trim().to_string()),
        ))?;
    }
    let saved: Vec<String> = tx
        .prepare(
            "SELECT sql FROM main.sqlite_master
             WHERE tbl_name = ?1 AND type IN ('index', 'trigger') AND sql IS NOT NULL",
        )?
        .query_map([table], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let common: Vec<String> = present.iter().map(|c| quoted(&c.name)).collect();
    let common = common.join(", ");
    tx.execute_batch(&format!(
        "INSERT INTO main.{new_q} ({common}) SELECT {common} FROM main.{old_q};
         DROP TABLE main.{old_q};
         ALTER TABLE main.{new_q} RENAME TO {old_q};",
        new_q = quoted(&new),
        old_q = quoted(table),
    ))?;
    for sql in saved {
        tx.execute_batch(&sql)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{default_ddl, is_literal};

    #[test]
    fn stored_schema_is_the_embedded_one_without_comments() {
        use rusqlite::Connection;
        for schema in [&super::super::sqlite::STATE, &super::super::sqlite::AGENTS] {
            let stored = schema.stored_sql();
            assert!(!stored.contains("--"));
            let dump = |sql: &str| {
                let c = Connection::open_in_memory().unwrap();
                c.execute_batch(sql).unwrap();
                let mut s = c
                    .prepare("SELECT type, name, tbl_name FROM sqlite_master ORDER BY name")
                    .unwrap();
                let rows: Vec<(String, String, String)> = s
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .unwrap()
                    .map(|r| r.unwrap())
                    .collect();
                let cols: Vec<String> = rows
                    .iter()
                    .filter(|r| r.0 == "table")
                    .flat_map(|r| {
                        super::columns(&c, "main", &r.1)
                            .unwrap()
                            .into_iter()
                            .map(|col| {
                                format!(
                                    "{}.{} {} {:?} {}",
                                    r.1, col.name, col.decl_type, col.default, col.pk
                                )
                            })
                    })
                    .collect();
                (rows, cols)
            };
            assert_eq!(dump(schema.sql), dump(&stored));
        }
    }

    #[test]
    fn stamps_round_trip() {
        use super::decode;
        let s = decode(super::super::sqlite::STATE.stamp());
        assert_eq!((s.version, s.min_reader, s.min_writer), (11, 1, 10));
        let s = decode(super::super::sqlite::TEAM.stamp());
        assert_eq!((s.version, s.min_reader, s.min_writer), (11, 9, 10));
        for old in 0..=3 {
            let s = decode(old);
            assert_eq!((s.version, s.min_reader, s.min_writer), (old, 0, 0));
        }
        // A newer bare version asks for itself.
        let s = decode(10);
        assert_eq!((s.version, s.min_reader, s.min_writer), (10, 10, 10));
        let s = decode(1_006_005);
        assert_eq!((s.version, s.min_reader, s.min_writer), (5, 1, 6));
    }

    #[test]
    fn literals_and_expressions() {
        for lit in [
            "0",
            "-1",
            "+2.5",
            "'running'",
            "'it''s'",
            "NULL",
            "x'00ff'",
            "TRUE",
        ] {
            assert!(is_literal(lit), "{lit}");
            assert_eq!(default_ddl(lit), lit);
        }
        for expr in [
            "datetime('now')",
            "CURRENT_TIMESTAMP",
            "(1+1)",
            "'a' || 'b'",
            "1e3x",
        ] {
            assert!(!is_literal(expr), "{expr}");
        }
        assert_eq!(default_ddl("datetime('now')"), "(datetime('now'))");
    }
}
