//! `fork --run R --at RECORD` (issue 31): a new run whose state is its source's as of one
//! record, compared with the source at every record of a scripted program; across backends;
//! never half a run under SIGKILL; a carried decision whose input `--bind` changed is stale;
//! refusals write nothing. Each story drives the binary, then reads both runs' databases.

use crate::common::*;
use crate::history::{
    self, approve, gate_on, get_with, resume, run_ids, show, state, versions, wait,
};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

on_both!(
    a_fork_at_every_record_is_its_source_as_it_stood_then,
    a_fork_killed_is_never_half_a_run,
    a_fork_that_rebinds_an_input_makes_its_decision_stale,
    refused_forks_write_nothing,
);

/// One execution record as compared between runs: its place, its parent's place (ids are the
/// store's own: a server renumbers them), and its content.
#[derive(Debug, Clone, PartialEq)]
pub struct Rec {
    pub index: Option<i64>,
    pub text: Option<String>,
    pub status: Option<String>,
    pub parent: Option<usize>,
    pub metadata: Value,
    pub principal: Option<String>,
}

/// A run's records in order, with their ids.
pub fn log(run: &Run) -> Vec<(i64, Rec)> {
    type Row = (
        i64,
        Option<i64>,
        Option<String>,
        Option<String>,
        Option<i64>,
        Option<String>,
        Option<String>,
    );
    let rows: Vec<Row> = match &run.pg_url {
        Some(url) => {
            let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
            c.query(
                "SELECT id, statement_index, statement_text, status, parent_id, metadata::text,
                        principal
                 FROM openprose.execution WHERE run_id = $1 ORDER BY id",
                &[&run.id],
            )
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r.get(0),
                    r.get(1),
                    r.get(2),
                    r.get(3),
                    r.get(4),
                    r.get(5),
                    r.get(6),
                )
            })
            .collect()
        }
        None => {
            let c = run.conn();
            let mut s = c
                .prepare(
                    "SELECT id, statement_index, statement_text, status, parent_id, metadata,
                            principal FROM execution ORDER BY id",
                )
                .unwrap();
            s.query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                ))
            })
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
        }
    };
    let place: BTreeMap<i64, usize> = rows.iter().enumerate().map(|(i, r)| (r.0, i)).collect();
    rows.into_iter()
        .map(|(id, index, text, status, parent, metadata, principal)| {
            (
                id,
                Rec {
                    index,
                    text,
                    status,
                    parent: parent.map(|p| place[&p]),
                    metadata: metadata
                        .map(|m| serde_json::from_str(&m).unwrap())
                        .unwrap_or(Value::Null),
                    principal,
                },
            )
        })
        .collect()
}

