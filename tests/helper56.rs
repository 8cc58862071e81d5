//! What helper-56 (a literal VM on three programs of its own, no tests seen) found, closed.
//!
//! - f01: a `pmap` branch whose subagent appended its result (`--key $BRANCH`) before the VM
//!   stopped read "nothing done inside it yet" once another branch logged: its session ran
//!   twice. `resume` now names the branch's delivery (`delivered`).
//! - f04: a `parallel ("first")` branch whose result landed unlogged was listed both as
//!   unlogged (log it) and in `to_skip` (skip it). It is now never skipped: log it, then join.
//! - f03: a reopened gate's response binding read the earlier opening's answer as the new
//!   one's. `get` now says no decision answered the opening that stands (3).
//! - f05: the VM's own bind of a call's result (`let x = do f()`, `--from`) read `unlogged`.
//! - f02: an approver's `--edit` of a const input got a bare "cannot be rebound"; it is bad
//!   input with what to do instead, and the page offers no edit box for it.
//! - f06: `gates show` with no login name logged its look by no one (tests/gates.rs has it
//!   too); it is the account's, as a history's writer is.

use crate::common::*;
use serde_json::{json, Value};

on_both!(
    a_branch_whose_append_landed_unlogged_is_named_and_never_run_again,
    a_first_parallel_never_skips_a_branch_whose_result_landed,
    a_reopened_gates_answer_is_not_the_new_openings,
    the_vms_own_bind_of_a_calls_result_is_not_unlogged,
    a_const_input_is_not_edited,
    a_look_without_a_login_name_is_the_accounts,
    a_branchs_own_item_is_not_unlogged,
);

/// `exec-append ARGS`: the new record's id.
fn append(run: &Run, args: &[&str]) -> i64 {
    let out = run.cmd().arg("exec-append").args(args).assert().success();
    stdout_text(&out).trim().parse().unwrap()
}

fn resume(run: &Run) -> Value {
    stdout_json(&run.cmd().args(["--json", "resume"]).assert().success())
}

fn resume_text(run: &Run) -> String {
    stdout_text(&run.cmd().arg("resume").assert().success())
}

/// A parallel of `branches` (each `[name, text]`) with `strategy`: its id and each branch's.
fn parallel(run: &Run, strategy: &str, branches: &[[&str; 2]]) -> (i64, Vec<i64>) {
    let names: Vec<&str> = branches.iter().map(|b| b[0]).collect();
    let meta = json!({"parallel_id": "p1", "branches": names, "strategy": strategy}).to_string();
    let par = append(
        run,
        &[
            "--index",
            "1",
            "--text",
            "parallel:",
            "--status",
            "started",
            "--metadata",
            &meta,
        ],
    );
    let ids = branches
        .iter()
        .enumerate()
        .map(|(i, [name, text])| {
            let m = json!({"parallel_id": "p1", "branch": name}).to_string();
            append(
                run,
                &[
                    "--index",
                    &(i + 1).to_string(),
                    "--text",
                    text,
                    "--status",
                    "started",
                    "--construct",
                    "branch",
                    "--parent",
                    &par.to_string(),
                    "--metadata",
                    &m,
                ],
            )
        })
        .collect();
    (par, ids)
}

fn a_branch_whose_append_landed_unlogged_is_named_and_never_run_again(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let (_, ids) = parallel(
        &run,
        "all",
        &[
            ["1", "session \"Summarise\""],
            ["2", "session \"Summarise\""],
        ],
    );
    let (b1, b2) = (ids[0].to_string(), ids[1].to_string());
    // The result list, made first (guide vm), in the frame around the pmap.
    run.bind("summaries", "[]", None);
    // Branch 1's subagent appends its result; the VM stops before logging it.
    for (item, key) in [("\"alpha\"", &b1), ("\"beta\"", &b2)] {
        run.cmd()
            .args(["bind", "summaries", "--append", item, "--key", key])
            .args(["--execution-id", key])
            .assert()
            .success();
    }
    // Branch 2 goes on and is logged; branch 1's mark must not vanish with it.
    append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "session \"Summarise\"",
            "--status",
            "completed",
            "--parent",
            &b2,
        ],
    );
    let doc = resume(&run);
    let open = doc["parallel"][0]["open_branches"]
        .as_array()
        .unwrap()
        .clone();
    let one = open.iter().find(|o| o["branch"] == "1").unwrap();
    assert_eq!(one["delivered"], "summaries", "{doc}");
    let two = open.iter().find(|o| o["branch"] == "2").unwrap();
    assert!(two.get("delivered").is_none(), "{doc}");
    let text = resume_text(&run);
    assert!(
        text.contains(&format!(
            "branch 1 (record {b1}): its result went into summaries after its last record: its session ran; log its completion, do not run it again"
        )),
        "{text}"
    );
    // Logged inside branch 1: delivered no more.
    append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "session \"Summarise\"",
            "--status",
            "completed",
            "--parent",
            &b1,
        ],
    );
    let doc = resume(&run);
    assert!(doc["parallel"][0]["open_branches"]
        .as_array()
        .unwrap()
        .iter()
        .all(|o| o.get("delivered").is_none()));
}

