//! An adversary's battery against "prose-state keeps its own history; triggers keep raw
//! writers'" (commits 26a222f..be4cdfd). Every test drives the real binary and reads the
//! database itself; raw SQL is written the way another tool would write it (a plain
//! connection: SQLite triggers on, no `openprose.writer` on PostgreSQL).

use crate::common::{self, *};

on_both!(
    holds_prose_states_versions_match_a_raw_writers_for_the_same_change,
    holds_a_long_lived_mcp_server_keeps_versions_after_raw_ddl,
    holds_prose_state_writers_racing_a_raw_writer_number_every_version_once,
    holds_triggers_made_again_by_doctor_fix_fire_for_raw_writers_only,
);

/// A plain connection to the run's database, for raw writes and reads.
enum Raw {
    Lite(rusqlite::Connection),
    Pg(Box<postgres::Client>, String),
}

impl Raw {
    fn open(run: &Run) -> Raw {
        match &run.pg_url {
            Some(url) => Raw::Pg(
                Box::new(postgres::Client::connect(url, postgres::NoTls).unwrap()),
                run.id.clone(),
            ),
            None => Raw::Lite(run.conn()),
        }
    }

    /// Runs `sqlite` or `postgres` (with `$RUN` the run id) as a raw writer.
    fn write(&mut self, sqlite: &str, postgres: &str) {
        match self {
            Raw::Lite(c) => c.execute_batch(sqlite).unwrap(),
            Raw::Pg(c, run) => c.batch_execute(&postgres.replace("$RUN", run)).unwrap(),
        }
    }

