//! What helper-49 and helper-50 (the last outside round of stop 69) found and stop 70 closed.
//!
//! - helper-49 f03: a record was appended to a try's body after its catch began, and under a
//!   start that had ended; `resume` then showed the run in the body and the catch at once.
//! - helper-50 f04: an abandoned (`skipped`) branch still wrote its result after its end.
//! - helper-49 f06: `resume --all` listed a binding whose row claims a decision no sealed
//!   opening names, where `get` refuses it (exit 9).
//! - helper-50 f03: `log` showed every decided gate's opening as "waiting".
//! - helper-50 f07: inside an outer catch, `resume`'s `caught` gave the outer failure where
//!   the next `catch as err` binds the inner one.
//!
//! Then stop 70's own round: helper-51 (an attack, no tests seen) and helper-52 (a literal VM
//! on programs of its own).
//! - helper-51 f01: `approve G:` was logged `exited` (or any status) while G was pending, and
//!   `completed` for a gate never opened; f02: a record was appended under a completed
//!   statement; f03: a `finally` started while its `catch` was open; f05: `--metadata` kept a
//!   key given twice, and retry counts past their max.
//! - helper-52 f04: a branch started with `--construct` was read as ended by its own statement
//!   logged inside it; f03: a skipped branch's result was bound at its parallel; f02: a
//!   persistent agent's session that binds nothing ran twice after a crash; f01: `resume`
//!   kept saying to run an `on_reject` session that ran; f06: it did not say the message the
//!   run fails with.

use crate::common::*;
use prose_state::language::TABLE;

on_both!(
    nothing_is_written_into_a_construct_that_has_ended,
    a_handler_ends_the_body_it_follows,
    an_abandoned_branch_writes_nothing,
    resume_all_reads_a_binding_as_get_does,
    log_says_a_gate_opened,
    caught_is_the_failure_on_its_way,
    an_approve_record_is_its_gates_outcome,
    records_go_inside_starts,
    a_finally_follows_its_catch,
    metadata_says_one_thing,
    a_branch_is_ended_by_its_end,
    a_skipped_branchs_result_is_not_bound_at_its_parallel,
    resume_says_an_agents_session_ran,
    resume_says_an_on_reject_session_ran,
    resume_says_the_message_a_run_fails_with,
);

/// The ending statuses `exec-append --ends` takes.
const ENDINGS: [&str; 5] = ["completed", "failed", "skipped", "joined", "exited"];

/// Every construct the language's table opens, each ended with one of the ending statuses in
/// turn: while it is open a record (`--parent`), a binding (`bind --execution-id`) and a gate
/// (`gates create --execution-id`) land inside it; once it has ended each is refused (exit 4,
/// naming the start and its end, the run unchanged). The same record again under its key, and
/// the same pending gate again, still answer as retries.
fn nothing_is_written_into_a_construct_that_has_ended(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let kinds: Vec<_> = TABLE
        .iter()
        .filter(|e| e.start.is_some() && e.kind.opens())
        .collect();
    assert!(
        kinds.len() >= 10,
        "the table opens {} constructs",
        kinds.len()
    );
    for (i, e) in kinds.iter().enumerate() {
        let ending = ENDINGS[i % ENDINGS.len()];
        let name = e.kind.name();
        let start = stdout_text(
            &run.cmd()
                .args([
                    "exec-append",
                    "--index",
                    "1",
                    "--text",
                    &format!("{name} {i}"),
                ])
                .args(["--status", e.start.unwrap(), "--construct", name])
                .assert()
                .success(),
        );
        let start = start.trim();
        // Open: each write lands inside it.
        let keyed = stdout_text(
            &run.cmd()
                .args(["exec-append", "--index", "2", "--text", "session \"x\""])
                .args([
                    "--status",
                    "completed",
                    "--parent",
                    start,
                    "--key",
                    &format!("k{i}"),
                ])
                .assert()
                .success(),
        );
        run.cmd()
            .args(["bind", &format!("v{i}"), "1", "--execution-id", start])
            .assert()
            .success();
        let gate = format!("g{i}");
        run.cmd()
            .args([
                "gates",
                "create",
                &gate,
                "--prompt",
                "Go?",
                "--execution-id",
                start,
            ])
            .assert()
            .success();
        let end = stdout_text(
            &run.cmd()
                .args(["exec-append", "--ends", start, "--status", ending])
                .assert()
                .success(),
        );
        let says = format!("has ended (record {}, {ending})", end.trim());
        let under = [
            "exec-append",
            "--index",
            "3",
            "--text",
            "session \"late\"",
            "--status",
            "completed",
            "--parent",
            start,
        ];
        run.refuses(&under, 4, &says);
        run.refuses(&["bind", "late", "2", "--execution-id", start], 4, &says);
        run.refuses(
            &[
                "gates",
                "create",
                "late",
                "--prompt",
                "Go?",
                "--execution-id",
                start,
            ],
            4,
            &says,
        );
        run.refuses(
            &[
                "gates",
                "create",
                &gate,
                "--reopen",
                "--prompt",
                "Again?",
                "--execution-id",
                start,
            ],
            4,
            &says,
        );
        // Retries of what landed while it was open answer as before.
        let again = stdout_text(
            &run.cmd()
                .args(["exec-append", "--index", "2", "--text", "session \"x\""])
                .args([
                    "--status",
                    "completed",
                    "--parent",
                    start,
                    "--key",
                    &format!("k{i}"),
                ])
                .assert()
                .success(),
        );
        assert_eq!(again, keyed, "{name}: the keyed retry");
        run.cmd()
            .args([
                "gates",
                "create",
                &gate,
                "--prompt",
                "Go?",
                "--execution-id",
                start,
            ])
            .assert()
            .success();
    }
}

