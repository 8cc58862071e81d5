//! Operating the state from a terminal: log, completions, man, checkpoint, vacuum, stats,
//! doctor, prune.

use crate::common::*;

on_both!(doctor_finds_a_missing_attachment_and_a_stale_run);

on_both!(
    log_narrates_the_execution_log,
    log_follow_picks_up_events_appended_after_it_started,
);
use std::io::{BufRead, BufReader};
use std::process::Stdio;

fn script(run: &Run) {
    let x = |i: &str, t: &str, s: &str, m: &str| {
        run.cmd()
            .args([
                "exec-append",
                "--index",
                i,
                "--text",
                t,
                "--status",
                s,
                "--metadata",
                m,
            ])
            .assert()
            .success();
    };
    x("3", "let research = session: researcher", "executing", "{}");
    x("3", "let research = session: researcher", "completed", "{}");
    x(
        "5",
        "parallel:",
        "started",
        r#"{"parallel_id": "p1", "branches": ["a", "b", "c"]}"#,
    );
    x(
        "5",
        "parallel:a",
        "completed",
        r#"{"parallel_id": "p1", "branch": "a"}"#,
    );
    x("5", "parallel:", "joined", r#"{"parallel_id": "p1"}"#);
    x("10", "loop", "started", r#"{"loop_id": "l1", "max": 5}"#);
    x(
        "10",
        "loop",
        "iteration",
        r#"{"loop_id": "l1", "iteration": 2}"#,
    );
    x(
        "10",
        "loop",
        "exited",
        r#"{"loop_id": "l1", "iteration": 2, "reason": "condition_satisfied"}"#,
    );
}

fn log_narrates_the_execution_log(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    script(&run);
    let a = run.cmd().arg("log").assert().success();
    let text = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    // Each line: the time, the narration, and who appended the record (` · NAME`: the login
    // name, else the account), which varies with where the test runs.
    let narr: Vec<&str> = text
        .lines()
        .map(|l| l[9..].split(" · ").next().unwrap())
        .collect();
    assert_eq!(
        narr,
        [
            "3→ let research = session: researcher …",
            "3→ let research = session: researcher ✓",
            "∥ [a b c] start",
            "∥ a ✓",
            "∥ [a b c] done",
            "loop:0/5 start",
            "loop:2/5",
            "loop:2/5 exit (condition_satisfied)",
        ]
    );
    assert!(
        !text.contains('\x1b'),
        "no colour when stdout is not a terminal"
    );
    // JSON Lines: one document a line, each the record plus its narration
    let a = run.cmd().args(["--json", "log"]).assert().success();
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&a.get_output().stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 8);
    assert_eq!(lines[4]["status"], "joined");
    assert_eq!(lines[4]["narration"], "∥ [a b c] done");
    assert_eq!(lines[7]["metadata"]["reason"], "condition_satisfied");
}

fn log_follow_picks_up_events_appended_after_it_started(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.exec(1, "first", "completed", None);
    let mut child = run
        .std_cmd()
        .args(["--json", "log", "--follow", "--poll-ms", "100"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.contains("\"first\""), "{line}");
    // while it follows, a writer can still write (no read transaction is held open)
    run.exec(2, "second", "completed", None);
    run.bind("x", "v", None);
    line.clear();
    out.read_line(&mut line).unwrap();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["statement_text"], "second");
    assert_eq!(v["narration"], "2→ second ✓");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn completions_and_man_page_come_from_the_cli() {
    let p = Project::new();
    for shell in ["bash", "zsh", "fish"] {
        let a = p.cmd().args(["completions", shell]).assert().success();
        let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
        assert!(
            out.contains("prose-state") && out.contains("exec-append") && out.contains("gates"),
            "{shell}"
        );
    }
    let a = p.cmd().arg("man").assert().success();
    let page = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(
        page.starts_with(".ie") || page.contains(".TH prose-state"),
        "{page}"
    );
    assert!(page.contains("exec\\-append"));
    assert_eq!(
        code(&p.cmd().args(["completions", "cmd.exe"]).assert().failure()),
        2
    );
}

#[test]
fn stats_reports_sizes_rows_and_pragmas() {
    let p = Project::new();
    let run = p.init();
    script(&run);
    run.bind("x", "12345", None);
    run.cmd()
        .args(["bind", "big", "--attach-over", "10"])
        .write_stdin("a".repeat(100))
        .assert()
        .success();
    let a = run.cmd().args(["--json", "stats"]).assert().success();
    let v = stdout_json(&a);
    let r = &v["runs"][0];
    assert_eq!(r["run_id"], run.id);
    assert_eq!(r["backend"], "sqlite");
    assert!(r["schema_version"].as_i64().unwrap() >= 3);
    assert_eq!(r["db_bytes"], std::fs::metadata(&run.db).unwrap().len());
    assert_eq!(r["tables"]["execution"], 8);
    assert_eq!(r["tables"]["bindings"], 2);
    assert_eq!(r["execution_status"]["completed"], 2);
    assert_eq!(r["attachment_files"], 1);
    assert_eq!(r["attachment_bytes"], 100);
    assert_eq!(r["settings"]["journal_mode"], "wal");
    assert_eq!(r["settings"]["foreign_keys"], "1");
    assert_eq!(r["settings"]["synchronous"], "2 (FULL)");
    assert!(
        r["settings"]["busy_timeout"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 5000
    );
    // across runs: totals
    let r2 = p.init();
    r2.bind("y", "1", None);
    let a = p.cmd().args(["--json", "stats"]).assert().success();
    let v = stdout_json(&a);
    assert_eq!(v["totals"]["runs"], 2);
    assert_eq!(v["totals"]["tables"]["bindings"], 3);
}

#[test]
fn checkpoint_and_vacuum() {
    let p = Project::new();
    let run = p.init();
    for i in 0..50 {
        run.bind(&format!("b{i}"), &"v".repeat(1000), None);
    }
    let a = run
        .cmd()
        .args(["--json", "checkpoint", "--mode", "passive"])
        .assert()
        .success();
    let v = stdout_json(&a);
    assert_eq!(v[0]["mode"], "passive");
    let a = run.cmd().args(["--json", "checkpoint"]).assert().success();
    assert_eq!(stdout_json(&a)[0]["mode"], "truncate");
    assert_eq!(
        std::fs::metadata(run.dir.join("state.db-wal")).map_or(0, |m| m.len()),
        0
    );
    run.conn().execute("DELETE FROM bindings", []).unwrap();
    let a = run.cmd().args(["--json", "vacuum"]).assert().success();
    let v = stdout_json(&a);
    assert!(v[0]["bytes_after"].as_u64().unwrap() < v[0]["bytes_before"].as_u64().unwrap());
    let ok: String = run
        .conn()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
    assert_eq!(
        code(
            &run.cmd()
                .args(["checkpoint", "--mode", "sometimes"])
                .assert()
                .failure()
        ),
        2
    );
}

fn doctor_finds_a_missing_attachment_and_a_stale_run(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let a = p.cmd().args(["doctor"]).assert().success();
    assert!(String::from_utf8_lossy(&a.get_output().stdout).starts_with("healthy: 1 runs checked"));
    run.cmd()
        .args(["bind", "big", "--attach-over", "10"])
        .write_stdin("a".repeat(100))
        .assert()
        .success();
    let big_path = run.view().binding("big", None).unwrap().4.unwrap();
    // The value goes missing: its file, or on the server its chunks.
    match b {
        Backend::Sqlite => std::fs::remove_file(run.dir.join(&big_path)).unwrap(),
        Backend::Postgres => run.view().raw(
            "",
            "DELETE FROM openprose.attachments WHERE run_id = '$RUN';
             DELETE FROM openprose.attachment_chunks WHERE run_id = '$RUN';",
        ),
    }
    std::fs::create_dir_all(run.dir.join("attachments")).unwrap();
    std::fs::write(run.dir.join("attachments/orphan.md"), "nobody's").unwrap();
    std::fs::write(run.dir.join("attachments/.prose-tmp-big.md.1.2"), "partial").unwrap();
    run.exec(1, "x", "executing", None);
    run.view().raw(
        "UPDATE execution SET started_at = '2000-01-01 00:00:00';
         UPDATE run SET started_at = '2000-01-01 00:00:00';",
        "UPDATE openprose.execution SET started_at = '2000-01-01 00:00:00+00' WHERE run_id = '$RUN';
         UPDATE openprose.run SET started_at = '2000-01-01 00:00:00+00' WHERE id = '$RUN';",
    );
    let a = p.cmd().args(["doctor"]).assert().failure();
    assert_eq!(code(&a), 1);
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    let lines: Vec<&str> = out.lines().collect();
    // On SQLite, the raw write behind prose-state's back is also found in the project catalog
    // and read into it at once.
    let catalog = usize::from(b == Backend::Sqlite);
    assert_eq!(lines.len(), 4 + catalog, "{out}");
    if b == Backend::Sqlite {
        assert!(
            out.contains(&format!(
                "{}: catalog: the catalog says other run details than the run's (fixed)",
                run.id
            )),
            "{out}"
        );
    }
    assert!(
        out.contains(&format!(
            "missing attachment: binding big (root) points at {big_path}"
        )),
        "{out}"
    );
    assert!(
        out.contains("unreferenced file: attachments/orphan.md"),
        "{out}"
    );
    assert!(
        out.contains("temporary file: attachments/.prose-tmp-big.md.1.2"),
        "{out}"
    );
    assert!(
        out.contains("stale run: running with no event for"),
        "{out}"
    );
    // --fix: the stale run is marked interrupted, leftovers deleted; the missing file remains
    let a = p
        .cmd()
        .args(["--json", "doctor", "--fix"])
        .assert()
        .failure();
    let v = stdout_json(&a);
    let fixed: Vec<&str> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["fixed"] == true)
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert_eq!(fixed.len(), 3, "{v}");
    let (status, _, err) = run.view().run_row();
    assert_eq!(status, "interrupted");
    assert!(err.unwrap().contains("marked interrupted by doctor"));
    assert!(!run.dir.join("attachments/orphan.md").exists());
    assert!(!run.dir.join("attachments/.prose-tmp-big.md.1.2").exists());
    let a = p.cmd().args(["doctor"]).assert().failure();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert_eq!(out.lines().count(), 1, "{out}");
    // a broken audit chain is found too
    run.bind("big", "small now", None);
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "p"])
        .assert()
        .success();
    run.view().raw(
        "DROP TRIGGER gate_audit_log_no_update; UPDATE gate_audit_log SET principal = 'x';",
        "ALTER TABLE openprose.gate_audit_log DISABLE TRIGGER USER;
         UPDATE openprose.gate_audit_log SET principal = 'x' WHERE run_id = '$RUN';",
    );
    let a = p.cmd().args(["doctor"]).assert().failure();
    assert!(
        String::from_utf8_lossy(&a.get_output().stdout).contains("audit chain: broken at row 1")
    );
}