    /// (n, at_record, principal) of every kept version of a root-scope binding, or of an
    /// agent's memory, in write order.
    fn versions(&mut self, table: &str, name: &str) -> Vec<(i64, Option<i64>, Option<String>)> {
        let scope = if table == "binding_history" {
            " AND execution_id IS NULL"
        } else {
            ""
        };
        match self {
            Raw::Lite(c) => {
                let mut s = c
                    .prepare(&format!(
                        "SELECT n, at_record, principal FROM {table} WHERE name = ?1{scope}
                         ORDER BY seq"
                    ))
                    .unwrap();
                s.query_map([name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .unwrap()
                    .map(Result::unwrap)
                    .collect()
            }
            Raw::Pg(c, run) => c
                .query(
                    &format!(
                        "SELECT n, at_record, principal FROM openprose.{table}
                         WHERE run_id = $1 AND name = $2{scope} ORDER BY seq"
                    ),
                    &[run, &name],
                )
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect(),
        }
    }

    /// The at_record of every segment of an agent, by number.
    fn segments(&mut self, agent: &str) -> Vec<(i64, Option<i64>)> {
        match self {
            Raw::Lite(c) => {
                let mut s = c
                    .prepare(
                        "SELECT segment_number, at_record FROM agent_segments
                         WHERE agent_name = ?1 ORDER BY segment_number",
                    )
                    .unwrap();
                s.query_map([agent], |r| Ok((r.get(0)?, r.get(1)?)))
                    .unwrap()
                    .map(Result::unwrap)
                    .collect()
            }
            Raw::Pg(c, run) => c
                .query(
                    "SELECT segment_number, at_record FROM openprose.agent_segments
                     WHERE run_id = $1 AND agent_name = $2 ORDER BY segment_number",
                    &[run, &agent],
                )
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect(),
        }
    }
}

/// The same change made by prose-state and by a raw writer, with no record appended between
/// them, keeps one version each, numbered one after the other, at the same record; only the
/// principal differs (prose-state's names its writer, a raw writer's is NULL). For every
/// write path: a whole bind, --append, --merge, an execution's scope, `agent remember`,
/// `agent segment` (the agent it makes and the segment's record).
fn holds_prose_states_versions_match_a_raw_writers_for_the_same_change(backend: Backend) {
    let Some(p) = Project::on(backend) else {
        return common::skipped("no PostgreSQL server");
    };
    let run = p.init();
    let mut raw = Raw::open(&run);
    run.exec(1, "s1", "completed", None);
    // A block invocation: its record is a frame, where a scoped binding lives (issue 45).
    let e2 = run.exec(2, "do s2()", "executing", None);
    let as_alice = |args: &[&str]| {
        run.cmd()
            .env("PROSE_PRINCIPAL", "alice")
            .args(args)
            .assert()
            .success();
    };
    // Whole value, then raw, then --append, then raw, then --merge, then raw.
    as_alice(&["bind", "x", "[1]"]);
    raw.write(
        "UPDATE bindings SET value = '[1,2]' WHERE name = 'x' AND execution_id IS NULL",
        "UPDATE openprose.bindings SET value = '[1,2]'
          WHERE run_id = '$RUN' AND name = 'x' AND execution_id IS NULL",
    );
    as_alice(&["bind", "x", "--append", "3"]);
    let e3 = run.exec(3, "s3", "completed", None);
    raw.write(
        "UPDATE bindings SET value = '{\"a\":1}' WHERE name = 'x' AND execution_id IS NULL",
        "UPDATE openprose.bindings SET value = '{\"a\":1}'
          WHERE run_id = '$RUN' AND name = 'x' AND execution_id IS NULL",
    );
    as_alice(&["bind", "x", "--merge", "{\"b\":2}"]);
    let x = raw.versions("binding_history", "x");
    let ns: Vec<i64> = x.iter().map(|v| v.0).collect();
    assert_eq!(ns, [1, 2, 3, 4, 5], "{x:?}");
    let principals: Vec<Option<&str>> = x.iter().map(|v| v.2.as_deref()).collect();
    assert_eq!(
        principals,
        [Some("alice"), None, Some("alice"), None, Some("alice")],
        "{x:?}"
    );
    // Writes with no record between them are at the same record, whoever wrote them.
    assert_eq!(x[0].1, x[1].1, "{x:?}");
    assert_eq!(x[1].1, x[2].1, "{x:?}");
    assert_eq!(x[3].1, x[4].1, "{x:?}");
    assert_ne!(x[2].1, x[3].1, "a record was appended between: {x:?}");
    let at_e3 = x[3].1;
    // An execution's scope: its own numbering from 1.
    as_alice(&["bind", "x", "\"scoped\"", "--execution-id", &e2.to_string()]);
    let scoped = match &mut raw {
        Raw::Lite(c) => c
            .query_row(
                "SELECT COUNT(*), MAX(n) FROM binding_history WHERE name = 'x' AND execution_id = ?1",
                [e2],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Option<i64>>(1)?)),
            )
            .unwrap(),
        Raw::Pg(c, id) => {
            let r = c
                .query_one(
                    "SELECT COUNT(*), MAX(n) FROM openprose.binding_history
                      WHERE run_id = $1 AND name = 'x' AND execution_id = $2",
                    &[id, &e2],
                )
                .unwrap();
            (r.get(0), r.get(1))
        }
    };
    assert_eq!(scoped, (1, Some(1)));
    assert_eq!(raw.versions("binding_history", "x").len(), 5);
    // Agents: a segment makes the agent (version 1), remember changes it (2), a raw update
    // (3), a raw segment and a prose-state segment at the same record.
    as_alice(&["agent", "segment", "ag", "--prompt", "p", "--summary", "s"]);
    as_alice(&["agent", "remember", "ag", "m1"]);
    raw.write(
        "UPDATE agents SET memory = 'm2' WHERE name = 'ag';
         INSERT INTO agent_segments (agent_name, segment_number, timestamp, prompt, summary)
         VALUES ('ag', 2, datetime('now'), 'p', 's');",
        "UPDATE openprose.agents SET memory = 'm2' WHERE run_id = '$RUN' AND name = 'ag';
         INSERT INTO openprose.agent_segments (agent_name, run_id, segment_number, prompt, summary)
         VALUES ('ag', '$RUN', 2, 'p', 's');",
    );
    as_alice(&["agent", "segment", "ag", "--prompt", "p", "--summary", "s"]);
    let ag = raw.versions("agent_history", "ag");
    let ns: Vec<i64> = ag.iter().map(|v| v.0).collect();
    assert_eq!(ns, [1, 2, 3], "{ag:?}");
    assert!(ag.iter().all(|v| v.1 == at_e3), "{ag:?} vs {at_e3:?}");
    let segs = raw.segments("ag");
    assert_eq!(segs.len(), 3, "{segs:?}");
    assert!(segs.iter().all(|s| s.1 == at_e3), "{segs:?} vs {at_e3:?}");
    // `get --as-of` the third record reads the last write before the next record.
    let got = run
        .cmd()
        .args(["get", "x", "--as-of", &e3.to_string()])
        .assert()
        .success();
    let v: serde_json::Value =
        serde_json::from_slice(&got.get_output().stdout).expect("a JSON value");
    assert_eq!(v, serde_json::json!({"a": 1, "b": 2}));
}

