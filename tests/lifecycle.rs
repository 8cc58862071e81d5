//! Persistent agents, imports, finish, runs and resume.

use crate::common::*;

on_both!(
    ten_processes_appending_segments_get_1_to_n,
    imports_are_registered_once_and_schemas_must_be_json,
    a_finished_run_is_read_only_and_keeps_its_status,
    runs_lists_newest_first_with_status_and_pending_gates,
    resume_tells_a_vm_everything_it_needs,
);
use std::process::Stdio;

fn json_of(a: &assert_cmd::assert::Assert) -> serde_json::Value {
    stdout_json(a)
}

#[test]
fn agent_memory_in_the_three_scopes_lives_where_the_spec_says() {
    let p = Project::new();
    let run = p.init();
    // The same home every command of the test sees (its audit key included).
    let home = test_home(p.root());
    let agent = |scope: &str| {
        let mut c = run.cmd();
        c.env("PROSE_HOME", &home).args(["agent", "--scope", scope]);
        c
    };
    for scope in ["execution", "project", "user"] {
        let a = agent(scope).args(["memory", "captain"]).assert().failure();
        assert_eq!(code(&a), 3, "{scope}: no memory yet is exit 3");
    }
    // reads never create the project or user databases
    assert!(!p.root().join(".prose/agents.db").exists());
    assert!(!home.join(".prose/agents.db").exists());

    agent("execution")
        .args(["remember", "captain", "run memory"])
        .assert()
        .success();
    agent("project")
        .args(["remember", "captain"])
        .write_stdin("project memory")
        .assert()
        .success();
    let f = p.write("mem.txt", b"user memory, it's \"quoted\"");
    agent("user")
        .args(["remember", "captain", "--file"])
        .arg(&f)
        .assert()
        .success();

    assert_eq!(
        agent("execution")
            .args(["memory", "captain"])
            .assert()
            .success()
            .get_output()
            .stdout,
        b"run memory"
    );
    assert_eq!(
        agent("project")
            .args(["memory", "captain"])
            .assert()
            .success()
            .get_output()
            .stdout,
        b"project memory"
    );
    assert_eq!(
        agent("user")
            .args(["memory", "captain"])
            .assert()
            .success()
            .get_output()
            .stdout,
        b"user memory, it's \"quoted\""
    );
    // and each in its own database
    let read = |db: &std::path::Path| -> (String, String) {
        rusqlite::Connection::open(db)
            .unwrap()
            .query_row(
                "SELECT memory, scope FROM agents WHERE name = 'captain'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap()
    };
    assert_eq!(read(&run.db), ("run memory".into(), "execution".into()));
    assert_eq!(
        read(&p.root().join(".prose/agents.db")),
        ("project memory".into(), "project".into())
    );
    assert_eq!(read(&home.join(".prose/agents.db")).1, "user");
    let v: i64 = rusqlite::Connection::open(home.join(".prose/agents.db"))
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        v, 1_001_001,
        "agents.db is versioned (schema 1, readers and writers 1)"
    );

    // remember replaces
    agent("project")
        .args(["remember", "captain", "newer"])
        .assert()
        .success();
    assert_eq!(
        agent("project")
            .args(["memory", "captain"])
            .assert()
            .success()
            .get_output()
            .stdout,
        b"newer"
    );

    // segments count from 1 per agent, and list shows them
    for expected in 1..=3 {
        let a = agent("execution")
            .args([
                "segment",
                "captain",
                "--prompt",
                "Steer",
                "--summary",
                "Steered",
            ])
            .assert()
            .success();
        assert_eq!(
            String::from_utf8_lossy(&a.get_output().stdout).trim(),
            expected.to_string()
        );
    }
    let a = agent("execution")
        .args(["--json", "list"])
        .assert()
        .success();
    let v = json_of(&a);
    assert_eq!(v[0]["name"], "captain");
    assert_eq!(v[0]["segments"], 3);
    assert_eq!(v[0]["memory_bytes"], 10);
    // a segment for an agent with no memory yet creates it, still without memory
    agent("execution")
        .args(["segment", "scout", "--prompt", "p", "--summary", "s"])
        .assert()
        .success();
    assert_eq!(
        code(
            &agent("execution")
                .args(["memory", "scout"])
                .assert()
                .failure()
        ),
        3
    );

    // execution scope needs a run
    let a = p
        .cmd()
        .args(["agent", "memory", "captain"])
        .assert()
        .failure();
    assert_eq!(code(&a), 2);
    // bad names and invalid UTF-8 are refused, nothing written
    let before = run.snapshot();
    for bad in ["../x", "", "a b"] {
        let a = agent("execution")
            .args(["remember", bad, "v"])
            .assert()
            .failure();
        assert_eq!(code(&a), 2);
    }
    let a = agent("execution")
        .args(["remember", "captain"])
        .write_stdin(&b"\xff"[..])
        .assert()
        .failure();
    assert_eq!(code(&a), 2);
    assert_eq!(run.snapshot(), before);
}

