//! Issue 43: every field of a decision is derived from the sealed log. Each finding of the
//! independent battery, reproduced through the binary on both backends: a row edit that
//! changes what a gate shows or acts on is tampering (exit 9), never a decision.

use crate::common::*;

on_both!(
    a_deadline_in_any_other_form_is_tampering,
    escalation_and_veto_off_gates_refuse_claims,
    a_rewritten_comment_or_decision_time_is_tampering,
    a_decided_version_rewritten_in_history_is_tampering,
    progress_never_counts_a_revoked_approver,
    waiting_on_several_never_passes_over_a_tampered_gate,
    found_by_the_battery_run_on_the_merged_binary,
);

/// What the independent battery found on the merged binary: a revoked approver named directly
/// in the allow list counted toward a quorum; `gates show` called a decision attested whose
/// pinned input was rewritten; a deleted gates row went unnoticed by `verify`; an agent's
/// `bind --file` read the audit key into the run.
fn found_by_the_battery_run_on_the_merged_binary(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let token = |name: &str| {
        let a = p.cmd().args(["principals", "add", name]).assert().success();
        String::from_utf8_lossy(&a.get_output().stdout)
            .trim()
            .to_string()
    };
    let (alice, bob) = (token("alice"), token("bob"));
    token("carol");
    create(&run, "e", &["--allow", "alice,bob,carol", "--require", "2"]);
    run.cmd()
        .env("PROSE_TOKEN", &alice)
        .args(["approve", "e", "--yes"])
        .assert()
        .success();
    p.cmd()
        .args(["principals", "revoke", "alice"])
        .assert()
        .success();
    let v = stdout_json(
        &run.cmd()
            .env("PROSE_TOKEN", &bob)
            .args(["--json", "approve", "e", "--yes"])
            .assert()
            .success(),
    );
    assert_eq!(v["progress"], "1 of 2 approvals: bob", "{v}");
    assert_eq!(wait0(&run, "e"), 7);

    // A pinned input rewritten: every reader says tampered.
    run.bind("topic", "v1", None);
    create(&run, "g", &["--allow", "alice2", "--inputs", "topic"]);
    run.cmd()
        .args(["approve", "g", "--as", "alice2", "--yes"])
        .assert()
        .success();
    run.view().raw(
        "UPDATE binding_history SET value = 'v1 EVIL' WHERE name = 'topic' AND n = 1",
        "UPDATE openprose.binding_history SET value = 'v1 EVIL'
          WHERE run_id = '$RUN' AND name = 'topic' AND n = 1",
    );
    let shown = stdout_json(&run.cmd().args(["--json", "gates", "show", "g"]).assert());
    assert_eq!(shown["integrity"]["state"], "tampered", "{shown}");
    // resume refuses (9): the input's history no longer holds the value it has (the version
    // it says it is was rewritten), which `get` refuses too.
    let a = run.cmd().args(["--json", "resume"]).assert().failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    assert!(stderr(&a).contains("topic"), "{}", stderr(&a));

    // A gates row deleted: verify finds it.
    create(&run, "c", &[]);
    run.view().raw(
        "DELETE FROM gates WHERE id = 'c'",
        "DELETE FROM openprose.gates WHERE run_id = '$RUN' AND id = 'c'",
    );
    assert_eq!(verify(&run), 9);

    // The audit key is never read as a value, directly or through a link.
    let key = test_home(p.root()).join(".prose/audit.key");
    assert!(key.exists());
    let link = p.root().join("notes.txt");
    std::os::unix::fs::symlink(&key, &link).unwrap();
    let before = run.snapshot();
    for path in [key.clone(), link] {
        let a = run
            .cmd()
            .args(["bind", "notes", "--file"])
            .arg(&path)
            .assert();
        assert_eq!(code(&a), 4, "{}", stderr(&a));
        assert!(stderr(&a).contains("prose directory"), "{}", stderr(&a));
    }
    assert_eq!(run.snapshot(), before, "a refused bind wrote something");
}

