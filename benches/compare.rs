//! `cargo bench`: prose-state side by side with the raw `sqlite3` CLI doing the same work on a
//! database of the same schema, in one run, on one machine. Prints a table of medians and
//! ratios against the targets of issue 3. Needs the `sqlite3` CLI (`apt-get install sqlite3`).
//!
//! Environment:
//! - `PROSE_BENCH_RESULTS=FILE` also writes the report (Markdown) to FILE;
//! - `PROSE_BENCH_BIG_MB=N` sizes the large-value row (default 1024, i.e. 1 GiB);
//! - `PROSE_BENCH_BASELINE_BIN=PATH`: the release before binding history, which the `history`
//!   group measures a write and its disk cost against (its rows are skipped without it);
//!   `PROSE_BENCH_HISTORY_CALLS` (default 200) and `PROSE_BENCH_HISTORY_VERSIONS` (1000) size them;
//! - the `live` group: `PROSE_BENCH_LIVE_ROUNDS` (decisions a latency row, default 100),
//!   `PROSE_BENCH_LIVE_SETTLE_MS` (300), `PROSE_BENCH_LIVE_WAITERS` (idle waits in one MCP
//!   server, 1000, capped as its row says), `PROSE_BENCH_LIVE_PROCESSES` (idle CLI waiters, 50),
//!   `PROSE_BENCH_LIVE_WINDOW_S` (the idle window, 60) after `PROSE_BENCH_LIVE_OFFSET_S` (15),
//!   `PROSE_BENCH_LIVE_NOTIFY_CALLS` (approvals each side of the NOTIFY row, 200);
//!   `PROSE_BENCH_ONLY=live-mcp-task` runs only the MCP task's decision-to-wake rows,
//!   `PROSE_BENCH_ONLY=live-notify` only the NOTIFY's cost; `PROSE_BENCH_ONLY=history-write`
//!   only the `history` group's write and disk cost against `PROSE_BENCH_BASELINE_BIN`
//!   (and an MCP rebind against the baseline's MCP server, `PROSE_BENCH_BASELINE_MCP=PATH`).

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_prose-state");
const MCP_BIN: &str = env!("CARGO_BIN_EXE_prose-state-mcp");

// The tests' PostgreSQL helper: PROSE_STATE_TEST_PG_URL, or a throwaway cluster.
#[path = "../tests/common/pg.rs"]
#[allow(dead_code)]
mod pg;
const SCHEMA: &str = include_str!("../schema/sqlite.sql");

struct Row {
    what: String,
    ours: String,
    raw: String,
    ratio: String,
    target: String,
    met: String,
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Runs a command to completion with output discarded; returns (wall time, success).
fn timed(cmd: &mut Command) -> (Duration, bool) {
    let start = Instant::now();
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("spawn");
    (start.elapsed(), status.success())
}

fn prose(root: &Path, run: &str) -> Command {
    let mut c = Command::new(BIN);
    // Each project is its own root: the bench's projects sit side by side in one temporary
    // directory whose own .prose/ the binary would otherwise find from below.
    c.current_dir(root)
        .env("PROSE_ROOT", root)
        .env_remove("PROSE_RUN")
        .args(["--run", run]);
    c
}

fn sqlite3(db: &Path, sql: &str, extra: &[&str]) -> Command {
    let mut c = Command::new("sqlite3");
    c.args(extra).arg(db).arg(sql);
    c
}

fn init(root: &Path, id: &str) -> PathBuf {
    let ok = Command::new(BIN)
        .current_dir(root)
        .env("PROSE_ROOT", root)
        .args(["init", "--run-id", id])
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "prose-state init failed");
    root.join(".prose/runs").join(id).join("state.db")
}

/// A database made the raw way: the schema through the sqlite3 CLI, in the given journal mode.
fn raw_db(path: &Path, wal: bool) {
    let mut sql = String::new();
    if wal {
        sql.push_str("PRAGMA journal_mode=WAL;\n");
    }
    sql.push_str(SCHEMA);
    let mut child = Command::new("sqlite3")
        .arg(path)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(sql.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
}

fn ratio_row(what: &str, ours: Duration, raw: Duration, target: f64) -> Row {
    let r = ours.as_secs_f64() / raw.as_secs_f64();
    Row {
        what: what.into(),
        ours: ms(ours),
        raw: ms(raw),
        ratio: format!("{r:.2}"),
        target: format!("ratio ≤ {target:.1}"),
        met: if r <= target { "yes" } else { "no" }.into(),
    }
}

/// Single-call latency: `calls` calls each, alternating the two tools so drift hits both.
fn latency(root: &Path, calls: usize, rows: &mut Vec<Row>) {
    let db = init(root, "lat");
    let raw = init(root, "lat-raw"); // same schema, made by prose-state, written by sqlite3
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for i in 0..calls {
        let value = format!("value {i}: it's a \"quoted\" result");
        let (d, ok) = timed(prose(root, "lat").args(["bind", &format!("b{i}"), &value]));
        assert!(ok);
        ours.push(d);
        let sql = format!(
            "INSERT OR REPLACE INTO bindings (name, execution_id, kind, value, source_statement, updated_at) \
             VALUES ('b{i}', NULL, 'let', '{}', NULL, datetime('now'))",
            value.replace('\'', "''")
        );
        let (d, ok) = timed(&mut sqlite3(&raw, &sql, &[]));
        assert!(ok);
        theirs.push(d);
    }
    rows.push(ratio_row(
        &format!("`bind` latency, median of {calls}"),
        median(ours),
        median(theirs),
        0.8,
    ));

    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for i in 0..calls {
        let (d, ok) = timed(prose(root, "lat").args(["get", &format!("b{i}")]));
        assert!(ok);
        ours.push(d);
        let sql = format!("SELECT value FROM bindings WHERE name = 'b{i}'");
        let (d, ok) = timed(&mut sqlite3(&raw, &sql, &["-json"]));
        assert!(ok);
        theirs.push(d);
    }
    rows.push(ratio_row(
        &format!("`get` latency, median of {calls}"),
        median(ours),
        median(theirs),
        0.9,
    ));

    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for i in 0..calls {
        let (d, ok) = timed(prose(root, "lat").args([
            "exec-append",
            "--index",
            &i.to_string(),
            "--text",
            "session \"Research\"",
            "--status",
            "completed",
        ]));
        assert!(ok);
        ours.push(d);
        let sql = format!(
            "INSERT INTO execution (statement_index, statement_text, status, completed_at) \
             VALUES ({i}, 'session \"Research\"', 'completed', datetime('now'))"
        );
        let (d, ok) = timed(&mut sqlite3(&raw, &sql, &[]));
        assert!(ok);
        theirs.push(d);
    }
    rows.push(ratio_row(
        &format!("`exec-append` latency, median of {calls}"),
        median(ours),
        median(theirs),
        0.8,
    ));
    let _ = db;
}

/// 16 processes × 50 binds at once; returns (failed writes, wall time).
fn parallel(make: &(dyn Fn(usize, usize) -> Command + Sync)) -> (usize, Duration) {
    let start = Instant::now();
    let failed: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|w| s.spawn(move || (0..50).filter(|&i| !timed(&mut make(w, i)).1).count()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    (failed, start.elapsed())
}

fn parallel_rows(root: &Path, rounds: usize, rows: &mut Vec<Row>) {
    let insert = |w: usize, i: usize| {
        format!(
            "INSERT OR REPLACE INTO bindings (name, execution_id, kind, value, source_statement, updated_at) \
             VALUES ('w{w}_{i}', NULL, 'let', 'value of writer {w} bind {i}', NULL, datetime('now'))"
        )
    };
    // Wall time under contention is noisy: each round uses fresh databases, the three ways
    // take turns, and the medians are reported (failures are summed over the rounds).
    let (mut ours, mut spec, mut tuned) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ours_failed, mut spec_failed, mut tuned_failed) = (0, 0, 0);
    for round in 0..rounds {
        let id = format!("par{round}");
        init(root, &id);
        let (f, d) = parallel(&|w, i| {
            let mut c = prose(root, &id);
            c.args([
                "bind",
                &format!("w{w}_{i}"),
                &format!("value of writer {w} bind {i}"),
            ]);
            c
        });
        ours_failed += f;
        ours.push(d);
        let spec_db = root.join(format!("spec{round}.db"));
        raw_db(&spec_db, false);
        let (f, d) = parallel(&|w, i| sqlite3(&spec_db, &insert(w, i), &[]));
        spec_failed += f;
        spec.push(d);
        let tuned_db = root.join(format!("tuned{round}.db"));
        raw_db(&tuned_db, true);
        let (f, d) =
            parallel(&|w, i| sqlite3(&tuned_db, &insert(w, i), &["-cmd", ".timeout 10000"]));
        tuned_failed += f;
        tuned.push(d);
    }
    let (ours_wall, spec_wall, tuned_wall) = (median(ours), median(spec), median(tuned));
    let total = 800 * rounds;
    let r = ours_wall.as_secs_f64() / tuned_wall.as_secs_f64();
    rows.push(Row {
        what: format!("16 writers × 50 binds: failed writes ({rounds} rounds)"),
        ours: format!("{ours_failed} / {total}"),
        raw: format!(
            "as the spec uses it: {spec_failed} / {total}; WAL + `.timeout 10000`: {tuned_failed} / {total}"
        ),
        ratio: "".into(),
        target: "0 failures".into(),
        met: if ours_failed == 0 { "yes" } else { "no" }.into(),
    });
    rows.push(Row {
        what: format!("16 writers × 50 binds: wall time, median of {rounds}"),
        ours: ms(ours_wall),
        raw: format!(
            "as the spec uses it: {}; WAL + `.timeout 10000`: {}",
            ms(spec_wall),
            ms(tuned_wall)
        ),
        ratio: format!("{r:.3} (vs tuned)"),
        target: "≤ tuned raw".into(),
        met: if r <= 1.0 { "yes" } else { "no" }.into(),
    });
}

/// 16 writers × 50 binds against one run on PostgreSQL: prose-state, and raw `psql` running
/// the spec's upsert, on the same server.
fn parallel_postgres(root: &Path, rows: &mut Vec<Row>) {
    let Some((project, url)) = pg_project(
        root,
        "pg-project",
        "16 writers × 50 binds on PostgreSQL",
        rows,
    ) else {
        return;
    };
    let ok = Command::new(BIN)
        .current_dir(&project)
        .args(["init", "--backend", "postgres", "--run-id", "pgpar"])
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "init on postgres failed");
    let (ours_failed, ours_wall) = parallel(&|w, i| {
        let mut c = prose(&project, "pgpar");
        c.args([
            "bind",
            &format!("w{w}_{i}"),
            &format!("value of writer {w} bind {i}"),
        ]);
        c
    });
    let psql = Command::new("psql").arg("--version").output().is_ok();
    let raw = if psql {
        let (failed, wall) = parallel(&|w, i| {
            let mut c = Command::new("psql");
            c.args(["-q", "-v", "ON_ERROR_STOP=1", &url, "-c"]).arg(format!(
                "INSERT INTO openprose.bindings (name, run_id, execution_id, kind, value) \
                 VALUES ('raw{w}_{i}', 'pgpar', NULL, 'let', 'value of writer {w} bind {i}') \
                 ON CONFLICT (name, run_id, (COALESCE(execution_id, -1))) DO UPDATE SET value = excluded.value"
            ));
            c
        });
        (
            format!(
                "{failed} / 800 failed, {} (`psql`, the spec's upsert)",
                ms(wall)
            ),
            Some(wall),
        )
    } else {
        ("psql not installed".to_string(), None)
    };
    rows.push(Row {
        what: "16 writers × 50 binds on PostgreSQL: failed writes, wall time".into(),
        ours: format!("{ours_failed} / 800 failed, {}", ms(ours_wall)),
        raw: raw.0,
        ratio: raw
            .1
            .map(|r| format!("{:.2}", ours_wall.as_secs_f64() / r.as_secs_f64()))
            .unwrap_or_default(),
        target: "0 failures".into(),
        met: if ours_failed == 0 { "yes" } else { "no" }.into(),
    });
}

fn deep_chain(root: &Path, depth: i64, calls: usize, rows: &mut Vec<Row>) {
    let db = init(root, "deep");
    // Build the chain directly (10,000 process spawns would measure nothing of interest).
    let mut sql = String::from("BEGIN;\n");
    for i in 1..=depth {
        let parent = if i == 1 {
            "NULL".to_string()
        } else {
            (i - 1).to_string()
        };
        writeln!(
            sql,
            "INSERT INTO execution (id, statement_index, statement_text, status, started_at, parent_id) \
             VALUES ({i}, {i}, 'do recurse', 'executing', datetime('now'), {parent});"
        )
        .unwrap();
    }
    sql.push_str("INSERT INTO bindings (name, execution_id, kind, value) VALUES ('x', NULL, 'let', 'at the root');\nCOMMIT;\n");
    let mut child = Command::new("sqlite3")
        .arg(&db)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(sql.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());

    let spec_query = format!(
        "WITH RECURSIVE scope_chain AS (SELECT id, parent_id FROM execution WHERE id = {depth} \
         UNION ALL SELECT e.id, e.parent_id FROM execution e JOIN scope_chain s ON e.id = s.parent_id) \
         SELECT b.value FROM bindings b LEFT JOIN scope_chain s ON b.execution_id = s.id \
         WHERE b.name = 'x' AND (b.execution_id IN (SELECT id FROM scope_chain) OR b.execution_id IS NULL) \
         ORDER BY CASE WHEN b.execution_id IS NULL THEN 1 ELSE 0 END, s.id DESC NULLS LAST LIMIT 1"
    );
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..calls {
        let (d, ok) =
            timed(prose(root, "deep").args(["get", "x", "--execution-id", &depth.to_string()]));
        assert!(ok);
        ours.push(d);
        let (d, ok) = timed(&mut sqlite3(&db, &spec_query, &["-json"]));
        assert!(ok);
        theirs.push(d);
    }
    let (ours, theirs) = (median(ours), median(theirs));
    rows.push(Row {
        what: format!("`get` through a scope chain {depth} deep, median of {calls}"),
        ours: ms(ours),
        raw: format!("{} (the spec's recursive query)", ms(theirs)),
        ratio: format!("{:.2}", ours.as_secs_f64() / theirs.as_secs_f64()),
        target: "≤ 20 ms".into(),
        met: if ours <= Duration::from_millis(20) {
            "yes"
        } else {
            "no"
        }
        .into(),
    });
}

/// Writes inside a loop that has run long: `exec-append --parent LOOP` and `bind
/// --execution-id LOOP` under a loop start followed by `iterations` iteration records, against
/// the same under a loop with none (each call checks the loop has not ended, reading the
/// starts and ends of its statement).
fn long_loop(root: &Path, iterations: usize, calls: usize, rows: &mut Vec<Row>) {
    let text = "loop until **done** (max: 1000000) as i:";
    let start = |id: &str| -> (PathBuf, String) {
        let db = init(root, id);
        let out = prose(root, id)
            .args([
                "exec-append",
                "--index",
                "10",
                "--text",
                text,
                "--status",
                "started",
            ])
            .output()
            .unwrap();
        assert!(out.status.success());
        (
            db,
            String::from_utf8(out.stdout).unwrap().trim().to_string(),
        )
    };
    let (_, empty) = start("loop-empty");
    let (db, long) = start("loop-long");
    let ok = sqlite3(
        &db,
        &format!(
            "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < {iterations}) \
             INSERT INTO execution (statement_index, statement_text, status, parent_id, metadata) \
             SELECT 10, '{text}', 'iteration', {long}, json_object('iteration', n) FROM c;"
        ),
        &[],
    )
    .status()
    .unwrap()
    .success();
    assert!(ok);
    let append = |run: &str, at: &str| {
        timed(prose(root, run).args([
            "exec-append",
            "--index",
            "1",
            "--text",
            "draft = session \"Improve\"",
            "--status",
            "completed",
            "--parent",
            at,
        ]))
    };
    let bind = |run: &str, at: &str, i: usize| {
        timed(prose(root, run).args(["bind", &format!("d{i}"), "v", "--execution-id", at]))
    };
    let (mut a_long, mut a_empty, mut b_long, mut b_empty) = (vec![], vec![], vec![], vec![]);
    for i in 0..calls {
        for (run, at, out) in [
            ("loop-long", &long, &mut a_long),
            ("loop-empty", &empty, &mut a_empty),
        ] {
            let (d, ok) = append(run, at);
            assert!(ok);
            out.push(d);
        }
        for (run, at, out) in [
            ("loop-long", &long, &mut b_long),
            ("loop-empty", &empty, &mut b_empty),
        ] {
            let (d, ok) = bind(run, at, i);
            assert!(ok);
            out.push(d);
        }
    }
    for (what, ours, floor) in [
        ("exec-append --parent", a_long, a_empty),
        ("bind --execution-id", b_long, b_empty),
    ] {
        let (ours, floor) = (median(ours), median(floor));
        rows.push(Row {
            what: format!(
                "`{what}` under a loop start with {iterations} iteration records, median of {calls}"
            ),
            ours: ms(ours),
            raw: format!("{} (under a loop with none)", ms(floor)),
            ratio: format!("{:.2}", ours.as_secs_f64() / floor.as_secs_f64()),
            target: "(reported)".into(),
            met: String::new(),
        });
    }
}

/// Spawns `cmd`, feeds it `feed_bytes` on stdin (if any) and drains its stdout; returns
/// (wall time, peak resident KiB, exit success, stdout bytes).
// The child is reaped by wait4, not Child::wait, to get its rusage.
#[allow(clippy::zombie_processes)]
fn measured(cmd: &mut Command, feed_bytes: u64) -> (Duration, u64, bool, u64) {
    let start = Instant::now();
    let mut child = cmd
        .stdin(if feed_bytes > 0 {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let feeder = child.stdin.take().map(|mut stdin| {
        std::thread::spawn(move || {
            let chunk: Vec<u8> = (0..(1 << 20)).map(|i| b'a' + (i % 26) as u8).collect();
            let mut left = feed_bytes;
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                if stdin.write_all(&chunk[..n]).is_err() {
                    break;
                }
                left -= n as u64;
            }
        })
    });
    let mut out = child.stdout.take().unwrap();
    let drain = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        loop {
            match out.read(&mut buf) {
                Ok(0) | Err(_) => break total,
                Ok(n) => total += n as u64,
            }
        }
    });
    let mut status = 0;
    // SAFETY: rusage is plain old data; wait4 fills it for the child we spawned.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(rc, pid, "wait4");
    if let Some(f) = feeder {
        let _ = f.join();
    }
    let bytes = drain.join().unwrap();
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    (start.elapsed(), usage.ru_maxrss as u64, ok, bytes)
}

