//! Issue 46, through the binary on both backends: durations that are a whole number of
//! seconds; `resume` without a run (the unfinished runs, nothing recorded); `bind --from`
//! (a copy that never passes through the caller); a persistent agent's MCP session keeping its
//! memory where its `persist:` says, into the next run; MCP sessions as a host starts them
//! (no `--agent`), failures a client can read (no structured content to break an output
//! schema), a wait that ran out saying so, `query`'s columns in order, and no task shape of
//! another revision on a handshake session. Then what helper-41 found in a subagent session
//! inside a gate's frame.

use crate::common::*;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig,
    GetPromptRequestParams, Implementation,
};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};

on_both!(
    durations_take_a_whole_number_of_seconds,
    resume_without_a_run_lists_the_unfinished_runs_and_records_nothing,
    bind_from_copies_a_binding_without_printing_it,
    a_persistent_agents_session_keeps_its_memory_where_persist_says,
    failures_are_readable_and_outcomes_said,
    a_plain_wait_offers_the_page_by_url_elicitation,
    what_an_outside_host_found,
    a_session_or_prompt_naming_what_does_not_exist_is_refused,
    persist_path_keeps_memory_under_the_project_root,
    a_subagent_inside_an_unanswered_frame_lists_what_it_sees,
);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A client (rmcp's, which negotiates 2025-11-25 with the `initialize` handshake) of
/// `prose-state [--run RUN] mcp OPTIONS`, declaring the tasks extension when `tasks`.
async fn session(
    p: &Project,
    run: Option<&Run>,
    options: &[&str],
    tasks: bool,
) -> RunningService<RoleClient, ClientConfig> {
    let mut cmd = tokio::process::Command::new(BIN);
    if let Some(run) = run {
        cmd.args(["--run", &run.id]);
    }
    cmd.arg("mcp")
        .args(options)
        .current_dir(p.root())
        .env("HOME", test_home(p.root()))
        .stderr(std::process::Stdio::null());
    for var in CLEARED_ENV {
        cmd.env_remove(var);
    }
    let capabilities = if tasks {
        ClientCapabilities::builder().enable_tasks().build()
    } else {
        ClientCapabilities::default()
    };
    ClientConfig::new(capabilities, Implementation::new("mcp46", "0"))
        .serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap()
}

async fn call(
    client: &RunningService<RoleClient, ClientConfig>,
    tool: &str,
    args: Value,
) -> CallToolResult {
    let Value::Object(args) = args else {
        panic!("arguments are an object")
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args))
        .await
        .unwrap()
}

fn class(r: &CallToolResult) -> String {
    r.meta.as_ref().unwrap()["class"]
        .as_str()
        .unwrap()
        .to_string()
}

