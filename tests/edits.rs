//! Issue 49: approving with edits. `approve … --edit NAME=VALUE|@FILE` writes a new version of
//! an input the gate is about, by the approver, in the decision's transaction, and the decision
//! is sealed about the edited version: fresh, and a later rebind still makes it stale.

use crate::common::*;
use crate::serve::add;

on_both!(
    an_approval_edits_an_input_and_is_about_the_edit,
    edits_of_anything_else_write_nothing,
    a_quorums_edits_are_each_kept_with_who_made_them,
    approvers_racing_with_answers_and_edits_lose_none_unseen,
    history_says_who_wrote_a_decisions_versions_as_the_log_sealed_it,
    an_edit_changed_behind_the_tools_back_is_never_read,
    approvals_killed_mid_write_leave_all_of_a_decision_or_none,
    a_history_that_does_not_rebuild_is_tampered,
    a_decided_versions_steps_cut_or_renumbered_are_tampering,
    an_opening_renamed_hides_no_edit,
    a_forged_edit_is_never_read_from_a_broken_log,
);

/// A run whose input `draft` gate `g` was about, edited to `final` by alice's approval.
fn edited(p: &Project) -> Run {
    let run = p.init();
    run.bind("draft", "v1", None);
    open(&run, "g", None);
    run.cmd()
        .args([
            "approve",
            "g",
            "--as",
            "alice",
            "-y",
            "--edit",
            "draft=final",
        ])
        .assert()
        .success();
    run
}

/// The edit of `draft` (its value and its kept version 2) forged behind the tool's back, with
/// the version triggers out of the way: (SQLite, PostgreSQL).
const FORGE_EDIT: (&str, &str) = (
    "DROP TRIGGER bindings_version_update;
     DROP TRIGGER binding_history_version;
     UPDATE bindings SET value = 'FORGE' WHERE name = 'draft';
     UPDATE binding_history SET value = 'FORGE' WHERE name = 'draft' AND n = 2;",
    "ALTER TABLE openprose.gate_audit_log DISABLE TRIGGER USER;
     ALTER TABLE openprose.bindings DISABLE TRIGGER USER;
     UPDATE openprose.bindings SET value = convert_to('FORGE', 'UTF8')
      WHERE run_id = '$RUN' AND name = 'draft';
     UPDATE openprose.binding_history SET value = convert_to('FORGE', 'UTF8')
      WHERE run_id = '$RUN' AND name = 'draft' AND n = 2;",
);

fn open(run: &Run, gate: &str, require: Option<&str>) {
    let mut c = run.cmd();
    c.args([
        "gates", "create", gate, "--prompt", "Publish?", "--inputs", "draft",
    ])
    .args(["--allow", "alice,bob"]);
    if let Some(n) = require {
        c.args(["--require", n]);
    }
    c.assert().success();
}

