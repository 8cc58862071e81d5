//! Binding history (issue 31): every write of a binding is kept as a version, with who wrote
//! it and after which record, raw SQL writes included; `history`, `get --version` and
//! `get --as-of` read them back; `prune --history` bounds them; a decision about inputs is
//! stale when one changes before it is consumed. Each story drives the binary, then reads the
//! history tables itself.

use crate::common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Stdio;

on_both!(
    a_projects_default_bounds_history_as_runs_write,
    every_version_reads_back_from_the_nearest_whole_one,
    sixteen_writers_lose_no_version_and_each_is_attributed,
    raw_sql_writes_are_kept_and_shown_as_unknown,
    as_of_a_record_is_what_get_returned_then,
    prune_history_keeps_the_newest_whole,
    reads_of_the_past_refused_change_nothing,
    refused_writes_keep_no_version,
    hostile_values_in_history_are_shown_safely,
    a_decision_is_stale_only_if_an_input_changed_before_it_was_consumed,
);

/// One row of a binding's history, as the test reads it from the database.
#[derive(Debug, Clone, PartialEq)]
pub struct Version {
    pub n: i64,
    pub kind: Option<String>,
    pub value: Option<String>,
    pub delta: Option<String>,
    pub attachment: Option<String>,
    pub at_record: Option<i64>,
    pub principal: Option<String>,
    pub deleted: bool,
    pub gap: bool,
}

/// The history rows of one binding in one scope, by version number.
pub fn versions(run: &Run, name: &str, scope: Option<i64>) -> Vec<Version> {
    match &run.pg_url {
        Some(url) => {
            let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
            c.query(
                "SELECT n, kind, value, delta, attachment_path, at_record, principal, deleted, gap
                 FROM openprose.binding_history
                 WHERE run_id = $1 AND name = $2
                   AND COALESCE(execution_id, -1) = COALESCE($3::bigint, -1)
                 ORDER BY n, seq",
                &[&run.id, &name, &scope],
            )
            .unwrap()
            .iter()
            .map(|r| Version {
                n: r.get(0),
                kind: r.get(1),
                value: r.get(2),
                delta: r.get(3),
                attachment: r.get(4),
                at_record: r.get(5),
                principal: r.get(6),
                deleted: r.get::<_, i64>(7) != 0,
                gap: r.get::<_, i64>(8) != 0,
            })
            .collect()
        }
        None => {
            let c = run.conn();
            let mut s = c
                .prepare(
                    "SELECT n, kind, value, delta, attachment_path, at_record, principal, deleted, gap
                     FROM binding_history
                     WHERE name = ?1 AND IFNULL(execution_id, -1) = IFNULL(?2, -1)
                     ORDER BY n, seq",
                )
                .unwrap();
            s.query_map(rusqlite::params![name, scope], |r| {
                Ok(Version {
                    n: r.get(0)?,
                    kind: r.get(1)?,
                    value: r.get(2)?,
                    delta: r.get(3)?,
                    attachment: r.get(4)?,
                    at_record: r.get(5)?,
                    principal: r.get(6)?,
                    deleted: r.get::<_, i64>(7)? != 0,
                    gap: r.get::<_, i64>(8)? != 0,
                })
            })
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
        }
    }
}

/// Everything in a run, history tables included (the common snapshot of a PostgreSQL run
/// leaves them out; SQLite's dumps every table already).
pub fn state(run: &Run) -> String {
    let mut out = run.snapshot();
    if let Some(url) = &run.pg_url {
        let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
        for table in ["binding_history", "agent_history"] {
            out += &format!("\n{table}:\n");
            for r in c
                .query(
                    &format!(
                        "SELECT t::text FROM openprose.{table} t WHERE run_id = $1 ORDER BY seq"
                    ),
                    &[&run.id],
                )
                .unwrap()
            {
                out += &format!("  {}\n", r.get::<_, String>(0));
            }
        }
    }
    out
}