/// Once a `try:`'s handler began, nothing is appended to what it follows: a body record after
/// the catch started, a catch after the finally did (exit 4, the run unchanged). The handlers
/// themselves, their bodies, and the try's end still land.
fn a_handler_ends_the_body_it_follows(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let t = run.exec(1, "try:", "started", None);
    let ts = t.to_string();
    run.cmd()
        .args([
            "exec-append",
            "--index",
            "2",
            "--text",
            "session \"a\"",
            "--status",
            "failed",
        ])
        .args(["--error", "boom", "--parent", &ts])
        .assert()
        .success();
    let catch = run.exec(4, "catch as err:", "started", Some(t));
    let body = [
        "exec-append",
        "--index",
        "3",
        "--text",
        "do:",
        "--status",
        "started",
        "--parent",
        &ts,
    ];
    let says =
        format!("comes before catch as err: in try: record {t}, and that began at record {catch}");
    run.refuses(&body, 4, &says);
    let leaf = [
        "exec-append",
        "--index",
        "2",
        "--text",
        "session \"b\"",
        "--status",
        "completed",
        "--parent",
        &ts,
    ];
    run.refuses(&leaf, 4, &says);
    run.exec(5, "session \"handle\"", "completed", Some(catch));
    run.cmd()
        .args([
            "exec-append",
            "--ends",
            &catch.to_string(),
            "--status",
            "completed",
        ])
        .assert()
        .success();
    let fin = run.exec(6, "finally:", "started", Some(t));
    let late_catch = [
        "exec-append",
        "--index",
        "4",
        "--text",
        "catch as err:",
        "--status",
        "started",
        "--parent",
        &ts,
    ];
    run.refuses(
        &late_catch,
        4,
        &format!("comes before finally: in try: record {t}, and that began at record {fin}"),
    );
    run.cmd()
        .args([
            "exec-append",
            "--ends",
            &fin.to_string(),
            "--status",
            "completed",
        ])
        .assert()
        .success();
    run.cmd()
        .args(["exec-append", "--ends", &ts, "--status", "completed"])
        .assert()
        .success();
    let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
    assert_eq!(doc["position"]["open"], serde_json::json!([]), "{doc}");
}

