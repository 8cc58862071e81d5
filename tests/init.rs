use crate::common::*;

on_both!(init_refuses_existing_run_id_and_leaves_it_unchanged,);

#[test]
fn init_creates_run_directory_db_and_run_row() {
    let p = Project::new();
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
        .assert()
        .success();
    let v = stdout_json(&a);
    assert_eq!(v["run_id"], "20260116-143052-a7b3c9");
    assert_eq!(v["dir"], ".prose/runs/20260116-143052-a7b3c9");
    assert_eq!(v["db"], ".prose/runs/20260116-143052-a7b3c9/state.db");

    let dir = p.root().join(".prose/runs/20260116-143052-a7b3c9");
    assert!(dir.join("attachments").is_dir());
    assert_eq!(
        std::fs::read_to_string(dir.join("program.prose")).unwrap(),
        program
    );

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

#[test]
fn init_generates_spec_format_ids_and_human_text() {
    let p = Project::new();
    let a = p.cmd().arg("init").assert().success();
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
    assert!(p
        .root()
        .join(".prose/runs")
        .join(id)
        .join("state.db")
        .is_file());
    assert!(out.contains(&format!("Database: .prose/runs/{id}/state.db")));
}

#[test]
fn init_honours_root_flag_and_env() {
    let p = Project::new();
    let elsewhere = p.root().join("proj");
    std::fs::create_dir(&elsewhere).unwrap();
    p.cmd()
        .args(["init", "--run-id", "a1", "--root"])
        .arg(&elsewhere)
        .assert()
        .success();
    assert!(elsewhere.join(".prose/runs/a1/state.db").is_file());
    p.cmd()
        .env("PROSE_ROOT", &elsewhere)
        .args(["init", "--run-id", "a2"])
        .assert()
        .success();
    assert!(elsewhere.join(".prose/runs/a2/state.db").is_file());
    // and a later command finds the run through the same root
    p.cmd()
        .env("PROSE_ROOT", &elsewhere)
        .args(["--run", "a2", "bind", "x", "1"])
        .assert()
        .success();
}

fn init_refuses_existing_run_id_and_leaves_it_unchanged(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    p.cmd().args(["init", "--run-id", "r1"]).assert().success();
    let run = Run {
        id: "r1".into(),
        dir: p.root().join(".prose/runs/r1"),
        db: p.root().join(".prose/runs/r1/state.db"),
        root: p.root().to_path_buf(),
        pg_url: None,
    };
    run.bind("keep", "me", None);
    let before = run.snapshot();
    let a = p.cmd().args(["init", "--run-id", "r1"]).assert().failure();
    assert_eq!(code(&a), 4);
    assert!(stderr(&a).contains("run already exists"), "{}", stderr(&a));
    assert_eq!(run.snapshot(), before);
}

#[test]
fn init_refusals_leave_nothing_behind() {
    let p = Project::new();
    let a = p.cmd().args(["init", "missing.prose"]).assert().failure();
    assert_eq!(code(&a), 3);
    assert!(stderr(&a).contains("program not found: missing.prose"));

    p.write("bad.prose", b"let x = \xff\xfe");
    let a = p.cmd().args(["init", "bad.prose"]).assert().failure();
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
        let a = p.cmd().args(["init", "--run-id", bad]).assert().failure();
        assert_eq!(code(&a), 2, "{bad:?}");
    }
    let runs = p.root().join(".prose/runs");
    let left: Vec<_> = std::fs::read_dir(&runs)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
    assert!(!p.root().join("escape").exists());
}
