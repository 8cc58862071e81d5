use crate::common::*;

on_both!(
    value_sources_argument_stdin_dash_and_file,
    const_cannot_be_rebound_in_its_scope,
    scope_chain_nearest_wins_and_root_is_last,
    missing_binding_in_root_scope_is_exit_3,
    attachments_above_the_threshold_only,
    get_streams_large_attachments_to_a_closed_pipe_quietly,
    the_version_shown_is_the_bindings_own,
);
use std::io::Write;
use std::process::Stdio;

type Row = (
    Option<i64>,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
);

fn row(run: &Run, name: &str, execution_id: Option<i64>) -> Option<Row> {
    run.view().binding(name, execution_id)
}

/// SQLite only: the confirmation names the state.db file.
#[test]
fn bind_root_scope_prints_the_spec_confirmation() {
    let p = Project::new();
    let run = p.init();
    let a = run
        .cmd()
        .args([
            "bind",
            "research",
            "AI safety research covers alignment, robustness...",
            "--source",
            "let research = session: researcher",
            "--summary",
            "AI safety research with 15 citations.",
        ])
        .assert()
        .success();
    let out = String::from_utf8(a.get_output().stdout.clone()).unwrap();
    assert_eq!(
        out,
        format!(
            "Binding written: research\nLocation: .prose/runs/{}/state.db (bindings table, name='research', execution_id=NULL)\nSummary: AI safety research with 15 citations.\n",
            run.id
        )
    );
    assert_eq!(
        row(&run, "research", None).unwrap(),
        (
            None,
            "let".into(),
            Some("AI safety research covers alignment, robustness...".into()),
            Some("let research = session: researcher".into()),
            None
        )
    );
}

/// SQLite only: the confirmation names the state.db file.
#[test]
fn bind_scoped_prints_execution_id_and_json() {
    let p = Project::new();
    let run = p.init();
    let e = run.exec(3, "do process", "executing", None);
    let a = run
        .cmd()
        .args([
            "bind",
            "result",
            "Processed chunk",
            "--execution-id",
            &e.to_string(),
        ])
        .assert()
        .success();
    let out = String::from_utf8(a.get_output().stdout.clone()).unwrap();
    assert!(
        out.contains(&format!("execution_id={e})\nExecution ID: {e}\n")),
        "{out}"
    );

    let a = run
        .cmd()
        .args([
            "--json",
            "bind",
            "out2",
            "v",
            "--kind",
            "output",
            "--execution-id",
        ])
        .arg(e.to_string())
        .assert()
        .success();
    let v = stdout_json(&a);
    assert_eq!(v["name"], "out2");
    assert_eq!(v["execution_id"], e);
    assert_eq!(v["kind"], "output");
    assert_eq!(v["db"], format!(".prose/runs/{}/state.db", run.id));
    assert_eq!(v["attachment_path"], serde_json::Value::Null);
    assert_eq!(v["bytes"], 1);
    assert_eq!(row(&run, "out2", Some(e)).unwrap().1, "output");
}

fn value_sources_argument_stdin_dash_and_file(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let tricky = "it's \"quoted\"; DROP TABLE bindings; --\n\tsecond line\n";
    run.cmd().args(["bind", "arg", tricky]).assert().success();
    run.cmd()
        .args(["bind", "piped"])
        .write_stdin(tricky)
        .assert()
        .success();
    run.cmd()
        .args(["bind", "dash", "-"])
        .write_stdin(tricky)
        .assert()
        .success();
    let f = p.write("value.txt", tricky.as_bytes());
    run.cmd()
        .args(["bind", "file", "--file"])
        .arg(&f)
        .assert()
        .success();
    for name in ["arg", "piped", "dash", "file"] {
        assert_eq!(run.get(name, None), tricky.as_bytes(), "{name}");
        assert_eq!(row(&run, name, None).unwrap().2.unwrap(), tricky);
    }
    // empty values are values
    run.cmd().args(["bind", "empty", ""]).assert().success();
    assert_eq!(row(&run, "empty", None).unwrap().2.unwrap(), "");
    // NUL inside a value is stored and returned faithfully on SQLite; PostgreSQL text cannot
    // hold it, and says so (exit 2), writing nothing
    let a = run
        .cmd()
        .args(["bind", "nul"])
        .write_stdin(&b"a\0b"[..])
        .assert();
    match b {
        Backend::Sqlite => {
            assert_eq!(code(&a), 0);
            assert_eq!(run.get("nul", None), b"a\0b");
        }
        Backend::Postgres => {
            assert_eq!(code(&a), 2, "{}", stderr(&a));
            assert!(stderr(&a).contains("NUL"), "{}", stderr(&a));
            assert!(row(&run, "nul", None).is_none());
        }
    }
}

