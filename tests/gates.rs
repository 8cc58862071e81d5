use crate::common::*;
use std::process::Stdio;

on_both!(
    the_whole_lifecycle_through_the_binary,
    rejection_needs_a_reason_and_wait_exits_5,
    create_is_safe_to_retry_and_refuses_a_different_gate,
    a_gate_past_its_deadline_fails_closed_with_no_sweeper,
    wait_gives_up_with_exit_7_and_sees_a_decision_made_meanwhile,
    allow_list_refusals_are_audited,
    without_a_terminal_a_decision_needs_yes,
    twenty_concurrent_deciders_exactly_one_wins,
    bad_gate_input_is_refused_and_changes_nothing,
    audit_filters_by_gate_principal_and_time,
    listing_across_runs_oldest_first_with_filters,
    a_status_raw_sql_invented_fails_closed,
    a_reopened_gate_answers_each_instance_with_its_own_outcome,
);

fn create(run: &Run, id: &str, extra: &[&str]) -> serde_json::Value {
    let a = run
        .cmd()
        .args([
            "--json",
            "gates",
            "create",
            id,
            "--prompt",
            "Ready to deploy?\nChanges: 3 files",
        ])
        .args(extra)
        .assert()
        .success();
    stdout_json(&a)
}

fn the_whole_lifecycle_through_the_binary(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let v = create(
        &run,
        "production_deploy",
        &[
            "--timeout",
            "4h",
            "--on-reject",
            "throw \"Deployment cancelled\"",
            "--index",
            "3",
        ],
    );
    assert_eq!(v["created"], true);
    assert_eq!(v["status"], "pending");
    assert_eq!(v["allow"], serde_json::json!(["user"]));
    assert_eq!(v["timeout"], "4h");
    assert!(v["time_left_seconds"].as_i64().unwrap() > 14_390);
    // the execution record the spec appends beside the gate
    let exec_id = v["execution_id"].as_i64().unwrap();
    let (idx, text, status, meta) = run.view().execution(exec_id);
    assert_eq!(
        (idx, text.as_deref(), status.as_deref()),
        (Some(3), Some("approve production_deploy:"), Some("pending"))
    );
    assert_eq!(meta, serde_json::json!({"gate_id": "production_deploy"}));
    // deadline = created + 4h, in datetime('now') form
    let (created, deadline) = run.view().gate_times("production_deploy");
    let at = |t: Option<String>| {
        chrono::NaiveDateTime::parse_from_str(&t.unwrap(), "%Y-%m-%d %H:%M:%S").unwrap()
    };
    let diff = (at(deadline) - at(created)).num_seconds();
    assert_eq!(diff, 14_400);
    let ev = run.view().events("production_deploy");
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].0, "created");
    assert_eq!(ev[0].1.as_deref(), Some("system"));
    let prompt_hash = ev[0].2["prompt_hash"].as_str().unwrap().to_string();
    assert!(prompt_hash.starts_with("sha256:") && prompt_hash.len() == 71);
    assert_eq!(ev[0].2["allow"], serde_json::json!(["user"]));

    // listed across runs, then shown (which logs `viewed`)
    let a = p.cmd().args(["--json", "gates"]).assert().success();
    let list = stdout_json(&a);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["id"], "production_deploy");
    assert_eq!(list[0]["run_id"], run.id);
    let a = p
        .cmd()
        .args([
            "--json",
            "gates",
            "show",
            &run.id,
            "production_deploy",
            "--as",
            "auditor",
        ])
        .assert()
        .success();
    let shown = stdout_json(&a);
    assert_eq!(shown["prompt"], "Ready to deploy?\nChanges: 3 files");
    assert_eq!(shown["history"][0]["event_type"], "created");
    assert_eq!(run.view().events("production_deploy")[1].0, "viewed");
    assert_eq!(
        run.view().events("production_deploy")[1].1.as_deref(),
        Some("auditor")
    );
    // approve: the decision and its audit event, with the prompt hash the approver saw
    let a = p
        .cmd()
        .args([
            "--json",
            "approve",
            &run.id,
            "production_deploy",
            "--as",
            "raymond",
            "--yes",
            "--comment",
            "LGTM",
        ])
        .assert()
        .success();
    assert_eq!(stdout_json(&a)["status"], "approved");
    let (status, by, comment, at) = run.view().gate("production_deploy");
    assert_eq!(
        (status.as_str(), by.as_deref(), comment.as_deref()),
        ("approved", Some("raymond"), Some("LGTM"))
    );
    assert!(at.is_some());
    let ev = run.view().events("production_deploy");
    assert_eq!(ev[2].0, "approved");
    assert_eq!(ev[2].2["prompt_hash"], prompt_hash.as_str());

    // waiting on a decided gate returns at once: exit 0 for approved
    let a = p
        .cmd()
        .args(["gates", "wait", &run.id, "production_deploy"])
        .assert()
        .success();
    assert!(String::from_utf8_lossy(&a.get_output().stdout).contains("approved by raymond"));

    // a second decision is refused, says who decided what and when, and is logged
    let before = run.view().gate("production_deploy");
    let a = p
        .cmd()
        .args([
            "reject",
            &run.id,
            "production_deploy",
            "--as",
            "bob",
            "--yes",
            "--reason",
            "late",
        ])
        .assert()
        .failure();
    assert_eq!(code(&a), 4);
    let err = stderr(&a);
    assert!(err.contains("already approved by raymond at"), "{err}");
    assert_eq!(run.view().gate("production_deploy"), before);
    let last = run.view().events("production_deploy").pop().unwrap();
    assert_eq!(last.0, "refused");
    assert_eq!(last.1.as_deref(), Some("bob"));

    // the pending list is empty now; --status all shows it
    let a = p.cmd().args(["--json", "gates"]).assert().success();
    assert_eq!(stdout_json(&a), serde_json::json!([]));
    let a = p
        .cmd()
        .args(["--json", "gates", "--status", "approved"])
        .assert()
        .success();
    assert_eq!(stdout_json(&a).as_array().unwrap().len(), 1);
    p.cmd().args(["gates", "verify"]).assert().success();
}

