//! The whole language, crash or not (issue 45): a generator of OpenProse programs over the
//! construct table (`src/language.rs`), each played by a literal VM whose every command is a
//! line of `guide vm` (and its subagents' of `guide subagent`, its approver's of `guide
//! approver`) with the program's values put in, through the command line and through MCP, on
//! both backends.
//!
//! Programs nest to depth 4: block invocations with recursion (`do refine(draft, depth - 1)`,
//! the same statement at every depth, each call a frame of its own), `repeat`, `for`, `map`
//! and `loop until` with their loop variables, `parallel` with each strategy (all, "first",
//! "any" with a count) and on-fail policy, `parallel for`, `try`/`catch as err`/`finally` with
//! `(retry: N)` statements (failed attempts then success, or exhausted and caught) and
//! `throw`, `choice`, `if`/`elif`/`else`, assignments to an outer name (`--assign`),
//! accumulators (`bind --append --key`), gates a person rejects and the VM reopens, and a
//! persistent agent.
//!
//! Each command is a guide line found by what it is, its values put in (index, text,
//! metadata, ids, names, keys); the options, statuses and shapes are the guide's. Where the
//! guide's prose (not a line) gives an option, it is added: `--parent` on a body's record
//! inside a construct (the table), `--agent` and `--assign` on `guide subagent` (a persistent
//! agent, an assignment), `--error` on a failed branch's end (`failed --error`), and on a list
//! made inside a construct its frame's `--execution-id` ("pass the innermost record's id").
//! `gates create` gets `--index` and `--execution-id` where its line has none (see
//! `resume_places_a_reopened_gate_at_its_statement`).
//!
//! The property: each program is played once uninterrupted, and once with the VM SIGKILLed at
//! a random step: as the step is sent (nothing lands), a random moment after (it may land),
//! or once it is answered (it landed); through MCP the kill lands on the VM's server. The
//! killed VM keeps nothing: a new one continues from what `resume --json` says
//! (`position.open`/`after`/`handler`, `loops`, `parallel`, `retries`, `gates`, unlogged
//! bindings), as a VM that lost its context does. Then:
//!
//! - the same log. The interrupted run's execution log must equal the uninterrupted one
//!   record for record: statement index, text, status, error, metadata (but `ends`), the
//!   parent, and for an end the start it ends, ids read as positions in the log (a killed
//!   write may use up an id on PostgreSQL); so the same depth too. Nothing is removed before
//!   comparing: what a crash could duplicate is either idempotent (an `--ends` line, a
//!   `--key`ed completion, a keyed append, a gate opened again while pending) or read back from
//!   `resume` before it is redone (starts, iterations, attempts, throws), so any duplicate,
//!   gap or reordering is a failure;
//! - the same visible bindings: every binding of the root frame (name, kind, value), the
//!   persistent agent's memory and number of segments (a session run twice shows there), and
//!   the same number of subagent sessions run;
//! - `resume` names the step: right after the crash, its `position` (the open constructs and
//!   `after`, as positions in the log) is what the uninterrupted log says at the same length
//!   (starts not ended; the last record inside the innermost that is no start), and the new
//!   VM's first step is one the uninterrupted VM took at that length of its log.
//!
//! `PROSE_LANGUAGE_CASES=N` sets the programs per test (default 6); a failure prints its seed
//! and step: `PROSE_LANGUAGE_SEED=S` replays that program, `PROSE_LANGUAGE_KILL_AT=K` kills at
//! that step, and `PROSE_LANGUAGE_EVERY_STEP=K` kills at every step from K, each before and
//! after it lands (slow: to explore).
//!
//! The `resume_*` tests below are what the property found, each as the smallest sequence of
//! guide lines that shows it.

use crate::common::*;
use crate::literal_vm::{fill, with_positionals, Lines, Sent, Via, CONSTRUCT_VARS};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

on_both!(
    every_program_ends_alike_crash_or_not,
    every_program_ends_alike_crash_or_not_through_mcp,
    resume_does_not_list_a_skipped_branch_as_outstanding,
    resume_names_the_instance_of_a_pending_gate,
    resume_marks_the_first_statements_binding_unlogged,
    resume_lists_a_parallel_once_while_a_branch_is_open,
    resume_places_a_reopened_gate_at_its_statement,
    resume_names_the_error_a_catch_caught,
);

// ---------------------------------------------------------------------------------------------
// Programs

#[derive(Clone, Debug)]
enum Node {
    /// A statement a subagent's session computes: it writes `name` (`assign`: the outer
    /// binding an assignment writes), then the VM logs the statement. `agent`: the persistent
    /// agent `captain` runs it.
    Session {
        text: String,
        name: String,
        assign: bool,
        agent: bool,
    },
    /// `do refine(...)`: the arguments are consts of its frame.
    Invoke {
        text: String,
        args: Vec<(String, String)>,
        body: Vec<Node>,
    },
    /// `if`/`elif`/`else` or `choice`: the taken branch (`none`: no branch is taken), as the VM
    /// judged it, and its body.
    Cond {
        text: String,
        taken: String,
        body: Vec<Node>,
    },
    /// `repeat`, `for`, `map` (`collect`: the list it appends to) or `loop until`: the loop
    /// variable's value in each iteration run, the `max`, and the reason it exits.
    Loop {
        text: String,
        var: String,
        values: Vec<String>,
        max: usize,
        reason: &'static str,
        collect: Option<String>,
        body: Vec<Node>,
    },
    /// `parallel`: `count` branches complete (the others are cut short: "first", "any"), or
    /// all of them when `None`.
    Parallel {
        text: String,
        meta: Value,
        count: Option<usize>,
        branches: Vec<Branch>,
        /// The list each completed branch appends its result to (made first).
        list: String,
    },
    ParallelFor {
        text: String,
        var: String,
        items: Vec<String>,
        body: Vec<Node>,
    },
    Try {
        body: Vec<Node>,
        catch: Option<(Option<String>, Vec<Node>)>,
        finally: Option<Vec<Node>>,
    },
    /// A statement with `(retry: max)`: up to `max` retries (attempts 1 to `max + 1`), the
    /// first `fails` of them failing: exhausted when `fails == max + 1`.
    Retry {
        text: String,
        max: i64,
        fails: i64,
    },
    Throw {
        text: String,
        msg: String,
    },
    /// `approve id:`; the person rejects each opening `rejections` times, then approves.
    Gate {
        id: String,
        rejections: i64,
    },
}

#[derive(Clone, Debug)]
struct Branch {
    name: String,
    body: Vec<Node>,
    fails: bool,
}

use Node::*;

const RETRY_ERROR: &str = "HTTP 502";

/// The text a program prints as, for a failure's report.
fn show(nodes: &[Node], indent: usize, out: &mut String) {
    let pad = "  ".repeat(indent);
    for n in nodes {
        match n {
            Session { text, .. } | Retry { text, .. } | Throw { text, .. } => {
                let note = match n {
                    Retry { fails, max, .. } if *fails == max + 1 => "   # every attempt fails",
                    Retry { fails, .. } if *fails > 0 => "   # fails first",
                    _ => "",
                };
                let _ = writeln!(out, "{pad}{text}{note}");
            }
            Invoke { text, args, body } => {
                let _ = writeln!(out, "{pad}{text}   # {args:?}");
                show(body, indent + 1, out);
            }
            Cond { text, taken, body } => {
                let _ = writeln!(out, "{pad}{text}   # taken: {taken}");
                show(body, indent + 1, out);
            }
            Loop {
                text, values, body, ..
            } => {
                let _ = writeln!(out, "{pad}{text}   # {} iterations", values.len());
                show(body, indent + 1, out);
            }
            Parallel { text, branches, .. } => {
                let _ = writeln!(out, "{pad}{text}");
                for b in branches {
                    let fails = if b.fails { "   # fails" } else { "" };
                    let _ = writeln!(out, "{pad}  {} = {}{fails}", b.name, branch_word(b));
                    show(&b.body, indent + 2, out);
                }
            }
            ParallelFor { text, body, .. } => {
                let _ = writeln!(out, "{pad}{text}");
                show(body, indent + 1, out);
            }
            Try {
                body,
                catch,
                finally,
            } => {
                let _ = writeln!(out, "{pad}try:");
                show(body, indent + 1, out);
                if let Some((err, body)) = catch {
                    let _ = writeln!(out, "{pad}{}", catch_text(err));
                    show(body, indent + 1, out);
                }
                if let Some(body) = finally {
                    let _ = writeln!(out, "{pad}finally:");
                    show(body, indent + 1, out);
                }
            }
            Gate { id, rejections } => {
                let _ = writeln!(
                    out,
                    "{pad}approve {id}:   # rejected {rejections} times each time"
                );
            }
        }
    }
}

fn program_text(nodes: &[Node]) -> String {
    let mut out = String::new();
    show(nodes, 0, &mut out);
    out
}

fn branch_word(b: &Branch) -> String {
    if b.body.is_empty() {
        format!("session \"Branch {}\"", b.name)
    } else {
        "do:".to_string()
    }
}

fn branch_text(b: &Branch) -> String {
    format!("{} = {}", b.name, branch_word(b))
}

fn catch_text(err: &Option<String>) -> String {
    match err {
        Some(e) => format!("catch as {e}:"),
        None => "catch:".to_string(),
    }
}

/// Nesting ends here: deeper, only simple statements.
const DEPTH: usize = 4;

/// The generator: programs from a seed.
struct Gen {
    rng: StdRng,
    names: usize,
    /// Compound statements left to make.
    budget: i64,
    gates: usize,
    /// The block `refine`'s statements before and after its recursive call (made once: the
    /// block is one definition).
    refine: Option<(Vec<Node>, Vec<Node>)>,
}

impl Gen {
    fn new(seed: u64) -> Gen {
        Gen {
            rng: StdRng::seed_from_u64(seed),
            names: 0,
            budget: 5,
            gates: 0,
            refine: None,
        }
    }

    fn fresh(&mut self) -> usize {
        self.names += 1;
        self.names
    }

    fn chance(&mut self, percent: u32) -> bool {
        self.rng.random_range(0..100) < percent
    }

    /// A program: the persistent agent's first session and the tally an assignment writes,
    /// then a random body.
    fn program(&mut self) -> Vec<Node> {
        let mut root = vec![
            Session {
                text: "let brief = session: captain".into(),
                name: "brief".into(),
                assign: false,
                agent: true,
            },
            Session {
                text: "let total = session \"Start a tally\"".into(),
                name: "total".into(),
                assign: false,
                agent: false,
            },
        ];
        let n = self.rng.random_range(2..=4);
        root.extend(self.body(0, n));
        root
    }

    fn body(&mut self, depth: usize, len: usize) -> Vec<Node> {
        (0..len).map(|_| self.node(depth)).collect()
    }