fn texts(r: &CallToolResult) -> Vec<String> {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

/// `--timeout 30` is 30 seconds, on `gates create` and `gates wait` alike, as over MCP; a
/// number after units, or zero, is refused with nothing written.
fn durations_take_a_whole_number_of_seconds(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let made = |id: &str, timeout: &str| {
        stdout_json(
            &run.cmd()
                .args(["--json", "gates", "create", id, "--prompt", "Ship?"])
                .args(["--timeout", timeout])
                .assert()
                .success(),
        )
    };
    let plain = made("plain", "90");
    let units = made("units", "1m30s");
    assert_eq!(
        plain["time_left_seconds"], units["time_left_seconds"],
        "90 is 1m30s: {plain} {units}"
    );
    let wait = run
        .cmd()
        .args(["gates", "wait", "plain", "--timeout", "1"])
        .assert()
        .code(7);
    assert!(stderr(&wait).is_empty() || !stderr(&wait).contains("invalid"));
    let before = run.snapshot();
    for bad in ["1m30", "0", "00", "-5", "1.5"] {
        let refused = run
            .cmd()
            .args(["gates", "create", "other", "--prompt", "p"])
            .arg(format!("--timeout={bad}"))
            .assert()
            .code(2);
        let line = stderr(&refused);
        assert!(
            line.contains("duration") && line.trim().lines().count() == 1,
            "{bad}: {line}"
        );
    }
    assert_eq!(run.snapshot(), before, "a refused duration wrote nothing");
}

/// With no run named, `resume` lists the project's unfinished runs and what tells them apart
/// (a fork names its source), or answers as the one run does; it records nothing, where
/// `resume` of a named run records the resume.
fn resume_without_a_run_lists_the_unfinished_runs_and_records_nothing(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let none = stdout_json(&p.cmd().args(["--json", "resume"]).assert().success());
    assert_eq!(none["runs"], json!([]), "{none}");
    let said = p.cmd().arg("resume").assert().success();
    assert!(String::from_utf8_lossy(&said.get_output().stdout).contains("no unfinished run"));

    // An interrupted run is unfinished: resumed by name, it runs again.
    let first = p.init();
    let record = first.exec(1, "session \"a\"", "completed", None);
    first
        .cmd()
        .args(["finish", "--status", "interrupted", "--error", "lunch"])
        .assert()
        .success();
    let before = first.snapshot();
    let one = stdout_json(&p.cmd().args(["--json", "resume"]).assert().success());
    assert_eq!(one["run"]["id"], first.id.as_str(), "{one}");
    assert_eq!(one["run"]["status"], "interrupted", "{one}");
    assert_eq!(one["position"]["after"]["id"], record);
    assert_eq!(
        first.snapshot(),
        before,
        "an unnamed resume records nothing"
    );
    let named = stdout_json(&first.cmd().args(["--json", "resume"]).assert().success());
    assert_eq!(named["run"]["status"], "running");
    assert_ne!(first.snapshot(), before, "a named resume is recorded");

    // A finished run is not listed; a fork names its source.
    let done = p.init();
    done.cmd()
        .args(["finish", "--status", "completed"])
        .assert()
        .success();
    let fork = stdout_json(
        &first
            .cmd()
            .args(["--json", "fork", "--at", &record.to_string()])
            .assert()
            .success(),
    );
    let fork_id = fork["run_id"].as_str().unwrap().to_string();
    let before = (first.snapshot(), p.run(&fork_id).snapshot());
    let several = stdout_json(&p.cmd().args(["--json", "resume"]).assert().success());
    assert!(several["run"].is_null(), "{several}");
    let runs = several["runs"].as_array().unwrap();
    let ids: Vec<&str> = runs.iter().map(|r| r["run_id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(ids.contains(&first.id.as_str()) && ids.contains(&fork_id.as_str()));
    let forked = runs
        .iter()
        .find(|r| r["run_id"] == fork_id.as_str())
        .unwrap();
    assert_eq!(forked["forked_from"]["run"], first.id.as_str());
    assert_eq!(forked["forked_from"]["record"], record);
    assert_eq!(forked["newest_record"]["statement_text"], "session \"a\"");
    assert!(several["next_step"].as_str().unwrap().contains("--run"));
    assert_eq!(
        (first.snapshot(), p.run(&fork_id).snapshot()),
        before,
        "a list records nothing"
    );
    let text = p.cmd().arg("resume").assert().success();
    let text = String::from_utf8_lossy(&text.get_output().stdout).into_owned();
    assert!(
        text.contains(&format!("forked from {} at record {record}", first.id)),
        "{text}"
    );
}

/// `bind a --from b` copies b as `get b` reads it from the frame given, an attachment whole,
/// and prints only where it went; a source that is not there, or given beside a value, is
/// refused with nothing written.
fn bind_from_copies_a_binding_without_printing_it(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let big: String = (0..30_000).map(|i| format!("{i:05}")).collect();
    let file = p.write("big.txt", big.as_bytes());
    run.cmd()
        .args(["bind", "report", "--file"])
        .arg(&file)
        .assert()
        .success();
    let copied = run
        .cmd()
        .args(["bind", "copy", "--from", "report"])
        .assert()
        .success();
    let out = String::from_utf8_lossy(&copied.get_output().stdout).into_owned();
    assert!(!out.contains("00001"), "the value is not printed: {out}");
    assert_eq!(run.get("copy", None), big.as_bytes());
    // In a frame: the name as `get` reads it from there.
    let call = run.exec(2, "do f(x)", "executing", None);
    run.bind("x", "the frame's", Some(call));
    run.bind("x", "the root's", None);
    run.cmd()
        .args([
            "bind",
            "y",
            "--from",
            "x",
            "--execution-id",
            &call.to_string(),
        ])
        .assert()
        .success();
    assert_eq!(run.get("y", Some(call)), b"the frame's");
    // `let r = do f()`: the block's result, read in its frame, bound in the caller's.
    run.bind("result", "from inside", Some(call));
    run.cmd()
        .args([
            "bind",
            "r",
            "--from",
            "result",
            "--from-execution-id",
            &call.to_string(),
        ])
        .assert()
        .success();
    assert_eq!(run.get("r", None), b"from inside");
    let before = run.snapshot();
    for (args, code) in [
        (vec!["bind", "z", "--from", "nothing"], 3),
        (vec!["bind", "z", "--from", "x", "a value"], 2),
        (vec!["bind", "z", "--from", "x", "--append", "1"], 2),
        (vec!["bind", "z", "--from", "no such"], 2),
    ] {
        let refused = run.cmd().args(&args).assert().code(code);
        assert_eq!(stderr(&refused).trim().lines().count(), 1, "{args:?}");
    }
    assert_eq!(run.snapshot(), before, "a refused copy wrote nothing");
}

/// A subagent session started `--agent captain --scope project` keeps the captain's memory
/// in the project (on a team's server, there), where the next run's session finds it; its
/// prompt says so. A subagent session cannot have its prompt name another agent or scope.
fn a_persistent_agents_session_keeps_its_memory_where_persist_says(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let next = p.init();
    let options = [
        "--role", "subagent", "--agent", "captain", "--scope", "project",
    ];
    runtime().block_on(async {
        let s = session(&p, Some(&run), &options, false).await;
        let r = call(&s, "agent_remember", json!({"value": "the reef is north"})).await;
        assert_eq!(class(&r), "ok", "{r:?}");
        let prompt = s
            .get_prompt(GetPromptRequestParams::new("subagent"))
            .await
            .unwrap();
        let text = serde_json::to_value(&prompt.messages[0].content).unwrap()["text"]
            .as_str()
            .unwrap()
            .to_string();
        let place = match b {
            Backend::Sqlite => "`.prose/agents.db`",
            Backend::Postgres => "PostgreSQL server",
        };
        assert!(
            text.contains(place) && text.contains("outlives the run"),
            "{text}"
        );
        // The agent tools take no scope here: the session's is the only one.
        let r = call(&s, "agent_memory", json!({"scope": "execution"})).await;
        assert_eq!(class(&r), "usage");
        let mut asked = GetPromptRequestParams::new("subagent");
        asked.arguments = Some(serde_json::from_value(json!({"scope": "user"})).unwrap());
        assert!(
            s.get_prompt(asked).await.is_err(),
            "another scope is refused"
        );
        s.cancel().await.unwrap();
        let s = session(&p, Some(&next), &options, false).await;
        let r = call(&s, "agent_memory", json!({})).await;
        assert_eq!(
            r.structured_content.as_ref().unwrap()["memory"],
            "the reef is north"
        );
        s.cancel().await.unwrap();
    });
    let memory = run
        .cmd()
        .args(["agent", "--scope", "project", "memory", "captain"])
        .assert()
        .success();
    assert_eq!(memory.get_output().stdout, b"the reef is north");
    // Not in the run's own (execution) scope.
    run.cmd()
        .args(["agent", "memory", "captain"])
        .assert()
        .code(3);
}

/// A VM session needs no `--agent`; a failed call carries no structured content (which a
/// client checks against the output schema) and says why in its text and `_meta`; a wait
/// that ran out says so in words; `query` gives its columns in order; a client that declares
/// the tasks extension on a handshake session (2025-11-25) is offered no task: the server does
/// not declare the extension, and `gates_wait` answers plainly, a whole-second string timeout
/// taken. An anonymous subagent session has no memory tools, and its prompt offers none.
fn failures_are_readable_and_outcomes_said(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "ship", "--prompt", "Ship?"])
        .assert()
        .success();
    runtime().block_on(async {
        let s = session(&p, Some(&run), &["--role", "vm"], true).await;
        let info = s.peer_info().unwrap();
        assert!(
            !info.capabilities.supports_tasks(),
            "no tasks extension on a 2025-11-25 session: {:?}",
            info.capabilities
        );
        for (tool, args, want, code) in [
            ("get", json!({"name": "missing"}), "not_found", 3),
            (
                "query",
                json!({"sql": "CREATE TABLE t46 (x INTEGER)"}),
                "refused",
                4,
            ),
            ("bind", json!({"name": "x", "nonsense": 1}), "usage", 2),
            (
                "bind",
                json!({"name": "x", "value": "1", "if_version": 7}),
                "refused",
                4,
            ),
        ] {
            let r = call(&s, tool, args.clone()).await;
            assert_eq!(r.is_error, Some(true), "{tool} {args}");
            assert!(r.structured_content.is_none(), "{tool}: {r:?}");
            let error: Value = serde_json::from_str(&texts(&r)[0]).unwrap();
            assert_eq!(error["class"], want, "{tool} {args}: {error}");
            assert_eq!(error["exit_code"], code);
            assert_eq!(class(&r), want);
            assert!(!error["error"].as_str().unwrap().is_empty());
        }
        let r = call(&s, "gates_wait", json!({"gate": "ship", "timeout": "1"})).await;
        assert_eq!(class(&r), "still_pending", "{r:?}");
        assert_ne!(r.is_error, Some(true));
        let said = texts(&r);
        assert!(
            said.len() == 2 && said[1].starts_with("still_pending: ") && said[1].contains("ship"),
            "{said:?}"
        );
        s.cancel().await.unwrap();

        // On PostgreSQL `query` runs only as a role that can do nothing but read.
        if let Some(url) = p.pg_url.clone() {
            let reader = tokio::task::spawn_blocking(move || crate::common::pg::as_reader(&url))
                .await
                .unwrap();
            p.write(
                ".prose/.env",
                format!("OPENPROSE_POSTGRES_URL={reader}\n").as_bytes(),
            );
        }
        let s = session(&p, Some(&run), &["--role", "vm"], false).await;
        let q = call(&s, "query", json!({"sql": "SELECT 3 AS c, 1 AS a, 2 AS b"})).await;
        let q = q
            .structured_content
            .clone()
            .unwrap_or_else(|| panic!("{:?}", texts(&q)));
        assert_eq!(q["columns"], json!(["c", "a", "b"]), "{q}");
        s.cancel().await.unwrap();

        let s = session(&p, Some(&run), &["--role", "subagent"], false).await;
        let tools: Vec<String> = s
            .list_all_tools()
            .await
            .unwrap()
            .iter()
            .map(|t| t.name.to_string())
            .collect();
        assert!(!tools.iter().any(|t| t.starts_with("agent")), "{tools:?}");
        let prompt = s
            .get_prompt(GetPromptRequestParams::new("subagent"))
            .await
            .unwrap();
        let text = format!("{:?}", prompt.messages);
        assert!(
            !text.contains("agent_memory") && text.contains(&run.id),
            "{text}"
        );
        s.cancel().await.unwrap();
    });
}

/// A client that takes URL elicitation and keeps what it was asked.
#[derive(Clone, Default)]
struct Asked(std::sync::Arc<std::sync::Mutex<Vec<rmcp::model::ElicitRequestParams>>>);

impl rmcp::ClientHandler for Asked {
    fn get_info(&self) -> ClientConfig {
        let capabilities: ClientCapabilities =
            serde_json::from_value(json!({"elicitation": {"url": {}}})).unwrap();
        ClientConfig::new(capabilities, Implementation::new("mcp46-asked", "0"))
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        self.0.lock().unwrap().push(request);
        Ok(rmcp::model::ElicitResult::new(
            rmcp::model::ElicitationAction::Accept,
        ))
    }
}

/// On a handshake session (2025-11-25), a plain `gates_wait` on a pending gate sends a client
/// that takes URL elicitation one `elicitation/create` naming the gate's approval page
/// (`PROSE_SERVE_URL`); accepting it decides nothing: the wait still runs out pending.
fn a_plain_wait_offers_the_page_by_url_elicitation(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "ship", "--prompt", "Ship?"])
        .assert()
        .success();
    let asked = Asked::default();
    runtime().block_on(async {
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.args(["--run", &run.id, "mcp", "--role", "vm"])
            .current_dir(p.root())
            .env("HOME", test_home(p.root()))
            .stderr(std::process::Stdio::null());
        for var in CLEARED_ENV {
            cmd.env_remove(var);
        }
        cmd.env("PROSE_SERVE_URL", "https://gates.example/");
        let s = asked
            .clone()
            .serve(TokioChildProcess::new(cmd).unwrap())
            .await
            .unwrap();
        let args = json!({"gate": "ship", "timeout": 2});
        let Value::Object(args) = args else { panic!() };
        let r = s
            .call_tool(CallToolRequestParams::new("gates_wait").with_arguments(args))
            .await
            .unwrap();
        assert_eq!(r.meta.as_ref().unwrap()["class"], "still_pending", "{r:?}");
        s.cancel().await.unwrap();
    });
    let asked = asked.0.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    let asked = serde_json::to_value(&asked[0]).unwrap();
    assert_eq!(asked["mode"], "url", "{asked}");
    assert_eq!(
        asked["url"],
        format!("https://gates.example/runs/{}/gates/ship", run.id)
    );
    assert!(asked["message"]
        .as_str()
        .unwrap()
        .contains("decides nothing"));
    let (status, ..) = run.view().gate("ship");
    assert_eq!(
        status, "pending",
        "an answer to the elicitation decides nothing"
    );
}

