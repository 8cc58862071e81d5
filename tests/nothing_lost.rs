//! "Nothing lost": the attachment path attacked the way the battery that found issue 10 did.
//! Scope names that collided, large rebinds killed between their file's rename and their
//! row's commit, `doctor --fix` racing live writers, and symlinks and raw-SQL paths that led
//! out of the run. Each test drives the binary, then reads the database and the files.

use crate::common::*;
use rand::Rng;
use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

on_both!(
    scoped_and_root_names_never_share_a_file,
    killed_large_rebinds_never_show_uncommitted_bytes,
    doctor_fix_never_breaks_live_writers,
);

/// The reported repro: root binding `x__5` and `x` in execution 5 used to be one file.
fn scoped_and_root_names_never_share_a_file(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    for i in 1..=5 {
        run.exec(i, "s", "executing", None);
    }
    let a_value = "A".repeat(150_000);
    let b_value = "B".repeat(150_000);
    run.cmd()
        .args(["bind", "x__5", "--summary", "A"])
        .write_stdin(a_value.clone())
        .assert()
        .success();
    run.cmd()
        .args(["bind", "x", "--execution-id", "5", "--summary", "B"])
        .write_stdin(b_value.clone())
        .assert()
        .success();
    assert!(
        run.get("x__5", None) == a_value.as_bytes(),
        "x__5 lost its value"
    );
    assert!(
        run.get("x", Some(5)) == b_value.as_bytes(),
        "x in 5 lost its value"
    );
    // Every name and scope the old naming confused, each with its own file.
    run.cmd()
        .args(["bind", "x", "--summary", "root x"])
        .write_stdin("C".repeat(150_000))
        .assert()
        .success();
    assert!(
        run.get("x__5", None) == a_value.as_bytes(),
        "x__5 lost its value"
    );
    assert!(
        run.get("x", Some(5)) == b_value.as_bytes(),
        "x in 5 lost its value"
    );
    assert!(
        run.get("x", None) == "C".repeat(150_000).as_bytes(),
        "root x lost its value"
    );
    assert_eq!(
        count_rows(&p, &run, "bindings", "attachment_path IS NOT NULL"),
        3
    );
    let a = p.cmd().args(["doctor"]).assert().success();
    assert!(String::from_utf8_lossy(&a.get_output().stdout).starts_with("healthy"));
}

/// A value whose attempt number can be read back from its first bytes.
fn marked(attempt: usize, size: usize) -> Vec<u8> {
    let mut v = format!("<attempt {attempt}>").into_bytes();
    v.resize(size, b'x');
    v
}

fn attempt_of(bytes: &[u8]) -> Option<usize> {
    let s = std::str::from_utf8(&bytes[..bytes.len().min(40)]).ok()?;
    s.strip_prefix("<attempt ")?.split('>').next()?.parse().ok()
}

