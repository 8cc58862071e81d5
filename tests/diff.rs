//! `diff RUN_A RUN_B`: two runs made by the binary, compared; exactly what differs is
//! reported (bindings by name and scope, values by content; records by place; gates by id),
//! nothing for runs of the same content (on one backend or across the two), every answer
//! bounded, hostile names shown safely, and neither run ever written.

use crate::common::{self, *};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::{json, Value};

on_both!(
    exactly_what_differs_is_reported,
    runs_of_the_same_content_do_not_differ,
    thousands_of_differences_stay_within_the_bound,
    hostile_names_are_shown_safely,
    bad_input_is_one_line_and_changes_nothing,
);

/// `diff ARGS` with `--json`: its exit code and its one JSON document.
fn diff_json(p: &Project, args: &[&str]) -> (i32, Value) {
    let a = p.cmd().args(["--json", "diff"]).args(args).assert();
    let out = a.get_output();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    (code(&a), v)
}

/// `diff ARGS` as a person reads it: its exit code and its stdout.
fn diff_text(p: &Project, args: &[&str]) -> (i32, String) {
    let a = p.cmd().arg("diff").args(args).assert();
    (
        code(&a),
        String::from_utf8_lossy(&a.get_output().stdout).into_owned(),
    )
}

/// A value over the attachment threshold (100 KiB), the same for the same `seed`.
fn big(seed: u8) -> Vec<u8> {
    (0..150_000u32)
        .map(|i| b'a' + ((i as u8).wrapping_mul(7).wrapping_add(seed)) % 26)
        .collect()
}

fn bind_stdin(run: &Run, name: &str, value: &[u8]) {
    run.cmd()
        .args(["bind", name])
        .write_stdin(value.to_vec())
        .assert()
        .success();
}

fn bind_kind(run: &Run, name: &str, value: &str, kind: &str) {
    run.cmd()
        .args(["bind", name, value, "--kind", kind])
        .assert()
        .success();
}

fn gate(run: &Run, id: &str) {
    run.cmd()
        .args(["gates", "create", id, "--prompt", "Go?"])
        .assert()
        .success();
}

fn approve(run: &Run, id: &str) {
    run.cmd()
        .args(["approve", id, "--yes", "--as", "alice"])
        .assert()
        .success();
}

/// Runs a statement of raw SQL on a run's own database, as another tool would.
fn raw(p: &Project, run: &Run, sqlite: &str, postgres: &str) {
    match &p.pg_url {
        None => run.conn().execute_batch(sqlite).unwrap(),
        Some(url) => {
            let mut c = ::postgres::Client::connect(url, ::postgres::NoTls).unwrap();
            c.execute(postgres, &[&run.id]).unwrap();
        }
    }
}

/// (change, name, scope, position, differs) of a binding shown.
type Shown = (String, String, String, Option<u64>, Vec<String>);

/// Each binding shown.
fn bindings_shown(v: &Value) -> Vec<Shown> {
    v["bindings"]["shown"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["change"].as_str().unwrap().to_string(),
                d["name"].as_str().unwrap().to_string(),
                d["scope"].as_str().unwrap().to_string(),
                d["position"].as_u64(),
                serde_json::from_value(d["differs"].clone()).unwrap(),
            )
        })
        .collect()
}

fn row(change: &str, name: &str, scope: &str, position: Option<u64>, differs: &[&str]) -> Shown {
    (
        change.into(),
        name.into(),
        scope.into(),
        position,
        differs.iter().map(|s| s.to_string()).collect(),
    )
}