/// What an outside host found, closed: a subagent session reads no file of the server's
/// machine and binds no input or const; no gate allows an agent (on the command line or over
/// MCP); a VM session without a run is told to pass `run`; `guide subagent --kind output`
/// has the subagent bind an output. Each refusal leaves the run as it was.
fn what_an_outside_host_found(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let secret = p.write("secret.txt", b"not for agents");
    let before = run.snapshot();
    let refused = run
        .cmd()
        .args([
            "gates",
            "create",
            "g",
            "--prompt",
            "p",
            "--allow",
            "alice,agent:vm",
        ])
        .assert()
        .code(2);
    assert!(
        stderr(&refused).contains("agents never decide"),
        "{}",
        stderr(&refused)
    );
    runtime().block_on(async {
        let s = session(
            &p,
            Some(&run),
            &["--role", "subagent", "--agent", "w"],
            false,
        )
        .await;
        for tool in s.list_all_tools().await.unwrap() {
            let props = tool.input_schema.get("properties").unwrap();
            assert!(props.get("file").is_none(), "{} takes a file", tool.name);
        }
        for (tool, args) in [
            (
                "bind",
                json!({"name": "x", "file": secret.to_str().unwrap()}),
            ),
            ("agent_remember", json!({"file": secret.to_str().unwrap()})),
            ("bind", json!({"name": "x", "value": "1", "kind": "const"})),
            ("bind", json!({"name": "x", "value": "1", "kind": "input"})),
        ] {
            let r = call(&s, tool, args.clone()).await;
            assert_eq!(class(&r), "usage", "{tool} {args}: {r:?}");
        }
        s.cancel().await.unwrap();

        let s = session(&p, None, &["--role", "vm"], false).await;
        let r = call(
            &s,
            "gates_create",
            json!({"run": run.id, "gate_id": "g", "prompt": "p", "allow": ["agent:vm"]}),
        )
        .await;
        assert_eq!(class(&r), "usage", "{r:?}");
        let r = call(&s, "get", json!({"name": "out"})).await;
        let error: Value = serde_json::from_str(&texts(&r)[0]).unwrap();
        assert!(
            error["error"].as_str().unwrap().contains("pass `run`"),
            "{error}"
        );
        let mut asked = GetPromptRequestParams::new("subagent");
        asked.arguments =
            Some(serde_json::from_value(json!({"name": "report", "kind": "output"})).unwrap());
        let prompt = format!("{:?}", s.get_prompt(asked).await.unwrap().messages);
        assert!(prompt.contains("--kind output"), "{prompt}");
        s.cancel().await.unwrap();
    });
    assert_eq!(
        run.snapshot(),
        before,
        "every refusal left the run as it was"
    );
    runtime().block_on(async {
        let s = session(
            &p,
            Some(&run),
            &["--role", "subagent", "--agent", "w"],
            false,
        )
        .await;
        let r = call(
            &s,
            "bind",
            json!({"name": "out", "value": "1", "kind": "output"}),
        )
        .await;
        assert_eq!(class(&r), "ok");
        s.cancel().await.unwrap();
    });
    let (_, kind, ..) = run.view().binding("out", None).expect("the output binding");
    assert_eq!(kind, "output");
}