fn create(run: &Run, id: &str, extra: &[&str]) {
    run.cmd()
        .args(["gates", "create", id, "--prompt", &format!("ship {id}?")])
        .args(extra)
        .assert()
        .success();
}

fn wait0(run: &Run, gate: &str) -> i32 {
    code(
        &run.cmd()
            .args(["gates", "wait", gate, "--timeout", "0"])
            .assert(),
    )
}

fn verify(run: &Run) -> i32 {
    code(&run.cmd().args(["gates", "verify"]).assert())
}

/// Finding 1: a deadline moved to another text, in any form the database reads (later,
/// earlier, or the same instant written otherwise), is tampering: the decision is refused
/// (exit 9, the refusal logged and nothing else changed), and wait and verify say so.
fn a_deadline_in_any_other_form_is_tampering(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let forms: &[&str] = match b {
        Backend::Sqlite => &[
            "2030-01-01 00:00:00 +00:00",
            "2030-01-01T00:00:00Z",
            "2030-01-01 24:00:00",
            "2500000.5",
            " 2030-01-01 00:00:00",
            "2030-01-01 00:00:00.000",
            "infinity",
        ],
        Backend::Postgres => &[
            "2030-01-01 00:00:00+00",
            "2030-01-01T00:00:00Z",
            "2030-01-01 24:00:00",
            "infinity",
            "J2500000",
        ],
    };
    let run = p.init();
    for (i, form) in forms.iter().enumerate() {
        let g = format!("g{i}");
        create(&run, &g, &["--allow", "bob", "--timeout", "1h"]);
        run.view().raw(
            &format!("UPDATE gates SET timeout_at = '{form}' WHERE id = '{g}'"),
            &format!(
                "UPDATE openprose.gates SET timeout_at = '{form}' WHERE run_id = '$RUN' AND id = '{g}'"
            ),
        );
        let before = run.before_refusal(&g);
        let a = run
            .cmd()
            .args(["approve", &g, "--as", "bob", "--yes"])
            .assert();
        assert_eq!(code(&a), 9, "{form}: {}", stderr(&a));
        run.refused(&before, 1, form);
        assert_eq!(wait0(&run, &g), 9, "{form}");
    }
    // The sealed deadline, written back in the same instant's other form, is a change too.
    create(&run, "same", &["--allow", "bob", "--timeout", "1h"]);
    let (_, sealed) = run.view().gate_times("same");
    let sealed = sealed.unwrap();
    let iso = format!("{}Z", sealed.replacen(' ', "T", 1));
    run.view().raw(
        &format!("UPDATE gates SET timeout_at = '{iso}' WHERE id = 'same'"),
        "SELECT 1",
    );
    if b == Backend::Sqlite {
        assert_eq!(wait0(&run, "same"), 9, "{iso}");
    }
    assert_eq!(verify(&run), 9);
    let doctor = run.cmd().args(["doctor"]).assert();
    assert_ne!(code(&doctor), 0, "doctor calls a tampered deadline healthy");
}

