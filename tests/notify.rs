//! Notifications: the project's `on-gate` hook hears each committed gate change once (opened,
//! approved, rejected, timed out), on both backends, and nothing it does can block or fail
//! the write that caused it.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

on_both!(
    the_hook_hears_each_committed_gate_change_once,
    a_failing_missing_or_hanging_hook_never_fails_the_write,
    a_rolled_back_sweep_is_not_announced,
    concurrent_sweepers_announce_a_timeout_once,
    concurrent_readers_announce_a_reminder_and_an_escalation_once,
    an_imported_run_keeps_its_reminders,
);

/// Installs a hook that files each notice (stdin) and its environment in `events/`.
fn recording_hook(p: &Project) -> PathBuf {
    let events = p.root().join("events");
    std::fs::create_dir_all(&events).unwrap();
    install(
        p,
        &format!(
            "#!/bin/sh\nd='{}'\nn=\"$(date +%s%N).$$\"\ncat > \"$d/.$n\"\nenv > \"$d/.$n.env\"\n\
             mv \"$d/.$n.env\" \"$d/$n.env\"\nmv \"$d/.$n\" \"$d/$n.json\"\n",
            events.display()
        ),
        0o755,
    );
    events
}

fn install(p: &Project, script: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let hooks = p.root().join(".prose/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    let file = hooks.join("on-gate");
    std::fs::write(&file, script).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The notices filed so far, each with the environment its hook saw.
fn filed(events: &Path) -> Vec<(serde_json::Value, String)> {
    let mut names: Vec<_> = std::fs::read_dir(events)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json") && !n.starts_with('.'))
        .collect();
    names.sort();
    names
        .iter()
        .map(|n| {
            let body = std::fs::read(events.join(n)).unwrap();
            let env = std::fs::read_to_string(events.join(n.replace(".json", ".env"))).unwrap();
            (serde_json::from_slice(&body).unwrap(), env)
        })
        .collect()
}

/// Waits (bounded) until `n` notices are filed, then a moment more for any that should not
/// be there; returns them as (event, gate id) pairs, sorted.
fn heard(events: &Path, n: usize) -> Vec<(String, String)> {
    let until = Instant::now() + Duration::from_secs(30);
    while filed(events).len() < n && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut pairs: Vec<(String, String)> = filed(events)
        .iter()
        .map(|(v, _)| {
            (
                v["event"].as_str().unwrap().to_string(),
                v["gate"]["id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    pairs.sort();
    pairs
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<_> = list
        .iter()
        .map(|(e, g)| (e.to_string(), g.to_string()))
        .collect();
    v.sort();
    v
}

fn the_hook_hears_each_committed_gate_change_once(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let events = recording_hook(&p);
    // A password in this process's environment, which the hook must not inherit.
    let secret = "postgresql://u:hunter2-secret@127.0.0.1:1/x";
    let create = |id: &str, extra: &[&str]| {
        run.cmd()
            .env("PROSE_PRINCIPAL_SECRET_PROBE", "visible")
            .env("DATABASE_URL", secret)
            .env("PROSE_SERVE_URL", "https://approvals.example.com/")
            .args(["gates", "create", id, "--prompt", "Ship it?\n<b>now</b>"])
            .args(extra)
            .assert()
            .success();
    };
    create("first", &[]);
    assert_eq!(heard(&events, 1), pairs(&[("opened", "first")]));
    let (v, env) = &filed(&events)[0];
    assert_eq!(v["run_id"], run.id.as_str());
    assert_eq!(v["gate"]["status"], "pending");
    assert_eq!(v["gate"]["prompt"], "Ship it?\n<b>now</b>");
    assert!(env.contains("PROSE_GATE_EVENT=opened"), "{env}");
    // The gate's page, where `serve` is reached (PROSE_SERVE_URL).
    let page = format!("https://approvals.example.com/runs/{}/gates/first", run.id);
    assert_eq!(v["url"], page.as_str());
    assert!(env.contains(&format!("PROSE_GATE_URL={page}")), "{env}");
    assert!(env.contains("PROSE_GATE_ID=first"), "{env}");
    assert!(env.contains(&format!("PROSE_RUN_ID={}", run.id)), "{env}");
    assert!(
        env.contains("PROSE_PRINCIPAL_SECRET_PROBE=visible"),
        "{env}"
    );
    assert!(
        !env.contains("hunter2"),
        "a credential reached the hook: {env}"
    );

    // A retry of the same create, a conflicting create and refused decisions change no gate:
    // nothing is announced.
    create("first", &[]);
    run.cmd()
        .args(["gates", "create", "first", "--prompt", "Other?"])
        .assert()
        .failure();
    run.cmd()
        .args(["reject", "first", "--yes", "--as", "alice"])
        .assert()
        .failure();
    run.cmd()
        .args(["approve", "first", "--yes", "--as", "agent:bot"])
        .assert()
        .failure();
    run.cmd()
        .args(["approve", "first", "--yes", "--as", "alice"])
        .assert()
        .success();
    create("second", &[]);
    run.cmd()
        .args([
            "reject",
            "second",
            "--yes",
            "--as",
            "bob",
            "--reason",
            "not today",
        ])
        .assert()
        .success();
    create("third", &["--timeout", "1s"]);
    std::thread::sleep(Duration::from_millis(1500));
    // The listing sweeps the overdue gate: its timeout is announced by whoever swept it.
    p.cmd().args(["gates"]).assert().success();
    assert_eq!(
        heard(&events, 6),
        pairs(&[
            ("opened", "first"),
            ("approved", "first"),
            ("opened", "second"),
            ("rejected", "second"),
            ("opened", "third"),
            ("timeout", "third"),
        ])
    );
    // What each notice says is what was committed.
    for (v, _) in filed(&events) {
        let gate = v["gate"]["id"].as_str().unwrap();
        let (status, by, comment, _) = run.view().gate(gate);
        match v["event"].as_str().unwrap() {
            "opened" => assert_eq!(v["gate"]["status"], "pending"),
            event => {
                assert_eq!(status, event, "{gate}");
                assert_eq!(v["gate"]["status"], event);
                assert_eq!(v["gate"]["resolved_by"].as_str(), by.as_deref());
                assert_eq!(v["gate"]["resolution_comment"].as_str(), comment.as_deref());
            }
        }
    }
    // Nothing failed, so nothing was logged.
    let log =
        std::fs::read_to_string(p.root().join(".prose/hooks/on-gate.log")).unwrap_or_default();
    assert_eq!(log, "", "{log}");
}

fn a_failing_missing_or_hanging_hook_never_fails_the_write(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let log_file = p.root().join(".prose/hooks/on-gate.log");
    let log = || std::fs::read_to_string(&log_file).unwrap_or_default();
    let wait_for = |what: &str| {
        let until = Instant::now() + Duration::from_secs(30);
        while !log().contains(what) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(log().contains(what), "{what} not in the log: {}", log());
    };

    // Fails: the write stands, the failure and the hook's own words are logged.
    install(
        &p,
        "#!/bin/sh\ncat >/dev/null\necho 'oops from the hook' >&2\nexit 3\n",
        0o755,
    );
    run.cmd()
        .args(["gates", "create", "failing", "--prompt", "Go?"])
        .assert()
        .success();
    assert_eq!(run.view().gate("failing").0, "pending");
    wait_for(&format!(
        "on-gate opened run {} gate failing: exit 3",
        run.id
    ));
    wait_for("oops from the hook");

    // Not executable: the same.
    install(&p, "#!/bin/sh\nexit 0\n", 0o644);
    run.cmd()
        .args(["approve", "failing", "--yes", "--as", "alice"])
        .assert()
        .success();
    assert_eq!(run.view().gate("failing").0, "approved");
    wait_for("gate failing: exit 126");

    // Hangs without reading its stdin (a notice larger than a pipe holds): the command still
    // returns, and the gate is committed. The hook says where it is so the test can end it.
    let pid_file = p.root().join("hook.pid");
    install(
        &p,
        &format!(
            "#!/bin/sh\necho $$ > '{}'\nexec sleep 120\n",
            pid_file.display()
        ),
        0o755,
    );
    let big = "x".repeat(100_000);
    run.cmd()
        .timeout(Duration::from_secs(60))
        .args(["gates", "create", "hanging", "--prompt", &big])
        .assert()
        .success();
    assert_eq!(run.view().gate("hanging").0, "pending");
    let until = Instant::now() + Duration::from_secs(30);
    while !pid_file.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let _ = std::process::Command::new("kill").arg(pid.trim()).status();
}

/// A transaction that swept an overdue gate and then failed is rolled back, sweep and all:
/// its timeout is announced once, by the transaction that commits it.
fn a_rolled_back_sweep_is_not_announced(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let events = recording_hook(&p);
    run.cmd()
        .args([
            "gates",
            "create",
            "late",
            "--prompt",
            "Go?",
            "--timeout",
            "1s",
        ])
        .assert()
        .success();
    std::thread::sleep(Duration::from_millis(1500));
    // Sweeps "late" inside its transaction, then fails: no such parent execution.
    let a = run
        .cmd()
        .args([
            "gates",
            "create",
            "orphan",
            "--prompt",
            "Go?",
            "--execution-id",
            "999999",
        ])
        .assert()
        .failure();
    assert_eq!(code(&a), 3, "{}", stderr(&a));
    assert_eq!(
        run.view().gate("late").0,
        "pending",
        "the sweep was rolled back"
    );
    assert_eq!(heard(&events, 1), pairs(&[("opened", "late")]));
    run.cmd().args(["gates", "show", "late"]).assert().success();
    assert_eq!(run.view().gate("late").0, "timeout");
    assert_eq!(
        heard(&events, 2),
        pairs(&[("opened", "late"), ("timeout", "late")])
    );
}

/// Ten listings at once all find the same overdue gate: one of them sweeps it, and its timeout
/// is announced once.
fn concurrent_sweepers_announce_a_timeout_once(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let events = recording_hook(&p);
    run.cmd()
        .args([
            "gates",
            "create",
            "late",
            "--prompt",
            "Go?",
            "--timeout",
            "1s",
        ])
        .assert()
        .success();
    std::thread::sleep(Duration::from_millis(1500));
    let children: Vec<_> = (0..10)
        .map(|i| {
            let mut c = if i % 2 == 0 {
                p.std_cmd()
            } else {
                run.std_cmd()
            };
            c.args(if i % 2 == 0 {
                vec!["gates"]
            } else {
                vec!["gates", "show", "late"]
            })
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(run.view().gate("late").0, "timeout");
    assert_eq!(
        heard(&events, 2),
        pairs(&[("opened", "late"), ("timeout", "late")])
    );
}

/// Ten processes reading at once, as a reminder and then an escalation fall due: each is
/// sealed once and heard once, and a `gates sweep` afterwards finds nothing more to do.
fn concurrent_readers_announce_a_reminder_and_an_escalation_once(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let events = recording_hook(&p);
    let started = Instant::now();
    run.cmd()
        .args([
            "gates", "create", "late", "--prompt", "Go?", "--allow", "alice",
        ])
        .args(["--timeout", "6s", "--remind", "5s", "--remind", "30m"])
        .args(["--escalate-to", "group:oncall", "--escalate-timeout", "1h"])
        .assert()
        .success();
    let readers = |p: &Project| {
        let children: Vec<_> = (0..10)
            .map(|i| {
                // `gates show` names the run; listings and sweeps read the project, or the run.
                let mut c = if i % 3 == 1 || i % 2 == 0 {
                    run.std_cmd()
                } else {
                    p.std_cmd()
                };
                c.args(match i % 3 {
                    0 => vec!["gates"],
                    1 => vec!["gates", "show", "late"],
                    _ => vec!["gates", "sweep"],
                })
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
            })
            .collect();
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{:?}: {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    };
    // The 5s reminder is due a second after the gate opened; the 30m one, before it opened,
    // is never due in the first period.
    std::thread::sleep(Duration::from_millis(1500).saturating_sub(started.elapsed()));
    readers(&p);
    assert_eq!(
        heard(&events, 2),
        pairs(&[("opened", "late"), ("reminder", "late")])
    );
    std::thread::sleep(Duration::from_millis(6500).saturating_sub(started.elapsed()));
    readers(&p);
    assert_eq!(
        heard(&events, 3),
        pairs(&[
            ("escalated", "late"),
            ("opened", "late"),
            ("reminder", "late")
        ])
    );
    let status = run.view().gate("late").0;
    assert_eq!(status, "pending", "an escalated gate does not time out");
    let sealed: Vec<String> = run
        .view()
        .events("late")
        .into_iter()
        .map(|e| e.0)
        .filter(|k| k != "viewed")
        .collect();
    assert_eq!(sealed, ["created", "reminder", "escalated"]);
    let a = p
        .cmd()
        .args(["gates", "sweep", "--json"])
        .assert()
        .success();
    assert_eq!(stdout_json(&a)["runs"], 0, "nothing more is due");
    run.cmd().args(["gates", "verify"]).assert().success();
}

/// A copy carries no `remind_at`: the import reads each pending gate's next reminder from its
/// sealed log again, so the reminder is still announced, once, where the run now is.
fn an_imported_run_keeps_its_reminders(b: Backend) {
    let Some(dest) = Project::on(b) else { return };
    let home = Project::new();
    let run = home.init();
    let started = Instant::now();
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "Go?", "--timeout", "1h"])
        .args(["--remind", "3599s", "--remind", "30m"])
        .assert()
        .success();
    let e = home.root().join("export");
    run.cmd().args(["export", "-o"]).arg(&e).assert().success();
    dest.init();
    let events = recording_hook(&dest);
    dest.cmd()
        .args(["import", "--vouch", "--as", "alice"])
        .arg(&e)
        .assert()
        .success();
    std::thread::sleep(Duration::from_millis(1500).saturating_sub(started.elapsed()));
    let landed = dest.run(&run.id);
    landed.cmd().args(["gates", "show", "g"]).assert().success();
    landed.cmd().args(["gates", "show", "g"]).assert().success();
    assert_eq!(heard(&events, 1), pairs(&[("reminder", "g")]));
    let kinds: Vec<String> = landed.view().events("g").into_iter().map(|e| e.0).collect();
    assert_eq!(
        kinds.iter().filter(|k| *k == "reminder").count(),
        1,
        "{kinds:?}"
    );
}
