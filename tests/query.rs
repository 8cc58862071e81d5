use crate::common::*;

on_both!(
    query_prints_rows_as_sqlite3_json_does,
    query_refuses_writes_and_leaves_the_db_unchanged,
);

/// On PostgreSQL, `query` runs as a role that may only read (it refuses a superuser).
fn as_reader(p: &Project) {
    if let Some(url) = &p.pg_url {
        let reader = pg::as_reader(url);
        p.write(
            ".prose/.env",
            format!("OPENPROSE_POSTGRES_URL={reader}\n").as_bytes(),
        );
    }
}

fn query_prints_rows_as_sqlite3_json_does(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("b", "two", None);
    run.bind("a", "it's \"one\"", None);
    as_reader(&p);
    let sql = match b {
        Backend::Sqlite => {
            "SELECT name, value, length(value) AS n, NULL AS z, 1.5 AS r FROM bindings ORDER BY name"
        }
        Backend::Postgres => {
            "SELECT name, value, length(value) AS n, NULL AS z, 1.5::float8 AS r
               FROM openprose.bindings ORDER BY name"
        }
    };
    let a = run.cmd().args(["query", sql]).assert().success();
    let out = String::from_utf8(a.get_output().stdout.clone()).unwrap();
    // column order is kept, as sqlite3 -json keeps it
    assert_eq!(
        out,
        "[{\"name\":\"a\",\"value\":\"it's \\\"one\\\"\",\"n\":10,\"z\":null,\"r\":1.5},{\"name\":\"b\",\"value\":\"two\",\"n\":3,\"z\":null,\"r\":1.5}]\n"
    );
    let a = run
        .cmd()
        .args(["--json", "query", "SELECT 1 WHERE 1 = 0"])
        .assert()
        .success();
    assert_eq!(stdout_json(&a), serde_json::json!([]));
}

fn query_refuses_writes_and_leaves_the_db_unchanged(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("keep", "me", None);
    as_reader(&p);
    let before = run.snapshot();
    let writes: &[&str] = match b {
        Backend::Sqlite => &[
            "DELETE FROM bindings",
            "UPDATE bindings SET value = 'x'",
            "INSERT INTO bindings (name) VALUES ('x')",
            "DROP TABLE bindings",
            "CREATE TABLE x_evil (a)",
            "PRAGMA user_version = 99",
            "PRAGMA journal_mode = DELETE",
            "VACUUM",
            "ATTACH DATABASE 'other.db' AS o",
        ],
        Backend::Postgres => &[
            "DELETE FROM openprose.bindings",
            "UPDATE openprose.bindings SET value = 'x'",
            "INSERT INTO openprose.bindings (name, run_id) VALUES ('x', 'y')",
            "DROP TABLE openprose.bindings",
            "CREATE TABLE x_evil (a int)",
            "SELECT nextval('openprose.execution_id_seq')",
        ],
    };
    for sql in writes {
        let a = run.cmd().args(["query", sql]).assert().failure();
        assert_eq!(code(&a), 4, "{sql}: {}", stderr(&a));
        assert_eq!(run.snapshot(), before, "{sql}");
    }
    assert!(!p.root().join("other.db").exists());
    let missing_table = match b {
        Backend::Sqlite => "SELECT * FROM no_such_table",
        Backend::Postgres => "SELECT * FROM openprose.no_such_table",
    };
    for sql in [
        "SELECT 1; SELECT 2",
        "SELECT 1; DELETE FROM bindings",
        "SELEC 1",
        "",
        missing_table,
    ] {
        let a = run.cmd().args(["query", sql]).assert().failure();
        assert_eq!(code(&a), 2, "{sql}: {}", stderr(&a));
        assert_eq!(run.snapshot(), before, "{sql}");
    }
}

