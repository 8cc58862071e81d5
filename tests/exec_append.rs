use crate::common::*;

on_both!(
    a_construct_ends_after_everything_inside_it,
    a_gates_throw_is_what_its_catch_binds,
    every_status_of_the_append_only_vocabulary_is_accepted,
    bad_records_are_refused_and_nothing_is_written,
);

struct Record {
    index: i64,
    text: String,
    status: String,
    started_at: Option<String>,
    completed_at: Option<String>,
    parent_id: Option<i64>,
    metadata: Option<String>,
    error: Option<String>,
}

/// SQLite only: it reads every column back with raw SQLite SQL (the contract suite covers
/// the same on PostgreSQL).
#[test]
fn appends_rows_and_never_updates() {
    let p = Project::new();
    let run = p.init();
    let a = run
        .cmd()
        .args([
            "exec-append",
            "--index",
            "5",
            "--text",
            "parallel:",
            "--status",
            "started",
            "--metadata",
            r#"{"parallel_id": "p1", "branches": ["a", "b", "c"]}"#,
        ])
        .assert()
        .success();
    let first: i64 = String::from_utf8(a.get_output().stdout.clone())
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let a = run
        .cmd()
        .args([
            "--json",
            "exec-append",
            "--index",
            "5",
            "--text",
            "parallel:a",
            "--status",
            "completed",
            "--parent",
            &first.to_string(),
            "--metadata",
            r#"{"parallel_id": "p1", "branch": "a"}"#,
        ])
        .assert()
        .success();
    let v = stdout_json(&a);
    let second = v["id"].as_i64().unwrap();
    assert_eq!(second, first + 1);
    assert_eq!(v["status"], "completed");
    assert_eq!(v["parent_id"], first);

    run.cmd()
        .args([
            "exec-append",
            "--index",
            "15",
            "--text",
            "session \"Risky\"",
            "--status",
            "failed",
        ])
        .args(["--error", "Connection timeout after 30s"])
        .assert()
        .success();

    let c = run.conn();
    let rows: Vec<Record> = c
        .prepare(
            "SELECT id, statement_index, statement_text, status, started_at, completed_at,
                    parent_id, metadata, error_message FROM execution ORDER BY id",
        )
        .unwrap()
        .query_map([], |r| {
            Ok(Record {
                index: r.get(1)?,
                text: r.get(2)?,
                status: r.get(3)?,
                started_at: r.get(4)?,
                completed_at: r.get(5)?,
                parent_id: r.get(6)?,
                metadata: r.get(7)?,
                error: r.get(8)?,
            })
        })
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(rows.len(), 3);
    assert_eq!(
        (
            rows[0].index,
            rows[0].text.as_str(),
            rows[0].status.as_str()
        ),
        (5, "parallel:", "started")
    );
    // a beginning carries started_at, an ending completed_at
    assert!(rows[0].started_at.is_some() && rows[0].completed_at.is_none());
    assert!(rows[1].started_at.is_none() && rows[1].completed_at.is_some());
    assert_eq!(rows[1].parent_id, Some(first));
    assert_eq!(
        rows[1].metadata.as_deref(),
        Some(r#"{"parallel_id": "p1", "branch": "a"}"#)
    );
    assert_eq!(
        rows[2].error.as_deref(),
        Some("Connection timeout after 30s")
    );
    // timestamps have the exact form of datetime('now')
    let ts = rows[0].started_at.as_deref().unwrap();
    let same: bool = c
        .query_row("SELECT datetime(?1) = ?1", [ts], |r| r.get(0))
        .unwrap();
    assert!(same, "{ts}");
}

fn every_status_of_the_append_only_vocabulary_is_accepted(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let statuses = [
        "pending",
        "executing",
        "started",
        "completed",
        "failed",
        "skipped",
        "iteration",
        "joined",
        "exited",
        "retry",
    ];
    for s in statuses {
        run.exec(1, "x", s, None);
    }
    for s in statuses {
        assert_eq!(
            count_rows(&p, &run, "execution", &format!("status = '{s}'")),
            1,
            "{s}"
        );
    }
}

fn bad_records_are_refused_and_nothing_is_written(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.exec(1, "x", "executing", None);
    let before = run.snapshot();
    let cases: &[(&[&str], i32, &str)] = &[
        (&["--status", "running"], 2, "--status"),
        (
            &["--status", "completed", "--metadata", "[1, 2]"],
            2,
            "JSON object",
        ),
        (
            &["--status", "completed", "--metadata", "{broken"],
            2,
            "not JSON",
        ),
        (
            &["--status", "completed", "--metadata", "\"str\""],
            2,
            "JSON object",
        ),
        (
            &["--status", "completed", "--parent", "42"],
            3,
            "parent execution not found: 42",
        ),
        (&["--status", "completed", "--parent", "0"], 2, "--parent"),
        (&["--status", "completed", "--parent", "-1"], 2, "--parent"),
        (
            &["--status", "completed", "--parent", "99999999999999999999"],
            2,
            "--parent",
        ),
    ];
    for (extra, want, msg) in cases {
        let a = run
            .cmd()
            .args(["exec-append", "--index", "2", "--text", "y"])
            .args(*extra)
            .assert()
            .failure();
        assert_eq!(code(&a), *want, "{extra:?}");
        assert!(stderr(&a).contains(msg), "{extra:?}: {}", stderr(&a));
        assert_eq!(stderr(&a).lines().count(), 1, "{}", stderr(&a));
        assert_eq!(run.snapshot(), before);
    }
    for idx in ["-1", "x", "1e3", "99999999999999999999"] {
        let a = run
            .cmd()
            .args([
                "exec-append",
                "--index",
                idx,
                "--text",
                "y",
                "--status",
                "completed",
            ])
            .assert()
            .failure();
        assert_eq!(code(&a), 2, "{idx}");
    }
    let a = run
        .cmd()
        .args(["exec-append", "--text", "y", "--status", "completed"])
        .assert()
        .failure();
    assert_eq!(code(&a), 2);
    assert_eq!(run.snapshot(), before);
}

/// helper-48: a failure leaves the constructs between it and its `try:` ended, innermost
/// first. A `catch` started, or a construct ended, while a start inside is still open is
/// refused (exit 4, nothing written), naming what to end; an end given again with another
/// `--error` is refused, not dropped; and `resume`'s `caught` is the failure that says why,
/// not the end of a construct it left.
fn a_construct_ends_after_everything_inside_it(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let t = run.exec(1, "try:", "started", None);
    let (t_s, call) = (
        t.to_string(),
        run.exec(1, "do attempt()", "executing", Some(t)),
    );
    let inner = run.exec(1, "if **x**:", "started", Some(call));
    let failed = run
        .cmd()
        .args([
            "exec-append",
            "--index",
            "1",
            "--text",
            "throw \"boom\"",
            "--status",
            "failed",
        ])
        .args(["--error", "boom", "--parent", &inner.to_string()])
        .assert()
        .success();
    let failed: i64 = String::from_utf8_lossy(&failed.get_output().stdout)
        .trim()
        .parse()
        .unwrap();
    let catch = [
        "exec-append",
        "--index",
        "2",
        "--text",
        "catch as err:",
        "--status",
        "started",
        "--parent",
        &t_s,
        "--key",
        "catch-1",
    ];
    // resume names what the failure leaves, innermost first, before its catch.
    let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
    assert_eq!(
        doc["position"]["leaves"],
        serde_json::json!([inner, call]),
        "{doc}"
    );
    run.refuses(
        &catch,
        4,
        &format!("record {inner} (if **x**:) inside try record {t} is open"),
    );
    let end = |id: i64, extra: &[&str]| {
        let mut args = vec![
            "exec-append".to_string(),
            "--ends".into(),
            id.to_string(),
            "--status".into(),
            "failed".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let args = end(call, &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run.refuses(
        &args,
        4,
        &format!("record {call} cannot end while record {inner} (if **x**:) inside it is open"),
    );
    // Innermost first: the `if`, then the call; then the catch starts.
    for id in [inner, call] {
        let args = end(id, &[]);
        run.cmd().args(&args).assert().success();
    }
    // The same end again is its id; with another --error it is refused, not dropped.
    let args = end(call, &[]);
    run.cmd().args(&args).assert().success();
    let args = end(call, &["--error", "other"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run.refuses(
        &args,
        4,
        &format!("record {call} was already ended by record"),
    );
    let c = run.cmd().args(catch).assert().success();
    let c = String::from_utf8_lossy(&c.get_output().stdout)
        .trim()
        .to_string();
    // The failure caught is the throw, not the call's end that passed it on.
    let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
    assert_eq!(doc["position"]["caught"]["record"], failed, "{doc}");
    assert_eq!(doc["position"]["caught"]["error"], "boom", "{doc}");
    // The catch started again (after a crash) is its own start, not the try's body.
    let again = run.cmd().args(catch).assert().success();
    assert_eq!(
        String::from_utf8_lossy(&again.get_output().stdout).trim(),
        c
    );
    run.cmd()
        .args(["exec-append", "--ends", &c, "--status", "completed"])
        .assert()
        .success();
    run.cmd()
        .args(["exec-append", "--ends", &t_s, "--status", "completed"])
        .assert()
        .success();
}

/// helper-48 f04: a gate rejected under `on_reject: throw "msg"` raises msg: `resume`'s
/// `caught` (what `catch as err` binds) is the message its sealed opening throws, not the
/// person's reason (the record's and the gate's), and not the end of the call it left.
fn a_gates_throw_is_what_its_catch_binds(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let t = run.exec(2, "try:", "started", None);
    let call = run.exec(1, "do attempt()", "executing", Some(t));
    let (t_s, call_s) = (t.to_string(), call.to_string());
    run.cmd()
        .args([
            "gates",
            "create",
            "deploy",
            "--index",
            "1",
            "--execution-id",
            &call_s,
        ])
        .args(["--prompt", "Deploy?", "--allow", "carol"])
        .args(["--on-reject", r#"throw "Deploy \"now\" rejected""#])
        .assert()
        .success();
    run.cmd()
        .args([
            "reject",
            "deploy",
            "--as",
            "carol",
            "-y",
            "--reason",
            "Too risky",
        ])
        .assert()
        .success();
    run.cmd()
        .args([
            "exec-append",
            "--index",
            "1",
            "--text",
            "approve deploy:",
            "--status",
            "failed",
        ])
        .args(["--error", "Too risky", "--parent", &call_s])
        .assert()
        .success();
    run.cmd()
        .args(["exec-append", "--ends", &call_s, "--status", "failed"])
        .assert()
        .success();
    run.cmd()
        .args([
            "exec-append",
            "--index",
            "2",
            "--text",
            "catch as err:",
            "--status",
            "started",
        ])
        .args(["--parent", &t_s])
        .assert()
        .success();
    let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
    assert_eq!(
        doc["position"]["caught"]["error"], r#"Deploy "now" rejected"#,
        "{doc}"
    );
}
