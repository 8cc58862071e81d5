//! What helper-47 (an attack on the merged binaries, no tests seen) and helper-48 (a literal VM
//! on programs of its own) found, closed.
//!
//! helper-47: `resume` told the VM a pending gate was approved when an `approve h:` record's
//! metadata named another gate; `gates show` listed an `approved` row only the spec's own SQL
//! wrote as the gate's history; an answer binding's time and statement rewritten (its trigger
//! off) were shown by `get` as the decision's.
//!
//! helper-49: the same, with the record's text rewritten too, and with an approval only the
//! spec's SQL wrote; `exec-append` logged `approve G:` failed while G was approved, which
//! `resume` then gave as the error caught.
//!
//! helper-50: `resume` told the VM to log a rejection already logged (on the VM's own failed
//! record); a failure a `finally` ran on was lost after the finally ended (resume said to go
//! on, and the try ended `completed`).
//!
//! helper-48: after a rejection under `retry`, with the step run again and the VM crashed
//! before `--reopen`, `resume` said both "continue after the step" and "retry the step".

use crate::common::*;

on_both!(
    resume_reads_the_gate_its_statement_names,
    gates_show_marks_an_event_its_seal_does_not_vouch_for,
    an_answers_row_is_its_version_whole,
    resume_says_a_retried_step_ran,
    a_gates_record_says_how_its_sealed_opening_stands,
    an_approve_statement_fails_only_on_a_rejection,
    a_failure_a_finally_ran_on_goes_on,
    diff_marks_a_decision_nothing_attests,
);

/// A pending gate is never said to be decided because a record's metadata (a row anyone may
/// rewrite) names a decided gate: the statement names the gate.
fn resume_reads_the_gate_its_statement_names(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    for g in ["g", "h"] {
        run.cmd()
            .args(["gates", "create", g, "--prompt", "Go?"])
            .assert()
            .success();
    }
    run.cmd()
        .args(["approve", "g", "-y", "--as", "bob"])
        .assert()
        .success();
    run.view().raw(
        r#"UPDATE execution SET metadata = '{"gate_id":"g"}' WHERE statement_text = 'approve h:'"#,
        r#"UPDATE openprose.execution SET metadata = '{"gate_id":"g"}'
            WHERE run_id = '$RUN' AND statement_text = 'approve h:'"#,
    );
    let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
    let after = &doc["position"]["after"];
    assert_eq!(after["statement_text"], "approve h:", "{doc}");
    assert_eq!(after["gate_now"]["status"], "pending", "{doc}");
}

