//! An adversary's battery against issue 31 (binding history, forks, decisions about inputs).
//!
//! Each test states a promise and asserts it (`holds_`). The battery first found six bugs,
//! since fixed: an input looked up from a scope no sealed event named, a consumption racing
//! the first bind of an absent input, `history` answers past their budget, a version
//! attributed to prose-state after its trigger was dropped (impossible since prose-state keeps
//! its own writes' versions), and "as of" worded wrongly. Every test drives the real
//! binary and reads the database itself; raw SQL is written the way another tool (or the
//! spec's own VM) would write it.

use crate::common::{self, *};
use crate::history::history_json;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::time::Duration;

on_both!(
    holds_a_binding_in_the_gates_own_scope_hides_no_changed_input,
    holds_raw_sql_hides_no_stale_decision_even_in_nearer_scopes_property,
    holds_raw_sql_in_the_inputs_scope_never_hides_a_stale_decision_property,
    holds_consumption_never_races_the_first_bind_of_an_absent_input,
    holds_consumption_never_races_a_rebind_where_the_input_was_found,
    holds_history_answers_keep_the_budget_with_raw_long_fields,
    holds_a_dropped_history_trigger_loses_no_write_of_prose_states,
    holds_raw_writers_are_kept_in_history,
    holds_hostile_values_are_read_back_exactly_and_shown_safely,
    holds_forks_at_every_record_are_the_source_as_of_then,
    holds_fork_binds_and_ids_are_checked,
    holds_forks_carry_no_tampered_or_unattested_decision,
    holds_a_fork_is_one_moment_while_writers_go_on,
    holds_prune_during_appends_loses_nothing_and_refuses_the_pruned_past,
    holds_verify_finds_an_edited_sealed_version,
    holds_get_as_of_is_the_state_just_before_the_next_record,
    holds_every_write_is_kept_once_whoever_wrote_it_property,
    holds_concurrent_writers_number_every_version_once,
);

// ---------------------------------------------------------------------------------------
// The test's own access to the run's database (either backend), independent of the binary.

/// A direct connection to a run's database: a raw writer, as another tool would be.
enum Db {
    Lite(rusqlite::Connection),
    Pg(Box<postgres::Client>, String),
}

type Cell = Option<Vec<u8>>;

impl Db {
    fn open(run: &Run) -> Db {
        match &run.pg_url {
            Some(url) => Db::Pg(
                Box::new(postgres::Client::connect(url, postgres::NoTls).unwrap()),
                run.id.clone(),
            ),
            None => Db::Lite(run.conn()),
        }
    }

    fn is_pg(&self) -> bool {
        matches!(self, Db::Pg(..))
    }

    /// Runs a batch of SQL: the SQLite text, or the PostgreSQL one with `$RUN` replaced by
    /// the run id (quoted by the caller).
    fn exec(&mut self, sqlite: &str, pg: &str) {
        match self {
            Db::Lite(c) => c
                .execute_batch(sqlite)
                .unwrap_or_else(|e| panic!("{sqlite}: {e}")),
            Db::Pg(c, run) => c
                .batch_execute(&pg.replace("$RUN", run))
                .unwrap_or_else(|e| panic!("{pg}: {e}")),
        }
    }

    /// Rows of a query, every column as bytes (PostgreSQL: cast each to text in the query).
    fn rows(&mut self, sqlite: &str, pg: &str) -> Vec<Vec<Cell>> {
        match self {
            Db::Lite(c) => {
                let mut s = c.prepare(sqlite).unwrap();
                let n = s.column_count();
                s.query_map([], |r| {
                    Ok((0..n)
                        .map(|i| match r.get::<_, rusqlite::types::Value>(i).unwrap() {
                            rusqlite::types::Value::Null => None,
                            rusqlite::types::Value::Integer(v) => Some(v.to_string().into_bytes()),
                            rusqlite::types::Value::Real(v) => Some(v.to_string().into_bytes()),
                            rusqlite::types::Value::Text(t) => Some(t.into_bytes()),
                            rusqlite::types::Value::Blob(b) => Some(b),
                        })
                        .collect())
                })
                .unwrap()
                .map(Result::unwrap)
                .collect()
            }
            Db::Pg(c, run) => c
                .query(pg.replace("$RUN", run).as_str(), &[])
                .unwrap_or_else(|e| panic!("{pg}: {e}"))
                .iter()
                .map(|r| {
                    (0..r.len())
                        .map(|i| r.get::<_, Option<String>>(i).map(String::into_bytes))
                        .collect()
                })
                .collect(),
        }
    }

    fn one(&mut self, sqlite: &str, pg: &str) -> Cell {
        self.rows(sqlite, pg)
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().next())
            .flatten()
    }

    fn int(&mut self, sqlite: &str, pg: &str) -> i64 {
        let c = self.one(sqlite, pg).expect("a number");
        String::from_utf8(c).unwrap().parse().unwrap()
    }
}

