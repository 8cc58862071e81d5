//! Issue 45: the whole language. Each finding of the literal VM runs, as a test through the
//! binary on both backends:
//! 1. recursion: an end names its start (`exec-append --ends`), so closing the inner call
//!    never re-opens it; a run written the older way reads right too, and `doctor` flags a
//!    finished run with a construct never ended;
//! 2. a retry survives a crash: a failed attempt carries its number, and `resume` names the
//!    next attempt, or what handles the last failure;
//! 3. an accumulator is not doubled: `bind --append --key` applies a step once;
//! 4. bindings go where the program reads them: frames are the language's (`if`, loops and
//!    `try:` are no frames), `--assign` writes where the name was declared, `--local` keeps a
//!    loop variable to its body, and branches of a parallel are frames of their own;
//! 6. an `if` records the branch it took, and each open start its construct;
//! 7. a binding written after its frame's last record is `unlogged`.
//!
//! The generated programs played by a literal VM are tests/language_property.rs.

use crate::common::*;
use serde_json::{json, Value};

on_both!(
    recursion_ends_name_their_starts,
    an_older_runs_recursion_reads_right,
    ends_are_checked_and_land_once,
    a_retry_survives_a_crash,
    keyed_appends_land_once,
    bindings_live_in_the_languages_frames,
    assignment_writes_where_the_name_was_declared,
    branches_are_frames_of_their_own,
    taken_branches_and_constructs_are_shown,
    a_binding_after_its_frames_last_record_is_unlogged,
    a_finished_run_with_an_open_construct_is_a_problem,
    a_decided_race_skips_the_rest,
    what_the_vm_binds_is_never_unlogged,
    an_update_reaches_the_list_wherever_it_was_made,
    a_named_branchs_result_is_read_after_the_join,
    a_failure_goes_to_its_handler,
    a_rejections_reason_is_in_resume,
    open_branches_go_on_from_their_own_records,
);

fn project(b: Backend) -> Option<(Project, Run)> {
    let p = Project::on(b)?;
    let run = p.init();
    Some((p, run))
}

