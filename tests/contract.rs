//! The contract suite: what every backend must do, written once and run against SQLite and
//! against a real PostgreSQL server. Each scenario drives the binary, then looks at the
//! database itself.

use crate::common::*;
use std::process::Stdio;

on_both!(
    init_and_runs,
    bind_get_scopes_and_attachments,
    exec_append_and_bad_records,
    gate_lifecycle_and_fail_closed,
    gate_race_has_one_winner,
    concurrent_binds_all_land,
    agents_and_segments,
    resume_document,
    finished_runs_are_closed,
);

fn json(a: &assert_cmd::assert::Assert) -> serde_json::Value {
    stdout_json(a)
}

/// Whether `shown` shows the project's server URL as it should: its password as `***` when
/// it has one, and no `***` when it has none (a mask would say there was a password).
fn masked_as_it_should(p: &Project, shown: &str) -> bool {
    let url = p.pg_url.as_deref().unwrap();
    let has_password = url
        .split_once("://")
        .and_then(|(_, rest)| rest.rsplit_once('@'))
        .is_some_and(|(userinfo, _)| userinfo.contains(':'));
    match has_password {
        true => shown.contains(":***@"),
        false => !shown.contains("***"),
    }
}

fn init_and_runs(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    p.write("demo.prose", b"let x = session \"hi\"\n");
    let a = p
        .cmd()
        .args([
            "--json",
            "init",
            "demo.prose",
            "--run-id",
            "r-contract",
            "--backend",
        ])
        .arg(if b == Backend::Postgres {
            "postgres"
        } else {
            "sqlite"
        })
        .assert()
        .success();
    let v = json(&a);
    assert_eq!(v["run_id"], "r-contract");
    if b == Backend::Postgres {
        let db = v["db"].as_str().unwrap();
        assert!(masked_as_it_should(&p, db), "the URL is shown masked: {db}");
        assert!(p
            .root()
            .join(".prose/runs/r-contract/backend.json")
            .is_file());
        assert!(!p.root().join(".prose/runs/r-contract/state.db").exists());
    }
    assert!(p
        .root()
        .join(".prose/runs/r-contract/program.prose")
        .is_file());
    assert!(p.root().join(".prose/runs/r-contract/attachments").is_dir());
    let a = p.cmd().args(["--json", "runs"]).assert().success();
    let runs = json(&a);
    assert_eq!(runs[0]["id"], "r-contract");
    assert_eq!(runs[0]["status"], "running");
    assert_eq!(runs[0]["program_path"], "demo.prose");
    // an existing id is refused
    let a = p
        .cmd()
        .args(["init", "--run-id", "r-contract"])
        .assert()
        .failure();
    assert_eq!(code(&a), 4);
}

