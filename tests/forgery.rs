//! The promise, as a property: no one who can write a run's database, without the audit key,
//! can make a decision stand. Each fixture is built through the binary with gates pending,
//! approved, rejected, timed out and reopened; what was really decided is known from how it
//! was built, never from the code under test. Each case applies a random, seeded sequence of
//! raw mutations to `gates`, `gate_instances` and `gate_audit_log` (the append-only triggers
//! dropped first, as an attacker would): inserts, updates and deletes with any id, seq,
//! instance, status, allow list, principal, prompt or copied seal. Then:
//! - no gate stands approved unless it really was, for that instance, by that principal;
//! - no change to a sealed row leaves the log intact.
//!
//! 10,000 cases per backend run against the derivation and verification code directly (rows
//! read from each backend's database, mutated in memory), and a hundred through the binary
//! (real SQL, then `gates wait --timeout 0` and `gates verify`). `PROSE_FORGERY_CASES=N`
//! changes the first count, `PROSE_FORGERY_BINARY_CASES=N` the second. A failure prints its
//! seed: `PROSE_FORGERY_SEED=S` replays that one case.
//!
//! Since issue 43 the mutations reach every column of a gate (times generated from the input
//! grammars of SQLite's date functions and PostgreSQL's `timestamptz`), and the promise checked
//! includes that an attested gate shows only what was sealed (`shown_differs`). Each check of
//! `chain::compare`, removed alone, makes the in-process property fail within 3,000 cases on
//! SQLite (measured on the commit that added them; the seed that finds it):
//! - the deadline's (`same_time(timeout_at, …)`): seed 573, a pending gate given
//!   `2080-10-11T15:04`;
//! - the decision's comment: seed 142, a page-signed approval given "LGTM, ship to prod too";
//! - the decision's time: seed 295, an escalated gate's `resolved_at` set to NULL;
//! - the opening's time: seed 601, `created_at` a year earlier with a fraction;
//! - the timeout as given: seed 156, `1s ` with a trailing space.

use crate::common::*;
use prose_state::testing::{self as t, AuditRow, GateRow, GateStatus};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;

on_both!(
    an_import_raises_no_rows_trust_by_itself,
    a_new_run_is_sealed_from_its_genesis,
    no_mutation_of_the_rows_makes_a_decision_stand,
    no_raw_sql_makes_gates_wait_accept_a_decision,
    a_raw_decision_below_the_chain_is_never_a_decision,
    a_reopened_gate_rolled_back_is_tampered,
    the_allow_list_is_the_sealed_one,
    a_gate_opened_again_before_its_decision_is_tampered,
    with_the_audit_key_an_answer_still_cannot_be_changed_under_a_signature,
);

/// A run sealed by the release before genesis events (schema 6, sealed rows from seq 1)
/// keeps working: its past approval and rejection stand, its pending gate is decided as ever,
/// and it gains no genesis (it has sealed rows already).
#[test]
fn a_run_sealed_before_genesis_events_keeps_its_decisions() {
    let p = Project::new();
    let id = "20261120-100000-before";
    let dir = p.root().join(".prose/runs").join(id);
    std::fs::create_dir_all(dir.join("attachments")).unwrap();
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    std::fs::copy(
        fixtures.join("v6-sealed-before-genesis.db"),
        dir.join("state.db"),
    )
    .unwrap();
    let home = test_home(p.root()).join(".prose");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::copy(
        fixtures.join("v6-sealed-before-genesis.key"),
        home.join("audit.key"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        home.join("audit.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let run = p.run(id);
    assert_eq!(wait0(&run, "deploy").0, 0);
    assert_eq!(wait0(&run, "hold").0, 5);
    assert_eq!(wait0(&run, "later").0, 7);
    run.cmd().args(["gates", "verify"]).assert().success();
    run.cmd()
        .args(["approve", "later", "--as", "carol", "--yes"])
        .assert()
        .success();
    assert_eq!(wait0(&run, "later").0, 0);
    run.cmd().args(["gates", "verify"]).assert().success();
    assert_eq!(
        count_rows(&p, &run, "gate_audit_log", "event_type = 'sealed'"),
        0
    );
    // The attack of finding 1 on such a run is unattested all the same.
    run.view().raw(
        "INSERT INTO gate_audit_log(id, gate_id, run_id, event_type, principal, timestamp)
           VALUES (-1, 'later', '20261120-100000-before', 'rejected', 'mallory', datetime('now'));
         UPDATE gates SET status = 'rejected', resolved_by = 'mallory' WHERE id = 'later'",
        "",
    );
    assert_eq!(wait0(&run, "later").0, 9, "a sealed approval contradicted");
}

/// A new run is sealed at `init`: its first audit row is a sealed genesis that records no row
/// from before it, so a row inserted below it, whatever its id, is unattested and never
/// counted as from before the chain. Without a home for the audit key, `init` still makes the
/// run (bindings need no key) and a gate write is refused in one line until there is one;
/// then the first gate event seals the run.
fn a_new_run_is_sealed_from_its_genesis(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let v = run.view();
    let events = v.events("");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "sealed");
    assert_eq!(events[0].2["before_seal"], serde_json::json!([]));
    run.cmd()
        .args(["gates", "create", "deploy", "--prompt", "p"])
        .assert()
        .success();
    run.view().raw(
        "INSERT INTO gate_audit_log(id, gate_id, run_id, event_type, principal, timestamp)
           VALUES (-5, 'deploy', (SELECT id FROM run), 'viewed', 'alice', datetime('now'))",
        "INSERT INTO openprose.gate_audit_log(id, gate_id, run_id, event_type, principal)
           VALUES (-5, 'deploy', '$RUN', 'viewed', 'alice')",
    );
    let out = run
        .cmd()
        .args(["--json", "gates", "verify"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(10));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["unchained_legacy"], 0, "{v}");
    assert_eq!(v[0]["unattested"], serde_json::json!([-5]), "{v}");

    // No home: made unsealed; gates refused in one line; sealed at the first gate event.
    let bare = |c: &mut assert_cmd::Command| {
        c.env_remove("HOME").env_remove("PROSE_HOME");
    };
    let mut c = p.cmd();
    bare(&mut c);
    let a = c
        .args(["--json", "init"])
        .args(p.backend_flag())
        .assert()
        .success();
    let late = p.run(stdout_json(&a)["run_id"].as_str().unwrap());
    assert_eq!(late.view().events("").len(), 0);
    let mut c = late.cmd();
    bare(&mut c);
    let a = c
        .args(["gates", "create", "g", "--prompt", "p"])
        .assert()
        .failure();
    assert_eq!(stderr(&a).lines().count(), 1, "{}", stderr(&a));
    assert!(stderr(&a).contains("PROSE_HOME or HOME"), "{}", stderr(&a));
    assert_eq!(count_rows(&p, &late, "gates", "1 = 1"), 0);
    late.cmd()
        .args(["gates", "create", "g", "--prompt", "p"])
        .assert()
        .success();
    let events = late.view().events("");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "sealed");
    late.cmd().args(["gates", "verify"]).assert().success();
}

fn wait0(run: &Run, gate: &str) -> (i32, String) {
    let out = run
        .cmd()
        .args(["gates", "wait", gate, "--timeout", "0"])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Finding 1: an audit row inserted below the first sealed one, with the gate row decided
/// to match, is unattested (10), never a decision; in a run with no sealed rows as well.
fn a_raw_decision_below_the_chain_is_never_a_decision(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args([
            "gates",
            "create",
            "deploy",
            "--prompt",
            "DROP PRODUCTION DATABASE",
        ])
        .assert()
        .success();
    let fake = |gate: &str| {
        run.view().raw(
            &format!(
                "INSERT INTO gate_audit_log(id, gate_id, run_id, event_type, principal, timestamp)
                   VALUES ((SELECT min(id) - 1 FROM gate_audit_log), '{gate}', '{run}', 'approved', 'alice', datetime('now'));
                 UPDATE gates SET status = 'approved', resolved_by = 'alice', resolved_at = datetime('now') WHERE id = '{gate}'",
                run = run.id
            ),
            &format!(
                "INSERT INTO openprose.gate_audit_log(id, gate_id, run_id, event_type, principal)
                   VALUES (-1 - (SELECT count(*) FROM openprose.gate_audit_log WHERE id < 0), '{gate}', '$RUN', 'approved', 'alice');
                 UPDATE openprose.gates SET status = 'approved', resolved_by = 'alice', resolved_at = now()
                  WHERE run_id = '$RUN' AND id = '{gate}'"
            ),
        )
    };
    fake("deploy");
    let (code, said) = wait0(&run, "deploy");
    assert_eq!(code, 10, "{said}");
    assert!(
        said.contains("UNATTESTED") && !said.contains("approved by"),
        "{said}"
    );
    for cmd in [&["gates", "verify"][..], &["gates", "show", "deploy"]] {
        assert_eq!(
            run.cmd().args(cmd).output().unwrap().status.code(),
            Some(10),
            "{cmd:?}"
        );
    }
    assert_ne!(
        run.cmd().arg("doctor").output().unwrap().status.code(),
        Some(0)
    );
    let out = run.cmd().args(["resume", "--json"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("\"continue\""));
    // A listing that opens the run checks the gate; one from the catalog says it did not.
    let a = p
        .cmd()
        .args(["--json", "gates", "--status", "all", "--scan"])
        .assert()
        .success();
    let listed = stdout_json(&a);
    let deploy = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["id"] == "deploy")
        .unwrap();
    if b == Backend::Sqlite {
        assert_eq!(deploy["integrity"]["state"], "unattested", "{listed}");
    }
    let a = p
        .cmd()
        .args(["gates", "--status", "all"])
        .assert()
        .success();
    assert!(stderr(&a).contains("not checked"), "{}", stderr(&a));
    // A run none of whose rows are sealed yet: a gate made with the spec's own SQL.
    let bare = p.init();
    bare.view().raw(
        "INSERT INTO gates(id, run_id, prompt, allow) VALUES ('spec', (SELECT id FROM run), 'p', '[\"user\"]')",
        "INSERT INTO openprose.gates(id, run_id, prompt, allow) VALUES ('spec', '$RUN', 'p', '[\"user\"]')",
    );
    let run = bare;
    let fake = |gate: &str| {
        run.view().raw(
            &format!(
                "INSERT INTO gate_audit_log(id, gate_id, run_id, event_type, principal, timestamp)
                   VALUES (-1, '{gate}', '{run}', 'approved', 'alice', datetime('now'));
                 UPDATE gates SET status = 'approved', resolved_by = 'alice', resolved_at = datetime('now') WHERE id = '{gate}'",
                run = run.id
            ),
            &format!(
                "INSERT INTO openprose.gate_audit_log(id, gate_id, run_id, event_type, principal)
                   VALUES (-1000, '{gate}', '$RUN', 'approved', 'alice');
                 UPDATE openprose.gates SET status = 'approved', resolved_by = 'alice', resolved_at = now()
                  WHERE run_id = '$RUN' AND id = '{gate}'"
            ),
        )
    };
    fake("spec");
    assert_eq!(wait0(&run, "spec").0, 10);
    run.cmd()
        .args([
            "gates",
            "wait",
            "spec",
            "--timeout",
            "0",
            "--accept-unattested",
        ])
        .assert()
        .success();
}

/// Finding 2: a reopened gate's row put back to its approved first instance is tampered,
/// whatever its events of that instance say.
fn a_reopened_gate_rolled_back_is_tampered(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let create = |extra: &[&str]| {
        run.cmd()
            .args([
                "gates",
                "create",
                "deploy",
                "--prompt",
                "DROP PRODUCTION DATABASE",
            ])
            .args(extra)
            .assert()
            .success();
    };
    create(&[]);
    run.cmd()
        .args(["approve", "deploy", "--as", "alice", "--yes"])
        .assert()
        .success();
    create(&["--reopen"]);
    let cols = "(prompt, allow, status, resolved_by, resolved_at, instance)";
    run.view().raw(
        &format!(
            "UPDATE gates SET {cols} = (SELECT prompt, allow, status, resolved_by, resolved_at, instance
               FROM gate_instances WHERE gate_id = 'deploy' AND instance = 1) WHERE id = 'deploy'"
        ),
        &format!(
            "UPDATE openprose.gates g SET {cols} = (SELECT prompt, allow, status, resolved_by, resolved_at, instance
               FROM openprose.gate_instances i WHERE i.run_id = g.run_id AND gate_id = 'deploy' AND instance = 1)
              WHERE run_id = '$RUN' AND id = 'deploy'"
        ),
    );
    let (code, said) = wait0(&run, "deploy");
    assert_eq!(code, 9, "{said}");
    assert!(
        said.contains("TAMPERED") && said.contains("rolled back"),
        "{said}"
    );
    assert_eq!(
        run.cmd()
            .args(["gates", "verify"])
            .output()
            .unwrap()
            .status
            .code(),
        Some(9)
    );
    // Nor can it be decided again in that state: the refusal is the only change.
    let before = run.before_refusal("deploy");
    let a = run
        .cmd()
        .args(["approve", "deploy", "--as", "alice", "--yes"])
        .assert()
        .failure();
    assert_eq!(code_of(&a), 9, "{}", stderr(&a));
    run.refused(&before, 1, "the refused decision");
}

