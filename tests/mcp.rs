//! `prose-state mcp`: driven by MCP clients no one here wrote (the reference Python SDK, and
//! rmcp's own client), then checked in the database itself.

use crate::common::{self, on_both, Backend, Project, Run, BIN};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::{json, Value};
use std::path::PathBuf;

/// The reference Python SDK spawns the server, lists its tools and runs a small program
/// through them (tests/fixtures/mcp_client.py: every call's class, the refusals); then the
/// database shows exactly what the program did, and who did it.
fn reference_client_drives_a_program(backend: Backend) {
    let Some(p) = Project::on(backend) else {
        return;
    };
    let Some(python) = common::test_python("the MCP reference-client test", common::Needs::Mcp)
    else {
        return;
    };
    let out = common::mcp_client(&p, &python, "mcp_client.py")
        .arg(BIN)
        .arg(match backend {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        })
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "client failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let run = p.run(summary["run_id"].as_str().unwrap());
    let eid = summary["execution_id"].as_i64().unwrap();
    let view = run.view();

    let (at, _, value, source, _) = view.binding("a", Some(eid)).unwrap();
    assert_eq!(at, Some(eid));
    assert_eq!(
        value.as_deref(),
        Some("line\u{202e}evil\u{200b}\x1b[31m\r\nend")
    );
    assert_eq!(source.as_deref(), Some("let a = session: writer"));
    let list = view.binding("list", None).unwrap().2.unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&list).unwrap(),
        json!([0, 1, 2])
    );
    assert_eq!(view.binding("c", None).unwrap().2.as_deref(), Some("1"));
    assert_eq!(
        view.binding("note", None).unwrap().2.as_deref(),
        Some("from a file")
    );
    assert_eq!(view.binding("dash", None).unwrap().2.as_deref(), Some("-"));
    assert!(view.binding("x", None).is_none());
    assert!(view.binding("late", None).is_none());
    assert_eq!(
        common::count_rows(&p, &run, "execution", "idempotency_key = 'a-done'"),
        1
    );
    assert_eq!(view.segments("writer"), vec![1]);
    // The gate: decided by the person, viewed by the agent, and by no one else.
    let (status, by, _, _) = view.gate("ship");
    assert_eq!(
        (status.as_str(), by.as_deref()),
        ("approved", Some("alice"))
    );
    let principals: Vec<Option<String>> = view.events("ship").into_iter().map(|e| e.1).collect();
    assert!(principals.contains(&Some("agent:writer".to_string())));
    for who in principals.iter().flatten() {
        assert!(
            ["alice", "agent:writer", "system"].contains(&who.as_str()),
            "{who}"
        );
    }
    let (status, by, _, _) = view.gate("self");
    assert_eq!((status.as_str(), by), ("pending", None));
    let (status, _, error) = view.run_row();
    assert_eq!(
        (status.as_str(), error.as_deref()),
        ("failed", Some("stopped by test"))
    );
}

/// `prose-state mcp --agent AGENT` for the run, as a client spawns it: in the project root,
/// with none of the caller's PROSE_* settings.
fn server(p: &Project, agent: &str, run: &Run) -> TokioChildProcess {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.args(["--run", &run.id, "mcp", "--role", "vm", "--agent", agent])
        .current_dir(p.root())
        .env("HOME", common::test_home(p.root()))
        .stderr(std::process::Stdio::null());
    for var in common::CLEARED_ENV {
        cmd.env_remove(var);
    }
    TokioChildProcess::new(cmd).unwrap()
}

/// A client of rmcp's own, on a runtime of the test's.
async fn connect(p: &Project, agent: &str, run: &Run) -> RunningService<RoleClient, ()> {
    ().serve(server(p, agent, run)).await.unwrap()
}

async fn call(client: &RunningService<RoleClient, ()>, tool: &str, args: Value) -> CallToolResult {
    let Value::Object(args) = args else {
        panic!("arguments are an object")
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args))
        .await
        .unwrap()
}

