//! Issue 32: idle waiters in one process hold no database connection each. Many `gates_wait`
//! calls asleep in one `prose-state mcp` session share the process's one listening connection
//! and its few kept ones (PostgreSQL), every one of them still ends with its gate's decision,
//! and a kept connection the server has ended is never handed to a waiter broken.

use crate::common::{self, on_both, Backend, Project, Run, BIN};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Waiters in the first story.
const WAITERS: usize = 200;

/// Connections one MCP server may hold to its database while its waiters sleep: the kept ones
/// and those of looks under way (8 in all: src/store/wake.rs `LOOKS_AT_ONCE`), the one it
/// listens on, and one the server has been told to close but still shows.
const MOST_CONNECTIONS: i64 = 8 + 1 + 1;

/// `prose-state mcp` for the run as a client spawns it, and the server's process id.
async fn connect(p: &Project, run: &Run) -> (RunningService<RoleClient, ()>, u32) {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.args(["--run", &run.id, "mcp", "--role", "vm", "--agent", "vm"])
        .current_dir(p.root())
        .env("HOME", common::test_home(p.root()))
        .stderr(std::process::Stdio::null());
    for var in common::CLEARED_ENV {
        cmd.env_remove(var);
    }
    let transport = TokioChildProcess::new(cmd).unwrap();
    let pid = transport.id().unwrap();
    (().serve(transport).await.unwrap(), pid)
}

/// One `gates_wait` call for `gate`. Its timeout is the longest a call may ask (600 s), past any run of this test on
/// a loaded machine: the 200 decisions by the command line may take minutes there, and a
/// call that timed out before its gate was decided would fail the test for the machine's
/// speed, not for a lost wake (a missed wake is still caught by the 30 s look).
fn wait_call(
    client: &std::sync::Arc<RunningService<RoleClient, ()>>,
    gate: &str,
) -> tokio::task::JoinHandle<CallToolResult> {
    let client = std::sync::Arc::clone(client);
    let Value::Object(args) = json!({"gate": gate, "timeout": "600s"}) else {
        unreachable!()
    };
    tokio::spawn(async move {
        client
            .call_tool(CallToolRequestParams::new("gates_wait").with_arguments(args))
            .await
            .unwrap()
    })
}

fn class(r: &CallToolResult) -> &str {
    r.meta.as_ref().unwrap()["class"].as_str().unwrap()
}

/// Connections to the database at `url` other than the one asking.
fn connections(url: &str) -> i64 {
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap_or_else(|e| {
        panic!(
            "could not connect to count connections (the server's max_connections used up?): {e}"
        )
    });
    c.query_one(
        "SELECT COUNT(*) FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid()",
        &[],
    )
    .unwrap()
    .get(0)
}

