//! Cross-run listings from the project catalog (SQLite) and from single queries (PostgreSQL):
//! what they list must be what reading every run alone (`--scan`) lists, under concurrent
//! gate decisions and timeouts, with writers SIGKILLed between their run's commit and the
//! catalog's update, after raw SQL behind prose-state's back, and with the catalog deleted,
//! corrupt or of another version.

use crate::common::*;
use rand::Rng;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

on_both!(
    listings_equal_every_run_read_alone_under_concurrent_decisions,
    cross_run_stats_equal_every_run_opened,
);

/// A listing's JSON with what depends on the second it ran in (time left) taken out, and the
/// integrity a `--scan` adds (it checks each gate against its sealed log; a catalog listing
/// does not, and says so): the rows themselves are compared.
fn listing(p: &Project, args: &[&str]) -> serde_json::Value {
    let a = p.cmd().arg("--json").args(args).assert().success();
    let mut v = stdout_json(&a);
    for row in v.as_array_mut().unwrap() {
        row.as_object_mut().unwrap().remove("time_left_seconds");
        row.as_object_mut().unwrap().remove("integrity");
    }
    v
}

fn spawn(p: &Project, script: &str) -> Child {
    sh(p.root(), script)
        .env("BIN", BIN)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// 50 runs; gates created, approved, rejected and timing out from concurrent processes while
/// others list; afterwards the listings equal what every run read alone says.
fn listings_equal_every_run_read_alone_under_concurrent_decisions(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let runs: Vec<Run> = (0..50).map(|_| p.init()).collect();
    for (i, run) in runs.iter().enumerate() {
        for (gate, timeout) in [
            ("a", None),
            ("b", (i % 3 == 0).then_some("2s")),
            ("c", None),
        ] {
            let mut cmd = run.cmd();
            cmd.args(["gates", "create", gate, "--prompt", "Ship it?"]);
            if let Some(t) = timeout {
                cmd.args(["--timeout", t]);
            }
            cmd.assert().success();
        }
    }
    let started = Instant::now();
    // The first listing builds the catalog; every change after it goes through it.
    listing(&p, &["gates"]);
    let mut children = Vec::new();
    for w in 0..10 {
        let mut script = String::new();
        for (i, run) in runs.iter().enumerate().filter(|(i, _)| i % 10 == w) {
            let id = &run.id;
            if i % 2 == 0 {
                script += &format!(
                    "\"$BIN\" approve {id} a --yes --as alice || echo FAIL approve {id} >&2\n"
                );
            }
            if i % 5 == 0 {
                script += &format!(
                    "\"$BIN\" reject {id} c --reason no --yes --as bob || echo FAIL reject {id} >&2\n"
                );
            }
            script += &format!(
                "\"$BIN\" --run {id} gates create d --prompt 'And this?' || echo FAIL create {id} >&2\n"
            );
            if i % 7 == 0 {
                script += &format!(
                    "\"$BIN\" --run {id} finish --status failed || echo FAIL finish {id} >&2\n"
                );
            }
        }
        children.push(spawn(&p, &script));
    }
    // Listings meanwhile (they sweep and repair as they go).
    for _ in 0..2 {
        children.push(spawn(
            &p,
            "for i in 1 2 3 4 5 6; do \"$BIN\" --json gates >/dev/null || echo FAIL list >&2; \"$BIN\" --json runs >/dev/null || echo FAIL runs >&2; done",
        ));
    }
    let mut failures = String::new();
    for c in children {
        failures += &String::from_utf8_lossy(&c.wait_with_output().unwrap().stderr);
    }
    assert_eq!(failures, "", "failed commands");
    // Past every deadline: the `b` gates time out on the next listing.
    if let Some(left) = Duration::from_millis(2500).checked_sub(started.elapsed()) {
        std::thread::sleep(left);
    }
    let gates = listing(&p, &["gates"]);
    let scanned = listing(&p, &["gates", "--scan"]);
    assert_eq!(
        gates, scanned,
        "the catalog's pending gates are every run's"
    );
    // The database itself: every pending gate of every run, and nothing else.
    let mut truth = 0;
    for run in &runs {
        truth += count_rows(&p, run, "gates", "status = 'pending'");
    }
    assert_eq!(gates.as_array().unwrap().len() as i64, truth);
    // a: 25 approved of 50; b: all 17 timed out; c: 10 rejected; d: 50 created.
    assert_eq!(truth, 25 + 33 + 40 + 50);
    assert_eq!(
        listing(&p, &["runs", "--limit", "100"]),
        listing(&p, &["runs", "--limit", "100", "--scan"])
    );
    assert_eq!(
        listing(&p, &["runs", "--status", "failed"])
            .as_array()
            .unwrap()
            .len(),
        8
    );
    if b == Backend::Sqlite {
        let c = rusqlite::Connection::open(p.root().join(".prose/catalog.db")).unwrap();
        let left: i64 = c
            .query_row(
                "SELECT (SELECT COUNT(*) FROM tickets) + (SELECT COUNT(*) FROM runs WHERE stale <> 0)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(left, 0, "no ticket or stale row left behind");
    }
}

fn catalog(p: &Project) -> rusqlite::Connection {
    rusqlite::Connection::open(p.root().join(".prose/catalog.db")).unwrap()
}

/// The writes whose facts the catalog still lacks: tickets in its table, and ticket lines of
/// its log (`catalog.log`, and copies being folded) with no facts line after them.
fn tickets(p: &Project) -> i64 {
    let c = catalog(p);
    let unnamed: i64 = c
        .query_row(
            "SELECT COUNT(*) FROM tickets WHERE nonce IS NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let mut open: std::collections::HashSet<String> = c
        .prepare("SELECT nonce FROM tickets WHERE nonce IS NOT NULL")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let prose = p.root().join(".prose");
    let mut logs: Vec<(u64, std::path::PathBuf)> = std::fs::read_dir(&prose)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n = match name.strip_prefix("catalog.log")? {
                "" => u64::MAX,
                rest => rest.strip_prefix('.')?.parse().ok()?,
            };
            Some((n, e.path()))
        })
        .collect();
    logs.sort();
    for (_, log) in logs {
        for line in std::fs::read_to_string(log).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let n = v["n"].as_str().unwrap().to_string();
            if v["t"] == "T" {
                open.insert(n);
            } else {
                open.remove(&n);
            }
        }
    }
    unnamed + open.len() as i64
}

