//! Waiters woken by the commit: what wakes them is checked by its structure, never by how
//! fast it is (latencies are the benchmark's). A wait whose own interval would never look in
//! time still sees a change, because the change woke it; with wake-ups turned off, it still
//! ends with the right answer.

use crate::common::*;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

on_both!(
    a_raw_write_wakes_a_waiting_gate_wait,
    a_wait_ends_correctly_with_wake_ups_turned_off,
    log_follow_is_woken_by_a_raw_append
);

/// `gates wait` with a look every minute and a 20 s limit: only a wake-up lets it see, inside
/// the limit, the decision raw SQL writes (a gate decided with no decision event: exit 9,
/// where a wait that was not woken would end still pending, exit 7). Outcome, not timing, is
/// what is asserted.
fn a_raw_write_wakes_a_waiting_gate_wait(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "Ship?"])
        .assert()
        .success();
    let waiter = run
        .std_cmd()
        .args(["gates", "wait", "g", "--poll", "60s", "--timeout", "20s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once it waits (its first look done), the write behind the tool's back.
    std::thread::sleep(Duration::from_millis(800));
    run.view().raw(
        "UPDATE gates SET status = 'approved', resolved_by = 'mallory' WHERE id = 'g'",
        "UPDATE openprose.gates SET status = 'approved', resolved_by = 'mallory'
          WHERE run_id = '$RUN' AND id = 'g'",
    );
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(9),
        "woken, it sees the forged decision; {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// With wake-ups turned off the wait polls, and a decision still ends it, with the decision.
fn a_wait_ends_correctly_with_wake_ups_turned_off(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "Ship?"])
        .assert()
        .success();
    let waiter = run
        .std_cmd()
        .env("PROSE_STATE_WAKE", "poll")
        .args(["gates", "wait", "g", "--poll", "1s", "--timeout", "60s"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    run.cmd()
        .args(["approve", "g", "--as", "bob", "--yes"])
        .assert()
        .success();
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("approved by bob"));
}

/// `log --follow` that would look once a minute prints a record appended by raw SQL, because
/// the commit woke it.
fn log_follow_is_woken_by_a_raw_append(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args([
            "exec-append",
            "--index",
            "1",
            "--text",
            "first",
            "--status",
            "completed",
        ])
        .assert()
        .success();
    let mut follower = run
        .std_cmd()
        .args(["log", "--follow", "--poll-ms", "60000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = follower.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut seen = String::new();
        let mut buf = [0u8; 4096];
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until && !seen.contains("raw record") {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            }
        }
        seen
    });
    std::thread::sleep(Duration::from_millis(800));
    run.view().raw(
        "INSERT INTO execution (statement_index, statement_text, status, completed_at)
         VALUES (2, 'raw record', 'completed', datetime('now'))",
        "INSERT INTO openprose.execution (run_id, statement_index, statement_text, status,
             completed_at) VALUES ('$RUN', 2, 'raw record', 'completed', now())",
    );
    // The follower is ended once the reader has what it looked for, or gave up.
    let killer = {
        let id = follower.id();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(21));
            let _ = Command::new("kill").arg(id.to_string()).status();
        })
    };
    let seen = reader.join().unwrap();
    let _ = follower.kill();
    let _ = follower.wait();
    drop(killer);
    assert!(seen.contains("first"), "{seen}");
    assert!(
        seen.contains("raw record"),
        "the append woke the follower: {seen}"
    );
}
