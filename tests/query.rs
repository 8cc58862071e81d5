use crate::common::*;

#[test]
fn query_prints_rows_as_sqlite3_json_does() {
    let p = Project::new();
    let run = p.init();
    run.bind("b", "two", None);
    run.bind("a", "it's \"one\"", None);
    let a = run
        .cmd()
        .args(["query", "SELECT name, value, length(value) AS n, NULL AS z, 1.5 AS r FROM bindings ORDER BY name"])
        .assert()
        .success();
    let out = String::from_utf8(a.get_output().stdout.clone()).unwrap();
    // column order is kept, as sqlite3 -json keeps it
    assert_eq!(
        out,
        "[{\"name\":\"a\",\"value\":\"it's \\\"one\\\"\",\"n\":10,\"z\":null,\"r\":1.5},{\"name\":\"b\",\"value\":\"two\",\"n\":3,\"z\":null,\"r\":1.5}]\n"
    );
    let a = run
        .cmd()
        .args(["--json", "query", "SELECT 1 WHERE 0"])
        .assert()
        .success();
    assert_eq!(stdout_json(&a), serde_json::json!([]));
}

#[test]
fn query_refuses_writes_and_leaves_the_db_unchanged() {
    let p = Project::new();
    let run = p.init();
    run.bind("keep", "me", None);
    let before = run.snapshot();
    for sql in [
        "DELETE FROM bindings",
        "UPDATE bindings SET value = 'x'",
        "INSERT INTO bindings (name) VALUES ('x')",
        "DROP TABLE bindings",
        "CREATE TABLE x_evil (a)",
        "PRAGMA user_version = 99",
        "PRAGMA journal_mode = DELETE",
        "VACUUM",
        "ATTACH DATABASE 'other.db' AS o",
    ] {
        let a = run.cmd().args(["query", sql]).assert().failure();
        assert_eq!(code(&a), 4, "{sql}: {}", stderr(&a));
        assert_eq!(run.snapshot(), before, "{sql}");
    }
    assert!(!p.root().join("other.db").exists());
    for (sql, want) in [
        ("SELECT 1; SELECT 2", 2),
        ("SELECT 1; DELETE FROM bindings", 2),
        ("SELEC 1", 2),
        ("", 2),
        ("SELECT * FROM no_such_table", 2),
    ] {
        let a = run.cmd().args(["query", sql]).assert().failure();
        assert_eq!(code(&a), want, "{sql}: {}", stderr(&a));
        assert_eq!(run.snapshot(), before, "{sql}");
    }
}