/// Waits (bounded) until `done` holds.
fn until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(20), "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn gate_ids(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|g| {
            format!(
                "{}/{}",
                g["run_id"].as_str().unwrap(),
                g["id"].as_str().unwrap()
            )
        })
        .collect()
}

/// A writer SIGKILLed after its run's commit and before its catalog update leaves its ticket:
/// the next listing reads that run again, and lists what the run holds.
#[test]
fn a_writer_killed_between_its_commit_and_the_catalog_update_is_repaired() {
    let p = Project::new();
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "keep", "--prompt", "Keep?"])
        .assert()
        .success();
    assert_eq!(gate_ids(&listing(&p, &["gates"])).len(), 1);
    let paused = |args: &[&str]| {
        let mut c = run.std_cmd();
        c.args(args)
            .env("PROSE_STATE_TEST_CATALOG_PAUSE_MS", "20000")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c.spawn().unwrap()
    };
    // A gate created: committed in the run, killed before the catalog knows.
    let mut child = paused(&["gates", "create", "late", "--prompt", "Late?"]);
    until("the gate is in the run", || {
        count_rows(&p, &run, "gates", "id = 'late'") == 1
    });
    std::thread::sleep(Duration::from_millis(100));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(tickets(&p), 1, "the dead writer's ticket is left");
    let listed = gate_ids(&listing(&p, &["gates"]));
    assert!(listed.contains(&format!("{}/late", run.id)), "{listed:?}");
    assert_eq!(tickets(&p), 0);
    // A gate approved: the catalog still has it pending until the listing repairs it.
    let mut child = paused(&["approve", &run.id, "keep", "--yes", "--as", "alice"]);
    until("the gate is approved in the run", || {
        count_rows(&p, &run, "gates", "id = 'keep' AND status = 'approved'") == 1
    });
    std::thread::sleep(Duration::from_millis(100));
    child.kill().unwrap();
    child.wait().unwrap();
    let kept: i64 = catalog(&p)
        .query_row("SELECT COUNT(*) FROM gates WHERE id = 'keep'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(kept, 1, "the catalog was not told");
    assert_eq!(
        gate_ids(&listing(&p, &["gates"])),
        vec![format!("{}/late", run.id)]
    );
    // `finish` killed the same way: `runs --status` pages from the catalog, repaired first.
    let mut child = paused(&["finish", "--status", "failed"]);
    until("the run is finished", || {
        count_rows(&p, &run, "run", "status = 'failed'") == 1
    });
    std::thread::sleep(Duration::from_millis(100));
    child.kill().unwrap();
    child.wait().unwrap();
    let done = listing(&p, &["runs", "--status", "failed"]);
    assert_eq!(done.as_array().unwrap().len(), 1);
}