/// A subagent session pinned to an execution record the run does not have does not start
/// (exit 3, one line naming it), and a prompt naming a run that does not exist is refused;
/// neither writes anything.
fn a_session_or_prompt_naming_what_does_not_exist_is_refused(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args([
            "exec-append",
            "--index",
            "1",
            "--text",
            "x",
            "--status",
            "executing",
        ])
        .assert()
        .success();
    let before = run.snapshot();
    let out = run
        .cmd()
        .args([
            "mcp",
            "--role",
            "subagent",
            "--agent",
            "w",
            "--execution-id",
            "99",
        ])
        .write_stdin("")
        .assert()
        .code(3);
    let said = stderr(&out);
    assert!(
        said.contains("execution not found: 99") && said.trim_end().lines().count() == 1,
        "{said}"
    );
    runtime().block_on(async {
        let s = session(&p, None, &["--role", "vm"], false).await;
        let mut asked = GetPromptRequestParams::new("vm");
        asked.arguments = Some(serde_json::from_value(json!({"run": "nope"})).unwrap());
        let e = s.get_prompt(asked).await.unwrap_err().to_string();
        assert!(e.contains("run:") && e.contains("nope"), "{e}");
        let mut asked = GetPromptRequestParams::new("vm");
        asked.arguments = Some(serde_json::from_value(json!({"run": run.id})).unwrap());
        assert!(!s.get_prompt(asked).await.unwrap().messages.is_empty());
        s.cancel().await.unwrap();
    });
    assert_eq!(run.snapshot(), before, "the refusals wrote nothing");
    // The record the run has: the session starts and binds in its scope.
    runtime().block_on(async {
        let s = session(
            &p,
            Some(&run),
            &["--role", "subagent", "--agent", "w", "--execution-id", "1"],
            false,
        )
        .await;
        let r = call(&s, "bind", json!({"name": "out", "value": "1"})).await;
        assert_eq!(class(&r), "ok", "{r:?}");
        s.cancel().await.unwrap();
    });
    run.view()
        .binding("out", Some(1))
        .expect("the binding in the record's scope");
}