/// An `approved` row the spec's own SQL inserted for a pending gate is listed in `gates show`
/// (text, JSON, and so MCP's) marked as what its seal says, never as the gate's own event; the
/// gate stays pending, and the sealed events carry no mark.
fn gates_show_marks_an_event_its_seal_does_not_vouch_for(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "h", "--prompt", "Deploy?"])
        .assert()
        .success();
    let insert = |table: &str| {
        format!(
            "INSERT INTO {table} (gate_id, run_id, event_type, principal, comment, timestamp, metadata)
             VALUES ('h', '{}', 'approved', 'ceo', 'LGTM', '2026-01-01 09:00:00', '{{\"instance\":1}}')",
            run.id
        )
    };
    run.view().raw(
        &insert("gate_audit_log"),
        &insert("openprose.gate_audit_log"),
    );
    let a = run.cmd().args(["gates", "show", "h"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(out.contains("Status: pending"), "{out}");
    let forged = out.lines().find(|l| l.contains("LGTM")).unwrap();
    assert!(forged.ends_with("UNATTESTED"), "{out}");
    let doc = stdout_json(
        &run.cmd()
            .args(["--json", "gates", "show", "h"])
            .assert()
            .success(),
    );
    for e in doc["history"].as_array().unwrap() {
        let forged = e["comment"] == "LGTM";
        assert_eq!(e.get("sealed").is_some(), forged, "{e}");
        if forged {
            assert_eq!(e["sealed"], "unattested", "{e}");
        }
    }
}

/// A column of an answer's row rewritten with its table's triggers off (so that no version
/// records the change): each field `get` shows of it is its version's, or the read is refused
/// (exit 9), whichever column it was.
fn an_answers_row_is_its_version_whole(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "How many?"])
        .args(["--response-schema", r#"{"type":"integer"}"#])
        .args(["--response-binding", "ans"])
        .assert()
        .success();
    run.cmd()
        .args(["approve", "g", "-y", "--as", "bob", "--response", "7"])
        .assert()
        .success();
    let shown = stdout_json(&run.cmd().args(["--json", "get", "ans"]).assert().success());
    // Every column of the row `get --json` shows that its version records.
    for (column, forged) in [
        ("updated_at", "'2020-01-01 00:00:00'"),
        ("source_statement", "'approve h:'"),
        ("source_statement", "NULL"),
        ("kind", "'const'"),
        ("value", "'8'"),
    ] {
        let set = format!("UPDATE bindings SET {column} = {forged} WHERE name = 'ans'");
        let trigger: Option<String> = match &run.pg_url {
            Some(_) => None,
            None => Some(
                run.conn()
                    .query_row(
                        "SELECT sql FROM sqlite_master WHERE name = 'bindings_version_update'",
                        [],
                        |r| r.get(0),
                    )
                    .unwrap(),
            ),
        };
        let quiet = |set: &str| {
            run.view().raw(
                &format!(
                    "DROP TRIGGER bindings_version_update; {set}; {};",
                    trigger.clone().unwrap_or_default()
                ),
                &format!(
                    "ALTER TABLE openprose.bindings DISABLE TRIGGER USER;
                     {} AND run_id = '$RUN';
                     ALTER TABLE openprose.bindings ENABLE TRIGGER USER",
                    set.replace("UPDATE bindings", "UPDATE openprose.bindings")
                ),
            )
        };
        let before = run.snapshot();
        quiet(&set);
        let a = run.cmd().args(["get", "ans"]).assert().failure();
        assert_eq!(code(&a), 9, "{column} = {forged}: {}", stderr(&a));
        // Put back as it was, it reads again.
        let was = match &shown[column] {
            serde_json::Value::Null => "NULL".to_string(),
            v => format!("'{}'", v.as_str().map_or(v.to_string(), str::to_string)),
        };
        quiet(&format!(
            "UPDATE bindings SET {column} = {was} WHERE name = 'ans'"
        ));
        assert_eq!(run.snapshot(), before, "{column}: not put back");
        assert_eq!(run.get("ans", None), b"7");
    }
}

/// After a rejection under `retry draft`, the step run again and logged, and a crash before
/// `--reopen`: `resume` says the step ran since, and to open the gate again now. Before the
/// step ran, and once the gate is open again, it says no such thing.
fn resume_says_a_retried_step_ran(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let call = run.exec(1, "do polish(\"intro\")", "executing", None);
    let c = call.to_string();
    run.cmd()
        .args([
            "gates",
            "create",
            "ok",
            "--index",
            "2",
            "--execution-id",
            &c,
        ])
        .args([
            "--prompt",
            "Accept?",
            "--allow",
            "alice",
            "--on-reject",
            "retry draft",
        ])
        .assert()
        .success();
    run.cmd()
        .args(["reject", "ok", "--as", "alice", "-y", "--reason", "no"])
        .assert()
        .success();
    let failed = run.exec(2, "approve ok:", "failed", Some(call));
    let retried = |run: &Run| {
        let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
        doc["gates"][0]["retried_since"].clone()
    };
    assert!(
        retried(&run).is_null(),
        "nothing ran since the failure {failed}"
    );
    let step = run.exec(1, "let draft = session \"Draft\"", "completed", Some(call));
    assert_eq!(retried(&run), step);
    let out = run.cmd().arg("resume").assert().success();
    let out = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(
        out.contains(&format!(
            "the step ran again since (record {step}): open the gate again now (gates create ok --reopen)"
        )),
        "{out}"
    );
    run.cmd()
        .args([
            "gates",
            "create",
            "ok",
            "--reopen",
            "--index",
            "2",
            "--execution-id",
            &c,
        ])
        .args([
            "--prompt",
            "Accept?",
            "--allow",
            "alice",
            "--on-reject",
            "retry draft",
        ])
        .assert()
        .success();
    assert!(retried(&run).is_null());
}

/// `gate_now` is said of the record a gate's sealed opening appended, as that gate stands by
/// its sealed log: not of another gate its rewritten text and metadata name; not as decided
/// by a decision nothing attests (its next step is then stop, and the record says so); and
/// never on the VM's own record of the statement, which is logged already.
fn a_gates_record_says_how_its_sealed_opening_stands(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    for g in ["g1", "g2"] {
        run.cmd()
            .args(["gates", "create", g, "--prompt", "Go?", "--index", "1"])
            .assert()
            .success();
    }
    run.cmd()
        .args(["approve", "g1", "-y", "--as", "bob"])
        .assert()
        .success();
    run.view().raw(
        r#"UPDATE execution SET statement_text = 'approve g1:', metadata = '{"gate_id":"g1"}'
            WHERE statement_text = 'approve g2:'"#,
        r#"UPDATE openprose.execution SET statement_text = 'approve g1:',
                  metadata = '{"gate_id":"g1"}'
            WHERE run_id = '$RUN' AND statement_text = 'approve g2:'"#,
    );
    let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
    assert_eq!(
        doc["position"]["after"]["gate_now"]["status"], "pending",
        "{doc}"
    );

    // An approval only a row and an unsealed event make: the record says to stop.
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "h", "--prompt", "Go?", "--index", "1"])
        .assert()
        .success();
    let unsealed = |table: &str| {
        format!(
            "UPDATE {table}gates SET status = 'approved', resolved_by = 'bob' WHERE id = 'h';
             INSERT INTO {table}gate_audit_log (gate_id, run_id, event_type, principal, timestamp, metadata)
             VALUES ('h', '{}', 'approved', 'bob', '2026-01-01 09:00:00', '{{\"instance\":1}}')",
            run.id
        )
    };
    run.view().raw(&unsealed(""), &unsealed("openprose."));
    let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert());
    let now = &doc["position"]["after"]["gate_now"];
    assert!(now["stop"].is_string(), "{doc}");
    let out = run.cmd().arg("resume").assert();
    let out = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(out.contains("no decision stands"), "{out}");
    assert!(!out.contains("log it `completed`"), "{out}");

    // The VM's own failed record of a rejected gate says nothing more to log.
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "r", "--prompt", "Go?", "--index", "1"])
        .assert()
        .success();
    run.cmd()
        .args(["reject", "r", "-y", "--as", "bob", "--reason", "no"])
        .assert()
        .success();
    run.cmd()
        .args([
            "exec-append",
            "--index",
            "1",
            "--text",
            "approve r:",
            "--status",
            "failed",
        ])
        .args(["--error", "no"])
        .assert()
        .success();
    let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
    assert_eq!(doc["position"]["after"]["status"], "failed", "{doc}");
    assert!(doc["position"]["after"].get("gate_now").is_none(), "{doc}");
    // Its throw is that record (helper-50 f02): the gate says it was taken, not to throw again.
    let failed = doc["position"]["after"]["id"].clone();
    assert_eq!(doc["gates"][0]["logged_failed"], failed, "{doc}");
    let out = run.cmd().arg("resume").assert().success();
    let out = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(out.contains("taken there, not again"), "{out}");
}