fn bind_get_scopes_and_attachments(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let e1 = run.exec(1, "do a", "executing", None);
    let e2 = run.exec(2, "do b", "executing", Some(e1));
    let e3 = run.exec(3, "do c", "executing", Some(e2));
    let tricky = "it's \"quoted\"; DROP TABLE bindings; --";
    run.bind("x", tricky, None);
    run.bind("x", "at e1", Some(e1));
    run.bind("only_root", "r", None);
    assert_eq!(run.get("x", None), tricky.as_bytes());
    assert_eq!(run.get("x", Some(e3)), b"at e1");
    assert_eq!(run.get("only_root", Some(e3)), b"r");
    let a = run
        .cmd()
        .args(["get", "nope", "--execution-id", &e3.to_string()])
        .assert()
        .failure();
    assert_eq!(code(&a), 3);
    assert!(stderr(&a).contains(&format!(
        "execution {e3} → execution {e2} → execution {e1} → root"
    )));
    let a = run
        .cmd()
        .args(["--json", "get", "x", "--execution-id", &e3.to_string()])
        .assert()
        .success();
    let v = json(&a);
    assert_eq!(
        (
            v["scope"].as_str(),
            v["depth"].as_i64(),
            v["execution_id"].as_i64()
        ),
        (Some("execution"), Some(2), Some(e1))
    );
    // upsert: one row per (name, scope)
    run.bind("x", "again", None);
    assert_eq!(count_rows(&p, &run, "bindings", "name = 'x'"), 2);
    // attachments
    let big = "z".repeat(150_000);
    let a = run
        .cmd()
        .args(["--json", "bind", "big"])
        .write_stdin(big.clone())
        .assert()
        .success();
    let big_path = json(&a)["attachment_path"].as_str().unwrap().to_string();
    assert!(is_attachment_of(&big_path, "big", None), "{big_path}");
    assert_eq!(run.get("big", None), big.as_bytes());
    assert_eq!(run.stored(&big_path).unwrap(), big.as_bytes());
    assert_eq!(
        count_rows(
            &p,
            &run,
            "bindings",
            &format!("name = 'big' AND attachment_path = '{big_path}'")
        ),
        1
    );
    run.bind("big", "small now", None);
    // The replaced value stays for the version that names it, until history is pruned.
    assert_eq!(run.stored(&big_path).unwrap(), big.as_bytes());
    run.cmd()
        .args(["prune", "--history", "1", "--yes"])
        .assert()
        .success();
    assert!(run.stored(&big_path).is_none());
    assert!(run.attachments().is_empty());
    // const
    run.cmd()
        .args(["bind", "c", "1", "--kind", "const"])
        .assert()
        .success();
    let a = run.cmd().args(["bind", "c", "2"]).assert().failure();
    assert_eq!(code(&a), 4);
    assert_eq!(run.get("c", None), b"1");
    // unknown scope
    let a = run
        .cmd()
        .args(["bind", "y", "v", "--execution-id", "999999"])
        .assert()
        .failure();
    assert_eq!(code(&a), 3);
    assert_eq!(count_rows(&p, &run, "bindings", "name = 'y'"), 0);
}

fn exec_append_and_bad_records(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let first = run.exec(5, "parallel:", "started", None);
    let second = run.exec(5, "parallel:a", "completed", Some(first));
    assert!(second > first);
    assert_eq!(count_rows(&p, &run, "execution", "statement_index = 5"), 2);
    for (args, want) in [
        (vec!["--status", "completed", "--parent", "424242"], 3),
        (vec!["--status", "completed", "--metadata", "[1]"], 2),
        (vec!["--status", "running"], 2),
    ] {
        let a = run
            .cmd()
            .args(["exec-append", "--index", "6", "--text", "t"])
            .args(&args)
            .assert()
            .failure();
        assert_eq!(code(&a), want, "{args:?}");
    }
    assert_eq!(count_rows(&p, &run, "execution", "statement_index = 6"), 0);
    run.cmd()
        .args([
            "exec-append",
            "--index",
            "7",
            "--text",
            "x",
            "--status",
            "iteration",
            "--metadata",
            r#"{"loop_id": "l1", "iteration": 3}"#,
        ])
        .assert()
        .success();
    // A loop with no start record is no open loop for the bounded answer (a loop is open
    // while its start is); the whole answer reads every loop record.
    let a = run.cmd().args(["--json", "resume"]).assert().success();
    assert_eq!(json(&a)["loops"], serde_json::json!([]));
    let a = run
        .cmd()
        .args(["--json", "resume", "--all"])
        .assert()
        .success();
    assert_eq!(json(&a)["loops"][0]["iteration"], 3);
}