fn class(r: &CallToolResult) -> &str {
    r.meta.as_ref().unwrap()["class"].as_str().unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

/// Many servers, one per subagent, against one run: every write of every session lands
/// (each its own binding, and all of them on one shared list), as with the command line.
fn many_servers_lose_nothing(backend: Backend) {
    let Some(p) = Project::on(backend) else {
        return;
    };
    let run = p.init();
    const SESSIONS: usize = 8;
    const WRITES: usize = 25;
    runtime().block_on(async {
        let mut tasks = Vec::new();
        for s in 0..SESSIONS {
            let client = connect(&p, &format!("w{s}"), &run).await;
            tasks.push(tokio::spawn(async move {
                for i in 0..WRITES {
                    let own = call(
                        &client,
                        "bind",
                        json!({"name": format!("v{s}_{i}"), "value": i.to_string()}),
                    )
                    .await;
                    assert_eq!(class(&own), "ok", "{own:?}");
                    // Busy is the one class a retry may meet (nothing was written).
                    loop {
                        let shared = call(
                            &client,
                            "bind",
                            json!({"name": "all", "append": format!("\"{s}:{i}\"")}),
                        )
                        .await;
                        match class(&shared) {
                            "ok" => break,
                            "busy" => continue,
                            other => panic!("append: {other}: {shared:?}"),
                        }
                    }
                }
                client.cancel().await.unwrap();
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    assert_eq!(
        common::count_rows(&p, &run, "bindings", "name LIKE 'v%'"),
        (SESSIONS * WRITES) as i64
    );
    let all = run.view().binding("all", None).unwrap().2.unwrap();
    let mut all: Vec<String> = serde_json::from_str(&all).unwrap();
    all.sort();
    let mut want: Vec<String> = (0..SESSIONS)
        .flat_map(|s| (0..WRITES).map(move |i| format!("{s}:{i}")))
        .collect();
    want.sort();
    assert_eq!(all, want);
}

/// The server acts as its agent and nothing else: the tools never take a principal, a
/// principal smuggled in is refused before anything runs, an agent cannot be named outside
/// the grammar, and approve/reject are not tools. The database is unchanged by each refusal.
fn the_server_is_its_agent(backend: Backend) {
    let Some(p) = Project::on(backend) else {
        return;
    };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "Go?"])
        .assert()
        .success();
    let before = match &p.pg_url {
        Some(url) => common::snapshot_pg(url, &run.id),
        None => common::snapshot_db(&run.db),
    };
    runtime().block_on(async {
        let client = connect(&p, "Ｂot", &run).await;
        let tools = client.list_all_tools().await.unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert!(
            !names
                .iter()
                .any(|n| n.contains("approve") || n.contains("reject")),
            "{names:?}"
        );
        for tool in ["approve", "reject"] {
            let r = client
                .call_tool(CallToolRequestParams::new(tool).with_arguments(
                    serde_json::Map::from_iter([("gate".to_string(), json!("g"))]),
                ))
                .await;
            assert!(r.is_err(), "{tool} was served");
        }
        for args in [
            json!({"gate": "g", "as": "alice"}),
            json!({"gate": "g", "principal": "alice"}),
            json!({"gate": "g", "root": "/"}),
            json!({"gate": "g", "json": false}),
        ] {
            let r = call(&client, "gates_show", args.clone()).await;
            assert_eq!(class(&r), "usage", "{args}: {r:?}");
            assert_eq!(r.is_error, Some(true));
        }
        client.cancel().await.unwrap();
    });
    let after = match &p.pg_url {
        Some(url) => common::snapshot_pg(url, &run.id),
        None => common::snapshot_db(&run.db),
    };
    assert_eq!(before, after, "a refused call changed the database");
    // A view is logged as the server's agent, its name normalised as every principal is.
    runtime().block_on(async {
        let client = connect(&p, "Ｂot", &run).await;
        let r = call(&client, "gates_show", json!({"gate": "g"})).await;
        assert_eq!(class(&r), "ok", "{r:?}");
        client.cancel().await.unwrap();
    });
    let viewers: Vec<Option<String>> = run
        .view()
        .events("g")
        .into_iter()
        .filter(|e| e.0 == "viewed")
        .map(|e| e.1)
        .collect();
    assert_eq!(viewers, vec![Some("agent:bot".to_string())]);
    // An agent name outside the grammar never starts a server.
    for bad in ["", "ali\u{0441}e", "a;b", "../x", "agent:"] {
        let out = run
            .cmd()
            .args(["mcp", "--role", "vm", "--agent", bad])
            .write_stdin("")
            .assert();
        assert_eq!(common::code(&out), 2, "{bad:?}");
    }
}

on_both!(
    reference_client_drives_a_program,
    many_servers_lose_nothing,
    the_server_is_its_agent
);

/// The server keeps each run's connection between calls (SQLite). A kept connection is never
/// the wrong one: after `query` (which makes its connection read-only) a write still lands,
/// and a run removed and made again under the same id is written in the new file, not in
/// the removed one a kept connection still points to.
#[test]
fn kept_connections_follow_the_file() {
    let p = Project::new();
    p.cmd().args(["init", "--run-id", "r1"]).assert().success();
    let run = p.run("r1");
    let count = |name: &str| common::count_rows(&p, &run, "bindings", &format!("name = '{name}'"));
    runtime().block_on(async {
        let client = connect(&p, "w", &run).await;
        assert_eq!(
            class(&call(&client, "bind", json!({"name": "a", "value": "1"})).await),
            "ok"
        );
        let q = call(
            &client,
            "query",
            json!({"sql": "SELECT COUNT(*) AS n FROM bindings"}),
        )
        .await;
        assert_eq!(class(&q), "ok", "{q:?}");
        let b = call(&client, "bind", json!({"name": "b", "value": "2"})).await;
        assert_eq!(class(&b), "ok", "a write after a query: {b:?}");
        assert_eq!((count("a"), count("b")), (1, 1));

        std::fs::remove_dir_all(&run.dir).unwrap();
        p.cmd().args(["init", "--run-id", "r1"]).assert().success();
        let c = call(&client, "bind", json!({"name": "c", "value": "3"})).await;
        assert_eq!(class(&c), "ok", "{c:?}");
        let got = call(&client, "get", json!({"name": "a"})).await;
        assert_eq!(
            class(&got),
            "not_found",
            "read from the removed file: {got:?}"
        );
        client.cancel().await.unwrap();
    });
    assert_eq!((count("a"), count("b"), count("c")), (0, 0, 1));
}

/// A gate wait in flight does not hold up the session's other calls: they are answered while
/// it still waits.
fn a_wait_does_not_hold_up_other_calls(backend: Backend) {
    let Some(p) = Project::on(backend) else {
        return;
    };
    let run = p.init();
    run.cmd().args(["bind", "x", "1"]).assert().success();
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "Go?"])
        .assert()
        .success();
    runtime().block_on(async {
        let client = std::sync::Arc::new(connect(&p, "w", &run).await);
        let waiter = {
            let client = std::sync::Arc::clone(&client);
            tokio::spawn(async move {
                call(
                    &client,
                    "gates_wait",
                    json!({"gate": "g", "timeout": "20s"}),
                )
                .await
            })
        };
        // The wait is sent first; the gets after it are answered while it waits (it would
        // end only at its 20 s limit, or when the gate is decided below).
        tokio::task::yield_now().await;
        for _ in 0..5 {
            let got = call(&client, "get", json!({"name": "x"})).await;
            assert_eq!(class(&got), "ok");
        }
        assert!(
            !waiter.is_finished(),
            "the wait ended before the gets were answered"
        );
        p.cmd()
            .args(["--run", &run.id, "approve", "g", "--as", "alice", "-y"])
            .assert()
            .success();
        let waited = waiter.await.unwrap();
        assert_eq!(class(&waited), "ok", "{waited:?}");
    });
}

on_both!(
    a_wait_does_not_hold_up_other_calls,
    gates_wait_takes_a_number_of_seconds,
    gates_wait_waits_on_several_gates,
    versions_and_instances_through_the_tools
);

/// `gates_wait`'s timeout as a client is likely to send it, a number (`"timeout": 30`), is
/// that many seconds; a number that is not a whole count of seconds, or past the call's
/// limit, is refused with one line naming the forms taken, and nothing is written.
fn gates_wait_takes_a_number_of_seconds(backend: Backend) {
    let Some(p) = Project::on(backend) else {
        return;
    };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "Go?"])
        .assert()
        .success();
    run.cmd()
        .args(["approve", "g", "--as", "alice", "-y"])
        .assert()
        .success();
    let snapshot = || match &p.pg_url {
        Some(url) => common::snapshot_pg(url, &run.id),
        None => common::snapshot_db(&run.db),
    };
    let before = snapshot();
    runtime().block_on(async {
        let client = connect(&p, "w", &run).await;
        for bad in [json!(1.5), json!(-3), json!(601), json!(1e30)] {
            let r = call(&client, "gates_wait", json!({"gate": "g", "timeout": bad})).await;
            assert_eq!(class(&r), "usage", "{bad}: {r:?}");
            let text = format!("{:?}", r.content);
            assert!(
                text.contains("whole number of seconds") || text.contains("at most"),
                "{bad}: {text}"
            );
        }
        client.cancel().await.unwrap();
    });
    assert_eq!(snapshot(), before, "a refused wait changed the database");
    runtime().block_on(async {
        let client = connect(&p, "w", &run).await;
        for good in [json!(30), json!("30s"), json!(600)] {
            let r = call(&client, "gates_wait", json!({"gate": "g", "timeout": good})).await;
            assert_eq!(class(&r), "ok", "{good}: {r:?}");
        }
        client.cancel().await.unwrap();
    });
}

/// `prose-state mcp` becomes the server binary installed next to it; without it, one line and
/// exit 1. The server binary serves `mcp` and nothing else.
#[test]
fn the_server_binary_is_found_next_to_the_command() {
    let p = Project::new();
    let alone = p.root().join("alone");
    std::fs::create_dir(&alone).unwrap();
    std::fs::copy(BIN, alone.join("prose-state")).unwrap();
    use assert_cmd::assert::OutputAssertExt;
    // A copy just written can be "busy" for a moment: another test thread's child may be
    // between its fork and its exec with the copy's descriptor (ETXTBSY). Retried, bounded.
    let mut tries = 0;
    let out = loop {
        let out = assert_cmd::Command::new(alone.join("prose-state"))
            .current_dir(p.root())
            .args(["mcp", "--role", "vm", "--agent", "a"])
            .write_stdin("")
            .output();
        match out {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => break other.unwrap().assert(),
        }
    };
    assert_eq!(common::code(&out), 1);
    let err = common::stderr(&out);
    assert!(
        err.contains("prose-state-mcp") && err.lines().count() == 1,
        "{err}"
    );

    let out = assert_cmd::Command::new(env!("CARGO_BIN_EXE_prose-state-mcp"))
        .current_dir(p.root())
        .args(["get", "x"])
        .assert();
    assert_eq!(common::code(&out), 2);
    assert!(!p.root().join(".prose").exists());
}

/// The server keeps its PostgreSQL connection between calls. A kept connection whose session
/// the server has ended (a restart, an administrator's pg_terminate_backend) is replaced: the
/// next call is answered as if nothing had been kept, and its write lands.
#[test]
fn a_kept_server_connection_that_died_is_replaced() {
    let Some(p) = Project::on(Backend::Postgres) else {
        return;
    };
    let run = p.init();
    let url = p.pg_url.clone().unwrap();
    runtime().block_on(async {
        let client = connect(&p, "w", &run).await;
        assert_eq!(
            class(&call(&client, "bind", json!({"name": "a", "value": "1"})).await),
            "ok"
        );
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            let ended: i64 = admin
                .query_one(
                    "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                     WHERE datname = current_database() AND pid <> pg_backend_pid()) t",
                    &[],
                )
                .unwrap()
                .get(0);
            assert!(ended >= 1, "no kept session to end");
        })
        .await
        .unwrap();
        let b = call(&client, "bind", json!({"name": "b", "value": "2"})).await;
        assert_eq!(class(&b), "ok", "{b:?}");
        client.cancel().await.unwrap();
    });
    assert_eq!(
        common::count_rows(&p, &run, "bindings", "name IN ('a', 'b')"),
        2
    );
}