/// Finding 2: a gate that escalates, or has no veto, counts only authenticated decisions: a
/// bare claim is refused (exit 4, logged, nothing else changed); `--escalate-to user` is a
/// usage error.
fn escalation_and_veto_off_gates_refuse_claims(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    create(
        &run,
        "e2",
        &[
            "--allow",
            "alice",
            "--timeout",
            "1h",
            "--escalate-to",
            "bob",
        ],
    );
    create(&run, "v2", &["--allow", "alice", "--veto", "off"]);
    for g in ["e2", "v2"] {
        let before = run.before_refusal(g);
        let a = run
            .cmd()
            .args(["approve", g, "--as", "alice", "--yes"])
            .assert();
        assert_eq!(code(&a), 4, "{g}: {}", stderr(&a));
        assert!(stderr(&a).contains("authenticated"), "{}", stderr(&a));
        run.refused(&before, 1, g);
        assert_eq!(wait0(&run, g), 7, "{g} is still pending");
    }
    // With a token, it counts.
    let token = p
        .cmd()
        .args(["principals", "add", "alice"])
        .assert()
        .success();
    let token = String::from_utf8_lossy(&token.get_output().stdout)
        .trim()
        .to_string();
    run.cmd()
        .env("PROSE_TOKEN", &token)
        .args(["approve", "v2", "--yes"])
        .assert()
        .success();
    assert_eq!(wait0(&run, "v2"), 0);
    let before = run.snapshot();
    let a = run
        .cmd()
        .args([
            "gates",
            "create",
            "u",
            "--prompt",
            "p",
            "--allow",
            "alice",
            "--timeout",
            "1h",
            "--escalate-to",
            "user",
        ])
        .assert();
    assert_eq!(code(&a), 2, "{}", stderr(&a));
    assert!(stderr(&a).contains("reserved"), "{}", stderr(&a));
    assert_eq!(run.snapshot(), before, "a refused create wrote something");
    // `--inputs a,a` names a binding twice: a usage error.
    let a = run
        .cmd()
        .args(["gates", "create", "i", "--prompt", "p", "--inputs", "a,a"])
        .assert();
    assert_eq!(code(&a), 2, "{}", stderr(&a));
    assert_eq!(run.snapshot(), before, "a refused create wrote something");
}

/// Finding 3: the comment and time of a decision are the sealed event's: rewritten in the
/// row, the wait exits 9 and `show` says tampered, never "attested".
fn a_rewritten_comment_or_decision_time_is_tampering(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let edits = [
        ("c1", "resolution_comment = 'LGTM, ship to prod too'"),
        ("c2", "resolved_at = '1999-01-01 00:00:00'"),
        ("c3", "created_at = '1999-01-01 00:00:00'"),
        ("c4", "metadata = '{\"x\": 1}'"),
        ("c5", "timeout = '999h'"),
    ];
    for (g, set) in edits {
        create(&run, g, &["--allow", "alice"]);
        run.cmd()
            .args([
                "approve",
                g,
                "--as",
                "alice",
                "--yes",
                "--comment",
                "only staging",
            ])
            .assert()
            .success();
        assert_eq!(wait0(&run, g), 0);
        run.view().raw(
            &format!("UPDATE gates SET {set} WHERE id = '{g}'"),
            &format!("UPDATE openprose.gates SET {set} WHERE run_id = '$RUN' AND id = '{g}'"),
        );
        let w = run
            .cmd()
            .args(["gates", "wait", g, "--timeout", "0"])
            .assert();
        assert_eq!(code(&w), 9, "{set}");
        let shown = run.cmd().args(["--json", "gates", "show", g]).assert();
        let v = stdout_json(&shown);
        assert_eq!(v["integrity"]["state"], "tampered", "{set}: {v}");
    }
    // A pending gate given a decider's comment is tampered too.
    create(&run, "p1", &["--allow", "alice"]);
    run.view().raw(
        "UPDATE gates SET resolution_comment = 'approved by the board' WHERE id = 'p1'",
        "UPDATE openprose.gates SET resolution_comment = 'approved by the board'
          WHERE run_id = '$RUN' AND id = 'p1'",
    );
    assert_eq!(wait0(&run, "p1"), 9);
    assert_eq!(verify(&run), 9);
}