/// helper-50 f04: a branch ended `skipped` (its parallel joined on another) writes no result
/// after its end: the late bind is refused (exit 4, the run unchanged), and says why.
fn an_abandoned_branch_writes_nothing(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let par = run
        .cmd()
        .args([
            "exec-append",
            "--index",
            "1",
            "--text",
            "parallel (\"first\"):",
        ])
        .args(["--status", "started"])
        .args([
            "--metadata",
            r#"{"parallel_id":"p1","branches":["fast","slow"],"strategy":"first"}"#,
        ])
        .assert()
        .success();
    let par = stdout_text(&par).trim().to_string();
    let branch = |i: &str, name: &str| {
        let a = run
            .cmd()
            .args([
                "exec-append",
                "--index",
                i,
                "--text",
                &format!("{name} = session \"{name}\""),
            ])
            .args([
                "--status",
                "started",
                "--construct",
                "branch",
                "--parent",
                &par,
            ])
            .args([
                "--metadata",
                &format!(r#"{{"parallel_id":"p1","branch":"{name}"}}"#),
            ])
            .assert()
            .success();
        stdout_text(&a).trim().to_string()
    };
    let (fast, slow) = (branch("1", "fast"), branch("2", "slow"));
    run.cmd()
        .args(["bind", "fast", "F", "--execution-id", &fast])
        .assert()
        .success();
    for (id, status) in [(&fast, "completed"), (&slow, "skipped"), (&par, "joined")] {
        run.cmd()
            .args(["exec-append", "--ends", id, "--status", status])
            .assert()
            .success();
    }
    let err = run.refuses(
        &["bind", "slow", "late", "--execution-id", &slow],
        4,
        "a skipped construct writes nothing",
    );
    assert!(
        err.contains(&format!(
            "record {slow} (slow = session \"slow\") has ended"
        )),
        "{err}"
    );
}

/// helper-49 f06: a binding whose row and history say a decision of a gate wrote it, where no
/// sealed opening of that gate names it, is refused by `resume --all` as by `get` (exit 9).
fn resume_all_reads_a_binding_as_get_does(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "g1", "--prompt", "ok?"])
        .assert()
        .success();
    run.bind("plain", "pv", None);
    run.cmd()
        .args(["approve", "g1", "-y", "--as", "bob"])
        .assert()
        .success();
    for claim in ["approve  g1:", "approve g1:"] {
        let set = |table: &str| {
            format!(
                "UPDATE {table} SET source_statement = '{claim}', principal = 'bob' WHERE name = 'plain'"
            )
        };
        let sqlite = format!(
            "DROP TRIGGER IF EXISTS binding_history_version; DROP TRIGGER IF EXISTS bindings_version_update;
             UPDATE bindings SET source_statement = '{claim}' WHERE name = 'plain'; {};",
            set("binding_history")
        );
        let pg = format!(
            "ALTER TABLE openprose.bindings DISABLE TRIGGER USER;
             ALTER TABLE openprose.binding_history DISABLE TRIGGER USER;
             UPDATE openprose.bindings SET source_statement = '{claim}' WHERE name = 'plain' AND run_id = '$RUN';
             {} AND run_id = '$RUN';
             ALTER TABLE openprose.bindings ENABLE TRIGGER USER;
             ALTER TABLE openprose.binding_history ENABLE TRIGGER USER",
            set("openprose.binding_history")
        );
        run.view().raw(&sqlite, &pg);
        let get = run.cmd().args(["get", "plain"]).assert().failure();
        assert_eq!(code(&get), 9, "{claim}: {}", stderr(&get));
        for args in [
            &["resume", "--all"][..],
            &["--json", "resume", "--all"],
            &["resume"],
        ] {
            let a = run.cmd().args(args).assert().failure();
            assert_eq!(code(&a), 9, "{claim} {args:?}: {}", stderr(&a));
            assert!(stderr(&a).contains("binding \"plain\""), "{}", stderr(&a));
        }
    }
}

/// helper-50 f03: the log line of a gate's opening says it opened, true whenever it is read;
/// the decision is the VM's record of the statement after it.
fn log_says_a_gate_opened(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "g", "--index", "1", "--prompt", "OK?"])
        .assert()
        .success();
    run.cmd()
        .args(["approve", "g", "-y", "--as", "erin"])
        .assert()
        .success();
    run.exec(1, "approve g:", "completed", None);
    let log = stdout_text(&run.cmd().args(["log"]).assert().success());
    assert!(log.contains("⏸ approve g: opened"), "{log}");
    assert!(log.contains("1→ approve g: ✓"), "{log}");
    assert!(!log.contains("waiting"), "{log}");
}

