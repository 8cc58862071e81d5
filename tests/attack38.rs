//! What helper-38 (the merged binary, no tests seen) found, closed. A pending gate's answer
//! binding forged by raw SQL was printed by `get` (exit 0) and waited on as pending; a version
//! passed off as an approver's edit where the sealed log says nothing of its scope was listed
//! by `history` and missed by `gates verify`; a pending quorum gate whose sealed vote's edit was
//! rewritten was waited on as pending and decided on. Every reader and every decision now
//! checks what a gate's openings name as `gates verify` does. Then what helper-39 found: a
//! quorum vote's pinned version rewritten in place was decided on, an approver's erased edit
//! read back as the old value, a deleted answer passed `gates verify`, `resume` and `gates
//! wait`, `export` carried a run `gates verify` refuses; and two false alarms (a fork taken
//! during a quorum with a vote's edit, `doctor --fix` restating an approver's edit). Then what
//! helper-40 found: `diff` compared a gate row forged as approved, and a deleted answer, as
//! differences (exit 0); `resume` stated a tampered gate's status as its row claimed it.

use crate::common::*;
use crate::serve::add;

on_both!(
    a_forged_answer_before_any_decision_is_never_read,
    a_claimed_edit_in_a_scope_the_log_says_nothing_of_is_found,
    a_pending_gate_whose_vote_edit_was_rewritten_is_neither_waited_on_nor_decided,
    a_vote_s_pinned_version_rewritten_in_place_is_never_decided_on,
    an_erased_edit_is_not_read_back_as_the_old_value,
    a_deleted_answer_is_found_by_verify_resume_and_wait,
    a_version_under_a_step_rewritten_is_read_by_no_reader_of_the_past_nor_exported,
    a_fork_during_a_quorum_with_a_vote_s_edit_stands,
    doctor_fix_restating_an_approver_s_edit_raises_no_alarm,
    diff_compares_no_run_gates_verify_refuses,
    resume_states_a_tampered_gate_as_its_log_makes_it,
);

/// Raw SQL on the run: `sqlite` (triggers dropped where it says) or `postgres` with every
/// user trigger of `bindings` and `binding_history` disabled around it.
fn raw(run: &Run, sqlite: &str, postgres: &str) {
    run.view().raw(
        sqlite,
        &format!(
            "ALTER TABLE openprose.bindings DISABLE TRIGGER USER;
             ALTER TABLE openprose.binding_history DISABLE TRIGGER USER;
             {postgres}
             ALTER TABLE openprose.bindings ENABLE TRIGGER USER;
             ALTER TABLE openprose.binding_history ENABLE TRIGGER USER;"
        ),
    );
}

fn refused(run: &Run, args: &[&str]) {
    let a = run.cmd().args(args).assert().failure();
    assert_eq!(code(&a), 9, "{args:?}: {}", stderr(&a));
}