fn rejection_needs_a_reason_and_wait_exits_5(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    create(&run, "g", &["--on-reject", "retry draft"]);
    let before = run.snapshot();
    for args in [
        vec!["reject", run.id.as_str(), "g", "--yes"],
        vec!["reject", run.id.as_str(), "g", "--yes", "--reason", "  "],
        vec!["approve", run.id.as_str(), "g", "--yes", "--reject"],
        vec!["approve", run.id.as_str(), "g", "--yes", "--reason", "x"],
    ] {
        let a = p.cmd().args(&args).args(["--as", "bob"]).assert().failure();
        assert_eq!(code(&a), 2, "{args:?}: {}", stderr(&a));
        assert_eq!(run.snapshot(), before, "{args:?}");
    }
    // the spec's form: approve --reject --reason
    p.cmd()
        .args([
            "approve",
            &run.id,
            "g",
            "--reject",
            "--reason",
            "Need more testing",
            "--yes",
            "--as",
            "bob",
        ])
        .assert()
        .success();
    let (status, by, comment, _) = run.view().gate("g");
    assert_eq!(
        (status.as_str(), by.as_deref(), comment.as_deref()),
        ("rejected", Some("bob"), Some("Need more testing"))
    );
    let ev = run.view().events("g");
    assert_eq!(ev.last().unwrap().0, "rejected");
    assert_eq!(ev.last().unwrap().2["on_reject"], "retry draft");
    let a = p
        .cmd()
        .args(["gates", "wait", &run.id, "g"])
        .assert()
        .failure();
    assert_eq!(code(&a), 5);
}

fn create_is_safe_to_retry_and_refuses_a_different_gate(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let args = ["--timeout", "1h", "--allow", "ops,user"];
    create(&run, "g", &args);
    let before = run.snapshot();
    let v = create(&run, "g", &args);
    assert_eq!(v["created"], false);
    assert_eq!(run.snapshot(), before, "an identical retry writes nothing");
    let a = run
        .cmd()
        .args(["gates", "create", "g", "--prompt", "something else"])
        .assert()
        .failure();
    assert_eq!(code(&a), 4);
    assert_eq!(run.snapshot(), before);
    // once decided, even the identical call is refused
    p.cmd()
        .args(["approve", &run.id, "g", "--yes", "--as", "ops"])
        .assert()
        .success();
    let before = run.snapshot();
    let a = run
        .cmd()
        .args([
            "gates",
            "create",
            "g",
            "--prompt",
            "Ready to deploy?\nChanges: 3 files",
        ])
        .args(args)
        .assert()
        .failure();
    assert_eq!(code(&a), 4);
    assert_eq!(run.snapshot(), before);
}

