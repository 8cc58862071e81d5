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