fn big_value(root: &Path, mb: u64, rows: &mut Vec<Row>) {
    let bytes = mb << 20;
    init(root, "big");
    let (d_bind, rss_bind, ok, _) = measured(prose(root, "big").args(["bind", "big"]), bytes);
    assert!(ok, "bind of the large value failed");
    let (d_get, rss_get, ok, got) = measured(prose(root, "big").args(["get", "big"]), 0);
    assert!(ok && got == bytes, "get returned {got} of {bytes} bytes");

    // The raw CLI cannot take a value this size in the SQL text (one argument is capped at
    // 128 KiB); its nearest way is readfile() of a file holding it.
    let file = root.join("big.bin");
    {
        let mut f = std::fs::File::create(&file).unwrap();
        let chunk: Vec<u8> = (0..(1 << 20)).map(|i| b'a' + (i % 26) as u8).collect();
        for _ in 0..mb {
            f.write_all(&chunk).unwrap();
        }
    }
    let raw = init(root, "big-raw");
    let sql = format!(
        "INSERT INTO bindings (name, kind, value) VALUES ('big', 'let', CAST(readfile('{}') AS TEXT))",
        file.display()
    );
    let (d_raw, rss_raw, ok_raw, _) = measured(&mut sqlite3(&raw, &sql, &[]), 0);
    let raw_bind = if ok_raw {
        format!(
            "{:.0} MB/s, peak {} MiB",
            bytes as f64 / 1e6 / d_raw.as_secs_f64(),
            rss_raw / 1024
        )
    } else {
        format!(
            "fails (string or blob too big), peak {} MiB",
            rss_raw / 1024
        )
    };
    let (d_raw_get, rss_raw_get, ok_raw_get, _) = if ok_raw {
        measured(
            &mut sqlite3(&raw, "SELECT value FROM bindings WHERE name = 'big'", &[]),
            0,
        )
    } else {
        (Duration::ZERO, 0, false, 0)
    };
    let raw_get = if ok_raw_get {
        format!(
            "{:.0} MB/s, peak {} MiB",
            bytes as f64 / 1e6 / d_raw_get.as_secs_f64(),
            rss_raw_get / 1024
        )
    } else {
        "n/a (nothing stored)".to_string()
    };
    let _ = std::fs::remove_file(&file);
    for (what, d, rss, raw) in [
        ("`bind` of the value from stdin", d_bind, rss_bind, raw_bind),
        ("`get` of it to stdout", d_get, rss_get, raw_get),
    ] {
        rows.push(Row {
            what: format!("{what} ({mb} MiB)"),
            ours: format!(
                "{:.0} MB/s, peak {:.1} MiB",
                bytes as f64 / 1e6 / d.as_secs_f64(),
                rss as f64 / 1024.0
            ),
            raw,
            ratio: "".into(),
            target: "peak ≤ 32 MiB".into(),
            met: if rss <= 32 * 1024 { "yes" } else { "no" }.into(),
        });
    }
}

/// A project whose runs live on a fresh database of the PostgreSQL server; None (with a
/// skipped row) when there is none.
fn pg_project(
    root: &Path,
    name: &str,
    what: &str,
    rows: &mut Vec<Row>,
) -> Option<(PathBuf, String)> {
    let Some(url) = pg::fresh_database() else {
        rows.push(Row {
            what: what.into(),
            ours: "skipped: no PostgreSQL server".into(),
            raw: "".into(),
            ratio: "".into(),
            target: "".into(),
            met: "n/a".into(),
        });
        return None;
    };
    let project = root.join(name);
    std::fs::create_dir_all(project.join(".prose")).unwrap();
    std::fs::write(
        project.join(".prose/.env"),
        format!("OPENPROSE_POSTGRES_URL={url}\n"),
    )
    .unwrap();
    Some((project, url))
}

/// The large value on PostgreSQL over loopback: into the server in chunks and back, beside
/// the SQLite row (same size, same machine).
fn big_value_postgres(root: &Path, mb: u64, rows: &mut Vec<Row>) {
    let what = format!("`bind` and `get` of the value on PostgreSQL ({mb} MiB)");
    let Some((project, _)) = pg_project(root, "pg-big", &what, rows) else {
        return;
    };
    let bytes = mb << 20;
    let ok = Command::new(BIN)
        .current_dir(&project)
        .env("PROSE_ROOT", &project)
        .args(["init", "--backend", "postgres", "--run-id", "pgbig"])
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "init on postgres failed");
    let (d_bind, rss_bind, ok, _) = measured(prose(&project, "pgbig").args(["bind", "big"]), bytes);
    assert!(ok, "bind of the large value on postgres failed");
    let (d_get, rss_get, ok, got) = measured(prose(&project, "pgbig").args(["get", "big"]), 0);
    assert!(ok && got == bytes, "get returned {got} of {bytes} bytes");
    let sqlite = |w: &str| {
        rows.iter()
            .find(|r| r.what.starts_with(w) && r.what.ends_with(&format!("({mb} MiB)")))
            .map(|r| format!("SQLite: {}", r.ours))
            .unwrap_or_default()
    };
    let (bind_sqlite, get_sqlite) = (sqlite("`bind`"), sqlite("`get`"));
    for (what, d, rss, beside) in [
        (
            "`bind` of the value from stdin, on PostgreSQL",
            d_bind,
            rss_bind,
            bind_sqlite,
        ),
        (
            "`get` of it to stdout, on PostgreSQL",
            d_get,
            rss_get,
            get_sqlite,
        ),
    ] {
        rows.push(Row {
            what: format!("{what} ({mb} MiB)"),
            ours: format!(
                "{:.0} MB/s, peak {:.1} MiB",
                bytes as f64 / 1e6 / d.as_secs_f64(),
                rss as f64 / 1024.0
            ),
            raw: beside,
            ratio: "".into(),
            target: "peak ≤ 32 MiB".into(),
            met: if rss <= 32 * 1024 { "yes" } else { "no" }.into(),
        });
    }
}

/// Export and import of a run of 10,000 bindings and 100 MB of attachments, against the floor
/// of copying it by hand: `sqlite3 .backup` of its state.db plus `cp -r` of attachments/.
fn transfer_rows(root: &Path, rows: &mut Vec<Row>) {
    let project = root.join("transfer-project");
    std::fs::create_dir_all(&project).unwrap();
    let db = init(&project, "travel");
    let dir = db.parent().unwrap().to_path_buf();
    {
        let c = rusqlite::Connection::open(&db).unwrap();
        c.execute_batch("BEGIN").unwrap();
        let mut s = c
            .prepare("INSERT INTO bindings (name, kind, value) VALUES (?1, 'let', ?2)")
            .unwrap();
        for i in 0..10_000 {
            s.execute(rusqlite::params![
                format!("b{i}"),
                format!("value {i}: {}", "x".repeat(200))
            ])
            .unwrap();
        }
        drop(s);
        c.execute_batch("COMMIT").unwrap();
    }
    for i in 0..50 {
        let ok = prose(&project, "travel")
            .args(["bind", &format!("att{i}")])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .and_then(|mut child| {
                let chunk: Vec<u8> = (0..(2 << 20))
                    .map(|j| b'a' + ((i + j) % 26) as u8)
                    .collect();
                child.stdin.take().unwrap().write_all(&chunk)?;
                child.wait()
            })
            .unwrap()
            .success();
        assert!(ok, "bind of an attachment failed");
    }
    let median_of = |f: &dyn Fn(usize) -> Duration| median((0..3).map(f).collect());
    // The floor: a consistent copy of the database and a copy of the files.
    let floor = median_of(&|i| {
        let out = root.join(format!("floor-{i}"));
        std::fs::create_dir_all(&out).unwrap();
        let start = Instant::now();
        assert!(sqlite3(
            &db,
            &format!(".backup '{}'", out.join("state.db").display()),
            &[]
        )
        .status()
        .unwrap()
        .success());
        assert!(Command::new("cp")
            .arg("-r")
            .arg(dir.join("attachments"))
            .arg(&out)
            .status()
            .unwrap()
            .success());
        start.elapsed()
    });
    let export = median_of(&|i| {
        let out = root.join(format!("export-{i}"));
        let (d, ok) = timed(prose(&project, "travel").args(["export", "-o"]).arg(&out));
        assert!(ok, "export failed");
        d
    });
    let import = median_of(&|i| {
        let dest = root.join(format!("import-sqlite-{i}"));
        std::fs::create_dir_all(&dest).unwrap();
        let mut c = Command::new(BIN);
        c.current_dir(&dest)
            .arg("--root")
            .arg(&dest)
            .args(["import"])
            .arg(root.join("export-0"));
        let (d, ok) = timed(&mut c);
        assert!(ok, "import into sqlite failed");
        d
    });
    let row = |what: &str, d: Duration| Row {
        what: format!("{what} (10,000 bindings, 100 MB of attachments)"),
        ours: ms(d),
        raw: format!("{} (`sqlite3 .backup` + `cp -r attachments/`)", ms(floor)),
        ratio: format!("{:.2}", d.as_secs_f64() / floor.as_secs_f64()),
        target: "reported".into(),
        met: "n/a".into(),
    };
    rows.push(row("`export` of a SQLite run", export));
    rows.push(row("`import` of it into SQLite", import));
    let what = "`import` into PostgreSQL, `export` from it (10,000 bindings, 100 MB)";
    let Some((pg_root, _)) = pg_project(root, "transfer-pg", what, rows) else {
        return;
    };
    let mut c = Command::new(BIN);
    c.current_dir(&pg_root)
        .arg("--root")
        .arg(&pg_root)
        .args(["import"])
        .arg(root.join("export-0"));
    let (pg_import, ok) = timed(&mut c);
    assert!(ok, "import into postgres failed");
    let out = root.join("export-pg");
    let mut c = Command::new(BIN);
    c.current_dir(&pg_root)
        .arg("--root")
        .arg(&pg_root)
        .args(["--run", "travel", "export", "-o"])
        .arg(&out);
    let (pg_export, ok) = timed(&mut c);
    assert!(ok, "export from postgres failed");
    rows.push(row("`import` of it into PostgreSQL", pg_import));
    rows.push(row("`export` of a PostgreSQL run", pg_export));
}

/// `gates` and `runs --limit 50` across `n` runs on PostgreSQL, each with a pending gate,
/// against the one query a person would type into `psql`. The fixture is written straight
/// into the server's tables (not `n` processes).
fn catalog_postgres(root: &Path, sizes: &[usize], calls: usize, rows: &mut Vec<Row>) {
    for &n in sizes {
        let what = format!("`gates` across {n} runs on PostgreSQL");
        let Some((project, url)) = pg_project(root, &format!("pg-catalog-{n}"), &what, rows) else {
            return;
        };
        // The schema, made by the binary's first use.
        let ok = Command::new(BIN)
            .current_dir(&project)
            .env("PROSE_ROOT", &project)
            .args(["init", "--backend", "postgres", "--run-id", "seed"])
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "init on postgres failed");
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.batch_execute(&format!(
            "INSERT INTO openprose.run (id, status, program_path, started_at, updated_at)
               SELECT 'r' || lpad(i::text, 7, '0'), 'running', 'p.prose',
                      now() - i * interval '1 second', now() - i * interval '1 second'
               FROM generate_series(1, {n}) i;
             INSERT INTO openprose.gates (id, run_id, prompt, status, timeout_at, created_at)
               SELECT 'approve', 'r' || lpad(i::text, 7, '0'), 'Ship it?', 'pending',
                      now() + interval '1 day', now() - i * interval '1 second'
               FROM generate_series(1, {n}) i;
             ANALYZE;"
        ))
        .unwrap();
        let run_cmd = |args: &[&str]| {
            let mut cmd = Command::new(BIN);
            cmd.current_dir(&project)
                .env("PROSE_ROOT", &project)
                .args(args);
            cmd
        };
        let gates = median(
            (0..calls)
                .map(|_| {
                    let (d, ok) = timed(&mut run_cmd(&["--json", "gates"]));
                    assert!(ok, "gates failed");
                    d
                })
                .collect(),
        );
        let gates50 = median(
            (0..calls)
                .map(|_| {
                    let (d, ok) = timed(&mut run_cmd(&["--json", "gates", "--limit", "50"]));
                    assert!(ok, "gates --limit failed");
                    d
                })
                .collect(),
        );
        let runs = median(
            (0..calls)
                .map(|_| {
                    let (d, ok) = timed(&mut run_cmd(&["--json", "runs", "--limit", "50"]));
                    assert!(ok, "runs failed");
                    d
                })
                .collect(),
        );
        let stats = median(
            (0..calls)
                .map(|_| {
                    let (d, ok) = timed(&mut run_cmd(&["--json", "stats"]));
                    assert!(ok, "stats failed");
                    d
                })
                .collect(),
        );
        let psql = median(
            (0..calls)
                .map(|_| {
                    let mut cmd = Command::new("psql");
                    cmd.args(["-q", "-A", "-t", &url, "-c"]).arg(
                        "SELECT g.run_id, g.id, g.prompt, g.timeout_at FROM openprose.gates g
                         WHERE g.status = 'pending' ORDER BY g.created_at",
                    );
                    timed(&mut cmd).0
                })
                .collect(),
        );
        let met = |d: Duration| {
            if n >= 100_000 && d > Duration::from_millis(100) {
                "no"
            } else {
                "yes"
            }
        };
        rows.push(Row {
            what: format!("`gates --json` across {n} runs on PostgreSQL, one pending gate each, median of {calls}"),
            ours: ms(gates),
            raw: format!("{} (`psql`: the pending gates, one query)", ms(psql)),
            ratio: format!("{:.2}", gates.as_secs_f64() / psql.as_secs_f64()),
            target: "≤ 100 ms at 100,000".into(),
            met: met(gates).into(),
        });
        rows.push(Row {
            what: format!(
                "`gates --json --limit 50` across {n} runs on PostgreSQL, median of {calls}"
            ),
            ours: ms(gates50),
            raw: "".into(),
            ratio: "".into(),
            target: "≤ 100 ms at 100,000".into(),
            met: met(gates50).into(),
        });
        rows.push(Row {
            what: format!(
                "`runs --limit 50 --json` across {n} runs on PostgreSQL, median of {calls}"
            ),
            ours: ms(runs),
            raw: "".into(),
            ratio: "".into(),
            target: "≤ 100 ms at 100,000".into(),
            met: met(runs).into(),
        });
        rows.push(Row {
            what: format!(
                "`stats --json` across {n} runs on PostgreSQL (grouped queries), median of {calls}"
            ),
            ours: ms(stats),
            raw: "".into(),
            ratio: "".into(),
            target: "".into(),
            met: "".into(),
        });
    }
}

/// A command of the project at `root`, timed `calls` times; the median.
fn median_of(root: &Path, args: &[&str], calls: usize) -> Duration {
    median(
        (0..calls)
            .map(|_| {
                let mut c = Command::new(BIN);
                c.current_dir(root).env("PROSE_ROOT", root).args(args);
                let (d, ok) = timed(&mut c);
                assert!(ok, "{args:?} failed");
                d
            })
            .collect(),
    )
}

/// A row of the catalog groups: a time against the 100 ms target at 100,000 runs.
fn catalog_row(what: String, ours: Duration, raw: String, ratio: String, n: usize) -> Row {
    let met = if n < 100_000 || ours <= Duration::from_millis(100) {
        "yes"
    } else {
        "no"
    };
    Row {
        what,
        ours: ms(ours),
        raw,
        ratio,
        target: "≤ 100 ms at 100,000".into(),
        met: met.into(),
    }
}

/// `gates` and `runs --limit 50` across `n` SQLite runs, each with a pending gate, read from
/// the project catalog; against every run visited (the path before the catalog, which a
/// catalog of a newer version falls back to) up to 10,000 runs. The runs are copies of one
/// run made by the binary, each given its own id through SQLite (not `n` processes); the
/// catalog is built by the first listing, which is timed too.
fn catalog_sqlite(root: &Path, sizes: &[usize], calls: usize, rows: &mut Vec<Row>) {
    for &n in sizes {
        let project = root.join(format!("catalog-{n}"));
        let made = Instant::now();
        let runs = runs_with_a_gate(&project, n);
        eprintln!("  {n} runs made in {:.1} s", made.elapsed().as_secs_f64());
        // The catalog from nothing: every run read once.
        let build = median_of(&project, &["--json", "gates", "--limit", "1"], 1);
        rows.push(Row {
            what: format!(
                "the SQLite project catalog built from nothing, {n} runs (the first listing)"
            ),
            ours: ms(build),
            raw: "".into(),
            ratio: "".into(),
            target: "".into(),
            met: "".into(),
        });
        let gates = median_of(&project, &["--json", "gates"], calls);
        let gates50 = median_of(&project, &["--json", "gates", "--limit", "50"], calls);
        let runs50 = median_of(&project, &["--json", "runs", "--limit", "50"], calls);
        // Every run visited, as before the catalog: a catalog of a newer version is left
        // alone and every run read one by one.
        let (scan_gates, scan_runs) = if n <= 10_000 {
            let cat = rusqlite::Connection::open(project.join(".prose/catalog.db")).unwrap();
            let version: i64 = cat
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .unwrap();
            cat.pragma_update(None, "user_version", 99).unwrap();
            let g = median_of(&project, &["--json", "gates"], calls.min(3));
            let r = median_of(&project, &["--json", "runs", "--limit", "50"], calls.min(3));
            cat.pragma_update(None, "user_version", version).unwrap();
            (Some(g), Some(r))
        } else {
            (None, None)
        };
        let against = |ours: Duration, scan: Option<Duration>| match scan {
            Some(s) => (
                format!("{} (every run visited)", ms(s)),
                format!("{:.3}", ours.as_secs_f64() / s.as_secs_f64()),
            ),
            None => ("not measured past 10,000".into(), "".into()),
        };
        let (raw, ratio) = against(gates, scan_gates);
        rows.push(catalog_row(
            format!("`gates --json` across {n} SQLite runs, one pending gate each (all {n} listed), median of {calls}"),
            gates, raw, ratio, n,
        ));
        let (raw, ratio) = against(gates50, scan_gates);
        rows.push(catalog_row(
            format!("`gates --json --limit 50` across {n} SQLite runs, median of {calls}"),
            gates50,
            raw,
            ratio,
            n,
        ));
        let (raw, ratio) = against(runs50, scan_runs);
        rows.push(catalog_row(
            format!("`runs --json --limit 50` across {n} SQLite runs, median of {calls}"),
            runs50,
            raw,
            ratio,
            n,
        ));
        // Cross-run stats: the first reads every run (and keeps its figures); later ones
        // open only the runs whose files changed (here one, bound to since).
        let stats_first = median_of(&project, &["--json", "stats"], 1);
        let ok = prose(&project, "r0000001")
            .args(["bind", "x", "1"])
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let stats_kept = median_of(&project, &["--json", "stats"], calls);
        let stats_scan =
            (n <= 10_000).then(|| median_of(&project, &["--json", "stats", "--scan"], 1));
        let plain = |what: String, d: Duration, raw: String, ratio: String| Row {
            what,
            ours: ms(d),
            raw,
            ratio,
            target: "".into(),
            met: "".into(),
        };
        rows.push(plain(
            format!("`stats --json` across {n} SQLite runs, the first (every run opened, its figures kept)"),
            stats_first, "".into(), "".into(),
        ));
        let (raw, ratio) = match stats_scan {
            Some(s) => (
                format!("{} (`stats --scan`: every run opened)", ms(s)),
                format!("{:.3}", stats_kept.as_secs_f64() / s.as_secs_f64()),
            ),
            None => ("not measured past 10,000".into(), "".into()),
        };
        rows.push(plain(
            format!("`stats --json` across {n} SQLite runs, one changed since the last, median of {calls}"),
            stats_kept, raw, ratio,
        ));
        // A new run since, made by `init`, which announces it: the first listing after it
        // knows it without comparing the runs directory's names.
        init(&project, "zz-new");
        let after = median_of(&project, &["--json", "gates", "--limit", "50"], 1);
        rows.push(catalog_row(
            format!("`gates --json --limit 50` across {n} SQLite runs, the first listing after a new run made by `init` (announced)"),
            after, "".into(), "".into(), n,
        ));
        // A run copied in by hand: not announced, so the names are compared.
        let by_hand = runs.join("zz-by-hand");
        std::fs::create_dir(&by_hand).unwrap();
        std::fs::copy(runs.join("r0000002/state.db"), by_hand.join("state.db")).unwrap();
        let compared = median_of(&project, &["--json", "gates", "--limit", "50"], 1);
        rows.push(Row {
            what: format!("`gates --json --limit 50` across {n} SQLite runs, the first listing after a run copied in by hand (the runs directory's names compared)"),
            ours: ms(compared),
            raw: "".into(),
            ratio: "".into(),
            target: "".into(),
            met: "".into(),
        });
        std::fs::remove_dir_all(&project).unwrap();
    }
}

