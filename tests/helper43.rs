//! What helper-43 (an attack on the merged binaries, no tests seen) and helper-44 (a literal VM
//! on programs of its own) found, closed.
//!
//! helper-43: a second gate could be opened to answer into a binding another gate answers
//! into. In the same scope, `get` then read the second gate's answer as the first's (while the
//! first was pending, and after both were decided, with `gates verify` intact); in a frame
//! below, the second decision made the run look tampered. The page's edit box showed an input
//! holding a bidi override as the browser lays it out (`tests/page_answers.rs`).
//!
//! helper-44: after a rejection whose gate's `on_reject` is not `throw`, `resume` sent the
//! failed `approve` record to a handler (the program, a parallel's on-fail) beside the gate's
//! own next step; the subagent guide said an `if` record's scope was where its binding landed;
//! `exec-append` logged an `approve` statement completed while its gate was pending.

use crate::common::*;

on_both!(
    no_two_gates_answer_into_one_binding_on_one_line_of_frames,
    a_rejection_its_gate_takes_goes_to_no_handler,
    an_approve_statement_completes_only_on_an_approval,
    the_subagent_guide_says_where_its_binding_lands,
    a_gate_opened_again_answers_on_no_other_line,
    no_spelling_of_an_approve_statement_logs_it_completed_early,
    no_two_choices_read_alike,
    resume_goes_on_inside_a_branch_and_says_what_to_log,
);

/// `exec-append` with metadata or an error, its record's id.
fn append(
    run: &Run,
    index: i64,
    text: &str,
    status: &str,
    parent: Option<i64>,
    extra: &[&str],
) -> i64 {
    let mut c = run.cmd();
    c.args(["exec-append", "--index", &index.to_string(), "--text", text])
        .args(["--status", status]);
    if let Some(p) = parent {
        c.args(["--parent", &p.to_string()]);
    }
    let a = c.args(extra).assert().success();
    String::from_utf8_lossy(&a.get_output().stdout)
        .trim()
        .parse()
        .unwrap()
}

const SCHEMA: &str =
    r#"{"type":"object","properties":{"count":{"type":"integer"}},"required":["count"]}"#;

/// `gates create GATE --response-binding ans` in `scope`, with its exit code and stderr.
fn open_into(run: &Run, gate: &str, scope: Option<i64>) -> (i32, String) {
    let mut c = run.cmd();
    c.args(["gates", "create", gate, "--prompt", &format!("{gate}?")])
        .args(["--response-schema", SCHEMA, "--response-binding", "ans"]);
    if let Some(s) = scope {
        c.args(["--execution-id", &s.to_string()]);
    }
    let a = c.assert();
    (code(&a), stderr(&a))
}

