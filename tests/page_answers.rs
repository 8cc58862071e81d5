//! Issue 49 on the approval page: a gate's response schema is a form, checked on the server
//! with each error beside its field; each input the decision is about can be edited, with a
//! preview of the change before it is approved; the signature covers the answer and edits.

use crate::common::*;
use crate::serve::{add, decide, gate_path, hidden_fields, in_browser, pinned_key, Server};

on_both!(
    an_answer_and_an_edit_are_given_on_the_page,
    what_the_page_refuses_and_what_it_keeps_exactly,
    bytes_that_are_not_text_and_fields_not_asked_are_refused,
    no_text_area_shows_an_input_other_than_it_is_stored,
);

const SCHEMA: &str = r#"{"type":"object","required":["verdict","risk"],"properties":{
  "verdict":{"type":"string","title":"Verdict","maxLength":80,"description":"One line for the notes"},
  "risk":{"enum":["low","medium","high"],"title":"Risk"},
  "rollback":{"type":"boolean","title":"Rollback plan checked"},
  "reviewers":{"type":"array","items":{"type":"string"}},
  "limits":{"type":"object","properties":{
    "max_minutes":{"type":"integer","minimum":1,"maximum":60,"default":15}}}}}"#;

/// Opens gate `g`, about the input `draft`, asking for SCHEMA's answer into `verdict_out`.
fn open(run: &Run) {
    run.bind("draft", "Release notes\nv2 ships soon\n", None);
    run.cmd()
        .args([
            "gates", "create", "g", "--prompt", "Ship v2?", "--inputs", "draft",
        ])
        .args([
            "--response-schema",
            SCHEMA,
            "--response-binding",
            "verdict_out",
        ])
        .assert()
        .success();
}

/// Text in an attribute or element, as maud escaped it, read back.
fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// The approve form's hidden fields, with these fields of the answer and edits.
fn approval(page: &str, fields: &[(&str, &str)]) -> Vec<(String, String)> {
    form_fields(page, "approve", fields)
}

