use crate::common::*;

on_both!(
    sixteen_processes_times_fifty_binds_all_land,
    concurrent_appends_and_binds_on_one_name,
);
use std::process::Stdio;

/// The spec's failure case: 16 subagents writing 50 bindings each at once. With raw sqlite3
/// most of these writes fail with "database is locked"; every one must succeed here.
fn sixteen_processes_times_fifty_binds_all_land(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let writers: Vec<_> = (0..16)
        .map(|w| {
            let mut script = String::new();
            for i in 0..50 {
                script += &format!(
                    "\"$BIN\" --run \"$RUN\" bind w{w}_b{i} \"value of writer {w} bind {i} it's\" >/dev/null || echo FAIL {w} {i} $? >&2\n"
                );
            }
            sh(p.root(), &script)
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
    assert_eq!(count_rows(&p, &run, "bindings", "true"), 800);
    for (w, i) in [(0, 0), (7, 31), (15, 49)] {
        let v = run.view().binding(&format!("w{w}_b{i}"), None).unwrap().2;
        assert_eq!(v.unwrap(), format!("value of writer {w} bind {i} it's"));
    }
    if b == Backend::Sqlite {
        let ok: String = run
            .conn()
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok");
    }
}

/// Appends from many processes at once: every id distinct, every record there.
fn concurrent_appends_and_binds_on_one_name(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let children: Vec<_> = (0..8)
        .map(|w| {
            let mut script = String::new();
            for i in 0..20 {
                script += &format!(
                    "\"$BIN\" --run \"$RUN\" exec-append --index {i} --text 'w{w}' --status completed >/dev/null || echo FAIL >&2\n\"$BIN\" --run \"$RUN\" bind shared 'from {w}' >/dev/null || echo FAIL >&2\n"
                );
            }
            sh(p.root(), &script)
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
    // Ids are the primary key: 160 rows are 160 distinct ids.
    assert_eq!(count_rows(&p, &run, "execution", "true"), 160);
    assert_eq!(count_rows(&p, &run, "bindings", "name = 'shared'"), 1);
}