fn gate_lifecycle_and_fail_closed(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let gate = |id: &str, extra: &[&str]| {
        run.cmd()
            .args(["gates", "create", id, "--prompt", "Deploy?"])
            .args(extra)
            .assert()
            .success();
    };
    gate("deploy", &["--timeout", "1h", "--on-reject", "retry draft"]);
    gate("ops", &["--allow", "ops-team"]);
    let a = p.cmd().args(["--json", "gates"]).assert().success();
    assert_eq!(json(&a).as_array().unwrap().len(), 2, "listed across runs");
    // created after the listing: a 1 s deadline must not race the check above under load
    gate("quick", &["--timeout", "1s"]);
    let a = p
        .cmd()
        .args(["approve", &run.id, "ops", "--yes", "--as", "raymond"])
        .assert()
        .failure();
    assert_eq!(code(&a), 4);
    p.cmd()
        .args([
            "approve",
            &run.id,
            "deploy",
            "--yes",
            "--as",
            "raymond",
            "--comment",
            "LGTM",
        ])
        .assert()
        .success();
    let a = p
        .cmd()
        .args([
            "reject", &run.id, "deploy", "--yes", "--as", "bob", "--reason", "late",
        ])
        .assert()
        .failure();
    assert_eq!(code(&a), 4);
    assert!(stderr(&a).contains("already approved by raymond"));
    p.cmd()
        .args(["gates", "wait", &run.id, "deploy"])
        .assert()
        .success();
    advance_clock(p.root(), 2);
    let a = p
        .cmd()
        .args(["approve", &run.id, "quick", "--yes", "--as", "raymond"])
        .assert()
        .failure();
    assert_eq!(code(&a), 4);
    assert_eq!(
        code(
            &p.cmd()
                .args(["gates", "wait", &run.id, "quick"])
                .assert()
                .failure()
        ),
        6
    );
    assert_eq!(
        count_rows(
            &p,
            &run,
            "gates",
            "id = 'quick' AND status = 'timeout' AND resolved_by = 'system'"
        ),
        1
    );
    assert_eq!(
        count_rows(
            &p,
            &run,
            "gate_audit_log",
            "gate_id = 'quick' AND event_type = 'timeout'"
        ),
        1
    );
    assert_eq!(
        count_rows(&p, &run, "gate_audit_log", "event_type = 'refused'"),
        3
    );
    let a = p
        .cmd()
        .args(["--json", "gates", "audit", "--gate", "deploy"])
        .assert()
        .success();
    let events: Vec<String> = json(&a)
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(events, ["created", "approved", "refused"]);
    p.cmd().args(["gates", "verify"]).assert().success();
    // the log refuses edits at the database itself
    let refused = match &p.pg_url {
        None => run
            .conn()
            .execute("DELETE FROM gate_audit_log", [])
            .is_err(),
        Some(url) => postgres::Client::connect(url, postgres::NoTls)
            .unwrap()
            .execute("UPDATE openprose.gate_audit_log SET principal = 'x'", &[])
            .is_err(),
    };
    assert!(refused, "append-only");
}