/// The hidden fields of the page's form `form` (`approve`, or a preview's `confirm`),
/// unescaped, with these fields added.
fn form_fields(page: &str, form: &str, fields: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = hidden_fields(page, form)
        .into_iter()
        .map(|(k, v)| (k, unescape(&v)))
        .collect();
    out.extend(fields.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    out
}

fn post(s: &Server, cookie: &str, run: &Run, fields: &[(String, String)]) -> crate::serve::Reply {
    let fields: Vec<(&str, &str)> = fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    decide(s, cookie, run, "g", &fields)
}

/// The form the schema makes, its errors beside the fields (nothing written), the preview of
/// an edit (nothing written until it is confirmed, and a preview tag not the page's own shows
/// the preview again), then the approval: the answer in the response binding, the edit a
/// version by the approver, and a v4 signature `gates wait --require-signed` accepts.
fn an_answer_and_an_edit_are_given_on_the_page(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let token = add(&p, "alice");
    pinned_key(&p);
    open(&run);
    let s = Server::start(&p);
    let cookie = s.login(&token);
    let page = s.get(&gate_path(&run, "g"), Some(&cookie)).body;
    for shown in [
        r#"name="r/verdict""#,
        r#"maxlength="80""#,
        "One line for the notes",
        r#"<option value="&quot;high&quot;">high</option>"#,
        r#"type="checkbox" name="r/rollback""#,
        r#"name="r/reviewers""#,
        r#"name="r/limits/max_minutes" value="15""#,
        "Default: 15",
        r#"name="edit/draft""#,
        "v2 ships soon",
        "novalidate",
    ] {
        assert!(page.contains(shown), "{shown} not in {page}");
    }
    let before = run.snapshot();
    // A number over its maximum and a required field left out: 400, each error beside its
    // field, what was typed kept, nothing written.
    let r = post(
        &s,
        &cookie,
        &run,
        &approval(
            &page,
            &[("r/verdict", "Ship it"), ("r/limits/max_minutes", "90")],
        ),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.body.contains("greater than the maximum of 60"),
        "{}",
        r.body
    );
    assert!(
        r.body.contains(r#"name="r/verdict" value="Ship it""#),
        "{}",
        r.body
    );
    let risk = r.body.find(r#"name="r/risk""#).unwrap();
    assert!(r.body[risk..].contains("required"), "{}", r.body);
    assert_eq!(run.snapshot(), before, "a bad answer wrote");
    // Not a number: beside it.
    let r = post(
        &s,
        &cookie,
        &run,
        &approval(
            &page,
            &[
                ("r/verdict", "x"),
                ("r/risk", "\"low\""),
                ("r/limits/max_minutes", "ten"),
            ],
        ),
    );
    assert_eq!(r.status, 400);
    assert!(r.body.contains("not a number"), "{}", r.body);
    // A field twice: 400 naming it.
    for extra in [("csrf", "again"), ("r/verdict", "one"), ("edit/draft", "x")] {
        let mut twice = approval(&page, &[extra]);
        twice.push((extra.0.to_string(), extra.1.to_string()));
        let r = post(&s, &cookie, &run, &twice);
        assert_eq!(r.status, 400, "{extra:?}");
        assert!(r.body.contains("is given twice"), "{}", r.body);
        assert_eq!(run.snapshot(), before);
    }
    // A good answer with an edit: the preview, nothing written.
    let good = [
        ("r/verdict", "Ship it"),
        ("r/risk", "\"high\""),
        ("r/rollback", "true"),
        ("r/reviewers", "ann\r\nbob"),
        ("r/limits/max_minutes", "30"),
        ("edit/draft", "Release notes\r\nv2 ships today\r\n"),
    ];
    let r = post(&s, &cookie, &run, &approval(&page, &good));
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("Approve with these edits?"), "{}", r.body);
    assert!(r.body.contains("- v2 ships soon"), "{}", r.body);
    assert!(r.body.contains("+ v2 ships today"), "{}", r.body);
    assert!(r.body.contains("28 bytes → 29 bytes"), "{}", r.body);
    assert_eq!(run.snapshot(), before, "a preview wrote");
    let confirm = form_fields(&r.body, "confirm", &[]);
    // A preview tag the page did not make: the preview again.
    let forged: Vec<(String, String)> = confirm
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                if k == "preview" {
                    "0".repeat(64)
                } else {
                    v.clone()
                },
            )
        })
        .collect();
    let again = post(&s, &cookie, &run, &forged);
    assert_eq!(again.status, 200);
    assert!(again.body.contains("Approve with these edits?"));
    assert_eq!(run.snapshot(), before);
    // Confirmed: approved.
    let r = post(&s, &cookie, &run, &confirm);
    assert_eq!(r.status, 303, "{}", r.body);
    drop(s);
    let answer: serde_json::Value = serde_json::from_slice(&run.get("verdict_out", None)).unwrap();
    assert_eq!(
        answer,
        serde_json::json!({"verdict": "Ship it", "risk": "high", "rollback": true,
            "reviewers": ["ann", "bob"], "limits": {"max_minutes": 30}})
    );
    assert_eq!(run.get("draft", None), b"Release notes\nv2 ships today\n");
    let history = run
        .cmd()
        .args(["history", "draft", "--json"])
        .assert()
        .success();
    assert!(String::from_utf8_lossy(&history.get_output().stdout).contains("alice"));
    let events = run.view().events("g");
    let approved = events.iter().find(|e| e.0 == "approved").unwrap();
    assert_eq!(approved.2["signature"]["v"], 4, "{}", approved.2);
    assert_eq!(approved.2["edits"][0]["name"], "draft");
    run.cmd()
        .args(["gates", "wait", "g", "--require-signed"])
        .assert()
        .success();
    // The gate's page shows the answer and the edit.
    let s = Server::start(&p);
    let cookie = s.login(&token);
    let page = s.get(&gate_path(&run, "g"), Some(&cookie)).body;
    assert!(
        page.contains("answer-given") && page.contains("Ship it"),
        "{page}"
    );
    assert!(
        page.contains("draft by alice: version 1 -&gt; 2 (28 -&gt; 29 bytes)"),
        "{page}"
    );
}

