use crate::common::*;
use std::path::Path;

fn copy_fixture(p: &Project, id: &str) -> Run {
    let dir = p.root().join(".prose/runs").join(id);
    std::fs::create_dir_all(dir.join("attachments")).unwrap();
    let db = dir.join("state.db");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v0-raw-sqlite3.db"),
        &db,
    )
    .unwrap();
    Run {
        id: id.into(),
        dir,
        db,
        root: p.root().to_path_buf(),
    }
}

fn columns(c: &rusqlite::Connection, table: &str) -> Vec<String> {
    c.prepare("SELECT name FROM pragma_table_info(?1)")
        .unwrap()
        .query_map([table], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

#[test]
fn an_older_database_is_upgraded_forward_keeping_user_data() {
    let p = Project::new();
    let run = copy_fixture(&p, "20260116-143052-a7b3c9");
    // reads work on it, through the scope chain written by raw SQL
    assert_eq!(
        run.get("result", Some(2)),
        b"Processed chunk into 3 sub-parts..."
    );
    assert_eq!(
        run.get("research", Some(2)),
        b"AI safety research covers alignment, robustness..."
    );

    let c = run.conn();
    let version: i64 = c
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert!(version >= 1);
    let mode: String = c
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    // missing tables, columns and indexes were added
    for t in ["agents", "agent_segments", "imports", "gate_audit_log"] {
        assert!(!columns(&c, t).is_empty(), "table {t}");
    }
    assert!(columns(&c, "gates").contains(&"metadata".to_string()));
    for idx in [
        "idx_bindings_scope",
        "idx_gates_status",
        "idx_gate_audit_run",
    ] {
        let n: i64 = c
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE type='index' AND name=?1",
                [idx],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 1, "{idx}");
    }
    // user data, the user's column and the x_ table are untouched
    let tokens: i64 = c
        .query_row(
            "SELECT token_count FROM bindings WHERE name='research'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tokens, 812);
    let metric: f64 = c
        .query_row("SELECT metric_value FROM x_metrics", [], |r| r.get(0))
        .unwrap();
    assert_eq!(metric, 812.0);
    let gate: (String, String) = c
        .query_row("SELECT prompt, status FROM gates", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(gate, ("Ready to deploy?".into(), "pending".into()));
    drop(c);

    // and writes work, with the now-valid key
    run.bind("research", "rewritten", None);
    let n: i64 = run
        .conn()
        .query_row(
            "SELECT COUNT(*) FROM bindings WHERE name='research'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(run.get("research", None), b"rewritten");

    // opening again is a no-op: same content
    let before = run.snapshot();
    run.get("research", None);
    assert_eq!(run.snapshot(), before);
}

#[test]
fn an_upgrade_that_cannot_apply_changes_nothing() {
    let p = Project::new();
    let run = copy_fixture(&p, "dupes");
    {
        // two root rows for one name: the unique key cannot be built over them
        let c = rusqlite::Connection::open(&run.db).unwrap();
        c.execute(
            "INSERT INTO bindings (name, execution_id, kind, value) VALUES ('research', NULL, 'let', 'dup')",
            [],
        )
        .unwrap();
    }
    let bytes = std::fs::read(&run.db).unwrap();
    let a = run.cmd().args(["get", "research"]).assert().failure();
    assert_eq!(code(&a), 1);
    assert!(stderr(&a).contains("could not upgrade"), "{}", stderr(&a));
    assert_eq!(stderr(&a).lines().count(), 1);
    let c = rusqlite::Connection::open(&run.db).unwrap();
    let version: i64 = c
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 0);
    assert_eq!(columns(&c, "agents"), Vec::<String>::new());
    drop(c);
    // only the journal mode (a header flag) may differ; no table or row does
    assert_eq!(snapshot_db(&run.db), {
        let copy = p.root().join("orig.db");
        std::fs::write(&copy, &bytes).unwrap();
        snapshot_db(&copy)
    });
}

#[test]
fn a_newer_database_is_refused_byte_for_byte_unchanged() {
    let p = Project::new();
    let run = copy_fixture(&p, "future");
    {
        let c = rusqlite::Connection::open(&run.db).unwrap();
        c.pragma_update(None, "user_version", 9999).unwrap();
    }
    let bytes = std::fs::read(&run.db).unwrap();
    for args in [
        vec!["get", "research"],
        vec!["bind", "x", "1"],
        vec![
            "exec-append",
            "--index",
            "1",
            "--text",
            "x",
            "--status",
            "completed",
        ],
        vec!["query", "SELECT 1"],
    ] {
        let a = run.cmd().args(&args).assert().failure();
        assert_eq!(code(&a), 4, "{args:?}");
        let err = stderr(&a);
        assert!(err.contains("schema version 9999, newer than"), "{err}");
        assert_eq!(std::fs::read(&run.db).unwrap(), bytes, "{args:?}");
    }
    assert!(!run.dir.join("state.db-wal").exists());
}

#[test]
fn files_that_are_not_state_databases_are_refused_unchanged() {
    let p = Project::new();
    // a text file
    let junk = p.write(
        "junk.db",
        b"this is not a database at all, just text. "
            .repeat(200)
            .as_slice(),
    );
    let before = std::fs::read(&junk).unwrap();
    let a = p
        .cmd()
        .args(["--run", "junk.db", "bind", "x", "1"])
        .assert()
        .failure();
    assert_eq!(code(&a), 1);
    assert!(
        stderr(&a).contains("not a SQLite database: junk.db"),
        "{}",
        stderr(&a)
    );
    assert_eq!(std::fs::read(&junk).unwrap(), before);

    // an empty file, and a SQLite database of something else
    let empty = p.write("empty.db", b"");
    let a = p
        .cmd()
        .args(["--run", "empty.db", "bind", "x", "1"])
        .assert()
        .failure();
    assert_eq!(code(&a), 1);
    assert!(
        stderr(&a).contains("not a prose state db"),
        "{}",
        stderr(&a)
    );
    assert_eq!(std::fs::read(&empty).unwrap(), b"");
    let other = p.root().join("other.db");
    rusqlite::Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE t (a); INSERT INTO t VALUES (1);")
        .unwrap();
    let before = std::fs::read(&other).unwrap();
    let a = p
        .cmd()
        .args(["--run", "other.db", "get", "x"])
        .assert()
        .failure();
    assert_eq!(code(&a), 1);
    assert_eq!(std::fs::read(&other).unwrap(), before);

    // runs that do not exist
    for r in ["nope", "./nope", "/nonexistent/state.db", "../../etc"] {
        let a = p.cmd().args(["--run", r, "get", "x"]).assert().failure();
        assert_eq!(code(&a), 3, "{r}: {}", stderr(&a));
    }
    let a = p.cmd().args(["get", "x"]).assert().failure();
    assert_eq!(code(&a), 2);
    assert!(stderr(&a).contains("no run given"));
    assert!(!p.root().join(".prose").exists());
}