/// Finding 4: a decision pins the version of each input it was about; that version rewritten
/// in history (and a later one made to look like it) is tampering for verify, wait and
/// `get --version`.
fn a_decided_version_rewritten_in_history_is_tampering(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("topic", "good", None);
    create(&run, "g", &["--allow", "alice", "--inputs", "topic"]);
    run.cmd()
        .args(["approve", "g", "--as", "alice", "--yes"])
        .assert()
        .success();
    let v = run.view().events("g");
    let approved = v.iter().find(|e| e.0 == "approved").unwrap();
    assert_eq!(
        approved.2["pinned"]["topic"],
        serde_json::json!({"scope": null, "version": 1}),
        "{approved:?}"
    );
    assert_eq!(wait0(&run, "g"), 0);
    run.bind("topic", "second", None);
    assert_eq!(verify(&run), 0);
    run.cmd()
        .args(["get", "topic", "--version", "1"])
        .assert()
        .success()
        .stdout("good");
    run.view().raw(
        "UPDATE binding_history SET value = 'EVIL: deploy to prod' WHERE name = 'topic' AND n = 1;
         UPDATE binding_history SET value = 'good' WHERE name = 'topic' AND n = 2;
         UPDATE bindings SET value = 'good' WHERE name = 'topic'",
        "UPDATE openprose.binding_history SET value = 'EVIL: deploy to prod'
          WHERE run_id = '$RUN' AND name = 'topic' AND n = 1;
         UPDATE openprose.binding_history SET value = 'good'
          WHERE run_id = '$RUN' AND name = 'topic' AND n = 2;
         UPDATE openprose.bindings SET value = 'good' WHERE run_id = '$RUN' AND name = 'topic'",
    );
    assert_eq!(verify(&run), 9);
    let g = run.cmd().args(["get", "topic", "--version", "1"]).assert();
    assert_eq!(code(&g), 9, "{}", stderr(&g));
    assert!(!String::from_utf8_lossy(&g.get_output().stdout).contains("EVIL"));
    assert_eq!(wait0(&run, "g"), 9);
}

/// Finding 5: a revoked approver's vote counts nowhere: the store's "1 of 2", and every
/// reader's progress the same.
fn progress_never_counts_a_revoked_approver(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let add = |name: &str| {
        let a = p
            .cmd()
            .args(["principals", "add", name, "--group", "team"])
            .assert()
            .success();
        String::from_utf8_lossy(&a.get_output().stdout)
            .trim()
            .to_string()
    };
    let (ua, ub) = (add("ua"), add("ub"));
    create(&run, "q", &["--require", "2", "--allow", "group:team"]);
    let vote = |tok: &str| {
        run.cmd()
            .env("PROSE_TOKEN", tok)
            .args(["--json", "approve", "q", "--yes"])
            .assert()
            .success()
    };
    vote(&ua);
    p.cmd()
        .args(["principals", "revoke", "ua"])
        .assert()
        .success();
    let v = stdout_json(&vote(&ub));
    assert_eq!(v["progress"], "1 of 2 approvals: ub", "{v}");
    let show = stdout_json(&run.cmd().args(["--json", "gates", "show", "q"]).assert());
    assert_eq!(show["progress"], "1 of 2 approvals: ub", "{show}");
    let resume = stdout_json(&run.cmd().args(["--json", "resume"]).assert());
    let gates = resume["gates"].as_array().unwrap();
    let q = gates.iter().find(|g| g["id"] == "q").unwrap();
    assert!(
        q["progress"]
            .as_str()
            .unwrap()
            .starts_with("1 of 2 approvals: ub"),
        "{q}"
    );
    let scan = stdout_json(&run.cmd().args(["--json", "gates", "--scan"]).assert());
    let q = scan
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["id"] == "q")
        .unwrap();
    assert_eq!(q["progress"], "1 of 2 approvals: ub", "{q}");
}

/// Finding 6: waiting on several gates exits 9 when any of them is tampered with, even when
/// another is approved.
fn waiting_on_several_never_passes_over_a_tampered_gate(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    create(&run, "a", &["--allow", "alice"]);
    create(&run, "c", &["--allow", "alice"]);
    run.cmd()
        .args(["approve", "a", "--as", "alice", "--yes"])
        .assert()
        .success();
    run.view().raw(
        "UPDATE gates SET prompt = 'something else' WHERE id = 'c'",
        "UPDATE openprose.gates SET prompt = 'something else' WHERE run_id = '$RUN' AND id = 'c'",
    );
    for mode in ["--any", "--all"] {
        let w = run
            .cmd()
            .args([
                "gates",
                "wait",
                "--run",
                &run.id,
                "a",
                "c",
                mode,
                "--timeout",
                "0",
            ])
            .assert();
        assert_eq!(
            code(&w),
            9,
            "{mode}: {}",
            String::from_utf8_lossy(&w.get_output().stdout)
        );
    }
}
