//! What helper-53 (an attack on the merged binaries, no tests seen: PostgreSQL, moving runs,
//! the page, MCP, the principals book) found, closed.
//!
//! - f02: `fork` carried the answer and the edit of a decision sealed on another machine (a
//!   copy imported without `--vouch`) into a fork where they read as genuine, the approver
//!   named as their writer.
//! - f04: a gate and its decision written with the spec's own SQL, and a binding claiming that
//!   decision: `get` refused it (9), `history` listed it by the approver, and `fork` carried it.
//! - f03: a binding rewritten to claim a sealed gate's decision: `get` refused it, `gates
//!   verify`, `doctor` and `export` passed it.
//! - f01 (unit-tested in `src/response.rs`): choices that read alike on the page (`"true"` and
//!   `true`).

use crate::common::*;

on_both!(
    a_decision_sealed_elsewhere_is_not_forked_as_plain_values,
    a_claim_of_an_unsealed_decision_is_refused_by_history_and_fork,
    a_forged_claim_is_found_by_verify_doctor_and_export,
);

/// A run whose gate was answered and its input edited on another machine (another audit key),
/// imported here without `--vouch`: a fork at or after the decision is refused (10), and makes
/// no run; a fork before it is made.
fn a_decision_sealed_elsewhere_is_not_forked_as_plain_values(b: Backend) {
    let Some(there) = Project::on(b) else { return };
    let run = there.init();
    run.bind("draft", "the draft", None);
    let before = run.exec(1, "session \"d\"", "completed", None);
    run.cmd()
        .args([
            "gates", "create", "g1", "--index", "2", "--prompt", "OK?", "--inputs", "draft",
        ])
        .args([
            "--response-schema",
            r#"{"type":"object","properties":{"n":{"type":"integer"}}}"#,
        ])
        .args(["--response-binding", "ans"])
        .assert()
        .success();
    run.cmd()
        .args([
            "approve",
            "g1",
            "-y",
            "--as",
            "alice",
            "--response",
            r#"{"n":666}"#,
        ])
        .args(["--edit", "draft=FORGED EDIT"])
        .assert()
        .success();
    let after = run.exec(2, "approve g1:", "completed", None);
    let out = there.root().join("copy");
    run.cmd()
        .args(["export", "-o"])
        .arg(&out)
        .assert()
        .success();

    let Some(here) = Project::on(b) else { return };
    here.cmd().arg("import").arg(&out).assert().success();
    let copied = here.run(&run.id);
    let a = copied.cmd().args(["get", "ans"]).assert().failure();
    assert_eq!(code(&a), 10, "{}", stderr(&a));
    for at in [after, after - 1] {
        let a = copied
            .cmd()
            .args(["fork", "--at", &at.to_string(), "--run-id", "laundered"])
            .assert()
            .failure();
        assert_eq!(code(&a), 10, "at {at}: {}", stderr(&a));
        assert!(
            stderr(&a).contains("whose log this machine does not attest"),
            "{}",
            stderr(&a)
        );
        assert!(!here.root().join(".prose/runs/laundered").exists());
    }
    copied
        .cmd()
        .args(["fork", "--at", &before.to_string(), "--run-id", "early"])
        .assert()
        .success();
    let early = here.run("early");
    assert_eq!(early.get("draft", None), b"the draft");
}