/// Gate writes SIGKILLed at random moments of their lives, hundreds of times (bounded in
/// time), and listings (which fold the catalog's log in) killed beside them: afterwards the
/// listings equal every run read alone, and no ticket is left.
#[test]
fn gate_writes_killed_at_random_moments_never_mislead_a_listing() {
    let p = Project::new();
    let runs: Vec<Run> = (0..5).map(|_| p.init()).collect();
    let mut rng = rand::rng();
    let start = Instant::now();
    let mut kills = 0;
    let mut listers_killed = 0;
    let mut i = 0;
    while i < 300 && start.elapsed() < Duration::from_secs(25) {
        i += 1;
        let run = &runs[rng.random_range(0..runs.len())];
        let gate = format!("g{}", rng.random_range(0..6));
        let args: Vec<String> = match rng.random_range(0..4) {
            0 | 1 => vec![
                "--run".into(),
                run.id.clone(),
                "gates".into(),
                "create".into(),
                gate,
                "--prompt".into(),
                "Go?".into(),
            ],
            2 => vec![
                "approve".into(),
                run.id.clone(),
                gate,
                "--yes".into(),
                "--as".into(),
                "alice".into(),
            ],
            _ => vec![
                "reject".into(),
                run.id.clone(),
                gate,
                "--reason".into(),
                "no".into(),
                "--yes".into(),
                "--as".into(),
                "bob".into(),
            ],
        };
        let mut child = std::process::Command::new(BIN)
            .current_dir(p.root())
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // A listing killed too, now and then: killed mid-fold, its log is folded by the next
        // one, never twice.
        let mut lister = (i % 4 == 0).then(|| {
            std::process::Command::new(BIN)
                .current_dir(p.root())
                .args(["--json", "gates"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        });
        std::thread::sleep(Duration::from_micros(rng.random_range(0..25_000)));
        if child.try_wait().unwrap().is_none() {
            kills += 1;
        }
        let _ = child.kill();
        child.wait().unwrap();
        if let Some(mut l) = lister.take() {
            if l.try_wait().unwrap().is_none() {
                listers_killed += 1;
            }
            let _ = l.kill();
            l.wait().unwrap();
        }
        if i % 50 == 0 {
            // A listing now and then: it builds the catalog, then repairs as it goes.
            assert_eq!(listing(&p, &["gates"]), listing(&p, &["gates", "--scan"]));
        }
    }
    assert!(kills > 0, "no command was killed mid-way");
    assert!(listers_killed > 0, "no listing was killed mid-way");
    assert_eq!(listing(&p, &["gates"]), listing(&p, &["gates", "--scan"]));
    assert_eq!(
        listing(&p, &["gates"]),
        listing(&p, &["gates"]),
        "a second listing agrees"
    );
    assert_eq!(tickets(&p), 0);
}

/// Raw SQL behind prose-state's back, runs made by raw sqlite3, and a catalog deleted,
/// corrupt or of another version: listings stay true, `--scan` and `doctor` pick up what the
/// catalog could not see.
#[test]
fn the_catalog_is_never_the_truth() {
    let p = Project::new();
    let (r1, r2) = (p.init(), p.init());
    r1.cmd()
        .args(["gates", "create", "one", "--prompt", "One?"])
        .assert()
        .success();
    assert_eq!(gate_ids(&listing(&p, &["gates"])).len(), 1);
    // A gate written by raw SQL into a run the catalog shows nothing of: found by doctor,
    // which reads the row again (nothing of the run changes).
    let insert = "INSERT INTO gates (id, run_id, prompt, allow, status, created_at)
                  VALUES ('raw', (SELECT id FROM run), 'Raw?', '[\"user\"]', 'pending', datetime('now'))";
    r2.conn().execute(insert, []).unwrap();
    let before = r2.snapshot();
    let a = p.cmd().args(["doctor"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(
        out.contains(&format!(
            "{}: catalog: the catalog says 0 pending gates, the run 1 (fixed)",
            r2.id
        )),
        "{out}"
    );
    assert_eq!(r2.snapshot(), before, "doctor changed nothing of the run");
    assert_eq!(gate_ids(&listing(&p, &["gates"])).len(), 2);
    // Another, found by --scan, which brings the catalog up to date too.
    r2.conn()
        .execute(&insert.replace("'raw'", "'raw2'"), [])
        .unwrap();
    assert_eq!(gate_ids(&listing(&p, &["gates", "--scan"])).len(), 3);
    assert_eq!(gate_ids(&listing(&p, &["gates"])).len(), 3);
    // A run shown whose files changed is read again: a gate deleted by raw SQL goes.
    r1.conn()
        .execute("DELETE FROM gates WHERE id = 'one'", [])
        .unwrap();
    assert_eq!(gate_ids(&listing(&p, &["gates"])).len(), 2);
    // A commit the catalog never heard of (as when a reboot takes the catalog's last
    // commits, tickets with them): unseen in a run with nothing shown, until the catalog
    // finds itself on another boot, and compares every run's files.
    r1.conn()
        .execute(&insert.replace("'raw'", "'lost'"), [])
        .unwrap();
    assert_eq!(gate_ids(&listing(&p, &["gates"])).len(), 2);
    catalog(&p)
        .execute(
            "UPDATE meta SET value = 'an earlier boot' WHERE key = 'boot_id'",
            [],
        )
        .unwrap();
    let after = gate_ids(&listing(&p, &["gates"]));
    assert!(after.contains(&format!("{}/lost", r1.id)), "{after:?}");
    r1.conn()
        .execute("DELETE FROM gates WHERE id = 'lost'", [])
        .unwrap();
    assert_eq!(gate_ids(&listing(&p, &["gates"])).len(), 2);
    // A run made by raw sqlite3 as the spec's agents make one: noticed as new.
    let raw = p.root().join(".prose/runs/20260116-143052-a7b3c9");
    std::fs::create_dir_all(&raw).unwrap();
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v0-raw-sqlite3.db"),
        raw.join("state.db"),
    )
    .unwrap();
    let runs = listing(&p, &["runs"]);
    assert!(
        runs.as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == "20260116-143052-a7b3c9"),
        "{runs}"
    );
    let all = listing(&p, &["gates", "--status", "all"]);
    assert!(gate_ids(&all).contains(&"20260116-143052-a7b3c9/production_deploy".to_string()));
    assert_eq!(listing(&p, &["gates"]), listing(&p, &["gates", "--scan"]));
    let want = listing(&p, &["gates"]);
    // Deleted: rebuilt from the runs.
    for f in ["catalog.db", "catalog.db-wal", "catalog.db-shm"] {
        let _ = std::fs::remove_file(p.root().join(".prose").join(f));
    }
    assert_eq!(listing(&p, &["gates"]), want);
    // Corrupt: moved aside and rebuilt.
    for f in ["catalog.db-wal", "catalog.db-shm"] {
        let _ = std::fs::remove_file(p.root().join(".prose").join(f));
    }
    std::fs::write(p.root().join(".prose/catalog.db"), vec![0x5a; 8192]).unwrap();
    assert_eq!(listing(&p, &["gates"]), want);
    let aside = std::fs::read_dir(p.root().join(".prose"))
        .unwrap()
        .flatten()
        .any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("catalog.db.corrupt-")
        });
    assert!(aside, "the corrupt catalog is kept aside");
    // Of a newer version: left alone, every run visited. Writers log their tickets and
    // facts all the same (they never open the catalog's database); once the catalog is
    // usable again, the next listing folds the log in.
    let version: i64 = catalog(&p)
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    catalog(&p).pragma_update(None, "user_version", 99).unwrap();
    r2.cmd()
        .args(["approve", &r2.id, "raw", "--yes", "--as", "alice"])
        .assert()
        .success();
    let log = p.root().join(".prose/catalog.log");
    assert!(log.is_file(), "the write is in the catalog's log");
    let a = p.cmd().args(["--json", "gates"]).assert().success();
    assert!(stderr(&a).contains("newer prose-state"), "{}", stderr(&a));
    assert_eq!(
        gate_ids(&stdout_json(&a)).len(),
        want.as_array().unwrap().len() - 1
    );
    assert!(log.is_file(), "a newer catalog's log is left alone");
    catalog(&p)
        .pragma_update(None, "user_version", version)
        .unwrap();
    assert_eq!(listing(&p, &["gates"]), listing(&p, &["gates", "--scan"]));
    assert!(!log.exists(), "folded in");
    // The log made a symlink to a file elsewhere: never written through. A writer that
    // cannot log its ticket leaves the stale mark; the next listing removes the link and
    // reads every run again.
    let elsewhere = p.root().join("elsewhere.txt");
    std::fs::write(&elsewhere, "untouched\n").unwrap();
    std::os::unix::fs::symlink(&elsewhere, &log).unwrap();
    r2.cmd()
        .args(["gates", "create", "linked", "--prompt", "Linked?"])
        .assert()
        .success();
    assert!(p.root().join(".prose/catalog.stale").exists());
    assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "untouched\n");
    let listed = listing(&p, &["gates"]);
    assert!(gate_ids(&listed).contains(&format!("{}/linked", r2.id)));
    assert_eq!(listed, listing(&p, &["gates", "--scan"]));
    assert!(
        std::fs::symlink_metadata(&log).is_err(),
        "the link is removed"
    );
    assert!(!p.root().join(".prose/catalog.stale").exists());
    assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "untouched\n");
    // doctor --fix builds it anew; a healthy project says so.
    let _ = p.cmd().args(["doctor", "--fix"]).assert();
    let a = p.cmd().args(["doctor"]).assert();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(!out.contains("catalog"), "{out}");
}