/// helper-50 f07: inside an outer catch, a throw gate rejected in an inner try: `caught` is the
/// gate's throw message, what the inner `catch as err` binds next, not the outer failure.
fn caught_is_the_failure_on_its_way(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let outer = run.exec(1, "try:", "started", None);
    run.cmd()
        .args([
            "exec-append",
            "--index",
            "1",
            "--text",
            "throw \"first error\"",
            "--status",
            "failed",
        ])
        .args(["--error", "first error", "--parent", &outer.to_string()])
        .assert()
        .success();
    let c = run.exec(2, "catch as outer:", "started", Some(outer));
    let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
    assert_eq!(doc["position"]["caught"]["error"], "first error", "{doc}");
    let inner = run.exec(1, "try:", "started", Some(c));
    run.cmd()
        .args([
            "gates", "create", "signoff", "--index", "1", "--prompt", "Ship?",
        ])
        .args([
            "--execution-id",
            &inner.to_string(),
            "--on-reject",
            "throw \"signoff refused\"",
        ])
        .assert()
        .success();
    run.cmd()
        .args(["reject", "signoff", "-y", "--as", "carol", "--reason", "no"])
        .assert()
        .success();
    let failed = stdout_text(
        &run.cmd()
            .args([
                "exec-append",
                "--index",
                "1",
                "--text",
                "approve signoff:",
                "--status",
                "failed",
            ])
            .args(["--error", "no", "--parent", &inner.to_string()])
            .assert()
            .success(),
    );
    let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
    let caught = &doc["position"]["caught"];
    assert_eq!(caught["error"], "signoff refused", "{doc}");
    assert_eq!(caught["record"].to_string(), failed.trim(), "{doc}");
    assert!(doc["position"]["handler"].as_str().is_some(), "{doc}");
}

/// Every status but `completed` and `failed` is refused for an `approve G:` record (exit 2),
/// as is a text that names no gate id; `completed` or `failed` for a gate never opened is
/// refused (exit 4). The run is unchanged each time.
fn an_approve_record_is_its_gates_outcome(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "g", "--index", "1", "--prompt", "Go?"])
        .assert()
        .success();
    let statuses = [
        "started",
        "executing",
        "pending",
        "retry",
        "iteration",
        "skipped",
        "joined",
        "exited",
    ];
    for status in statuses {
        for text in ["approve g:", "Approve g: # x"] {
            let args = [
                "exec-append",
                "--index",
                "1",
                "--text",
                text,
                "--status",
                status,
            ];
            run.refuses(&args, 2, &format!("not `{status}`"));
        }
    }
    for text in ["approve \"g\":", "approve g!:"] {
        let args = [
            "exec-append",
            "--index",
            "1",
            "--text",
            text,
            "--status",
            "completed",
        ];
        run.refuses(&args, 2, "names no gate");
    }
    for status in ["completed", "failed"] {
        let args = [
            "exec-append",
            "--index",
            "1",
            "--text",
            "approve h:",
            "--status",
            status,
        ];
        run.refuses(&args, 4, "no gate \"h\" was opened in this run");
    }
}

/// `--parent` names a start: under a record of any other status (a completed statement, an
/// end, an iteration) nothing is appended (exit 4, the run unchanged).
fn records_go_inside_starts(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let leaf = run.exec(1, "let a = session \"x\"", "completed", None);
    let lp = run.exec(2, "repeat 2:", "started", None);
    let it = run.exec(2, "repeat 2:", "iteration", Some(lp));
    for (parent, status) in [(leaf, "completed"), (it, "iteration")] {
        let parent = parent.to_string();
        for (text, st) in [("session \"y\"", "completed"), ("if **c**:", "started")] {
            let args = [
                "exec-append",
                "--index",
                "1",
                "--text",
                text,
                "--status",
                st,
                "--parent",
                &parent,
            ];
            run.refuses(
                &args,
                4,
                &format!("--parent {parent} names a `{status}` record"),
            );
        }
    }
    run.exec(1, "session \"y\"", "completed", Some(lp));
}

/// A `finally` starts once its `catch` has ended (exit 4 while it is open, the run
/// unchanged); then it lands.
fn a_finally_follows_its_catch(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let t = run.exec(1, "try:", "started", None);
    run.cmd()
        .args([
            "exec-append",
            "--index",
            "1",
            "--text",
            "session \"a\"",
            "--status",
            "failed",
        ])
        .args(["--error", "boom", "--parent", &t.to_string()])
        .assert()
        .success();
    let c = run.exec(2, "catch as err:", "started", Some(t));
    let ts = t.to_string();
    let fin = [
        "exec-append",
        "--index",
        "3",
        "--text",
        "finally:",
        "--status",
        "started",
        "--parent",
        &ts,
    ];
    run.refuses(
        &fin,
        4,
        &format!("finally: starts only after its catch has ended, and record {c}"),
    );
    let again = [
        "exec-append",
        "--index",
        "2",
        "--text",
        "catch as err:",
        "--status",
        "started",
        "--parent",
        &ts,
    ];
    run.refuses(
        &again,
        4,
        &format!("try: record {t} already has its catch as err: (record {c})"),
    );
    run.exec(1, "session \"b\"", "completed", Some(c));
    run.cmd()
        .args([
            "exec-append",
            "--ends",
            &c.to_string(),
            "--status",
            "completed",
        ])
        .assert()
        .success();
    let f = run.exec(3, "finally:", "started", Some(t));
    run.refuses(
        &fin,
        4,
        &format!("try: record {t} already has its finally: (record {f})"),
    );
}