/// `exec-append` with these arguments: the new record's id.
fn append(run: &Run, args: &[&str]) -> i64 {
    let out = run.cmd().arg("exec-append").args(args).assert().success();
    String::from_utf8(out.get_output().stdout.clone())
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn end(run: &Run, start: i64, status: &str) -> i64 {
    append(run, &["--ends", &start.to_string(), "--status", status])
}

fn resume(run: &Run) -> Value {
    stdout_json(&run.cmd().args(["--json", "resume"]).assert().success())
}

fn open_ids(doc: &Value) -> Vec<i64> {
    doc["position"]["open"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect()
}

fn value(run: &Run, name: &str, at: Option<i64>) -> String {
    String::from_utf8(run.get(name, at)).unwrap()
}

fn recursion_ends_name_their_starts(b: Backend) {
    let Some((_p, run)) = project(b) else { return };
    // do refine(draft, 5) at the top; the same statement at every depth below it.
    let top = append(
        &run,
        &[
            "--index",
            "3",
            "--text",
            "do refine(draft, 5)",
            "--status",
            "executing",
        ],
    );
    let mut calls = vec![top];
    for _ in 0..4 {
        let parent = calls.last().unwrap().to_string();
        calls.push(append(
            &run,
            &[
                "--index",
                "2",
                "--text",
                "output do refine(improved, depth - 1)",
                "--status",
                "executing",
                "--parent",
                &parent,
            ],
        ));
    }
    assert_eq!(open_ids(&resume(&run)), calls);
    // The calls end innermost first; after each, the caller is where the VM is, and the
    // finished call is what it did last there.
    while let Some(inner) = calls.pop() {
        end(&run, inner, "completed");
        let doc = resume(&run);
        assert_eq!(open_ids(&doc), calls, "{doc}");
        assert_eq!(
            doc["position"]["after"]["metadata"]["ends"],
            json!(inner),
            "{doc}"
        );
        match calls.last() {
            Some(caller) => assert_eq!(doc["position"]["current"]["id"], json!(caller)),
            None => assert!(doc["position"]["current"].is_null()),
        }
    }
    run.cmd()
        .args(["finish", "--status", "completed"])
        .assert()
        .success();
    assert!(open_ids(&resume(&run)).is_empty());
    run.cmd().arg("doctor").assert().success();
}

/// The log of the finding, as the guide before `--ends` had it written: each call's
/// `completed` at its own level (same index, text and parent as its start). The end of the
/// depth-3 call also fits the older shape's end of the depth-2 call (its parent is a start of
/// the same statement); the inner call ends first.
fn an_older_runs_recursion_reads_right(b: Backend) {
    let Some((_p, run)) = project(b) else { return };
    let text = "do refine(improved, depth - 1)";
    let d1 = run.exec(3, "do refine(draft, 4)", "executing", None);
    let d2 = run.exec(2, text, "executing", Some(d1));
    let d3 = run.exec(2, text, "executing", Some(d2));
    let d4 = run.exec(2, text, "executing", Some(d3));
    run.exec(2, text, "completed", Some(d3)); // ends d4
    let doc = resume(&run);
    assert_eq!(open_ids(&doc), vec![d1, d2, d3], "{doc}");
    run.exec(2, text, "completed", Some(d2)); // ends d3
    let doc = resume(&run);
    assert_eq!(open_ids(&doc), vec![d1, d2], "{doc}");
    assert_eq!(doc["position"]["current"]["id"], json!(d2));
    let _ = d4;
}

fn ends_are_checked_and_land_once(b: Backend) {
    let Some((_p, run)) = project(b) else { return };
    let start = append(
        &run,
        &["--index", "1", "--text", "try:", "--status", "started"],
    );
    let inside = append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "session \"a\"",
            "--status",
            "completed",
            "--parent",
            &start.to_string(),
        ],
    );
    let first = end(&run, start, "completed");
    // The same end again is the same record.
    assert_eq!(end(&run, start, "completed"), first);
    let before = run.snapshot();
    let refuse = |args: &[&str], code_wanted: i32, says: &str| {
        let out = run.cmd().arg("exec-append").args(args).assert();
        assert_eq!(code(&out), code_wanted, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
        assert_eq!(run.snapshot(), before, "{args:?} changed the run");
    };
    let s = start.to_string();
    refuse(
        &["--ends", &s, "--status", "failed"],
        4,
        "already ended by record",
    );
    refuse(
        &["--ends", &inside.to_string(), "--status", "completed"],
        2,
        "not a start",
    );
    refuse(
        &["--ends", "999", "--status", "completed"],
        3,
        "names no record",
    );
    refuse(&["--ends", &s, "--status", "started"], 2, "ending status");
    refuse(
        &["--ends", &s, "--status", "completed", "--index", "7"],
        2,
        "differs from the start",
    );
    refuse(
        &[
            "--ends",
            &s,
            "--status",
            "completed",
            "--parent",
            &inside.to_string(),
        ],
        2,
        "differs from the start",
    );
    refuse(
        &[
            "--index",
            "1",
            "--text",
            "x",
            "--status",
            "completed",
            "--metadata",
            r#"{"ends": 1}"#,
        ],
        2,
        "give --ends",
    );
    refuse(
        &[
            "--index",
            "1",
            "--text",
            "x",
            "--status",
            "completed",
            "--construct",
            "branch",
        ],
        2,
        "--construct",
    );
    refuse(
        &["--ends", &s, "--status", "completed", "--key", "k"],
        2,
        "cannot be used with",
    );
}

fn a_retry_survives_a_crash(b: Backend) {
    let Some((_p, run)) = project(b) else { return };
    // (retry: 2): up to two retries after the first attempt, attempts 1 to 3.
    let failed = |attempt: i64| {
        let meta = format!(r#"{{"attempt": {attempt}, "max": 2, "backoff": "exponential"}}"#);
        append(
            &run,
            &[
                "--index",
                "4",
                "--text",
                "session \"Flaky\"",
                "--status",
                "failed",
                "--error",
                "HTTP 502",
                "--metadata",
                &meta,
            ],
        );
    };
    failed(1);
    // The VM died before appending `retry`: resume names the next attempt.
    let doc = resume(&run);
    let r = &doc["retries"][0];
    assert_eq!(r["state"], "next", "{doc}");
    assert_eq!(r["next_attempt"], 2);
    assert_eq!(r["backoff"], "exponential");
    assert_eq!(r["last_error"], "HTTP 502");
    assert!(
        doc["position"]["handler"].is_null(),
        "a retry takes it: {doc}"
    );
    let text = String::from_utf8(
        run.cmd()
            .arg("resume")
            .assert()
            .success()
            .get_output()
            .stdout
            .clone(),
    )
    .unwrap();
    assert!(
        text.contains("attempt 1 of 3 failed → attempt 2 after exponential backoff"),
        "{text}"
    );
    append(
        &run,
        &[
            "--index",
            "4",
            "--text",
            "session \"Flaky\"",
            "--status",
            "retry",
            "--metadata",
            r#"{"attempt": 2, "max": 2}"#,
        ],
    );
    assert_eq!(resume(&run)["retries"][0]["state"], "running");
    failed(2);
    assert_eq!(
        resume(&run)["retries"][0]["next_attempt"],
        3,
        "the language's retry: 2 is two retries"
    );
    append(
        &run,
        &[
            "--index",
            "4",
            "--text",
            "session \"Flaky\"",
            "--status",
            "retry",
            "--metadata",
            r#"{"attempt": 3, "max": 2}"#,
        ],
    );
    failed(3);
    // The last attempt failed, outside any try: the program takes it.
    let doc = resume(&run);
    assert_eq!(doc["retries"][0]["state"], "exhausted", "{doc}");
    assert!(
        doc["retries"][0]["handler"]
            .as_str()
            .unwrap()
            .starts_with("the program"),
        "{doc}"
    );
    assert!(
        doc["position"]["handler"]
            .as_str()
            .unwrap()
            .starts_with("the program"),
        "{doc}"
    );
    let try_ = append(
        &run,
        &["--index", "5", "--text", "try:", "--status", "started"],
    );
    append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "session \"Other\"",
            "--status",
            "failed",
            "--error",
            "boom",
            "--parent",
            &try_.to_string(),
            "--metadata",
            r#"{"attempt": 2, "max": 1}"#,
        ],
    );
    let doc = resume(&run);
    let r = doc["retries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["statement_text"] == "session \"Other\"")
        .unwrap()
        .clone();
    assert!(r["handler"].as_str().unwrap().starts_with(&format!("the catch of try: (record {try_}); without a catch, its finally if it has one, then the program")), "{doc}");
    // Handled: a later record of the statement ends it.
    append(
        &run,
        &[
            "--index",
            "4",
            "--text",
            "session \"Flaky\"",
            "--status",
            "skipped",
        ],
    );
    assert!(resume(&run)["retries"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["statement_text"] != "session \"Flaky\""));
}

fn keyed_appends_land_once(b: Backend) {
    let Some((_p, run)) = project(b) else { return };
    let add = |i: usize| {
        run.cmd()
            .args([
                "bind",
                "findings",
                "--append",
                &format!("\"item {i}\""),
                "--key",
                &format!("item-{i}"),
            ])
            .assert()
            .success();
    };
    // 12 of 21 appended, the VM dies, and the step runs again from the start.
    for i in 0..12 {
        add(i);
    }
    for i in 0..21 {
        add(i);
    }
    let list: Vec<String> = serde_json::from_str(&value(&run, "findings", None)).unwrap();
    let want: Vec<String> = (0..21).map(|i| format!("item {i}")).collect();
    assert_eq!(list, want);
    // Unkeyed appends still all land; a key on a whole value is bad input.
    let before = run.snapshot();
    let out = run.cmd().args(["bind", "x", "v", "--key", "k"]).assert();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert_eq!(run.snapshot(), before);
}