/// Two runs that share a beginning and then part: each difference of bindings, records and
/// gates is reported, and nothing else; the other way round, added and removed swap. Neither
/// run is written, whatever is asked.
fn exactly_what_differs_is_reported(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let (a, bb) = (p.init(), p.init());
    let mut first = Vec::new();
    for run in [&a, &bb] {
        // On PostgreSQL the two runs' ids come from one sequence: the same place, other ids.
        let e1 = run.exec(1, "let x = session", "executing", None);
        first.push(e1);
        run.bind("same", "v", None);
        run.bind("inner", "in scope", Some(e1));
        bind_stdin(run, "big", &big(1));
    }
    let (ea, eb) = (first[0], first[1]);
    a.bind("x", "hello", None);
    bb.bind("x", "goodbye", None);
    bind_kind(&a, "k", "same value", "let");
    bind_kind(&bb, "k", "same value", "const");
    a.bind("gone", "only in A", None);
    bb.bind("extra", "only in B", None);
    a.bind("inner2", "a", Some(ea));
    bb.bind("inner2", "b", Some(eb));
    bind_stdin(&a, "big2", &big(2));
    bind_stdin(&bb, "big2", &big(3));
    a.exec(2, "b", "completed", Some(ea));
    bb.exec(2, "b", "failed", Some(eb));
    bb.exec(3, "c", "completed", None);
    for run in [&a, &bb] {
        gate(run, "g1");
    }
    gate(&a, "g2");
    gate(&bb, "g3");
    approve(&bb, "g1");
    // The same value in both, kept as attachments under names of their own.
    let path = |run: &Run| run.view().binding("big", None).unwrap().4.unwrap();
    assert_ne!(path(&a), path(&bb));
    let before = (a.snapshot(), bb.snapshot());

    let (c, v) = diff_json(&p, &[&a.id, &bb.id]);
    assert_eq!(c, 0, "{v}");
    assert_eq!(v["identical"], json!(false));
    assert_eq!(
        bindings_shown(&v),
        vec![
            row("changed", "big2", "root", None, &["value"]),
            row("added", "extra", "root", None, &[]),
            row("removed", "gone", "root", None, &[]),
            row("changed", "inner2", "execution", Some(1), &["value"]),
            row("changed", "k", "root", None, &["kind"]),
            row("changed", "x", "root", None, &["value"]),
        ],
        "{v}"
    );
    let bs = &v["bindings"];
    assert_eq!(
        (&bs["differ"], &bs["added"], &bs["removed"], &bs["changed"]),
        (&json!(6), &json!(1), &json!(1), &json!(4))
    );
    assert_eq!(
        (&bs["left_out"], &bs["next_cursor"]),
        (&json!(0), &json!(null))
    );
    let shown = bs["shown"].as_array().unwrap();
    let by_name = |n: &str| shown.iter().find(|d| d["name"] == n).unwrap();
    assert_eq!(
        (
            &by_name("inner2")["execution_id_a"],
            &by_name("inner2")["execution_id_b"]
        ),
        (&json!(ea), &json!(eb))
    );
    let x = by_name("x");
    assert_eq!(
        (&x["a"], &x["b"]),
        (
            &json!({"kind": "let", "bytes": 5, "attachment": false, "preview": "hello"}),
            &json!({"kind": "let", "bytes": 7, "attachment": false, "preview": "goodbye"})
        )
    );
    assert_eq!(by_name("extra")["a"], json!(null));
    assert_eq!(by_name("gone")["b"], json!(null));
    let big2 = by_name("big2");
    assert_eq!(big2["a"]["attachment"], json!(true));
    assert_eq!(big2["a"]["bytes"], json!(150_000));
    assert_eq!(big2["b"]["bytes"], json!(150_000));
    assert_eq!(
        big2["a"]["preview"].as_str().unwrap().as_bytes(),
        &big(2)[..60]
    );

    // The logs share their first record; then each goes its own way.
    let r = &v["records"];
    assert_eq!(r["common"], json!(1), "{r}");
    assert_eq!(
        (&r["a"]["after_common"], &r["b"]["after_common"]),
        (&json!(3), &json!(4))
    );
    let statuses = |side: &str| -> Vec<String> {
        r[side]["shown"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                format!(
                    "{} {}",
                    e["statement_text"].as_str().unwrap(),
                    e["status"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(
        statuses("a"),
        ["b completed", "approve g1: pending", "approve g2: pending"]
    );
    assert_eq!(
        statuses("b"),
        [
            "b failed",
            "c completed",
            "approve g1: pending",
            "approve g3: pending"
        ]
    );
    let second = &r["a"]["shown"][0];
    assert_eq!(
        (
            &second["position"],
            &second["parent_position"],
            &second["parent_id"]
        ),
        (&json!(2), &json!(1), &json!(ea))
    );
    assert_eq!(r["b"]["shown"][0]["parent_id"], json!(eb));
    assert_eq!(
        (&r["a"]["left_out"], &r["a"]["next_since"]),
        (&json!(0), &json!(null))
    );

    // Gates by id.
    let gates: Vec<(String, String, Value)> = v["gates"]["shown"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["change"].as_str().unwrap().into(),
                g["id"].as_str().unwrap().into(),
                g["differs"].clone(),
            )
        })
        .collect();
    assert_eq!(
        gates,
        vec![
            (
                "changed".into(),
                "g1".into(),
                json!(["status", "resolved_by"])
            ),
            ("removed".into(), "g2".into(), json!([])),
            ("added".into(), "g3".into(), json!([])),
        ]
    );
    let g1 = &v["gates"]["shown"][0];
    assert_eq!(
        (&g1["a"], &g1["b"]),
        (
            &json!({"status": "pending", "resolved_by": null, "instance": 1}),
            &json!({"status": "approved", "resolved_by": "alice", "instance": 1})
        )
    );
    let backend = match b {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    for (side, run) in [("a", &a), ("b", &bb)] {
        assert_eq!(v[side]["backend"], json!(backend));
        assert_eq!(v[side]["run"], json!(run.id));
        assert_eq!(
            (&v[side]["bindings"], &v[side]["gates"]),
            (&json!(8), &json!(2))
        );
    }
    assert_eq!(
        (&v["a"]["records"], &v["b"]["records"]),
        (&json!(4), &json!(5))
    );

    // The other way round: added and removed swap, changes stay.
    let (_, back) = diff_json(&p, &[&bb.id, &a.id]);
    let names = |v: &Value, change: &str| -> Vec<String> {
        bindings_shown(v)
            .into_iter()
            .filter(|d| d.0 == change)
            .map(|d| d.1)
            .collect()
    };
    assert_eq!(names(&back, "added"), ["gone"]);
    assert_eq!(names(&back, "removed"), ["extra"]);
    assert_eq!(names(&back, "changed"), names(&v, "changed"));

    // For a person.
    let (c, text) = diff_text(&p, &[&a.id, &bb.id]);
    assert_eq!(c, 0);
    for line in [
        "Bindings: 6 differ (1 added, 1 removed, 4 changed)",
        "  ~ x (root): value",
        "      A: let, 5 bytes: hello",
        "      B: let, 7 bytes: goodbye",
        "  + extra (root)",
        "  - gone (root)",
        "  ~ k (root): kind",
        "Records: A has 4, B has 5; they share the first record",
        "    #2 (id ",
        "Gates: 3 differ (1 added, 1 removed, 1 changed)",
        "  ~ g1: status, resolved_by",
        "      B: approved by alice (opening 1)",
    ] {
        assert!(text.contains(line), "{line:?} in:\n{text}");
    }
    assert!(!text.contains("No differences"), "{text}");
    let scope = if ea == eb {
        format!("(record #1: execution {ea})")
    } else {
        format!("(record #1: execution {ea} in A, {eb} in B)")
    };
    assert!(
        text.contains(&format!("  ~ inner2 {scope}: value")),
        "{text}"
    );
    // The exit code for scripts: 1 when they differ, with the diff on stdout all the same.
    let (c, text2) = diff_text(&p, &[&a.id, &bb.id, "--exit-code"]);
    assert_eq!((c, text2), (1, text));
    // One name only: its bindings; the records and gates are compared whole still.
    let (_, one) = diff_json(&p, &[&a.id, &bb.id, "--name", "x"]);
    assert_eq!(
        bindings_shown(&one),
        vec![row("changed", "x", "root", None, &["value"])]
    );
    assert_eq!(
        (&one["name"], &one["gates"]["differ"]),
        (&json!("x"), &json!(3))
    );
    let (_, none) = diff_json(&p, &[&a.id, &bb.id, "--name", "same"]);
    assert_eq!(none["bindings"]["differ"], json!(0));
    assert_eq!(none["identical"], json!(false));

    assert_eq!((a.snapshot(), bb.snapshot()), before, "diff wrote to a run");
}

/// Two runs made by the same commands are the same run to `diff`, whatever ids and
/// attachment names each store gave them; a run compared with itself too.
fn runs_of_the_same_content_do_not_differ(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let (a, bb) = (p.init(), p.init());
    for run in [&a, &bb] {
        let e1 = run.exec(1, "parallel:", "started", None);
        let e2 = run.exec(2, "session a", "executing", Some(e1));
        run.bind("out", "result", Some(e2));
        run.bind("list", "[1, 2]", None);
        bind_kind(run, "c", "fixed", "const");
        bind_stdin(run, "big", &big(9));
        run.exec(2, "session a", "completed", Some(e1));
        gate(run, "ship");
        approve(run, "ship");
    }
    let path = |run: &Run| run.view().binding("big", None).unwrap().4.unwrap();
    assert_ne!(path(&a), path(&bb), "each run names its own attachment");
    let before = (a.snapshot(), bb.snapshot());
    for (x, y) in [(&a, &bb), (&bb, &a), (&a, &a)] {
        let (c, v) = diff_json(&p, &[&x.id, &y.id, "--exit-code"]);
        assert_eq!(c, 0, "{v}");
        assert_eq!(v["identical"], json!(true), "{v}");
        assert_eq!(v["records"]["common"], v["a"]["records"], "{v}");
        assert_eq!(v["a"]["records"], json!(4), "{v}");
        for list in ["bindings", "gates"] {
            assert_eq!(v[list]["differ"], json!(0), "{v}");
            assert_eq!(v[list]["shown"], json!([]), "{v}");
        }
    }
    let (c, text) = diff_text(&p, &[&a.id, &bb.id]);
    assert_eq!(c, 0);
    for line in [
        "Bindings: the same",
        "Records: the same 4 records in both",
        "Gates: the same",
        "No differences.",
    ] {
        assert!(text.contains(line), "{line:?} in:\n{text}");
    }
    assert_eq!((a.snapshot(), bb.snapshot()), before, "diff wrote to a run");
}

/// A SQLite run and its copy on the server (exported, then imported under a new id, after
/// other runs took the server's first execution ids): no differences. And a run id kept in
/// both places is read from the one `--backend-b` names.
#[test]
fn a_copy_on_the_other_backend_is_the_same_run() {
    let Some(p) = Project::on(Backend::Postgres) else {
        return;
    };
    // The server numbers execution ids across runs: take some first.
    let other = p.init();
    for i in 0..5 {
        other.exec(i, "elsewhere", "completed", None);
    }
    let out = p
        .cmd()
        .args(["init", "--backend", "sqlite", "--run-id", "local", "-q"])
        .assert()
        .success();
    assert_eq!(
        String::from_utf8_lossy(&out.get_output().stdout).trim(),
        "local"
    );
    let run = p.run("local");
    // A call still open on both copies: the server's copy binds in its frame below.
    let e1 = run.exec(1, "do f()", "executing", None);
    run.bind("a", "value", Some(e1));
    bind_stdin(&run, "big", &big(4));
    run.exec(1, "let a = session", "completed", Some(e1));
    gate(&run, "ship");
    approve(&run, "ship");
    let copy = p.root().join("copy");
    run.cmd()
        .args(["export", "-o"])
        .arg(&copy)
        .assert()
        .success();
    p.cmd()
        .args([
            "import",
            "--backend",
            "postgres",
            "--run-id",
            "remote",
            "--vouch",
            "--as",
            "alice",
        ])
        .arg(&copy)
        .assert()
        .success();
    let remote = p.run("remote");
    assert_eq!(
        remote.view().binding("big", None).unwrap().4.unwrap()[..7],
        *"server:"
    );
    // The run is kept here (its Run names the project's server, which gets a copy of the same
    // id below): its own database and files.
    let here = || common::snapshot_db(&run.db) + &common::snapshot_files(&run.dir);
    let before = (here(), remote.snapshot());
    let (c, v) = diff_json(&p, &["local", "remote", "--exit-code"]);
    assert_eq!((c, &v["identical"]), (0, &json!(true)), "{v}");
    assert_eq!(
        (&v["a"]["backend"], &v["b"]["backend"]),
        (&json!("sqlite"), &json!("postgres"))
    );
    // Three records (the gate's `approve ship:` the third), their ids the server's own.
    assert_eq!(
        (&v["records"]["common"], &v["b"]["records"]),
        (&json!(3), &json!(3))
    );
    assert_ne!(server_first_record(&p, "remote"), e1);

    // The same run id on both backends: machine B imports the copy under its own id.
    let b = p.elsewhere();
    b.cmd()
        .args(["import", "--backend", "postgres"])
        .arg(&copy)
        .assert()
        .success();
    let (c, v) = diff_json(&p, &["local", "local", "--backend-b", "postgres"]);
    assert_eq!((c, &v["identical"]), (0, &json!(true)), "{v}");
    assert_eq!(
        (&v["a"]["backend"], &v["b"]["backend"]),
        (&json!("sqlite"), &json!("postgres"))
    );
    // The server's copy taken further: its binding in the scope of its first record.
    let first = server_first_record(&p, "local");
    b.run("local")
        .bind("a", "changed on the server", Some(first));
    let url = p.pg_url.as_deref().unwrap();
    let on_server = common::snapshot_pg(url, "local");
    let (_, v) = diff_json(&p, &["local", "local", "--backend-b", "postgres"]);
    assert_eq!(
        bindings_shown(&v),
        vec![row("changed", "a", "execution", Some(1), &["value"])],
        "{v}"
    );
    let (_, v) = diff_json(&p, &["local", "local", "--backend-a", "postgres"]);
    assert_eq!(v["a"]["backend"], json!("postgres"));
    assert_eq!(v["bindings"]["differ"], json!(1));
    // Where the rule finds it, the run is its SQLite directory here: the same on both sides.
    let (_, v) = diff_json(&p, &["local", "local"]);
    assert_eq!(v["identical"], json!(true));
    // A copy that is not where a backend is named: not found, one line, exit 3.
    for args in [
        ["remote", "local", "--backend-a", "sqlite"],
        ["local", "nowhere", "--backend-b", "postgres"],
    ] {
        let a = p.cmd().arg("diff").args(args).assert();
        assert_eq!(code(&a), 3, "{args:?}: {}", stderr(&a));
        assert_eq!(stderr(&a).lines().count(), 1, "{}", stderr(&a));
    }
    assert_eq!((here(), remote.snapshot()), before, "diff wrote to a run");
    assert_eq!(
        common::snapshot_pg(url, "local"),
        on_server,
        "diff wrote to the server's copy"
    );
}

/// The id the server gave the first execution record of a run.
fn server_first_record(p: &Project, run: &str) -> i64 {
    let mut c =
        ::postgres::Client::connect(p.pg_url.as_deref().unwrap(), ::postgres::NoTls).unwrap();
    c.query_one(
        "SELECT MIN(id) FROM openprose.execution WHERE run_id = $1",
        &[&run],
    )
    .unwrap()
    .get(0)
}

/// 5,000 differing bindings, 300 records and 300 gates: every answer stays within an MCP
/// answer's bound, says what it left out, and its cursor reaches the rest; `--all` gives
/// everything. The MCP tool answers within the same bound, to run ids only.
fn thousands_of_differences_stay_within_the_bound(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let (a, bb) = (p.init(), p.init());
    a.bind("shared", "v", None);
    bb.bind("shared", "v", None);
    // Written as another tool would, in one statement each.
    raw(
        &p,
        &bb,
        &format!(
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 4999)
             INSERT INTO bindings (name, kind, value) SELECT printf('v%04d', i), 'let', '{}' FROM n;
             WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 299)
             INSERT INTO execution (statement_index, statement_text, status) SELECT i, 'step ' || i, 'completed' FROM n;
             WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 299)
             INSERT INTO gates (id, run_id, prompt) SELECT printf('g%03d', i), '{}', 'p' FROM n;",
            "x".repeat(300),
            bb.id
        ),
        &format!(
            "WITH b AS (INSERT INTO openprose.bindings (name, run_id, kind, value)
                 SELECT 'v' || lpad(i::text, 4, '0'), $1, 'let', '{}' FROM generate_series(0, 4999) i),
             e AS (INSERT INTO openprose.execution (run_id, statement_index, statement_text, status)
                 SELECT $1, i, 'step ' || i, 'completed' FROM generate_series(0, 299) i)
             INSERT INTO openprose.gates (id, run_id, prompt)
                 SELECT 'g' || lpad(i::text, 3, '0'), $1, 'p' FROM generate_series(0, 299) i",
            "x".repeat(300)
        ),
    );
    let before = (a.snapshot(), bb.snapshot());
    const BOUND: usize = 32 * 1024;
    let size = |args: &[&str]| {
        let a = p
            .cmd()
            .args(["--json", "diff"])
            .args(args)
            .assert()
            .success();
        a.get_output().stdout.len()
    };
    for args in [
        vec![a.id.as_str(), bb.id.as_str()],
        vec![a.id.as_str(), bb.id.as_str(), "--limit", "500"],
    ] {
        let n = size(&args);
        assert!(n < BOUND, "{args:?}: {n} bytes");
    }
    let (_, v) = diff_json(&p, &[&a.id, &bb.id]);
    let bs = &v["bindings"];
    assert_eq!((&bs["differ"], &bs["added"]), (&json!(5000), &json!(5000)));
    assert_eq!(bs["shown"].as_array().unwrap().len(), 20);
    assert_eq!(
        (&bs["left_out"], &bs["next_cursor"]),
        (&json!(4980), &json!(20))
    );
    assert_eq!(
        v["bindings"]["shown"][0]["b"]["preview"],
        json!("x".repeat(60))
    );
    assert_eq!(v["bindings"]["shown"][0]["b"]["bytes"], json!(300));
    assert_eq!(v["records"]["b"]["after_common"], json!(300));
    assert_eq!(v["records"]["b"]["left_out"], json!(280));
    let last_shown = v["records"]["b"]["shown"][19]["id"].clone();
    assert_eq!(v["records"]["b"]["next_since"], last_shown);
    assert_eq!(
        (&v["gates"]["differ"], &v["gates"]["left_out"]),
        (&json!(300), &json!(280))
    );
    // The log from `next_since` goes on where the answer stopped.
    let log = bb
        .cmd()
        .args(["--json", "log", "--since", &last_shown.to_string()])
        .assert()
        .success();
    let first: Value = serde_json::from_str(
        String::from_utf8_lossy(&log.get_output().stdout)
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(first["statement_text"], json!("step 20"));

    // Pages follow on from each other: the cursor moves by what each page showed.
    let mut cursor = 0u64;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (_, v) = diff_json(
            &p,
            &[
                &a.id,
                &bb.id,
                "--limit",
                "500",
                "--cursor",
                &cursor.to_string(),
            ],
        );
        let page = bindings_shown(&v);
        assert!(
            !page.is_empty() && page.len() < 500,
            "{} on a page",
            page.len()
        );
        assert_eq!(v["bindings"]["cursor"], json!(cursor));
        cursor += page.len() as u64;
        assert_eq!(v["bindings"]["next_cursor"], json!(cursor));
        seen.extend(page.into_iter().map(|d| d.1));
    }
    let want: Vec<String> = (0..seen.len()).map(|i| format!("v{i:04}")).collect();
    assert_eq!(seen, want);
    let (_, v) = diff_json(&p, &[&a.id, &bb.id, "--cursor", "4990"]);
    assert_eq!(bindings_shown(&v).len(), 10);
    assert_eq!(
        (&v["bindings"]["left_out"], &v["bindings"]["next_cursor"]),
        (&json!(0), &json!(null))
    );
    // Everything at once, when asked.
    let (_, all) = diff_json(&p, &[&a.id, &bb.id, "--all"]);
    let names: Vec<String> = bindings_shown(&all).into_iter().map(|d| d.1).collect();
    assert_eq!(
        names,
        (0..5000).map(|i| format!("v{i:04}")).collect::<Vec<_>>()
    );
    assert_eq!(all["records"]["b"]["shown"].as_array().unwrap().len(), 300);
    assert_eq!(all["gates"]["shown"].as_array().unwrap().len(), 300);
    // One name.
    let (_, one) = diff_json(&p, &[&a.id, &bb.id, "--name", "v1234"]);
    assert_eq!(
        bindings_shown(&one),
        vec![row("added", "v1234", "root", None, &[])]
    );

    // For a person: bounded too, saying how to see more.
    let (_, text) = diff_text(&p, &[&a.id, &bb.id]);
    assert!(text.lines().count() < 200, "{text}");
    for line in [
        "Bindings: 5000 differ (5000 added, 0 removed, 0 changed)",
        "  … 4980 more: --cursor 20 shows the next ones, --name NAME one name's, --all every one",
        &format!(
            "    … 280 more: prose-state log --run {} --since {last_shown}",
            bb.id
        ),
        "  … 280 more: --limit N shows more, --all every one",
    ] {
        assert!(text.contains(line), "{line:?} in:\n{text}");
    }

    // Through MCP: the VM's read-only tool, within the same bound, for run ids only.
    mcp_answers_within_the_bound(&p, &a, &bb);
    assert_eq!((a.snapshot(), bb.snapshot()), before, "diff wrote to a run");
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn session(p: &Project, run: &Run, role: &str) -> RunningService<RoleClient, ()> {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.args(["--run", &run.id, "mcp", "--role", role, "--agent", "bot"])
        .current_dir(p.root())
        .env("HOME", common::test_home(p.root()))
        .stderr(std::process::Stdio::null());
    for var in CLEARED_ENV {
        cmd.env_remove(var);
    }
    ().serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap()
}