/// SIGKILL the server at random moments while it binds, over and over, against one run:
/// every bind it acknowledged is there, whole, with its value; the database stays intact;
/// and a new server goes on where the killed one stopped.
fn servers_killed_mid_write_lose_nothing_acknowledged(backend: Backend) {
    use rand::Rng;
    let Some(p) = Project::on(backend) else {
        return;
    };
    let run = p.init();
    let mut rng = rand::rng();
    let mut acknowledged: Vec<(String, String)> = Vec::new();
    let rt = runtime();
    for round in 0..60 {
        let delay = std::time::Duration::from_millis(rng.random_range(0..40));
        let acked = rt.block_on(async {
            use std::sync::atomic::{AtomicUsize, Ordering};
            let count = std::sync::Arc::new(AtomicUsize::new(0));
            let transport = server(&p, "k", &run);
            let pid = transport.id().unwrap() as i32;
            let client = ().serve(transport).await.unwrap();
            let counted = std::sync::Arc::clone(&count);
            let writer = tokio::spawn(async move {
                let mut acked = Vec::new();
                for i in 0.. {
                    let name = format!("r{round}_{i}");
                    // Big enough, now and then, to go to an attachment.
                    let value = if i % 5 == 4 {
                        format!("{round}:{i}:").repeat(20_000)
                    } else {
                        format!("{round}:{i}")
                    };
                    let args = json!({"name": name, "value": value});
                    let Value::Object(args) = args else {
                        unreachable!()
                    };
                    match client
                        .call_tool(CallToolRequestParams::new("bind").with_arguments(args))
                        .await
                    {
                        Ok(r) if r.is_error != Some(true) => {
                            acked.push((name, value));
                            counted.fetch_add(1, Ordering::SeqCst);
                        }
                        _ => break,
                    }
                }
                acked
            });
            // The kill lands at a random moment after the server's first answer, however
            // slowly it started.
            while count.load(Ordering::SeqCst) == 0 && !writer.is_finished() {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            tokio::time::sleep(delay).await;
            // SAFETY: kill(2) on the child's pid.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            writer.await.unwrap()
        });
        acknowledged.extend(acked);
    }
    assert!(
        acknowledged.len() >= 60,
        "too few binds acknowledged: {}",
        acknowledged.len()
    );
    // A killed server's last COMMIT may still be on its way through PostgreSQL.
    if let Some(url) = &p.pg_url {
        common::pg::await_no_other_sessions(url);
    }
    if backend == Backend::Sqlite {
        let ok: String = run
            .conn()
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok");
    }
    for (name, value) in &acknowledged {
        assert_eq!(
            String::from_utf8(run.get(name, None)).unwrap(),
            *value,
            "{name}"
        );
    }
    // A new server goes on.
    runtime().block_on(async {
        let client = connect(&p, "k", &run).await;
        assert_eq!(
            class(&call(&client, "bind", json!({"name": "after", "value": "1"})).await),
            "ok"
        );
        client.cancel().await.unwrap();
    });
    // A writer killed while staging an attachment leaves a temporary file, which doctor
    // reports and --fix removes; after that, nothing is wrong.
    let _fixed = p.cmd().args(["--run", &run.id, "doctor", "--fix"]).assert();
    let out = p.cmd().args(["--run", &run.id, "doctor"]).assert();
    assert_eq!(
        common::code(&out),
        0,
        "{}",
        String::from_utf8_lossy(&out.get_output().stdout)
    );
}

on_both!(servers_killed_mid_write_lose_nothing_acknowledged);

/// A request over the MCP server's limit (16,000,000 bytes a line) is answered with a
/// JSON-RPC error naming the limit, under its own id, never dropped unanswered; the session
/// goes on serving, and nothing of the request is written. Driven by a raw client on the
/// server's stdio, one line at a time.
fn a_request_over_the_limit_is_answered_with_an_error(backend: Backend) {
    use std::io::{BufRead, Write};
    let Some(p) = Project::on(backend) else {
        return;
    };
    let run = p.init();
    run.bind("keep", "me", None);
    let before = run.snapshot();
    let mut server = std::process::Command::new(BIN);
    server
        .args(["--run", &run.id, "mcp", "--role", "vm", "--agent", "w"])
        .current_dir(p.root())
        .env("HOME", common::test_home(p.root()))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    for var in common::CLEARED_ENV {
        server.env_remove(var);
    }
    let mut server = server.spawn().unwrap();
    let mut stdin = server.stdin.take().unwrap();
    let stdout = server.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(serde_json::from_str(&line).unwrap()).is_err() {
                break;
            }
        }
    });
    // A bound on a hang only, far above any answer's time: a dropped request would wait for
    // ever.
    let answer = |id: i64| loop {
        let v = rx
            .recv_timeout(std::time::Duration::from_secs(300))
            .expect("the server answered");
        if v["id"] == json!(id) {
            return v;
        }
    };
    let mut send = |v: Value| {
        let mut line = serde_json::to_vec(&v).unwrap();
        line.push(b'\n');
        stdin.write_all(&line).unwrap();
        stdin.flush().unwrap();
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}}),
    );
    assert!(answer(1)["result"].is_object());
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    // 17 MB: over the limit and over rmcp's own 16 MiB cap, where it used to vanish.
    for (id, size) in [(2, 17_000_000), (3, 16_000_000)] {
        send(
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "bind", "arguments": {"name": "big", "value": "x".repeat(size)}}}),
        );
        let err = answer(id);
        assert_eq!(err["error"]["code"], json!(-32600), "{err}");
        let message = err["error"]["message"].as_str().unwrap();
        assert!(message.contains("16000000 bytes"), "{message}");
        assert_eq!(err["error"]["data"]["limit"], json!(16_000_000), "{err}");
    }
    // The session goes on.
    send(
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
        "name": "get", "arguments": {"name": "keep"}}}),
    );
    let got = answer(4);
    assert_eq!(got["result"]["isError"], json!(false), "{got}");
    drop(stdin);
    assert!(server.wait().unwrap().success());
    assert_eq!(run.snapshot(), before, "an over-long request wrote");
}

