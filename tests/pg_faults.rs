//! PostgreSQL faults, inherently one backend: a lock held past the busy timeout, a session
//! killed while a command waits, `gates wait` across killed sessions, an idempotent retry of
//! `exec-append`, and connection errors that name their cause without showing the password.
//! (The server is shared by the whole test process, so outages are made by killing its
//! sessions, not by stopping it.)

use crate::common::*;
use std::process::Stdio;
use std::time::{Duration, Instant};

fn client(p: &Project) -> postgres::Client {
    postgres::Client::connect(p.pg_url.as_deref().unwrap(), postgres::NoTls).unwrap()
}

/// The run's rows, for "nothing was written" checks.
fn counts(p: &Project, run: &Run) -> (i64, i64, i64, String) {
    let mut c = client(p);
    let status: String = c
        .query_one("SELECT status FROM openprose.run WHERE id = $1", &[&run.id])
        .unwrap()
        .get(0);
    (
        count_rows(p, run, "bindings", "true"),
        count_rows(p, run, "execution", "true"),
        count_rows(p, run, "gates", "true"),
        status,
    )
}

/// A session holding the run's row `FOR UPDATE` until it is dropped (or rolled back).
fn hold_run_row(p: &Project, run: &Run) -> postgres::Client {
    let mut c = client(p);
    c.batch_execute(&format!(
        "BEGIN; SELECT 1 FROM openprose.run WHERE id = '{}' FOR UPDATE;",
        run.id
    ))
    .unwrap();
    c
}

#[test]
fn a_lock_held_past_the_timeout_is_retryable_and_writes_nothing() {
    let Some(p) = Project::on(Backend::Postgres) else {
        return;
    };
    let run = p.init();
    run.bind("keep", "me", None);
    let before = counts(&p, &run);
    let mut holder = hold_run_row(&p, &run);
    for args in [
        vec!["bind", "x", "1"],
        vec![
            "exec-append",
            "--index",
            "1",
            "--text",
            "t",
            "--status",
            "executing",
        ],
        vec!["finish", "--status", "completed"],
        vec!["gates", "create", "g", "--prompt", "p"],
    ] {
        let a = run
            .cmd()
            .args(["--busy-timeout", "300"])
            .args(&args)
            .assert()
            .failure();
        assert_eq!(code(&a), 75, "{args:?}: {}", stderr(&a));
        assert!(stderr(&a).contains("retry"), "{}", stderr(&a));
        assert_eq!(stderr(&a).lines().count(), 1);
    }
    holder.batch_execute("ROLLBACK").unwrap();
    assert_eq!(counts(&p, &run), before);
}

/// Waits for a backend of this database that waits on a lock, and terminates it.
fn terminate_lock_waiter(c: &mut postgres::Client) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        let rows = c
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()
                   AND wait_event_type = 'Lock'",
                &[],
            )
            .unwrap();
        if !rows.is_empty() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn a_session_killed_mid_command_is_retryable_and_writes_nothing() {
    let Some(p) = Project::on(Backend::Postgres) else {
        return;
    };
    let run = p.init();
    run.bind("keep", "me", None);
    let before = counts(&p, &run);
    for args in [
        vec!["bind", "x", "1"],
        vec![
            "exec-append",
            "--index",
            "1",
            "--text",
            "t",
            "--status",
            "executing",
            "--key",
            "k1",
        ],
    ] {
        let mut holder = hold_run_row(&p, &run);
        let child = run
            .std_cmd()
            .args(["--busy-timeout", "30000"])
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut killer = client(&p);
        assert!(
            terminate_lock_waiter(&mut killer),
            "the command never waited"
        );
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(75), "{args:?}: {err}");
        assert!(err.contains("retry"), "{err}");
        holder.batch_execute("ROLLBACK").unwrap();
        assert_eq!(counts(&p, &run), before, "{args:?}");
    }
    // The retries land, once each.
    run.bind("x", "1", None);
    for _ in 0..3 {
        let a = run
            .cmd()
            .args([
                "exec-append",
                "--index",
                "1",
                "--text",
                "t",
                "--status",
                "executing",
                "--key",
                "k1",
            ])
            .assert()
            .success();
        assert_eq!(String::from_utf8_lossy(&a.get_output().stdout).trim(), "1");
    }
    assert_eq!(
        count_rows(&p, &run, "execution", "idempotency_key = 'k1'"),
        1
    );
    // The same key on another record is refused.
    let a = run
        .cmd()
        .args([
            "exec-append",
            "--index",
            "2",
            "--text",
            "u",
            "--status",
            "executing",
            "--key",
            "k1",
        ])
        .assert()
        .failure();
    assert_eq!(code(&a), 4, "{}", stderr(&a));
}