/// A run replaced by `import --replace` is read again into the catalog; pruned runs leave it.
#[test]
fn replaced_and_pruned_runs_leave_the_catalog_true() {
    let p = Project::new();
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "old", "--prompt", "Old?"])
        .assert()
        .success();
    let copy = p.root().join("copy");
    run.cmd()
        .args(["export", "--run", &run.id, "-o"])
        .arg(&copy)
        .assert()
        .success();
    assert_eq!(gate_ids(&listing(&p, &["gates"])).len(), 1);
    run.cmd()
        .args(["approve", &run.id, "old", "--yes", "--as", "alice"])
        .assert()
        .success();
    assert_eq!(gate_ids(&listing(&p, &["gates"])).len(), 0);
    // The exported copy (gate pending) is older than the run: a rollback, refused while this
    // machine holds the run's anchor; a person restoring it on purpose removes the anchor
    // first (outside agents' reach). Then it replaces the run: listed pending again.
    let a = p
        .cmd()
        .args(["import", "--replace"])
        .arg(&copy)
        .assert()
        .failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    std::fs::remove_dir_all(test_home(p.root()).join(".prose/anchors")).unwrap();
    p.cmd()
        .args(["import", "--replace"])
        .arg(&copy)
        .assert()
        .success();
    assert_eq!(listing(&p, &["gates"]), listing(&p, &["gates", "--scan"]));
    assert_eq!(gate_ids(&listing(&p, &["gates"])).len(), 1);
    // Finished and pruned: gone from the catalog.
    run.cmd()
        .args(["approve", &run.id, "old", "--yes", "--as", "alice"])
        .assert()
        .success();
    run.cmd()
        .args(["finish", "--status", "completed"])
        .assert()
        .success();
    p.cmd()
        .args(["prune", "--keep-days", "0", "--keep-n", "0", "--yes"])
        .assert()
        .success();
    assert!(!run.dir.exists());
    let left: i64 = catalog(&p)
        .query_row("SELECT COUNT(*) FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(left, 0);
    assert_eq!(listing(&p, &["runs"]).as_array().unwrap().len(), 0);
}

