use crate::common::*;
use std::path::Path;

fn copy_fixture(p: &Project, id: &str) -> Run {
    copy_named_fixture(p, id, "v0-raw-sqlite3.db")
}

fn copy_named_fixture(p: &Project, id: &str, fixture: &str) -> Run {
    let dir = p.root().join(".prose/runs").join(id);
    std::fs::create_dir_all(dir.join("attachments")).unwrap();
    let db = dir.join("state.db");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(fixture),
        &db,
    )
    .unwrap();
    Run {
        id: id.into(),
        dir,
        db,
        root: p.root().to_path_buf(),
        pg_url: None,
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
    let original = std::fs::read(&run.db).unwrap();
    // reads work on it, through the scope chain written by raw SQL, and change nothing:
    // not a byte, not the journal mode
    assert_eq!(
        run.get("result", Some(2)),
        b"Processed chunk into 3 sub-parts..."
    );
    assert_eq!(
        run.get("research", Some(2)),
        b"AI safety research covers alignment, robustness..."
    );
    for args in [
        // (not `gates`: a listing that finds a gate past its deadline records the timeout,
        // which is a write)
        vec!["--json", "query", "SELECT * FROM bindings"],
        vec!["--json", "runs"],
        vec!["log"],
        vec!["stats"],
    ] {
        run.cmd().args(&args).assert().success();
    }
    assert!(
        std::fs::read(&run.db).unwrap() == original,
        "a read changed the file"
    );
    assert!(!run.dir.join("state.db-wal").exists());
    // the first write upgrades it
    run.bind("first_write", "upgrades", None);

    let c = run.conn();
    let version: i64 = c
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 1_010_011, "schema 11, readers 1, writers 10");
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
        "idx_gate_audit_seq_alone",
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
    // Named after the id it records: a directory named otherwise is a copy, which takes no
    // writes.
    let run = copy_fixture(&p, "20260116-143052-a7b3c9");
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
    // reads work, through the shims, and change nothing
    run.cmd()
        .args(["get", "result", "--execution-id", "2"])
        .assert()
        .success();
    // a write tries the upgrade, which cannot apply
    let a = run.cmd().args(["bind", "x", "1"]).assert().failure();
    assert_eq!(code(&a), 1);
    assert!(stderr(&a).contains("could not upgrade"), "{}", stderr(&a));
    assert_eq!(stderr(&a).lines().count(), 1);
    // byte for byte, journal mode included
    assert!(
        std::fs::read(&run.db).unwrap() == bytes,
        "the failed upgrade changed the file"
    );
    assert!(!run.dir.join("state.db-wal").exists());
}

