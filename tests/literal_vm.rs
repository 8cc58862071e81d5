//! The literal VM (issue 28): a harness plays the VM and its subagents on a corpus of programs,
//! using only command lines taken from the text `guide vm` and `guide subagent` print. Each
//! command is a guide line with the program's values put in (index, text, metadata, ids): the
//! options, statuses and parents come from the guide, so a guide that changes its shapes
//! changes what the harness writes, and `resume` must still follow. After every step `resume`
//! must name exactly where the program stands: the innermost open construct and the last thing
//! done inside it. Now and then the VM is SIGKILLed mid-step; it then reads `resume` to learn
//! whether its step landed, as a VM that lost its context would, and carries on.

use crate::common::*;
use serde_json::Value;
use std::collections::HashMap;
use std::time::Duration;

on_both!(the_literal_vm_plays_the_corpus);

/// The guide lines the harness plays, found by what they are.
struct Lines {
    all: Vec<String>,
    subagent_output: String,
    approve: String,
    reject: String,
}

impl Lines {
    fn read(run: &Run) -> Lines {
        let text = |args: &[&str]| {
            let out = run.cmd().args(["guide"]).args(args).assert().success();
            String::from_utf8(out.get_output().stdout.clone()).unwrap()
        };
        let sh = |md: &str| -> Vec<String> {
            let mut lines = Vec::new();
            let mut inside = false;
            for l in md.lines() {
                match (inside, l.trim_end()) {
                    (false, "```sh") => inside = true,
                    (true, "```") => inside = false,
                    (true, l) if !l.trim().is_empty() => lines.push(l.to_string()),
                    _ => {}
                }
            }
            lines
        };
        let all = sh(&text(&["vm"]));
        let sub = sh(&text(&["subagent", "--name", "NAME"]));
        let approver = sh(&text(&["approver"]));
        let find = |lines: &[String], what: &str, p: &dyn Fn(&str) -> bool| {
            lines
                .iter()
                .find(|l| p(l))
                .unwrap_or_else(|| panic!("no guide line for {what}"))
                .clone()
        };
        Lines {
            subagent_output: find(&sub, "subagent output", &|l| {
                l.contains(" bind ") && l.contains(" - ")
            }),
            approve: find(&approver, "approve", &|l| {
                l.starts_with("prose-state approve")
            }),
            reject: find(&approver, "reject", &|l| {
                l.starts_with("prose-state reject")
            }),
            all,
        }
    }

    /// The first VM line with all of these pieces.
    fn with(&self, pieces: &[&str]) -> String {
        self.all
            .iter()
            .find(|l| pieces.iter().all(|p| l.contains(p)))
            .unwrap_or_else(|| panic!("no guide line with {pieces:?}"))
            .clone()
    }
}