/// Writers fold the catalog's log in themselves once it passes 1 MiB: in a project where
/// nobody lists, the log stays bounded and the catalog holds the writes. A facts line too
/// large to log (a run whose pending gates pass 256 KiB) leaves its ticket, and the next
/// listing reads that run from its database.
#[test]
fn a_log_nobody_lists_is_folded_by_its_writers() {
    let p = Project::new();
    let runs: Vec<Run> = (0..20).map(|_| p.init()).collect();
    listing(&p, &["gates"]);
    let prompt = "x".repeat(100_000);
    let log = p.root().join(".prose/catalog.log");
    let mut most = 0;
    for run in &runs {
        run.cmd()
            .args(["gates", "create", "big", "--prompt", &prompt])
            .assert()
            .success();
        most = most.max(std::fs::metadata(&log).map_or(0, |m| m.len()));
    }
    assert!(most > 500_000, "the log grew: {most}");
    assert!(
        most < 1_400_000,
        "the log was folded in by its writers: {most}"
    );
    let folded: i64 = catalog(&p)
        .query_row("SELECT COUNT(*) FROM gates WHERE id = 'big'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(
        folded >= 10,
        "gates in the catalog before any listing: {folded}"
    );
    // Three gates of 100 KB in one run: the third write's facts are not logged.
    let heavy = &runs[0];
    for g in ["second", "third"] {
        heavy
            .cmd()
            .args(["gates", "create", g, "--prompt", &prompt])
            .assert()
            .success();
    }
    assert!(tickets(&p) >= 1, "the unlogged facts leave a ticket");
    let listed = listing(&p, &["gates"]);
    assert_eq!(listed.as_array().unwrap().len(), 22);
    assert_eq!(listed, listing(&p, &["gates", "--scan"]));
    assert_eq!(tickets(&p), 0);
}