    fn node(&mut self, depth: usize) -> Node {
        if depth >= DEPTH || self.budget <= 0 || self.chance(35) {
            return self.leaf();
        }
        self.budget -= 1;
        let k = self.fresh();
        let d = depth + 1;
        match self.rng.random_range(0..11) {
            0 => {
                let levels = self.rng.random_range(0..=2);
                self.refine_call(format!("do refine(draft, {levels})"), levels)
            }
            1 => {
                let elifs = self.rng.random_range(0..=1);
                let has_else = self.chance(50);
                let mut options = vec!["if".to_string()];
                options.extend((1..=elifs).map(|e| format!("elif {e}")));
                options.push(if has_else { "else" } else { "none" }.to_string());
                let taken = options[self.rng.random_range(0..options.len())].clone();
                let body = if taken == "none" {
                    Vec::new()
                } else {
                    let n = self.rng.random_range(1..=2);
                    self.body(d, n)
                };
                Cond {
                    text: format!("if **condition {k} holds**:"),
                    taken,
                    body,
                }
            }
            2 => {
                let taken = ["quick", "thorough"][self.rng.random_range(0..2)].to_string();
                let n = self.rng.random_range(1..=2);
                Cond {
                    text: format!("choice **the better approach {k}**:"),
                    taken,
                    body: self.body(d, n),
                }
            }
            3 => {
                let n = self.rng.random_range(1..=2);
                let len = self.rng.random_range(1..=2);
                Loop {
                    text: format!("repeat {n} as i{k}:"),
                    var: format!("i{k}"),
                    values: (0..n).map(|i| i.to_string()).collect(),
                    max: n,
                    reason: "max",
                    collect: None,
                    body: self.body(d, len),
                }
            }
            4 => {
                let items = self.items();
                let len = self.rng.random_range(1..=2);
                let (text, var, collect) = if self.chance(50) {
                    (
                        format!("let r{k} = items{k} | map:"),
                        "item".to_string(),
                        Some(format!("r{k}")),
                    )
                } else {
                    (format!("for x{k} in items{k}:"), format!("x{k}"), None)
                };
                Loop {
                    text,
                    var,
                    max: items.len(),
                    values: items,
                    reason: "max",
                    collect,
                    body: self.body(d, len),
                }
            }
            5 => {
                let max = self.rng.random_range(2..=3);
                let runs = self.rng.random_range(1..=max);
                let mut body = vec![Session {
                    text: "total = session \"Improve the tally\"".into(),
                    name: "total".into(),
                    assign: true,
                    agent: false,
                }];
                if self.chance(50) {
                    body.push(self.node(d));
                }
                Loop {
                    text: format!("loop until **tally {k} is done** (max: {max}) as j{k}:"),
                    var: format!("j{k}"),
                    values: (0..runs).map(|i| i.to_string()).collect(),
                    max,
                    reason: if runs < max {
                        "condition_satisfied"
                    } else {
                        "max"
                    },
                    collect: None,
                    body,
                }
            }
            6 => {
                let on_fail = ["", "fail-fast", "continue", "ignore"][self.rng.random_range(0..4)];
                let may_fail = matches!(on_fail, "continue" | "ignore");
                let branches = (0..2)
                    .map(|b| {
                        let body = if d < DEPTH && self.chance(50) {
                            self.body(d + 1, 1)
                        } else {
                            Vec::new()
                        };
                        let fails = may_fail && body.is_empty() && self.chance(50);
                        Branch {
                            name: format!("b{k}{}", ["a", "b"][b]),
                            body,
                            fails,
                        }
                    })
                    .collect::<Vec<_>>();
                let mut meta = json!({});
                let text = if on_fail.is_empty() {
                    "parallel:".to_string()
                } else {
                    meta["on_fail"] = json!(on_fail);
                    format!("parallel (on-fail: \"{on_fail}\"):")
                };
                Parallel {
                    text,
                    meta,
                    count: None,
                    branches,
                    list: format!("found{k}"),
                }
            }
            7 => {
                let n = self.rng.random_range(2..=3);
                let branches: Vec<Branch> = (0..n)
                    .map(|b| Branch {
                        name: format!("b{k}{}", ["a", "b", "c"][b]),
                        body: Vec::new(),
                        fails: false,
                    })
                    .collect();
                let (text, meta, count) = if self.chance(50) {
                    (
                        "parallel (\"first\"):".to_string(),
                        json!({"strategy": "first"}),
                        1,
                    )
                } else {
                    let count = self.rng.random_range(1..n);
                    (
                        format!("parallel (\"any\", count: {count}):"),
                        json!({"strategy": "any", "count": count}),
                        count,
                    )
                };
                Parallel {
                    text,
                    meta,
                    count: Some(count),
                    branches,
                    list: format!("found{k}"),
                }
            }
            8 => {
                let items = self.items();
                ParallelFor {
                    text: format!("parallel for y{k} in items{k}:"),
                    var: format!("y{k}"),
                    items,
                    body: if d < DEPTH {
                        self.body(d + 1, 1)
                    } else {
                        Vec::new()
                    },
                }
            }
            _ => {
                let n = self.rng.random_range(1..=2);
                let mut body = self.body(d, n);
                let fails = self.chance(70);
                if fails {
                    let at = self.rng.random_range(0..=body.len());
                    let failing = if self.chance(50) {
                        Throw {
                            text: format!("throw \"no luck {k}\""),
                            msg: format!("no luck {k}"),
                        }
                    } else {
                        let max = self.rng.random_range(1..=2);
                        Retry {
                            text: format!("session \"Risky {k}\" (retry: {max})"),
                            max,
                            fails: max + 1,
                        }
                    };
                    body.insert(at, failing);
                }
                let catch = (fails || self.chance(50)).then(|| {
                    let err = self.chance(70).then(|| "err".to_string());
                    let n = self.rng.random_range(1..=2);
                    (err, self.body(d, n))
                });
                let finally = (catch.is_none() || self.chance(40)).then(|| self.body(d, 1));
                Try {
                    body,
                    catch,
                    finally,
                }
            }
        }
    }

