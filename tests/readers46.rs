//! Issue 46, "other readers" and "lows": the SQL docs/database.md gives for reading the
//! append-only log (run as written, on both backends, against what `resume` says at every
//! step of a run); `stats` counting the values a server keeps and the server's sizes;
//! `doctor` naming a finished run whose constructs are still open; `history` of a name bound
//! only in a scope saying where; `log` indenting records by their depth; a URL with no
//! password shown without a mask; a writer with no login name recorded as its account.

use crate::common::*;
use serde_json::Value;
use std::path::Path;

on_both!(
    the_documented_log_queries_agree_with_resume_at_every_step,
    stats_counts_what_the_server_keeps,
    doctor_names_a_finished_run_whose_constructs_are_open,
    history_of_a_name_bound_only_in_a_scope_says_where,
    log_indents_records_by_their_depth,
    a_url_without_a_password_is_shown_without_a_mask,
    a_writer_with_no_login_name_is_its_account,
    gates_verify_takes_a_gate_of_the_run,
);

/// The ```sql blocks of docs/database.md after the log queries' marker, as written.
fn documented_queries() -> Vec<String> {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/database.md"))
            .unwrap();
    let at = text
        .find("<!-- log queries")
        .expect("the log queries' marker");
    let rest = &text[at..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    rest[..end]
        .split("```sql\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap().to_string())
        .collect()
}

/// The documented queries, each whole for `run`: its backend's first line, the open starts,
/// then the query. (open constructs, current position, open parallels, branches taken)
fn log_queries(run: &Run) -> [String; 4] {
    let blocks = documented_queries();
    assert_eq!(
        blocks.len(),
        7,
        "two first lines, open_starts, four queries"
    );
    let head = match run.pg_url {
        None => blocks[0].clone(),
        Some(_) => blocks[1].replace("'RUN'", &format!("'{}'", run.id)),
    };
    let with = |q: &str| format!("{head}{}{q}", blocks[2]);
    [
        with(&blocks[3]),
        with(&blocks[4]),
        with(&blocks[5]),
        with(&blocks[6]),
    ]
}

/// Who runs `query` for a run: on SQLite the run's own project; on PostgreSQL a project of
/// its own on the same database as a role that can only read (`query` refuses the writers').
struct Reader {
    project: Option<Project>,
}

impl Reader {
    fn new(p: &Project) -> Reader {
        let Some(url) = &p.pg_url else {
            return Reader { project: None };
        };
        let r = Project::new();
        std::fs::create_dir_all(r.root().join(".prose")).unwrap();
        r.write(
            ".prose/.env",
            format!("OPENPROSE_POSTGRES_URL={}\n", pg::as_reader(url)).as_bytes(),
        );
        Reader { project: Some(r) }
    }

    /// `query --json SQL` on `run`: its rows.
    fn query(&self, run: &Run, sql: &str) -> Vec<Value> {
        let mut c = match &self.project {
            None => run.cmd(),
            Some(r) => {
                let mut c = r.cmd();
                c.args(["--run", &run.id]);
                c
            }
        };
        let a = c.args(["--json", "query", sql]).assert();
        let out = a.get_output();
        assert!(
            out.status.success(),
            "{sql}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }
}

fn append(run: &Run, args: &[&str]) -> i64 {
    let a = run.cmd().arg("exec-append").args(args).assert().success();
    String::from_utf8_lossy(&a.get_output().stdout)
        .trim()
        .parse()
        .unwrap()
}

/// Appends a record (`index`, `text`, `status`, under `parent`, with `more` arguments): its id.
fn rec(run: &Run, index: i64, text: &str, status: &str, parent: Option<i64>, more: &[&str]) -> i64 {
    let index = index.to_string();
    let mut args = vec!["--index", &index, "--text", text, "--status", status];
    let parent = parent.map(|p| p.to_string());
    if let Some(p) = &parent {
        args.extend(["--parent", p]);
    }
    args.extend(more);
    append(run, &args)
}

/// Ends the construct record `start` began (`exec-append --ends`): the end's id.
fn end(run: &Run, start: i64, status: &str, more: &[&str]) -> i64 {
    let start = start.to_string();
    let mut args = vec!["--ends", &start, "--status", status];
    args.extend(more);
    append(run, &args)
}

fn finish(run: &Run, args: &[&str]) {
    run.cmd().arg("finish").args(args).assert().success();
}

fn resume(run: &Run) -> Value {
    stdout_json(&run.cmd().args(["--json", "resume"]).assert().success())
}

fn ids(rows: &[Value], key: &str) -> Vec<i64> {
    rows.iter().filter_map(|r| r[key].as_i64()).collect()
}

/// Asserts the documented queries say what `resume` says of `run` now (`step` names when).
fn agree(run: &Run, reader: &Reader, queries: &[String; 4], step: &str) {
    let r = resume(run);
    let position = &r["position"];
    let [open, current, parallels, taken] = queries.clone().map(|q| reader.query(run, &q));

    // Open constructs, outermost first.
    let want: Vec<i64> = position["open"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids(&open, "id"), want, "{step}: open constructs");

    // The current position, and the last thing done inside it.
    match position["current"]["id"].as_i64() {
        None => assert!(current.is_empty(), "{step}: {current:?}"),
        Some(id) => {
            assert_eq!(current.len(), 1, "{step}: {current:?}");
            assert_eq!(current[0]["id"].as_i64(), Some(id), "{step}: current");
            assert_eq!(
                current[0]["statement_text"], position["current"]["statement_text"],
                "{step}"
            );
            assert_eq!(
                current[0]["after_id"].as_i64(),
                position["after"]["id"].as_i64(),
                "{step}: after"
            );
        }
    }

    // Open parallels: each branch started, by its end's status, or open.
    let resumed = r["parallel"].as_array().cloned().unwrap_or_default();
    let mut seen: Vec<String> = parallels
        .iter()
        .map(|row| row["parallel_id"].as_str().unwrap().to_string())
        .collect();
    seen.dedup();
    let want: Vec<String> = resumed
        .iter()
        .map(|p| p["parallel_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(seen, want, "{step}: open parallels");
    for p in &resumed {
        let pid = p["parallel_id"].as_str().unwrap();
        let rows: Vec<&Value> = parallels
            .iter()
            .filter(|row| row["parallel_id"] == pid)
            .collect();
        let branches: Value = serde_json::from_str(rows[0]["branches"].as_str().unwrap()).unwrap();
        assert_eq!(branches, p["branches"], "{step}");
        let with = |status: &str| -> Vec<String> {
            rows.iter()
                .filter(|row| row["branch_status"] == status)
                .map(|row| row["branch"].as_str().unwrap().to_string())
                .collect()
        };
        for status in ["completed", "failed"] {
            assert_eq!(
                Value::from(with(status)),
                p[status],
                "{step}: {pid} {status}"
            );
        }
        let open: Vec<i64> = rows
            .iter()
            .filter(|row| row["branch_status"] == "open")
            .map(|row| row["branch_record"].as_i64().unwrap())
            .collect();
        let want: Vec<i64> = p["open_branches"]
            .as_array()
            .map(|b| b.iter().map(|b| b["record"].as_i64().unwrap()).collect())
            .unwrap_or_default();
        assert_eq!(open, want, "{step}: {pid} open branches");
    }

    // Branches taken: those of the open starts are resume's; every one is in the rows.
    for e in position["open"].as_array().unwrap() {
        if let Some(t) = e["metadata"]["taken"].as_str() {
            let row = taken
                .iter()
                .find(|row| row["id"] == e["id"])
                .unwrap_or_else(|| panic!("{step}: {e} not among {taken:?}"));
            assert_eq!(row["taken"], t, "{step}");
            assert!(row["ended"].is_null(), "{step}: {row}");
        }
    }
}

/// The queries docs/database.md gives, run as written through `query --json` on a run built
/// with `exec-append` (block calls, ends that name their starts, an `if` and a `choice` with
/// the branch taken, a loop, a parallel with branches that complete, fail and stay open), say
/// at every step what `resume` says: the open constructs, the current position and what was
/// done last inside it, the open parallels with their branches, the branches taken. Where the
/// spec's own "current position" query is wrong, they are not. Reading changes nothing.
fn the_documented_log_queries_agree_with_resume_at_every_step(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let reader = Reader::new(&p);
    let queries = log_queries(&run);
    let step = |name: &str| agree(&run, &reader, &queries, name);
    step("an empty log");

    let outer = rec(&run, 1, "do outer()", "executing", None, &[]);
    step("a call");
    rec(
        &run,
        1,
        "let a = session \"A\"",
        "completed",
        Some(outer),
        &[],
    );
    let inner = rec(&run, 2, "do inner()", "executing", Some(outer), &[]);
    rec(&run, 1, "session \"I\"", "completed", Some(inner), &[]);
    step("inside the inner call");
    end(&run, inner, "completed", &[]);
    step("the inner call ended");
    // The spec's "current position" returns the ended inner call; the documented one does not.
    let spec = match &run.pg_url {
        None => "SELECT id FROM execution WHERE status = 'executing' ORDER BY id DESC LIMIT 1"
            .to_string(),
        Some(_) => format!(
            "SELECT id FROM openprose.execution WHERE run_id = '{}' AND status = 'executing'
             ORDER BY id DESC LIMIT 1",
            run.id
        ),
    };
    assert_eq!(
        ids(&reader.query(&run, &spec), "id"),
        vec![inner],
        "the spec's"
    );
    assert_eq!(ids(&reader.query(&run, &queries[1]), "id"), vec![outer]);

    let taken = |t: &str| format!(r#"{{"taken": "{t}"}}"#);
    let choice = rec(
        &run,
        3,
        "choice **speed**:",
        "started",
        Some(outer),
        &["--metadata", &taken("fast")],
    );
    step("inside a choice");
    rec(&run, 1, "session \"fast\"", "completed", Some(choice), &[]);
    end(&run, choice, "completed", &[]);
    step("the choice ended");
    let cond = rec(
        &run,
        4,
        "if **ready**:",
        "started",
        Some(outer),
        &["--metadata", &taken("elif 1")],
    );
    step("inside an if");
    let repeat = rec(
        &run,
        1,
        "repeat 2 as i:",
        "started",
        Some(cond),
        &["--metadata", r#"{"loop_id": "l1", "max": 2}"#],
    );
    rec(&run, 1, "session \"step\"", "completed", Some(repeat), &[]);
    step("inside a loop");
    rec(
        &run,
        1,
        "repeat 2 as i:",
        "iteration",
        Some(repeat),
        &["--metadata", r#"{"loop_id": "l1", "iteration": 1}"#],
    );
    step("an iteration done");
    end(
        &run,
        repeat,
        "exited",
        &["--metadata", r#"{"reason": "max"}"#],
    );
    step("the loop exited");
    let par = rec(
        &run,
        2,
        "parallel (on-fail: \"continue\"):",
        "started",
        Some(cond),
        &[
            "--metadata",
            r#"{"parallel_id": "p1", "branches": ["a", "b", "c"], "on_fail": "continue"}"#,
        ],
    );
    step("a parallel, no branch started");
    let branch = |name: &str, index: i64| {
        let meta = format!(r#"{{"parallel_id": "p1", "branch": "{name}"}}"#);
        let text = format!("{name} = session \"{name}\"");
        rec(
            &run,
            index,
            &text,
            "started",
            Some(par),
            &["--construct", "branch", "--metadata", &meta],
        )
    };
    let ba = branch("a", 1);
    let bb = branch("b", 2);
    step("two branches open");
    rec(&run, 1, "session \"a\"", "completed", Some(ba), &[]);
    end(&run, ba, "completed", &[]);
    step("a branch completed");
    rec(
        &run,
        1,
        "session \"b\"",
        "failed",
        Some(bb),
        &["--error", "no"],
    );
    end(&run, bb, "failed", &[]);
    step("a branch failed");
    let bc = branch("c", 3);
    rec(&run, 1, "session \"c\"", "completed", Some(bc), &[]);
    step("the last branch open, something done inside it");
    let before = run.snapshot();
    let parallels = reader.query(&run, &queries[2]);
    let shown: Vec<(i64, &str)> = parallels
        .iter()
        .map(|r| {
            (
                r["branch_record"].as_i64().unwrap(),
                r["branch_status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        vec![(ba, "completed"), (bb, "failed"), (bc, "open")],
        "{parallels:?}"
    );
    assert_eq!(ids(&reader.query(&run, &queries[1]), "id"), vec![bc]);
    assert_eq!(run.snapshot(), before, "reading changes nothing");
    end(&run, bc, "completed", &[]);
    step("every branch ended");
    end(&run, par, "joined", &[]);
    step("the parallel joined");
    end(&run, cond, "completed", &[]);
    step("the if ended");
    let rows = reader.query(&run, &queries[3]);
    let shown: Vec<(i64, &str, &str)> = rows
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap();
            (r["id"].as_i64().unwrap(), s("taken"), s("ended"))
        })
        .collect();
    assert_eq!(
        shown,
        vec![(choice, "fast", "completed"), (cond, "elif 1", "completed")]
    );
    end(&run, outer, "completed", &[]);
    step("everything ended");
    assert!(reader.query(&run, &queries[0]).is_empty());
}

/// `stats` of a run that bound a value over the attachment threshold: on SQLite a file of
/// `attachments/`, on PostgreSQL a value kept on the server, counted with its bytes, with the
/// run's rows' bytes (the value's chunks among them), the openprose tables' and the
/// database's; in text, the server's lines and no `db bytes`. Across runs, the same summed.
/// Reading changes nothing.
fn stats_counts_what_the_server_keeps(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let size = 407_979;
    let big: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
    let file = p.write("big.txt", &big);
    run.cmd()
        .args(["bind", "report", "--file"])
        .arg(&file)
        .assert()
        .success();
    run.bind("small", "12345", None);
    let before = run.snapshot();
    let v = stdout_json(&run.cmd().args(["--json", "stats"]).assert().success());
    let one = &v["runs"][0];
    let text = String::from_utf8_lossy(
        &run.cmd()
            .arg("stats")
            .assert()
            .success()
            .get_output()
            .stdout,
    )
    .into_owned();
    let line = |key: &str| -> Option<String> {
        text.lines()
            .find(|l| l.starts_with(&format!("{key:<22} ")))
            .map(|l| l[23..].to_string())
    };
    match b {
        Backend::Sqlite => {
            assert!(one["server"].is_null(), "{v}");
            assert_eq!(one["attachment_files"], 1, "{v}");
            assert_eq!(one["attachment_bytes"], size, "{v}");
            assert!(line("db bytes").is_some(), "{text}");
            assert!(line("server attachments").is_none(), "{text}");
        }
        Backend::Postgres => {
            let s = &one["server"];
            assert_eq!(s["attachments"], 1, "{v}");
            assert_eq!(s["attachment_bytes"], size, "{v}");
            let rows = s["row_bytes"].as_u64().unwrap();
            let tables = s["tables_bytes"].as_u64().unwrap();
            let database = s["database_bytes"].as_u64().unwrap();
            assert!(rows >= size as u64, "the chunks are the run's rows: {v}");
            assert!(tables >= rows && database >= tables, "{v}");
            assert!(one["db_bytes"].is_null(), "{v}");
            assert_eq!(
                line("server attachments").as_deref(),
                Some(format!("1 value, {size} bytes").as_str()),
                "{text}"
            );
            assert_eq!(line("server row bytes"), Some(rows.to_string()), "{text}");
            assert!(line("db bytes").is_none(), "{text}");
            // Across runs (another run, with nothing kept): the server's figures summed.
            let other = p.init();
            other.bind("x", "1", None);
            let all = stdout_json(&p.cmd().args(["--json", "stats"]).assert().success());
            assert_eq!(all["totals"]["server"]["attachments"], 1, "{all}");
            assert_eq!(all["totals"]["server"]["attachment_bytes"], size, "{all}");
            let text = String::from_utf8_lossy(
                &p.cmd().arg("stats").assert().success().get_output().stdout,
            )
            .into_owned();
            assert!(!text.contains("db bytes"), "{text}");
            assert!(text.contains(&format!("1 value, {size} bytes")), "{text}");
        }
    }
    assert_eq!(run.snapshot(), before, "stats changes nothing");
}

/// `doctor` names a finished run (completed or failed) whose constructs were never ended:
/// how many, and the innermost. A finished run whose every construct ended, and a running
/// run with open constructs, are no problem. `doctor` without `--fix` changes nothing.
fn doctor_names_a_finished_run_whose_constructs_are_open(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    // Finished, everything ended.
    let tidy = p.init();
    let call = rec(&tidy, 1, "do a()", "executing", None, &[]);
    end(&tidy, call, "completed", &[]);
    finish(&tidy, &["--status", "completed"]);
    // Running, with an open construct: not finished, so nothing to say.
    let running = p.init();
    rec(&running, 1, "do a()", "executing", None, &[]);
    let a = p.cmd().arg("doctor").assert();
    let said = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(!said.contains("open construct"), "{said}");
    assert_eq!(code(&a), 0, "{said}{}", stderr(&a));

    // Failed, inside a call and a try: two constructs never ended.
    let broken = p.init();
    let call = rec(&broken, 1, "do deploy()", "executing", None, &[]);
    let attempt = rec(&broken, 1, "try:", "started", Some(call), &[]);
    rec(
        &broken,
        1,
        "session \"push\"",
        "failed",
        Some(attempt),
        &["--error", "denied"],
    );
    finish(&broken, &["--status", "failed", "--error", "denied"]);
    let snapshots = |runs: &[&Run]| runs.iter().map(|r| r.snapshot()).collect::<Vec<_>>();
    let before = snapshots(&[&tidy, &running, &broken]);
    let a = p.cmd().arg("doctor").assert();
    assert_eq!(code(&a), 1, "{}", stderr(&a));
    let said = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    let lines: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("open construct"))
        .collect();
    assert_eq!(lines.len(), 1, "{said}");
    assert!(lines[0].contains(&broken.id), "{said}");
    let want = format!(
        "open construct: the run is finished, but 2 constructs never ended \
         (innermost: record {attempt}, try:)"
    );
    assert!(lines[0].contains(&want), "{said}");
    // --run narrows it to one run: the tidy one has nothing to say.
    let a = p.cmd().args(["--run", &tidy.id, "doctor"]).assert();
    assert_eq!(
        code(&a),
        0,
        "{}",
        String::from_utf8_lossy(&a.get_output().stdout)
    );
    let a = p
        .cmd()
        .args(["--run", &broken.id, "--json", "doctor"])
        .assert();
    assert_eq!(code(&a), 1);
    let v = stdout_json(&a);
    assert!(v.to_string().contains("open construct"), "{v}");
    assert_eq!(snapshots(&[&tidy, &running, &broken]), before);
}

/// `history NAME` of a name bound only in a scope (`bind NAME V --execution-id X`) says, in
/// one line with exit 3, where it was written and which flag reaches it; a name never
/// written says so as before; with the flag, the history is there. Nothing changes.
fn history_of_a_name_bound_only_in_a_scope_says_where(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let call = run.exec(1, "do work()", "executing", None);
    let other = run.exec(2, "do more()", "executing", None);
    run.bind("draft", "v1", Some(call));
    let before = run.snapshot();
    let refused = |args: &[&str]| {
        let a = run.cmd().arg("history").args(args).assert().failure();
        let err = stderr(&a);
        assert_eq!(code(&a), 3, "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert_eq!(run.snapshot(), before, "{args:?}");
        err
    };
    let err = refused(&["draft"]);
    assert!(
        err.contains(&format!(
            "it was written in the scope of execution {call} (pass --execution-id {call})"
        )),
        "{err}"
    );
    assert!(err.contains("draft"), "{err}");
    // From a scope that does not see it either.
    let err = refused(&["draft", "--execution-id", &other.to_string()]);
    assert!(err.contains(&format!("from execution {other}")), "{err}");
    assert!(err.contains(&format!("--execution-id {call}")), "{err}");
    // Two scopes: both named, the first one's flag given.
    run.bind("draft", "v2", Some(other));
    let before = run.snapshot();
    let a = run.cmd().args(["history", "draft"]).assert().failure();
    assert_eq!(code(&a), 3);
    assert!(
        stderr(&a).contains(&format!(
            "scope of executions {call}, {other} (pass --execution-id {call})"
        )),
        "{}",
        stderr(&a)
    );
    assert_eq!(run.snapshot(), before);
    // Never written: as before.
    let a = run.cmd().args(["history", "nothing"]).assert().failure();
    assert_eq!(code(&a), 3);
    assert!(stderr(&a).contains("never written here"), "{}", stderr(&a));
    // With the flag it says, the history is there.
    let h = stdout_json(
        &run.cmd()
            .args([
                "--json",
                "history",
                "draft",
                "--execution-id",
                &call.to_string(),
            ])
            .assert()
            .success(),
    );
    assert_eq!(h["versions"].as_array().unwrap().len(), 1, "{h}");
}

/// `log` indents each record two spaces a level under its parent (an end at its start's
/// level), `--since` counting the parents it does not show; `--json` prints the records as
/// before, with no field added.
fn log_indents_records_by_their_depth(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let call = rec(&run, 1, "do outer()", "executing", None, &[]);
    let cond = rec(
        &run,
        1,
        "if **x**:",
        "started",
        Some(call),
        &["--metadata", r#"{"taken": "if"}"#],
    );
    let inside = rec(&run, 1, "session \"deep\"", "completed", Some(cond), &[]);
    end(&run, cond, "completed", &[]);
    end(&run, call, "completed", &[]);
    rec(&run, 2, "session \"top\"", "completed", None, &[]);
    let text = |args: &[&str]| {
        let a = run.cmd().arg("log").args(args).assert().success();
        String::from_utf8_lossy(&a.get_output().stdout).into_owned()
    };
    // What follows each line's time: its indent and narration (without its writer's name).
    let shown = |t: &str| -> Vec<String> {
        t.lines()
            .map(|l| {
                l[9..]
                    .rsplit_once(" · ")
                    .map_or(&l[9..], |(n, _)| n)
                    .to_string()
            })
            .collect()
    };
    let all = text(&[]);
    assert_eq!(
        shown(&all),
        vec![
            "1→ do outer() …",
            "  1→ if **x**: …",
            "    1→ session \"deep\" ✓",
            "  1→ if **x**: ✓",
            "1→ do outer() ✓",
            "2→ session \"top\" ✓",
        ],
        "{all}"
    );
    // From inside: the depth counts the parents before --since.
    let since = text(&["--since", &cond.to_string()]);
    assert_eq!(shown(&since)[0], "    1→ session \"deep\" ✓", "{since}");
    let a = run.cmd().args(["--json", "log"]).assert().success();
    let lines = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    let record: Value = serde_json::from_str(lines.lines().nth(2).unwrap()).unwrap();
    assert_eq!(record["id"].as_i64(), Some(inside));
    let mut keys: Vec<&str> = record
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    keys.sort();
    let mut want = vec![
        "id",
        "statement_index",
        "statement_text",
        "status",
        "parent_id",
        "at",
        "error_message",
        "metadata",
        "by",
        "narration",
    ];
    want.sort();
    assert_eq!(keys, want, "{record}");
    assert_eq!(record["narration"], "1→ session \"deep\" ✓");
}

/// A PostgreSQL URL with no password is shown as it is, never as `user:***@`, which would say
/// there was one; a password there is still masked. Through the errors of an unreachable
/// server (exit 75, nothing made) and, on PostgreSQL, the project's own server in `init` and
/// `stats`.
fn a_url_without_a_password_is_shown_without_a_mask(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    if let Some(url) = &p.pg_url {
        let has_password = url
            .split_once("://")
            .and_then(|(_, r)| r.rsplit_once('@'))
            .is_some_and(|(u, _)| u.contains(':'));
        let run = p.init();
        let v = stdout_json(&run.cmd().args(["--json", "stats"]).assert().success());
        let server = v["runs"][0]["settings"]["server"].as_str().unwrap();
        assert_eq!(server.contains(":***@"), has_password, "{server}");
        assert_eq!(server.contains("***"), has_password, "{server}");
    }
    let elsewhere = Project::new();
    for (url, shown, hidden) in [
        (
            "postgres://vm@127.0.0.1:9/db?sslmode=disable",
            "postgres://vm@127.0.0.1:9/db",
            None,
        ),
        (
            "postgres://vm:s3cret@127.0.0.1:9/db?sslmode=disable",
            "postgres://vm:***@127.0.0.1:9/db",
            Some("s3cret"),
        ),
    ] {
        std::fs::create_dir_all(elsewhere.root().join(".prose")).unwrap();
        elsewhere.write(
            ".prose/.env",
            format!("OPENPROSE_POSTGRES_URL={url}\n").as_bytes(),
        );
        let a = elsewhere
            .cmd()
            .args(["init", "--backend", "postgres", "--run-id", "r"])
            .assert()
            .failure();
        let err = stderr(&a);
        assert_eq!(code(&a), 75, "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(shown), "{url}: {err}");
        assert_eq!(err.contains("***"), hidden.is_some(), "{url}: {err}");
        if let Some(secret) = hidden {
            assert!(!err.contains(secret), "{err}");
        }
        assert!(!elsewhere.root().join(".prose/runs/r").exists());
    }
}

/// The account this test runs as, as `id` names it: its user name, else `uid:N`.
fn account() -> String {
    let id = |flag: &str| {
        std::process::Command::new("id")
            .arg(flag)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match id("-un") {
        Some(name) if !name.is_empty() => name.to_lowercase(),
        _ => format!("uid:{}", id("-u").unwrap()),
    }
}

/// With no `--as`, PROSE_PRINCIPAL, USER or LOGNAME, a record and a binding are by the
/// account the process runs as, never `unknown` (which names raw writers); LOGNAME alone is
/// taken as before; deciding still needs a name (exit 2, nothing changed).
fn a_writer_with_no_login_name_is_its_account(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let nameless = |args: &[&str]| {
        let mut c = run.cmd();
        c.env_remove("USER").env_remove("LOGNAME").args(args);
        c
    };
    nameless(&[
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
    nameless(&["bind", "x", "1"]).assert().success();
    let mut c = run.cmd();
    c.env_remove("USER")
        .env("LOGNAME", "Logan")
        .args(["bind", "x", "2"])
        .assert()
        .success();
    let me = account();
    let log = String::from_utf8_lossy(
        &run.cmd()
            .args(["--json", "log"])
            .assert()
            .success()
            .get_output()
            .stdout,
    )
    .into_owned();
    let record: Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    assert_eq!(record["by"], me.as_str(), "{record}");
    let h = stdout_json(
        &run.cmd()
            .args(["--json", "history", "x"])
            .assert()
            .success(),
    );
    let by: Vec<&str> = h["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["by"].as_str().unwrap())
        .collect();
    assert_eq!(by, vec!["logan", me.as_str()], "{h}");
    // A decision names someone: no login name is still no one to decide as.
    run.cmd()
        .args([
            "gates", "create", "deploy", "--prompt", "ok?", "--as", "carol",
        ])
        .assert()
        .success();
    let before = run.snapshot();
    let a = nameless(&["approve", "deploy", "--yes"]).assert().failure();
    assert_eq!(code(&a), 2, "{}", stderr(&a));
    assert_eq!(run.snapshot(), before);
}

/// `gates verify GATE` (and `gates verify RUN GATE`): the run's chain and that gate against
/// its log, exit 0 when intact; a gate the run does not have is exit 3, nothing changed.
fn gates_verify_takes_a_gate_of_the_run(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    for g in ["deploy", "other"] {
        run.cmd()
            .args(["gates", "create", g, "--prompt", "ok?"])
            .assert()
            .success();
    }
    let before = run.snapshot();
    for args in [vec!["deploy"], vec![run.id.as_str(), "deploy"]] {
        let a = run
            .cmd()
            .args(["--json", "gates", "verify"])
            .args(&args)
            .assert();
        assert_eq!(code(&a), 0, "{args:?}: {}", stderr(&a));
        let v = stdout_json(&a);
        assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
        assert_eq!(v[0]["run_id"], run.id.as_str());
        assert_eq!(v[0]["verdict"], "intact", "{v}");
    }
    // Without a gate, as before: every run.
    run.cmd().args(["gates", "verify"]).assert().success();
    let a = run
        .cmd()
        .args(["gates", "verify", "nope"])
        .assert()
        .failure();
    assert_eq!(code(&a), 3, "{}", stderr(&a));
    assert!(stderr(&a).contains("gate not found"), "{}", stderr(&a));
    assert_eq!(run.snapshot(), before, "verifying changes nothing");
    // Another gate's row changed behind prose-state's back: this gate is still intact, that
    // one is tampered (exit 9).
    run.view().raw(
        "UPDATE gates SET status = 'approved' WHERE id = 'other'",
        "UPDATE openprose.gates SET status = 'approved' WHERE run_id = '$RUN' AND id = 'other'",
    );
    let a = run.cmd().args(["gates", "verify", "deploy"]).assert();
    assert_eq!(code(&a), 0, "{}", stderr(&a));
    let a = run.cmd().args(["gates", "verify", "other"]).assert();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
}