/// Threads of process `pid` (each waiting call runs on one of the server's).
fn threads(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Runs `args` (after `--run RUN`) for each gate, on four threads.
fn decide_all(run: &Run, gates: &[String], args: impl Fn(&str) -> Vec<String> + Sync) {
    std::thread::scope(|s| {
        for part in 0..4 {
            let args = &args;
            s.spawn(move || {
                for g in gates.iter().skip(part).step_by(4) {
                    run.cmd().args(args(g)).assert().success();
                }
            });
        }
    });
}

/// 200 `gates_wait` calls at once in one MCP session, all asleep: on PostgreSQL the server
/// holds a bounded number of connections to the database all along (not one per call), and
/// each call ends with its own gate's decision (three in four approved, the rest rejected)
/// once the command line decides it; the database holds exactly those decisions.
fn many_idle_waits_share_a_few_connections(backend: Backend) {
    let Some(p) = Project::on(backend) else {
        return;
    };
    let run = p.init();
    let gates: Vec<String> = (0..WAITERS).map(|i| format!("g{i}")).collect();
    decide_all(&run, &gates, |g| {
        ["gates", "create", g, "--prompt", "Go?", "--timeout", "1d"]
            .map(String::from)
            .to_vec()
    });
    let url = p.pg_url.clone();
    let most = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (outcomes, still_waiting) = rt.block_on(async {
        let (client, pid) = connect(&p, &run).await;
        let client = std::sync::Arc::new(client);
        let calls: Vec<_> = gates.iter().map(|g| wait_call(&client, g)).collect();
        // Sampled until every call has a thread of its own in the server and for a while
        // after, while they sleep (woken by the commit, they look again only every 30 s).
        {
            let (url, most) = (url.clone(), most.clone());
            tokio::task::block_in_place(move || {
                let started = Instant::now();
                let mut all_in_since: Option<Instant> = None;
                while all_in_since.is_none_or(|t| t.elapsed() < Duration::from_secs(3)) {
                    assert!(
                        started.elapsed() < Duration::from_secs(120),
                        "the {WAITERS} calls never all ran at once: {} threads in the server",
                        threads(pid)
                    );
                    if all_in_since.is_none() && threads(pid) > WAITERS {
                        all_in_since = Some(Instant::now());
                    }
                    if let Some(u) = &url {
                        most.fetch_max(connections(u), std::sync::atomic::Ordering::SeqCst);
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
        }
        let still_waiting = calls.iter().filter(|c| !c.is_finished()).count();
        // Three in four approved, the rest rejected, by the command line.
        let (approved, rejected) = gates.split_at(WAITERS * 3 / 4);
        tokio::task::block_in_place(|| {
            decide_all(&run, approved, |g| {
                ["approve", g, "--as", "alice", "-y"]
                    .map(String::from)
                    .to_vec()
            });
            if let Some(u) = &url {
                most.fetch_max(connections(u), std::sync::atomic::Ordering::SeqCst);
            }
            decide_all(&run, rejected, |g| {
                ["reject", g, "--as", "bob", "-y", "--reason", "no"]
                    .map(String::from)
                    .to_vec()
            });
        });
        let mut outcomes = Vec::new();
        for c in calls {
            outcomes.push(c.await.unwrap());
        }
        std::sync::Arc::into_inner(client)
            .unwrap()
            .cancel()
            .await
            .unwrap();
        (outcomes, still_waiting)
    });
    assert_eq!(
        still_waiting, WAITERS,
        "calls ended before any gate was decided"
    );
    if backend == Backend::Postgres {
        let most = most.load(std::sync::atomic::Ordering::SeqCst);
        assert!(
            most <= MOST_CONNECTIONS,
            "{most} connections to the database for {WAITERS} waiting calls (at most {MOST_CONNECTIONS})"
        );
        assert!(most >= 1, "the server never connected");
    }
    let view = run.view();
    for (i, (g, r)) in gates.iter().zip(&outcomes).enumerate() {
        let v = r.structured_content.clone().unwrap_or_default();
        let (want_class, want_status, by) = if i < WAITERS * 3 / 4 {
            ("ok", "approved", "alice")
        } else {
            ("rejected", "rejected", "bob")
        };
        assert_eq!(class(r), want_class, "{g}: {r:?}");
        assert_eq!(v["id"], g.as_str(), "{g}: {v}");
        assert_eq!(v["status"], want_status, "{g}: {v}");
        let (status, resolved_by, _, _) = view.gate(g);
        assert_eq!(
            (status.as_str(), resolved_by.as_deref()),
            (want_status, Some(by)),
            "{g}"
        );
    }
    assert_eq!(
        common::count_rows(&p, &run, "gates", "status = 'pending'"),
        0
    );
}

on_both!(many_idle_waits_share_a_few_connections);

/// Connections to the database at `url` other than the one asking and the server's
/// listening one (whose last statement is its LISTEN), ended by the server
/// (pg_terminate_backend); how many.
fn end_sessions_but_the_listening_one(url: &str) -> i64 {
    let mut admin = postgres::Client::connect(url, postgres::NoTls).unwrap();
    admin
        .query_one(
            "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE datname = current_database() AND pid <> pg_backend_pid()
                AND query NOT LIKE 'LISTEN%') t",
            &[],
        )
        .unwrap()
        .get(0)
}

/// A sleeping wait's connection, kept by the server, is ended by the server while idle
/// (pg_terminate_backend, as an administrator or `idle_session_timeout` would): the wait's
/// next look, woken by the decision, is not handed it broken. It ends with the decision, and
/// a new wait in the same session works too.
#[test]
fn a_kept_connection_ended_while_a_wait_sleeps_is_not_handed_out_broken() {
    let Some(p) = Project::on(Backend::Postgres) else {
        return;
    };
    let run = p.init();
    let url = p.pg_url.clone().unwrap();
    for g in ["k", "m"] {
        run.cmd()
            .args(["gates", "create", g, "--prompt", "Go?", "--timeout", "1d"])
            .assert()
            .success();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, _pid) = connect(&p, &run).await;
        let client = std::sync::Arc::new(client);
        let waiting = wait_call(&client, "k");
        // The wait has looked once (its store, given back, is kept: a session of its own
        // besides the listening one) and sleeps: those kept sessions are ended.
        let ended = {
            let url = url.clone();
            tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                while connections(&url) < 2 {
                    assert!(
                        started.elapsed() < Duration::from_secs(60),
                        "the wait never looked"
                    );
                    std::thread::sleep(Duration::from_millis(50));
                }
                // Its look done (the session idle after it), then ended.
                std::thread::sleep(Duration::from_millis(300));
                end_sessions_but_the_listening_one(&url)
            })
            .await
            .unwrap()
        };
        assert!(ended >= 1, "no kept session to end");
        assert!(!waiting.is_finished(), "the wait ended before the decision");
        run.cmd()
            .args(["approve", "k", "--as", "alice", "-y"])
            .assert()
            .success();
        let r = waiting.await.unwrap();
        assert_eq!(class(&r), "ok", "{r:?}");
        assert_eq!(r.structured_content.clone().unwrap()["status"], "approved");
        // Ended again, while nothing waits: the next call's open is not handed one broken.
        let url2 = url.clone();
        tokio::task::spawn_blocking(move || end_sessions_but_the_listening_one(&url2))
            .await
            .unwrap();
        let waiting = wait_call(&client, "m");
        run.cmd()
            .args(["reject", "m", "--as", "bob", "-y", "--reason", "no"])
            .assert()
            .success();
        let r = waiting.await.unwrap();
        assert_eq!(class(&r), "rejected", "{r:?}");
        std::sync::Arc::into_inner(client)
            .unwrap()
            .cancel()
            .await
            .unwrap();
    });
    let view = run.view();
    assert_eq!(
        (view.gate("k").0.as_str(), view.gate("k").1.as_deref()),
        ("approved", Some("alice"))
    );
    assert_eq!(
        (view.gate("m").0.as_str(), view.gate("m").1.as_deref()),
        ("rejected", Some("bob"))
    );
}

