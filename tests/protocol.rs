//! The record shapes of the protocol (guide vm, "The record shapes"), read back by `resume`:
//! where a run stands after each construct, and runs written under the older guide.

use crate::common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

on_both!(
    a_block_closed_under_the_older_guide_is_not_in_progress,
    a_block_closed_at_its_own_level_is_not_in_progress,
    resume_names_the_open_constructs_and_what_was_done_inside,
    a_loop_narrates_the_iteration_in_progress,
    resume_is_bounded_and_pages_through_the_bindings,
    the_bounded_resume_reads_what_the_whole_log_says,
);

fn resume(run: &Run) -> Value {
    stdout_json(
        &run.cmd()
            .args(["--json", "resume", "--all"])
            .assert()
            .success(),
    )
}

fn resume_text(run: &Run) -> String {
    let out = run.cmd().arg("resume").assert().success();
    String::from_utf8(out.get_output().stdout.clone()).unwrap()
}

fn with_meta(
    run: &Run,
    index: i64,
    text: &str,
    status: &str,
    parent: Option<i64>,
    meta: &str,
) -> i64 {
    let mut c = run.cmd();
    c.args([
        "exec-append",
        "--index",
        &index.to_string(),
        "--text",
        text,
        "--status",
        status,
    ]);
    c.args(["--metadata", meta]);
    if let Some(p) = parent {
        c.args(["--parent", &p.to_string()]);
    }
    let out = c.assert().success();
    String::from_utf8(out.get_output().stdout.clone())
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn id_of(v: &Value) -> Option<i64> {
    v.get("id").and_then(Value::as_i64)
}

/// The issue's reproduction: `B=$(exec-append … --status executing); exec-append …
/// --status completed --parent $B; resume`.
fn a_block_closed_under_the_older_guide_is_not_in_progress(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let block = run.exec(4, "do x", "executing", None);
    let done = run.exec(4, "do x", "completed", Some(block));
    let doc = resume(&run);
    assert!(doc["position"]["current"].is_null(), "{doc}");
    assert_eq!(doc["position"]["open"], serde_json::json!([]));
    assert_eq!(id_of(&doc["position"]["after"]), Some(done));
    let text = resume_text(&run);
    assert!(text.contains("at: nothing in progress"), "{text}");
    assert!(!text.contains("executing, record"), "{text}");
    // Its body's records, also parented on the block, do not close it.
    let again = run.exec(4, "do x", "executing", None);
    run.exec(1, "let y = session: s", "completed", Some(again));
    let doc = resume(&run);
    assert_eq!(id_of(&doc["position"]["current"]), Some(again), "{doc}");
}

fn a_block_closed_at_its_own_level_is_not_in_progress(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let block = run.exec(4, "do x", "executing", None);
    run.exec(1, "session a", "completed", Some(block));
    let doc = resume(&run);
    assert_eq!(id_of(&doc["position"]["current"]), Some(block));
    let done = run.exec(4, "do x", "completed", None);
    let doc = resume(&run);
    assert!(doc["position"]["current"].is_null(), "{doc}");
    assert_eq!(id_of(&doc["position"]["after"]), Some(done));
}

fn resume_names_the_open_constructs_and_what_was_done_inside(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.exec(1, "let a = session: s", "completed", None);
    let outer = run.exec(2, "do review(a)", "executing", None);
    let try_ = run.exec(1, "try:", "started", Some(outer));
    let failed = {
        let mut c = run.cmd();
        c.args([
            "exec-append",
            "--index",
            "2",
            "--text",
            "session risky",
            "--status",
            "failed",
        ]);
        c.args(["--error", "timeout", "--parent", &try_.to_string()]);
        let out = c.assert().success();
        String::from_utf8(out.get_output().stdout.clone())
            .unwrap()
            .trim()
            .parse::<i64>()
            .unwrap()
    };
    let doc = resume(&run);
    let open: Vec<i64> = doc["position"]["open"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(id_of)
        .collect();
    assert_eq!(open, vec![outer, try_]);
    assert_eq!(id_of(&doc["position"]["current"]), Some(try_));
    // The catch runs next: the latest thing done inside the try is the failure.
    assert_eq!(id_of(&doc["position"]["after"]), Some(failed));
    run.exec(1, "try:", "completed", Some(outer));
    let doc = resume(&run);
    assert_eq!(id_of(&doc["position"]["current"]), Some(outer));
    run.exec(2, "do review(a)", "completed", None);
    let par = with_meta(
        &run,
        3,
        "parallel:",
        "started",
        None,
        r#"{"parallel_id": "p1", "branches": ["a", "b"]}"#,
    );
    with_meta(
        &run,
        3,
        "parallel:a",
        "completed",
        None,
        r#"{"parallel_id": "p1", "branch": "a"}"#,
    );
    let doc = resume(&run);
    assert_eq!(id_of(&doc["position"]["current"]), Some(par));
    assert_eq!(doc["parallel"][0]["outstanding"], serde_json::json!(["b"]));
    with_meta(
        &run,
        3,
        "parallel:b",
        "completed",
        None,
        r#"{"parallel_id": "p1", "branch": "b"}"#,
    );
    let joined = with_meta(
        &run,
        3,
        "parallel:",
        "joined",
        None,
        r#"{"parallel_id": "p1"}"#,
    );
    let doc = resume(&run);
    assert!(doc["position"]["current"].is_null(), "{doc}");
    assert_eq!(id_of(&doc["position"]["after"]), Some(joined));
}

fn a_loop_narrates_the_iteration_in_progress(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let l = with_meta(
        &run,
        5,
        "loop",
        "started",
        None,
        r#"{"loop_id": "l1", "max": 3}"#,
    );
    let body = run.exec(6, "session draft", "completed", Some(l));
    let doc = resume(&run);
    assert_eq!(doc["loops"][0]["current"], 1);
    assert_eq!(id_of(&doc["position"]["after"]), Some(body));
    assert!(resume_text(&run).contains("loop l1:0/3 running (iteration 1)"));
    let it = with_meta(
        &run,
        5,
        "loop",
        "iteration",
        None,
        r#"{"loop_id": "l1", "iteration": 1}"#,
    );
    // A body record that names the loop (an older shape) is inside iteration 2, not its end.
    with_meta(
        &run,
        6,
        "session draft",
        "completed",
        Some(l),
        r#"{"loop_id": "l1", "iteration": 2}"#,
    );
    let doc = resume(&run);
    assert_eq!(doc["loops"][0]["iteration"], 1, "{doc}");
    assert_eq!(doc["loops"][0]["current"], 2);
    assert!(resume_text(&run).contains("loop l1:1/3 running (iteration 2)"));
    let log = String::from_utf8(
        run.cmd()
            .arg("log")
            .assert()
            .success()
            .get_output()
            .stdout
            .clone(),
    )
    .unwrap();
    // Only the loop's own start reads as its start; its body's records say their iteration.
    assert_eq!(log.matches("loop:0/3 start").count(), 1, "{log}");
    assert!(log.contains("6→ session draft ✓ · loop:1/3"), "{log}");
    assert!(log.contains("6→ session draft ✓ · loop:2/3"), "{log}");
    // The iteration record itself (its writer, if recorded, after it).
    assert!(
        log.lines()
            .any(|l| l.ends_with(" loop:1/3") || l.contains(" loop:1/3 · ")),
        "{log}"
    );
    assert!(it > body);
    with_meta(
        &run,
        5,
        "loop",
        "exited",
        None,
        r#"{"loop_id": "l1", "iteration": 2, "reason": "condition_satisfied"}"#,
    );
    let doc = resume(&run);
    assert!(doc["position"]["current"].is_null());
    assert!(doc["loops"][0]["current"].is_null());
}

/// `resume` stays within 16 KiB however many bindings the run has, and its cursor reaches
/// every binding visible from the current scope exactly once.
fn resume_is_bounded_and_pages_through_the_bindings(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let long = "x".repeat(300);
    let names: Vec<String> = (0..150).map(|i| format!("b{i:03}")).collect();
    for n in &names {
        run.bind(n, &format!("{n} {long}"), None);
    }
    let block = run.exec(2, "do inner", "executing", None);
    run.bind("b000", "shadowed inside the block", Some(block));
    run.bind("only_inside", "v", Some(block));
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut c = run.cmd();
        c.args(["--json", "resume"]);
        if let Some(at) = &cursor {
            c.args(["--cursor", at]);
        }
        let out = c.assert().success();
        let bytes = out.get_output().stdout.len();
        assert!(bytes <= 16 * 1024, "{bytes} bytes");
        let v = stdout_json(&out);
        assert_eq!(v["counts"]["bindings"], 152);
        assert_eq!(v["counts"]["bindings_visible"], 151);
        assert_eq!(v["scope"], block);
        for b in v["bindings"].as_array().unwrap() {
            if b["name"] == "b000" {
                assert_eq!(b["execution_id"], block, "the nearest one is shown");
            }
            seen.push(b["name"].as_str().unwrap().to_string());
        }
        match v["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => break,
        }
        assert!(seen.len() < 1000, "the cursor does not advance");
    }
    let mut want = names.clone();
    want.push("only_inside".into());
    assert_eq!(seen, want);
    // --all keeps the whole answer.
    let all = stdout_json(
        &run.cmd()
            .args(["--json", "resume", "--all"])
            .assert()
            .success(),
    );
    assert_eq!(all["bindings"].as_array().unwrap().len(), 152);
}

/// One generated execution record.
#[derive(Clone, Debug)]
struct Rec {
    id: i64,
    index: Option<i64>,
    text: String,
    status: &'static str,
    parent: Option<i64>,
    meta: Option<String>,
    error: Option<String>,
}

const STATUSES: &[&str] = &[
    "executing",
    "started",
    "completed",
    "completed",
    "completed",
    "failed",
    "skipped",
    "joined",
    "exited",
    "iteration",
    "retry",
    "pending",
];

/// A random log: mostly the protocol's shapes (starts, their bodies, closes at their own
/// level or naming the start, branches, iterations, retries), with stray records of every
/// status among them.
fn random_log(rng: &mut StdRng, base: i64) -> Vec<Rec> {
    let n = rng.random_range(3..70);
    let mut out: Vec<Rec> = Vec::new();
    let mut starts: Vec<Rec> = Vec::new();
    let mut pids: Vec<String> = Vec::new();
    let mut lids: Vec<String> = Vec::new();
    for k in 0..n {
        let id = base + k + 1;
        let status = STATUSES[rng.random_range(0..STATUSES.len())];
        let is_start = matches!(status, "executing" | "started");
        let mut r = Rec {
            id,
            index: (!rng.random_bool(0.07)).then(|| rng.random_range(1..7)),
            text: format!("s{}", rng.random_range(0..2)),
            status,
            parent: match (starts.last(), rng.random_range(0..10)) {
                (Some(s), 0..=5) => Some(s.id),
                (_, 6) if !out.is_empty() => Some(out[rng.random_range(0..out.len())].id),
                _ => None,
            },
            meta: None,
            error: (status == "failed").then(|| format!("error {k}")),
        };
        if !is_start && !starts.is_empty() && rng.random_bool(0.35) {
            // A close of some start: at its level, or naming it (the older guide's shape).
            let s = &starts[rng.random_range(0..starts.len())];
            r.index = s.index;
            r.text = s.text.clone();
            r.parent = if rng.random_bool(0.5) {
                s.parent
            } else {
                Some(s.id)
            };
        }
        let pick = |rng: &mut StdRng, v: &[String]| v[rng.random_range(0..v.len())].clone();
        r.meta = match status {
            "executing" | "started" => match rng.random_range(0..3) {
                0 => {
                    pids.push(format!("p{id}"));
                    Some(format!(
                        r#"{{"parallel_id": "p{id}", "branches": ["x", "y", "z"]}}"#
                    ))
                }
                1 => {
                    lids.push(format!("l{id}"));
                    Some(format!(r#"{{"loop_id": "l{id}", "max": 5}}"#))
                }
                _ => None,
            },
            "completed" | "failed" | "joined" if !pids.is_empty() && rng.random_bool(0.5) => {
                let b = ["x", "y", "z", "w"][rng.random_range(0..4)];
                Some(format!(
                    r#"{{"parallel_id": "{}", "branch": "{b}"}}"#,
                    pick(rng, &pids)
                ))
            }
            "iteration" | "exited" if !lids.is_empty() => Some(format!(
                r#"{{"loop_id": "{}", "iteration": {}, "reason": "done"}}"#,
                pick(rng, &lids),
                rng.random_range(1..4)
            )),
            "retry" => Some(r#"{"attempt": 2, "max": 3}"#.to_string()),
            _ if rng.random_bool(0.1) => Some(r#"{"note": "n"}"#.to_string()),
            _ => None,
        };
        if is_start {
            starts.push(r.clone());
        }
        out.push(r);
    }
    out
}

fn sql_text(s: &Option<String>) -> String {
    s.as_ref()
        .map_or("NULL".into(), |t| format!("'{}'", t.replace('\'', "''")))
}

/// `resume` reads narrowly (the starts, what could close them, the latest records, what was
/// written since each open construct began, one page of bindings), and `resume --all` reads
/// every record. On random logs, well formed or not, the narrow read must say what the whole
/// log says: the same position, the same open parallels and loops, the same outstanding
/// retries, the same visible bindings and counts.
fn the_bounded_resume_reads_what_the_whole_log_says(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let view = run.view();
    let cases: u64 = std::env::var("PROSE_RESUME_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(150);
    for case in 0..cases {
        let mut rng = StdRng::seed_from_u64(case);
        let base = 1_000 * (case as i64 + 1);
        let log = random_log(&mut rng, base);
        let mut sqlite = String::from("DELETE FROM bindings; DELETE FROM execution;");
        let mut pg = String::from(
            "DELETE FROM openprose.bindings WHERE run_id = '$RUN';
             DELETE FROM openprose.execution WHERE run_id = '$RUN';",
        );
        for r in &log {
            let (idx, parent) = (
                r.index.map_or("NULL".into(), |i| i.to_string()),
                r.parent.map_or("NULL".into(), |i| i.to_string()),
            );
            let (meta, err) = (sql_text(&r.meta), sql_text(&r.error));
            sqlite.push_str(&format!(
                "INSERT INTO execution (id, statement_index, statement_text, status, parent_id,
                   metadata, error_message, completed_at)
                 VALUES ({}, {idx}, '{}', '{}', {parent}, {meta}, {err}, datetime('now'));",
                r.id, r.text, r.status
            ));
            pg.push_str(&format!(
                "INSERT INTO openprose.execution (id, run_id, statement_index, statement_text,
                   status, parent_id, metadata, error_message, completed_at)
                 VALUES ({}, '$RUN', {idx}, '{}', '{}', {parent}, {meta}::jsonb, {err}, now());",
                r.id, r.text, r.status
            ));
        }
        let mut bound = std::collections::BTreeSet::new();
        for _ in 0..rng.random_range(0..12) {
            let name = ["a", "b", "c", "d", "e"][rng.random_range(0..5)];
            let scope = match rng.random_range(0..3) {
                0 => None,
                1 => Some(log[rng.random_range(0..log.len())].id),
                _ => Some(base + 999),
            };
            if !bound.insert((name, scope)) {
                continue;
            }
            let scope_sql = scope.map_or("NULL".into(), |s| s.to_string());
            sqlite.push_str(&format!(
                "INSERT INTO bindings (name, execution_id, kind, value)
                 VALUES ('{name}', {scope_sql}, 'let', 'v');"
            ));
            pg.push_str(&format!(
                "INSERT INTO openprose.bindings (name, run_id, execution_id, kind, value)
                 VALUES ('{name}', '$RUN', {scope_sql}, 'let', 'v');"
            ));
        }
        view.raw(&sqlite, &pg);

        let brief = stdout_json(
            &run.cmd()
                .args(["--json", "resume", "--limit", "1000"])
                .assert()
                .success(),
        );
        let all = resume(&run);
        let why = format!("case {case} ({b:?}): {log:#?}");
        assert_eq!(brief["position"], all["position"], "{why}");
        assert_eq!(brief["retries"], all["retries"], "{why}");
        let open: Vec<&Value> = all["position"]["open"].as_array().unwrap().iter().collect();
        let opened = |key: &str, id: &Value| {
            open.iter()
                .any(|o| o["metadata"][key] == *id && !o["metadata"][key].is_null())
        };
        let still = |list: &Value, key: &str, done: &str| -> Vec<Value> {
            list.as_array()
                .unwrap()
                .iter()
                .filter(|x| opened(key, &x[key]) && x[done] == false)
                .cloned()
                .collect()
        };
        assert_eq!(
            brief["parallel"].as_array().unwrap(),
            &still(&all["parallel"], "parallel_id", "joined"),
            "{why}"
        );
        assert_eq!(
            brief["loops"].as_array().unwrap(),
            &still(&all["loops"], "loop_id", "exited"),
            "{why}"
        );
        // The bindings visible from the scope: the nearest of each name up the parents.
        let mut chain = Vec::new();
        let mut at = brief["scope"].as_i64();
        while let Some(id) = at {
            chain.push(id);
            at = log.iter().find(|r| r.id == id).and_then(|r| r.parent);
        }
        let mut want: std::collections::BTreeMap<&str, Option<i64>> = Default::default();
        for (name, scope) in &bound {
            let rank = |s: &Option<i64>| match s {
                None => Some(chain.len()),
                Some(id) => chain.iter().position(|c| c == id),
            };
            let Some(r) = rank(scope) else { continue };
            if want.get(name).is_none_or(|have| rank(have).unwrap() > r) {
                want.insert(name, *scope);
            }
        }
        let got: std::collections::BTreeMap<&str, Option<i64>> = brief["bindings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| (b["name"].as_str().unwrap(), b["execution_id"].as_i64()))
            .collect();
        assert_eq!(got, want, "{why}");
        assert_eq!(brief["counts"]["bindings_visible"], want.len(), "{why}");
        assert_eq!(brief["counts"]["bindings"], bound.len(), "{why}");
        assert_eq!(brief["counts"]["records"], log.len(), "{why}");
    }
}