fn bindings_live_in_the_languages_frames(b: Backend) {
    let Some((_p, run)) = project(b) else { return };
    // if ... else: a `let` in the else is readable after the if, by the next statement.
    let r#if = append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "if **the plan is sound**:",
            "--status",
            "started",
            "--metadata",
            r#"{"taken": "else"}"#,
        ],
    );
    let bound = stdout_json(
        &run.cmd()
            .args([
                "--json",
                "bind",
                "revised_plan",
                "v2",
                "--execution-id",
                &r#if.to_string(),
            ])
            .assert()
            .success(),
    );
    assert_eq!(bound["execution_id"], Value::Null, "{bound}");
    end(&run, r#if, "completed");
    assert_eq!(value(&run, "revised_plan", None), "v2");
    // Inside a block: a try: and a loop inside it are no frames; the block is.
    let call = append(
        &run,
        &[
            "--index",
            "2",
            "--text",
            "do review(draft)",
            "--status",
            "executing",
        ],
    );
    let try_ = append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "try:",
            "--status",
            "started",
            "--parent",
            &call.to_string(),
        ],
    );
    let lp = append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "repeat 2 as i:",
            "--status",
            "started",
            "--parent",
            &try_.to_string(),
            "--metadata",
            r#"{"loop_id": "l1", "max": 2}"#,
        ],
    );
    let at = |name: &str, v: &str, id: i64, extra: &[&str]| {
        stdout_json(
            &run.cmd()
                .args(["--json", "bind", name, v, "--execution-id", &id.to_string()])
                .args(extra)
                .assert()
                .success(),
        )["execution_id"]
            .clone()
    };
    assert_eq!(at("notes", "n", lp, &[]), json!(call));
    assert_eq!(at("i", "1", lp, &["--local"]), json!(lp));
    // The loop variable is seen inside the loop, not after it; `notes` after it, in the block.
    assert_eq!(value(&run, "i", Some(lp)), "1");
    let out = run
        .cmd()
        .args(["get", "i", "--execution-id", &call.to_string()])
        .assert();
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert_eq!(value(&run, "notes", Some(call)), "n");
    // And not at the root.
    let out = run.cmd().args(["get", "notes"]).assert();
    assert_eq!(code(&out), 3);
    // A binding an older run wrote in the loop's own scope is written where it is.
    run.view().raw(
        &format!("INSERT INTO bindings (name, execution_id, kind, value) VALUES ('old', {lp}, 'let', 'o1')"),
        &format!("INSERT INTO openprose.bindings (run_id, name, execution_id, kind, value) VALUES ('{}', 'old', {lp}, 'let', 'o1')", run.id),
    );
    assert_eq!(at("old", "o2", lp, &[]), json!(lp));
    assert_eq!(value(&run, "old", Some(lp)), "o2");
}

fn assignment_writes_where_the_name_was_declared(b: Backend) {
    let Some((_p, run)) = project(b) else { return };
    // let test_results = "2 failing"; loop until **all tests pass**: test_results = ...
    run.bind("test_results", "2 failing", None);
    let lp = append(
        &run,
        &[
            "--index",
            "2",
            "--text",
            "loop until **all tests pass** (max: 3):",
            "--status",
            "started",
            "--metadata",
            r#"{"loop_id": "l", "max": 3}"#,
        ],
    );
    let assigned = stdout_json(
        &run.cmd()
            .args([
                "--json",
                "bind",
                "test_results",
                "All 14 tests pass",
                "--assign",
                "--execution-id",
                &lp.to_string(),
            ])
            .assert()
            .success(),
    );
    assert_eq!(assigned["execution_id"], Value::Null);
    assert_eq!(value(&run, "test_results", None), "All 14 tests pass");
    // Inside a block, an assignment to a name the root declared writes the root's.
    let call = append(
        &run,
        &[
            "--index",
            "3",
            "--text",
            "do fix()",
            "--status",
            "executing",
        ],
    );
    run.cmd()
        .args([
            "bind",
            "test_results",
            "0 failing",
            "--assign",
            "--execution-id",
            &call.to_string(),
        ])
        .assert()
        .success();
    assert_eq!(value(&run, "test_results", None), "0 failing");
    // A const, or a name no frame holds: refused, nothing written.
    run.cmd()
        .args(["bind", "limit", "3", "--kind", "const"])
        .assert()
        .success();
    let before = run.snapshot();
    for (args, wanted) in [
        (vec!["bind", "limit", "4", "--assign"], 4),
        (vec!["bind", "nowhere", "x", "--assign"], 3),
        (
            vec![
                "bind",
                "nowhere",
                "x",
                "--assign",
                "--execution-id",
                &*call.to_string(),
            ],
            3,
        ),
        (vec!["bind", "x", "v", "--local"], 2),
        (
            vec![
                "bind",
                "x",
                "v",
                "--local",
                "--assign",
                "--execution-id",
                "1",
            ],
            2,
        ),
    ] {
        let out = run.cmd().args(&args).assert();
        assert_eq!(code(&out), wanted, "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
        assert_eq!(run.snapshot(), before, "{args:?}");
    }
}

fn branches_are_frames_of_their_own(b: Backend) {
    let Some((_p, run)) = project(b) else { return };
    let par = append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "parallel for topic in topics:",
            "--status",
            "started",
            "--metadata",
            r#"{"parallel_id": "p", "branches": ["1", "2"]}"#,
        ],
    );
    let branch = |n: &str| {
        append(
            &run,
            &[
                "--index",
                "1",
                "--text",
                "let summary = session \"Summarize\"",
                "--status",
                "started",
                "--construct",
                "branch",
                "--parent",
                &par.to_string(),
                "--metadata",
                &format!(r#"{{"parallel_id": "p", "branch": "{n}"}}"#),
            ],
        )
    };
    let (a, c) = (branch("1"), branch("2"));
    // Each branch's variable and `let` are its own.
    for (id, v) in [(a, "one"), (c, "two")] {
        run.cmd()
            .args([
                "bind",
                "topic",
                v,
                "--kind",
                "const",
                "--execution-id",
                &id.to_string(),
            ])
            .assert()
            .success();
        run.cmd()
            .args([
                "bind",
                "summary",
                &format!("about {v}"),
                "--execution-id",
                &id.to_string(),
            ])
            .assert()
            .success();
    }
    assert_eq!(value(&run, "summary", Some(a)), "about one");
    assert_eq!(value(&run, "summary", Some(c)), "about two");
    // A named result is bound at the parallel's record: readable after the join.
    let out = stdout_json(
        &run.cmd()
            .args([
                "--json",
                "bind",
                "all",
                "both",
                "--execution-id",
                &par.to_string(),
            ])
            .assert()
            .success(),
    );
    assert_eq!(out["execution_id"], Value::Null);
    end(&run, a, "completed");
    let doc = resume(&run);
    assert_eq!(doc["parallel"][0]["completed"], json!(["1"]), "{doc}");
    assert_eq!(doc["parallel"][0]["outstanding"], json!(["2"]), "{doc}");
    assert_eq!(doc["position"]["current"]["id"], json!(c), "{doc}");
    assert_eq!(doc["position"]["current"]["construct"], "branch");
    end(&run, c, "skipped");
    end(&run, par, "joined");
    let doc = resume(&run);
    assert!(doc["parallel"].as_array().unwrap().is_empty(), "{doc}");
    assert_eq!(value(&run, "all", None), "both");
}