on_both!(a_request_over_the_limit_is_answered_with_an_error);

/// Finding 16d: a call's `run` is a run id of this project (or its server), never a path:
/// another project's run directory or state.db, a relative path, `..`, hostile characters are
/// each "not found", with a message that names no path and says nothing of what exists; the
/// other project's run is unchanged. The server's own run answers as ever.
fn a_calls_run_is_a_run_id_never_a_path(backend: Backend) {
    let Some(p) = Project::on(backend) else {
        return;
    };
    let run = p.init();
    run.bind("v", "mine", None);
    let other = Project::new();
    let theirs = other.init();
    theirs.bind("v", "theirs", None);
    let before = common::snapshot_db(&theirs.db);
    let abs = theirs.dir.display().to_string();
    let db = theirs.db.display().to_string();
    let rel = format!("../{}", theirs.dir.strip_prefix("/").unwrap().display());
    runtime().block_on(async {
        let client = connect(&p, "bot", &run).await;
        for bad in [
            abs.as_str(),
            db.as_str(),
            rel.as_str(),
            "..",
            ".prose/runs",
            &format!(".prose/runs/{}", run.id),
            "x\u{202e}y",
            "",
        ] {
            for (tool, args) in [
                ("get", json!({"run": bad, "name": "v"})),
                ("bind", json!({"run": bad, "name": "w", "value": "x"})),
            ] {
                let r = call(&client, tool, args).await;
                assert_eq!(r.is_error, Some(true), "{tool} {bad:?}: {r:?}");
                let text = format!("{:?}", r.content);
                assert!(
                    matches!(class(&r), "not_found" | "usage"),
                    "{tool} {bad:?}: {r:?}"
                );
                assert!(!text.contains("theirs"), "{text}");
                assert!(
                    !text.contains(other.root().to_str().unwrap())
                        || bad.contains(other.root().to_str().unwrap()),
                    "{text}"
                );
            }
        }
        let r = call(&client, "get", json!({"run": run.id, "name": "v"})).await;
        assert_eq!(class(&r), "ok", "{r:?}");
        client.cancel().await.unwrap();
    });
    assert_eq!(common::snapshot_db(&theirs.db), before);
}