/// Large rebinds of one name SIGKILLed at random moments across each writer's lifetime.
/// After each, the committed row (its summary names its attempt) and the bytes `get` returns
/// must be the same attempt: never bytes that did not commit.
fn killed_large_rebinds_never_show_uncommitted_bytes(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    const SIZE: usize = 1_000_000;
    run.cmd()
        .args(["bind", "big", "--summary", "attempt 0"])
        .write_stdin(marked(0, SIZE))
        .assert()
        .success();
    // How long one bind takes here, to spread the kills across its whole life. The estimate
    // follows the machine's speed: it shrinks when a writer finished before its kill and
    // grows when it did not, so the kills land all along a writer's life however loaded
    // the machine is.
    let t = Instant::now();
    run.cmd()
        .args(["bind", "big", "--summary", "attempt 1"])
        .write_stdin(marked(1, SIZE))
        .assert()
        .success();
    let mut life = t.elapsed().as_micros().max(2_000) as f64;
    let mut rng = rand::rng();
    let (mut killed, mut finished) = (0, 0);
    let started = Instant::now();
    for attempt in 2..122 {
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "only {attempt} attempts in 240 s"
        );
        let mut child = run
            .std_cmd()
            .args(["bind", "big", "--summary", &format!("attempt {attempt}")])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let value = marked(attempt, SIZE);
        let feeder = std::thread::spawn(move || {
            let _ = stdin.write_all(&value);
        });
        let upper = (life * 1.2) as u64;
        std::thread::sleep(Duration::from_micros(rng.random_range(0..upper.max(1))));
        let _ = child.kill();
        let status = child.wait().unwrap();
        let _ = feeder.join();
        if status.success() {
            finished += 1;
            life = (life * 0.85).max(1_000.0);
        } else {
            killed += 1;
            life *= 1.05;
        }
        // On PostgreSQL a killed writer's COMMIT may still be on its way through the server
        // after the process is gone: what committed is settled only once its session is.
        if let Some(url) = &run.pg_url {
            pg::await_no_other_sessions(url);
        }
        // What committed, and what get returns.
        let a = run.cmd().args(["--json", "get", "big"]).assert().success();
        let summary = stdout_json(&a)["value"].as_str().unwrap().to_string();
        let committed: usize = summary.strip_prefix("attempt ").unwrap().parse().unwrap();
        let bytes = run.get("big", None);
        assert_eq!(bytes.len(), SIZE);
        assert_eq!(
            attempt_of(&bytes),
            Some(committed),
            "the row says attempt {committed}, the file holds another (attempt {attempt})"
        );
    }
    assert!(killed >= 20, "killed {killed}, finished {finished}");
    // What the kills left behind is only unreferenced files, which doctor --fix collects.
    let _ = p.cmd().args(["doctor", "--fix"]).assert();
    let a = p.cmd().args(["doctor"]).assert().success();
    assert!(String::from_utf8_lossy(&a.get_output().stdout).starts_with("healthy"));
    // Only committed versions are left; with history pruned to the current one, only its
    // file, or on the server its chunks.
    run.cmd()
        .args(["prune", "--history", "1", "--yes"])
        .assert()
        .success();
    let kept = run.attachments();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let path = run.view().binding("big", None).unwrap().4.unwrap();
    assert_eq!(kept, [path]);
}

/// `doctor --fix` in a loop while large binds run: no bind fails other than retryably (75),
/// and every bind that succeeded can be read whole afterwards.
fn doctor_fix_never_breaks_live_writers(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let doctor = {
        let stop = stop.clone();
        let mut cmd = p.std_cmd();
        cmd.args(["doctor", "--fix"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                cmd.status().unwrap();
                n += 1;
            }
            n
        })
    };
    let mut children = Vec::new();
    for i in 0..40 {
        let name = format!("v{}", i % 8);
        let mut child = run
            .std_cmd()
            .args(["bind", &name, "--summary", &format!("attempt {i}")])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        // Fed slowly, so the temporary file lives long while doctor looks at it.
        let feeder = std::thread::spawn(move || {
            let value = marked(i, 400_000);
            for chunk in value.chunks(100_000) {
                let _ = stdin.write_all(chunk);
                std::thread::sleep(Duration::from_millis(15));
            }
        });
        children.push((name, i, child, feeder));
        if children.len() >= 8 {
            let (name, i, child, feeder) = children.remove(0);
            check_writer(&run, name, i, child, feeder);
        }
    }
    for (name, i, child, feeder) in children {
        check_writer(&run, name, i, child, feeder);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(doctor.join().unwrap() > 0);
    let _ = p.cmd().args(["doctor", "--fix"]).assert();
    let a = p.cmd().args(["doctor"]).assert().success();
    assert!(String::from_utf8_lossy(&a.get_output().stdout).starts_with("healthy"));
    for n in 0..8 {
        let name = format!("v{n}");
        let a = run.cmd().args(["--json", "get", &name]).assert().success();
        let summary = stdout_json(&a)["value"].as_str().unwrap().to_string();
        let committed: usize = summary.strip_prefix("attempt ").unwrap().parse().unwrap();
        assert_eq!(attempt_of(&run.get(&name, None)), Some(committed));
    }
}

fn check_writer(
    run: &Run,
    name: String,
    i: usize,
    child: std::process::Child,
    feeder: std::thread::JoinHandle<()>,
) {
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    let code = out.status.code().unwrap_or(-1);
    assert!(
        code == 0 || code == 75,
        "bind {name} attempt {i} exited {code}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    if code == 0 {
        // Readable whole right away (a later attempt on the same name may have won since).
        assert!(attempt_of(&run.get(&name, None)).is_some());
    }
}