fn q(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn digest(bytes: &[u8]) -> String {
    let h = Sha256::digest(bytes);
    format!(
        "sha256:{}",
        h.iter().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

/// The content of the root-scope binding NAME (what the program, at the root, reads): its
/// digest, None when unbound. Values here are kept inline.
fn root_digest(db: &mut Db, name: &str) -> Option<String> {
    let rows = db.rows(
        &format!(
            "SELECT value FROM bindings WHERE name = {} AND execution_id IS NULL",
            q(name)
        ),
        &format!(
            "SELECT value FROM openprose.bindings WHERE run_id = '$RUN' AND name = {} AND execution_id IS NULL",
            q(name)
        ),
    );
    rows.into_iter()
        .next()
        .map(|r| digest(r[0].as_deref().unwrap_or_default()))
}

/// The digest the gate's (first) sealed decision recorded for input NAME: Some(None) when it
/// sealed the input as absent.
fn sealed_digest(db: &mut Db, gate: &str, name: &str) -> Option<Option<String>> {
    let m = db.one(
        &format!(
            "SELECT metadata FROM gate_audit_log WHERE gate_id = {} AND event_type = 'approved' AND seq IS NOT NULL ORDER BY seq LIMIT 1",
            q(gate)
        ),
        &format!(
            "SELECT metadata FROM openprose.gate_audit_log WHERE run_id = '$RUN' AND gate_id = {} AND event_type = 'approved' AND seq IS NOT NULL ORDER BY seq LIMIT 1",
            q(gate)
        ),
    )?;
    let m: Value = serde_json::from_slice(&m).unwrap();
    let v = m["inputs"].get(name)?;
    Some(v.as_str().map(str::to_string))
}

/// Sealed `consumed` events of a gate.
fn consumed(db: &mut Db, gate: &str) -> i64 {
    db.int(
        &format!(
            "SELECT COUNT(*) FROM gate_audit_log WHERE gate_id = {} AND event_type = 'consumed' AND seq IS NOT NULL",
            q(gate)
        ),
        &format!(
            "SELECT COUNT(*)::text FROM openprose.gate_audit_log WHERE run_id = '$RUN' AND gate_id = {} AND event_type = 'consumed' AND seq IS NOT NULL",
            q(gate)
        ),
    )
}

/// The execution record a gate was opened at (its `approve GATE:` record).
fn gate_record(db: &mut Db, gate: &str) -> i64 {
    db.int(
        &format!("SELECT execution_id FROM gates WHERE id = {}", q(gate)),
        &format!(
            "SELECT execution_id::text FROM openprose.gates WHERE run_id = '$RUN' AND id = {}",
            q(gate)
        ),
    )
}

// ---------------------------------------------------------------------------------------
// The binary.

fn bind(run: &Run, name: &str, value: &[u8]) {
    run.cmd()
        .args(["bind", name])
        .write_stdin(value.to_vec())
        .assert()
        .success();
}

fn gate_about(run: &Run, gate: &str, inputs: &str) {
    run.cmd()
        .args([
            "gates", "create", gate, "--prompt", "Go?", "--inputs", inputs,
        ])
        .assert()
        .success();
}

fn approve(run: &Run, gate: &str) {
    run.cmd()
        .args(["approve", gate, "--yes", "--as", "alice"])
        .assert()
        .success();
}

fn wait(run: &Run, gate: &str) -> i32 {
    code(
        &run.cmd()
            .args(["gates", "wait", gate, "--timeout", "0"])
            .assert(),
    )
}

// The same steps run in the test's process, for the properties whose point is the rule (each
// step as a process would cost more than the rule: 3,000 processes a backend).

fn here_ok(run: &Run, args: &[&str]) {
    let ran = run.here(args);
    assert_eq!(ran.code, 0, "{args:?}: {ran:?}");
}

fn wait_here(run: &Run, gate: &str) -> i32 {
    run.here(&["gates", "wait", gate, "--timeout", "0"]).code as i32
}

fn exec(run: &Run, index: i64) -> i64 {
    run.exec(index, &format!("step {index}"), "completed", None)
}

/// `get NAME --as-of RECORD`'s value.
fn get_as_of(run: &Run, name: &str, record: i64) -> Vec<u8> {
    run.cmd()
        .args(["get", name, "--as-of", &record.to_string()])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone()
}

/// A small deterministic generator (xorshift), so a failure names a reproducible case.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len() as u64) as usize]
    }
}

// ---------------------------------------------------------------------------------------
// 1. Stale decisions cannot be hidden.

/// A gate opened at the root is about the root's `topic`. Raw SQL changes the root's topic to
/// EVIL and binds `topic` = the approved content in the scope of the gate's own `approve`
/// record (a scope no program step runs in). `gates wait` resolves the input from the gate's
/// record, finds the approved content, and consumes the decision: the program, at the root,
/// then reads EVIL under an approval of "A". docs/history.md: "raw SQL that changes an input
/// cannot hide the change".
fn holds_a_binding_in_the_gates_own_scope_hides_no_changed_input(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    bind(&run, "topic", b"A");
    gate_about(&run, "review", "topic");
    approve(&run, "review");
    let mut db = Db::open(&run);
    let at = gate_record(&mut db, "review");
    db.exec(
        &format!(
            "UPDATE bindings SET value = 'EVIL' WHERE name = 'topic' AND execution_id IS NULL;
             INSERT INTO bindings (name, execution_id, kind, value) VALUES ('topic', {at}, 'input', 'A');"
        ),
        &format!(
            "UPDATE openprose.bindings SET value = 'EVIL' WHERE run_id = '$RUN' AND name = 'topic' AND execution_id IS NULL;
             INSERT INTO openprose.bindings (name, run_id, execution_id, kind, value) VALUES ('topic', '$RUN', {at}, 'input', 'A');"
        ),
    );
    // The raw UPDATE's version is stamped by the server's trigger in its own second: a raw
    // writer's time is never compared with the row's, so the program reads EVIL.
    assert_eq!(run.get("topic", None), b"EVIL", "the program reads EVIL");
    let code = wait(&run, "review");
    assert_ne!(
        code, 0,
        "gates wait returned the approval of topic=\"A\" while the root's topic is \"EVIL\" (consumed: {})",
        consumed(&mut db, "review")
    );
}

/// N random sequences of raw mutations (and legit rebinds) before consumption, each followed
/// by `gates wait --timeout 0`. The promise: exit 0 only if the input's content now (at the
/// root, where the program reads it) is the sealed one, or a sealed `consumed` event came
/// before the change. With `nearer`, the mutations include a binding in a nearer scope than
/// where the gate found the input and a rewrite of `gates.execution_id` (the gate's scope,
/// which no sealed event records).
fn property(b: Backend, nearer: bool, iterations: usize) {
    let Some(p) = Project::on(b) else { return };
    let seed = if nearer { 0x5eed_0031 } else { 0x0031_5eed };
    let mut rng = Rng(seed ^ (b == Backend::Postgres) as u64);
    let values = ["A", "B", "C"];
    let kinds = if nearer { 13 } else { 10 };
    let mut failures = Vec::new();
    let (mut zeros, mut stale) = (0, 0);
    for i in 0..iterations {
        // Each sequence in a run of its own: one sequence's raw SQL (a forged gate row, an
        // unsealed event) leaves no later one in a run already tampered with, and no command
        // reads the log of every sequence before it.
        let run = p.init();
        let mut db = Db::open(&run);
        let name = format!("in{i}");
        let gate = format!("g{i}");
        let v0 = rng.pick(&values);
        here_ok(&run, &["bind", &name, v0]);
        here_ok(
            &run,
            &[
                "gates", "create", &gate, "--prompt", "Go?", "--inputs", &name,
            ],
        );
        here_ok(&run, &["approve", &gate, "--yes", "--as", "alice"]);
        let at = gate_record(&mut db, &gate);
        let early = rng.below(5) == 0;
        if early {
            assert_eq!(wait_here(&run, &gate), 0, "{gate}: the first wait consumes");
        }
        let nq = q(&name);
        let mut log = vec![format!(
            "bind {name}={v0}; gate {gate} (record {at}); approve"
        )];
        if early {
            log.push("wait (consumed)".into());
        }
        for _ in 0..1 + rng.below(4) {
            let v = rng.pick(&values);
            let step = rng.below(kinds);
            let (lite, pg) = match step {
                0 => (
                    format!("UPDATE bindings SET value = '{v}' WHERE name = {nq} AND execution_id IS NULL"),
                    format!("UPDATE openprose.bindings SET value = '{v}' WHERE run_id = '$RUN' AND name = {nq} AND execution_id IS NULL"),
                ),
                1 => (
                    format!("DELETE FROM bindings WHERE name = {nq} AND execution_id IS NULL"),
                    format!("DELETE FROM openprose.bindings WHERE run_id = '$RUN' AND name = {nq} AND execution_id IS NULL"),
                ),
                2 => (
                    format!("DELETE FROM bindings WHERE name = {nq} AND execution_id IS NULL;
                             INSERT INTO bindings (name, kind, value) VALUES ({nq}, 'input', '{v}')"),
                    format!("DELETE FROM openprose.bindings WHERE run_id = '$RUN' AND name = {nq} AND execution_id IS NULL;
                             INSERT INTO openprose.bindings (name, run_id, kind, value) VALUES ({nq}, '$RUN', 'input', '{v}')"),
                ),
                3 => (
                    format!("INSERT OR REPLACE INTO bindings (name, execution_id, kind, value) VALUES ({nq}, NULL, 'let', '{v}')"),
                    format!("INSERT INTO openprose.bindings (name, run_id, kind, value) VALUES ({nq}, '$RUN', 'let', '{v}')
                             ON CONFLICT (name, run_id, (COALESCE(execution_id, -1))) DO UPDATE SET value = excluded.value"),
                ),
                4 => (
                    format!("UPDATE binding_history SET value = '{v}' WHERE name = {nq}"),
                    format!("UPDATE openprose.binding_history SET value = '{v}' WHERE run_id = '$RUN' AND name = {nq}"),
                ),
                5 => (
                    format!("DELETE FROM binding_history WHERE name = {nq}"),
                    format!("DELETE FROM openprose.binding_history WHERE run_id = '$RUN' AND name = {nq}"),
                ),
                6 => (
                    format!("INSERT INTO gate_audit_log (gate_id, run_id, event_type, principal, metadata)
                             VALUES ('{gate}', (SELECT id FROM run), 'consumed', 'system', '{{\"instance\":1}}')"),
                    format!("INSERT INTO openprose.gate_audit_log (gate_id, run_id, event_type, principal, metadata)
                             VALUES ('{gate}', '$RUN', 'consumed', 'system', '{{\"instance\":1}}')"),
                ),
                7 => {
                    let s = rng.pick(&["pending", "approved", "rejected"]);
                    (
                        format!("UPDATE gates SET status = '{s}', resolved_by = 'alice' WHERE id = '{gate}'"),
                        format!("UPDATE openprose.gates SET status = '{s}', resolved_by = 'alice' WHERE run_id = '$RUN' AND id = '{gate}'"),
                    )
                }
                8 => {
                    let a = run.here(&["bind", &name, v]);
                    // A raw `kind = 'const'` (step 9) makes the tool refuse the rebind.
                    assert!(matches!(a.code, 0 | 4), "{a:?}");
                    log.push(format!("prose-state bind {name}={v} (exit {})", a.code));
                    continue;
                }
                9 => (
                    format!("UPDATE bindings SET kind = 'const' WHERE name = {nq}"),
                    format!("UPDATE openprose.bindings SET kind = 'const' WHERE run_id = '$RUN' AND name = {nq}"),
                ),
                // A binding nearer than the root, in the gate's own record's scope.
                10 => (
                    format!("INSERT OR REPLACE INTO bindings (name, execution_id, kind, value) VALUES ({nq}, {at}, 'input', '{v}')"),
                    format!("INSERT INTO openprose.bindings (name, run_id, execution_id, kind, value) VALUES ({nq}, '$RUN', {at}, 'input', '{v}')
                             ON CONFLICT (name, run_id, (COALESCE(execution_id, -1))) DO UPDATE SET value = excluded.value"),
                ),
                // The gate moved to another record, whose scope holds the name.
                11 => (
                    format!("INSERT INTO execution (statement_text, status) VALUES ('x', 'completed');
                             INSERT OR REPLACE INTO bindings (name, execution_id, kind, value) VALUES ({nq}, (SELECT MAX(id) FROM execution), 'input', '{v}');
                             UPDATE gates SET execution_id = (SELECT MAX(id) FROM execution) WHERE id = '{gate}'"),
                    format!("INSERT INTO openprose.execution (run_id, statement_text, status) VALUES ('$RUN', 'x', 'completed');
                             INSERT INTO openprose.bindings (name, run_id, execution_id, kind, value) VALUES ({nq}, '$RUN', (SELECT MAX(id) FROM openprose.execution WHERE run_id = '$RUN'), 'input', '{v}');
                             UPDATE openprose.gates SET execution_id = (SELECT MAX(id) FROM openprose.execution WHERE run_id = '$RUN') WHERE run_id = '$RUN' AND id = '{gate}'"),
                ),
                // The root changed, the approved content put in the gate's own scope.
                _ => (
                    format!("UPDATE bindings SET value = '{v}' WHERE name = {nq} AND execution_id IS NULL;
                             INSERT OR REPLACE INTO bindings (name, execution_id, kind, value) VALUES ({nq}, {at}, 'input', '{v0}')"),
                    format!("UPDATE openprose.bindings SET value = '{v}' WHERE run_id = '$RUN' AND name = {nq} AND execution_id IS NULL;
                             INSERT INTO openprose.bindings (name, run_id, execution_id, kind, value) VALUES ({nq}, '$RUN', {at}, 'input', '{v0}')
                             ON CONFLICT (name, run_id, (COALESCE(execution_id, -1))) DO UPDATE SET value = excluded.value"),
                ),
            };
            db.exec(&lite, &pg);
            log.push(if db.is_pg() { pg } else { lite });
        }
        let code = wait_here(&run, &gate);
        let sealed = sealed_digest(&mut db, &gate, &name).expect("a sealed decision");
        let now = root_digest(&mut db, &name);
        if code == 0 {
            zeros += 1;
            if !early && now != sealed {
                failures.push(format!(
                    "{gate}: exit 0 with {name} now {now:?}, sealed {sealed:?}, after:\n    {}",
                    log.join("\n    ")
                ));
                if nearer {
                    break;
                }
            }
        }
        if code == 11 {
            stale += 1;
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {iterations} sequences hid a change from gates wait:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Not vacuous: both outcomes were reached.
    assert!(zeros > 0 && stale > 0, "exit 0: {zeros}, exit 11: {stale}");
}

fn holds_raw_sql_in_the_inputs_scope_never_hides_a_stale_decision_property(b: Backend) {
    property(b, false, 150);
}

fn holds_raw_sql_hides_no_stale_decision_even_in_nearer_scopes_property(b: Backend) {
    property(b, true, 150);
}

// ---------------------------------------------------------------------------------------
// 2. Consumption races.

/// Holds the run's write lock (SQLite: `BEGIN IMMEDIATE`; PostgreSQL: the run's row
/// `FOR UPDATE`, as prose-state's serialised writes take it), runs `gates wait` (which reads
/// the inputs, then blocks on the lock to record consumption), writes `sql` in the lock's
/// transaction, and commits: the write lands between the wait's read and its consumption,
/// the schedule a concurrent writer can always hit.
fn wait_around(run: &Run, gate: &str, lite: &str, pg: &str) -> i32 {
    let mut db = Db::open(run);
    match &mut db {
        Db::Lite(c) => c.execute_batch("BEGIN IMMEDIATE").unwrap(),
        Db::Pg(c, id) => c
            .batch_execute(&format!(
                "BEGIN; SELECT 1 FROM openprose.run WHERE id = {} FOR UPDATE",
                q(id)
            ))
            .unwrap(),
    }
    let child = run
        .std_cmd()
        .args(["gates", "wait", gate, "--timeout", "0"])
        .env("PROSE_STATE_BUSY_TIMEOUT", "20000")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    db.exec(&format!("{lite}; COMMIT"), &format!("{pg}; COMMIT"));
    let out = child.wait_with_output().unwrap();
    out.status.code().unwrap_or(-1)
}

/// A decision sealed `topic` as absent (the person approved before it was bound). A bind of
/// `topic` lands between `gates wait`'s read and its consumption: the consumption's check
/// skips inputs that were absent when read, so the decision is consumed with topic bound to
/// content it never sealed. (Deterministic here by holding the write lock; a concurrent
/// `bind` hits the same window by chance.)
fn holds_consumption_never_races_the_first_bind_of_an_absent_input(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    gate_about(&run, "review", "topic");
    approve(&run, "review");
    let mut db = Db::open(&run);
    assert_eq!(sealed_digest(&mut db, "review", "topic"), Some(None));
    let code = wait_around(
        &run,
        "review",
        "INSERT INTO bindings (name, execution_id, kind, value) VALUES ('topic', NULL, 'input', 'B')",
        "INSERT INTO openprose.bindings (name, run_id, kind, value) VALUES ('topic', '$RUN', 'input', 'B')",
    );
    let n = consumed(&mut db, "review");
    assert_eq!(run.get("topic", None), b"B");
    assert!(
        !(code == 0 || n > 0),
        "the decision (topic sealed absent) was consumed (exit {code}, {n} consumed events) after topic was bound to \"B\" before the consumption committed"
    );
}

/// The same schedule with the input found (root) and rebound there: the consumption's
/// version check sees it, and the decision is reported stale, never consumed.
fn holds_consumption_never_races_a_rebind_where_the_input_was_found(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    bind(&run, "topic", b"A");
    gate_about(&run, "review", "topic");
    approve(&run, "review");
    let code = wait_around(
        &run,
        "review",
        "UPDATE bindings SET value = 'B' WHERE name = 'topic'",
        "UPDATE openprose.bindings SET value = 'B' WHERE run_id = '$RUN' AND name = 'topic'",
    );
    let mut db = Db::open(&run);
    assert_eq!(code, 11);
    assert_eq!(consumed(&mut db, "review"), 0);
}

/// Many iterations of `bind topic` racing `gates wait` in separate processes. The order of
/// every history row and audit row is recorded by triggers of the test's own into a side
/// table (the server serialises these two writes: the run row, FOR SHARE against FOR
/// UPDATE), so the content of `topic` at the moment of consumption is known exactly: it must
/// be the sealed one. On a server only: prose-state's SQLite connections fire no trigger
/// (docs/database.md), so a trigger of the test's own would see none of its writes there; a
/// SQLite file has one writer at a time, and the consumption's check and event are one
/// IMMEDIATE transaction (the two races above check what it decides, on both backends).
#[test]
fn holds_concurrent_rebinds_never_slip_past_consumption() {
    let Some(p) = Project::on(Backend::Postgres) else {
        return;
    };
    let run = p.init();
    let mut db = Db::open(&run);
    db.exec(
        "",
        "CREATE TABLE public.x_order (n BIGSERIAL PRIMARY KEY, what TEXT, name TEXT, value TEXT, gate TEXT);
         CREATE FUNCTION public.x_order_h() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN
           INSERT INTO public.x_order (what, name, value) VALUES ('h', NEW.name, NEW.value); RETURN NULL; END; $f$;
         CREATE FUNCTION public.x_order_a() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN
           IF NEW.event_type = 'consumed' THEN INSERT INTO public.x_order (what, gate) VALUES ('c', NEW.gate_id); END IF;
           RETURN NULL; END; $f$;
         CREATE TRIGGER x_order_h AFTER INSERT ON openprose.binding_history FOR EACH ROW EXECUTE FUNCTION public.x_order_h();
         CREATE TRIGGER x_order_a AFTER INSERT ON openprose.gate_audit_log FOR EACH ROW EXECUTE FUNCTION public.x_order_a();",
    );
    let iterations = 25;
    let mut sealed = Vec::new();
    for i in 0..iterations {
        let name = format!("t{i}");
        let gate = format!("r{i}");
        bind(&run, &name, b"A");
        gate_about(&run, &gate, &name);
        approve(&run, &gate);
        let mut w = run
            .std_cmd()
            .args(["gates", "wait", &gate, "--timeout", "0"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // The binds start 0-40 ms after the wait, varied, so that some iterations race the
        // wait's consumption and some find it done: a fast machine's binds must not win
        // every race and leave nothing checked.
        std::thread::sleep(std::time::Duration::from_millis(10 * (i % 5) as u64));
        let mut binds: Vec<_> = ["B", "A", "C"]
            .iter()
            .map(|v| {
                run.std_cmd()
                    .args(["bind", &name, v])
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        w.wait().unwrap();
        for c in &mut binds {
            c.wait().unwrap();
        }
        sealed.push((name, gate));
    }
    let order = db.rows(
        "",
        "SELECT what, name, value, gate FROM public.x_order ORDER BY n",
    );
    let s = |c: &Cell| String::from_utf8(c.clone().unwrap_or_default()).unwrap();
    let mut checked = 0;
    for (name, gate) in &sealed {
        let Some(at) = order
            .iter()
            .position(|r| s(&r[0]) == "c" && s(&r[3]) == *gate)
        else {
            continue;
        };
        checked += 1;
        let last = order[..at]
            .iter()
            .rev()
            .find(|r| s(&r[0]) == "h" && s(&r[1]) == *name)
            .map(|r| s(&r[2]));
        assert_eq!(
            last.as_deref(),
            Some("A"),
            "{gate} was consumed while {name} held {last:?}, not the sealed \"A\""
        );
    }
    assert!(checked > 0, "no iteration consumed");
}

// ---------------------------------------------------------------------------------------
// 3. History completeness, hostile names and values, the size budget.

/// The MCP answer budget (docs: about 32 KiB) for `history`: raw writers' versions with long
/// fields the spec's own SQL may write (SQLite: a long `kind`; either: a long principal in
/// `binding_history`) make `history --json` (and the MCP `history` tool, which answers with
/// the same document) hundreds of KiB.
fn holds_history_answers_keep_the_budget_with_raw_long_fields(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    bind(&run, "k", b"v0");
    let mut db = Db::open(&run);
    let long = "K".repeat(20_000);
    for i in 0..30 {
        db.exec(
            &format!(
                "INSERT OR REPLACE INTO bindings (name, execution_id, kind, value) VALUES ('k', NULL, '{long}', 'v{i}')"
            ),
            &format!("UPDATE openprose.bindings SET value = 'v{i}' WHERE run_id = '$RUN' AND name = 'k'"),
        );
    }
    db.exec(
        &format!("UPDATE binding_history SET principal = '{long}' WHERE name = 'k' AND principal IS NULL"),
        &format!("UPDATE openprose.binding_history SET principal = '{long}' WHERE run_id = '$RUN' AND name = 'k' AND principal IS NULL"),
    );
    let mut sizes = Vec::new();
    for args in [
        &["history", "k", "--json"][..],
        &["history", "k", "--json", "--limit", "100"],
    ] {
        let out = run.cmd().args(args).assert().success();
        sizes.push((args.join(" "), out.get_output().stdout.len()));
    }
    let mcp = mcp_history_answer(&p, &run, json!({"name": "k", "limit": 100}));
    sizes.push(("MCP history limit=100".into(), mcp));
    assert!(
        sizes.iter().all(|(_, n)| *n <= 32 * 1024),
        "answers over 32 KiB: {sizes:?}"
    );
}

/// The text of the MCP `history` tool's answer, through the rmcp client (a VM session).
fn mcp_history_answer(p: &Project, run: &Run, args: Value) -> usize {
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::TokioChildProcess;
    use rmcp::ServiceExt;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.args(["--run", &run.id, "mcp", "--role", "vm", "--agent", "bot"])
            .current_dir(p.root())
            .env("HOME", common::test_home(p.root()))
            .stderr(std::process::Stdio::null());
        for var in CLEARED_ENV {
            cmd.env_remove(var);
        }
        let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
        let Value::Object(args) = args else { panic!() };
        let r = client
            .call_tool(CallToolRequestParams::new("history").with_arguments(args))
            .await
            .unwrap();
        let text = serde_json::to_value(&r.content).unwrap()[0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        client.cancel().await.unwrap();
        text.len()
    })
}

/// A raw `DROP TRIGGER` of the history trigger. Once, prose-state's own binds then kept no
/// version, and its attribution step (an UPDATE of the binding's newest history row whose
/// principal was NULL) signed the raw writer's version with the binder's name; nothing
/// reported the missing trigger. Now prose-state keeps its own writes' versions itself, so
/// a dropped trigger loses none of them and can sign no raw version; what it loses are raw
/// writers' changes, which `doctor` reports (naming the trigger) and `doctor --fix` marks:
/// history goes on from a version that says older ones were not kept.
fn holds_a_dropped_history_trigger_loses_no_write_of_prose_states(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["bind", "x", "v1", "--as", "alice"])
        .assert()
        .success();
    run.cmd()
        .args([
            "exec-append",
            "--index",
            "1",
            "--text",
            "s",
            "--status",
            "completed",
        ])
        .assert()
        .success();
    let mut db = Db::open(&run);
    let record = db.int(
        "SELECT MAX(id) FROM execution",
        "SELECT MAX(id)::text FROM openprose.execution WHERE run_id = '$RUN'",
    );
    db.exec(
        "UPDATE bindings SET value = 'raw' WHERE name = 'x';
         DROP TRIGGER binding_history_version;",
        "UPDATE openprose.bindings SET value = 'raw' WHERE run_id = '$RUN' AND name = 'x';
         DROP TRIGGER bindings_version ON openprose.bindings;",
    );
    // prose-state's write is kept, as its writer's; the raw writer's version before it stays
    // unattributed.
    run.cmd()
        .args(["bind", "x", "v2", "--as", "mallory"])
        .assert()
        .success();
    assert_eq!(run.get("x", None), b"v2");
    let by = |db: &mut Db, value: &str| {
        db.rows(
            &format!("SELECT principal FROM binding_history WHERE name = 'x' AND value = '{value}'"),
            &format!("SELECT principal FROM openprose.binding_history WHERE run_id = '$RUN' AND name = 'x' AND value = '{value}'"),
        )
    };
    assert_eq!(
        by(&mut db, "raw"),
        vec![vec![None]],
        "the raw writer's version"
    );
    assert_eq!(
        by(&mut db, "v2"),
        vec![vec![Some(b"mallory".to_vec())]],
        "prose-state's version, kept once"
    );
    // A raw write now is not kept: the trigger that would keep it is gone.
    db.exec(
        "UPDATE bindings SET value = 'lost' WHERE name = 'x';",
        "UPDATE openprose.bindings SET value = 'lost' WHERE run_id = '$RUN' AND name = 'x';",
    );
    assert!(by(&mut db, "lost").is_empty());

    // doctor names the missing trigger and changes nothing; --fix makes it again, and each
    // binding's history goes on from a version marked as following a time it was not kept.
    let versions = |db: &mut Db| {
        db.int(
            "SELECT COUNT(*) FROM binding_history",
            "SELECT COUNT(*)::text FROM openprose.binding_history WHERE run_id = '$RUN'",
        )
    };
    let before = versions(&mut db);
    let a = run.cmd().args(["--json", "doctor"]).assert().failure();
    assert_eq!(code(&a), 1, "{}", stderr(&a));
    let d: Value = serde_json::from_slice(&a.get_output().stdout).unwrap();
    // On PostgreSQL the trigger that numbers an update keeps its version (schema 11).
    let trigger = if db.is_pg() {
        "bindings_version"
    } else {
        "binding_history_version"
    };
    let found: Vec<&Value> = d["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "missing trigger")
        .collect();
    assert_eq!(found.len(), 1, "{d}");
    assert!(
        found[0]["detail"].as_str().unwrap().contains(trigger),
        "{d}"
    );
    assert_eq!(found[0]["fixed"], false);
    assert_eq!(versions(&mut db), before, "doctor without --fix wrote");
    // A record after the raw write, before the fix: as of record 1, x is not known.
    run.cmd()
        .args([
            "exec-append",
            "--index",
            "2",
            "--text",
            "t",
            "--status",
            "completed",
        ])
        .assert()
        .success();
    let a = run.cmd().args(["--json", "doctor", "--fix"]).assert();
    let d: Value = serde_json::from_slice(&a.get_output().stdout).unwrap();
    assert!(
        d["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["kind"] == "missing trigger" && p["fixed"] == true),
        "{d}"
    );
    run.cmd().args(["doctor"]).assert().success();
    // x goes on from a version marked as following the gap, holding what the raw write left.
    let out = run
        .cmd()
        .args(["--json", "history", "x"])
        .assert()
        .success();
    let h: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let newest = &h["versions"][0];
    assert_eq!(newest["older_not_kept"], true, "{h}");
    assert_eq!(newest["preview"], "lost", "{h}");
    assert_eq!(h["versions"][1]["older_not_kept"], false, "{h}");
    // Binds work again, and are attributed.
    run.cmd()
        .args(["bind", "x", "v3", "--as", "alice"])
        .assert()
        .success();
    let by = db.one(
        "SELECT principal FROM binding_history WHERE name = 'x' AND value = 'v3'",
        "SELECT principal FROM openprose.binding_history WHERE run_id = '$RUN' AND name = 'x' AND value = 'v3'",
    );
    assert_eq!(by.as_deref(), Some(&b"alice"[..]));
    // After record 1 and before the fix, x may have changed without a trace: reading it as
    // of then is refused, never answered with a value history did not see.
    let a = run
        .cmd()
        .args(["get", "x", "--as-of", &record.to_string()])
        .assert()
        .failure();
    assert!(stderr(&a).contains("is not known"), "{}", stderr(&a));
}

/// Raw writers' changes: kept as history.md says (UPDATE, the spec's INSERT OR REPLACE,
/// REPLACE INTO, an upsert, DELETE, and REPLACE under recursive_triggers, which adds the
/// delete); `get --version` reads each back.
fn holds_raw_writers_are_kept_in_history(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    bind(&run, "x", b"v1");
    let mut db = Db::open(&run);
    let want: Vec<Option<&str>> = if db.is_pg() {
        db.exec(
            "",
            "UPDATE openprose.bindings SET value = 'v2' WHERE run_id = '$RUN' AND name = 'x';
             INSERT INTO openprose.bindings (name, run_id, kind, value) VALUES ('x', '$RUN', 'let', 'v3')
               ON CONFLICT (name, run_id, (COALESCE(execution_id, -1))) DO UPDATE SET value = excluded.value;
             DELETE FROM openprose.bindings WHERE run_id = '$RUN' AND name = 'x';
             INSERT INTO openprose.bindings (name, run_id, kind, value) VALUES ('x', '$RUN', 'let', 'v4');",
        );
        vec![Some("v1"), Some("v2"), Some("v3"), None, Some("v4")]
    } else {
        db.exec(
            "INSERT OR REPLACE INTO bindings (name, execution_id, kind, value) VALUES ('x', NULL, 'let', 'v2');
             UPDATE bindings SET value = 'v3' WHERE name = 'x';
             REPLACE INTO bindings (name, execution_id, kind, value) VALUES ('x', NULL, 'let', 'v4');
             INSERT INTO bindings (name, execution_id, kind, value) VALUES ('x', NULL, 'let', 'v5')
               ON CONFLICT (name, IFNULL(execution_id, -1)) DO UPDATE SET value = excluded.value;
             PRAGMA recursive_triggers = ON;
             REPLACE INTO bindings (name, execution_id, kind, value) VALUES ('x', NULL, 'let', 'v6');
             PRAGMA recursive_triggers = OFF;
             DELETE FROM bindings WHERE name = 'x';
             INSERT INTO bindings (name, kind, value) VALUES ('x', 'let', 'v7');",
            "",
        );
        vec![
            Some("v1"),
            Some("v2"),
            Some("v3"),
            Some("v4"),
            Some("v5"),
            None,
            Some("v6"),
            None,
            Some("v7"),
        ]
    };
    let out = run
        .cmd()
        .args(["history", "x", "--json"])
        .assert()
        .success();
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let got: Vec<(u64, String, String)> = v["versions"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .map(|r| {
            (
                r["version"].as_u64().unwrap(),
                r["change"].as_str().unwrap().to_string(),
                r["by"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(got.len(), want.len(), "{v}");
    for ((n, change, by), w) in got.iter().zip(&want) {
        match w {
            Some(value) => {
                assert_eq!(change, "set", "{v}");
                let read = run
                    .cmd()
                    .args(["get", "x", "--version", &n.to_string()])
                    .assert()
                    .success();
                assert_eq!(read.get_output().stdout, value.as_bytes(), "version {n}");
            }
            None => assert_eq!(change, "deleted", "{v}"),
        }
        if *n > 1 {
            assert_eq!(by, "unknown", "a raw writer's version: {v}");
        }
    }
}

/// Control, bidirectional and zero-width characters in values (and, written raw, in names),
/// a 1 MB value, and on SQLite bytes that are not UTF-8: `get --version` and `get --as-of`
/// give the exact bytes; `history`, `fork` and `diff` print no raw control character, their
/// JSON parses.
fn holds_hostile_values_are_read_back_exactly_and_shown_safely(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    // PostgreSQL text holds no NUL (refused with a one-line error, as documented).
    let nul = if b == Backend::Postgres { "" } else { "\u{0}" };
    let hostile = format!("a\u{1b}[2J\u{1b}]0;pwned\u{7}\u{202e}\u{200b}\r\nb{nul}c").into_bytes();
    let big: Vec<u8> = (0..1_000_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let r1 = exec(&run, 1);
    bind(&run, "h", &hostile);
    let r2 = exec(&run, 2);
    bind(&run, "h", &big);
    let r3 = exec(&run, 3);
    let mut db = Db::open(&run);
    let get = |args: &[&str]| {
        run.cmd()
            .args(args)
            .assert()
            .success()
            .get_output()
            .stdout
            .clone()
    };
    // "As of" a record runs up to the next record (holds_get_as_of_is_the_state_just_...).
    let same = |what: &str, got: Vec<u8>, want: &[u8]| {
        assert!(
            got == want,
            "{what}: {} bytes, not the {} written",
            got.len(),
            want.len()
        )
    };
    same("version 1", get(&["get", "h", "--version", "1"]), &hostile);
    same("version 2", get(&["get", "h", "--version", "2"]), &big);
    same(
        "as of r1",
        get(&["get", "h", "--as-of", &r1.to_string()]),
        &hostile,
    );
    same(
        "as of r2",
        get(&["get", "h", "--as-of", &r2.to_string()]),
        &big,
    );
    same(
        "as of r3",
        get(&["get", "h", "--as-of", &r3.to_string()]),
        &big,
    );
    // Written raw under a plain name: a value that is not UTF-8 (SQLite) or holds controls.
    db.exec(
        "INSERT INTO bindings (name, kind, value) VALUES ('raw', 'let', x'fffe1b5b324a00');
         UPDATE bindings SET value = 'second' WHERE name = 'raw';",
        "INSERT INTO openprose.bindings (name, run_id, kind, value) VALUES ('raw', '$RUN', 'let', E'\\x1b[2J\\u202e');
         UPDATE openprose.bindings SET value = 'second' WHERE run_id = '$RUN' AND name = 'raw';",
    );
    let first = get(&["get", "raw", "--version", "1"]);
    if db.is_pg() {
        assert_eq!(first, "\u{1b}[2J\u{202e}".as_bytes());
    } else {
        assert_eq!(first, b"\xff\xfe\x1b[2J\x00");
    }
    let fork = run
        .cmd()
        .args(["fork", "--at", &r3.to_string(), "--run-id", "hostile-fork"])
        .assert()
        .success();
    let texts = vec![
        ("history h", get(&["history", "h"])),
        ("history raw", get(&["history", "raw"])),
        ("fork", fork.get_output().stdout.clone()),
        (
            "diff",
            p.cmd()
                .args(["diff", &run.id, "hostile-fork"])
                .assert()
                .get_output()
                .stdout
                .clone(),
        ),
    ];
    for (what, t) in &texts {
        let s = String::from_utf8_lossy(t);
        assert!(
            !s.chars().any(|c| (c.is_control() && c != '\n')
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200b}')),
            "{what} prints a raw control or bidi character: {s:?}"
        );
        assert!(t.len() < 64 * 1024, "{what}: {} bytes", t.len());
    }
    for args in [
        &["history", "h", "--json"][..],
        &["history", "raw", "--json"],
    ] {
        let out = get(args);
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert!(out.len() < 32 * 1024, "{args:?}: {}", out.len());
        assert!(v["versions"].as_array().is_some_and(|a| !a.is_empty()));
    }
    let out = p
        .cmd()
        .args(["--json", "diff", &run.id, "hostile-fork"])
        .assert()
        .get_output()
        .stdout
        .clone();
    serde_json::from_slice::<Value>(&out).unwrap();
    assert!(out.len() < 32 * 1024);
    // Written raw: a name the tool refuses. `history` refuses it (exit 2); a fork of the run
    // is refused whole, with the name escaped on one line, and nothing made.
    let evil_name = "evil\u{1b}[31m\u{202e}\u{200b}";
    db.exec(
        &format!("INSERT INTO bindings (name, kind, value) VALUES ({}, 'let', 'x')", q(evil_name)),
        &format!("INSERT INTO openprose.bindings (name, run_id, kind, value) VALUES ({}, '$RUN', 'let', 'x')", q(evil_name)),
    );
    assert_eq!(code(&run.cmd().args(["history", evil_name]).assert()), 2);
    let a = run
        .cmd()
        .args(["fork", "--at", &r3.to_string(), "--run-id", "evil-fork"])
        .assert();
    assert_ne!(code(&a), 0);
    let e = stderr(&a);
    assert!(
        !e.contains('\u{1b}') && !e.contains('\u{202e}') && e.trim_end().lines().count() == 1,
        "{e:?}"
    );
    assert!(!p.root().join(".prose/runs/evil-fork").exists());
}

// ---------------------------------------------------------------------------------------
// 4. Forks.

/// Every name's value as `get` reads it at the root (None: unbound), by name.
fn values(run: &Run, names: &[&str], as_of: Option<i64>) -> Vec<Option<Vec<u8>>> {
    names
        .iter()
        .map(|n| {
            let mut c = run.cmd();
            c.args(["get", n]);
            if let Some(r) = as_of {
                c.args(["--as-of", &r.to_string()]);
            }
            let a = c.assert();
            match code(&a) {
                0 => Some(a.get_output().stdout.clone()),
                3 => None,
                other => panic!("get {n} (as of {as_of:?}): exit {other}: {}", stderr(&a)),
            }
        })
        .collect()
}

/// A scripted program (binds between records, an append accumulator, a gate and its
/// approval, a deletion, a value bound before any record), forked at each of its records:
/// each fork's bindings are the source's `get --as-of` that record, its records the source's
/// up to it, and the source is unchanged.
fn holds_forks_at_every_record_are_the_source_as_of_then(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    bind(&run, "early", b"before any record");
    exec(&run, 1);
    bind(&run, "topic", b"A");
    run.cmd()
        .args(["bind", "acc", "--append", "1"])
        .assert()
        .success();
    exec(&run, 2);
    gate_about(&run, "review", "topic");
    approve(&run, "review");
    run.cmd()
        .args(["bind", "acc", "--append", "2"])
        .assert()
        .success();
    bind(&run, "topic", b"B");
    exec(&run, 4);
    run.cmd()
        .args(["bind", "acc", "--append", "3"])
        .assert()
        .success();
    let mut db = Db::open(&run);
    db.exec(
        "DELETE FROM bindings WHERE name = 'early'",
        "DELETE FROM openprose.bindings WHERE run_id = '$RUN' AND name = 'early'",
    );
    let last = exec(&run, 5);
    let names = ["early", "topic", "acc"];
    let before = run.snapshot();
    let first: i64 = db.int(
        "SELECT MIN(id) FROM execution",
        "SELECT MIN(id)::text FROM openprose.execution WHERE run_id = '$RUN'",
    );
    for at in first..=last {
        let id = format!("f{at}");
        run.cmd()
            .args(["fork", "--at", &at.to_string(), "--run-id", &id])
            .assert()
            .success();
        let fork = p.run(&id);
        assert_eq!(
            values(&fork, &names, None),
            values(&run, &names, Some(at)),
            "fork at {at}"
        );
        let log = fork.cmd().args(["log", "--json"]).assert().success();
        let text = String::from_utf8_lossy(&log.get_output().stdout).into_owned();
        assert!(!text.contains(&format!("step {}", at + 10)), "{text}");
        fork.cmd().args(["gates", "verify"]).assert().success();
    }
    assert_eq!(run.snapshot(), before, "a fork wrote to its source");
}

/// `--bind` values taken as given (`=` in a value, an empty value), bad names and run ids
/// refused with exit 2 and nothing made, an existing id refused with it unchanged; a fork
/// of a fork; a carried decision stands when `--bind` gives the sealed content again and is
/// stale when it changes it.
fn holds_fork_binds_and_ids_are_checked(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    bind(&run, "topic", b"A");
    exec(&run, 1);
    gate_about(&run, "review", "topic");
    approve(&run, "review");
    let at = exec(&run, 3).to_string();
    let fork = |id: &str, binds: &[&str]| {
        let mut c = run.cmd();
        c.args(["fork", "--at", &at, "--run-id", id]);
        for b in binds {
            c.args(["--bind", b]);
        }
        code(&c.assert())
    };
    assert_eq!(fork("eq", &["topic=a=b"]), 0);
    assert_eq!(p.run("eq").get("topic", None), b"a=b");
    assert_eq!(wait(&p.run("eq"), "review"), 11);
    assert_eq!(fork("empty", &["topic="]), 0);
    assert_eq!(p.run("empty").get("topic", None), b"");
    assert_eq!(fork("same", &["topic=A"]), 0);
    assert_eq!(wait(&p.run("same"), "review"), 0);
    let listed = || {
        let out = p.cmd().args(["--json", "runs"]).assert();
        String::from_utf8_lossy(&out.get_output().stdout).into_owned()
    };
    let runs_before = listed();
    for (id, binds) in [
        ("b1", &["../x=1"][..]),
        ("b2", &["=x"]),
        ("b3", &["noequals"]),
        ("b4", &["a\u{1b}b=1"]),
        ("../escape", &[]),
        ("a/b", &[]),
        ("..", &[]),
    ] {
        assert_eq!(fork(id, binds), 2, "{id} {binds:?}");
    }
    let long = format!("{}=1", "n".repeat(5000));
    assert_eq!(fork("b5", &[long.as_str()]), 2);
    assert_eq!(listed(), runs_before, "a refused fork made a run");
    for id in ["b1", "b2", "b3", "b4", "b5"] {
        assert!(!p.root().join(".prose/runs").join(id).exists(), "{id}");
    }
    assert!(!p.root().join(".prose/escape").exists());
    // Onto an existing id: refused, the existing run untouched.
    let snap = p.run("same").snapshot();
    assert_eq!(fork("same", &["topic=Z"]), 4);
    assert_eq!(p.run("same").snapshot(), snap);
    // A fork of a fork, at its first record, with the decision carried twice.
    let eq = p.run("eq");
    let eq_last = Db::open(&eq)
        .int(
            "SELECT MAX(id) FROM execution",
            "SELECT MAX(id)::text FROM openprose.execution WHERE run_id = '$RUN'",
        )
        .to_string();
    eq.cmd()
        .args([
            "fork", "--at", &eq_last, "--run-id", "eq2", "--bind", "topic=A",
        ])
        .assert()
        .success();
    assert_eq!(
        wait(&p.run("eq2"), "review"),
        0,
        "topic is what bob approved again"
    );
    p.run("eq2")
        .cmd()
        .args(["gates", "verify"])
        .assert()
        .success();
}

/// A source whose gate row says "approved" with no sealed decision (raw SQL) is not forked
/// with a standing decision: refused whole (exit 9); one with an unsealed `approved` event
/// (another tool's) forks without that gate.
fn holds_forks_carry_no_tampered_or_unattested_decision(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    bind(&run, "topic", b"A");
    exec(&run, 1);
    run.cmd()
        .args(["gates", "create", "g3", "--prompt", "g3?"])
        .assert()
        .success();
    let mut db = Db::open(&run);
    db.exec(
        "UPDATE gates SET status = 'approved', resolved_by = 'alice', resolved_at = datetime('now') WHERE id = 'g3';
         INSERT INTO gate_audit_log (gate_id, run_id, event_type, principal, metadata)
           VALUES ('g3', (SELECT id FROM run), 'approved', 'alice', '{\"instance\":1}');",
        "UPDATE openprose.gates SET status = 'approved', resolved_by = 'alice', resolved_at = now() WHERE run_id = '$RUN' AND id = 'g3';
         INSERT INTO openprose.gate_audit_log (gate_id, run_id, event_type, principal, metadata)
           VALUES ('g3', '$RUN', 'approved', 'alice', '{\"instance\":1}');",
    );
    let at = exec(&run, 3).to_string();
    run.cmd()
        .args(["fork", "--at", &at, "--run-id", "u"])
        .assert()
        .success();
    assert_ne!(
        wait(&p.run("u"), "g3"),
        0,
        "an unattested decision was carried"
    );
    run.cmd()
        .args(["gates", "create", "g2", "--prompt", "g2?"])
        .assert()
        .success();
    db.exec(
        "UPDATE gates SET status = 'approved', resolved_by = 'alice' WHERE id = 'g2'",
        "UPDATE openprose.gates SET status = 'approved', resolved_by = 'alice' WHERE run_id = '$RUN' AND id = 'g2'",
    );
    let at = exec(&run, 5).to_string();
    let a = run
        .cmd()
        .args(["fork", "--at", &at, "--run-id", "t"])
        .assert();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    assert!(!p.root().join(".prose/runs/t").exists());
    assert_eq!(
        p.cmd()
            .args(["--run", "t", "get", "topic"])
            .assert()
            .get_output()
            .status
            .code(),
        Some(3)
    );
}

/// Forks taken while four writers keep appending records and rebinding: each fork holds
/// exactly the records up to its point and the source's bindings as of it (read after).
fn holds_a_fork_is_one_moment_while_writers_go_on(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    for i in 1..=5 {
        exec(&run, i);
        bind(&run, "c0", i.to_string().as_bytes());
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let stop = stop.clone();
            let mut cmds = (run.std_cmd(), run.std_cmd());
            let _ = &mut cmds;
            let root = run.root.clone();
            let id = run.id.clone();
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && i < 60 {
                    i += 1;
                    let mut c = std::process::Command::new(BIN);
                    c.current_dir(&root)
                        .env("HOME", common::test_home(&root))
                        .args(["--run", &id]);
                    for var in CLEARED_ENV {
                        c.env_remove(var);
                    }
                    if i % 2 == 0 {
                        c.args([
                            "exec-append",
                            "--index",
                            &(100 + i).to_string(),
                            "--text",
                            "w",
                            "--status",
                            "completed",
                        ]);
                    } else {
                        c.args(["bind", &format!("c{w}"), &format!("{w}-{i}")]);
                    }
                    c.stdout(std::process::Stdio::null())
                        .stderr(std::process::Stdio::null());
                    let _ = c.status();
                }
            })
        })
        .collect();
    let mut forks = Vec::new();
    let mut db = Db::open(&run);
    for k in 0..5 {
        std::thread::sleep(Duration::from_millis(150));
        // A record that already has a successor: its "as of" state is settled (writes
        // after it are as of the newer record), so the fork must equal it exactly.
        let at = db.int(
            "SELECT MAX(id) FROM execution WHERE id < (SELECT MAX(id) FROM execution)",
            "SELECT MAX(id)::text FROM openprose.execution WHERE run_id = '$RUN' AND id < (SELECT MAX(id) FROM openprose.execution WHERE run_id = '$RUN')",
        );
        let id = format!("m{k}");
        run.cmd()
            .args(["fork", "--at", &at.to_string(), "--run-id", &id])
            .assert()
            .success();
        forks.push((id, at));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let names = ["c0", "c1", "c2"];
    for (id, at) in forks {
        let fork = p.run(&id);
        assert_eq!(
            values(&fork, &names, None),
            values(&run, &names, Some(at)),
            "{id} at {at}"
        );
        let mut fdb = Db::open(&fork);
        let max = fdb.int(
            "SELECT MAX(id) FROM execution",
            "SELECT MAX(id)::text FROM openprose.execution WHERE run_id = '$RUN'",
        );
        let count = fdb.int(
            "SELECT COUNT(*) FROM execution",
            "SELECT COUNT(*)::text FROM openprose.execution WHERE run_id = '$RUN'",
        );
        let src_count = db.int(
            &format!("SELECT COUNT(*) FROM execution WHERE id <= {at}"),
            &format!("SELECT COUNT(*)::text FROM openprose.execution WHERE run_id = '$RUN' AND id <= {at}"),
        );
        assert_eq!(count, src_count, "{id}: records");
        if !fdb.is_pg() {
            assert_eq!(max, at, "{id}: its last record");
        }
    }
}

// ---------------------------------------------------------------------------------------
// 5. prune --history against writers.

/// Three writers append 12 items each to an accumulator and rebind a value, while
/// `prune --history 2 --yes` runs again and again: nothing appended is lost, each kept
/// version reads back as the accumulator it was (a prefix of the next), the newest kept is
/// the current value, and `get --as-of` a record before the oldest kept is refused, never
/// answered.
fn holds_prune_during_appends_loses_nothing_and_refuses_the_pruned_past(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let first = exec(&run, 1);
    run.cmd()
        .args(["bind", "acc", "--append", "0"])
        .assert()
        .success();
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let root = run.root.clone();
            let id = run.id.clone();
            std::thread::spawn(move || {
                for i in 0..12 {
                    let mut c = std::process::Command::new(BIN);
                    c.current_dir(&root)
                        .env("HOME", common::test_home(&root))
                        .args([
                            "--run",
                            &id,
                            "bind",
                            "acc",
                            "--append",
                            &(100 * (w + 1) + i).to_string(),
                        ]);
                    for var in CLEARED_ENV {
                        c.env_remove(var);
                    }
                    c.stdout(std::process::Stdio::null());
                    assert!(c.status().unwrap().success());
                    let mut c = std::process::Command::new(BIN);
                    c.current_dir(&root)
                        .env("HOME", common::test_home(&root))
                        .args([
                            "--run",
                            &id,
                            "exec-append",
                            "--index",
                            "9",
                            "--text",
                            "w",
                            "--status",
                            "completed",
                        ]);
                    for var in CLEARED_ENV {
                        c.env_remove(var);
                    }
                    c.stdout(std::process::Stdio::null());
                    assert!(c.status().unwrap().success());
                }
            })
        })
        .collect();
    for _ in 0..8 {
        run.cmd()
            .args(["prune", "--history", "2", "--yes", "--run", &run.id])
            .assert()
            .success();
        std::thread::sleep(Duration::from_millis(50));
    }
    for w in writers {
        w.join().unwrap();
    }
    run.cmd()
        .args(["prune", "--history", "2", "--yes", "--run", &run.id])
        .assert()
        .success();
    let current: Vec<i64> = serde_json::from_slice(&run.get("acc", None)).unwrap();
    let mut want: Vec<i64> = std::iter::once(0)
        .chain((0..3).flat_map(|w| (0..12).map(move |i| 100 * (w + 1) + i)))
        .collect();
    let mut got = current.clone();
    want.sort();
    got.sort();
    assert_eq!(got, want, "items lost or doubled");
    let h = run
        .cmd()
        .args(["history", "acc", "--json"])
        .assert()
        .success();
    let h: Value = serde_json::from_slice(&h.get_output().stdout).unwrap();
    let versions: Vec<u64> = h["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_u64().unwrap())
        .collect();
    assert_eq!(versions.len(), 2, "{h}");
    assert_eq!(h["older_not_kept"], json!(true), "{h}");
    let read = |v: u64| -> Vec<i64> {
        let out = run
            .cmd()
            .args(["get", "acc", "--version", &v.to_string()])
            .assert()
            .success();
        serde_json::from_slice(&out.get_output().stdout).unwrap()
    };
    let (newest, older) = (read(versions[0]), read(versions[1]));
    assert_eq!(newest, current);
    assert_eq!(older.len() + 1, newest.len());
    assert_eq!(older[..], newest[..older.len()]);
    let a = run
        .cmd()
        .args(["get", "acc", "--as-of", &first.to_string()])
        .assert();
    assert_eq!(code(&a), 4, "as of a pruned point: {}", stderr(&a));
    assert!(a.get_output().stdout.is_empty());
    run.cmd().args(["doctor"]).assert().success();
}

// ---------------------------------------------------------------------------------------
// 6. gates verify against the history a decision sealed.

/// The version a consumed decision sealed, edited raw: tampered (exit 9), and never intact
/// again by marking it pruned (unattested, exit 10); pruned for real: unattested (exit 10).
fn holds_verify_finds_an_edited_sealed_version(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    bind(&run, "topic", b"A");
    gate_about(&run, "review", "topic");
    approve(&run, "review");
    assert_eq!(wait(&run, "review"), 0);
    for v in ["B", "C", "D"] {
        bind(&run, "topic", v.as_bytes());
    }
    let verify = || code(&run.cmd().args(["gates", "verify"]).assert());
    assert_eq!(verify(), 0);
    let mut db = Db::open(&run);
    db.exec(
        "UPDATE binding_history SET value = 'X' WHERE name = 'topic' AND n = 1",
        "UPDATE openprose.binding_history SET value = 'X' WHERE run_id = '$RUN' AND name = 'topic' AND n = 1",
    );
    assert_eq!(verify(), 9);
    db.exec(
        "UPDATE binding_history SET gap = 1 WHERE name = 'topic' AND n = 1",
        "UPDATE openprose.binding_history SET gap = 1 WHERE run_id = '$RUN' AND name = 'topic' AND n = 1",
    );
    // The decision pinned version 1: kept, it must hold what was decided (tampered, 9).
    assert_eq!(verify(), 9, "faked as pruned: still not intact");
    db.exec(
        "UPDATE binding_history SET value = 'A', gap = 0 WHERE name = 'topic' AND n = 1",
        "UPDATE openprose.binding_history SET value = 'A', gap = 0 WHERE run_id = '$RUN' AND name = 'topic' AND n = 1",
    );
    assert_eq!(verify(), 0);
    run.cmd()
        .args(["prune", "--history", "1", "--yes", "--run", &run.id])
        .assert()
        .success();
    assert_eq!(verify(), 10, "pruned: unattested");
}

/// docs/history.md: "`get NAME --as-of RECORD` reads what `get` would have returned just
/// after that execution record was appended". It returns what `get` returned just before the
/// NEXT record was appended: a bind written after record R (the VM's usual order: the record,
/// then its result) is "as of R". Either the words or the reading is wrong; a model reading
/// the guide literally gets the other value. (The same makes a fork at the newest record of a
/// run still being written differ from a later `get --as-of` of that record.)
fn holds_get_as_of_is_the_state_just_before_the_next_record(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    bind(&run, "x", b"before");
    let r1 = exec(&run, 1);
    bind(&run, "x", b"after");
    // The newest record: as the run stands now.
    let as_of = |r: i64| get_as_of(&run, "x", r);
    assert_eq!(as_of(r1), b"after");
    exec(&run, 2);
    bind(&run, "x", b"later");
    // As of record 1: what stood when record 2 was appended (the write after record 1
    // included), whatever came after.
    assert_eq!(as_of(r1), b"after");
}

// ---------------------------------------------------------------------------------------
// PostgreSQL only: the server's runs share one sequence of record ids.

/// On a server, a version records the record id sequence's position when it was written
/// (schema 11: no lookup of `execution` at every write), which other runs move on too. What
/// `history`, `get --as-of` and `fork --at` read is the run's own newest record then.
#[test]
fn holds_a_versions_record_is_its_own_runs_on_a_shared_server() {
    let Some(p) = Project::on(Backend::Postgres) else {
        return;
    };
    let (a, b) = (p.init(), p.init());
    let first = exec(&a, 1);
    for i in 1..=3 {
        exec(&b, i);
    }
    a.cmd().args(["bind", "x", "v1"]).assert().success();
    for i in 4..=5 {
        exec(&b, i);
    }
    let second = exec(&a, 2);
    a.cmd().args(["bind", "x", "v2"]).assert().success();
    // The positions kept are other runs' ids: the mapping is what is tested.
    let mut db = Db::open(&a);
    let kept: Vec<i64> = db
        .rows(
            "",
            "SELECT at_record::text FROM openprose.binding_history
              WHERE run_id = '$RUN' AND name = 'x' ORDER BY n",
        )
        .into_iter()
        .map(|r| {
            String::from_utf8(r[0].clone().unwrap())
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(kept.len(), 2);
    assert!(
        kept[0] > first && kept[1] >= second,
        "{kept:?} {first} {second}"
    );

    let h = history_json(&a, "x", &[]);
    let after: Vec<Value> = h["versions"]
        .as_array()
        .unwrap_or_else(|| panic!("{h}"))
        .iter()
        .map(|v| v["after_record"].clone())
        .collect();
    assert_eq!(after, vec![json!(second), json!(first)], "{h}");
    assert_eq!(get_as_of(&a, "x", first), b"v1");
    assert_eq!(get_as_of(&a, "x", second), b"v2");
    let f = crate::fork::fork(&a, &["--at", &first.to_string()]);
    let forked = p.run(f["run_id"].as_str().unwrap_or_else(|| panic!("{f}")));
    assert_eq!(forked.get("x", None), b"v1");
}

/// On a server, with `binding_history_keep` (which keeps a raw insert's and delete's
/// version) dropped: prose-state's first write of a binding is still kept, attributed, as is
/// its rebind; a raw insert is not, and `doctor` names the trigger.
#[test]
fn holds_a_dropped_insert_trigger_loses_no_first_write_on_a_server() {
    let Some(p) = Project::on(Backend::Postgres) else {
        return;
    };
    let run = p.init();
    run.cmd().args(["bind", "x", "v1"]).assert().success();
    let mut db = Db::open(&run);
    db.exec(
        "",
        "DROP TRIGGER binding_history_keep ON openprose.bindings;",
    );
    run.cmd()
        .args(["bind", "y", "new", "--as", "mallory"])
        .assert()
        .success();
    run.cmd()
        .args(["bind", "x", "v2", "--as", "alice"])
        .assert()
        .success();
    let by = |db: &mut Db, name: &str, value: &str| {
        db.rows(
            "",
            &format!(
                "SELECT principal FROM openprose.binding_history
                  WHERE run_id = '$RUN' AND name = '{name}' AND value = '{value}'"
            ),
        )
    };
    assert_eq!(
        by(&mut db, "y", "new"),
        vec![vec![Some(b"mallory".to_vec())]]
    );
    assert_eq!(by(&mut db, "x", "v2"), vec![vec![Some(b"alice".to_vec())]]);
    db.exec(
        "",
        "INSERT INTO openprose.bindings (name, run_id, kind, value) VALUES ('z', '$RUN', 'let', 'raw');",
    );
    assert!(
        by(&mut db, "z", "raw").is_empty(),
        "kept without its trigger"
    );
    let a = run.cmd().args(["--json", "doctor"]).assert().failure();
    let d: Value = serde_json::from_slice(&a.get_output().stdout).unwrap();
    assert!(
        d["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["kind"] == "missing trigger"
                && p["detail"]
                    .as_str()
                    .unwrap()
                    .contains("binding_history_keep")),
        "{d}"
    );
}

// ---------------------------------------------------------------------------------------
// 6. Every write kept once, whoever wrote it.

/// One kept version as the model expects it: the value (None: a deletion), whether it was
/// kept as an `--append` step, and who wrote it (None: a raw writer).
#[derive(Clone, Debug, PartialEq)]
struct Kept {
    value: Option<String>,
    step: bool,
    by: Option<String>,
}

/// The promise history rests on, against random interleavings of prose-state's writes (a
/// whole value or an `--append` step, as one of three principals, in the root scope or an
/// execution's; an agent's memory; a segment that makes its agent) and raw writers' (UPDATE,
/// the spec's INSERT OR REPLACE or an upsert, DELETE, of bindings and of agents): every
/// write is kept exactly once, as its binding's (or agent's) next number, attributed to
/// prose-state's writer or to nobody, holding what was written; the written row takes the
/// highest version of the run; segments record the newest record. prose-state keeps its own
/// writes' versions and the triggers keep raw writers': this checks the two never double,
/// drop or misattribute one, after every step. `PROSE_HISTORY_PROPERTY_STEPS` sets the steps
/// (default 600 a backend).
fn holds_every_write_is_kept_once_whoever_wrote_it_property(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let mut db = Db::open(&run);
    let pg = db.is_pg();
    let steps: usize = std::env::var("PROSE_HISTORY_PROPERTY_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let mut rng = Rng(0x0031_0bee ^ pg as u64);
    // The scope's record opens a frame (a block invocation): a binding made at a record that
    // is no frame lives in its frame (issue 45).
    let mut newest_record = run.exec(1, "do step(1)", "executing", None);
    let scope_record = newest_record;
    let mut bindings: std::collections::BTreeMap<(&str, i64), Vec<Kept>> = Default::default();
    let mut agent: Vec<Kept> = Vec::new();
    let current = |v: &[Kept]| v.last().and_then(|k| k.value.clone());
    let where_b = |name: &str, scope: i64| {
        if pg {
            format!("run_id = '$RUN' AND name = '{name}' AND COALESCE(execution_id, -1) = {scope}")
        } else {
            format!("name = '{name}' AND IFNULL(execution_id, -1) = {scope}")
        }
    };
    let t = |table: &str| {
        if pg {
            format!("openprose.{table}")
        } else {
            table.to_string()
        }
    };
    let scope_sql = |scope: i64| {
        if scope < 0 {
            "NULL".to_string()
        } else {
            scope.to_string()
        }
    };
    for i in 0..steps {
        let r = rng.below(100);
        let who = rng.pick(&["alice", "bob", "carol"]);
        let scope = if rng.below(3) == 0 { scope_record } else { -1 };
        let name = if r < 40 {
            rng.pick(&["a", "b"])
        } else {
            rng.pick(&["a", "b", "acc"])
        };
        let (name, scope) = if name == "acc" {
            (name, -1)
        } else {
            (name, scope)
        };
        let raw_value = if name == "acc" {
            format!("[\"r{i}\"]")
        } else {
            format!("r{i}")
        };
        let mut touched = None;
        let mut agent_touched = false;
        match r {
            0..=29 => {
                let value = format!("t{i}");
                let mut c = run.cmd();
                c.args(["bind", name, &value, "--as", who]);
                if scope >= 0 {
                    c.args(["--execution-id", &scope.to_string()]);
                }
                c.assert().success();
                bindings.entry((name, scope)).or_default().push(Kept {
                    value: Some(value),
                    step: false,
                    by: Some(who.into()),
                });
                touched = Some((name, scope));
            }
            30..=39 => {
                let item = format!("i{i}");
                run.cmd()
                    .args(["bind", "acc", "--append", &item, "--as", who])
                    .assert()
                    .success();
                let v = bindings.entry(("acc", -1)).or_default();
                let before = current(v);
                let mut array: Vec<Value> = before
                    .as_deref()
                    .map_or_else(Vec::new, |s| serde_json::from_str(s).unwrap());
                array.push(Value::String(item));
                v.push(Kept {
                    value: Some(serde_json::to_string(&array).unwrap()),
                    step: before.is_some(),
                    by: Some(who.into()),
                });
                touched = Some(("acc", -1));
            }
            40..=54 => {
                let v = bindings.entry((name, scope)).or_default();
                if current(v).is_some() {
                    db.exec(
                        &format!(
                            "UPDATE bindings SET value = {} WHERE {}",
                            q(&raw_value),
                            where_b(name, scope)
                        ),
                        &format!(
                            "UPDATE openprose.bindings SET value = {} WHERE {}",
                            q(&raw_value),
                            where_b(name, scope)
                        ),
                    );
                    v.push(Kept {
                        value: Some(raw_value),
                        step: false,
                        by: None,
                    });
                    touched = Some((name, scope));
                }
            }
            55..=64 => {
                db.exec(
                    &format!(
                        "INSERT OR REPLACE INTO bindings (name, execution_id, kind, value) VALUES ('{name}', {}, 'let', {})",
                        scope_sql(scope),
                        q(&raw_value)
                    ),
                    &format!(
                        "INSERT INTO openprose.bindings (name, run_id, execution_id, kind, value) VALUES ('{name}', '$RUN', {}, 'let', {})
                           ON CONFLICT (name, run_id, (COALESCE(execution_id, -1))) DO UPDATE SET value = excluded.value",
                        scope_sql(scope),
                        q(&raw_value)
                    ),
                );
                bindings.entry((name, scope)).or_default().push(Kept {
                    value: Some(raw_value),
                    step: false,
                    by: None,
                });
                touched = Some((name, scope));
            }
            65..=71 => {
                let v = bindings.entry((name, scope)).or_default();
                if current(v).is_some() {
                    let sql = format!(
                        "DELETE FROM {} WHERE {}",
                        t("bindings"),
                        where_b(name, scope)
                    );
                    db.exec(&sql, &sql);
                    v.push(Kept {
                        value: None,
                        step: false,
                        by: None,
                    });
                    touched = Some((name, scope));
                }
            }
            72..=79 => {
                let memory = rng.pick(&["m1", "m2"]).to_string();
                run.cmd()
                    .args(["agent", "remember", "m", &memory])
                    .assert()
                    .success();
                let held = agent.last().map(|k| k.value.clone());
                // A version when the agent is new or its memory changes.
                if held.is_none()
                    || held.as_ref().is_some_and(|h| h.as_deref() != Some(&memory))
                    || agent.last().is_some_and(|k| k.step)
                {
                    agent.push(Kept {
                        value: Some(memory),
                        step: false,
                        by: None,
                    });
                }
                agent_touched = true;
            }
            80..=85 => {
                if agent.last().is_some_and(|k| !k.step) {
                    let memory = rng.pick(&["m1", "m2", "m3"]).to_string();
                    let sql = if pg {
                        format!("UPDATE openprose.agents SET memory = {} WHERE run_id = '$RUN' AND name = 'm'", q(&memory))
                    } else {
                        format!("UPDATE agents SET memory = {} WHERE name = 'm'", q(&memory))
                    };
                    db.exec(&sql, &sql);
                    if agent.last().unwrap().value.as_deref() != Some(&memory) {
                        agent.push(Kept {
                            value: Some(memory),
                            step: false,
                            by: None,
                        });
                    }
                    agent_touched = true;
                }
            }
            86..=88 => {
                if agent.last().is_some_and(|k| !k.step) {
                    // Its segments first: a state.db's segments reference their agent.
                    let sql = if pg {
                        "DELETE FROM openprose.agent_segments WHERE run_id = '$RUN' AND agent_name = 'm';
                         DELETE FROM openprose.agents WHERE run_id = '$RUN' AND name = 'm'"
                            .to_string()
                    } else {
                        "DELETE FROM agent_segments WHERE agent_name = 'm';
                         DELETE FROM agents WHERE name = 'm'"
                            .to_string()
                    };
                    db.exec(&sql, &sql);
                    // `step` marks the agent gone: its deletion's version.
                    agent.push(Kept {
                        value: None,
                        step: true,
                        by: None,
                    });
                    agent_touched = true;
                }
            }
            89..=93 => {
                run.cmd()
                    .args(["agent", "segment", "m", "--prompt", "p", "--summary", "s"])
                    .assert()
                    .success();
                if agent.last().is_none_or(|k| k.step) {
                    agent.push(Kept {
                        value: None,
                        step: false,
                        by: None,
                    });
                }
                let at = db.int(
                    "SELECT at_record FROM agent_segments ORDER BY id DESC LIMIT 1",
                    "SELECT e.id::text FROM openprose.agent_segments s JOIN openprose.execution e
                       ON e.run_id = s.run_id AND e.id <= s.at_record
                      WHERE s.run_id = '$RUN' ORDER BY s.id DESC, e.id DESC LIMIT 1",
                );
                assert_eq!(at, newest_record, "step {i}: a segment's record");
                agent_touched = true;
            }
            _ => {
                newest_record = exec(&run, 100 + i as i64);
            }
        }
        if let Some((name, scope)) = touched {
            let want = &bindings[&(name, scope)];
            let got = db.rows(
                &format!(
                    "SELECT n, value, delta IS NOT NULL, principal, deleted FROM binding_history WHERE {} ORDER BY n",
                    where_b(name, scope)
                ),
                &format!(
                    "SELECT h.n::text, value, (delta IS NOT NULL)::int::text, principal, deleted::text FROM openprose.binding_history h WHERE {} ORDER BY h.n",
                    where_b(name, scope)
                ),
            );
            assert_eq!(
                got.len(),
                want.len(),
                "step {i}: versions of {name}@{scope}: {got:?}"
            );
            let s = |c: &Cell| c.as_ref().map(|b| String::from_utf8(b.clone()).unwrap());
            for (k, (row, w)) in got.iter().zip(want).enumerate() {
                let at = format!("step {i}: {name}@{scope} version {}", k + 1);
                assert_eq!(s(&row[0]), Some((k + 1).to_string()), "{at}: numbered");
                assert_eq!(
                    s(&row[4]).as_deref() == Some("1"),
                    w.value.is_none(),
                    "{at}: deletion"
                );
                assert_eq!(
                    s(&row[2]).as_deref() == Some("1"),
                    w.step,
                    "{at}: kept as a step"
                );
                if w.value.is_some() && !w.step {
                    assert_eq!(s(&row[1]), w.value, "{at}: value");
                }
                assert_eq!(s(&row[3]), w.by, "{at}: who wrote it");
            }
            // The written row holds the value and the run's highest version.
            let held = db.rows(
                &format!("SELECT value, (SELECT COUNT(*) FROM bindings o WHERE o.version >= b.version) FROM bindings b WHERE {}", where_b(name, scope)),
                &format!("SELECT value, (SELECT COUNT(*) FROM openprose.bindings o WHERE o.run_id = b.run_id AND o.version >= b.version)::text FROM openprose.bindings b WHERE {}", where_b(name, scope)),
            );
            match current(want) {
                None => assert!(held.is_empty(), "step {i}: {name}@{scope} deleted"),
                Some(v) => {
                    assert_eq!(s(&held[0][0]), Some(v), "step {i}: {name}@{scope} holds");
                    assert_eq!(
                        s(&held[0][1]).as_deref(),
                        Some("1"),
                        "step {i}: {name}@{scope}'s version is the run's highest"
                    );
                }
            }
        }
        if agent_touched {
            let got = db.rows(
                "SELECT n, value, deleted, principal FROM agent_history WHERE name = 'm' ORDER BY n",
                "SELECT h.n::text, value, deleted::text, principal FROM openprose.agent_history h WHERE run_id = '$RUN' AND name = 'm' ORDER BY h.n",
            );
            assert_eq!(
                got.len(),
                agent.len(),
                "step {i}: versions of agent m: {got:?} {agent:?}"
            );
            let s = |c: &Cell| c.as_ref().map(|b| String::from_utf8(b.clone()).unwrap());
            for (k, (row, w)) in got.iter().zip(&agent).enumerate() {
                let at = format!("step {i}: agent m version {}", k + 1);
                assert_eq!(s(&row[0]), Some((k + 1).to_string()), "{at}: numbered");
                assert_eq!(s(&row[2]).as_deref() == Some("1"), w.step, "{at}: deletion");
                assert_eq!(s(&row[1]), w.value, "{at}: memory");
                assert_eq!(s(&row[3]), None, "{at}: who wrote it");
            }
        }
    }
    // Every binding's versions read back through the binary, a sample of them.
    let all: Vec<((&str, i64), usize)> = bindings
        .iter()
        .flat_map(|(k, v)| (1..=v.len()).map(move |n| (*k, n)))
        .collect();
    for _ in 0..all.len().min(40) {
        let ((name, scope), n) = all[rng.below(all.len() as u64) as usize];
        let want = &bindings[&(name, scope)][n - 1];
        let mut c = run.cmd();
        c.args(["get", name, "--version", &n.to_string()]);
        if scope >= 0 {
            c.args(["--execution-id", &scope.to_string()]);
        }
        let out = c.assert();
        match &want.value {
            Some(v) => {
                let out = out.success();
                assert_eq!(
                    String::from_utf8_lossy(&out.get_output().stdout),
                    *v,
                    "{name}@{scope} version {n}"
                );
            }
            None => {
                out.failure();
            }
        }
    }
}

/// Concurrent writers of one binding, and of bindings none of them has written yet (each
/// name's first write raced by three processes): every write is kept once, the numbers of
/// each binding's versions are 1, 2, 3 … without a gap or a repeat, and its newest version is
/// what it holds. On a server the number is taken by a statement that sees every version
/// committed before it (a rebind's in one statement, holding the row; a first write's after
/// its upsert), which is what this races.
fn holds_concurrent_writers_number_every_version_once(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    bind(&run, "x", b"0");
    let writers = 6;
    let rounds = 8;
    let children: Vec<_> = (0..writers)
        .map(|w| {
            let mut script = String::new();
            for r in 0..rounds {
                script.push_str(&format!(
                    "\"$B\" bind x w{w}r{r} --as w{w} >/dev/null && \"$B\" bind fresh{r} w{w} --as w{w} >/dev/null || exit 1\n"
                ));
            }
            let mut c = std::process::Command::new("sh");
            let probe = run.std_cmd();
            c.arg("-c").arg(script).env("B", probe.get_program());
            for (k, v) in probe.get_envs() {
                match v {
                    Some(v) => c.env(k, v),
                    None => c.env_remove(k),
                };
            }
            if let Some(dir) = probe.get_current_dir() {
                c.current_dir(dir);
            }
            c.env("PROSE_RUN", &run.id);
            c.spawn().unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let mut db = Db::open(&run);
    let mut names = vec!["x".to_string()];
    names.extend((0..rounds).map(|r| format!("fresh{r}")));
    for name in &names {
        let ns = db.rows(
            &format!("SELECT n FROM binding_history WHERE name = '{name}' ORDER BY n"),
            &format!("SELECT h.n::text FROM openprose.binding_history h WHERE run_id = '$RUN' AND name = '{name}' ORDER BY h.n"),
        );
        let want = if name == "x" {
            1 + writers * rounds
        } else {
            writers
        };
        let got: Vec<String> = ns
            .iter()
            .map(|r| String::from_utf8(r[0].clone().unwrap()).unwrap())
            .collect();
        let expected: Vec<String> = (1..=want).map(|n| n.to_string()).collect();
        assert_eq!(got, expected, "{name}'s versions");
        let newest = db.one(
            &format!("SELECT value FROM binding_history WHERE name = '{name}' ORDER BY n DESC LIMIT 1"),
            &format!("SELECT value FROM openprose.binding_history WHERE run_id = '$RUN' AND name = '{name}' ORDER BY n DESC LIMIT 1"),
        );
        assert_eq!(
            newest.as_deref(),
            Some(run.get(name, None).as_slice()),
            "{name}"
        );
    }
}