#[test]
fn gates_wait_lives_through_killed_sessions() {
    let Some(p) = Project::on(Backend::Postgres) else {
        return;
    };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "deploy", "--prompt", "Ship it?"])
        .assert()
        .success();
    let mut waiter = p
        .std_cmd()
        .args([
            "gates",
            "wait",
            &run.id,
            "deploy",
            "--poll",
            "1s",
            "--timeout",
            "60s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut killer = client(&p);
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(1300));
        killer
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
                &[],
            )
            .unwrap();
        assert!(waiter.try_wait().unwrap().is_none(), "gates wait gave up");
    }
    p.cmd()
        .args(["approve", &run.id, "deploy", "--yes", "--as", "alice"])
        .assert()
        .success();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = waiter.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "gates wait never saw the decision"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(waiter.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
}

/// A project whose .env names `url`.
fn project_with_url(url: &str) -> Project {
    let p = Project::new();
    std::fs::create_dir_all(p.root().join(".prose")).unwrap();
    std::fs::write(
        p.root().join(".prose/.env"),
        format!("OPENPROSE_POSTGRES_URL={url}\n"),
    )
    .unwrap();
    p
}

#[test]
fn connection_errors_name_their_cause_and_never_the_password() {
    let Some(base) = pg::server().ok() else {
        return;
    };
    // No such database: not found (3), the server's words.
    let missing = pg::with_database(base, "no_such_database_here");
    let p = project_with_url(&missing);
    let a = p
        .cmd()
        .args(["init", "--backend", "postgres"])
        .assert()
        .failure();
    assert_eq!(code(&a), 3, "{}", stderr(&a));
    assert!(stderr(&a).contains("does not exist"), "{}", stderr(&a));
    assert!(
        stderr(&a).contains("the database does not exist"),
        "{}",
        stderr(&a)
    );
    // Nothing listening: retryable (75), naming the refusal.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let p = project_with_url(&format!(
        "postgresql://u:hidden-secret@127.0.0.1:{port}/db?sslmode=disable"
    ));
    let a = p
        .cmd()
        .args(["init", "--backend", "postgres"])
        .assert()
        .failure();
    assert_eq!(code(&a), 75, "{}", stderr(&a));
    assert!(
        stderr(&a).to_lowercase().contains("refused"),
        "{}",
        stderr(&a)
    );
    assert!(
        stderr(&a).contains("the host could not be reached"),
        "{}",
        stderr(&a)
    );
    assert!(!stderr(&a).contains("hidden-secret"), "{}", stderr(&a));
    if !pg::is_throwaway() {
        return;
    }
    // A password with unencoded `/`, `?` and `@`, which the driver accepts.
    let db = pg::fresh_database().unwrap();
    let secret = "ri/ght?pass";
    let mut admin = postgres::Client::connect(base, postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!(
            "DO $$ BEGIN CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{secret}';
             EXCEPTION WHEN duplicate_object THEN NULL; END $$;",
            role = pg::PASSWORD_ROLE
        ))
        .unwrap();
    let authority = base.split("://").nth(1).unwrap().split('/').next().unwrap();
    let host = authority.rsplit('@').next().unwrap();
    let dbname = db.rsplit('/').next().unwrap().split('?').next().unwrap();
    let url = |pw: &str| {
        format!(
            "postgresql://{}:{pw}@{host}/{dbname}?sslmode=disable",
            pg::PASSWORD_ROLE
        )
    };
    // The wrong one: the server says so; neither password appears.
    let p = project_with_url(&url("wr/ong?pass"));
    let a = p
        .cmd()
        .args(["init", "--backend", "postgres"])
        .assert()
        .failure();
    assert_eq!(code(&a), 1, "{}", stderr(&a));
    assert!(
        stderr(&a).contains("password authentication failed"),
        "{}",
        stderr(&a)
    );
    assert!(
        stderr(&a).contains("authentication failed ("),
        "{}",
        stderr(&a)
    );
    for part in ["wr/ong", "ong?pa"] {
        assert!(!stderr(&a).contains(part), "{}", stderr(&a));
    }
    // The right one: it works, and no output shows it.
    let p = project_with_url(&url(secret));
    let a = p
        .cmd()
        .args(["--json", "init", "--backend", "postgres"])
        .assert()
        .success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    let id = stdout_json(&a)["run_id"].as_str().unwrap().to_string();
    let mut shown = out;
    for args in [
        vec!["--json", "--run", &id, "bind", "x", "1"],
        vec!["--run", &id, "stats"],
        vec!["--json", "--run", &id, "stats"],
        vec!["--run", "no-such-run", "get", "x"],
    ] {
        let a = p.cmd().args(&args).assert();
        shown += &String::from_utf8_lossy(&a.get_output().stdout);
        shown += &String::from_utf8_lossy(&a.get_output().stderr);
    }
    for part in ["ri/ght", "ght?pa", secret] {
        assert!(!shown.contains(part), "{part} shown in: {shown}");
    }
    assert!(shown.contains(":***@"), "{shown}");
}

