//! Operating the state from a terminal: log, completions, man, checkpoint, vacuum, stats,
//! doctor, prune.

use crate::common::*;
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

#[test]
fn log_narrates_the_execution_log() {
    let p = Project::new();
    let run = p.init();
    script(&run);
    let a = run.cmd().arg("log").assert().success();
    let text = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    let narr: Vec<&str> = text.lines().map(|l| &l[9..]).collect();
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

#[test]
fn log_follow_picks_up_events_appended_after_it_started() {
    let p = Project::new();
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
