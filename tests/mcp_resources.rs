//! `prose-state mcp`'s resources and subscriptions, driven by the reference Python SDK
//! (tests/fixtures/mcp_resources_client.py): the test makes the runs, does the raw SQL writes
//! and the snapshots the client asks for, then checks the database itself.

use crate::common::{self, count_rows, on_both, Backend, Project, BIN};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

on_both!(an_agent_reads_and_subscribes_to_a_run);

/// Templates, every kind of resource read and paged, hostile URIs refused in one line; a
/// subscription in each protocol form updated when a CLI `approve` (another process) commits
/// and when raw SQL writes behind the tools' back, and a binding's rebinding, each within
/// 20 s, less than the safety net's 30 s; the session's bound; a subagent that
/// cannot read another run, another execution's binding or the run itself, and whose reads
/// leave the run as it was.
fn an_agent_reads_and_subscribes_to_a_run(backend: Backend) {
    let Some(p) = Project::on(backend) else {
        return;
    };
    let Some(python) = common::test_python("the MCP resources test", common::Needs::Mcp) else {
        return;
    };
    let run = p.init();
    let other = p.init();
    let mut child = common::mcp_client(&p, &python, "mcp_resources_client.py")
        .args([BIN, &run.id, &other.id])
        .arg(match backend {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The client bounds its own waits; this bounds the whole, should it hang anyway.
    let killer = {
        let id = child.id();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(420));
            let _ = Command::new("kill").arg(id.to_string()).status();
        })
    };
    let mut stderr = child.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut result = None;
    let mut snapshot = None;
    let mut asked = Vec::new();
    for line in stdout.lines() {
        let line = line.unwrap();
        match line.as_str() {
            "RAW gates" => run.view().raw(
                "UPDATE gates SET status = 'approved', resolved_by = 'mallory' WHERE id = 'g2'",
                "UPDATE openprose.gates SET status = 'approved', resolved_by = 'mallory'
                  WHERE run_id = '$RUN' AND id = 'g2'",
            ),
            "RAW log" => run.view().raw(
                "INSERT INTO execution (statement_index, statement_text, status, completed_at)
                 VALUES (9, 'raw record', 'completed', datetime('now'))",
                "INSERT INTO openprose.execution (run_id, statement_index, statement_text, status,
                     completed_at) VALUES ('$RUN', 9, 'raw record', 'completed', now())",
            ),
            "SNAP" => snapshot = Some(run.snapshot()),
            "SAME" => assert_eq!(
                snapshot.as_deref(),
                Some(run.snapshot().as_str()),
                "a subagent's reads, refusals and subscription changed the run"
            ),
            l if l.starts_with("RESULT ") => {
                result = Some(serde_json::from_str::<Value>(&l[7..]).unwrap());
                continue;
            }
            other => panic!("the client said {other:?}"),
        }
        asked.push(line.clone());
        writeln!(stdin, "ok").unwrap();
        stdin.flush().unwrap();
    }
    let status = child.wait().unwrap();
    drop(killer);
    let errors = errors.join().unwrap();
    assert!(status.success(), "client failed:\n{errors}");
    assert_eq!(asked, ["RAW gates", "RAW log", "SNAP", "SAME"]);
    let result = result.expect("the client's result");
    assert_eq!(result["second_stream_honored"], 28);

    // The database: the decisions are the CLI's and the raw writer's; reading a gate as a
    // resource logged no view; the bindings the client made are there once each.
    let view = run.view();
    let by = |g: &str| {
        let (status, resolved_by, _, _) = view.gate(g);
        (status, resolved_by)
    };
    assert_eq!(by("g1"), ("approved".into(), Some("alice".into())));
    assert_eq!(by("g2"), ("approved".into(), Some("mallory".into())));
    assert_eq!(by("g3"), ("approved".into(), Some("bob".into())));
    assert_eq!(
        count_rows(&p, &run, "gate_audit_log", "event_type = 'viewed'"),
        0,
        "a resource read logs no view"
    );
    assert_eq!(count_rows(&p, &run, "bindings", "1 = 1"), 63);
    assert_eq!(
        count_rows(&p, &run, "execution", "statement_text = 'raw record'"),
        1
    );
    // The other run was only refused: nothing of it changed.
    assert_eq!(count_rows(&p, &other, "gates", "1 = 1"), 0);
}
