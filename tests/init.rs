use crate::common::*;

on_both!(
    init_refuses_existing_run_id_and_leaves_it_unchanged,
    init_creates_run_directory_db_and_run_row,
    init_generates_spec_format_ids_and_human_text,
    init_honours_root_flag_and_env,
    init_refusals_leave_nothing_behind,
);

/// The run's row as the server holds it: id, program path, source, status, state mode.
type RunRow = (String, Option<String>, Option<String>, String, String);

fn pg_run_row(p: &Project, id: &str) -> Option<RunRow> {
    let mut c = postgres::Client::connect(p.pg_url.as_ref()?, postgres::NoTls).unwrap();
    c.query_opt(
        "SELECT id, program_path, program_source, status, state_mode FROM openprose.run
          WHERE id = $1",
        &[&id],
    )
    .unwrap()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
}

/// How many runs the server holds (0 on SQLite).
fn pg_run_count(p: &Project) -> i64 {
    let Some(url) = &p.pg_url else { return 0 };
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let made: bool = c
        .query_one("SELECT to_regclass('openprose.run') IS NOT NULL", &[])
        .unwrap()
        .get(0);
    if !made {
        return 0;
    }
    c.query_one("SELECT COUNT(*) FROM openprose.run", &[])
        .unwrap()
        .get(0)
}

fn init_creates_run_directory_db_and_run_row(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let program = "let research = session \"Research AI safety\"\n";
    p.write("demo.prose", program.as_bytes());
    let a = p
        .cmd()
        .args([
            "--json",
            "init",
            "demo.prose",
            "--run-id",
            "20260116-143052-a7b3c9",
        ])
        .args(p.backend_flag())
        .assert()
        .success();
    let v = stdout_json(&a);
    assert_eq!(v["run_id"], "20260116-143052-a7b3c9");
    assert_eq!(v["dir"], ".prose/runs/20260116-143052-a7b3c9");
    match b {
        Backend::Sqlite => assert_eq!(v["db"], ".prose/runs/20260116-143052-a7b3c9/state.db"),
        // The server, its password masked.
        Backend::Postgres => {
            let db = v["db"].as_str().unwrap();
            // The tests' server trusts its connections: no password, so none masked.
            assert!(db.starts_with("postgresql://postgres@"), "{db}");
            assert!(!db.contains("***"), "{db}");
        }
    }

    let dir = p.root().join(".prose/runs/20260116-143052-a7b3c9");
    assert!(dir.join("attachments").is_dir());
    assert_eq!(
        std::fs::read_to_string(dir.join("program.prose")).unwrap(),
        program
    );

    if b == Backend::Postgres {
        // The run lives on the server; its directory holds the program and attachments only.
        assert!(!dir.join("state.db").exists());
        let row = pg_run_row(&p, "20260116-143052-a7b3c9").unwrap();
        assert_eq!(
            row,
            (
                "20260116-143052-a7b3c9".into(),
                Some("demo.prose".into()),
                Some(program.into()),
                "running".into(),
                "postgres".into()
            )
        );
        return;
    }
    let c = rusqlite::Connection::open(dir.join("state.db")).unwrap();
    let row: (String, String, String, String, String) = c
        .query_row(
            "SELECT id, program_path, program_source, status, state_mode FROM run",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap();
    assert_eq!(
        row,
        (
            "20260116-143052-a7b3c9".into(),
            "demo.prose".into(),
            program.into(),
            "running".into(),
            "sqlite".into()
        )
    );
    let mode: String = c
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let version: i64 = c
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert!(version >= 1);
    for table in [
        "run",
        "execution",
        "bindings",
        "agents",
        "agent_segments",
        "imports",
        "gates",
        "gate_audit_log",
    ] {
        let n: i64 = c
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE type='table' AND name=?1",
                [table],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 1, "table {table}");
    }
}

fn init_generates_spec_format_ids_and_human_text(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let a = p
        .cmd()
        .arg("init")
        .args(p.backend_flag())
        .assert()
        .success();
    let out = String::from_utf8(a.get_output().stdout.clone()).unwrap();
    let id = out
        .lines()
        .next()
        .unwrap()
        .strip_prefix("Run created: ")
        .unwrap();
    // {YYYYMMDD}-{HHMMSS}-{random6}
    let parts: Vec<&str> = id.split('-').collect();
    assert_eq!(parts.len(), 3, "{id}");
    assert!(parts[0].len() == 8 && parts[0].chars().all(|c| c.is_ascii_digit()));
    assert!(parts[1].len() == 6 && parts[1].chars().all(|c| c.is_ascii_digit()));
    assert!(parts[2].len() == 6 && parts[2].chars().all(|c| c.is_ascii_alphanumeric()));
    if b == Backend::Postgres {
        assert!(pg_run_row(&p, id).is_some());
        assert!(p.root().join(".prose/runs").join(id).is_dir());
        assert!(
            out.contains("Database: postgresql://postgres@") && !out.contains("***"),
            "{out}"
        );
        return;
    }
    assert!(p
        .root()
        .join(".prose/runs")
        .join(id)
        .join("state.db")
        .is_file());
    assert!(out.contains(&format!("Database: .prose/runs/{id}/state.db")));
}

