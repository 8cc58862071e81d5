//! `query`: one read-only statement of the caller's, sandboxed (PostgreSQL's dialect of it).

use super::{map_err, PgStore};
use crate::error::{refused, shown, usage};
use crate::store::QueryResult;
use anyhow::Result;
use postgres::error::SqlState;
use postgres::types::{ToSql, Type};
use postgres::{Client, Row};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

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
        let url = self.url.clone();
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
        // Then what the statement would call: nothing that acts beyond it (see `vet`).
        let search_path: String = tx
            .query_one("SELECT current_setting('search_path')", &[])
            .map_err(|e| map_err(e, &shown_url, busy_ms))?
            .get(0);
        let returns_rows = !stmt.columns().is_empty();
        vet(
            &url,
            &shown_url,
            busy_ms,
            &search_path,
            sql,
            returns_rows,
            limit,
        )?;
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

/// The VOLATILE functions of pg_catalog that `query` runs all the same, every overload: each
/// only reads, or only takes the statement's own time, and acts on nothing beyond the
/// statement's own result (docs/query.md lists the same names and says why). Any other
/// VOLATILE function, of any schema, is refused.
const VOLATILE_ALLOWED: &[&str] = &[
    // values: a random number or UUID, the clock as it runs
    "random",
    "gen_random_uuid",
    "clock_timestamp",
    "timeofday",
    // the statement's own time, within --timeout
    "pg_sleep",
    "pg_sleep_for",
    "pg_sleep_until",
    // sizes on disk
    "pg_relation_size",
    "pg_table_size",
    "pg_indexes_size",
    "pg_total_relation_size",
    "pg_database_size",
    "pg_tablespace_size",
    // the locks held, and who waits for whom (the pg_locks view)
    "pg_lock_status",
    "pg_blocking_pids",
    // TABLESAMPLE SYSTEM and BERNOULLI
    "system",
    "bernoulli",
];

/// How the server reads a statement: the notice that `debug_print_rewritten` sends holds it.
const TREE_NOTICE: &str = "rewritten parse tree:";