/// On SQLite, a pragma that would change anything (a setting of the connection or the file)
/// is refused with exit 4 and nothing changes; the pragmas that only report run, both forms.
#[test]
fn query_runs_reporting_pragmas_and_refuses_the_others() {
    let p = Project::new();
    let run = p.init();
    run.bind("keep", "me", None);
    let before = run.snapshot();
    for sql in [
        "PRAGMA query_only = 0",
        "PRAGMA query_only = OFF",
        "PRAGMA writable_schema = 1",
        "PRAGMA writable_schema = RESET",
        "PRAGMA foreign_keys = OFF",
        "PRAGMA locking_mode = EXCLUSIVE",
        "PRAGMA main.locking_mode = EXCLUSIVE",
        "PRAGMA journal_mode = DELETE",
        "PRAGMA user_version = 7",
        "PRAGMA cache_size = -100000",
        "PRAGMA trusted_schema = 1",
        "PRAGMA wal_checkpoint",
        "PRAGMA wal_checkpoint(TRUNCATE)",
        "PRAGMA optimize",
        "PRAGMA incremental_vacuum",
        "PRAGMA shrink_memory",
        "PRAGMA no_such_pragma",
    ] {
        let a = run.cmd().args(["query", sql]).assert().failure();
        assert_eq!(code(&a), 4, "{sql}: {}", stderr(&a));
        assert_eq!(stderr(&a).lines().count(), 1, "{}", stderr(&a));
        assert_eq!(run.snapshot(), before, "{sql}");
    }
    let read = |sql: &str| {
        let a = run.cmd().args(["--json", "query", sql]).assert().success();
        stdout_json(&a)
    };
    assert_eq!(
        read("PRAGMA journal_mode"),
        serde_json::json!([{"journal_mode": "wal"}])
    );
    assert_eq!(
        read("PRAGMA main.query_only"),
        serde_json::json!([{"query_only": 1}])
    );
    assert_eq!(
        read("PRAGMA locking_mode"),
        serde_json::json!([{"locking_mode": "normal"}])
    );
    assert_eq!(
        read("PRAGMA integrity_check"),
        serde_json::json!([{"integrity_check": "ok"}])
    );
    for sql in [
        "PRAGMA table_info(bindings)",
        "PRAGMA table_xinfo('bindings')",
        "PRAGMA index_list(bindings)",
        "PRAGMA user_version",
        "SELECT name FROM pragma_table_info('bindings')",
    ] {
        let rows = read(sql);
        assert!(!rows.as_array().unwrap().is_empty(), "{sql}: {rows}");
    }
    assert_eq!(run.snapshot(), before);
}

/// One result is bounded (64 MiB of JSON, a million values), on both backends: a statement
/// past either bound is refused with one line naming the bound, before its rows are all held
/// or printed, and nothing changes. On SQLite a single value past the bound fails as it is
/// made (`randomblob(200000000)` ends at once, inside `--timeout`).
fn query_results_are_bounded(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("keep", "me", None);
    as_reader(&p);
    let before = run.snapshot();
    let cases: &[&str] = match b {
        Backend::Sqlite => &[
            "SELECT randomblob(200000000)",
            "SELECT length(randomblob(200000000))",
            "SELECT hex(randomblob(40000000))",
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 1000001) SELECT x FROM c",
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 70000) SELECT x, hex(randomblob(500)) AS h FROM c",
        ],
        Backend::Postgres => &[
            "SELECT repeat('x', 70000000)",
            "SELECT generate_series(1, 1000001)",
            "SELECT x, repeat('y', 1000) FROM generate_series(1, 70000) x",
        ],
    };
    for sql in cases {
        let a = run
            .cmd()
            .args(["query", "--timeout", "120s", sql])
            .assert()
            .failure();
        let err = stderr(&a);
        assert_eq!(code(&a), 4, "{sql}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("too large") && err.contains("67108864 bytes"),
            "{err}"
        );
        assert!(a.get_output().stdout.is_empty());
        assert_eq!(run.snapshot(), before, "{sql}");
    }
    // Just under the value bound is printed whole.
    let under = match b {
        Backend::Sqlite => {
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 1000000) SELECT x FROM c"
        }
        Backend::Postgres => "SELECT generate_series(1, 1000000) AS x",
    };
    let a = run
        .cmd()
        .args(["--json", "query", "--timeout", "120s", under])
        .assert()
        .success();
    assert_eq!(stdout_json(&a).as_array().unwrap().len(), 1_000_000);
}

on_both!(query_results_are_bounded);

/// `url` as `role`, which logs in trusted on the throwaway cluster, as [`pg::as_reader`]'s.
fn as_role(url: &str, role: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    format!("{scheme}://{role}@{host}")
}