/// A person fills a generated form, by keyboard, in Chromium: an error shows beside its
/// field, an edit is previewed as a diff, and the approval is signed over the answer.
#[test]
fn a_person_answers_and_edits_in_a_real_browser() {
    let Some(python) =
        crate::common::test_python("the browser test", crate::common::Needs::Browser)
    else {
        return;
    };
    let p = Project::new();
    let run = p.init();
    let token = add(&p, "alice");
    pinned_key(&p);
    open(&run);
    let s = Server::start(&p);
    let (lines, err) = in_browser(
        &python,
        "answer.py",
        &[
            &format!("http://127.0.0.1:{}", s.port),
            &token,
            &gate_path(&run, "g"),
        ],
        std::process::Stdio::null(),
        |_| {},
    );
    assert!(lines.contains(&"DONE".to_string()), "{lines:?}\n{err}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("ERROR ") && l.contains("maximum of 60")),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"DIFF - v2 ships soon".to_string()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"DIFF + v2 ships today".to_string()),
        "{lines:?}"
    );
    drop(s);
    let answer: serde_json::Value = serde_json::from_slice(&run.get("verdict_out", None)).unwrap();
    assert_eq!(
        answer,
        serde_json::json!({"verdict": "Ship it", "risk": "high", "rollback": true,
            "reviewers": ["ann", "bob"], "limits": {"max_minutes": 30}})
    );
    assert_eq!(run.get("draft", None), b"Release notes\nv2 ships today\n");
    run.cmd()
        .args(["gates", "wait", "g", "--require-signed"])
        .assert()
        .success();
}

/// Found by an outside attack on the page: a number that cannot be kept exactly is refused
/// beside its field (never rounded); a field the form does not have, and an edit of an input
/// the page did not offer, are 400; a comment changed after the preview is previewed again;
/// an input whose lines end in CRLF keeps them when edited, and the preview's sizes are the
/// stored bytes. Nothing is written by any refusal.
fn what_the_page_refuses_and_what_it_keeps_exactly(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let token = add(&p, "alice");
    run.bind("doc", "line1\r\nline2\r\nline3\r\n", None);
    run.bind("big", &"x".repeat(20_000), None);
    run.cmd()
        .args([
            "gates", "create", "g", "--prompt", "Ship?", "--inputs", "doc,big",
        ])
        .args([
            "--response-schema",
            r#"{"type":"object","properties":{"x":{"type":"number"}}}"#,
        ])
        .assert()
        .success();
    let s = Server::start(&p);
    let cookie = s.login(&token);
    let page = s.get(&gate_path(&run, "g"), Some(&cookie)).body;
    assert!(page.contains(r#"name="edit/doc""#), "{page}");
    assert!(
        !page.contains(r#"name="edit/big""#),
        "a 20,000-byte input is not offered"
    );
    let before = run.snapshot();
    let r = post(
        &s,
        &cookie,
        &run,
        &approval(&page, &[("r/x", "0.12345678901234567890")]),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("cannot be kept exactly"), "{}", r.body);
    for bad in [("r/nope", "1"), ("edit/big", "small")] {
        let r = post(&s, &cookie, &run, &approval(&page, &[bad]));
        assert_eq!(r.status, 400, "{bad:?}: {}", r.body);
    }
    assert_eq!(run.snapshot(), before, "a refusal wrote");
    // A browser sends a text area's lines with CRLF; the value's own CRLF are kept.
    let edit = ("edit/doc", "line1\r\nLINE2\r\nline3\r\n");
    let r = post(&s, &cookie, &run, &approval(&page, &[("r/x", "1"), edit]));
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("21 bytes → 21 bytes"), "{}", r.body);
    let confirm = form_fields(&r.body, "confirm", &[]);
    // The comment changed after the preview: previewed again.
    let changed: Vec<(String, String)> = confirm
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                if k == "comment" {
                    "another".into()
                } else {
                    v.clone()
                },
            )
        })
        .collect();
    let again = post(&s, &cookie, &run, &changed);
    assert_eq!(again.status, 200);
    assert!(again.body.contains("Approve with these edits?"));
    assert_eq!(run.snapshot(), before);
    let r = post(&s, &cookie, &run, &confirm);
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(run.get("doc", None), b"line1\r\nLINE2\r\nline3\r\n");
}