fn init_honours_root_flag_and_env(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let elsewhere = p.root().join("proj");
    std::fs::create_dir_all(elsewhere.join(".prose")).unwrap();
    if let Some(url) = &p.pg_url {
        // The other root has its own settings, naming the same server.
        std::fs::write(
            elsewhere.join(".prose/.env"),
            format!("OPENPROSE_POSTGRES_URL={url}\n"),
        )
        .unwrap();
    }
    // The run lands in the root given, and (on PostgreSQL) on the server that root names.
    let made = |id: &str| match b {
        Backend::Sqlite => elsewhere
            .join(".prose/runs")
            .join(id)
            .join("state.db")
            .is_file(),
        Backend::Postgres => {
            elsewhere.join(".prose/runs").join(id).is_dir() && pg_run_row(&p, id).is_some()
        }
    };
    p.cmd()
        .args(["init", "--run-id", "a1", "--root"])
        .arg(&elsewhere)
        .args(p.backend_flag())
        .assert()
        .success();
    assert!(made("a1"));
    p.cmd()
        .env("PROSE_ROOT", &elsewhere)
        .args(["init", "--run-id", "a2"])
        .args(p.backend_flag())
        .assert()
        .success();
    assert!(made("a2"));
    assert!(!p.root().join(".prose/runs").exists());
    // and a later command finds the run through the same root
    p.cmd()
        .env("PROSE_ROOT", &elsewhere)
        .args(["--run", "a2", "bind", "x", "1"])
        .assert()
        .success();
    let a = p
        .cmd()
        .env("PROSE_ROOT", &elsewhere)
        .args(["--run", "a2", "get", "x"])
        .assert()
        .success();
    assert_eq!(a.get_output().stdout, b"1");
}

fn init_refuses_existing_run_id_and_leaves_it_unchanged(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    p.cmd()
        .args(["init", "--run-id", "r1"])
        .args(p.backend_flag())
        .assert()
        .success();
    let run = Run {
        id: "r1".into(),
        dir: p.root().join(".prose/runs/r1"),
        db: p.root().join(".prose/runs/r1/state.db"),
        root: p.root().to_path_buf(),
        pg_url: p.pg_url.clone(),
    };
    run.bind("keep", "me", None);
    let before = run.snapshot();
    let files = snapshot_files(&run.dir);
    let a = p
        .cmd()
        .args(["init", "--run-id", "r1"])
        .args(p.backend_flag())
        .assert()
        .failure();
    assert_eq!(code(&a), 4);
    assert!(stderr(&a).contains("run already exists"), "{}", stderr(&a));
    assert_eq!(run.snapshot(), before);
    assert_eq!(snapshot_files(&run.dir), files);
    if let Some(url) = &p.pg_url {
        // A run made from another machine exists only on the server: its id is taken too.
        let before = snapshot_pg(url, "r1");
        std::fs::remove_dir_all(&run.dir).unwrap();
        let a = p
            .cmd()
            .args(["init", "--run-id", "r1"])
            .args(p.backend_flag())
            .assert()
            .failure();
        assert_eq!(code(&a), 4, "{}", stderr(&a));
        assert_eq!(snapshot_pg(url, "r1"), before);
        assert!(!run.dir.exists());
    }
}

fn init_refusals_leave_nothing_behind(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let a = p
        .cmd()
        .args(["init", "missing.prose"])
        .args(p.backend_flag())
        .assert()
        .failure();
    assert_eq!(code(&a), 3);
    assert!(stderr(&a).contains("program not found: missing.prose"));

    p.write("bad.prose", b"let x = \xff\xfe");
    let a = p
        .cmd()
        .args(["init", "bad.prose"])
        .args(p.backend_flag())
        .assert()
        .failure();
    assert_eq!(code(&a), 2);

    for bad in [
        "../escape",
        "a/b",
        "",
        "..",
        ".hidden",
        "x y",
        "a\u{1b}[31m",
    ] {
        let a = p
            .cmd()
            .args(["init", "--run-id", bad])
            .args(p.backend_flag())
            .assert()
            .failure();
        assert_eq!(code(&a), 2, "{bad:?}");
    }
    let runs = p.root().join(".prose/runs");
    let left: Vec<_> = std::fs::read_dir(&runs)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
    assert!(!p.root().join("escape").exists());
    assert_eq!(pg_run_count(&p), 0);
}