/// On PostgreSQL, `query` refuses (exit 4, before the statement runs) a role that can become,
/// directly or through any depth of membership, a superuser, a role with the server-file,
/// server-program or signal rights, a role that makes roles, or one that can write the
/// openprose tables. A role that passes cannot switch to a role it was not vetted for, read a
/// server file, or end a session that can write; nothing changes, and the sessions live on.
#[test]
fn query_on_postgres_cannot_become_more_than_a_reader() {
    let Some(p) = Project::on(Backend::Postgres) else {
        return;
    };
    let run = p.init();
    run.bind("keep", "me", None);
    let admin_url = p.pg_url.clone().unwrap();
    let reader = pg::as_reader(&admin_url);
    let mut admin = postgres::Client::connect(
        &admin_url.replace("sslmode=require", "sslmode=disable"),
        postgres::NoTls,
    )
    .unwrap();
    let superuser: String = admin
        .query_one("SELECT current_user::text", &[])
        .unwrap()
        .get(0);
    let create = |admin: &mut postgres::Client, role: &str, how: &str| {
        admin
            .batch_execute(&format!(
                "DO $$ BEGIN CREATE ROLE {role} {how};
                 EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$;
                 GRANT USAGE ON SCHEMA openprose TO {role};
                 GRANT SELECT ON ALL TABLES IN SCHEMA openprose TO {role};"
            ))
            .unwrap();
    };
    // Each role can read, as the reader can, and can become more in its own way.
    create(&mut admin, "prose_q_middle", "NOLOGIN NOINHERIT");
    admin
        .batch_execute("GRANT pg_read_server_files TO prose_q_middle")
        .unwrap();
    let escalating = [
        (
            "prose_q_super_member",
            format!("GRANT \"{superuser}\" TO prose_q_super_member"),
        ),
        (
            "prose_q_nested",
            "GRANT prose_q_middle TO prose_q_nested".to_string(),
        ),
        (
            "prose_q_program",
            "GRANT pg_execute_server_program TO prose_q_program".to_string(),
        ),
        (
            "prose_q_writes",
            "GRANT pg_write_server_files TO prose_q_writes".to_string(),
        ),
        (
            "prose_q_signals",
            "GRANT pg_signal_backend TO prose_q_signals".to_string(),
        ),
        (
            "prose_q_makes_roles",
            "ALTER ROLE prose_q_makes_roles CREATEROLE".to_string(),
        ),
        (
            "prose_q_writer",
            "GRANT INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA openprose TO prose_q_writer"
                .to_string(),
        ),
        (
            "prose_q_writer_member",
            "GRANT prose_q_writer TO prose_q_writer_member".to_string(),
        ),
    ];
    for (role, grant) in &escalating {
        create(&mut admin, role, "LOGIN");
        admin.batch_execute(grant).unwrap();
    }
    // A session that can write, as a teammate's would be, and the admin's own.
    let mut writer = postgres::Client::connect(
        &as_role(&admin_url, "prose_q_writer").replace("sslmode=require", "sslmode=disable"),
        postgres::NoTls,
    )
    .unwrap();
    let writer_pid: i32 = writer
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    let admin_pid: i32 = admin
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    let marker = std::env::temp_dir().join(format!("prose-q-pwned-{}", std::process::id()));
    let escapes = [
        format!("SELECT set_config('role', '{superuser}', true), pg_read_file('/etc/hostname')"),
        "SELECT set_config('role', 'prose_q_middle', true), pg_read_file('/etc/hostname')"
            .to_string(),
        format!("SET ROLE \"{superuser}\""),
        format!("SET SESSION AUTHORIZATION \"{superuser}\""),
        "SELECT pg_read_file('/etc/hostname')".to_string(),
        format!("COPY (SELECT 1) TO PROGRAM 'touch {}'", marker.display()),
        format!("SELECT pg_terminate_backend({writer_pid})"),
        format!("SELECT pg_cancel_backend({writer_pid})"),
        format!("SELECT pg_terminate_backend({admin_pid})"),
        "SELECT 1".to_string(),
    ];
    let env_file = p.root().join(".prose/.env");
    let before = run.snapshot();
    for (role, _) in &escalating {
        std::fs::write(
            &env_file,
            format!("OPENPROSE_POSTGRES_URL={}\n", as_role(&admin_url, role)),
        )
        .unwrap();
        for sql in &escapes {
            let a = run.cmd().args(["query", sql]).assert().failure();
            let err = stderr(&a);
            assert_eq!(code(&a), 4, "{role}: {sql}: {err}");
            assert!(err.contains("will not run as"), "{role}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
        }
    }
    // The reader passes the guard, and the same escapes fail as the server refuses them.
    std::fs::write(&env_file, format!("OPENPROSE_POSTGRES_URL={reader}\n")).unwrap();
    for sql in escapes.iter().filter(|s| s.as_str() != "SELECT 1") {
        let a = run.cmd().args(["query", sql]).assert().failure();
        let err = stderr(&a);
        assert_eq!(code(&a), 4, "reader: {sql}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    run.cmd().args(["query", "SELECT 1"]).assert().success();
    assert!(!marker.exists(), "a program ran on the server");
    // Every session lives on, and nothing changed.
    writer.query_one("SELECT 1", &[]).unwrap();
    admin.query_one("SELECT 1", &[]).unwrap();
    assert_eq!(run.snapshot(), before);
    std::fs::write(&env_file, format!("OPENPROSE_POSTGRES_URL={admin_url}\n")).unwrap();
}