/// The runs directory's modification time, as the catalog records it (nanoseconds).
fn dir_stamp(dir: &std::path::Path) -> String {
    let m = std::fs::metadata(dir).unwrap().modified().unwrap();
    m.duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        .to_string()
}

fn recorded_stamp(p: &Project) -> Option<String> {
    use rusqlite::OptionalExtension;
    catalog(p)
        .query_row("SELECT value FROM meta WHERE key = 'runs_mtime'", [], |r| {
            r.get(0)
        })
        .optional()
        .unwrap()
}

/// Sets the runs directory's modification time an hour back: settled, as if the last run
/// were made long ago.
fn settle(runs: &std::path::Path) {
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::open(runs)
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
}

/// `init` announces both its changes to the runs directory (its staging directory, then the
/// run put in place) in the catalog's log: the next listing knows the new run, and that the
/// directory holds nothing else new, without comparing its names (the recorded modification
/// time follows the directory's, although it is too young to be trusted on its own). Any
/// change not announced (a run copied in by hand, a run removed by hand) breaks that chain,
/// and the names are compared again.
#[test]
fn runs_made_by_init_are_announced_and_runs_made_by_hand_still_found() {
    let p = Project::new();
    let runs_dir = p.root().join(".prose/runs");
    let first = p.init();
    first
        .cmd()
        .args(["gates", "create", "a", "--prompt", "A?"])
        .assert()
        .success();
    assert_eq!(gate_ids(&listing(&p, &["gates"])).len(), 1);
    settle(&runs_dir);
    listing(&p, &["gates"]);
    assert_eq!(recorded_stamp(&p), Some(dir_stamp(&runs_dir)));

    let second = p.init();
    second
        .cmd()
        .args(["gates", "create", "b", "--prompt", "B?"])
        .assert()
        .success();
    let log = std::fs::read_to_string(p.root().join(".prose/catalog.log")).unwrap();
    let announced: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["t"] == "D")
        .collect();
    assert_eq!(announced.len(), 2, "{log}");
    assert_eq!(announced[0]["run"], "");
    assert_eq!(announced[1]["run"], second.id.as_str());
    assert_eq!(announced[0]["a"], announced[1]["b"]);
    let listed = listing(&p, &["gates"]);
    assert_eq!(listed, listing(&p, &["gates", "--scan"]));
    assert_eq!(gate_ids(&listed).len(), 2);
    // Recorded by the chain: the directory changed under a second ago, which a comparison
    // of its names would not yet trust.
    assert_eq!(recorded_stamp(&p), Some(dir_stamp(&runs_dir)));

    // A run copied in by hand: the chain is broken, and the names are compared.
    let copied = runs_dir.join("by-hand");
    std::fs::create_dir(&copied).unwrap();
    first.cmd().arg("checkpoint").assert().success();
    std::fs::copy(&first.db, copied.join("state.db")).unwrap();
    let listed = listing(&p, &["gates"]);
    assert_eq!(gate_ids(&listed).len(), 3, "{listed}");
    assert_eq!(listed, listing(&p, &["gates", "--scan"]));
    assert_eq!(
        listing(&p, &["runs", "--limit", "100"]),
        listing(&p, &["runs", "--limit", "100", "--scan"])
    );
    // And one removed by hand, after another announced init.
    p.init();
    std::fs::remove_dir_all(&second.dir).unwrap();
    let listed = listing(&p, &["gates"]);
    assert_eq!(gate_ids(&listed).len(), 2, "{listed}");
    assert_eq!(listed, listing(&p, &["gates", "--scan"]));
}