/// A gate of two approvals about `cfg`: alice votes (no edit), sealing version 1's digest;
/// version 1 is then rewritten in place, row and history, to other bytes of the same size.
/// `gates verify`, `get` are 9, and bob's approval is refused (9, nothing written).
fn a_vote_s_pinned_version_rewritten_in_place_is_never_decided_on(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let (alice, bob) = (add(&p, "alice"), add(&p, "bob"));
    run.bind("cfg", "BBBB", None);
    run.cmd()
        .args(["gates", "create", "G", "--prompt", "P", "--inputs", "cfg"])
        .args(["--allow", "alice,bob", "--require", "2"])
        .assert()
        .success();
    run.cmd()
        .env("PROSE_TOKEN", &alice)
        .args(["approve", "G", "-y"])
        .assert()
        .success();
    raw(
        &run,
        "DROP TRIGGER bindings_version_update;
         UPDATE bindings SET value = 'EVIL' WHERE name = 'cfg';
         UPDATE binding_history SET value = 'EVIL' WHERE name = 'cfg' AND n = 1;",
        "UPDATE openprose.bindings SET value = 'EVIL' WHERE run_id = '$RUN' AND name = 'cfg';
         UPDATE openprose.binding_history SET value = 'EVIL'
          WHERE run_id = '$RUN' AND name = 'cfg' AND n = 1;",
    );
    refused(&run, &["gates", "verify"]);
    refused(&run, &["get", "cfg"]);
    refused(&run, &["history", "cfg"]);
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

/// alice approves with `--edit cfg=GOOD` (version 2); its history row is deleted and the row
/// put back to the old value: `get` and `resume` are 9, never the old value.
fn an_erased_edit_is_not_read_back_as_the_old_value(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("cfg", "BBBB", None);
    run.cmd()
        .args(["gates", "create", "G", "--prompt", "P", "--inputs", "cfg"])
        .assert()
        .success();
    run.cmd()
        .args(["approve", "G", "--as", "alice", "-y", "--edit", "cfg=GOOD"])
        .assert()
        .success();
    raw(
        &run,
        "DROP TRIGGER bindings_version_update;
         DELETE FROM binding_history WHERE name = 'cfg' AND n = 2;
         UPDATE bindings SET value = 'BBBB', source_statement = NULL WHERE name = 'cfg';",
        "DELETE FROM openprose.binding_history WHERE run_id = '$RUN' AND name = 'cfg' AND n = 2;
         UPDATE openprose.bindings SET value = 'BBBB', source_statement = NULL
          WHERE run_id = '$RUN' AND name = 'cfg';",
    );
    for args in [vec!["gates", "verify"], vec!["get", "cfg"], vec!["resume"]] {
        let a = run.cmd().args(&args).assert().failure();
        assert_eq!(code(&a), 9, "{args:?}: {}", stderr(&a));
        let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
        assert!(!out.contains("BBBB"), "{args:?}: {out}");
    }
}

/// A gate answered into `ans`; the answer's row deleted, and the deletion its history kept
/// deleted too: `gates verify`, `doctor`, `resume` and `gates wait` find it (9; doctor fails).
fn a_deleted_answer_is_found_by_verify_resume_and_wait(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "G", "--prompt", "P"])
        .args(["--response-schema", r#"{"type":"integer"}"#])
        .args(["--response-binding", "ans"])
        .assert()
        .success();
    run.cmd()
        .args(["approve", "G", "--as", "alice", "-y", "--response", "5"])
        .assert()
        .success();
    raw(
        &run,
        "DELETE FROM bindings WHERE name = 'ans';
         DELETE FROM binding_history WHERE name = 'ans' AND deleted = 1;",
        "DELETE FROM openprose.bindings WHERE run_id = '$RUN' AND name = 'ans';
         DELETE FROM openprose.binding_history WHERE run_id = '$RUN' AND name = 'ans' AND deleted = 1;",
    );
    refused(&run, &["gates", "verify"]);
    refused(&run, &["resume"]);
    refused(&run, &["gates", "wait", "G", "--timeout", "0"]);
    let a = run.cmd().args(["doctor"]).assert().failure();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(out.contains("tampered"), "{out}");
}

/// A pending gate about `cfg`, whose version 2 is a `--merge` step on version 1; version 1
/// rewritten: `get --version 2`, `history` and `export` refuse (9, no copy written).
fn a_version_under_a_step_rewritten_is_read_by_no_reader_of_the_past_nor_exported(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("cfg", r#"{"a":1}"#, None);
    run.cmd()
        .args(["bind", "cfg", "--merge", r#"{"b":2}"#])
        .assert()
        .success();
    run.cmd()
        .args(["gates", "create", "G", "--prompt", "P", "--inputs", "cfg"])
        .assert()
        .success();
    raw(
        &run,
        r#"UPDATE binding_history SET value = '{"a":3}' WHERE name = 'cfg' AND n = 1;"#,
        r#"UPDATE openprose.binding_history SET value = '{"a":3}'
            WHERE run_id = '$RUN' AND name = 'cfg' AND n = 1;"#,
    );
    refused(&run, &["gates", "verify"]);
    refused(&run, &["get", "cfg", "--version", "2"]);
    refused(&run, &["history", "cfg"]);
    let out = p.root().join("copy");
    let a = run
        .cmd()
        .args(["export", "-o"])
        .arg(&out)
        .assert()
        .failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    assert!(!out.exists(), "a refused export wrote a copy");
}

/// A gate of two approvals; alice votes with an edit; a fork at the newest record carries
/// the gate pending with her vote and her edit as hers: it verifies, is waited on as pending,
/// and bob decides it there.
fn a_fork_during_a_quorum_with_a_vote_s_edit_stands(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let (alice, bob) = (add(&p, "alice"), add(&p, "bob"));
    run.bind("draft", "D0", None);
    run.cmd()
        .args(["gates", "create", "G", "--prompt", "P", "--inputs", "draft"])
        .args(["--allow", "alice,bob", "--require", "2"])
        .assert()
        .success();
    run.cmd()
        .env("PROSE_TOKEN", &alice)
        .args(["approve", "G", "-y", "--edit", "draft=D1"])
        .assert()
        .success();
    let at = run.view().last_execution_id().to_string();
    run.cmd()
        .args(["fork", "--at", &at, "--run-id", "f1"])
        .assert()
        .success();
    let f = |args: &[&str]| p.cmd().args(["--run", "f1"]).args(args).assert();
    f(&["gates", "verify"]).success();
    assert_eq!(
        code(&f(&["gates", "wait", "G", "--timeout", "0"]).failure()),
        7
    );
    p.cmd()
        .env("PROSE_TOKEN", &bob)
        .args(["--run", "f1", "approve", "G", "-y"])
        .assert()
        .success();
    f(&["gates", "wait", "G", "--timeout", "0"]).success();
    f(&["gates", "verify"]).success();
}

/// An approval with an edit, then the history trigger dropped (the documented repairable
/// case): `doctor --fix` starts the history again, restating the edit, and the run stands.
fn doctor_fix_restating_an_approver_s_edit_raises_no_alarm(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    if b == Backend::Postgres {
        // The server's history trigger is the schema's, which `doctor --fix` does not drop or
        // make: the case is SQLite's (a run file an agent's sqlite3 changed).
        return;
    }
    let run = p.init();
    run.bind("draft", "D0", None);
    run.cmd()
        .args(["gates", "create", "G", "--prompt", "P", "--inputs", "draft"])
        .assert()
        .success();
    run.cmd()
        .args(["approve", "G", "--as", "alice", "-y", "--edit", "draft=D1"])
        .assert()
        .success();
    run.view()
        .raw("DROP TRIGGER binding_history_version", "SELECT 1");
    run.cmd().args(["doctor", "--fix"]).assert().success();
    run.cmd().args(["gates", "verify"]).assert().success();
    assert_eq!(run.get("draft", None), b"D1");
    run.cmd()
        .args(["gates", "wait", "G", "--timeout", "0"])
        .assert()
        .success();
    run.cmd().args(["doctor"]).assert().success();
}

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

/// A pending gate's row rewritten as approved by alice, and (in another run) an answer's row
/// deleted: `diff` of either run is 9, as `gates verify` is, not a difference.
fn diff_compares_no_run_gates_verify_refuses(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "G", "--prompt", "P"])
        .args(["--response-schema", r#"{"type":"integer"}"#])
        .args(["--response-binding", "ans"])
        .assert()
        .success();
    run.cmd()
        .args(["gates", "create", "H", "--prompt", "P"])
        .assert()
        .success();
    run.cmd()
        .args(["approve", "G", "--as", "alice", "-y", "--response", "5"])
        .assert()
        .success();
    let at = run.view().last_execution_id().to_string();
    run.cmd()
        .args(["fork", "--at", &at, "--run-id", "f1"])
        .assert()
        .success();
    let diff = |a: &str, b: &str| p.cmd().args(["diff", a, b]).assert();
    diff(&run.id, "f1").success();
    let snap = p.snapshot();
    for (sqlite, postgres) in [
        (
            "UPDATE gates SET status = 'approved', resolved_by = 'alice' WHERE id = 'H'",
            "UPDATE openprose.gates SET status = 'approved', resolved_by = 'alice'
              WHERE run_id = '$RUN' AND id = 'H';",
        ),
        (
            "DELETE FROM bindings WHERE name = 'ans';
             DELETE FROM binding_history WHERE name = 'ans' AND deleted = 1;",
            "DELETE FROM openprose.bindings WHERE run_id = '$RUN' AND name = 'ans';",
        ),
    ] {
        raw(&run, sqlite, postgres);
        refused(&run, &["gates", "verify"]);
        for (x, y) in [
            (&run.id[..], "f1"),
            ("f1", &run.id[..]),
            (&run.id[..], &run.id[..]),
        ] {
            let a = diff(x, y).failure();
            assert_eq!(code(&a), 9, "{sqlite}: diff {x} {y}: {}", stderr(&a));
        }
        p.restore(&snap);
    }
}

/// A pending gate's row rewritten as approved by alice: `resume` is 9 and says the gate is
/// pending, decided by no one (its sealed log), in its JSON and its text alike.
fn resume_states_a_tampered_gate_as_its_log_makes_it(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "H", "--prompt", "P"])
        .assert()
        .success();
    raw(
        &run,
        "UPDATE gates SET status = 'approved', resolved_by = 'alice' WHERE id = 'H'",
        "UPDATE openprose.gates SET status = 'approved', resolved_by = 'alice'
          WHERE run_id = '$RUN' AND id = 'H';",
    );
    let a = run.cmd().args(["resume", "--json"]).assert().failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    let v = stdout_json(&a);
    let gate = v["gates"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["id"] == "H"))
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(gate["status"], "pending", "{gate}");
    assert!(gate["resolved_by"].is_null(), "{gate}");
    let a = run.cmd().args(["resume"]).assert().failure();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(!out.contains("now approved"), "{out}");
}