/// A symlinked attachments/ is refused for writes and reads, reported by doctor, and nothing
/// outside the run is touched by any of them, `doctor --fix` included.
#[test]
fn a_symlinked_attachments_directory_is_never_followed() {
    let p = Project::new();
    let run = p.init();
    run.cmd()
        .args(["bind", "kept", "--attach-over", "10"])
        .write_stdin("a".repeat(100))
        .assert()
        .success();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("precious.md"), "not the run's").unwrap();
    // Move the real directory aside and put a link in its place.
    std::fs::rename(run.dir.join("attachments"), run.dir.join("real")).unwrap();
    std::os::unix::fs::symlink(outside.path(), run.dir.join("attachments")).unwrap();
    let before = run.snapshot();
    let a = run
        .cmd()
        .args(["bind", "big", "--attach-over", "10"])
        .write_stdin("b".repeat(100))
        .assert()
        .failure();
    assert_eq!(code(&a), 4, "{}", stderr(&a));
    assert!(stderr(&a).contains("symlink"), "{}", stderr(&a));
    assert_eq!(run.snapshot(), before);
    let a = run.cmd().args(["get", "kept"]).assert().failure();
    assert_eq!(code(&a), 4, "{}", stderr(&a));
    let a = p.cmd().args(["doctor", "--fix"]).assert().failure();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(out.contains("unsafe attachment"), "{out}");
    let names: Vec<_> = std::fs::read_dir(outside.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names, ["precious.md"]);
    assert_eq!(
        std::fs::read_to_string(outside.path().join("precious.md")).unwrap(),
        "not the run's"
    );
}

/// Rows written by raw SQL whose attachment_path leaves the run: refused, never read.
#[test]
fn attachment_paths_outside_the_run_are_refused() {
    let p = Project::new();
    let run = p.init();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "do not stream me").unwrap();
    std::os::unix::fs::symlink(&secret, run.dir.join("attachments/link.md")).unwrap();
    let paths = [
        secret.display().to_string(),
        "/etc/hostname".to_string(),
        "attachments/../../../../etc/hostname".to_string(),
        "../state.db".to_string(),
        "attachments/link.md".to_string(),
        "attachments/".to_string(),
    ];
    for (i, path) in paths.iter().enumerate() {
        run.conn()
            .execute(
                "INSERT INTO bindings (name, value, attachment_path) VALUES (?1, 'x', ?2)",
                rusqlite::params![format!("n{i}"), path],
            )
            .unwrap();
    }
    let before = run.snapshot();
    for (i, path) in paths.iter().enumerate() {
        let a = run.cmd().args(["get", &format!("n{i}")]).assert().failure();
        assert_eq!(code(&a), 4, "{path}: {}", stderr(&a));
        assert!(a.get_output().stdout.is_empty());
        // A rebind replaces the row; the file the old row named is never removed.
        run.bind(&format!("n{i}"), "fresh", None);
    }
    assert!(secret.is_file());
    assert!(std::path::Path::new("/etc/hostname").is_file());
    assert_ne!(run.snapshot(), before);
    // doctor reports the link and removes nothing outside.
    let a = p.cmd().args(["doctor", "--fix"]).assert().failure();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(out.contains("attachments/link.md is a symlink"), "{out}");
    assert!(secret.is_file());
    assert!(run
        .dir
        .join("attachments/link.md")
        .symlink_metadata()
        .is_ok());
}

/// A symlinked state.db is reported.
#[test]
fn doctor_reports_a_symlinked_state_db() {
    let p = Project::new();
    let run = p.init();
    let elsewhere = p.root().join("elsewhere.db");
    // Moved as one file: its log folded in first.
    run.cmd().args(["checkpoint"]).assert().success();
    std::fs::rename(&run.db, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &run.db).unwrap();
    let a = p.cmd().args(["doctor"]).assert().failure();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(out.contains("state.db is a symlink"), "{out}");
}

