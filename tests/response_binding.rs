//! Issue 49: `gates create --response-binding NAME` names a binding in the gate's scope that
//! only a decision writes, with its answer, as a version by the decider, in the decision's
//! transaction. `bind` to it is refused (exit 4); `get` checks it against the sealed decision
//! (exit 9 when it was changed behind prose-state's back).

use crate::common::*;

on_both!(
    the_answer_is_a_binding_only_a_decision_writes,
    a_response_binding_is_refused_where_no_decision_could_write_it,
);

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
    let before = run.snapshot();
    for args in [
        vec!["bind", "size", "{\"size\":1}"],
        vec!["bind", "size", "--append", "1"],
        vec!["bind", "size", "{\"size\":1}", "--kind", "const"],
    ] {
        let a = run
            .cmd()
            .args(&args)
            .args(["--execution-id", &block.to_string()])
            .assert()
            .failure();
        assert_eq!(code(&a), 4, "{args:?}: {}", stderr(&a));
        assert!(
            stderr(&a).contains("only a decision on it writes it"),
            "{}",
            stderr(&a)
        );
        assert_eq!(run.snapshot(), before, "{args:?} wrote");
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
        out.contains(r#"  answer: {"size":2} (in binding size)"#),
        "{out}"
    );
    open(&run, "g", block, true);
    run.cmd()
        .args(["reject", "g", "--as", "bob", "-y", "--reason", "no"])
        .assert()
        .success();
    assert_eq!(run.get("size", Some(block)), br#"{"size":2}"#);
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
    assert!(stderr(&a).contains("sealed decision"), "{}", stderr(&a));
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
    let before = run.snapshot();
    let cases: [(&[&str], i32, &str); 3] = [
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
        let a = run
            .cmd()
            .args(["gates", "create", "g", "--prompt", "p"])
            .args(args)
            .assert()
            .failure();
        assert_eq!(code(&a), want, "{args:?}: {}", stderr(&a));
        assert!(stderr(&a).contains(says), "{args:?}: {}", stderr(&a));
        assert_eq!(stderr(&a).lines().count(), 1, "{}", stderr(&a));
        assert_eq!(run.snapshot(), before, "{args:?} wrote");
    }
}
