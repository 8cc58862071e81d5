//! What helper-38 (the merged binary, no tests seen) found, closed. A pending gate's answer
//! binding forged by raw SQL was printed by `get` (exit 0) and waited on as pending; a version
//! passed off as an approver's edit where the sealed log says nothing of its scope was listed
//! by `history` and missed by `gates verify`; a pending quorum gate whose sealed vote's edit was
//! rewritten was waited on as pending and decided on. Every reader and every decision now
//! checks what a gate's openings name as `gates verify` does.

use crate::common::*;
use crate::serve::add;

on_both!(
    a_forged_answer_before_any_decision_is_never_read,
    a_claimed_edit_in_a_scope_the_log_says_nothing_of_is_found,
    a_pending_gate_whose_vote_edit_was_rewritten_is_neither_waited_on_nor_decided,
);

/// A schema'd gate answering into `ans`, pending; `ans` inserted by raw SQL as if its decision
/// wrote it: `get`, `resume` and `gates wait` refuse it (9), `gates verify` finds it, and no
/// one approves on it (9, nothing written).
fn a_forged_answer_before_any_decision_is_never_read(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "G", "--prompt", "P"])
        .args(["--response-schema", r#"{"type":"string"}"#])
        .args(["--response-binding", "ans"])
        .assert()
        .success();
    run.view().raw(
        "INSERT INTO bindings (name, execution_id, kind, value, source_statement)
         VALUES ('ans', NULL, 'let', '\"FORGED\"', 'approve G:')",
        "INSERT INTO openprose.bindings (run_id, name, execution_id, kind, value, source_statement)
         VALUES ('$RUN', 'ans', NULL, 'let', '\"FORGED\"', 'approve G:')",
    );
    for args in [
        vec!["get", "ans"],
        vec!["resume"],
        vec!["gates", "wait", "G", "--timeout", "0"],
        vec!["gates", "verify"],
    ] {
        let a = run.cmd().args(&args).assert().failure();
        assert_eq!(code(&a), 9, "{args:?}: {}", stderr(&a));
        let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
        assert!(!out.contains("FORGED"), "{args:?}: {out}");
    }
    let before = run.snapshot();
    let a = run
        .cmd()
        .args([
            "approve",
            "G",
            "--as",
            "alice",
            "-y",
            "--response",
            "\"yes\"",
        ])
        .assert()
        .failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    assert_eq!(run.snapshot(), before, "a refused approval wrote something");
}

/// A gate about `doc`, pending: the program's version 2 of `doc` relabelled as G's decision's
/// (its statement `approve G:`, its writer alice), in the root, which the sealed log says
/// nothing of yet; and, after G is approved with an edit, a version claiming G's edit inserted
/// in a frame the log says nothing of. `history`, `gates verify` and `doctor` find both.
fn a_claimed_edit_in_a_scope_the_log_says_nothing_of_is_found(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("doc", "v1", None);
    run.cmd()
        .args(["gates", "create", "G", "--prompt", "P", "--inputs", "doc"])
        .assert()
        .success();
    run.bind("doc", "v2", None);
    run.bind("doc", "v3", None);
    run.cmd().args(["gates", "verify"]).assert().success();
    let relabel = |n: i64| {
        run.view().raw(
            &format!(
                "UPDATE binding_history SET principal = 'alice', source_statement = 'approve G:'
                 WHERE name = 'doc' AND n = {n}"
            ),
            &format!(
                "ALTER TABLE openprose.binding_history DISABLE TRIGGER USER;
                 UPDATE openprose.binding_history SET principal = 'alice', source_statement = 'approve G:'
                  WHERE run_id = '$RUN' AND name = 'doc' AND n = {n};
                 ALTER TABLE openprose.binding_history ENABLE TRIGGER USER;"
            ),
        )
    };
    let snap = p.snapshot();
    relabel(2);
    let refused = |args: &[&str]| {
        let a = run.cmd().args(args).assert().failure();
        assert_eq!(code(&a), 9, "{args:?}: {}", stderr(&a));
    };
    refused(&["history", "doc"]);
    refused(&["gates", "verify"]);
    let a = run.cmd().args(["doctor"]).assert().failure();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(out.contains("tampered"), "{out}");
    p.restore(&snap);
    run.cmd().args(["gates", "verify"]).assert().success();
    // Decided, with its edit in the root; a claim of it put in a frame.
    run.cmd()
        .args([
            "approve",
            "G",
            "--as",
            "alice",
            "-y",
            "--edit",
            "doc=edited",
        ])
        .assert()
        .success();
    let frame = run
        .cmd()
        .args(["exec-append", "--index", "1", "--text", "do f()"])
        .args(["--construct", "invoke", "--status", "executing", "--json"])
        .assert()
        .success();
    let frame = stdout_json(&frame)["id"].as_i64().unwrap();
    run.bind("doc", "frame's own", Some(frame));
    run.view().raw(
        &format!(
            "UPDATE binding_history SET principal = 'alice', source_statement = 'approve G:'
             WHERE name = 'doc' AND execution_id = {frame}"
        ),
        &format!(
            "ALTER TABLE openprose.binding_history DISABLE TRIGGER USER;
             UPDATE openprose.binding_history SET principal = 'alice', source_statement = 'approve G:'
              WHERE run_id = '$RUN' AND name = 'doc' AND execution_id = {frame};
             ALTER TABLE openprose.binding_history ENABLE TRIGGER USER;"
        ),
    );
    refused(&["history", "doc", "--execution-id", &frame.to_string()]);
    refused(&["gates", "verify"]);
}

/// A gate of two approvals about `doc`: alice votes with an edit, which her vote seals (its
/// digest); then `doc` and its history's version 2 are rewritten to other bytes of the same
/// size. `get` is 9, `gates wait` is 9 at once (not pending), and bob's approval is refused
/// (9) with nothing written.
fn a_pending_gate_whose_vote_edit_was_rewritten_is_neither_waited_on_nor_decided(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let (alice, bob) = (add(&p, "alice"), add(&p, "bob"));
    run.bind("doc", "the draft", None);
    run.cmd()
        .args(["gates", "create", "G", "--prompt", "P", "--inputs", "doc"])
        .args(["--allow", "alice,bob", "--require", "2"])
        .assert()
        .success();
    run.cmd()
        .env("PROSE_TOKEN", &alice)
        .args(["approve", "G", "-y", "--edit", "doc=alice's draft"])
        .assert()
        .success();
    let a = run
        .cmd()
        .args(["gates", "wait", "G", "--timeout", "0"])
        .assert()
        .failure();
    assert_eq!(code(&a), 7, "{}", stderr(&a));
    run.view().raw(
        "DROP TRIGGER bindings_version_update;
         UPDATE bindings SET value = 'alice''s DRAFT' WHERE name = 'doc';
         UPDATE binding_history SET value = 'alice''s DRAFT' WHERE name = 'doc' AND n = 2;",
        "ALTER TABLE openprose.bindings DISABLE TRIGGER USER;
         ALTER TABLE openprose.binding_history DISABLE TRIGGER USER;
         UPDATE openprose.bindings SET value = 'alice''s DRAFT' WHERE run_id = '$RUN' AND name = 'doc';
         UPDATE openprose.binding_history SET value = 'alice''s DRAFT'
          WHERE run_id = '$RUN' AND name = 'doc' AND n = 2;
         ALTER TABLE openprose.bindings ENABLE TRIGGER USER;
         ALTER TABLE openprose.binding_history ENABLE TRIGGER USER;",
    );
    for args in [
        vec!["get", "doc"],
        vec!["gates", "wait", "G", "--timeout", "0"],
    ] {
        let a = run.cmd().args(&args).assert().failure();
        assert_eq!(code(&a), 9, "{args:?}: {}", stderr(&a));
    }
    let before = run.snapshot();
    let a = run
        .cmd()
        .env("PROSE_TOKEN", &bob)
        .args(["approve", "G", "-y"])
        .assert()
        .failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    assert_eq!(run.snapshot(), before, "a refused approval wrote something");
}