#[test]
fn prune_dry_run_refusals_and_archive() {
    let p = Project::new();
    let old_done = aged(&p, "completed", 40);
    let old_failed = aged(&p, "failed", 35);
    let old_running = aged(&p, "running", 50);
    let old_interrupted = aged(&p, "interrupted", 50);
    let recent = aged(&p, "completed", 2);
    let gated = aged(&p, "running", 45);
    gated
        .cmd()
        .args(["gates", "create", "g", "--prompt", "p"])
        .assert()
        .success();
    let newest = aged(&p, "completed", 31);
    newest
        .conn()
        .execute("UPDATE run SET started_at = '2999-01-01 00:00:00'", [])
        .unwrap();

    let all = [
        &old_done,
        &old_failed,
        &old_running,
        &old_interrupted,
        &recent,
        &gated,
        &newest,
    ];
    // dry run: nothing moves
    let a = p
        .cmd()
        .args(["--json", "prune", "--keep-days", "30", "--keep-n", "1"])
        .assert()
        .success();
    let v = stdout_json(&a);
    assert_eq!(v["dry_run"], true);
    for r in all {
        assert!(r.dir.is_dir());
    }
    let action = |id: &str| {
        v["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["run_id"] == id)
            .unwrap()["action"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(action(&old_done.id), "remove");
    assert_eq!(action(&old_failed.id), "remove");
    for kept in [&old_running, &old_interrupted, &recent, &gated, &newest] {
        assert_eq!(action(&kept.id), "keep", "{}", kept.id);
    }
    let reason = |id: &str| {
        v["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["run_id"] == id)
            .unwrap()["reason"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(reason(&newest.id).contains("newest 1"));
    assert!(reason(&recent.id).contains("newer than 30 days"));
    assert!(reason(&old_running.id).starts_with("running"));
    assert!(v["bytes_freed"].as_u64().unwrap() > 0);

    // --yes --archive: moved, not deleted
    let archive = p.root().join("archive");
    p.cmd()
        .args([
            "prune",
            "--keep-days",
            "30",
            "--keep-n",
            "1",
            "--yes",
            "--archive",
        ])
        .arg(&archive)
        .assert()
        .success();
    assert!(!old_done.dir.exists() && archive.join(&old_done.id).join("state.db").is_file());
    assert!(!old_failed.dir.exists() && archive.join(&old_failed.id).is_dir());
    for kept in [&old_running, &old_interrupted, &recent, &gated, &newest] {
        assert!(kept.dir.is_dir(), "{}", kept.id);
    }
    // --yes alone deletes
    let gone = aged(&p, "failed", 90);
    p.cmd()
        .args(["prune", "--keep-days", "30", "--keep-n", "1", "--yes"])
        .assert()
        .success();
    assert!(!gone.dir.exists());
    assert!(!archive.join(&gone.id).exists());
    assert_eq!(
        code(
            &p.cmd()
                .args(["prune", "--keep-days", "-1", "--keep-n", "1"])
                .assert()
                .failure()
        ),
        2
    );
}

/// Long work across many runs shows its progress on stderr, on a terminal only.
#[test]
fn progress_on_a_terminal_only() {
    let p = Project::new();
    for _ in 0..22 {
        p.init();
    }
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "`script` missing under CI"
        );
        crate::common::skipped("the progress test needs util-linux `script`");
        return;
    }
    let out = std::process::Command::new("script")
        .args(["-qec", &format!("{BIN} stats"), "/dev/null"])
        .current_dir(p.root())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(screen.contains("22/22 runs"), "{screen}");
    // not on a pipe
    let a = p.cmd().arg("stats").assert().success();
    assert!(!String::from_utf8_lossy(&a.get_output().stderr).contains("runs\r"));
    assert!(stderr(&a).is_empty(), "{}", stderr(&a));
}