async fn call(client: &RunningService<RoleClient, ()>, args: Value) -> CallToolResult {
    let Value::Object(args) = args else {
        panic!("arguments are an object")
    };
    client
        .call_tool(CallToolRequestParams::new("diff").with_arguments(args))
        .await
        .unwrap()
}

fn class(r: &CallToolResult) -> &str {
    r.meta.as_ref().unwrap()["class"].as_str().unwrap()
}

/// The text a tool result carries.
fn text_of(r: &CallToolResult) -> String {
    serde_json::to_value(&r.content).unwrap()[0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

fn mcp_answers_within_the_bound(p: &Project, a: &Run, b: &Run) {
    let (schema, answers) = runtime().block_on(async {
        let client = session(p, a, "vm").await;
        let tool = client
            .list_all_tools()
            .await
            .unwrap()
            .into_iter()
            .find(|t| t.name == "diff")
            .expect("a VM session lists diff");
        assert_eq!(
            tool.annotations.as_ref().and_then(|x| x.read_only_hint),
            Some(true)
        );
        let props = tool.input_schema["properties"].as_object().unwrap().clone();
        for absent in ["run", "all", "exit_code"] {
            assert!(!props.contains_key(absent), "{absent}: {props:?}");
        }
        let mut answers = Vec::new();
        for args in [
            json!({"run_a": a.id, "run_b": b.id}),
            json!({"run_a": a.id, "run_b": b.id, "limit": 500}),
            json!({"run_a": a.id, "run_b": b.id, "cursor": 4990}),
            json!({"run_a": a.id, "run_b": a.id}),
        ] {
            let r = call(&client, args.clone()).await;
            assert_eq!(class(&r), "ok", "{args}: {r:?}");
            let text = text_of(&r);
            assert!(text.len() < 32 * 1024, "{args}: {} bytes", text.len());
            answers.push(r.structured_content.clone().unwrap());
        }
        assert_eq!(answers[0]["bindings"]["next_cursor"], json!(20));
        assert_eq!(answers[2]["bindings"]["left_out"], json!(0));
        assert_eq!(answers[3]["identical"], json!(true));
        // Run ids only: a path, even of a run of the project, is not a run here.
        let dir = a.dir.display().to_string();
        for args in [
            json!({"run_a": dir, "run_b": b.id}),
            json!({"run_a": a.id, "run_b": "../../etc"}),
            json!({"run_a": a.id, "run_b": "no-such-run"}),
        ] {
            let r = call(&client, args.clone()).await;
            assert_eq!(class(&r), "not_found", "{args}: {r:?}");
        }
        client.cancel().await.unwrap();
        let sub = session(p, a, "subagent").await;
        let names: Vec<String> = sub
            .list_all_tools()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        assert!(!names.contains(&"diff".to_string()), "{names:?}");
        sub.cancel().await.unwrap();
        (
            tool.output_schema.map(|s| Value::Object((*s).clone())),
            answers,
        )
    });
    // Each answer holds to the schema the tool declares (checked by the reference SDK's
    // validator, where the test environment has it).
    let python =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/mcp-venv/bin/python");
    if !python.exists() {
        common::skipped("diff's output schema check: no target/mcp-venv");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let schema_file = dir.path().join("schema.json");
    std::fs::write(&schema_file, schema.expect("an output schema").to_string()).unwrap();
    for (i, answer) in answers.iter().enumerate() {
        let file = dir.path().join(format!("{i}.json"));
        std::fs::write(&file, answer.to_string()).unwrap();
        let out = std::process::Command::new(&python)
            .args([
                "-c",
                "import json, sys, jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), json.load(open(sys.argv[2])))",
            ])
            .arg(&file)
            .arg(&schema_file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "answer {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Names and texts another tool wrote with control and bidirectional characters: shown
/// escaped to a person, exact (and escaped) in JSON, each on its own line.
fn hostile_names_are_shown_safely(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let (a, bb) = (p.init(), p.init());
    let name = "evil\u{1b}[2J\u{202e}eman\nsecond line";
    let sql_name =
        "'evil' || char(27) || '[2J' || char(8238) || 'eman' || char(10) || 'second line'";
    let pg_name = "'evil' || chr(27) || '[2J' || chr(8238) || 'eman' || chr(10) || 'second line'";
    raw(
        &p,
        &bb,
        &format!(
            "INSERT INTO bindings (name, kind, value) VALUES ({sql_name}, 'let', 'v' || char(27) || '[31mred');
             INSERT INTO gates (id, run_id, prompt) VALUES ('g' || char(8238) || 'x' || char(13), '{}', 'p');",
            bb.id
        ),
        &format!(
            "WITH b AS (INSERT INTO openprose.bindings (name, run_id, kind, value)
                 VALUES ({pg_name}, $1, 'let', 'v' || chr(27) || '[31mred'))
             INSERT INTO openprose.gates (id, run_id, prompt) VALUES ('g' || chr(8238) || 'x' || chr(13), $1, 'p')"
        ),
    );
    bb.exec(
        1,
        "text \u{1b}]0;title\u{7} \u{202e}kcab",
        "completed",
        None,
    );
    let before = (a.snapshot(), bb.snapshot());
    let (c, text) = diff_text(&p, &[&a.id, &bb.id]);
    assert_eq!(c, 0);
    for bad in ['\u{1b}', '\u{202e}', '\r', '\u{7}'] {
        assert!(!text.contains(bad), "{bad:?} in:\n{text}");
    }
    for shown in [
        "  + evil\\u{1b}[2J\\u{202e}eman\\nsecond line (root)",
        "      B: let, 9 bytes: v\\u{1b}[31mred",
        "  + g\\u{202e}x\\r",
        "text \\u{1b}]0;title\\u{7} \\u{202e}kcab completed",
    ] {
        assert!(text.contains(shown), "{shown:?} in:\n{text}");
    }
    let a_out = p
        .cmd()
        .args(["--json", "diff", &a.id, &bb.id])
        .assert()
        .success();
    let raw_json = String::from_utf8_lossy(&a_out.get_output().stdout).into_owned();
    assert!(
        !raw_json.contains('\u{202e}') && !raw_json.contains('\u{1b}'),
        "{raw_json}"
    );
    assert_eq!(raw_json.trim_end().lines().count(), 1);
    let v: Value = serde_json::from_str(&raw_json).unwrap();
    assert_eq!(v["bindings"]["shown"][0]["name"], json!(name));
    assert_eq!(
        v["bindings"]["shown"][0]["b"]["preview"],
        json!("v\u{1b}[31mred")
    );
    assert_eq!(v["gates"]["shown"][0]["id"], json!("g\u{202e}x\r"));
    assert_eq!((a.snapshot(), bb.snapshot()), before, "diff wrote to a run");
}

/// Bad input: one line on stderr, naming what was wrong, with its documented exit code, and
/// neither run changed.
fn bad_input_is_one_line_and_changes_nothing(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("x", "1", None);
    let before = run.snapshot();
    for (args, want, names) in [
        (vec![run.id.as_str(), "no-such-run"], 3, "no-such-run"),
        (vec!["no-such-run", run.id.as_str()], 3, "no-such-run"),
        (
            vec![run.id.as_str(), "/nonexistent/dir"],
            3,
            "/nonexistent/dir",
        ),
        (
            vec![run.id.as_str(), run.id.as_str(), "--name", "bad name!"],
            2,
            "bad name!",
        ),
        (
            vec![run.id.as_str(), run.id.as_str(), "--limit", "0"],
            2,
            "--limit",
        ),
        (
            vec![run.id.as_str(), run.id.as_str(), "--all", "--cursor", "3"],
            2,
            "--all",
        ),
        (
            vec![run.id.as_str(), run.id.as_str(), "--backend-b", "oracle"],
            2,
            "oracle",
        ),
        (vec![run.id.as_str()], 2, "RUN_B"),
    ] {
        let a = p.cmd().arg("diff").args(&args).assert();
        let err = stderr(&a);
        assert_eq!(code(&a), want, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(names), "{args:?}: {err}");
        assert!(a.get_output().stdout.is_empty(), "{args:?}");
    }
    assert_eq!(run.snapshot(), before);
}

/// docs/runs.md's worked example, run line by line as written (the binary first on PATH),
/// each line's exit code the one its comment says (0 when it says none); the output the page
/// shows is the output the command gives. SQLite's: the page shows the backend it reads.
#[test]
fn the_documented_example_runs_as_written() {
    let p = Project::new();
    run_documented(p.root(), "docs/runs.md", "## Comparing runs: `diff`", true);
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/runs.md"),
    )
    .unwrap();
    let section = doc
        .split("## Comparing runs: `diff`")
        .nth(1)
        .expect("a section on diff");
    let shown = section
        .split("```text\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the output the page shows");
    let given = sh(p.root(), "\"$BIN\" diff draft-1 draft-2")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&given.stdout), shown);
}
