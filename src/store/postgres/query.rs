//! `query`: one read-only statement of the caller's, sandboxed (PostgreSQL's dialect of it).

use super::{map_err, PgStore};
use crate::error::{refused, shown, usage};
use crate::store::QueryResult;
use anyhow::Result;
use postgres::error::SqlState;
use postgres::types::{ToSql, Type};
use postgres::Row;

impl PgStore {
    pub(super) fn sandboxed_query(
        &mut self,
        sql: &str,
        limit: std::time::Duration,
    ) -> Result<QueryResult> {
        if sql.trim().is_empty() {
            return Err(usage("empty query"));
        }
        let (shown_url, busy_ms) = (self.shown_url.clone(), self.busy_ms);
        // What the caller's SQL leaves on the session outlives its transaction (a session
        // advisory lock, a statement prepared by name): the session is not kept.
        self.ran_foreign_sql = true;
        let mut tx = self
            .client
            .build_transaction()
            .read_only(true)
            .start()
            .map_err(|e| map_err(e, &shown_url, busy_ms))?;
        tx.batch_execute(&format!(
            "SET LOCAL statement_timeout = {}",
            limit.as_millis().min(i32::MAX as u128)
        ))
        .map_err(|e| map_err(e, &shown_url, busy_ms))?;
        let start = std::time::Instant::now();
        let timed_out = || {
            crate::error::timed_out(format!(
                "query stopped after {}s (--timeout): {}",
                limit.as_secs(),
                shown(sql)
            ))
        };
        let stopped = |e: postgres::Error| match e.code() {
            Some(c) if *c == SqlState::QUERY_CANCELED => timed_out(),
            Some(c)
                if *c == SqlState::READ_ONLY_SQL_TRANSACTION
                    || *c == SqlState::INSUFFICIENT_PRIVILEGE =>
            {
                refused(format!(
                    "query is read-only and this statement would write ({}): {}",
                    e.as_db_error().map_or("", |d| d.message()),
                    shown(sql)
                ))
            }
            _ => map_err(e, &shown_url, busy_ms),
        };
        let stmt = tx.prepare(sql).map_err(|e| match e.as_db_error() {
            Some(db)
                if db.code() == &SqlState::SYNTAX_ERROR
                    || db.code() == &SqlState::UNDEFINED_TABLE
                    || db.code() == &SqlState::UNDEFINED_COLUMN
                    || db.message().contains("multiple commands") =>
            {
                usage(format!("invalid SQL ({}): {}", db.message(), shown(sql)))
            }
            _ => map_err(e, &shown_url, busy_ms),
        })?;
        // A READ ONLY transaction does not stop a superuser's COPY ... TO PROGRAM, nor
        // pg_read_file, and a role may become any role it is a member of (SET ROLE,
        // set_config('role', ...)) within the statement. So the guard is on every role this
        // session can become, directly or through membership, from the role it logged in as
        // (session_user, which SET ROLE always returns to) and the role it runs as: none may
        // be a superuser, make roles or replicate, hold the server-file, server-program or
        // signal roles, or write a table of the openprose schema. Then switching roles reaches
        // nothing the guard did not vet, and pg_terminate_backend / pg_cancel_backend reach
        // only sessions of roles this one has the privileges of: never one that can write
        // the state.
        let role = tx
            .query_one(QUERY_ROLE_GUARD, &[])
            .map_err(|e| map_err(e, &shown_url, busy_ms))?;
        if let Some(roles) = role.get::<_, Option<String>>(1) {
            return Err(refused(format!(
                "query will not run as {}: it can become {} (a superuser, a role that makes roles or replicates, pg_read_server_files, pg_write_server_files, pg_execute_server_program, pg_signal_backend, or a role that can write the openprose tables), whose powers a READ ONLY transaction does not contain; connect as a role that can only read the openprose schema (see README, Threat model)",
                shown(role.get::<_, &str>(0)),
                crate::error::clip(&roles, 200)
            )));
        }
        let columns: Vec<String> = stmt
            .columns()
            .iter()
            .map(|c| c.name().to_string())
            .collect();
        // Rows are taken one by one as they arrive, against the result's bounds and the
        // timeout, never collected first.
        let mut budget = crate::store::QueryBudget::new(&columns, start, limit);
        let mut rows = Vec::new();
        {
            use postgres::fallible_iterator::FallibleIterator;
            let mut it = tx
                .query_raw(&stmt, std::iter::empty::<&(dyn ToSql + Sync)>())
                .map_err(stopped)?;
            while let Some(r) = it.next().map_err(stopped)? {
                let mut values = Vec::with_capacity(columns.len());
                for i in 0..columns.len() {
                    let v = to_json(&r, i);
                    budget.take(i, &v)?;
                    values.push(v);
                }
                rows.push(values);
                if budget.overdue() {
                    return Err(timed_out());
                }
            }
        }
        tx.rollback().map_err(|e| map_err(e, &shown_url, busy_ms))?;
        Ok(QueryResult { columns, rows })
    }
}

/// The roles a `query` session could act as that it must not: every role reachable by
/// membership (pg_has_role's MEMBER, which follows memberships through any depth, with or
/// without INHERIT) from session_user, current_user or the role the backend logged in as,
/// that is a superuser, makes roles, replicates, is one of the server-file, server-program
/// or signal roles, or may write a table of the openprose schema. The first column is the
/// role the session runs as; the second, the offending roles (NULL when there are none).
const QUERY_ROLE_GUARD: &str = "
    SELECT current_user::text,
           string_agg(DISTINCT r.rolname::text, ', ')
      FROM pg_roles r
     WHERE (pg_has_role(session_user, r.oid, 'MEMBER')
            OR pg_has_role(current_user, r.oid, 'MEMBER')
            OR pg_has_role((SELECT usesysid FROM pg_stat_activity WHERE pid = pg_backend_pid()),
                           r.oid, 'MEMBER'))
       AND (r.rolsuper OR r.rolcreaterole OR r.rolreplication
            OR r.rolname IN ('pg_read_server_files', 'pg_write_server_files',
                             'pg_execute_server_program', 'pg_signal_backend')
            OR EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                        WHERE n.nspname = 'openprose' AND c.relkind IN ('r', 'p')
                          AND has_table_privilege(r.oid, c.oid,
                                                  'INSERT, UPDATE, DELETE, TRUNCATE')))";

fn to_json(row: &Row, i: usize) -> serde_json::Value {
    use serde_json::Value;
    let ty = row.columns()[i].type_().clone();
    macro_rules! get {
        ($t:ty) => {
            row.try_get::<_, Option<$t>>(i).ok().flatten()
        };
    }
    let v: Option<Value> = match ty {
        Type::BOOL => get!(bool).map(Value::from),
        Type::INT2 => get!(i16).map(Value::from),
        Type::INT4 => get!(i32).map(Value::from),
        Type::INT8 => get!(i64).map(Value::from),
        Type::FLOAT4 => get!(f32)
            .and_then(|f| serde_json::Number::from_f64(f as f64))
            .map(Value::Number),
        Type::FLOAT8 => get!(f64)
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number),
        Type::JSON | Type::JSONB => get!(serde_json::Value),
        _ => get!(String).map(Value::from),
    };
    v.unwrap_or(Value::Null)
}