fn a_gate_past_its_deadline_fails_closed_with_no_sweeper(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    create(
        &run,
        "quick",
        &["--timeout", "1s", "--on-reject", "continue"],
    );
    advance_clock(p.root(), 2);
    // nothing has swept it: the row still says pending
    assert_eq!(run.view().gate("quick").0, "pending");
    let a = p
        .cmd()
        .args(["approve", &run.id, "quick", "--yes", "--as", "raymond"])
        .assert()
        .failure();
    assert_eq!(code(&a), 4);
    assert!(
        stderr(&a).contains("already timed out by system"),
        "{}",
        stderr(&a)
    );
    let (status, by, _, _) = run.view().gate("quick");
    assert_eq!(
        (status.as_str(), by.as_deref()),
        ("timeout", Some("system"))
    );
    let ev = run.view().events("quick");
    let kinds: Vec<&str> = ev.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(kinds, ["created", "timeout", "refused"]);
    assert_eq!(ev[1].2["on_reject"], "continue");
    assert_eq!(ev[1].1.as_deref(), Some("system"));
    let a = p
        .cmd()
        .args(["gates", "wait", &run.id, "quick"])
        .assert()
        .failure();
    assert_eq!(code(&a), 6);

    // a gate whose deadline raw SQL set in the past is tampered (one deadline: the sealed
    // one): never approved, never timed out early by the row, and every wait exits 9
    create(&run, "raw", &["--timeout", "1h"]);
    run.view().raw(
        "UPDATE gates SET timeout_at = '2000-01-01 00:00:00' WHERE id = 'raw'",
        "UPDATE openprose.gates SET timeout_at = '2000-01-01 00:00:00+00' WHERE run_id = '$RUN' AND id = 'raw'",
    );
    let a = p
        .cmd()
        .args(["approve", &run.id, "raw", "--yes", "--as", "raymond"])
        .assert();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    let a = p
        .cmd()
        .args(["gates", "wait", &run.id, "raw", "--timeout", "0"])
        .assert();
    assert_eq!(code(&a), 9);
    // Nor is it waited on: no one can decide it, so a long wait answers 9 at once, not when
    // its time runs out (killed after a minute, the wait would fail here).
    let a = p
        .cmd()
        .args(["gates", "wait", &run.id, "raw", "--timeout", "1h"])
        .timeout(std::time::Duration::from_secs(60))
        .assert();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    assert_eq!(run.view().gate("raw").0, "pending");
}

fn wait_gives_up_with_exit_7_and_sees_a_decision_made_meanwhile(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    create(&run, "g", &[]);
    let a = p
        .cmd()
        .args([
            "--json",
            "gates",
            "wait",
            &run.id,
            "g",
            "--timeout",
            "1s",
            "--poll",
            "1s",
        ])
        .assert()
        .failure();
    assert_eq!(code(&a), 7);
    assert_eq!(stdout_json(&a)["status"], "pending");

    let waiter = p
        .std_cmd()
        .args([
            "gates",
            "wait",
            &run.id,
            "g",
            "--timeout",
            "30s",
            "--poll",
            "1s",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1200));
    p.cmd()
        .args(["approve", &run.id, "g", "--yes", "--as", "raymond"])
        .assert()
        .success();
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("approved by raymond"));
}

fn allow_list_refusals_are_audited(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    create(&run, "ops_only", &["--allow", "ops-team"]);
    create(&run, "users", &[]);
    let before = run.view().gate("ops_only");
    let a = p
        .cmd()
        .args(["approve", &run.id, "ops_only", "--yes", "--as", "raymond"])
        .assert()
        .failure();
    assert_eq!(code(&a), 4);
    assert!(stderr(&a).contains("may not decide"), "{}", stderr(&a));
    assert_eq!(run.view().gate("ops_only"), before);
    let ev = run.view().events("ops_only");
    assert_eq!(ev.last().unwrap().0, "refused");
    assert_eq!(ev.last().unwrap().1.as_deref(), Some("raymond"));
    assert_eq!(ev.last().unwrap().2["reason"], "principal not allowed");
    // `user` admits people, not agents of the run
    let a = p
        .cmd()
        .env("PROSE_PRINCIPAL", "agent:deployer")
        .args(["approve", &run.id, "users", "--yes"])
        .assert()
        .failure();
    assert_eq!(code(&a), 4);
    assert_eq!(run.view().gate("users").0, "pending");
    p.cmd()
        .args(["approve", &run.id, "ops_only", "--yes", "--as", "ops-team"])
        .assert()
        .success();
    p.cmd()
        .env("PROSE_PRINCIPAL", "raymond")
        .args(["approve", &run.id, "users", "--yes"])
        .assert()
        .success();
    assert_eq!(run.view().gate("users").1.as_deref(), Some("raymond"));
}