fn gate_race_has_one_winner(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "race", "--prompt", "Go?"])
        .assert()
        .success();
    let children: Vec<_> = (0..20)
        .map(|i| {
            p.std_cmd()
                .args([
                    "approve",
                    &run.id,
                    "race",
                    "--yes",
                    "--as",
                    &format!("p{i}"),
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let codes: Vec<i32> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap().status.code().unwrap())
        .collect();
    assert_eq!(codes.iter().filter(|&&c| c == 0).count(), 1, "{codes:?}");
    assert_eq!(codes.iter().filter(|&&c| c == 4).count(), 19, "{codes:?}");
    assert_eq!(
        count_rows(&p, &run, "gate_audit_log", "event_type = 'approved'"),
        1
    );
    assert_eq!(
        count_rows(&p, &run, "gate_audit_log", "event_type = 'refused'"),
        19
    );
    p.cmd().args(["gates", "verify"]).assert().success();
}

fn concurrent_binds_all_land(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let children: Vec<_> = (0..8)
        .map(|w| {
            let mut script = String::new();
            for i in 0..25 {
                script += &format!("\"$BIN\" --run \"$RUN\" bind w{w}_{i} \"v {w} {i}\" >/dev/null || echo FAIL >&2\n");
            }
            sh(p.root(), &script)
                .env("RUN", &run.id)
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        assert_eq!(
            String::from_utf8_lossy(&c.wait_with_output().unwrap().stderr),
            ""
        );
    }
    assert_eq!(count_rows(&p, &run, "bindings", "name LIKE 'w%'"), 200);
}

fn agents_and_segments(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    assert_eq!(
        code(
            &run.cmd()
                .args(["agent", "memory", "captain"])
                .assert()
                .failure()
        ),
        3
    );
    run.cmd()
        .args(["agent", "remember", "captain", "plan A"])
        .assert()
        .success();
    assert_eq!(
        run.cmd()
            .args(["agent", "memory", "captain"])
            .assert()
            .success()
            .get_output()
            .stdout,
        b"plan A"
    );
    let children: Vec<_> = (0..5)
        .map(|_| {
            let script = "for i in 1 2 3 4; do \"$BIN\" --run \"$RUN\" agent segment captain --prompt p --summary s || echo FAIL >&2; done";
            sh(p.root(), script)
                .env("RUN", &run.id)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut numbers: Vec<i64> = Vec::new();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stderr), "");
        numbers.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| l.trim().parse::<i64>().unwrap()),
        );
    }
    numbers.sort();
    assert_eq!(numbers, (1..=20).collect::<Vec<_>>());
    assert_eq!(
        count_rows(&p, &run, "agent_segments", "agent_name = 'captain'"),
        20
    );
    // project scope: a file beside the runs, or the server's run_id NULL rows
    run.cmd()
        .args([
            "agent",
            "--scope",
            "project",
            "remember",
            "librarian",
            "books",
        ])
        .assert()
        .success();
    let a = p
        .cmd()
        .args(["agent", "--scope", "project", "memory", "librarian"])
        .assert()
        .success();
    assert_eq!(a.get_output().stdout, b"books");
    match &p.pg_url {
        None => assert!(p.root().join(".prose/agents.db").is_file()),
        Some(url) => {
            let n: i64 = postgres::Client::connect(url, postgres::NoTls)
                .unwrap()
                .query_one("SELECT COUNT(*) FROM openprose.agents WHERE name = 'librarian' AND run_id IS NULL AND scope = 'project'", &[])
                .unwrap()
                .get(0);
            assert_eq!(n, 1);
            assert!(!p.root().join(".prose/agents.db").exists());
        }
    }
}

