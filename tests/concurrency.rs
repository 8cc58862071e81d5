use crate::common::*;
use std::process::Stdio;

/// The spec's failure case: 16 subagents writing 50 bindings each at once. With raw sqlite3
/// most of these writes fail with "database is locked"; every one must succeed here.
#[test]
fn sixteen_processes_times_fifty_binds_all_land() {
    let p = Project::new();
    let run = p.init();
    let writers: Vec<_> = (0..16)
        .map(|w| {
            let mut script = String::new();
            for i in 0..50 {
                script += &format!(
                    "\"$BIN\" --run \"$RUN\" bind w{w}_b{i} \"value of writer {w} bind {i} it's\" >/dev/null || echo FAIL {w} {i} $? >&2\n"
                );
            }
            std::process::Command::new("sh")
                .arg("-c")
                .arg(script)
                .current_dir(p.root())
                .env("BIN", BIN)
                .env("RUN", &run.id)
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut failures = String::new();
    for w in writers {
        let out = w.wait_with_output().unwrap();
        failures += &String::from_utf8_lossy(&out.stderr);
    }
    assert_eq!(failures, "", "failed writes");
    let c = run.conn();
    let n: i64 = c
        .query_row("SELECT COUNT(*) FROM bindings", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 800);
    for (w, i) in [(0, 0), (7, 31), (15, 49)] {
        let v: String = c
            .query_row(
                "SELECT value FROM bindings WHERE name = ?1",
                [format!("w{w}_b{i}")],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(v, format!("value of writer {w} bind {i} it's"));
    }
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
}

/// Appends from many processes at once: every id distinct, every record there.
#[test]
fn concurrent_appends_and_binds_on_one_name() {
    let p = Project::new();
    let run = p.init();
    let children: Vec<_> = (0..8)
        .map(|w| {
            let mut script = String::new();
            for i in 0..20 {
                script += &format!(
                    "\"$BIN\" --run \"$RUN\" exec-append --index {i} --text 'w{w}' --status completed >/dev/null || echo FAIL >&2\n\"$BIN\" --run \"$RUN\" bind shared 'from {w}' >/dev/null || echo FAIL >&2\n"
                );
            }
            std::process::Command::new("sh")
                .arg("-c")
                .arg(script)
                .current_dir(p.root())
                .env("BIN", BIN)
                .env("RUN", &run.id)
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    }
    let c = run.conn();
    let (n, distinct): (i64, i64) = c
        .query_row(
            "SELECT COUNT(*), COUNT(DISTINCT id) FROM execution",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((n, distinct), (160, 160));
    let shared: i64 = c
        .query_row(
            "SELECT COUNT(*) FROM bindings WHERE name = 'shared'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(shared, 1);
}