fn without_a_terminal_a_decision_needs_yes(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    create(&run, "g", &[]);
    let before = run.snapshot();
    let a = p
        .cmd()
        .args(["approve", &run.id, "g", "--as", "raymond"])
        .assert()
        .failure();
    assert_eq!(code(&a), 2);
    assert!(stderr(&a).contains("pass --yes"), "{}", stderr(&a));
    assert_eq!(run.snapshot(), before);
}

#[test]
fn on_a_terminal_the_prompt_is_shown_and_confirmation_asked() {
    let p = Project::new();
    let run = p.init();
    create(&run, "g", &[]);
    let before = run.snapshot();
    let cmd = format!("{BIN} approve {} g --as raymond", run.id);
    let Some((status, screen)) = on_terminal(&p, &cmd, "n\n") else {
        return;
    };
    assert!(
        screen.contains("Ready to deploy?") && screen.contains("[y/N]"),
        "{screen}"
    );
    assert_eq!(status, 4, "{screen}");
    assert_eq!(run.snapshot(), before);
    let (status, screen) = on_terminal(&p, &cmd, "y\n").unwrap();
    assert_eq!(status, 0, "{screen}");
    assert_eq!(run.view().gate("g").0, "approved");
}

fn twenty_concurrent_deciders_exactly_one_wins(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    create(&run, "race", &[]);
    let children: Vec<_> = (0..20)
        .map(|i| {
            let mut c = p.std_cmd();
            if i % 2 == 0 {
                c.args([
                    "approve",
                    &run.id,
                    "race",
                    "--yes",
                    "--as",
                    &format!("approver{i}"),
                ]);
            } else {
                c.args([
                    "reject",
                    &run.id,
                    "race",
                    "--yes",
                    "--reason",
                    "no",
                    "--as",
                    &format!("rejecter{i}"),
                ]);
            }
            c.stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let codes: Vec<i32> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap().status.code().unwrap())
        .collect();
    assert_eq!(codes.iter().filter(|&&c| c == 0).count(), 1, "{codes:?}");
    assert_eq!(codes.iter().filter(|&&c| c == 4).count(), 19, "{codes:?}");
    let (status, by, _, _) = run.view().gate("race");
    let ev = run.view().events("race");
    let decisions: Vec<_> = ev
        .iter()
        .filter(|e| e.0 == "approved" || e.0 == "rejected")
        .collect();
    assert_eq!(decisions.len(), 1);
    assert_eq!(
        decisions[0].0, status,
        "the log and the gate agree on the outcome"
    );
    assert_eq!(decisions[0].1, by, "and on who decided");
    assert_eq!(ev.iter().filter(|e| e.0 == "refused").count(), 19);
    p.cmd().args(["gates", "verify"]).assert().success();
}

#[test]
fn the_audit_log_is_append_only_and_verify_catches_tampering() {
    let p = Project::new();
    let run = p.init();
    create(&run, "g", &[]);
    p.cmd()
        .args(["gates", "show", &run.id, "g", "--as", "a"])
        .assert()
        .success();
    p.cmd()
        .args(["approve", &run.id, "g", "--yes", "--as", "raymond"])
        .assert()
        .success();
    let c = run.conn();
    for sql in [
        "UPDATE gate_audit_log SET principal = 'mallory' WHERE id = 4",
        "DELETE FROM gate_audit_log WHERE id = 3",
    ] {
        let e = c.execute(sql, []).unwrap_err().to_string();
        assert!(e.contains("append-only"), "{sql}: {e}");
    }
    let a = p
        .cmd()
        .args(["--json", "gates", "verify"])
        .assert()
        .success();
    assert_eq!(
        stdout_json(&a)[0]["rows"],
        4,
        "the genesis, created, viewed, approved"
    );

    // with the triggers dropped, an edit goes through, and verify names the row
    c.execute_batch(
        "DROP TRIGGER gate_audit_log_no_update; DROP TRIGGER gate_audit_log_no_delete;
         UPDATE gate_audit_log SET principal = 'mallory' WHERE id = 4;",
    )
    .unwrap();
    let a = p
        .cmd()
        .args(["gates", "verify", "--run", &run.id])
        .assert()
        .failure();
    assert_eq!(code(&a), 9);
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(
        out.contains("BROKEN at row 4") && out.contains("edited"),
        "{out}"
    );
    // a removed row breaks the link of the next one
    c.execute_batch(
        "UPDATE gate_audit_log SET principal = 'raymond' WHERE id = 4; DELETE FROM gate_audit_log WHERE id = 3;",
    )
    .unwrap();
    let a = p
        .cmd()
        .args(["--json", "gates", "verify"])
        .assert()
        .failure();
    assert_eq!(stdout_json(&a)[0]["first_broken"]["id"], 4);
}

fn bad_gate_input_is_refused_and_changes_nothing(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    create(&run, "g", &[]);
    let before = run.snapshot();
    let cases: Vec<Vec<&str>> = vec![
        vec!["gates", "create", "../x", "--prompt", "p"],
        vec!["gates", "create", "x", "--prompt", ""],
        vec!["gates", "create", "x", "--prompt", "p", "--timeout", "0"],
        vec!["gates", "create", "x", "--prompt", "p", "--timeout", "-1h"],
        vec!["gates", "create", "x", "--prompt", "p", "--timeout", "4x"],
        vec!["gates", "create", "x", "--prompt", "p", "--timeout", ""],
        vec![
            "gates",
            "create",
            "x",
            "--prompt",
            "p",
            "--timeout",
            "99999999999999999999d",
        ],
        vec![
            "gates",
            "create",
            "x",
            "--prompt",
            "p",
            "--timeout",
            "30m2h",
        ],
        vec!["gates", "create", "x", "--prompt", "p", "--allow", ""],
        vec!["gates", "create", "x", "--prompt", "p", "--metadata", "[1]"],
        vec!["gates", "create", "x", "--prompt", "p", "--on-reject", ""],
        // An action a letter off, or in another case, would be thrown as a message.
        vec![
            "gates",
            "create",
            "x",
            "--prompt",
            "p",
            "--on-reject",
            "retyr draft",
        ],
        vec![
            "gates",
            "create",
            "x",
            "--prompt",
            "p",
            "--on-reject",
            "Continue",
        ],
        vec![
            "gates",
            "create",
            "x",
            "--prompt",
            "p",
            "--on-reject",
            "throw: no",
        ],
        // Not the language's: an unknown escape, an unclosed string, a second line, a word
        // after `continue`.
        vec![
            "gates",
            "create",
            "x",
            "--prompt",
            "p",
            "--on-reject",
            r#"throw "a\q""#,
        ],
        vec![
            "gates",
            "create",
            "x",
            "--prompt",
            "p",
            "--on-reject",
            r#"throw "a"#,
        ],
        vec![
            "gates",
            "create",
            "x",
            "--prompt",
            "p",
            "--on-reject",
            "throw \"a\"\nsession \"b\"",
        ],
        vec![
            "gates",
            "create",
            "x",
            "--prompt",
            "p",
            "--on-reject",
            "continue now",
        ],
        vec!["gates", "--expiring", "soon"],
        vec!["gates", "audit", "--since", "yesterday"],
        vec!["gates", "wait", "RUN", "g", "--timeout", "0x"],
        vec!["gates", "wait", "RUN", "g", "--poll", "1x"],
        vec!["gates", "--status", "open"],
        vec!["approve", "RUN", "g", "--yes", "--as", ""],
    ];
    for args in cases {
        let args: Vec<&str> = args
            .iter()
            .map(|a| if *a == "RUN" { run.id.as_str() } else { a })
            .collect();
        let a = run.cmd().args(&args).assert().failure();
        assert_eq!(code(&a), 2, "{args:?}: {}", stderr(&a));
        assert_eq!(stderr(&a).lines().count(), 1);
        assert_eq!(run.snapshot(), before, "{args:?}");
    }
    for args in [
        vec!["approve", run.id.as_str(), "nope", "--yes", "--as", "x"],
        vec!["gates", "show", run.id.as_str(), "nope"],
        vec!["gates", "wait", run.id.as_str(), "nope"],
        vec!["approve", "no-such-run", "g", "--yes", "--as", "x"],
        vec![
            "gates",
            "create",
            "x",
            "--prompt",
            "p",
            "--execution-id",
            "99",
        ],
    ] {
        let a = run.cmd().args(&args).assert().failure();
        assert_eq!(code(&a), 3, "{args:?}: {}", stderr(&a));
        assert_eq!(run.snapshot(), before, "{args:?}");
    }
}

fn listing_across_runs_oldest_first_with_filters(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let r1 = p.init();
    advance_clock(p.root(), 1);
    let r2 = p.init();
    create(&r2, "later", &["--timeout", "30m"]);
    create(&r1, "soon", &["--timeout", "5m"]);
    // make r1's gate the older one
    r1.view().raw(
        "UPDATE gates SET created_at = '2020-01-01 00:00:00'",
        "UPDATE openprose.gates SET created_at = '2020-01-01 00:00:00+00' WHERE run_id = '$RUN'",
    );
    create(&r1, "never", &[]);
    let a = p.cmd().args(["--json", "gates"]).assert().success();
    let ids: Vec<String> = stdout_json(&a)
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            format!(
                "{}/{}",
                g["run_id"].as_str().unwrap(),
                g["id"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(ids[0], format!("{}/soon", r1.id));
    assert_eq!(ids.len(), 3);
    let a = p
        .cmd()
        .args(["--json", "gates", "--run", &r2.id])
        .assert()
        .success();
    assert_eq!(stdout_json(&a).as_array().unwrap().len(), 1);
    let a = p
        .cmd()
        .args(["--json", "gates", "--expiring", "10m"])
        .assert()
        .success();
    let v = stdout_json(&a);
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["id"], "soon");
    // a run whose db is unreadable is skipped with a warning, not fatal (on PostgreSQL: its
    // directory's record of the backend)
    let broken = match b {
        Backend::Sqlite => "state.db",
        Backend::Postgres => "backend.json",
    };
    std::fs::write(r2.dir.join(broken), b"garbage").unwrap();
    // The write-ahead log outlives each command: it would still hold the run's pages.
    let _ = std::fs::remove_file(r2.dir.join("state.db-wal"));
    let _ = std::fs::remove_file(r2.dir.join("state.db-shm"));
    // On PostgreSQL the run lives on the server whatever its record here says: the project
    // catalog keeps it listed from there; --scan reads every directory, and skips this one.
    if b == Backend::Postgres {
        let a = p.cmd().args(["--json", "gates"]).assert().success();
        assert_eq!(stdout_json(&a).as_array().unwrap().len(), 3);
    }
    let scan: &[&str] = match b {
        Backend::Sqlite => &["--json", "gates"],
        Backend::Postgres => &["--json", "gates", "--scan"],
    };
    let a = p.cmd().args(scan).assert().success();
    assert_eq!(stdout_json(&a).as_array().unwrap().len(), 2);
    assert!(
        stderr(&a).contains(&format!("warning: skipped run {}", r2.id)),
        "{}",
        stderr(&a)
    );
    // the human table
    let a = p.cmd().args(["gates"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(
        out.starts_with("RUN") && out.contains("Ready to deploy? …") && out.contains("no deadline"),
        "{out}"
    );
}

fn audit_filters_by_gate_principal_and_time(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    create(&run, "a", &[]);
    create(&run, "b", &[]);
    p.cmd()
        .args(["approve", &run.id, "a", "--yes", "--as", "raymond"])
        .assert()
        .success();
    p.cmd()
        .args([
            "reject", &run.id, "b", "--yes", "--as", "sam", "--reason", "no",
        ])
        .assert()
        .success();
    let a = p
        .cmd()
        .args(["--json", "gates", "audit"])
        .assert()
        .success();
    // The run's genesis, then two gates' created and decided events.
    assert_eq!(stdout_json(&a).as_array().unwrap().len(), 5);
    let a = p
        .cmd()
        .args(["--json", "gates", "audit", "--gate", "b"])
        .assert()
        .success();
    let v = stdout_json(&a);
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert_eq!(v[1]["event_type"], "rejected");
    assert_eq!(v[1]["comment"], "no");
    let a = p
        .cmd()
        .args(["--json", "gates", "audit", "--principal", "raymond"])
        .assert()
        .success();
    assert_eq!(stdout_json(&a).as_array().unwrap().len(), 1);
    run.view().raw(
        "DROP TRIGGER gate_audit_log_no_update; UPDATE gate_audit_log SET timestamp = '2000-01-01 00:00:00' WHERE id = 1;",
        "ALTER TABLE openprose.gate_audit_log DISABLE TRIGGER USER;
         UPDATE openprose.gate_audit_log SET timestamp = '2000-01-01 00:00:00+00'
          WHERE id = (SELECT min(id) FROM openprose.gate_audit_log WHERE run_id = '$RUN');",
    );
    let a = p
        .cmd()
        .args(["--json", "gates", "audit", "--since", "1h"])
        .assert()
        .success();
    // Five events less the one made old.
    assert_eq!(stdout_json(&a).as_array().unwrap().len(), 4);
}

#[test]
fn a_schema_1_database_upgrades_and_its_gate_keeps_working() {
    let p = Project::new();
    let id = "20261122-090000-v1v1v1";
    let dir = p.root().join(".prose/runs").join(id);
    std::fs::create_dir_all(dir.join("attachments")).unwrap();
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/v1-prose-state-0.1.db"),
        dir.join("state.db"),
    )
    .unwrap();
    let run = Run {
        id: id.into(),
        dir: dir.clone(),
        db: dir.join("state.db"),
        root: p.root().to_path_buf(),
        pg_url: None,
    };
    assert_eq!(run.get("research", None), b"made by prose-state schema 1");
    let a = p.cmd().args(["--json", "gates"]).assert().success();
    assert_eq!(stdout_json(&a)[0]["id"], "production_deploy");
    let a = p
        .cmd()
        .args(["--json", "gates", "verify"])
        .assert()
        .success();
    let v = stdout_json(&a);
    assert_eq!(v[0]["unchained_legacy"], 1);
    assert_eq!(v[0]["first_broken"], serde_json::Value::Null);
    p.cmd()
        .args([
            "approve",
            id,
            "production_deploy",
            "--yes",
            "--as",
            "raymond",
        ])
        .assert()
        .success();
    // Its decision is sealed, but nothing sealed the gate itself (it was opened before the
    // run had a seal): the decision is unattested, accepted only as such.
    let a = p
        .cmd()
        .args(["--json", "gates", "verify"])
        .assert()
        .failure();
    assert_eq!(code(&a), 10);
    // Its legacy row, the genesis that sealed it as from before the chain, the approval.
    assert_eq!(stdout_json(&a)[0]["rows"], 3);
    assert_eq!(stdout_json(&a)[0]["unchained_legacy"], 1);
    let wait = ["gates", "wait", id, "production_deploy", "--timeout", "0"];
    assert_eq!(code(&p.cmd().args(wait).assert().failure()), 10);
    p.cmd()
        .args(wait)
        .arg("--accept-unattested")
        .assert()
        .success();
    // the upgrade installed the append-only triggers
    let e = run
        .conn()
        .execute("DELETE FROM gate_audit_log", [])
        .unwrap_err()
        .to_string();
    assert!(e.contains("append-only"), "{e}");
    let version: i64 = run
        .conn()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert!(version >= 2, "{version}");
}

/// A status no prose-state writes, set by raw SQL, is not pending: the gate cannot be
/// approved, and the refusal is logged.
fn a_status_raw_sql_invented_fails_closed(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    create(&run, "g", &[]);
    run.view().raw(
        "UPDATE gates SET status = 'paused' WHERE id = 'g'",
        "ALTER TABLE openprose.gates DROP CONSTRAINT IF EXISTS gates_status_check;
         UPDATE openprose.gates SET status = 'paused' WHERE run_id = '$RUN' AND id = 'g'",
    );
    let a = p
        .cmd()
        .args(["approve", &run.id, "g", "--yes", "--as", "raymond"])
        .assert()
        .failure();
    // Its row contradicts its sealed log, which says pending: tampered, never decided.
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    assert_eq!(run.view().gate("g").0, "paused");
    assert_eq!(run.view().events("g").last().unwrap().0, "refused");
    let a = p
        .cmd()
        .args(["--json", "gates", "--status", "all"])
        .assert()
        .success();
    assert_eq!(stdout_json(&a)[0]["status"], "paused");
}

/// Issue 45: a gate rejected, opened again as instance 2, and the VM gone. `resume` names the
/// instance to wait on (the sealed log's newest) and the wait; waiting on instance 1, as the
/// VM made it, answers with instance 1's own rejection, never "tampered"; instance 2 is still
/// pending; nothing any of the waits does changes the run, and the log verifies.
fn a_reopened_gate_answers_each_instance_with_its_own_outcome(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let first = create(&run, "deploy", &["--on-reject", "retry build"]);
    assert_eq!(first["instance"], 1);
    run.cmd()
        .args([
            "reject", "deploy", "--yes", "--as", "bob", "--reason", "not yet",
        ])
        .assert()
        .success();
    let second = create(&run, "deploy", &["--on-reject", "retry build", "--reopen"]);
    assert_eq!(second["instance"], 2);

    // `resume`: the bounded answer and --all, in JSON and in text.
    for all in [false, true] {
        let mut c = run.cmd();
        c.args(["--json", "resume"]);
        if all {
            c.arg("--all");
        }
        let doc = stdout_json(&c.assert().success());
        let g = doc["gates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["id"] == "deploy")
            .unwrap()
            .clone();
        assert_eq!(g["status"], "pending", "{g}");
        assert_eq!(g["instance"], 2, "{g}");
        assert_eq!(
            g["next_step"],
            serde_json::json!({"action": "wait", "argument": "gates wait deploy --instance 2"}),
            "{g}"
        );
        let mut c = run.cmd();
        c.arg("resume");
        if all {
            c.arg("--all");
        }
        let text = String::from_utf8(c.assert().success().get_output().stdout.clone()).unwrap();
        assert!(
            text.contains("gate deploy pending (instance 2) → wait gates wait deploy --instance 2"),
            "{text}"
        );
    }

    let before = run.snapshot();
    // Instance 1, as the guide's example waits on it: its own rejection (5), at once.
    let a = run
        .cmd()
        .args([
            "gates",
            "wait",
            "deploy",
            "--instance",
            "1",
            "--timeout",
            "30s",
        ])
        .assert()
        .failure();
    assert_eq!(code(&a), 5, "{}", stderr(&a));
    let said = String::from_utf8(a.get_output().stdout.clone()).unwrap();
    assert!(
        said.starts_with("deploy: rejected by bob at ")
            && said.contains(": not yet")
            && said.contains("(instance 1; opened again since as instance 2"),
        "{said}"
    );
    assert!(
        !said.contains("TAMPERED") && !stderr(&a).contains("TAMPERED"),
        "{said}"
    );
    let a = run
        .cmd()
        .args([
            "--json",
            "gates",
            "wait",
            "deploy",
            "--instance",
            "1",
            "--timeout",
            "0",
        ])
        .assert()
        .failure();
    assert_eq!(code(&a), 5);
    let v = stdout_json(&a);
    assert_eq!(
        (
            &v["status"],
            &v["resolved_by"],
            &v["resolution_comment"],
            &v["instance"],
            &v["superseded_by"],
            &v["integrity"]["state"]
        ),
        (
            &serde_json::json!("rejected"),
            &serde_json::json!("bob"),
            &serde_json::json!("not yet"),
            &serde_json::json!(1),
            &serde_json::json!(2),
            &serde_json::json!("attested")
        ),
        "{v}"
    );
    assert!(v["resolved_at"].is_string(), "{v}");
    // Instance 2: still pending when the wait runs out (7).
    let a = run
        .cmd()
        .args([
            "gates",
            "wait",
            "deploy",
            "--instance",
            "2",
            "--timeout",
            "1s",
        ])
        .assert()
        .failure();
    assert_eq!(code(&a), 7, "{}", stderr(&a));
    // No instance 3 was ever opened: the caller's mistake (a VM that crashed before its
    // `--reopen`), not the log's, while the log verifies whole: exit 3, naming the newest.
    let a = run
        .cmd()
        .args([
            "gates",
            "wait",
            "deploy",
            "--instance",
            "3",
            "--timeout",
            "0",
        ])
        .assert()
        .failure();
    assert_eq!(code(&a), 3, "{}", stderr(&a));
    assert!(
        stderr(&a).contains("has no opening 3 yet"),
        "{}",
        stderr(&a)
    );
    run.cmd().args(["gates", "verify"]).assert().success();
    assert_eq!(run.snapshot(), before, "a wait changed the run");

    // Instance 2 approved, and opened again as instance 3: each answers with its own.
    run.cmd()
        .args(["approve", "deploy", "--yes", "--as", "alice"])
        .assert()
        .success();
    run.cmd()
        .args([
            "gates",
            "wait",
            "deploy",
            "--instance",
            "2",
            "--timeout",
            "0",
        ])
        .assert()
        .success();
    create(&run, "deploy", &["--on-reject", "retry build", "--reopen"]);
    let before = run.snapshot();
    for (instance, expected) in [("1", 5), ("2", 0), ("3", 7)] {
        let a = run
            .cmd()
            .args([
                "gates",
                "wait",
                "deploy",
                "--instance",
                instance,
                "--timeout",
                "0",
            ])
            .assert();
        assert_eq!(code(&a), expected, "instance {instance}: {}", stderr(&a));
    }
    run.cmd().args(["gates", "verify"]).assert().success();
    assert_eq!(run.snapshot(), before, "a wait changed the run");
}