on_both!(a_calls_run_is_a_run_id_never_a_path);

/// `prose-state mcp` with its role and other options (`--role subagent --execution-id 1`),
/// for the run, as a client spawns it.
async fn connect_as(p: &Project, options: &[&str], run: &Run) -> RunningService<RoleClient, ()> {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.args(["--run", &run.id, "mcp"])
        .args(options)
        .current_dir(p.root())
        .env("HOME", common::test_home(p.root()))
        .stderr(std::process::Stdio::null());
    for var in common::CLEARED_ENV {
        cmd.env_remove(var);
    }
    ().serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap()
}

/// Issue 28 item 4: a session's role is the operator's. Without `--role` no server starts:
/// one line naming the two roles, exit 2; a VM session takes no `--execution-id`.
#[test]
fn mcp_without_a_role_refuses_to_start() {
    let p = Project::new();
    let run = p.init();
    for args in [
        vec!["mcp", "--agent", "bot"],
        vec![
            "mcp",
            "--role",
            "vm",
            "--agent",
            "bot",
            "--execution-id",
            "1",
        ],
    ] {
        let out = run.cmd().args(&args).write_stdin("").assert();
        assert_eq!(common::code(&out), 2, "{args:?}");
        let err = common::stderr(&out);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.contains("--role vm") || err.contains("(--role vm)"),
            "{err}"
        );
        if args.len() == 3 {
            assert!(err.contains("--role subagent"), "{err}");
        }
    }
}

/// A subagent session has only a subagent's tools: the VM's are not listed, and calling one
/// is an error of the protocol (no such tool); it cannot name another run, execution or agent.
/// The database is unchanged by every refusal. What it may do lands in its scope, as its agent.
fn a_subagent_session_has_only_its_tools(backend: Backend) {
    let Some(p) = Project::on(backend) else {
        return;
    };
    let run = p.init();
    let out = run
        .cmd()
        .args([
            "--json",
            "exec-append",
            "--index",
            "1",
            "--text",
            "let a = session: writer",
        ])
        .args(["--status", "executing"])
        .assert()
        .success();
    let eid = serde_json::from_slice::<Value>(&out.get_output().stdout).unwrap()["id"]
        .as_i64()
        .unwrap();
    run.bind("seen", "root value", None);
    let before = run.snapshot();
    let options = [
        "--role",
        "subagent",
        "--agent",
        "writer",
        "--execution-id",
        &eid.to_string(),
    ];
    let options: Vec<&str> = options.to_vec();
    runtime().block_on(async {
        let client = connect_as(&p, &options, &run).await;
        let tools = client.list_all_tools().await.unwrap();
        let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "agent_memory",
                "agent_remember",
                "agent_segment",
                "agents_list",
                "bind",
                "get",
                "history",
                "log_since",
                "query"
            ]
        );
        for t in &tools {
            let props = t
                .input_schema
                .get("properties")
                .unwrap()
                .as_object()
                .unwrap();
            assert!(
                !props.contains_key("run"),
                "{}: a pinned run is offered",
                t.name
            );
            if ["bind", "get"].contains(&t.name.as_ref()) {
                assert!(!props.contains_key("execution_id"), "{}", t.name);
            }
            if t.name.starts_with("agent_") {
                assert!(
                    !props.contains_key("name") && !props.contains_key("home"),
                    "{}",
                    t.name
                );
            }
        }
        for (tool, args) in [
            ("finish", json!({"status": "completed"})),
            ("init", json!({})),
            (
                "exec_append",
                json!({"index": 2, "text": "x", "status": "completed"}),
            ),
            ("gates_create", json!({"gate_id": "g", "prompt": "Go?"})),
            ("gates_show", json!({"gate": "g"})),
            ("resume", json!({})),
        ] {
            let Value::Object(args) = args else {
                unreachable!()
            };
            let r = client
                .call_tool(CallToolRequestParams::new(tool).with_arguments(args))
                .await;
            let e = r.expect_err(tool);
            assert!(format!("{e}").contains("no such tool"), "{tool}: {e}");
        }
        for args in [
            json!({"name": "x", "value": "1", "run": run.id}),
            json!({"name": "x", "value": "1", "execution_id": eid}),
        ] {
            let r = call(&client, "bind", args.clone()).await;
            assert_eq!(class(&r), "usage", "{args}: {r:?}");
        }
        let r = call(
            &client,
            "agent_remember",
            json!({"name": "other", "value": "m"}),
        )
        .await;
        assert_eq!(class(&r), "usage", "{r:?}");
        client.cancel().await.unwrap();
    });
    assert_eq!(
        run.snapshot(),
        before,
        "a refused call changed the database"
    );
    runtime().block_on(async {
        let client = connect_as(&p, &options, &run).await;
        let r = call(&client, "bind", json!({"name": "out", "value": "mine"})).await;
        assert_eq!(class(&r), "ok", "{r:?}");
        // Read from its execution's scope, walking up to the root.
        let r = call(&client, "get", json!({"name": "seen"})).await;
        assert_eq!(
            r.structured_content.as_ref().unwrap()["value"],
            json!("root value")
        );
        let r = call(&client, "agent_remember", json!({"value": "remembered"})).await;
        assert_eq!(class(&r), "ok", "{r:?}");
        client.cancel().await.unwrap();
    });
    let (at, _, value, _, _) = run.view().binding("out", Some(eid)).unwrap();
    assert_eq!((at, value.as_deref()), (Some(eid), Some("mine")));
    assert!(
        run.view().binding("out", None).is_none(),
        "bound in the root scope"
    );
    let mem = run
        .cmd()
        .args(["--json", "agent", "memory", "writer"])
        .assert()
        .success();
    let mem: Value = serde_json::from_slice(&mem.get_output().stdout).unwrap();
    assert_eq!(mem["memory"], json!("remembered"));
}

