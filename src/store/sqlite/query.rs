//! `query`: one read-only statement of the caller's, sandboxed (SQLite's dialect of it).

use super::{db_error, SqliteStore, Statements};
use crate::error::{refused, shown, usage};
use crate::store::QueryResult;
use anyhow::Result;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::types::ValueRef;
use rusqlite::ErrorCode;

impl SqliteStore {
    pub(super) fn sandboxed_query(
        &mut self,
        sql: &str,
        limit: std::time::Duration,
    ) -> Result<QueryResult> {
        if sql.trim().is_empty() {
            return Err(usage("empty query"));
        }
        // The shape first, with no authorizer: more than one statement, or SQL that does
        // not parse, is a usage error (exit 2) whatever the statements would do. Preparing
        // runs nothing.
        let (path, busy_ms) = (self.path.clone(), self.busy_ms());
        let invalid = |e: rusqlite::Error| match e {
            rusqlite::Error::MultipleStatement => usage("query takes exactly one SQL statement"),
            // SQLite itself refuses some functions (load_extension) when preparing.
            rusqlite::Error::SqliteFailure(_, Some(msg))
            | rusqlite::Error::SqlInputError { msg, .. }
                if msg.starts_with("not authorized") =>
            {
                refused(format!("query may not use this ({msg}): {}", shown(sql)))
            }
            rusqlite::Error::SqlInputError { msg, .. } => {
                usage(format!("invalid SQL ({msg}): {}", shown(sql)))
            }
            rusqlite::Error::SqliteFailure(f, Some(msg)) if f.code == ErrorCode::Unknown => {
                usage(format!("invalid SQL ({msg}): {}", shown(sql)))
            }
            other => db_error(other, &path, busy_ms),
        };
        // The guards below change this connection for good: it is never kept.
        self.poolable = false;
        drop(self.conn.prepare(sql).map_err(invalid)?);
        // Then three guards: an authorizer that lets a statement read and nothing else (it
        // also stops ATTACH, which SQLite counts as read-only but which creates files, and
        // load_extension, and it lets through only the pragmas that report: see
        // `reporting_pragma`); the statement must be read-only; and the connection cannot
        // write even if one slipped past (query_only makes SQLite refuse any change).
        self.conn
            .execute_batch("PRAGMA query_only = ON")
            .map_err(|e| self.error(e))?;
        // The functions SQLite marks SQLITE_DIRECTONLY, its mark for a function with an effect
        // beyond its result (so that no trigger or view may call it): load_extension,
        // fts3_tokenizer (which registers a tokenizer on the connection), sqlite_log (which
        // writes to the error log). Read from SQLite's own list, not named here.
        let direct_only: std::collections::HashSet<String> = {
            let mut list = self
                .conn
                .prepare("SELECT DISTINCT lower(name) FROM pragma_function_list WHERE flags & ?1")
                .map_err(|e| self.error(e))?;
            let names = list
                .query_map([SQLITE_DIRECTONLY], |r| r.get::<_, String>(0))
                .and_then(|rows| rows.collect::<rusqlite::Result<_>>());
            names.map_err(|e| self.error(e))?
        };
        // SQLite counts some reporting pragmas (`PRAGMA journal_mode`) as statements that
        // may write: the authorizer, which saw the pragma and its value, vouches for those.
        let pragma = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let saw_pragma = std::sync::Arc::clone(&pragma);
        self.conn
            .authorizer(Some(move |ctx: AuthContext<'_>| match ctx.action {
                AuthAction::Select | AuthAction::Read { .. } | AuthAction::Recursive => {
                    Authorization::Allow
                }
                AuthAction::Pragma {
                    pragma_name,
                    pragma_value,
                } if reporting_pragma(pragma_name, pragma_value) => {
                    saw_pragma.store(true, std::sync::atomic::Ordering::Relaxed);
                    Authorization::Allow
                }
                AuthAction::Function { function_name }
                    if !direct_only.contains(&function_name.to_ascii_lowercase())
                        && !function_name.eq_ignore_ascii_case("load_extension") =>
                {
                    Authorization::Allow
                }
                _ => Authorization::Deny,
            }))
            .map_err(|e| self.error(e))?;
        // No value longer than a whole result may be: a `randomblob(200000000)` fails at
        // once rather than taking the memory first.
        self.conn
            .set_limit(
                rusqlite::limits::Limit::SQLITE_LIMIT_LENGTH,
                crate::store::QUERY_MOST_BYTES as i32,
            )
            .map_err(|e| self.error(e))?;
        // The time limit: SQLite asks this every few thousand steps whether to go on.
        let start = std::time::Instant::now();
        self.conn
            .progress_handler(10_000, Some(move || start.elapsed() > limit))
            .map_err(|e| self.error(e))?;
        let mut stmt = self.conn.prepare(sql).map_err(|e| match e {
            e if e.sqlite_error_code() == Some(ErrorCode::AuthorizationForStatementDenied) => {
                refused(format!(
                    "query is read-only and this statement would write, attach, load an extension or set a pragma: {}",
                    shown(sql)
                ))
            }
            other => invalid(other),
        })?;
        if !stmt.readonly() && !pragma.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(refused(format!(
                "query is read-only and this statement would write: {}",
                shown(sql)
            )));
        }
        let columns: Vec<String> = stmt.column_names().map(|c| c.to_string()).collect();
        let n = columns.len();
        let mut out = Vec::new();
        let timed_out = || {
            crate::error::timed_out(format!(
                "query stopped after {}s (--timeout): {}",
                limit.as_secs(),
                shown(sql)
            ))
        };
        let stopped = |e: rusqlite::Error| match e.sqlite_error_code() {
            Some(ErrorCode::OperationInterrupted) => timed_out(),
            Some(ErrorCode::TooBig) => crate::store::too_large(format!(
                "a value over {} bytes",
                crate::store::QUERY_MOST_BYTES
            )),
            _ => db_error(e, &self.path, self.busy_ms()),
        };
        let mut budget = crate::store::QueryBudget::new(&columns, start, limit);
        let mut rows = stmt.query([]).map_err(stopped)?;
        while let Some(row) = rows.next().map_err(stopped)? {
            if budget.overdue() {
                return Err(timed_out());
            }
            let mut values = Vec::with_capacity(n);
            for i in 0..n {
                let v = json_value(row.get_ref(i)?);
                budget.take(i, &v)?;
                values.push(v);
            }
            out.push(values);
        }
        Ok(QueryResult { columns, rows: out })
    }
}