fn taken_branches_and_constructs_are_shown(b: Backend) {
    let Some((_p, run)) = project(b) else { return };
    let c = append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "choice **the best option**:",
            "--status",
            "started",
            "--metadata",
            r#"{"taken": "Ship it"}"#,
        ],
    );
    let i = append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "if **tests fail**:",
            "--status",
            "started",
            "--parent",
            &c.to_string(),
            "--metadata",
            r#"{"taken": "elif 1"}"#,
        ],
    );
    let doc = resume(&run);
    let open = doc["position"]["open"].as_array().unwrap();
    assert_eq!(open[0]["construct"], "choice");
    assert_eq!(open[1]["construct"], "if");
    assert_eq!(open[1]["metadata"]["taken"], "elif 1");
    let text = String::from_utf8(
        run.cmd()
            .arg("resume")
            .assert()
            .success()
            .get_output()
            .stdout
            .clone(),
    )
    .unwrap();
    assert!(text.contains("(started choice, taken: Ship it"), "{text}");
    assert!(text.contains("(started if, taken: elif 1"), "{text}");
    let _ = i;
}

fn a_binding_after_its_frames_last_record_is_unlogged(b: Backend) {
    let Some((_p, run)) = project(b) else { return };
    let unlogged = |doc: &Value, name: &str| {
        doc["bindings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == name)
            .unwrap()["unlogged"]
            == json!(true)
    };
    append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "let a = session \"A\"",
            "--status",
            "completed",
        ],
    );
    run.bind("a", "A", None);
    // The session of statement 1 wrote its output; the VM died before logging it.
    assert!(unlogged(&resume(&run), "a"));
    append(
        &run,
        &[
            "--index",
            "2",
            "--text",
            "let a = session \"A\"",
            "--status",
            "completed",
        ],
    );
    assert!(!unlogged(&resume(&run), "a"));
    // In a block: a later record elsewhere does not log it; one inside the block does.
    let call = append(
        &run,
        &[
            "--index",
            "3",
            "--text",
            "do inner()",
            "--status",
            "executing",
        ],
    );
    append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "let s = session \"S\"",
            "--status",
            "completed",
            "--parent",
            &call.to_string(),
        ],
    );
    run.bind("s", "S", Some(call));
    let doc = stdout_json(
        &run.cmd()
            .args(["--json", "resume", "--all"])
            .assert()
            .success(),
    );
    assert!(unlogged(&doc, "s"), "{doc}");
    append(
        &run,
        &[
            "--index",
            "2",
            "--text",
            "let t = session \"T\"",
            "--status",
            "completed",
            "--parent",
            &call.to_string(),
        ],
    );
    assert!(!unlogged(&resume(&run), "s"));
    // A list the branches of a `parallel for` append to, each keyed by its branch: unlogged,
    // resume says whose append came last, in JSON and in text.
    for (key, item) in [("41", "\"x\""), ("42", "\"y\"")] {
        run.cmd()
            .args(["bind", "found", "--append", item, "--key", key])
            .assert()
            .success();
    }
    let doc = resume(&run);
    let found = doc["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "found")
        .unwrap()
        .clone();
    assert_eq!(found["unlogged"], json!(true), "{doc}");
    assert_eq!(found["unlogged_key"], json!("42"), "{doc}");
    let text = stdout_text(&run.cmd().arg("resume").assert().success());
    assert!(
        text.contains("unlogged (its newest update keyed 42)"),
        "{text}"
    );
    // A plain write has no key to name.
    assert!(doc["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .all(|x| x["name"] == "found" || x.get("unlogged_key").is_none()));
}

fn a_finished_run_with_an_open_construct_is_a_problem(b: Backend) {
    let Some((_p, run)) = project(b) else { return };
    let call = append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "do refine(x)",
            "--status",
            "executing",
        ],
    );
    run.cmd()
        .args(["finish", "--status", "completed"])
        .assert()
        .success();
    let out = run.cmd().arg("doctor").assert();
    assert_eq!(code(&out), 1);
    let said = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(said.contains(&format!("open construct: the run is finished, but 1 construct never ended (innermost: record {call}")), "{said}");
}

on_both!(the_language_through_mcp);

