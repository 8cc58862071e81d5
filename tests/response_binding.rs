//! Issue 49: `gates create --response-binding NAME` names a binding in the gate's scope that
//! only a decision writes, with its answer, as a version by the decider, in the decision's
//! transaction. `bind` to it is refused (exit 4); `get` checks it against the sealed decision
//! (exit 9 when it was changed behind prose-state's back).

use crate::common::*;

on_both!(
    the_answer_is_a_binding_only_a_decision_writes,
    a_response_binding_is_refused_where_no_decision_could_write_it,
    what_an_outside_attack_found,
    an_answer_no_one_gave_is_never_read_in_its_place,
    no_write_goes_past_an_unanswered_response_binding,
    no_binding_below_the_answer_hides_it,
    an_answers_history_holds_only_what_decisions_wrote,
    no_spelling_of_the_log_hides_an_answer,
    no_change_to_an_opening_hides_its_answer,
    an_opening_that_makes_its_answer_an_input_hides_nothing,
    the_value_checked_is_the_value_printed,
    a_machine_without_the_key_vouches_for_no_answer,
);

/// Gate `g` opened to answer into `ans` (an integer), and answered 5 by alice.
fn answered(run: &Run) {
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "p"])
        .args(["--response-schema", r#"{"type":"integer"}"#])
        .args(["--response-binding", "ans"])
        .assert()
        .success();
    run.cmd()
        .args(["approve", "g", "--as", "alice", "-y", "--response", "5"])
        .assert()
        .success();
}

const SCHEMA: &str =
    r#"{"type":"object","properties":{"size":{"type":"integer"}},"required":["size"]}"#;

fn open(run: &Run, gate: &str, scope: i64, reopen: bool) {
    let mut c = run.cmd();
    c.args(["gates", "create", gate, "--prompt", "How big?"])
        .args(["--response-schema", SCHEMA, "--response-binding", "size"])
        .args(["--execution-id", &scope.to_string()]);
    if reopen {
        c.arg("--reopen");
    }
    c.assert().success();
}

/// The decision writes the answer into the binding in the gate's frame, by the approver;
/// every other write is refused and changes nothing; a rejection that answers writes it, a
/// rejection that does not and a timeout leave it; a row edit is caught by `get`.
fn the_answer_is_a_binding_only_a_decision_writes(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let block = run.exec(1, "do review:", "executing", None);
    open(&run, "g", block, false);
    // Before the decision: no binding, and no one else may make it.
    let block_id = block.to_string();
    for args in [
        vec!["bind", "size", "{\"size\":1}"],
        vec!["bind", "size", "--append", "1"],
        vec!["bind", "size", "{\"size\":1}", "--kind", "const"],
    ] {
        let args = [&args[..], &["--execution-id", &block_id]].concat();
        run.refuses(&args, 4, "only a decision on it writes it");
    }
    // The same name in another frame is another binding: free to write.
    run.bind("size", "other", None);
    run.cmd()
        .args(["approve", "g", "--as", "alice", "-y"])
        .args(["--response", r#"{"size": 3}"#])
        .assert()
        .success();
    assert_eq!(run.get("size", Some(block)), br#"{"size":3}"#);
    assert_eq!(run.get("size", None), b"other");
    // Its one version is the approver's, from the gate's statement.
    let a = run
        .cmd()
        .args([
            "--json",
            "history",
            "size",
            "--execution-id",
            &block.to_string(),
        ])
        .assert()
        .success();
    let h = stdout_json(&a);
    let text = h.to_string();
    assert!(text.contains("\"alice\""), "{h}");
    // `gates wait` says where the answer went.
    let a = run
        .cmd()
        .args(["--json", "gates", "wait", "g"])
        .assert()
        .success();
    let v = stdout_json(&a);
    assert_eq!(v["response_binding"]["name"], "size", "{v}");
    assert_eq!(v["response_binding"]["execution_id"], block, "{v}");
    let a = run.cmd().args(["gates", "wait", "g"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(out.contains("written to binding: size"), "{out}");
    // Still no one else writes it after the decision.
    let before = run.snapshot();
    let a = run
        .cmd()
        .args([
            "bind",
            "size",
            "{\"size\":9}",
            "--execution-id",
            &block.to_string(),
        ])
        .assert()
        .failure();
    assert_eq!(code(&a), 4, "{}", stderr(&a));
    assert_eq!(run.snapshot(), before);
    // A rejection that answers writes it; one that does not, and a timeout, leave it.
    open(&run, "g", block, true);
    run.cmd()
        .args(["reject", "g", "--as", "bob", "-y", "--reason", "smaller"])
        .args(["--response", r#"{"size": 2}"#])
        .assert()
        .success();
    assert_eq!(run.get("size", Some(block)), br#"{"size":2}"#);
    // `resume` names the answer and where it is.
    let a = run.cmd().args(["resume"]).assert();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(
        out.contains(&format!(
            r#"  answer: {{"size":2}} (in binding size, in the frame of execution {block}: seen from inside it, `get size --execution-id {block}`)"#
        )),
        "{out}"
    );
    open(&run, "g", block, true);
    run.cmd()
        .args(["reject", "g", "--as", "bob", "-y", "--reason", "no"])
        .assert()
        .success();
    // The binding keeps the earlier answer (its history's newest), and it is not this
    // opening's: `get` says no decision answered the opening that stands (3).
    run.refuses(
        &["get", "size", "--execution-id", &block.to_string()],
        3,
        "opened again (instance 3) after instance 2 answered",
    );
    // A value put in behind prose-state's back is not the sealed answer: exit 9.
    run.view().raw(
        "UPDATE bindings SET value = '{\"size\":200}' WHERE name = 'size' AND execution_id IS NOT NULL",
        "UPDATE openprose.bindings SET value = convert_to('{\"size\":200}', 'UTF8')
          WHERE run_id = '$RUN' AND name = 'size' AND execution_id IS NOT NULL",
    );
    let a = run
        .cmd()
        .args(["get", "size", "--execution-id", &block.to_string()])
        .assert()
        .failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    // As the decision's answer, or (where the table's trigger recorded the write as a version
    // of its own, at the server's time) as a row that is not its version.
    assert!(
        stderr(&a).contains("sealed decision") || stderr(&a).contains("changed in place"),
        "{}",
        stderr(&a)
    );
}

/// Without a schema there is no answer to hold (exit 2); a name that is no binding name is
/// bad input (exit 2); a const in the gate's scope can never be written by a decision (exit
/// 4). Each refusal writes nothing.
fn a_response_binding_is_refused_where_no_decision_could_write_it(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["bind", "fixed", "1", "--kind", "const"])
        .assert()
        .success();
    let cases: [(&[&str], i32, &str); 4] = [
        (
            &[
                "--inputs",
                "size",
                "--response-schema",
                SCHEMA,
                "--response-binding",
                "size",
            ],
            2,
            "one of --inputs",
        ),
        (&["--response-binding", "size"], 2, "--response-schema"),
        (
            &["--response-schema", SCHEMA, "--response-binding", "no way"],
            2,
            "--response-binding",
        ),
        (
            &["--response-schema", SCHEMA, "--response-binding", "fixed"],
            4,
            "const",
        ),
    ];
    for (args, want, says) in cases {
        let args = [&["gates", "create", "g", "--prompt", "p"], args].concat();
        run.refuses(&args, want, says);
    }
}

/// What an outside attack on the first version found, each closed:
/// - an edit of the decision's sealed event, or rows cut from the log's end with the gate row
///   set back to pending, turned `get`'s check off: the log is now checked whole (exit 9);
/// - `fork --bind` wrote the response binding: refused (exit 4), no run made;
/// - a gate in a loop sealed the loop's record as the binding's scope, where `bind` does not
///   write: the scope is now the language's frame, as `bind` resolves it, and a binding of the
///   name below it (`--local`) is refused as well, since it would hide the answer;
/// - a read of the past (`get --version`, `--as-of`) returned an edited version the decision
///   wrote: it is checked against the sealed answer too.
fn what_an_outside_attack_found(b: Backend) {
    let schema = r#"{"type":"object"}"#;
    // The sealed event edited, then the log cut and the gate row set back.
    for attack in ["edit", "cut"] {
        let Some(p) = Project::on(b) else { return };
        let run = p.init();
        run.cmd()
            .args(["gates", "create", "g", "--prompt", "p"])
            .args(["--response-schema", schema, "--response-binding", "ans"])
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
                r#"{"n":3}"#,
            ])
            .assert()
            .success();
        let forged = "UPDATE bindings SET value = '{\"n\":4}' WHERE name = 'ans'";
        let forged_pg =
            "UPDATE openprose.bindings SET value = '{\"n\":4}' WHERE run_id = '$RUN' AND name = 'ans'";
        match attack {
            "edit" => run.view().raw(
                &format!(
                    "DROP TRIGGER gate_audit_log_no_update;
                     UPDATE gate_audit_log SET comment = 'x' WHERE event_type = 'approved'; {forged}"
                ),
                &format!(
                    "ALTER TABLE openprose.gate_audit_log DISABLE TRIGGER gate_audit_log_append_only;
                     UPDATE openprose.gate_audit_log SET comment = 'x'
                      WHERE run_id = '$RUN' AND event_type = 'approved'; {forged_pg}"
                ),
            ),
            _ => run.view().raw(
                &format!(
                    "DROP TRIGGER gate_audit_log_no_delete;
                     DELETE FROM gate_audit_log WHERE gate_id = 'g' AND event_type <> 'created';
                     UPDATE gates SET status = 'pending', resolved_by = NULL, resolved_at = NULL;
                     {forged}"
                ),
                &format!(
                    "ALTER TABLE openprose.gate_audit_log DISABLE TRIGGER gate_audit_log_append_only;
                     DELETE FROM openprose.gate_audit_log
                      WHERE run_id = '$RUN' AND gate_id = 'g' AND event_type <> 'created';
                     UPDATE openprose.gates SET status = 'pending', resolved_by = NULL,
                            resolved_at = NULL WHERE run_id = '$RUN';
                     {forged_pg}"
                ),
            ),
        }
        let a = run.cmd().args(["get", "ans"]).assert().failure();
        assert_eq!(code(&a), 9, "{attack}: {}", stderr(&a));
    }
    // A fork may not bind a gate's answer.
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args([
            "exec-append",
            "--status",
            "completed",
            "--index",
            "1",
            "--text",
            "session \"a\"",
        ])
        .assert()
        .success();
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "p"])
        .args(["--response-schema", schema, "--response-binding", "ans"])
        .assert()
        .success();
    let before = run.snapshot();
    let listed = || {
        let a = p.cmd().args(["--json", "runs"]).assert().success();
        String::from_utf8_lossy(&a.get_output().stdout).into_owned()
    };
    let runs_before = listed();
    let a = run
        .cmd()
        .args(["fork", "--at", "2", "--bind", r#"ans={"n":99}"#])
        .assert()
        .failure();
    assert_eq!(code(&a), 4, "{}", stderr(&a));
    assert!(
        stderr(&a).contains("only a decision on it writes"),
        "{}",
        stderr(&a)
    );
    assert_eq!(run.snapshot(), before);
    assert_eq!(listed(), runs_before, "a fork was made");
    // In a loop: the answer's scope is the loop's frame, and nothing below it hides it.
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let l = run.exec(1, "repeat 2:", "started", None);
    let a = run
        .cmd()
        .args(["--json", "gates", "create", "g", "--prompt", "p"])
        .args(["--response-schema", schema, "--response-binding", "ans"])
        .args(["--execution-id", &l.to_string()])
        .assert()
        .success();
    let v = stdout_json(&a);
    assert_eq!(v["response_binding"]["name"], "ans", "{v}");
    assert_eq!(
        v["response_binding"]["execution_id"],
        serde_json::Value::Null,
        "{v}"
    );
    let before = run.snapshot();
    for extra in [&[][..], &["--local"][..]] {
        let a = run
            .cmd()
            .args([
                "bind",
                "ans",
                r#"{"n":1}"#,
                "--execution-id",
                &l.to_string(),
            ])
            .args(extra)
            .assert()
            .failure();
        assert_eq!(code(&a), 4, "{extra:?}: {}", stderr(&a));
        assert_eq!(run.snapshot(), before, "{extra:?} wrote");
    }
    run.cmd()
        .args([
            "approve",
            "g",
            "--as",
            "alice",
            "-y",
            "--response",
            r#"{"n":2}"#,
        ])
        .assert()
        .success();
    assert_eq!(run.get("ans", None), br#"{"n":2}"#);
    assert_eq!(run.get("ans", Some(l)), br#"{"n":2}"#);
    // The version the decision wrote, read from history, is the answer as written, or exit 9.
    let a = run
        .cmd()
        .args(["get", "ans", "--version", "1"])
        .assert()
        .success();
    assert_eq!(a.get_output().stdout, br#"{"n":2}"#);
    run.view().raw(
        "UPDATE binding_history SET value = '{\"n\":5}' WHERE name = 'ans'",
        "UPDATE openprose.binding_history SET value = '{\"n\":5}' WHERE run_id = '$RUN' AND name = 'ans'",
    );
    for args in [
        &["--version", "1"][..],
        &["--as-of", &(l + 1).to_string()][..],
    ] {
        let a = run.cmd().args(["get", "ans"]).args(args).assert().failure();
        assert_eq!(code(&a), 9, "{args:?}: {}", stderr(&a));
    }
}

/// Found by an outside VM played literally: a value already in the response binding's place
/// would be read as the answer where no decision gives one (a timeout, a rejection without an
/// answer), as would the same name in an outer scope; and a reopen that left out the schema,
/// the binding or the quorum would be decided by less than the program counts on.
fn an_answer_no_one_gave_is_never_read_in_its_place(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    // Bound before the gate names it: refused, nothing written.
    run.bind("verdict", "{\"size\":1}", None);
    let before = run.snapshot();
    let a = run
        .cmd()
        .args(["gates", "create", "g", "--prompt", "How big?"])
        .args(["--response-schema", SCHEMA, "--response-binding", "verdict"])
        .assert()
        .failure();
    assert_eq!(code(&a), 4, "{}", stderr(&a));
    assert!(stderr(&a).contains("already bound"), "{}", stderr(&a));
    assert_eq!(run.snapshot(), before);
    // The same name around the gate's frame, and a rejection without an answer: a read from
    // the frame is not found (3), never the outer value.
    let block = run.exec(1, "do review:", "executing", None);
    run.bind("size", "{\"size\":99}", None);
    open(&run, "r", block, false);
    run.cmd()
        .args(["reject", "r", "--as", "alice", "--reason", "no", "-y"])
        .assert()
        .success();
    let a = run
        .cmd()
        .args(["get", "size", "--execution-id", &block.to_string()])
        .assert()
        .failure();
    assert_eq!(code(&a), 3, "{}", stderr(&a));
    assert!(
        stderr(&a).contains("no decision has answered it"),
        "{}",
        stderr(&a)
    );
    assert!(!String::from_utf8_lossy(&a.get_output().stdout).contains("99"));
    // Read from the root, the root's own binding is what it is.
    run.cmd().args(["get", "size"]).assert().success();
    // Opened again, it asks for what it asked: leaving the schema and binding out is 2.
    let before = run.snapshot();
    let a = run
        .cmd()
        .args(["gates", "create", "r", "--reopen", "--prompt", "How big?"])
        .args(["--execution-id", &block.to_string()])
        .assert()
        .failure();
    assert_eq!(code(&a), 2, "{}", stderr(&a));
    assert!(
        stderr(&a).contains("--response-schema") && stderr(&a).contains("--response-binding size"),
        "{}",
        stderr(&a)
    );
    assert_eq!(run.snapshot(), before);
    open(&run, "r", block, true);
    run.cmd()
        .args([
            "approve",
            "r",
            "--as",
            "alice",
            "-y",
            "--response",
            "{\"size\":3}",
        ])
        .assert()
        .success();
    run.cmd()
        .args(["get", "size", "--execution-id", &block.to_string()])
        .assert()
        .success()
        .stdout("{\"size\":3}");
    // A quorum's reopen keeps its quorum.
    run.cmd()
        .args([
            "gates",
            "create",
            "q",
            "--prompt",
            "Ship?",
            "--allow",
            "alice,bob",
            "--require",
            "2",
        ])
        .assert()
        .success();
    for who in ["alice", "bob"] {
        run.cmd()
            .env("PROSE_TOKEN", crate::serve::add(&p, who))
            .args(["approve", "q", "-y"])
            .assert()
            .success();
    }
    let a = run
        .cmd()
        .args([
            "gates",
            "create",
            "q",
            "--reopen",
            "--prompt",
            "Ship?",
            "--allow",
            "alice,bob",
        ])
        .assert()
        .failure();
    assert_eq!(code(&a), 2, "{}", stderr(&a));
    assert!(stderr(&a).contains("--require 2"), "{}", stderr(&a));
}

/// Before any decision, an assignment or update made from inside the gate's frame acts on no
/// binding past its response binding (an outside battery found `--assign` and `--merge`
/// writing the outer one): refused, exit 4, nothing written. After the decision they are
/// refused as writes of the answer itself.
fn no_write_goes_past_an_unanswered_response_binding(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let block = run.exec(1, "do review:", "executing", None);
    let at = block.to_string();
    run.bind("ans", r#"{"n":1}"#, None);
    run.cmd()
        .args([
            "gates",
            "create",
            "g",
            "--prompt",
            "p",
            "--execution-id",
            &at,
        ])
        .args([
            "--response-schema",
            r#"{"type":"object"}"#,
            "--response-binding",
            "ans",
        ])
        .assert()
        .success();
    for round in ["before", "after"] {
        for args in [
            vec!["bind", "ans", r#"{"n":666}"#, "--assign"],
            vec!["bind", "ans", "--merge", r#"{"m":1}"#],
            vec!["bind", "ans", "--append", "2"],
        ] {
            let before = run.snapshot();
            let a = run
                .cmd()
                .args(&args)
                .args(["--execution-id", &at])
                .assert()
                .failure();
            assert_eq!(code(&a), 4, "{round}: {args:?}: {}", stderr(&a));
            assert_eq!(run.snapshot(), before, "{round}: {args:?} wrote");
        }
        assert_eq!(run.get("ans", None), br#"{"n":1}"#);
        if round == "before" {
            run.cmd()
                .args([
                    "approve",
                    "g",
                    "--as",
                    "alice",
                    "-y",
                    "--response",
                    r#"{"n":3}"#,
                ])
                .assert()
                .success();
        }
    }
    assert_eq!(run.get("ans", Some(block)), br#"{"n":3}"#);
    // The outer binding is the program's own: from the root it is written as before.
    run.cmd()
        .args(["bind", "ans", r#"{"n":2}"#, "--assign"])
        .assert()
        .success();
    assert_eq!(run.get("ans", None), br#"{"n":2}"#);
}

/// A binding of the answer's name below its scope hides the answer from there: no rule writes
/// one once the gate is open, and the opening refuses a name already bound there. One put in
/// behind prose-state's back (an outside battery inserted it at a record inside the gate's
/// frame) is exit 9 from there, never read as the answer.
fn no_binding_below_the_answer_hides_it(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let block = run.exec(1, "do review:", "executing", None);
    let inner = run.exec(2, "if ready:", "executing", Some(block));
    let nested = run.exec(3, "do check:", "executing", Some(block));
    let schema = r#"{"type":"integer"}"#;
    // Bound below first: the opening is refused, nothing written.
    run.cmd()
        .args(["bind", "taken", "1", "--execution-id", &nested.to_string()])
        .assert()
        .success();
    let before = run.snapshot();
    let a = run
        .cmd()
        .args([
            "gates",
            "create",
            "t",
            "--prompt",
            "p",
            "--execution-id",
            &inner.to_string(),
        ])
        .args(["--response-schema", schema, "--response-binding", "taken"])
        .assert()
        .failure();
    assert_eq!(code(&a), 4, "{}", stderr(&a));
    assert!(
        stderr(&a).contains("would hide the answer"),
        "{}",
        stderr(&a)
    );
    assert_eq!(run.snapshot(), before);
    // Opened in the block's record below it (`if ready:`), answered.
    run.cmd()
        .args([
            "gates",
            "create",
            "g",
            "--prompt",
            "p",
            "--execution-id",
            &inner.to_string(),
        ])
        .args(["--response-schema", schema, "--response-binding", "ans"])
        .assert()
        .success();
    run.cmd()
        .args(["approve", "g", "--as", "alice", "-y", "--response", "5"])
        .assert()
        .success();
    assert_eq!(run.get("ans", Some(inner)), b"5");
    for (at, what) in [(inner, "the gate's record"), (nested, "a frame inside")] {
        run.view().raw(
            &format!(
                "INSERT INTO bindings (name, execution_id, kind, value) VALUES ('ans', {at}, 'let', '7')"
            ),
            &format!(
                "INSERT INTO openprose.bindings (name, run_id, execution_id, kind, value)
                 VALUES ('ans', '$RUN', {at}, 'let', convert_to('7', 'UTF8'))"
            ),
        );
        // Read now, or as of a version or a time: the past reads vouch no more.
        let at = at.to_string();
        for past in [
            vec![],
            vec!["--version", "1"],
            vec!["--as-of", "2100-01-01 00:00:00"],
        ] {
            let a = run
                .cmd()
                .args(["get", "ans", "--execution-id", &at])
                .args(&past)
                .assert()
                .failure();
            assert_eq!(code(&a), 9, "{what} {past:?}: {}", stderr(&a));
            assert!(
                stderr(&a).contains("hides gate"),
                "{what} {past:?}: {}",
                stderr(&a)
            );
        }
    }
    // From the block itself the answer reads as sealed.
    assert_eq!(run.get("ans", Some(block)), b"5");
}

/// Only a decision writes a gate's response binding, so each version its history keeps is one
/// a sealed decision wrote, under the number it sealed. A version renumbered (an outside
/// battery moved `n` 1 to 2 and nothing noticed) or one added beside the answer behind the
/// tool's back is tampering (exit 9) in every read: now, `--version`, `--as-of` and
/// `history`; the reads write nothing.
fn an_answers_history_holds_only_what_decisions_wrote(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    answered(&run);
    let answered = p.snapshot();
    for (what, sqlite, postgres, version) in [
        (
            "renumbered",
            "UPDATE binding_history SET n = 2 WHERE name = 'ans'",
            "UPDATE openprose.binding_history SET n = 2 WHERE run_id = '$RUN' AND name = 'ans'",
            "2",
        ),
        (
            "a version added",
            "INSERT INTO binding_history (name, execution_id, n, kind, value, written_at, principal)
             SELECT name, execution_id, 2, kind, '6', written_at, principal FROM binding_history WHERE name = 'ans'",
            "INSERT INTO openprose.binding_history (run_id, name, execution_id, n, kind, value, written_at, principal)
             SELECT run_id, name, execution_id, 2, kind, convert_to('6', 'UTF8'), written_at, principal
               FROM openprose.binding_history WHERE run_id = '$RUN' AND name = 'ans'",
            "2",
        ),
    ] {
        p.restore(&answered);
        run.view().raw(sqlite, postgres);
        // The case, shown with a failure below.
        eprintln!("case: {what}");
        for args in [
            vec!["get", "ans"],
            vec!["get", "ans", "--version", version],
            vec!["get", "ans", "--as-of", "2100-01-01 00:00:00"],
            vec!["history", "ans"],
        ] {
            run.refuses(&args, 9, "");
        }
    }
    // A field moved where no reader compares it as the check does: the time respelled (the
    // same instant, another text: reads of the past compare the text), the answer marked as
    // following versions not kept, and its version moved to scope -1 (which the root's key
    // would read as the root's). An outside battery read each with exit 0 or 3.
    for (what, sqlite, postgres) in [
        (
            "time respelled",
            "UPDATE binding_history SET written_at = replace(written_at, ' ', 'T') WHERE name = 'ans'",
            "UPDATE openprose.binding_history SET written_at = written_at + interval '1 second' WHERE run_id = '$RUN' AND name = 'ans'",
        ),
        (
            "marked as after versions not kept",
            "UPDATE binding_history SET gap = 1 WHERE name = 'ans'",
            "UPDATE openprose.binding_history SET gap = 1 WHERE run_id = '$RUN' AND name = 'ans'",
        ),
        (
            "moved to scope -1",
            "UPDATE binding_history SET execution_id = -1 WHERE name = 'ans'",
            "UPDATE openprose.binding_history SET execution_id = -1 WHERE run_id = '$RUN' AND name = 'ans'",
        ),
    ] {
        p.restore(&answered);
        run.view().raw(sqlite, postgres);
        for args in [
            vec!["get", "ans", "--version", "1"],
            vec!["get", "ans", "--as-of", "2100-01-01 00:00:00"],
            vec!["history", "ans"],
            vec!["gates", "verify"],
        ] {
            let a = run.cmd().args(&args).assert().failure();
            assert_eq!(code(&a), 9, "{what}: {args:?}: {}", stderr(&a));
        }
    }
    // `doctor --fix` resuming history after its trigger was dropped restates the answer as a
    // version of no writer (it cannot know what went unkept): that is no tampering, and every
    // read still agrees (an outside battery found every read exit 9 after this repair).
    if b == Backend::Sqlite {
        p.restore(&answered);
        run.view().raw("DROP TRIGGER binding_history_version;", "");
        run.cmd().args(["doctor", "--fix"]).assert().success();
        for args in [
            vec!["get", "ans"],
            vec!["get", "ans", "--version", "2"],
            vec!["history", "ans"],
            vec!["gates", "verify"],
        ] {
            let a = run.cmd().args(&args).assert();
            assert_eq!(code(&a), 0, "after doctor --fix: {args:?}: {}", stderr(&a));
        }
    }
    // The log cut at its end behind the tool's back, down to before the gate opened: no
    // opening names the answer any more, and still it is neither overwritten nor read (an
    // outside battery bound over it and read its own value with exit 0).
    p.restore(&answered);
    run.view().raw(
        "DROP TRIGGER gate_audit_log_no_delete; DELETE FROM gate_audit_log WHERE seq >= 2;",
        "ALTER TABLE openprose.gate_audit_log DISABLE TRIGGER gate_audit_log_append_only;
         DELETE FROM openprose.gate_audit_log WHERE run_id = '$RUN' AND seq >= 2;",
    );
    for args in [vec!["bind", "ans", "7"], vec!["get", "ans"]] {
        run.refuses(&args, 9, "");
    }
    // As the decision wrote it, every read agrees.
    p.restore(&answered);
    for args in [
        vec!["get", "ans"],
        vec!["get", "ans", "--version", "1"],
        vec!["get", "ans", "--as-of", "2100-01-01 00:00:00"],
    ] {
        let a = run.cmd().args(&args).assert().success();
        assert_eq!(a.get_output().stdout, b"5", "{args:?}");
    }
}

/// The log's rows name a binding in JSON, which can spell one name many ways: a gate's rows
/// rewritten behind the tool's back to spell its answer's name with an escape (`"\u0061ns"`
/// is `"ans"`), with the answer's value forged beside them (an outside probe read it with exit
/// 0), are found all the same: every read of the name refuses (exit 9), a bind is refused as
/// it always is (exit 4), and none writes anything. As the decision wrote it, the answer
/// reads.
fn no_spelling_of_the_log_hides_an_answer(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    answered(&run);
    let answered = p.snapshot();
    for (what, respelled) in [
        ("the name escaped", r#""\u0061ns""#),
        ("every letter escaped", r#""\u0061\u006e\u0073""#),
    ] {
        p.restore(&answered);
        run.view().raw(
            &format!(
                "DROP TRIGGER gate_audit_log_no_update;
                 UPDATE gate_audit_log SET metadata = replace(metadata, '\"ans\"', '{respelled}')
                  WHERE gate_id = 'g';
                 UPDATE bindings SET value = '7' WHERE name = 'ans';"
            ),
            &format!(
                "ALTER TABLE openprose.gate_audit_log DISABLE TRIGGER gate_audit_log_append_only;
                 UPDATE openprose.gate_audit_log
                    SET metadata = replace(metadata, '\"ans\"', '{respelled}')
                  WHERE run_id = '$RUN' AND gate_id = 'g';
                 UPDATE openprose.bindings SET value = convert_to('7', 'UTF8')
                  WHERE run_id = '$RUN' AND name = 'ans';"
            ),
        );
        // The case, shown with a failure below.
        eprintln!("case: {what}");
        for (args, code) in [
            (vec!["get", "ans"], 9),
            (vec!["get", "ans", "--version", "1"], 9),
            (vec!["get", "ans", "--as-of", "2100-01-01 00:00:00"], 9),
            (vec!["bind", "ans", "8"], 4),
        ] {
            run.refuses(&args, code, "");
        }
    }
    p.restore(&answered);
    let a = run.cmd().args(["get", "ans"]).assert().success();
    assert_eq!(a.get_output().stdout, b"5");
}

/// An outside battery hid a gate from the lookup by its answer's name without touching the
/// answer's row: the opening changed to name another binding, its key renamed, a duplicate key,
/// its JSON spoiled, or (PostgreSQL) the text search the lookup runs replaced by a function of
/// the attacker's own. The value forged beside it was read with exit 0 and a bind wrote over
/// it. A decision's write is judged by the gate's own sealed openings as well: every read is
/// exit 9, and so is the bind, which writes nothing.
fn no_change_to_an_opening_hides_its_answer(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    answered(&run);
    let answered = p.snapshot();
    let forge_sqlite = "UPDATE bindings SET value = '7' WHERE name = 'ans';";
    let forge_pg = "UPDATE openprose.bindings SET value = convert_to('7', 'UTF8')
                     WHERE run_id = '$RUN' AND name = 'ans';";
    let member = r#""response_binding":"ans""#;
    for (what, to) in [
        ("another binding named", r#""response_binding":"anx""#),
        ("the key renamed", r#""Response_binding":"ans""#),
        (
            "a duplicate key after",
            r#""response_binding":"ans","response_binding":"x""#,
        ),
        (
            "a duplicate key before",
            r#""response_binding":"x","response_binding":"ans""#,
        ),
        ("the JSON spoiled", r#""response_binding":"ans",,"#),
    ] {
        p.restore(&answered);
        run.view().raw(
            &format!(
                "DROP TRIGGER gate_audit_log_no_update;
                 UPDATE gate_audit_log SET metadata = replace(metadata, '{member}', '{to}')
                  WHERE event_type = 'created';
                 {forge_sqlite}"
            ),
            &format!(
                "ALTER TABLE openprose.gate_audit_log DISABLE TRIGGER gate_audit_log_append_only;
                 UPDATE openprose.gate_audit_log
                    SET metadata = replace(metadata, '{member}', '{to}')
                  WHERE run_id = '$RUN' AND event_type = 'created';
                 {forge_pg}"
            ),
        );
        // The case, shown with a failure below.
        eprintln!("case: {what}");
        run.refuses(&["get", "ans"], 9, "");
        // Refused as an answer's (exit 4) where the lookup still finds the gate, else as a
        // changed log (exit 9): never written.
        let before = run.snapshot();
        let a = run.cmd().args(["bind", "ans", "8"]).assert().failure();
        assert!(matches!(code(&a), 4 | 9), "{what}: {}", stderr(&a));
        assert_eq!(run.snapshot(), before, "{what}: the bind wrote");
    }
    if b == Backend::Postgres {
        p.restore(&answered);
        run.view().raw(
            "",
            &format!(
                "CREATE DOMAIN public.jtext AS text;
                 ALTER TABLE openprose.gate_audit_log ALTER COLUMN metadata TYPE public.jtext;
                 CREATE FUNCTION public.strpos(public.jtext, text) RETURNS int LANGUAGE sql
                   IMMUTABLE AS $f$ SELECT 0 $f$;
                 {forge_pg}"
            ),
        );
        eprintln!("case: the text search replaced");
        for args in [vec!["get", "ans"], vec!["get", "ans", "--version", "1"]] {
            run.refuses(&args, 9, "");
        }
        run.refuses(&["bind", "ans", "8"], 4, "only a decision");
    }
    p.restore(&answered);
    let a = run.cmd().args(["get", "ans"]).assert().success();
    assert_eq!(a.get_output().stdout, b"5");
}

/// A second outside round kept the answer's statement (`approve g:`) and changed the gate's
/// opening to list the answer among its inputs instead, so that the lookup found an opening
/// naming it (as an input) and checked nothing: the forged value read with exit 0. A value a
/// decision wrote is judged by its gate's own openings whatever the lookup found: exit 9.
fn an_opening_that_makes_its_answer_an_input_hides_nothing(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    answered(&run);
    let (answer, none) = (
        r#""response_binding":"ans""#,
        r#""inputs":["ans"],"response_binding":null"#,
    );
    run.view().raw(
        &format!(
            "DROP TRIGGER gate_audit_log_no_update;
             DROP TRIGGER bindings_version_update;
             DROP TRIGGER binding_history_version;
             UPDATE gate_audit_log
                SET metadata = replace(metadata, '{answer}', '{none}')
              WHERE event_type = 'created';
             UPDATE bindings SET value = '7' WHERE name = 'ans';"
        ),
        &format!(
            "ALTER TABLE openprose.gate_audit_log DISABLE TRIGGER USER;
             ALTER TABLE openprose.bindings DISABLE TRIGGER USER;
             UPDATE openprose.gate_audit_log
                SET metadata = replace(metadata, '{answer}', '{none}')
              WHERE run_id = '$RUN' AND event_type = 'created';
             UPDATE openprose.bindings SET value = convert_to('7', 'UTF8')
              WHERE run_id = '$RUN' AND name = 'ans';"
        ),
    );
    let metadata = run.view().events("g")[0].2.clone();
    assert_eq!(metadata["inputs"], serde_json::json!(["ans"]), "{metadata}");
    run.refuses(&["get", "ans"], 9, "");
}

/// helper-31's break 3: `get` once checked one read of the binding and printed another. A view
/// put in place of the bindings table answers a forged value on some reads (SQLite: at random;
/// PostgreSQL: a session's first read of it, every time): the value printed is the very row
/// checked, so the forged one is refused (exit 9) and never printed with exit 0.
fn the_value_checked_is_the_value_printed(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    answered(&run);
    run.view().raw(
        "ALTER TABLE bindings RENAME TO bindings_real;
         CREATE VIEW bindings AS SELECT name, execution_id, kind,
           CASE WHEN name = 'ans' AND (random() & 1) = 0 THEN '7' ELSE value END AS value,
           source_statement, created_at, updated_at, attachment_path, version
           FROM bindings_real;",
        "CREATE FUNCTION public.first_read() RETURNS boolean VOLATILE LANGUAGE plpgsql AS $f$
         DECLARE n int := coalesce(nullif(current_setting('atk.n', true), ''), '0')::int;
         BEGIN PERFORM set_config('atk.n', (n + 1)::text, false); RETURN n = 0; END $f$;
         ALTER TABLE openprose.bindings RENAME TO bindings_real;
         CREATE VIEW openprose.bindings AS SELECT name, run_id, execution_id, kind,
           CASE WHEN name = 'ans' AND public.first_read() THEN '7' ELSE value END AS value,
           source_statement, created_at, updated_at, attachment_path, metadata, version
           FROM openprose.bindings_real;",
    );
    let mut refused = 0;
    for _ in 0..24 {
        let a = run.cmd().args(["get", "ans"]).assert();
        match (code(&a), a.get_output().stdout.as_slice()) {
            (0, b"5") => {}
            (9, _) => refused += 1,
            (c, out) => panic!(
                "get ans printed {:?} with exit {c}: {}",
                String::from_utf8_lossy(out),
                stderr(&a)
            ),
        }
    }
    // PostgreSQL's view lies at each call's first read, so the case was met every time. (On
    // SQLite, where it lies at random, a read that printed 7 with exit 0 before the fix did so
    // in about half the calls: 24 calls without one are 2^-24 likely.)
    if b == Backend::Postgres {
        assert_eq!(refused, 24, "the view's lie was not caught each time");
    }
}

/// helper-31's break 1: on a machine without the audit key (or with another one), nothing
/// sealed can be checked, so a forged answer or approver's edit cannot be told from a true one:
/// `get` and `history` of a name a gate's opening names say so (exit 10), as `gates show` and
/// `gates wait` do, whether or not the value was forged; and `gates show` there makes no key
/// and logs nothing.
fn a_machine_without_the_key_vouches_for_no_answer(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("doc", "v1", None);
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "p"])
        .args(["--response-schema", r#"{"type":"integer"}"#])
        .args(["--response-binding", "ans", "--inputs", "doc"])
        .assert()
        .success();
    run.cmd()
        .args(["approve", "g", "--as", "alice", "-y", "--response", "5"])
        .args(["--edit", "doc=v2"])
        .assert()
        .success();
    run.bind("plain", "free", None);
    let bare = tempfile::tempdir().unwrap();
    let keyless = |args: &[&str]| {
        let mut c = run.cmd();
        c.env("HOME", bare.path()).args(args);
        c
    };
    for forged in [false, true] {
        if forged {
            run.view().raw(
                "DROP TRIGGER bindings_version_update;
                 DROP TRIGGER binding_history_version;
                 UPDATE bindings SET value = '7' WHERE name = 'ans';
                 UPDATE binding_history SET value = '7' WHERE name = 'ans';
                 UPDATE bindings SET value = 'FORGE' WHERE name = 'doc';
                 UPDATE binding_history SET value = 'FORGE' WHERE name = 'doc' AND n = 2;",
                "ALTER TABLE openprose.bindings DISABLE TRIGGER USER;
                 UPDATE openprose.bindings SET value = '7'
                  WHERE run_id = '$RUN' AND name = 'ans';
                 UPDATE openprose.binding_history SET value = '7'
                  WHERE run_id = '$RUN' AND name = 'ans';
                 UPDATE openprose.bindings SET value = 'FORGE'
                  WHERE run_id = '$RUN' AND name = 'doc';
                 UPDATE openprose.binding_history SET value = 'FORGE'
                  WHERE run_id = '$RUN' AND name = 'doc' AND n = 2;",
            );
        }
        let before = run.snapshot();
        for args in [
            vec!["get", "ans"],
            vec!["get", "ans", "--version", "1"],
            vec!["get", "ans", "--as-of", "2100-01-01 00:00:00"],
            vec!["history", "ans"],
            vec!["get", "doc"],
            vec!["get", "doc", "--version", "2"],
            vec!["history", "doc"],
        ] {
            let a = keyless(&args).assert();
            assert_eq!(code(&a), 10, "forged {forged}: {args:?}: {}", stderr(&a));
            assert!(a.get_output().stdout.is_empty(), "{args:?} printed");
            assert!(
                stderr(&a).contains("cannot be vouched for here"),
                "{args:?}: {}",
                stderr(&a)
            );
            assert_eq!(stderr(&a).lines().count(), 1, "{}", stderr(&a));
        }
        // A name no opening names is read as ever.
        let a = keyless(&["get", "plain"]).assert().success();
        assert_eq!(a.get_output().stdout, b"free");
        // A look at the gate there is unattested (exit 10), makes no key, and logs nothing.
        let a = keyless(&["gates", "show", "g"]).assert();
        assert_eq!(code(&a), 10, "{}", stderr(&a));
        assert!(!bare.path().join(".prose").join("audit.key").exists());
        assert_eq!(run.snapshot(), before, "a keyless read wrote");
    }
    // With the key, the forged values are refused as changed (exit 9).
    run.refuses(&["get", "ans"], 9, "");
    run.refuses(&["get", "doc"], 9, "");
}
