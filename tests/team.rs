//! Approvals for teams: N of M with or without a veto, groups from the principals book's
//! sealed log, separation of duties, and only authenticated decisions counted; on both
//! backends, each refusal leaving the state as it was but for its logged refusal.

use crate::common::*;

on_both!(
    a_quorum_counts_each_principal_once_and_resolves_at_n,
    twenty_concurrent_approvers_leave_exactly_the_quorum,
    a_claim_is_not_counted_where_who_decides_matters,
    a_veto_rejects_and_without_it_rejections_need_the_quorum,
    groups_admit_members_and_a_removal_before_the_quorum_discounts,
    the_starter_and_the_creator_may_not_approve_when_duties_are_separate,
    raw_sql_adds_no_approval_no_member_and_no_policy,
    waiting_on_several_gates_reports_each_and_the_most_serious,
    the_worked_example_runs_as_written,
    the_books_log_chains_past_its_tenth_row,
    an_escalation_admits_its_group_only_after_the_deadline,
    reminders_and_escalations_are_checked_before_anything_is_written,
    a_reader_that_cannot_vouch_leaves_an_escalation_to_one_that_can,
);

/// Issues a token (with `principals add NAME EXTRA…`) and returns it.
fn token(p: &Project, name: &str, extra: &[&str]) -> String {
    let a = p
        .cmd()
        .args(["principals", "add", name])
        .args(extra)
        .assert()
        .success();
    String::from_utf8(a.get_output().stdout.clone())
        .unwrap()
        .trim()
        .to_string()
}

fn create(run: &Run, id: &str, extra: &[&str]) -> serde_json::Value {
    let a = run
        .cmd()
        .args(["gates", "create", id, "--prompt", "Deploy?", "--json"])
        .args(extra)
        .assert()
        .success();
    stdout_json(&a)
}

/// `approve`/`reject` with a token; the exit code and the JSON or error.
fn decide(run: &Run, verb: &str, gate: &str, tok: &str) -> (i32, String) {
    let mut c = run.cmd();
    c.env("PROSE_TOKEN", tok)
        .args([verb, gate, "--yes", "--json"]);
    if verb == "reject" {
        c.args(["--reason", "not yet"]);
    }
    let a = c.assert();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    (code(&a), out + &stderr(&a))
}

fn kinds(run: &Run, gate: &str) -> Vec<(String, Option<String>)> {
    run.view()
        .events(gate)
        .into_iter()
        .filter(|e| e.0 != "viewed")
        .map(|e| (e.0, e.1))
        .collect()
}

fn wait_now(run: &Run, gate: &str) -> i32 {
    code(
        &run.cmd()
            .args(["gates", "wait", gate, "--timeout", "0"])
            .assert(),
    )
}