/// SQLite only: it rewrites timestamps with raw SQLite SQL.
#[test]
fn upsert_keeps_created_at_and_sets_updated_at() {
    let p = Project::new();
    let run = p.init();
    run.bind("x", "one", None);
    run.conn()
        .execute(
            "UPDATE bindings SET created_at = '2000-01-01 00:00:00', updated_at = '2000-01-01 00:00:00'",
            [],
        )
        .unwrap();
    run.cmd()
        .args(["bind", "x", "two", "--kind", "output"])
        .assert()
        .success();
    let (n, created, updated, kind, value): (i64, String, String, String, String) = run
        .conn()
        .query_row(
            "SELECT COUNT(*), created_at, updated_at, kind, value FROM bindings WHERE name='x'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(created, "2000-01-01 00:00:00");
    assert_ne!(updated, "2000-01-01 00:00:00");
    assert_eq!((kind.as_str(), value.as_str()), ("output", "two"));
}

fn const_cannot_be_rebound_in_its_scope(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let e = run.exec(1, "block", "executing", None);
    run.cmd()
        .args(["bind", "c", "fixed", "--kind", "const"])
        .assert()
        .success();
    let before = run.snapshot();
    for kind in ["let", "const"] {
        let a = run
            .cmd()
            .args(["bind", "c", "changed", "--kind", kind])
            .assert()
            .failure();
        assert_eq!(code(&a), 4);
        assert!(stderr(&a).contains("const"), "{}", stderr(&a));
        assert_eq!(run.snapshot(), before);
    }
    // a big value is refused the same way, and leaves no attachment behind
    let a = run
        .cmd()
        .args(["bind", "c", "--attach-over", "10"])
        .write_stdin("x".repeat(100))
        .assert()
        .failure();
    assert_eq!(code(&a), 4);
    assert_eq!(run.snapshot(), before);
    // another scope may bind the same name
    run.cmd()
        .args([
            "bind",
            "c",
            "inner",
            "--kind",
            "const",
            "--execution-id",
            &e.to_string(),
        ])
        .assert()
        .success();
    assert_eq!(run.get("c", Some(e)), b"inner");
    assert_eq!(run.get("c", None), b"fixed");
}

fn scope_chain_nearest_wins_and_root_is_last(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    // e1 > e2 > e3 > e4, and a sibling branch e5 under e1
    let e1 = run.exec(1, "do a", "executing", None);
    let e2 = run.exec(2, "do b", "executing", Some(e1));
    let e3 = run.exec(3, "do c", "executing", Some(e2));
    let e4 = run.exec(4, "do d", "executing", Some(e3));
    let e5 = run.exec(5, "do e", "executing", Some(e1));

    run.bind("x", "root", None);
    run.bind("x", "at e1", Some(e1));
    run.bind("x", "at e3", Some(e3));
    run.bind("only_root", "r", None);
    run.bind("only_e5", "five", Some(e5));

    assert_eq!(run.get("x", None), b"root");
    assert_eq!(run.get("x", Some(e4)), b"at e3"); // nearest above
    assert_eq!(run.get("x", Some(e3)), b"at e3"); // own scope
    assert_eq!(run.get("x", Some(e2)), b"at e1"); // shadowing skips the deeper one
    assert_eq!(run.get("x", Some(e5)), b"at e1");
    assert_eq!(run.get("only_root", Some(e4)), b"r"); // root fallback
    assert_eq!(run.get("only_e5", Some(e5)), b"five");

    // a sibling's binding is not visible; the error names the scopes searched
    let a = run
        .cmd()
        .args(["get", "only_e5", "--execution-id", &e4.to_string()])
        .assert()
        .failure();
    assert_eq!(code(&a), 3);
    let err = stderr(&a);
    assert!(
        err.contains(&format!(
            "execution {e4} → execution {e3} → execution {e2} → execution {e1} → root"
        )),
        "{err}"
    );
    assert!(err.contains("only_e5"), "{err}");
    assert_eq!(err.lines().count(), 1);

    // --json: the row and where it was found
    let a = run
        .cmd()
        .args(["--json", "get", "x", "--execution-id", &e4.to_string()])
        .assert()
        .success();
    let v = stdout_json(&a);
    assert_eq!(v["value"], "at e3");
    assert_eq!(v["execution_id"], e3);
    assert_eq!(v["scope"], "execution");
    assert_eq!(v["depth"], 1);
    assert_eq!(v["kind"], "let");
    let a = run
        .cmd()
        .args([
            "--json",
            "get",
            "only_root",
            "--execution-id",
            &e4.to_string(),
        ])
        .assert()
        .success();
    let v = stdout_json(&a);
    assert_eq!(v["scope"], "root");
    assert_eq!(v["execution_id"], serde_json::Value::Null);

    // --explain: the chain walked
    let a = run
        .cmd()
        .args([
            "--json",
            "get",
            "x",
            "--explain",
            "--execution-id",
            &e4.to_string(),
        ])
        .assert()
        .success();
    let v = stdout_json(&a);
    assert_eq!(v["chain"], serde_json::json!([e4, e3, e2, e1]));
    assert_eq!(v["found_execution_id"], e3);
    assert_eq!(v["depth"], 1);
    let a = run
        .cmd()
        .args(["get", "x", "--explain", "--execution-id", &e4.to_string()])
        .assert()
        .success();
    let text = String::from_utf8(a.get_output().stdout.clone()).unwrap();
    assert!(
        text.contains(&format!("execution {e3}")) && text.contains("found (let)"),
        "{text}"
    );

    // unknown execution
    let a = run
        .cmd()
        .args(["get", "x", "--execution-id", "999"])
        .assert()
        .failure();
    assert_eq!(code(&a), 3);
    assert!(stderr(&a).contains("execution not found: 999"));
}

fn missing_binding_in_root_scope_is_exit_3(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let a = run.cmd().args(["get", "nothing"]).assert().failure();
    assert_eq!(code(&a), 3);
    assert!(
        stderr(&a).contains("binding not found (searched root): \"nothing\""),
        "{}",
        stderr(&a)
    );
}

fn attachments_above_the_threshold_only(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let at_limit = "a".repeat(102_400);
    let over = "b".repeat(102_401);
    run.cmd()
        .args(["bind", "small"])
        .write_stdin(at_limit.clone())
        .assert()
        .success();
    assert_eq!(row(&run, "small", None).unwrap().2.unwrap(), at_limit);
    assert!(row(&run, "small", None).unwrap().4.is_none());

    let a = run
        .cmd()
        .args(["--json", "bind", "big"])
        .write_stdin(over.clone())
        .assert()
        .success();
    let v = stdout_json(&a);
    let big_path = v["attachment_path"].as_str().unwrap().to_string();
    assert!(is_attachment_of(&big_path, "big", None), "{big_path}");
    assert_eq!(v["bytes"], 102_401);
    let r = row(&run, "big", None).unwrap();
    assert_eq!(r.4.as_deref(), Some(big_path.as_str()));
    assert!(
        r.2.unwrap().contains("102401 bytes"),
        "the value holds a generated summary"
    );
    assert_eq!(run.stored(&big_path).unwrap(), over.as_bytes());
    assert_eq!(run.get("big", None), over.as_bytes());
    assert_eq!(run.attachments(), std::slice::from_ref(&big_path));

    // --attach-over and --summary; a scoped attachment gets its own file
    let e = run.exec(1, "block", "executing", None);
    run.cmd()
        .args([
            "bind",
            "big",
            "--attach-over",
            "4",
            "--summary",
            "five bytes",
            "--execution-id",
        ])
        .arg(e.to_string())
        .write_stdin("12345")
        .assert()
        .success();
    let r = row(&run, "big", Some(e)).unwrap();
    assert_eq!(r.2.as_deref(), Some("five bytes"));
    let scoped = r.4.clone().unwrap();
    assert!(is_attachment_of(&scoped, "big", Some(e)), "{scoped}");
    assert_eq!(run.get("big", Some(e)), b"12345");
    let a = run
        .cmd()
        .args(["--json", "get", "big", "--execution-id", &e.to_string()])
        .assert()
        .success();
    let v = stdout_json(&a);
    assert_eq!(v["bytes"], 5);
    assert_eq!(v["value"], "five bytes");
    match b {
        // A file, read where it is; a value on the server has no path to read.
        Backend::Sqlite => assert!(v["attachment"].as_str().unwrap().ends_with(&scoped)),
        Backend::Postgres => assert!(v["attachment"].is_null()),
    }
    assert_eq!(v["attachment_path"], scoped.as_str());

    // rebinding small keeps the old file for the version that names it; rebinding big again
    // gives the new version a file of its own
    run.cmd()
        .args(["bind", "big", "now small"])
        .assert()
        .success();
    let mut both = vec![big_path.clone(), scoped.clone()];
    both.sort();
    assert_eq!(run.attachments(), both);
    assert!(row(&run, "big", None).unwrap().4.is_none());
    assert_eq!(run.get("big", None), b"now small");
    let a = run
        .cmd()
        .args(["get", "big", "--version", "1"])
        .assert()
        .success();
    assert_eq!(
        a.get_output().stdout,
        over.as_bytes(),
        "the old version reads whole"
    );
    run.cmd()
        .args([
            "bind",
            "big",
            "--attach-over",
            "2",
            "--execution-id",
            &e.to_string(),
        ])
        .write_stdin("replaced")
        .assert()
        .success();
    assert_eq!(run.get("big", Some(e)), b"replaced");
    // The new version has a file of its own; the old ones stay until history is pruned.
    let replaced = row(&run, "big", Some(e)).unwrap().4.unwrap();
    assert!(is_attachment_of(&replaced, "big", Some(e)), "{replaced}");
    assert_ne!(replaced, scoped);
    assert_eq!(run.attachments().len(), 3);
    run.cmd()
        .args(["prune", "--history", "1", "--yes"])
        .assert()
        .success();
    assert_eq!(run.attachments(), [replaced]);
    run.cmd()
        .args(["get", "big", "--version", "1"])
        .assert()
        .code(3);
}

/// SQLite only: it lists rows with raw SQLite SQL.
#[test]
fn every_attachment_row_points_at_a_complete_file() {
    let p = Project::new();
    let run = p.init();
    for i in 0..20 {
        let size = 50 + i * 37;
        let value: String = (0..size)
            .map(|j| char::from(b'a' + ((i + j) % 26) as u8))
            .collect();
        run.cmd()
            .args(["bind", &format!("v{}", i % 5), "--attach-over", "100"])
            .write_stdin(value)
            .assert()
            .success();
    }
    let c = run.conn();
    let mut s = c
        .prepare("SELECT name, attachment_path FROM bindings WHERE attachment_path IS NOT NULL")
        .unwrap();
    let rows: Vec<(String, String)> = s
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    for (name, path) in &rows {
        let got = run.get(name, None);
        assert_eq!(std::fs::read(run.dir.join(path)).unwrap(), got);
    }
    // no temp files are left behind
    assert!(
        run.attachments()
            .iter()
            .all(|f| !f.starts_with("attachments/.")),
        "{:?}",
        run.attachments()
    );
}

#[test]
fn run_is_found_by_id_directory_db_path_and_env() {
    let p = Project::new();
    let run = p.init();
    run.bind("x", "v", None);
    let dir = format!(".prose/runs/{}", run.id);
    let db = format!("{dir}/state.db");
    for r in [run.id.as_str(), dir.as_str(), db.as_str()] {
        let a = p.cmd().args(["--run", r, "get", "x"]).assert().success();
        assert_eq!(a.get_output().stdout, b"v", "{r}");
    }
    let a = p
        .cmd()
        .env("PROSE_RUN", &db)
        .args(["get", "x"])
        .assert()
        .success();
    assert_eq!(a.get_output().stdout, b"v");
    // an absolute path from anywhere
    let a = assert_cmd::Command::new(BIN)
        .current_dir("/")
        .args(["--run"])
        .arg(&run.db)
        .args(["get", "x"])
        .assert()
        .success();
    assert_eq!(a.get_output().stdout, b"v");
    // a binding written through a db path lands in the same run
    p.cmd()
        .args(["--run", &db, "bind", "y", "w"])
        .assert()
        .success();
    assert_eq!(run.get("y", None), b"w");
}

fn get_streams_large_attachments_to_a_closed_pipe_quietly(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let mut child = run
        .std_cmd()
        .args(["bind", "big"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        let chunk = vec![b'z'; 1 << 20];
        for _ in 0..8 {
            stdin.write_all(&chunk).unwrap();
        }
    }
    assert!(child.wait().unwrap().success());
    // `get big | head -c 10`: the reader goes away early; no panic, exit 0
    let mut child = run
        .std_cmd()
        .args(["get", "big"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut buf = [0u8; 10];
    std::io::Read::read_exact(&mut out, &mut buf).unwrap();
    drop(out);
    let result = child.wait_with_output().unwrap();
    assert_eq!(&buf, b"zzzzzzzzzz");
    assert!(
        result.status.success(),
        "{:?} {}",
        result.status,
        String::from_utf8_lossy(&result.stderr)
    );
    assert!(result.stderr.is_empty());
}

/// Issue 45: one number is called version. `bind --json` and `get --json` report the
/// binding's own version (1, 2, 3, ... in its scope), the one `history` lists, `get --version`
/// reads and `bind --if-version` compares; a first write reports 1 however many bindings the
/// run has.
fn the_version_shown_is_the_bindings_own(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let bound = |args: &[&str]| {
        let a = run.cmd().arg("--json").arg("bind").args(args).assert();
        let out = a.get_output().clone();
        (
            out.status.code().unwrap_or(-1),
            serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let history = || {
        stdout_json(
            &run.cmd()
                .args(["--json", "history", "x"])
                .assert()
                .success(),
        )
    };
    // Other bindings first, so that a counter the run's bindings share is well past 2.
    for i in 0..12 {
        run.bind(&format!("other{i}"), "v", None);
    }
    run.bind("other0", "again", None);
    let (code, v, err) = bound(&["x", "one"]);
    assert_eq!(
        (code, &v["version"]),
        (0, &serde_json::json!(1)),
        "{v} {err}"
    );
    let (code, v, err) = bound(&["x", "two"]);
    assert_eq!(
        (code, &v["version"]),
        (0, &serde_json::json!(2)),
        "{v} {err}"
    );

    let got = stdout_json(&run.cmd().args(["--json", "get", "x"]).assert().success());
    assert_eq!(
        (&got["version"], &got["value"]),
        (&serde_json::json!(2), &serde_json::json!("two"))
    );
    let h = history();
    assert_eq!(h["versions"][0]["version"], 2, "{h}");
    assert_eq!(h["versions"][1]["version"], 1, "{h}");
    let old = stdout_json(
        &run.cmd()
            .args(["--json", "get", "x", "--version", "2"])
            .assert()
            .success(),
    );
    assert_eq!(
        (&old["version"], &old["value"]),
        (&serde_json::json!(2), &serde_json::json!("two"))
    );
    let old = stdout_json(
        &run.cmd()
            .args(["--json", "get", "x", "--version", "1"])
            .assert()
            .success(),
    );
    assert_eq!(
        (&old["version"], &old["value"]),
        (&serde_json::json!(1), &serde_json::json!("one"))
    );

    // Compare-and-set on that number: 2 writes (and becomes 3), 2 again is refused.
    let (code, v, err) = bound(&["x", "three", "--if-version", "2"]);
    assert_eq!(
        (code, &v["version"]),
        (0, &serde_json::json!(3)),
        "{v} {err}"
    );
    let before = run.snapshot();
    let listed = history();
    let (code, _, err) = bound(&["x", "four", "--if-version", "2"]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("is at version 3, not 2"), "{err}");
    assert_eq!(
        run.snapshot(),
        before,
        "a refused compare-and-set changed the run"
    );
    assert_eq!(history(), listed);
    assert_eq!(run.get("x", None), b"three");
    // In an execution's scope, the binding of the same name has versions of its own.
    let e = run.exec(1, "let x = session: w", "executing", None);
    let (code, v, err) = bound(&[
        "x",
        "inner",
        "--execution-id",
        &e.to_string(),
        "--if-version",
        "0",
    ]);
    assert_eq!(
        (code, &v["version"]),
        (0, &serde_json::json!(1)),
        "{v} {err}"
    );
    let got = stdout_json(
        &run.cmd()
            .args(["--json", "get", "x", "--execution-id", &e.to_string()])
            .assert()
            .success(),
    );
    assert_eq!(got["version"], 1, "{got}");
    // A raw writer's write is a version too (kept by the schema's trigger): the number moves.
    run.view().raw(
        "UPDATE bindings SET value = 'raw' WHERE name = 'x' AND execution_id IS NULL",
        "UPDATE openprose.bindings SET value = 'raw' WHERE run_id = '$RUN' AND name = 'x' AND execution_id IS NULL",
    );
    let got = stdout_json(&run.cmd().args(["--json", "get", "x"]).assert().success());
    assert_eq!(
        (&got["version"], &got["value"]),
        (&serde_json::json!(4), &serde_json::json!("raw"))
    );
    let before = run.snapshot();
    let (code, _, err) = bound(&["x", "lost", "--if-version", "3"]);
    assert_eq!(code, 4, "{err}");
    assert_eq!(run.snapshot(), before);
    // Pruned to its newest version, a binding's numbers go on from where they were.
    run.cmd()
        .args(["prune", "--history", "1", "--yes"])
        .assert()
        .success();
    let (code, v, err) = bound(&["x", "five", "--if-version", "4"]);
    assert_eq!(
        (code, &v["version"]),
        (0, &serde_json::json!(5)),
        "{v} {err}"
    );
    let h = history();
    assert_eq!(h["versions"][0]["version"], 5, "{h}");
    assert_eq!(h["versions"][1]["version"], 4, "{h}");
}