fn ten_processes_appending_segments_get_1_to_n(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let children: Vec<_> = (0..10)
        .map(|w| {
            let mut script = String::new();
            for i in 0..10 {
                script += &format!(
                    "\"$BIN\" --run \"$RUN\" agent segment captain --prompt 'w{w} i{i}' --summary s || echo FAIL >&2\n"
                );
            }
            sh(p.root(), &script)
                .env("RUN", &run.id)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut printed: Vec<i64> = Vec::new();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stderr), "");
        printed.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| l.parse::<i64>().unwrap()),
        );
    }
    printed.sort();
    assert_eq!(
        printed,
        (1..=100).collect::<Vec<_>>(),
        "printed numbers: no gap, no duplicate"
    );
    let stored = run.view().segments("captain");
    assert_eq!(stored, (1..=100).collect::<Vec<_>>());
}

fn imports_are_registered_once_and_schemas_must_be_json(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let add = |extra: &[&str]| {
        let mut c = run.cmd();
        c.args([
            "--json",
            "imports",
            "add",
            "research",
            "--source",
            "https://example.org/research.prose",
        ])
        .args(extra);
        c
    };
    let a = add(&["--inputs-schema", r#"{"topic": "string"}"#])
        .assert()
        .success();
    assert_eq!(json_of(&a)["outcome"], "added");
    let a = add(&["--inputs-schema", r#"{"topic": "string"}"#])
        .assert()
        .success();
    assert_eq!(json_of(&a)["outcome"], "unchanged");
    let before = run.snapshot();
    for (extra, want) in [
        (vec!["--inputs-schema", "{not json"], 2),
        (vec!["--outputs-schema", ""], 2),
        (vec![], 4), // a different schema than registered, without --replace
    ] {
        let a = add(&extra).assert().failure();
        assert_eq!(code(&a), want, "{extra:?}: {}", stderr(&a));
        assert_eq!(run.snapshot(), before);
    }
    let a = run
        .cmd()
        .args(["imports", "add", "../x", "--source", "s"])
        .assert()
        .failure();
    assert_eq!(code(&a), 2);
    let a = add(&["--outputs-schema", "[1]", "--replace"])
        .assert()
        .success();
    assert_eq!(json_of(&a)["outcome"], "replaced");
    let a = run.cmd().args(["--json", "imports"]).assert().success();
    let v = json_of(&a);
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["alias"], "research");
    assert_eq!(v[0]["outputs_schema"], "[1]");
    assert_eq!(v[0]["inputs_schema"], serde_json::Value::Null);
}

fn a_finished_run_is_read_only_and_keeps_its_status(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("x", "1", None);
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "ok?"])
        .assert()
        .success();
    // completing with a pending gate is refused
    let a = run
        .cmd()
        .args(["finish", "--status", "completed"])
        .assert()
        .failure();
    assert_eq!(code(&a), 4);
    assert!(stderr(&a).contains("pending gates (g)"), "{}", stderr(&a));
    p.cmd()
        .args(["approve", &run.id, "g", "--yes", "--as", "raymond"])
        .assert()
        .success();
    let a = run
        .cmd()
        .args(["--json", "finish", "--status", "completed"])
        .assert()
        .success();
    let v = json_of(&a);
    assert_eq!(v["previous_status"], "running");
    assert_eq!(v["status"], "completed");
    let (status, updated, _) = run.view().run_row();
    assert_eq!(status, "completed");
    assert!(!updated.unwrap().is_empty());

    let before = run.snapshot();
    for args in [
        vec!["bind", "y", "2"],
        vec![
            "exec-append",
            "--index",
            "1",
            "--text",
            "x",
            "--status",
            "completed",
        ],
        vec!["gates", "create", "h", "--prompt", "p"],
        vec!["agent", "remember", "captain", "m"],
        vec![
            "agent",
            "segment",
            "captain",
            "--prompt",
            "p",
            "--summary",
            "s",
        ],
        vec!["imports", "add", "a", "--source", "s"],
        vec!["finish", "--status", "failed"],
    ] {
        let a = run.cmd().args(&args).assert().failure();
        assert_eq!(code(&a), 4, "{args:?}: {}", stderr(&a));
        assert_eq!(run.snapshot(), before, "{args:?}");
    }
    // reads still work; finishing again the same way is a no-op
    assert_eq!(run.get("x", None), b"1");
    let a = run
        .cmd()
        .args(["--json", "finish", "--status", "completed"])
        .assert()
        .success();
    assert_eq!(json_of(&a)["previous_status"], serde_json::Value::Null);
    assert_eq!(run.snapshot(), before);

    // a failed run records why; an interrupted one still takes writes
    let r2 = p.init();
    r2.cmd()
        .args([
            "finish",
            "--status",
            "interrupted",
            "--error",
            "VM context full",
        ])
        .assert()
        .success();
    r2.bind("late", "subagent output after the VM stopped", None);
    r2.cmd()
        .args(["finish", "--status", "failed", "--error", "gave up"])
        .assert()
        .success();
    let (status, _, err) = r2.view().run_row();
    assert_eq!(
        (status.as_str(), err.as_deref()),
        ("failed", Some("gave up"))
    );
    let a = r2
        .cmd()
        .args(["finish", "--status", "done"])
        .assert()
        .failure();
    assert_eq!(code(&a), 2);
}

fn runs_lists_newest_first_with_status_and_pending_gates(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let old = p.init();
    advance_clock(p.root(), 1);
    let new = p.init();
    new.cmd()
        .args(["gates", "create", "g", "--prompt", "p"])
        .assert()
        .success();
    new.exec(1, "x", "completed", None);
    old.cmd()
        .args(["finish", "--status", "failed"])
        .assert()
        .success();
    let a = p.cmd().args(["--json", "runs"]).assert().success();
    let v = json_of(&a);
    assert_eq!(v[0]["id"], new.id);
    assert_eq!(v[0]["status"], "running");
    assert_eq!(v[0]["pending_gates"], 1);
    assert!(v[0]["last_event_at"].is_string());
    assert_eq!(v[1]["id"], old.id);
    assert_eq!(v[1]["status"], "failed");
    let a = p
        .cmd()
        .args(["--json", "runs", "--status", "failed"])
        .assert()
        .success();
    assert_eq!(json_of(&a).as_array().unwrap().len(), 1);
    let a = p
        .cmd()
        .args(["--json", "runs", "--limit", "1"])
        .assert()
        .success();
    assert_eq!(json_of(&a).as_array().unwrap().len(), 1);
    let a = p.cmd().args(["runs", "--limit", "0"]).assert().failure();
    assert_eq!(code(&a), 2);
}

/// The scripted run of issue 5, checked field by field.
fn resume_tells_a_vm_everything_it_needs(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    // The same home every command of the test sees (its audit key included).
    let home = test_home(p.root());
    let run = p.init();
    let x = |index: i64,
             text: &str,
             status: &str,
             meta: Option<&str>,
             parent: Option<i64>,
             err: Option<&str>|
     -> i64 {
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
        if let Some(m) = meta {
            c.args(["--metadata", m]);
        }
        if let Some(pid) = parent {
            c.args(["--parent", &pid.to_string()]);
        }
        if let Some(e) = err {
            c.args(["--error", e]);
        }
        String::from_utf8(c.assert().success().get_output().stdout.clone())
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    // a completed statement
    x(
        1,
        "let research = session \"Research\"",
        "executing",
        None,
        None,
        None,
    );
    x(
        1,
        "let research = session \"Research\"",
        "completed",
        None,
        None,
        None,
    );
    // a parallel block with 2 of 3 branches completed
    let par = x(
        5,
        "parallel:",
        "started",
        Some(r#"{"parallel_id": "p1", "branches": ["a", "b", "c"]}"#),
        None,
        None,
    );
    x(
        5,
        "parallel:a",
        "completed",
        Some(r#"{"parallel_id": "p1", "branch": "a"}"#),
        None,
        None,
    );
    x(
        5,
        "parallel:b",
        "completed",
        Some(r#"{"parallel_id": "p1", "branch": "b"}"#),
        None,
        None,
    );
    // a loop at iteration 2
    x(
        10,
        "loop",
        "started",
        Some(r#"{"loop_id": "l1", "max": 5, "condition": "**complete**"}"#),
        None,
        None,
    );
    x(
        10,
        "loop",
        "iteration",
        Some(r#"{"loop_id": "l1", "iteration": 1}"#),
        None,
        None,
    );
    x(
        10,
        "loop",
        "iteration",
        Some(r#"{"loop_id": "l1", "iteration": 2}"#),
        None,
        None,
    );
    // a failed statement in retry
    x(
        15,
        "session \"Risky\"",
        "failed",
        Some("{}"),
        None,
        Some("Connection timeout after 30s"),
    );
    let retry = x(
        15,
        "session \"Risky\"",
        "retry",
        Some(r#"{"attempt": 2, "max": 3}"#),
        None,
        None,
    );
    // a block in progress, whose scope holds bindings
    let block = x(20, "do process", "executing", None, None, None);
    // bindings in root and nested scopes, one an attachment
    run.bind("research", "AI safety research\nwith 15 citations", None);
    run.bind("result", "scoped result", Some(block));
    run.cmd()
        .args([
            "bind",
            "report",
            "--attach-over",
            "10",
            "--execution-id",
            &block.to_string(),
        ])
        .write_stdin("a long report that goes to an attachment")
        .assert()
        .success();
    // an agent with memory
    run.cmd()
        .args(["agent", "remember", "captain", "I remember the plan"])
        .assert()
        .success();
    run.cmd()
        .args([
            "agent",
            "segment",
            "captain",
            "--prompt",
            "p",
            "--summary",
            "s",
        ])
        .assert()
        .success();
    run.cmd()
        .env("PROSE_HOME", &home)
        .args([
            "agent",
            "--scope",
            "user",
            "remember",
            "mentor",
            "user-wide",
        ])
        .assert()
        .success();
    // gates in every status
    let gate = |id: &str, extra: &[&str]| {
        run.cmd()
            .args(["gates", "create", id, "--prompt", "ok?"])
            .args(extra)
            .assert()
            .success();
    };
    gate("g_pending", &[]);
    gate("g_approved", &[]);
    gate("g_rejected", &["--on-reject", "retry draft"]);
    gate(
        "g_timeout",
        &["--timeout", "1s", "--on-reject", "session \"Ask again\""],
    );
    p.cmd()
        .args(["approve", &run.id, "g_approved", "--yes", "--as", "raymond"])
        .assert()
        .success();
    p.cmd()
        .args([
            "reject",
            &run.id,
            "g_rejected",
            "--yes",
            "--as",
            "raymond",
            "--reason",
            "no",
        ])
        .assert()
        .success();
    advance_clock(p.root(), 2);
    run.cmd()
        .args([
            "finish",
            "--status",
            "interrupted",
            "--error",
            "VM context full",
        ])
        .assert()
        .success();

    let a = run
        .cmd()
        .env("PROSE_HOME", &home)
        .args(["--json", "resume", "--all"])
        .assert()
        .success();
    let v = json_of(&a);
    // run
    assert_eq!(v["run"]["id"], run.id);
    assert_eq!(v["run"]["status"], "running");
    assert_eq!(v["run"]["previous_status"], "interrupted");
    assert_eq!(v["run"]["error_message"], "VM context full");
    assert_eq!(run.view().run_row().0, "running");
    // position: the block started last and never completed; the last event is the newest row
    assert_eq!(v["position"]["current"]["id"], block);
    assert_eq!(v["position"]["current"]["statement_text"], "do process");
    let last_id = run.view().last_execution_id();
    assert_eq!(v["position"]["last_event"]["id"], last_id);
    // per statement index, the latest status
    let st = |i: i64| {
        v["statements"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["statement_index"] == i)
            .unwrap()
            .clone()
    };
    assert_eq!(st(1)["status"], "completed");
    assert_eq!(st(5)["status"], "completed");
    assert_eq!(st(5)["statement_text"], "parallel:b");
    assert_eq!(st(10)["status"], "iteration");
    assert_eq!(st(15)["status"], "retry");
    assert_eq!(st(20)["status"], "executing");
    // parallel
    let pb = &v["parallel"][0];
    assert_eq!(pb["parallel_id"], "p1");
    assert_eq!(pb["statement_index"], 5);
    assert_eq!(pb["branches"], serde_json::json!(["a", "b", "c"]));
    assert_eq!(pb["completed"], serde_json::json!(["a", "b"]));
    assert_eq!(pb["outstanding"], serde_json::json!(["c"]));
    assert_eq!(pb["joined"], false);
    let _ = par;
    // loop
    let l = &v["loops"][0];
    assert_eq!(
        (
            l["loop_id"].as_str(),
            l["iteration"].as_i64(),
            l["max"].as_i64()
        ),
        (Some("l1"), Some(2), Some(5))
    );
    assert_eq!(l["exited"], false);
    assert_eq!(l["reason"], serde_json::Value::Null);
    // retry in flight
    let r = &v["retries"][0];
    assert_eq!(v["retries"].as_array().unwrap().len(), 1);
    assert_eq!(r["id"], retry);
    assert_eq!(r["statement_index"], 15);
    assert_eq!(
        (r["attempt"].as_i64(), r["max"].as_i64()),
        (Some(2), Some(3))
    );
    assert_eq!(r["last_error"], "Connection timeout after 30s");
    // bindings
    let b = |name: &str| {
        v["bindings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(b("research")["scope"], "root");
    assert_eq!(b("research")["kind"], "let");
    assert_eq!(
        b("research")["bytes"],
        "AI safety research\nwith 15 citations".len()
    );
    assert_eq!(b("research")["first_line"], "AI safety research …");
    assert_eq!(b("result")["scope"], "execution");
    assert_eq!(b("result")["execution_id"], block);
    assert!(is_attachment_of(
        b("report")["attachment_path"].as_str().unwrap(),
        "report",
        Some(block)
    ));
    assert_eq!(
        b("report")["bytes"],
        "a long report that goes to an attachment".len()
    );
    // agents, of the run and of the user scope
    let ag = |name: &str| {
        v["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(ag("captain")["scope"], "execution");
    assert_eq!(ag("captain")["segments"], 1);
    assert_eq!(ag("captain")["memory_bytes"], 19);
    assert_eq!(ag("mentor")["scope"], "user");
    // gates and the next step for each
    let g = |id: &str| {
        v["gates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(
        (
            g("g_pending")["status"].as_str(),
            g("g_pending")["next_step"]["action"].as_str()
        ),
        (Some("pending"), Some("wait"))
    );
    assert_eq!(g("g_approved")["next_step"]["action"], "continue");
    assert_eq!(g("g_rejected")["status"], "rejected");
    assert_eq!(
        g("g_rejected")["next_step"],
        serde_json::json!({"action": "retry", "argument": "draft"})
    );
    assert_eq!(
        g("g_timeout")["status"],
        "timeout",
        "timed out by the resume itself, fail-closed"
    );
    assert_eq!(
        g("g_timeout")["next_step"],
        serde_json::json!({"action": "session", "argument": "\"Ask again\""})
    );
    // resumed events: every gate pending or decided since the last resume
    let mut logged: Vec<String> = v["gates_logged_resumed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    logged.sort();
    assert_eq!(
        logged,
        ["g_approved", "g_pending", "g_rejected", "g_timeout"]
    );
    assert_eq!(
        count_rows(&p, &run, "gate_audit_log", "event_type = 'resumed'"),
        4
    );
    // a second resume logs only what is still pending
    let a = run.cmd().args(["--json", "resume"]).assert().success();
    assert_eq!(
        json_of(&a)["gates_logged_resumed"],
        serde_json::json!(["g_pending"])
    );
    p.cmd().args(["gates", "verify"]).assert().success();
    // and the human narration
    let a = run.cmd().args(["resume", "--all"]).assert().success();
    let text = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    for want in [
        "∥ p1 [a b c] 2/3 waiting on [c]",
        "loop l1:2/5 running (iteration 3)",
        "1→ let research = session \"Research\" ✓",
        "gate g_rejected rejected (instance 1) → retry draft",
        "gate g_pending pending (instance 1) → wait gates wait g_pending --instance 1",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
}

/// `runs --since`: a time or a duration back from now keeps the runs started since; anything
/// else is exit 2.
fn runs_since_keeps_the_recent_ones(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let old = p.init();
    let new = p.init();
    old.view().raw(
        "UPDATE run SET started_at = '2020-01-01 00:00:00'",
        "UPDATE openprose.run SET started_at = '2020-01-01 00:00:00+00' WHERE id = '$RUN'",
    );
    let ids = |args: &[&str]| -> Vec<String> {
        let a = p
            .cmd()
            .args(["--json", "runs"])
            .args(args)
            .assert()
            .success();
        stdout_json(&a)
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&[]).len(), 2);
    assert_eq!(ids(&["--since", "7d"]), std::slice::from_ref(&new.id));
    assert_eq!(ids(&["--since", "2019-12-31"]).len(), 2);
    assert_eq!(
        ids(&["--since", "2021-01-01T00:00:00Z"]),
        std::slice::from_ref(&new.id)
    );
    let a = p
        .cmd()
        .args(["runs", "--since", "last tuesday"])
        .assert()
        .failure();
    assert_eq!(code(&a), 2, "{}", stderr(&a));
}

on_both!(runs_since_keeps_the_recent_ones);