/// What the caller's SQL could leave on a session would outlive its read-only transaction (a
/// session advisory lock): `query` refuses such a call outright (issue 43: a function with an
/// effect beyond its result), so no lock is ever taken, and later calls (a wait's look
/// included) run as ever.
#[test]
fn a_session_that_ran_the_callers_sql_is_not_kept() {
    let Some(p) = Project::on(Backend::Postgres) else {
        return;
    };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "q", "--prompt", "Go?", "--timeout", "1d"])
        .assert()
        .success();
    let admin = p.pg_url.clone().unwrap();
    // `query` runs as a role that may only read (it refuses a superuser).
    let reader = common::pg::as_reader(&admin);
    p.write(
        ".prose/.env",
        format!("OPENPROSE_POSTGRES_URL={reader}\n").as_bytes(),
    );
    let held = |url: &str| -> i64 {
        let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
        c.query_one(
            "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242",
            &[],
        )
        .unwrap()
        .get(0)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, _pid) = connect(&p, &run).await;
        let Value::Object(args) = json!({"sql": "SELECT pg_advisory_lock(4242)::text AS locked"})
        else {
            unreachable!()
        };
        let r = client
            .call_tool(CallToolRequestParams::new("query").with_arguments(args))
            .await
            .unwrap();
        assert_ne!(class(&r), "ok", "{r:?}");
        assert!(format!("{r:?}").contains("pg_advisory_lock"), "{r:?}");
        // No session holds the lock (had one taken it, the server may take a moment to see
        // its close).
        let admin2 = admin.clone();
        let left = tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            while held(&admin2) > 0 && started.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(50));
            }
            held(&admin2)
        })
        .await
        .unwrap();
        assert_eq!(left, 0, "the caller's advisory lock outlived its call");
        // Later calls still work, a wait among them.
        let Value::Object(args) = json!({"gate": "q", "timeout": 0}) else {
            unreachable!()
        };
        let r = client
            .call_tool(CallToolRequestParams::new("gates_wait").with_arguments(args))
            .await
            .unwrap();
        assert_eq!(class(&r), "still_pending", "{r:?}");
        client.cancel().await.unwrap();
    });
    assert_eq!(held(&admin), 0);
}