/// `n` runs of a new project at `project`, each with a pending gate (`approve`, due in a day):
/// copies of one run made by the binary, each given its own id (`r0000000`...) and times
/// through SQLite, two writers at once (not `n` processes). The runs directory.
fn runs_with_a_gate(project: &Path, n: usize) -> PathBuf {
    std::fs::create_dir_all(project).unwrap();
    let template = init(project, "template");
    let ok = prose(project, "template")
        .args([
            "gates",
            "create",
            "approve",
            "--prompt",
            "Ship it?",
            "--timeout",
            "1d",
        ])
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let ok = prose(project, "template")
        .args(["checkpoint"])
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let bytes = std::fs::read(&template).unwrap();
    std::fs::remove_dir_all(template.parent().unwrap()).unwrap();
    let runs = project.join(".prose/runs");
    std::thread::scope(|s| {
        for part in 0..2 {
            let (runs, bytes) = (&runs, &bytes);
            s.spawn(move || {
                for i in (0..n).filter(|i| i % 2 == part) {
                    let id = format!("r{i:07}");
                    let dir = runs.join(&id);
                    std::fs::create_dir_all(dir.join("attachments")).unwrap();
                    let db = dir.join("state.db");
                    std::fs::write(&db, bytes).unwrap();
                    let c = rusqlite::Connection::open(&db).unwrap();
                    c.execute_batch(&format!(
                        "PRAGMA synchronous = OFF; PRAGMA foreign_keys = OFF;
                         UPDATE run SET id = '{id}',
                             started_at = datetime('now', '-{i} seconds'),
                             updated_at = datetime('now', '-{i} seconds');
                         UPDATE gates SET run_id = '{id}',
                             created_at = datetime('now', '-{i} seconds');"
                    ))
                    .unwrap();
                }
            });
        }
    });
    runs
}

/// One HTTP/1.1 request to the approval page on loopback: the status code, and the time to
/// the last byte of the answer.
fn http(
    port: u16,
    method: &str,
    path: &str,
    cookie: Option<&str>,
    form: &str,
) -> (u16, Duration, String) {
    use std::io::{Read, Write};
    let start = Instant::now();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    if let Some(c) = cookie {
        req += &format!("Cookie: {c}\r\n");
    }
    if method == "POST" {
        req += &format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            form.len()
        );
    }
    req += "\r\n";
    req += form;
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let took = start.elapsed();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, took, text)
}

