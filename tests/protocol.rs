//! The record shapes of the protocol (guide vm, "The record shapes"), read back by `resume`:
//! where a run stands after each construct, and runs written under the older guide.

use crate::common::*;
use serde_json::Value;

on_both!(
    a_block_closed_under_the_older_guide_is_not_in_progress,
    a_block_closed_at_its_own_level_is_not_in_progress,
    resume_names_the_open_constructs_and_what_was_done_inside,
    a_loop_narrates_the_iteration_in_progress,
    resume_is_bounded_and_pages_through_the_bindings,
);

fn resume(run: &Run) -> Value {
    stdout_json(
        &run.cmd()
            .args(["--json", "resume", "--all"])
            .assert()
            .success(),
    )
}

fn resume_text(run: &Run) -> String {
    let out = run.cmd().arg("resume").assert().success();
    String::from_utf8(out.get_output().stdout.clone()).unwrap()
}

fn with_meta(
    run: &Run,
    index: i64,
    text: &str,
    status: &str,
    parent: Option<i64>,
    meta: &str,
) -> i64 {
    let mut c = run.cmd();
    c.args([
        "exec-append",
        "--index",
        &index.to_string(),
        "--text",
        text,
        "--status",
        status,
    ]);
    c.args(["--metadata", meta]);
    if let Some(p) = parent {
        c.args(["--parent", &p.to_string()]);
    }
    let out = c.assert().success();
    String::from_utf8(out.get_output().stdout.clone())
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn id_of(v: &Value) -> Option<i64> {
    v.get("id").and_then(Value::as_i64)
}

/// The issue's reproduction: `B=$(exec-append … --status executing); exec-append …
/// --status completed --parent $B; resume`.
fn a_block_closed_under_the_older_guide_is_not_in_progress(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let block = run.exec(4, "do x", "executing", None);
    let done = run.exec(4, "do x", "completed", Some(block));
    let doc = resume(&run);
    assert!(doc["position"]["current"].is_null(), "{doc}");
    assert_eq!(doc["position"]["open"], serde_json::json!([]));
    assert_eq!(id_of(&doc["position"]["after"]), Some(done));
    let text = resume_text(&run);
    assert!(text.contains("at: nothing in progress"), "{text}");
    assert!(!text.contains("executing, record"), "{text}");
    // Its body's records, also parented on the block, do not close it.
    let again = run.exec(4, "do x", "executing", None);
    run.exec(1, "let y = session: s", "completed", Some(again));
    let doc = resume(&run);
    assert_eq!(id_of(&doc["position"]["current"]), Some(again), "{doc}");
}

fn a_block_closed_at_its_own_level_is_not_in_progress(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let block = run.exec(4, "do x", "executing", None);
    run.exec(1, "session a", "completed", Some(block));
    let doc = resume(&run);
    assert_eq!(id_of(&doc["position"]["current"]), Some(block));
    let done = run.exec(4, "do x", "completed", None);
    let doc = resume(&run);
    assert!(doc["position"]["current"].is_null(), "{doc}");
    assert_eq!(id_of(&doc["position"]["after"]), Some(done));
}

fn resume_names_the_open_constructs_and_what_was_done_inside(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.exec(1, "let a = session: s", "completed", None);
    let outer = run.exec(2, "do review(a)", "executing", None);
    let try_ = run.exec(1, "try:", "started", Some(outer));
    let failed = {
        let mut c = run.cmd();
        c.args([
            "exec-append",
            "--index",
            "2",
            "--text",
            "session risky",
            "--status",
            "failed",
        ]);
        c.args(["--error", "timeout", "--parent", &try_.to_string()]);
        let out = c.assert().success();
        String::from_utf8(out.get_output().stdout.clone())
            .unwrap()
            .trim()
            .parse::<i64>()
            .unwrap()
    };
    let doc = resume(&run);
    let open: Vec<i64> = doc["position"]["open"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(id_of)
        .collect();
    assert_eq!(open, vec![outer, try_]);
    assert_eq!(id_of(&doc["position"]["current"]), Some(try_));
    // The catch runs next: the latest thing done inside the try is the failure.
    assert_eq!(id_of(&doc["position"]["after"]), Some(failed));
    run.exec(1, "try:", "completed", Some(outer));
    let doc = resume(&run);
    assert_eq!(id_of(&doc["position"]["current"]), Some(outer));
    run.exec(2, "do review(a)", "completed", None);
    let par = with_meta(
        &run,
        3,
        "parallel:",
        "started",
        None,
        r#"{"parallel_id": "p1", "branches": ["a", "b"]}"#,
    );
    with_meta(
        &run,
        3,
        "parallel:a",
        "completed",
        None,
        r#"{"parallel_id": "p1", "branch": "a"}"#,
    );
    let doc = resume(&run);
    assert_eq!(id_of(&doc["position"]["current"]), Some(par));
    assert_eq!(doc["parallel"][0]["outstanding"], serde_json::json!(["b"]));
    with_meta(
        &run,
        3,
        "parallel:b",
        "completed",
        None,
        r#"{"parallel_id": "p1", "branch": "b"}"#,
    );
    let joined = with_meta(
        &run,
        3,
        "parallel:",
        "joined",
        None,
        r#"{"parallel_id": "p1"}"#,
    );
    let doc = resume(&run);
    assert!(doc["position"]["current"].is_null(), "{doc}");
    assert_eq!(id_of(&doc["position"]["after"]), Some(joined));
}

fn a_loop_narrates_the_iteration_in_progress(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let l = with_meta(
        &run,
        5,
        "loop",
        "started",
        None,
        r#"{"loop_id": "l1", "max": 3}"#,
    );
    let body = run.exec(6, "session draft", "completed", Some(l));
    let doc = resume(&run);
    assert_eq!(doc["loops"][0]["current"], 1);
    assert_eq!(id_of(&doc["position"]["after"]), Some(body));
    assert!(resume_text(&run).contains("loop l1:0/3 running (iteration 1)"));
    let it = with_meta(
        &run,
        5,
        "loop",
        "iteration",
        None,
        r#"{"loop_id": "l1", "iteration": 1}"#,
    );
    // A body record that names the loop (an older shape) is inside iteration 2, not its end.
    with_meta(
        &run,
        6,
        "session draft",
        "completed",
        Some(l),
        r#"{"loop_id": "l1", "iteration": 2}"#,
    );
    let doc = resume(&run);
    assert_eq!(doc["loops"][0]["iteration"], 1, "{doc}");
    assert_eq!(doc["loops"][0]["current"], 2);
    assert!(resume_text(&run).contains("loop l1:1/3 running (iteration 2)"));
    let log = String::from_utf8(
        run.cmd()
            .arg("log")
            .assert()
            .success()
            .get_output()
            .stdout
            .clone(),
    )
    .unwrap();
    // Only the loop's own start reads as its start; its body's records say their iteration.
    assert_eq!(log.matches("loop:0/3 start").count(), 1, "{log}");
    assert!(log.contains("6→ session draft ✓ · loop:1/3"), "{log}");
    assert!(log.contains("6→ session draft ✓ · loop:2/3"), "{log}");
    assert!(log.contains("loop:1/3\n"), "{log}");
    assert!(it > body);
    with_meta(
        &run,
        5,
        "loop",
        "exited",
        None,
        r#"{"loop_id": "l1", "iteration": 2, "reason": "condition_satisfied"}"#,
    );
    let doc = resume(&run);
    assert!(doc["position"]["current"].is_null());
    assert!(doc["loops"][0]["current"].is_null());
}

/// `resume` stays within 16 KiB however many bindings the run has, and its cursor reaches
/// every binding visible from the current scope exactly once.
fn resume_is_bounded_and_pages_through_the_bindings(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let long = "x".repeat(300);
    let names: Vec<String> = (0..150).map(|i| format!("b{i:03}")).collect();
    for n in &names {
        run.bind(n, &format!("{n} {long}"), None);
    }
    let block = run.exec(2, "do inner", "executing", None);
    run.bind("b000", "shadowed inside the block", Some(block));
    run.bind("only_inside", "v", Some(block));
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut c = run.cmd();
        c.args(["--json", "resume"]);
        if let Some(at) = &cursor {
            c.args(["--cursor", at]);
        }
        let out = c.assert().success();
        let bytes = out.get_output().stdout.len();
        assert!(bytes <= 16 * 1024, "{bytes} bytes");
        let v = stdout_json(&out);
        assert_eq!(v["counts"]["bindings"], 152);
        assert_eq!(v["counts"]["bindings_visible"], 151);
        assert_eq!(v["scope"], block);
        for b in v["bindings"].as_array().unwrap() {
            if b["name"] == "b000" {
                assert_eq!(b["execution_id"], block, "the nearest one is shown");
            }
            seen.push(b["name"].as_str().unwrap().to_string());
        }
        match v["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => break,
        }
        assert!(seen.len() < 1000, "the cursor does not advance");
    }
    let mut want = names.clone();
    want.push("only_inside".into());
    assert_eq!(seen, want);
    // --all keeps the whole answer.
    let all = stdout_json(
        &run.cmd()
            .args(["--json", "resume", "--all"])
            .assert()
            .success(),
    );
    assert_eq!(all["bindings"].as_array().unwrap().len(), 152);
}