/// Issue 45: an opening superseded while still pending is one no rule writes (`--reopen`
/// refuses a pending gate). A sealed log that says so, written by a holder of the audit key,
/// is tampered for every reader: a wait on the first instance, as on the second, exits 9 with
/// why, and changes nothing.
fn a_gate_opened_again_before_its_decision_is_tampered(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "deploy", "--prompt", "Ship it?"])
        .assert()
        .success();
    // A `created` event of instance 2, sealed with the key and chained after the log's end.
    let rows = audit_rows(&run);
    let last = rows.iter().max_by_key(|r| r.seq).unwrap();
    let created = rows
        .iter()
        .find(|r| r.gate_id == "deploy" && r.event_type == "created")
        .unwrap();
    let mut m: serde_json::Value =
        serde_json::from_str(created.metadata.as_deref().unwrap()).unwrap();
    m["instance"] = 2.into();
    let mut forged = AuditRow {
        id: last.id + 1,
        metadata: Some(m.to_string()),
        prev_hash: last.hash.clone(),
        seq: Some(last.seq.unwrap() + 1),
        ..created.clone()
    };
    let hash = forged.chain_hash(last.hash.as_deref().unwrap());
    forged.seal = Some(key(&run).seal(&hash));
    forged.hash = Some(hash);
    let lit = |v: &Option<String>| match v {
        Some(s) => format!("'{}'", s.replace('\'', "''")),
        None => "NULL".into(),
    };
    let values = |ts: String| {
        format!(
            "{}, {}, {}, {}, {}, {ts}, {}, {}, {}, {}, {}",
            lit(&Some(forged.gate_id.clone())),
            lit(&Some(forged.run_id.clone())),
            lit(&Some(forged.event_type.clone())),
            lit(&forged.principal),
            lit(&forged.comment),
            lit(&forged.metadata),
            lit(&forged.prev_hash),
            lit(&forged.hash),
            forged.seq.unwrap(),
            lit(&forged.seal),
        )
    };
    let cols = "gate_id, run_id, event_type, principal, comment, timestamp, metadata, prev_hash, \
                hash, seq, seal";
    let ts = forged.timestamp.clone().unwrap();
    run.view().raw(
        &format!(
            "INSERT INTO gate_audit_log ({cols}) VALUES ({});
             INSERT INTO gate_instances SELECT id, instance, run_id, execution_id, prompt, allow,
                    timeout, timeout_at, on_reject, status, created_at, resolved_at, resolved_by,
                    resolution_comment, metadata FROM gates WHERE id = 'deploy';
             UPDATE gates SET instance = 2 WHERE id = 'deploy';",
            values(format!("'{ts}'"))
        ),
        &format!(
            "INSERT INTO openprose.gate_audit_log ({cols}) VALUES ({});
             INSERT INTO openprose.gate_instances (gate_id, instance, run_id, execution_id, prompt,
                    allow, timeout, timeout_at, on_reject, status, created_at, resolved_at,
                    resolved_by, resolution_comment, metadata)
             SELECT id, instance, run_id, execution_id, prompt, allow, timeout, timeout_at,
                    on_reject, status, created_at, resolved_at, resolved_by, resolution_comment,
                    metadata FROM openprose.gates WHERE run_id = '$RUN' AND id = 'deploy';
             UPDATE openprose.gates SET instance = 2 WHERE run_id = '$RUN' AND id = 'deploy';",
            values(format!("'{ts}+00'"))
        ),
    );
    let before = run.snapshot();
    for instance in ["1", "2"] {
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
            .assert()
            .failure();
        assert_eq!(code_of(&a), 9, "instance {instance}: {}", stderr(&a));
        let said = String::from_utf8(a.get_output().stdout.clone()).unwrap();
        assert!(
            said.contains("TAMPERED")
                && said.contains("opens instance 2 while instance 1 has no sealed decision"),
            "instance {instance}: {said}"
        );
    }
    let a = run.cmd().args(["gates", "verify"]).assert().failure();
    assert_eq!(code_of(&a), 9);
    assert_eq!(run.snapshot(), before, "a wait changed the run");
}

fn code_of(a: &assert_cmd::assert::Assert) -> i32 {
    a.get_output().status.code().unwrap_or(-1)
}

/// Finding 3: the allow list widened in the row lets no one in: the agent's approval is
/// refused and logged, and a row saying otherwise is tampered.
fn the_allow_list_is_the_sealed_one(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args([
            "gates", "create", "deploy", "--prompt", "p", "--allow", "user",
        ])
        .assert()
        .success();
    run.view().raw(
        r#"UPDATE gates SET allow = '["user","agent:sbot"]' WHERE id = 'deploy'"#,
        r#"UPDATE openprose.gates SET allow = '["user","agent:sbot"]' WHERE run_id = '$RUN' AND id = 'deploy'"#,
    );
    let before = run.before_refusal("deploy");
    let a = run
        .cmd()
        .args(["approve", "deploy", "--as", "agent:sbot", "--yes"])
        .assert()
        .failure();
    assert_eq!(code_of(&a), 9, "{}", stderr(&a));
    assert!(stderr(&a).contains("allow list"), "{}", stderr(&a));
    run.refused(&before, 1, "the refused decision");
    assert_eq!(wait0(&run, "deploy").0, 9);
    // The row decided by the agent too: still tampered, never approved.
    run.view().raw(
        "UPDATE gates SET status = 'approved', resolved_by = 'agent:sbot' WHERE id = 'deploy'",
        "UPDATE openprose.gates SET status = 'approved', resolved_by = 'agent:sbot' WHERE run_id = '$RUN' AND id = 'deploy'",
    );
    let (code, said) = wait0(&run, "deploy");
    assert_eq!(code, 9, "{said}");
}

const PRINCIPALS: [&str; 7] = [
    "alice",
    "bob",
    "carol",
    "agent:sbot",
    "system",
    "mallory",
    "frank",
];
const EVENTS: [&str; 10] = [
    "created",
    "approved",
    "rejected",
    "timeout",
    "viewed",
    "refused",
    "resumed",
    "escalated",
    "reminder",
    "approval",
];

/// What was really decided: for each gate approved, the instance and the principal.
type Truth = HashMap<String, (i64, String)>;