/// Item 7: every answer a model reads through MCP has a bound and a cursor, and says when it
/// was cut; following the cursors gives everything, once. And the descriptions say nothing
/// of the command line that is false through MCP.
fn answers_are_bounded_with_a_cursor(backend: Backend) {
    let Some(p) = Project::on(backend) else {
        return;
    };
    let run = p.init();
    run.cmd()
        .args(["agent", "remember", "bot", &"m".repeat(40_000)])
        .assert()
        .success();
    runtime().block_on(async {
        let client = connect(&p, "bot", &run).await;
        for t in client.list_all_tools().await.unwrap() {
            let text = format!("{} {}", t.description.as_deref().unwrap_or(""), Value::Object((*t.input_schema).clone()));
            for lie in ["stdin", "comma-separated", "--follow", "--json", "--offset"] {
                assert!(!text.contains(lie), "{}: {lie}: {text}", t.name);
            }
            assert!(t.output_schema.is_some(), "{}", t.name);
            // No answer is unbounded on request (`resume --all` is the command line's);
            // `gates_wait`'s `all` waits on every gate it names, a list the caller bounds.
            if t.name != "gates_wait" {
                assert!(!t.input_schema["properties"].as_object().unwrap().contains_key("all"), "{}", t.name);
            }
        }
        for i in 0..150 {
            let r = call(&client, "exec_append", json!({"index": i, "text": format!("s{i}"), "status": "completed"})).await;
            assert_eq!(class(&r), "ok", "{r:?}");
        }
        // The log: 100 events a page by default, then the rest from next_since.
        let mut since = 0;
        let mut seen = Vec::new();
        let mut cut = Vec::new();
        loop {
            let r = call(&client, "log_since", json!({"since": since})).await;
            let page = r.structured_content.unwrap();
            let events = page["events"].as_array().unwrap();
            assert!(events.len() <= 100);
            seen.extend(events.iter().map(|e| e["id"].as_i64().unwrap()));
            cut.push(page["truncated"].as_bool().unwrap());
            since = page["next_since"].as_i64().unwrap();
            if !page["truncated"].as_bool().unwrap() {
                break;
            }
        }
        assert_eq!(cut, [true, false]);
        assert_eq!(seen, (1..=150).collect::<Vec<i64>>());
        // Query rows: 50 a page by default, by cursor (the test's PostgreSQL role is one
        // `query` refuses to run as).
        if backend == Backend::Sqlite {
        let mut cursor = json!(0);
        let mut rows = 0;
        let mut pages = 0;
        while !cursor.is_null() {
            let r = call(&client, "query", json!({"sql": "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 150) SELECT n FROM c", "cursor": cursor})).await;
            assert_eq!(class(&r), "ok", "{r:?}");
            let page = r.structured_content.unwrap();
            rows += page["rows"].as_array().unwrap().len();
            assert_eq!(page["total"], json!(150));
            cursor = page["next_cursor"].clone();
            pages += 1;
        }
        assert_eq!((rows, pages), (150, 3));
        let r = call(&client, "query", json!({"sql": "SELECT 1", "limit": 501})).await;
        assert_eq!(class(&r), "usage", "{r:?}");
        }
        // An agent's memory: 16384 bytes a page by default.
        let r = call(&client, "agent_memory", json!({})).await;
        let m = r.structured_content.unwrap();
        assert_eq!(
            (m["memory"].as_str().unwrap().len(), m["total_bytes"].clone(), m["next_offset"].clone(), m["truncated"].clone()),
            (16384, json!(40_000), json!(16384), json!(true))
        );
        let r = call(&client, "agent_memory", json!({"offset": 32768})).await;
        let m = r.structured_content.unwrap();
        assert_eq!((m["length"].clone(), m["next_offset"].clone()), (json!(40_000 - 32768), Value::Null));
        client.cancel().await.unwrap();
    });
}