/// (gate id → status) as stored.
pub fn gates(run: &Run) -> BTreeMap<String, String> {
    match &run.pg_url {
        Some(url) => {
            let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
            c.query(
                "SELECT id, status FROM openprose.gates WHERE run_id = $1",
                &[&run.id],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
        }
        None => {
            let c = run.conn();
            let mut s = c.prepare("SELECT id, status FROM gates").unwrap();
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .map(|r| r.unwrap())
                .collect()
        }
    }
}

/// `fork ARGS...` from `run`, as JSON.
pub fn fork(run: &Run, args: &[&str]) -> Value {
    stdout_json(
        &run.cmd()
            .args(["--json", "fork"])
            .args(args)
            .assert()
            .success(),
    )
}

/// The fork `id` of project `p`, on the backend it was made on.
fn fork_run(p: &Project, id: &str, postgres: bool) -> Run {
    let r = p.run(id);
    if postgres {
        r
    } else {
        Run { pg_url: None, ..r }
    }
}

fn verify(run: &Run) -> (i32, String) {
    let a = run.cmd().args(["gates", "verify"]).assert();
    (
        code(&a),
        stderr(&a) + &String::from_utf8_lossy(&a.get_output().stdout),
    )
}

fn memory(run: &Run, agent: &str) -> Option<Vec<u8>> {
    let a = run.cmd().args(["agent", "memory", agent]).assert();
    match code(&a) {
        0 => Some(a.get_output().stdout.clone()),
        3 => None,
        c => panic!("agent memory {agent}: exit {c}: {}", stderr(&a)),
    }
}

/// Bytes of the source run as stored: its SQLite file (the WAL checkpointed first, so that a
/// reader closing cannot move bytes) and its files; or every row of it on the server.
fn source_bytes(run: &Run) -> Vec<u8> {
    match &run.pg_url {
        Some(_) => state(run).into_bytes(),
        None => {
            let mut out = std::fs::read(&run.db).unwrap();
            let wal = run.db.with_extension("db-wal");
            if let Ok(w) = std::fs::read(&wal) {
                out.extend(w);
            }
            out.extend(snapshot_files(&run.dir).into_bytes());
            for f in std::fs::read_dir(run.dir.join("attachments"))
                .into_iter()
                .flatten()
                .flatten()
            {
                out.extend(std::fs::read(f.path()).unwrap());
            }
            out
        }
    }
}

fn checkpoint(run: &Run) {
    if run.pg_url.is_none() {
        run.conn()
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
    }
}

fn bind_stdin(run: &Run, name: &str, value: &[u8], extra: &[&str]) {
    run.cmd()
        .args(["bind", name])
        .args(extra)
        .write_stdin(value.to_vec())
        .assert()
        .success();
}

/// Agent memory and segment count as they stand, per record: noted just before the next one.
type AgentsThen = BTreeMap<i64, (Option<Vec<u8>>, usize)>;

/// Appends a record (its parent the `parent`-th record appended), noting first how the agent
/// stood after the record before.
fn exec_noting(
    run: &Run,
    records: &mut Vec<i64>,
    agents_then: &mut AgentsThen,
    index: i64,
    text: &str,
    parent: Option<usize>,
) -> i64 {
    if let Some(r) = records.last() {
        agents_then.insert(
            *r,
            (
                memory(run, "researcher"),
                run.view().segments("researcher").len(),
            ),
        );
    }
    let parent = parent.map(|i| records[i]);
    let id = run.exec(index, text, "executing", parent);
    records.push(id);
    id
}

/// Issue 31: a fork at every record of a scripted program (records at the root and in a
/// scope, binds, an `--append` accumulator, a rebound attachment over 100 KB, run-scoped agent
/// memory and segments, a gate approved with inputs and consumed, a gate left pending),
/// compared with the source: its records are the source's up to the point; every binding
/// reads what `get --as-of` the point reads in the source; agent memory and segments are
/// those of then; a gate is there iff it was opened by the point and decided iff it was
/// decided by then; its chain verifies; `diff` against the source reports only what the
/// source changed after the point; and the source is byte for byte as it was.
fn a_fork_at_every_record_is_its_source_as_it_stood_then(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let pg = b == Backend::Postgres;
    // Agent memory and segments as they stood just before each next record.
    let mut agents_then = AgentsThen::new();
    let mut records: Vec<i64> = Vec::new();
    let append = |item: &str| {
        run.cmd()
            .args(["bind", "acc", "--append", item, "--as", "vm"])
            .assert()
            .success();
    };
    let remember = |text: &str, seg: &str| {
        run.cmd()
            .args(["agent", "remember", "researcher", text])
            .assert()
            .success();
        run.cmd()
            .args([
                "agent",
                "segment",
                "researcher",
                "--prompt",
                seg,
                "--summary",
                seg,
            ])
            .assert()
            .success();
    };
    let big1 = history::big(1, 150_000);
    let big2 = history::big(2, 160_000);

    exec_noting(
        &run,
        &mut records,
        &mut agents_then,
        1,
        "let topic = input",
        None,
    );
    run.cmd()
        .args(["bind", "topic", "quantum", "--kind", "input"])
        .assert()
        .success();
    run.bind("acc", "[]", None);
    exec_noting(&run, &mut records, &mut agents_then, 2, "loop", None);
    append("a");
    run.bind("temp", "first temp", None);
    remember("memory one", "first");
    let scope = exec_noting(
        &run,
        &mut records,
        &mut agents_then,
        3,
        "session: researcher",
        Some(1),
    );
    run.bind("note", "inner one", Some(scope));
    bind_stdin(&run, "big", &big1, &[]);
    run.view().raw(
        "DELETE FROM bindings WHERE name = 'temp'",
        "DELETE FROM openprose.bindings WHERE run_id = '$RUN' AND name = 'temp'",
    );
    run.cmd()
        .args([
            "gates", "create", "approved", "--prompt", "Go?", "--inputs", "topic",
        ])
        .assert()
        .success();
    let approved_opened = run.view().last_execution_id();
    records.push(approved_opened);
    approve(&run, "approved");
    let approved_by = approved_opened;
    append("b");
    exec_noting(
        &run,
        &mut records,
        &mut agents_then,
        5,
        "after approval",
        Some(1),
    );
    assert_eq!(wait(&run, "approved").0, 0, "consumed in the source");
    remember("memory two", "second");
    run.bind("temp", "second temp", None);
    bind_stdin(&run, "big", &big2, &[]);
    run.cmd()
        .args(["gates", "create", "pending", "--prompt", "Later?"])
        .assert()
        .success();
    let pending_opened = run.view().last_execution_id();
    records.push(pending_opened);
    append("c");
    run.bind("note", "inner two", Some(scope));
    run.bind("topic", "classical", None);
    exec_noting(&run, &mut records, &mut agents_then, 7, "last", None);
    append("d");
    remember("memory three", "third");
    agents_then.insert(
        *records.last().unwrap(),
        (
            memory(&run, "researcher"),
            run.view().segments("researcher").len(),
        ),
    );
    // The gate records were appended by `gates create`, between the agents' observations:
    // nothing about agents changed around them, so each takes the one before.
    for w in records.windows(2) {
        if !agents_then.contains_key(&w[0]) {
            let next = agents_then.range(w[0]..).next().unwrap().1.clone();
            agents_then.insert(w[0], next);
        }
    }
    // Two attachments kept: the current one and the one it replaced.
    assert_eq!(run.attachments().len(), 2);
    let source_log = log(&run);
    assert_eq!(
        source_log.iter().map(|r| r.0).collect::<Vec<_>>(),
        records,
        "the records the script appended"
    );

    checkpoint(&run);
    let before = source_bytes(&run);
    let names = ["topic", "acc", "big", "note", "temp"];
    for (place, r) in records.iter().enumerate() {
        let id = format!("f{place}");
        let out = fork(&run, &["--at", &r.to_string(), "--run-id", &id]);
        assert_eq!(out["records"], json!(place + 1), "{out}");
        let f = fork_run(&p, &id, pg);
        let flog = log(&f);
        let fork_recs: Vec<&Rec> = flog.iter().map(|r| &r.1).collect();
        let want: Vec<&Rec> = source_log[..=place].iter().map(|r| &r.1).collect();
        assert_eq!(fork_recs, want, "records of the fork at {r}");

        // Every binding as `get --as-of` the point reads it in the source; the scoped one
        // looked up from its record's place in the fork.
        for name in names {
            let mut src_args = vec!["--as-of".to_string(), r.to_string()];
            let mut fork_args = Vec::new();
            if name == "note" {
                if place < 2 {
                    assert_eq!(get_with(&f, name, &[]), None, "{name} at {r}");
                    continue;
                }
                src_args.extend(["--execution-id".into(), scope.to_string()]);
                fork_args.extend(["--execution-id".to_string(), flog[2].0.to_string()]);
            }
            let src_args: Vec<&str> = src_args.iter().map(String::as_str).collect();
            let fork_args: Vec<&str> = fork_args.iter().map(String::as_str).collect();
            let then = get_with(&run, name, &src_args);
            assert_eq!(
                get_with(&f, name, &fork_args),
                then,
                "{name} in the fork at {r}"
            );
        }
        // The program's values, spelled out, so the comparison above compares something.
        let acc = get_with(&f, "acc", &[]).map(|v| String::from_utf8(v).unwrap());
        let want_acc = match place {
            0 => r#"[]"#,
            1 | 2 => r#"["a"]"#,
            3 => r#"["a","b"]"#,
            4 => r#"["a","b"]"#,
            5 => r#"["a","b","c"]"#,
            _ => r#"["a","b","c","d"]"#,
        };
        assert_eq!(acc.as_deref(), Some(want_acc), "acc at {r}");
        let want_big = match place {
            0 | 1 => None,
            2 | 3 => Some(&big1),
            _ => Some(&big2),
        };
        assert_eq!(get_with(&f, "big", &[]).as_ref(), want_big, "big at {r}");
        let want_temp: Option<&[u8]> = match place {
            0 => None,
            1 => Some(b"first temp"),
            2 | 3 => None,
            _ => Some(b"second temp"),
        };
        assert_eq!(
            get_with(&f, "temp", &[]).as_deref(),
            want_temp,
            "temp at {r}"
        );
        // Its history: the versions up to then, each still read whole.
        let n = versions(&f, "acc", None).len();
        for v in 1..=n {
            assert_eq!(
                get_with(&f, "acc", &["--version", &v.to_string()]),
                get_with(&run, "acc", &["--version", &v.to_string()]),
                "acc version {v} in the fork at {r}"
            );
        }
        if let Some(big) = f.view().binding("big", None) {
            let path = big.4.expect("a value over 100 KB is an attachment");
            assert_eq!(f.stored(&path).as_ref(), want_big, "{path}");
        }

        // Agents as they stood.
        let (mem, segs) = &agents_then[r];
        assert_eq!(&memory(&f, "researcher"), mem, "agent memory at {r}");
        assert_eq!(
            f.view().segments("researcher").len(),
            *segs,
            "segments at {r}"
        );

        // Gates: there iff opened by the point, decided iff decided by it.
        let g = gates(&f);
        let mut want = BTreeMap::new();
        if *r >= approved_opened {
            let status = if *r >= approved_by {
                "approved"
            } else {
                "pending"
            };
            want.insert("approved".to_string(), status.to_string());
        }
        if *r >= pending_opened {
            want.insert("pending".to_string(), "pending".to_string());
        }
        assert_eq!(g, want, "gates of the fork at {r}");
        assert_eq!(verify(&f).0, 0, "{}", verify(&f).1);

        // diff: the fork's log is the source's beginning; bindings differ only where the
        // source changed them after the point.
        let a = p
            .cmd()
            .args(["--json", "diff", &id, &run.id, "--all"])
            .assert()
            .success();
        let d = stdout_json(&a);
        assert_eq!(d["records"]["common"], json!(place + 1), "{d}");
        assert_eq!(d["records"]["a"]["after_common"], json!(0), "{d}");
        let shown: BTreeSet<String> = d["bindings"]["shown"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["name"].as_str().unwrap().to_string())
            .collect();
        let mut changed = BTreeSet::new();
        for name in names {
            let scope_args: Vec<String> = if name == "note" {
                vec!["--execution-id".into(), scope.to_string()]
            } else {
                vec![]
            };
            let mut then_args = scope_args.clone();
            then_args.extend(["--as-of".to_string(), r.to_string()]);
            let now_args: Vec<&str> = scope_args.iter().map(String::as_str).collect();
            let then_args: Vec<&str> = then_args.iter().map(String::as_str).collect();
            let then = if name == "note" && place < 2 {
                None
            } else {
                get_with(&run, name, &then_args)
            };
            if get_with(&run, name, &now_args) != then {
                changed.insert(name.to_string());
            }
        }
        assert_eq!(shown, changed, "diff of the fork at {r}: {d}");
        if place + 1 == records.len() {
            assert_eq!(d["bindings"]["differ"], json!(0), "{d}");
            assert!(shown.is_empty());
            // The past carried with it: the fork read as of each of its records (its own ids,
            // which a server renumbers) is the source as of the same place.
            for (q, (fork_id, _)) in flog.iter().enumerate() {
                for name in ["topic", "acc", "big", "temp"] {
                    assert_eq!(
                        get_with(&f, name, &["--as-of", &fork_id.to_string()]),
                        get_with(&run, name, &["--as-of", &records[q].to_string()]),
                        "{name} as of the fork's record {fork_id} (the source's {})",
                        records[q]
                    );
                }
            }
        }
    }
    // A carried decision on unchanged inputs stands: the one decided at record 4 is not
    // stale in the fork made there (nothing consumed it yet), nor in the later ones.
    for place in 3..records.len() {
        let f = fork_run(&p, &format!("f{place}"), pg);
        assert_eq!(wait(&f, "approved").0, 0, "fork f{place}");
    }
    for place in 5..records.len() {
        let f = fork_run(&p, &format!("f{place}"), pg);
        assert_eq!(wait(&f, "pending").0, 7, "fork f{place}");
    }
    // The fork's first sealed row says where it came from.
    let f = fork_run(&p, "f4", pg);
    let genesis = f.view().events("");
    assert_eq!(genesis[0].0, "sealed", "{genesis:?}");
    assert_eq!(genesis[0].2["forked_from"]["run"], json!(run.id));
    assert_eq!(genesis[0].2["forked_from"]["record"], json!(records[4]));

    checkpoint(&run);
    assert!(source_bytes(&run) == before, "forking changed the source");
    p.cmd().args(["doctor"]).assert().success();
}

/// Issue 31: a fork across backends. A SQLite run forked onto the server, and a server run
/// forked into a SQLite directory: records, values (an attachment included) and the
/// decision read back the same, and the fork's chain verifies.
#[test]
fn a_fork_crosses_backends() {
    let Some(p) = Project::on(Backend::Postgres) else {
        return;
    };
    // The server numbers execution ids across runs: take some first.
    let other = p.init();
    for i in 0..3 {
        other.exec(i, "elsewhere", "completed", None);
    }
    p.cmd()
        .args(["init", "--backend", "sqlite", "--run-id", "local", "-q"])
        .assert()
        .success();
    let local = fork_run(&p, "local", false);
    let remote = p.init();
    let big = history::big(9, 150_000);
    for (run, to, fork_id) in [
        (&local, "postgres", "local-on-server"),
        (&remote, "sqlite", "remote-here"),
    ] {
        let e = run.exec(1, "let a = session", "executing", None);
        run.bind("a", "in scope", Some(e));
        run.cmd()
            .args(["bind", "topic", "quantum", "--kind", "input"])
            .assert()
            .success();
        bind_stdin(run, "big", &big, &[]);
        run.cmd()
            .args(["agent", "remember", "researcher", "remembered"])
            .assert()
            .success();
        gate_on(run, "ship", Some("topic"));
        approve(run, "ship");
        let last = run.exec(2, "after", "completed", Some(e));
        let out = fork(
            run,
            &[
                "--at",
                &last.to_string(),
                "--run-id",
                fork_id,
                "--backend",
                to,
            ],
        );
        assert_eq!(out["backend"], json!(to), "{out}");
        let f = fork_run(&p, fork_id, to == "postgres");
        assert_eq!(verify(&f).0, 0, "{}", verify(&f).1);
        let flog = log(&f);
        assert_eq!(
            flog.iter().map(|r| &r.1).collect::<Vec<_>>(),
            log(run).iter().map(|r| &r.1).collect::<Vec<_>>()
        );
        assert_eq!(get_with(&f, "big", &[]).unwrap(), big);
        let path = f.view().binding("big", None).unwrap().4.unwrap();
        assert_eq!(path.starts_with("server:"), to == "postgres", "{path}");
        assert_eq!(f.stored(&path).unwrap(), big);
        assert_eq!(get_with(&f, "topic", &[]).unwrap(), b"quantum");
        assert_eq!(
            get_with(&f, "a", &["--execution-id", &flog[0].0.to_string()]).unwrap(),
            b"in scope"
        );
        assert_eq!(memory(&f, "researcher").unwrap(), b"remembered");
        assert_eq!(gates(&f)["ship"], "approved");
        assert_eq!(wait(&f, "ship").0, 0);
        assert_eq!(show(&f, "ship"), 0);
        // The history came along, version by version.
        assert_eq!(
            versions(&f, "big", None)
                .iter()
                .map(|v| (v.n, v.kind.clone()))
                .collect::<Vec<_>>(),
            versions(run, "big", None)
                .iter()
                .map(|v| (v.n, v.kind.clone()))
                .collect::<Vec<_>>()
        );
    }
    p.cmd().args(["doctor"]).assert().success();
}

/// How many rows of run `id` each table of the server holds: what a killed fork must not
/// leave half of.
fn rows_of(url: &str, id: &str) -> Vec<(String, i64)> {
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let mut out = Vec::new();
    for table in [
        "run",
        "execution",
        "bindings",
        "binding_history",
        "agents",
        "agent_history",
        "gates",
        "gate_audit_log",
        "attachments",
        "attachment_chunks",
    ] {
        let key = if table == "run" { "id" } else { "run_id" };
        let n: i64 = c
            .query_one(
                &format!("SELECT COUNT(*) FROM openprose.{table} WHERE {key} = $1"),
                &[&id],
            )
            .unwrap()
            .get(0);
        out.push((table.to_string(), n));
    }
    out
}

/// Issue 31: SIGKILLs during fork, never half a run. A run big enough for a fork to take a
/// moment (thousands of records and bindings, dozens of attachments, a decided gate) is
/// forked again and again, each fork killed after a random delay; after each, the new run
/// either does not exist at all or is whole (its chain verifies, its records and bindings are
/// the source's). `doctor --fix` then clears what the kills left, and `doctor` is clean.
fn a_fork_killed_is_never_half_a_run(b: Backend) {
    const KILLS: usize = 15;
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let pg = b == Backend::Postgres;
    let e = run.exec(0, "start", "executing", None);
    // Bulk, behind the tool's back (each row still kept in history by the triggers).
    run.view().raw(
        &format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
             INSERT INTO execution (statement_index, statement_text, status, parent_id)
             SELECT i, 'step ' || i, 'completed', {e} FROM n;
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
             INSERT INTO bindings (name, execution_id, kind, value)
             SELECT 'v' || i, NULL, 'let', 'value number ' || i FROM n;"
        ),
        &format!(
            "INSERT INTO openprose.execution (run_id, statement_index, statement_text, status, parent_id)
             SELECT '$RUN', i, 'step ' || i, 'completed', {e} FROM generate_series(1, 2000) i;
             INSERT INTO openprose.bindings (name, run_id, execution_id, kind, value)
             SELECT 'v' || i, '$RUN', NULL, 'let', 'value number ' || i FROM generate_series(1, 2000) i;"
        ),
    );
    for i in 0..30u8 {
        bind_stdin(&run, &format!("file{i}"), &history::big(i, 120_000), &[]);
    }
    gate_on(&run, "ship", None);
    approve(&run, "ship");
    let at = run.exec(1, "end", "completed", None);
    let source_records = count_rows(&p, &run, "execution", "true");
    let source_bindings = count_rows(&p, &run, "bindings", "true");
    assert_eq!(source_bindings, 2030);

    // One whole fork, timed, to aim the kills across its length.
    let started = Instant::now();
    fork(&run, &["--at", &at.to_string(), "--run-id", "whole"]);
    let length = started.elapsed();
    let whole_check = |id: &str| {
        let f = fork_run(&p, id, pg);
        assert_eq!(verify(&f).0, 0, "{id}: {}", verify(&f).1);
        assert_eq!(
            count_rows(&p, &f, "execution", "true"),
            source_records,
            "{id}"
        );
        assert_eq!(
            count_rows(&p, &f, "bindings", "true"),
            source_bindings,
            "{id}"
        );
        assert_eq!(gates(&f)["ship"], "approved", "{id}");
        assert_eq!(
            get_with(&f, "file29", &[]).unwrap(),
            history::big(29, 120_000),
            "{id}"
        );
    };
    whole_check("whole");

    let (mut made, mut not) = (0, 0);
    let mut absent = Vec::new();
    for k in 0..KILLS {
        let id = format!("killed{k}");
        let mut child = run
            .std_cmd()
            .args(["fork", "--at", &at.to_string(), "--run-id", &id])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let delay = length.mul_f64(rand::random::<f64>() * 1.1);
        std::thread::sleep(delay);
        let _ = child.kill(); // SIGKILL
        child.wait().unwrap();
        let exists = match &p.pg_url {
            Some(url) => rows_of(url, &id)[0].1 == 1,
            None => p.root().join(".prose/runs").join(&id).exists(),
        };
        if exists {
            made += 1;
            whole_check(&id);
        } else {
            not += 1;
            // No row of the run; values uploaded before the rows (each in a transaction of
            // its own) may stay, belonging to no run, until `doctor --fix` (below).
            if let Some(url) = &p.pg_url {
                let rows = rows_of(url, &id);
                assert!(
                    rows.iter()
                        .all(|(t, n)| *n == 0 || t.starts_with("attachment")),
                    "{id}: half a run on the server: {rows:?}"
                );
            }
            absent.push(id);
        }
    }
    eprintln!("{KILLS} forks killed: {made} whole, {not} absent (a fork takes {length:?})");
    let _ = p.cmd().args(["doctor", "--fix"]).assert();
    let a = p.cmd().args(["doctor"]).assert();
    assert_eq!(
        code(&a),
        0,
        "{}{}",
        String::from_utf8_lossy(&a.get_output().stdout),
        stderr(&a)
    );
    // Nothing of a fork that was not made is left on the server.
    if let Some(url) = &p.pg_url {
        for id in &absent {
            let rows = rows_of(url, id);
            assert!(rows.iter().all(|(_, n)| *n == 0), "{id}: {rows:?}");
        }
    }
    // Nothing half-built is left beside the runs.
    let leftovers: Vec<String> = std::fs::read_dir(p.root().join(".prose/runs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // The source was only read.
    assert_eq!(count_rows(&p, &run, "execution", "true"), source_records);
    assert_eq!(verify(&run).0, 0);
}

/// Issue 31: a fork whose `--bind` changes an input of a decision carries that decision
/// unconsumed, and it is stale there (exit 11 from `gates wait`, `gates show`, `resume`,
/// whose next step is to reopen), though the source consumed it and still answers 0. A
/// `--bind` of the same content, or of a binding that is no input, leaves it standing.
fn a_fork_that_rebinds_an_input_makes_its_decision_stale(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let pg = b == Backend::Postgres;
    let run = p.init();
    run.exec(1, "let draft = session", "completed", None);
    run.cmd()
        .args(["bind", "draft", "version one", "--kind", "input"])
        .assert()
        .success();
    run.bind("other", "not an input", None);
    gate_on(&run, "publish", Some("draft"));
    approve(&run, "publish");
    assert_eq!(wait(&run, "publish").0, 0);
    let at = run.exec(2, "publish", "completed", None);
    let consumed_in = |r: &Run| {
        history::event_types(r, "publish")
            .iter()
            .filter(|e| *e == "consumed")
            .count()
    };
    assert_eq!(consumed_in(&run), 1);

    let at = at.to_string();
    fork(
        &run,
        &[
            "--at",
            &at,
            "--run-id",
            "changed",
            "--bind",
            "draft=version two",
        ],
    );
    fork(
        &run,
        &[
            "--at",
            &at,
            "--run-id",
            "same",
            "--bind",
            "draft=version one",
        ],
    );
    fork(
        &run,
        &[
            "--at",
            &at,
            "--run-id",
            "unrelated",
            "--bind",
            "other=changed",
        ],
    );
    fork(&run, &["--at", &at, "--run-id", "plain"]);
    let changed = fork_run(&p, "changed", pg);
    assert_eq!(get_with(&changed, "draft", &[]).unwrap(), b"version two");
    // The --bind is a version of its own, by who forked.
    let v = versions(&changed, "draft", None);
    assert_eq!(v.last().unwrap().value.as_deref(), Some("version two"));
    assert_eq!(v.len(), 2);
    assert_eq!(
        consumed_in(&changed),
        0,
        "the decision is carried unconsumed"
    );
    let (c, out) = wait(&changed, "publish");
    assert_eq!(c, 11, "{out}");
    assert!(out.contains("\"draft\""), "{out}");
    assert_eq!(show(&changed, "publish"), 11);
    let (c, g) = resume(&changed, "publish");
    assert_eq!(c, 11, "{g}");
    assert_eq!(g["next_step"]["action"], "reopen", "{g}");
    assert_eq!(verify(&changed).0, 0, "{}", verify(&changed).1);
    // The source is not touched by its fork's staleness.
    assert_eq!(wait(&run, "publish").0, 0);
    assert_eq!(show(&run, "publish"), 0);
    for id in ["same", "unrelated", "plain"] {
        let f = fork_run(&p, id, pg);
        assert_eq!(wait(&f, "publish").0, 0, "fork {id}");
        assert_eq!(show(&f, "publish"), 0, "fork {id}");
    }
    // Reopened in the fork and decided on the new content, it stands.
    changed
        .cmd()
        .args(["gates", "create", "publish", "--prompt", "Publish this?"])
        .args(["--inputs", "draft", "--reopen"])
        .assert()
        .success();
    approve(&changed, "publish");
    assert_eq!(wait(&changed, "publish").0, 0);
}

/// Refused forks: one line naming what was wrong, the documented code, no new run, and the
/// source as it was.
fn refused_forks_write_nothing(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let r = run.exec(1, "start", "completed", None);
    run.bind("x", "one", None);
    let other = p.init();
    // A record of another run (on a server, ids are numbered across runs) is no point of this.
    let foreign = other.exec(1, "elsewhere", "completed", None).to_string();
    let before = state(&run);
    let other_before = state(&other);
    let runs = run_ids(&p);
    let r = r.to_string();
    let missing = (r.parse::<i64>().unwrap() + 1000).to_string();
    let mut cases = vec![
        (
            vec!["--at", &missing, "--run-id", "nf"],
            3,
            missing.as_str(),
        ),
        (vec!["--at", "0", "--run-id", "nf"], 2, "--at"),
        (vec!["--at", "abc", "--run-id", "nf"], 2, "--at"),
        (vec!["--run-id", "nf"], 2, "--at"),
        (
            vec!["--at", &r, "--run-id", "nf", "--bind", "noequals"],
            2,
            "NAME=VALUE",
        ),
        (
            vec!["--at", &r, "--run-id", "nf", "--bind", "bad name!=v"],
            2,
            "bad name",
        ),
        (
            vec!["--at", &r, "--run-id", "nf", "--backend", "oracle"],
            2,
            "oracle",
        ),
        (vec!["--at", &r, "--run-id", "../escape"], 2, "escape"),
        (
            vec!["--at", &r, "--run-id", &other.id],
            4,
            other.id.as_str(),
        ),
        (vec!["--at", &r, "--run-id", &run.id], 4, run.id.as_str()),
    ];
    if b == Backend::Postgres {
        cases.push((
            vec!["--at", &foreign, "--run-id", "nf"],
            3,
            foreign.as_str(),
        ));
    }
    for (args, want, says) in cases {
        let a = run.cmd().arg("fork").args(&args).assert();
        let err = stderr(&a);
        assert_eq!(code(&a), want, "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(a.get_output().stdout.is_empty(), "{args:?}");
        assert_eq!(run_ids(&p), runs, "{args:?} made a run");
    }
    assert_eq!(state(&run), before, "a refused fork changed its source");
    assert_eq!(
        state(&other),
        other_before,
        "a refused fork changed another run"
    );
}