/// The approval page under load on loopback: `runs` runs with a pending gate each, `clients`
/// signed-in clients polling the pending list (`/pending`, what the page's script fetches)
/// every 2 seconds as the page does, for `rounds` polls each; then the same clients polling
/// back to back, with no pause (saturation). p50 and p99 of each request's latency.
fn serve_load(root: &Path, runs: usize, clients: usize, rounds: usize, rows: &mut Vec<Row>) {
    let project = root.join("serve-load");
    runs_with_a_gate(&project, runs);
    let token = String::from_utf8(
        Command::new(BIN)
            .current_dir(&project)
            .env("PROSE_ROOT", &project)
            .env("HOME", &project)
            .args(["principals", "add", "alice"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    let mut child = Command::new(BIN)
        .current_dir(&project)
        .env("PROSE_ROOT", &project)
        .env("HOME", &project)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let port: u16 = line
        .trim()
        .trim_start_matches("listening on http://127.0.0.1:")
        .trim_end_matches('/')
        .parse()
        .unwrap();
    // Each client signs in once (five sign-ins a minute from one address are allowed, so
    // the clients share sessions made before the limit, as tabs of a few people would).
    let sessions: Vec<String> = (0..4)
        .map(|_| {
            let (code, _, text) = http(port, "POST", "/login", None, &format!("token={token}"));
            assert_eq!(code, 303, "{text}");
            text.lines()
                .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.split(';').next())
                .unwrap()
                .trim()
                .to_string()
        })
        .collect();
    // The catalog built before the clients come.
    let (code, _, _) = http(port, "GET", "/pending", Some(&sessions[0]), "");
    assert_eq!(code, 200);
    let oldest = format!("r{:07}", runs - 1);
    let mut measure = |pause: Duration, what: &str, target: bool| {
        let all: Vec<Duration> = std::thread::scope(|sc| {
            let handles: Vec<_> = (0..clients)
                .map(|i| {
                    let cookie = sessions[i % sessions.len()].clone();
                    let oldest = &oldest;
                    sc.spawn(move || {
                        // Spread over the first pause, as clients that did not start together.
                        std::thread::sleep(pause.mul_f64(i as f64 / clients as f64));
                        (0..rounds)
                            .map(|_| {
                                let (code, took, text) =
                                    http(port, "GET", "/pending", Some(&cookie), "");
                                assert_eq!(code, 200, "{text}");
                                // The oldest gate is listed first.
                                assert!(text.contains(oldest.as_str()), "the list lacks a run");
                                std::thread::sleep(pause);
                                took
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        let mut sorted = all.clone();
        sorted.sort();
        let at =
            |q: f64| sorted[((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1];
        let (p50, p99) = (at(0.50), at(0.99));
        rows.push(Row {
            what: format!(
                "approval page `/pending` (the live list: {runs} runs, a pending gate each), {clients} clients {what}, {} requests: p50 / p99",
                sorted.len()
            ),
            ours: format!("{} / {}", ms(p50), ms(p99)),
            raw: "".into(),
            ratio: "".into(),
            target: if target { "p99 ≤ 50 ms" } else { "" }.into(),
            met: match (target, p99 <= Duration::from_millis(50)) {
                (false, _) => "",
                (true, true) => "yes",
                (true, false) => "no",
            }
            .into(),
        });
    };
    measure(
        Duration::from_secs(2),
        "polling every 2 s as the page does",
        true,
    );
    measure(
        Duration::ZERO,
        "polling back to back (no pause: saturation)",
        false,
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// What the project catalog adds to a gate create and an approve: the same pairs in a project
/// with a catalog and in one without (where a write finds no catalog to update), alternated.
fn catalog_write_cost(root: &Path, calls: usize, rows: &mut Vec<Row>) {
    let with = root.join("catalog-cost-with");
    let without = root.join("catalog-cost-without");
    for p in [&with, &without] {
        std::fs::create_dir_all(p).unwrap();
        init(p, "run");
    }
    // The catalog: made by a listing, in one project only.
    median_of(&with, &["gates"], 1);
    assert!(with.join(".prose/catalog.db").is_file());
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..calls {
        for (p, out) in [(&with, &mut a), (&without, &mut b)] {
            let gate = format!("g{i}");
            let start = Instant::now();
            let ok = prose(p, "run")
                .args(["gates", "create", &gate, "--prompt", "Go?"])
                .stdout(Stdio::null())
                .status()
                .unwrap()
                .success()
                && prose(p, "run")
                    .args(["approve", &gate, "--yes", "--as", "alice"])
                    .stdout(Stdio::null())
                    .status()
                    .unwrap()
                    .success();
            assert!(ok);
            out.push(start.elapsed() / 2);
        }
    }
    assert!(!without.join(".prose/catalog.db").exists());
    // The listing that folds the writes' log lines in (200 writes: 400 lines).
    let logged = std::fs::metadata(with.join(".prose/catalog.log")).map_or(0, |m| m.len());
    let start = Instant::now();
    assert!(prose(&with, "run")
        .args(["gates"])
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success());
    let fold = start.elapsed();
    let (a, b) = (median(a), median(b));
    let cost = a.as_secs_f64() / b.as_secs_f64() - 1.0;
    rows.push(Row {
        what: format!("a gate create or approve with the project catalog kept up to date, median of {calls} pairs"),
        ours: ms(a),
        raw: format!("{} (the same without a catalog)", ms(b)),
        ratio: format!("{:.3} ({:+.1} %)", a.as_secs_f64() / b.as_secs_f64(), cost * 100.0),
        target: "≤ 10 % added".into(),
        met: if cost <= 0.10 { "yes" } else { "no" }.into(),
    });
    rows.push(Row {
        what: format!(
            "the next `gates` listing, folding in the catalog's log of those {} writes ({} KiB)",
            2 * calls,
            logged / 1024
        ),
        ours: ms(fold),
        raw: String::new(),
        ratio: String::new(),
        target: String::new(),
        met: String::new(),
    });
}

/// `gates` across `n` runs with one pending gate each, against the raw way: one `sqlite3`
/// per run database (the spec's cross-run JOIN cannot work: every run has its own db).
fn gates_listing(root: &Path, n: usize, calls: usize, rows: &mut Vec<Row>) {
    let project = root.join("gates-project");
    std::fs::create_dir_all(&project).unwrap();
    for i in 0..n {
        let id = format!("g{i:05}");
        init(&project, &id);
        let (_, ok) = timed(prose(&project, &id).args([
            "gates",
            "create",
            "deploy",
            "--prompt",
            "Ready to deploy?",
            "--timeout",
            "4h",
        ]));
        assert!(ok, "gates create failed");
    }
    let raw_loop = "for db in .prose/runs/*/state.db; do \
                    sqlite3 -json \"$db\" \"SELECT g.id, g.prompt, g.created_at, r.program_path \
                    FROM gates g JOIN run r ON g.run_id = r.id WHERE g.status = 'pending'\"; done";
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..calls {
        let mut c = Command::new(BIN);
        c.current_dir(&project)
            .env("PROSE_ROOT", &project)
            .args(["--json", "gates"]);
        let (d, ok) = timed(&mut c);
        assert!(ok);
        ours.push(d);
        let mut c = Command::new("sh");
        c.current_dir(&project).args(["-c", raw_loop]);
        let (d, ok) = timed(&mut c);
        assert!(ok);
        theirs.push(d);
    }
    let (ours, theirs) = (median(ours), median(theirs));
    rows.push(Row {
        what: format!("`gates` across {n} runs, one pending gate each, median of {calls}"),
        ours: ms(ours),
        raw: format!("{} (one `sqlite3 -json` per run db)", ms(theirs)),
        ratio: format!("{:.2}", ours.as_secs_f64() / theirs.as_secs_f64()),
        target: "≤ 500 ms".into(),
        met: if ours <= Duration::from_millis(500) {
            "yes"
        } else {
            "no"
        }
        .into(),
    });
}

/// One gate, 20 deciders at once. prose-state: exactly one may win. Raw: the spec's
/// resolution UPDATE (no status guard) from 20 `sqlite3` processes with a busy timeout.
fn gate_race(root: &Path, rounds: usize, rows: &mut Vec<Row>) {
    let (mut ours_wall, mut raw_wall) = (Vec::new(), Vec::new());
    let (mut ours_winners, mut raw_winners) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let id = format!("race{round}");
        let db = init(root, &id);
        let (_, ok) =
            timed(prose(root, &id).args(["gates", "create", "deploy", "--prompt", "Deploy?"]));
        assert!(ok);
        let start = Instant::now();
        let winners: usize = std::thread::scope(|s| {
            let hs: Vec<_> = (0..20)
                .map(|i| {
                    let id = id.clone();
                    s.spawn(move || {
                        let who = format!("approver{i}");
                        timed(
                            prose(root, &id)
                                .args(["approve", &id, "deploy", "--yes", "--as", &who]),
                        )
                        .1
                    })
                })
                .collect();
            hs.into_iter().map(|h| usize::from(h.join().unwrap())).sum()
        });
        ours_wall.push(start.elapsed());
        ours_winners.push(winners);

        let raw_id = format!("race-raw{round}");
        let raw = init(root, &raw_id);
        let insert =
            "INSERT INTO gates (id, run_id, prompt) SELECT 'deploy', id, 'Deploy?' FROM run";
        assert!(timed(&mut sqlite3(&raw, insert, &[])).1);
        let start = Instant::now();
        let winners: usize = std::thread::scope(|s| {
            let hs: Vec<_> = (0..20)
                .map(|i| {
                    let raw = raw.clone();
                    s.spawn(move || {
                        let sql = format!(
                            "UPDATE gates SET status = 'approved', resolved_at = datetime('now'), \
                             resolved_by = 'approver{i}' WHERE id = 'deploy'; SELECT changes();"
                        );
                        let out = Command::new("sqlite3")
                            .args(["-cmd", ".timeout 10000"])
                            .arg(&raw)
                            .arg(sql)
                            .output()
                            .unwrap();
                        usize::from(
                            out.status.success()
                                && String::from_utf8_lossy(&out.stdout).trim() == "1",
                        )
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        raw_wall.push(start.elapsed());
        raw_winners.push(winners);
        let _ = db;
    }
    let max_ours = *ours_winners.iter().max().unwrap();
    let min_ours = *ours_winners.iter().min().unwrap();
    rows.push(Row {
        what: format!("one gate, 20 concurrent approvers ({rounds} rounds): winners per gate"),
        ours: format!("{min_ours}..{max_ours}"),
        raw: format!(
            "{}..{} (the spec's UPDATE lets every approver overwrite)",
            raw_winners.iter().min().unwrap(),
            raw_winners.iter().max().unwrap()
        ),
        ratio: "".into(),
        target: "exactly 1".into(),
        met: if min_ours == 1 && max_ours == 1 {
            "yes"
        } else {
            "no"
        }
        .into(),
    });
    let (o, r) = (median(ours_wall), median(raw_wall));
    rows.push(Row {
        what: "one gate, 20 concurrent approvers: wall time, median".into(),
        ours: ms(o),
        raw: ms(r),
        ratio: format!("{:.2}", o.as_secs_f64() / r.as_secs_f64()),
        target: "(reported)".into(),
        met: "".into(),
    });
}

/// An approval in a team's gate (`--require 3`, every approver with a token) beside a
/// single-approver decision with a token, interleaved in one run: the first approval of the
/// three (a vote), the third (the one that decides, counting the sealed votes), and the
/// single decision. Issue 30's target: at most 10 % over the single decision.
fn team_rows(root: &Path, rounds: usize, rows: &mut Vec<Row>) {
    let project = root.join("team");
    std::fs::create_dir_all(&project).unwrap();
    let token = |name: &str| {
        let out = Command::new(BIN)
            .current_dir(&project)
            .env("PROSE_ROOT", &project)
            .args(["principals", "add", name])
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let tokens = [token("alice"), token("bob"), token("carol")];
    init(&project, "team");
    let approve = |gate: &str, t: &str| {
        let (d, ok) = timed(
            prose(&project, "team")
                .env("PROSE_TOKEN", t)
                .args(["approve", gate, "--yes"]),
        );
        assert!(ok, "approve {gate}");
        d
    };
    let create = |gate: &str, extra: &[&str]| {
        let (_, ok) = timed(
            prose(&project, "team")
                .args(["gates", "create", gate, "--prompt", "Deploy?"])
                .args(extra),
        );
        assert!(ok);
    };
    let (mut single, mut first, mut deciding) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..rounds {
        let (s, t) = (format!("single{i}"), format!("team{i}"));
        create(&s, &[]);
        create(&t, &["--require", "3"]);
        single.push(approve(&s, &tokens[0]));
        first.push(approve(&t, &tokens[0]));
        approve(&t, &tokens[1]);
        deciding.push(approve(&t, &tokens[2]));
    }
    // Creating a gate, side by side: in this project (a principals book, whose policy a
    // create reads from its sealed log) and in one without a book; and with a schedule
    // (reminders and an escalation) against a plain deadline, in this project.
    // Two fresh projects alike but for the book (one principal, in one group).
    let bare = root.join("team-bare");
    let booked = root.join("team-booked");
    for dir in [&bare, &booked] {
        std::fs::create_dir_all(dir).unwrap();
        init(dir, "bare");
    }
    let added = Command::new(BIN)
        .current_dir(&booked)
        .env("PROSE_ROOT", &booked)
        .args(["principals", "add", "dana", "--group", "oncall"])
        .output()
        .unwrap();
    assert!(added.status.success());
    let made = |dir: &Path, run: &str, gate: &str, extra: &[&str]| {
        let (d, ok) = timed(
            prose(dir, run)
                .args([
                    "gates",
                    "create",
                    gate,
                    "--prompt",
                    "Deploy?",
                    "--timeout",
                    "4h",
                ])
                .args(extra),
        );
        assert!(ok, "create {gate}");
        d
    };
    let (mut with_book, mut no_book, mut scheduled) = (Vec::new(), Vec::new(), Vec::new());
    let schedule = [
        "--remind",
        "1h",
        "--remind",
        "10m",
        "--escalate-to",
        "group:oncall",
    ];
    for i in 0..rounds {
        with_book.push(made(&booked, "bare", &format!("plain{i}"), &[]));
        no_book.push(made(&bare, "bare", &format!("plain{i}"), &[]));
        scheduled.push(made(&booked, "bare", &format!("sched{i}"), &schedule));
        // As many gates in each run.
        made(&bare, "bare", &format!("sched{i}"), &[]);
    }
    for (what, d, base, vs) in [
        (
            "`gates create` in a project with a principals book (its policy read from the book's sealed log)",
            median(with_book.clone()),
            median(no_book),
            "a project without one",
        ),
        (
            "`gates create --remind 1h --remind 10m --escalate-to group:oncall` (a team's gate, its schedule sealed)",
            median(scheduled),
            median(with_book),
            "a plain `gates create --timeout 4h`",
        ),
    ] {
        let ratio = d.as_secs_f64() / base.as_secs_f64();
        rows.push(Row {
            what: format!("{what}, median of {rounds}"),
            ours: ms(d),
            raw: format!("{} ({vs})", ms(base)),
            ratio: format!("{ratio:.2}"),
            target: "≤ 1.10".into(),
            met: if ratio <= 1.10 { "yes" } else { "no" }.into(),
        });
    }
    let base = median(single);
    for (what, d) in [
        ("a vote short of the quorum", median(first)),
        ("the approval that decides (3 of 3)", median(deciding)),
    ] {
        let ratio = d.as_secs_f64() / base.as_secs_f64();
        rows.push(Row {
            what: format!("approval in an N = 3 gate, {what}, vs a single-approver decision (token, median of {rounds})"),
            ours: ms(d),
            raw: ms(base),
            ratio: format!("{ratio:.2}"),
            target: "≤ 1.10".into(),
            met: if ratio <= 1.10 { "yes" } else { "no" }.into(),
        });
    }
}

/// An approval that gives an answer (checked against the gate's response schema, written to
/// its response binding) and edits the input it is about, beside a plain approval of a gate
/// about the same input, interleaved in one run. Issue 49's target: at most 10 % more.
fn answer_rows(root: &Path, rounds: usize, rows: &mut Vec<Row>) {
    let project = root.join("answers");
    std::fs::create_dir_all(&project).unwrap();
    init(&project, "answers");
    let run = |args: &[&str]| {
        let (d, ok) = timed(prose(&project, "answers").args(args));
        assert!(ok, "{args:?}");
        d
    };
    run(&["bind", "draft", "the first draft of the release notes"]);
    let schema = r#"{"type":"object","properties":{"size":{"type":"integer","minimum":1},"tone":{"enum":["warm","dry"]}},"required":["size"]}"#;
    let (mut plain, mut answered) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        let (p, a) = (format!("plain{i}"), format!("answered{i}"));
        run(&[
            "gates", "create", &p, "--prompt", "Publish?", "--inputs", "draft",
        ]);
        run(&[
            "gates",
            "create",
            &a,
            "--prompt",
            "Publish?",
            "--inputs",
            "draft",
            "--response-schema",
            schema,
            "--response-binding",
            &format!("size{i}"),
        ]);
        plain.push(run(&["approve", &p, "--yes", "--as", "alice"]));
        answered.push(run(&[
            "approve",
            &a,
            "--yes",
            "--as",
            "alice",
            "--response",
            r#"{"size":3,"tone":"dry"}"#,
            "--edit",
            &format!("draft=the release notes, edited ({i})"),
        ]));
    }
    let (d, base) = (median(answered), median(plain));
    let ratio = d.as_secs_f64() / base.as_secs_f64();
    rows.push(Row {
        what: format!("an approval with an answer (schema-checked, written to its response binding) and an edit of its input, median of {rounds}"),
        ours: ms(d),
        raw: format!("{} (a plain approval of a gate about the same input)", ms(base)),
        ratio: format!("{ratio:.2}"),
        target: "≤ 1.10".into(),
        met: if ratio <= 1.10 { "yes" } else { "no" }.into(),
    });
}

/// What one durable SQLite commit costs on this disk, in-process with nothing else around it:
/// a connection kept open on a WAL database with `synchronous = FULL` (as prose-state's), one
/// small INSERT a transaction, median of 200. This is the "one fsync" every durable write pays,
/// whatever the interface.
fn durable_commit_cost(root: &Path) -> Duration {
    let conn = rusqlite::Connection::open(root.join("commit-probe.db")).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; CREATE TABLE t (v TEXT);",
    )
    .unwrap();
    let mut times = Vec::new();
    for i in 0..200 {
        let start = Instant::now();
        conn.execute("INSERT INTO t (v) VALUES (?1)", [i.to_string()])
            .unwrap();
        times.push(start.elapsed());
    }
    median(times)
}

/// A subagent session of rmcp's client with `prose-state mcp`, on the given runtime.
async fn mcp_session(
    root: &Path,
    run: &str,
    agent: &str,
) -> rmcp::service::RunningService<rmcp::service::RoleClient, ()> {
    mcp_session_as(root, run, &["--role", "subagent", "--agent", agent]).await
}

/// A session of rmcp's client with `prose-state mcp` and these options (role, agent, ...).
async fn mcp_session_as(
    root: &Path,
    run: &str,
    options: &[&str],
) -> rmcp::service::RunningService<rmcp::service::RoleClient, ()> {
    use rmcp::ServiceExt;
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.current_dir(root)
        .env("PROSE_ROOT", root)
        .env_remove("PROSE_RUN")
        .args(["--run", run, "mcp"])
        .args(options)
        .stderr(Stdio::null());
    ().serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap()
}

async fn mcp_call(
    client: &rmcp::service::RunningService<rmcp::service::RoleClient, ()>,
    tool: &str,
    args: serde_json::Value,
) -> bool {
    let serde_json::Value::Object(args) = args else {
        unreachable!()
    };
    let r = client
        .call_tool(rmcp::model::CallToolRequestParams::new(tool.to_string()).with_arguments(args))
        .await
        .unwrap();
    r.is_error != Some(true)
}

/// Tool-call latency inside one MCP session against one CLI process per call, for `get` and
/// `bind`; then 16 sessions × 500 binds at once against one run.
fn mcp_rows(root: &Path, calls: usize, rows: &mut Vec<Row>) {
    init(root, "mcp");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fsync = durable_commit_cost(root);
    let (mut tool_bind, mut tool_get, mut cli_bind, mut cli_get, mut floor) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    rt.block_on(async {
        let client = mcp_session(root, "mcp", "bench").await;
        for i in 0..calls {
            let value = format!("value {i}: it's a \"quoted\" result");
            let start = Instant::now();
            assert!(
                mcp_call(
                    &client,
                    "bind",
                    serde_json::json!({"name": format!("m{i}"), "value": value})
                )
                .await
            );
            tool_bind.push(start.elapsed());
            let start = Instant::now();
            assert!(mcp_call(&client, "get", serde_json::json!({"name": format!("m{i}")})).await);
            tool_get.push(start.elapsed());
            // The protocol's own round trip: a call refused before anything is opened.
            let start = Instant::now();
            assert!(
                !mcp_call(
                    &client,
                    "get",
                    serde_json::json!({"name": "m0", "no_such_option": 1})
                )
                .await
            );
            floor.push(start.elapsed());
            let (d, ok) = timed(prose(root, "mcp").args(["bind", &format!("c{i}"), &value]));
            assert!(ok);
            cli_bind.push(d);
            let (d, ok) = timed(prose(root, "mcp").args(["get", &format!("c{i}")]));
            assert!(ok);
            cli_get.push(d);
        }
        client.cancel().await.unwrap();
    });
    let floor = median(floor);
    rows.push(Row {
        what: format!("MCP round trip of a call refused before any work (rmcp client, stdio), median of {calls}"),
        ours: ms(floor),
        raw: "".into(),
        ratio: "".into(),
        target: "(reported: part of every row below)".into(),
        met: "".into(),
    });
    let (tool_get, cli_get) = (median(tool_get), median(cli_get));
    let under = cli_get.as_secs_f64() / tool_get.as_secs_f64();
    rows.push(Row {
        what: format!("MCP `get` tool call in one session, median of {calls}"),
        ours: ms(tool_get),
        raw: format!("{} (one `prose-state get` process per call)", ms(cli_get)),
        ratio: format!("{:.3} ({under:.0}× under)", 1.0 / under),
        target: "≤ 0.3 ms, ≥ 10× under the CLI".into(),
        met: if tool_get.as_secs_f64() <= 0.0003 && under >= 10.0 {
            "yes"
        } else {
            "no"
        }
        .into(),
    });
    let (tool_bind, cli_bind) = (median(tool_bind), median(cli_bind));
    let under = cli_bind.as_secs_f64() / tool_bind.as_secs_f64();
    let budget = Duration::from_micros(300) + fsync;
    rows.push(Row {
        what: format!("MCP `bind` tool call in one session, median of {calls}"),
        ours: ms(tool_bind),
        raw: format!("{} (one `prose-state bind` process per call)", ms(cli_bind)),
        ratio: format!("{:.3} ({under:.0}× under)", 1.0 / under),
        target: format!(
            "≤ 0.3 ms + one durable SQLite commit ({}) = {}, ≥ 10× under the CLI",
            ms(fsync),
            ms(budget)
        ),
        met: if tool_bind <= budget && under >= 10.0 {
            "yes"
        } else {
            "no"
        }
        .into(),
    });

    // 16 sessions, each its own server process, 500 binds each, all at once.
    const SESSIONS: usize = 16;
    const BINDS: usize = 500;
    init(root, "mcp-many");
    let start = Instant::now();
    let failed: usize = rt.block_on(async {
        let mut tasks = Vec::new();
        for s in 0..SESSIONS {
            let client = mcp_session(root, "mcp-many", &format!("w{s}")).await;
            tasks.push(tokio::spawn(async move {
                let mut failed = 0;
                for i in 0..BINDS {
                    if !mcp_call(
                        &client,
                        "bind",
                        serde_json::json!({"name": format!("w{s}_{i}"), "value": i.to_string()}),
                    )
                    .await
                    {
                        failed += 1;
                    }
                }
                client.cancel().await.unwrap();
                failed
            }));
        }
        let mut failed = 0;
        for t in tasks {
            failed += t.await.unwrap();
        }
        failed
    });
    let wall = start.elapsed();
    let db = root.join(".prose/runs/mcp-many/state.db");
    let stored: usize = String::from_utf8(
        sqlite3(&db, "SELECT COUNT(*) FROM bindings", &[])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .parse()
    .unwrap();
    let total = SESSIONS * BINDS;
    let lost = total - stored.min(total);
    rows.push(Row {
        what: format!("{SESSIONS} MCP sessions × {BINDS} binds at once, one run"),
        ours: format!(
            "{failed} failed, {lost} lost of {total}; {} ({:.0} binds/s)",
            ms(wall),
            total as f64 / wall.as_secs_f64()
        ),
        raw: "".into(),
        ratio: "".into(),
        target: "0 lost".into(),
        met: if lost == 0 && failed == 0 {
            "yes"
        } else {
            "no"
        }
        .into(),
    });
}

/// Issue 28: a session's role costs its calls nothing. `bind` and `get` in a subagent session
/// (`--role subagent --agent NAME --execution-id E`: its run and execution pinned) beside the
/// same calls in a VM session (`--role vm`) naming the same execution, so that both do the same
/// work: the two sessions run at once against one run, called in turn (which goes first
/// alternates every round), each call timed on its own.
fn mcp_role_rows(root: &Path, calls: usize, rows: &mut Vec<Row>) {
    let run = "mcp-roles";
    init(root, run);
    let out = prose(root, run)
        .args([
            "--json",
            "exec-append",
            "--index",
            "1",
            "--text",
            "session: worker",
            "--status",
            "executing",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let execution = doc["id"].as_i64().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // (subagent, vm) timings of each tool.
    let mut bind = (Vec::new(), Vec::new());
    let mut get = (Vec::new(), Vec::new());
    rt.block_on(async {
        let e = execution.to_string();
        let sub = mcp_session_as(
            root,
            run,
            &[
                "--role",
                "subagent",
                "--agent",
                "worker",
                "--execution-id",
                &e,
            ],
        )
        .await;
        let vm = mcp_session_as(root, run, &["--role", "vm", "--agent", "vm"]).await;
        for i in 0..calls {
            let value = format!("value {i}: it's a \"quoted\" result");
            for turn in 0..2 {
                let subagent = (i + turn) % 2 == 0;
                let (client, name) = if subagent {
                    (&sub, format!("s{i}"))
                } else {
                    (&vm, format!("v{i}"))
                };
                // The VM names the execution the subagent session is pinned to.
                let mut args = serde_json::json!({"name": name, "value": value});
                let mut read = serde_json::json!({"name": name});
                if !subagent {
                    args["execution_id"] = execution.into();
                    read["execution_id"] = execution.into();
                }
                let start = Instant::now();
                assert!(mcp_call(client, "bind", args).await);
                let b = start.elapsed();
                let start = Instant::now();
                assert!(mcp_call(client, "get", read).await);
                let g = start.elapsed();
                if subagent {
                    bind.0.push(b);
                    get.0.push(g);
                } else {
                    bind.1.push(b);
                    get.1.push(g);
                }
            }
        }
        sub.cancel().await.unwrap();
        vm.cancel().await.unwrap();
    });
    // Both sessions bound in the one execution's scope.
    let db = root.join(format!(".prose/runs/{run}/state.db"));
    let scoped = String::from_utf8(
        sqlite3(
            &db,
            &format!("SELECT COUNT(*) FROM bindings WHERE execution_id = {execution}"),
            &[],
        )
        .output()
        .unwrap()
        .stdout,
    )
    .unwrap();
    assert_eq!(
        scoped.trim(),
        (2 * calls).to_string(),
        "bindings in the execution's scope"
    );
    for (tool, (sub, vm)) in [("get", get), ("bind", bind)] {
        let (sub, vm) = (median(sub), median(vm));
        let ratio = sub.as_secs_f64() / vm.as_secs_f64();
        rows.push(Row {
            what: format!(
                "MCP `{tool}` in a subagent session (`--role subagent --execution-id`), beside a VM session's (`--role vm`, same execution), median of {calls}"
            ),
            ours: ms(sub),
            raw: format!("{} (VM session)", ms(vm)),
            ratio: format!("{ratio:.2}"),
            target: "≤ 1.10 (a role adds no work to a call)".into(),
            met: if ratio <= 1.10 { "yes" } else { "no" }.into(),
        });
    }
}

fn first_line(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default()
}

/// `resume --json` on a run of `n` execution records and as many bindings (issue 28: at most
/// 16 KiB and 20 ms at 200,000), beside `resume --all`, today's full answer. The run is filled
/// with the sqlite3 CLI: top-level statements, a loop still running with its body's records,
/// a block left open, and root bindings of 100 bytes.
fn resume_rows(root: &Path, sizes: &[usize], rows: &mut Vec<Row>) {
    for &n in sizes {
        let id = format!("resume-{n}");
        let db = init(root, &id);
        let sql = format!(
            "PRAGMA journal_mode=WAL;
             WITH RECURSIVE i(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM i WHERE k < {n} - 3)
             INSERT INTO execution (statement_index, statement_text, status, completed_at)
               SELECT k, 'session s' || k, 'completed', datetime('now') FROM i;
             INSERT INTO execution (statement_index, statement_text, status, metadata, started_at)
               VALUES ({n}, 'loop', 'started', '{{\"loop_id\": \"l1\", \"max\": 1000}}', datetime('now'));
             INSERT INTO execution (statement_index, statement_text, status, metadata, completed_at)
               VALUES ({n}, 'loop', 'iteration', '{{\"loop_id\": \"l1\", \"iteration\": 1}}', datetime('now'));
             INSERT INTO execution (statement_index, statement_text, status, parent_id, started_at)
               SELECT 1, 'do process(x)', 'executing', max(id) - 1, datetime('now') FROM execution;
             WITH RECURSIVE i(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM i WHERE k < {n})
             INSERT INTO bindings (name, execution_id, kind, value)
               SELECT printf('b%07d', k), NULL, 'let', printf('%-100s', 'value ' || k) FROM i;"
        );
        let ok = sqlite3(&db, &sql, &[])
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "filling the resume run failed");
        let calls = if n > 10_000 { 5 } else { 20 };
        let measure = |args: &[&str]| {
            let mut times = Vec::new();
            let mut bytes = 0;
            for _ in 0..calls {
                let start = Instant::now();
                let out = prose(root, &id).args(args).output().unwrap();
                times.push(start.elapsed());
                assert!(
                    out.status.success(),
                    "{args:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                bytes = out.stdout.len();
            }
            (median(times), bytes)
        };
        let (t, bytes) = measure(&["--json", "resume"]);
        let (t_all, bytes_all) = measure(&["--json", "resume", "--all"]);
        let met = bytes <= 16 * 1024 && t <= Duration::from_millis(20);
        rows.push(Row {
            what: format!(
                "`resume --json` on {n} records and {n} bindings: bytes out, median of {calls}"
            ),
            ours: format!("{bytes} B, {}", ms(t)),
            raw: format!("`resume --all`: {bytes_all} B, {}", ms(t_all)),
            ratio: format!("{:.4}", bytes as f64 / bytes_all as f64),
            target: "≤ 16 KiB and ≤ 20 ms at 200,000".into(),
            met: if n < 200_000 {
                "(reported)".into()
            } else if met {
                "yes".into()
            } else {
                "no".into()
            },
        });
    }
}

/// A number from the environment, else `default`.
fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// `calls` rounds of the same call made two ways, which goes first alternating round by round
/// so that drift hits both; each call a whole process, timed spawn to exit. The medians.
fn side_by_side(
    calls: usize,
    a: &dyn Fn(usize) -> Command,
    b: &dyn Fn(usize) -> Command,
) -> (Duration, Duration) {
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for i in 0..calls {
        for turn in 0..2 {
            let first = (i + turn) % 2 == 0;
            let mut c = if first { a(i) } else { b(i) };
            let (d, ok) = timed(&mut c);
            assert!(ok, "{c:?} failed");
            if first { &mut ta } else { &mut tb }.push(d);
        }
    }
    (median(ta), median(tb))
}

/// A value of exactly 100 bytes, different for each `i`.
fn hundred_bytes(i: usize) -> String {
    format!("{i:06} {}", "v".repeat(93))
}

/// Fills a SQLite run made by `prose-state init` straight through SQLite, in one transaction
/// (not a process a write), the history triggers keeping every version as they do for any
/// writer: `records` execution records, and every `records / bindings` records a new root
/// binding of 100 bytes; half-way between two new bindings, when they are 2 or more records
/// apart, an earlier binding rebound (binding `j / 2` after the `j`-th), so that history holds
/// older versions the way a run's loops leave them. The newest record's id.
fn fill_sqlite_run(db: &Path, records: usize, bindings: usize) -> i64 {
    let mut c = rusqlite::Connection::open(db).unwrap();
    let tx = c.transaction().unwrap();
    {
        // A run of a release before records had a principal (the baseline's) has no column
        // for it.
        let principal: i64 = tx
            .query_row(
                "SELECT COUNT(*) FROM pragma_table_info('execution') WHERE name = 'principal'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        let (column, value) = if principal > 0 {
            (", principal", ", 'bench'")
        } else {
            ("", "")
        };
        let mut record = tx
            .prepare(&format!(
                "INSERT INTO execution (statement_index, statement_text, status, started_at,
                                        completed_at{column})
                 VALUES (?1, ?2, 'completed', datetime('now'), datetime('now'){value})"
            ))
            .unwrap();
        let mut bind = tx
            .prepare(
                "INSERT INTO bindings (name, execution_id, kind, value, source_statement)
                 VALUES (?1, NULL, 'let', ?2, ?3)",
            )
            .unwrap();
        let mut rebind = tx
            .prepare(
                "UPDATE bindings SET value = ?2, updated_at = datetime('now')
                 WHERE name = ?1 AND execution_id IS NULL",
            )
            .unwrap();
        let every = (records / bindings.max(1)).max(1);
        let mut written = 0;
        for k in 1..=records {
            let text = format!("let b = session \"step {k}\"");
            record.execute(rusqlite::params![k as i64, text]).unwrap();
            if written < bindings && k % every == 0 {
                bind.execute(rusqlite::params![
                    format!("b{written:06}"),
                    hundred_bytes(k),
                    text
                ])
                .unwrap();
                written += 1;
            } else if every >= 2 && k % every == every / 2 && written > 0 {
                rebind
                    .execute(rusqlite::params![
                        format!("b{:06}", (written - 1) / 2),
                        hundred_bytes(k)
                    ])
                    .unwrap();
            }
        }
    }
    tx.commit().unwrap();
    c.query_row("SELECT MAX(id) FROM execution", [], |r| r.get(0))
        .unwrap()
}

fn count_sqlite(db: &Path, sql: &str) -> i64 {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row(sql, [], |r| r.get(0))
        .unwrap()
}

fn count_pg(url: &str, sql: &str) -> i64 {
    postgres::Client::connect(url, postgres::NoTls)
        .unwrap()
        .query_one(sql, &[])
        .unwrap()
        .get(0)
}

/// An item for `bind --append` (a JSON object of 38 bytes), different for each `i`.
fn append_item(i: usize) -> String {
    format!(r#"{{"step":"{i:06}","note":"abcdefghij"}}"#)
}

/// `prose(root, run)` with another binary.
fn prose_with(bin: &Path, root: &Path, run: &str) -> Command {
    let mut c = Command::new(bin);
    c.current_dir(root)
        .env("PROSE_ROOT", root)
        .env_remove("PROSE_RUN")
        .args(["--run", run]);
    c
}

/// `init --run-id RUN` with `bin` in `project`, on PostgreSQL when `postgres` (the project's
/// .prose/.env names the server).
fn init_with(bin: &Path, project: &Path, run: &str, postgres: bool) {
    std::fs::create_dir_all(project).unwrap();
    let mut c = Command::new(bin);
    c.current_dir(project)
        .env("PROSE_ROOT", project)
        .env_remove("PROSE_RUN")
        .arg("init");
    if postgres {
        c.args(["--backend", "postgres"]);
    }
    let ok = c
        .args(["--run-id", run])
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "{} init in {} failed", bin.display(), project.display());
}

/// This build's binary and the baseline's, copied into one directory of the bench's own:
/// where a binary lives changes its start-up (see benches/tools/ab_startup.py), so neither is
/// timed from where it was built. (ours, baseline).
fn binaries_side_by_side(root: &Path, baseline: &Path) -> (PathBuf, PathBuf) {
    let dir = root.join("binaries");
    std::fs::create_dir_all(&dir).unwrap();
    let (ours, old) = (dir.join("prose-state"), dir.join("prose-state-baseline"));
    std::fs::copy(BIN, &ours).unwrap();
    std::fs::copy(baseline, &old).unwrap();
    (ours, old)
}

/// Fills a PostgreSQL run straight through SQL (as `history_rows` does): `records` records and
/// `bindings` bindings of 100 bytes. A release before records had a principal has no column
/// for it.
fn fill_pg_run(url: &str, run: &str, records: usize, bindings: usize) {
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let principal: bool = c
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM information_schema.columns
              WHERE table_schema = 'openprose' AND table_name = 'execution'
                AND column_name = 'principal')",
            &[],
        )
        .unwrap()
        .get(0);
    let (column, value) = if principal {
        (", principal", ", 'bench'")
    } else {
        ("", "")
    };
    c.batch_execute(&format!(
        "INSERT INTO openprose.execution (run_id, statement_index, statement_text, status,
                                          started_at, completed_at{column})
           SELECT '{run}', i, 'let b = session \"step ' || i || '\"', 'completed', now(), now(){value}
           FROM generate_series(1, {records}) i;
         INSERT INTO openprose.bindings (name, run_id, kind, value)
           SELECT 'b' || lpad(i::text, 6, '0'), '{run}', 'let', rpad(lpad(i::text, 6, '0') || ' ', 100, 'v')
           FROM generate_series(1, {bindings}) i;
         ANALYZE;"
    ))
    .unwrap();
}

/// Issue 31, what history costs a write against the release before history (the binary at
/// PROSE_BENCH_BASELINE_BIN): `bind x VALUE` (a rebind of 100 bytes) and `bind acc --append
/// ITEM` (38 bytes), each binary on a run it made itself (the baseline writes its own, older
/// schema) seeded alike with 1,000 records and 1,000 bindings, taking turns (`side_by_side`);
/// then what a version costs on disk. Both backends. Skipped, with a row saying so, when
/// PROSE_BENCH_BASELINE_BIN is unset.
fn history_vs_baseline(root: &Path, calls: usize, rows: &mut Vec<Row>) {
    let Some((baseline, name)) = baseline_from_env(
        "PROSE_BENCH_BASELINE_BIN",
        "a rebind and an append against the release before history",
        "that release's binary",
        rows,
    ) else {
        return;
    };
    let (ours, old) = binaries_side_by_side(root, &baseline);
    let seed = (1_000, 1_000);
    let setting = "a run of 1,000 records and 1,000 bindings";

    // SQLite: a project of each binary.
    eprintln!("  a write with history vs the release before it ({name}), SQLite…");
    let (p_new, p_old) = (root.join("history-new"), root.join("history-old"));
    init_with(&ours, &p_new, "w", false);
    init_with(&old, &p_old, "w", false);
    let db_new = p_new.join(".prose/runs/w/state.db");
    let db_old = p_old.join(".prose/runs/w/state.db");
    fill_sqlite_run(&db_new, seed.0, seed.1);
    fill_sqlite_run(&db_old, seed.0, seed.1);
    assert_eq!(
        count_sqlite(
            &db_old,
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'binding_history'"
        ),
        0,
        "the baseline {name} keeps binding history: it is not the release before history"
    );
    write_cost_vs_baseline(
        "SQLite",
        setting,
        &name,
        calls,
        &|| prose_with(&ours, &p_new, "w"),
        &|| prose_with(&old, &p_old, "w"),
        &|n| {
            count_sqlite(
                &db_new,
                &format!("SELECT COUNT(*) FROM binding_history WHERE name = '{n}'"),
            )
        },
        rows,
    );
    mcp_write_vs_baseline("SQLite", setting, calls, (&p_new, &p_old), rows);

    // PostgreSQL: a database of each binary.
    let what = format!("a rebind and an append against {name}, PostgreSQL");
    let pg_new = pg_project(root, "pg-history-new", &what, rows);
    let pg_old = pg_new
        .as_ref()
        .and_then(|_| pg_project(root, "pg-history-old", &what, rows));
    let mut pg = None;
    if let (Some((p_new, u_new)), Some((p_old, u_old))) = (pg_new, pg_old) {
        eprintln!("  a write with history vs the release before it ({name}), PostgreSQL…");
        init_with(&ours, &p_new, "w", true);
        init_with(&old, &p_old, "w", true);
        fill_pg_run(&u_new, "w", seed.0, seed.1);
        fill_pg_run(&u_old, "w", seed.0, seed.1);
        assert_eq!(
            count_pg(
                &u_old,
                "SELECT COUNT(*) FROM pg_class WHERE relname = 'binding_history'"
            ),
            0,
            "the baseline {name} keeps binding history: it is not the release before history"
        );
        write_cost_vs_baseline(
            "PostgreSQL",
            setting,
            &name,
            calls,
            &|| prose_with(&ours, &p_new, "w"),
            &|| prose_with(&old, &p_old, "w"),
            &|n| {
                count_pg(
                    &u_new,
                    &format!(
                        "SELECT COUNT(*) FROM openprose.binding_history WHERE run_id = 'w' AND name = '{n}'"
                    ),
                )
            },
            rows,
        );
        mcp_write_vs_baseline("PostgreSQL", setting, calls, (&p_new, &p_old), rows);
        pg = Some((p_new, u_new, p_old, u_old));
    }

    // Disk.
    let n = env_usize("PROSE_BENCH_HISTORY_VERSIONS", 1_000);
    eprintln!("  history's disk cost a version vs {name} ({n} versions), SQLite…");
    let (d_new, d_old) = (root.join("history-disk-new"), root.join("history-disk-old"));
    init_with(&ours, &d_new, "d", false);
    init_with(&old, &d_old, "d", false);
    let sqlite_size = |p: &Path| {
        let db = p.join(".prose/runs/d/state.db");
        move || (compacted_size(&db) as i64, None)
    };
    let a = disk_growth(&|| prose_with(&ours, &d_new, "d"), n, &sqlite_size(&d_new));
    let b = disk_growth(&|| prose_with(&old, &d_old, "d"), n, &sqlite_size(&d_old));
    disk_rows(
        "SQLite (state.db checkpointed and vacuumed)",
        &name,
        n,
        a,
        b,
        rows,
    );
    if let Some((p_new, u_new, p_old, u_old)) = pg {
        eprintln!("  history's disk cost a version vs {name} ({n} versions), PostgreSQL…");
        // A run of its own in each database, beside the timed one.
        init_with(&ours, &p_new, "d", true);
        init_with(&old, &p_old, "d", true);
        let pg_size = |url: &str| {
            let url = url.to_string();
            move || {
                let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                let q = "SELECT (pg_total_relation_size('openprose.bindings')
                        + COALESCE(pg_total_relation_size(to_regclass('openprose.binding_history')), 0))::bigint";
                let written: i64 = c.query_one(q, &[]).unwrap().get(0);
                c.batch_execute("VACUUM FULL openprose.bindings").unwrap();
                let history: bool = c
                    .query_one(
                        "SELECT to_regclass('openprose.binding_history') IS NOT NULL",
                        &[],
                    )
                    .unwrap()
                    .get(0);
                if history {
                    c.batch_execute("VACUUM FULL openprose.binding_history")
                        .unwrap();
                }
                let full: i64 = c.query_one(q, &[]).unwrap().get(0);
                (full, Some(written))
            }
        };
        let a = disk_growth(&|| prose_with(&ours, &p_new, "d"), n, &pg_size(&u_new));
        let b = disk_growth(&|| prose_with(&old, &p_old, "d"), n, &pg_size(&u_old));
        disk_rows(
            "PostgreSQL (`pg_total_relation_size` of bindings + binding_history, tables and indexes, after `VACUUM FULL`; as written before it in brackets)",
            &name,
            n,
            a,
            b,
            rows,
        );
    }
}

/// The rebind and append rows of `history_vs_baseline` on one backend; `kept(name)`: how many
/// versions of the binding this build's run holds in history (checked afterwards: else the
/// comparison would be void).
#[allow(clippy::too_many_arguments)]
fn write_cost_vs_baseline(
    backend: &str,
    setting: &str,
    baseline: &str,
    calls: usize,
    ours: &dyn Fn() -> Command,
    old: &dyn Fn() -> Command,
    kept: &dyn Fn(&str) -> i64,
    rows: &mut Vec<Row>,
) {
    // Every timed `bind x` a rebind, every timed append onto an existing array.
    for make in [ours, old] {
        assert!(timed(make().args(["bind", "x", &hundred_bytes(0)])).1);
        assert!(timed(make().args(["bind", "acc", "--append", &append_item(0)])).1);
    }
    let rebind = |make: &dyn Fn() -> Command, i: usize| {
        let mut c = make();
        c.args(["bind", "x", &hundred_bytes(i + 1)]);
        c
    };
    let append = |make: &dyn Fn() -> Command, i: usize| {
        let mut c = make();
        c.args(["bind", "acc", "--append", &append_item(i + 1)]);
        c
    };
    let (new_rebind, old_rebind) = side_by_side(calls, &|i| rebind(ours, i), &|i| rebind(old, i));
    let (new_append, old_append) = side_by_side(calls, &|i| append(ours, i), &|i| append(old, i));
    for name in ["x", "acc"] {
        let versions = kept(name);
        assert!(
            versions > calls as i64,
            "{backend}: history kept {versions} versions of {name} after {calls} timed writes"
        );
    }
    for (what, a, b) in [
        (
            "`bind x VALUE`, a rebind of 100 bytes",
            new_rebind,
            old_rebind,
        ),
        (
            "`bind acc --append ITEM` (38 bytes; history keeps the step as a delta)",
            new_append,
            old_append,
        ),
    ] {
        let ratio = a.as_secs_f64() / b.as_secs_f64();
        rows.push(Row {
            what: format!(
                "{what}, {backend} ({setting}): this build, history kept, vs the release before history ({baseline}), each on a run it made, median of {calls}"
            ),
            ours: ms(a),
            raw: format!("{} ({baseline})", ms(b)),
            ratio: format!("{ratio:.3}"),
            target: "≤ 1.10".into(),
            met: if ratio <= 1.10 { "yes" } else { "no" }.into(),
        });
    }
}

/// The baseline binary the environment variable `var` names, and its file name; None, with a
/// row saying `what` was skipped (set `var` to `wanted`), when it is unset.
fn baseline_from_env(
    var: &str,
    what: &str,
    wanted: &str,
    rows: &mut Vec<Row>,
) -> Option<(PathBuf, String)> {
    let Some(path) = std::env::var_os(var).map(PathBuf::from) else {
        eprintln!("  ({what}: set {var} to {wanted}; skipped)");
        rows.push(Row {
            what: what.into(),
            ours: format!("skipped: {var} unset"),
            raw: "".into(),
            ratio: "".into(),
            target: "".into(),
            met: "n/a".into(),
        });
        return None;
    };
    assert!(path.is_file(), "{var}={} is not a file", path.display());
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Some((path, name))
}

/// A rebind through MCP against the release before history: this build's MCP server and the
/// baseline's (`PROSE_BENCH_BASELINE_MCP` names its `prose-state-mcp`; the row is skipped
/// without it), one session each on the run it made (`projects`: this build's, the
/// baseline's), the calls alternating. A server keeps its connection, so it parses the schema
/// and compiles its statements once a session, where a command does at every write.
fn mcp_write_vs_baseline(
    backend: &str,
    setting: &str,
    calls: usize,
    projects: (&Path, &Path),
    rows: &mut Vec<Row>,
) {
    let what = format!("MCP `bind` tool call rebinding a 100-byte value, {backend} ({setting})");
    let Some((old_mcp, name)) = baseline_from_env(
        "PROSE_BENCH_BASELINE_MCP",
        &what,
        "the baseline's prose-state-mcp",
        rows,
    ) else {
        return;
    };
    eprintln!("  a rebind through MCP vs the release before history, {backend}…");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (mut new_times, mut old_times) = (Vec::new(), Vec::new());
    rt.block_on(async {
        use rmcp::ServiceExt;
        let session = |bin: &Path, root: &Path| {
            let mut cmd = tokio::process::Command::new(bin);
            cmd.current_dir(root)
                .env("PROSE_ROOT", root)
                .env_remove("PROSE_RUN")
                .args([
                    "--run", "w", "mcp", "--role", "subagent", "--agent", "bench",
                ])
                .stderr(Stdio::null());
            ().serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap())
        };
        let new = session(Path::new(MCP_BIN), projects.0).await.unwrap();
        let old = session(&old_mcp, projects.1).await.unwrap();
        let bind = |i: usize| serde_json::json!({"name": "mx", "value": hundred_bytes(i)});
        // The first calls open the run and compile the statements: not timed.
        for i in 0..5 {
            assert!(
                mcp_call(&new, "bind", bind(i)).await,
                "this build's MCP bind failed"
            );
            assert!(
                mcp_call(&old, "bind", bind(i)).await,
                "the baseline's MCP bind failed"
            );
        }
        for i in 0..calls {
            for turn in 0..2 {
                let first = (i + turn) % 2 == 0;
                let client = if first { &new } else { &old };
                let start = Instant::now();
                assert!(mcp_call(client, "bind", bind(i + 5)).await);
                if first {
                    &mut new_times
                } else {
                    &mut old_times
                }
                .push(start.elapsed());
            }
        }
        new.cancel().await.unwrap();
        old.cancel().await.unwrap();
    });
    let (a, b) = (median(new_times), median(old_times));
    let ratio = a.as_secs_f64() / b.as_secs_f64();
    rows.push(Row {
        what: format!(
            "{what}: this build, history kept, vs the release before history ({name}), one session each, median of {calls}"
        ),
        ours: ms(a),
        raw: format!("{} ({name})", ms(b)),
        ratio: format!("{ratio:.3}"),
        target: "≤ 1.10".into(),
        met: if ratio <= 1.10 { "yes" } else { "no" }.into(),
    });
}

/// A run's size as `size` reads it (compacted; and as written, where that differs) after `n`
/// rebinds of a 100-byte value, after `n` more, after `n` appends of a 38-byte item, and after
/// `n` more: the second `n` of each are the marginal cost (the first pay for the tables' first
/// pages). ((rebinds from, to), (appends from, to)), each (compacted, as written).
#[allow(clippy::type_complexity)]
fn disk_growth(
    make: &dyn Fn() -> Command,
    n: usize,
    size: &dyn Fn() -> (i64, Option<i64>),
) -> ((i64, (i64, Option<i64>)), (i64, (i64, Option<i64>))) {
    let write = |args: &[&str]| assert!(timed(make().args(args)).1, "{args:?} failed");
    for i in 0..n {
        write(&["bind", "x", &hundred_bytes(i)]);
    }
    let rebind_from = size().0;
    for i in n..2 * n {
        write(&["bind", "x", &hundred_bytes(i)]);
    }
    let rebind_to = size();
    for i in 0..n {
        write(&["bind", "acc", "--append", &append_item(i)]);
    }
    let append_from = size().0;
    for i in n..2 * n {
        write(&["bind", "acc", "--append", &append_item(i)]);
    }
    let append_to = size();
    ((rebind_from, rebind_to), (append_from, append_to))
}

/// The disk rows: what a version and an append step add, this build against the baseline.
#[allow(clippy::type_complexity)]
fn disk_rows(
    how: &str,
    baseline: &str,
    n: usize,
    ours: ((i64, (i64, Option<i64>)), (i64, (i64, Option<i64>))),
    old: ((i64, (i64, Option<i64>)), (i64, (i64, Option<i64>))),
    rows: &mut Vec<Row>,
) {
    let per = |(from, (to, written)): (i64, (i64, Option<i64>))| {
        let b = |to: i64| (to - from) as f64 / n as f64;
        match written {
            Some(w) => format!("{:.0} B a write ({:.0} B as written)", b(to), b(w)),
            None => format!("{:.0} B a write", b(to)),
        }
    };
    let diff = |a: (i64, (i64, Option<i64>)), b: (i64, (i64, Option<i64>))| {
        ((a.1 .0 - a.0) - (b.1 .0 - b.0)) as f64 / n as f64
    };
    for (what, a, b) in [
        ("a version of a 100-byte value (a rebind)", ours.0, old.0),
        (
            "a step of a `bind --append` accumulator (38-byte item)",
            ours.1,
            old.1,
        ),
    ] {
        rows.push(Row {
            what: format!(
                "disk, {what}: growth over {n} writes past the first {n}, this build vs {baseline}, {how}"
            ),
            ours: per(a),
            raw: format!("{} ({baseline})", per(b)),
            ratio: format!("+{:.0} B a write", diff(a, b)),
            target: "reported".into(),
            met: String::new(),
        });
    }
}

/// Issue 31's performance rows: what history costs a write, a read and the disk, and `fork`
/// against `export` + `import` of a large run. Both backends, SQLite's rows first.
fn history_rows(root: &Path, calls: usize, rows: &mut Vec<Row>) {
    let project = root.join("history");
    std::fs::create_dir_all(&project).unwrap();
    let seed = (1_000, 1_000);

    // 1. A rebind and an append, SQLite.
    eprintln!("  a run of 1,000 records and 1,000 bindings, SQLite…");
    let on_db = init(&project, "on");
    fill_sqlite_run(&on_db, seed.0, seed.1);
    // What a write costs against today is measured against the release before history,
    // not against this binary with its history triggers dropped: such a write is refused now
    // (exit 9), rather than recorded wrongly.
    history_vs_baseline(root, calls, rows);

    // 2. `get` of a binding with 1,000 versions against one with 1, SQLite: the versions
    // written straight through SQLite (the triggers keep them as any writer's).
    eprintln!("  get with history, SQLite…");
    {
        let c = rusqlite::Connection::open(&on_db).unwrap();
        c.execute_batch("BEGIN").unwrap();
        for (name, versions) in [
            ("many", 1_000),
            ("one", 1),
            ("deep", 10_000),
            ("shallow", 1),
        ] {
            c.execute(
                "INSERT INTO bindings (name, kind, value) VALUES (?1, 'let', ?2)",
                rusqlite::params![name, hundred_bytes(0)],
            )
            .unwrap();
            let mut update = c
                .prepare_cached(
                    "UPDATE bindings SET value = ?2 WHERE name = ?1 AND execution_id IS NULL",
                )
                .unwrap();
            for i in 1..versions {
                update
                    .execute(rusqlite::params![name, hundred_bytes(i)])
                    .unwrap();
            }
        }
        c.execute_batch("COMMIT").unwrap();
    }
    assert_eq!(
        count_sqlite(
            &on_db,
            "SELECT COUNT(*) FROM binding_history WHERE name = 'many'"
        ),
        1_000
    );
    let get_row = |backend: &str, many: Duration, one: Duration| {
        let ratio = many.as_secs_f64() / one.as_secs_f64();
        Row {
            what: format!(
                "`get` of a binding with 1,000 versions in history, vs one with 1 version, {backend} (same run), median of {calls}"
            ),
            ours: ms(many),
            raw: format!("{} (1 version)", ms(one)),
            ratio: format!("{ratio:.3}"),
            target: "≈ 1.00 (`get` stays where it is)".into(),
            met: if ratio <= 1.10 { "yes" } else { "no" }.into(),
        }
    };
    let (many, one) = side_by_side(
        calls,
        &|_| {
            let mut c = prose(&project, "on");
            c.args(["get", "many"]);
            c
        },
        &|_| {
            let mut c = prose(&project, "on");
            c.args(["get", "one"]);
            c
        },
    );
    rows.push(get_row("SQLite", many, one));
    rows.push(deep_rebind_row(calls, "SQLite", &|name, i| {
        let mut c = prose(&project, "on");
        c.args(["bind", name, &hundred_bytes(i)]);
        c
    }));

    // 1 and 2 on PostgreSQL: two fresh databases of the server, the triggers dropped in one.
    let what = "a write with history and without, and `get`, on PostgreSQL";
    let pg_on = pg_project(root, "pg-history-on", what, rows);
    let pg_off = pg_on
        .as_ref()
        .and_then(|_| pg_project(root, "pg-history-off", what, rows));
    if let (Some((p_on, u_on)), Some((p_off, u_off))) = (pg_on, pg_off) {
        eprintln!("  two runs of 1,000 records and 1,000 bindings, PostgreSQL…");
        for (p, u) in [(&p_on, &u_on), (&p_off, &u_off)] {
            let ok = Command::new(BIN)
                .current_dir(p)
                .env("PROSE_ROOT", p)
                .args(["init", "--backend", "postgres", "--run-id", "h"])
                .stdout(Stdio::null())
                .status()
                .unwrap()
                .success();
            assert!(ok, "init on postgres failed");
            let mut c = postgres::Client::connect(u, postgres::NoTls).unwrap();
            c.batch_execute(&format!(
                "INSERT INTO openprose.execution (run_id, statement_index, statement_text, status,
                                                  started_at, completed_at, principal)
                   SELECT 'h', i, 'let b = session \"step ' || i || '\"', 'completed', now(), now(), 'bench'
                   FROM generate_series(1, {}) i;
                 INSERT INTO openprose.bindings (name, run_id, kind, value)
                   SELECT 'b' || lpad(i::text, 6, '0'), 'h', 'let', rpad(lpad(i::text, 6, '0') || ' ', 100, 'v')
                   FROM generate_series(1, {}) i;
                 ANALYZE;",
                seed.0, seed.1
            ))
            .unwrap();
        }
        eprintln!("  get with history, PostgreSQL…");
        let mut c = postgres::Client::connect(&u_on, postgres::NoTls).unwrap();
        c.batch_execute(
            "INSERT INTO openprose.bindings (name, run_id, kind, value)
               VALUES ('many', 'h', 'let', rpad('000000 ', 100, 'v')),
                      ('one', 'h', 'let', rpad('000000 ', 100, 'v')),
                      ('deep', 'h', 'let', rpad('000000 ', 100, 'v')),
                      ('shallow', 'h', 'let', rpad('000000 ', 100, 'v'));
             DO $$ BEGIN
               FOR i IN 1..999 LOOP
                 UPDATE openprose.bindings SET value = rpad(lpad(i::text, 6, '0') || ' ', 100, 'v')
                  WHERE run_id = 'h' AND name = 'many';
               END LOOP;
               FOR i IN 1..9999 LOOP
                 UPDATE openprose.bindings SET value = rpad(lpad(i::text, 6, '0') || ' ', 100, 'v')
                  WHERE run_id = 'h' AND name = 'deep';
               END LOOP;
             END $$;
             ANALYZE;",
        )
        .unwrap();
        assert_eq!(
            count_pg(
                &u_on,
                "SELECT COUNT(*) FROM openprose.binding_history WHERE run_id = 'h' AND name = 'many'"
            ),
            1_000
        );
        let (many, one) = side_by_side(
            calls,
            &|_| {
                let mut c = prose(&p_on, "h");
                c.args(["get", "many"]);
                c
            },
            &|_| {
                let mut c = prose(&p_on, "h");
                c.args(["get", "one"]);
                c
            },
        );
        rows.push(get_row("PostgreSQL", many, one));
        rows.push(deep_rebind_row(calls, "PostgreSQL", &|name, i| {
            let mut c = prose(&p_on, "h");
            c.args(["bind", name, &hundred_bytes(i)]);
            c
        }));
    }

    // 4. Disk: against the release before history, in `history_vs_baseline` above.

    // 3. Fork against export + import.
    history_fork(root, rows);
}

/// A rebind of a binding with 10,000 versions in history against one of a binding that had
/// one (`bind(name, i)`: the command for the `i`-th call): a write looks at the history's newest
/// version only, so it must not cost more the more often the binding was rebound.
fn deep_rebind_row(calls: usize, backend: &str, bind: &dyn Fn(&str, usize) -> Command) -> Row {
    eprintln!("  a rebind of a binding with 10,000 versions, {backend}…");
    let (deep, shallow) = side_by_side(calls, &|i| bind("deep", i), &|i| bind("shallow", i));
    let ratio = deep.as_secs_f64() / shallow.as_secs_f64();
    Row {
        what: format!(
            "`bind` rebinding a binding with 10,000 versions in history, vs one that had 1 before the first call, {backend} (same run), median of {calls}"
        ),
        ours: ms(deep),
        raw: format!("{} (1 version, then one more a call)", ms(shallow)),
        ratio: format!("{ratio:.3}"),
        target: "≈ 1.00 (a write does not grow with its binding's history)".into(),
        met: if ratio <= 1.10 { "yes" } else { "no" }.into(),
    }
}

/// A SQLite database's size once its log is checkpointed into it and it is vacuumed.
fn compacted_size(db: &Path) -> u64 {
    let c = rusqlite::Connection::open(db).unwrap();
    let checkpoint = || {
        c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap()
    };
    checkpoint();
    c.execute_batch("VACUUM").unwrap();
    checkpoint();
    drop(c);
    std::fs::metadata(db).unwrap().len()
}

/// `fork --at` the newest record (and at the middle one) of a SQLite run of `records`
/// execution records and `bindings` bindings, against `export` + `import --run-id NEW
/// --vouch` of the same run, which lands a copy the way a fork does; three rounds, which goes
/// first alternating; then the same on PostgreSQL, the run brought in there by `import`.
fn history_fork(root: &Path, rows: &mut Vec<Row>) {
    let records = env_usize("PROSE_BENCH_FORK_RECORDS", 200_000);
    let bindings = env_usize("PROSE_BENCH_FORK_BINDINGS", 10_000);
    let rounds = env_usize("PROSE_BENCH_FORK_ROUNDS", 3);
    let project = root.join("fork");
    std::fs::create_dir_all(&project).unwrap();
    let db = init(&project, "source");
    let made = Instant::now();
    let last = fill_sqlite_run(&db, records, bindings);
    let versions = count_sqlite(&db, "SELECT COUNT(*) FROM binding_history");
    let mid = count_sqlite(
        &db,
        &format!(
            "SELECT id FROM execution ORDER BY id LIMIT 1 OFFSET {}",
            records / 2 - 1
        ),
    );
    let size = compacted_size(&db);
    eprintln!(
        "  the fork's source: {records} records, {bindings} bindings, {versions} versions, {:.1} MB, made in {:.1} s",
        size as f64 / 1e6,
        made.elapsed().as_secs_f64()
    );
    let setting = format!(
        "a run of {records} records and {bindings} bindings ({versions} versions in history, state.db {:.0} MB)",
        size as f64 / 1e6
    );
    let cmd = |p: &Path, args: &[&str]| {
        let mut c = Command::new(BIN);
        c.current_dir(p).env("PROSE_ROOT", p).args(args);
        c
    };
    let runs = project.join(".prose/runs");
    let carried = |id: &str| {
        let db = runs.join(id).join("state.db");
        (
            count_sqlite(&db, "SELECT COUNT(*) FROM execution"),
            count_sqlite(&db, "SELECT COUNT(*) FROM bindings"),
            count_sqlite(&db, "SELECT COUNT(*) FROM binding_history"),
        )
    };
    let (mut fork, mut half, mut export, mut import) = (vec![], vec![], vec![], vec![]);
    let mut history_carried = (0, 0);
    for i in 0..rounds {
        let out = root.join(format!("fork-export-{i}"));
        for turn in 0..2 {
            if (i + turn) % 2 == 0 {
                let at = last.to_string();
                let (d, ok) = timed(&mut cmd(
                    &project,
                    &[
                        "--run",
                        "source",
                        "fork",
                        "--at",
                        &at,
                        "--run-id",
                        &format!("fork{i}"),
                    ],
                ));
                assert!(ok, "fork failed");
                fork.push(d);
                let at = mid.to_string();
                let (d, ok) = timed(&mut cmd(
                    &project,
                    &[
                        "--run",
                        "source",
                        "fork",
                        "--at",
                        &at,
                        "--run-id",
                        &format!("half{i}"),
                    ],
                ));
                assert!(ok, "fork at the middle failed");
                half.push(d);
            } else {
                let mut c = cmd(&project, &["--run", "source", "export", "-o"]);
                let (d, ok) = timed(c.arg(&out));
                assert!(ok, "export failed");
                export.push(d);
                let mut c = cmd(&project, &["import"]);
                c.arg(&out)
                    .args(["--run-id", &format!("copy{i}"), "--vouch"]);
                let (d, ok) = timed(&mut c);
                assert!(ok, "import failed");
                import.push(d);
            }
        }
        let (f, c) = (carried(&format!("fork{i}")), carried(&format!("copy{i}")));
        assert_eq!(
            (f.0, f.1),
            (records as i64, bindings as i64),
            "the fork's content"
        );
        assert_eq!(
            (c.0, c.1),
            (records as i64, bindings as i64),
            "the copy's content"
        );
        let h = carried(&format!("half{i}"));
        assert_eq!(h.0, records as i64 / 2, "the fork at the middle's records");
        history_carried = (f.2, c.2);
        for id in [format!("fork{i}"), format!("half{i}"), format!("copy{i}")] {
            std::fs::remove_dir_all(runs.join(id)).unwrap();
        }
        if i > 0 {
            std::fs::remove_dir_all(&out).unwrap();
        }
    }
    let (fork, half, export, import) = (median(fork), median(half), median(export), median(import));
    let copy = export + import;
    let vs = format!(
        "{} (`export` {} + `import --run-id NEW --vouch` {})",
        ms(copy),
        ms(export),
        ms(import)
    );
    rows.push(Row {
        what: format!(
            "`fork --at` the newest record of {setting}, SQLite (the fork holds {} history rows, the copy {}), median of {rounds}",
            history_carried.0, history_carried.1
        ),
        ours: ms(fork),
        raw: vs.clone(),
        ratio: format!("{:.2}", fork.as_secs_f64() / copy.as_secs_f64()),
        target: "reported".into(),
        met: String::new(),
    });
    rows.push(Row {
        what: format!(
            "`fork --at` the middle record of the same run (half its records), SQLite, median of {rounds}"
        ),
        ours: ms(half),
        raw: vs,
        ratio: format!("{:.2}", half.as_secs_f64() / copy.as_secs_f64()),
        target: "reported".into(),
        met: String::new(),
    });

    // PostgreSQL: the run brought in by `import`, then forked there and copied there.
    let what = format!("`fork` of {setting} on PostgreSQL");
    let Some((p, url)) = pg_project(root, "pg-fork", &what, rows) else {
        return;
    };
    let mut c = cmd(&p, &["import"]);
    c.arg(root.join("fork-export-0"))
        .args(["--run-id", "source", "--vouch"]);
    let (brought, ok) = timed(&mut c);
    assert!(ok, "import into postgres failed");
    eprintln!(
        "  the source brought into PostgreSQL in {:.1} s",
        brought.as_secs_f64()
    );
    let pg_last = count_pg(
        &url,
        "SELECT MAX(id) FROM openprose.execution WHERE run_id = 'source'",
    );
    let pg_rounds = env_usize("PROSE_BENCH_FORK_PG_ROUNDS", rounds);
    let (mut fork, mut export, mut import) = (vec![], vec![], vec![]);
    let pg_count = |table: &str, run: &str| {
        count_pg(
            &url,
            &format!("SELECT COUNT(*) FROM openprose.{table} WHERE run_id = '{run}'"),
        )
    };
    for i in 0..pg_rounds {
        let out = root.join(format!("pg-fork-export-{i}"));
        for turn in 0..2 {
            if (i + turn) % 2 == 0 {
                let at = pg_last.to_string();
                let (d, ok) = timed(&mut cmd(
                    &p,
                    &[
                        "--run",
                        "source",
                        "fork",
                        "--at",
                        &at,
                        "--run-id",
                        &format!("fork{i}"),
                    ],
                ));
                assert!(ok, "fork on postgres failed");
                fork.push(d);
            } else {
                let mut c = cmd(&p, &["--run", "source", "export", "-o"]);
                let (d, ok) = timed(c.arg(&out));
                assert!(ok, "export from postgres failed");
                export.push(d);
                let mut c = cmd(&p, &["import"]);
                c.arg(&out)
                    .args(["--run-id", &format!("copy{i}"), "--vouch"]);
                let (d, ok) = timed(&mut c);
                assert!(ok, "import into postgres failed");
                import.push(d);
            }
        }
        for run in [format!("fork{i}"), format!("copy{i}")] {
            assert_eq!(
                pg_count("execution", &run),
                records as i64,
                "{run}'s records"
            );
            assert_eq!(
                pg_count("bindings", &run),
                bindings as i64,
                "{run}'s bindings"
            );
        }
        std::fs::remove_dir_all(&out).unwrap();
    }
    let (fork, export, import) = (median(fork), median(export), median(import));
    let copy = export + import;
    rows.push(Row {
        what: format!(
            "`fork --at` the newest record of the same run on PostgreSQL (brought in by `import`: {}), median of {pg_rounds}",
            ms(brought)
        ),
        ours: ms(fork),
        raw: format!(
            "{} (`export` {} + `import --run-id NEW --vouch` {})",
            ms(copy),
            ms(export),
            ms(import)
        ),
        ratio: format!("{:.2}", fork.as_secs_f64() / copy.as_secs_f64()),
        target: "reported".into(),
        met: String::new(),
    });
}

// Issue 32, live state: how soon a waiter hears of a decision, what idle waiters cost, and
// what the NOTIFY adds to a decision's commit.

/// A command of the live group: `prose(project, run)` with HOME in the project (where
/// `principals add` and `serve` keep what they keep), woken by the commit (`poll` false) or
/// polling as before (`PROSE_STATE_WAKE=poll`), whatever the bench's own environment says.
fn live_cmd(project: &Path, run: &str, poll: bool) -> Command {
    let mut c = prose(project, run);
    c.env("HOME", project);
    if poll {
        c.env("PROSE_STATE_WAKE", "poll");
    } else {
        c.env_remove("PROSE_STATE_WAKE");
    }
    c
}

fn how(poll: bool) -> &'static str {
    if poll {
        "polling (`PROSE_STATE_WAKE=poll`, the default 1 s `--poll`)"
    } else {
        "woken by the commit"
    }
}

/// `gates create GATE` in the run, due in a day.
fn create_gate(project: &Path, run: &str, gate: &str) {
    let (_, ok) = timed(live_cmd(project, run, false).args([
        "gates",
        "create",
        gate,
        "--prompt",
        "Ship it?",
        "--timeout",
        "1d",
    ]));
    assert!(ok, "gates create {gate} failed");
}

/// `approve GATE --yes --as alice`: when the process was started and when it had exited (the
/// decision committed before the exit, after the start).
fn approve_at(project: &Path, run: &str, gate: &str) -> (Instant, Instant) {
    let mut c = live_cmd(project, run, false);
    c.args(["approve", gate, "--yes", "--as", "alice"]);
    let start = Instant::now();
    let (_, ok) = timed(&mut c);
    let end = Instant::now();
    assert!(ok, "approve {gate} failed");
    (start, end)
}

/// How long a waiter is left waiting before the decision: the settle time (the waiter has
/// started, looked once and set up its wake-up), plus a uniformly random part of a poll
/// interval (1 s), so that a polling waiter is caught at every point of its interval.
fn before_deciding(settle_ms: u64) -> Duration {
    Duration::from_millis(settle_ms + rand::random_range(0..1000u64))
}

/// `later - earlier` in milliseconds, negative when `later` came first.
fn signed_ms(later: Instant, earlier: Instant) -> f64 {
    if later >= earlier {
        (later - earlier).as_secs_f64() * 1e3
    } else {
        -((earlier - later).as_secs_f64() * 1e3)
    }
}

/// One decision-to-wake round, in ms to the waiter's answer: from the `approve` process's exit
/// and from its start. The commit lies between the two, so the first is a lower bound of the
/// latency (short of it by the approve's own exit after its commit: on PostgreSQL a few ms,
/// enough to make it negative at times) and the second an upper bound (long by the approve's
/// start-up, connection and work before its commit). The database keeps no finer time of the
/// decision to measure from (its timestamps are whole seconds).
struct Sample {
    exit: f64,
    start: f64,
}

/// The round's sample: the approve's (start, exit) and the answer's arrival.
fn sample((t0, t1): (Instant, Instant), at: Instant) -> Sample {
    Sample {
        exit: signed_ms(at, t1),
        start: signed_ms(at, t0),
    }
}

/// The `q` quantile of `v` (nearest rank).
fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[((s.len() as f64 * q).ceil() as usize).clamp(1, s.len()) - 1]
}

/// One decision-to-wake row: p50 and p99 of the lower bound (from the approve's exit), on
/// which the target is judged, and of the upper bound (from its start); see `Sample`.
fn wake_row(who: &str, backend: &str, poll: bool, samples: &[Sample]) -> Row {
    let q = |f: &dyn Fn(&Sample) -> f64| {
        let v: Vec<f64> = samples.iter().map(f).collect();
        (quantile(&v, 0.50), quantile(&v, 0.99))
    };
    let (exit, start) = (q(&|s| s.exit), q(&|s| s.start));
    Row {
        what: format!(
            "decision-to-wake, {who}, {backend}, {}: an `approve` process decides, {} rounds; p50 / p99 from the approve's exit to the waiter's answer (a lower bound: the commit came before the exit); from the approve's start in the next column (an upper bound)",
            how(poll),
            samples.len()
        ),
        ours: format!("{:.1} / {:.1} ms", exit.0, exit.1),
        raw: format!("{:.1} / {:.1} ms from the approve's start", start.0, start.1),
        ratio: String::new(),
        target: if poll {
            "(today: up to a poll interval)".into()
        } else {
            "p99 ≤ 50 ms".into()
        },
        met: if poll {
            String::new()
        } else if exit.1 <= 50.0 {
            "yes".into()
        } else {
            "no".into()
        },
    }
}

/// A CLI `gates wait GATE` process waiting, each round a gate of its own: from the decision to
/// the first byte of the waiter's answer on its stdout.
fn wake_cli(project: &Path, run: &str, poll: bool, rounds: usize, settle: u64) -> Vec<Sample> {
    let tag = if poll { "poll" } else { "wake" };
    (0..rounds)
        .map(|i| {
            let gate = format!("cli-{tag}-{i}");
            create_gate(project, run, &gate);
            let mut child = live_cmd(project, run, poll)
                .args(["gates", "wait", &gate, "--timeout", "120s"])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut out = child.stdout.take().unwrap();
            let reader = std::thread::spawn(move || {
                let mut first = [0u8; 1];
                let n = out.read(&mut first).unwrap_or(0);
                let at = Instant::now();
                let mut rest = Vec::new();
                let _ = out.read_to_end(&mut rest);
                rest.insert(0, first[0]);
                (at, n, String::from_utf8_lossy(&rest).into_owned())
            });
            std::thread::sleep(before_deciding(settle));
            assert!(
                child.try_wait().unwrap().is_none(),
                "the waiter of {gate} ended before the decision"
            );
            let (t0, t1) = approve_at(project, run, &gate);
            let (at, n, text) = reader.join().unwrap();
            assert!(
                child.wait().unwrap().success() && n == 1 && text.contains("approved"),
                "the waiter of {gate} did not report the approval: {text}"
            );
            sample((t0, t1), at)
        })
        .collect()
}

/// `serve` on the project (HOME in it), its port once it listens.
fn start_serve(project: &Path) -> (std::process::Child, u16) {
    let mut child = Command::new(BIN)
        .current_dir(project)
        .env("PROSE_ROOT", project)
        .env("HOME", project)
        .env_remove("PROSE_STATE_WAKE")
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let port: u16 = line
        .trim()
        .trim_start_matches("listening on http://127.0.0.1:")
        .trim_end_matches('/')
        .parse()
        .unwrap_or_else(|_| panic!("serve said: {line}"));
    (child, port)
}

/// The page's event stream: `serve` running, one signed-in client holding
/// `/runs/{run}/events` over a raw HTTP/1.1 connection; each round a gate of its own in the
/// run, decided by an `approve` process: from the decision to the `change` event it brings.
/// (A gate's create brings one too: the events before the decision are let pass.)
fn wake_page(project: &Path, run: &str, rounds: usize, settle: u64) -> Vec<Sample> {
    let token = String::from_utf8(
        live_cmd(project, run, false)
            .args(["principals", "add", "alice"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    let (mut serve, port) = start_serve(project);
    let (code, _, text) = http(port, "POST", "/login", None, &format!("token={token}"));
    assert_eq!(code, 303, "{text}");
    let cookie = text
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.split(';').next())
        .unwrap()
        .trim()
        .to_string();
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stream,
        "GET /runs/{run}/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nCookie: {cookie}\r\n\r\n"
    )
    .unwrap();
    // The reader: the moment of each `change` event, once the answer's head said 200.
    let (tx, rx) = std::sync::mpsc::channel::<Result<Instant, String>>();
    std::thread::spawn(move || {
        let mut seen = String::new();
        let (mut head, mut changes) = (false, 0);
        let mut buf = [0u8; 4096];
        loop {
            let n = match stream.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let at = Instant::now();
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            if !head {
                let Some(end) = seen.find("\r\n\r\n") else {
                    continue;
                };
                if !seen.starts_with("HTTP/1.1 200") {
                    let _ = tx.send(Err(seen.clone()));
                    return;
                }
                head = true;
                seen.drain(..end + 4);
                if tx.send(Ok(at)).is_err() {
                    return;
                }
            }
            let now = seen.matches("event: change").count();
            for _ in changes..now {
                if tx.send(Ok(at)).is_err() {
                    return;
                }
            }
            changes = now;
        }
    });
    let opened = rx.recv_timeout(Duration::from_secs(10));
    assert!(
        matches!(opened, Ok(Ok(_))),
        "the event stream did not open: {opened:?}"
    );
    let samples = (0..rounds)
        .map(|i| {
            let gate = format!("page-{i}");
            create_gate(project, run, &gate);
            std::thread::sleep(before_deciding(settle));
            while rx.try_recv().is_ok() {}
            let (t0, t1) = approve_at(project, run, &gate);
            loop {
                let at = rx
                    .recv_timeout(Duration::from_secs(60))
                    .unwrap_or_else(|e| panic!("no change event after approving {gate}: {e}"))
                    .unwrap();
                if at >= t0 {
                    break sample((t0, t1), at);
                }
            }
        })
        .collect();
    let _ = serve.kill();
    let _ = serve.wait();
    samples
}

/// A session of rmcp's client with `prose-state mcp` and these options, woken by the commit or
/// polling; the server's process id.
async fn mcp_session_live(
    project: &Path,
    run: &str,
    options: &[&str],
    poll: bool,
) -> (
    rmcp::service::RunningService<rmcp::service::RoleClient, ()>,
    u32,
) {
    use rmcp::ServiceExt;
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.current_dir(project)
        .env("PROSE_ROOT", project)
        .env("HOME", project)
        .env_remove("PROSE_RUN")
        .args(["--run", run, "mcp"])
        .args(options)
        .stderr(Stdio::null());
    if poll {
        cmd.env("PROSE_STATE_WAKE", "poll");
    } else {
        cmd.env_remove("PROSE_STATE_WAKE");
    }
    let transport = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
    let pid = transport.id().unwrap();
    (().serve(transport).await.unwrap(), pid)
}

/// A session of rmcp's client with `prose-state mcp --role vm` at protocol 2026-07-28, woken
/// by the commit, from a client that declares the tasks extension (`io.modelcontextprotocol/tasks`): its
/// `gates_wait` calls run as MCP tasks.
async fn mcp_session_tasks(
    project: &Path,
    run: &str,
) -> rmcp::service::RunningService<rmcp::service::RoleClient, rmcp::model::ClientConfig> {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.current_dir(project)
        .env("PROSE_ROOT", project)
        .env("HOME", project)
        .env_remove("PROSE_RUN")
        .env_remove("PROSE_STATE_WAKE")
        .env_remove("PROSE_SERVE_URL")
        .args(["--run", run, "mcp", "--role", "vm", "--agent", "vm"])
        .stderr(Stdio::null());
    let transport = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
    let info = rmcp::model::ClientConfig::new(
        rmcp::model::ClientCapabilities::builder()
            .enable_tasks()
            .build(),
        rmcp::model::Implementation::new("prose-bench", "0"),
    );
    // Protocol 2026-07-28 (`server/discover`): the tasks extension's revision, where
    // `subscriptions/listen` is served.
    use rmcp::service::ClientServiceExt;
    info.serve_with_lifecycle(
        transport,
        rmcp::service::ClientLifecycleMode::Discover {
            preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .unwrap()
}

/// How an MCP client waits for a gate's decision: the bounded `gates_wait` tool call, or
/// `gates_wait` as an MCP task followed one of three ways. A variant added here and in
/// `mcp_wait_for` is measured by `wake_mcp` as the others are.
#[derive(Clone, Copy)]
enum McpWait {
    /// `tools/call gates_wait {gate, timeout}`, answered when the gate is decided.
    BoundedTool,
    /// `gates_wait` as a task; `tasks/get` every `pollIntervalMs` the server suggests (what a
    /// host that follows the hint sees).
    TaskPolled,
    /// `gates_wait` as a task, the host subscribed to the gate's resource in `run`
    /// (`subscriptions/listen`): `tasks/get` on each update (and at `pollIntervalMs` after an
    /// update that found the task still working).
    TaskSubscribed { run: &'static str },
    /// `gates_wait` as a task; `tasks/get` back to back: the server's own part, bounded.
    TaskTight,
}

/// Updates (subscribed tasks) whose `tasks/get` found the task still working, so far.
static STILL_WORKING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl McpWait {
    fn label(self) -> &'static str {
        match self {
            McpWait::BoundedTool => {
                "an MCP `gates_wait` tool call (bounded) in one `prose-state mcp` session"
            }
            McpWait::TaskPolled => {
                "an MCP task (`gates_wait` from a client declaring the tasks extension; rmcp's client), `tasks/get` every `pollIntervalMs` the server suggests (1000 ms), from the task's creation"
            }
            McpWait::TaskSubscribed { .. } => {
                "an MCP task whose host subscribed to the gate's resource (`subscriptions/listen`, `prose://runs/{run}/gates/{gate}`) and calls `tasks/get` on its update"
            }
            McpWait::TaskTight => {
                "an MCP task, `tasks/get` back to back (the bound on the server's own part; against the spec's SHOULD on `pollIntervalMs`)"
            }
        }
    }

    fn task(self) -> bool {
        !matches!(self, McpWait::BoundedTool)
    }
}

/// Whether a `tasks/get` answer (as JSON) is terminal; then Ok if its result is the approval.
fn task_ended(got: &serde_json::Value) -> Option<Result<(), String>> {
    match got["status"].as_str() {
        Some("working") | Some("input_required") => None,
        Some("completed")
            if got["result"]["isError"] != serde_json::Value::Bool(true)
                && got["result"].to_string().contains("approved") =>
        {
            Some(Ok(()))
        }
        _ => Some(Err(got.to_string())),
    }
}

/// Starts waiting on `gate` in the session, `timeout` seconds at most; the task ends when the
/// decision reached the client: the moment it did, and whether the answer was the approval
/// (else the answer).
fn mcp_wait_for(
    peer: &rmcp::service::Peer<rmcp::service::RoleClient>,
    how: McpWait,
    gate: &str,
    timeout: u64,
) -> tokio::task::JoinHandle<(Instant, Result<(), String>)> {
    let peer = peer.clone();
    let gate = gate.to_string();
    let serde_json::Value::Object(args) = (match how {
        McpWait::BoundedTool => serde_json::json!({"gate": gate, "timeout": format!("{timeout}s")}),
        _ => serde_json::json!({"gate": gate}),
    }) else {
        unreachable!()
    };
    let call = rmcp::model::CallToolRequestParams::new("gates_wait").with_arguments(args);
    match how {
        McpWait::BoundedTool => tokio::spawn(async move {
            let r = peer.call_tool(call).await;
            let at = Instant::now();
            let outcome = match r {
                Ok(r) => {
                    let text = serde_json::to_string(&r).unwrap_or_default();
                    if r.is_error != Some(true) && text.contains("approved") {
                        Ok(())
                    } else {
                        Err(text)
                    }
                }
                Err(e) => Err(e.to_string()),
            };
            (at, outcome)
        }),
        McpWait::TaskPolled | McpWait::TaskTight | McpWait::TaskSubscribed { .. } => {
            tokio::spawn(async move {
                let fail = |e: String| (Instant::now(), Err(e));
                // The subscription first, as docs/mcp.md has a host do it; its first update is
                // the gate as it is now.
                let mut sub = None;
                if let McpWait::TaskSubscribed { run } = how {
                    let uri = format!("prose://runs/{run}/gates/{gate}");
                    let filter = rmcp::model::SubscriptionFilter::builder()
                        .resource_subscription(uri)
                        .build();
                    let mut s = match peer.listen(filter).await {
                        Ok(s) => s,
                        Err(e) => return fail(format!("listen: {e}")),
                    };
                    match s.next().await {
                        Ok(Some(_)) => {}
                        other => return fail(format!("the stream's first update: {other:?}")),
                    }
                    sub = Some(s);
                }
                let created = match peer.call_tool_once(call).await {
                    Ok(rmcp::model::CallToolResponse::Task(t)) => t,
                    other => return fail(format!("not a task: {other:?}")),
                };
                let id = created.task.task_id.clone();
                let every = Duration::from_millis(created.task.poll_interval_ms.unwrap_or(1_000));
                let get = || {
                    let peer = peer.clone();
                    let id = id.clone();
                    async move {
                        let got = peer
                            .get_task(rmcp::model::GetTaskParams::new(id))
                            .await
                            .map_err(|e| e.to_string())?;
                        Ok::<_, String>((Instant::now(), serde_json::to_value(&got).unwrap()))
                    }
                };
                let mut after_update = false;
                loop {
                    match (how, sub.as_mut()) {
                        (McpWait::TaskPolled, _) => tokio::time::sleep(every).await,
                        (McpWait::TaskSubscribed { .. }, Some(s)) => {
                            // The next update; after one that found the task working, also
                            // the poll interval.
                            let wait = if after_update {
                                every
                            } else {
                                Duration::from_secs(600)
                            };
                            match tokio::time::timeout(wait, s.next()).await {
                                Ok(Ok(Some(_))) | Err(_) => {}
                                Ok(other) => return fail(format!("the stream ended: {other:?}")),
                            }
                        }
                        _ => tokio::task::yield_now().await,
                    }
                    let (at, got) = match get().await {
                        Ok(g) => g,
                        Err(e) => return fail(e),
                    };
                    if let Some(outcome) = task_ended(&got) {
                        if let Some(mut s) = sub {
                            let _ = s.cancel().await;
                        }
                        return (at, outcome);
                    }
                    if sub.is_some() {
                        after_update = true;
                        STILL_WORKING.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            })
        }
    }
}

/// The MCP server's wait: each round a gate of its own, waited on the `how` way in one VM
/// session, decided by an `approve` process: from the decision to the answer's arrival.
fn wake_mcp(
    rt: &tokio::runtime::Runtime,
    project: &Path,
    run: &str,
    how: McpWait,
    poll: bool,
    rounds: usize,
    settle: u64,
) -> Vec<Sample> {
    let tag = if poll { "poll" } else { "wake" };
    rt.block_on(async {
        let peer_of;
        let closing: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>;
        if how.task() {
            assert!(!poll, "an MCP task is measured woken by the commit only");
            let client = mcp_session_tasks(project, run).await;
            peer_of = client.peer().clone();
            closing = Box::pin(async move {
                let _ = client.cancel().await;
            });
        } else {
            let (client, _) =
                mcp_session_live(project, run, &["--role", "vm", "--agent", "vm"], poll).await;
            peer_of = client.peer().clone();
            closing = Box::pin(async move {
                let _ = client.cancel().await;
            });
        }
        let label = match how {
            McpWait::BoundedTool => "mcp",
            McpWait::TaskPolled => "task-polled",
            McpWait::TaskSubscribed { .. } => "task-subscribed",
            McpWait::TaskTight => "task-tight",
        };
        let mut samples = Vec::new();
        for i in 0..rounds {
            let gate = format!("{label}-{tag}-{i}");
            tokio::task::block_in_place(|| create_gate(project, run, &gate));
            let call = mcp_wait_for(&peer_of, how, &gate, 120);
            tokio::time::sleep(before_deciding(settle)).await;
            if call.is_finished() {
                let (_, outcome) = call.await.unwrap();
                panic!("the MCP wait on {gate} ended before the decision: {outcome:?}");
            }
            let (t0, t1) = tokio::task::block_in_place(|| approve_at(project, run, &gate));
            let (at, outcome) = call.await.unwrap();
            if let Err(e) = outcome {
                panic!("the MCP wait on {gate} did not answer the approval: {e}");
            }
            samples.push(sample((t0, t1), at));
        }
        closing.await;
        samples
    })
}

/// The MCP task's decision-to-wake rows on one backend, woken by the commit: polled at the
/// suggested interval, subscribed to the gate's resource, and a tight `tasks/get` loop.
fn mcp_task_rows(
    rt: &tokio::runtime::Runtime,
    backend: &str,
    project: &Path,
    run: &'static str,
    rounds: usize,
    settle: u64,
    rows: &mut Vec<Row>,
) {
    for m in [
        McpWait::TaskPolled,
        McpWait::TaskSubscribed { run },
        McpWait::TaskTight,
    ] {
        eprintln!("  decision-to-wake, {}, {backend}…", m.label());
        STILL_WORKING.store(0, std::sync::atomic::Ordering::Relaxed);
        let s = wake_mcp(rt, project, run, m, false, rounds, settle);
        let mut row = wake_row(m.label(), backend, false, &s);
        match m {
            McpWait::TaskPolled => {
                row.target = "(a host following `pollIntervalMs`: up to 1000 ms by design; the subscribed row is the ≤ 50 ms way)".into();
                row.met = String::new();
            }
            McpWait::TaskSubscribed { .. } => {
                let n = STILL_WORKING.load(std::sync::atomic::Ordering::Relaxed);
                row.raw += &format!(
                    "; {n} of the {rounds} rounds' updates found the task still working (then one more `tasks/get`)"
                );
            }
            _ => {}
        }
        rows.push(row);
    }
}

/// `PROSE_BENCH_ONLY=live-mcp-task`: the MCP task's decision-to-wake rows alone, on SQLite
/// then PostgreSQL, sized by `PROSE_BENCH_LIVE_ROUNDS` and `PROSE_BENCH_LIVE_SETTLE_MS` as
/// the `live` group (which runs them too).
fn live_mcp_task_only(root: &Path, rows: &mut Vec<Row>) {
    let rounds = env_usize("PROSE_BENCH_LIVE_ROUNDS", 100);
    let settle = env_usize("PROSE_BENCH_LIVE_SETTLE_MS", 300) as u64;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sqlite = root.join("live-task-sqlite");
    init_with(Path::new(BIN), &sqlite, "live", false);
    let mut backends = vec![("SQLite", sqlite)];
    if let Some((p, _)) = pg_project(root, "live-task-pg", "the MCP task on PostgreSQL", rows) {
        init_with(Path::new(BIN), &p, "live", true);
        backends.push(("PostgreSQL", p));
    }
    for (backend, project) in &backends {
        mcp_task_rows(&rt, backend, project, "live", rounds, settle, rows);
    }
}

/// Runs `f` on a thread of its own, outside the runtime: the PostgreSQL client's blocking calls
/// start a runtime of their own, which tokio refuses inside another.
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| s.spawn(f).join().unwrap())
}

/// The threads of a process now.
fn tasks(pid: u32) -> Vec<PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default()
}

/// A process's CPU time so far, all its threads: the nanoseconds on a CPU of each
/// (/proc/PID/task/TID/schedstat, exact: /proc/PID/stat's utime + stime count 10 ms ticks, too
/// coarse for a waiter's few short looks); /proc/PID/stat's where schedstat is missing.
fn cpu_seconds(pid: u32) -> f64 {
    let exact: Option<u64> = tasks(pid)
        .iter()
        .map(|t| {
            std::fs::read_to_string(t.join("schedstat"))
                .ok()?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    if let Some(ns) = exact {
        return ns as f64 / 1e9;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command's closing parenthesis: state is the 3rd field, utime the 14th.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// How often a process's threads have slept and been woken so far: their voluntary context
/// switches (/proc/PID/task/TID/status).
fn wakeups(pid: u32) -> u64 {
    tasks(pid)
        .iter()
        .filter_map(|t| {
            std::fs::read_to_string(t.join("status"))
                .ok()?
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?
                .trim()
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// A process's thread count (/proc/PID/status).
fn threads(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Transactions committed and rolled back in the database at `url` so far, as the statistics
/// collector has them (a backend reports its counts at most every second while busy, and
/// within seconds once idle: the measuring window starts and ends well away from bursts).
fn transactions(url: &str) -> i64 {
    count_pg(
        url,
        "SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database WHERE datname = current_database()",
    )
}

/// Connections open to the database at `url`, other than the one asking.
fn connections(url: &str) -> i64 {
    count_pg(
        url,
        "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
}

/// What idle waiters cost over the window, for the processes `pids`.
struct Idle {
    cpu: f64,
    /// PostgreSQL: transactions in the database over the window.
    transactions: Option<i64>,
    wakeups: u64,
    window: f64,
    /// Waits that ended before the window did (an error: a wait was to last beyond it).
    ended: usize,
    /// What shows the waiters were all waiting (threads of the server, connections).
    evidence: String,
}

impl Idle {
    fn per_hour(&self, v: f64) -> f64 {
        v / self.window * 3600.0
    }

    fn shown(&self) -> String {
        let mut s = format!(
            "{:.2} CPU s/h ({:.4} % of a core), {:.0} wake-ups/h",
            self.per_hour(self.cpu),
            self.cpu / self.window * 100.0,
            self.per_hour(self.wakeups as f64)
        );
        if let Some(t) = self.transactions {
            write!(s, ", {:.0} transactions/h", self.per_hour(t as f64)).unwrap();
        }
        if self.ended > 0 {
            write!(s, "; **{} waits ended early**", self.ended).unwrap();
        }
        write!(s, " [{}]", self.evidence).unwrap();
        s
    }
}

/// The measuring window over processes `pids` (and the database at `url`): `offset` seconds
/// after the waiters were started (the woken waiters' safety-net looks, every 30 s, then fall
/// inside it away from its edges), for `window` seconds.
fn idle_window(pids: &[u32], url: Option<&str>, offset: u64, window: u64) -> (Idle, String) {
    std::thread::sleep(Duration::from_secs(offset));
    let evidence = match url {
        Some(u) => format!("{} connections to the database", connections(u)),
        None => String::new(),
    };
    let cpu0: f64 = pids.iter().map(|p| cpu_seconds(*p)).sum();
    let wake0: u64 = pids.iter().map(|p| wakeups(*p)).sum();
    let tx0 = url.map(transactions);
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(window));
    let cpu1: f64 = pids.iter().map(|p| cpu_seconds(*p)).sum();
    let wake1: u64 = pids.iter().map(|p| wakeups(*p)).sum();
    let tx1 = url.map(transactions);
    let window = start.elapsed().as_secs_f64();
    (
        Idle {
            cpu: cpu1 - cpu0,
            transactions: tx0.zip(tx1).map(|(a, b)| b - a),
            wakeups: wake1 - wake0,
            window,
            ended: 0,
            evidence: String::new(),
        },
        evidence,
    )
}

/// The most tool calls an MCP server runs at once (src/mcp.rs `MOST_CALLS_AT_ONCE`: each
/// runs on a blocking thread of its own; a call past them waits, queued, for one to be free).
const MCP_CALLS_AT_ONCE: usize = 2048;

/// `n` gates_wait calls at once in one `prose-state mcp` session, on gates `gates`, idle over
/// the window.
fn idle_mcp(
    rt: &tokio::runtime::Runtime,
    project: &Path,
    run: &str,
    url: Option<&str>,
    gates: &[String],
    poll: bool,
    (offset, window): (u64, u64),
) -> Idle {
    rt.block_on(async {
        let (client, pid) =
            mcp_session_live(project, run, &["--role", "vm", "--agent", "vm"], poll).await;
        let timeout = offset + window + 60;
        let calls: Vec<_> = gates
            .iter()
            .map(|g| mcp_wait_for(client.peer(), McpWait::BoundedTool, g, timeout))
            .collect();
        let (mut idle, evidence) = off_runtime(|| idle_window(&[pid], url, offset, window));
        idle.ended = calls.iter().filter(|c| c.is_finished()).count();
        idle.evidence = format!(
            "{} threads in the server{}",
            threads(pid),
            if evidence.is_empty() {
                String::new()
            } else {
                format!(", {evidence}")
            }
        );
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        for c in calls {
            c.abort();
        }
        let _ = client.cancel().await;
        idle
    })
}

/// `gates.len()` CLI `gates wait` processes, each on its gate, idle over the window.
fn idle_cli(
    project: &Path,
    run: &str,
    url: Option<&str>,
    gates: &[String],
    poll: bool,
    (offset, window): (u64, u64),
) -> Idle {
    let timeout = format!("{}s", offset + window + 60);
    let mut children: Vec<std::process::Child> = gates
        .iter()
        .map(|g| {
            live_cmd(project, run, poll)
                .args(["gates", "wait", g, "--timeout", &timeout])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let pids: Vec<u32> = children.iter().map(|c| c.id()).collect();
    let (mut idle, evidence) = idle_window(&pids, url, offset, window);
    for c in &mut children {
        idle.ended += usize::from(c.try_wait().unwrap().is_some());
    }
    idle.evidence = if evidence.is_empty() {
        format!("{} processes", pids.len())
    } else {
        format!("{} processes, {evidence}", pids.len())
    };
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
    idle
}

/// One idle row: woken by the commit against polling.
fn idle_row(what: String, wake: &Idle, poll: &Idle) -> Row {
    Row {
        what,
        ours: format!("woken by the commit: {}", wake.shown()),
        raw: format!("polling: {}", poll.shown()),
        ratio: format!("{:.3} (CPU)", wake.cpu / poll.cpu.max(1e-9)),
        target: "reported (far under polling)".into(),
        met: String::new(),
    }
}

/// The cost of the NOTIFY on a decision's commit (PostgreSQL; SQLite has none): `approve` in
/// a database with the notify triggers (`gates_notify`, `gate_audit_log_notify`,
/// `execution_notify`) against one of its own where they are dropped, taking turns; one
/// connection `LISTEN`s in each (as a waiter's would), and afterwards it is checked that one
/// heard the decisions and the other nothing.
fn notify_cost(root: &Path, calls: usize, rows: &mut Vec<Row>) {
    use postgres::fallible_iterator::FallibleIterator;
    let what = "the NOTIFY on a decision's commit, PostgreSQL";
    let Some((p_on, u_on)) = pg_project(root, "live-notify-on", what, rows) else {
        return;
    };
    let Some((p_off, u_off)) = pg_project(root, "live-notify-off", what, rows) else {
        return;
    };
    for p in [&p_on, &p_off] {
        init_with(Path::new(BIN), p, "n", true);
    }
    postgres::Client::connect(&u_off, postgres::NoTls)
        .unwrap()
        .batch_execute(
            "DROP TRIGGER gates_notify ON openprose.gates;
             DROP TRIGGER gate_audit_log_notify ON openprose.gate_audit_log;
             DROP TRIGGER execution_notify ON openprose.execution;",
        )
        .unwrap();
    // An approve without the triggers is not refused (else there is nothing to compare).
    for p in [&p_on, &p_off] {
        create_gate(p, "n", "probe");
        approve_at(p, "n", "probe");
    }
    eprintln!("  creating {calls} gates in each database…");
    for i in 0..calls {
        for p in [&p_on, &p_off] {
            create_gate(p, "n", &format!("g{i}"));
        }
    }
    let mut listeners: Vec<postgres::Client> = [&u_on, &u_off]
        .iter()
        .map(|u| {
            let mut c = postgres::Client::connect(u, postgres::NoTls).unwrap();
            c.batch_execute("LISTEN openprose_change").unwrap();
            c
        })
        .collect();
    eprintln!("  approve with the NOTIFY and without…");
    let approve = |p: &Path, i: usize| {
        let mut c = live_cmd(p, "n", false);
        c.args(["approve", &format!("g{i}"), "--yes", "--as", "alice"]);
        c
    };
    let (with, without) = side_by_side(calls, &|i| approve(&p_on, i), &|i| approve(&p_off, i));
    let heard: Vec<usize> = listeners
        .iter_mut()
        .map(|c| {
            c.notifications()
                .timeout_iter(Duration::from_secs(2))
                .iterator()
                .filter(|n| n.as_ref().is_ok_and(|n| n.payload() == "n"))
                .count()
        })
        .collect();
    assert!(
        heard[0] >= calls && heard[1] == 0,
        "the LISTENing connections heard {} notifications with the triggers and {} without, of {calls} decisions",
        heard[0],
        heard[1]
    );
    for u in [&u_on, &u_off] {
        assert_eq!(
            count_pg(
                u,
                "SELECT COUNT(*) FROM openprose.gates WHERE run_id = 'n' AND status = 'approved'"
            ),
            calls as i64 + 1
        );
    }
    let ratio = with.as_secs_f64() / without.as_secs_f64();
    rows.push(Row {
        what: format!(
            "`approve` with the notify triggers (a NOTIFY at the commit; {} heard by a LISTENing connection) vs a database of its own with them dropped, PostgreSQL, median of {calls}",
            heard[0]
        ),
        ours: ms(with),
        raw: format!("{} (triggers dropped)", ms(without)),
        ratio: format!("{ratio:.3}"),
        target: "within noise (≤ 1.05)".into(),
        met: if ratio <= 1.05 { "yes" } else { "no" }.into(),
    });
}

/// Issue 32's performance rows (`PROSE_BENCH_ONLY=live`), on SQLite then PostgreSQL:
/// decision-to-wake latency of a CLI `gates wait`, an MCP wait and the page's event stream;
/// what idle waiters cost in one MCP server and as CLI processes, woken by the commit against
/// polling; and (PostgreSQL) what the NOTIFY adds to a decision.
fn live_rows(root: &Path, rows: &mut Vec<Row>) {
    let rounds = env_usize("PROSE_BENCH_LIVE_ROUNDS", 100);
    let settle = env_usize("PROSE_BENCH_LIVE_SETTLE_MS", 300) as u64;
    let waiters = env_usize("PROSE_BENCH_LIVE_WAITERS", 1_000);
    let processes = env_usize("PROSE_BENCH_LIVE_PROCESSES", 50);
    let window = env_usize("PROSE_BENCH_LIVE_WINDOW_S", 60) as u64;
    let offset = env_usize("PROSE_BENCH_LIVE_OFFSET_S", 15) as u64;
    let notify_calls = env_usize("PROSE_BENCH_LIVE_NOTIFY_CALLS", 200);
    assert!(
        offset + window + 60 <= 600,
        "an MCP gates_wait call waits at most 600 s: PROSE_BENCH_LIVE_OFFSET_S + PROSE_BENCH_LIVE_WINDOW_S must be at most 540"
    );
    // A thousand waiting calls in one server on SQLite hold two database connections each (its
    // store's and its watch's `data_version` check, three files each): the soft limit on open files raised to the hard one, for the bench and the
    // processes it starts.
    unsafe {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sqlite = root.join("live-sqlite");
    init_with(Path::new(BIN), &sqlite, "live", false);
    let mut backends = vec![("SQLite", sqlite, None)];
    if let Some((p, url)) = pg_project(root, "live-pg", "live state on PostgreSQL", rows) {
        init_with(Path::new(BIN), &p, "live", true);
        backends.push(("PostgreSQL", p, Some(url)));
    }
    for (backend, project, url) in &backends {
        let run = "live";
        for poll in [false, true] {
            eprintln!("  decision-to-wake, CLI, {backend}, {}…", how(poll));
            let s = wake_cli(project, run, poll, rounds, settle);
            rows.push(wake_row("a CLI `gates wait` process", backend, poll, &s));
        }
        for poll in [false, true] {
            let m = McpWait::BoundedTool;
            eprintln!("  decision-to-wake, MCP, {backend}, {}…", how(poll));
            let s = wake_mcp(&rt, project, run, m, poll, rounds, settle);
            rows.push(wake_row(m.label(), backend, poll, &s));
        }
        mcp_task_rows(&rt, backend, project, run, rounds, settle, rows);
        eprintln!("  decision-to-wake, the page's event stream, {backend}…");
        let s = wake_page(project, run, rounds, settle);
        let mut row = wake_row(
            "the page's event stream (`serve`, `/runs/{run}/events`, a signed-in raw HTTP client; the `change` event)",
            backend,
            false,
            &s,
        );
        row.target +=
            " (the page polled every 2 s before; a stream without wake-ups only pings every 25 s)";
        rows.push(row);

        // Idle waiters: gates of their own, pending all along. On PostgreSQL a sleeping call
        // woken by the commit holds no connection (the server's connections are counted at
        // the window's start: its listening one, and those it keeps); polling, each holds one,
        // so the polling side is bounded by the server's max_connections.
        let n = waiters.min(MCP_CALLS_AT_ONCE);
        let cap = if n < waiters {
            format!(
                "{n} of the {waiters} asked: the server runs at most {MCP_CALLS_AT_ONCE} calls at once, the rest would wait queued"
            )
        } else {
            format!("all {n} asked")
        };
        let n_polling = match url {
            Some(u) => {
                let free = count_pg(
                    u,
                    "SELECT (current_setting('max_connections')::int - (SELECT COUNT(*) FROM pg_stat_activity))::bigint",
                ) as usize;
                n.min(free.saturating_sub(20))
            }
            None => n,
        };
        eprintln!("  creating {} idle gates, {backend}…", n.max(processes));
        let gates: Vec<String> = (0..n.max(processes)).map(|i| format!("idle-{i}")).collect();
        std::thread::scope(|s| {
            for part in 0..2 {
                let gates = &gates;
                s.spawn(move || {
                    for g in gates.iter().skip(part).step_by(2) {
                        create_gate(project, run, g);
                    }
                });
            }
        });
        let span = (offset, window);
        let mut idle = Vec::new();
        for poll in [false, true] {
            let n = if poll { n_polling } else { n };
            eprintln!(
                "  {n} idle MCP waits, {backend}, {} ({window} s)…",
                how(poll)
            );
            idle.push(idle_mcp(
                &rt,
                project,
                run,
                url.as_deref(),
                &gates[..n],
                poll,
                span,
            ));
        }
        let polled = if n_polling < n {
            format!(
                "; polling, {n_polling} calls: each polling call holds a connection, and the server allowed only that many more (max_connections, less 20 kept free)"
            )
        } else {
            String::new()
        };
        let mut row = idle_row(
            format!(
                "{n} idle `gates_wait` calls at once in one `prose-state mcp` session ({cap}{polled}), {backend}: CPU time of the server process (all its threads, /proc/PID/task/*/schedstat), its wake-ups (voluntary context switches) and {}, over a {window} s window extrapolated to an hour",
                if url.is_some() { "transactions in the database (pg_stat_database xact_commit + xact_rollback) and the connections the server holds to it (pg_stat_activity, at the window's start)" } else { "no queries (SQLite has no server to count them at)" }
            ),
            &idle[0],
            &idle[1],
        );
        if n_polling < n {
            let per = |i: &Idle, k: usize| i.cpu / k.max(1) as f64;
            row.ratio = format!(
                "{:.3} (CPU per call)",
                per(&idle[0], n) / per(&idle[1], n_polling).max(1e-12)
            );
        }
        rows.push(row);
        let mut idle = Vec::new();
        for poll in [false, true] {
            eprintln!(
                "  {processes} idle CLI waiters, {backend}, {} ({window} s)…",
                how(poll)
            );
            idle.push(idle_cli(
                project,
                run,
                url.as_deref(),
                &gates[..processes],
                poll,
                span,
            ));
        }
        rows.push(idle_row(
            format!(
                "{processes} idle CLI `gates wait` processes, {backend}: their CPU time and wake-ups (summed, as above) and {}, over a {window} s window extrapolated to an hour",
                if url.is_some() { "transactions in the database (pg_stat_database)" } else { "no queries (SQLite has no server to count them at)" }
            ),
            &idle[0],
            &idle[1],
        ));
    }
    eprintln!("  the NOTIFY on a decision's commit…");
    notify_cost(root, notify_calls, rows);
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` and test discovery: nothing to list
    }
    if Command::new("sqlite3").arg("-version").output().is_err() {
        eprintln!(
            "the benchmark compares against the sqlite3 CLI: install it (apt-get install sqlite3)"
        );
        std::process::exit(1);
    }
    let big_mb: u64 = std::env::var("PROSE_BENCH_BIG_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let dir = tempfile::Builder::new()
        .prefix("prose-bench")
        .tempdir()
        .unwrap();
    let root = dir.path();
    let mut rows = Vec::new();
    // PROSE_BENCH_ONLY=latency,mcp,mcp-roles runs only those groups (for a quick look; the report is
    // then partial).
    let only = std::env::var("PROSE_BENCH_ONLY").ok();
    let wanted = |group: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|g| g == group))
    };
    if wanted("latency") {
        eprintln!("latency…");
        latency(root, 200, &mut rows);
    }
    if wanted("mcp") {
        eprintln!("MCP…");
        mcp_rows(root, 200, &mut rows);
    }
    if wanted("mcp-roles") {
        eprintln!("MCP calls by role…");
        mcp_role_rows(root, 200, &mut rows);
    }
    if wanted("parallel") {
        eprintln!("parallel writers…");
        parallel_rows(root, 3, &mut rows);
        eprintln!("parallel writers on PostgreSQL…");
        parallel_postgres(root, &mut rows);
    }
    if wanted("chain") {
        eprintln!("deep scope chain…");
        deep_chain(root, 10_000, 100, &mut rows);
    }
    if wanted("loop") {
        eprintln!("writes inside a long loop…");
        long_loop(root, 200_000, 50, &mut rows);
    }
    if wanted("gates") {
        eprintln!("gates across 1000 runs…");
        gates_listing(root, 1000, 10, &mut rows);
        eprintln!("gate race…");
        gate_race(root, 5, &mut rows);
    }
    if wanted("team") {
        eprintln!("team approvals…");
        team_rows(root, 60, &mut rows);
    }
    if wanted("answers") {
        eprintln!("approvals with an answer and an edit…");
        answer_rows(root, 60, &mut rows);
    }
    if wanted("big") {
        eprintln!("large value ({big_mb} MiB)…");
        big_value(root, big_mb, &mut rows);
        eprintln!("large value on PostgreSQL ({big_mb} MiB)…");
        big_value_postgres(root, big_mb, &mut rows);
    }
    // The rows of one backend alone, at the sizes PROSE_BENCH_CATALOG_SIZES names (default
    // 100000): a quick look at one change.
    let sizes: Vec<usize> = std::env::var("PROSE_BENCH_CATALOG_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![100_000]);
    if only.as_deref() == Some("catalog-postgres") {
        eprintln!("cross-run listings on PostgreSQL…");
        catalog_postgres(root, &sizes, 5, &mut rows);
    }
    if only.as_deref() == Some("catalog-sqlite") {
        eprintln!("cross-run listings on SQLite…");
        catalog_sqlite(root, &sizes, 5, &mut rows);
    }
    if wanted("catalog") || only.as_deref() == Some("catalog-write") {
        eprintln!("what the catalog adds to a gate write…");
        catalog_write_cost(root, 100, &mut rows);
    }
    if wanted("catalog") {
        eprintln!("cross-run listings on SQLite…");
        catalog_sqlite(root, &[1_000, 10_000, 100_000], 5, &mut rows);
        eprintln!("cross-run listings on PostgreSQL…");
        catalog_postgres(root, &[1_000, 10_000, 100_000], 5, &mut rows);
    }
    if wanted("serve") {
        eprintln!("the approval page under load…");
        serve_load(root, 1000, 100, 10, &mut rows);
    }
    if wanted("resume") {
        eprintln!("resume on large runs…");
        resume_rows(root, &[1_000, 200_000], &mut rows);
    }
    if wanted("transfer") {
        eprintln!("export and import…");
        transfer_rows(root, &mut rows);
    }
    if wanted("history") {
        eprintln!("binding history and fork…");
        let calls = env_usize("PROSE_BENCH_HISTORY_CALLS", 200);
        history_rows(root, calls, &mut rows);
    }
    if only.as_deref() == Some("history-write") {
        eprintln!("a write with history against the release before it…");
        let calls = env_usize("PROSE_BENCH_HISTORY_CALLS", 200);
        history_vs_baseline(root, calls, &mut rows);
    }
    if wanted("live") {
        eprintln!("live state: decision-to-wake, idle waiters, the NOTIFY…");
        live_rows(root, &mut rows);
    }
    if only.as_deref() == Some("live-mcp-task") {
        eprintln!("live state: the MCP task's decision-to-wake…");
        live_mcp_task_only(root, &mut rows);
    }
    if only.as_deref() == Some("live-notify") {
        eprintln!("live state: the NOTIFY on a decision's commit…");
        let calls = env_usize("PROSE_BENCH_LIVE_NOTIFY_CALLS", 200);
        notify_cost(root, calls, &mut rows);
    }
    if only.as_deref() == Some("history-fork") {
        eprintln!("fork against export + import…");
        history_fork(root, &mut rows);
    }

    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut report = String::new();
    writeln!(report, "# prose-state vs raw sqlite3\n").unwrap();
    writeln!(
        report,
        "- date: {}\n- machine: {cpu}, {cores} cores, {}\n- sqlite3 CLI: {}\n- prose-state: {} (release build)\n- command: `cargo bench`\n",
        chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"),
        first_line("uname", &["-srm"]),
        first_line("sqlite3", &["-version"]).split_whitespace().next().unwrap_or(""),
        env!("CARGO_PKG_VERSION"),
    )
    .unwrap();
    writeln!(
        report,
        "| benchmark | prose-state | raw sqlite3 | ratio | target | met |"
    )
    .unwrap();
    writeln!(report, "|---|---|---|---|---|---|").unwrap();
    for r in &rows {
        writeln!(
            report,
            "| {} | {} | {} | {} | {} | {} |",
            r.what, r.ours, r.raw, r.ratio, r.target, r.met
        )
        .unwrap();
    }
    print!("{report}");
    if let Ok(path) = std::env::var("PROSE_BENCH_RESULTS") {
        std::fs::write(&path, &report).unwrap();
        eprintln!("written to {path}");
    }
}