/// What an outside battery found the page taking: a value whose percent-decoded bytes are not
/// UTF-8 was read as U+FFFD into the sealed answer (and an edit), and a field for a `const`
/// property, which the form shows but does not ask, was ignored. Both are 400 now, with
/// nothing written.
fn bytes_that_are_not_text_and_fields_not_asked_are_refused(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let token = add(&p, "alice");
    run.bind("draft", "v1", None);
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "Ship?", "--inputs", "draft"])
        .args([
            "--response-schema",
            r#"{"type":"object","properties":{"c":{"const":"fixed"},"s":{"type":"string"}},"required":["c"]}"#,
            "--response-binding",
            "ans",
        ])
        .assert()
        .success();
    let s = Server::start(&p);
    let cookie = s.login(&token);
    let page = s.get(&gate_path(&run, "g"), Some(&cookie)).body;
    let before = run.snapshot();
    let path = format!("{}/decide", gate_path(&run, "g"));
    let kind = Some("application/x-www-form-urlencoded");
    for raw in ["r%2Fs=%FF%FE", "edit%2Fdraft=caf%E9", "r%2F%FF=x"] {
        let body = format!("{}&{raw}", crate::serve::form_body(&approval(&page, &[])));
        let r = s.send("POST", &path, Some(&cookie), kind, &body);
        assert_eq!(r.status, 400, "{raw}: {}", r.body);
        assert!(r.body.contains("not UTF-8"), "{raw}: {}", r.body);
        assert_eq!(run.snapshot(), before, "{raw} wrote");
    }
    let r = post(
        &s,
        &cookie,
        &run,
        &approval(&page, &[("r/c", "\"other\""), ("r/s", "hello")]),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.body.contains("no field this gate's form asks for"),
        "{}",
        r.body
    );
    assert_eq!(run.snapshot(), before, "a field not asked wrote");
    // The form as it is: approved, the constant in the answer.
    let r = post(&s, &cookie, &run, &approval(&page, &[("r/s", "hello")]));
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(run.get("ans", None), br#"{"c":"fixed","s":"hello"}"#);
}

/// Found by helper-43: an input holding a bidi override was put, as it is, in the edit box
/// (Chromium showed `account: 2345-6789` for `9876-5432`), the only place the page showed
/// that part of it; its "whole value" link served the same bytes for the browser to lay out.
/// Now an input holding any character the page shows escaped is not offered for editing (the
/// page says so and how to edit it on the command line), an edit of it posted anyway is 400
/// and writes nothing, and the whole value is served escaped.
fn no_text_area_shows_an_input_other_than_it_is_stored(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let token = add(&p, "alice");
    let tricky = "Send the refund to account: \u{202e}9876-5432\u{202c} (verified)\n";
    run.bind("payee", tricky, None);
    run.bind("memo", "plain text\r\nwith CRLF\r\n", None);
    run.cmd()
        .args([
            "gates",
            "create",
            "g",
            "--prompt",
            "Refund?",
            "--inputs",
            "payee,memo",
        ])
        .assert()
        .success();
    let s = Server::start(&p);
    let cookie = s.login(&token);
    let page = s.get(&gate_path(&run, "g"), Some(&cookie)).body;
    assert!(
        !page.contains('\u{202e}'),
        "a raw override on the page: {page}"
    );
    assert!(!page.contains(r#"name="edit/payee""#), "{page}");
    assert!(page.contains(r#"name="edit/memo""#), "{page}");
    let note = page
        .split(r#"id="not-editable""#)
        .nth(1)
        .and_then(|r| r.split("</p>").next())
        .unwrap_or_else(|| panic!("no note of what is not editable: {page}"));
    assert!(
        note.contains("<code>payee</code>") && !note.contains("memo"),
        "{note}"
    );
    assert!(
        note.contains("prose-state approve g --edit NAME=@FILE"),
        "{note}"
    );
    let before = run.snapshot();
    let r = post(
        &s,
        &cookie,
        &run,
        &approval(&page, &[("edit/payee", "Send the refund to account: 1")]),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("the page shows escaped"), "{}", r.body);
    assert_eq!(run.snapshot(), before, "a refusal wrote");
    let whole = s.get(
        &format!("/runs/{}/bindings/root/payee", run.id),
        Some(&cookie),
    );
    assert_eq!(whole.status, 200);
    assert_eq!(
        whole.body,
        "Send the refund to account: \\u{202e}9876-5432\\u{202c} (verified)\n"
    );
    // The command line edits it, and `gates show` says it escaped.
    let shown = run.cmd().args(["gates", "show", "g"]).assert().success();
    let out = String::from_utf8_lossy(&shown.get_output().stdout).to_string();
    assert!(
        out.contains("    Send the refund to account: \\u{202e}9876-5432\\u{202c} (verified)"),
        "{out}"
    );
}
