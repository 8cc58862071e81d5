//! What helper-41 (the merged binaries, no tests seen) found on the approval page and the MCP
//! server, closed. The page's live status said "approved" for a decision only the spec's own
//! SQL made, and took the forms away as if one stood; the gate page showed a tampered row's
//! status, decider and comment; `approve` told a person "already approved by alice" of a
//! decision nothing attests; a read of the past from inside a gate's frame passed the frame
//! before any answer; a listing of the bindings visible from there failed whole; a subagent's
//! prompt naming another execution was answered for its own; and a decision about inputs that
//! changed since the page showed them was 403, not 409 (tests/serve.rs). Then what helper-42
//! found: `gates wait --instance N` showed a rewritten earlier opening's row; the page's live
//! status said `attested` of a gate the page and `gates verify` call tampered (an earlier
//! opening's row rewritten, an answer forged before any decision); `resume` showed a tampered
//! gate's decision time, deadline and `on_reject` from its row.

use crate::common::*;
use crate::serve::{add, gate_path, Server};

on_both!(
    a_decision_only_its_row_makes_is_shown_as_unattested_and_not_told_as_made,
    a_tampered_gate_is_shown_everywhere_as_its_log_has_it,
    a_read_of_the_past_from_inside_an_unanswered_frame_stops_there,
    an_earlier_opening_rewritten_is_shown_as_its_log_has_it,
    the_live_status_checks_the_run_as_the_page_does,
    resume_shows_every_field_of_a_tampered_gate_from_its_log,
    no_guide_tells_a_subagent_to_write_a_gates_answer,
);

/// The spec's own SQL decides a pending gate (its `UPDATE gates` and an unsealed audit row).
fn decide_by_spec_sql(run: &Run, gate: &str) {
    run.view().raw(
        &format!(
            "UPDATE gates SET status = 'approved', resolved_by = 'alice', resolved_at = '2026-11-30 12:00:00' WHERE id = '{gate}';
             INSERT INTO gate_audit_log (gate_id, run_id, event_type, principal, timestamp)
             VALUES ('{gate}', (SELECT id FROM run), 'approved', 'alice', '2026-11-30 12:00:00')"
        ),
        &format!(
            "UPDATE openprose.gates SET status = 'approved', resolved_by = 'alice', resolved_at = '2026-11-30 12:00:00' WHERE run_id = '$RUN' AND id = '{gate}';
             INSERT INTO openprose.gate_audit_log (gate_id, run_id, event_type, principal, timestamp)
             VALUES ('{gate}', '$RUN', 'approved', 'alice', '2026-11-30 12:00:00')"
        ),
    );
}