/// `init`s SIGKILLed at random moments, with listings between: every listing's runs are the
/// runs in the directory, whatever part of its announcements a killed init made.
#[test]
fn inits_killed_at_random_moments_never_hide_a_run() {
    let p = Project::new();
    p.init();
    listing(&p, &["gates"]);
    settle(&p.root().join(".prose/runs"));
    listing(&p, &["gates"]);
    let mut rng = rand::rng();
    let start = Instant::now();
    let (mut killed, mut rounds) = (0, 0);
    while rounds < 150 && start.elapsed() < Duration::from_secs(20) {
        rounds += 1;
        let mut child = p
            .std_cmd()
            .args(["init", "--quiet"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_micros(rng.random_range(0..8000)));
        if child.try_wait().unwrap().is_none() {
            killed += 1;
        }
        let _ = child.kill();
        child.wait().unwrap();
        if rounds % 10 == 0 {
            assert_eq!(
                listing(&p, &["runs", "--limit", "1000"]),
                listing(&p, &["runs", "--limit", "1000", "--scan"]),
                "round {rounds}"
            );
        }
    }
    assert!(killed > 0, "no init was killed in {rounds} rounds");
    assert_eq!(
        listing(&p, &["runs", "--limit", "1000"]),
        listing(&p, &["runs", "--limit", "1000", "--scan"])
    );
}

/// Cross-run `stats` (SQLite: the figures the catalog keeps of runs whose files have not
/// changed; PostgreSQL: grouped queries) equals every run opened alone (`--scan`): after
/// bindings, attachments, a gate, writes through raw SQL behind prose-state's back and a
/// run removed by hand.
fn cross_run_stats_equal_every_run_opened(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let runs: Vec<Run> = (0..4).map(|_| p.init()).collect();
    let stats = |scan: bool| {
        let mut c = p.cmd();
        c.args(["--json", "stats"]);
        if scan {
            c.arg("--scan");
        }
        stdout_json(&c.assert().success())
    };
    let same = |what: &str| {
        let kept = stats(false);
        assert_eq!(kept, stats(true), "{what}");
        kept
    };
    same("fresh runs");
    runs[0].cmd().args(["bind", "a", "1"]).assert().success();
    let file = p.write("big.txt", &vec![b'x'; 5000]);
    runs[1]
        .cmd()
        .args(["bind", "big", "--attach-over", "100", "--file"])
        .arg(&file)
        .assert()
        .success();
    runs[2]
        .cmd()
        .args(["gates", "create", "g", "--prompt", "Go?"])
        .assert()
        .success();
    let v = same("after binds, an attachment and a gate");
    assert_eq!(v["totals"]["runs"], 4);
    assert_eq!(v["totals"]["tables"]["bindings"], 2);
    assert_eq!(v["totals"]["tables"]["gates"], 1);
    // On a server, a large value is kept there; here, a file of the run.
    let files = u64::from(b == Backend::Sqlite);
    assert_eq!(v["totals"]["attachment_files"], files);
    assert_eq!(v["totals"]["attachment_bytes"], files * 5000);
    // The same answer again, from what was kept.
    assert_eq!(stats(false), v);
    // Rows written behind prose-state's back.
    runs[3].view().raw(
        "INSERT INTO bindings (name, execution_id, kind, value) VALUES ('raw', NULL, 'let', 'r');",
        "INSERT INTO openprose.bindings (run_id, name, execution_id, kind, value)
         VALUES ('$RUN', 'raw', NULL, 'let', 'r');",
    );
    let v = same("after raw SQL");
    assert_eq!(v["totals"]["tables"]["bindings"], 3);
    if b == Backend::Sqlite {
        // An attachment file removed by hand.
        let attachments = runs[1].dir.join("attachments");
        for f in std::fs::read_dir(&attachments).unwrap() {
            std::fs::remove_file(f.unwrap().path()).unwrap();
        }
        let v = same("after an attachment removed by hand");
        assert_eq!(v["totals"]["attachment_files"], 0);
        // A run removed by hand is gone from both.
        std::fs::remove_dir_all(&runs[0].dir).unwrap();
        let v = same("after a run removed by hand");
        assert_eq!(v["totals"]["runs"], 3);
    }
}

/// Cross-run `stats` opens only the SQLite runs whose files changed since their figures were
/// kept: opening a run in write-ahead-log mode makes its `-shm` file, and only the changed
/// run's is made again.
#[test]
fn cross_run_stats_open_only_the_runs_that_changed() {
    let p = Project::new();
    let runs: Vec<Run> = (0..5).map(|_| p.init()).collect();
    // Twice: the first open of a run may make its log, which changes its files.
    for _ in 0..2 {
        p.cmd().args(["--json", "stats"]).assert().success();
    }
    runs[2].cmd().args(["bind", "x", "1"]).assert().success();
    for run in &runs {
        let _ = std::fs::remove_file(run.dir.join("state.db-shm"));
    }
    let v = stdout_json(&p.cmd().args(["--json", "stats"]).assert().success());
    assert_eq!(v["totals"]["tables"]["bindings"], 1);
    let opened: Vec<bool> = runs
        .iter()
        .map(|r| r.dir.join("state.db-shm").exists())
        .collect();
    assert_eq!(opened, [false, false, true, false, false]);
}