/// `approve G:` is logged `failed` only after G's rejection or timeout: while G is pending
/// or approved it is refused (exit 4, nothing written), in every spelling.
fn an_approve_statement_fails_only_on_a_rejection(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    for g in ["p", "a", "r"] {
        run.cmd()
            .args(["gates", "create", g, "--prompt", "Go?", "--index", "1"])
            .assert()
            .success();
    }
    run.cmd()
        .args(["approve", "a", "-y", "--as", "bob"])
        .assert()
        .success();
    run.cmd()
        .args(["reject", "r", "-y", "--as", "bob", "--reason", "no"])
        .assert()
        .success();
    for text in [
        "approve p:",
        "Approve p: # x",
        "approve a:",
        "APPROVE a: (prompt)",
    ] {
        let args = [
            "exec-append",
            "--index",
            "1",
            "--text",
            text,
            "--status",
            "failed",
            "--error",
            "rejected by bob",
        ];
        run.refuses(
            &args,
            4,
            "is logged failed only after its gate's rejection or timeout",
        );
    }
    run.cmd()
        .args([
            "exec-append",
            "--index",
            "1",
            "--text",
            "approve r:",
            "--status",
            "failed",
        ])
        .args(["--error", "no"])
        .assert()
        .success();
}

/// A failure a `finally` ran on (its catch ended failed, or no catch) goes on from the try
/// once the finally ends: `resume` names what takes it, and the try cannot end `completed`
/// (exit 4, nothing written); ended `failed`, the failure goes on. A try whose catch handled
/// the failure, or whose failure a retry took, ends `completed`.
fn a_failure_a_finally_ran_on_goes_on(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let outer = run.exec(1, "try:", "started", None);
    let inner = run.exec(1, "try:", "started", Some(outer));
    run.cmd()
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
    let catch = run.exec(2, "catch as err:", "started", Some(inner));
    run.cmd()
        .args([
            "exec-append",
            "--index",
            "1",
            "--text",
            "throw",
            "--status",
            "failed",
        ])
        .args(["--error", "boom", "--parent", &catch.to_string()])
        .assert()
        .success();
    let end = |id: i64, status: &str| {
        run.cmd()
            .args(["exec-append", "--ends", &id.to_string(), "--status", status])
            .assert()
    };
    end(catch, "failed").success();
    let fin = run.exec(3, "finally:", "started", Some(inner));
    end(fin, "completed").success();
    let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
    let handler = doc["position"]["handler"].as_str().unwrap_or_default();
    assert!(
        handler.starts_with(&format!("the catch of try: (record {outer})")),
        "{doc}"
    );
    let i = inner.to_string();
    run.refuses(
        &["exec-append", "--ends", &i, "--status", "completed"],
        4,
        "is left by a failure",
    );
    end(inner, "failed").success();
    // A catch that handled it: the try ends completed.
    let outer_catch = run.exec(2, "catch as err:", "started", Some(outer));
    end(outer_catch, "completed").success();
    end(outer, "completed").success();
    // A failure a retry took, in a try with no catch: completed too.
    let t = run.exec(1, "try:", "started", None);
    run.cmd()
        .args([
            "exec-append",
            "--index",
            "1",
            "--text",
            "session \"Flaky\"",
            "--status",
            "failed",
        ])
        .args(["--error", "502", "--parent", &t.to_string()])
        .args(["--metadata", r#"{"attempt": 1, "max": 2}"#])
        .assert()
        .success();
    run.exec(1, "session \"Flaky\"", "completed", Some(t));
    end(t, "completed").success();
}

/// helper-49 f05: `diff` showed an approval only the spec's SQL wrote (a row and an unsealed
/// event) as a decision: it is marked, in text and JSON, as every listing of a run marks it.
fn diff_marks_a_decision_nothing_attests(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let a = p.init();
    let other = p.init();
    a.cmd()
        .args(["gates", "create", "g", "--prompt", "Go?"])
        .assert()
        .success();
    let unsealed = |table: &str| {
        format!(
            "UPDATE {table}gates SET status = 'approved', resolved_by = 'mallory' WHERE id = 'g';
             INSERT INTO {table}gate_audit_log (gate_id, run_id, event_type, principal, timestamp, metadata)
             VALUES ('g', '{}', 'approved', 'mallory', '2026-01-01 09:00:00', '{{\"instance\":1}}')",
            a.id
        )
    };
    a.view().raw(&unsealed(""), &unsealed("openprose."));
    let out = p.cmd().args(["diff", &a.id, &other.id]).assert().success();
    let out = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(out.contains("approved (UNATTESTED) by mallory"), "{out}");
    let doc = stdout_json(
        &p.cmd()
            .args(["--json", "diff", &a.id, &other.id])
            .assert()
            .success(),
    );
    assert_eq!(
        doc["gates"]["shown"][0]["a"]["integrity"], "unattested",
        "{doc}"
    );
}