/// The same through a VM's MCP session (rmcp's own client): an end names its start and lands
/// once, a branch is a frame, `assign` writes where the name was declared, a keyed append
/// lands once, and `resume` shows each open start's construct.
fn the_language_through_mcp(b: Backend) {
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::TokioChildProcess;
    use rmcp::ServiceExt;
    let Some((p, run)) = project(b) else { return };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.args(["--run", &run.id, "mcp", "--role", "vm", "--agent", "vm"])
            .current_dir(p.root())
            .env("HOME", test_home(p.root()))
            .stderr(std::process::Stdio::null());
        for var in CLEARED_ENV {
            cmd.env_remove(var);
        }
        let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
        let call = |tool: &'static str, args: Value| {
            let client = &client;
            async move {
                let Value::Object(args) = args else { panic!() };
                let r = client
                    .call_tool(CallToolRequestParams::new(tool).with_arguments(args))
                    .await
                    .unwrap();
                (r.is_error == Some(true), r.structured_content.unwrap_or(Value::Null), r.meta)
            }
        };
        let (err, par, _) = call("exec_append", json!({"index": 1, "text": "parallel:", "status": "started", "metadata": "{\"parallel_id\": \"p\", \"branches\": [\"a\"]}"})).await;
        assert!(!err, "{par}");
        let par = par["id"].as_i64().unwrap();
        let (_, br, _) = call("exec_append", json!({"index": 1, "text": "let s = session \"S\"", "status": "started", "construct": "branch", "parent": par, "metadata": "{\"parallel_id\": \"p\", \"branch\": \"a\"}"})).await;
        let br = br["id"].as_i64().unwrap();
        let (_, bound, _) = call("bind", json!({"name": "s", "value": "in a", "execution_id": br})).await;
        assert_eq!(bound["execution_id"], json!(br));
        let (_, bound, _) = call("bind", json!({"name": "a", "value": "done", "execution_id": par})).await;
        assert_eq!(bound["execution_id"], Value::Null);
        for _ in 0..2 {
            let (err, out, _) = call("bind", json!({"name": "acc", "append": "\"x\"", "key": "k1"})).await;
            assert!(!err, "{out}");
        }
        let (_, doc, _) = call("resume", json!({})).await;
        assert_eq!(doc["position"]["current"]["construct"], "branch", "{doc}");
        assert_eq!(doc["position"]["open"][0]["construct"], "parallel", "{doc}");
        let (_, e1, _) = call("exec_append", json!({"ends": br, "status": "completed"})).await;
        let (_, e2, _) = call("exec_append", json!({"ends": br, "status": "completed"})).await;
        assert_eq!(e1["id"], e2["id"]);
        let (err, _, meta) = call("exec_append", json!({"ends": br, "status": "failed"})).await;
        assert!(err);
        assert_eq!(meta.unwrap()["exit_code"], 4);
        call("exec_append", json!({"ends": par, "status": "joined"})).await;
        let (err, _, meta) = call("bind", json!({"name": "nowhere", "value": "v", "assign": true})).await;
        assert!(err);
        assert_eq!(meta.unwrap()["exit_code"], 3);
        // The parallel has ended: nothing binds inside it any more (exit 4); from the root
        // the assignment writes where `a` was declared.
        let (err, _, meta) = call("bind", json!({"name": "a", "value": "again", "assign": true, "execution_id": par})).await;
        assert!(err);
        assert_eq!(meta.unwrap()["exit_code"], 4);
        call("bind", json!({"name": "a", "value": "again", "assign": true})).await;
        client.cancel().await.unwrap();
    });
    assert_eq!(value(&run, "a", None), "again");
    assert_eq!(value(&run, "acc", None), "[\"x\"]");
    assert!(open_ids(&resume(&run)).is_empty());
}