/// The page a person has open, its live status and `approve` on a gate decided only by the
/// spec's own SQL: "approved (UNATTESTED)", integrity said, no form offered, and `approve`
/// refused (4) in words that say no sealed decision stands, its refusal the only write.
fn a_decision_only_its_row_makes_is_shown_as_unattested_and_not_told_as_made(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let bob = add(&p, "bob");
    run.cmd()
        .args(["gates", "create", "deploy", "--prompt", "Deploy?"])
        .assert()
        .success();
    let s = Server::start(&p);
    let cookie = s.login(&bob);
    let status = format!("{}/status", gate_path(&run, "deploy"));
    let live = s.get(&status, Some(&cookie)).body;
    assert!(
        live.contains("status pending\n") && live.contains("integrity attested\n"),
        "{live}"
    );
    decide_by_spec_sql(&run, "deploy");
    let live = s.get(&status, Some(&cookie)).body;
    assert!(
        live.contains("status approved (UNATTESTED)\n") && live.contains("integrity unattested\n"),
        "{live}"
    );
    let page = s.get(&gate_path(&run, "deploy"), Some(&cookie)).body;
    assert!(page.contains("approved (UNATTESTED)"), "{page}");
    assert!(page.contains("id=\"unattested\""), "{page}");
    assert!(page.contains("in its row only"), "{page}");
    assert!(
        !page.contains("name=\"action\""),
        "a form was offered: {page}"
    );
    drop(s);
    let before = run.before_refusal("deploy");
    let token = p.write("bob.token", bob.as_bytes());
    let a = run
        .cmd()
        .args(["approve", "deploy", "--yes", "--token-file"])
        .arg(&token)
        .assert()
        .failure();
    let err = stderr(&a);
    assert_eq!(code(&a), 4, "{err}");
    assert!(
        err.contains("only in its row") && err.contains("no sealed decision"),
        "{err}"
    );
    assert!(!err.contains("was already approved by"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    run.refused(&before, 1, "approve of a gate decided only in its row");
}

/// A pending gate's row rewritten as "approved by bob": the gate page, its live status,
/// `gates show --json`, `gates wait --json` and a one-run listing show it pending, decided by
/// no one, marked tampered; `gates wait`'s words say what its row claims.
fn a_tampered_gate_is_shown_everywhere_as_its_log_has_it(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let bob = add(&p, "bob");
    run.cmd()
        .args(["gates", "create", "deploy", "--prompt", "Deploy?"])
        .assert()
        .success();
    run.view().raw(
        "UPDATE gates SET status = 'approved', resolved_by = 'bob', resolution_comment = 'ship it, bob', resolved_at = '2026-01-01 00:00:00' WHERE id = 'deploy'",
        "UPDATE openprose.gates SET status = 'approved', resolved_by = 'bob', resolution_comment = 'ship it, bob', resolved_at = '2026-01-01 00:00:00' WHERE run_id = '$RUN' AND id = 'deploy'",
    );
    let s = Server::start(&p);
    let cookie = s.login(&bob);
    let page = s.get(&gate_path(&run, "deploy"), Some(&cookie)).body;
    assert!(page.contains("pending (TAMPERED)"), "{page}");
    assert!(!page.contains("Decided by"), "{page}");
    assert!(!page.contains("ship it, bob"), "{page}");
    let live = s
        .get(
            &format!("{}/status", gate_path(&run, "deploy")),
            Some(&cookie),
        )
        .body;
    assert!(
        live.contains("status pending (TAMPERED)\n")
            && live.contains("decided_by \n")
            && live.contains("integrity tampered\n"),
        "{live}"
    );
    drop(s);
    let shown = run
        .cmd()
        .args(["gates", "show", "deploy", "--json"])
        .assert()
        .code(9);
    let v = stdout_json(&shown);
    assert_eq!(v["status"], "pending", "{v}");
    assert!(
        v["resolved_by"].is_null() && v["resolution_comment"].is_null(),
        "{v}"
    );
    assert_eq!(v["integrity"]["state"], "tampered", "{v}");
    let waited = run
        .cmd()
        .args(["gates", "wait", "deploy", "--timeout", "0", "--json"])
        .assert()
        .code(9);
    let v = stdout_json(&waited);
    assert_eq!(v["status"], "pending", "{v}");
    assert!(v["resolved_by"].is_null(), "{v}");
    let said = run
        .cmd()
        .args(["gates", "wait", "deploy", "--timeout", "0"])
        .assert()
        .code(9);
    let out = String::from_utf8_lossy(&said.get_output().stdout).to_string();
    assert!(
        out.contains("TAMPERED, no decision stands (approved in its row)"),
        "{out}"
    );
    let listed = run
        .cmd()
        .args(["gates", "--status", "all", "--json"])
        .assert();
    let v = stdout_json(&listed);
    let g = v
        .as_array()
        .and_then(|a| a.iter().find(|g| g["id"] == "deploy"))
        .cloned()
        .unwrap_or_else(|| panic!("deploy not listed: {v}"));
    assert_eq!(g["status"], "pending", "{g}");
    assert!(g["resolved_by"].is_null(), "{g}");
    assert_eq!(g["integrity"]["state"], "tampered", "{g}");
}

/// A gate opened in frame F answers into `ans` there; `ans` is also bound at the root. From a
/// record inside F, before any answer: `get --version`, `get --as-of` a point after F began
/// and `history` are exit 3, never the root's `ans`; `--as-of` a point before F began reads the
/// root's `ans`, which is what the name meant then. The gate's page lists the bindings its
/// frame sees, the outer `ans` left out.
fn a_read_of_the_past_from_inside_an_unanswered_frame_stops_there(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let first = run.exec(1, "let a = session \"x\"", "completed", None);
    run.bind("ans", "deploy-everything", None);
    run.bind("other", "v", None);
    let frame = run.exec(2, "do blk", "executing", None);
    run.cmd()
        .args(["gates", "create", "choose", "--prompt", "Which?"])
        .args(["--response-schema", r#"{"type":"string"}"#])
        .args(["--response-binding", "ans", "--execution-id"])
        .arg(frame.to_string())
        .assert()
        .success();
    let inner = run.exec(3, "inner", "executing", Some(frame));
    let before = run.snapshot();
    let at = inner.to_string();
    for args in [
        vec!["get", "ans", "--execution-id", &at],
        vec!["get", "ans", "--execution-id", &at, "--version", "1"],
        vec!["get", "ans", "--execution-id", &at, "--as-of", &at],
        vec!["history", "ans", "--execution-id", &at],
    ] {
        let a = run.cmd().args(&args).assert().failure();
        let err = stderr(&a);
        assert_eq!(code(&a), 3, "{args:?}: {err}");
        assert!(
            err.contains("is gate \"choose\"'s answer") && err.contains("not read in its place"),
            "{args:?}: {err}"
        );
        let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
        assert!(!out.contains("deploy-everything"), "{args:?}: {out}");
    }
    let then = run
        .cmd()
        .args(["get", "ans", "--execution-id", &at, "--as-of"])
        .arg(first.to_string())
        .assert()
        .success();
    assert_eq!(then.get_output().stdout, b"deploy-everything");
    assert_eq!(run.snapshot(), before, "a read wrote something");
    let alice = add(&p, "alice");
    let s = Server::start(&p);
    let cookie = s.login(&alice);
    let page = s.get(&gate_path(&run, "choose"), Some(&cookie));
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("other"), "{}", page.body);
    assert!(!page.body.contains("deploy-everything"), "{}", page.body);
}

/// Gate g rejected by alice ("no1"), opened again; the row `gate_instances` keeps of its first
/// opening rewritten as approved by bob: `gates wait --instance 1` is 9 and shows the opening
/// as its sealed log has it (rejected by alice, "no1"), and its words say what the row claims.
fn an_earlier_opening_rewritten_is_shown_as_its_log_has_it(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "Go?"])
        .assert()
        .success();
    run.cmd()
        .args(["reject", "g", "--as", "alice", "-y", "--reason", "no1"])
        .assert()
        .success();
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "Go?", "--reopen"])
        .assert()
        .success();
    run.view().raw(
        "UPDATE gate_instances SET status = 'approved', resolved_by = 'bob', resolution_comment = 'LGTM' WHERE gate_id = 'g' AND instance = 1",
        "UPDATE openprose.gate_instances SET status = 'approved', resolved_by = 'bob', resolution_comment = 'LGTM' WHERE run_id = '$RUN' AND gate_id = 'g' AND instance = 1",
    );
    let before = run.snapshot();
    let a = run
        .cmd()
        .args([
            "--json",
            "gates",
            "wait",
            "g",
            "--instance",
            "1",
            "--timeout",
            "0",
        ])
        .assert()
        .code(9);
    let v = stdout_json(&a);
    assert_eq!(v["status"], "rejected", "{v}");
    assert_eq!(v["resolved_by"], "alice", "{v}");
    assert_eq!(v["resolution_comment"], "no1", "{v}");
    assert_eq!(v["integrity"]["state"], "tampered", "{v}");
    let a = run
        .cmd()
        .args(["gates", "wait", "g", "--instance", "1", "--timeout", "0"])
        .assert()
        .code(9);
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(out.contains("(approved in its row)"), "{out}");
    assert!(!out.contains("LGTM"), "{out}");
    assert_eq!(
        run.snapshot(),
        before,
        "a wait on a tampered opening wrote something"
    );
}