/// Issue 28: a gate's audit history comes in pages too. A gate reopened and decided again
/// and again, then refused many times (each refusal audited, with its long reason), is shown
/// a page at a time: each page within its bound and saying whether it was cut, and the cursors
/// reach every event of the history exactly once, in the log's order. A page asked for out of
/// bounds is refused before the gate is shown (no `viewed` event).
fn a_gates_history_comes_in_pages(backend: Backend) {
    let Some(p) = Project::on(backend) else {
        return;
    };
    let run = p.init();
    let create = |extra: &[&str]| {
        run.cmd()
            .args([
                "gates", "create", "g", "--prompt", "ship?", "--allow", "alice",
            ])
            .args(extra)
            .assert()
            .success();
    };
    create(&[]);
    for cycle in 0..4 {
        let decide: &[&str] = if cycle % 2 == 0 {
            &["approve", "--comment", "ok"]
        } else {
            &["reject", "--reason", "no"]
        };
        p.cmd()
            .args(&decide[..1])
            .args([&run.id, "g", "--yes", "--as", "alice"])
            .args(&decide[1..])
            .assert()
            .success();
        create(&["--reopen"]);
    }
    let reason = "r".repeat(1500);
    for _ in 0..40 {
        let a = p
            .cmd()
            .args([
                "approve",
                &run.id,
                "g",
                "--yes",
                "--as",
                "mallory",
                "--comment",
                &reason,
            ])
            .assert()
            .failure();
        assert_eq!(common::code(&a), 4, "{}", common::stderr(&a));
    }
    let logged = run.view().events("g");
    assert_eq!(logged.len(), 49, "{}", logged.len());
    runtime().block_on(async {
        let client = connect(&p, "bot", &run).await;
        // Out of bounds: refused, and the gate is not shown (nothing logged).
        for bad in [
            json!({"gate": "g", "limit": 0}),
            json!({"gate": "g", "limit": 501}),
            json!({"gate": "g", "cursor": -1}),
        ] {
            let r = call(&client, "gates_show", bad.clone()).await;
            assert_eq!(class(&r), "usage", "{bad}: {r:?}");
        }
        // (The database is read on a thread allowed to block: PostgreSQL's client blocks.)
        let events = || tokio::task::block_in_place(|| run.view().events("g"));
        assert_eq!(events().len(), logged.len());
        for limit in [None, Some(7)] {
            let mut cursor = json!(0);
            let mut ids = Vec::new();
            let mut kinds = Vec::new();
            let mut cut = Vec::new();
            while !cursor.is_null() {
                let mut args = json!({"gate": "g", "cursor": cursor});
                if let Some(n) = limit {
                    args["limit"] = json!(n);
                }
                let r = call(&client, "gates_show", args).await;
                assert_eq!(class(&r), "ok", "{r:?}");
                let page = r.structured_content.unwrap();
                assert_eq!(page["cursor"], cursor);
                assert_eq!(
                    (page["id"].as_str(), page["status"].as_str()),
                    (Some("g"), Some("pending"))
                );
                let history = page["history"].as_array().unwrap();
                assert!(!history.is_empty());
                assert!(history.len() <= limit.unwrap_or(50) as usize);
                assert!(
                    Value::Array(history.clone()).to_string().len() <= 32 * 1024 + history.len()
                );
                ids.extend(history.iter().map(|e| e["id"].as_i64().unwrap()));
                kinds.extend(
                    history
                        .iter()
                        .map(|e| e["event_type"].as_str().unwrap().to_string()),
                );
                cut.push(page["truncated"].as_bool().unwrap());
                assert_eq!(
                    page["truncated"].as_bool().unwrap(),
                    !page["next_cursor"].is_null()
                );
                cursor = page["next_cursor"].clone();
                if cursor.is_null() {
                    assert_eq!(page["history_total"], json!(ids.len()));
                }
            }
            // Every event the gate's log holds now (this paging's own views included), once,
            // in order; every page but the last was cut.
            let now: Vec<String> = events().into_iter().map(|e| e.0).collect();
            assert_eq!(kinds, now, "limit {limit:?}");
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
            assert!(cut.len() >= 3, "limit {limit:?}: {} pages", cut.len());
            assert!(cut[..cut.len() - 1].iter().all(|c| *c) && !cut[cut.len() - 1]);
            if limit.is_none() {
                // The 32 KiB bound cut the default pages before 50 events.
                assert!(
                    kinds.len() < 50 * (cut.len() - 1),
                    "{} events, {} pages",
                    kinds.len(),
                    cut.len()
                );
            }
        }
        client.cancel().await.unwrap();
    });
}

on_both!(
    a_subagent_session_has_only_its_tools,
    answers_are_bounded_with_a_cursor,
    a_gates_history_comes_in_pages
);