/// A gate written the spec's way (unsealed `created` and `approved` rows) and a binding that
/// claims its decision, its history naming the approver: `history` refuses it as `get` does
/// (9), and no fork carries it (10).
fn a_claim_of_an_unsealed_decision_is_refused_by_history_and_fork(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let at = run.exec(1, "let z = 1", "completed", None);
    let created = r#"{"instance":1,"response_binding":"ans","response_schema":{"type":"integer"},"allow":["user"]}"#;
    let approved = r#"{"response":666,"instance":1}"#;
    run.view().raw(
        &format!(
            "INSERT INTO gates (id, execution_id, prompt, allow, status, resolved_by)
               VALUES ('g2', {at}, 'ok?', '[\"user\"]', 'approved', 'alice');
             INSERT INTO gate_audit_log (run_id, gate_id, event_type, principal, timestamp, metadata)
               VALUES ('{id}', 'g2', 'created', 'system', datetime('now'), '{created}');
             INSERT INTO gate_audit_log (run_id, gate_id, event_type, principal, timestamp, metadata)
               VALUES ('{id}', 'g2', 'approved', 'alice', datetime('now'), '{approved}');
             INSERT INTO bindings (name, execution_id, kind, value, source_statement)
               VALUES ('ans', NULL, 'let', '666', 'approve g2:');
             UPDATE binding_history SET principal = 'alice' WHERE name = 'ans';",
            id = run.id
        ),
        &format!(
            "INSERT INTO openprose.gates (id, run_id, execution_id, prompt, allow, status, resolved_by)
               VALUES ('g2', '$RUN', {at}, 'ok?', '[\"user\"]', 'approved', 'alice');
             INSERT INTO openprose.gate_audit_log (run_id, gate_id, event_type, principal, timestamp, metadata)
               VALUES ('$RUN', 'g2', 'created', 'system', now(), '{created}');
             INSERT INTO openprose.gate_audit_log (run_id, gate_id, event_type, principal, timestamp, metadata)
               VALUES ('$RUN', 'g2', 'approved', 'alice', now(), '{approved}');
             INSERT INTO openprose.bindings (run_id, name, execution_id, kind, value, source_statement)
               VALUES ('$RUN', 'ans', NULL, 'let', '666', 'approve g2:');
             UPDATE openprose.binding_history SET principal = 'alice' WHERE run_id = '$RUN' AND name = 'ans';"
        ),
    );
    for args in [
        &["get", "ans"][..],
        &["history", "ans"],
        &["--json", "history", "ans"],
    ] {
        let a = run.cmd().args(args).assert().failure();
        assert_eq!(code(&a), 9, "{args:?}: {}", stderr(&a));
    }
    let a = run
        .cmd()
        .args(["fork", "--at", &at.to_string(), "--run-id", "laundered"])
        .assert()
        .failure();
    assert!(matches!(code(&a), 9 | 10), "{}", stderr(&a));
    assert!(!p.root().join(".prose/runs/laundered").exists());
}

/// A plain binding rewritten (row and history) to say a sealed gate's decision wrote it, where
/// no opening of that gate names it: `gates verify` (9), `doctor` (a tampered binding) and
/// `export` (9, nothing written) find it, as `get` and `resume` do.
fn a_forged_claim_is_found_by_verify_doctor_and_export(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "g1", "--prompt", "ok?"])
        .assert()
        .success();
    run.bind("ans", r#"{"n":1}"#, None);
    run.view().raw(
        "UPDATE binding_history SET principal = 'alice', source_statement = 'approve g1:' WHERE name = 'ans';
         UPDATE bindings SET source_statement = 'approve g1:' WHERE name = 'ans';",
        "UPDATE openprose.binding_history SET principal = 'alice', source_statement = 'approve g1:'
           WHERE run_id = '$RUN' AND name = 'ans';
         UPDATE openprose.bindings SET source_statement = 'approve g1:' WHERE run_id = '$RUN' AND name = 'ans';",
    );
    for args in [&["get", "ans"][..], &["resume"], &["gates", "verify"]] {
        let a = run.cmd().args(args).assert().failure();
        assert_eq!(code(&a), 9, "{args:?}: {}", stderr(&a));
    }
    let a = run.cmd().args(["doctor"]).assert().failure();
    assert!(
        stdout_text(&a).contains("binding ans"),
        "{}",
        stdout_text(&a)
    );
    let out = p.root().join("copy");
    let a = run
        .cmd()
        .args(["export", "-o"])
        .arg(&out)
        .assert()
        .failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    assert!(!out.exists());
}