/// SQLite, after a raw writer deleted the newest execution records: a bind's version, an
/// agent's version and a raw writer's version, written one after the other with no record
/// appended between them, must record the same record; and `get --as-of` must read the
/// version that `history` lists at that record, or say it is not known. At be4cdfd a bind
/// took its record from sqlite_sequence (the highest id ever given: a deleted record) while
/// agents, segments and the raw writer's trigger take MAX(id) (the newest record there is),
/// and `get --as-of` said the binding "did not exist" at a record its own history lists a
/// version at (fixed: every writer takes MAX(id); versions whose records go backwards make
/// the past not known).
#[test]
fn holds_sqlite_versions_agree_on_the_record_after_newest_records_are_deleted() {
    let p = Project::new();
    let run = p.init();
    for i in 1..=4 {
        run.exec(i, &format!("s{i}"), "completed", None);
    }
    run.bind("x", "\"v1\"", None);
    let raw = run.conn();
    raw.execute_batch("DELETE FROM execution WHERE id >= 3")
        .unwrap();
    run.bind("x", "\"v2\"", None);
    run.cmd()
        .args(["agent", "remember", "ag", "m1"])
        .assert()
        .success();
    raw.execute_batch("UPDATE bindings SET value = '\"v3\"' WHERE name = 'x'")
        .unwrap();
    let at = |sql: &str| -> Option<i64> { raw.query_row(sql, [], |r| r.get(0)).unwrap() };
    let bind_at = at("SELECT at_record FROM binding_history WHERE name = 'x' AND n = 2");
    let agent_at = at("SELECT at_record FROM agent_history WHERE name = 'ag' AND n = 1");
    let raw_at = at("SELECT at_record FROM binding_history WHERE name = 'x' AND n = 3");
    let newest = at("SELECT MAX(id) FROM execution");
    assert_eq!(
        (bind_at, agent_at, raw_at),
        (newest, newest, newest),
        "(bind, agent, raw) versions' records after records 3 and 4 were deleted"
    );
    // The first version records record 4, which raw SQL deleted: the records go backwards in
    // write order, so what stood as of record 2 is not known. `get --as-of 2` says so (a
    // refusal), never "did not exist" of a binding its own history lists at record 2.
    let got = run
        .cmd()
        .args(["get", "x", "--as-of", "2"])
        .assert()
        .failure();
    let err = String::from_utf8_lossy(&got.get_output().stderr).into_owned();
    assert!(err.contains("is not known"), "get --as-of 2: {err}");
    assert!(!err.contains("did not exist"), "get --as-of 2: {err}");
}