fn a_first_parallel_never_skips_a_branch_whose_result_landed(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let (_, ids) = parallel(
        &run,
        "first",
        &[
            ["fast", "fast = session \"A\""],
            ["deep", "deep = session \"B\""],
        ],
    );
    let (fast, deep) = (ids[0].to_string(), ids[1].to_string());
    run.bind("fast", "fast result", Some(ids[0]));
    run.bind("deep", "deep result", Some(ids[1]));
    append(
        &run,
        &[
            "--index",
            "2",
            "--text",
            "deep = session \"B\"",
            "--status",
            "completed",
            "--parent",
            &deep,
        ],
    );
    append(&run, &["--ends", &deep, "--status", "completed"]);
    let doc = resume(&run);
    let par = &doc["parallel"][0];
    assert!(
        par.get("to_skip")
            .is_none_or(|s| !s.as_array().unwrap().contains(&json!("fast"))),
        "{doc}"
    );
    assert_eq!(par["open_branches"][0]["delivered"], "fast", "{doc}");
    let text = resume_text(&run);
    assert!(
        text.contains("log [fast] completed, then join it"),
        "{text}"
    );
    assert!(!text.contains("--status skipped"), "{text}");
    // Logged as told, the parallel is done; nothing was skipped and nothing runs again.
    append(&run, &["--ends", &fast, "--status", "completed"]);
    let doc = resume(&run);
    let mut done: Vec<String> =
        serde_json::from_value(doc["parallel"][0]["completed"].clone()).unwrap();
    done.sort();
    assert_eq!(done, ["deep", "fast"], "{doc}");
    assert!(doc["parallel"][0].get("to_skip").is_none(), "{doc}");
}