/// The guides are the session's prompts, rendered by the `guide` command itself: a prompt is
/// that command's text with the session's run and the arguments filled in.
#[test]
fn the_guides_are_prompts() {
    let p = Project::new();
    let run = p.init();
    let guide = |args: &[&str]| {
        let out = run
            .cmd()
            .args(["--json", "guide"])
            .args(args)
            .assert()
            .success();
        let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
        v["markdown"].as_str().unwrap().to_string()
    };
    runtime().block_on(async {
        let client = connect(&p, "bot", &run).await;
        let listed = client.list_all_prompts().await.unwrap();
        let mut names: Vec<&str> = listed.iter().map(|p| p.name.as_str()).collect();
        names.sort();
        assert_eq!(names, ["approver", "subagent", "vm"]);
        for (name, args, cli) in [
            ("vm", json!({}), vec!["vm"]),
            ("approver", json!({}), vec!["approver"]),
            (
                "subagent",
                json!({"execution_id": "3", "name": "out", "agent": "critic"}),
                vec![
                    "subagent",
                    "--execution-id",
                    "3",
                    "--name",
                    "out",
                    "--agent",
                    "critic",
                ],
            ),
        ] {
            let Value::Object(args) = args else {
                unreachable!()
            };
            let got = client
                .get_prompt(rmcp::model::GetPromptRequestParams::new(name).with_arguments(args))
                .await
                .unwrap();
            let rmcp::model::ContentBlock::Text(text) = &got.messages[0].content else {
                panic!("{name}: not text")
            };
            let mut want = guide(&cli);
            if name == "vm" {
                // Through MCP the VM's guide opens with how its lines are this server's tools.
                let preamble = std::fs::read_to_string(
                    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("guide/vm-mcp.md"),
                )
                .unwrap();
                want = format!("{preamble}{want}");
            }
            assert!(want.len() <= 32 * 1024, "{name}: a guide over one page");
            assert_eq!(text.text, want, "{name}");
            if name == "subagent" {
                assert!(want.contains(&run.id), "{name}: the run is not filled in");
            }
        }
        // A subagent on MCP gets its steps as its own session's tool calls.
        let Value::Object(args) =
            json!({"execution_id": "3", "name": "out", "agent": "critic", "via": "mcp"})
        else {
            unreachable!()
        };
        let got = client
            .get_prompt(rmcp::model::GetPromptRequestParams::new("subagent").with_arguments(args))
            .await
            .unwrap();
        let rmcp::model::ContentBlock::Text(text) = &got.messages[0].content else {
            panic!("subagent via mcp: not text")
        };
        assert!(
            text.text.contains(r#"bind {"name": "out", "value": "#),
            "{}",
            text.text
        );
        assert!(!text.text.contains("prose-state --run"), "{}", text.text);
        assert!(!text.text.contains("execution_id\": 3"), "{}", text.text);
        let bad = client
            .get_prompt(
                rmcp::model::GetPromptRequestParams::new("subagent").with_arguments(
                    serde_json::Map::from_iter([("name".to_string(), json!("bad name"))]),
                ),
            )
            .await;
        assert!(bad.is_err());
        client.cancel().await.unwrap();
    });
}

/// `gates_wait` with `gates` and `all` or `any`: the command line's `gates wait --all|--any`,
/// with each settled gate's outcome; `gate` and `gates` together, or neither, refused.
fn gates_wait_waits_on_several_gates(backend: Backend) {
    let Some(p) = Project::on(backend) else {
        return;
    };
    let run = p.init();
    for g in ["a", "b", "c"] {
        run.cmd()
            .args(["gates", "create", g, "--prompt", "Go?"])
            .assert()
            .success();
    }
    run.cmd()
        .args(["approve", "a", "--as", "alice", "-y"])
        .assert()
        .success();
    run.cmd()
        .args(["reject", "c", "--as", "alice", "-y", "--reason", "no"])
        .assert()
        .success();
    runtime().block_on(async {
        let client = connect(&p, "w", &run).await;
        let r = call(
            &client,
            "gates_wait",
            json!({"gates": ["a", "b"], "any": true}),
        )
        .await;
        assert_eq!(class(&r), "ok", "{r:?}");
        let v = r.structured_content.clone().unwrap();
        assert_eq!(v["mode"], "any", "{v}");
        assert_eq!(v["gates"][0]["id"], "a", "{v}");
        let r = call(
            &client,
            "gates_wait",
            json!({"gates": ["a", "b"], "all": true, "timeout": 0}),
        )
        .await;
        assert_eq!(class(&r), "still_pending", "{r:?}");
        let v = r.structured_content.clone().unwrap();
        assert_eq!(v["gates"][1]["status"], "pending", "{v}");
        let r = call(
            &client,
            "gates_wait",
            json!({"gates": ["a", "c"], "all": true}),
        )
        .await;
        assert_eq!(class(&r), "rejected", "{r:?}");
        for bad in [
            json!({"gates": ["a", "b"], "gate": "a", "all": true}),
            json!({"all": true}),
            json!({"gates": [], "all": true}),
            json!({"gates": ["a", "b"]}),
            json!({"gates": vec!["a"; 17], "all": true}),
        ] {
            let r = call(&client, "gates_wait", bad.clone()).await;
            assert_eq!(class(&r), "usage", "{bad}: {r:?}");
        }
        client.cancel().await.unwrap();
    });
}

/// Issue 45 through the tools: `bind` and `get` give the binding's own version (what `history`
/// lists and `if_version` compares); `resume` gives a reopened gate's instance and the wait to
/// run, and `gates_wait` on the earlier instance answers with its own rejection.
fn versions_and_instances_through_the_tools(backend: Backend) {
    let Some(p) = Project::on(backend) else {
        return;
    };
    let run = p.init();
    for i in 0..5 {
        run.bind(&format!("other{i}"), "v", None);
    }
    run.cmd()
        .args(["gates", "create", "deploy", "--prompt", "Ship it?"])
        .assert()
        .success();
    run.cmd()
        .args([
            "reject", "deploy", "--as", "bob", "-y", "--reason", "not yet",
        ])
        .assert()
        .success();
    run.cmd()
        .args([
            "gates", "create", "deploy", "--prompt", "Ship it?", "--reopen",
        ])
        .assert()
        .success();
    // Read inside the runtime, on a thread it lets block (the server's client is blocking).
    let snapshot = || {
        tokio::task::block_in_place(|| match &p.pg_url {
            Some(url) => common::snapshot_pg(url, &run.id),
            None => common::snapshot_db(&run.db),
        })
    };
    runtime().block_on(async {
        let client = connect(&p, "w", &run).await;
        let content = |r: &CallToolResult| r.structured_content.clone().unwrap();
        for (value, version) in [("one", 1), ("two", 2)] {
            let r = call(&client, "bind", json!({"name": "x", "value": value})).await;
            assert_eq!(class(&r), "ok", "{r:?}");
            assert_eq!(content(&r)["version"], version, "{r:?}");
        }
        let r = call(&client, "get", json!({"name": "x"})).await;
        assert_eq!(content(&r)["version"], 2, "{r:?}");
        let r = call(&client, "history", json!({"name": "x"})).await;
        assert_eq!(content(&r)["versions"][0]["version"], 2, "{r:?}");
        let r = call(&client, "get", json!({"name": "x", "version": 1})).await;
        let v = content(&r);
        assert_eq!(
            (&v["version"], &v["value"]),
            (&json!(1), &json!("one")),
            "{v}"
        );
        let r = call(
            &client,
            "bind",
            json!({"name": "x", "value": "three", "if_version": 2}),
        )
        .await;
        assert_eq!(
            (class(&r), &content(&r)["version"]),
            ("ok", &json!(3)),
            "{r:?}"
        );
        let before = snapshot();
        let r = call(
            &client,
            "bind",
            json!({"name": "x", "value": "four", "if_version": 2}),
        )
        .await;
        assert_eq!(class(&r), "refused", "{r:?}");
        assert_eq!(
            snapshot(),
            before,
            "a refused compare-and-set changed the run"
        );

        let r = call(&client, "resume", json!({})).await;
        let doc = content(&r);
        let g = doc["gates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["id"] == "deploy")
            .unwrap()
            .clone();
        assert_eq!(g["instance"], 2, "{g}");
        assert_eq!(
            g["next_step"],
            json!({"action": "wait", "argument": "gates wait deploy --instance 2"}),
            "{g}"
        );
        let before = snapshot();
        let r = call(
            &client,
            "gates_wait",
            json!({"gate": "deploy", "instance": 1, "timeout": 0}),
        )
        .await;
        assert_eq!(class(&r), "rejected", "{r:?}");
        let v = content(&r);
        assert_eq!(
            (
                &v["status"],
                &v["resolved_by"],
                &v["instance"],
                &v["superseded_by"]
            ),
            (&json!("rejected"), &json!("bob"), &json!(1), &json!(2)),
            "{v}"
        );
        let r = call(
            &client,
            "gates_wait",
            json!({"gate": "deploy", "instance": 2, "timeout": 1}),
        )
        .await;
        assert_eq!(class(&r), "still_pending", "{r:?}");
        assert_eq!(snapshot(), before, "a wait changed the run");
        client.cancel().await.unwrap();
    });
}