/// The outside literal VM's findings (H1): a `first` race decided before a crash is not run
/// on; nor an `any` with its count, nor a `fail-fast` parallel with a failed branch.
fn a_decided_race_skips_the_rest(b: Backend) {
    let Some((_p, run)) = project(b) else { return };
    let race = |meta: &str, ends: &[(&str, &str)]| {
        let par = append(
            &run,
            &[
                "--index",
                "1",
                "--text",
                "parallel (\"first\"):",
                "--status",
                "started",
                "--metadata",
                meta,
            ],
        );
        let id = serde_json::from_str::<Value>(meta).unwrap()["parallel_id"]
            .as_str()
            .unwrap()
            .to_string();
        let mut branches = Vec::new();
        for n in ["a", "b", "c"] {
            let m = format!(r#"{{"parallel_id": "{id}", "branch": "{n}"}}"#);
            branches.push((
                n,
                append(
                    &run,
                    &[
                        "--index",
                        "1",
                        "--text",
                        &format!("{n} = session \"{n}\""),
                        "--status",
                        "started",
                        "--construct",
                        "branch",
                        "--parent",
                        &par.to_string(),
                        "--metadata",
                        &m,
                    ],
                ),
            ));
        }
        for (n, status) in ends {
            let br = branches.iter().find(|(b, _)| b == n).unwrap().1;
            end(&run, br, status);
        }
        let doc = resume(&run);
        let p = doc["parallel"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["parallel_id"] == json!(id))
            .unwrap()
            .clone();
        (par, branches, p, doc)
    };
    let (_, _, p, doc) = race(
        r#"{"parallel_id": "p1", "branches": ["a", "b", "c"], "strategy": "first"}"#,
        &[("b", "completed")],
    );
    assert_eq!(p["to_skip"], json!(["a", "c"]), "{doc}");
    assert_eq!(p["outstanding"], json!([]), "{doc}");
    assert!(p["decided"].as_str().unwrap().starts_with("first"), "{doc}");
    // Only the one open parallel is listed: no branch reads as a parallel of its own.
    assert_eq!(doc["parallel"].as_array().unwrap().len(), 1, "{doc}");
    let text = String::from_utf8(
        run.cmd()
            .arg("resume")
            .assert()
            .success()
            .get_output()
            .stdout
            .clone(),
    )
    .unwrap();
    assert!(
        text.contains("end [a c] --status skipped, do not run them"),
        "{text}"
    );
    // Branches open beside each other are not nested.
    assert!(text.contains("also open: 1 a = session"), "{text}");
    let (par, branches, _, _) = race(
        r#"{"parallel_id": "p2", "branches": ["a", "b", "c"], "strategy": "any", "count": 2}"#,
        &[("a", "completed")],
    );
    let doc = resume(&run);
    let p = doc["parallel"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["parallel_id"] == "p2")
        .unwrap()
        .clone();
    assert_eq!(p["outstanding"], json!(["b", "c"]), "one of two: {doc}");
    end(&run, branches[2].1, "completed");
    let doc = resume(&run);
    let p = doc["parallel"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["parallel_id"] == "p2")
        .unwrap()
        .clone();
    assert_eq!(p["to_skip"], json!(["b"]), "{doc}");
    let _ = par;
    let (_, _, p, doc) = race(
        r#"{"parallel_id": "p3", "branches": ["a", "b", "c"]}"#,
        &[("c", "failed")],
    );
    assert_eq!(
        p["to_skip"],
        json!(["a", "b"]),
        "fail-fast by default: {doc}"
    );
    let (_, _, p, doc) = race(
        r#"{"parallel_id": "p4", "branches": ["a", "b", "c"], "on_fail": "continue"}"#,
        &[("c", "failed")],
    );
    assert_eq!(p["outstanding"], json!(["a", "b"]), "{doc}");
}

/// H2: what the VM binds itself (a block's arguments, a loop variable, `catch as err`) is no
/// session's output: never `unlogged`. A block's arguments bound again after a crash with the
/// same value are accepted; another value is still refused.
fn what_the_vm_binds_is_never_unlogged(b: Backend) {
    let Some((_p, run)) = project(b) else { return };
    let call = append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "let r = do refine(draft, 3)",
            "--status",
            "executing",
        ],
    );
    let c = call.to_string();
    run.cmd()
        .args([
            "bind",
            "draft",
            "d0",
            "--kind",
            "const",
            "--execution-id",
            &c,
        ])
        .assert()
        .success();
    let lp = append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "let d = xs | reduce(acc, s):",
            "--status",
            "started",
            "--parent",
            &c,
            "--metadata",
            r#"{"loop_id": "r", "max": 2}"#,
        ],
    );
    run.cmd()
        .args([
            "bind",
            "acc",
            "a",
            "--local",
            "--execution-id",
            &lp.to_string(),
        ])
        .assert()
        .success();
    let doc = stdout_json(
        &run.cmd()
            .args(["--json", "resume", "--all"])
            .assert()
            .success(),
    );
    for b in doc["bindings"].as_array().unwrap() {
        assert!(b.get("unlogged").is_none(), "{b}");
    }
    // The argument again, as a VM after a crash binds it: the same binding, no new version.
    let before = run.snapshot();
    let again = stdout_json(
        &run.cmd()
            .args([
                "--json",
                "bind",
                "draft",
                "d0",
                "--kind",
                "const",
                "--execution-id",
                &c,
            ])
            .assert()
            .success(),
    );
    assert_eq!(again["version"], 1, "{again}");
    assert_eq!(run.snapshot(), before);
    let out = run
        .cmd()
        .args([
            "bind",
            "draft",
            "d1",
            "--kind",
            "const",
            "--execution-id",
            &c,
        ])
        .assert();
    assert_eq!(code(&out), 4, "{}", stderr(&out));
    assert_eq!(run.snapshot(), before);
    // A subagent's output inside the call, written after its last record, is.
    append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "let better = session \"Improve\"",
            "--status",
            "completed",
            "--parent",
            &c,
        ],
    );
    run.bind("better", "b1", Some(call));
    let doc = resume(&run);
    let better = doc["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "better")
        .unwrap()
        .clone();
    assert_eq!(better["unlogged"], true, "{doc}");
}

/// H3: the subagents of a `pmap`'s branches append to the one list the VM made, through the
/// command line and through a subagent's MCP session pinned to its branch.
fn an_update_reaches_the_list_wherever_it_was_made(b: Backend) {
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::TokioChildProcess;
    use rmcp::ServiceExt;
    let Some((p, run)) = project(b) else { return };
    run.bind("critiques", "[]", None);
    let par = append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "let critiques = papers | pmap:",
            "--status",
            "started",
            "--metadata",
            r#"{"parallel_id": "m", "branches": ["0", "1"]}"#,
        ],
    );
    let branch = |n: &str| {
        append(
            &run,
            &[
                "--index",
                "1",
                "--text",
                "session \"Critique\"",
                "--status",
                "started",
                "--construct",
                "branch",
                "--parent",
                &par.to_string(),
                "--metadata",
                &format!(r#"{{"parallel_id": "m", "branch": "{n}"}}"#),
            ],
        )
    };
    let (b0, b1) = (branch("0"), branch("1"));
    run.cmd()
        .args([
            "bind",
            "critiques",
            "--append",
            "\"on paper 0\"",
            "--key",
            &b0.to_string(),
            "--execution-id",
            &b0.to_string(),
        ])
        .assert()
        .success();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.args([
            "--run",
            &run.id,
            "mcp",
            "--role",
            "subagent",
            "--agent",
            "critic",
            "--execution-id",
            &b1.to_string(),
        ])
        .current_dir(p.root())
        .env("HOME", test_home(p.root()))
        .stderr(std::process::Stdio::null());
        for var in CLEARED_ENV {
            cmd.env_remove(var);
        }
        let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
        for _ in 0..2 {
            let Value::Object(args) =
                json!({"name": "critiques", "append": "\"on paper 1\"", "key": b1.to_string()})
            else {
                panic!()
            };
            let r = client
                .call_tool(CallToolRequestParams::new("bind").with_arguments(args))
                .await
                .unwrap();
            assert_ne!(r.is_error, Some(true), "{:?}", r.content);
        }
        client.cancel().await.unwrap();
    });
    let list: Vec<String> = serde_json::from_str(&value(&run, "critiques", None)).unwrap();
    assert_eq!(list, vec!["on paper 0", "on paper 1"]);
    let count = count_rows(&p, &run, "bindings", "name = 'critiques'");
    assert_eq!(count, 1, "one list, in the root");
}