/// `persist: "PATH"`: `--scope PATH` keeps the agent's memory in PATH/agents.db under the
/// project root, on either backend (scope column `custom`, as the spec's schema has it), for
/// `agent` on the shell and for a subagent session started with it, whose prompt says where.
/// A path that leaves the root, an absolute path and a mistyped word are refused (exit 2),
/// writing nothing; a read creates nothing.
fn persist_path_keeps_memory_under_the_project_root(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let before = run.snapshot();
    for bad in ["../outside", "/tmp/abs", "projct", ".prose/../../x", "./"] {
        let out = run
            .cmd()
            .args(["agent", "--scope", bad, "remember", "cap", "v"])
            .assert()
            .code(2);
        assert_eq!(stderr(&out).trim_end().lines().count(), 1, "{bad}");
    }
    run.cmd()
        .args(["agent", "--scope", ".prose/custom/cap/", "memory", "cap"])
        .assert()
        .code(3);
    assert!(
        !p.root().join(".prose/custom").exists(),
        "a read creates nothing"
    );
    assert!(!p.root().join("outside").exists());
    assert_eq!(run.snapshot(), before);
    let options = [
        "--role",
        "subagent",
        "--agent",
        "cap",
        "--scope",
        ".prose/custom/cap/",
    ];
    runtime().block_on(async {
        let s = session(&p, Some(&run), &options, false).await;
        let r = call(&s, "agent_remember", json!({"value": "north"})).await;
        assert_eq!(class(&r), "ok", "{r:?}");
        let prompt = s
            .get_prompt(GetPromptRequestParams::new("subagent"))
            .await
            .unwrap();
        let text = serde_json::to_value(&prompt.messages[0].content).unwrap()["text"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(text.contains("`.prose/custom/cap/agents.db`"), "{text}");
        s.cancel().await.unwrap();
    });
    assert!(p.root().join(".prose/custom/cap/agents.db").is_file());
    let memory = run
        .cmd()
        .args(["agent", "--scope", ".prose/custom/cap", "memory", "cap"])
        .assert()
        .success();
    assert_eq!(memory.get_output().stdout, b"north");
    let listed = run
        .cmd()
        .args(["--json", "agent", "--scope", "./.prose/custom/cap", "list"])
        .assert()
        .success();
    let listed: Value = serde_json::from_slice(&listed.get_output().stdout).unwrap();
    assert_eq!(listed[0]["scope"], "custom", "{listed}");
    // Not in the run, nor the project's own agents.
    assert_eq!(run.snapshot(), before, "the run is untouched");
    run.cmd()
        .args(["agent", "--scope", "project", "memory", "cap"])
        .assert()
        .code(3);
    // The guide names it for a shell subagent too.
    let guide = run
        .cmd()
        .args([
            "guide",
            "subagent",
            "--name",
            "x",
            "--agent",
            "cap",
            "--scope",
            ".prose/custom/cap/",
        ])
        .assert()
        .success();
    let guide = String::from_utf8_lossy(&guide.get_output().stdout).to_string();
    assert!(guide.contains("--scope .prose/custom/cap"), "{guide}");
}

/// What helper-41 found over MCP, in a subagent session held to a record inside a gate's
/// frame (the gate answers into `ans` there; the root binds `ans` too): the bindings resource
/// lists what that record sees, the outer `ans` left out, where it failed whole; and the
/// subagent prompt naming another execution is refused, where it was answered for the
/// session's own.
fn a_subagent_inside_an_unanswered_frame_lists_what_it_sees(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let frame = run.exec(1, "do blk", "executing", None);
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "p"])
        .args(["--response-schema", r#"{"type":"string"}"#])
        .args(["--response-binding", "ans", "--execution-id"])
        .arg(frame.to_string())
        .assert()
        .success();
    let inner = run.exec(2, "inner", "executing", Some(frame));
    run.bind("other", "v", None);
    run.bind("ans", "\"outer\"", None);
    let before = run.snapshot();
    let inner_id = inner.to_string();
    let options = [
        "--role",
        "subagent",
        "--agent",
        "bot",
        "--execution-id",
        &inner_id,
    ];
    runtime().block_on(async {
        let s = session(&p, Some(&run), &options, false).await;
        let read = s
            .read_resource(rmcp::model::ReadResourceRequestParams::new(format!(
                "prose://runs/{}/bindings",
                run.id
            )))
            .await
            .unwrap();
        let text = match &read.contents[0] {
            rmcp::model::ResourceContents::TextResourceContents { text, .. } => text.clone(),
            other => panic!("{other:?}"),
        };
        let v: Value = serde_json::from_str(&text).unwrap();
        let names: Vec<&str> = v["bindings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|b| b["name"].as_str())
            .collect();
        assert_eq!(names, ["other"], "{v}");
        let mut asked = GetPromptRequestParams::new("subagent");
        asked.arguments =
            Some(serde_json::from_value(json!({"execution_id": frame.to_string()})).unwrap());
        let e = s.get_prompt(asked).await.unwrap_err().to_string();
        assert!(
            e.contains("execution_id is this subagent session's own"),
            "{e}"
        );
        let mut asked = GetPromptRequestParams::new("subagent");
        asked.arguments = Some(serde_json::from_value(json!({"execution_id": inner_id})).unwrap());
        assert!(!s.get_prompt(asked).await.unwrap().messages.is_empty());
        s.cancel().await.unwrap();
    });
    assert_eq!(run.snapshot(), before, "reads wrote nothing");
}