fn a_quorum_counts_each_principal_once_and_resolves_at_n(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = token(&p, "alice", &[]);
    let bob = token(&p, "bob", &[]);
    let carol = token(&p, "carol", &[]);
    let g = create(&run, "deploy", &["--require", "3"]);
    assert_eq!(g["require"], 3, "{g}");

    let (c, out) = decide(&run, "approve", "deploy", &alice);
    assert_eq!(c, 0, "{out}");
    assert!(out.contains("1 of 3 approvals: alice"), "{out}");
    assert_eq!(run.view().gate("deploy").0, "pending");
    assert_eq!(
        wait_now(&run, "deploy"),
        7,
        "one approval of three decides nothing"
    );
    // A plain wait says where the votes stand, as `gates show` does.
    let a = run
        .cmd()
        .args(["gates", "wait", "deploy", "--timeout", "0"])
        .assert()
        .code(7);
    assert_eq!(
        String::from_utf8_lossy(&a.get_output().stdout),
        "deploy: still pending after 0s (1 of 3 approvals: alice; waiting for user)\n"
    );
    // A listing that reads the sealed logs (`--scan`) shows the votes; one from the catalog
    // vouches for nothing and shows none.
    let listed = stdout_json(
        &p.cmd()
            .args(["gates", "--scan", "--json"])
            .assert()
            .success(),
    );
    assert_eq!(listed[0]["progress"], "1 of 3 approvals: alice", "{listed}");
    let listed = stdout_json(&p.cmd().args(["gates", "--json"]).assert().success());
    assert!(listed[0].get("progress").is_none(), "{listed}");

    // The same principal again counts once, is told so, and writes nothing.
    let snapshot = run.snapshot();
    let (c, out) = decide(&run, "approve", "deploy", &alice);
    assert_eq!(c, 0, "{out}");
    assert!(out.contains("already counted"), "{out}");
    assert_eq!(
        run.snapshot(),
        snapshot,
        "a repeated approval wrote something"
    );

    let (c, out) = decide(&run, "approve", "deploy", &bob);
    assert_eq!(c, 0, "{out}");
    assert!(out.contains("2 of 3 approvals: alice, bob"), "{out}");
    let shown = run
        .cmd()
        .args(["gates", "show", "deploy"])
        .assert()
        .success();
    let shown = String::from_utf8_lossy(&shown.get_output().stdout).to_string();
    assert!(shown.contains("2 of 3 approvals: alice, bob"), "{shown}");

    let (c, out) = decide(&run, "approve", "deploy", &carol);
    assert_eq!(c, 0, "{out}");
    let (status, by, _, _) = run.view().gate("deploy");
    assert_eq!(
        (status.as_str(), by.as_deref()),
        ("approved", Some("carol"))
    );
    assert_eq!(
        kinds(&run, "deploy"),
        [
            ("created".to_string(), Some("system".to_string())),
            ("approval".into(), Some("alice".into())),
            ("approval".into(), Some("bob".into())),
            ("approved".into(), Some("carol".into())),
        ]
    );
    let resolved = run.view().events("deploy").pop().unwrap().2;
    assert_eq!(
        resolved["approvals"],
        serde_json::json!(["alice", "bob", "carol"])
    );
    assert_eq!(wait_now(&run, "deploy"), 0);
    run.cmd().args(["gates", "verify"]).assert().success();
}