/// The page's live status checks the run as the gate's page does: an earlier opening's row
/// rewritten, or an answer forged into a pending gate's response binding, is `tampered` there
/// too (and marked in its status), never `attested`.
fn the_live_status_checks_the_run_as_the_page_does(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = add(&p, "alice");
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "Go?"])
        .assert()
        .success();
    run.cmd()
        .args(["reject", "g", "--as", "alice", "-y", "--reason", "no1"])
        .assert()
        .success();
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "Go?", "--reopen"])
        .assert()
        .success();
    run.cmd()
        .args(["gates", "create", "h", "--prompt", "Which?"])
        .args(["--response-schema", r#"{"type":"string"}"#])
        .args(["--response-binding", "ans"])
        .assert()
        .success();
    let s = Server::start(&p);
    let cookie = s.login(&alice);
    let live = |g: &str| {
        s.get(&format!("{}/status", gate_path(&run, g)), Some(&cookie))
            .body
    };
    assert!(live("g").contains("integrity attested\n"), "{}", live("g"));
    assert!(live("h").contains("integrity attested\n"), "{}", live("h"));
    run.view().raw(
        "UPDATE gate_instances SET resolution_comment = 'fine' WHERE gate_id = 'g' AND instance = 1;
         INSERT INTO bindings (name, execution_id, kind, value) VALUES ('ans', NULL, 'let', '\"FORGED\"')",
        "UPDATE openprose.gate_instances SET resolution_comment = 'fine' WHERE run_id = '$RUN' AND gate_id = 'g' AND instance = 1;
         INSERT INTO openprose.bindings (run_id, name, execution_id, kind, value) VALUES ('$RUN', 'ans', NULL, 'let', '\"FORGED\"')",
    );
    for g in ["g", "h"] {
        let body = live(g);
        assert!(
            body.contains("status pending (TAMPERED)\n") && body.contains("integrity tampered\n"),
            "{g}: {body}"
        );
    }
}

/// A pending gate about to be shown by `resume`, its row rewritten: decided by bob at a time
/// of the row's, its deadline and `on_reject` changed. `resume --json` states it as its sealed
/// log has it: pending, decided by no one at no time, the sealed deadline and `on_reject`.
fn resume_shows_every_field_of_a_tampered_gate_from_its_log(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "Go?", "--timeout", "1h"])
        .args(["--on-reject", "throw \"x\""])
        .assert()
        .success();
    let sealed = run
        .cmd()
        .args(["--json", "gates", "show", "g"])
        .assert()
        .success();
    let sealed = stdout_json(&sealed);
    run.view().raw(
        "UPDATE gates SET status = 'approved', resolved_by = 'bob', resolved_at = '2001-01-01 00:00:00', timeout_at = '2099-01-01 00:00:00', on_reject = 'retry' WHERE id = 'g'",
        "UPDATE openprose.gates SET status = 'approved', resolved_by = 'bob', resolved_at = '2001-01-01 00:00:00', timeout_at = '2099-01-01 00:00:00', on_reject = 'retry' WHERE run_id = '$RUN' AND id = 'g'",
    );
    let a = run.cmd().args(["--json", "resume"]).assert();
    let v = stdout_json(&a);
    let g = v["gates"]
        .as_array()
        .and_then(|gs| gs.iter().find(|g| g["id"] == "g"))
        .cloned()
        .unwrap_or_else(|| panic!("g not in resume: {v}"));
    assert_eq!(g["status"], "pending", "{g}");
    assert!(
        g["resolved_by"].is_null() && g["resolved_at"].is_null(),
        "{g}"
    );
    assert_eq!(g["timeout_at"], sealed["timeout_at"], "{g}");
    assert_eq!(g["on_reject"], sealed["on_reject"], "{g}");
    assert_eq!(g["next_step"]["action"], "stop", "{g}");
}

/// `guide subagent --name ans` for a record inside a gate's frame where the gate answers into
/// `ans` (helper-42): refused (4, one line), as the subagent's `bind` would be; for the root,
/// outside the frame, the guide is given.
fn no_guide_tells_a_subagent_to_write_a_gates_answer(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let frame = run.exec(1, "do blk", "executing", None);
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "Which?"])
        .args(["--response-schema", r#"{"type":"string"}"#])
        .args(["--response-binding", "ans", "--execution-id"])
        .arg(frame.to_string())
        .assert()
        .success();
    let inner = run.exec(2, "inner", "executing", Some(frame)).to_string();
    let err = run.refuses(
        &[
            "guide",
            "subagent",
            "--name",
            "ans",
            "--execution-id",
            &inner,
        ],
        4,
        "is gate \"g\"'s answer binding",
    );
    assert!(err.contains("another binding"), "{err}");
    run.cmd()
        .args(["guide", "subagent", "--name", "ans"])
        .assert()
        .success();
}
