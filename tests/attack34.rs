//! What a third outside attack on the merged binary found (helper-34, which had not seen the
//! tests), each closed: the MCP bindings resource and the gate's page showed a forged answer or
//! edit; an edit changed in place was called stale, not tampered; `gates verify` and `doctor`
//! missed a value changed in place with its history left as the decision wrote it.

use crate::common::*;
use crate::serve::{add, gate_path, Server};

on_both!(
    the_mcp_bindings_resource_shows_no_forged_answer,
    the_gate_page_shows_no_forged_answer_or_edit,
    an_edit_changed_in_place_is_tampered_not_stale,
);

/// `ans` and `doc` changed in place, their versions and history left as the decision wrote
/// them, the triggers back as they were: (SQLite, PostgreSQL).
const IN_PLACE: (&str, &str) = (
    "DROP TRIGGER bindings_version_update;
     UPDATE bindings SET value = '6' WHERE name = 'ans';
     UPDATE bindings SET value = 'evil' WHERE name = 'doc';",
    "ALTER TABLE openprose.bindings DISABLE TRIGGER USER;
     UPDATE openprose.bindings SET value = '6' WHERE run_id = '$RUN' AND name = 'ans';
     UPDATE openprose.bindings SET value = 'evil' WHERE run_id = '$RUN' AND name = 'doc';
     ALTER TABLE openprose.bindings ENABLE TRIGGER USER;",
);

/// The run's bindings resource, read over MCP (rmcp's client) after the answer was forged in
/// place: an error naming the change, never the forged value; the `get` tool says the same.
fn the_mcp_bindings_resource_shows_no_forged_answer(b: Backend) {
    use rmcp::ServiceExt;
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    answered_and_edited(&run, &["--allow", "alice"]);
    run.view().raw(IN_PLACE.0, IN_PLACE.1);
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
        let client = ().serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap()).await.unwrap();
        let read = client
            .read_resource(rmcp::model::ReadResourceRequestParams::new(format!(
                "prose://runs/{}/bindings",
                run.id
            )))
            .await;
        let text = format!("{read:?}");
        assert!(read.is_err(), "{text}");
        assert!(!text.contains("\"first_line\":\"6\""), "{text}");
        assert!(text.contains("behind prose-state's back"), "{text}");
        let serde_json::Value::Object(args) = serde_json::json!({"name": "ans"}) else {
            unreachable!()
        };
        let r = client
            .call_tool(rmcp::model::CallToolRequestParams::new("get").with_arguments(args))
            .await
            .unwrap();
        assert_eq!(r.is_error, Some(true), "{r:?}");
        client.cancel().await.unwrap();
    });
}

/// The gate's page, after the answer and the edit were forged in place: refused (409, the
/// class of a tampered read), never the forged values under "attested".
fn the_gate_page_shows_no_forged_answer_or_edit(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let token = add(&p, "alice");
    answered_and_edited(&run, &["--allow", "alice"]);
    let s = Server::start(&p);
    let cookie = s.login(&token);
    let page = s.get(&gate_path(&run, "G"), Some(&cookie));
    assert_eq!(page.status, 200, "{}", page.body);
    run.view().raw(IN_PLACE.0, IN_PLACE.1);
    let page = s.get(&gate_path(&run, "G"), Some(&cookie));
    assert_eq!(page.status, 409, "{}", page.body);
    assert!(!page.body.contains("evil"), "{}", page.body);
}

/// The edited input changed in place (its version kept): `gates show` and `gates wait` say it
/// was tampered with (exit 9), not that the decision went stale (11); `gates verify` and
/// `doctor` report it (on PostgreSQL with its triggers enabled again).
fn an_edit_changed_in_place_is_tampered_not_stale(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    answered_and_edited(&run, &["--allow", "alice"]);
    run.view().raw(
        "DROP TRIGGER bindings_version_update;
         UPDATE bindings SET value = 'evil' WHERE name = 'doc';",
        "ALTER TABLE openprose.bindings DISABLE TRIGGER USER;
         UPDATE openprose.bindings SET value = 'evil' WHERE run_id = '$RUN' AND name = 'doc';
         ALTER TABLE openprose.bindings ENABLE TRIGGER USER;",
    );
    for args in [
        vec!["gates", "show", "G"],
        vec!["gates", "wait", "G", "--timeout", "0"],
    ] {
        let a = run.cmd().args(&args).assert().failure();
        assert_eq!(code(&a), 9, "{args:?}: {}", stderr(&a));
        assert!(!String::from_utf8_lossy(&a.get_output().stdout).contains("evil"));
    }
    // The answer changed in place too (on PostgreSQL, its triggers enabled again after).
    run.view().raw(
        "UPDATE bindings SET value = '6' WHERE name = 'ans';",
        "ALTER TABLE openprose.bindings DISABLE TRIGGER USER;
         UPDATE openprose.bindings SET value = '6' WHERE run_id = '$RUN' AND name = 'ans';
         ALTER TABLE openprose.bindings ENABLE TRIGGER USER;",
    );
    let a = run.cmd().args(["gates", "verify"]).assert().failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    let a = run.cmd().args(["doctor"]).assert().failure();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(out.contains("tampered binding"), "{out}");
}