fn twenty_concurrent_approvers_leave_exactly_the_quorum(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let tokens: Vec<String> = (0..20).map(|i| token(&p, &format!("p{i}"), &[])).collect();
    for round in 0..3 {
        let gate = format!("deploy{round}");
        create(&run, &gate, &["--require", "3"]);
        let children: Vec<_> = tokens
            .iter()
            .map(|t| {
                run.std_cmd()
                    .env("PROSE_TOKEN", t)
                    .args(["approve", &gate, "--yes"])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let codes: Vec<i32> = children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap().status.code().unwrap())
            .collect();
        assert_eq!(codes.iter().filter(|c| **c == 0).count(), 3, "{codes:?}");
        assert!(codes.iter().all(|c| *c == 0 || *c == 4), "{codes:?}");
        let events = kinds(&run, &gate);
        let approvals: Vec<_> = events.iter().filter(|e| e.0 == "approval").collect();
        let resolved: Vec<_> = events.iter().filter(|e| e.0 == "approved").collect();
        assert_eq!((approvals.len(), resolved.len()), (2, 1), "{events:?}");
        let mut who: Vec<_> = approvals.iter().chain(&resolved).map(|e| &e.1).collect();
        who.sort();
        who.dedup();
        assert_eq!(who.len(), 3, "three distinct approvers: {events:?}");
        assert_eq!(run.view().gate(&gate).0, "approved");
        assert_eq!(wait_now(&run, &gate), 0);
    }
    run.cmd().args(["gates", "verify"]).assert().success();
}

fn a_claim_is_not_counted_where_who_decides_matters(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    for extra in [
        &["--require", "2"][..],
        &["--allow", "group:release"][..],
        &["--no-self-approve"][..],
    ] {
        let gate = format!("g{}", extra.len() + extra[0].len());
        create(&run, &gate, extra);
        let before = run.before_refusal(&gate);
        let a = run
            .cmd()
            .args(["approve", &gate, "--yes", "--as", "alice"])
            .assert()
            .code(4);
        assert!(stderr(&a).contains("authenticated"), "{}", stderr(&a));
        let refused = run.refused(&before, 1, "an unauthenticated approval");
        assert_eq!(refused[0].1.as_deref(), Some("alice"));
    }
}

fn a_veto_rejects_and_without_it_rejections_need_the_quorum(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let t: Vec<String> = ["alice", "bob", "carol"]
        .iter()
        .map(|n| token(&p, n, &[]))
        .collect();
    create(&run, "veto", &["--require", "2"]);
    assert_eq!(decide(&run, "approve", "veto", &t[0]).0, 0);
    assert_eq!(decide(&run, "reject", "veto", &t[1]).0, 0);
    assert_eq!(run.view().gate("veto").0, "rejected");
    assert_eq!(wait_now(&run, "veto"), 5);

    create(&run, "count", &["--require", "2", "--veto", "off"]);
    let (c, out) = decide(&run, "reject", "count", &t[0]);
    assert_eq!(c, 0, "{out}");
    assert_eq!(run.view().gate("count").0, "pending");
    assert_eq!(decide(&run, "approve", "count", &t[1]).0, 0);
    assert_eq!(run.view().gate("count").0, "pending");
    assert_eq!(decide(&run, "reject", "count", &t[2]).0, 0);
    assert_eq!(run.view().gate("count").0, "rejected");
    let events = kinds(&run, "count");
    assert_eq!(
        events.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(),
        ["created", "rejection", "approval", "rejected"]
    );
    assert_eq!(wait_now(&run, "count"), 5);
    run.cmd().args(["gates", "verify"]).assert().success();
}

fn groups_admit_members_and_a_removal_before_the_quorum_discounts(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = token(&p, "alice", &["--group", "release"]);
    let bob = token(&p, "bob", &["--group", "release"]);
    let carol = token(&p, "carol", &[]);
    let listed = p
        .cmd()
        .args(["principals", "group", "list", "--json"])
        .assert()
        .success();
    let listed = stdout_json(&listed);
    assert_eq!(
        listed["release"],
        serde_json::json!(["alice", "bob"]),
        "{listed}"
    );
    // No principal may take the group prefix.
    p.cmd()
        .args(["principals", "add", "group:release"])
        .assert()
        .code(2);

    create(
        &run,
        "ship",
        &["--allow", "group:release", "--require", "2"],
    );
    let before = run.before_refusal("ship");
    assert_eq!(decide(&run, "approve", "ship", &carol).0, 4);
    run.refused(&before, 1, "a principal outside the group");

    assert_eq!(decide(&run, "approve", "ship", &alice).0, 0);
    let approval = run.view().events("ship").pop().unwrap().2;
    assert_eq!(approval["via"], serde_json::json!(["group:release"]));
    p.cmd()
        .args(["principals", "group", "remove", "release", "alice"])
        .assert()
        .success();
    let (c, out) = decide(&run, "approve", "ship", &bob);
    assert_eq!(c, 0, "{out}");
    assert_eq!(
        run.view().gate("ship").0,
        "pending",
        "alice's approval was discounted"
    );
    let last = run.view().events("ship").pop().unwrap().2;
    assert_eq!(last["discounted"][0]["principal"], "alice", "{last}");
    p.cmd()
        .args(["principals", "group", "add", "release", "carol"])
        .assert()
        .success();
    assert_eq!(decide(&run, "approve", "ship", &carol).0, 0);
    let (status, by, _, _) = run.view().gate("ship");
    assert_eq!(
        (status.as_str(), by.as_deref()),
        ("approved", Some("carol"))
    );
    let resolved = run.view().events("ship").pop().unwrap().2;
    assert_eq!(resolved["approvals"], serde_json::json!(["bob", "carol"]));
    run.cmd().args(["gates", "verify"]).assert().success();
}

fn the_starter_and_the_creator_may_not_approve_when_duties_are_separate(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let alice = token(&p, "alice", &[]);
    let bob = token(&p, "bob", &[]);
    let carol = token(&p, "carol", &[]);
    // alice starts the run, bob creates the gate.
    let out = p
        .cmd()
        .env("PROSE_TOKEN", &alice)
        .args(["init", "--json"])
        .args(p.backend_flag())
        .assert()
        .success();
    let run = p.run(stdout_json(&out)["run_id"].as_str().unwrap());
    run.cmd()
        .env("PROSE_TOKEN", &bob)
        .args([
            "gates",
            "create",
            "deploy",
            "--prompt",
            "Deploy?",
            "--no-self-approve",
        ])
        .assert()
        .success();
    for (who, t) in [("alice", &alice), ("bob", &bob)] {
        let before = run.before_refusal("deploy");
        let (c, out) = decide(&run, "approve", "deploy", t);
        assert_eq!(c, 4, "{who}: {out}");
        assert!(out.contains("own"), "{who}: {out}");
        run.refused(&before, 1, "a self-approval");
    }
    assert_eq!(decide(&run, "approve", "deploy", &carol).0, 0);
    assert_eq!(run.view().gate("deploy").0, "approved");

    // The project's policy does the same for every gate made after it is on.
    p.cmd()
        .args(["principals", "policy", "--separate-duties", "on"])
        .assert()
        .success();
    run.cmd()
        .env("PROSE_TOKEN", &bob)
        .args(["gates", "create", "second", "--prompt", "Again?"])
        .assert()
        .success();
    assert_eq!(decide(&run, "approve", "second", &alice).0, 4);
    assert_eq!(decide(&run, "approve", "second", &bob).0, 4);
    // A rejection is no approval: the starter may still stop their own run.
    assert_eq!(decide(&run, "reject", "second", &alice).0, 0);
    run.cmd().args(["gates", "verify"]).assert().success();
}

fn raw_sql_adds_no_approval_no_member_and_no_policy(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = token(&p, "alice", &["--group", "release"]);
    let mallory = token(&p, "mallory", &[]);
    create(
        &run,
        "ship",
        &["--allow", "group:release", "--require", "2"],
    );
    // A fake approval, written as the tool would write one but not sealed.
    run.view().raw(
        "INSERT INTO gate_audit_log (gate_id, run_id, event_type, principal, timestamp, metadata)
         SELECT 'ship', id, 'approval', 'bob', datetime('now'),
                '{\"instance\": 1, \"via\": [\"group:release\"], \"authenticated\": \"token\"}'
         FROM run",
        "INSERT INTO openprose.gate_audit_log (gate_id, run_id, event_type, principal, timestamp, metadata)
         SELECT 'ship', id, 'approval', 'bob', now(),
                '{\"instance\": 1, \"via\": [\"group:release\"], \"authenticated\": \"token\"}'
         FROM openprose.run WHERE id = '$RUN'",
    );
    let (c, out) = decide(&run, "approve", "ship", &alice);
    assert_eq!(c, 0, "{out}");
    assert_eq!(
        run.view().gate("ship").0,
        "pending",
        "the unsealed approval counted"
    );
    assert!(out.contains("1 of 2 approvals: alice"), "{out}");

    // A member written into the book behind the tool's back admits no one: the log is
    // broken, so no group admits anyone, and the refusal is logged.
    let fake =
        "INSERT INTO {t} (seq, at, actor, event, principal, grp, value, prev_hash, hash, seal)
                VALUES (100, '2026-01-01 00:00:00', 'mallory', 'group_add', 'mallory', 'release',
                        NULL, '', 'sha256:00', 'hmac-sha256:00:00')";
    match &p.pg_url {
        Some(url) => postgres::Client::connect(url, postgres::NoTls)
            .unwrap()
            .batch_execute(&fake.replace("{t}", "openprose.book_log"))
            .unwrap(),
        None => rusqlite::Connection::open(p.root().join(".prose/principals.db"))
            .unwrap()
            .execute_batch(&fake.replace("{t}", "book_log"))
            .unwrap(),
    }
    let before = run.before_refusal("ship");
    let (c, out) = decide(&run, "approve", "ship", &mallory);
    assert_ne!(c, 0, "{out}");
    run.refused(&before, 1, "a member the book's log does not seal");
    assert_eq!(run.view().gate("ship").0, "pending");
}

/// A run that holds a team's gate asks every reader and writer to know team approvals
/// (schema 9, with escalations): an older binary refuses it rather than take its votes for tampering.
#[test]
fn a_run_with_a_teams_gate_is_stamped_for_readers_that_know_quorums() {
    let p = Project::new();
    let run = p.init();
    let stamp = |run: &Run| -> i64 {
        run.conn()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(stamp(&run), 1_010_011);
    create(&run, "plain", &[]);
    assert_eq!(
        stamp(&run),
        1_010_011,
        "a single-approver gate asks nothing new"
    );
    create(&run, "team", &["--require", "2"]);
    assert_eq!(stamp(&run), 9_010_011);
    run.cmd().args(["gates", "verify"]).assert().success();
}

fn waiting_on_several_gates_reports_each_and_the_most_serious(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    for g in ["a", "b", "c", "e"] {
        create(&run, g, &[]);
    }
    create(&run, "d", &["--timeout", "1s"]);
    run.cmd()
        .args(["approve", "a", "--yes", "--as", "alice"])
        .assert()
        .success();
    run.cmd()
        .args(["reject", "b", "--yes", "--as", "alice", "--reason", "no"])
        .assert()
        .success();
    advance_clock(p.root(), 2);
    let wait = |extra: &[&str]| {
        let a = run
            .cmd()
            .args(["gates", "wait", "--json"])
            .args(extra)
            .assert();
        let json = match a.get_output().stdout.is_empty() {
            true => serde_json::Value::Null,
            false => stdout_json(&a),
        };
        (code(&a), json)
    };
    // --all fails as soon as one fails, without waiting for the pending one.
    let (c, v) = wait(&["--all", "a", "b", "c"]);
    assert_eq!(c, 5, "{v}");
    assert_eq!(v["mode"], "all");
    assert_eq!(v["not_settled"], serde_json::json!(["c"]), "{v}");
    let outcomes: Vec<_> = v["gates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["id"].as_str().unwrap(), g["status"].as_str().unwrap()))
        .collect();
    assert_eq!(outcomes, [("a", "approved"), ("b", "rejected")]);
    assert_eq!(wait(&["--all", "a"]).0, 0);
    assert_eq!(
        wait(&["--all", "a", "d"]).0,
        6,
        "a timed-out gate fails --all"
    );
    assert_eq!(wait(&["--all", "a", "c", "--timeout", "0"]).0, 7);
    // --any succeeds as soon as one is approved, fails only when all failed.
    assert_eq!(wait(&["--any", "c", "a"]).0, 0);
    assert_eq!(
        wait(&["--any", "b", "d"]).0,
        5,
        "rejected is more serious than timed out"
    );
    assert_eq!(wait(&["--any", "b", "c", "--timeout", "0"]).0, 5);
    // A gate whose row was changed behind the tool's back is the most serious of all.
    run.view().raw(
        "UPDATE gates SET status = 'approved', resolved_by = 'mallory' WHERE id = 'e'",
        "UPDATE openprose.gates SET status = 'approved', resolved_by = 'mallory'
         WHERE run_id = '$RUN' AND id = 'e'",
    );
    assert_eq!(wait(&["--any", "e", "b"]).0, 9);
    assert_eq!(wait(&["--all", "a", "e"]).0, 9);
    // Several gates need --all or --any; those need the run named by --run or PROSE_RUN.
    assert_eq!(wait(&["a", "b", "c"]).0, 2);
    let a = p.cmd().args(["gates", "wait", "--all", "a", "b"]).assert();
    assert_eq!(code(&a), 2, "{}", stderr(&a));
}

/// docs/gates-and-trust.md's worked example, run line by line as it is written (with the
/// binary first on PATH), each line's exit code the one its comment says (0 when it says none).
fn the_worked_example_runs_as_written(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    // On PostgreSQL the principals book is the project's server's (its `.prose/.env`); the run
    // is the one `init` makes by default.
    let text = run_documented(
        p.root(),
        "docs/gates-and-trust.md",
        "**A worked example: a deploy that needs two of release",
        false,
    );
    assert!(text.contains("1 of 2 approvals: bob"), "{text}");
}

/// The book's log is chained by number, not by its text (row 10 follows row 9).
fn the_books_log_chains_past_its_tenth_row(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    for i in 0..12 {
        token(&p, &format!("p{i}"), &["--group", "many"]);
    }
    let listed = stdout_json(
        &p.cmd()
            .args(["principals", "group", "list", "--json"])
            .assert()
            .success(),
    );
    assert_eq!(
        listed["many"].as_array().map(Vec::len),
        Some(12),
        "{listed}"
    );
}

/// Before the deadline the escalation group decides nothing, whatever raw SQL says; past it,
/// the gate does not time out but opens to the group, with the new deadline, once.
fn an_escalation_admits_its_group_only_after_the_deadline(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let bob = token(&p, "bob", &["--group", "oncall"]);
    let made = create(
        &run,
        "ship",
        &[
            "--allow",
            "alice",
            "--timeout",
            "3s",
            "--escalate-to",
            "group:oncall",
        ],
    );
    assert_eq!(
        made["escalation"],
        serde_json::json!({"to": "group:oncall", "after_seconds": 3, "escalated": false}),
        "{made}"
    );
    let before = run.before_refusal("ship");
    assert_eq!(decide(&run, "approve", "ship", &bob).0, 4);
    run.refused(&before, 1, "the escalation group before the deadline");
    // `resume` tells the VM to wait, and why.
    let resumed = stdout_json(&run.cmd().args(["resume", "--json"]).assert().success());
    let g = &resumed["gates"][0];
    assert_eq!(g["next_step"]["action"], "wait", "{g}");
    assert_eq!(
        g["progress"],
        "0 of 1 approval; waiting for alice; escalates to group:oncall at the deadline",
        "{g}"
    );
    // An escalation written behind the tool's back (unsealed) opens the gate to no one.
    run.view().raw(
        "INSERT INTO gate_audit_log (gate_id, run_id, event_type, principal, timestamp, metadata)
         SELECT 'ship', id, 'escalated', 'system', datetime('now'),
                '{\"instance\": 1, \"to\": \"group:oncall\"}' FROM run",
        "INSERT INTO openprose.gate_audit_log (gate_id, run_id, event_type, principal, timestamp, metadata)
         SELECT 'ship', id, 'escalated', 'system', now(),
                '{\"instance\": 1, \"to\": \"group:oncall\"}'
         FROM openprose.run WHERE id = '$RUN'",
    );
    let before = run.before_refusal("ship");
    assert_eq!(decide(&run, "approve", "ship", &bob).0, 4);
    run.refused(&before, 1, "an unsealed escalation");
    advance_clock(p.root(), 4);
    let shown = run
        .cmd()
        .args(["gates", "show", "ship", "--json"])
        .assert()
        .success();
    let shown = stdout_json(&shown);
    assert_eq!(shown["status"], "pending", "{shown}");
    assert_eq!(shown["allow"], serde_json::json!(["alice", "group:oncall"]));
    assert_eq!(shown["escalation"]["escalated"], true, "{shown}");
    let (c, out) = decide(&run, "approve", "ship", &bob);
    assert_eq!(c, 0, "{out}");
    let (status, by, _, _) = run.view().gate("ship");
    assert_eq!((status.as_str(), by.as_deref()), ("approved", Some("bob")));
    let sealed: Vec<_> = kinds(&run, "ship").into_iter().map(|e| e.0).collect();
    assert_eq!(
        sealed.iter().filter(|k| *k == "escalated").count(),
        2,
        "the sealed escalation and the unsealed fake: {sealed:?}"
    );
    // Only the sealed one counts: the chain verifies, the fake reported as unattested.
    let v = run.cmd().args(["gates", "verify"]).assert();
    assert!(matches!(code(&v), 0 | 10), "{}", stderr(&v));
}

/// Reminders and escalations that cannot work are refused with a usage error, the run as it
/// was.
fn reminders_and_escalations_are_checked_before_anything_is_written(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let before = run.snapshot();
    for (args, says) in [
        (vec!["--remind", "5m"], "needs --timeout"),
        (
            vec!["--timeout", "1m", "--remind", "2m"],
            "is not before the deadline",
        ),
        (vec!["--escalate-to", "group:oncall"], "needs --timeout"),
        (
            vec![
                "--timeout",
                "1m",
                "--allow",
                "alice",
                "--escalate-to",
                "alice",
            ],
            "already allowed by --allow",
        ),
        (
            vec!["--timeout", "1m", "--escalate-to", "group:"],
            "--escalate-to",
        ),
        (
            vec!["--timeout", "1m", "--escalate-timeout", "1h"],
            "--escalate-to",
        ),
        (
            vec!["--timeout", "1m", "--remind", "soon"],
            "invalid duration",
        ),
        (
            vec!["--timeout", "1m", "--escalate-to", "agent:bot"],
            "agents never approve",
        ),
        (
            vec![
                "--timeout",
                "1m",
                "--allow",
                "user",
                "--escalate-to",
                "dana",
            ],
            "already allowed",
        ),
        (
            [
                "--timeout",
                "1h",
                "--remind",
                "1m",
                "--remind",
                "2m",
                "--remind",
                "3m",
                "--remind",
                "4m",
                "--remind",
                "5m",
                "--remind",
                "6m",
                "--remind",
                "7m",
                "--remind",
                "8m",
                "--remind",
                "9m",
                "--remind",
                "10m",
                "--remind",
                "11m",
            ]
            .to_vec(),
            "at most 10 --remind",
        ),
    ] {
        let a = run
            .cmd()
            .args(["gates", "create", "g", "--prompt", "Go?"])
            .args(&args)
            .assert()
            .code(2);
        let err = stderr(&a);
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert_eq!(run.snapshot(), before, "{args:?} wrote something");
    }
}

/// A reader whose key cannot vouch for a gate (another machine's, or none) leaves its
/// escalation and reminders to one that can: it does not time the gate out. A retry of the
/// same `gates create` after the escalation is still a safe retry.
fn a_reader_that_cannot_vouch_leaves_an_escalation_to_one_that_can(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let made = [
        "--allow",
        "alice",
        "--timeout",
        "2s",
        "--escalate-to",
        "group:oncall",
        "--escalate-timeout",
        "1h",
    ];
    create(&run, "ship", &made);
    advance_clock(p.root(), 3);
    let elsewhere = p.root().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let a = run
        .cmd()
        .env("HOME", &elsewhere)
        .args(["gates", "sweep", "--json"])
        .assert()
        .success();
    assert_eq!(stdout_json(&a)["timed_out"], 0, "{}", stderr(&a));
    assert_eq!(run.view().gate("ship").0, "pending");
    // The machine that sealed it escalates it.
    let shown = stdout_json(
        &run.cmd()
            .args(["gates", "show", "ship", "--json"])
            .assert()
            .success(),
    );
    assert_eq!(shown["escalation"]["escalated"], true, "{shown}");
    assert_eq!(shown["status"], "pending");
    let again = create(&run, "ship", &made);
    assert_eq!(again["created"], false, "an identical retry: {again}");
}

/// An `escalated` event sealed in another run (genuinely, by this machine, for a decoy gate
/// made to match) copied into a run whose gate has not reached its deadline opens it to no
/// one: a run's gates are derived from its own events. SQLite alone: the server's gate history
/// is read by run already, and a copied row names the other run.
#[test]
fn an_escalation_copied_from_another_run_admits_no_one() {
    let p = Project::new();
    let dana = token(&p, "dana", &["--group", "oncall"]);
    let target = p.init();
    create(
        &target,
        "g",
        &[
            "--allow",
            "alice",
            "--timeout",
            "1h",
            "--escalate-to",
            "group:oncall",
            "--escalate-timeout",
            "2h",
        ],
    );
    let deadline = |run: &Run| -> String {
        run.conn()
            .query_row("SELECT timeout_at FROM gates WHERE id = 'g'", [], |r| {
                r.get(0)
            })
            .unwrap()
    };
    let at = |t: &str| chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S").unwrap();
    let wanted = at(&deadline(&target)) + chrono::Duration::hours(2);
    // The decoy: its escalation's new deadline is the one the target's would have.
    let mut made = false;
    for _ in 0..3 {
        // The same gate id: the event's hash covers it.
        let decoy = p.init();
        let id = "g".to_string();
        let d_guess = chrono::Utc::now().naive_utc() + chrono::Duration::seconds(2);
        let after =
            (wanted - chrono::Timelike::with_nanosecond(&d_guess, 0).unwrap()).num_seconds();
        create(
            &decoy,
            &id,
            &[
                "--allow",
                "alice",
                "--timeout",
                "2s",
                "--escalate-to",
                "group:oncall",
                "--escalate-timeout",
                &format!("{after}s"),
            ],
        );
        let d: String = decoy
            .conn()
            .query_row("SELECT timeout_at FROM gates WHERE id = ?1", [&id], |r| {
                r.get(0)
            })
            .unwrap();
        if at(&d) + chrono::Duration::seconds(after) == wanted {
            std::thread::sleep(std::time::Duration::from_millis(2500));
            decoy.cmd().args(["gates", "show", &id]).assert().success();
            decoy
                .conn()
                .execute_batch(&format!(
                    "ATTACH '{}' AS t;
                     INSERT INTO t.gate_audit_log (gate_id, run_id, event_type, principal, comment,
                         timestamp, metadata, prev_hash, hash, seq, seal)
                     SELECT gate_id, run_id, event_type, principal, comment, timestamp, metadata,
                            prev_hash, hash, seq, seal
                     FROM main.gate_audit_log WHERE gate_id = '{id}' AND event_type = 'escalated';
                     UPDATE t.gates SET allow = '[\"alice\",\"group:oncall\"]', timeout_at = '{}';",
                    target.db.display(),
                    wanted.format("%Y-%m-%d %H:%M:%S")
                ))
                .unwrap();
            made = true;
            break;
        }
    }
    assert!(made, "the decoy's deadline never matched");
    let (c, out) = decide(&target, "approve", "g", &dana);
    assert_ne!(c, 0, "{out}");
    assert_eq!(target.view().gate("g").0, "pending");
}
