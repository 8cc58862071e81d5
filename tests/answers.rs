//! Issue 49 (first part): a gate opened with a response schema takes an answer with its
//! decision. The schema is sealed in the `created` event, the answer in the decision's; both
//! are read back from the log (`gates wait`, `gates show`), and a bad schema or answer is bad
//! input (exit 2) that writes nothing.

use crate::common::*;

on_both!(
    an_answer_is_checked_sealed_and_handed_back,
    bad_schemas_and_bad_answers_write_nothing,
    an_answer_edited_behind_the_tools_back_is_tampering,
    the_vm_asks_for_an_answer_over_mcp,
    a_quorums_answers_are_each_kept_and_the_deciding_one_is_the_gates,
);

const SCHEMA: &str = r#"{"type":"object","title":"Release size",
  "properties":{"size":{"type":"integer","minimum":1,"description":"How many"},
                "tone":{"enum":["warm","dry"]},
                "tags":{"type":"array","items":{"type":"string","maxLength":8}}},
  "required":["size"],"additionalProperties":false}"#;

fn open(run: &Run, gate: &str) {
    run.cmd()
        .args(["gates", "create", gate, "--prompt", "How big?"])
        .args(["--response-schema", SCHEMA])
        .assert()
        .success();
}

/// The answer an approval gives, from the command line and from a file, comes back from
/// `gates wait` and `gates show` as the sealed decision holds it, with the schema it was
/// checked against; the identical `gates create` again is a safe retry, another schema a
/// conflict (exit 4).
fn an_answer_is_checked_sealed_and_handed_back(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let schema_file = p.write("schema.json", SCHEMA.as_bytes());
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "How big?"])
        .arg("--response-schema")
        .arg(format!("@{}", schema_file.display()))
        .assert()
        .success();
    // The same call again (the schema given inline this time): nothing written.
    let before = run.snapshot();
    open(&run, "g");
    assert_eq!(run.snapshot(), before, "an identical retry wrote");
    let a = run
        .cmd()
        .args(["gates", "create", "g", "--prompt", "How big?"])
        .args(["--response-schema", r#"{"type":"object"}"#])
        .assert()
        .failure();
    assert_eq!(code(&a), 4, "{}", stderr(&a));
    assert_eq!(run.snapshot(), before);
    let answer = p.write("answer.json", br#"{"size": 3, "tags": ["a", "b"]}"#);
    run.cmd()
        .args(["approve", "g", "--as", "alice", "-y", "--response"])
        .arg(format!("@{}", answer.display()))
        .assert()
        .success();
    let a = run
        .cmd()
        .args(["--json", "gates", "wait", "g"])
        .assert()
        .success();
    let v = stdout_json(&a);
    assert_eq!(v["status"], "approved");
    assert_eq!(
        v["response"],
        serde_json::json!({"size": 3, "tags": ["a", "b"]})
    );
    assert_eq!(
        v["response_schema"]["required"],
        serde_json::json!(["size"])
    );
    // The list checked against the sealed logs (`--scan`) carries the answer too.
    let a = run
        .cmd()
        .args(["--json", "gates", "--status", "all", "--scan"])
        .assert()
        .success();
    let listed = stdout_json(&a);
    assert_eq!(listed[0]["response"]["size"], 3, "{listed}");
    let a = run.cmd().args(["gates", "wait", "g"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(
        out.contains("\nresponse: {\"size\":3,\"tags\":[\"a\",\"b\"]}\n"),
        "{out}"
    );
    let a = run.cmd().args(["gates", "show", "g"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(out.contains("Response: {\"size\":3"), "{out}");
    // Sealed where a verifier finds it: the decision's event holds the answer.
    let events = run.view().events("g");
    let approved = events.iter().find(|e| e.0 == "approved").unwrap();
    assert_eq!(approved.2["response"]["size"], 3);
    run.cmd().args(["gates", "verify"]).assert().success();
    // A rejection may carry an answer, which must fit too; a gate with no schema takes none.
    open(&run, "h");
    run.cmd()
        .args(["reject", "h", "--as", "bob", "-y", "--reason", "too big"])
        .args(["--response", r#"{"size": 1, "tone": "dry"}"#])
        .assert()
        .success();
    let a = run
        .cmd()
        .args(["--json", "gates", "wait", "h"])
        .assert()
        .failure();
    assert_eq!(code(&a), 5);
    assert_eq!(stdout_json(&a)["response"]["tone"], "dry");
    // A gate that asks for nothing shows neither field.
    run.cmd()
        .args(["gates", "create", "plain", "--prompt", "Go?"])
        .assert()
        .success();
    run.cmd()
        .args(["approve", "plain", "--as", "alice", "-y"])
        .assert()
        .success();
    let a = run
        .cmd()
        .args(["--json", "gates", "wait", "plain"])
        .assert()
        .success();
    let v = stdout_json(&a);
    assert!(
        v.get("response").is_none() && v.get("response_schema").is_none(),
        "{v}"
    );
}

/// Every bad schema and every bad answer is exit 2 with one line naming what was wrong, and
/// leaves the database as it was: no gate, no decision, no audit event.
fn bad_schemas_and_bad_answers_write_nothing(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let deep = (0..9).fold(r#"{"type":"string"}"#.to_string(), |inner, _| {
        format!(r#"{{"type":"object","properties":{{"a":{inner}}}}}"#)
    });
    let huge = format!(r#"{{"description":"{}"}}"#, "x".repeat(17 * 1024));
    let before = run.snapshot();
    for (schema, says) in [
        (
            r##"{"$ref":"#/definitions/a"}"##,
            "\"$ref\" is not a keyword",
        ),
        (
            r#"{"type":"string","pattern":"a+"}"#,
            "\"pattern\" is not a keyword",
        ),
        (
            r#"{"additionalProperties":true}"#,
            "additionalProperties may only be false",
        ),
        (r#"{"type":"null"}"#, "type is one of"),
        (
            r#"{"type":"integer","minimum":"one"}"#,
            "not a valid JSON Schema",
        ),
        (r#"{"type":"string","type":"object"}"#, "given twice"),
        ("{\"title\":\"a\u{202e}b\"}", "U+202E"),
        (r#"{"enum":["ok","x\u001b[2J"]}"#, "U+001B"),
        (deep.as_str(), "at most 8 levels"),
        (huge.as_str(), "at most 16384"),
        ("not json", "not JSON"),
        ("@/nonexistent/schema.json", "cannot read it"),
        (r#"{"enum":[]}"#, "enum is a non-empty list"),
        (
            r#"{"minimum":123456789012345678901234567890}"#,
            "cannot be kept exactly",
        ),
    ] {
        let a = run
            .cmd()
            .args(["gates", "create", "g", "--prompt", "How big?"])
            .args(["--response-schema", schema])
            .assert()
            .failure();
        let err = stderr(&a);
        assert_eq!(code(&a), 2, "{schema}: {err}");
        assert!(err.contains(says), "{schema}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    assert_eq!(run.snapshot(), before, "a refused schema wrote");
    open(&run, "g");
    let nested = format!("{}{}", "[".repeat(17), "]".repeat(17));
    let big = format!(r#"{{"size":1,"tags":["{}"]}}"#, "y".repeat(65 * 1024));
    let before = run.snapshot();
    for (answer, says) in [
        (None, "the gate asks for a response"),
        (Some(r#"{"size":0}"#), "at \"/size\""),
        (Some(r#"{"size":2,"colour":"red"}"#), "at \"/\""),
        (
            Some(r#"{"size":2,"tags":["far too long"]}"#),
            "at \"/tags/0\"",
        ),
        (Some(r#"{"size":2,"size":3}"#), "given twice"),
        (Some(nested.as_str()), "nests too deep"),
        (Some(big.as_str()), "at most 65536"),
        (Some("{\"size\":"), "not JSON"),
        (
            Some(r#"{"size":123456789012345678901234567889}"#),
            "cannot be kept exactly",
        ),
    ] {
        let mut cmd = run.cmd();
        cmd.args(["approve", "g", "--as", "alice", "-y"]);
        if let Some(answer) = answer {
            cmd.args(["--response", answer]);
        }
        let a = cmd.assert().failure();
        let err = stderr(&a);
        assert_eq!(code(&a), 2, "{answer:?}: {err}");
        assert!(err.contains(says), "{answer:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    // An answer file that is not UTF-8.
    let bad = p.write("bad.json", b"{\"size\": \"\xff\"}");
    let a = run
        .cmd()
        .args(["approve", "g", "--as", "alice", "-y", "--response"])
        .arg(format!("@{}", bad.display()))
        .assert()
        .failure();
    assert_eq!(code(&a), 2);
    assert!(stderr(&a).contains("not UTF-8"), "{}", stderr(&a));
    // A FIFO (or a device) would block or never end: refused, not read.
    let fifo = p.root().join("answer.fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let a = run
        .cmd()
        .args(["approve", "g", "--as", "alice", "-y", "--response"])
        .arg(format!("@{}", fifo.display()))
        .assert()
        .failure();
    assert_eq!(code(&a), 2);
    assert!(stderr(&a).contains("not a regular file"), "{}", stderr(&a));
    assert_eq!(run.snapshot(), before, "a refused answer wrote");
    assert_eq!(run.view().gate("g").0, "pending");
}

/// The answer is the sealed decision's: a `gates` row edited behind the tool's back does not
/// change it, and an answer edited in the audit log breaks the seal (exit 9), never changing
/// what `gates wait` hands the program.
fn an_answer_edited_behind_the_tools_back_is_tampering(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    open(&run, "g");
    run.cmd()
        .args(["approve", "g", "--as", "alice", "-y"])
        .args(["--response", r#"{"size":3}"#])
        .assert()
        .success();
    let view = run.view();
    // The log's append-only triggers dropped first, as a writer with the database's
    // privileges could.
    view.raw(
        "DROP TRIGGER IF EXISTS gate_audit_log_no_update;
         UPDATE gate_audit_log SET metadata = replace(metadata, '\"size\":3', '\"size\":300')
          WHERE event_type = 'approved'",
        "ALTER TABLE openprose.gate_audit_log DISABLE TRIGGER gate_audit_log_append_only;
         UPDATE openprose.gate_audit_log
            SET metadata = replace(metadata, '\"size\":3', '\"size\":300')
          WHERE run_id = '$RUN' AND event_type = 'approved'",
    );
    assert_eq!(
        run.view().events("g").last().unwrap().2["response"]["size"],
        300
    );
    let a = run
        .cmd()
        .args(["--json", "gates", "wait", "g"])
        .assert()
        .failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    let a = run.cmd().args(["gates", "verify"]).assert().failure();
    assert_eq!(code(&a), 9);
}

/// A VM's MCP session opens a gate with a response schema (given as itself: a `@FILE` is
/// refused, the server reads no file for it) and `gates_wait` hands back the answer the
/// person gave on the command line, in its structured content.
fn the_vm_asks_for_an_answer_over_mcp(b: Backend) {
    use rmcp::model::CallToolRequestParams;
    use rmcp::ServiceExt;
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.args(["--run", &run.id, "mcp", "--role", "vm", "--agent", "vm"])
            .current_dir(p.root())
            .env("HOME", test_home(p.root()))
            .stderr(std::process::Stdio::null());
        for var in CLEARED_ENV {
            cmd.env_remove(var);
        }
        let client = ()
            .serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap())
            .await
            .unwrap();
        let call = |tool: &str, args: serde_json::Value| {
            let serde_json::Value::Object(args) = args else {
                unreachable!()
            };
            client.call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args))
        };
        let listed = client.list_all_tools().await.unwrap();
        let create = listed.iter().find(|t| t.name == "gates_create").unwrap();
        assert!(
            create.input_schema["properties"]
                .get("response_schema")
                .is_some(),
            "{:?}",
            create.input_schema
        );
        // The test's own reads of the database block: off the runtime's worker.
        let snapshot = || tokio::task::block_in_place(|| run.snapshot());
        let before = snapshot();
        let r = call(
            "gates_create",
            serde_json::json!({"gate_id": "g", "prompt": "How big?", "response_schema": "@/etc/passwd"}),
        )
        .await
        .unwrap();
        assert_eq!(r.is_error, Some(true), "{r:?}");
        assert!(format!("{r:?}").contains("reads no file"), "{r:?}");
        assert_eq!(snapshot(), before);
        let r = call(
            "gates_create",
            // The schema as a JSON object, as a model writes it.
            serde_json::json!({"gate_id": "g", "prompt": "How big?",
                               "response_schema": serde_json::from_str::<serde_json::Value>(SCHEMA).unwrap(),
                               "response_binding": "size_answer"}),
        )
        .await
        .unwrap();
        assert_ne!(r.is_error, Some(true), "{r:?}");
        tokio::task::block_in_place(|| {
            run.cmd()
                .args(["approve", "g", "--as", "alice", "-y", "--response", r#"{"size":4}"#])
                .assert()
                .success()
        });
        let r = call("gates_wait", serde_json::json!({"gate": "g"}))
            .await
            .unwrap();
        let v = r.structured_content.clone().unwrap();
        assert_eq!(v["status"], "approved", "{v}");
        assert_eq!(v["response"], serde_json::json!({"size": 4}), "{v}");
        assert_eq!(v["response_schema"]["required"], serde_json::json!(["size"]));
        // The answer is the binding the VM named, which the next statement reads.
        assert_eq!(v["response_binding"]["name"], "size_answer", "{v}");
        let r = call("get", serde_json::json!({"name": "size_answer"}))
            .await
            .unwrap();
        assert!(format!("{r:?}").contains(r#"{\"size\":4}"#), "{r:?}");
        // The gate's resource carries the answer too, as its sealed log holds it.
        let read = client
            .read_resource(rmcp::model::ReadResourceRequestParams::new(format!(
                "prose://runs/{}/gates/g",
                run.id
            )))
            .await
            .unwrap();
        let text = match &read.contents[0] {
            rmcp::model::ResourceContents::TextResourceContents { text, .. } => text.clone(),
            other => panic!("{other:?}"),
        };
        let gate: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(gate["response"], serde_json::json!({"size": 4}), "{gate}");
        assert_eq!(gate["response_binding"]["name"], "size_answer", "{gate}");
        assert_eq!(gate["integrity"]["state"], "attested", "{gate}");
        // Still not an argument a model may pass.
        let r = call("gates_list", serde_json::json!({"scan": true})).await;
        assert!(format!("{r:?}").contains("unknown argument"), "{r:?}");
        client.cancel().await.unwrap();
    });
}

/// Two approvers of a gate that needs both answer differently: each answer is sealed with its
/// own vote, `response` is the deciding approval's, and `responses` lists both with who gave
/// them, so that neither answer is lost or wins unseen.
fn a_quorums_answers_are_each_kept_and_the_deciding_one_is_the_gates(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let tokens: Vec<String> = ["alice", "bob"]
        .iter()
        .map(|n| crate::serve::add(&p, n))
        .collect();
    run.cmd()
        .args(["gates", "create", "t", "--prompt", "How many?"])
        .args(["--allow", "alice,bob", "--require", "2"])
        .args(["--response-schema", r#"{"type":"integer","minimum":1}"#])
        .assert()
        .success();
    let vote = |tok: &str, answer: &str| {
        run.cmd()
            .env("PROSE_TOKEN", tok)
            .args(["approve", "t", "-y", "--response", answer])
            .assert()
    };
    vote(&tokens[0], "3").success();
    // Voting again with another answer is refused, and writes nothing; the same answer again
    // is the vote already counted.
    let before = run.snapshot();
    let a = vote(&tokens[0], "4").failure();
    assert_eq!(code(&a), 4, "{}", stderr(&a));
    assert!(stderr(&a).contains("with another answer"), "{}", stderr(&a));
    assert_eq!(run.snapshot(), before);
    vote(&tokens[0], "3").success();
    assert_eq!(run.snapshot(), before);
    vote(&tokens[1], "5").success();
    let a = run
        .cmd()
        .args(["--json", "gates", "wait", "t"])
        .assert()
        .success();
    let v = stdout_json(&a);
    assert_eq!(v["status"], "approved", "{v}");
    assert_eq!(v["response"], 5, "{v}");
    assert_eq!(
        v["responses"],
        serde_json::json!([{"by": "alice", "response": 3}, {"by": "bob", "response": 5}]),
        "{v}"
    );
    // The plain wait lists each vote's answer too.
    let a = run.cmd().args(["gates", "wait", "t"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(
        out.contains("response: 5\nresponse by alice: 3\nresponse by bob: 5\n"),
        "{out}"
    );
    let a = run.cmd().args(["gates", "show", "t"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(
        out.contains("Responses, vote by vote:\n  alice: 3\n  bob: 5\n"),
        "{out}"
    );
}