/// A second gate answering into `ans` is refused (4, nothing written) in the same scope, in a
/// frame below the first's answer, and in the root above one; gates in sibling frames each
/// answer into their own, and a gate reopened answers into its own binding again.
fn no_two_gates_answer_into_one_binding_on_one_line_of_frames(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    assert_eq!(open_into(&run, "a", None).0, 0);
    let frame = run.exec(2, "do review:", "executing", None);
    let nested = run.exec(3, "do check:", "executing", Some(frame));
    for scope in [None, Some(frame), Some(nested)] {
        let before = run.snapshot();
        let (code, err) = open_into(&run, "b", scope);
        assert_eq!(code, 4, "{scope:?}: {err}");
        assert!(
            err.contains("gate \"a\" already answers into it")
                || err.contains("gate a already answers into it"),
            "{scope:?}: {err}"
        );
        assert_eq!(run.snapshot(), before, "{scope:?}: a refusal wrote");
    }
    // The first answers; the program reads its answer, and no other gate's.
    run.cmd()
        .args([
            "approve",
            "a",
            "--as",
            "alice",
            "-y",
            "--response",
            r#"{"count":3}"#,
        ])
        .assert()
        .success();
    assert_eq!(run.get("ans", None), br#"{"count":3}"#);
    run.cmd().args(["gates", "verify"]).assert().success();

    // Sibling frames, each with its own answer: neither hides the other.
    let other = p.init();
    let one = other.exec(1, "do first:", "executing", None);
    let two = other.exec(2, "do second:", "executing", None);
    assert_eq!(open_into(&other, "x", Some(one)).0, 0);
    assert_eq!(open_into(&other, "y", Some(two)).0, 0);
    // Above both, in the root: refused.
    let before = other.snapshot();
    assert_eq!(open_into(&other, "z", None).0, 4);
    assert_eq!(other.snapshot(), before);
    for (gate, n) in [("x", 1), ("y", 2)] {
        other
            .cmd()
            .args(["approve", gate, "--as", "alice", "-y", "--response"])
            .arg(format!(r#"{{"count":{n}}}"#))
            .assert()
            .success();
    }
    assert_eq!(other.get("ans", Some(one)), br#"{"count":1}"#);
    assert_eq!(other.get("ans", Some(two)), br#"{"count":2}"#);
    other.cmd().args(["gates", "verify"]).assert().success();
    // The same gate opened again answers into its own binding.
    other
        .cmd()
        .args(["gates", "create", "x", "--prompt", "x?", "--reopen"])
        .args(["--response-schema", SCHEMA, "--response-binding", "ans"])
        .args(["--execution-id", &one.to_string()])
        .assert()
        .success();
}

/// `resume` after a rejection logged as the guide says (`failed --error`): a gate whose
/// sealed `on_reject` is `retry`, `continue` or a session takes it (`position.on_reject`, no
/// handler, in a branch too); one that throws goes to the handler as any failure.
fn a_rejection_its_gate_takes_goes_to_no_handler(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    for (on_reject, taken) in [
        (Some("retry text"), true),
        (Some("continue"), true),
        (Some("session \"Fix it\""), true),
        (Some("throw \"cancelled\""), false),
        (None, false),
    ] {
        let run = p.init();
        let mut c = run.cmd();
        c.args(["gates", "create", "ok", "--prompt", "Fine?", "--index", "2"]);
        if let Some(o) = on_reject {
            c.args(["--on-reject", o]);
        }
        c.assert().success();
        run.cmd()
            .args(["reject", "ok", "--as", "bob", "-y", "--reason", "no"])
            .assert()
            .success();
        append(
            &run,
            2,
            "approve ok:",
            "failed",
            None,
            &["--error", "rejected by bob"],
        );
        let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
        let position = &doc["position"];
        if taken {
            assert_eq!(
                position["on_reject"]["gate"], "ok",
                "{on_reject:?}: {position}"
            );
            assert_eq!(
                position["on_reject"]["on_reject"],
                on_reject.unwrap(),
                "{position}"
            );
            assert!(
                position.get("handler").is_none(),
                "{on_reject:?}: {position}"
            );
            let text = run.cmd().arg("resume").assert().success();
            let out = String::from_utf8_lossy(&text.get_output().stdout).to_string();
            assert!(
                out.contains("failed on gate ok's decision: its on_reject")
                    && !out.contains("the failure goes to"),
                "{out}"
            );
        } else {
            assert!(
                position.get("on_reject").is_none(),
                "{on_reject:?}: {position}"
            );
            assert_eq!(
                position["handler"], "the program: finish --status failed --error MSG",
                "{on_reject:?}: {position}"
            );
        }
    }
    // In a branch of a parallel: the branch goes on as the gate says, not to the on-fail.
    let run = p.init();
    let par = append(
        &run,
        1,
        "parallel:",
        "started",
        None,
        &["--metadata", r#"{"parallel_id":"p"}"#],
    );
    let branch = append(
        &run,
        2,
        "pricing:",
        "started",
        Some(par),
        &[
            "--construct",
            "branch",
            "--metadata",
            r#"{"parallel_id":"p","branch":"pricing"}"#,
        ],
    );
    run.cmd()
        .args([
            "gates", "create", "tier", "--prompt", "Tier?", "--index", "3",
        ])
        .args([
            "--on-reject",
            "continue",
            "--execution-id",
            &branch.to_string(),
        ])
        .assert()
        .success();
    run.cmd()
        .args(["reject", "tier", "--as", "erin", "-y", "--reason", "later"])
        .assert()
        .success();
    run.cmd()
        .args([
            "exec-append",
            "--index",
            "3",
            "--text",
            "approve tier:",
            "--status",
            "failed",
        ])
        .args(["--error", "rejected", "--parent", &branch.to_string()])
        .assert()
        .success();
    let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
    let branches = doc["parallel"][0]["open_branches"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!branches.is_empty(), "{doc}");
    for br in branches {
        assert!(br.get("handler").is_none(), "{br}");
    }
}

/// `exec-append` of `approve G:` completed is refused (4, nothing written) while G is pending
/// and after its rejection; after its approval it lands.
fn an_approve_statement_completes_only_on_an_approval(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    for gate in ["g", "r"] {
        run.cmd()
            .args(["gates", "create", gate, "--prompt", "Go?", "--index", "1"])
            .assert()
            .success();
    }
    run.cmd()
        .args(["reject", "r", "--as", "bob", "-y", "--reason", "no"])
        .assert()
        .success();
    let complete = |gate: &str| {
        run.cmd()
            .args([
                "exec-append",
                "--index",
                "1",
                "--text",
                &format!("approve {gate}:"),
            ])
            .args(["--status", "completed"])
            .assert()
    };
    for (gate, words) in [
        ("g", "while its gate is pending"),
        ("r", "while its gate is rejected"),
    ] {
        let before = run.snapshot();
        let a = complete(gate).failure();
        assert_eq!(code(&a), 4, "{}", stderr(&a));
        assert!(stderr(&a).contains(words), "{}", stderr(&a));
        assert_eq!(run.snapshot(), before, "a refusal wrote");
    }
    run.cmd()
        .args(["approve", "g", "--as", "bob", "-y"])
        .assert()
        .success();
    complete("g").success();
}

/// `guide subagent --execution-id N` for a record that opens no frame (an `if`) says where
/// the binding lands, in its scope line and in the reply it asks for; every write it shows
/// names the execution.
fn the_subagent_guide_says_where_its_binding_lands(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let block = run.exec(1, "do review:", "executing", None);
    let taken = ["--metadata", r#"{"taken":"if"}"#];
    let cond = append(&run, 2, "if **ready**:", "started", Some(block), &taken);
    let top = append(&run, 3, "if **done**:", "started", None, &taken);
    for (at, lands) in [
        (cond, format!("the frame of execution {block}")),
        (top, "the root scope".to_string()),
    ] {
        let a = run
            .cmd()
            .args([
                "guide",
                "subagent",
                "--name",
                "out",
                "--execution-id",
                &at.to_string(),
            ])
            .assert()
            .success();
        let text = String::from_utf8_lossy(&a.get_output().stdout).to_string();
        assert!(
            text.contains(&format!(
                "- Scope: execution {at} (out bound there lands in {lands})"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!("Location: run {}, {lands}", run.id)),
            "{text}"
        );
        for line in text
            .lines()
            .filter(|l| l.contains("prose-state --run") && l.contains(" bind "))
        {
            assert!(line.contains(&format!("--execution-id {at}")), "{line}");
        }
        // And the binding lands there.
        run.cmd()
            .args(["bind", "out", "v", "--execution-id", &at.to_string()])
            .assert()
            .success();
    }
    assert_eq!(run.get("out", Some(block)), b"v");
    assert_eq!(run.get("out", None), b"v");
    // A block's own record: its scope is where its binding lands, said once.
    let a = run
        .cmd()
        .args([
            "guide",
            "subagent",
            "--name",
            "x",
            "--execution-id",
            &block.to_string(),
        ])
        .assert()
        .success();
    let text = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(
        text.contains(&format!("- Scope: execution {block}\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!("Location: run {}, execution {block}\n", run.id)),
        "{text}"
    );
}

/// Found by helper-45: a gate opened again in a frame below where it answered before was
/// taken, and its two answers then made the run look tampered. Now it is refused (4, nothing
/// written); opened again in a sibling frame (a loop's next call), it answers there.
fn a_gate_opened_again_answers_on_no_other_line(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let a = run.exec(1, "do outer:", "executing", None);
    let below = run.exec(2, "do inner:", "executing", Some(a));
    let sibling = run.exec(3, "do other:", "executing", None);
    assert_eq!(open_into(&run, "g", Some(a)).0, 0);
    run.cmd()
        .args([
            "approve",
            "g",
            "--as",
            "alice",
            "-y",
            "--response",
            r#"{"count":1}"#,
        ])
        .assert()
        .success();
    let reopen = |scope: i64| {
        run.cmd()
            .args(["gates", "create", "g", "--prompt", "g?", "--reopen"])
            .args(["--response-schema", SCHEMA, "--response-binding", "ans"])
            .args(["--execution-id", &scope.to_string()])
            .assert()
    };
    let before = run.snapshot();
    let out = reopen(below).failure();
    assert_eq!(code(&out), 4, "{}", stderr(&out));
    assert_eq!(run.snapshot(), before, "a refusal wrote");
    // Root, above its answer: refused too.
    let before = run.snapshot();
    let out = run
        .cmd()
        .args(["gates", "create", "g", "--prompt", "g?", "--reopen"])
        .args(["--response-schema", SCHEMA, "--response-binding", "ans"])
        .assert()
        .failure();
    assert_eq!(code(&out), 4, "{}", stderr(&out));
    assert_eq!(run.snapshot(), before, "a refusal wrote");
    reopen(sibling).success();
    run.cmd()
        .args([
            "approve",
            "g",
            "--as",
            "alice",
            "-y",
            "--response",
            r#"{"count":2}"#,
        ])
        .assert()
        .success();
    assert_eq!(run.get("ans", Some(sibling)), br#"{"count":2}"#);
    assert_eq!(run.get("ans", Some(a)), br#"{"count":1}"#);
    run.cmd().args(["gates", "verify"]).assert().success();
}

/// Found by helper-45: `approve g: # why`, `approve g` and the statement with its property
/// lines were logged `completed` while g was pending; helper-47: `Approve g:` and `approve g:
/// (prompt, allow)`. Every spelling of the statement is held to the gate's decision.
fn no_spelling_of_an_approve_statement_logs_it_completed_early(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "Go?", "--index", "1"])
        .assert()
        .success();
    // helper-47: `Approve g:` and `approve g: (prompt, allow)` too. Every case of the
    // keyword, with every tail the statement's first line can have, leading space or not.
    let (cases, tails) = (
        ["approve", "Approve", "APPROVE", "aPpRoVe"],
        [
            ":",
            "",
            ": # deploy",
            ": (prompt, allow)",
            ":\n  prompt: \"deploy?\"",
            " :",
        ],
    );
    let spellings = cases.iter().enumerate().flat_map(|(i, word)| {
        tails.iter().enumerate().map(move |(j, tail)| {
            let (lead, gap) = (["", "  "][(i + j) % 2], [" ", "\t", "  "][(i + j) % 3]);
            format!("{lead}{word}{gap}g{tail}")
        })
    });
    for text in spellings {
        let text = text.as_str();
        let before = run.snapshot();
        let a = run
            .cmd()
            .args([
                "exec-append",
                "--index",
                "1",
                "--text",
                text,
                "--status",
                "completed",
            ])
            .assert()
            .failure();
        assert_eq!(code(&a), 4, "{text:?}: {}", stderr(&a));
        assert_eq!(run.snapshot(), before, "{text:?}: a refusal wrote");
    }
}

/// Found by helper-45: choices that differ only in whitespace (`keep the database` and
/// `keep the database `) read alike on the page, and so did property names. Such a schema is
/// refused (2, nothing written); and a Braille blank (U+2800) is shown escaped like every
/// other invisible character.
fn no_two_choices_read_alike(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    for schema in [
        r#"{"enum":["keep the database","keep the database "]}"#,
        r#"{"enum":["keep the database","keep  the database"]}"#,
        r#"{"enum":["keep the database","keep the\tdatabase"]}"#,
        r#"{"type":"object","properties":{"amount":{"type":"number"},"amount ":{"type":"number"}}}"#,
        r#"{"type":"array","items":{"enum":["a b"," a b"]}}"#,
    ] {
        let before = run.snapshot();
        let a = run
            .cmd()
            .args(["gates", "create", "g", "--prompt", "Which?"])
            .args(["--response-schema", schema])
            .assert()
            .failure();
        assert_eq!(code(&a), 2, "{schema}: {}", stderr(&a));
        assert!(
            stderr(&a).contains("read alike"),
            "{schema}: {}",
            stderr(&a)
        );
        assert_eq!(run.snapshot(), before, "{schema}: a refusal wrote");
    }
    run.cmd()
        .args([
            "gates", "create", "g", "--prompt", "Which?", "--inputs", "to",
        ])
        .args(["--response-schema", r#"{"enum":["keep","drop"]}"#])
        .assert()
        .success();
    run.bind("to", "send 100 USD to bob\u{2800}", None);
    let a = run.cmd().args(["gates", "show", "g"]).assert();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(out.contains("bob\\u{2800}"), "{out}");
}

/// Found by helper-46: an open branch whose work went on inside a block call was listed as
/// having done nothing (`after: null`), and a crash after a decision did not say to log the
/// `approve` statement. Now the branch says where it goes on (`inside`), and the pending
/// `approve` record says what to log.
fn resume_goes_on_inside_a_branch_and_says_what_to_log(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let par = append(
        &run,
        1,
        "parallel:",
        "started",
        None,
        &["--metadata", r#"{"parallel_id":"p"}"#],
    );
    let branch = append(
        &run,
        1,
        "perf:",
        "started",
        Some(par),
        &[
            "--construct",
            "branch",
            "--metadata",
            r#"{"parallel_id":"p","branch":"perf"}"#,
        ],
    );
    let call = append(&run, 1, "do check()", "executing", Some(branch), &[]);
    run.cmd()
        .args([
            "gates", "create", "signoff", "--prompt", "OK?", "--index", "1",
        ])
        .args(["--execution-id", &call.to_string()])
        .assert()
        .success();
    run.cmd()
        .args(["approve", "signoff", "--as", "alice", "-y"])
        .assert()
        .success();
    let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
    let br = &doc["parallel"][0]["open_branches"][0];
    assert_eq!(br["branch"], "perf", "{doc}");
    assert!(
        br["inside"]
            .as_str()
            .is_some_and(|i| i.contains(&format!("(record {call}): go on inside it"))),
        "{br}"
    );
    let a = run.cmd().arg("resume").assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(
        out.contains("the gate is now approved: log it `completed`, then go on"),
        "{out}"
    );
    assert!(out.contains("branch perf (record"), "{out}");
}