    fn items(&mut self) -> Vec<String> {
        let n = self.rng.random_range(1..=2);
        ["red", "green"][..n]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    fn leaf(&mut self) -> Node {
        let k = self.fresh();
        match self.rng.random_range(0..10) {
            0..=2 => Session {
                text: format!("let n{k} = session \"Note {k}\""),
                name: format!("n{k}"),
                assign: false,
                agent: false,
            },
            3 | 4 => Session {
                text: "total = session \"Add to the tally\"".into(),
                name: "total".into(),
                assign: true,
                agent: false,
            },
            5 => Session {
                text: format!("let m{k} = resume: captain"),
                name: format!("m{k}"),
                assign: false,
                agent: true,
            },
            6 | 7 => {
                let max = self.rng.random_range(2..=3);
                Retry {
                    text: format!("session \"Flaky {k}\" (retry: {max})"),
                    max,
                    fails: self.rng.random_range(0..=max),
                }
            }
            _ if self.gates < 2 => {
                self.gates += 1;
                Gate {
                    id: format!("g{k}"),
                    rejections: self.rng.random_range(0..=1),
                }
            }
            _ => Session {
                text: format!("let n{k} = session \"Note {k}\""),
                name: format!("n{k}"),
                assign: false,
                agent: false,
            },
        }
    }

    /// A call of the block `refine`: its body calls it again `levels` more times, each time
    /// with the same statement, inside `if **depth > 0**:`.
    fn refine_call(&mut self, text: String, levels: i64) -> Node {
        if self.refine.is_none() {
            let before = if self.chance(50) {
                vec![Session {
                    text: "let note = session \"Refine the draft\"".into(),
                    name: "note".into(),
                    assign: false,
                    agent: false,
                }]
            } else {
                Vec::new()
            };
            let after = if self.chance(50) {
                vec![Session {
                    text: "total = session \"Count the refinements\"".into(),
                    name: "total".into(),
                    assign: true,
                    agent: false,
                }]
            } else {
                vec![Session {
                    text: "let note = session \"Note the depth\"".into(),
                    name: "note".into(),
                    assign: false,
                    agent: false,
                }]
            };
            self.refine = Some((before, after));
        }
        let (before, after) = self.refine.clone().unwrap();
        let deeper = if levels > 0 {
            vec![self.refine_call("do refine(draft, depth - 1)".into(), levels - 1)]
        } else {
            Vec::new()
        };
        let mut body = before;
        body.push(Cond {
            text: "if **depth > 0**:".into(),
            taken: if levels > 0 { "if" } else { "none" }.into(),
            body: deeper,
        });
        body.extend(after);
        Invoke {
            text,
            args: vec![
                ("draft".into(), format!("draft at depth {levels}")),
                ("depth".into(), levels.to_string()),
            ],
            body,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The VM

/// The VM was killed: everything it knew is gone.
#[derive(Debug)]
struct Crash;

/// When the VM is killed in its step: as it sends it (nothing lands), this long after (it may
/// or may not land), or once it is answered (it landed).
#[derive(Clone, Copy, Debug)]
enum Kill {
    Before,
    Mid(Duration),
    After,
}

type R<T> = Result<T, Crash>;

enum Flow {
    Normal,
    /// An error left the statement (a throw, a retry exhausted): the enclosing `try` catches it.
    Failed(String),
}

/// What the root frame holds once the program ends, by the language: the root's `let`s and
/// the assignments to its `total` (made at the top level or in an `if`, `choice`, loop or
/// `try:` there, none of which is a frame, but not in a call or a branch), each with the last
/// value written; a named branch's result where its parallel is; a list made there with what
/// its branches or iterations appended. No loop variable, `err`, argument or call's `let`.
fn expected(program: &[Node]) -> BTreeMap<String, Value> {
    fn body(nodes: &[Node], path: &str, root: bool, m: &mut BTreeMap<String, Value>) -> bool {
        for (i, n) in nodes.iter().enumerate() {
            if node(n, &format!("{path}.{}", i + 1), root, m) {
                return true;
            }
        }
        false
    }
    fn push(m: &mut BTreeMap<String, Value>, list: &str, item: String) {
        m.get_mut(list)
            .unwrap()
            .as_array_mut()
            .unwrap()
            .push(json!(item));
    }
    /// Whether an error leaves it.
    fn node(n: &Node, p: &str, root: bool, m: &mut BTreeMap<String, Value>) -> bool {
        match n {
            Session { name, assign, .. } => {
                if root || *assign {
                    m.insert(name.clone(), json!(format!("{name}@{p}")));
                }
                false
            }
            Invoke { body: b, .. } => body(b, p, false, m),
            Cond { taken, body: b, .. } => taken != "none" && body(b, p, root, m),
            Loop {
                values,
                collect,
                body: b,
                ..
            } => {
                if let (Some(l), true) = (collect, root) {
                    m.insert(l.clone(), json!([]));
                }
                for it in 1..=values.len() {
                    let ip = format!("{p}#{it}");
                    body(b, &ip, root, m);
                    if let (Some(l), true) = (collect, root) {
                        push(m, l, format!("{l}@{ip}"));
                    }
                }
                false
            }
            Parallel {
                count,
                branches,
                list,
                ..
            } => {
                if root {
                    m.insert(list.clone(), json!([]));
                }
                let completing = count.unwrap_or(branches.len());
                for b in &branches[..completing] {
                    let bp = format!("{p}/{}", b.name);
                    body(&b.body, &bp, false, m);
                    if root && !b.fails {
                        m.insert(b.name.clone(), json!(format!("{}@{bp}", b.name)));
                        push(m, list, format!("{}@{bp}", b.name));
                    }
                }
                false
            }
            ParallelFor { items, body: b, .. } => {
                for k in 1..=items.len() {
                    body(b, &format!("{p}/{k}"), false, m);
                }
                false
            }
            Try {
                body: b,
                catch,
                finally,
            } => {
                if body(b, p, root, m) {
                    if let Some((_, c)) = catch {
                        body(c, &format!("{p}:catch"), root, m);
                    }
                }
                if let Some(f) = finally {
                    body(f, &format!("{p}:finally"), root, m);
                }
                false
            }
            Retry { max, fails, .. } => *fails == max + 1,
            Throw { .. } => true,
            Gate { .. } => false,
        }
    }
    let mut m = BTreeMap::new();
    body(program, "r", true, &mut m);
    m
}

/// Where a statement starts.
enum Res {
    Fresh,
    /// Its start is `position.open[d]`: continue inside it.
    Open(usize),
    /// `position.after` is its own record (a failed attempt, a retry, a gate's opening): it is
    /// under way.
    Partial,
}

/// Where a body starts.
enum At {
    Start,
    /// At the statement `position.open[d]` started.
    Open(usize),
    /// After `position.after`.
    After,
}

/// Where a statement runs: the record its records are appended inside (the guide's `$CALL`,
/// `$IF`, ...), that loop's iteration if it is a loop, and a path naming it in the program's
/// run (its values and step labels are made of it).
#[derive(Clone)]
struct Ctx {
    parent: Option<i64>,
    iteration: Option<usize>,
    path: String,
}

impl Ctx {
    fn inside(&self, id: i64, path: String) -> Ctx {
        Ctx {
            parent: Some(id),
            iteration: None,
            path,
        }
    }
}

/// One step the VM took: its label, and the records in the log when it was sent.
type Step = (String, usize);

struct Vm<'a> {
    run: &'a Run,
    lines: &'a Lines,
    via: &'a mut Via,
    /// Kill the VM at this step.
    crash: Option<(usize, Kill)>,
    steps: usize,
    /// Records appended so far (exact in a run without a crash).
    appended: usize,
    trace: Vec<Step>,
    /// What `resume --json` said when this VM started after a crash (`position` is read from
    /// it on the way down to where the run stands).
    doc: Option<Value>,
    /// Whether the run moved on since `doc` was read (a record appended, a gate opened or
    /// waited on): then its bindings and gates are old. The VM's own binds (a loop variable,
    /// an argument, a list) do not count: resume's word on the statement under way holds
    /// across them.
    stale: bool,
    /// Subagent sessions run.
    sessions: usize,
}

impl<'a> Vm<'a> {
    fn new(
        run: &'a Run,
        lines: &'a Lines,
        via: &'a mut Via,
        crash: Option<(usize, Kill)>,
    ) -> Vm<'a> {
        Vm {
            run,
            lines,
            via,
            crash,
            steps: 0,
            appended: 0,
            trace: Vec::new(),
            doc: None,
            stale: false,
            sessions: 0,
        }
    }

    /// Plays the program from the start.
    fn play(&mut self, program: &[Node]) -> R<()> {
        let root = Ctx {
            parent: None,
            iteration: None,
            path: "r".into(),
        };
        self.body(program, &root, At::Start)?;
        self.finish()
    }

    /// Continues the program from what `resume` says, knowing nothing else.
    fn continue_from(&mut self, doc: Value, program: &[Node]) -> R<()> {
        let done = doc["run"]["status"] == "completed";
        let open = doc["position"]["open"].as_array().unwrap().len();
        let has_after = !doc["position"]["after"].is_null();
        self.doc = Some(doc);
        if done {
            return Ok(());
        }
        let root = Ctx {
            parent: None,
            iteration: None,
            path: "r".into(),
        };
        let at = match (open, has_after) {
            (0, false) => At::Start,
            (0, true) => At::After,
            _ => At::Open(0),
        };
        self.body(program, &root, at)?;
        self.finish()
    }

    fn finish(&mut self) -> R<()> {
        let line = self.lines.with(&["finish --status completed"]);
        let argv = fill(&line, &[], &self.vars(None, &[]));
        let sent = self.step("finish", argv)?;
        assert_eq!(sent.code, 0, "finish: {}", sent.json);
        Ok(())
    }

    // -- what resume said ---------------------------------------------------------------------

    fn doc(&self) -> &Value {
        self.doc.as_ref().expect("resume's answer")
    }

    fn open_rec(&self, d: usize) -> &Value {
        &self.doc()["position"]["open"][d]
    }

    fn open_len(&self) -> usize {
        self.doc
            .as_ref()
            .map_or(0, |d| d["position"]["open"].as_array().unwrap().len())
    }

    fn after(&self) -> &Value {
        &self.doc()["position"]["after"]
    }

    /// `position.handler` names the catch that takes the failure `after` is.
    fn handled_by_catch(&self) {
        let p = &self.doc()["position"];
        let handler = p["handler"].as_str().unwrap_or("");
        assert!(
            handler.starts_with("the catch of try:"),
            "no catch handles the failure: {p}"
        );
    }

    /// resume's answer, while nothing was sent since it was read.
    fn state(&self) -> Option<&Value> {
        self.doc.as_ref().filter(|_| !self.stale)
    }

    /// Where the body of the construct `open[d]` starts.
    fn inner_at(&self, d: usize) -> At {
        if d + 1 < self.open_len() {
            At::Open(d + 1)
        } else if self.after().is_null() {
            At::Start
        } else {
            At::After
        }
    }

    fn id_of(v: &Value) -> i64 {
        v["id"].as_i64().unwrap()
    }

    /// A binding resume lists as visible here.
    fn listed(&self, name: &str) -> Option<&Value> {
        self.state()?["bindings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == name)
    }

    /// `resume --json`, read (not a step: it writes nothing the program depends on).
    fn resume(&mut self) -> Value {
        let sent = self.via.send(self.run, &["--json".into(), "resume".into()]);
        assert!(matches!(sent.code, 0), "resume: {}", sent.json);
        sent.json
    }

    // -- sending ------------------------------------------------------------------------------

    fn vars(
        &self,
        parent: Option<i64>,
        with: &[(&'static str, i64)],
    ) -> HashMap<&'static str, String> {
        let mut v = HashMap::new();
        v.insert("PROSE_RUN", self.run.id.clone());
        if let Some(p) = parent {
            for k in CONSTRUCT_VARS {
                v.insert(k, p.to_string());
            }
        }
        for (k, id) in with {
            v.insert(*k, id.to_string());
        }
        v
    }

    /// Sends one step of the guide, or is killed at it.
    fn step(&mut self, label: &str, argv: Vec<String>) -> R<Sent> {
        self.steps += 1;
        self.trace.push((label.to_string(), self.appended));
        if argv.first().map(String::as_str) != Some("bind") {
            self.stale = true;
        }
        if let Some((at, kill)) = self.crash {
            if at == self.steps {
                match kill {
                    Kill::Before => self.via.killed(self.run, &argv, Duration::ZERO),
                    Kill::Mid(delay) => self.via.killed(self.run, &argv, delay),
                    Kill::After => {
                        self.via.send(self.run, &argv);
                    }
                }
                return Err(Crash);
            }
        }
        Ok(self.via.send(self.run, &argv))
    }

    /// Appends a record with a guide line, its values set and its variables put in. Inside a
    /// construct a line with no `--parent` gets one (the table: the body's records carry
    /// `--parent`), but an end, which takes its start's.
    fn append(
        &mut self,
        label: &str,
        line: &[&str],
        set: &[(&str, String)],
        ctx_parent: Option<i64>,
        with: &[(&'static str, i64)],
    ) -> R<i64> {
        let line = self.lines.with(line);
        let mut argv = fill(&line, set, &self.vars(ctx_parent, with));
        let ends = argv.iter().any(|w| w == "--ends");
        if let (Some(p), false) = (ctx_parent, ends || argv.iter().any(|w| w == "--parent")) {
            argv.extend(["--parent".to_string(), p.to_string()]);
        }
        // A failed end carries its error (the table: `failed --error`).
        if let Some((_, e)) = set.iter().find(|(k, _)| *k == "--error") {
            if !argv.iter().any(|w| w == "--error") {
                argv.extend(["--error".to_string(), e.clone()]);
            }
        }
        let sent = self.step(label, argv.clone())?;
        assert_eq!(sent.code, 0, "{argv:?}: {}", sent.json);
        self.appended += 1;
        Ok(sent
            .id
            .unwrap_or_else(|| panic!("{argv:?} gave no id: {}", sent.json)))
    }

    /// A result list made first (the guide's `bind findings '[]'`), in the frame of the
    /// innermost construct (the Frames rule: pass the innermost record's id).
    fn make_list(&mut self, label: &str, list: &str, ctx: &Ctx) -> R<()> {
        let line = self.lines.with(&["bind findings '[]'"]);
        let vars = self.vars(ctx.parent, &[]);
        let mut argv = with_positionals(fill(&line, &[], &vars), &[list, "[]"]);
        if let (Some(p), false) = (ctx.parent, argv.iter().any(|w| w == "--execution-id")) {
            argv.extend(["--execution-id".to_string(), p.to_string()]);
        }
        let sent = self.step(label, argv.clone())?;
        assert_eq!(sent.code, 0, "{argv:?}: {}", sent.json);
        Ok(())
    }

    /// A `bind` line of the guide, its positionals (name, value) and options put in.
    fn bind(
        &mut self,
        label: &str,
        line: &[&str],
        positionals: &[&str],
        set: &[(&str, String)],
        with: &[(&'static str, i64)],
    ) -> R<()> {
        let line = self.lines.with(line);
        let argv = with_positionals(fill(&line, set, &self.vars(None, with)), positionals);
        let sent = self.step(label, argv.clone())?;
        assert_eq!(sent.code, 0, "{argv:?}: {}", sent.json);
        Ok(())
    }

    /// The key of a statement's completion: unique in the run (a loop's iteration in it).
    fn key(ctx: &Ctx, index: i64) -> (&'static [&'static str], String) {
        match (ctx.parent, ctx.iteration) {
            (None, _) => (&["--key stmt-"], format!("stmt-{index}-done")),
            (Some(p), Some(i)) => (&["--key \"$LOOP-"], format!("{p}-{i}-{index}")),
            (Some(p), None) => (&["--key \"$CALL-"], format!("{p}-{index}")),
        }
    }

    // -- the program --------------------------------------------------------------------------

    fn body(&mut self, nodes: &[Node], ctx: &Ctx, at: At) -> R<Flow> {
        let (first, res) = match at {
            At::Start => (1, Res::Fresh),
            At::Open(d) => (
                self.open_rec(d)["statement_index"].as_i64().unwrap(),
                Res::Open(d),
            ),
            At::After => {
                let a = self.after();
                let k = a["statement_index"].as_i64().unwrap();
                let under_way = a["metadata"].get("ends").is_none()
                    && matches!(a["status"].as_str(), Some("failed" | "retry" | "pending"));
                if under_way {
                    (k, Res::Partial)
                } else {
                    (k + 1, Res::Fresh)
                }
            }
        };
        assert!(
            first >= 1 && first as usize <= nodes.len() + 1,
            "resume points at statement {first} of a body of {} ({}): {}",
            nodes.len(),
            ctx.path,
            self.doc()["position"]
        );
        let mut res = Some(res);
        for (i, n) in nodes.iter().enumerate() {
            let index = i as i64 + 1;
            if index < first {
                continue;
            }
            let r = if index == first {
                res.take().unwrap()
            } else {
                Res::Fresh
            };
            if let Flow::Failed(msg) = self.node(n, index, ctx, r)? {
                return Ok(Flow::Failed(msg));
            }
        }
        Ok(Flow::Normal)
    }

    fn node(&mut self, n: &Node, index: i64, ctx: &Ctx, res: Res) -> R<Flow> {
        let path = format!("{}.{index}", ctx.path);
        match n {
            Session {
                text,
                name,
                assign,
                agent,
            } => {
                // A binding written after its frame's last record is `unlogged`: the session
                // ran; log it, do not run it again.
                let ran = self.listed(name).is_some_and(|b| b["unlogged"] == true);
                if !ran {
                    self.session(ctx, &path, name, *assign, *agent);
                }
                let (line, key) = Self::key(ctx, index);
                let set = [
                    ("--index", index.to_string()),
                    ("--text", text.clone()),
                    ("--key", key),
                ];
                self.append(&format!("{path}:log"), line, &set, ctx.parent, &[])?;
                Ok(Flow::Normal)
            }
            Invoke { text, args, body } => {
                let (id, at) = match res {
                    Res::Fresh => {
                        let set = [("--index", index.to_string()), ("--text", text.clone())];
                        let l: &[&str] = &["CALL=$(", "--status executing"];
                        (
                            self.append(&format!("{path}:call"), l, &set, ctx.parent, &[])?,
                            At::Start,
                        )
                    }
                    Res::Open(d) => (Self::id_of(self.open_rec(d)), self.inner_at(d)),
                    Res::Partial => unreachable!("a call is ended by --ends"),
                };
                if matches!(at, At::Start) {
                    // The arguments, bound again after a crash with nothing done inside the
                    // call (the guide: the same const again is accepted).
                    for (p, v) in args {
                        let line = &["bind", "--kind const", "--execution-id \"$CALL\""];
                        let set = [("--source", text.clone())];
                        let label = format!("{path}:arg {p}");
                        self.bind(&label, line, &[p, v], &set, &[("CALL", id)])?;
                    }
                }
                let inner = ctx.inside(id, path.clone());
                self.body(body, &inner, at)?;
                let l: &[&str] = &["--ends \"$CALL\" --status completed"];
                self.append(&format!("{path}:end"), l, &[], ctx.parent, &[("CALL", id)])?;
                Ok(Flow::Normal)
            }
            Cond { text, taken, body } => {
                let (id, at) = match res {
                    Res::Fresh => {
                        let set = [
                            ("--index", index.to_string()),
                            ("--text", text.clone()),
                            ("--metadata", json!({ "taken": taken }).to_string()),
                        ];
                        (
                            self.append(
                                &format!("{path}:start"),
                                &["IF=$("],
                                &set,
                                ctx.parent,
                                &[],
                            )?,
                            At::Start,
                        )
                    }
                    Res::Open(d) => {
                        // The branch taken is in the open record: not judged again.
                        let rec = self.open_rec(d);
                        assert_eq!(rec["metadata"]["taken"], json!(taken), "{rec}");
                        (Self::id_of(rec), self.inner_at(d))
                    }
                    Res::Partial => unreachable!(),
                };
                let inner = ctx.inside(id, path.clone());
                if taken != "none" {
                    self.body(body, &inner, at)?;
                }
                let l: &[&str] = &["--ends \"$IF\" --status completed"];
                self.append(&format!("{path}:end"), l, &[], ctx.parent, &[("IF", id)])?;
                Ok(Flow::Normal)
            }
            Loop {
                text,
                var,
                values,
                max,
                reason,
                collect,
                body,
            } => {
                let lid = format!("l{path}");
                let (id, mut iteration, mut at) = match res {
                    Res::Fresh => {
                        let set = [
                            ("--index", index.to_string()),
                            ("--text", text.clone()),
                            (
                                "--metadata",
                                json!({"loop_id": lid, "max": max}).to_string(),
                            ),
                        ];
                        // A result list is made first (the guide's Loops section).
                        if let Some(list) = collect {
                            self.make_list(&format!("{path}:list"), list, ctx)?;
                        }
                        let id = self.append(
                            &format!("{path}:start"),
                            &["LOOP=$("],
                            &set,
                            ctx.parent,
                            &[],
                        )?;
                        (id, 1, At::Start)
                    }
                    Res::Open(d) => {
                        let id = Self::id_of(self.open_rec(d));
                        let l = self.doc()["loops"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .find(|l| l["loop_id"] == lid.as_str())
                            .unwrap_or_else(|| {
                                panic!("resume lists no loop {lid}: {}", self.doc())
                            });
                        let current = l["current"].as_u64().unwrap() as usize;
                        let at = match self.inner_at(d) {
                            // An iteration closed: the next starts from its first statement.
                            At::After if self.after()["status"] == "iteration" => At::Start,
                            at => at,
                        };
                        (id, current, at)
                    }
                    Res::Partial => unreachable!(),
                };
                while iteration <= values.len() {
                    let ipath = format!("{path}#{iteration}");
                    let inner = Ctx {
                        parent: Some(id),
                        iteration: Some(iteration),
                        path: ipath.clone(),
                    };
                    if matches!(at, At::Start) {
                        let value = &values[iteration - 1];
                        let line = &["bind i", "--local", "\"$LOOP\""];
                        self.bind(
                            &format!("{ipath}:var"),
                            line,
                            &[var, value],
                            &[],
                            &[("LOOP", id)],
                        )?;
                    }
                    self.body(body, &inner, at)?;
                    if let Some(list) = collect {
                        let line = &["bind", "--append", "--key"];
                        let set = [
                            ("--append", json!(format!("{list}@{ipath}")).to_string()),
                            ("--key", format!("{id}-{iteration}")),
                        ];
                        let with = [("BRANCH", id)];
                        self.bind(&format!("{ipath}:collect"), line, &[list], &set, &with)?;
                    }
                    let set = [
                        ("--index", index.to_string()),
                        ("--text", text.clone()),
                        (
                            "--metadata",
                            json!({"loop_id": lid, "iteration": iteration}).to_string(),
                        ),
                    ];
                    self.append(
                        &format!("{ipath}:done"),
                        &["--status iteration"],
                        &set,
                        Some(id),
                        &[("LOOP", id)],
                    )?;
                    iteration += 1;
                    at = At::Start;
                }
                let set = [(
                    "--metadata",
                    json!({"iteration": values.len(), "reason": reason}).to_string(),
                )];
                let l: &[&str] = &["--ends \"$LOOP\" --status exited"];
                self.append(
                    &format!("{path}:exit"),
                    l,
                    &set,
                    ctx.parent,
                    &[("LOOP", id)],
                )?;
                Ok(Flow::Normal)
            }
            Parallel {
                text,
                meta,
                count,
                branches,
                list,
            } => {
                let pid = format!("p{path}");
                let names: Vec<&str> = branches.iter().map(|b| b.name.as_str()).collect();
                let mut m = meta.clone();
                m["parallel_id"] = json!(pid);
                m["branches"] = json!(names);
                self.parallel(
                    index,
                    ctx,
                    &path,
                    res,
                    text,
                    &m,
                    &pid,
                    |vm, id, d, k| vm.branch(id, d, k, &branches[k], &path, &pid, list),
                    *count,
                    branches,
                    Some(list),
                )
            }
            ParallelFor {
                text,
                var,
                items,
                body,
            } => {
                let pid = format!("p{path}");
                let positions: Vec<String> = (1..=items.len()).map(|i| i.to_string()).collect();
                let m = json!({"parallel_id": pid, "branches": positions});
                let branches: Vec<Branch> = positions
                    .iter()
                    .map(|p| Branch {
                        name: p.clone(),
                        body: body.clone(),
                        fails: false,
                    })
                    .collect();
                self.parallel(
                    index,
                    ctx,
                    &path,
                    res,
                    text,
                    &m,
                    &pid,
                    |vm, id, d, k| vm.item(id, d, k, text, var, &items[k], body, &path, &pid),
                    None,
                    &branches,
                    None,
                )
            }
            Try {
                body,
                catch,
                finally,
            } => self.try_(index, ctx, &path, res, body, catch, finally),
            Retry { text, max, fails } => {
                let mut attempt = match res {
                    Res::Fresh => 1,
                    Res::Partial => {
                        let a = self.after().clone();
                        let r = self.doc()["retries"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .find(|r| r["id"] == a["id"])
                            .unwrap_or_else(|| {
                                panic!("resume lists no retry for {a}: {}", self.doc())
                            })
                            .clone();
                        match r["state"].as_str().unwrap() {
                            "running" => r["attempt"].as_i64().unwrap(),
                            "next" => {
                                assert_eq!(
                                    r["next_attempt"],
                                    json!(r["attempt"].as_i64().unwrap() + 1),
                                    "{r}"
                                );
                                let next = r["next_attempt"].as_i64().unwrap();
                                self.retry_record(&path, index, text, next, *max, ctx)?;
                                next
                            }
                            "exhausted" => {
                                self.handled_by_catch();
                                assert_eq!(r["attempt"], json!(max + 1), "{r}");
                                let handler = r["handler"].as_str().unwrap_or("");
                                assert!(handler.starts_with("the catch of try:"), "{r}");
                                return Ok(Flow::Failed(
                                    r["last_error"].as_str().unwrap().to_string(),
                                ));
                            }
                            other => panic!("retry state {other}: {r}"),
                        }
                    }
                    Res::Open(_) => unreachable!(),
                };
                loop {
                    if attempt <= *fails {
                        let set = [
                            ("--index", index.to_string()),
                            ("--text", text.clone()),
                            ("--error", RETRY_ERROR.to_string()),
                            (
                                "--metadata",
                                json!({"attempt": attempt, "max": max, "backoff": "exponential"})
                                    .to_string(),
                            ),
                        ];
                        let l: &[&str] = &["'session \"Flaky\"' --status failed"];
                        self.append(
                            &format!("{path}:attempt {attempt} failed"),
                            l,
                            &set,
                            ctx.parent,
                            &[],
                        )?;
                        if attempt == max + 1 {
                            return Ok(Flow::Failed(RETRY_ERROR.to_string()));
                        }
                        attempt += 1;
                        self.retry_record(&path, index, text, attempt, *max, ctx)?;
                    } else {
                        let set = [
                            ("--index", index.to_string()),
                            ("--text", text.clone()),
                            ("--metadata", json!({ "attempt": attempt }).to_string()),
                        ];
                        let l: &[&str] = &["'session \"Flaky\"' --status completed"];
                        self.append(
                            &format!("{path}:attempt {attempt} done"),
                            l,
                            &set,
                            ctx.parent,
                            &[],
                        )?;
                        return Ok(Flow::Normal);
                    }
                }
            }
            Throw { text, msg } => {
                if let Res::Partial = res {
                    self.handled_by_catch();
                }
                if let Res::Fresh = res {
                    let set = [
                        ("--index", index.to_string()),
                        ("--text", text.clone()),
                        ("--error", msg.clone()),
                    ];
                    let l: &[&str] = &["--status failed", "\"$TRY\""];
                    self.append(&format!("{path}:throw"), l, &set, ctx.parent, &[])?;
                }
                Ok(Flow::Failed(msg.clone()))
            }
            Gate { id, rejections } => {
                self.gate(index, ctx, &path, res, id, *rejections)?;
                Ok(Flow::Normal)
            }
        }
    }

    fn retry_record(
        &mut self,
        path: &str,
        index: i64,
        text: &str,
        attempt: i64,
        max: i64,
        ctx: &Ctx,
    ) -> R<()> {
        let set = [
            ("--index", index.to_string()),
            ("--text", text.to_string()),
            (
                "--metadata",
                json!({"attempt": attempt, "max": max}).to_string(),
            ),
        ];
        let l: &[&str] = &["'session \"Flaky\"' --status retry"];
        self.append(
            &format!("{path}:attempt {attempt}"),
            l,
            &set,
            ctx.parent,
            &[],
        )?;
        Ok(())
    }

    /// A subagent's session, from the VM's `guide subagent` line: it writes `name` where the
    /// innermost construct's frame is (`--assign`: the binding `get` reads).
    fn session(&mut self, ctx: &Ctx, path: &str, name: &str, assign: bool, agent: bool) {
        let line = match ctx.parent {
            Some(_) => self.lines.with(&["guide subagent", "--execution-id"]),
            None => self
                .lines
                .with(&["guide subagent --run \"$PROSE_RUN\" --name"]),
        };
        let mut set = vec![("--name", name.to_string())];
        if agent {
            set.push(("--agent", "captain".to_string()));
        }
        let mut argv = fill(&line, &set, &self.vars(ctx.parent, &[]));
        // The guide: leave `--agent` out for a plain session; `x = ...` is `--assign`.
        match (agent, argv.iter().position(|w| w == "--agent")) {
            (false, Some(i)) => {
                argv.drain(i..i + 2);
            }
            (true, None) => argv.extend(["--agent".to_string(), "captain".to_string()]),
            _ => {}
        }
        if assign {
            argv.push("--assign".into());
        }
        self.trace.push((format!("{path}:session"), self.appended));
        self.sessions += 1;
        let output = format!("{name}@{path}\n");
        let memory = agent.then(|| format!("captain last worked at {path}"));
        self.via
            .subagent_as(self.run, &argv, &output, memory.as_deref());
    }

    /// `parallel:` and `parallel for`: the start, the branches (`play` plays branch `k`,
    /// started or not, given the start's id and, if resume shows the branch open, its level),
    /// the join. With a `count`, the branches race: see [`Vm::race`].
    #[allow(clippy::too_many_arguments)]
    fn parallel(
        &mut self,
        index: i64,
        ctx: &Ctx,
        path: &str,
        res: Res,
        text: &str,
        meta: &Value,
        pid: &str,
        mut play: impl FnMut(&mut Self, i64, Option<usize>, usize) -> R<()>,
        count: Option<usize>,
        branches: &[Branch],
        list: Option<&str>,
    ) -> R<Flow> {
        let (id, level) = match res {
            Res::Fresh => {
                // The shared list is made first (the guide's Parallel section).
                if let Some(list) = list {
                    self.make_list(&format!("{path}:list"), list, ctx)?;
                }
                let set = [
                    ("--index", index.to_string()),
                    ("--text", text.to_string()),
                    ("--metadata", meta.to_string()),
                ];
                (
                    self.append(&format!("{path}:start"), &["PAR=$("], &set, ctx.parent, &[])?,
                    None,
                )
            }
            Res::Open(d) => (Self::id_of(self.open_rec(d)), Some(d)),
            Res::Partial => unreachable!(),
        };
        if let Some(count) = count {
            self.race(id, level, count, path, pid, branches, list.unwrap())?;
        } else {
            // Every branch not completed nor failed runs (resume: "run only the outstanding
            // ones"); the one open continues.
            let (outstanding, open): (Vec<String>, Option<(String, usize)>) = match level {
                None => (branches.iter().map(|b| b.name.clone()).collect(), None),
                Some(d) => {
                    let p = self.parallel_of(pid);
                    let outstanding = p["outstanding"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|b| b.as_str().unwrap().to_string())
                        .collect();
                    let open = (d + 1 < self.open_len()).then(|| {
                        let rec = self.open_rec(d + 1);
                        (
                            rec["metadata"]["branch"].as_str().unwrap().to_string(),
                            d + 1,
                        )
                    });
                    (outstanding, open)
                }
            };
            for (k, b) in branches.iter().enumerate() {
                if !outstanding.contains(&b.name) {
                    continue;
                }
                let d = open.as_ref().filter(|(n, _)| *n == b.name).map(|(_, d)| *d);
                play(self, id, d, k)?;
            }
        }
        let l: &[&str] = &["--ends \"$PAR\" --status joined"];
        self.append(&format!("{path}:join"), l, &[], ctx.parent, &[("PAR", id)])?;
        Ok(Flow::Normal)
    }

    fn parallel_of(&self, pid: &str) -> Value {
        self.doc()["parallel"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["parallel_id"] == pid)
            .unwrap_or_else(|| panic!("resume lists no parallel {pid}: {}", self.doc()))
            .clone()
    }

    /// A branch's start (inside the parallel, `--construct branch`).
    fn branch_start(
        &mut self,
        par: i64,
        k: usize,
        text: &str,
        name: &str,
        pid: &str,
        path: &str,
    ) -> R<i64> {
        let set = [
            ("--index", (k + 1).to_string()),
            ("--text", text.to_string()),
            (
                "--metadata",
                json!({"parallel_id": pid, "branch": name}).to_string(),
            ),
        ];
        let l: &[&str] = &["BRANCH=$(", "--construct branch"];
        self.append(
            &format!("{path}:start"),
            l,
            &set,
            Some(par),
            &[("PAR", par)],
        )
    }

    /// A named branch of `parallel:`: its start, body, its result bound at the parallel's
    /// record, added to the shared list once (keyed by the branch), and its end.
    #[allow(clippy::too_many_arguments)]
    fn branch(
        &mut self,
        par: i64,
        level: Option<usize>,
        k: usize,
        b: &Branch,
        path: &str,
        pid: &str,
        list: &str,
    ) -> R<()> {
        let bpath = format!("{path}/{}", b.name);
        let (bid, at) = match level {
            None => (
                self.branch_start(par, k, &branch_text(b), &b.name, pid, &bpath)?,
                At::Start,
            ),
            Some(d) => (Self::id_of(self.open_rec(d)), self.inner_at(d)),
        };
        self.body(
            &b.body,
            &Ctx {
                parent: Some(bid),
                iteration: None,
                path: bpath.clone(),
            },
            at,
        )?;
        self.branch_result(par, bid, b, &bpath, list)
    }

    fn branch_result(&mut self, par: i64, bid: i64, b: &Branch, bpath: &str, list: &str) -> R<()> {
        let end: &[&str] = &["--ends \"$BRANCH\" --status completed"];
        if b.fails {
            let set = [
                ("--status", "failed".to_string()),
                ("--error", format!("branch {} failed", b.name)),
            ];
            self.append(
                &format!("{bpath}:failed"),
                end,
                &set,
                Some(par),
                &[("BRANCH", bid)],
            )?;
            return Ok(());
        }
        let value = format!("{}@{bpath}", b.name);
        let with = [("PAR", par), ("BRANCH", bid)];
        self.bind(
            &format!("{bpath}:result"),
            &["bind", "--execution-id \"$PAR\""],
            &[&b.name, &value],
            &[],
            &with,
        )?;
        let set = [("--append", json!(format!("{}@{bpath}", b.name)).to_string())];
        self.bind(
            &format!("{bpath}:append"),
            &["bind", "--append", "--key \"$BRANCH\""],
            &[list],
            &set,
            &with,
        )?;
        self.append(
            &format!("{bpath}:end"),
            end,
            &[],
            Some(par),
            &[("BRANCH", bid)],
        )?;
        Ok(())
    }

    /// A branch of `parallel for`: the item bound const in the branch's frame, then the body.
    #[allow(clippy::too_many_arguments)]
    fn item(
        &mut self,
        par: i64,
        level: Option<usize>,
        k: usize,
        text: &str,
        var: &str,
        item: &str,
        body: &[Node],
        path: &str,
        pid: &str,
    ) -> R<()> {
        let name = (k + 1).to_string();
        let bpath = format!("{path}/{name}");
        let (bid, at) = match level {
            None => (
                self.branch_start(par, k, text, &name, pid, &bpath)?,
                At::Start,
            ),
            Some(d) => (Self::id_of(self.open_rec(d)), self.inner_at(d)),
        };
        if matches!(at, At::Start) {
            let bound = self
                .listed(var)
                .is_some_and(|b| b["execution_id"].as_i64() == Some(bid));
            if !bound {
                let line = &["bind", "--kind const", "--execution-id \"$CALL\""];
                let set = [("--source", text.to_string())];
                self.bind(
                    &format!("{bpath}:item"),
                    line,
                    &[var, item],
                    &set,
                    &[("CALL", bid)],
                )?;
            }
        }
        self.body(
            body,
            &Ctx {
                parent: Some(bid),
                iteration: None,
                path: bpath.clone(),
            },
            at,
        )?;
        let end: &[&str] = &["--ends \"$BRANCH\" --status completed"];
        self.append(
            &format!("{bpath}:end"),
            end,
            &[],
            Some(par),
            &[("BRANCH", bid)],
        )?;
        Ok(())
    }

    /// `parallel ("first")` / `("any", count: N)`: every branch is started at once; the first
    /// `count` to finish (here, in order) complete, and the others are ended `skipped`. After
    /// a crash, the branches open are those of `position.open` inside the parallel, and once
    /// the race is decided resume lists those to end (`to_skip`).
    #[allow(clippy::too_many_arguments)]
    fn race(
        &mut self,
        par: i64,
        level: Option<usize>,
        count: usize,
        path: &str,
        pid: &str,
        branches: &[Branch],
        list: &str,
    ) -> R<()> {
        let mut open: BTreeMap<String, i64> = BTreeMap::new();
        let mut completed: Vec<String> = Vec::new();
        let mut to_skip: Option<Vec<String>> = None;
        let names = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| a.iter().map(|b| b.as_str().unwrap().to_string()).collect())
                .unwrap_or_default()
        };
        if level.is_some() {
            for rec in self.doc()["position"]["open"].as_array().unwrap() {
                if rec["parent_id"].as_i64() == Some(par) {
                    let b = rec["metadata"]["branch"].as_str().unwrap().to_string();
                    open.insert(b, Self::id_of(rec));
                }
            }
            let p = self.parallel_of(pid);
            completed = names(&p["completed"]);
            if p.get("decided").is_some_and(|d| !d.is_null()) {
                to_skip = Some(names(&p["to_skip"]));
            }
            assert_eq!(
                to_skip.is_some(),
                completed.len() >= count,
                "resume decides the race of {pid} when {count} completed: {p}"
            );
        }
        let to_skip = match to_skip {
            Some(names) => names,
            None => {
                for (k, b) in branches.iter().enumerate() {
                    if !open.contains_key(&b.name) && !completed.contains(&b.name) {
                        let bpath = format!("{path}/{}", b.name);
                        let id =
                            self.branch_start(par, k, &branch_text(b), &b.name, pid, &bpath)?;
                        open.insert(b.name.clone(), id);
                    }
                }
                for b in branches {
                    if completed.len() >= count {
                        break;
                    }
                    if let Some(bid) = open.remove(&b.name) {
                        let bpath = format!("{path}/{}", b.name);
                        self.branch_result(par, bid, b, &bpath, list)?;
                        completed.push(b.name.clone());
                    }
                }
                branches
                    .iter()
                    .filter(|b| open.contains_key(&b.name))
                    .map(|b| b.name.clone())
                    .collect()
            }
        };
        for name in to_skip {
            let bid = *open
                .get(&name)
                .unwrap_or_else(|| panic!("{name} to skip is not open: {}", self.doc()));
            let end: &[&str] = &["--ends \"$BRANCH\" --status completed"];
            let set = [("--status", "skipped".to_string())];
            self.append(
                &format!("{path}/{name}:skipped"),
                end,
                &set,
                Some(par),
                &[("BRANCH", bid)],
            )?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn try_(
        &mut self,
        index: i64,
        ctx: &Ctx,
        path: &str,
        res: Res,
        body: &[Node],
        catch: &Option<(Option<String>, Vec<Node>)>,
        finally: &Option<Vec<Node>>,
    ) -> R<Flow> {
        let n = body.len() as i64;
        let catch_at = n + 1;
        let finally_at = if catch.is_some() { n + 2 } else { n + 1 };
        enum Phase {
            Body(At),
            Catch(Res, Option<String>),
            Finally(Res),
            End,
        }
        let after_body = |caught: bool| match (caught, finally.is_some()) {
            (_, true) => Phase::Finally(Res::Fresh),
            _ => Phase::End,
        };
        let (id, mut phase) = match res {
            Res::Fresh => {
                let set = [
                    ("--index", index.to_string()),
                    ("--text", "try:".to_string()),
                ];
                (
                    self.append(&format!("{path}:start"), &["TRY=$("], &set, ctx.parent, &[])?,
                    Phase::Body(At::Start),
                )
            }
            Res::Open(d) => {
                let id = Self::id_of(self.open_rec(d));
                let phase = if d + 1 < self.open_len() {
                    let child = self.open_rec(d + 1);
                    let at = child["statement_index"].as_i64().unwrap();
                    if catch.is_some() && at == catch_at {
                        Phase::Catch(Res::Open(d + 1), None)
                    } else if finally.is_some() && at == finally_at {
                        Phase::Finally(Res::Open(d + 1))
                    } else {
                        Phase::Body(At::Open(d + 1))
                    }
                } else if self.after().is_null() {
                    Phase::Body(At::Start)
                } else {
                    let k = self.after()["statement_index"]
                        .as_i64()
                        .unwrap_or_else(|| panic!("after: {}", self.doc()));
                    if k <= n {
                        Phase::Body(At::After)
                    } else if catch.is_some() && k == catch_at {
                        after_body(true)
                    } else {
                        assert_eq!(k, finally_at, "{}", self.doc()["position"]);
                        Phase::End
                    }
                };
                (id, phase)
            }
            Res::Partial => unreachable!(),
        };
        let inner = ctx.inside(id, path.to_string());
        loop {
            phase = match phase {
                Phase::Body(at) => match self.body(body, &inner, at)? {
                    Flow::Normal => after_body(false),
                    Flow::Failed(msg) => {
                        assert!(catch.is_some(), "{path}: an error no catch takes");
                        Phase::Catch(Res::Fresh, Some(msg))
                    }
                },
                Phase::Catch(res, msg) => {
                    let (err, cbody) = catch.as_ref().unwrap();
                    let text = catch_text(err);
                    let cpath = format!("{path}:catch");
                    let (cid, at) = match res {
                        Res::Fresh => {
                            let set = [("--index", catch_at.to_string()), ("--text", text.clone())];
                            let l: &[&str] = &["CATCH=$("];
                            (
                                self.append(
                                    &format!("{cpath}:start"),
                                    l,
                                    &set,
                                    Some(id),
                                    &[("TRY", id)],
                                )?,
                                At::Start,
                            )
                        }
                        Res::Open(d) => (Self::id_of(self.open_rec(d)), self.inner_at(d)),
                        Res::Partial => unreachable!(),
                    };
                    if let (Some(err), At::Start) = (err, &at) {
                        // The error's message: the failure's (after a crash, resume's
                        // `retries` has an exhausted one's; a throw's is its text's).
                        let msg = msg.unwrap_or_else(|| self.caught(body));
                        let line = &["bind err", "--local"];
                        self.bind(
                            &format!("{cpath}:err"),
                            line,
                            &[err, &msg],
                            &[],
                            &[("CATCH", cid)],
                        )?;
                    }
                    self.body(cbody, &ctx.inside(cid, cpath.clone()), at)?;
                    let l: &[&str] = &["--ends \"$CATCH\" --status completed"];
                    self.append(&format!("{cpath}:end"), l, &[], Some(id), &[("CATCH", cid)])?;
                    after_body(true)
                }
                Phase::Finally(res) => {
                    let fbody = finally.as_ref().unwrap();
                    let fpath = format!("{path}:finally");
                    let (fid, at) = match res {
                        Res::Fresh => {
                            let set = [
                                ("--index", finally_at.to_string()),
                                ("--text", "finally:".to_string()),
                            ];
                            let l: &[&str] = &["CATCH=$("];
                            (
                                self.append(
                                    &format!("{fpath}:start"),
                                    l,
                                    &set,
                                    Some(id),
                                    &[("TRY", id)],
                                )?,
                                At::Start,
                            )
                        }
                        Res::Open(d) => (Self::id_of(self.open_rec(d)), self.inner_at(d)),
                        Res::Partial => unreachable!(),
                    };
                    self.body(fbody, &ctx.inside(fid, fpath.clone()), at)?;
                    let l: &[&str] = &["--ends \"$CATCH\" --status completed"];
                    self.append(&format!("{fpath}:end"), l, &[], Some(id), &[("CATCH", fid)])?;
                    Phase::End
                }
                Phase::End => break,
            };
        }
        let l: &[&str] = &["--ends \"$TRY\" --status completed"];
        self.append(&format!("{path}:end"), l, &[], ctx.parent, &[("TRY", id)])?;
        Ok(Flow::Normal)
    }

    /// The message of the error a catch took, after a crash inside the catch before `err` was
    /// bound: a throw's is its text's; a failed session's is only in the log, and once the
    /// catch has started resume gives it nowhere (`resume_names_the_error_a_catch_caught`): the
    /// exhausted retry, if resume still lists it, else the error the program's sessions fail
    /// with.
    fn caught(&self, body: &[Node]) -> String {
        for n in body {
            match n {
                Throw { msg, .. } => return msg.clone(),
                Retry { text, max, fails } if *fails == max + 1 => {
                    let listed = self.doc()["retries"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|r| r["statement_text"] == text.as_str() && r["state"] == "exhausted")
                        .map(|r| r["last_error"].as_str().unwrap().to_string());
                    return listed.unwrap_or_else(|| RETRY_ERROR.to_string());
                }
                _ => {}
            }
        }
        panic!("a catch with no failure before it")
    }

    /// `approve id:`: the gate opened (`gates create`, `--reopen` once it exists), a person
    /// decides, the VM waits with the opening's `--instance`; a rejection reopens it; the
    /// approval is logged.
    fn gate(
        &mut self,
        index: i64,
        ctx: &Ctx,
        path: &str,
        res: Res,
        id: &str,
        rejections: i64,
    ) -> R<()> {
        let text = format!("approve {id}:");
        let create = |vm: &mut Self, reopen: bool, label: String| -> R<()> {
            let line = if reopen {
                vm.lines.with(&["gates create review --reopen"])
            } else {
                vm.lines.with(&["gates create deploy"])
            };
            let set = [
                ("--index", index.to_string()),
                ("--prompt", format!("Accept {id}?")),
                (
                    "--on-reject",
                    if reopen {
                        "retry draft"
                    } else {
                        "throw \"Cancelled\""
                    }
                    .to_string(),
                ),
            ];
            let mut argv = with_positionals(fill(&line, &set, &vm.vars(ctx.parent, &[])), &[id]);
            // The gate's `approve` record is the statement's: at its index, inside the
            // innermost construct. The guide's reopen line gives no `--index`, and no gate line
            // gives `--execution-id`: without them the record is nowhere resume can place it
            // (see `resume_places_a_reopened_gate_at_its_statement`), so they are added.
            if !argv.iter().any(|w| w == "--index") {
                argv.extend(["--index".to_string(), index.to_string()]);
            }
            if let (Some(p), false) = (ctx.parent, argv.iter().any(|w| w == "--execution-id")) {
                argv.extend(["--execution-id".to_string(), p.to_string()]);
            }
            let sent = vm.step(&label, argv.clone())?;
            assert_eq!(sent.code, 0, "{argv:?}: {}", sent.json);
            vm.appended += 1;
            Ok(())
        };
        let status = match res {
            Res::Fresh => {
                let doc = match self.state() {
                    Some(d) => d.clone(),
                    None => self.resume(),
                };
                let exists = Self::gate_in(&doc, id).is_some();
                create(self, exists || rejections > 0, format!("{path}:open"))?;
                "pending".to_string()
            }
            Res::Partial => {
                let g = Self::gate_in(self.doc(), id).unwrap_or_else(|| panic!("no gate {id}"));
                g["status"].as_str().unwrap().to_string()
            }
            Res::Open(_) => unreachable!(),
        };
        let mut status = status;
        loop {
            match status.as_str() {
                "approved" => break,
                "rejected" => {
                    create(self, true, format!("{path}:reopen"))?;
                }
                "pending" => {}
                other => panic!("gate {id} {other}"),
            }
            // The person decides; the VM waits for the opening resume names.
            decide(self.run, self.lines, id, rejections);
            let doc = self.resume();
            let g = Self::gate_in(&doc, id).unwrap().clone();
            assert!(
                matches!(
                    g["next_step"]["action"].as_str(),
                    Some("continue" | "retry")
                ),
                "{g}"
            );
            let mut argv = match g.get("instance").and_then(Value::as_i64) {
                Some(n) => {
                    let line = self.lines.with(&["gates wait deploy --instance"]);
                    let set = [("--instance", n.to_string())];
                    fill(&line, &set, &self.vars(None, &[]))
                }
                None => {
                    let line = self.lines.with(&["gates wait review"]);
                    fill(&line, &[], &self.vars(None, &[]))
                }
            };
            argv = with_positionals(argv, &[id]);
            let sent = self.step(&format!("{path}:wait"), argv.clone())?;
            status = match sent.code {
                0 => "approved".into(),
                5 => "rejected".into(),
                c => panic!("{argv:?} exited {c}: {}", sent.json),
            };
        }
        let set = [("--index", index.to_string()), ("--text", text)];
        let l: &[&str] = &["--text 'approve deploy:' --status completed"];
        self.append(&format!("{path}:done"), l, &set, ctx.parent, &[])?;
        Ok(())
    }

    fn gate_in<'d>(doc: &'d Value, id: &str) -> Option<&'d Value> {
        doc["gates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["id"] == id)
    }
}

/// The person: decides the gate's pending opening, if any, with the approver's guide lines:
/// each time the gate is reached it is rejected `rejections` times, then approved.
fn decide(run: &Run, lines: &Lines, gate: &str, rejections: i64) {
    let out = run
        .cmd()
        .args(["--json", "gates", "--status", "all"])
        .assert()
        .success();
    let all: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let g = all
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["id"] == gate)
        .unwrap();
    if g["status"] != "pending" {
        return;
    }
    let instance = g["instance"].as_i64().unwrap();
    let reject = (instance - 1) % (rejections + 1) < rejections;
    let line = if reject {
        &lines.reject
    } else {
        &lines.approve
    };
    let vars = HashMap::from([("PROSE_RUN", run.id.clone())]);
    let argv = with_positionals(fill(line, &[], &vars), &[&run.id, gate]);
    run.cmd()
        .env("PROSE_PRINCIPAL", "alice")
        .args(&argv)
        .assert()
        .success();
}

// ---------------------------------------------------------------------------------------------
// What a run ends with

/// One execution record, as the database holds it.
#[derive(Clone, Debug)]
struct Rec {
    id: i64,
    index: Option<i64>,
    text: Option<String>,
    status: String,
    parent: Option<i64>,
    metadata: Value,
    error: Option<String>,
}

fn log(run: &Run) -> Vec<Rec> {
    let parse = |m: Option<String>| {
        m.and_then(|m| serde_json::from_str(&m).ok())
            .unwrap_or_else(|| json!({}))
    };
    match &run.pg_url {
        Some(url) => {
            let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
            c.query(
                "SELECT id, statement_index, statement_text, status, parent_id, metadata::text,
                        error_message
                 FROM openprose.execution WHERE run_id = $1 ORDER BY id",
                &[&run.id],
            )
            .unwrap()
            .iter()
            .map(|r| Rec {
                id: r.get(0),
                index: r.get(1),
                text: r.get(2),
                status: r.get(3),
                parent: r.get(4),
                metadata: parse(r.get(5)),
                error: r.get(6),
            })
            .collect()
        }
        None => {
            let c = run.conn();
            let mut q = c
                .prepare(
                    "SELECT id, statement_index, statement_text, status, parent_id, metadata,
                            error_message FROM execution ORDER BY id",
                )
                .unwrap();
            q.query_map([], |r| {
                Ok(Rec {
                    id: r.get(0)?,
                    index: r.get(1)?,
                    text: r.get(2)?,
                    status: r.get(3)?,
                    parent: r.get(4)?,
                    metadata: parse(r.get(5)?),
                    error: r.get(6)?,
                })
            })
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
        }
    }
}

fn is_start(r: &Rec) -> bool {
    matches!(r.status.as_str(), "executing" | "started")
}

/// A log as positions: each record with its parent and the start it ends as positions in the
/// log (ids may skip on PostgreSQL), its depth, and its metadata but `ends`.
fn shape(log: &[Rec]) -> Vec<String> {
    let at: HashMap<i64, usize> = log.iter().enumerate().map(|(i, r)| (r.id, i)).collect();
    let mut depth: HashMap<i64, usize> = HashMap::new();
    log.iter()
        .map(|r| {
            let d = r.parent.map_or(0, |p| depth.get(&p).map_or(99, |d| d + 1));
            depth.insert(r.id, d);
            let mut m = r.metadata.clone();
            let ends = m
                .as_object_mut()
                .and_then(|m| m.remove("ends"))
                .and_then(|e| e.as_i64())
                .map(|e| format!(" ends #{}", at.get(&e).map_or(-1, |p| *p as i64)));
            format!(
                "{}{} {} {} (parent #{}){}{}{}",
                "  ".repeat(d),
                r.index.map_or("-".into(), |i| i.to_string()),
                r.text.as_deref().unwrap_or(""),
                r.status,
                r.parent.map_or("-".into(), |p| at
                    .get(&p)
                    .map_or("?".into(), |x| x.to_string())),
                ends.unwrap_or_default(),
                if m == json!({}) {
                    String::new()
                } else {
                    format!(" {m}")
                },
                r.error
                    .as_deref()
                    .map(|e| format!(" error {e:?}"))
                    .unwrap_or_default()
            )
        })
        .collect()
}

/// Where the guide says a log of `m` records stands: the starts not ended (positions), and the
/// last record inside the innermost that is not a start.
fn oracle(log: &[Rec], m: usize) -> (Vec<usize>, Option<usize>) {
    let prefix = &log[..m];
    let ended: Vec<i64> = prefix
        .iter()
        .filter_map(|r| r.metadata.get("ends").and_then(Value::as_i64))
        .collect();
    let open: Vec<usize> = prefix
        .iter()
        .enumerate()
        .filter(|(_, r)| is_start(r) && !ended.contains(&r.id))
        .map(|(i, _)| i)
        .collect();
    let current = open.last().map(|i| prefix[*i].id);
    let after = prefix
        .iter()
        .enumerate()
        .rev()
        .find(|(_, r)| !is_start(r) && r.parent == current)
        .map(|(i, _)| i);
    (open, after)
}

/// resume's position as positions in `log` (the log when it answered).
fn position(doc: &Value, log: &[Rec]) -> (Vec<usize>, Option<usize>) {
    let at = |v: &Value| {
        let id = v["id"].as_i64().unwrap();
        log.iter()
            .position(|r| r.id == id)
            .unwrap_or_else(|| panic!("resume names record {id}, not in the log"))
    };
    let open = doc["position"]["open"]
        .as_array()
        .unwrap()
        .iter()
        .map(at)
        .collect();
    let after = Some(&doc["position"]["after"])
        .filter(|a| !a.is_null())
        .map(at);
    (open, after)
}

/// What a run ended with.
struct Ended {
    log: Vec<Rec>,
    /// The root frame's bindings: name → (kind, value).
    bindings: BTreeMap<String, (String, String)>,
    /// The persistent agent: its memory and its segments.
    agent: (Option<String>, usize),
    sessions: usize,
    trace: Vec<Step>,
    steps: usize,
}

fn ended(run: &Run, sessions: usize, trace: Vec<Step>, steps: usize) -> Ended {
    let out = run
        .cmd()
        .args(["--json", "resume", "--limit", "500"])
        .assert()
        .success();
    let doc: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert!(
        doc["position"]["open"].as_array().unwrap().is_empty(),
        "{doc}"
    );
    assert_eq!(doc["run"]["status"], "completed", "{doc}");
    let mut bindings = BTreeMap::new();
    for b in doc["bindings"].as_array().unwrap() {
        assert!(b["execution_id"].is_null(), "{b}");
        let name = b["name"].as_str().unwrap();
        let out = run.cmd().args(["get", name]).assert().success();
        let value = String::from_utf8(out.get_output().stdout.clone()).unwrap();
        bindings.insert(
            name.to_string(),
            (b["kind"].as_str().unwrap_or("").to_string(), value),
        );
    }
    let memory = run
        .cmd()
        .args(["agent", "memory", "captain"])
        .output()
        .unwrap();
    let memory = memory
        .status
        .success()
        .then(|| String::from_utf8(memory.stdout).unwrap());
    Ended {
        log: log(run),
        bindings,
        agent: (memory, run.view().segments("captain").len()),
        sessions,
        trace,
        steps,
    }
}

// ---------------------------------------------------------------------------------------------
// The property

fn cases() -> (Vec<u64>, bool) {
    match std::env::var("PROSE_LANGUAGE_SEED") {
        Ok(s) => (vec![s.parse().unwrap()], true),
        Err(_) => {
            let n = std::env::var("PROSE_LANGUAGE_CASES")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(6);
            ((0..n).collect(), false)
        }
    }
}

fn every_program_ends_alike_crash_or_not(b: Backend) {
    property(b, false);
}

fn every_program_ends_alike_crash_or_not_through_mcp(b: Backend) {
    property(b, true);
}

fn property(b: Backend, mcp: bool) {
    let Some(p) = Project::on(b) else { return };
    let (seeds, _) = cases();
    // Every step from this one, each killed before it lands and after (slow: to explore).
    let every: Option<usize> = std::env::var("PROSE_LANGUAGE_EVERY_STEP")
        .ok()
        .map(|s| s.parse().unwrap());
    let kill_at: Option<usize> = std::env::var("PROSE_LANGUAGE_KILL_AT")
        .ok()
        .map(|s| s.parse().unwrap());
    let started = Instant::now();
    let (mut steps, mut kills, mut landed) = (0, 0, 0);
    for seed in &seeds {
        let seed = *seed;
        let program = Gen::new(seed).program();
        let text = program_text(&program);
        // Shown if the case fails inside the VM (the harness prints a failed test's output).
        eprintln!("seed {seed} (PROSE_LANGUAGE_SEED={seed}):\n{text}");
        let whole = play(&p, &program, mcp, None).0;
        // The root frame holds what the language says it does.
        let got: BTreeMap<String, Value> = whole
            .bindings
            .iter()
            .map(|(name, (kind, value))| {
                assert_eq!(kind, "let", "seed {seed}: {name}");
                let v = serde_json::from_str::<Value>(value)
                    .ok()
                    .filter(Value::is_array)
                    .unwrap_or_else(|| json!(value.trim_end()));
                (name.clone(), v)
            })
            .collect();
        assert_eq!(
            got,
            expected(&program),
            "{b:?}: seed {seed}: the root frame's bindings (got, then the language's)\nprogram:\n{text}"
        );
        steps += whole.steps;
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
        let crashes: Vec<(usize, Kill)> = if let Some(from) = every {
            (from..=whole.steps)
                .flat_map(|s| [(s, Kill::Before), (s, Kill::After)])
                .collect()
        } else {
            let at = kill_at.unwrap_or_else(|| rng.random_range(1..=whole.steps));
            let window = if mcp { 4_000 } else { 30_000 };
            let kill = match rng.random_range(0..3) {
                0 => Kill::Before,
                1 => Kill::Mid(Duration::from_micros(rng.random_range(0..window))),
                _ => Kill::After,
            };
            vec![(at, kill)]
        };
        for (at, kill) in crashes {
            let report = |what: &str| {
                format!(
                    "{b:?}{}: seed {seed}, killed at step {at} ({kill:?}) (replay with PROSE_LANGUAGE_SEED={seed} PROSE_LANGUAGE_KILL_AT={at}): {what}\nprogram:\n{text}",
                    if mcp { " through MCP" } else { "" }
                )
            };
            let (again, crash) = play(&p, &program, mcp, Some((at, kill)));
            let crash = crash.unwrap();
            kills += 1;
            landed += usize::from(crash.records > crash.before);
            check(&whole, &again, &crash, &report);
        }
    }
    eprintln!(
        "language property{} on {b:?}: {} programs, {steps} steps, {kills} kills ({landed} after the step landed), {:.1?}",
        if mcp { " through MCP" } else { "" },
        seeds.len(),
        started.elapsed()
    );
}

/// Where the VM was killed, and what `resume` said then.
struct Crashed {
    /// The step killed.
    label: String,
    /// Records in the log before the killed step, and when the new VM read `resume`.
    before: usize,
    records: usize,
    /// The log at that moment.
    log: Vec<Rec>,
    doc: Value,
    /// The new VM's first step.
    first: String,
}

/// Plays the program on a new run: uninterrupted, or killed at a step and continued by a new
/// VM from `resume`.
fn play(
    p: &Project,
    program: &[Node],
    mcp: bool,
    crash: Option<(usize, Kill)>,
) -> (Ended, Option<Crashed>) {
    let run = p.init();
    let mut via = if mcp { Via::mcp(&run) } else { Via::Cli };
    let lines = Lines::read(&mut via, &run);
    let mut vm = Vm::new(&run, &lines, &mut via, crash);
    let Err(Crash) = vm.play(program) else {
        assert!(crash.is_none(), "no step {crash:?}");
        let (s, t, n) = (vm.sessions, std::mem::take(&mut vm.trace), vm.steps);
        drop(vm);
        drop(via);
        return (ended(&run, s, t, n), None);
    };
    let label = vm.trace.last().unwrap().0.clone();
    let (sessions, before) = (vm.sessions, vm.appended);
    drop(vm);
    let at_crash = log(&run);
    let mut vm = Vm::new(&run, &lines, &mut via, None);
    let doc = vm.resume();
    vm.continue_from(doc.clone(), program)
        .expect("no kill after the first");
    let first = vm.trace.first().map(|s| s.0.clone()).unwrap_or_default();
    let (s, t, n) = (
        sessions + vm.sessions,
        std::mem::take(&mut vm.trace),
        vm.steps,
    );
    drop(vm);
    drop(via);
    let crashed = Crashed {
        label,
        before,
        records: at_crash.len(),
        log: at_crash,
        doc,
        first,
    };
    (ended(&run, s, t, n), Some(crashed))
}

/// The property, for one kill.
fn check(whole: &Ended, again: &Ended, crash: &Crashed, report: &dyn Fn(&str) -> String) {
    let (m, killed, doc) = (crash.records, &crash.label, &crash.doc);
    // The same log, record for record.
    let (want, got) = (shape(&whole.log), shape(&again.log));
    if want != got {
        let i = want
            .iter()
            .zip(&got)
            .position(|(a, b)| a != b)
            .unwrap_or(want.len().min(got.len()));
        let around = |l: &[String]| l[i.saturating_sub(3)..(i + 3).min(l.len())].join("\n");
        panic!(
            "{}",
            report(&format!(
                "{killed}, {m} records: the logs differ at record {i}:\nuninterrupted:\n{}\ninterrupted:\n{}\nresume said: {}",
                around(&want),
                around(&got),
                doc["position"]
            ))
        );
    }
    // The same bindings, agent and sessions.
    assert_eq!(
        again.bindings,
        whole.bindings,
        "{}",
        report(&format!("{killed}: bindings"))
    );
    assert_eq!(
        again.agent,
        whole.agent,
        "{}",
        report(&format!("{killed}: the agent (memory, segments)"))
    );
    assert_eq!(
        again.sessions,
        whole.sessions,
        "{}",
        report(&format!("{killed}: sessions run"))
    );
    // resume named where the uninterrupted run stood at that length of its log, and the new
    // VM's first step is one the uninterrupted VM took there.
    let said = position(doc, &crash.log);
    let stood = oracle(&whole.log, m);
    assert_eq!(
        said,
        stood,
        "{}",
        report(&format!(
            "{killed}, {m} records: resume's position (open, after) as log positions; resume said {}\nthe log:\n{}",
            doc["position"],
            shape(&crash.log).join("\n")
        ))
    );
    let took: Vec<&str> = whole
        .trace
        .iter()
        .filter(|(_, before)| *before == m)
        .map(|(l, _)| l.as_str())
        .collect();
    assert!(
        took.contains(&crash.first.as_str()) || (crash.first.is_empty() && m == whole.log.len()),
        "{}",
        report(&format!(
            "{killed}, {m} records: the VM went on with {:?}, the uninterrupted one took {took:?} there; resume said {}",
            crash.first, doc["position"]
        ))
    );
}

// ---------------------------------------------------------------------------------------------
// What the property found, each the smallest sequence of guide lines that shows it. Red when
// written: `resume_marks_the_first_statements_binding_unlogged`,
// `resume_places_a_reopened_gate_at_its_statement`, `resume_names_the_error_a_catch_caught`;
// the other three were found while the code
// under test changed (they are green since 00a7727 and 3a4f463), and stay as regressions.

/// Runs guide lines as a VM would (CLI), giving each its values.
struct Lit<'a> {
    run: &'a Run,
    lines: Lines,
}

impl Lit<'_> {
    fn send(
        &self,
        line: &[&str],
        set: &[(&str, String)],
        with: &[(&'static str, i64)],
    ) -> (i32, String) {
        let line = self.lines.with(line);
        let mut vars = HashMap::from([("PROSE_RUN", self.run.id.clone())]);
        for (k, v) in with {
            vars.insert(*k, v.to_string());
        }
        let argv = fill(&line, set, &vars);
        let out = self.run.cmd().args(&argv).output().unwrap();
        (
            out.status.code().unwrap(),
            String::from_utf8(out.stdout).unwrap(),
        )
    }

    fn id(&self, line: &[&str], set: &[(&str, String)], with: &[(&'static str, i64)]) -> i64 {
        let (code, out) = self.send(line, set, with);
        assert_eq!(code, 0, "{line:?}: {out}");
        out.trim().parse().unwrap()
    }

    fn resume(&self) -> Value {
        let out = self.run.cmd().args(["--json", "resume"]).assert().success();
        serde_json::from_slice(&out.get_output().stdout).unwrap()
    }
}

/// `parallel ("first")`: the VM ends the branch it stops `skipped`, as the guide says, then
/// crashes before the join. resume's `parallel` must not list that branch as outstanding (its
/// table: "run only the outstanding ones"): a VM that follows it runs a branch the program cut
/// short, and the branch has no open start left to end. (Listed as outstanding before
/// 00a7727.)
fn resume_does_not_list_a_skipped_branch_as_outstanding(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let mut via = Via::Cli;
    let lit = Lit {
        run: &run,
        lines: Lines::read(&mut via, &run),
    };
    let meta = r#"{"parallel_id": "p1", "branches": ["a", "b"], "strategy": "first"}"#;
    let par = lit.id(
        &["PAR=$("],
        &[
            ("--index", "1".into()),
            ("--text", "parallel (\"first\"):".into()),
            ("--metadata", meta.into()),
        ],
        &[],
    );
    let mut branch = Vec::new();
    for (i, name) in ["a", "b"].iter().enumerate() {
        branch.push(lit.id(
            &["BRANCH=$(", "--construct branch"],
            &[
                ("--index", (i + 1).to_string()),
                ("--text", format!("{name} = session \"Search {name}\"")),
                (
                    "--metadata",
                    json!({"parallel_id": "p1", "branch": name}).to_string(),
                ),
            ],
            &[("PAR", par)],
        ));
    }
    let end = &["--ends \"$BRANCH\" --status completed"];
    lit.id(end, &[], &[("BRANCH", branch[0])]);
    lit.id(
        end,
        &[("--status", "skipped".into())],
        &[("BRANCH", branch[1])],
    );
    let doc = lit.resume();
    let p1 = &doc["parallel"][0];
    assert_eq!(p1["completed"], json!(["a"]), "{doc}");
    assert_eq!(
        p1["outstanding"],
        json!([]),
        "branch b was ended skipped, yet resume lists it as outstanding: {p1}"
    );
}

/// A VM killed while it waits on a gate it opened waits again with `gates wait GATE --instance
/// N`: resume must name the pending gate's instance, in JSON and in text. (It named none
/// before 3a4f463, though the guide said it did.)
fn resume_names_the_instance_of_a_pending_gate(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let mut via = Via::Cli;
    let lit = Lit {
        run: &run,
        lines: Lines::read(&mut via, &run),
    };
    let (code, out) = lit.send(&["gates create deploy"], &[("--index", "1".into())], &[]);
    assert_eq!(code, 0, "{out}");
    let doc = lit.resume();
    let g = &doc["gates"][0];
    assert_eq!(g["next_step"]["action"], "wait", "{doc}");
    assert_eq!(
        g["instance"], 1,
        "resume --json names no instance of the pending gate: {g}"
    );
    let out = run.cmd().arg("resume").assert().success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    let line = text.lines().find(|l| l.starts_with("gate deploy")).unwrap();
    assert!(
        line.contains("instance 1"),
        "resume's gate line names no instance: {line}"
    );
}

/// Seed 148: the VM is killed after the first statement's session wrote its binding, before
/// it logged the statement. resume must mark the binding `unlogged` (the guide: "log its
/// completion; do not run the session again"), as it does for any later statement; it does
/// not when the run has no record yet, so the VM runs the session again (a persistent agent
/// gets a second segment).
fn resume_marks_the_first_statements_binding_unlogged(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let mut via = Via::Cli;
    let lit = Lit {
        run: &run,
        lines: Lines::read(&mut via, &run),
    };
    let vars = HashMap::from([("PROSE_RUN", run.id.clone())]);
    let spawn = |name: &str| {
        let line = lit
            .lines
            .with(&["guide subagent --run \"$PROSE_RUN\" --name"]);
        fill(&line, &[("--name", name.to_string())], &vars)
    };
    let unlogged = |name: &str| {
        let doc = lit.resume();
        let b = doc["bindings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == name)
            .unwrap_or_else(|| panic!("no binding {name}: {doc}"))
            .clone();
        b["unlogged"] == true
    };
    // Statement 2's session, after statement 1 was logged: unlogged, as it should be.
    let run2 = p.init();
    let mut via2 = Via::Cli;
    let lit2 = Lit {
        run: &run2,
        lines: Lines::read(&mut via2, &run2),
    };
    let stmt = &["exec-append", "--status completed --key stmt-"];
    let set = |i: i64, text: &str| {
        vec![
            ("--index", i.to_string()),
            ("--text", text.to_string()),
            ("--key", format!("stmt-{i}-done")),
        ]
    };
    lit2.id(stmt, &set(1, "let brief = session: captain"), &[]);
    let vars2 = HashMap::from([("PROSE_RUN", run2.id.clone())]);
    let line = lit2
        .lines
        .with(&["guide subagent --run \"$PROSE_RUN\" --name"]);
    let argv = fill(&line, &[("--name", "total".to_string())], &vars2);
    via2.subagent_as(&run2, &argv, "the tally\n", None);
    let doc = lit2.resume();
    let total = doc["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "total")
        .unwrap()
        .clone();
    assert_eq!(total["unlogged"], true, "{doc}");
    // Statement 1's session, the run's first: the same.
    via.subagent_as(&run, &spawn("brief"), "the brief\n", None);
    assert!(
        unlogged("brief"),
        "the first statement's binding, written before any record, is not unlogged: {}",
        lit.resume()["bindings"]
    );
}

/// A branch of `parallel:` is open (its start carries the parallel's `parallel_id`, as the
/// guide's line writes it): resume must list the parallel once. (Before 00a7727 it listed it
/// twice, once more with no branches for the open branch, and counted two parallels.)
fn resume_lists_a_parallel_once_while_a_branch_is_open(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let mut via = Via::Cli;
    let lit = Lit {
        run: &run,
        lines: Lines::read(&mut via, &run),
    };
    let meta = r#"{"parallel_id": "p1", "branches": ["a", "b"]}"#;
    let par = lit.id(
        &["PAR=$("],
        &[
            ("--index", "1".into()),
            ("--text", "parallel:".into()),
            ("--metadata", meta.into()),
        ],
        &[],
    );
    lit.id(
        &["BRANCH=$(", "--construct branch"],
        &[
            ("--index", "1".into()),
            ("--text", "a = session \"Search a\"".into()),
            (
                "--metadata",
                json!({"parallel_id": "p1", "branch": "a"}).to_string(),
            ),
        ],
        &[("PAR", par)],
    );
    let doc = lit.resume();
    let listed: Vec<&Value> = doc["parallel"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["parallel_id"] == "p1")
        .collect();
    assert_eq!(
        listed.len(),
        1,
        "parallel p1 listed {} times: {}",
        listed.len(),
        doc["parallel"]
    );
    assert_eq!(listed[0]["outstanding"], json!(["a", "b"]), "{doc}");
    assert_eq!(doc["counts"]["parallel"], 1, "{doc}");
}

/// `approve review:` is statement 2 inside a block call. The VM opens the gate with the guide's
/// lines, the person rejects it, the VM reopens it with the guide's reopen line: each opening's
/// `approve` record must be where resume reads the statement (index 2, inside the call), or a
/// VM killed while it waits cannot tell which statement is under way. The guide's reopen line
/// has no `--index`, and no gate line has `--execution-id`: the records land at the top level,
/// the reopened one with no index at all.
fn resume_places_a_reopened_gate_at_its_statement(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let mut via = Via::Cli;
    let lit = Lit {
        run: &run,
        lines: Lines::read(&mut via, &run),
    };
    let call = lit.id(
        &["CALL=$(", "--status executing"],
        &[
            ("--index", "1".into()),
            ("--text", "do review(draft)".into()),
        ],
        &[],
    );
    // Whatever the guide calls the innermost construct's record, it is the call's.
    let open = |line: &[&str], n: i64| {
        let line = lit.lines.with(line);
        let mut vars = HashMap::from([("PROSE_RUN", run.id.clone())]);
        for k in CONSTRUCT_VARS {
            vars.insert(k, call.to_string());
        }
        let set = [
            ("--index", "2".to_string()),
            ("--on-reject", "retry draft".to_string()),
        ];
        let mut argv = with_positionals(fill(&line, &set, &vars), &["review"]);
        // The guide's line opens its gate where the VM is; inside a call, the call's record
        // (the prose beside the line says to pass the innermost record).
        if !argv.iter().any(|a| a == "--execution-id") {
            argv.extend(["--execution-id".to_string(), call.to_string()]);
        }
        run.cmd().args(&argv).assert().success();
        let doc = lit.resume();
        let after = &doc["position"]["after"];
        assert_eq!(
            (
                &after["statement_text"],
                &after["statement_index"],
                &after["parent_id"]
            ),
            (&json!("approve review:"), &json!(2), &json!(call)),
            "opening {n} ({line}): resume's position is {}",
            doc["position"]
        );
    };
    open(&["gates create review --reopen"], 1);
    let vars = HashMap::from([("PROSE_RUN", run.id.clone())]);
    let reject = with_positionals(fill(&lit.lines.reject, &[], &vars), &[&run.id, "review"]);
    run.cmd()
        .env("PROSE_PRINCIPAL", "alice")
        .args(&reject)
        .assert()
        .success();
    open(&["gates create review --reopen"], 2);
}

/// Seed 23 through MCP: `session "Risky" (retry: 1)` fails both attempts inside a `try:`; the
/// VM starts the catch (`catch as err:`), and is killed before `bind err MSG --local`. The new
/// VM must bind `err` to the error the catch took, a session's, known only at run time; once
/// the catch has started, resume gives it nowhere (not in `retries`, which drops the handled
/// failure, nor in `position`, whose records carry no error).
fn resume_names_the_error_a_catch_caught(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let mut via = Via::Cli;
    let lit = Lit {
        run: &run,
        lines: Lines::read(&mut via, &run),
    };
    let try_ = lit.id(
        &["TRY=$("],
        &[("--index", "1".into()), ("--text", "try:".into())],
        &[],
    );
    let text = "session \"Risky\" (retry: 1)";
    let attempt = |status: &str, n: i64, error: Option<&str>| {
        let line: &[&str] = match status {
            "failed" => &["'session \"Flaky\"' --status failed"],
            _ => &["'session \"Flaky\"' --status retry"],
        };
        let mut set = vec![
            ("--index", "1".to_string()),
            ("--text", text.to_string()),
            ("--metadata", json!({"attempt": n, "max": 1}).to_string()),
        ];
        if let Some(e) = error {
            set.push(("--error", e.to_string()));
        }
        let line = lit.lines.with(line);
        let vars = HashMap::from([("PROSE_RUN", run.id.clone())]);
        let mut argv = fill(&line, &set, &vars);
        argv.extend(["--parent".to_string(), try_.to_string()]);
        run.cmd().args(&argv).assert().success();
    };
    attempt("failed", 1, Some("HTTP 502"));
    attempt("retry", 2, None);
    attempt("failed", 2, Some("Connection reset by peer"));
    let before = lit.resume();
    assert!(
        before["position"]["handler"]
            .as_str()
            .is_some_and(|h| h.starts_with("the catch of try:")),
        "{}",
        before["position"]
    );
    lit.id(
        &["CATCH=$("],
        &[("--index", "2".into()), ("--text", "catch as err:".into())],
        &[("TRY", try_)],
    );
    let doc = lit.resume();
    assert!(
        doc.to_string().contains("Connection reset by peer"),
        "inside the catch, before `err` is bound, resume does not say what error it caught: {doc}"
    );
}