/// SQLite, after a raw writer deleted the newest execution records: a fork at the newest
/// record there is carries either both or neither of two prose-state writes made one after
/// the other with no record between them. Since be4cdfd the fork carries the agent's memory
/// (written second, at record 2) and not the binding (written first, at "record 4", a deleted
/// one): the binding is "not found" in a fork that holds a later write.
#[test]
fn holds_sqlite_fork_carries_writes_in_order_after_newest_records_are_deleted() {
    let p = Project::new();
    let run = p.init();
    for i in 1..=4 {
        run.exec(i, &format!("s{i}"), "completed", None);
    }
    run.conn()
        .execute_batch("DELETE FROM execution WHERE id >= 3")
        .unwrap();
    run.bind("x", "\"v1\"", None);
    run.cmd()
        .args(["agent", "remember", "ag", "m1"])
        .assert()
        .success();
    run.exec(5, "s5", "completed", None);
    let fork = stdout_json(
        &run.cmd()
            .args(["--json", "fork", "--at", "2"])
            .assert()
            .success(),
    );
    let forked = p.run(fork["run_id"].as_str().unwrap());
    let memory = forked
        .cmd()
        .args(["agent", "memory", "ag"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert_eq!(memory, b"m1", "the fork carries the agent's memory");
    let x = forked.cmd().args(["get", "x"]).assert();
    assert!(
        x.get_output().status.success(),
        "the fork carries the later write (the agent's memory) but not the binding written \
         before it: {}",
        String::from_utf8_lossy(&x.get_output().stderr)
    );
}

/// A long-lived MCP server (its bind statements kept prepared with its session) keeps
/// writing, and keeps each version once, after raw DDL adds columns to the tables its
/// statements write, and after a raw writer changed a binding under it.
fn holds_a_long_lived_mcp_server_keeps_versions_after_raw_ddl(backend: Backend) {
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::TokioChildProcess;
    use rmcp::ServiceExt;
    let Some(p) = Project::on(backend) else {
        return common::skipped("no PostgreSQL server");
    };
    let run = p.init();
    run.exec(1, "s1", "completed", None);
    let mut raw = Raw::open(&run);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = rt.block_on(async {
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.args(["--run", &run.id, "mcp", "--role", "vm", "--agent", "bot"])
            .current_dir(p.root())
            .env("HOME", common::test_home(p.root()))
            .stderr(std::process::Stdio::null());
        for var in CLEARED_ENV {
            cmd.env_remove(var);
        }
        ().serve(TokioChildProcess::new(cmd).unwrap())
            .await
            .unwrap()
    });
    let call = |tool: &'static str, args: serde_json::Value| {
        let serde_json::Value::Object(args) = args else {
            panic!()
        };
        let r = rt
            .block_on(async {
                tokio::time::timeout(
                    std::time::Duration::from_secs(30),
                    client.call_tool(CallToolRequestParams::new(tool).with_arguments(args)),
                )
                .await
            })
            .expect("an answer within 30 s")
            .unwrap();
        let text = serde_json::to_value(&r.content).unwrap()[0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        (r.is_error == Some(true), text)
    };
    let mut answers = vec![
        call("bind", serde_json::json!({"name": "x", "value": "1"})),
        call("bind", serde_json::json!({"name": "x", "value": "2"})),
        call(
            "agent_remember",
            serde_json::json!({"name": "ag", "value": "m1"}),
        ),
    ];
    raw.write(
        "ALTER TABLE bindings ADD COLUMN extra TEXT DEFAULT 'd';
         ALTER TABLE binding_history ADD COLUMN extra TEXT;
         ALTER TABLE agent_history ADD COLUMN extra TEXT;
         UPDATE bindings SET value = 'raw' WHERE name = 'x' AND execution_id IS NULL;",
        "ALTER TABLE openprose.bindings ADD COLUMN extra TEXT DEFAULT 'd';
         ALTER TABLE openprose.binding_history ADD COLUMN extra TEXT;
         ALTER TABLE openprose.agent_history ADD COLUMN extra TEXT;
         UPDATE openprose.bindings SET value = 'raw'
          WHERE run_id = '$RUN' AND name = 'x' AND execution_id IS NULL;",
    );
    answers.push(call("bind", serde_json::json!({"name": "x", "value": "3"})));
    answers.push(call("bind", serde_json::json!({"name": "y", "value": "1"})));
    answers.push(call("bind", serde_json::json!({"name": "x", "value": "4"})));
    answers.push(call(
        "agent_remember",
        serde_json::json!({"name": "ag", "value": "m2"}),
    ));
    rt.block_on(client.cancel()).unwrap();
    for (i, (error, text)) in answers.iter().enumerate() {
        assert!(!error, "call {i} refused: {text}");
    }
    let x = raw.versions("binding_history", "x");
    let ns: Vec<i64> = x.iter().map(|v| v.0).collect();
    assert_eq!(ns, [1, 2, 3, 4, 5], "{x:?}");
    let by: Vec<Option<&str>> = x.iter().map(|v| v.2.as_deref()).collect();
    assert_eq!(
        by,
        [
            Some("agent:bot"),
            Some("agent:bot"),
            None,
            Some("agent:bot"),
            Some("agent:bot")
        ],
        "{x:?}"
    );
    let y = raw.versions("binding_history", "y");
    assert_eq!(y.iter().map(|v| v.0).collect::<Vec<_>>(), [1], "{y:?}");
    let ag = raw.versions("agent_history", "ag");
    assert_eq!(ag.iter().map(|v| v.0).collect::<Vec<_>>(), [1, 2], "{ag:?}");
    assert_eq!(run.get("x", None), b"4");
}

/// Four prose-state processes rebinding one binding (whole values and `--append` steps) while
/// a raw writer updates it in its own transactions, all at once: every write is kept once,
/// numbered 1, 2, 3, ... with no duplicate or gap, each attributed to its writer (a raw
/// writer's NULL), and the newest version is the binding's value.
fn holds_prose_state_writers_racing_a_raw_writer_number_every_version_once(backend: Backend) {
    let Some(p) = Project::on(backend) else {
        return common::skipped("no PostgreSQL server");
    };
    let run = p.init();
    run.bind("x", "[]", None);
    const WRITERS: usize = 4;
    const EACH: usize = 5;
    // The raw writer writes once before any prose-state writer starts, then on until every
    // one is done: its writes fall between theirs whatever the machine's speed, and however
    // unfairly SQLite's busy waits share the lock (a waiting writer can be passed over by
    // every other one).
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let raw_thread = {
        let mut raw = Raw::open(&run);
        raw.write(
            "UPDATE bindings SET value = '[\"raw0\"]' WHERE name = 'x'",
            "UPDATE openprose.bindings SET value = '[\"raw0\"]'
              WHERE run_id = '$RUN' AND name = 'x'",
        );
        let done = done.clone();
        std::thread::spawn(move || {
            let mut i = 1;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                raw.write(
                    &format!("UPDATE bindings SET value = '[\"raw{i}\"]' WHERE name = 'x'"),
                    &format!(
                        "UPDATE openprose.bindings SET value = '[\"raw{i}\"]'
                          WHERE run_id = '$RUN' AND name = 'x'"
                    ),
                );
                i += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            i
        })
    };
    let children: Vec<_> = (0..WRITERS)
        .map(|w| {
            let mut script = String::new();
            for i in 0..EACH {
                if i % 2 == 0 {
                    script.push_str(&format!(
                        "PROSE_PRINCIPAL=w{w} \"$BIN\" --run {} bind x --append '\"w{w}-{i}\"' >/dev/null || exit 1\n",
                        run.id
                    ));
                } else {
                    script.push_str(&format!(
                        "PROSE_PRINCIPAL=w{w} \"$BIN\" --run {} bind x '[\"w{w}-{i}\"]' >/dev/null || exit 1\n",
                        run.id
                    ));
                }
            }
            sh(p.root(), &script)
                .env("PROSE_STATE_BUSY_TIMEOUT", "30000")
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a prose-state writer failed");
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let raw_writes = raw_thread.join().unwrap();
    let mut raw = Raw::open(&run);
    let x = raw.versions("binding_history", "x");
    let total = 1 + WRITERS * EACH + raw_writes;
    let ns: Vec<i64> = x.iter().map(|v| v.0).collect();
    assert_eq!(ns, (1..=total as i64).collect::<Vec<_>>(), "{x:?}");
    let raw_versions = x.iter().filter(|v| v.2.is_none()).count();
    assert_eq!(raw_versions, raw_writes, "{x:?}");
    let first_raw = x.iter().position(|v| v.2.is_none()).unwrap();
    let last_mine = x.iter().rposition(|v| v.2.is_some()).unwrap();
    assert!(
        first_raw < last_mine,
        "the raw writer's writes fell between prose-state's: {x:?}"
    );
    for w in 0..WRITERS {
        let mine = x
            .iter()
            .filter(|v| v.2.as_deref() == Some(format!("w{w}").as_str()))
            .count();
        assert_eq!(mine, EACH, "writer w{w}: {x:?}");
    }
    // The newest version is the binding's value.
    let newest = run
        .cmd()
        .args(["get", "x", "--version", &total.to_string()])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert_eq!(newest, run.get("x", None));
}

/// The history triggers dropped behind prose-state's back and made again by `doctor --fix`
/// still fire for raw writers only: after the fix, a bind, `agent remember` and `agent
/// segment` keep one version each (never a second from a trigger made without its `WHEN`),
/// and a raw writer's change is kept again, unattributed.
fn holds_triggers_made_again_by_doctor_fix_fire_for_raw_writers_only(backend: Backend) {
    let Some(p) = Project::on(backend) else {
        return common::skipped("no PostgreSQL server");
    };
    let run = p.init();
    run.exec(1, "s1", "completed", None);
    run.bind("x", "\"v1\"", None);
    let mut raw = Raw::open(&run);
    raw.write(
        "DROP TRIGGER bindings_version_insert; DROP TRIGGER bindings_version_update;
         DROP TRIGGER binding_history_version; DROP TRIGGER agent_history_insert;
         DROP TRIGGER agent_history_update; DROP TRIGGER agent_segments_at_record;",
        "DROP TRIGGER bindings_version ON openprose.bindings;
         DROP TRIGGER binding_history_keep ON openprose.bindings;
         DROP TRIGGER agent_history_keep ON openprose.agents;
         DROP TRIGGER agent_segments_at_record ON openprose.agent_segments;",
    );
    let a = run.cmd().args(["--json", "doctor", "--fix"]).assert();
    let d: serde_json::Value = serde_json::from_slice(&a.get_output().stdout).unwrap();
    let fixed = d["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "missing trigger" && p["fixed"] == true)
        .count();
    assert!(fixed >= 1, "{d}");
    run.cmd().args(["doctor"]).assert().success();
    let before = raw.versions("binding_history", "x").len();
    run.cmd()
        .env("PROSE_PRINCIPAL", "alice")
        .args(["bind", "x", "\"v2\""])
        .assert()
        .success();
    run.cmd()
        .env("PROSE_PRINCIPAL", "alice")
        .args(["agent", "segment", "ag", "--prompt", "p", "--summary", "s"])
        .assert()
        .success();
    run.cmd()
        .env("PROSE_PRINCIPAL", "alice")
        .args(["agent", "remember", "ag", "m1"])
        .assert()
        .success();
    let x = raw.versions("binding_history", "x");
    assert_eq!(x.len(), before + 1, "one version for one bind: {x:?}");
    assert_eq!(x.last().unwrap().2.as_deref(), Some("alice"), "{x:?}");
    let ag = raw.versions("agent_history", "ag");
    assert_eq!(ag.iter().map(|v| v.0).collect::<Vec<_>>(), [1, 2], "{ag:?}");
    assert_eq!(raw.segments("ag").len(), 1);
    assert!(
        raw.segments("ag")[0].1.is_some(),
        "a segment has its record"
    );
    raw.write(
        "UPDATE bindings SET value = '\"raw\"' WHERE name = 'x';
         UPDATE agents SET memory = 'rawm' WHERE name = 'ag';",
        "UPDATE openprose.bindings SET value = '\"raw\"' WHERE run_id = '$RUN' AND name = 'x';
         UPDATE openprose.agents SET memory = 'rawm' WHERE run_id = '$RUN' AND name = 'ag';",
    );
    let x2 = raw.versions("binding_history", "x");
    assert_eq!(
        x2.len(),
        x.len() + 1,
        "the raw writer's change is kept: {x2:?}"
    );
    assert_eq!(x2.last().unwrap().2, None, "{x2:?}");
    assert_eq!(raw.versions("agent_history", "ag").len(), 3);
}