/// H6: a named branch's result, bound at its branch's record (as `resume` shows it after a
/// crash) or at the parallel's, is read after the join.
fn a_named_branchs_result_is_read_after_the_join(b: Backend) {
    let Some((_p, run)) = project(b) else { return };
    let call = append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "do research(topic)",
            "--status",
            "executing",
        ],
    );
    let par = append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "parallel:",
            "--status",
            "started",
            "--parent",
            &call.to_string(),
            "--metadata",
            r#"{"parallel_id": "p", "branches": ["policy", "tech"]}"#,
        ],
    );
    let br = append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "policy = session: scout",
            "--status",
            "started",
            "--construct",
            "branch",
            "--parent",
            &par.to_string(),
            "--metadata",
            r#"{"parallel_id": "p", "branch": "policy"}"#,
        ],
    );
    let out = stdout_json(
        &run.cmd()
            .args([
                "--json",
                "bind",
                "policy",
                "P",
                "--execution-id",
                &br.to_string(),
            ])
            .assert()
            .success(),
    );
    assert_eq!(
        out["execution_id"],
        json!(call),
        "the frame around the parallel: {out}"
    );
    // What the branch declares stays in it.
    let out = stdout_json(
        &run.cmd()
            .args([
                "--json",
                "bind",
                "notes",
                "N",
                "--execution-id",
                &br.to_string(),
            ])
            .assert()
            .success(),
    );
    assert_eq!(out["execution_id"], json!(br));
    end(&run, br, "completed");
    end(&run, par, "joined");
    assert_eq!(value(&run, "policy", Some(call)), "P");
}

/// H7: a failure in a `try:` body goes to its catch, not to the statement after it; a failure
/// inside a catch leaves its own `try:` through its finally (round 2, H1 and H2), and so does
/// a catch ended as failed; an exhausted retry whose failure a catch took is no longer listed.
fn a_failure_goes_to_its_handler(b: Backend) {
    let Some((_p, run)) = project(b) else { return };
    let handler = |run: &Run| {
        resume(run)["position"]["handler"]
            .as_str()
            .map(str::to_string)
    };
    let outer = append(
        &run,
        &["--index", "1", "--text", "try:", "--status", "started"],
    );
    let t = append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "try:",
            "--status",
            "started",
            "--parent",
            &outer.to_string(),
        ],
    );
    append(
        &run,
        &[
            "--index",
            "2",
            "--text",
            "session \"Upload\"",
            "--status",
            "failed",
            "--error",
            "CDN 403",
            "--parent",
            &t.to_string(),
            "--metadata",
            r#"{"attempt": 3, "max": 2}"#,
        ],
    );
    let catch_t = format!("the catch of try: (record {t}); without a catch, its finally if it has one, then the catch of try: (record {outer}); without a catch, its finally if it has one, then the program: finish --status failed --error MSG");
    assert_eq!(handler(&run).as_deref(), Some(catch_t.as_str()));
    let text = String::from_utf8(
        run.cmd()
            .arg("resume")
            .assert()
            .success()
            .get_output()
            .stdout
            .clone(),
    )
    .unwrap();
    assert!(text.contains(&format!("failed: not the statement after it; the failure goes to the catch of try: (record {t})")), "{text}");
    assert_eq!(resume(&run)["retries"].as_array().unwrap().len(), 1);
    let catch = append(
        &run,
        &[
            "--index",
            "4",
            "--text",
            "catch as err:",
            "--status",
            "started",
            "--parent",
            &t.to_string(),
        ],
    );
    // The catch began: the retry's failure was taken.
    assert!(resume(&run)["retries"].as_array().unwrap().is_empty());
    append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "throw \"Upload failed\"",
            "--status",
            "failed",
            "--error",
            "Upload failed",
            "--parent",
            &catch.to_string(),
        ],
    );
    let leaving = format!("the finally of try: (record {t}) if it has one, then the catch of try: (record {outer}); without a catch, its finally if it has one, then the program: finish --status failed --error MSG");
    assert_eq!(handler(&run).as_deref(), Some(leaving.as_str()));
    // The catch ended as failed: the same, never the catch that ran.
    end(&run, catch, "failed");
    assert_eq!(handler(&run).as_deref(), Some(leaving.as_str()));
    // A failure in the finally leaves the try for the outer one.
    let fin = append(
        &run,
        &[
            "--index",
            "5",
            "--text",
            "finally:",
            "--status",
            "started",
            "--parent",
            &t.to_string(),
        ],
    );
    append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "session \"Release\"",
            "--status",
            "failed",
            "--error",
            "lock",
            "--parent",
            &fin.to_string(),
        ],
    );
    assert!(handler(&run)
        .unwrap()
        .starts_with(&format!("the catch of try: (record {outer})")));
    // Nothing failed last: no handler.
    append(
        &run,
        &[
            "--index",
            "2",
            "--text",
            "session \"Log it\"",
            "--status",
            "completed",
            "--parent",
            &fin.to_string(),
        ],
    );
    assert!(handler(&run).is_none());
}