/// A shell line as words: single and double quotes, `$(...)` around the command and
/// `VAR=$(` before it taken off. Variables stay as written (`$BLOCK`), to be put in.
fn words(line: &str) -> Vec<String> {
    let line = line.split("   #").next().unwrap().trim();
    let line = match line.split_once("=$(") {
        Some((var, rest)) if !var.contains(' ') => rest.strip_suffix(')').unwrap(),
        _ => line,
    };
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in line.chars() {
        match (quote, c) {
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (Some(q), c) if c == q => quote = None,
            (None, ' ') => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (_, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A guide line's words with the program's values put in: each `--option` named in `set`
/// gets that value (an option the guide line does not have is not added: the guide decides
/// the shape); `$VAR`s are replaced from `vars`.
fn fill(line: &str, set: &[(&str, String)], vars: &HashMap<&str, String>) -> Vec<String> {
    let mut w = words(line);
    assert_eq!(w[0], "prose-state", "{line}");
    w.remove(0);
    for i in 0..w.len() {
        if let Some((_, v)) = set.iter().find(|(k, _)| *k == w[i]) {
            w[i + 1] = v.clone();
        }
    }
    for x in &mut w {
        for (k, v) in vars {
            *x = x.replace(&format!("${k}"), v);
        }
    }
    // The harness's command names the run already (the same one the guide filled in).
    if let Some(i) = w.iter().position(|x| x == "--run") {
        assert_eq!(w[i + 1], vars["PROSE_RUN"]);
        w.drain(i..i + 2);
    }
    w
}

/// One construct of a program.
enum Node {
    Stmt(&'static str),
    /// A subagent's session: it writes its output binding, then the VM logs the statement.
    Session(&'static str, &'static str),
    Block(&'static str, Vec<Node>),
    /// try: the body, a statement that fails, the catch's statements.
    Try(Vec<Node>, &'static str, Vec<Node>),
    /// A statement with `(retry: 3)` that fails this many times first.
    Retry(&'static str, i64),
    Parallel(Vec<&'static str>),
    Loop(i64, Vec<Node>),
    /// approve GATE: rejections before the approval.
    Approve(&'static str, i64),
}

use Node::*;

fn corpus() -> Vec<(&'static str, Vec<Node>)> {
    vec![
        (
            // The spec's own example: research, a parallel of three, a loop, a gate.
            "spec example",
            vec![
                Session("let research = session: researcher", "research"),
                Parallel(vec!["a", "b", "c"]),
                Loop(2, vec![Session("session \"Refine\"", "draft")]),
                Retry("session \"Risky\"", 1),
                Approve("production_deploy", 0),
                Stmt("output result = research"),
            ],
        ),
        (
            "nested blocks",
            vec![
                Stmt("let a = session: s"),
                Block(
                    "do outer(a)",
                    vec![
                        Stmt("let b = session: t"),
                        Block("do inner(b)", vec![Stmt("session \"deep\"")]),
                        Stmt("session \"after inner\""),
                    ],
                ),
                Stmt("output done = a"),
            ],
        ),
        (
            "try and catch",
            vec![
                Try(
                    vec![Stmt("session \"prepare\"")],
                    "session \"Risky\"",
                    vec![Stmt("session \"Fallback\"")],
                ),
                Stmt("session \"go on\""),
            ],
        ),
        (
            "retries",
            vec![
                Retry("session \"Flaky\"", 2),
                Retry("session \"Flakier\"", 1),
            ],
        ),
        (
            "parallel then block",
            vec![
                Parallel(vec!["x", "y"]),
                Block(
                    "do merge(x, y)",
                    vec![Session("let m = session: merger", "m")],
                ),
            ],
        ),
        (
            "loop with a block",
            vec![Loop(
                3,
                vec![
                    Stmt("session \"draft\""),
                    Block("do check(draft)", vec![Stmt("session \"review\"")]),
                ],
            )],
        ),
        (
            "gate rejected then approved",
            vec![
                Stmt("session \"draft\""),
                Approve("review", 1),
                Stmt("session \"ship\""),
            ],
        ),
        (
            "block inside try inside loop",
            vec![Loop(
                2,
                vec![Try(
                    vec![Block("do step()", vec![Stmt("session \"one\"")])],
                    "session \"two\"",
                    vec![Stmt("session \"recover\"")],
                )],
            )],
        ),
        (
            "many statements",
            (0..20).map(|_| Stmt("session \"work\"")).collect(),
        ),
        (
            "everything once",
            vec![
                Session("let r = session: researcher", "r"),
                Block(
                    "do process(r)",
                    vec![Parallel(vec!["p", "q"]), Retry("session \"call\"", 1)],
                ),
                Loop(1, vec![Approve("each", 0)]),
                Stmt("output out = r"),
            ],
        ),
    ]
}

/// An open construct as the harness knows it: its statement text, its record id, and the last
/// thing done inside it.
struct Open {
    text: String,
    id: i64,
    after: Option<String>,
}

struct Vm<'a> {
    run: &'a Run,
    lines: &'a Lines,
    stack: Vec<Open>,
    /// The last thing done at the top level.
    after: Option<String>,
    index: i64,
    steps: usize,
    kills: usize,
    /// Kill the step when the step counter hits a multiple of this.
    kill_every: usize,
    rng: u64,
    /// Records `gates create` appended (the `approve` record, one per opening).
    gate_records: usize,
}

impl Vm<'_> {
    fn vars(&self) -> HashMap<&'static str, String> {
        let mut v = HashMap::new();
        v.insert("PROSE_RUN", self.run.id.clone());
        // The innermost open block, try or loop is what the guide's $BLOCK/$TRY/$LOOP name.
        if let Some(o) = self.stack.last() {
            for k in ["BLOCK", "TRY", "LOOP"] {
                v.insert(k, o.id.to_string());
            }
        }
        v
    }

    fn rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// Runs one command of the guide; sometimes SIGKILLs it first and recovers from
    /// `resume`, as a VM that lost its context does. Returns its stdout.
    fn step(
        &mut self,
        argv: Vec<String>,
        killable: bool,
        landed: &dyn Fn(&Value) -> bool,
    ) -> String {
        self.steps += 1;
        if killable && self.kills < 3 && self.steps.is_multiple_of(self.kill_every) {
            self.kills += 1;
            let before = self.resume()["position"]["last_event"]["id"]
                .as_i64()
                .unwrap_or(0);
            let mut c = self.run.std_cmd();
            let mut child = c
                .args(&argv)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_micros(self.rand() % 4000));
            let _ = child.kill();
            let _ = child.wait();
            // What a VM does after a crash: ask resume whether the step landed.
            let doc = self.resume();
            let last = doc["position"]["last_event"]["id"].as_i64().unwrap_or(0);
            if last > before && landed(&doc) {
                return last.to_string();
            }
        }
        let out = self.run.cmd().args(&argv).assert();
        let out = out.success();
        String::from_utf8(out.get_output().stdout.clone()).unwrap()
    }

    fn resume(&self) -> Value {
        stdout_json(&self.run.cmd().args(["--json", "resume"]).assert().success())
    }

    /// Resume names exactly where the program stands.
    fn check(&self, what: &str) {
        let doc = self.resume();
        let p = &doc["position"];
        let want_current = self.stack.last().map(|o| o.text.clone());
        let want_after = match self.stack.last() {
            Some(o) => o.after.clone(),
            None => self.after.clone(),
        };
        let text = |v: &Value| v["statement_text"].as_str().map(str::to_string);
        assert_eq!(text(&p["current"]), want_current, "after {what}: {doc}");
        assert_eq!(text(&p["after"]), want_after, "after {what}: {doc}");
        let open: Vec<String> = p["open"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(text)
            .collect();
        let want_open: Vec<String> = self.stack.iter().map(|o| o.text.clone()).collect();
        assert_eq!(open, want_open, "after {what}");
    }

    fn done(&mut self, text: &str) {
        match self.stack.last_mut() {
            Some(o) => o.after = Some(text.to_string()),
            None => self.after = Some(text.to_string()),
        }
    }

    fn last_is<'a>(text: &'a str, status: &'static str) -> impl Fn(&Value) -> bool + 'a {
        move |doc: &Value| {
            let e = &doc["position"]["last_event"];
            e["statement_text"] == text && e["status"] == status
        }
    }

    /// Appends a record with a guide line. Inside a construct every record names it as
    /// parent (the guide's table: "the body's records with --parent"): a line that has no
    /// `--parent` gets one.
    fn append(
        &mut self,
        line: &str,
        index: i64,
        text: &str,
        status: &'static str,
        meta: Option<String>,
        err: bool,
    ) -> i64 {
        let mut set = vec![
            ("--index", index.to_string()),
            ("--text", text.to_string()),
            ("--key", format!("k{}", self.steps + 1)),
        ];
        if let Some(m) = meta {
            set.push(("--metadata", m));
        }
        if err {
            set.push(("--error", "it failed".to_string()));
        }
        let mut argv = fill(line, &set, &self.vars());
        if let (Some(o), false) = (self.stack.last(), argv.iter().any(|w| w == "--parent")) {
            argv.extend(["--parent".to_string(), o.id.to_string()]);
        }
        let out = self.step(argv, true, &Self::last_is(text, status));
        out.trim().parse().unwrap_or(0)
    }

    fn next_index(&mut self) -> i64 {
        self.index += 1;
        self.index
    }

    fn play(&mut self, nodes: &[Node]) {
        for n in nodes {
            self.node(n);
        }
    }

    fn node(&mut self, n: &Node) {
        let l = self.lines;
        let at = self.next_index();
        let stmt_line = l.with(&["exec-append", "--status completed --key"]);
        match n {
            Stmt(text) => {
                self.append(&stmt_line, at, text, "completed", None, false);
                self.done(text);
                self.check(text);
            }
            Session(text, name) => {
                // The subagent's line pipes its output into `bind NAME -`: the same bytes on
                // stdin here.
                let (_, bind) = l.subagent_output.split_once("| ").unwrap();
                let argv: Vec<String> = fill(bind, &[], &self.vars())
                    .into_iter()
                    .map(|w| if w == "NAME" { name.to_string() } else { w })
                    .collect();
                self.run
                    .cmd()
                    .args(&argv)
                    .write_stdin(format!("{name}: the output\n"))
                    .assert()
                    .success();
                let got = self.run.get(name, None);
                assert_eq!(got, format!("{name}: the output\n").as_bytes());
                self.append(&stmt_line, at, text, "completed", None, false);
                self.done(text);
                self.check(text);
            }
            Block(text, body) => {
                let start = l.with(&["BLOCK=$(", "--status executing"]);
                let id = self.append(&start, at, text, "executing", None, false);
                self.stack.push(Open {
                    text: text.to_string(),
                    id,
                    after: None,
                });
                self.check(text);
                self.play(body);
                let end = l.with(&["'do process(chunk)' --status completed"]);
                self.stack.pop();
                self.append(&end, at, text, "completed", None, false);
                self.done(text);
                self.check(text);
            }
            Try(body, failing, catch) => {
                let start = l.with(&["TRY=$("]);
                let id = self.append(&start, at, "try:", "started", None, false);
                self.stack.push(Open {
                    text: "try:".into(),
                    id,
                    after: None,
                });
                self.check("try:");
                self.play(body);
                let fail = l.with(&["--status failed", "\"$TRY\""]);
                let fat = self.next_index();
                self.append(&fail, fat, failing, "failed", None, true);
                self.done(failing);
                self.check(failing);
                self.play(catch);
                self.stack.pop();
                let end = l.with(&["--text 'try:' --status completed"]);
                self.append(&end, at, "try:", "completed", None, false);
                self.done("try:");
                self.check("end of try");
            }
            Retry(text, failures) => {
                let fail = l.with(&["'session \"Flaky\"' --status failed"]);
                let retry = l.with(&["'session \"Flaky\"' --status retry"]);
                let ok = l.with(&["'session \"Flaky\"' --status completed"]);
                for attempt in 1..=*failures {
                    self.append(&fail, at, text, "failed", None, true);
                    self.done(text);
                    self.check(text);
                    let meta = format!(r#"{{"attempt": {}, "max": 3}}"#, attempt + 1);
                    self.append(&retry, at, text, "retry", Some(meta), false);
                    self.done(text);
                    self.check(text);
                    let doc = self.resume();
                    assert_eq!(doc["retries"][0]["attempt"], attempt + 1, "{doc}");
                }
                let meta = format!(r#"{{"attempt": {}}}"#, failures + 1);
                self.append(&ok, at, text, "completed", Some(meta), false);
                self.done(text);
                self.check(text);
            }
            Parallel(branches) => {
                let pid = format!("p{at}");
                let start = l.with(&["'parallel:' --status started"]);
                let all: Vec<String> = branches.iter().map(|b| format!("\"{b}\"")).collect();
                let meta = format!(
                    r#"{{"parallel_id": "{pid}", "branches": [{}]}}"#,
                    all.join(", ")
                );
                let id = self.append(&start, at, "parallel:", "started", Some(meta), false);
                self.stack.push(Open {
                    text: "parallel:".into(),
                    id,
                    after: None,
                });
                self.check("parallel:");
                let branch = l.with(&["'parallel:a' --status completed"]);
                for (i, b) in branches.iter().enumerate() {
                    let text = format!("parallel:{b}");
                    let meta = format!(r#"{{"parallel_id": "{pid}", "branch": "{b}"}}"#);
                    self.append(&branch, at, &text, "completed", Some(meta), false);
                    let doc = self.resume();
                    let outstanding = doc["parallel"][0]["outstanding"].as_array().unwrap().len();
                    assert_eq!(outstanding, branches.len() - i - 1, "{doc}");
                }
                let join = l.with(&["'parallel:' --status joined"]);
                self.stack.pop();
                self.append(
                    &join,
                    at,
                    "parallel:",
                    "joined",
                    Some(format!(r#"{{"parallel_id": "{pid}"}}"#)),
                    false,
                );
                self.done("parallel:");
                self.check("join");
            }
            Loop(n, body) => {
                let lid = format!("l{at}");
                let start = l.with(&["LOOP=$("]);
                let meta = format!(r#"{{"loop_id": "{lid}", "max": {n}}}"#);
                let id = self.append(&start, at, "loop", "started", Some(meta), false);
                self.stack.push(Open {
                    text: "loop".into(),
                    id,
                    after: None,
                });
                self.check("loop");
                for i in 1..=*n {
                    self.play(body);
                    let doc = self.resume();
                    let l1 = doc["loops"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|x| x["loop_id"] == lid.as_str())
                        .unwrap()
                        .clone();
                    assert_eq!(l1["current"], i, "{doc}");
                    let it = l.with(&["--status iteration"]);
                    let meta = format!(r#"{{"loop_id": "{lid}", "iteration": {i}}}"#);
                    self.append(&it, at, "loop", "iteration", Some(meta), false);
                    self.done("loop");
                    self.check("iteration");
                }
                let exit = l.with(&["--status exited"]);
                self.stack.pop();
                let meta = format!(
                    r#"{{"loop_id": "{lid}", "iteration": {n}, "reason": "condition_satisfied"}}"#
                );
                self.append(&exit, at, "loop", "exited", Some(meta), false);
                self.done("loop");
                self.check("loop exit");
            }
            Approve(gate, rejections) => {
                let text = format!("approve {gate}:");
                let vars = self.vars();
                let create = l.with(&["gates create deploy"]);
                let reopen = l.with(&["gates create review --reopen"]);
                let wait = l.with(&["gates wait deploy"]);
                let gate_set = |line: &str| {
                    let mut w = fill(line, &[("--index", at.to_string())], &vars);
                    for x in &mut w {
                        if x == "deploy" || x == "review" {
                            *x = gate.to_string();
                        }
                    }
                    w
                };
                // A gate opened again in a loop reopens it.
                let exists = self.resume()["gates"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|g| g["id"] == *gate);
                // A gate that may be rejected is created with the guide's `retry` line.
                let first = if exists || *rejections > 0 {
                    gate_set(&reopen)
                } else {
                    gate_set(&create)
                };
                self.run.cmd().args(&first).assert().success();
                self.gate_records += 1;
                for r in 0..=*rejections {
                    let doc = self.resume();
                    let g = doc["gates"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|g| g["id"] == *gate)
                        .unwrap()
                        .clone();
                    assert_eq!(g["next_step"]["action"], "wait", "{doc}");
                    let decide = if r < *rejections {
                        &l.reject
                    } else {
                        &l.approve
                    };
                    let argv: Vec<String> = fill(decide, &[], &vars)
                        .into_iter()
                        .map(|w| {
                            if w == "deploy" || w == "review" {
                                gate.to_string()
                            } else {
                                w
                            }
                        })
                        .collect();
                    self.run
                        .cmd()
                        .env("PROSE_PRINCIPAL", "alice")
                        .args(&argv)
                        .assert()
                        .success();
                    // The guide waits with `--instance N`: the opening `gates create` printed.
                    let listed = self
                        .run
                        .cmd()
                        .args(["--json", "gates", "--status", "all"])
                        .assert()
                        .success();
                    let instance = stdout_json(&listed)
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|g| g["id"] == *gate)
                        .unwrap()["instance"]
                        .as_i64()
                        .unwrap();
                    let mut wait_argv = gate_set(&wait);
                    let at = wait_argv.iter().position(|w| w == "--instance").unwrap();
                    wait_argv[at + 1] = instance.to_string();
                    let code = self
                        .run
                        .cmd()
                        .args(&wait_argv)
                        .assert()
                        .get_output()
                        .status
                        .code();
                    let doc = self.resume();
                    let g = doc["gates"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|g| g["id"] == *gate)
                        .unwrap()
                        .clone();
                    if r < *rejections {
                        assert_eq!(code, Some(5));
                        // The create line's on_reject, as the program wrote it, names the step.
                        assert_eq!(g["next_step"]["action"], "retry", "{doc}");
                        self.run.cmd().args(gate_set(&reopen)).assert().success();
                        self.gate_records += 1;
                    } else {
                        assert_eq!(code, Some(0));
                        assert_eq!(g["next_step"]["action"], "continue", "{doc}");
                    }
                }
                let done = l.with(&["--text 'approve deploy:' --status completed"]);
                self.append(&done, at, &text, "completed", None, false);
                self.done(&text);
                self.check(&text);
            }
        }
    }
}

fn the_literal_vm_plays_the_corpus(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let mut kills = 0;
    let mut steps = 0;
    for (name, program) in corpus() {
        let run = p.init();
        let lines = Lines::read(&run);
        let mut vm = Vm {
            run: &run,
            lines: &lines,
            stack: Vec::new(),
            after: None,
            index: 0,
            steps: 0,
            kills: 0,
            kill_every: 4,
            rng: 0x9e37_79b9_7f4a_7c15 ^ name.len() as u64,
            gate_records: 0,
        };
        vm.play(&program);
        assert!(vm.stack.is_empty(), "{name}");
        kills += vm.kills;
        steps += vm.steps;
        // Nothing ran twice and nothing was lost to a kill: one record per step.
        let doc = stdout_json(&run.cmd().args(["--json", "resume"]).assert().success());
        assert!(doc["position"]["current"].is_null(), "{name}: {doc}");
        assert_eq!(
            doc["counts"]["records"].as_u64(),
            Some((vm.steps + vm.gate_records) as u64),
            "{name}"
        );
    }
    eprintln!("literal VM: {kills} kills in {steps} steps");
    assert!(kills >= 20, "{kills} kills in {steps} steps");
}
