use crate::common::*;

on_both!(
    sixteen_processes_times_fifty_binds_all_land,
    concurrent_appends_and_binds_on_one_name,
    reads_beside_decisions_never_see_a_row_apart_from_its_log,
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

/// A gate decided and opened again, over and over, while readers look at it: `gates wait
/// --timeout 0` (one gate against its history), `gates verify` (the whole log against every
/// gate), `gates verify GATE`, `gates show` and the list of gates. Each reader compares a gate's row with its sealed events,
/// read in one snapshot: none ever sees a decision's row without its event, or its event
/// without its row, so none answers tampered (9) or warns of an unattested opening. Read in
/// two statements, a commit between them did both (CI, on the 200 waiters of
/// tests/live_connections.rs).
fn reads_beside_decisions_never_see_a_row_apart_from_its_log(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "Go?"])
        .assert()
        .success();
    let writer = sh(
        p.root(),
        "for i in $(seq 30); do
           \"$BIN\" --run \"$RUN\" approve g --as alice -y >/dev/null || echo FAIL approve $i >&2
           \"$BIN\" --run \"$RUN\" gates create g --prompt 'Go?' --reopen >/dev/null || echo FAIL reopen $i >&2
         done
         touch writer.done",
    )
    .env("RUN", &run.id)
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Each reader counts its reads, and says every answer 9 and every warning it had.
    let readers: Vec<_> = [
        "gates wait g --timeout 0",
        "gates verify",
        "gates verify g",
        "gates show g",
        "gates",
    ]
    .iter()
    .map(|args| {
        sh(
            p.root(),
            &format!(
                "n=0
                 while [ ! -e writer.done ]; do
                   \"$BIN\" --run \"$RUN\" {args} >/dev/null 2>err.$$
                   code=$?
                   [ $code = 9 ] && echo \"{args}: 9: $(cat err.$$)\" >&2
                   grep -q warning err.$$ && echo \"{args}: $(cat err.$$)\" >&2
                   n=$((n+1))
                 done
                 rm -f err.$$
                 echo $n"
            ),
        )
        .env("RUN", &run.id)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
    })
    .collect();
    let out = writer.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "failed writes");
    for r in readers {
        let out = r.wait_with_output().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            "",
            "a read saw a row apart from its sealed log"
        );
        let reads: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        assert!(reads > 0, "a reader never read");
    }
    let a = run.cmd().args(["gates", "verify"]).assert().success();
    assert_eq!(code(&a), 0);
}