fn resume_document(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let x = |i: i64, text: &str, status: &str, meta: &str| {
        run.cmd()
            .args([
                "exec-append",
                "--index",
                &i.to_string(),
                "--text",
                text,
                "--status",
                status,
                "--metadata",
                meta,
            ])
            .assert()
            .success();
    };
    x(
        5,
        "parallel:",
        "started",
        r#"{"parallel_id": "p1", "branches": ["a", "b", "c"]}"#,
    );
    x(
        5,
        "parallel:a",
        "completed",
        r#"{"parallel_id": "p1", "branch": "a"}"#,
    );
    x(
        5,
        "parallel:b",
        "completed",
        r#"{"parallel_id": "p1", "branch": "b"}"#,
    );
    x(
        10,
        "loop",
        "iteration",
        r#"{"loop_id": "l1", "iteration": 2}"#,
    );
    x(15, "session", "retry", r#"{"attempt": 2, "max": 3}"#);
    run.bind("research", "found it", None);
    run.cmd()
        .args(["agent", "remember", "captain", "mem"])
        .assert()
        .success();
    run.cmd()
        .args(["gates", "create", "g1", "--prompt", "ok?"])
        .assert()
        .success();
    run.cmd()
        .args([
            "gates",
            "create",
            "g2",
            "--prompt",
            "ok?",
            "--on-reject",
            "continue",
        ])
        .assert()
        .success();
    p.cmd()
        .args([
            "reject", &run.id, "g2", "--yes", "--as", "x", "--reason", "no",
        ])
        .assert()
        .success();
    run.cmd()
        .args(["finish", "--status", "interrupted"])
        .assert()
        .success();
    let a = run
        .cmd()
        .args(["--json", "resume", "--all"])
        .assert()
        .success();
    let v = json(&a);
    assert_eq!(v["run"]["status"], "running");
    assert_eq!(v["run"]["previous_status"], "interrupted");
    assert_eq!(v["position"]["current"]["statement_text"], "parallel:");
    assert_eq!(v["parallel"][0]["completed"], serde_json::json!(["a", "b"]));
    assert_eq!(v["parallel"][0]["outstanding"], serde_json::json!(["c"]));
    assert_eq!(v["loops"][0]["iteration"], 2);
    assert_eq!(v["retries"][0]["attempt"], 2);
    assert_eq!(v["bindings"][0]["name"], "research");
    assert_eq!(v["agents"][0]["name"], "captain");
    let steps: Vec<(String, String)> = v["gates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["id"].as_str().unwrap().to_string(),
                g["next_step"]["action"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            ("g1".to_string(), "wait".to_string()),
            ("g2".to_string(), "continue".to_string())
        ]
    );
    assert_eq!(
        count_rows(&p, &run, "gate_audit_log", "event_type = 'resumed'"),
        2
    );
    let a = p.cmd().args(["--json", "runs"]).assert().success();
    assert_eq!(
        json(&a)[0]["status"],
        "running",
        "the stored run is running again"
    );
}

fn finished_runs_are_closed(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("x", "1", None);
    run.cmd()
        .args(["finish", "--status", "completed"])
        .assert()
        .success();
    for args in [
        vec!["bind", "y", "2"],
        vec![
            "exec-append",
            "--index",
            "1",
            "--text",
            "t",
            "--status",
            "completed",
        ],
    ] {
        assert_eq!(
            code(&run.cmd().args(&args).assert().failure()),
            4,
            "{args:?}"
        );
    }
    assert_eq!(count_rows(&p, &run, "bindings", "name = 'y'"), 0);
    assert_eq!(run.get("x", None), b"1");
}

/// With `sslmode=require`, a server whose certificate is not trusted (the test cluster's CA is
/// not in the system's roots) is refused with a clear error, and the URL it names has its
/// password masked.
#[test]
fn postgres_tls_required_and_credentials_masked() {
    let Some(p) = Project::on(Backend::Postgres) else {
        return;
    };
    let url = p.pg_url.clone().unwrap();
    let (base, _) = url.split_once('?').unwrap();
    let with_secret = base.replacen("postgres@", "postgres:s3cret-pw@", 1);
    std::fs::write(
        p.root().join(".prose/.env"),
        format!("OPENPROSE_POSTGRES_URL={with_secret}?sslmode=require\n"),
    )
    .unwrap();
    let a = p
        .cmd()
        .args(["init", "--backend", "postgres", "--run-id", "tls"])
        .assert()
        .failure();
    let err = stderr(&a);
    assert_eq!(code(&a), 1, "{err}");
    assert!(err.contains("could not connect to postgres"), "{err}");
    assert!(
        !err.contains("s3cret-pw") && err.contains("postgres:***@"),
        "{err}"
    );
    assert!(
        !p.root().join(".prose/runs/tls").exists(),
        "nothing half-made"
    );
    // and with the password in the URL but TLS not required, everything works and the
    // password appears nowhere in the output
    std::fs::write(
        p.root().join(".prose/.env"),
        format!("OPENPROSE_POSTGRES_URL={with_secret}?sslmode=disable\n"),
    )
    .unwrap();
    let a = p
        .cmd()
        .args(["--json", "init", "--backend", "postgres", "--run-id", "ok"])
        .assert()
        .success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(!out.contains("s3cret-pw") && out.contains(":***@"), "{out}");
    let a = p
        .cmd()
        .args(["--run", "ok", "bind", "x", "1"])
        .assert()
        .success();
    assert!(!String::from_utf8_lossy(&a.get_output().stdout).contains("s3cret-pw"));
}

/// A team shares one server: runs made from another machine (another project root, same
/// database) are listed by `gates` and `runs`, and can be decided from here.
#[test]
fn postgres_lists_runs_made_elsewhere() {
    let Some(here) = Project::on(Backend::Postgres) else {
        return;
    };
    let elsewhere = here.elsewhere();
    elsewhere
        .cmd()
        .args(["init", "--backend", "postgres", "--run-id", "from-afar"])
        .assert()
        .success();
    elsewhere
        .cmd()
        .args([
            "--run",
            "from-afar",
            "gates",
            "create",
            "deploy",
            "--prompt",
            "Ship it?",
        ])
        .assert()
        .success();
    assert!(!here.root().join(".prose/runs/from-afar").exists());
    let a = here.cmd().args(["--json", "gates"]).assert().success();
    let v = stdout_json(&a);
    assert_eq!(v[0]["run_id"], "from-afar");
    assert_eq!(v[0]["id"], "deploy");
    let a = here.cmd().args(["--json", "runs"]).assert().success();
    assert_eq!(stdout_json(&a)[0]["id"], "from-afar");
    // and decided from here, by run id alone
    here.cmd()
        .args(["approve", "from-afar", "deploy", "--yes", "--as", "raymond"])
        .assert()
        .success();
    // The decision is sealed with this machine's key, which the other does not hold: there
    // it is unattested (exit 10), unless accepted as such.
    let wait = ["--run", "from-afar", "gates", "wait", "from-afar", "deploy"];
    let a = elsewhere.cmd().args(wait).assert().failure();
    assert_eq!(code(&a), 10, "{}", stderr(&a));
    let said = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(
        said.contains("UNATTESTED") && said.contains("\"raymond\""),
        "{said}"
    );
    elsewhere
        .cmd()
        .args(wait)
        .arg("--accept-unattested")
        .assert()
        .success();
    // A team that shares one key attests each other's gates: opened there, decided here.
    // (The gate opened before the key was shared stays unattested: its opening is sealed
    // with a key the checker no longer holds.)
    let key = ".home/.prose/audit.key";
    std::fs::copy(here.root().join(key), elsewhere.root().join(key)).unwrap();
    assert_eq!(code(&elsewhere.cmd().args(wait).assert().failure()), 10);
    elsewhere
        .cmd()
        .args([
            "--run",
            "from-afar",
            "gates",
            "create",
            "deploy2",
            "--prompt",
            "again?",
        ])
        .assert()
        .success();
    here.cmd()
        .args([
            "approve",
            "from-afar",
            "deploy2",
            "--yes",
            "--as",
            "raymond",
        ])
        .assert()
        .success();
    let wait2 = [
        "--run",
        "from-afar",
        "gates",
        "wait",
        "from-afar",
        "deploy2",
    ];
    let a = elsewhere.cmd().args(wait2).assert().success();
    assert!(String::from_utf8_lossy(&a.get_output().stdout).contains("approved by raymond"));
}

/// The operator commands where they have meaning on PostgreSQL: stats, doctor, vacuum, log,
/// prune; checkpoint, a SQLite matter, says so.
#[test]
fn postgres_operator_commands() {
    let Some(p) = Project::on(Backend::Postgres) else {
        return;
    };
    let run = p.init();
    run.bind("x", "12345", None);
    run.exec(1, "step", "completed", None);
    let a = run.cmd().args(["--json", "stats"]).assert().success();
    let v = stdout_json(&a);
    assert_eq!(v["runs"][0]["backend"], "postgres");
    assert_eq!(v["runs"][0]["tables"]["bindings"], 1);
    assert_eq!(v["runs"][0]["binding_inline_bytes"], 5);
    assert!(masked_as_it_should(&p, &v.to_string()), "{v}");
    p.cmd().args(["doctor"]).assert().success();
    run.cmd().args(["vacuum"]).assert().success();
    let a = run.cmd().args(["checkpoint"]).assert().failure();
    assert_eq!(code(&a), 2);
    assert!(stderr(&a).contains("PostgreSQL manages its own"));
    let a = run.cmd().args(["log"]).assert().success();
    assert!(String::from_utf8_lossy(&a.get_output().stdout).contains("1→ step ✓"));
    // prune removes the run's rows on the server with its directory
    run.cmd()
        .args(["finish", "--status", "completed"])
        .assert()
        .success();
    let mut c = postgres::Client::connect(p.pg_url.as_deref().unwrap(), postgres::NoTls).unwrap();
    c.execute("UPDATE openprose.run SET started_at = now() - interval '90 days', updated_at = now() - interval '90 days'", &[]).unwrap();
    p.cmd()
        .args(["prune", "--keep-days", "30", "--keep-n", "0", "--yes"])
        .assert()
        .success();
    assert!(!run.dir.exists());
    let n: i64 = c
        .query_one("SELECT COUNT(*) FROM openprose.bindings", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
}

/// A real TLS handshake: `sslmode=require` against the test cluster, which serves TLS with a
/// certificate from a throwaway CA. Trusted through SSL_CERT_FILE, it connects and works;
/// without that CA in the trust store, the certificate is refused.
#[test]
fn postgres_tls_handshake_is_verified() {
    let Some(p) = Project::on(Backend::Postgres) else {
        return;
    };
    let Some(ca) = pg::test_ca() else {
        assert!(
            std::env::var("PROSE_STATE_TEST_PG_URL").is_ok()
                || std::env::var("CI").as_deref() != Ok("true"),
            "the test cluster serves no TLS under CI (openssl missing?)"
        );
        crate::common::skipped("the PostgreSQL server under test serves no TLS of ours");
        return;
    };
    let url = p
        .pg_url
        .clone()
        .unwrap()
        .replace("sslmode=disable", "sslmode=require");
    std::fs::write(
        p.root().join(".prose/.env"),
        format!("OPENPROSE_POSTGRES_URL={url}\n"),
    )
    .unwrap();
    p.cmd()
        .env("SSL_CERT_FILE", &ca)
        .args(["init", "--backend", "postgres", "--run-id", "tls-ok"])
        .assert()
        .success();
    let a = p
        .cmd()
        .env("SSL_CERT_FILE", &ca)
        .args(["--run", "tls-ok", "bind", "x", "over TLS"])
        .assert()
        .success();
    assert!(String::from_utf8_lossy(&a.get_output().stdout).contains("sslmode=require"));
    // the binary's own session is encrypted (seen through `query`, which runs as a role
    // without a superuser's powers)
    let env_file = p.root().join(".prose/.env");
    let settings = std::fs::read_to_string(&env_file).unwrap();
    let reader = pg::as_reader(
        settings
            .trim()
            .trim_start_matches("OPENPROSE_POSTGRES_URL="),
    );
    std::fs::write(&env_file, format!("OPENPROSE_POSTGRES_URL={reader}\n")).unwrap();
    let a = p
        .cmd()
        .env("SSL_CERT_FILE", &ca)
        .args([
            "--run",
            "tls-ok",
            "--json",
            "query",
            "SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        ])
        .assert()
        .success();
    std::fs::write(&env_file, settings).unwrap();
    let v = stdout_json(&a);
    assert_eq!(v[0]["ssl"], true, "{v}");
    assert!(v[0]["version"].as_str().unwrap().starts_with("TLS"), "{v}");
    // an untrusted certificate is refused, not silently accepted
    let a = p
        .cmd()
        .env("SSL_CERT_FILE", "/dev/null")
        .args(["--run", "tls-ok", "get", "x"])
        .assert()
        .failure();
    assert!(
        stderr(&a).contains("could not connect to postgres"),
        "{}",
        stderr(&a)
    );
}
