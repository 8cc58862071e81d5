//! A decision no one can fake: each attack an agent with raw access to the run's database can
//! make on a gate, made through SQL behind the tool's back, and shown refused or detected.

use crate::common::*;
use sha2::{Digest, Sha256};

on_both!(
    every_spelling_of_agent_is_an_agent_and_no_principal_is_invented,
    stored_strings_reach_a_person_escaped_and_json_stays_exact,
    a_raw_decision_is_tampering_and_a_spec_decision_is_unattested,
    a_prompt_rewritten_before_approval_is_refused,
    a_faithful_rechain_matches_and_every_forged_one_is_caught,
    query_stops_at_its_time_limit,
);

/// An audit row as the database holds it.
#[derive(Debug, Clone)]
struct Row {
    id: i64,
    seq: Option<i64>,
    gate_id: String,
    run_id: String,
    event_type: String,
    principal: Option<String>,
    comment: Option<String>,
    timestamp: Option<String>,
    metadata: Option<String>,
    prev_hash: Option<String>,
    hash: Option<String>,
}

fn audit_rows(run: &Run) -> Vec<Row> {
    match &run.pg_url {
        Some(url) => {
            let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
            c.query(
                "SELECT id, seq, gate_id, run_id, event_type, principal, comment,
                        to_char(timestamp AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'),
                        metadata, prev_hash, hash
                   FROM openprose.gate_audit_log WHERE run_id = $1 ORDER BY id",
                &[&run.id],
            )
            .unwrap()
            .iter()
            .map(|r| Row {
                id: r.get(0),
                seq: r.get(1),
                gate_id: r.get(2),
                run_id: r.get(3),
                event_type: r.get(4),
                principal: r.get(5),
                comment: r.get(6),
                timestamp: r.get(7),
                metadata: r.get(8),
                prev_hash: r.get(9),
                hash: r.get(10),
            })
            .collect()
        }
        None => {
            let c = run.conn();
            let mut s = c
                .prepare(
                    "SELECT id, seq, gate_id, run_id, event_type, principal, comment, timestamp,
                            metadata, prev_hash, hash FROM gate_audit_log ORDER BY id",
                )
                .unwrap();
            s.query_map([], |r| {
                Ok(Row {
                    id: r.get(0)?,
                    seq: r.get(1)?,
                    gate_id: r.get(2)?,
                    run_id: r.get(3)?,
                    event_type: r.get(4)?,
                    principal: r.get(5)?,
                    comment: r.get(6)?,
                    timestamp: r.get(7)?,
                    metadata: r.get(8)?,
                    prev_hash: r.get(9)?,
                    hash: r.get(10)?,
                })
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
        }
    }
}

/// The chain hash as docs/gates-and-trust.md documents it: an agent can compute it.
fn chain_hash(r: &Row, prev: &str) -> String {
    let canonical = serde_json::json!([
        "prose-audit-2",
        prev,
        r.seq,
        r.gate_id,
        r.run_id,
        r.event_type,
        r.principal,
        r.comment,
        r.timestamp,
        r.metadata
    ]);
    let digest = Sha256::digest(canonical.to_string().as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn lit(v: &Option<String>) -> String {
    match v {
        Some(s) => format!("'{}'", s.replace('\'', "''")),
        None => "NULL".into(),
    }
}

/// Runs raw SQL on the run's database, its audit triggers dropped first (an agent can).
fn behind_the_back(run: &Run, sql: &str) {
    let table = if run.pg_url.is_some() {
        "openprose.gate_audit_log"
    } else {
        "gate_audit_log"
    };
    let sql = sql.replace("$LOG", table).replace(
        "$GATES",
        if run.pg_url.is_some() {
            "openprose.gates"
        } else {
            "gates"
        },
    );
    run.view().raw(
        &format!(
            "DROP TRIGGER IF EXISTS gate_audit_log_no_update;
             DROP TRIGGER IF EXISTS gate_audit_log_no_delete; {sql}"
        ),
        &format!(
            "ALTER TABLE openprose.gate_audit_log DISABLE TRIGGER gate_audit_log_append_only; {sql}"
        ),
    );
}

/// Recomputes every sequenced row's prev_hash and hash, in seq order, and writes them back:
/// what a forger who knows the documented algorithm does after changing the log.
fn rechain(run: &Run) {
    let mut rows: Vec<Row> = audit_rows(run)
        .into_iter()
        .filter(|r| r.seq.is_some())
        .collect();
    rows.sort_by_key(|r| r.seq);
    let mut prev = String::new();
    let mut sql = String::new();
    for r in &rows {
        let hash = chain_hash(r, &prev);
        sql += &format!(
            "UPDATE $LOG SET prev_hash = '{prev}', hash = '{hash}' WHERE id = {};",
            r.id
        );
        prev = hash;
    }
    behind_the_back(run, &sql);
}

fn verify_code(p: &Project) -> (i32, serde_json::Value) {
    let a = p.cmd().args(["--json", "gates", "verify"]).assert();
    let code = a.get_output().status.code().unwrap();
    (
        code,
        serde_json::from_slice(&a.get_output().stdout).unwrap(),
    )
}

fn wait_code(run: &Run, gate: &str) -> i32 {
    let a = run
        .cmd()
        .args(["gates", "wait", &run.id, gate, "--timeout", "1s"])
        .assert();
    a.get_output().status.code().unwrap()
}

fn gate(run: &Run, id: &str, extra: &[&str]) {
    run.cmd()
        .args(["gates", "create", id, "--prompt", "Deploy the docs?"])
        .args(extra)
        .assert()
        .success();
}

fn approve(run: &Run, id: &str, who: &str) {
    run.cmd()
        .args(["approve", &run.id, id, "--yes", "--as", who])
        .assert()
        .success();
}

fn every_spelling_of_agent_is_an_agent_and_no_principal_is_invented(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let spellings = [
        " agent:bot",
        "Agent:bot",
        "AGENT:bot",
        "agent :bot",
        "agent\u{200b}:bot",
        "agent\u{ff1a}bot",
        "\u{ff41}gent:bot",
        "agent\u{202e}:bot",
    ];
    for (i, _) in spellings.iter().enumerate() {
        gate(&run, &format!("g{i}"), &[]);
    }
    for (i, who) in spellings.iter().enumerate() {
        let before = run.view().gate(&format!("g{i}"));
        let a = run
            .cmd()
            .args(["approve", &run.id, &format!("g{i}"), "--yes", "--as", who])
            .assert()
            .failure();
        assert_eq!(code(&a), 4, "{who:?}: {}", stderr(&a));
        assert!(
            stderr(&a).contains("\"agent:bot\" may not decide"),
            "{}",
            stderr(&a)
        );
        assert_eq!(run.view().gate(&format!("g{i}")), before, "{who:?}");
        // The attempt is logged under the principal's one normal form.
        let ev = run.view().events(&format!("g{i}"));
        assert_eq!(ev.last().unwrap().0, "refused");
        assert_eq!(ev.last().unwrap().1.as_deref(), Some("agent:bot"));
    }
    // Outside the grammar (a Cyrillic a, a reserved word, nothing at all): exit 2, unchanged.
    let before = run.snapshot();
    for who in [
        "\u{430}gent:bot",
        "unknown",
        "system",
        "user",
        "",
        " \u{200b} ",
    ] {
        let a = run
            .cmd()
            .args(["approve", &run.id, "g0", "--yes", "--as", who])
            .assert()
            .failure();
        assert_eq!(code(&a), 2, "{who:?}: {}", stderr(&a));
        assert_eq!(run.snapshot(), before, "{who:?}");
    }
    // No --as, no PROSE_PRINCIPAL, no login name: no one decides.
    let a = run
        .cmd()
        .env_remove("USER")
        .env_remove("LOGNAME")
        .args(["approve", &run.id, "g0", "--yes"])
        .assert()
        .failure();
    assert_eq!(code(&a), 2, "{}", stderr(&a));
    assert!(stderr(&a).contains("no principal"), "{}", stderr(&a));
    assert_eq!(run.snapshot(), before);
    // A login name outside the grammar is no one either.
    let a = run
        .cmd()
        .env("USER", "jos\u{e9}")
        .env_remove("LOGNAME")
        .args(["approve", &run.id, "g0", "--yes"])
        .assert()
        .failure();
    assert_eq!(code(&a), 2, "{}", stderr(&a));
    assert_eq!(run.snapshot(), before);
    // Allow lists are compared normalised: --allow Alice admits --as ALICE, and is stored so.
    gate(&run, "named", &["--allow", "Alice, \u{ff22}ob"]);
    let a = run
        .cmd()
        .args(["--json", "gates", "show", &run.id, "named", "--as", "carol"])
        .assert()
        .success();
    assert_eq!(
        stdout_json(&a)["allow"],
        serde_json::json!(["alice", "bob"])
    );
    approve(&run, "named", "ALICE");
    assert_eq!(run.view().gate("named").1.as_deref(), Some("alice"));
    // An allow entry outside the grammar is refused at creation.
    let before = run.snapshot();
    let a = run
        .cmd()
        .args([
            "gates",
            "create",
            "bad",
            "--prompt",
            "p",
            "--allow",
            "\u{430}lice",
        ])
        .assert()
        .failure();
    assert_eq!(code(&a), 2);
    assert_eq!(run.snapshot(), before);
}

/// Characters a terminal interprets or hides.
const HIDDEN: [char; 6] = ['\u{1b}', '\r', '\u{202e}', '\u{200b}', '\u{9b}', '\u{7}'];

fn assert_clean(what: &str, out: &[u8]) {
    let text = String::from_utf8_lossy(out);
    for c in HIDDEN {
        assert!(
            !text.contains(c),
            "{what}: {c:?} reached the terminal raw:\n{text}"
        );
    }
}

fn stored_strings_reach_a_person_escaped_and_json_stays_exact(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    gate(&run, "g", &[]);
    // gates create refuses what would change what an approver sees.
    let before = run.snapshot();
    for prompt in [
        "DROP PRODUCTION DATABASE\rRead-only docs update    ",
        "visible \u{1b}[8mhidden",
        "abc\u{202e}fed",
        "bell\u{7}",
        "csi\u{9b}2J",
    ] {
        let a = run
            .cmd()
            .args(["gates", "create", "x", "--prompt", prompt])
            .assert()
            .failure();
        assert_eq!(code(&a), 2, "{prompt:?}: {}", stderr(&a));
        assert_eq!(stderr(&a).lines().count(), 1);
        assert_clean("create's error", &a.get_output().stderr);
        assert_eq!(run.snapshot(), before, "{prompt:?}");
    }
    // Hostile strings written behind the tool's back, and through it where it takes them.
    let hostile = "DROP PROD\rRead-only docs \u{1b}[8mhidden\u{202e}x\u{200b}\u{9b}2J\u{7}";
    let q = hostile.replace('\'', "''");
    run.view().raw(
        &format!("UPDATE gates SET prompt = '{q}' WHERE id = 'g'"),
        &format!("UPDATE openprose.gates SET prompt = '{q}' WHERE run_id = '$RUN' AND id = 'g'"),
    );
    run.cmd().args(["bind", "v", hostile]).assert().success();
    run.cmd()
        .args([
            "exec-append",
            "--index",
            "1",
            "--text",
            hostile,
            "--status",
            "failed",
        ])
        .args(["--error", hostile])
        .assert()
        .success();
    run.cmd()
        .args(["gates", "create", "r", "--prompt", "Reject me"])
        .assert()
        .success();
    run.cmd()
        .args([
            "reject", &run.id, "r", "--yes", "--as", "raymond", "--reason", hostile,
        ])
        .assert()
        .success();
    // Every text command a person runs shows them escaped, on stdout and stderr alike.
    let commands: Vec<Vec<&str>> = vec![
        vec!["gates"],
        vec!["gates", "show", &run.id, "g", "--as", "raymond"],
        vec!["gates", "show", &run.id, "r", "--as", "raymond"],
        vec!["gates", "audit"],
        vec!["gates", "verify"],
        vec!["log"],
        vec!["resume"],
        vec!["runs"],
        vec!["doctor"],
        vec!["approve", &run.id, "g", "--yes", "--as", "raymond"],
    ];
    for args in &commands {
        let a = run.cmd().args(args).assert();
        assert_clean(&format!("{args:?} stdout"), &a.get_output().stdout);
        assert_clean(&format!("{args:?} stderr"), &a.get_output().stderr);
    }
    // The prompt is shown, made visible, not interpreted.
    let a = run
        .cmd()
        .args(["gates", "show", &run.id, "g", "--as", "raymond"])
        .assert();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(
        out.contains("DROP PROD\\rRead-only docs \\u{1b}[8mhidden\\u{202e}x"),
        "{out}"
    );
    // JSON stays exact: the same string comes back when decoded, and is safe on a terminal.
    let a = run
        .cmd()
        .args(["--json", "gates", "show", &run.id, "g", "--as", "raymond"])
        .assert();
    assert_clean("show --json", &a.get_output().stdout);
    assert_eq!(stdout_json(&a)["prompt"], hostile);
    let a = run.cmd().args(["--json", "get", "v"]).assert().success();
    assert_clean("get --json", &a.get_output().stdout);
    assert_eq!(stdout_json(&a)["value"], hostile);
    // `get` off a terminal is the value's exact bytes (it feeds programs).
    let a = run.cmd().args(["get", "v"]).assert().success();
    assert_eq!(a.get_output().stdout, hostile.as_bytes());
    // On a terminal, `get` and the approval confirmation show it escaped.
    let cmd = format!("{BIN} --run {} get v", run.id);
    if let Some((status, screen)) = on_terminal(&p, &cmd, "") {
        // The terminal itself ends lines with \r\n.
        let screen = screen.replace("\r\n", "\n");
        assert_eq!(status, 0, "{screen}");
        assert_clean("get on a terminal", screen.as_bytes());
        assert!(screen.contains("\\u{1b}[8m"), "{screen}");
    }
    gate(&run, "t", &[]);
    run.view().raw(
        &format!("UPDATE gates SET prompt = '{q}' WHERE id = 't'"),
        &format!("UPDATE openprose.gates SET prompt = '{q}' WHERE run_id = '$RUN' AND id = 't'"),
    );
    let cmd = format!("{BIN} approve {} t --as raymond", run.id);
    if let Some((_, screen)) = on_terminal(&p, &cmd, "n\n") {
        let screen = screen.replace("\r\n", "\n");
        assert_clean("the confirmation", screen.as_bytes());
        assert!(screen.contains("DROP PROD\\rRead-only"), "{screen}");
    }
}

fn a_raw_decision_is_tampering_and_a_spec_decision_is_unattested(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    gate(&run, "g", &[]);
    p.cmd().args(["gates", "verify"]).assert().success();
    // The gate decided by UPDATE alone: no audit event.
    behind_the_back(
        &run,
        "UPDATE $GATES SET status = 'approved', resolved_by = 'alice' WHERE id = 'g';",
    );
    let before = run.snapshot();
    assert_eq!(wait_code(&run, "g"), 9);
    let a = run
        .cmd()
        .args(["--json", "gates", "show", &run.id, "g", "--as", "raymond"])
        .assert()
        .failure();
    assert_eq!(code(&a), 9);
    assert_eq!(stdout_json(&a)["integrity"]["state"], "tampered");
    let (code_, v) = verify_code(&p);
    assert_eq!(code_, 9, "{v}");
    assert_eq!(v[0]["verdict"], "tampered");
    assert_eq!(v[0]["gates"][0]["gate"], "g");
    // resume does not tell the VM to go on past it: its next step is stop, and it exits 9.
    let a = run.cmd().args(["--json", "resume"]).assert().failure();
    assert_eq!(code(&a), 9);
    let g = &stdout_json(&a)["gates"][0];
    assert_eq!(g["integrity"]["state"], "tampered", "{g}");
    assert_eq!(g["next_step"]["action"], "stop", "{g}");
    let a = p.cmd().arg("doctor").assert().failure();
    assert_eq!(code(&a), 1);
    assert!(String::from_utf8_lossy(&a.get_output().stdout).contains("tampered gate"));
    // `wait`, `verify` and `doctor` only read; `show` logs its `viewed` event.
    assert_eq!(count_rows(&p, &run, "gates", "status = 'approved'"), 1);
    let _ = before;

    // The spec's own decision: UPDATE gates plus its INSERT INTO gate_audit_log. Not
    // tampering, not attested either: 10, unless accepted.
    let run2 = p.init();
    gate(&run2, "s", &[]);
    behind_the_back(
        &run2,
        &format!(
            "UPDATE $GATES SET status = 'approved', resolved_by = 'alice' WHERE id = 's';
             INSERT INTO $LOG (gate_id, run_id, event_type, principal, comment)
             VALUES ('s', '{}', 'approved', 'alice', 'looks good');",
            run2.id
        ),
    );
    assert_eq!(wait_code(&run2, "s"), 10);
    run2.cmd()
        .args(["gates", "wait", &run2.id, "s", "--accept-unattested"])
        .assert()
        .success();
    let (code_, v) = verify_code(&p);
    // The first run is still tampered: 9 wins over 10.
    assert_eq!(code_, 9, "{v}");
    let r2 = v
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run_id"] == run2.id.as_str())
        .unwrap();
    assert_eq!(r2["verdict"], "unattested", "{r2}");
    assert_eq!(r2["gates"][0]["state"], "unattested");
    let a = p
        .cmd()
        .args(["gates", "verify", "--run", &run2.id])
        .assert()
        .failure();
    assert_eq!(code(&a), 10);
}

fn a_prompt_rewritten_before_approval_is_refused(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    gate(&run, "g", &[]);
    behind_the_back(
        &run,
        "UPDATE $GATES SET prompt = 'Read-only docs update' WHERE id = 'g';",
    );
    let a = run
        .cmd()
        .args(["approve", &run.id, "g", "--yes", "--as", "raymond"])
        .assert()
        .failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    assert!(stderr(&a).contains("rewritten"), "{}", stderr(&a));
    assert_eq!(run.view().gate("g").0, "pending");
    let ev = run.view().events("g");
    assert_eq!(ev.last().unwrap().0, "refused");
    assert!(ev.last().unwrap().2["reason"]
        .as_str()
        .unwrap()
        .contains("created with"));
    let (code_, v) = verify_code(&p);
    assert_eq!(code_, 9, "{v}");
    assert!(v[0]["gates"][0]["detail"]
        .as_str()
        .unwrap()
        .contains("rewritten"));
}

/// A run with two gates, one approved and one viewed: four sealed rows.
fn sealed_run(p: &Project) -> Run {
    let run = p.init();
    gate(&run, "g", &[]);
    approve(&run, "g", "raymond");
    gate(&run, "h", &[]);
    run.cmd()
        .args(["gates", "show", &run.id, "h", "--as", "raymond"])
        .assert()
        .success();
    run
}

fn a_faithful_rechain_matches_and_every_forged_one_is_caught(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    // The test's chain hash is the binary's: recomputing an untouched log changes nothing.
    let run = sealed_run(&p);
    let rows = audit_rows(&run);
    assert_eq!(rows.len(), 5, "the genesis, then the gate's events");
    let mut prev = String::new();
    for r in &rows {
        assert_eq!(
            r.seq,
            Some(rows.iter().position(|x| x.id == r.id).unwrap() as i64 + 1)
        );
        assert_eq!(r.prev_hash.as_deref(), Some(prev.as_str()));
        assert_eq!(chain_hash(r, &prev), *r.hash.as_ref().unwrap(), "{r:?}");
        prev = r.hash.clone().unwrap();
    }
    rechain(&run);
    assert_eq!(verify_code(&p).0, 0);
    p.cmd()
        .args(["gates", "verify", "--run", &run.id])
        .assert()
        .success();

    // 1. An edit, re-chained: the decider changed, in the log and the gate alike.
    let edit = sealed_run(&p);
    behind_the_back(
        &edit,
        "UPDATE $LOG SET principal = 'mallory' WHERE event_type = 'approved';
         UPDATE $GATES SET resolved_by = 'mallory' WHERE id = 'g';",
    );
    rechain(&edit);
    let before = edit.snapshot();
    let a = p
        .cmd()
        .args(["--json", "gates", "verify", "--run", &edit.id])
        .assert()
        .failure();
    assert_eq!(code(&a), 9);
    let v = stdout_json(&a);
    assert!(
        v[0]["first_broken"]["reason"]
            .as_str()
            .unwrap()
            .contains("seal"),
        "{v}"
    );
    assert_eq!(wait_code(&edit, "g"), 9);
    assert_eq!(edit.snapshot(), before, "verify and wait write nothing");

    // 2. A row deleted from the middle, the sequence renumbered and re-chained.
    let cut = sealed_run(&p);
    behind_the_back(
        &cut,
        // (through negatives: the unique index is checked row by row on PostgreSQL)
        "DELETE FROM $LOG WHERE seq = 2; UPDATE $LOG SET seq = -seq WHERE seq > 2;
         UPDATE $LOG SET seq = -seq - 1 WHERE seq < 0;",
    );
    rechain(&cut);
    let a = p
        .cmd()
        .args(["gates", "verify", "--run", &cut.id])
        .assert()
        .failure();
    assert_eq!(code(&a), 9);
    // and deleted without renumbering: the gap itself is named.
    let gap = sealed_run(&p);
    behind_the_back(&gap, "DELETE FROM $LOG WHERE seq = 3;");
    rechain(&gap);
    let a = p
        .cmd()
        .args(["--json", "gates", "verify", "--run", &gap.id])
        .assert()
        .failure();
    assert_eq!(code(&a), 9);
    assert!(stdout_json(&a)[0]["first_broken"]["reason"]
        .as_str()
        .unwrap()
        .contains("seq 3 is missing"));

    // 3. A forged insert: an approval of h by alice, chained and carrying a seal in the right
    //    shape (another row's, and a made-up one), the gate updated to match.
    let genuine_seal = {
        let a = run
            .cmd()
            .args(["--json", "gates", "audit"])
            .assert()
            .success();
        stdout_json(&a)[0]["seal"].as_str().unwrap().to_string()
    };
    let made_up = format!(
        "{}:{}",
        genuine_seal.rsplit_once(':').unwrap().0,
        "ab".repeat(32)
    );
    for fake_seal in [genuine_seal, made_up] {
        let f = sealed_run(&p);
        let last = audit_rows(&f).pop().unwrap();
        let mut row = last.clone();
        row.seq = Some(last.seq.unwrap() + 1);
        row.event_type = "approved".into();
        row.principal = Some("alice".into());
        row.gate_id = "h".into();
        row.comment = None;
        row.metadata = Some("{}".into());
        let hash = chain_hash(&row, last.hash.as_deref().unwrap());
        behind_the_back(
            &f,
            &format!(
                "INSERT INTO $LOG (gate_id, run_id, event_type, principal, timestamp, metadata,
                                   prev_hash, hash, seq, seal)
                 VALUES ('h', '{}', 'approved', 'alice', {}, '{{}}', {}, '{hash}', {}, '{fake_seal}');
                 UPDATE $GATES SET status = 'approved', resolved_by = 'alice' WHERE id = 'h';",
                f.id,
                lit(&row.timestamp),
                lit(&last.hash),
                row.seq.unwrap(),
            ),
        );
        assert_eq!(wait_code(&f, "h"), 9, "seal {fake_seal:?}");
        let a = p
            .cmd()
            .args(["gates", "verify", "--run", &f.id])
            .assert()
            .failure();
        assert_eq!(code(&a), 9);
    }

    // 4. The last rows cut from the end, nothing re-chained: this machine's anchor notices,
    //    and still does after new events are appended over the cut.
    let tail = sealed_run(&p);
    behind_the_back(&tail, "DELETE FROM $LOG WHERE seq >= 4;");
    let a = p
        .cmd()
        .args(["--json", "gates", "verify", "--run", &tail.id])
        .assert()
        .failure();
    assert_eq!(code(&a), 9);
    assert!(stdout_json(&a)[0]["first_broken"]["reason"]
        .as_str()
        .unwrap()
        .contains("cut"));
    gate(&tail, "after", &[]);
    approve(&tail, "after", "raymond");
    let a = p
        .cmd()
        .args(["gates", "verify", "--run", &tail.id])
        .assert()
        .failure();
    assert_eq!(code(&a), 9, "ids went on, the cut stays visible");

    // 5. The `consumed` event at the end cut: it moves the anchor like every sealed event
    //    (an outside battery found it did not, and its cut went unseen and un-consumed the
    //    decision), so the cut is found.
    let consumed = p.init();
    consumed.bind("doc", "v1", None);
    gate(&consumed, "c", &["--inputs", "doc"]);
    approve(&consumed, "c", "raymond");
    consumed
        .cmd()
        .args(["gates", "wait", "c", "--timeout", "0"])
        .assert()
        .success();
    behind_the_back(&consumed, "DELETE FROM $LOG WHERE event_type = 'consumed';");
    let a = p
        .cmd()
        .args(["gates", "verify", "--run", &consumed.id])
        .assert()
        .failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
}

fn query_stops_at_its_time_limit(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let slow = match b {
        Backend::Sqlite => {
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
        }
        Backend::Postgres => "SELECT pg_sleep(30)",
    };
    if let Some(url) = &p.pg_url {
        // query runs only as a role without a superuser's powers.
        let reader = pg::as_reader(url);
        p.write(
            ".prose/.env",
            format!("OPENPROSE_POSTGRES_URL={reader}\n").as_bytes(),
        );
    }
    let before = run.snapshot();
    let start = std::time::Instant::now();
    let a = run
        .cmd()
        .args(["query", "--timeout", "1s", slow])
        .assert()
        .failure();
    assert_eq!(code(&a), 6, "{}", stderr(&a));
    assert!(stderr(&a).contains("--timeout"), "{}", stderr(&a));
    assert!(start.elapsed() < std::time::Duration::from_secs(25));
    assert_eq!(run.snapshot(), before);
    run.cmd()
        .args(["query", "--timeout", "5s", "SELECT 1 AS one"])
        .assert()
        .success();
}

/// On PostgreSQL, `query` as a superuser is refused before anything runs: no shell command on
/// the server, no server file written or read.
#[test]
fn query_refuses_a_superuser() {
    let Some(p) = Project::on(Backend::Postgres) else {
        return;
    };
    let run = p.init();
    let marker = std::env::temp_dir().join(format!("prose-pwned-{}", std::process::id()));
    let before = run.snapshot();
    for sql in [
        format!("COPY (SELECT 1) TO PROGRAM 'touch {}'", marker.display()),
        format!("COPY (SELECT 1) TO '{}'", marker.display()),
        "SELECT pg_read_file('/etc/hostname')".to_string(),
        "SELECT 1".to_string(),
    ] {
        let a = run.cmd().args(["query", &sql]).assert().failure();
        assert_eq!(code(&a), 4, "{sql}: {}", stderr(&a));
        assert!(stderr(&a).contains("will not run as"), "{}", stderr(&a));
        assert!(!marker.exists(), "{sql} ran");
        assert_eq!(run.snapshot(), before);
    }
}

/// `gates verify` over all runs fails when any cannot be read (here, a newer schema stamp no
/// build of today reads): never a quiet 0.
#[test]
fn verify_over_all_runs_fails_when_one_cannot_be_read() {
    let p = Project::new();
    let good = p.init();
    gate(&good, "g", &[]);
    let bad = p.init();
    bad.conn()
        .execute_batch("PRAGMA user_version = 99")
        .unwrap();
    let a = p
        .cmd()
        .args(["--json", "gates", "verify"])
        .assert()
        .failure();
    assert_eq!(code(&a), 1, "{}", stderr(&a));
    assert!(stderr(&a).contains(&bad.id), "{}", stderr(&a));
    let v = stdout_json(&a);
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["run_id"], good.id.as_str());
}