/// Refuses (exit 4) a statement that would call a VOLATILE function not on
/// [`VOLATILE_ALLOWED`], or that is not a query at all. A READ ONLY transaction stops writes
/// to tables, but not what a function does besides: `pg_notify` queues a notification,
/// `pg_advisory_lock` takes a lock others wait for, `set_config` changes the session,
/// `dblink_exec` writes elsewhere. PostgreSQL marks each function that may act beyond its
/// result VOLATILE (`pg_proc.provolatile`), so the catalog, not a list of bad names, decides.
///
/// Which functions a statement calls is taken from the server itself, never from the text:
/// on a session of its own (whose notices this process reads: the store's session drops
/// them) and in a READ ONLY transaction rolled back, the statement is parsed with
/// `debug_print_rewritten`, which sends the tree the server runs: after parse analysis (every
/// name resolved to its object: quoted, schema-qualified, overloaded, an operator or a cast
/// to its function) and after the rewriter (views expanded, to any depth; row-level security
/// policies added; rules applied), with every subquery, CTE, function in FROM, lateral join
/// and sublink in it. Every function, operator and type it names by OID is gathered, and
/// with them, from the catalog, what runs when they do: an operator's function, a type's
/// input, output, send and receive functions (an I/O cast), a domain's CHECK expressions, an
/// aggregate's support functions, a function's default arguments and SQL-standard body, and
/// what those name in turn. A statement that is not a query (a utility statement: DO, CALL,
/// NOTIFY, COPY, EXPLAIN, SET, SHOW, LOCK, DDL, ...) is refused whole: what it runs is read
/// only as it runs. What a function's own body does (PL/pgSQL, C, an SQL body given as a
/// string) is taken from its label, as the planner takes it.
fn vet(
    url: &str,
    shown_url: &str,
    busy_ms: u64,
    search_path: &str,
    sql: &str,
    returns_rows: bool,
    limit: std::time::Duration,
) -> Result<()> {
    let trees = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut client = vetting_client(url, Arc::clone(&trees))
        .map_err(|e| super::connect::connect_error(&e, url, shown_url))?;
    let db = |e: postgres::Error| match e.code() {
        Some(c) if *c == SqlState::QUERY_CANCELED => crate::error::timed_out(format!(
            "query stopped after {}s (--timeout): {}",
            limit.as_secs(),
            shown(sql)
        )),
        _ => map_err(e, shown_url, busy_ms),
    };
    let mut tx = client
        .build_transaction()
        .read_only(true)
        .start()
        .map_err(db)?;
    // Local to this transaction: a pooler that hands each transaction to another server
    // session keeps them together.
    tx.batch_execute(&format!(
        "SET LOCAL statement_timeout = {};
         SET LOCAL client_min_messages = log;
         SET LOCAL debug_pretty_print = off;
         SET LOCAL debug_print_rewritten = on",
        limit.as_millis().clamp(1, i32::MAX as u128)
    ))
    .map_err(db)?;
    // Names are found where the store's session finds them.
    tx.execute(
        "SELECT set_config('search_path', $1, true)",
        &[&search_path],
    )
    .map_err(db)?;
    trees.lock().unwrap_or_else(|p| p.into_inner()).clear();
    tx.prepare(sql).map_err(db)?;
    let printed = std::mem::take(&mut *trees.lock().unwrap_or_else(|p| p.into_inner()));
    tx.batch_execute("SET LOCAL debug_print_rewritten = off")
        .map_err(db)?;
    let mut reading = Reading::default();
    for tree in &printed {
        reading.scan(tree);
    }
    if reading.queries == 0 && !returns_rows {
        return Err(usage(format!(
            "empty query (nothing but `;` or comments): {}",
            shown(sql)
        )));
    }
    if reading.queries == 0 {
        return Err(refused(format!(
            "query could not read how the server runs this statement (no parse tree came back with debug_print_rewritten), so it does not run it: {}",
            shown(sql)
        )));
    }
    if reading.utility {
        return Err(refused(format!(
            "query runs only a query on PostgreSQL (SELECT, VALUES, TABLE, WITH ... SELECT): a utility statement (DO, CALL, NOTIFY, COPY, EXPLAIN, SET, SHOW, LOCK, DDL, ...) runs what cannot be checked before it runs: {}",
            shown(sql)
        )));
    }
    // What runs when the named objects do, to a fixed point (each object looked at once).
    let mut done = Reading::default();
    for _ in 0..64 {
        let new = |all: &BTreeSet<u32>, seen: &mut BTreeSet<u32>| -> Vec<u32> {
            let fresh: Vec<u32> = all.difference(seen).copied().collect();
            seen.extend(&fresh);
            fresh
        };
        let functions = new(&reading.functions, &mut done.functions);
        let operators = new(&reading.operators, &mut done.operators);
        let types = new(&reading.types, &mut done.types);
        if functions.is_empty() && operators.is_empty() && types.is_empty() {
            break;
        }
        for row in tx
            .query(RUNS_WITH, &[&functions, &operators, &types])
            .map_err(db)?
        {
            match (row.get::<_, &str>(0), row.get::<_, Option<u32>>(1)) {
                ("f", Some(oid)) if oid != 0 => {
                    reading.functions.insert(oid);
                }
                ("t", Some(oid)) if oid != 0 => {
                    reading.types.insert(oid);
                }
                ("n", _) => {
                    if let Some(tree) = row.get::<_, Option<&str>>(2) {
                        reading.scan(tree);
                    }
                }
                _ => {}
            }
        }
    }
    let functions: Vec<u32> = reading.functions.iter().copied().collect();
    let volatile: Vec<String> = tx
        .query(VOLATILE_CALLED, &[&functions, &VOLATILE_ALLOWED])
        .map_err(db)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let _ = tx.rollback();
    if !volatile.is_empty() {
        return Err(refused(format!(
            "query refuses a statement that calls a VOLATILE function, which may act beyond the statement (notify listeners, take locks, change the session, write elsewhere): {} (docs/query.md lists the few it allows): {}",
            crate::error::clip(&volatile.join(", "), 200),
            shown(sql)
        )));
    }
    Ok(())
}

/// For the functions ($1), operators ($2) and types ($3) a statement names: the functions
/// and types that run with them (`f`, `t`: an OID, 0 for none), and the expression trees
/// that run with them (`n`: a domain's CHECK, a function's default arguments and its
/// SQL-standard body, read through to_jsonb so that a server without `prosqlbody` answers).
const RUNS_WITH: &str = "
    SELECT 'f', o.oprcode::oid, NULL::text FROM pg_catalog.pg_operator o WHERE o.oid = ANY($2)
    UNION ALL
    SELECT 'f', x, NULL
      FROM pg_catalog.pg_type t,
           unnest(ARRAY[t.typinput, t.typoutput, t.typreceive, t.typsend]::oid[]) x
     WHERE t.oid = ANY($3)
    UNION ALL
    SELECT 't', x, NULL
      FROM pg_catalog.pg_type t, unnest(ARRAY[t.typbasetype, t.typelem]::oid[]) x
     WHERE t.oid = ANY($3)
    UNION ALL
    SELECT 'n', NULL, c.conbin::text
      FROM pg_catalog.pg_constraint c WHERE c.contypid = ANY($3) AND c.conbin IS NOT NULL
    UNION ALL
    SELECT 'f', x, NULL
      FROM pg_catalog.pg_aggregate a,
           unnest(ARRAY[a.aggtransfn, a.aggfinalfn, a.aggcombinefn, a.aggserialfn,
                        a.aggdeserialfn, a.aggmtransfn, a.aggminvtransfn,
                        a.aggmfinalfn]::oid[]) x
     WHERE a.aggfnoid = ANY($1)
    UNION ALL
    SELECT 'n', NULL, d.tree
      FROM pg_catalog.pg_proc p,
           LATERAL (VALUES (p.proargdefaults::text),
                           (pg_catalog.to_jsonb(p) ->> 'prosqlbody')) d(tree)
     WHERE p.oid = ANY($1) AND d.tree IS NOT NULL";

