//! What a second outside attack on the merged binary found (helper-33, which had not seen the
//! tests), each closed: `diff` and `resume` showed a forged answer or edit with exit 0 (on a
//! machine with the key, and one without); a frame re-parented behind the tool's back led a
//! lookup to an outer binding claiming to be a decision's answer; a pending gate whose row
//! was rewritten as approved vanished from the checked list of pending gates.

use crate::common::*;

on_both!(
    diff_shows_no_forged_answer_or_edit,
    resume_shows_no_forged_answer_or_edit,
    a_claimed_answer_outside_its_gates_frame_is_refused,
    a_pending_gate_rewritten_as_decided_stays_in_the_checked_list,
);

/// [`answered_and_edited`], and the VM then waited on it (consuming the decision).
fn decided(run: &Run) {
    answered_and_edited(run, &[]);
    run.cmd().args(["gates", "wait", "G"]).assert().success();
}

/// The answer and the edit rewritten in the bindings table alone (their kept versions left as
/// the decision wrote them), as (SQLite, PostgreSQL).
const FORGE_ROWS: (&str, &str) = (
    "DROP TRIGGER bindings_version_update;
     UPDATE bindings SET value = '666' WHERE name = 'ans';
     UPDATE bindings SET value = 'forged' WHERE name = 'doc';",
    "ALTER TABLE openprose.bindings DISABLE TRIGGER USER;
     UPDATE openprose.bindings SET value = '666' WHERE run_id = '$RUN' AND name = 'ans';
     UPDATE openprose.bindings SET value = 'forged' WHERE run_id = '$RUN' AND name = 'doc';",
);

/// `diff` of a run whose answer and edit were forged, against another run: exit 9, nothing
/// printed, as `get` of either is.
fn diff_shows_no_forged_answer_or_edit(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    decided(&run);
    let other = p.init();
    other.bind("ans", "5", None);
    // As decided, the two differ only where they do.
    let a = p.cmd().args(["diff", &run.id, &other.id]).assert();
    assert_ne!(code(&a), 9, "{}", stderr(&a));
    run.view().raw(FORGE_ROWS.0, FORGE_ROWS.1);
    for args in [
        vec!["diff", &run.id, &other.id],
        vec!["--json", "diff", &other.id, &run.id],
    ] {
        let a = p.cmd().args(&args).assert().failure();
        assert_eq!(code(&a), 9, "{args:?}: {}", stderr(&a));
        assert!(a.get_output().stdout.is_empty(), "{args:?} printed");
        assert_eq!(stderr(&a).lines().count(), 1, "{}", stderr(&a));
    }
}

/// `resume` of a run whose answer and edit were forged in their rows: exit 9 on the machine
/// holding the key, 10 on one without it, never the forged values shown as a decision's.
fn resume_shows_no_forged_answer_or_edit(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    decided(&run);
    // As decided, the values are the decision's.
    let a = run.cmd().args(["resume"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(out.contains("'s decision"), "{out}");
    run.view().raw(FORGE_ROWS.0, FORGE_ROWS.1);
    run.refuses(&["resume"], 9, "");
    run.refuses(&["--json", "resume"], 9, "");
    let bare = tempfile::tempdir().unwrap();
    let a = run
        .cmd()
        .env("HOME", bare.path())
        .args(["resume"])
        .assert()
        .failure();
    assert_eq!(code(&a), 10, "{}", stderr(&a));
    assert!(a.get_output().stdout.is_empty(), "printed");
}

/// A gate in a call's frame answers into `fa` there; a record inside the call reads it. A
/// writer of the database re-parents that record to the root (parent links are sealed nowhere)
/// and puts a root `fa` that says the gate's decision wrote it: the read from inside is refused
/// (exit 9), since the gate answers into no `fa` at the root.
fn a_claimed_answer_outside_its_gates_frame_is_refused(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let call = run.exec(4, "do process(chunk)", "executing", None);
    let inner = run.exec(1, "if **x**:", "started", Some(call));
    run.cmd()
        .args(["gates", "create", "H", "--prompt", "P"])
        .args(["--response-schema", r#"{"type":"integer"}"#])
        .args([
            "--response-binding",
            "fa",
            "--execution-id",
            &call.to_string(),
        ])
        .assert()
        .success();
    run.cmd()
        .args(["approve", "H", "--as", "alice", "-y", "--response", "42"])
        .assert()
        .success();
    let inner_id = inner.to_string();
    let a = run
        .cmd()
        .args(["get", "fa", "--execution-id", &inner_id])
        .assert()
        .success();
    assert_eq!(a.get_output().stdout, b"42");
    run.view().raw(
        &format!(
            "UPDATE execution SET parent_id = NULL WHERE id = {inner};
             INSERT INTO bindings (name, execution_id, kind, value, source_statement)
             VALUES ('fa', NULL, 'let', '666', 'approve H:');"
        ),
        &format!(
            "UPDATE openprose.execution SET parent_id = NULL WHERE run_id = '$RUN' AND id = {inner};
             INSERT INTO openprose.bindings (name, run_id, execution_id, kind, value, source_statement)
             VALUES ('fa', '$RUN', NULL, 'let', '666', 'approve H:');"
        ),
    );
    for args in [
        vec!["get", "fa", "--execution-id", &inner_id],
        vec!["--json", "get", "fa", "--execution-id", &inner_id],
    ] {
        run.refuses(&args, 9, "");
    }
}

/// A pending gate whose row is rewritten as approved (an unsealed `approved` row beside it):
/// `gates --scan` lists the pending gates by their sealed logs, so it is still listed, marked
/// (unattested: no decision stands), and wherever its row's claim is listed, marked too.
fn a_pending_gate_rewritten_as_decided_stays_in_the_checked_list(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "Z", "--prompt", "P"])
        .assert()
        .success();
    run.view().raw(
        "INSERT INTO gate_audit_log (gate_id, run_id, event_type, principal, metadata)
         SELECT 'Z', id, 'approved', 'mallory', '{\"instance\":1}' FROM run;
         UPDATE gates SET status = 'approved', resolved_by = 'mallory' WHERE id = 'Z';",
        "INSERT INTO openprose.gate_audit_log (gate_id, run_id, event_type, principal, metadata)
         VALUES ('Z', '$RUN', 'approved', 'mallory', '{\"instance\":1}');
         UPDATE openprose.gates SET status = 'approved', resolved_by = 'mallory'
          WHERE run_id = '$RUN' AND id = 'Z';",
    );
    let listed = |args: &[&str]| {
        let a = p
            .cmd()
            .args(["--json", "gates", "--scan"])
            .args(args)
            .assert()
            .success();
        let v = stdout_json(&a);
        let gates = v
            .as_array()
            .cloned()
            .or_else(|| v["gates"].as_array().cloned());
        gates.unwrap_or_default()
    };
    let pending = listed(&[]);
    let z: Vec<_> = pending.iter().filter(|g| g["id"] == "Z").collect();
    assert_eq!(z.len(), 1, "{pending:?}");
    assert_ne!(z[0]["integrity"]["state"], "attested", "{}", z[0]);
    // Under the status its row claims too, marked: never as an attested approval.
    for g in listed(&["--status", "approved"]) {
        assert!(
            g["id"] != "Z" || g["integrity"]["state"] != "attested",
            "{g}"
        );
    }
}