/// Every file under a directory, as text, for "the secret is written nowhere" checks.
fn all_files(dir: &std::path::Path) -> String {
    let mut out = String::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                out += &all_files(&path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out += &String::from_utf8_lossy(&bytes);
            }
        }
    }
    out
}

/// Passwords holding each of `/ ? @ : # %`, raw and percent-encoded, in the userinfo and in a
/// `password` parameter: no output, error or file ever shows any part of them. (The server
/// trusts the role these URLs name, so each connects whatever the password says, and the
/// commands that print the URL run.)
#[test]
fn passwords_with_special_characters_are_never_shown() {
    let Some(base) = pg::server().ok() else {
        return;
    };
    let words = ["alpha", "bravo", "charlie", "delta"];
    let passwords = [
        "alpha/bravo?charlie",
        "alpha:bravo#charlie",
        "alpha%bravo%zzcharlie",
        "alpha%2Fbravo%3Fcharlie%40delta",
        "alpha%3Abravo%23charlie%25delta",
        "alpha@bravo@charlie",
        "alpha/bravo?charlie@delta:x#y%z",
    ];
    let db = pg::fresh_database().unwrap();
    let authority = base.split("://").nth(1).unwrap().split('/').next().unwrap();
    let host = authority.rsplit('@').next().unwrap();
    let dbname = db.rsplit('/').next().unwrap().split('?').next().unwrap();
    for pw in passwords {
        for (i, url) in [
            format!("postgresql://postgres:{pw}@{host}/{dbname}?sslmode=disable"),
            format!("postgresql://postgres@{host}/{dbname}?sslmode=disable&password={pw}"),
            format!("postgresql://postgres:{pw}@{host}/no_such_db?sslmode=disable"),
        ]
        .into_iter()
        .enumerate()
        {
            let p = project_with_url(&url);
            let mut shown = String::new();
            let a = p
                .cmd()
                .args(["--json", "init", "--backend", "postgres"])
                .assert();
            shown += &String::from_utf8_lossy(&a.get_output().stdout);
            shown += &String::from_utf8_lossy(&a.get_output().stderr);
            // Where the driver reads the URL as meant, the commands that print it ran.
            let works = i < 2 && !(i == 0 && pw.contains('@'));
            assert_eq!(a.get_output().status.success(), works, "{url}: {shown}");
            let id = serde_json::from_slice::<serde_json::Value>(&a.get_output().stdout)
                .ok()
                .and_then(|v| v["run_id"].as_str().map(str::to_string))
                .unwrap_or_else(|| "no-run".into());
            for args in [
                vec!["--json", "--run", &id, "bind", "x", "1"],
                vec!["--run", &id, "bind", "y", "2"],
                vec!["--run", &id, "stats"],
                vec!["--json", "--run", &id, "stats"],
                vec!["--run", "no-such-run", "get", "x"],
                vec!["runs"],
                vec!["doctor"],
                vec!["--run", &id, "query", "SELECT 1"],
            ] {
                let a = p.cmd().args(&args).assert();
                shown += &String::from_utf8_lossy(&a.get_output().stdout);
                shown += &String::from_utf8_lossy(&a.get_output().stderr);
            }
            // Files the commands wrote, the test's home (audit key, anchors) included; the
            // project's own .env, which holds the URL by the user's hand, excepted.
            std::fs::remove_file(p.root().join(".prose/.env")).unwrap();
            shown += &all_files(p.root());
            for w in words {
                assert!(!shown.contains(w), "{url}: {w} shown in:\n{shown}");
            }
            assert!(shown.contains("***"), "{url}: {shown}");
        }
    }
}

/// `.prose/.env` is read as a shell reads it: `export`, quotes, and a comment after the value.
#[test]
fn env_lines_are_read_as_a_shell_reads_them() {
    let Some(url) = pg::fresh_database() else {
        return;
    };
    for line in [
        format!("export OPENPROSE_POSTGRES_URL=\"{url}\"  # the team's server"),
        format!("OPENPROSE_POSTGRES_URL='{url}' # quoted"),
        format!("  export\tOPENPROSE_POSTGRES_URL={url} # bare"),
    ] {
        let p = Project::new();
        std::fs::create_dir_all(p.root().join(".prose")).unwrap();
        p.write(".prose/.env", format!("# settings\n{line}\n").as_bytes());
        let a = p
            .cmd()
            .args(["--json", "init", "--backend", "postgres"])
            .assert()
            .success();
        let id = stdout_json(&a)["run_id"].as_str().unwrap().to_string();
        p.cmd()
            .args(["--run", &id, "bind", "x", "1"])
            .assert()
            .success();
    }
}