/// The ids of every run of the project: its run directories, or the server's runs.
pub fn run_ids(p: &Project) -> Vec<String> {
    let mut ids: Vec<String> = match &p.pg_url {
        Some(url) => {
            let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
            c.query("SELECT id FROM openprose.run", &[])
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect()
        }
        None => std::fs::read_dir(p.root().join(".prose/runs"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default(),
    };
    ids.sort();
    ids
}

/// (statement_text, principal) of every execution record, in order.
pub fn records(run: &Run) -> Vec<(String, Option<String>)> {
    match &run.pg_url {
        Some(url) => {
            let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
            c.query(
                "SELECT statement_text, principal FROM openprose.execution
                 WHERE run_id = $1 ORDER BY id",
                &[&run.id],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
        }
        None => {
            let c = run.conn();
            let mut s = c
                .prepare("SELECT statement_text, principal FROM execution ORDER BY id")
                .unwrap();
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .map(|r| r.unwrap())
                .collect()
        }
    }
}

/// `get NAME ARGS...`: the value printed (exit 0), or None when there was none (exit 3).
pub fn get_with(run: &Run, name: &str, args: &[&str]) -> Option<Vec<u8>> {
    let a = run.cmd().args(["get", name]).args(args).assert();
    match code(&a) {
        0 => Some(a.get_output().stdout.clone()),
        3 => None,
        c => panic!("get {name} {args:?}: exit {c}: {}", stderr(&a)),
    }
}

/// `history NAME ARGS... --json`.
pub fn history_json(run: &Run, name: &str, args: &[&str]) -> Value {
    stdout_json(
        &run.cmd()
            .args(["--json", "history", name, "--limit", "100"])
            .args(args)
            .assert()
            .success(),
    )
}

/// A JSON array's items as strings.
fn items(v: &str) -> Vec<String> {
    serde_json::from_str::<Vec<Value>>(v)
        .unwrap_or_else(|e| panic!("{e}: {v}"))
        .into_iter()
        .map(|i| i.as_str().unwrap().to_string())
        .collect()
}

/// The item a `--append` step added, from its stored delta.
fn appended(delta: &str) -> String {
    let d: Value = serde_json::from_str(delta).unwrap();
    d["append"].as_str().unwrap().to_string()
}

/// Issue 31's first test: 16 processes at once, each rebinding a name of its own, one name
/// they share, appending to one shared accumulator and appending records, each as itself.
/// Afterwards every write has exactly one version, numbered 1..N without a gap or a repeat,
/// each attributed to the writer that made it; every `--append` step, replayed from the
/// first version, gives the value `get --version` reads at that version and, at the last,
/// the current one.
fn sixteen_writers_lose_no_version_and_each_is_attributed(b: Backend) {
    const WRITERS: usize = 16;
    const ROUNDS: usize = 8;
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["bind", "acc", "[]", "--as", "setup"])
        .assert()
        .success();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let mut script = String::new();
            for i in 0..ROUNDS {
                let me = format!("--as writer-{w}");
                script += &format!(
                    "\"$BIN\" --run \"$RUN\" bind own{w} 'w{w} r{i}' {me} >/dev/null || echo FAIL own {w} {i} $? >&2\n\
                     \"$BIN\" --run \"$RUN\" bind shared 'w{w} r{i}' {me} >/dev/null || echo FAIL shared {w} {i} $? >&2\n\
                     \"$BIN\" --run \"$RUN\" bind acc --append 'w{w} r{i}' {me} >/dev/null || echo FAIL acc {w} {i} $? >&2\n"
                );
                if i % 4 == 0 {
                    script += &format!(
                        "\"$BIN\" --run \"$RUN\" exec-append --index {i} --text 'w{w} r{i}' --status completed {me} >/dev/null || echo FAIL exec {w} {i} $? >&2\n"
                    );
                }
            }
            sh(p.root(), &script)
                .env("RUN", &run.id)
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut failures = String::new();
    for w in writers {
        failures += &String::from_utf8_lossy(&w.wait_with_output().unwrap().stderr);
    }
    assert_eq!(failures, "", "failed writes");

    let writer_of = |text: &str| -> String {
        let w = text.strip_prefix('w').unwrap().split(' ').next().unwrap();
        format!("writer-{w}")
    };
    let numbered = |vs: &[Version], what: &str| {
        let ns: Vec<i64> = vs.iter().map(|v| v.n).collect();
        let want: Vec<i64> = (1..=vs.len() as i64).collect();
        assert_eq!(ns, want, "{what}: versions not 1..N");
        assert!(vs.iter().all(|v| !v.deleted && !v.gap), "{what}: {vs:?}");
    };
    // A name of its own: exactly its writer's writes, in its own order.
    for w in 0..WRITERS {
        let vs = versions(&run, &format!("own{w}"), None);
        numbered(&vs, &format!("own{w}"));
        let values: Vec<String> = vs.iter().map(|v| v.value.clone().unwrap()).collect();
        let want: Vec<String> = (0..ROUNDS).map(|i| format!("w{w} r{i}")).collect();
        assert_eq!(values, want, "own{w}");
        for v in &vs {
            assert_eq!(v.principal.as_deref(), Some(format!("writer-{w}").as_str()));
        }
    }
    // The shared name: every write once, each by whoever wrote that value.
    let vs = versions(&run, "shared", None);
    numbered(&vs, "shared");
    assert_eq!(vs.len(), WRITERS * ROUNDS);
    let mut seen: Vec<String> = vs.iter().map(|v| v.value.clone().unwrap()).collect();
    for v in &vs {
        let value = v.value.as_deref().unwrap();
        assert_eq!(
            v.principal.as_deref(),
            Some(writer_of(value).as_str()),
            "{v:?}"
        );
    }
    seen.sort();
    let mut want: Vec<String> = (0..WRITERS)
        .flat_map(|w| (0..ROUNDS).map(move |i| format!("w{w} r{i}")))
        .collect();
    want.sort();
    assert_eq!(seen, want, "shared: a write lost or kept twice");
    assert_eq!(
        run.get("shared", None),
        vs.last().unwrap().value.clone().unwrap().into_bytes(),
        "the newest version is the current value"
    );

    // The accumulator: version 1 whole, then one step per append, each by its writer; replayed,
    // the steps give every version's value and, at the end, the current one.
    let vs = versions(&run, "acc", None);
    numbered(&vs, "acc");
    assert_eq!(vs.len(), 1 + WRITERS * ROUNDS);
    assert_eq!(
        (vs[0].value.as_deref(), vs[0].principal.as_deref()),
        (Some("[]"), Some("setup"))
    );
    let mut value: Vec<String> = Vec::new();
    let mut rebuilt = vec![value.clone()];
    for v in &vs[1..] {
        assert_eq!(v.value, None, "a step keeps no whole value: {v:?}");
        let item = appended(v.delta.as_deref().unwrap());
        assert_eq!(v.principal.as_deref(), Some(writer_of(&item).as_str()));
        value.push(item);
        rebuilt.push(value.clone());
    }
    let current = String::from_utf8(run.get("acc", None)).unwrap();
    assert_eq!(
        items(&current),
        value,
        "steps replayed give the current value"
    );
    let mut all = value.clone();
    all.sort();
    assert_eq!(all, want, "acc: an append lost or kept twice");
    // `get --version` rebuilds each version the same way (a sample, and the ends).
    let sample: Vec<usize> = (0..vs.len())
        .filter(|i| i % 9 == 0 || *i == vs.len() - 1 || *i == 1)
        .collect();
    for i in sample {
        let got = get_with(&run, "acc", &["--version", &(i + 1).to_string()]).unwrap();
        assert_eq!(
            items(&String::from_utf8(got).unwrap()),
            rebuilt[i],
            "acc version {}",
            i + 1
        );
    }
    // `history` says the same: who wrote each, newest first.
    let h = history_json(&run, "acc", &[]);
    assert_eq!(h["total"], serde_json::json!(vs.len()));
    let shown: Vec<(i64, String)> = h["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].as_i64().unwrap(),
                v["by"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(i64, String)> = vs
        .iter()
        .rev()
        .take(100)
        .map(|v| (v.n, v.principal.clone().unwrap()))
        .collect();
    assert_eq!(shown, want);
    // Paged back with --before, every version once, newest first.
    let mut paged = Vec::new();
    let mut before: Option<i64> = None;
    loop {
        let mut args = vec!["--limit".to_string(), "50".to_string()];
        if let Some(b) = before {
            args.extend(["--before".to_string(), b.to_string()]);
        }
        let page = stdout_json(
            &run.cmd()
                .args(["--json", "history", "acc"])
                .args(&args)
                .assert()
                .success(),
        );
        let vs = page["versions"].as_array().unwrap();
        assert!(vs.len() <= 50);
        paged.extend(vs.iter().map(|v| v["version"].as_i64().unwrap()));
        match page["next_before"].as_i64() {
            Some(b) => before = Some(b),
            None => break,
        }
    }
    let want: Vec<i64> = (1..=vs.len() as i64).rev().collect();
    assert_eq!(paged, want);
    // Records name their writer too.
    let recs = records(&run);
    assert_eq!(recs.len(), WRITERS * ROUNDS.div_ceil(4));
    for (text, principal) in &recs {
        assert_eq!(
            principal.as_deref(),
            Some(writer_of(text).as_str()),
            "{text}"
        );
    }
    if b == Backend::Sqlite {
        let ok: String = run
            .conn()
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok");
    }
}

/// Writes behind the tool's back are kept as versions too: an UPDATE, the spec's upsert
/// (SQLite's `INSERT OR REPLACE`, PostgreSQL's `INSERT ... ON CONFLICT`), and a DELETE, kept
/// as a tombstone. Nothing names their writer: stored NULL, shown `unknown`.
fn raw_sql_writes_are_kept_and_shown_as_unknown(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let e = run.exec(1, "let x = session", "executing", None);
    run.cmd()
        .args(["bind", "x", "first", "--as", "alice"])
        .assert()
        .success();
    run.cmd()
        .args(["bind", "inner", "scoped", "--as", "alice"])
        .args(["--execution-id", &e.to_string()])
        .assert()
        .success();
    let v = run.view();
    v.raw(
        "UPDATE bindings SET value = 'raw update', updated_at = datetime('now') WHERE name = 'x'",
        "UPDATE openprose.bindings SET value = 'raw update', updated_at = NOW()
          WHERE run_id = '$RUN' AND name = 'x'",
    );
    v.raw(
        "INSERT OR REPLACE INTO bindings (name, execution_id, kind, value, source_statement)
         VALUES ('x', NULL, 'let', 'raw replace', 'let x = raw')",
        "INSERT INTO openprose.bindings (name, run_id, execution_id, kind, value, source_statement)
         VALUES ('x', '$RUN', NULL, 'let', 'raw replace', 'let x = raw')
         ON CONFLICT (name, run_id, (COALESCE(execution_id, -1)))
         DO UPDATE SET value = EXCLUDED.value, source_statement = EXCLUDED.source_statement",
    );
    // A new binding made by the upsert, and one in an execution's scope changed raw.
    v.raw(
        "INSERT OR REPLACE INTO bindings (name, execution_id, kind, value)
         VALUES ('fresh', NULL, 'let', 'made raw')",
        "INSERT INTO openprose.bindings (name, run_id, execution_id, kind, value)
         VALUES ('fresh', '$RUN', NULL, 'let', 'made raw')
         ON CONFLICT (name, run_id, (COALESCE(execution_id, -1)))
         DO UPDATE SET value = EXCLUDED.value",
    );
    v.raw(
        "UPDATE bindings SET value = 'scoped raw' WHERE name = 'inner'",
        "UPDATE openprose.bindings SET value = 'scoped raw' WHERE run_id = '$RUN' AND name = 'inner'",
    );
    v.raw(
        "DELETE FROM bindings WHERE name = 'x'",
        "DELETE FROM openprose.bindings WHERE run_id = '$RUN' AND name = 'x'",
    );
    run.cmd().args(["get", "x"]).assert().code(3);
    // Who writes may be named by the environment too.
    run.cmd()
        .args(["bind", "x", "after"])
        .env("PROSE_PRINCIPAL", "bob")
        .assert()
        .success();

    let vs = versions(&run, "x", None);
    let got: Vec<(i64, Option<&str>, Option<&str>, bool)> = vs
        .iter()
        .map(|v| (v.n, v.value.as_deref(), v.principal.as_deref(), v.deleted))
        .collect();
    assert_eq!(
        got,
        [
            (1, Some("first"), Some("alice"), false),
            (2, Some("raw update"), None, false),
            (3, Some("raw replace"), None, false),
            (4, None, None, true),
            (5, Some("after"), Some("bob"), false),
        ],
        "{vs:#?}"
    );
    assert!(vs.iter().all(|v| v.at_record == Some(e)), "{vs:#?}");
    let fresh = versions(&run, "fresh", None);
    assert_eq!(fresh.len(), 1);
    assert_eq!(
        (fresh[0].value.as_deref(), fresh[0].principal.as_deref()),
        (Some("made raw"), None)
    );
    let inner = versions(&run, "inner", Some(e));
    assert_eq!(
        inner
            .iter()
            .map(|v| (v.value.as_deref(), v.principal.as_deref()))
            .collect::<Vec<_>>(),
        [(Some("scoped"), Some("alice")), (Some("scoped raw"), None)]
    );

    // Read back through the binary: each version, the tombstone holding nothing.
    for (n, want) in [
        (1, "first"),
        (2, "raw update"),
        (3, "raw replace"),
        (5, "after"),
    ] {
        assert_eq!(
            get_with(&run, "x", &["--version", &n.to_string()]).as_deref(),
            Some(want.as_bytes()),
            "version {n}"
        );
    }
    let a = run
        .cmd()
        .args(["get", "x", "--version", "4"])
        .assert()
        .code(3);
    assert!(stderr(&a).contains("deletion"), "{}", stderr(&a));
    let h = history_json(&run, "x", &[]);
    let shown: Vec<(i64, &str, &str)> = h["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].as_i64().unwrap(),
                v["by"].as_str().unwrap(),
                v["change"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            (5, "bob", "set"),
            (4, "unknown", "deleted"),
            (3, "unknown", "set"),
            (2, "unknown", "set"),
            (1, "alice", "set"),
        ]
    );
    // As a person reads it.
    let text = String::from_utf8(
        run.cmd()
            .args(["history", "x"])
            .assert()
            .success()
            .get_output()
            .stdout
            .clone(),
    )
    .unwrap();
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(3)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 5, "{text}");
    for (row, (n, by, change)) in rows.iter().zip(&shown) {
        // VERSION, WRITTEN (date and time), RECORD, BY, CHANGE, VALUE...
        assert_eq!(row[0], n.to_string(), "{text}");
        assert_eq!((row[4], row[5]), (*by, *change), "{text}");
    }
    assert!(
        text.starts_with("x in the root scope: 5 versions kept"),
        "{text}"
    );
    let h = history_json(&run, "inner", &["--execution-id", &e.to_string()]);
    assert_eq!(h["execution_id"], serde_json::json!(e));
    assert_eq!(h["versions"][0]["by"], "unknown");
    assert_eq!(h["versions"][1]["by"], "alice");
}

/// One step of a scripted program.
enum Step {
    /// A record at the root (`exec-append`), or in the scope of the n-th record appended.
    Exec(&'static str, Option<usize>),
    /// `bind NAME VALUE`, at the root or in the n-th record's scope.
    Bind(&'static str, &'static str, Option<usize>),
    Append(&'static str, &'static str),
    Merge(&'static str, &'static str),
    /// A DELETE of a root binding, in raw SQL.
    RawDelete(&'static str),
    /// An UPDATE of a root binding's value, in raw SQL.
    RawUpdate(&'static str, &'static str),
}

/// What `get` answers for each (name, scope looked up from) at one moment.
type Seen = BTreeMap<(String, Option<i64>), Option<Vec<u8>>>;

/// Issue 31: `get --as-of RECORD` reads what `get` returned at that moment. A scripted
/// program (records at the root and in scopes, binds, appends, a merge, raw deletes and
/// updates) is run, and after every step what `get` answers is noted; then, for every record
/// R, `get --as-of R` answers what `get` answered just before record R+1 was appended (for the
/// last record: at the end), for every name, at the root and from inside a scope. Once, by
/// time: `--as-of` a second in which nothing was written.
fn as_of_a_record_is_what_get_returned_then(b: Backend) {
    use Step::*;
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let script = [
        Bind("topic", "quantum", None),
        Exec("let a = session", None),
        Bind("acc", "[]", None),
        Append("acc", "one"),
        Bind("cfg", r#"{"depth":1}"#, None),
        Exec("inner", Some(0)),
        Bind("note", "in scope", Some(1)),
        Bind("topic", "shadowed in scope", Some(1)),
        Append("acc", "two"),
        Exec("let b = session", None),
        Merge("cfg", r#"{"width":2}"#),
        Bind("topic", "classical", None),
        RawUpdate("topic", "edited raw"),
        Exec("loop", None),
        RawDelete("cfg"),
        Append("acc", "three"),
        Bind("note", "rewritten", Some(1)),
        Exec("iteration", Some(3)),
        Exec("nothing changes here", None),
        Bind("cfg", r#"{"back":true}"#, None),
        Bind("topic", "final", None),
        RawDelete("note"),
        Append("acc", "four"),
        Exec("last", None),
        Bind("topic", "after the last record", None),
    ];
    let names = ["topic", "acc", "cfg", "note"];
    let mut records: Vec<i64> = Vec::new();
    // Where the names are looked up from: the root, and the scope of the second record once
    // it exists (where `note` lives and `topic` is shadowed).
    let look = |records: &[i64]| -> Seen {
        let mut seen = Seen::new();
        let mut from = vec![None];
        if let Some(e) = records.get(1) {
            from.push(Some(*e));
        }
        for scope in from {
            for name in names {
                let args: Vec<String> = scope
                    .map(|e| vec!["--execution-id".to_string(), e.to_string()])
                    .unwrap_or_default();
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                seen.insert((name.to_string(), scope), get_with(&run, name, &args));
            }
        }
        seen
    };
    let mut expected: BTreeMap<i64, Seen> = BTreeMap::new();
    let mut last = look(&records);
    for step in &script {
        match step {
            Exec(text, parent) => {
                if let Some(r) = records.last() {
                    expected.insert(*r, last.clone());
                }
                let parent = parent.map(|i| records[i]);
                let i = records.len() as i64;
                records.push(run.exec(i, text, "executing", parent));
            }
            Bind(name, value, scope) => run.bind(name, value, scope.map(|i| records[i])),
            Append(name, item) => {
                run.cmd()
                    .args(["bind", name, "--append", item])
                    .assert()
                    .success();
            }
            Merge(name, patch) => {
                run.cmd()
                    .args(["bind", name, "--merge", patch])
                    .assert()
                    .success();
            }
            RawDelete(name) => run.view().raw(
                &format!("DELETE FROM bindings WHERE name = '{name}'"),
                &format!("DELETE FROM openprose.bindings WHERE run_id = '$RUN' AND name = '{name}'"),
            ),
            RawUpdate(name, value) => run.view().raw(
                &format!("UPDATE bindings SET value = '{value}' WHERE name = '{name}' AND execution_id IS NULL"),
                &format!("UPDATE openprose.bindings SET value = '{value}' WHERE run_id = '$RUN' AND name = '{name}' AND execution_id IS NULL"),
            ),
        }
        last = look(&records);
    }
    expected.insert(*records.last().unwrap(), last.clone());
    // The program did what it says: the values moved (a check of the check).
    assert_eq!(
        last[&("topic".to_string(), None)].as_deref(),
        Some(&b"after the last record"[..])
    );
    assert_eq!(
        last[&("acc".to_string(), None)].as_deref(),
        Some(&br#"["one","two","three","four"]"#[..])
    );
    assert_eq!(last[&("note".to_string(), Some(records[1]))], None);

    for (r, seen) in &expected {
        for ((name, scope), want) in seen {
            let mut args = vec!["--as-of".to_string(), r.to_string()];
            if let Some(e) = scope {
                args.extend(["--execution-id".to_string(), e.to_string()]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let got = get_with(&run, name, &args);
            assert_eq!(
                got.as_deref().map(String::from_utf8_lossy),
                want.as_deref().map(String::from_utf8_lossy),
                "get {name} --as-of {r} (from scope {scope:?})"
            );
        }
    }
    // The point is just after a record: the values written before the next one count, those
    // written after it do not (here, a rebind after the last record).
    let at_last = get_with(
        &run,
        "topic",
        &["--as-of", &records.last().unwrap().to_string()],
    );
    assert_eq!(at_last.as_deref(), Some(&b"after the last record"[..]));

    // By time: a value written, a second in which nothing is written, then another value.
    let now = || chrono::Utc::now();
    run.bind("clock", "before", None);
    let t0 = now().timestamp();
    let quiet = t0 + 1;
    while now().timestamp() < quiet + 1 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    run.bind("clock", "after", None);
    let fmt = |t: i64| {
        chrono::DateTime::from_timestamp(t, 0)
            .unwrap()
            .format("%Y-%m-%d %H:%M:%S")
            .to_string()
    };
    assert_eq!(
        get_with(&run, "clock", &["--as-of", &fmt(quiet)]).as_deref(),
        Some(&b"before"[..]),
        "as of {}",
        fmt(quiet)
    );
    let later = now().timestamp() + 1;
    assert_eq!(
        get_with(&run, "clock", &["--as-of", &fmt(later)]).as_deref(),
        Some(&b"after"[..])
    );
    // Before the run began, nothing was bound.
    let a = run
        .cmd()
        .args(["get", "clock", "--as-of", "2000-01-01 00:00:00"])
        .assert()
        .code(3);
    assert!(stderr(&a).contains("did not exist"), "{}", stderr(&a));
}

/// A value over `--attach-over`, the same for the same seed.
pub fn big(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| b'a' + ((i as u8).wrapping_mul(7).wrapping_add(seed)) % 26)
        .collect()
}

/// `prune --history KEEP`: each binding keeps its newest KEEP versions, the oldest of them
/// rebuilt whole (an accumulator still reads right at every version kept), values only
/// pruned versions named released (one a kept version also names stays), a pruned version
/// answers exit 3, and a fork at a record whose values of then are gone is refused, naming
/// the binding, with nothing written. A dry run changes nothing.
fn prune_history_keeps_the_newest_whole(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let bind_big = |seed: u8| {
        run.cmd()
            .args(["bind", "doc", "--attach-over", "1000"])
            .write_stdin(big(seed, 5000))
            .assert()
            .success();
    };
    let r1 = run.exec(1, "start", "executing", None);
    run.bind("acc", "[]", None);
    bind_big(1); // doc v1: file A
    let r2 = run.exec(2, "step", "executing", None);
    for item in ["a", "b", "c", "d", "e"] {
        run.cmd()
            .args(["bind", "acc", "--append", item])
            .assert()
            .success();
    }
    bind_big(2); // doc v2: file B
                 // v3: the kind changed by raw SQL, the value (file B) kept.
    run.view().raw(
        "UPDATE bindings SET kind = 'output' WHERE name = 'doc'",
        "UPDATE openprose.bindings SET kind = 'output' WHERE run_id = '$RUN' AND name = 'doc'",
    );
    let _r3 = run.exec(3, "more", "executing", None);
    run.bind("doc", "small now", None); // v4
    run.bind("doc", "smaller", None); // v5
    let docs = versions(&run, "doc", None);
    let file = |n: usize| docs[n - 1].attachment.clone().unwrap();
    let (file_a, file_b) = (file(1), file(2));
    assert_ne!(file_a, file_b);
    assert_eq!(docs[2].attachment.as_deref(), Some(file_b.as_str()));
    assert_eq!(run.attachments(), {
        let mut v = vec![file_a.clone(), file_b.clone()];
        v.sort();
        v
    });
    let acc_before: Vec<Vec<u8>> = (1..=6)
        .map(|n| get_with(&run, "acc", &["--version", &n.to_string()]).unwrap())
        .collect();
    assert_eq!(acc_before[5], br#"["a","b","c","d","e"]"#);

    // A dry run: nothing changes.
    let before = state(&run);
    run.cmd()
        .args(["prune", "--history", "3"])
        .assert()
        .success();
    assert_eq!(state(&run), before, "a dry run of prune --history wrote");

    run.cmd()
        .args(["prune", "--history", "3", "--yes"])
        .assert()
        .success();
    let acc = versions(&run, "acc", None);
    assert_eq!(acc.iter().map(|v| v.n).collect::<Vec<_>>(), [4, 5, 6]);
    assert!(acc[0].gap && acc[0].delta.is_none(), "{acc:?}");
    assert_eq!(acc[0].value.as_deref(), Some(r#"["a","b","c"]"#));
    assert!(!acc[1].gap && acc[1].delta.is_some(), "{acc:?}");
    for n in 4..=6 {
        assert_eq!(
            get_with(&run, "acc", &["--version", &n.to_string()]).unwrap(),
            acc_before[n - 1],
            "acc version {n} after pruning"
        );
    }
    for n in 1..=3 {
        let a = run
            .cmd()
            .args(["get", "acc", "--version", &n.to_string()])
            .assert()
            .code(3);
        assert!(
            stderr(&a).contains("versions 4 to 6 are kept"),
            "{}",
            stderr(&a)
        );
    }
    let docs = versions(&run, "doc", None);
    assert_eq!(docs.iter().map(|v| v.n).collect::<Vec<_>>(), [3, 4, 5]);
    // File A only pruned versions named: gone. File B a kept version names: kept, and read.
    assert_eq!(run.attachments(), std::slice::from_ref(&file_b));
    assert_eq!(
        get_with(&run, "doc", &["--version", "3"]).unwrap(),
        big(2, 5000)
    );
    assert_eq!(run.get("doc", None), b"smaller");
    let h = history_json(&run, "doc", &[]);
    assert_eq!(h["older_not_kept"], serde_json::json!(true));
    assert_eq!(h["total"], serde_json::json!(3));

    // `get --as-of` a point whose version is gone: refused, not guessed.
    let a = run
        .cmd()
        .args(["get", "doc", "--as-of", &r1.to_string()])
        .assert()
        .code(4);
    assert!(stderr(&a).contains("not kept"), "{}", stderr(&a));

    // A fork at a record whose values of then are gone: refused, naming them; nothing written.
    let before = state(&run);
    let runs = run_ids(&p);
    let a = run
        .cmd()
        .args(["fork", "--at", &r1.to_string(), "--run-id", "pruned-fork"])
        .assert()
        .code(4);
    let err = stderr(&a);
    assert!(
        err.contains("\"acc\"") && err.contains("\"doc\"") && err.contains("not kept"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert_eq!(state(&run), before);
    assert_eq!(run_ids(&p), runs);
    // At the next record, every version that stood is kept: the fork is made, and reads them.
    run.cmd()
        .args(["fork", "--at", &r2.to_string(), "--run-id", "kept-fork"])
        .assert()
        .success();
    let fork = p.run("kept-fork");
    assert_eq!(fork.get("doc", None), big(2, 5000));
    assert_eq!(fork.get("acc", None), br#"["a","b","c","d","e"]"#);
    // Pruned to one version: every old file released; the current value alone stays.
    run.cmd()
        .args(["prune", "--history", "1", "--yes"])
        .assert()
        .success();
    assert!(run.attachments().is_empty(), "{:?}", run.attachments());
    assert_eq!(versions(&run, "doc", None).len(), 1);
    assert_eq!(run.get("acc", None), br#"["a","b","c","d","e"]"#);
}

/// Reads of the past that are refused: one line naming what was wrong, the documented code,
/// and the run as it was.
fn reads_of_the_past_refused_change_nothing(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let r = run.exec(1, "start", "executing", None);
    run.bind("x", "one", None);
    run.bind("x", "two", None);
    // A record of another run (on a server, ids are numbered across runs) is no point of this.
    let other = p.init();
    let foreign = other.exec(1, "elsewhere", "completed", None).to_string();
    let before = state(&run);
    let missing = (r + 1000).to_string();
    let mut cases = vec![
        (vec!["get", "x", "--version", "0"], 2, "--version"),
        (vec!["get", "x", "--version", "-1"], 2, "-1"),
        (vec!["get", "x", "--version", "3"], 3, "no version 3"),
        (vec!["get", "x", "--as-of", "garbage"], 2, "--as-of"),
        (
            vec!["get", "x", "--as-of", "2026-13-45 99:00:00"],
            2,
            "--as-of",
        ),
        (vec!["get", "x", "--as-of", ""], 2, "--as-of"),
        (vec!["get", "x", "--as-of", &missing], 3, &missing),
        (vec!["get", "nope", "--version", "1"], 3, "nope"),
        (vec!["history", "nope"], 3, "nope"),
        (vec!["history", "x", "--limit", "0"], 2, "--limit"),
        (vec!["history", "bad name!"], 2, "bad name"),
    ];
    if b == Backend::Postgres {
        cases.push((vec!["get", "x", "--as-of", &foreign], 3, &foreign));
    }
    for (args, want, says) in cases {
        let a = run.cmd().args(&args).assert();
        let err = stderr(&a);
        assert_eq!(code(&a), want, "{args:?}: {err}");
        assert!(a.get_output().stdout.is_empty(), "{args:?}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    assert_eq!(state(&run), before, "a refused read changed the run");
}

/// Issue 31: a history row is never written for a refused write: a const rebound, a stale
/// `--if-version`, an `--append` to a value that is no array, a `--merge` into one that is no
/// object, a name that is not one. The run is as it was.
fn refused_writes_keep_no_version(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.exec(1, "start", "executing", None);
    run.cmd()
        .args(["bind", "k", "fixed", "--kind", "const"])
        .assert()
        .success();
    run.bind("s", "a string", None);
    let before = state(&run);
    for (args, want) in [
        (vec!["bind", "k", "again"], 4),
        // Read as absent, and bound since (it is at its own version 1).
        (vec!["bind", "s", "x", "--if-version", "0"], 4),
        (vec!["bind", "s", "--append", "item"], 4),
        (vec!["bind", "s", "--merge", r#"{"a":1}"#], 4),
        (vec!["bind", "s", "--merge", "not json"], 2),
        (vec!["bind", "bad name!", "x"], 2),
    ] {
        let a = run.cmd().args(&args).assert();
        assert_eq!(code(&a), want, "{args:?}: {}", stderr(&a));
        assert_eq!(stderr(&a).trim_end().lines().count(), 1, "{}", stderr(&a));
    }
    assert_eq!(state(&run), before, "a refused write changed the run");
    assert_eq!(versions(&run, "k", None).len(), 1);
    assert_eq!(versions(&run, "s", None).len(), 1);
}

/// Values with control and bidirectional characters, and a writer's name set by raw SQL,
/// are shown escaped in `history`'s text, each version on one line; JSON keeps them exact.
fn hostile_values_in_history_are_shown_safely(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let hostile = "red \u{1b}[31m\u{202e}desrever\r\u{7}\nsecond line";
    run.bind("x", "plain", None);
    run.bind("x", hostile, None);
    run.view().raw(
        "UPDATE binding_history SET principal = 'ev' || char(27) || ']0;t' || char(7) || char(8238) || 'il' WHERE n = 1",
        "UPDATE openprose.binding_history SET principal = 'ev' || chr(27) || ']0;t' || chr(7) || chr(8238) || 'il'
          WHERE run_id = '$RUN' AND n = 1",
    );
    let before = state(&run);
    let a = run.cmd().args(["history", "x"]).assert().success();
    let text = String::from_utf8(a.get_output().stdout.clone()).unwrap();
    for bad in ['\u{1b}', '\u{202e}', '\r', '\u{7}'] {
        assert!(!text.contains(bad), "{bad:?} in:\n{text}");
    }
    // The title, the header, its rule, and one line a version.
    assert_eq!(text.lines().count(), 5, "{text}");
    assert!(
        text.contains("red \\u{1b}[31m\\u{202e}desrever\\r\\u{7}\\nsecond line"),
        "{text}"
    );
    assert!(text.contains("ev\\u{1b}]0;t\\u{7}\\u{202e}il"), "{text}");
    let h = history_json(&run, "x", &[]);
    assert_eq!(h["versions"][0]["preview"], serde_json::json!(hostile));
    assert_eq!(
        h["versions"][1]["by"],
        serde_json::json!("ev\u{1b}]0;t\u{7}\u{202e}il")
    );
    assert_eq!(
        get_with(&run, "x", &["--version", "2"]).unwrap(),
        hostile.as_bytes()
    );
    assert_eq!(state(&run), before, "reading history wrote");
}

/// (event type) of a gate's sealed events, as stored.
pub fn event_types(run: &Run, gate: &str) -> Vec<String> {
    run.view().events(gate).into_iter().map(|e| e.0).collect()
}

fn consumed(run: &Run, gate: &str) -> usize {
    event_types(run, gate)
        .iter()
        .filter(|e| *e == "consumed")
        .count()
}

/// `gates wait GATE --timeout 0`'s exit code (stderr for messages).
pub fn wait(run: &Run, gate: &str) -> (i32, String) {
    let a = run
        .cmd()
        .args(["gates", "wait", gate, "--timeout", "0"])
        .assert();
    (
        code(&a),
        stderr(&a) + &String::from_utf8_lossy(&a.get_output().stdout),
    )
}

pub fn show(run: &Run, gate: &str) -> i32 {
    code(&run.cmd().args(["gates", "show", gate]).assert())
}

/// `resume --json`: its exit code and the gate's next step.
pub fn resume(run: &Run, gate: &str) -> (i32, Value) {
    let a = run.cmd().args(["--json", "resume"]).assert();
    let v = stdout_json(&a);
    let g = v["gates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["id"] == gate)
        .cloned()
        .unwrap_or(Value::Null);
    (code(&a), g)
}

pub fn gate_on(run: &Run, id: &str, inputs: Option<&str>) {
    let mut c = run.cmd();
    c.args(["gates", "create", id, "--prompt", "Publish this?"]);
    if let Some(i) = inputs {
        c.args(["--inputs", i]);
    }
    c.assert().success();
}

pub fn approve(run: &Run, id: &str) {
    run.cmd()
        .args(["approve", id, "--yes", "--as", "alice"])
        .assert()
        .success();
}

/// Issue 31's approvals bound to what they approved: (a) an input rebound after the decision
/// and before anything consumed it makes it stale in `gates wait`, `gates show` and `resume`
/// (next step: reopen), and consumes nothing; the same content written again does not;
/// (b) once `gates wait` has returned it (one `consumed` event), a rebind is the program's own
/// business; (d) a gate without inputs is never stale; (e) raw SQL changing an input is seen
/// too. (A fork's `--bind` is tests/fork.rs.)
fn a_decision_is_stale_only_if_an_input_changed_before_it_was_consumed(b: Backend) {
    let Some(p) = Project::on(b) else { return };

    // (a)
    let run = p.init();
    run.bind("draft", "version one", None);
    run.bind("other", "unrelated", None);
    gate_on(&run, "publish", Some("draft"));
    approve(&run, "publish");
    run.bind("other", "changed, but not an input", None);
    run.bind("draft", "version one", None); // the same content, written again
    assert_eq!(show(&run, "publish"), 0, "same content is no change");
    run.bind("draft", "version two", None);
    let (c, out) = wait(&run, "publish");
    assert_eq!(c, 11, "{out}");
    assert!(out.contains("STALE") && out.contains("\"draft\""), "{out}");
    assert_eq!(show(&run, "publish"), 11);
    let (c, g) = resume(&run, "publish");
    assert_eq!(c, 11, "{g}");
    assert_eq!(g["next_step"]["action"], "reopen", "{g}");
    assert!(g["stale"].as_str().unwrap().contains("draft"), "{g}");
    // Still stale after all those looks: none of them consumed it.
    assert_eq!(wait(&run, "publish").0, 11);
    assert_eq!(
        consumed(&run, "publish"),
        0,
        "{:?}",
        event_types(&run, "publish")
    );
    // Reopened and decided again, on the new content: it stands.
    run.cmd()
        .args(["gates", "create", "publish", "--prompt", "Publish this?"])
        .args(["--inputs", "draft", "--reopen"])
        .assert()
        .success();
    approve(&run, "publish");
    assert_eq!(wait(&run, "publish").0, 0);
    assert_eq!(consumed(&run, "publish"), 1);

    // (b)
    let run = p.init();
    run.bind("draft", "version one", None);
    gate_on(&run, "publish", Some("draft"));
    approve(&run, "publish");
    assert_eq!(wait(&run, "publish").0, 0);
    assert_eq!(
        consumed(&run, "publish"),
        1,
        "{:?}",
        event_types(&run, "publish")
    );
    run.bind("draft", "version two", None);
    run.view().raw(
        "UPDATE bindings SET value = 'raw three' WHERE name = 'draft'",
        "UPDATE openprose.bindings SET value = 'raw three' WHERE run_id = '$RUN' AND name = 'draft'",
    );
    assert_eq!(wait(&run, "publish").0, 0);
    assert_eq!(show(&run, "publish"), 0);
    let (c, g) = resume(&run, "publish");
    assert_eq!(c, 0, "{g}");
    assert_ne!(g["next_step"]["action"], "reopen", "{g}");
    assert_eq!(
        consumed(&run, "publish"),
        1,
        "{:?}",
        event_types(&run, "publish")
    );
    let outcome = run.view().gate("publish");
    assert_eq!(outcome.0, "approved");

    // (b) again, consumed by `resume` reporting the decision: one `consumed` event, and a
    // later rebind is the program's own business.
    let run = p.init();
    run.bind("draft", "version one", None);
    gate_on(&run, "publish", Some("draft"));
    approve(&run, "publish");
    let (c, g) = resume(&run, "publish");
    assert_eq!(c, 0, "{g}");
    assert_eq!(
        consumed(&run, "publish"),
        1,
        "{:?}",
        event_types(&run, "publish")
    );
    run.bind("draft", "version two", None);
    assert_eq!(wait(&run, "publish").0, 0);
    assert_eq!(show(&run, "publish"), 0);
    assert_eq!(consumed(&run, "publish"), 1);

    // (d)
    let run = p.init();
    run.bind("draft", "version one", None);
    gate_on(&run, "plain", None);
    approve(&run, "plain");
    run.bind("draft", "version two", None);
    run.cmd()
        .args(["bind", "acc", "--append", "x"])
        .assert()
        .success();
    run.view().raw(
        "DELETE FROM bindings WHERE name = 'draft'",
        "DELETE FROM openprose.bindings WHERE run_id = '$RUN' AND name = 'draft'",
    );
    assert_eq!(show(&run, "plain"), 0);
    let (c, _) = resume(&run, "plain");
    assert_eq!(c, 0);
    assert_eq!(wait(&run, "plain").0, 0);

    // (e)
    let run = p.init();
    run.bind("draft", "version one", None);
    gate_on(&run, "publish", Some("draft"));
    approve(&run, "publish");
    run.view().raw(
        "UPDATE bindings SET value = 'edited behind its back' WHERE name = 'draft'",
        "UPDATE openprose.bindings SET value = 'edited behind its back'
          WHERE run_id = '$RUN' AND name = 'draft'",
    );
    assert_eq!(show(&run, "publish"), 11);
    // Removing the traces from history hides nothing: the content is what is compared.
    run.view().raw(
        "DELETE FROM binding_history WHERE name = 'draft'",
        "DELETE FROM openprose.binding_history WHERE run_id = '$RUN' AND name = 'draft'",
    );
    // The version the decision pinned is gone from history too: that is tampering (9),
    // which a wait reports before staleness.
    let (c, out) = wait(&run, "publish");
    assert_eq!(c, 9, "{out}");
    assert_eq!(consumed(&run, "publish"), 0);
    // And a raw DELETE of an input is a change too.
    let run = p.init();
    run.bind("draft", "version one", None);
    gate_on(&run, "publish", Some("draft"));
    approve(&run, "publish");
    run.view().raw(
        "DELETE FROM bindings WHERE name = 'draft'",
        "DELETE FROM openprose.bindings WHERE run_id = '$RUN' AND name = 'draft'",
    );
    assert_eq!(wait(&run, "publish").0, 11);
}

/// `prune --history KEEP --default` makes KEEP the project's default: a run made afterwards
/// keeps at most twice KEEP versions of a binding as it writes (then cuts to KEEP, the oldest
/// kept made whole), an append accumulator still reads right at every kept version, and the
/// values only cut versions named go. A run made before keeps everything. A dry run sets
/// nothing.
fn a_projects_default_bounds_history_as_runs_write(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let before = p.init();
    p.cmd()
        .args(["prune", "--history", "2", "--default"])
        .assert()
        .success();
    let unbounded = p.init();
    p.cmd()
        .args(["prune", "--history", "2", "--default", "--yes"])
        .assert()
        .success();
    let run = p.init();
    for r in [&before, &unbounded, &run] {
        for i in 0..9 {
            r.cmd()
                .args(["bind", "acc", "--append", &i.to_string()])
                .assert()
                .success();
        }
    }
    assert_eq!(versions(&before, "acc", None).len(), 9);
    assert_eq!(
        versions(&unbounded, "acc", None).len(),
        9,
        "a dry run set no default"
    );
    let kept = versions(&run, "acc", None);
    assert!(kept.len() <= 4, "{}", kept.len());
    assert!(kept[0].gap, "the oldest kept says older ones are not kept");
    for v in &kept {
        let got = get_with(&run, "acc", &["--version", &v.n.to_string()]).unwrap();
        let want: Vec<i64> = (0..v.n).collect();
        assert_eq!(
            String::from_utf8(got).unwrap(),
            serde_json::json!(want).to_string()
        );
    }
    // Large values: the files of cut versions go, the kept ones stay readable.
    for i in 0..7 {
        run.cmd()
            .args(["bind", "big", "--attach-over", "10"])
            .write_stdin(format!("a large value, number {i}"))
            .assert()
            .success();
    }
    let big = versions(&run, "big", None);
    assert!(big.len() <= 4, "{}", big.len());
    assert_eq!(run.attachments().len(), big.len());
    for v in &big {
        let got = get_with(&run, "big", &["--version", &v.n.to_string()]).unwrap();
        assert_eq!(got, format!("a large value, number {}", v.n - 1).as_bytes());
    }
}

/// `get --version V` reads version V and those it is rebuilt from, back to the nearest one
/// kept whole, and `history` reads one page: a binding that mixes whole writes and steps
/// reads back, version by version and page by page, as it was written.
fn every_version_reads_back_from_the_nearest_whole_one(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let mut want: Vec<String> = Vec::new();
    let mut current: Vec<i64> = Vec::new();
    for i in 1..=12i64 {
        if i % 5 == 1 {
            current = vec![i * 100];
            run.cmd()
                .args(["bind", "acc", &serde_json::json!(current).to_string()])
                .assert()
                .success();
        } else {
            current.push(i);
            run.cmd()
                .args(["bind", "acc", "--append", &i.to_string()])
                .assert()
                .success();
        }
        want.push(serde_json::json!(current).to_string());
    }
    for (i, w) in want.iter().enumerate() {
        let v = (i + 1).to_string();
        let got = get_with(&run, "acc", &["--version", &v]).unwrap();
        assert_eq!(String::from_utf8(got).unwrap(), *w, "version {v}");
    }
    let a = run
        .cmd()
        .args(["get", "acc", "--version", "13"])
        .assert()
        .failure();
    assert_eq!(code(&a), 3, "{}", stderr(&a));
    assert!(
        stderr(&a).contains("versions 1 to 12 are kept"),
        "{}",
        stderr(&a)
    );
    let mut seen = Vec::new();
    let mut before: Option<i64> = None;
    loop {
        let mut args = vec!["--limit", "5"];
        let b = before.map(|b| b.to_string());
        if let Some(b) = &b {
            args.extend(["--before", b]);
        }
        let page = stdout_json(
            &run.cmd()
                .args(["--json", "history", "acc"])
                .args(&args)
                .assert()
                .success(),
        );
        assert_eq!(page["total"], 12, "{page}");
        let vs = page["versions"].as_array().unwrap();
        assert!(vs.len() <= 5, "{page}");
        seen.extend(vs.iter().map(|v| v["version"].as_i64().unwrap()));
        match page["next_before"].as_i64() {
            Some(n) => before = Some(n),
            None => break,
        }
    }
    assert_eq!(seen, (1..=12).rev().collect::<Vec<i64>>());
}
