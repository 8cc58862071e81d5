//! `prose-state mcp` driven by the official MCP TypeScript SDK (`@modelcontextprotocol/sdk`,
//! pinned by tests/fixtures/ts/package-lock.json): tests/fixtures/ts/mcp_client.mjs runs one
//! group of checks at each protocol revision the SDK can negotiate with the server, each in
//! sessions of its own, and prints what it found; the failed expectations fail the test.

use crate::common::{self, on_both, pg, Backend, Project, Run, BIN};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The SDK's version, as package.json pins it.
const SDK_VERSION: &str = "1.32.2";

/// The revisions the SDK can negotiate with this server: its own (2025-11-25, which it always
/// asks for) and the older ones both it and rmcp know (the script asks for those by a transport
/// that rewrites `initialize`'s `protocolVersion`: the SDK has no option for it).
const REVISIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The server's interval between progress notifications in these tests (debug builds only).
const PROGRESS_MS: &str = "500";

/// Node and the SDK installed in target/ts-client (PROSE_STATE_TEST_NODE and
/// PROSE_STATE_TEST_TS_CLIENT override), as [`common::test_python`] finds the Python client:
/// anything missing, `test` is skipped, visibly, and under CI=true it fails. Returns node and
/// the script, copied next to the installed SDK (whose `node_modules` it imports from).
fn test_node(test: &str) -> Option<(PathBuf, PathBuf)> {
    let node = std::env::var_os("PROSE_STATE_TEST_NODE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("node"));
    let dir = std::env::var_os("PROSE_STATE_TEST_TS_CLIENT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/ts-client"));
    let mut missing = Vec::new();
    let runs = std::process::Command::new(&node)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !runs {
        missing.push("Node.js (`node`)".to_string());
    }
    let installed = std::fs::read(dir.join("node_modules/@modelcontextprotocol/sdk/package.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v["version"].as_str().map(str::to_string));
    match installed.as_deref() {
        Some(SDK_VERSION) => {}
        Some(other) => missing.push(format!(
            "@modelcontextprotocol/sdk {SDK_VERSION} in target/ts-client (found {other})"
        )),
        None => missing.push(format!(
            "@modelcontextprotocol/sdk {SDK_VERSION} in target/ts-client"
        )),
    }
    if missing.is_empty() {
        return Some((node, install_script(&dir)));
    }
    let why = format!(
        "{test} needs {} (bash .ci/run installs them)",
        missing.join(", ")
    );
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{why}, under CI"
    );
    common::skipped(&why);
    None
}

/// tests/fixtures/ts/mcp_client.mjs copied into `dir`, so that its imports resolve to the SDK
/// installed there (an ES module resolves packages from its own directory). Written under
/// another name and renamed: the tests running at once each see a whole file.
fn install_script(dir: &Path) -> PathBuf {
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ts/mcp_client.mjs");
    let script = dir.join("mcp_client.mjs");
    let unique = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let partial = dir.join(format!(".mcp_client.mjs.{}.{unique}", std::process::id()));
    std::fs::copy(&source, &partial).unwrap();
    std::fs::rename(&partial, &script).unwrap();
    script
}

/// A project on `backend` with one run, in which the gate `decided` was approved by alice, and
/// the project root `query` is called from: on PostgreSQL another machine's, as a role that
/// may only read (`query` refuses any other), kept alive with the project.
struct Setup {
    p: Project,
    run: Run,
    query: Option<Project>,
}

fn setup(backend: Backend) -> Option<Setup> {
    let p = Project::on(backend)?;
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "decided", "--prompt", "Go?"])
        .assert()
        .success();
    run.cmd()
        .args(["approve", "decided", "--as", "alice", "-y"])
        .assert()
        .success();
    let query = p.pg_url.as_deref().map(|url| {
        let q = p.elsewhere();
        q.write(
            ".prose/.env",
            format!("OPENPROSE_POSTGRES_URL={}\n", pg::as_reader(url)).as_bytes(),
        );
        q
    });
    Some(Setup { p, run, query })
}