fn a_reopened_gates_answer_is_not_the_new_openings(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let schema =
        r#"{"type":"object","properties":{"score":{"type":"integer"}},"required":["score"]}"#;
    let open = |extra: &[&str]| {
        run.cmd()
            .args([
                "gates", "create", "review", "--index", "1", "--prompt", "Accept?",
            ])
            .args(["--on-reject", "continue", "--response-schema", schema])
            .args(["--response-binding", "verdict"])
            .args(extra)
            .assert()
            .success();
    };
    open(&[]);
    run.cmd()
        .args([
            "reject", "review", "--as", "al", "--reason", "short", "--yes",
        ])
        .args(["--response", r#"{"score": 2}"#])
        .assert()
        .success();
    let got = run.cmd().args(["get", "verdict"]).assert().success();
    assert_eq!(stdout_text(&got).trim(), r#"{"score":2}"#);
    let failed = run.exec(1, "approve review:", "failed", None);
    open(&["--reopen"]);
    // Read as it stood before the reopening, the answer is the name's; after it, it is not
    // (helper-57 f01), and `diff` leaves it out as `get` does (f02).
    // (The reopening logs its own record, after `failed`.)
    let got = run
        .cmd()
        .args(["get", "verdict", "--as-of", &failed.to_string()])
        .assert()
        .success();
    assert_eq!(stdout_text(&got).trim(), r#"{"score":2}"#);
    run.refuses(
        &["get", "verdict", "--as-of", &(failed + 1).to_string()],
        3,
        "opened again (instance 2)",
    );
    let other = p.init();
    let d = run
        .cmd()
        .args(["--json", "diff", &run.id, &other.id, "--name", "verdict"])
        .assert();
    let said = stdout_text(&d);
    assert!(
        said.contains("bindings") && !said.contains("score"),
        "{said}"
    );
    // Pending, then rejected without an answer: instance 1's answer is not instance 2's.
    for decided in [false, true] {
        if decided {
            run.cmd()
                .args([
                    "reject", "review", "--as", "al", "--reason", "still", "--yes",
                ])
                .assert()
                .success();
        }
        let said = run.refuses(&["get", "verdict"], 3, "opened again (instance 2)");
        assert!(said.contains("history"), "{said}");
        let doc = resume(&run);
        assert!(
            !doc["bindings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["name"] == "verdict"),
            "{doc}"
        );
    }
    // Nothing is wrong with the run: the checks that judge it pass, the wait reports.
    run.cmd().args(["gates", "verify"]).assert().success();
    let w = run
        .cmd()
        .args([
            "gates",
            "wait",
            "review",
            "--instance",
            "2",
            "--timeout",
            "0",
        ])
        .assert();
    assert_eq!(code(&w), 5, "{}", stdout_text(&w));
    let h = stdout_json(
        &run.cmd()
            .args(["--json", "history", "verdict"])
            .assert()
            .success(),
    );
    assert_eq!(h["versions"][0]["preview"], r#"{"score":2}"#, "{h}");
    // A third opening answered: its answer is the name's again.
    run.exec(1, "approve review:", "failed", None);
    open(&["--reopen"]);
    run.cmd()
        .args(["approve", "review", "--as", "al", "--yes"])
        .args(["--response", r#"{"score": 9}"#])
        .assert()
        .success();
    let got = run.cmd().args(["get", "verdict"]).assert().success();
    assert_eq!(stdout_text(&got).trim(), r#"{"score":9}"#);
}

fn the_vms_own_bind_of_a_calls_result_is_not_unlogged(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let call = append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "let x = do f(3)",
            "--status",
            "executing",
        ],
    );
    let c = call.to_string();
    run.cmd()
        .args(["bind", "n", "3", "--kind", "const", "--execution-id", &c])
        .assert()
        .success();
    run.bind("r", "result r", Some(call));
    append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "let r = session \"compute\"",
            "--status",
            "completed",
            "--parent",
            &c,
        ],
    );
    run.cmd()
        .args(["bind", "x", "--from", "r", "--from-execution-id", &c])
        .assert()
        .success();
    let doc = stdout_json(
        &run.cmd()
            .args(["--json", "resume", "--all"])
            .assert()
            .success(),
    );
    let x = doc["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "x")
        .unwrap()
        .clone();
    assert!(x.get("unlogged").is_none(), "{doc}");
    // A session's output inside the call, bound after its last record, still is.
    run.bind("y", "late", Some(call));
    let doc = stdout_json(
        &run.cmd()
            .args(["--json", "resume", "--all"])
            .assert()
            .success(),
    );
    let y = doc["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "y")
        .unwrap()
        .clone();
    assert_eq!(y["unlogged"], true, "{doc}");
}

fn a_const_input_is_not_edited(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let call = append(
        &run,
        &[
            "--index",
            "1",
            "--text",
            "do refine(text)",
            "--status",
            "executing",
        ],
    );
    let c = call.to_string();
    run.cmd()
        .args([
            "bind",
            "text",
            "orig",
            "--kind",
            "const",
            "--execution-id",
            &c,
        ])
        .assert()
        .success();
    run.cmd()
        .args([
            "gates",
            "create",
            "g1",
            "--index",
            "1",
            "--execution-id",
            &c,
        ])
        .args(["--prompt", "OK?", "--inputs", "text"])
        .assert()
        .success();
    let said = run.refuses(
        &[
            "approve",
            "g1",
            "--as",
            "bob",
            "--edit",
            "text=edited",
            "--yes",
        ],
        2,
        "is a const",
    );
    assert!(said.contains("approve without editing it"), "{said}");
    // Approved without the edit, as told.
    run.cmd()
        .args(["approve", "g1", "--as", "bob", "--yes"])
        .assert()
        .success();
}

fn a_look_without_a_login_name_is_the_accounts(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "OK?"])
        .assert()
        .success();
    run.cmd()
        .env_remove("USER")
        .env_remove("LOGNAME")
        .env_remove("PROSE_PRINCIPAL")
        .args(["gates", "show", "g"])
        .assert()
        .success();
    let looks = run.view().events("g");
    let viewed = looks
        .iter()
        .find(|e| e.0 == "viewed")
        .expect("a look is logged");
    let who = viewed.1.clone().expect("a viewer is named");
    assert!(!who.is_empty() && who != "unknown", "{who}");
}

/// helper-58 f01: a `pmap` branch's `item`, bound `--kind const` by the VM after another
/// branch logged, before its own session ran, is no session's output: never `unlogged`.
fn a_branchs_own_item_is_not_unlogged(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("out", "[]", None);
    let (_, ids) = parallel(
        &run,
        "all",
        &[["0", "session \"Do it\""], ["1", "session \"Do it\""]],
    );
    let (b0, b1) = (ids[0].to_string(), ids[1].to_string());
    run.cmd()
        .args([
            "bind",
            "item",
            "\"a\"",
            "--kind",
            "const",
            "--execution-id",
            &b0,
        ])
        .assert()
        .success();
    run.cmd()
        .args([
            "bind",
            "out",
            "--append",
            "\"A\"",
            "--key",
            &b0,
            "--execution-id",
            &b0,
        ])
        .assert()
        .success();
    append(&run, &["--ends", &b0, "--status", "completed"]);
    run.cmd()
        .args([
            "bind",
            "item",
            "\"b\"",
            "--kind",
            "const",
            "--execution-id",
            &b1,
        ])
        .assert()
        .success();
    let doc = stdout_json(
        &run.cmd()
            .args(["--json", "resume", "--all"])
            .assert()
            .success(),
    );
    let items: Vec<&Value> = doc["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["name"] == "item")
        .collect();
    assert_eq!(items.len(), 2, "{doc}");
    assert!(items.iter().all(|x| x.get("unlogged").is_none()), "{doc}");
    // A session's output bound in the branch after its last record still is.
    run.bind("note", "late", Some(ids[1]));
    let doc = stdout_json(
        &run.cmd()
            .args(["--json", "resume", "--all"])
            .assert()
            .success(),
    );
    let note = doc["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "note")
        .unwrap()
        .clone();
    assert_eq!(note["unlogged"], true, "{doc}");
}