#[test]
fn a_newer_database_is_refused_byte_for_byte_unchanged() {
    let p = Project::new();
    let run = copy_fixture(&p, "future");
    {
        let c = rusqlite::Connection::open(&run.db).unwrap();
        // A bare newer version: from no release that says what it asks, so it asks for itself.
        c.pragma_update(None, "user_version", 12).unwrap();
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
        assert!(
            err.contains("schema version 12, which needs prose-state schema 12 or later to read"),
            "{err}"
        );
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

/// (table, column, declared type, default) of every column of every table, for comparing
/// an upgraded file with a fresh one.
fn column_defs(db: &Path) -> Vec<(String, String, String, Option<String>)> {
    let c = rusqlite::Connection::open(db).unwrap();
    let tables: Vec<String> = c
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    let mut out = Vec::new();
    for t in tables {
        let mut s = c
            .prepare("SELECT name, type, dflt_value FROM pragma_table_info(?1)")
            .unwrap();
        let cols: Vec<(String, String, Option<String>)> = s
            .query_map([&t], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        for (name, ty, default) in cols {
            out.push((t.clone(), name, ty, default));
        }
    }
    out
}

/// Every raw-sqlite3 shape kept as a fixture: read without a change, upgraded by the first
/// write, every embedded column present afterwards with the embedded schema's own type and
/// default (function defaults such as datetime('now') included), user data, user columns,
/// user views and user indexes kept.
#[test]
fn every_raw_shape_upgrades_with_every_default_of_the_embedded_schema() {
    let p = Project::new();
    let fresh = p.init();
    let want = column_defs(&fresh.db);
    for (fixture, id, name, value) in [
        (
            "v0-raw-sqlite3.db",
            "20260116-143052-a7b3c9",
            "research",
            "AI safety research covers alignment, robustness...",
        ),
        (
            "v0-missing-timestamps.db",
            "20260302-111111-ts0001",
            "x",
            "kept",
        ),
        (
            "v0-minimal-columns.db",
            "20260301-101010-min001",
            "research",
            "root value",
        ),
        ("v1-prose-state-0.1.db", "20261122-090000-v1v1v1", "", ""),
    ] {
        let run = copy_named_fixture(&p, id, fixture);
        let original = std::fs::read(&run.db).unwrap();
        if !name.is_empty() {
            assert_eq!(run.get(name, None), value.as_bytes(), "{fixture}");
        }
        run.cmd().args(["--json", "runs"]).assert().success();
        run.cmd()
            .args(["--json", "query", "SELECT * FROM gates"])
            .assert()
            .success();
        run.cmd().args(["log"]).assert().success();
        assert!(
            std::fs::read(&run.db).unwrap() == original,
            "{fixture}: a read changed the file"
        );
        // The first write upgrades it, when every change is additive; a table rebuild is
        // refused (4, the file unchanged) until `migrate --yes`, which says what it does.
        let needs_rebuild = fixture.starts_with("v0-m");
        if needs_rebuild {
            let a = run
                .cmd()
                .args(["bind", "after_upgrade", "written"])
                .assert()
                .failure();
            assert_eq!(code(&a), 4, "{fixture}: {}", stderr(&a));
            assert!(stderr(&a).contains("prose-state migrate"), "{}", stderr(&a));
            assert!(
                std::fs::read(&run.db).unwrap() == original,
                "{fixture}: refused write changed it"
            );
            let a = run.cmd().args(["migrate"]).assert().success();
            let plan = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
            assert!(plan.contains("would migrate schema 0 -> 11"), "{plan}");
            assert!(plan.contains("rebuild table bindings to add"), "{plan}");
            assert!(plan.contains("created_at, updated_at"), "{plan}");
            assert!(
                std::fs::read(&run.db).unwrap() == original,
                "{fixture}: a dry run changed it"
            );
            let a = run
                .cmd()
                .args(["--json", "migrate", "--yes"])
                .assert()
                .success();
            let v = stdout_json(&a);
            assert_eq!(v[0]["applied"], true);
            assert_eq!(v[0]["to"], 11);
        }
        run.bind("after_upgrade", "written", None);
        let got = column_defs(&run.db);
        for w in &want {
            let found = got.iter().find(|g| g.0 == w.0 && g.1 == w.1);
            assert_eq!(found, Some(w), "{fixture}: column {}.{}", w.0, w.1);
        }
        let c = run.conn();
        let v: i64 = c
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, 1_010_011, "{fixture}");
        let mode: String = c
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal", "{fixture}");
        let ok: String = c
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok", "{fixture}");
        let fk: i64 = c
            .query_row("SELECT COUNT(*) FROM pragma_foreign_key_check", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(fk, 0, "{fixture}");
        // A raw insert relying on the defaults gets its timestamps, as the spec expects.
        c.execute(
            "INSERT INTO bindings (name, value) VALUES ('raw_after', 'v')",
            [],
        )
        .unwrap();
        let stamped: Option<String> = c
            .query_row(
                "SELECT created_at FROM bindings WHERE name = 'raw_after'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(stamped.is_some_and(|t| t.len() == 19), "{fixture}");
        drop(c);
        if !name.is_empty() {
            assert_eq!(run.get(name, None), value.as_bytes(), "{fixture} after");
        }
        assert_eq!(run.get("after_upgrade", None), b"written");
    }
    // The minimal shape's user column, view and index, and its scope chain, survive.
    let run = Run {
        id: "20260301-101010-min001".into(),
        dir: p.root().join(".prose/runs/20260301-101010-min001"),
        db: p.root().join(".prose/runs/20260301-101010-min001/state.db"),
        root: p.root().to_path_buf(),
        pg_url: None,
    };
    assert_eq!(run.get("research", Some(3)), b"inner value");
    let c = run.conn();
    let tokens: i64 = c
        .query_row(
            "SELECT x_tokens FROM bindings WHERE name = 'research' AND execution_id = 3",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tokens, 7);
    let viewed: i64 = c
        .query_row("SELECT COUNT(*) FROM x_summary", [], |r| r.get(0))
        .unwrap();
    assert!(viewed >= 3);
    let idx: i64 = c
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'x_bindings_kind'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(idx, 1);
    let segments: i64 = c
        .query_row("SELECT COUNT(*) FROM agent_segments", [], |r| r.get(0))
        .unwrap();
    assert_eq!(segments, 1);
    // and it keeps working: a gate decided on the upgraded file
    p.cmd()
        .args(["approve", &run.id, "deploy", "--yes", "--as", "alice"])
        .assert()
        .success();
}

/// A file stamped by a newer prose-state: read and written when it allows, read-only when
/// its changes need a newer writer, refused when they need a newer reader. A refused write
/// leaves it byte for byte.
#[test]
fn a_newer_database_is_used_as_far_as_its_stamp_allows() {
    let p = Project::new();
    for (version, min_reader, min_writer, reads, writes) in [
        (12, 1, 2, true, true),
        (12, 1, 12, true, false),
        (13, 13, 13, false, false),
    ] {
        let run = p.init();
        run.bind("keep", "me", None);
        {
            // What a newer build would have done: an additive column and its stamp.
            let c = run.conn();
            let stamp = version + 1_000 * min_writer + 1_000_000 * min_reader;
            c.execute_batch(&format!(
                "ALTER TABLE bindings ADD COLUMN future_{version} TEXT;
                 PRAGMA user_version = {stamp};
                 PRAGMA wal_checkpoint(TRUNCATE);"
            ))
            .unwrap();
        }
        let bytes = std::fs::read(&run.db).unwrap();
        let a = run.cmd().args(["get", "keep"]).assert();
        assert_eq!(code(&a) == 0, reads, "v{version} read: {}", stderr(&a));
        if !reads {
            assert_eq!(code(&a), 4);
            assert!(stderr(&a).contains("to read"), "{}", stderr(&a));
        }
        let a = run.cmd().args(["bind", "new", "value"]).assert();
        assert_eq!(code(&a) == 0, writes, "v{version} write: {}", stderr(&a));
        let c = run.conn();
        let v: i64 = c
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v % 1000, version, "never downgraded");
        drop(c);
        if writes {
            assert_eq!(run.get("new", None), b"value");
        } else {
            assert_eq!(code(&a), 4);
            assert!(stderr(&a).contains("upgrade prose-state"), "{}", stderr(&a));
            assert!(
                std::fs::read(&run.db).unwrap() == bytes,
                "v{version}: a refused write changed the file"
            );
        }
    }
}

#[test]
fn migrate_on_a_current_run_has_nothing_to_do() {
    let p = Project::new();
    let run = p.init();
    let before = run.snapshot();
    let a = run.cmd().args(["migrate", "--yes"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(out.contains("schema 11, nothing to do"), "{out}");
    assert_eq!(run.snapshot(), before);
}

/// The shared PostgreSQL schema follows the same rule: a read of an older schema changes
/// nothing, the first write upgrades it, and a newer one is used as far as it allows.
#[test]
fn the_postgres_schema_never_strands_a_team() {
    let Some(p) = Project::on(Backend::Postgres) else {
        return;
    };
    let run = p.init();
    run.bind("keep", "me", None);
    let mut c = postgres::Client::connect(p.pg_url.as_deref().unwrap(), postgres::NoTls).unwrap();
    let has_key_column = |c: &mut postgres::Client| -> bool {
        c.query_one(
            "SELECT EXISTS (SELECT 1 FROM information_schema.columns
             WHERE table_schema = 'openprose' AND table_name = 'execution'
               AND column_name = 'idempotency_key')",
            &[],
        )
        .unwrap()
        .get(0)
    };
    // Back to what schema 1 looked like.
    c.batch_execute(
        "DROP INDEX openprose.idx_execution_key;
         ALTER TABLE openprose.execution DROP COLUMN idempotency_key;
         ALTER TABLE openprose.schema_version DROP COLUMN min_reader, DROP COLUMN min_writer;
         UPDATE openprose.schema_version SET version = 1;",
    )
    .unwrap();
    assert_eq!(run.get("keep", None), b"me");
    p.cmd().args(["--json", "runs"]).assert().success();
    run.cmd().args(["log"]).assert().success();
    assert!(!has_key_column(&mut c), "a read upgraded the schema");
    let a = run.cmd().args(["migrate"]).assert().success();
    assert!(
        String::from_utf8_lossy(&a.get_output().stdout).contains("would migrate schema 1 -> 12")
    );
    assert!(!has_key_column(&mut c), "a dry run upgraded the schema");
    // The first write upgrades it.
    run.cmd()
        .args([
            "exec-append",
            "--index",
            "1",
            "--text",
            "t",
            "--status",
            "executing",
            "--key",
            "a",
        ])
        .assert()
        .success();
    assert!(has_key_column(&mut c));
    let v: i32 = c
        .query_one("SELECT max(version) FROM openprose.schema_version", &[])
        .unwrap()
        .get(0);
    assert_eq!(v, 12);
    // Newer, and writable by this build.
    c.batch_execute(
        "UPDATE openprose.schema_version SET version = 13, min_reader = 1, min_writer = 4",
    )
    .unwrap();
    run.bind("newer", "ok", None);
    assert_eq!(run.get("newer", None), b"ok");
    // Newer, and not writable: reads work, writes are refused and change nothing.
    c.batch_execute(
        "UPDATE openprose.schema_version SET version = 14, min_reader = 1, min_writer = 14",
    )
    .unwrap();
    assert_eq!(run.get("keep", None), b"me");
    let before = count_rows(&p, &run, "bindings", "true");
    let a = run.cmd().args(["bind", "refused", "x"]).assert().failure();
    assert_eq!(code(&a), 4, "{}", stderr(&a));
    assert!(stderr(&a).contains("upgrade prose-state"), "{}", stderr(&a));
    assert_eq!(count_rows(&p, &run, "bindings", "true"), before);
    // Newer, and not even readable.
    c.batch_execute(
        "UPDATE openprose.schema_version SET version = 14, min_reader = 14, min_writer = 14",
    )
    .unwrap();
    let a = run.cmd().args(["get", "keep"]).assert().failure();
    assert_eq!(code(&a), 4, "{}", stderr(&a));
    let v: i32 = c
        .query_one("SELECT max(version) FROM openprose.schema_version", &[])
        .unwrap()
        .get(0);
    assert_eq!(v, 14, "never downgraded");
}

/// A run written by a schema-5 build (the audit log without its index on `seq` alone): read
/// as it is, upgraded by its first write, its chain intact; and a schema-5 build may still
/// write a schema-6 file (the stamp asks writers of 5).
#[test]
fn a_schema_5_run_gains_the_audit_index_on_its_first_write() {
    let p = Project::new();
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "ship", "--prompt", "Ship?"])
        .assert()
        .success();
    run.cmd().args(["checkpoint"]).assert().success();
    {
        let c = run.conn();
        c.execute_batch("DROP INDEX idx_gate_audit_seq_alone; PRAGMA user_version = 1005005;")
            .unwrap();
    }
    run.cmd().args(["checkpoint"]).assert().success();
    let index = |c: &rusqlite::Connection| -> i64 {
        c.query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'idx_gate_audit_seq_alone'",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    let before = run.snapshot();
    run.cmd().args(["--json", "gates"]).assert().success();
    run.cmd().args(["gates", "verify"]).assert().success();
    let a = run.cmd().args(["migrate"]).assert().success();
    let plan = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(plan.contains("would migrate schema 5 -> 11"), "{plan}");
    assert!(
        plan.contains("create index idx_gate_audit_seq_alone on gate_audit_log"),
        "{plan}"
    );
    assert_eq!(run.snapshot(), before, "a read changed a schema-5 run");
    run.cmd()
        .args(["approve", "ship", "--as", "bob", "--yes"])
        .assert()
        .success();
    let c = run.conn();
    let version: i64 = c
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 1_010_011);
    assert_eq!(index(&c), 1, "the first write added the index");
    run.cmd().args(["gates", "verify"]).assert().success();
    let rows: i64 = c
        .query_row("SELECT COUNT(*) FROM gate_audit_log", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 3, "sealed at init, created and approved: one chain");
}

/// A run written by a schema-6 build (without the indexes `resume` reads through): `migrate`
/// names them, `resume` answers from it all the same, and its first write adds them.
#[test]
fn a_schema_6_run_gains_the_resume_indexes_on_its_first_write() {
    let p = Project::new();
    let run = p.init();
    let block = run.exec(1, "do a()", "executing", None);
    let done = run.exec(2, "session x", "completed", Some(block));
    run.bind("x", "1", None);
    let names = [
        "idx_execution_status",
        "idx_execution_statement",
        "idx_bindings_execution",
    ];
    {
        let c = run.conn();
        for n in names {
            c.execute_batch(&format!("DROP INDEX {n}")).unwrap();
        }
        c.execute_batch("PRAGMA user_version = 1005006;").unwrap();
    }
    let a = run.cmd().args(["migrate"]).assert().success();
    let plan = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(plan.contains("would migrate schema 6 -> 11"), "{plan}");
    for n in names {
        assert!(plan.contains(&format!("create index {n}")), "{plan}");
    }
    let v = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
    assert_eq!(v["position"]["current"]["id"], block);
    assert_eq!(v["position"]["after"]["id"], done);
    assert_eq!(v["counts"]["bindings_visible"], 1);
    let c = run.conn();
    let version: i64 = c
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 1_010_011, "resume records itself: a write");
    for n in names {
        let found: i64 = c
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = ?1",
                [n],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(found, 1, "{n}");
    }
}

/// A run written by a schema-10 build (without the index of openings by the binding they
/// answer into): a gate's answer stays its decision's alone before and after the first write
/// adds the index, and an opening whose metadata a raw writer spoiled fails no write.
#[test]
fn a_schema_10_run_gains_the_answers_index_and_keeps_every_answer_its_own() {
    let p = Project::new();
    let run = p.init();
    let schema = r#"{"type":"object","properties":{"size":{"type":"integer"}}}"#;
    let open = |gate: &str, into: &str| {
        run.cmd()
            .args(["gates", "create", gate, "--prompt", "Size?"])
            .args(["--response-schema", schema, "--response-binding", into])
            .assert()
            .success();
    };
    open("before", "size_before");
    {
        let c = run.conn();
        c.execute_batch("DROP INDEX idx_gate_audit_answers; PRAGMA user_version = 1010010;")
            .unwrap();
    }
    let index = |c: &rusqlite::Connection| -> i64 {
        c.query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'idx_gate_audit_answers'",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    let a = run.cmd().args(["migrate"]).assert().success();
    let plan = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(plan.contains("would migrate schema 10 -> 11"), "{plan}");
    assert!(
        plan.contains("create index idx_gate_audit_answers on gate_audit_log"),
        "{plan}"
    );
    // Without the index, the answer's name is still only a decision's to write.
    let a = run
        .cmd()
        .args(["bind", "size_before", "7"])
        .assert()
        .failure();
    assert_eq!(code(&a), 4, "{}", stderr(&a));
    let written = |c: &rusqlite::Connection, name: &str| -> i64 {
        c.query_row(
            "SELECT (SELECT COUNT(*) FROM bindings WHERE name = ?1)
                  + (SELECT COUNT(*) FROM binding_history WHERE name = ?1)",
            [name],
            |r| r.get(0),
        )
        .unwrap()
    };
    assert_eq!(written(&run.conn(), "size_before"), 0);
    // A write upgrades it (the refused bind's open already did); a spoiled opening a raw
    // writer adds is not indexed and fails nothing.
    run.bind("other", "1", None);
    let c = run.conn();
    let version: i64 = c
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 1_010_011);
    assert_eq!(index(&c), 1, "the first write added the index");
    c.execute_batch(
        "INSERT INTO gate_audit_log (gate_id, run_id, event_type, metadata)
         SELECT 'spoiled', id, 'created', '{\"response_binding\":' FROM run",
    )
    .unwrap();
    open("after", "size_after");
    for name in ["size_before", "size_after"] {
        let a = run.cmd().args(["bind", name, "7"]).assert().failure();
        assert_eq!(code(&a), 4, "{name}: {}", stderr(&a));
        assert_eq!(written(&c, name), 0, "{name}");
    }
    run.bind("other", "2", None);
    run.cmd()
        .args(["approve", "after", "--as", "alice", "--yes"])
        .args(["--response", r#"{"size":3}"#])
        .assert()
        .success();
    assert_eq!(run.get("size_after", None), br#"{"size":3}"#);
}