/// Round 2, H4 and H5: each open branch goes on from its own last record (a failure there
/// goes to the parallel's policy, not to a run again), and a named branch's result written
/// before a crash is unlogged until its branch logs it, whatever the other branches log.
fn open_branches_go_on_from_their_own_records(b: Backend) {
    let Some((_p, run)) = project(b) else { return };
    let par = append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "parallel (on-fail: \"continue\"):",
            "--status",
            "started",
            "--metadata",
            r#"{"parallel_id": "p", "branches": ["market", "policy", "tech"], "on_fail": "continue"}"#,
        ],
    );
    let branch = |n: &str| {
        append(
            &run,
            &[
                "--index",
                "1",
                "--text",
                &format!("{n} = session \"{n}\""),
                "--status",
                "started",
                "--construct",
                "branch",
                "--parent",
                &par.to_string(),
                "--metadata",
                &format!(r#"{{"parallel_id": "p", "branch": "{n}"}}"#),
            ],
        )
    };
    let (market, policy, tech) = (branch("market"), branch("policy"), branch("tech"));
    append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "session \"policy\"",
            "--status",
            "failed",
            "--error",
            "timeout",
            "--parent",
            &policy.to_string(),
        ],
    );
    // market's subagent wrote its result; then tech logged something of its own.
    run.cmd()
        .args(["bind", "market", "M", "--execution-id", &market.to_string()])
        .assert()
        .success();
    append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "session \"tech\"",
            "--status",
            "completed",
            "--parent",
            &tech.to_string(),
        ],
    );
    let doc = resume(&run);
    let p = doc["parallel"][0].clone();
    let policy_branch = p["open_branches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["branch"] == "policy")
        .unwrap()
        .clone();
    assert_eq!(policy_branch["record"], json!(policy));
    assert!(
        policy_branch["after"].as_str().unwrap().contains("(failed"),
        "{doc}"
    );
    assert_eq!(
        policy_branch["handler"],
        json!(format!(
            "the parallel's on-fail: continue (branch record {policy})"
        )),
        "{doc}"
    );
    let market_branch = p["open_branches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["branch"] == "market")
        .unwrap()
        .clone();
    assert!(market_branch["after"].is_null(), "{doc}");
    let m = doc["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "market")
        .unwrap()
        .clone();
    assert_eq!(m["unlogged"], true, "{doc}");
    let text = String::from_utf8(
        run.cmd()
            .arg("resume")
            .assert()
            .success()
            .get_output()
            .stdout
            .clone(),
    )
    .unwrap();
    assert!(
        text.contains(&format!(
            "  branch policy (record {policy}): after 1 session \"policy\" (failed"
        )),
        "{text}"
    );
    // Logged inside its branch: no longer unlogged.
    append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "market = session \"market\"",
            "--status",
            "completed",
            "--parent",
            &market.to_string(),
        ],
    );
    let doc = resume(&run);
    let m = doc["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "market")
        .unwrap()
        .clone();
    assert!(m.get("unlogged").is_none(), "{doc}");
}

/// M7: a `retry` or `session` after a rejection works from its reason: `resume` gives it, from
/// a gate whose row agrees with its sealed log.
fn a_rejections_reason_is_in_resume(b: Backend) {
    let Some((p, run)) = project(b) else { return };
    run.cmd()
        .args([
            "gates",
            "create",
            "plan_review",
            "--prompt",
            "Accept the plan?",
            "--allow",
            "bob",
            "--on-reject",
            "retry revise",
        ])
        .assert()
        .success();
    p.cmd()
        .args([
            "reject",
            &run.id,
            "plan_review",
            "--as",
            "bob",
            "--yes",
            "--reason",
            "Cut scope to two services",
        ])
        .assert()
        .success();
    let doc = resume(&run);
    let g = &doc["gates"][0];
    assert_eq!(g["reason"], "Cut scope to two services", "{doc}");
    assert_eq!(g["next_step"]["action"], "retry");
    let text = String::from_utf8(
        run.cmd()
            .arg("resume")
            .assert()
            .success()
            .get_output()
            .stdout
            .clone(),
    )
    .unwrap();
    assert!(
        text.contains("gate plan_review rejected (instance 1) → retry revise; reason: \"Cut scope to two services\""),
        "{text}"
    );
}

on_both!(a_fold_written_before_a_crash_is_unlogged);

/// Round 2, H3: a `reduce`'s fold, written to its result with `--assign` before the VM logged
/// it, reads `unlogged`, so the iteration is not run again; `acc` and the item, the VM's own
/// `--local` names, do not.
fn a_fold_written_before_a_crash_is_unlogged(b: Backend) {
    let Some((_p, run)) = project(b) else { return };
    run.bind("checksum", "eu", None);
    let lp = append(
        &run,
        &[
            "--index",
            "2",
            "--text",
            "let checksum = regions | reduce(acc, r):",
            "--status",
            "started",
            "--metadata",
            r#"{"loop_id": "rd", "max": 2}"#,
        ],
    );
    let l = lp.to_string();
    let local = |name: &str, v: &str| {
        run.cmd()
            .args(["bind", name, v, "--local", "--execution-id", &l])
            .assert()
            .success();
    };
    local("acc", "eu");
    local("r", "us");
    run.cmd()
        .args([
            "bind",
            "checksum",
            "fold(eu,us)",
            "--assign",
            "--execution-id",
            &l,
        ])
        .assert()
        .success();
    let unlogged = |doc: &Value, name: &str| {
        doc["bindings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == name)
            .map(|x| x["unlogged"] == json!(true))
    };
    let doc = stdout_json(
        &run.cmd()
            .args(["--json", "resume", "--all"])
            .assert()
            .success(),
    );
    assert_eq!(unlogged(&doc, "checksum"), Some(true), "{doc}");
    assert_eq!(unlogged(&doc, "acc"), Some(false), "{doc}");
    assert_eq!(unlogged(&doc, "r"), Some(false), "{doc}");
    append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "session \"Fold\"",
            "--status",
            "completed",
            "--parent",
            &l,
        ],
    );
    let doc = stdout_json(
        &run.cmd()
            .args(["--json", "resume", "--all"])
            .assert()
            .success(),
    );
    assert_eq!(unlogged(&doc, "checksum"), Some(false), "{doc}");
}