/// Runs the script's `check` at every revision in the project root (HOME the project's, none
/// of the caller's PROSE_* settings), killed if it has not ended within two minutes; asserts
/// that no expectation failed, and returns what it printed.
fn run_check(s: &Setup, node: &Path, script: &Path, check: &str) -> Value {
    let mut c = std::process::Command::new(node);
    c.arg(script)
        .arg(BIN)
        .arg(match s.p.backend {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        })
        .arg(&s.run.id)
        .arg(check)
        .args(REVISIONS)
        .current_dir(s.p.root())
        .env("HOME", common::test_home(s.p.root()))
        .env("PROSE_STATE_TEST_PROGRESS_MS", PROGRESS_MS)
        .env(
            "QUERY_ROOT",
            s.query.as_ref().map_or(s.p.root(), |q| q.root()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for var in common::CLEARED_ENV {
        c.env_remove(var);
    }
    let mut child = c.spawn().unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let Ok(report) = serde_json::from_slice::<Value>(&out.stdout) else {
        panic!(
            "{check}: the client printed no report ({}):\n{stdout}\n{stderr}",
            out.status
        );
    };
    let mut failures = Vec::new();
    for revision in REVISIONS {
        let Some(r) = report["revisions"].get(revision) else {
            failures.push(format!("{revision}: not run"));
            continue;
        };
        for f in r["failures"].as_array().into_iter().flatten() {
            failures.push(format!("{revision}: {}", f.as_str().unwrap_or_default()));
        }
    }
    assert!(
        failures.is_empty() && out.status.success(),
        "{check} with the TypeScript SDK {SDK_VERSION}, {} failed expectation(s):\n{}\n\nreport:\n{stdout}\nstderr:\n{stderr}",
        failures.len(),
        failures.join("\n")
    );
    report
}

/// The test's project and client, or None (skipped) when either cannot be had.
fn prepare(backend: Backend, test: &str) -> Option<(Setup, PathBuf, PathBuf)> {
    let (node, script) = test_node(test)?;
    let s = setup(backend)?;
    Some((s, node, script))
}

on_both!(
    failing_calls_are_readable_results,
    successful_results_are_their_text,
    a_wait_longer_than_the_request_timeout_reports_progress,
    gates_wait_takes_whole_seconds,
    tasks_come_in_the_form_of_the_session_s_revision,
    sessions_start_without_an_agent,
    lists_and_prompts_fit_their_budgets,
);

/// A binding never bound, a stale `if_version`, a refused `query`, an unknown argument and
/// arguments of the wrong type: `client.callTool` resolves (the SDK throws nothing, as it
/// would for structured content that does not match the tool's output schema) to an
/// `isError` result whose text is `{"error", "exit_code", "class"}` naming what was wrong, its
/// class and exit code in `_meta`, with no structured content. Nothing refused was written.
fn failing_calls_are_readable_results(backend: Backend) {
    let Some((s, node, script)) = prepare(backend, "the TypeScript SDK error test") else {
        return;
    };
    run_check(&s, &node, &script, "errors");
    let view = s.run.view();
    for revision in REVISIONS {
        let name = format!("versioned_{}", revision.replace('-', ""));
        assert_eq!(
            view.binding(&name, None).and_then(|b| b.2).as_deref(),
            Some("two"),
            "{name}: a stale if_version wrote"
        );
        let never = format!("never_bound_{}", revision.replace('-', ""));
        assert!(view.binding(&never, None).is_none());
    }
}

/// Successful calls of most tools: the SDK validates each structured content against the
/// tool's output schema, and it is the JSON of the text; `query` gives the statement's columns
/// in SELECT order (`SELECT 3 AS c, 1 AS a, 2 AS b`: `columns` c, a, b), which a JSON client
/// cannot read off a row's keys.
fn successful_results_are_their_text(backend: Backend) {
    let Some((s, node, script)) = prepare(backend, "the TypeScript SDK result test") else {
        return;
    };
    run_check(&s, &node, &script, "results");
}

/// `gates_wait` for 6 s on a pending gate, with a progress token and a request timeout of
/// 2.5 s reset by each progress notification (the server sends one every
/// PROSE_STATE_TEST_PROGRESS_MS here): the call does not time out, at least two
/// notifications arrive, and it ends `still_pending` (exit 7): a result, not an error (the
/// pending gate as its structured content), with a text that says the wait ran out. The
/// default bound the tool states is under 60 s.
fn a_wait_longer_than_the_request_timeout_reports_progress(backend: Backend) {
    let Some((s, node, script)) = prepare(backend, "the TypeScript SDK progress test") else {
        return;
    };
    let report = run_check(&s, &node, &script, "progress");
    for revision in REVISIONS {
        let r = &report["revisions"][revision];
        assert!(r["progress"]["notifications"].as_u64().unwrap() >= 2, "{r}");
    }
    for revision in REVISIONS {
        let gate = format!("progress-{}", revision.replace('-', ""));
        assert_eq!(s.run.view().gate(&gate).0, "pending", "{gate}");
    }
}

/// `gates_wait`'s `timeout` as `"2"` and as `2` is two seconds: `still_pending` after about
/// 2 s, not a usage error.
fn gates_wait_takes_whole_seconds(backend: Backend) {
    let Some((s, node, script)) = prepare(backend, "the TypeScript SDK duration test") else {
        return;
    };
    run_check(&s, &node, &script, "durations");
}

/// A client declaring the SDK's tasks capability (and, apart, the 2026-07-28 tasks extension
/// too) on a session before 2026-07-28 never meets the 2026-07-28 task shape, and a plain
/// `gates_wait` resolves to an ordinary CallToolResult. On 2025-11-25 the revision's own tasks
/// are served: `capabilities.tasks`, `gates_wait` alone with `execution.taskSupport`, a
/// task-augmented call through the SDK's `callToolStream`, `tasks/get|result|list|cancel`
/// (a person deciding on the command line meanwhile), the refusals, and the page offered by
/// URL elicitation related to the task; before it, none of these.
fn tasks_come_in_the_form_of_the_session_s_revision(backend: Backend) {
    let Some((s, node, script)) = prepare(backend, "the TypeScript SDK tasks test") else {
        return;
    };
    run_check(&s, &node, &script, "tasks");
}

/// `mcp --role vm` and `mcp --role subagent` without `--agent` start; the subagent session
/// then has no agent tools.
fn sessions_start_without_an_agent(backend: Backend) {
    let Some((s, node, script)) = prepare(backend, "the TypeScript SDK no-agent test") else {
        return;
    };
    run_check(&s, &node, &script, "no_agent");
}

/// What a session costs a client's context, measured on what the SDK hands over (JSON):
/// tools/list at most 24 KiB in a VM session and 10 KiB in a subagent session, prompts/get
/// `vm` at most 12 KiB.
fn lists_and_prompts_fit_their_budgets(backend: Backend) {
    let Some((s, node, script)) = prepare(backend, "the TypeScript SDK budget test") else {
        return;
    };
    run_check(&s, &node, &script, "budgets");
}