/// The functions of $1 that are VOLATILE and not pg_catalog's of the names $2, as
/// `name(argument types)`.
const VOLATILE_CALLED: &str = "
    SELECT p.oid::regprocedure::text
      FROM pg_catalog.pg_proc p
     WHERE p.oid = ANY($1) AND p.provolatile = 'v'
       AND NOT (p.pronamespace = 'pg_catalog'::regnamespace
                AND p.proname::text = ANY($2::text[]))
     ORDER BY 1";

/// What a tree the server printed (`nodeToString`) names, by OID: the fields of its nodes
/// that hold a function (`FuncExpr`, `OpExpr`, `ScalarArrayOpExpr`, `Aggref`, `WindowFunc`,
/// a window's RANGE offset, TABLESAMPLE), an operator (`OpExpr`, `RowCompareExpr`, a sort or
/// grouping clause) or a type (any field naming one: every coercion's target and every
/// value's type). Only field names and their values are read: a name or a constant of the
/// caller's is printed escaped (`\ `) or as bytes, and can add an OID at most, never hide one.
#[derive(Default)]
struct Reading {
    functions: BTreeSet<u32>,
    operators: BTreeSet<u32>,
    types: BTreeSet<u32>,
    /// Query nodes seen: none means the tree was not read.
    queries: usize,
    /// A query node holds a utility statement.
    utility: bool,
}

impl Reading {
    fn scan(&mut self, tree: &str) {
        const FUNCTION: &[&str] = &[
            "funcid",
            "opfuncid",
            "hashfuncid",
            "negfuncid",
            "aggfnoid",
            "winfnoid",
            "tsmhandler",
            "startInRangeFunc",
            "endInRangeFunc",
        ];
        const OPERATOR: &[&str] = &["opno", "opnos", "eqop", "sortop"];
        let mut tokens = tree.split_whitespace().peekable();
        while let Some(token) = tokens.next() {
            if token.ends_with("{QUERY") {
                self.queries += 1;
                continue;
            }
            let Some(field) = token.strip_prefix(':') else {
                continue;
            };
            if field == "utilityStmt" {
                self.utility |= tokens.peek() != Some(&"<>");
                continue;
            }
            let into = if FUNCTION.contains(&field) {
                &mut self.functions
            } else if OPERATOR.contains(&field) {
                &mut self.operators
            } else if field.ends_with("type")
                || field.ends_with("types")
                || field.ends_with("typeid")
                || field.ends_with("typeId")
            {
                &mut self.types
            } else {
                continue;
            };
            // One number, or a list of them: `(o 23 25)`.
            match tokens.peek() {
                Some(&"(o") | Some(&"(") => {
                    tokens.next();
                    for t in tokens.by_ref() {
                        if let Ok(oid) = t.trim_end_matches(')').parse::<u32>() {
                            into.insert(oid);
                        }
                        if t.ends_with(')') {
                            break;
                        }
                    }
                }
                Some(t) => {
                    if let Ok(oid) = t.parse::<u32>() {
                        into.insert(oid);
                        tokens.next();
                    }
                }
                None => {}
            }
        }
    }
}

/// A session of its own for [`vet`], on the same server as the same role, whose notices of
/// the parse tree are kept in `trees`; connected as `connect_client` connects.
fn vetting_client(url: &str, trees: Arc<Mutex<Vec<String>>>) -> Result<Client, postgres::Error> {
    let mut config: postgres::Config = url.parse()?;
    config.notice_callback(move |notice| {
        if notice.message() == TREE_NOTICE {
            if let Some(tree) = notice.detail() {
                trees
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(tree.to_string());
            }
        }
    });
    if super::connect::tls_disabled(url) {
        return config.connect(postgres::NoTls);
    }
    config.connect(tokio_postgres_rustls::MakeRustlsConnect::new(
        super::connect::tls(),
    ))
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