/// The edit is the input's newest version, written by the approver; `gates wait` and `gates
/// show` say so, with the versions and sizes; the decision is fresh about it, and a rebind
/// after it (before the VM consumed the decision) makes it stale (exit 11).
fn an_approval_edits_an_input_and_is_about_the_edit(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("draft", "hello world", None);
    open(&run, "g", None);
    let file = p.write("better.txt", b"hello, better world");
    run.cmd()
        .args(["approve", "g", "--as", "alice", "-y", "--edit"])
        .arg(format!("draft=@{}", file.display()))
        .assert()
        .success();
    assert_eq!(run.get("draft", None), b"hello, better world");
    let a = run
        .cmd()
        .args(["--json", "history", "draft"])
        .assert()
        .success();
    let h = stdout_json(&a).to_string();
    assert!(h.contains("\"alice\""), "{h}");
    let a = run
        .cmd()
        .args(["--json", "gates", "show", "g"])
        .assert()
        .success();
    let v = stdout_json(&a);
    let e = &v["edits"][0];
    assert_eq!(e["name"], "draft", "{v}");
    assert_eq!(e["by"], "alice", "{v}");
    assert_eq!(
        (e["from_version"].as_i64(), e["version"].as_i64()),
        (Some(1), Some(2)),
        "{v}"
    );
    assert_eq!(
        (e["bytes_before"].as_i64(), e["bytes"].as_i64()),
        (Some(11), Some(19)),
        "{v}"
    );
    let a = run.cmd().args(["gates", "show", "g"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(
        out.contains("Edited: draft by alice: version 1 -> 2 (11 -> 19 bytes)"),
        "{out}"
    );
    // Rebound after the decision and before the VM read it: stale.
    run.bind("draft", "changed again", None);
    let a = run.cmd().args(["gates", "wait", "g"]).assert().failure();
    assert_eq!(code(&a), 11, "{}", stderr(&a));
    // Reopened and approved with an edit, then waited on: fresh, and it says what changed.
    run.cmd()
        .args([
            "gates", "create", "g", "--prompt", "Publish?", "--inputs", "draft",
        ])
        .args(["--allow", "alice,bob", "--reopen"])
        .assert()
        .success();
    run.cmd()
        .args(["approve", "g", "--as", "bob", "-y", "--edit", "draft=final"])
        .assert()
        .success();
    let a = run.cmd().args(["gates", "wait", "g"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(
        out.contains("edited: draft by bob: version 3 -> 4 (13 -> 5 bytes)"),
        "{out}"
    );
    assert_eq!(run.get("draft", None), b"final");
    // `resume` says it too, for the VM that comes back.
    let a = run.cmd().args(["resume"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(
        out.contains("  edited: draft by bob: version 3 -> 4 (13 -> 5 bytes)"),
        "{out}"
    );
}

/// An edit of a binding the gate is not about, on a rejection, given twice, malformed, or of a
/// const input is refused, and writes nothing.
fn edits_of_anything_else_write_nothing(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("draft", "v1", None);
    run.bind("other", "o", None);
    open(&run, "g", None);
    let nul = p.write("nul.txt", b"a\0b");
    let nul = format!("draft=@{}", nul.display());
    let cases: [(&[&str], i32, &str); 6] = [
        (&["approve", "g", "--edit", &nul], 2, "NUL"),
        (&["approve", "g", "--edit", "other=x"], 2, "is not about it"),
        (&["approve", "g", "--edit", "draft"], 2, "NAME=VALUE"),
        (
            &["approve", "g", "--edit", "draft=a", "--edit", "draft=b"],
            2,
            "twice",
        ),
        (
            &[
                "approve", "g", "--reject", "--reason", "r", "--edit", "draft=a",
            ],
            2,
            "--edit",
        ),
        (
            &["approve", "g", "--edit", "draft=@/nonexistent/x"],
            2,
            "cannot read",
        ),
    ];
    for (args, want, says) in cases {
        run.refuses(&[args, &["--as", "alice", "-y"]].concat(), want, says);
    }
    // A const input cannot be edited: refused (exit 4), nothing written.
    run.cmd()
        .args(["bind", "fixed", "1", "--kind", "const"])
        .assert()
        .success();
    run.cmd()
        .args(["gates", "create", "c", "--prompt", "p", "--inputs", "fixed"])
        .assert()
        .success();
    run.refuses(
        &["approve", "c", "--as", "alice", "-y", "--edit", "fixed=2"],
        2,
        "is a const",
    );
}

/// Two approvals a gate needs, each editing the input: each edit is a version by its
/// approver, on top of the one before (the second approver edits what the first left), both
/// listed with who made them; a vote given again with an edit is refused (exit 4).
fn a_quorums_edits_are_each_kept_with_who_made_them(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let tokens: Vec<String> = ["alice", "bob"].iter().map(|n| add(&p, n)).collect();
    run.bind("draft", "v1", None);
    open(&run, "g", Some("2"));
    let vote = |who: usize, edit: &str| {
        run.cmd()
            .env("PROSE_TOKEN", &tokens[who])
            .args(["approve", "g", "-y", "--edit", edit])
            .assert()
    };
    vote(0, "draft=alice's").success();
    assert_eq!(run.get("draft", None), b"alice's");
    let before = run.snapshot();
    let a = vote(0, "draft=again").failure();
    assert_eq!(code(&a), 4, "{}", stderr(&a));
    assert_eq!(run.snapshot(), before);
    vote(1, "draft=bob's").success();
    assert_eq!(run.get("draft", None), b"bob's");
    let a = run
        .cmd()
        .args(["--json", "gates", "wait", "g"])
        .assert()
        .success();
    let v = stdout_json(&a);
    let edits = v["edits"].as_array().unwrap();
    assert_eq!(edits.len(), 2, "{v}");
    assert_eq!(
        (&edits[0]["by"], &edits[1]["by"]),
        (&"alice".into(), &"bob".into())
    );
    assert_eq!(edits[0]["version"], 2, "{v}");
    assert_eq!(edits[1]["from_version"], 2, "{v}");
    assert_eq!(edits[1]["version"], 3, "{v}");
}

/// Three approvers of a gate that needs two race, each with an answer of their own and an edit
/// of the input, on the same moment (a barrier), round after round. Whatever the order, every
/// approval that exited 0 is a counted vote whose answer is listed by its principal and whose
/// edit is a version of the input written by that principal, on top of the one before
/// (`from_version`), in the order the votes were sealed; every other exited 4 and left
/// nothing; the binding holds the deciding vote's answer; the log verifies.
fn approvers_racing_with_answers_and_edits_lose_none_unseen(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let names = ["alice", "bob", "carol"];
    let tokens: Vec<String> = names.iter().map(|n| add(&p, n)).collect();
    for round in 0..4 {
        let (gate, input, out) = (
            format!("q{round}"),
            format!("draft{round}"),
            format!("n{round}"),
        );
        run.bind(&input, "v0", None);
        run.cmd()
            .args([
                "gates", "create", &gate, "--prompt", "Publish?", "--inputs", &input,
            ])
            .args(["--allow", "alice,bob,carol", "--require", "2"])
            .args([
                "--response-schema",
                r#"{"type":"integer"}"#,
                "--response-binding",
                &out,
            ])
            .assert()
            .success();
        let barrier = std::sync::Barrier::new(names.len());
        let codes: Vec<i32> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..names.len())
                .map(|i| {
                    let (barrier, tokens, gate, input) = (&barrier, &tokens, &gate, &input);
                    let run = &run;
                    s.spawn(move || {
                        let mut c = run.std_cmd();
                        c.env("PROSE_TOKEN", &tokens[i])
                            .args(["approve", gate, "-y", "--response", &i.to_string()])
                            .args(["--edit", &format!("{input}=by {}", names[i])]);
                        barrier.wait();
                        c.output().unwrap().status.code().unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(
            codes.iter().all(|c| *c == 0 || *c == 4),
            "round {round}: {codes:?}"
        );
        let won: Vec<&str> = (0..names.len())
            .filter(|i| codes[*i] == 0)
            .map(|i| names[i])
            .collect();
        assert!(
            !won.is_empty(),
            "round {round}: no approval went through: {codes:?}"
        );
        let v = stdout_json(
            &run.cmd()
                .args(["--json", "gates", "show", &gate])
                .assert()
                .success(),
        );
        // Each approval that went through is an edit by its principal, in a chain.
        let edits = v["edits"].as_array().unwrap();
        assert_eq!(edits.len(), won.len(), "round {round}: {v}");
        let mut from = 1;
        for e in edits {
            assert_eq!(e["from_version"], from, "round {round}: {v}");
            from = e["version"].as_i64().unwrap();
            let by = e["by"].as_str().unwrap();
            assert!(
                won.contains(&by),
                "round {round}: {by} edited but exited 4: {v}"
            );
        }
        let history = stdout_json(
            &run.cmd()
                .args(["--json", "history", &input])
                .assert()
                .success(),
        );
        let writers: Vec<&str> = history["versions"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .skip(1)
            .map(|h| h["by"].as_str().unwrap())
            .collect();
        let sealed: Vec<&str> = edits.iter().map(|e| e["by"].as_str().unwrap()).collect();
        assert_eq!(
            writers, sealed,
            "round {round}: history and the sealed edits disagree"
        );
        let last = sealed.last().unwrap();
        assert_eq!(run.get(&input, None), format!("by {last}").as_bytes());
        // The answers: one per vote that counted, by its principal.
        let answer_of = |who: &str| names.iter().position(|n| *n == who).unwrap();
        if won.len() == 2 {
            assert_eq!(v["status"], "approved", "round {round}: {v}");
            let decider = v["resolved_by"].as_str().unwrap();
            assert_eq!(v["response"], answer_of(decider), "round {round}: {v}");
            let listed: Vec<(String, i64)> = v["responses"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    (
                        r["by"].as_str().unwrap().to_string(),
                        r["response"].as_i64().unwrap(),
                    )
                })
                .collect();
            let mut expected: Vec<(String, i64)> = won
                .iter()
                .map(|w| (w.to_string(), answer_of(w) as i64))
                .collect();
            let mut got = listed.clone();
            expected.sort();
            got.sort();
            assert_eq!(got, expected, "round {round}: {v}");
            assert_eq!(
                run.get(&out, None),
                answer_of(decider).to_string().as_bytes()
            );
        } else {
            assert_eq!(v["status"], "pending", "round {round}: {v}");
        }
    }
    run.cmd().args(["gates", "verify"]).assert().success();
}

/// The writer and size `history` shows of a version a decision wrote (an approver's edit, the
/// decision's answer) are the sealed decision's: a history row changed to name another
/// writer, or to hold other bytes, is exit 9; a version no decision wrote is not checked.
fn history_says_who_wrote_a_decisions_versions_as_the_log_sealed_it(b: Backend) {
    let cases = [
        ("draft", "principal = 'mallory'"),
        ("draft", "value = 'forged, longer'"),
        ("out", "principal = 'mallory'"),
        ("out", "value = '{\"n\":9}'"),
    ];
    for (name, change) in cases {
        let Some(p) = Project::on(b) else { return };
        let run = p.init();
        run.bind("draft", "v1", None);
        run.cmd()
            .args([
                "gates", "create", "g", "--prompt", "Publish?", "--inputs", "draft",
            ])
            .args([
                "--response-schema",
                r#"{"type":"object"}"#,
                "--response-binding",
                "out",
            ])
            .assert()
            .success();
        run.cmd()
            .args([
                "approve",
                "g",
                "--as",
                "alice",
                "-y",
                "--response",
                r#"{"n":1}"#,
            ])
            .args(["--edit", "draft=v2 by alice"])
            .assert()
            .success();
        for n in ["draft", "out"] {
            let h = stdout_json(&run.cmd().args(["--json", "history", n]).assert().success());
            assert_eq!(h["versions"][0]["by"], "alice", "{h}");
        }
        run.view().raw(
            &format!("UPDATE binding_history SET {change} WHERE name = '{name}' AND n = (SELECT MAX(n) FROM binding_history WHERE name = '{name}')"),
            &format!("UPDATE openprose.binding_history SET {change} WHERE run_id = '$RUN' AND name = '{name}' AND n = (SELECT MAX(n) FROM openprose.binding_history WHERE run_id = '$RUN' AND name = '{name}')"),
        );
        let a = run.cmd().args(["history", name]).assert().failure();
        assert_eq!(code(&a), 9, "{name} {change}: {}", stderr(&a));
        assert!(
            stderr(&a).contains("changed behind prose-state's back"),
            "{}",
            stderr(&a)
        );
        // The other binding's history still reads.
        let other = if name == "draft" { "out" } else { "draft" };
        run.cmd().args(["history", other]).assert().success();
    }
}

/// Found by an outside VM played literally: the edited input, changed in place after the VM
/// consumed the decision (its version left as it was), was read as the approver's edit. A read
/// of a version a sealed decision was about holds what was decided (exit 9 otherwise); a
/// program's own write after it is a new version, read as it is.
fn an_edit_changed_behind_the_tools_back_is_never_read(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("draft", "v1", None);
    open(&run, "g", None);
    run.cmd()
        .args([
            "approve",
            "g",
            "--as",
            "alice",
            "-y",
            "--edit",
            "draft=alice text",
        ])
        .assert()
        .success();
    run.cmd()
        .args(["gates", "wait", "g", "--timeout", "0"])
        .assert()
        .success();
    run.cmd()
        .args(["get", "draft"])
        .assert()
        .success()
        .stdout("alice text");
    // `resume` says the decision wrote it: no session's output to log.
    let a = run.cmd().args(["resume"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    let line = out
        .lines()
        .find(|l| l.starts_with("binding draft"))
        .unwrap();
    assert!(
        line.contains("written by gate g's decision") && !line.contains("unlogged"),
        "{out}"
    );
    // Changed in place, its version left as it was (the triggers that version a write off).
    run.view().raw(
        "DROP TRIGGER bindings_version_update; UPDATE bindings SET value = 'forged!!!!' WHERE name = 'draft'",
        "ALTER TABLE openprose.bindings DISABLE TRIGGER USER;
         UPDATE openprose.bindings SET value = 'forged!!!!' WHERE run_id = '$RUN' AND name = 'draft';
         ALTER TABLE openprose.bindings ENABLE TRIGGER USER",
    );
    let a = run.cmd().args(["get", "draft"]).assert().failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    assert!(!String::from_utf8_lossy(&a.get_output().stdout).contains("forged"));
    // The program's own write after the decision is read as it is.
    run.bind("draft", "the program's next draft", None);
    run.cmd()
        .args(["get", "draft"])
        .assert()
        .success()
        .stdout("the program's next draft");
}

/// `approve … --response … --edit …` SIGKILLed at random moments across its life, 40 times:
/// afterwards each gate is decided with its answer in its response binding and its edit as the
/// approver's version of the input, all three, or it is still pending with neither. The log
/// verifies every time, and a decided gate is one `gates wait` accepts.
fn approvals_killed_mid_write_leave_all_of_a_decision_or_none(b: Backend) {
    use rand::Rng;
    use std::time::{Duration, Instant};
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("draft", "the first draft", None);
    let schema =
        r#"{"type":"object","properties":{"size":{"type":"integer"}},"required":["size"]}"#;
    let open = |i: usize| {
        run.cmd()
            .args(["gates", "create", &format!("g{i}"), "--prompt", "Publish?"])
            .args(["--inputs", "draft", "--response-schema", schema])
            .args(["--response-binding", &format!("ans{i}")])
            .assert()
            .success();
    };
    let approve = |i: usize| {
        let mut c = run.std_cmd();
        c.args(["approve", &format!("g{i}"), "--as", "alice", "-y"])
            .args(["--response", &format!(r#"{{"size":{i}}}"#)])
            .args(["--edit", &format!("draft=edited by attempt {i}")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        c
    };
    // How long one approval takes here, to spread the kills across its whole life (the
    // estimate follows the machine: it shrinks when one finished before its kill).
    open(0);
    let t = Instant::now();
    assert!(approve(0).status().unwrap().success());
    let mut life = t.elapsed().as_micros().max(2_000) as f64;
    let mut rng = rand::rng();
    let (mut killed, mut finished) = (0, 0);
    for i in 1..=40 {
        open(i);
        let mut child = approve(i).spawn().unwrap();
        let upper = (life * 1.2) as u64;
        std::thread::sleep(Duration::from_micros(rng.random_range(0..upper.max(1))));
        let _ = child.kill();
        if child.wait().unwrap().success() {
            finished += 1;
            life = (life * 0.85).max(1_000.0);
        } else {
            killed += 1;
            life *= 1.05;
        }
        if let Some(url) = &run.pg_url {
            pg::await_no_other_sessions(url);
        }
        let g = format!("g{i}");
        let a = run
            .cmd()
            .args(["--json", "gates", "show", &g])
            .assert()
            .success();
        let status = stdout_json(&a)["status"].as_str().unwrap().to_string();
        let answer = run
            .cmd()
            .args(["get", &format!("ans{i}")])
            .output()
            .unwrap();
        let edit = format!("edited by attempt {i}");
        let h = run
            .cmd()
            .args(["--json", "history", "draft"])
            .assert()
            .success();
        let versions = stdout_json(&h).to_string();
        let edited = versions.contains(&edit);
        match status.as_str() {
            "approved" => {
                assert_eq!(answer.status.code(), Some(0), "attempt {i}: no answer");
                assert_eq!(answer.stdout, format!(r#"{{"size":{i}}}"#).into_bytes());
                assert!(edited, "attempt {i}: approved without its edit: {versions}");
                run.cmd()
                    .args(["gates", "wait", &g, "--timeout", "0"])
                    .assert()
                    .success();
            }
            "pending" => {
                assert_eq!(
                    answer.status.code(),
                    Some(3),
                    "attempt {i}: an answer, no decision"
                );
                assert!(
                    !edited,
                    "attempt {i}: an edit without its decision: {versions}"
                );
            }
            other => panic!("attempt {i}: gate {g} is {other}"),
        }
        run.cmd().args(["gates", "verify"]).assert().success();
    }
    assert!(killed >= 8, "killed {killed}, finished {finished}");
}

/// An edited version's history row made a step (`delta`) onto a base that is not JSON, behind
/// the tool's back: no rule writes that, so every read of the version, the wait on the
/// decision about it and `gates verify` say tampered (exit 9), not refused (an outside battery
/// found exit 4, and `gates verify` failing with 1).
fn a_history_that_does_not_rebuild_is_tampered(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("draft", "draft v1", None);
    open(&run, "g", None);
    run.cmd()
        .args([
            "approve",
            "g",
            "--as",
            "alice",
            "-y",
            "--edit",
            "draft=alice's fix",
        ])
        .assert()
        .success();
    run.view().raw(
        "UPDATE binding_history SET delta = '{\"merge\":{}}', value = NULL WHERE name = 'draft' AND n = 2",
        "UPDATE openprose.binding_history SET delta = '{\"merge\":{}}', value = NULL
          WHERE run_id = '$RUN' AND name = 'draft' AND n = 2",
    );
    for args in [
        vec!["get", "draft", "--version", "2"],
        vec!["gates", "wait", "g", "--timeout", "0"],
        vec!["gates", "verify"],
    ] {
        let a = run.cmd().args(&args).assert().failure();
        assert_eq!(code(&a), 9, "{args:?}: {}", stderr(&a));
    }
}

/// A decision pinned a version kept as steps (two merges onto a whole value): a step in the
/// middle cut, or renumbered, behind the tool's back leaves the pinned version without its
/// base. No rule makes a hole (a prune keeps its oldest version whole), so every read of it,
/// the wait on the decision and `gates verify` say tampered (exit 9); an outside battery
/// found exit 4 ("not kept") and 1. Nothing is written by any of them.
fn a_decided_versions_steps_cut_or_renumbered_are_tampering(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("draft", r#"{"a":1}"#, None);
    for patch in [r#"{"b":2}"#, r#"{"c":3}"#] {
        run.cmd()
            .args(["bind", "draft", "--merge", patch])
            .assert()
            .success();
    }
    open(&run, "g", None);
    run.cmd()
        .args(["approve", "g", "--as", "alice", "-y"])
        .assert()
        .success();
    let decided = p.snapshot();
    for (sqlite, postgres) in [
        (
            "DELETE FROM binding_history WHERE name = 'draft' AND n = 2",
            "DELETE FROM openprose.binding_history WHERE run_id = '$RUN' AND name = 'draft' AND n = 2",
        ),
        (
            "UPDATE binding_history SET n = 9 WHERE name = 'draft' AND n = 2",
            "UPDATE openprose.binding_history SET n = 9 WHERE run_id = '$RUN' AND name = 'draft' AND n = 2",
        ),
    ] {
        p.restore(&decided);
        run.view().raw(sqlite, postgres);
        let before = run.snapshot();
        for args in [
            vec!["get", "draft", "--version", "3"],
            vec!["gates", "wait", "g", "--timeout", "0"],
            vec!["gates", "verify"],
        ] {
            let a = run.cmd().args(&args).assert().failure();
            assert_eq!(code(&a), 9, "{sqlite}: {args:?}: {}", stderr(&a));
        }
        assert_eq!(run.snapshot(), before, "{sqlite}");
        // `resume` says stop, and its exit says why (an outside battery found exit 0).
        let a = run.cmd().args(["resume"]).assert().failure();
        assert_eq!(code(&a), 9, "{sqlite}: resume: {}", stderr(&a));
    }
}

/// An outside battery forged an approver's edit (the value and its kept version) and renamed
/// the input in the gate's opening, so that no lookup by the input's name found the gate:
/// `get` and `history` showed the forged version as the approver's with exit 0. A version a
/// decision wrote is judged by its gate's own sealed openings too: both are exit 9.
fn an_opening_renamed_hides_no_edit(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = edited(&p);
    let (from, to) = (r#""inputs":["draft"]"#, r#""inputs":["drafx"]"#);
    run.view().raw(
        &format!(
            "DROP TRIGGER gate_audit_log_no_update;
             UPDATE gate_audit_log SET metadata = replace(metadata, '{from}', '{to}')
              WHERE event_type = 'created';
             {}",
            FORGE_EDIT.0
        ),
        &format!(
            "{}
             UPDATE openprose.gate_audit_log SET metadata = replace(metadata, '{from}', '{to}')
              WHERE run_id = '$RUN' AND event_type = 'created';",
            FORGE_EDIT.1
        ),
    );
    for args in [vec!["get", "draft"], vec!["history", "draft"]] {
        run.refuses(&args, 9, "");
    }
}

/// A second outside round forged an approver's edit (the value and its kept version) and
/// then cut the decision's row from the log's end, or changed it: a broken log no longer said
/// which version was decided, and `get` read the forged edit with exit 0. An input some gate is
/// about is read only from a log that verifies whole: exit 9, now and in the past.
fn a_forged_edit_is_never_read_from_a_broken_log(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = edited(&p);
    let decided = p.snapshot();
    for (what, sqlite, postgres) in [
        (
            "the decision cut",
            "DROP TRIGGER gate_audit_log_no_delete;
             DELETE FROM gate_audit_log WHERE event_type = 'approved';",
            "DELETE FROM openprose.gate_audit_log
              WHERE run_id = '$RUN' AND event_type = 'approved';",
        ),
        (
            "the decision changed",
            "DROP TRIGGER gate_audit_log_no_update;
             UPDATE gate_audit_log SET comment = 'x' WHERE event_type = 'approved';",
            "UPDATE openprose.gate_audit_log SET comment = 'x'
              WHERE run_id = '$RUN' AND event_type = 'approved';",
        ),
    ] {
        p.restore(&decided);
        run.view().raw(
            &format!("{}\n{sqlite}", FORGE_EDIT.0),
            &format!("{}\n{postgres}", FORGE_EDIT.1),
        );
        // The case, shown with a failure below.
        eprintln!("case: {what}");
        for args in [
            vec!["get", "draft"],
            vec!["get", "draft", "--version", "2"],
            vec!["get", "draft", "--as-of", "2100-01-01 00:00:00"],
        ] {
            run.refuses(&args, 9, "");
        }
    }
}