/// `SQLITE_DIRECTONLY` (sqlite3.h): the flag of a function that may have side effects.
const SQLITE_DIRECTONLY: i64 = 0x0008_0000;

/// Whether `query` may run this pragma: one that only reports. Without a value, those that
/// read a setting or describe the database; with one, only those whose argument names what to
/// describe (`table_info(bindings)`). Any other, and any pragma given a value to set, is
/// refused by the authorizer: SQLite's own read-only flag does not cover `PRAGMA x = y` on a
/// connection setting (`query_only`, `foreign_keys`, `writable_schema`, `locking_mode`).
fn reporting_pragma(name: &str, value: Option<&str>) -> bool {
    const DESCRIBE: &str = "table_info table_xinfo table_list index_info index_xinfo index_list
        foreign_key_list foreign_key_check integrity_check quick_check";
    const READ: &str = "application_id auto_vacuum automatic_index busy_timeout cache_size
        cache_spill cell_size_check checkpoint_fullfsync collation_list compile_options
        data_version database_list defer_foreign_keys encoding foreign_keys freelist_count
        fullfsync function_list hard_heap_limit ignore_check_constraints journal_mode
        journal_size_limit legacy_alter_table locking_mode max_page_count mmap_size module_list
        page_count page_size pragma_list query_only read_uncommitted recursive_triggers
        reverse_unordered_selects schema_version secure_delete soft_heap_limit synchronous
        temp_store threads trusted_schema user_version wal_autocheckpoint writable_schema";
    let is = |list: &str| {
        list.split_whitespace()
            .any(|p| p.eq_ignore_ascii_case(name))
    };
    is(DESCRIBE) || (value.is_none() && is(READ))
}

fn json_value(v: ValueRef) -> serde_json::Value {
    match v {
        ValueRef::Null => serde_json::Value::Null,
        ValueRef::Integer(i) => i.into(),
        // JSON has no Inf or NaN.
        ValueRef::Real(f) => serde_json::Number::from_f64(f)
            .map(serde_json::Value::Number)
            .unwrap_or(serde_json::Value::Null),
        ValueRef::Text(t) | ValueRef::Blob(t) => String::from_utf8_lossy(t).into_owned().into(),
    }
}
