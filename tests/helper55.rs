//! What helper-55 (an attack on the merged binaries, no tests seen: quorums on PostgreSQL,
//! signed decisions, the principals book, MCP) found, closed.
//!
//! - f01: a decision waiting for the run's write lock (another writer holding it) committed
//!   after its token was revoked, and counted.
//! - f02: a decision waiting for the lock committed after the gate's sealed deadline, stamped
//!   with the time it started, so the gate read as approved in time.
//!
//! Both had one cause: who decides and when were read before the decision's transaction. The
//! rule now reads both once it holds the lock. A decision is held between its front end's
//! checks and its transaction by the test builds' `PROSE_STATE_TEST_HOLD_DECISION`, as a
//! lock held elsewhere would hold it, so that the revocation or the deadline falls inside.

use crate::common::*;
use std::path::Path;

on_both!(
    a_token_revoked_while_a_decision_waits_decides_nothing,
    a_deadline_passing_while_a_decision_waits_times_the_gate_out,
);

/// `approve GATE --yes` with the token in `tok`, held before its transaction (`hold`): the
/// running child.
fn held_approve(run: &Run, gate: &str, tok: &str, hold: &Path) -> std::process::Child {
    let mut c = run.std_cmd();
    c.env("PROSE_TOKEN", tok)
        .env("PROSE_STATE_TEST_HOLD_DECISION", hold)
        .args(["approve", gate, "--yes"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    c.spawn().unwrap()
}

/// Waits until the held decision has passed its front end's checks.
fn until_held(hold: &Path) {
    for _ in 0..6000 {
        if hold.join("held").exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    panic!("the decision never reached its hold");
}

fn token(p: &Project, name: &str) -> String {
    let a = p.cmd().args(["principals", "add", name]).assert().success();
    String::from_utf8(a.get_output().stdout.clone())
        .unwrap()
        .trim()
        .to_string()
}

fn a_token_revoked_while_a_decision_waits_decides_nothing(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let tok = token(&p, "alice");
    run.cmd()
        .args([
            "gates", "create", "deploy", "--prompt", "Deploy?", "--allow", "alice",
        ])
        .assert()
        .success();
    let hold = p.root().join("hold");
    std::fs::create_dir_all(&hold).unwrap();
    let child = held_approve(&run, "deploy", &tok, &hold);
    until_held(&hold);
    // Its token was good when it was checked; it is revoked before the decision is taken.
    p.cmd()
        .args(["principals", "revoke", "alice"])
        .assert()
        .success();
    let before = run.view().events("deploy").len();
    std::fs::write(hold.join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("revoked") && said.contains("this attempt was logged"),
        "{said}"
    );
    // Nothing but the logged refusal: the gate pending, no vote, no decision.
    let events = run.view().events("deploy");
    assert_eq!(events.last().unwrap().0, "refused", "{events:?}");
    assert_eq!(events.len(), before + 1, "{events:?}");
    assert!(!events.iter().any(|e| e.0 == "approved"));
    let w = run
        .cmd()
        .args(["gates", "wait", "deploy", "--timeout", "0"])
        .assert();
    assert_eq!(code(&w), 7, "{}", stdout_text(&w));
}

fn a_deadline_passing_while_a_decision_waits_times_the_gate_out(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let tok = token(&p, "alice");
    run.cmd()
        .args([
            "gates", "create", "deploy", "--prompt", "Deploy?", "--allow", "alice",
        ])
        .args(["--timeout", "1h"])
        .assert()
        .success();
    let hold = p.root().join("hold");
    std::fs::create_dir_all(&hold).unwrap();
    let child = held_approve(&run, "deploy", &tok, &hold);
    until_held(&hold);
    // Two hours pass while it waits: its clock reads them when it goes on.
    advance_clock(p.root(), 7200);
    std::fs::write(hold.join("go"), test_clock(p.root())[0].1.as_str()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("timed out"), "{said}");
    let events = run.view().events("deploy");
    assert!(!events.iter().any(|e| e.0 == "approved"), "{events:?}");
    assert!(events.iter().any(|e| e.0 == "timeout"), "{events:?}");
    let w = run
        .cmd()
        .args(["gates", "wait", "deploy", "--timeout", "0"])
        .assert();
    assert_eq!(code(&w), 6, "{}", stdout_text(&w));
}