fn count(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One gate approved on the approval page by alice, so signed with the page's key; returns
/// that key (`ed25519:HEX`).
fn signed_gate(p: &Project, run: &Run) -> String {
    use crate::serve::{add, decide, gate_path, hidden_fields, Server};
    let alice = add(p, "alice");
    run.cmd()
        .args([
            "gates",
            "create",
            "signed",
            "--prompt",
            "ship signed?",
            "--allow",
            "user",
        ])
        .assert()
        .success();
    // The page signs for a project pinned to its key; the pin is lifted after, as the
    // fixture's other gates are decided on the command line.
    p.cmd()
        .args(["principals", "require", "--signed"])
        .assert()
        .success();
    let s = Server::start(p);
    let cookie = s.login(&alice);
    let page = s.get(&gate_path(run, "signed"), Some(&cookie));
    let form = hidden_fields(&page.body, "approve");
    let fields: Vec<(&str, &str)> = form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let r = decide(&s, &cookie, run, "signed", &fields);
    assert_eq!(r.status, 303, "{}", r.body);
    drop(s);
    p.cmd()
        .args(["principals", "require", "--off"])
        .assert()
        .success();
    let shown = p.cmd().args(["serve", "--show-key"]).assert().success();
    String::from_utf8_lossy(&shown.get_output().stdout)
        .trim()
        .to_string()
}

/// The gates, built through the binary; `timed` adds one that times out (it waits a second).
fn build(p: &Project, timed: bool) -> (Run, Truth) {
    let run = p.init();
    let ok = |args: &[&str]| {
        run.cmd().args(args).assert().success();
    };
    let create = |id: &str, allow: &str, extra: &[&str]| {
        let mut c = run.cmd();
        c.args(["gates", "create", id, "--prompt", &format!("ship {id}?")])
            .args(["--allow", allow])
            .args(extra);
        c.assert().success();
    };
    if timed {
        create("late", "user", &["--timeout", "1s"]);
    }
    create("pending", "user", &[]);
    create("approved", "user", &[]);
    ok(&["approve", "approved", "--as", "alice", "--yes"]);
    create("rejected", "user", &["--on-reject", "retry"]);
    ok(&[
        "reject", "rejected", "--as", "bob", "--yes", "--reason", "no",
    ]);
    create("reopened", "user", &[]);
    ok(&["approve", "reopened", "--as", "alice", "--yes"]);
    create("reopened", "user", &["--reopen"]);
    create("reapproved", "user", &[]);
    ok(&[
        "reject",
        "reapproved",
        "--as",
        "bob",
        "--yes",
        "--reason",
        "no",
    ]);
    create("reapproved", "user", &["--reopen"]);
    ok(&["approve", "reapproved", "--as", "carol", "--yes"]);
    create("narrow", "carol", &[]);
    ok(&["approve", "narrow", "--as", "carol", "--yes"]);
    // Team gates: one a vote short of its quorum, one decided by its quorum.
    let token = |name: &str| {
        // A project builds several fixtures: each issues its tokens anew.
        let _ = p.cmd().args(["principals", "revoke", name]).output();
        let a = p.cmd().args(["principals", "add", name]).assert().success();
        String::from_utf8(a.get_output().stdout.clone())
            .unwrap()
            .trim()
            .to_string()
    };
    let (dana, erin) = (token("dana"), token("erin"));
    let vote = |gate: &str, tok: &str| {
        run.cmd()
            .env("PROSE_TOKEN", tok)
            .args(["approve", gate, "--yes"])
            .assert()
            .success();
    };
    create("quorum", "user", &["--require", "2"]);
    vote("quorum", &dana);
    create("teamed", "user", &["--require", "2"]);
    vote("teamed", &dana);
    vote("teamed", &erin);
    // Escalations: frank (of group:oncall) may decide only after a sealed escalation. One gate
    // will never have escalated; with `timed`, another escalates and frank approves it.
    let _ = p.cmd().args(["principals", "revoke", "frank"]).output();
    let frank = {
        let mut c = p.cmd();
        let a = c.args(["principals", "add", "frank", "--group", "oncall"]);
        let a = a.assert().success();
        String::from_utf8(a.get_output().stdout.clone())
            .unwrap()
            .trim()
            .to_string()
    };
    let escalating = ["--escalate-to", "group:oncall", "--escalate-timeout", "1h"];
    create(
        "onduty",
        "alice",
        &[&["--timeout", "1h"][..], &escalating[..]].concat(),
    );
    if timed {
        create(
            "escalated",
            "alice",
            &[&["--timeout", "1s"][..], &escalating[..]].concat(),
        );
        advance_clock(p.root(), 2);
        // Any gate operation sweeps the overdue gate first.
        run.cmd().args(["gates", "show", "late"]).assert().success();
        vote("escalated", &frank);
    }
    // A decision about an input, consumed, then the input rebound: its version 1 is pinned.
    run.bind("topic", "good", None);
    create("about", "user", &["--inputs", "topic"]);
    ok(&["approve", "about", "--as", "alice", "--yes"]);
    ok(&["gates", "wait", "about", "--timeout", "0"]);
    run.bind("topic", "second", None);
    let truth = [
        ("about", 1, "alice"),
        ("approved", 1, "alice"),
        ("reapproved", 2, "carol"),
        ("narrow", 1, "carol"),
        ("teamed", 1, "erin"),
        ("escalated", 1, "frank"),
    ]
    .into_iter()
    .map(|(g, i, by)| (g.to_string(), (i, by.to_string())))
    .collect();
    (run, truth)
}

fn audit_rows(run: &Run) -> Vec<AuditRow> {
    let cols = |ts: &str| {
        format!(
            "SELECT id, gate_id, run_id, event_type, principal, comment, {ts}, metadata,
                    prev_hash, hash, seq, seal"
        )
    };
    let map = |id, gate_id, run_id, event_type, principal, comment, timestamp, metadata| {
        move |prev_hash, hash, seq, seal| AuditRow {
            id,
            gate_id,
            run_id,
            event_type,
            principal,
            comment,
            timestamp,
            metadata,
            prev_hash,
            hash,
            seq,
            seal,
        }
    };
    match &run.pg_url {
        Some(url) => {
            let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
            let sql = format!(
                "{} FROM openprose.gate_audit_log WHERE run_id = $1 ORDER BY id",
                cols("to_char(timestamp AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')")
            );
            c.query(&sql, &[&run.id])
                .unwrap()
                .iter()
                .map(|r| {
                    map(
                        r.get(0),
                        r.get(1),
                        r.get(2),
                        r.get(3),
                        r.get(4),
                        r.get(5),
                        r.get(6),
                        r.get(7),
                    )(r.get(8), r.get(9), r.get(10), r.get(11))
                })
                .collect()
        }
        None => {
            let c = run.conn();
            let sql = format!("{} FROM gate_audit_log ORDER BY id", cols("timestamp"));
            let mut s = c.prepare(&sql).unwrap();
            s.query_map([], |r| {
                Ok(map(
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                )(
                    r.get(8)?, r.get(9)?, r.get(10)?, r.get(11)?
                ))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
        }
    }
}

/// A gate row's columns after its first five, as read.
type GateRest = (
    Option<String>,
    Option<String>,
    Option<String>,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
);

/// The rows of `gates` (or `gate_instances`), as the store maps them.
fn gate_rows(run: &Run, table: &str) -> Vec<GateRow> {
    let text = |c: &str, pg: bool| {
        if pg {
            format!("to_char({c} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')")
        } else {
            c.to_string()
        }
    };
    let sql = |pg: bool| {
        format!(
            "SELECT {}, run_id, execution_id, prompt, allow, timeout, {}, on_reject, status, {}, {},
                    resolved_by, resolution_comment, metadata, instance
               FROM {}{table} {} ORDER BY 1",
            if table == "gates" { "id" } else { "gate_id" },
            text("timeout_at", pg),
            text("created_at", pg),
            text("resolved_at", pg),
            if pg { "openprose." } else { "" },
            if pg { "WHERE run_id = $1" } else { "" },
        )
    };
    let row = |id: String,
               run_id: Option<String>,
               execution_id: Option<i64>,
               prompt: Option<String>,
               allow: Option<String>,
               rest: GateRest| GateRow {
        id,
        run_id,
        execution_id,
        prompt: prompt.unwrap_or_default(),
        allow: allow
            .and_then(|a| serde_json::from_str(&a).ok())
            .unwrap_or_default(),
        timeout: rest.0,
        timeout_at: rest.1,
        on_reject: rest.2,
        status: GateStatus::parse(&rest.3),
        created_at: rest.4,
        resolved_at: rest.5,
        resolved_by: rest.6,
        resolution_comment: rest.7,
        metadata: rest.8,
        instance: rest.9,
    };
    match &run.pg_url {
        Some(url) => {
            let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
            c.query(&sql(true), &[&run.id])
                .unwrap()
                .iter()
                .map(|r| {
                    row(
                        r.get(0),
                        r.get(1),
                        r.get(2),
                        r.get(3),
                        r.get(4),
                        (
                            r.get(5),
                            r.get(6),
                            r.get(7),
                            r.get(8),
                            r.get(9),
                            r.get(10),
                            r.get(11),
                            r.get(12),
                            r.get(13),
                            r.get(14),
                        ),
                    )
                })
                .collect()
        }
        None => {
            let c = run.conn();
            let mut s = c.prepare(&sql(false)).unwrap();
            s.query_map([], |r| {
                Ok(row(
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    (
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                        r.get(8)?,
                        r.get(9)?,
                        r.get(10)?,
                        r.get(11)?,
                        r.get(12)?,
                        r.get(13)?,
                        r.get(14)?,
                    ),
                ))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
        }
    }
}

fn key(run: &Run) -> t::Key {
    t::read_key(&test_home(&run.root).join(".prose"))
        .unwrap()
        .expect("the fixture's audit key")
}

/// The content of a row that its hash covers (everything but the database's own id).
fn content(r: &AuditRow) -> String {
    format!(
        "{:?}",
        (
            &r.gate_id,
            &r.run_id,
            &r.event_type,
            &r.principal,
            &r.comment,
            &r.timestamp,
            &r.metadata,
            &r.prev_hash,
            &r.hash,
            r.seq,
            &r.seal
        )
    )
}

fn pick<'a, T>(rng: &mut StdRng, items: &'a [T]) -> &'a T {
    &items[rng.random_range(0..items.len())]
}

/// One random metadata object for an inserted or edited event.
fn metadata(rng: &mut StdRng, gates: &[GateRow]) -> String {
    let g = pick(rng, gates);
    let mut m = serde_json::json!({ "instance": rng.random_range(1..=3) });
    if rng.random_bool(0.6) {
        m["prompt_hash"] = if rng.random_bool(0.7) {
            sha256(&g.prompt)
        } else {
            sha256("DROP PRODUCTION DATABASE")
        }
        .into();
    }
    if rng.random_bool(0.6) {
        m["allow"] = serde_json::json!([pick(rng, &["user", "agent:sbot", "mallory"])]);
    }
    // An escalation's or a vote's fields, as the tool writes them.
    if rng.random_bool(0.3) {
        m["to"] = "group:oncall".into();
        m["via"] = serde_json::json!(["group:oncall"]);
        m["authenticated"] = "token".into();
        m["timeout_at"] = g.timeout_at.clone().into();
    }
    m.to_string()
}

fn sha256(text: &str) -> String {
    use sha2::{Digest, Sha256};
    let hex: String = Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// A random audit row an attacker could write: any id, seq, event, principal and instance;
/// a hash chained after the log's tip, or copied; a seal copied from a sealed row, or none.
fn forged_row(rng: &mut StdRng, rows: &[AuditRow], gates: &[GateRow], run_id: &str) -> AuditRow {
    let max_id = rows.iter().map(|r| r.id).max().unwrap_or(0);
    let tip = rows
        .iter()
        .filter_map(|r| r.seq.map(|s| (s, r)))
        .max_by_key(|(s, _)| *s);
    let gate = pick(rng, gates);
    let event = *pick(rng, &EVENTS);
    let mut r = AuditRow {
        id: *pick(rng, &[-1, 0, max_id / 2, max_id + 1, max_id + 1000]),
        gate_id: gate.id.clone(),
        run_id: run_id.to_string(),
        event_type: event.to_string(),
        principal: Some(pick(rng, &PRINCIPALS).to_string()),
        comment: None,
        timestamp: Some("2026-11-24 00:00:00".into()),
        metadata: Some(metadata(rng, gates)),
        prev_hash: None,
        hash: None,
        seq: None,
        seal: None,
    };
    match rng.random_range(0..4) {
        0 => {}
        1 => r.seq = tip.map(|(s, _)| s + 1),
        2 => r.seq = Some(rng.random_range(1..=tip.map_or(1, |(s, _)| s))),
        _ => r.seq = Some(rng.random_range(-2..1000)),
    }
    if rng.random_bool(0.7) {
        let prev = tip.and_then(|(_, t)| t.hash.clone()).unwrap_or_default();
        r.prev_hash = Some(prev.clone());
        // The chain hash anyone can compute (docs/gates-and-trust.md); only the key seals it.
        r.hash = Some(r.chain_hash(&prev));
    }
    if rng.random_bool(0.5) {
        let donor = pick(rng, rows);
        r.seal = donor.seal.clone();
        if rng.random_bool(0.3) {
            r.hash = donor.hash.clone();
            r.prev_hash = donor.prev_hash.clone();
        }
    }
    r
}

/// Applies one random mutation to the rows; returns the ids of sealed rows it changed.
fn mutate(
    rng: &mut StdRng,
    rows: &mut Vec<AuditRow>,
    gates: &mut [GateRow],
    instances: &[GateRow],
    run_id: &str,
) {
    match rng.random_range(0..12) {
        9..=11 => {
            // Any column of a gate, to any value of its type: times in every form the
            // databases read.
            let g = rng.random_range(0..gates.len());
            let other = pick(rng, gates).clone();
            mutate_column(rng, &mut gates[g], &other);
        }
        0 => {
            let g = rng.random_range(0..gates.len());
            let status = *pick(rng, &["pending", "approved", "rejected", "timeout"]);
            gates[g].status = GateStatus::parse(status);
            gates[g].resolved_by =
                (status != "pending").then(|| pick(rng, &PRINCIPALS).to_string());
        }
        1 => {
            let g = rng.random_range(0..gates.len());
            match rng.random_range(0..5) {
                0 => gates[g].instance = rng.random_range(1..=3),
                1 => {
                    gates[g].allow = vec![
                        "user".into(),
                        pick(rng, &["agent:sbot", "mallory"]).to_string(),
                    ]
                }
                2 => gates[g].prompt = "DROP PRODUCTION DATABASE".into(),
                3 => gates[g].on_reject = Some("continue".into()),
                _ => gates[g].timeout_at = None,
            }
        }
        2 => {
            // A gate rolled back to an earlier opening.
            if !instances.is_empty() {
                let old = pick(rng, instances).clone();
                if let Some(g) = gates.iter_mut().find(|g| g.id == old.id) {
                    *g = old;
                }
            }
        }
        3 | 4 => {
            let r = forged_row(rng, rows, gates, run_id);
            rows.retain(|x| x.id != r.id);
            rows.push(r);
        }
        5 => {
            if !rows.is_empty() {
                let i = rng.random_range(0..rows.len());
                rows.remove(i);
            }
        }
        6 | 7 => {
            if !rows.is_empty() {
                let i = rng.random_range(0..rows.len());
                let other = pick(rng, gates).id.clone();
                let meta = metadata(rng, gates);
                let r = &mut rows[i];
                match rng.random_range(0..7) {
                    0 => r.principal = Some(pick(rng, &PRINCIPALS).to_string()),
                    1 => r.event_type = pick(rng, &EVENTS).to_string(),
                    2 => r.metadata = Some(meta),
                    3 => r.gate_id = other,
                    4 => r.seq = r.seq.map(|s| s + 1).or(Some(1)),
                    5 => r.seal = None,
                    _ => r.timestamp = Some("2030-01-01 00:00:00".into()),
                }
            }
        }
        _ => {
            // A sealed row copied under another id (and perhaps moved to another gate).
            if !rows.is_empty() {
                let mut r = pick(rng, rows).clone();
                r.id = rows.iter().map(|x| x.id).max().unwrap_or(0) + 1;
                if rng.random_bool(0.5) {
                    r.gate_id = pick(rng, gates).id.clone();
                }
                rows.push(r);
            }
        }
    }
    rows.sort_by_key(|r| r.id);
}

/// A time in one of the forms SQLite's date functions or PostgreSQL's `timestamptz` input
/// read, generated from their grammars (SQLite: `YYYY-MM-DD[ T]HH:MM[:SS[.SSS]]` with an
/// optional `[+-]HH:MM` or `Z`, a bare date or time, `now`, a Julian day or Unix number;
/// PostgreSQL besides: `infinity`, `-infinity`, `epoch`, `today`, `J`-prefixed Julian days,
/// `24:00:00`), around `base` (a stored time) or anywhere, with stray spaces.
pub fn time_form(rng: &mut StdRng, base: Option<&str>) -> String {
    let base = base
        .and_then(|b| chrono::NaiveDateTime::parse_from_str(b.trim(), "%Y-%m-%d %H:%M:%S").ok())
        .unwrap_or_else(|| {
            chrono::DateTime::from_timestamp(rng.random_range(0..4_102_444_800), 0)
                .unwrap()
                .naive_utc()
        });
    let shift = *pick(
        rng,
        &[0i64, 0, 1, -1, 3600, -3600, 86_400 * 365, -86_400 * 365],
    );
    let t = base + chrono::Duration::seconds(shift);
    let date = t.format("%Y-%m-%d").to_string();
    let hms = t.format("%H:%M:%S").to_string();
    let sep = *pick(rng, &[" ", "T"]);
    let tz = *pick(
        rng,
        &[
            "", "", "Z", "+00:00", "-00:00", " +00:00", "+01:00", "-05:30", "+00",
        ],
    );
    let frac = *pick(rng, &["", "", ".000", ".5", ".999999"]);
    let julian = 2_440_587.5 + t.and_utc().timestamp() as f64 / 86_400.0;
    let text = match rng.random_range(0..14) {
        0 => format!("{date}{sep}{hms}{frac}{tz}"),
        1 => format!("{date}{sep}{}{tz}", t.format("%H:%M")),
        2 => date.clone(),
        3 => hms.clone(),
        4 => format!("{julian}"),
        5 => format!("J{}", julian.floor() as i64),
        6 => format!("{}", t.and_utc().timestamp()),
        7 => pick(
            rng,
            &["now", "infinity", "-infinity", "epoch", "today", "tomorrow"],
        )
        .to_string(),
        8 => {
            // The day before at 24:00, the same instant as midnight.
            let before = (t - chrono::Duration::days(1)).format("%Y-%m-%d");
            format!("{before} 24:00:00{tz}")
        }
        9 => format!("{date} {hms}"),
        10 => t.format("%B %-d, %Y %H:%M:%S").to_string(),
        11 => format!("{date}{sep}{hms}{frac}"),
        12 => String::new(),
        _ => format!("{date} {hms}{tz}"),
    };
    match rng.random_range(0..6) {
        0 => format!(" {text}"),
        1 => format!("{text} "),
        _ => text,
    }
}

/// Sets one column of a gate row to another value of its type (or NULL), or to another
/// gate's value.
fn mutate_column(rng: &mut StdRng, g: &mut GateRow, other: &GateRow) {
    let time = |rng: &mut StdRng, t: &Option<String>| -> Option<String> {
        match rng.random_range(0..8) {
            0 => None,
            1 => other.timeout_at.clone(),
            _ => Some(time_form(rng, t.as_deref())),
        }
    };
    let text = |rng: &mut StdRng, was: &Option<String>| -> Option<String> {
        match rng.random_range(0..5) {
            0 => None,
            1 => Some(String::new()),
            2 => was.as_ref().map(|w| format!("{w} ")),
            3 => Some("LGTM, ship to prod too".into()),
            _ => Some(pick(rng, &PRINCIPALS).to_string()),
        }
    };
    match rng.random_range(0..15) {
        0 => g.run_id = text(rng, &g.run_id),
        1 => {
            g.execution_id =
                (*pick(rng, &[None, Some(0), Some(1), Some(2), Some(99)])).or(other.execution_id)
        }
        2 => g.prompt = text(rng, &Some(g.prompt.clone())).unwrap_or_default(),
        3 => g.allow = other.allow.clone(),
        4 => g.timeout = text(rng, &g.timeout),
        5 | 6 => g.timeout_at = time(rng, &g.timeout_at),
        7 => g.on_reject = text(rng, &g.on_reject),
        8 => {
            const STATUSES: [&str; 6] =
                ["pending", "approved", "rejected", "timeout", "Approved", ""];
            g.status = GateStatus::parse(pick::<&str>(rng, &STATUSES))
        }
        9 => g.created_at = time(rng, &g.created_at),
        10 => g.resolved_at = time(rng, &g.resolved_at),
        11 => g.resolved_by = text(rng, &g.resolved_by),
        12 => g.resolution_comment = text(rng, &g.resolution_comment),
        13 => g.metadata = text(rng, &g.metadata),
        _ => g.instance = other.instance,
    }
}

/// Every column of a gate row, as text: what any reader shows or acts on.
fn shown_columns(g: &GateRow) -> Vec<(&'static str, String)> {
    let GateRow {
        id,
        run_id,
        execution_id: _,
        prompt,
        allow,
        timeout,
        timeout_at,
        on_reject,
        status,
        created_at,
        resolved_at,
        resolved_by,
        resolution_comment,
        metadata,
        instance,
    } = g;
    vec![
        ("id", id.clone()),
        ("run_id", format!("{run_id:?}")),
        ("prompt", prompt.clone()),
        ("allow", format!("{allow:?}")),
        ("timeout", format!("{timeout:?}")),
        ("timeout_at", format!("{timeout_at:?}")),
        ("on_reject", format!("{on_reject:?}")),
        ("status", status.as_str().to_string()),
        ("created_at", format!("{created_at:?}")),
        ("resolved_at", format!("{resolved_at:?}")),
        ("resolved_by", format!("{resolved_by:?}")),
        ("resolution_comment", format!("{resolution_comment:?}")),
        ("metadata", format!("{metadata:?}")),
        ("instance", instance.to_string()),
    ]
}

/// Whether an attested gate on an intact log shows anything its sealed log does not: each of
/// its columns against the row as the binary wrote it (every fixture gate was made by the
/// binary, so as built each column is what was sealed).
fn shown_differs(report: &t::ChainReport, gates: &[GateRow], built: &[GateRow]) -> Option<String> {
    if report.is_broken() {
        return None;
    }
    for g in gates {
        if report.gate(&g.id) != t::Integrity::Attested {
            continue;
        }
        // A gate the fixture made through the binary, and that nothing sealed, claims nothing.
        let Some(b) = built.iter().find(|b| b.id == g.id) else {
            continue;
        };
        if report.derived.get(&g.id).is_none_or(|d| d.instance == 0) {
            continue;
        }
        for ((name, now), (_, was)) in shown_columns(g).into_iter().zip(shown_columns(b)) {
            if now != was {
                return Some(format!(
                    "gate {} is shown as attested with its {name} {now} where the binary wrote {was}",
                    g.id
                ));
            }
        }
    }
    None
}

/// Checks the promise for one mutated run: (what failed, if anything).
fn violation(
    report: &t::ChainReport,
    gates: &[GateRow],
    truth: &Truth,
    sealed_changed: bool,
) -> Option<String> {
    violation_of(report, gates, truth, truth, sealed_changed)
}

/// [`violation`], where what may stand (`standing`: fewer gates under `--require-signed`)
/// differs from what the derivation may report as decided (`decided`).
fn violation_of(
    report: &t::ChainReport,
    gates: &[GateRow],
    standing: &Truth,
    decided: &Truth,
    sealed_changed: bool,
) -> Option<String> {
    let truth = standing;
    for g in gates {
        let standing = match report.gate(&g.id) {
            t::Integrity::Attested => report.first_broken.is_none(),
            _ => false,
        };
        if standing && g.status == GateStatus::Approved {
            let real = truth.get(&g.id);
            if real != Some(&(g.instance, g.resolved_by.clone().unwrap_or_default())) {
                return Some(format!(
                    "gate {} stands approved (instance {}, by {:?}), but it really is {real:?}",
                    g.id, g.instance, g.resolved_by
                ));
            }
        }
        if !report.is_broken() {
            if let Some(d) = report.derived.get(&g.id) {
                if d.status() == GateStatus::Approved {
                    let (_, by, _) = d.decision.clone().unwrap();
                    if decided.get(&g.id) != Some(&(d.instance, by.clone())) {
                        return Some(format!(
                            "gate {} derives approved (instance {}, by {by}) on an intact log, but it was not",
                            g.id, d.instance
                        ));
                    }
                }
            }
        }
    }
    if sealed_changed && !report.is_broken() {
        return Some("a sealed row was changed, but the log verifies intact".into());
    }
    None
}

fn no_mutation_of_the_rows_makes_a_decision_stand(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let (run, mut truth) = build(&p, true);
    // One decision signed by the approval page: under `--require-signed` it is the only one
    // that may stand.
    let page_key = signed_gate(&p, &run);
    truth.insert("signed".into(), (1, "alice".into()));
    let rows = audit_rows(&run);
    let gates = gate_rows(&run, "gates");
    let instances = gate_rows(&run, "gate_instances");
    let key = key(&run);
    // The anchor this machine keeps: the newest sealed row, as the fixture left it.
    let tip = rows
        .iter()
        .filter(|r| r.seq.is_some())
        .max_by_key(|r| r.seq)
        .unwrap();
    let anchor = t::Anchor {
        seq: tip.seq.unwrap(),
        hash: tip.hash.clone().unwrap(),
        named: None,
    };
    // As built, every gate stands as it was decided; signed, only the page's decision.
    let report = t::check(&rows, &gates, Some(&run.id), Some(&key), Some(&anchor));
    assert!(
        !report.is_broken() && !report.is_unattested(),
        "the fixture verifies: {report:?}"
    );
    assert_eq!(violation(&report, &gates, &truth, false), None);
    let signed_truth: Truth = truth
        .iter()
        .filter(|(g, _)| *g == "signed")
        .map(|(g, v)| (g.clone(), v.clone()))
        .collect();
    let mut report = t::check(&rows, &gates, Some(&run.id), Some(&key), Some(&anchor));
    let place = place_of(&p);
    t::check_signed(&mut report, &rows, &gates, &page_key, &place).unwrap();
    assert_eq!(
        violation_of(&report, &gates, &signed_truth, &truth, false),
        None
    );
    assert_eq!(report.gate("signed"), t::Integrity::Attested);
    let sealed: Vec<String> = rows
        .iter()
        .filter(|r| r.seal.is_some())
        .map(content)
        .collect();
    let (seeds, fixed) = match std::env::var("PROSE_FORGERY_SEED") {
        Ok(s) => (
            s.parse::<u64>().unwrap()..s.parse::<u64>().unwrap() + 1,
            true,
        ),
        Err(_) => (0..count("PROSE_FORGERY_CASES", 10_000), false),
    };
    let base = if b == Backend::Sqlite { 0 } else { 1 << 32 };
    let mut approvals_seen = 0;
    for case in seeds {
        let seed = if fixed { case } else { base + case };
        let mut rng = StdRng::seed_from_u64(seed);
        let (mut r, mut g) = (rows.clone(), gates.clone());
        for _ in 0..rng.random_range(1..=4) {
            mutate(&mut rng, &mut r, &mut g, &instances, &run.id);
        }
        // A sealed row's id is the database's own (the seal covers its seq): a row is
        // changed when its sealed content is no longer in the log.
        let now: std::collections::HashSet<String> = r.iter().map(content).collect();
        let changed = sealed.iter().any(|c| !now.contains(c));
        let report = t::check(&r, &g, Some(&run.id), Some(&key), Some(&anchor));
        approvals_seen += g
            .iter()
            .filter(|x| {
                x.status == GateStatus::Approved && report.gate(&x.id) == t::Integrity::Attested
            })
            .count();
        let why =
            violation(&report, &g, &truth, changed).or_else(|| shown_differs(&report, &g, &gates));
        if let Some(why) = why {
            if fixed {
                eprintln!("rows before: {rows:#?}\nrows after: {r:#?}\nreport: {report:#?}");
            }
            panic!("{b:?}: seed {seed} (replay with PROSE_FORGERY_SEED={seed}): {why}");
        }
        // As `gates wait --require-signed` sees it: only the page's own decision may stand.
        // (The same check of the same rows, then their signatures.)
        let mut signed = report;
        t::check_signed(&mut signed, &r, &g, &page_key, &place).unwrap();
        if let Some(why) = violation_of(&signed, &g, &signed_truth, &truth, changed) {
            panic!("{b:?}: seed {seed} (replay with PROSE_FORGERY_SEED={seed}), signed: {why}");
        }
    }
    // The test can fail: genuine approvals survive the mutations that leave them alone.
    assert!(
        approvals_seen > 0,
        "no case kept a genuine approval standing"
    );
}

/// The place a page's signature names: a SQLite project's id and path, or its server and
/// database (read by the test itself).
pub fn place_of(p: &Project) -> String {
    match &p.pg_url {
        Some(url) => postgres::Client::connect(url, postgres::NoTls)
            .unwrap()
            .query_one(
                "SELECT 'postgres:' || system_identifier::text || '/' || current_database() FROM pg_control_system()",
                &[],
            )
            .unwrap()
            .get(0),
        // A SQLite project's id, and where its `.prose/` is.
        None => format!(
            "{} at {}",
            std::fs::read_to_string(p.root().join(".prose/project-id"))
                .unwrap()
                .trim(),
            std::fs::canonicalize(p.root().join(".prose"))
                .unwrap()
                .display()
        ),
    }
}

/// A mutation as raw SQL on the run's own database (triggers dropped first).
fn raw_mutation(
    rng: &mut StdRng,
    run: &Run,
    rows: &[AuditRow],
    gates: &[GateRow],
    focus: &str,
) -> String {
    let pg = run.pg_url.is_some();
    let (log, gt, inst) = if pg {
        (
            "openprose.gate_audit_log",
            "openprose.gates",
            "openprose.gate_instances",
        )
    } else {
        ("gate_audit_log", "gates", "gate_instances")
    };
    let lit = |v: &Option<String>| match v {
        Some(s) => format!("'{}'", s.replace('\'', "''")),
        None => "NULL".into(),
    };
    let num = |v: Option<i64>| v.map_or("NULL".to_string(), |n| n.to_string());
    let now = if pg { "now()" } else { "datetime('now')" };
    let run_is = format!("run_id = '{}'", run.id);
    let g = if rng.random_bool(0.8) {
        focus.to_string()
    } else {
        pick(rng, gates).id.clone()
    };
    match rng.random_range(0..14) {
        10 | 11 => {
            // A time column, in any form the database reads.
            let col = *pick(rng, &["timeout_at", "created_at", "resolved_at"]);
            let was = gates.iter().find(|x| x.id == g).and_then(|x| match col {
                "timeout_at" => x.timeout_at.clone(),
                "created_at" => x.created_at.clone(),
                _ => x.resolved_at.clone(),
            });
            let form = time_form(rng, was.as_deref());
            // A form PostgreSQL does not read is an error there, which writes nothing.
            if pg {
                format!(
                    "DO $$ BEGIN UPDATE {gt} SET {col} = '{form}' WHERE id = '{g}' AND {run_is};
                     EXCEPTION WHEN others THEN NULL; END $$;"
                )
            } else {
                format!("UPDATE {gt} SET {col} = '{form}' WHERE id = '{g}' AND {run_is};")
            }
        }
        12 => {
            let col = *pick(rng, &["resolution_comment", "timeout", "metadata", "resolved_by", "execution_id"]);
            let value = match col {
                "execution_id" => "NULL".to_string(),
                "metadata" => "'{\"x\": 1}'".to_string(),
                _ => "'LGTM, ship to prod too'".to_string(),
            };
            format!("UPDATE {gt} SET {col} = {value} WHERE id = '{g}' AND {run_is};")
        }
        13 => {
            // The history of the decided input, rewritten so that another version holds
            // what was decided.
            let (h, b) = if pg {
                ("openprose.binding_history", "openprose.bindings")
            } else {
                ("binding_history", "bindings")
            };
            let run_is = if pg { format!(" AND {run_is}") } else { String::new() };
            format!(
                "UPDATE {h} SET value = 'EVIL: deploy to prod' WHERE name = 'topic' AND n = 1{run_is};
                 UPDATE {h} SET value = 'good' WHERE name = 'topic' AND n = 2{run_is};
                 UPDATE {b} SET value = 'good' WHERE name = 'topic'{run_is};"
            )
        }
        0 | 1 => {
            let status = *pick(rng, &["pending", "approved", "rejected", "timeout"]);
            let by = *pick(rng, &PRINCIPALS);
            format!(
                "UPDATE {gt} SET status = '{status}', resolved_by = '{by}', resolved_at = {now} WHERE id = '{g}' AND {run_is};"
            )
        }
        2 | 3 => {
            let set = match rng.random_range(0..4) {
                0 => format!("instance = {}", rng.random_range(1..=3)),
                1 => r#"allow = '["user","agent:sbot"]'"#.to_string(),
                2 => "prompt = 'DROP PRODUCTION DATABASE'".to_string(),
                _ => "on_reject = 'continue'".to_string(),
            };
            format!("UPDATE {gt} SET {set} WHERE id = '{g}' AND {run_is};")
        }
        4 => format!(
            "UPDATE {gt} SET (prompt, allow, status, resolved_by, resolved_at, instance) =
               (SELECT prompt, allow, status, resolved_by, resolved_at, instance FROM {inst} i
                 WHERE i.gate_id = {gt}.id AND i.{run_is} ORDER BY instance LIMIT 1)
              WHERE id = '{g}' AND {run_is} AND EXISTS (SELECT 1 FROM {inst} i WHERE i.gate_id = '{g}' AND i.{run_is});"
        ),
        5 | 6 => {
            let r = forged_row(rng, rows, gates, &run.id);
            format!(
                "DELETE FROM {log} WHERE id = {id};
                 INSERT INTO {log} (id, gate_id, run_id, event_type, principal, comment, timestamp, metadata, prev_hash, hash, seq, seal)
                 VALUES ({id}, {}, {}, {}, {}, NULL, {}, {}, {}, {}, {}, {});",
                lit(&Some(r.gate_id.clone())),
                lit(&Some(r.run_id.clone())),
                lit(&Some(r.event_type.clone())),
                lit(&r.principal),
                lit(&r.timestamp),
                lit(&r.metadata),
                lit(&r.prev_hash),
                lit(&r.hash),
                num(r.seq),
                lit(&r.seal),
                id = r.id,
            )
        }
        7 => format!(
            "DELETE FROM {log} WHERE id = {};",
            pick(rng, rows).id
        ),
        _ => {
            let r = pick(rng, rows);
            let set = match rng.random_range(0..4) {
                0 => format!("principal = '{}'", pick(rng, &PRINCIPALS)),
                1 => format!("event_type = '{}'", pick(rng, &EVENTS)),
                2 => format!("gate_id = '{g}'"),
                _ => format!("metadata = {}", lit(&Some(metadata(rng, gates)))),
            };
            format!("UPDATE {log} SET {set} WHERE id = {};", r.id)
        }
    }
}

/// Raw SQL over a fixture built through the binary, then the tool's decisions, waits, reads
/// and verification run in this process (`Run::here`: the commands as the binary runs them,
/// without a process per step); `a_raw_decision_below_the_chain_is_never_a_decision` and the
/// rest keep the same judgements through the binary.
fn no_raw_sql_makes_gates_wait_accept_a_decision(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let cases = count("PROSE_FORGERY_BINARY_CASES", 100);
    let base = if b == Backend::Sqlite {
        7 << 40
    } else {
        9 << 40
    };
    let mut genuine_exit_0 = 0;
    // The fixture is built once through the binary; each case starts from a copy of it.
    let (run, built_truth) = build(&p, false);
    let rows = audit_rows(&run);
    let gates = gate_rows(&run, "gates");
    let start = p.snapshot();
    for case in 0..cases {
        let seed = base + case;
        let mut rng = StdRng::seed_from_u64(seed);
        if case > 0 {
            p.restore(&start);
        }
        let truth = built_truth.clone();
        // Most mutations aim at one gate, which the tool may then be asked to decide.
        let focus = if rng.random_bool(0.6) {
            pick(&mut rng, &["pending", "reopened", "quorum"]).to_string()
        } else {
            pick(&mut rng, &gates).id.clone()
        };
        let mut sql = String::new();
        for _ in 0..rng.random_range(1..=3) {
            sql += &raw_mutation(&mut rng, &run, &rows, &gates, &focus);
        }
        run.view().raw(
            &format!(
                "DROP TRIGGER IF EXISTS gate_audit_log_no_update;
                 DROP TRIGGER IF EXISTS gate_audit_log_no_delete;
                 DROP INDEX IF EXISTS idx_gate_audit_seq; {sql}"
            ),
            &format!(
                "ALTER TABLE openprose.gate_audit_log DISABLE TRIGGER gate_audit_log_append_only;
                 DROP INDEX IF EXISTS openprose.idx_gate_audit_seq; {sql}
                 SELECT setval(pg_get_serial_sequence('openprose.gate_audit_log', 'id'),
                               (SELECT max(id) FROM openprose.gate_audit_log));
                 ALTER TABLE openprose.gate_audit_log ENABLE TRIGGER gate_audit_log_append_only;"
            ),
        );
        let after = audit_rows(&run);
        let kept: std::collections::HashSet<String> = after.iter().map(content).collect();
        let changed = rows
            .iter()
            .filter(|r| r.seal.is_some())
            .any(|r| !kept.contains(&content(r)));
        // Half the cases then decide through the tool, as anyone might, on the mutated rows:
        // a decision stands only for a gate really pending, by a principal really allowed.
        let mut truth = truth;
        if rng.random_bool(0.8) {
            let g = focus.clone();
            let by = *pick(&mut rng, &["alice", "agent:sbot", "agent:sbot", "mallory"]);
            let decided = run.here(&["approve", &g, "--as", by, "--yes"]).code;
            let really_pending = match g.as_str() {
                "pending" => Some(1),
                "reopened" => Some(2),
                _ => None,
            };
            if let (0, Some(instance)) = (decided, really_pending) {
                if !by.starts_with("agent:") {
                    truth.insert(g.clone(), (instance, by.to_string()));
                }
            }
            sql += &format!("-- then approve {g} --as {by}\n");
        }
        let now = gate_rows(&run, "gates");
        for g in &now {
            let out = run.here(&["gates", "wait", &g.id, "--timeout", "0"]);
            if out.code == 0 {
                let v = out.json;
                let by = v["resolved_by"].as_str().unwrap_or_default().to_string();
                assert_eq!(
                    truth.get(&g.id),
                    Some(&(v["instance"].as_i64().unwrap_or(1), by)),
                    "{b:?}: seed {seed}: gates wait accepted gate {} after: {sql}",
                    g.id
                );
                // What it shows of the decision is what the binary wrote (a gate decided in
                // this case through the tool is new, and has nothing to compare with).
                if let Some(built) = gates
                    .iter()
                    .find(|x| x.id == g.id && !x.status.is_pending())
                {
                    for col in [
                        "resolved_at",
                        "resolution_comment",
                        "timeout_at",
                        "created_at",
                        "timeout",
                        "metadata",
                        "run_id",
                    ] {
                        let was = shown_columns(built)
                            .into_iter()
                            .find(|(n, _)| *n == col)
                            .unwrap()
                            .1;
                        let shown = shown_columns(&GateRow {
                            resolved_at: v["resolved_at"].as_str().map(str::to_string),
                            resolution_comment: v["resolution_comment"]
                                .as_str()
                                .map(str::to_string),
                            timeout_at: v["timeout_at"].as_str().map(str::to_string),
                            created_at: v["created_at"].as_str().map(str::to_string),
                            timeout: v["timeout"].as_str().map(str::to_string),
                            metadata: v["metadata"].as_str().map(str::to_string),
                            execution_id: v["execution_id"].as_i64(),
                            run_id: v["run_id"].as_str().map(str::to_string),
                            ..built.clone()
                        })
                        .into_iter()
                        .find(|(n, _)| *n == col)
                        .unwrap()
                        .1;
                        assert_eq!(shown, was, "{b:?}: seed {seed}: gate {} accepted showing a {col} the binary did not write, after: {sql}", g.id);
                    }
                }
                genuine_exit_0 += 1;
            }
        }
        // The decided version of the input reads as decided, or not at all (exit 9).
        let got = run.here(&["get", "topic", "--version", "1"]);
        if got.code == 0 {
            assert_eq!(
                got.json["value"], "good",
                "{b:?}: seed {seed}: the decided version reads otherwise after: {sql}"
            );
        } else {
            assert_eq!(got.code, 9, "{b:?}: seed {seed}: {sql}: {got:?}");
        }
        if changed || sql.contains("binding_history") {
            let code = run.here(&["gates", "verify"]).code;
            assert_eq!(
                code, 9,
                "{b:?}: seed {seed}: verify did not find a changed sealed row after: {sql}"
            );
        }
    }
    assert!(
        cases == 0 || genuine_exit_0 > 0,
        "no genuine approval was ever accepted"
    );
}

/// An import raises no row's trust by itself: a run sealed on another machine comes in with
/// its decisions unattested here; `--vouch` seals them here, and the import's audit event
/// says for how many rows. An export re-chained under a made-up key, its approval given to
/// another principal, comes in unattested: never a decision.
fn an_import_raises_no_rows_trust_by_itself(b: Backend) {
    let Some(dest) = Project::on(b) else { return };
    let home = Project::new();
    let run = home.init();
    run.cmd()
        .args(["gates", "create", "deploy", "--prompt", "p"])
        .assert()
        .success();
    run.cmd()
        .args(["approve", "deploy", "--as", "alice", "--yes"])
        .assert()
        .success();
    let e = home.root().join("export");
    run.cmd().args(["export", "-o"]).arg(&e).assert().success();
    let imported = |p: &Project, extra: &[&str], dir: &std::path::Path| {
        let a = p
            .cmd()
            .args(["--json", "import"])
            .args(extra)
            .arg(dir)
            .assert()
            .success();
        stdout_json(&a)
    };
    // The destination has its own audit key (made at its first run).
    dest.init();
    let v = imported(&dest, &[], &e);
    assert_eq!(v["vouched"], false, "{v}");
    assert!(v["sealed_elsewhere"].as_u64().unwrap() >= 3, "{v}");
    // Each decision a person vouching would make count is named, with the key its seal names
    // (which this machine cannot check: another machine's, or one made up).
    let named = v["decisions_sealed_elsewhere"].to_string();
    assert!(
        named.contains("approved deploy by alice at ") && named.contains("sealed under key "),
        "{v}"
    );
    // A machine with no audit key yet counts every sealed row as sealed elsewhere.
    if let Some(keyless) = Project::on(b) {
        let v = imported(&keyless, &[], &e);
        assert!(v["sealed_elsewhere"].as_u64().unwrap() >= 3, "{v}");
        assert!(
            v["decisions_sealed_elsewhere"]
                .to_string()
                .contains("approved deploy"),
            "{v}"
        );
    }
    let landed = dest.run(&run.id);
    let (code, said) = wait0(&landed, "deploy");
    assert_eq!(code, 10, "{said}");
    let events = landed.view().events("");
    assert_eq!(events.last().unwrap().0, "imported");
    assert_eq!(events.last().unwrap().2["vouched"], 0);

    let Some(other) = Project::on(b) else { return };
    other.init();
    let v = imported(&other, &["--vouch"], &e);
    assert_eq!(v["vouched"], true, "{v}");
    let vouched = other.run(&run.id);
    assert_eq!(wait0(&vouched, "deploy").0, 0);
    vouched.cmd().args(["gates", "verify"]).assert().success();
    let events = vouched.view().events("");
    let n = events.last().unwrap().2["vouched"].as_u64().unwrap();
    assert!(n >= 3, "{events:?}");

    // The export rewritten: the approval given to mallory, every row re-chained and sealed
    // under a key id no one has.
    let forged = home.root().join("forged");
    run.cmd()
        .args(["export", "-o"])
        .arg(&forged)
        .assert()
        .success();
    {
        let c = rusqlite::Connection::open(forged.join("state.db")).unwrap();
        c.execute_batch(
            "DROP TRIGGER IF EXISTS gate_audit_log_no_update;
             UPDATE gate_audit_log SET principal = 'mallory' WHERE event_type = 'approved';
             UPDATE gates SET resolved_by = 'mallory' WHERE id = 'deploy';",
        )
        .unwrap();
        let rows: Vec<AuditRow> = {
            let mut st = c
                .prepare(
                    "SELECT id, gate_id, run_id, event_type, principal, comment, timestamp, metadata,
                            prev_hash, hash, seq, seal FROM gate_audit_log WHERE seq IS NOT NULL ORDER BY seq",
                )
                .unwrap();
            st.query_map([], |r| {
                Ok(AuditRow {
                    id: r.get(0)?,
                    gate_id: r.get(1)?,
                    run_id: r.get(2)?,
                    event_type: r.get(3)?,
                    principal: r.get(4)?,
                    comment: r.get(5)?,
                    timestamp: r.get(6)?,
                    metadata: r.get(7)?,
                    prev_hash: r.get(8)?,
                    hash: r.get(9)?,
                    seq: r.get(10)?,
                    seal: r.get(11)?,
                })
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
        };
        let mut prev = String::new();
        for r in rows {
            let hash = r.chain_hash(&prev);
            c.execute(
                "UPDATE gate_audit_log SET prev_hash = ?1, hash = ?2, seal = ?3 WHERE id = ?4",
                rusqlite::params![
                    prev,
                    hash,
                    format!("hmac-sha256:00000000deadbeef:{}", "0".repeat(64)),
                    r.id
                ],
            )
            .unwrap();
            prev = hash;
        }
    }
    let Some(third) = Project::on(b) else { return };
    third.init();
    imported(&third, &[], &forged);
    let (code, said) = wait0(&third.run(&run.id), "deploy");
    assert_eq!(code, 10, "{said}");
    assert!(!said.contains("approved by"), "{said}");
}

/// Runs a reproduction of the independent battery in a fresh SQLite project: `$P` the binary,
/// `$R` the run, `$DB` its database, `$D` its directory; prints the exit codes the script
/// echoes. The script's own steps are the attack's, as found.
fn battery(script: &str) -> String {
    let p = Project::new();
    let run = p.init();
    let out = sh(
        p.root(),
        &format!(
            "set -u; P=$BIN; R={}; export PROSE_RUN=$R; D=.prose/runs/$R; DB=$D/state.db; export USER=alice; {script}",
            run.id
        ),
    )
    .output()
    .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    said
}

/// Each reproduction the independent battery found against the first cut of the derivation,
/// as a test: every one ends with `gates wait` not 0 and `gates verify` not "intact".
#[test]
fn the_batterys_reproductions_fail_closed() {
    // 1. A pending gate "decided" in its row, reopened for someone else, approved by them
    // (an agent cannot be allowed at all).
    let said = battery(
        r#"$P gates create deploy --prompt "DROP PROD" --allow user >/dev/null
        sqlite3 $DB "UPDATE gates SET status='rejected', resolved_by='alice', resolved_at=datetime('now') WHERE id='deploy'"
        $P gates create deploy --reopen --prompt "DROP PROD" --allow mallory >/dev/null 2>&1; echo reopen=$?
        $P approve deploy --as mallory --yes >/dev/null 2>&1
        $P gates wait deploy --timeout 0 >/dev/null 2>&1; echo wait=$?"#,
    );
    assert!(
        !said.contains("reopen=0") && !said.contains("wait=0"),
        "{said}"
    );

    // 1b. The deadline moved earlier by SQL, then the agent reopens it for an accomplice, who approves.
    // Since every deadline but the sealed one is tampering (issue 43), the gate is not timed
    // out by the row nor reopened: the VM waiting on the opening it made is told, not
    // approved.
    let said = battery(
        r#"$P gates create deploy --prompt "DROP PROD" --allow user >/dev/null
        sqlite3 $DB "UPDATE gates SET timeout_at='2000-01-01 00:00:00'"
        $P gates create deploy --reopen --prompt "DROP PROD" --allow mallory >/dev/null; echo reopen=$?
        $P approve deploy --as mallory --yes >/dev/null 2>&1
        $P gates wait deploy --instance 1 --timeout 0 >/dev/null 2>&1; echo wait=$?"#,
    );
    assert!(
        said.contains("reopen=9") && said.contains("wait=9"),
        "{said}"
    );

    // 2. The anchor frozen by an edit, a reopening written, the edit undone and the
    // reopening cut: this machine remembers what it saw.
    let said = battery(
        r#"$P gates create deploy --prompt "v1 harmless" --allow user >/dev/null
        $P approve deploy --as alice --yes >/dev/null
        GOOD=$(sqlite3 $DB "select hash from gate_audit_log where seq=3")
        sqlite3 $DB "DROP TRIGGER gate_audit_log_no_update; UPDATE gate_audit_log SET hash='sha256:00' WHERE seq=3"
        $P gates create deploy --reopen --prompt "v2 DROP PROD" --allow user >/dev/null 2>&1; echo reopen=$?
        $P gates create other --prompt "another" >/dev/null 2>&1
        sqlite3 $DB "UPDATE gate_audit_log SET hash='$GOOD' WHERE seq=3; DROP TRIGGER gate_audit_log_no_delete; DELETE FROM gate_audit_log WHERE seq=4; DELETE FROM gates WHERE id='other'"
        $P gates verify >/dev/null 2>&1; echo verify=$?"#,
    );
    // The reopening is refused (its history is broken); the write that moved on anyway is
    // remembered, so the log put back does not verify here.
    assert!(
        said.contains("reopen=9") && said.contains("verify=9"),
        "{said}"
    );

    // 3. The gate row's run id changed, so events and the anchor named another run.
    let said = battery(
        r#"$P gates create deploy --prompt "DROP PROD" --allow user >/dev/null
        sqlite3 $DB "PRAGMA foreign_keys=OFF; UPDATE gates SET run_id='zzz'"
        $P reject deploy --as alice --yes --reason no >/dev/null 2>&1
        sqlite3 $DB "DROP TRIGGER gate_audit_log_no_delete; DELETE FROM gate_audit_log WHERE seq=3; UPDATE gates SET run_id='$R',status='pending',resolved_by=NULL,resolved_at=NULL,resolution_comment=NULL"
        $P gates verify >/dev/null 2>&1; echo verify=$?"#,
    );
    assert!(said.contains("verify=9"), "{said}");

    // 4 and 5. A rolled-back run whose id, database or directory was moved so that its
    // anchor is not found: read where it must not be written, it vouches for nothing.
    let rollback = r#"$P gates create deploy --prompt "v1" >/dev/null; $P approve deploy --as alice --yes >/dev/null
        $P gates create deploy --reopen --prompt "v2 DROP PROD" >/dev/null
        sqlite3 $DB "DROP TRIGGER gate_audit_log_no_delete; DELETE FROM gate_audit_log WHERE seq=4; UPDATE gates SET instance=1,prompt='v1',status='approved',resolved_by='alice',resolved_at=(select resolved_at from gate_instances),execution_id=1; DELETE FROM gate_instances;""#;
    for hide in [
        r#"sqlite3 $DB "PRAGMA foreign_keys=OFF; UPDATE run SET id='X'||id;""#,
        "mv $DB $D/s.db; ln -s s.db $DB",
        "mv $D .prose/runs/.real-$R; ln -s .real-$R $D",
    ] {
        let said = battery(&format!(
            "{rollback}\n{hide}\n$P gates wait deploy --timeout 0 >/dev/null 2>&1; echo wait=$?\n$P gates verify >/dev/null 2>&1; echo verify=$?\n$P resume --json 2>/dev/null | grep -c '\"continue\"'; true"
        ));
        assert!(!said.contains("wait=0"), "{hide}: {said}");
        assert!(!said.contains("verify=0"), "{hide}: {said}");
        assert!(said.trim_end().ends_with('0'), "{hide}: {said}");
    }

    // 6. A truncated, rolled-back copy imported over the run with --replace.
    let said = battery(
        r#"$P gates create deploy --prompt "v1 harmless" >/dev/null; $P approve deploy --as alice --yes >/dev/null
        $P gates create deploy --reopen --prompt "v2 DROP PROD" >/dev/null
        mkdir x5; sqlite3 $DB ".backup x5/state.db"
        sqlite3 x5/state.db "DROP TRIGGER gate_audit_log_no_delete; DELETE FROM gate_audit_log WHERE seq=4; UPDATE gates SET instance=1,prompt='v1 harmless',status='approved',resolved_by='alice',resolved_at=(select resolved_at from gate_instances),execution_id=1; DELETE FROM gate_instances; DELETE FROM execution WHERE id=2"
        $P import x5 --replace >/dev/null 2>&1; echo import=$?
        $P gates wait deploy --timeout 0 >/dev/null 2>&1; echo wait=$?"#,
    );
    assert!(
        said.contains("import=9") && !said.contains("wait=0"),
        "{said}"
    );

    // 7. The gates table rebuilt with a case-insensitive id: `deploy` found `DEPLOY`.
    let said = battery(
        r#"$P gates create deploy --prompt "DROP PROD" --allow user >/dev/null
        $P gates create DEPLOY --prompt noop --allow mallory >/dev/null; $P approve DEPLOY --as mallory --yes >/dev/null
        sqlite3 $DB "PRAGMA foreign_keys=OFF; BEGIN; CREATE TABLE g2 (id TEXT COLLATE NOCASE, run_id TEXT, execution_id INTEGER, prompt TEXT, allow TEXT, timeout TEXT, timeout_at TEXT, on_reject TEXT, status TEXT, created_at TEXT, resolved_at TEXT, resolved_by TEXT, resolution_comment TEXT, metadata TEXT, instance INTEGER NOT NULL DEFAULT 1, remind_at TEXT);
          INSERT INTO g2 SELECT * FROM gates WHERE id='DEPLOY'; INSERT INTO g2 SELECT * FROM gates WHERE id='deploy'; DROP TABLE gates; ALTER TABLE g2 RENAME TO gates; COMMIT;"
        $P gates wait deploy --timeout 0 >/dev/null 2>&1; echo wait=$?
        $P gates show deploy >/dev/null 2>&1; echo show=$?"#,
    );
    assert!(
        !said.contains("wait=0") && !said.contains("show=0"),
        "{said}"
    );

    // 8. The row moved to an opening nothing sealed, naming the agent: the tool does not
    // seal the agent's approval (the refusal is the one event written).
    let said = battery(
        r#"$P gates create deploy --prompt "DROP PROD" --allow user >/dev/null
        sqlite3 $DB "UPDATE gates SET instance=2, allow='[\"agent:x\"]' WHERE id='deploy'"
        $P approve deploy --as mallory --yes >/dev/null 2>&1; echo approve=$?
        sqlite3 $DB "SELECT count(*) FROM gate_audit_log WHERE event_type='approved'" | sed 's/^/approved=/'"#,
    );
    assert!(
        said.contains("approve=9") && said.contains("approved=0"),
        "{said}"
    );
}

/// Issue 49, with the audit key: whoever holds it can rewrite a sealed event and seal the log
/// again, so only the page's signature stands between them and a decider's words. Answers and
/// comments given on the page (one an answer of `null`, one a quorum's vote that no longer
/// counts) are each changed in a sealed event, the log resealed from there and its anchor
/// moved: the log verifies, and the gate is tampered under the signature (or, an approval
/// stripped of the answer its opening asks for, by its log alone).
fn with_the_audit_key_an_answer_still_cannot_be_changed_under_a_signature(b: Backend) {
    use crate::serve::{add, decide, gate_path, hidden_fields, Server};
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let tokens: Vec<String> = ["alice", "bob", "carol"]
        .iter()
        .map(|n| add(&p, n))
        .collect();
    let create = |id: &str, schema: &str, extra: &[&str]| {
        run.cmd()
            .args(["gates", "create", id, "--prompt", &format!("{id}?")])
            .args(["--response-schema", schema])
            .args(extra)
            .assert()
            .success();
    };
    create(
        "a",
        r#"{"type":"object","properties":{"v":{"type":"string"}}}"#,
        &[],
    );
    create("n", r#"{"enum":[null,"go"]}"#, &[]);
    create(
        "q",
        r#"{"type":"integer"}"#,
        &["--allow", "alice,bob,carol", "--require", "2"],
    );
    p.cmd()
        .args(["principals", "require", "--signed"])
        .assert()
        .success();
    let s = Server::start(&p);
    let approve = |who: usize, gate: &str, answer: &[(&str, &str)], comment: &str| {
        let cookie = s.login(&tokens[who]);
        let page = s.get(&gate_path(&run, gate), Some(&cookie));
        let mut fields: Vec<(String, String)> = hidden_fields(&page.body, "approve")
            .into_iter()
            .filter(|(k, _)| k != "comment")
            .collect();
        fields.extend(answer.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        fields.push(("comment".into(), comment.into()));
        let fields: Vec<(&str, &str)> = fields
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let r = decide(&s, &cookie, &run, gate, &fields);
        assert_eq!(r.status, 303, "{gate}: {}", r.body);
    };
    approve(0, "a", &[("r/v", "ok")], "fine");
    approve(0, "n", &[("r", "null")], "");
    approve(0, "q", &[("r", "1")], "mine");
    p.cmd()
        .args(["principals", "revoke", "alice"])
        .assert()
        .success();
    approve(1, "q", &[("r", "2")], "");
    approve(2, "q", &[("r", "3")], "");
    drop(s);
    let page_key = crate::serve::show_key(&p);
    let place = place_of(&p);
    let rows = audit_rows(&run);
    let gates = gate_rows(&run, "gates");
    let key = key(&run);
    let tip = |rows: &[AuditRow]| {
        let t = rows
            .iter()
            .filter(|r| r.seq.is_some())
            .max_by_key(|r| r.seq)
            .unwrap();
        t::Anchor {
            seq: t.seq.unwrap(),
            hash: t.hash.clone().unwrap(),
            named: None,
        }
    };
    let judge = |rows: &[AuditRow], gates: &[GateRow]| {
        let mut report = t::check(rows, gates, Some(&run.id), Some(&key), Some(&tip(rows)));
        assert!(
            report.first_broken.is_none(),
            "the log was resealed: {report:?}"
        );
        t::check_signed(&mut report, rows, gates, &page_key, &place).unwrap();
        report
    };
    let report = judge(&rows, &gates);
    for g in ["a", "n", "q"] {
        assert_eq!(report.gate(g), t::Integrity::Attested, "{g} as decided");
    }
    type Change = fn(&mut serde_json::Value, &mut Option<String>);
    let cases: [(&str, &str, &str, Change); 5] = [
        ("a", "approved", "alice", |m, _| {
            m.as_object_mut().unwrap().remove("response");
        }),
        ("a", "approved", "alice", |m, _| {
            m["response"] = serde_json::json!({"v": "bad"})
        }),
        ("a", "approved", "alice", |_, c| {
            *c = Some("not fine".into())
        }),
        ("n", "approved", "alice", |m, _| {
            m.as_object_mut().unwrap().remove("response");
        }),
        ("q", "approval", "alice", |m, _| {
            m["response"] = serde_json::json!(9)
        }),
    ];
    for (gate, event, by, change) in cases {
        let (mut r, mut g) = (rows.clone(), gates.clone());
        let at = r
            .iter()
            .position(|x| {
                x.gate_id == gate && x.event_type == event && x.principal.as_deref() == Some(by)
            })
            .unwrap_or_else(|| panic!("no {event} of {gate} by {by}"));
        let mut m: serde_json::Value =
            serde_json::from_str(r[at].metadata.as_deref().unwrap()).unwrap();
        let mut comment = r[at].comment.clone();
        change(&mut m, &mut comment);
        r[at].metadata = Some(m.to_string());
        if comment != r[at].comment {
            // The gate's row says the same, so that only the signature can tell.
            r[at].comment = comment.clone();
            if let Some(row) = g.iter_mut().find(|x| x.id == gate) {
                row.resolution_comment = comment;
            }
        }
        // Sealed again with the key, from the changed row on, in the chain's order.
        let mut order: Vec<usize> = (0..r.len()).filter(|i| r[*i].seq.is_some()).collect();
        order.sort_by_key(|i| r[*i].seq);
        let start = order.iter().position(|i| *i == at).unwrap();
        for k in start..order.len() {
            let i = order[k];
            if k > start {
                r[i].prev_hash = r[order[k - 1]].hash.clone();
            }
            let hash = r[i].chain_hash(r[i].prev_hash.as_deref().unwrap_or(""));
            r[i].seal = Some(key.seal(&hash));
            r[i].hash = Some(hash);
        }
        let report = judge(&r, &g);
        assert!(
            matches!(report.gate(gate), t::Integrity::Tampered(_)),
            "{b:?}: {gate}'s {event} by {by} changed and resealed: {:?}",
            report.gate(gate)
        );
    }
}