/// `init` SIGKILLed at random moments through its life: afterwards the id is either a
/// complete run or free, never held by a half-made directory; what the kills left is removed
/// by `doctor --fix`, and `prune` never stops on it.
#[test]
fn a_killed_init_leaves_nothing_that_holds_an_id() {
    let p = Project::new();
    p.cmd()
        .args(["init", "--run-id", "warm"])
        .assert()
        .success();
    let t = Instant::now();
    p.cmd()
        .args(["init", "--run-id", "timed"])
        .assert()
        .success();
    // Follows the machine's speed, as in the rebind kill loop.
    let mut life = t.elapsed().as_micros().max(2_000) as f64;
    let mut rng = rand::rng();
    let started = Instant::now();
    let (mut complete, mut free) = (0, 0);
    for i in 0..150 {
        if started.elapsed() > Duration::from_secs(60) {
            break;
        }
        let id = format!("k{i}");
        let mut child = p
            .std_cmd()
            .args(["init", "--run-id", &id])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_micros(
            rng.random_range(0..(life as u64).max(1)),
        ));
        let _ = child.kill();
        if child.wait().unwrap().success() {
            life = (life * 0.85).max(500.0);
        } else {
            life *= 1.05;
        }
        let dir = p.root().join(".prose/runs").join(&id);
        if dir.exists() {
            // In place means complete: the run row is there and the run opens.
            let a = p
                .cmd()
                .args(["--run", &id, "--json", "runs"])
                .assert()
                .success();
            assert!(stdout_json(&a).to_string().contains(&id));
            p.cmd()
                .args(["--run", &id, "bind", "x", "1"])
                .assert()
                .success();
            complete += 1;
        } else {
            // Free: the same id can be made now.
            p.cmd().args(["init", "--run-id", &id]).assert().success();
            free += 1;
        }
    }
    assert!(free > 0, "complete {complete}, free {free}");
    let a = p
        .cmd()
        .args(["prune", "--keep-days", "0", "--keep-n", "0"])
        .assert()
        .success();
    assert!(!stderr(&a).contains("error"));
    let _ = p.cmd().args(["doctor", "--fix"]).assert();
    let a = p.cmd().args(["doctor"]).assert().success();
    assert!(String::from_utf8_lossy(&a.get_output().stdout).starts_with("healthy"));
    let leftovers = std::fs::read_dir(p.root().join(".prose/runs"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .count();
    assert_eq!(leftovers, 0);
}

/// Half-made run directories an older version's killed init left: doctor lists them,
/// `doctor --fix` removes them, the id can be used again, and prune is not blocked.
#[test]
fn leftovers_of_older_inits_are_listed_and_removed() {
    let p = Project::new();
    let good = p.init();
    let runs = p.root().join(".prose/runs");
    std::fs::create_dir_all(runs.join("empty-db/attachments")).unwrap();
    std::fs::write(runs.join("empty-db/state.db"), b"").unwrap();
    std::fs::create_dir_all(runs.join("no-db/attachments")).unwrap();
    std::fs::create_dir_all(runs.join("schemaless")).unwrap();
    rusqlite::Connection::open(runs.join("schemaless/state.db"))
        .unwrap()
        .execute_batch("PRAGMA journal_mode = WAL;")
        .unwrap();
    let a = p
        .cmd()
        .args(["init", "--run-id", "empty-db"])
        .assert()
        .failure();
    assert_eq!(code(&a), 4);
    let a = p.cmd().args(["doctor"]).assert().failure();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    for id in ["empty-db", "no-db", "schemaless"] {
        assert!(out.contains(&format!("{id}: incomplete run")), "{out}");
    }
    assert!(!out.contains(&good.id), "{out}");
    let a = p.cmd().args(["doctor", "--fix"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(out.contains("(fixed)"), "{out}");
    for id in ["empty-db", "no-db", "schemaless"] {
        assert!(!runs.join(id).exists());
    }
    assert!(good.db.is_file());
    p.cmd()
        .args(["init", "--run-id", "empty-db"])
        .assert()
        .success();
}

/// An unreadable run is kept, with its reason, and the other runs are pruned as usual.
#[test]
fn prune_skips_an_unreadable_run_and_prunes_the_rest() {
    let p = Project::new();
    let old = aged(&p, "completed", 40);
    let broken = aged(&p, "completed", 40);
    std::fs::write(&broken.db, b"this is not a database at all, and never was").unwrap();
    let a = p
        .cmd()
        .args([
            "--json",
            "prune",
            "--keep-days",
            "30",
            "--keep-n",
            "0",
            "--yes",
        ])
        .assert()
        .success();
    let v = stdout_json(&a);
    let entry = |id: &str| {
        v["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["run_id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(entry(&old.id)["done"], true);
    assert_eq!(entry(&broken.id)["action"], "keep");
    assert!(entry(&broken.id)["reason"]
        .as_str()
        .unwrap()
        .contains("unreadable"));
    assert!(!old.dir.exists());
    assert!(broken.db.is_file(), "what cannot be read is never deleted");
    assert!(
        stderr(&a).contains(&format!("warning: skipped run {}", broken.id)),
        "{}",
        stderr(&a)
    );
}

/// An archive that already holds one of the runs refuses the whole prune, listing the
/// conflicts, before anything moves.
#[test]
fn prune_archive_conflicts_refuse_before_anything_moves() {
    let p = Project::new();
    let runs: Vec<Run> = (0..4).map(|_| aged(&p, "completed", 40)).collect();
    let archive = p.root().join("archive");
    std::fs::create_dir_all(archive.join(&runs[2].id)).unwrap();
    let a = p
        .cmd()
        .args([
            "prune",
            "--keep-days",
            "30",
            "--keep-n",
            "0",
            "--yes",
            "--archive",
        ])
        .arg(&archive)
        .assert()
        .failure();
    assert_eq!(code(&a), 4, "{}", stderr(&a));
    assert!(stderr(&a).contains(&runs[2].id), "{}", stderr(&a));
    assert_eq!(stderr(&a).lines().count(), 1);
    for r in &runs {
        assert!(r.db.is_file(), "{} was moved", r.id);
    }
    assert_eq!(std::fs::read_dir(&archive).unwrap().count(), 1);
    // Without the conflict, all four move.
    std::fs::remove_dir(archive.join(&runs[2].id)).unwrap();
    p.cmd()
        .args([
            "prune",
            "--keep-days",
            "30",
            "--keep-n",
            "0",
            "--yes",
            "--archive",
        ])
        .arg(&archive)
        .assert()
        .success();
    for r in &runs {
        assert!(archive.join(&r.id).join("state.db").is_file());
    }
}

on_both!(exit_codes_as_documented);

/// The exit codes the battery found wrong, each with the state checked unchanged.
fn exit_codes_as_documented(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("keep", "me", None);
    run.cmd()
        .args(["agent", "remember", "bot", "memory"])
        .assert()
        .success();
    let rows = || {
        (
            count_rows(&p, &run, "bindings", "true"),
            count_rows(&p, &run, "agents", "memory = 'memory'"),
        )
    };
    let before = rows();
    // No value: stdin at EOF before any byte (/dev/null, an empty pipe), implicit or `-`.
    for args in [
        vec!["bind", "x"],
        vec!["bind", "x", "-"],
        vec!["agent", "remember", "bot"],
        vec!["bind", "keep"],
    ] {
        let out = run
            .std_cmd()
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("no value given"), "{err}");
        let a = run.cmd().args(&args).write_stdin("").assert().failure();
        assert_eq!(code(&a), 2, "{args:?}");
    }
    assert_eq!(rows(), before);
    assert_eq!(run.get("keep", None), b"me");
    // An intentionally empty value is VALUE "".
    run.cmd().args(["bind", "empty", ""]).assert().success();
    assert_eq!(run.get("empty", None), b"");
    // An open pipe that is idle for a while simply waits for its producer.
    let mut child = run
        .std_cmd()
        .args(["bind", "slow"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        child.try_wait().unwrap().is_none(),
        "bind gave up on an idle pipe"
    );
    stdin.write_all(b"finally").unwrap();
    drop(stdin);
    assert!(child.wait().unwrap().success());
    assert_eq!(run.get("slow", None), b"finally");
    // An invalid name is 2 in reads too.
    for args in [
        vec!["get", "../x"],
        vec!["get", "a/b"],
        vec!["agent", "memory", "../x"],
    ] {
        let a = run.cmd().args(&args).assert().failure();
        assert_eq!(code(&a), 2, "{args:?}: {}", stderr(&a));
    }
    // More than one statement is 2, whatever the statements.
    let before = rows();
    for sql in [
        "SELECT 1; SELECT 2",
        "SELECT 1; DELETE FROM bindings",
        "DELETE FROM bindings; SELECT 1",
    ] {
        let a = run.cmd().args(["query", sql]).assert().failure();
        assert_eq!(code(&a), 2, "{sql}: {}", stderr(&a));
    }
    assert_eq!(rows(), before);
    if b == Backend::Sqlite {
        for sql in [
            "SELECT load_extension('/tmp/nothing')",
            "SELECT LOAD_EXTENSION('x', 'y')",
            "DELETE FROM bindings",
            "ATTACH 'x.db' AS x",
        ] {
            let a = run.cmd().args(["query", sql]).assert().failure();
            assert_eq!(code(&a), 4, "{sql}: {}", stderr(&a));
        }
        assert_eq!(rows(), before);
    }
}

/// Waits for every child; each must have succeeded.
fn all_succeed(children: Vec<std::process::Child>) {
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// First writes racing each other (the agents.db being created, an older state.db being
/// upgraded): every one lands; none fails, let alone with a non-retryable code.
#[test]
fn racing_first_writes_all_land() {
    let p = Project::new();
    let run = p.init();
    let children: Vec<_> = (0..16)
        .map(|i| {
            run.std_cmd()
                .args([
                    "agent",
                    "--scope",
                    "project",
                    "remember",
                    &format!("a{i}"),
                    "m",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    all_succeed(children);
    let n: i64 = rusqlite::Connection::open(p.root().join(".prose/agents.db"))
        .unwrap()
        .query_row("SELECT COUNT(*) FROM agents", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 16);
    // An older file that a write upgrades, 16 writers at once.
    let dir = p.root().join(".prose/runs/20260116-143052-a7b3c9");
    std::fs::create_dir_all(dir.join("attachments")).unwrap();
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v0-raw-sqlite3.db"),
        dir.join("state.db"),
    )
    .unwrap();
    let children: Vec<_> = (0..16)
        .map(|i| {
            p.std_cmd()
                .args([
                    "--run",
                    "20260116-143052-a7b3c9",
                    "bind",
                    &format!("b{i}"),
                    "v",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    all_succeed(children);
    let n: i64 = rusqlite::Connection::open(dir.join("state.db"))
        .unwrap()
        .query_row(
            "SELECT COUNT(*) FROM bindings WHERE name LIKE 'b%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 16);
}

/// Attachments named the old way (`{name}.md`, `{name}__{id}.md`) stay readable through their
/// rows; a rebind gives the value a file of its own and removes the old one.
#[test]
fn attachments_named_by_older_versions_stay_readable() {
    let p = Project::new();
    let run = p.init();
    let e = run.exec(1, "block", "executing", None);
    std::fs::write(run.dir.join("attachments/old.md"), "root value, old naming").unwrap();
    std::fs::write(
        run.dir.join(format!("attachments/old__{e}.md")),
        "scoped value, old naming",
    )
    .unwrap();
    let c = run.conn();
    c.execute(
        "INSERT INTO bindings (name, execution_id, kind, value, attachment_path)
         VALUES ('old', NULL, 'let', 'summary', 'attachments/old.md'),
                ('old', ?1, 'let', 'summary', ?2)",
        rusqlite::params![e, format!("attachments/old__{e}.md")],
    )
    .unwrap();
    drop(c);
    assert_eq!(run.get("old", None), b"root value, old naming");
    assert_eq!(run.get("old", Some(e)), b"scoped value, old naming");
    let a = p.cmd().args(["doctor"]).assert().success();
    assert!(String::from_utf8_lossy(&a.get_output().stdout).starts_with("healthy"));
    run.cmd()
        .args(["bind", "old", "--attach-over", "4"])
        .write_stdin("a new, larger value")
        .assert()
        .success();
    assert_eq!(run.get("old", None), b"a new, larger value");
    // The older file stays for the version that names it, until history is pruned.
    assert!(run.dir.join("attachments/old.md").exists());
    run.cmd()
        .args(["prune", "--history", "1", "--yes"])
        .assert()
        .success();
    assert!(!run.dir.join("attachments/old.md").exists());
    assert_eq!(run.get("old", Some(e)), b"scoped value, old naming");
}