/// `--metadata` with a key given twice (at any depth) is bad input (exit 2), as a response is;
/// a retry's `attempt` is a whole number from 1, at most its `max` + 1.
fn metadata_says_one_thing(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    for (metadata, says) in [
        (r#"{"taken":"if","taken":"else"}"#, "given twice"),
        (r#"{"a":{"b":1,"b":2}}"#, "given twice"),
        (r#"{"attempt":5,"max":2}"#, "is past \"max\": 2"),
        (r#"{"attempt":0,"max":2}"#, "a whole number from 1"),
        (r#"{"attempt":1.5}"#, "a whole number from 1"),
        (r#"{"attempt":2,"max":"3"}"#, "a whole number from 1"),
    ] {
        let args = [
            "exec-append",
            "--index",
            "1",
            "--text",
            "session \"x\"",
            "--status",
            "failed",
            "--metadata",
            metadata,
        ];
        run.refuses(&args, 2, says);
    }
    run.cmd()
        .args([
            "exec-append",
            "--index",
            "1",
            "--text",
            "session \"x\"",
            "--status",
            "retry",
        ])
        .args(["--metadata", r#"{"attempt":3,"max":2}"#])
        .assert()
        .success();
}

/// helper-52 f04: a `parallel for` branch whose text is its one statement's, with that
/// statement logged inside it, stays open until its `--ends`: `resume` lists it with its
/// `after`, and counts no branch done.
fn a_branch_is_ended_by_its_end(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let pf = run
        .cmd()
        .args([
            "exec-append",
            "--index",
            "1",
            "--text",
            "parallel for t in items:",
        ])
        .args([
            "--status",
            "started",
            "--metadata",
            r#"{"parallel_id":"pf","branches":[0,1]}"#,
        ])
        .assert()
        .success();
    let pf = stdout_text(&pf).trim().to_string();
    let mut branches = Vec::new();
    for n in 0..2 {
        let a = run
            .cmd()
            .args(["exec-append", "--index", "1", "--text", "session \"Note\""])
            .args([
                "--status",
                "started",
                "--construct",
                "branch",
                "--parent",
                &pf,
            ])
            .args([
                "--metadata",
                &format!(r#"{{"parallel_id":"pf","branch":{n}}}"#),
            ])
            .assert()
            .success();
        branches.push(stdout_text(&a).trim().parse::<i64>().unwrap());
    }
    let inner = run.exec(1, "session \"Note\"", "completed", Some(branches[1]));
    let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
    let par = &doc["parallel"][0];
    assert_eq!(par["completed"], serde_json::json!([]), "{doc}");
    let open: Vec<i64> = par["open_branches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["record"].as_i64().unwrap())
        .collect();
    assert_eq!(open, branches, "{doc}");
    assert!(
        par["open_branches"][1]["after"]
            .as_str()
            .unwrap()
            .contains(&format!("record {inner}")),
        "{doc}"
    );
}

/// helper-52 f03: a named branch skipped (its race decided) has no result: binding its name at
/// the parallel is refused (exit 4, the run unchanged); the winner's is bound.
fn a_skipped_branchs_result_is_not_bound_at_its_parallel(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let par = run
        .cmd()
        .args([
            "exec-append",
            "--index",
            "1",
            "--text",
            "parallel (\"first\"):",
            "--status",
            "started",
        ])
        .args([
            "--metadata",
            r#"{"parallel_id":"p1","branches":["fast","slow"],"strategy":"first"}"#,
        ])
        .assert()
        .success();
    let par = stdout_text(&par).trim().to_string();
    let mut ids = Vec::new();
    for (i, name) in ["fast", "slow"].iter().enumerate() {
        let a = run
            .cmd()
            .args(["exec-append", "--index", &(i + 1).to_string()])
            .args([
                "--text",
                &format!("{name} = session \"{name}\""),
                "--status",
                "started",
            ])
            .args(["--construct", "branch", "--parent", &par])
            .args([
                "--metadata",
                &format!(r#"{{"parallel_id":"p1","branch":"{name}"}}"#),
            ])
            .assert()
            .success();
        ids.push(stdout_text(&a).trim().to_string());
    }
    run.cmd()
        .args(["bind", "fast", "A", "--execution-id", &par])
        .assert()
        .success();
    for (id, status) in [(&ids[0], "completed"), (&ids[1], "skipped")] {
        run.cmd()
            .args(["exec-append", "--ends", id, "--status", status])
            .assert()
            .success();
    }
    run.refuses(
        &["bind", "slow", "late", "--execution-id", &par],
        4,
        "an abandoned branch's result is not bound",
    );
    run.cmd()
        .args(["exec-append", "--ends", &par, "--status", "joined"])
        .assert()
        .success();
    assert_eq!(run.get("fast", None), b"A");
}

/// helper-52 f02: a persistent agent's segment appended after the run's newest record is its
/// session that ran unlogged: `resume` marks the agent, in text and JSON, until a record is
/// logged after it.
fn resume_says_an_agents_session_ran(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.exec(1, "session \"first\"", "completed", None);
    let agent = |args: &[&str]| run.cmd().arg("agent").args(args).assert().success();
    agent(&["remember", "critic", "critiqued once"]);
    agent(&[
        "segment",
        "critic",
        "--prompt",
        "Critique",
        "--summary",
        "done",
    ]);
    let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
    assert_eq!(doc["agents"][0]["unlogged"], true, "{doc}");
    let text = stdout_text(&run.cmd().args(["resume"]).assert().success());
    assert!(
        text.contains("so its session ran; log that statement, do not run it again"),
        "{text}"
    );
    run.exec(2, "session: critic", "completed", None);
    let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
    assert!(doc["agents"][0].get("unlogged").is_none(), "{doc}");
}

/// helper-52 f01: after a rejection under `on_reject: session "…"`, the session logged at the
/// gate's index: `resume` says it ran and to go on after it.
fn resume_says_an_on_reject_session_ran(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args([
            "gates", "create", "wording", "--index", "1", "--prompt", "OK?",
        ])
        .args(["--on-reject", "session \"Explain the refusal\""])
        .assert()
        .success();
    run.cmd()
        .args([
            "reject", "wording", "--as", "alice", "--reason", "no", "--yes",
        ])
        .assert()
        .success();
    run.cmd()
        .args([
            "exec-append",
            "--index",
            "1",
            "--text",
            "approve wording:",
            "--status",
            "failed",
        ])
        .args(["--error", "no"])
        .assert()
        .success();
    let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
    assert!(doc["gates"][0].get("retried_since").is_none(), "{doc}");
    let ran = run.exec(1, "session \"Explain the refusal\"", "completed", None);
    let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
    assert_eq!(doc["gates"][0]["retried_since"], ran, "{doc}");
    let text = stdout_text(&run.cmd().args(["resume"]).assert().success());
    assert!(
        text.contains(&format!(
            "the session ran (record {ran}): go on after it, not again"
        )),
        "{text}"
    );
}

/// helper-52 f06: a gate's `throw "msg"` rejection with no `try:` around it: `caught` is msg,
/// the message the run fails with, not the person's reason.
fn resume_says_the_message_a_run_fails_with(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args([
            "gates", "create", "deploy", "--index", "1", "--prompt", "Deploy?",
        ])
        .args(["--on-reject", "throw \"Not deployed\""])
        .assert()
        .success();
    run.cmd()
        .args([
            "reject",
            "deploy",
            "--as",
            "alice",
            "--reason",
            "freeze week",
            "--yes",
        ])
        .assert()
        .success();
    let failed = run
        .cmd()
        .args([
            "exec-append",
            "--index",
            "1",
            "--text",
            "approve deploy:",
            "--status",
            "failed",
        ])
        .args(["--error", "freeze week"])
        .assert()
        .success();
    let failed = stdout_text(&failed).trim().parse::<i64>().unwrap();
    let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
    assert_eq!(doc["position"]["caught"]["error"], "Not deployed", "{doc}");
    assert_eq!(doc["position"]["caught"]["record"], failed, "{doc}");
    let text = stdout_text(&run.cmd().args(["resume"]).assert().success());
    assert!(text.contains("caught: Not deployed (record"), "{text}");
    assert!(text.contains("the MSG the run fails with"), "{text}");
}
