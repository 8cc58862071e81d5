//! The literal VM (issue 28): a harness plays the VM and its subagents on a corpus of programs,
//! using only command lines taken from the text `guide vm` and `guide subagent` print. Each
//! command is a guide line with the program's values put in (index, text, metadata, ids): the
//! options, statuses and parents come from the guide, so a guide that changes its shapes
//! changes what the harness writes, and `resume` must still follow. After every step `resume`
//! must name exactly where the program stands: the innermost open construct and the last thing
//! done inside it; and the database itself must hold the record, under the parent the guide
//! gives. Now and then the VM is SIGKILLed mid-step; it then reads `resume` to learn whether
//! its step landed, as a VM that lost its context would, and carries on.
//!
//! The same corpus is played twice, each way a VM may be given the state: on the command line
//! (each step a guide line run as a command), and through MCP (the VM an MCP session of
//! `mcp --role vm`, each subagent a session of `mcp --role subagent` pinned to its run and
//! execution). Through MCP the guides are the sessions' prompts (`prompts/get`), and each guide
//! line the harness plays is sent as the tool the README's table names for its command: that
//! tool must be listed in the session, and take each option of the line as a property of its
//! schema, typed as the schema says. The kill then lands on the VM's MCP server.

use crate::common::*;
use rmcp::model::{CallToolRequestParams, ContentBlock, GetPromptRequestParams};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::time::Duration;

on_both!(
    the_literal_vm_plays_the_corpus,
    the_literal_vm_plays_the_corpus_through_mcp
);

/// The guide lines the harness plays, found by what they are.
pub(crate) struct Lines {
    pub(crate) all: Vec<String>,
    pub(crate) approve: String,
    pub(crate) reject: String,
}

/// The command lines of a guide: the lines of its ```sh blocks.
/// The lines of a guide's fenced blocks of one kind: ```sh (command lines) or ```text (an MCP
/// prompt's tool calls).
fn fenced(md: &str, kind: &str) -> Vec<String> {
    let open = format!("```{kind}");
    let mut lines = Vec::new();
    let mut inside = false;
    for l in md.lines() {
        match (inside, l.trim_end()) {
            (false, l) if l == open => inside = true,
            (true, "```") => inside = false,
            (true, l) if !l.trim().is_empty() => lines.push(l.to_string()),
            _ => {}
        }
    }
    lines
}

pub(crate) fn sh_lines(md: &str) -> Vec<String> {
    fenced(md, "sh")
}

pub(crate) fn text_lines(md: &str) -> Vec<String> {
    fenced(md, "text")
}

impl Lines {
    pub(crate) fn read(via: &mut Via, run: &Run) -> Lines {
        let all = sh_lines(&via.guide(run, "vm"));
        let approver = sh_lines(&via.guide(run, "approver"));
        let find = |lines: &[String], what: &str, p: &dyn Fn(&str) -> bool| {
            lines
                .iter()
                .find(|l| p(l))
                .unwrap_or_else(|| panic!("no guide line for {what}"))
                .clone()
        };
        Lines {
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
    pub(crate) fn with(&self, pieces: &[&str]) -> String {
        self.all
            .iter()
            .find(|l| pieces.iter().all(|p| l.contains(p)))
            .unwrap_or_else(|| panic!("no guide line with {pieces:?}"))
            .clone()
    }
}

/// A shell line as words: single and double quotes, `$(...)` around the command and
/// `VAR=$(` before it taken off. Variables stay as written (`$BLOCK`), to be put in.
pub(crate) fn words(line: &str) -> Vec<String> {
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
pub(crate) fn fill(
    line: &str,
    set: &[(&str, String)],
    vars: &HashMap<&str, String>,
) -> Vec<String> {
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
    // The harness's command names the run already (the same one the guide filled in); an MCP
    // session is started with it.
    if let Some(i) = w.iter().position(|x| x == "--run") {
        assert_eq!(w[i + 1], vars["PROSE_RUN"]);
        w.drain(i..i + 2);
    }
    w
}

/// The guide's names for a construct's record: the innermost open one, unless a step names
/// another.
pub(crate) const CONSTRUCT_VARS: [&str; 10] = [
    "BLOCK", "CALL", "IF", "TRY", "CATCH", "FIN", "LOOP", "PAR", "BRANCH", "CHOICE",
];

/// The options of the lines the harness plays that take no value.
const FLAGS: &[&str] = &[
    "--local",
    "--assign",
    "--reopen",
    "--json",
    "--yes",
    "--explain",
    "--require-signed",
];

/// A filled line with its positionals (the words after its command that are no option nor an
/// option's value: a binding's name and value, a gate's id) put in, in order.
pub(crate) fn with_positionals(mut argv: Vec<String>, values: &[&str]) -> Vec<String> {
    let mut i = if matches!(argv[0].as_str(), "gates" | "agent") {
        2
    } else {
        1
    };
    let mut values = values.iter();
    while i < argv.len() {
        if argv[i].starts_with("--") {
            i += if FLAGS.contains(&argv[i].as_str()) {
                1
            } else {
                2
            };
            continue;
        }
        match values.next() {
            Some(v) => argv[i] = v.to_string(),
            None => break,
        }
        i += 1;
    }
    argv
}

/// The tool the MCP server serves for each command the harness runs (README, "mcp": the
/// table of tools), and the properties that the command's positional arguments are. The
/// longest command that begins a line is its tool.
const TOOLS: &[(&[&str], &str, &[&str])] = &[
    (&["exec-append"], "exec_append", &[]),
    (&["gates", "create"], "gates_create", &["gate_id"]),
    (&["gates", "wait"], "gates_wait", &["gate"]),
    (&["gates"], "gates_list", &[]),
    (&["bind"], "bind", &["name", "value"]),
    (&["resume"], "resume", &[]),
    (&["finish"], "finish", &[]),
];

/// The tools only a VM has: a subagent session must not list them (README, "Roles").
const VM_ONLY: &[&str] = &[
    "init",
    "exec_append",
    "finish",
    "gates_create",
    "gates_show",
    "gates_wait",
    "resume",
    "runs_list",
];

/// What a step gave: its exit code (through MCP, the `exit_code` of the result's `_meta`),
/// its JSON (a command run with `--json`, or the tool's structured result) and the record id
/// it printed (exec-append's stdout, or the tool's `id`).
pub(crate) struct Sent {
    pub(crate) code: i64,
    pub(crate) json: Value,
    pub(crate) id: Option<i64>,
}

/// One MCP session: the server's process and what its `tools/list` gave.
pub(crate) struct McpSession {
    client: RunningService<RoleClient, ()>,
    pid: i32,
    /// Each listed tool's input properties (its schema's `properties`).
    tools: HashMap<String, Map<String, Value>>,
    /// What the session was started pinned to, which its tools then do not offer: a guide
    /// line may still name it, with the same value.
    pinned: Vec<(&'static str, String)>,
}

impl McpSession {
    /// `prose-state --run R mcp FLAGS`, as a client spawns it: in the project root, with none
    /// of the caller's PROSE_* settings.
    async fn start(run: &Run, flags: &[String], pinned: Vec<(&'static str, String)>) -> McpSession {
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.args(["--run", &run.id, "mcp"])
            .args(flags)
            .current_dir(&run.root)
            .env("HOME", test_home(&run.root))
            .stderr(std::process::Stdio::null());
        for var in CLEARED_ENV {
            cmd.env_remove(var);
        }
        let transport = TokioChildProcess::new(cmd).unwrap();
        let pid = transport.id().unwrap() as i32;
        let client = ().serve(transport).await.unwrap();
        let tools = client
            .list_all_tools()
            .await
            .unwrap()
            .into_iter()
            .map(|t| {
                let props = t.input_schema.get("properties").and_then(Value::as_object);
                (t.name.to_string(), props.cloned().unwrap_or_default())
            })
            .collect();
        McpSession {
            client,
            pid,
            tools,
            pinned,
        }
    }

    /// A prompt's whole text, page after page.
    async fn prompt(&self, name: &str, args: Map<String, Value>) -> String {
        let mut text = String::new();
        let mut offset = 0;
        loop {
            let mut args = args.clone();
            args.insert("offset".into(), json!(offset.to_string()));
            let got = self
                .client
                .get_prompt(GetPromptRequestParams::new(name).with_arguments(args))
                .await
                .unwrap_or_else(|e| panic!("prompt {name}: {e}"));
            let ContentBlock::Text(page) = &got.messages[0].content else {
                panic!("prompt {name}: not text")
            };
            let note = got.description.unwrap_or_default();
            match note.split_once("again with offset ") {
                // A cut page ends with a line naming where the next one starts.
                Some((_, rest)) => {
                    let (page, _) = page.text.rsplit_once("\n[").unwrap();
                    text.push_str(page);
                    offset = rest.split(' ').next().unwrap().parse().unwrap();
                }
                None => {
                    text.push_str(&page.text);
                    return text;
                }
            }
        }
    }

    /// A guide line's words as the call of the tool the server serves for its command: each
    /// `--option` is the property of that name (`--execution-id` is `execution_id`), typed as
    /// the tool's schema says; the positionals are the properties [`TOOLS`] names. The tool
    /// must be listed in this session and take every option of the line, but one the session
    /// is pinned to (with the very value it is pinned to).
    fn tool_call(&self, argv: &[String]) -> (String, Map<String, Value>) {
        let argv = argv.strip_prefix(&["--json".to_string()]).unwrap_or(argv);
        let (path, tool, positionals) = TOOLS
            .iter()
            .filter(|(path, _, _)| argv.len() >= path.len() && argv[..path.len()] == path[..])
            .max_by_key(|(path, _, _)| path.len())
            .unwrap_or_else(|| panic!("no tool is known for {argv:?}"));
        let props = self.tools.get(*tool).unwrap_or_else(|| {
            panic!(
                "the session lists no tool {tool} for {argv:?}: {:?}",
                self.tools.keys()
            )
        });
        let mut args = Map::new();
        let mut positionals = positionals.iter();
        let mut i = path.len();
        while i < argv.len() {
            let w = &argv[i];
            let Some(option) = w.strip_prefix("--") else {
                let property = positionals
                    .next()
                    .unwrap_or_else(|| panic!("{tool}: no property for {w:?} in {argv:?}"));
                assert!(props.contains_key(*property), "{tool} takes no {property}");
                args.insert(property.to_string(), json!(w));
                i += 1;
                continue;
            };
            let property = option.replace('-', "_");
            let Some(schema) = props.get(&property) else {
                let pinned = self
                    .pinned
                    .iter()
                    .find(|(p, _)| *p == property)
                    .unwrap_or_else(|| panic!("tool {tool} takes no {property}: {argv:?}"));
                assert_eq!(argv[i + 1], pinned.1, "{argv:?}");
                i += 2;
                continue;
            };
            let value = argv.get(i + 1);
            match schema["type"].as_str() {
                Some("boolean") => {
                    args.insert(property, json!(true));
                    i += 1;
                    continue;
                }
                Some("integer") => {
                    let v = value.unwrap().parse::<i64>();
                    let v = v.unwrap_or_else(|_| panic!("{tool}: {property} {value:?}"));
                    args.insert(property, json!(v));
                }
                Some("array") => {
                    let items = args.entry(property).or_insert(json!([]));
                    items.as_array_mut().unwrap().push(json!(value.unwrap()));
                }
                _ => {
                    args.insert(property, json!(value.unwrap()));
                }
            }
            i += 2;
        }
        (tool.to_string(), args)
    }

    async fn call(&self, tool: &str, args: Map<String, Value>) -> Sent {
        let r = self
            .client
            .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args))
            .await
            .unwrap_or_else(|e| panic!("{tool}: {e}"));
        let code = r.meta.as_ref().unwrap()["exit_code"].as_i64().unwrap();
        let json = r.structured_content.unwrap_or(Value::Null);
        Sent {
            code,
            id: json["id"].as_i64(),
            json,
        }
    }
}

/// The MCP side: the VM's session, and the runtime its client runs on.
pub(crate) struct Mcp {
    vm: Option<McpSession>,
    rt: tokio::runtime::Runtime,
    /// Sessions started (the VM's first one, one after each kill, one per subagent).
    sessions: usize,
    /// Kills that landed after the server had answered.
    answered: usize,
}

const VM_FLAGS: &[&str] = &["--role", "vm", "--agent", "vm"];

impl Mcp {
    fn start_vm(&mut self, run: &Run) {
        let flags: Vec<String> = VM_FLAGS.iter().map(|s| s.to_string()).collect();
        let vm = self.rt.block_on(McpSession::start(run, &flags, Vec::new()));
        // A person decides gates, outside MCP: no session of the VM has a tool for it.
        for t in ["approve", "reject"] {
            assert!(!vm.tools.contains_key(t), "a VM session lists {t}");
        }
        self.vm = Some(vm);
        self.sessions += 1;
    }

    fn vm(&self) -> &McpSession {
        self.vm.as_ref().unwrap()
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        if let Some(vm) = self.vm.take() {
            let _ = self.rt.block_on(vm.client.cancel());
        }
    }
}

/// How the VM's steps are sent.
pub(crate) enum Via {
    /// Each step a command line of `guide vm`.
    Cli,
    /// Each step a tool call of the VM's MCP session, from its `vm` prompt.
    Mcp(Box<Mcp>),
}

impl Via {
    pub(crate) fn mcp(run: &Run) -> Via {
        let mut m = Mcp {
            vm: None,
            rt: tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap(),
            sessions: 0,
            answered: 0,
        };
        m.start_vm(run);
        Via::Mcp(Box::new(m))
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Via::Cli => "the command line",
            Via::Mcp(_) => "MCP",
        }
    }

    /// The kill lands this many microseconds at most after the step is sent: about the time a
    /// step takes (a debug binary's start-up and its write; a tool call on a running server),
    /// so that some kills land before the write and some after.
    pub(crate) fn kill_window(&self) -> u64 {
        match self {
            Via::Cli => 30_000,
            Via::Mcp(_) => 4_000,
        }
    }

    /// A guide's text: the `guide` command's, or the VM session's prompt.
    pub(crate) fn guide(&mut self, run: &Run, who: &str) -> String {
        match self {
            Via::Cli => {
                let out = run.cmd().args(["guide", who]).assert().success();
                String::from_utf8(out.get_output().stdout.clone()).unwrap()
            }
            Via::Mcp(m) => m.rt.block_on(m.vm().prompt(who, Map::new())),
        }
    }

    /// Sends one step: runs the command, or calls its tool.
    pub(crate) fn send(&mut self, run: &Run, argv: &[String]) -> Sent {
        match self {
            Via::Cli => {
                let out = run.cmd().args(argv).output().unwrap();
                let text = String::from_utf8(out.stdout).unwrap();
                Sent {
                    code: out.status.code().unwrap().into(),
                    json: serde_json::from_str(&text).unwrap_or(Value::Null),
                    id: text.trim().parse().ok(),
                }
            }
            Via::Mcp(m) => {
                let (tool, args) = m.vm().tool_call(argv);
                m.rt.block_on(m.vm().call(&tool, args))
            }
        }
    }

    /// Sends one step and SIGKILLs the VM's process `delay` later: the command, or the VM's
    /// MCP server (then a new session is started, as a restarted VM's client does).
    pub(crate) fn killed(&mut self, run: &Run, argv: &[String], delay: Duration) {
        let kill_at = move |pid: i32| {
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                // SAFETY: kill(2) on our own child's pid.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            })
        };
        match self {
            Via::Cli => {
                let mut child = run
                    .std_cmd()
                    .args(argv)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .unwrap();
                kill_at(child.id() as i32).join().unwrap();
                let _ = child.wait();
            }
            Via::Mcp(m) => {
                let vm = m.vm.take().unwrap();
                let (tool, args) = vm.tool_call(argv);
                let killer = kill_at(vm.pid);
                let answer = m.rt.block_on(
                    vm.client
                        .call_tool(CallToolRequestParams::new(tool).with_arguments(args)),
                );
                killer.join().unwrap();
                m.answered += usize::from(answer.is_ok());
                let _ = m.rt.block_on(vm.client.cancel());
            }
        }
        // A killed process's last COMMIT may still be on its way through PostgreSQL: the
        // server ends its session when it sees the client gone (a restarted VM comes later).
        if let Some(url) = &run.pg_url {
            pg::await_no_other_sessions(url);
        }
        if let Via::Mcp(m) = self {
            m.start_vm(run);
        }
    }

    /// A subagent's session, given by the VM's `guide subagent` line (`argv`, filled in):
    /// on the command line, that guide is printed and its line that pipes the output into
    /// `bind` is run; through MCP, a session of `mcp --role subagent` is started with that
    /// line's execution and agent, reads its own `subagent` prompt, and sends the prompt's
    /// `bind` line with the output as its value.
    fn subagent(&mut self, run: &Run, argv: &[String], output: &str) {
        self.subagent_as(run, argv, output, None)
    }

    /// As [`Via::subagent`]; a persistent agent's session (`memory`: what it keeps) also runs
    /// its guide's agent lines: reads its memory (none yet the first time), replaces it, and
    /// records a segment. An assignment (`--assign` on the VM's line) is bound as one.
    pub(crate) fn subagent_as(
        &mut self,
        run: &Run,
        argv: &[String],
        output: &str,
        memory: Option<&str>,
    ) {
        let vars = HashMap::from([("PROSE_RUN", run.id.clone())]);
        let assign = argv.iter().any(|w| w == "--assign");
        let given = |option: &str| {
            let at = argv.iter().position(|w| w == option)?;
            Some(argv[at + 1].clone())
        };
        let name = given("--name").expect("the subagent line names its binding");
        match self {
            Via::Cli => {
                let out = run.cmd().args(argv).assert().success();
                let md = String::from_utf8(out.get_output().stdout.clone()).unwrap();
                let line = sh_lines(&md)
                    .into_iter()
                    .find(|l| l.contains(" bind ") && l.contains(" - "))
                    .expect("no subagent line that binds its output from stdin");
                // The line pipes the output into `bind NAME -`: the same bytes on stdin here.
                let (_, bind) = line.split_once("| ").unwrap();
                run.cmd()
                    .args(fill(bind, &[], &vars))
                    .write_stdin(output.to_string())
                    .assert()
                    .success();
                let Some(memory) = memory else { return };
                let agent_line = |what: &str| {
                    sh_lines(&md)
                        .into_iter()
                        .find(|l| l.contains(&format!(" agent {what} ")))
                        .unwrap_or_else(|| panic!("no subagent line for agent {what}"))
                };
                // `agent memory NAME || echo 'no memory yet'`: exit 3 the first time.
                let read = agent_line("memory");
                let (read, _) = read.split_once(" ||").unwrap();
                let code = run.cmd().args(fill(read, &[], &vars)).output().unwrap();
                assert!(matches!(code.status.code(), Some(0 | 3)), "{read}");
                let keep = agent_line("remember");
                let (_, keep) = keep.split_once("| ").unwrap();
                run.cmd()
                    .args(fill(keep, &[], &vars))
                    .write_stdin(memory.to_string())
                    .assert()
                    .success();
                let set = [
                    ("--prompt", format!("the session writing {name}")),
                    ("--summary", output.trim_end().to_string()),
                ];
                run.cmd()
                    .args(fill(&agent_line("segment"), &set, &vars))
                    .assert()
                    .success();
            }
            Via::Mcp(m) => {
                // The session's agent is the line's, else the binding's name (a session always
                // acts as an agent).
                let agent = given("--agent").unwrap_or_else(|| name.clone());
                let mut flags: Vec<String> = ["--role", "subagent", "--agent", &agent]
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
                let mut pinned = Vec::new();
                if let Some(id) = given("--execution-id") {
                    flags.extend(["--execution-id".to_string(), id.clone()]);
                    pinned.push(("execution_id", id));
                }
                let session = m.rt.block_on(McpSession::start(run, &flags, pinned));
                m.sessions += 1;
                for t in VM_ONLY {
                    assert!(!session.tools.contains_key(*t), "a subagent lists {t}");
                }
                let mut prompt_args = Map::from_iter([("name".into(), json!(name))]);
                if assign {
                    prompt_args.insert("assign".into(), json!("true"));
                }
                let md = m.rt.block_on(session.prompt("subagent", prompt_args));
                // The prompt writes each step as this session's tool call: a tool, then its
                // arguments as JSON. Every such line names a tool the session lists, with
                // arguments it takes.
                for l in text_lines(&md) {
                    let Some((tool, args)) = l.split_once(' ') else {
                        continue;
                    };
                    if !args.starts_with('{') {
                        continue;
                    }
                    let props = session
                        .tools
                        .get(tool)
                        .unwrap_or_else(|| panic!("the session lists no tool {tool}: {l}"));
                    let Ok(Value::Object(args)) = serde_json::from_str::<Value>(args) else {
                        panic!("not JSON arguments: {l}")
                    };
                    for key in args.keys() {
                        assert!(props.contains_key(key), "{tool} takes no {key}: {l}");
                    }
                }
                // The line that binds the output, taken as it is.
                let line = text_lines(&md)
                    .into_iter()
                    .find(|l| l.starts_with("bind {") && l.contains(r#""value""#))
                    .expect("no subagent line that binds its output");
                let (tool, json_args) = line.split_once(' ').unwrap();
                let Value::Object(mut args) = serde_json::from_str(json_args)
                    .unwrap_or_else(|e| panic!("not JSON arguments ({e}): {line}"))
                else {
                    panic!("not an object of arguments: {line}")
                };
                let props = session
                    .tools
                    .get(tool)
                    .unwrap_or_else(|| panic!("the session lists no tool {tool}: {line}"));
                for key in args.keys() {
                    assert!(props.contains_key(key), "{tool} takes no {key}: {line}");
                }
                let tool = tool.to_string();
                assert_eq!(tool, "bind");
                assert_eq!(args["name"], json!(name), "{line}");
                assert_eq!(args.get("assign").is_some(), assign, "{line}");
                args.insert("value".into(), json!(output));
                let sent = m.rt.block_on(session.call(&tool, args));
                assert_eq!(sent.code, 0, "{}", sent.json);
                if let Some(memory) = memory {
                    // The agent lines, each a call of this session's own agent's tools.
                    let call = |tool: &str| {
                        let line = text_lines(&md)
                            .into_iter()
                            .find(|l| l.starts_with(&format!("{tool} {{")))
                            .unwrap_or_else(|| panic!("no subagent line for {tool}"));
                        let (_, a) = line.split_once(' ').unwrap();
                        let Ok(Value::Object(a)) = serde_json::from_str::<Value>(a) else {
                            panic!("not JSON arguments: {line}")
                        };
                        a
                    };
                    let read =
                        m.rt.block_on(session.call("agent_memory", call("agent_memory")));
                    assert!(matches!(read.code, 0 | 3), "{}", read.json);
                    let mut keep = call("agent_remember");
                    keep.insert("value".into(), json!(memory));
                    let sent = m.rt.block_on(session.call("agent_remember", keep));
                    assert_eq!(sent.code, 0, "{}", sent.json);
                    let mut seg = call("agent_segment");
                    seg.insert(
                        "prompt".into(),
                        json!(format!("the session writing {name}")),
                    );
                    seg.insert("summary".into(), json!(output.trim_end()));
                    let sent = m.rt.block_on(session.call("agent_segment", seg));
                    assert_eq!(sent.code, 0, "{}", sent.json);
                }
                m.rt.block_on(session.client.cancel()).unwrap();
            }
        }
    }
}

/// One construct of a program.
enum Node {
    Stmt(&'static str),
    /// A subagent's session: it writes its output binding, then the VM logs the statement.
    Session(&'static str, &'static str),
    /// `do name(args)`: the arguments (param, value) are bound const in its frame.
    Block(&'static str, Vec<(&'static str, &'static str)>, Vec<Node>),
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
                    vec![("x", "from a")],
                    vec![
                        Stmt("let b = session: t"),
                        Block(
                            "do inner(b)",
                            vec![("y", "from b")],
                            vec![Stmt("session \"deep\"")],
                        ),
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
                    vec![("left", "x"), ("right", "y")],
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
                    Block(
                        "do check(draft)",
                        vec![("d", "draft")],
                        vec![Stmt("session \"review\"")],
                    ),
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
                    vec![Block("do step()", vec![], vec![Stmt("session \"one\"")])],
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
                    vec![("chunk", "r")],
                    vec![Parallel(vec!["p", "q"]), Retry("session \"call\"", 1)],
                ),
                Loop(1, vec![Approve("each", 0)]),
                Stmt("output out = r"),
            ],
        ),
    ]
}

/// The test's own look at the run's execution log, on either backend (as `count_rows`), through
/// one kept connection.
struct Db<'a> {
    run: &'a Run,
    sqlite: Option<rusqlite::Connection>,
    pg: Option<postgres::Client>,
}

impl Db<'_> {
    /// How many execution records of the run meet `condition`.
    fn records(&mut self, condition: &str) -> i64 {
        match &self.run.pg_url {
            Some(url) => self
                .pg
                .get_or_insert_with(|| postgres::Client::connect(url, postgres::NoTls).unwrap())
                .query_one(
                    &format!(
                        "SELECT COUNT(*) FROM openprose.execution WHERE run_id = $1 AND ({condition})"
                    ),
                    &[&self.run.id],
                )
                .unwrap()
                .get(0),
            None => self
                .sqlite
                .get_or_insert_with(|| self.run.conn())
                .query_row(
                    &format!("SELECT COUNT(*) FROM execution WHERE {condition}"),
                    [],
                    |r| r.get(0),
                )
                .unwrap(),
        }
    }
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
    db: Db<'a>,
    lines: &'a Lines,
    via: Via,
    stack: Vec<Open>,
    /// The last thing done at the top level.
    after: Option<String>,
    index: i64,
    steps: usize,
    kills: usize,
    /// Killed steps that had not landed, sent again.
    resent: usize,
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
        // The innermost open construct is what the guide's $CALL/$TRY/$LOOP/... name (and
        // $BLOCK, the subagent line's): a step that names another gives it (`with`).
        if let Some(o) = self.stack.last() {
            for k in CONSTRUCT_VARS {
                v.insert(k, o.id.to_string());
            }
        }
        v
    }

    /// The innermost open construct's record: the parent of what is appended now.
    fn scope(&self) -> Option<i64> {
        self.stack.last().map(|o| o.id)
    }

    fn rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// Sends one step of the guide; sometimes SIGKILLs it first and recovers from `resume`,
    /// as a VM that lost its context does. Returns the id of the record it appended.
    fn step(&mut self, argv: Vec<String>, killable: bool, landed: &dyn Fn(&Value) -> bool) -> i64 {
        self.steps += 1;
        if killable && self.kills < 3 && self.steps.is_multiple_of(self.kill_every) {
            self.kills += 1;
            let before = self.resume()["position"]["last_event"]["id"]
                .as_i64()
                .unwrap_or(0);
            let delay = Duration::from_micros(self.rand() % self.via.kill_window());
            // The kill waits for the killed process's server session to end: not for ours.
            self.db.pg = None;
            self.via.killed(self.run, &argv, delay);
            // What a VM does after a crash: ask resume whether the step landed.
            let doc = self.resume();
            let last = doc["position"]["last_event"]["id"].as_i64().unwrap_or(0);
            if last > before && landed(&doc) {
                return last;
            }
            self.resent += 1;
        }
        let sent = self.via.send(self.run, &argv);
        assert_eq!(sent.code, 0, "{argv:?}: {}", sent.json);
        sent.id
            .unwrap_or_else(|| panic!("{argv:?} gave no record id: {}", sent.json))
    }

    fn resume(&mut self) -> Value {
        let sent = self.via.send(self.run, &["--json".into(), "resume".into()]);
        assert_eq!(sent.code, 0, "resume: {}", sent.json);
        assert!(sent.json.is_object(), "resume gave {}", sent.json);
        sent.json
    }

    /// Resume names exactly where the program stands.
    fn check(&mut self, what: &str) {
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

    /// The database itself holds record `id` with this text and status, under this parent.
    fn stored(&mut self, id: i64, text: &str, status: &str, parent: Option<i64>) {
        let parent = parent.map_or("parent_id IS NULL".to_string(), |p| {
            format!("parent_id = {p}")
        });
        let cond = format!(
            "id = {id} AND statement_text = '{}' AND status = '{status}' AND {parent}",
            text.replace('\'', "''")
        );
        assert_eq!(self.db.records(&cond), 1, "no record {cond}");
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
    /// An end (`--ends`) takes its index, text and parent from its start: the line gives none
    /// of them, and `with` names the start.
    #[allow(clippy::too_many_arguments)]
    fn append_with(
        &mut self,
        line: &str,
        index: i64,
        text: &str,
        status: &'static str,
        meta: Option<String>,
        err: bool,
        with: &[(&'static str, i64)],
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
        let mut vars = self.vars();
        for (k, v) in with {
            vars.insert(k, v.to_string());
        }
        let mut argv = fill(line, &set, &vars);
        let ends = argv.iter().any(|w| w == "--ends");
        if let (Some(id), false) = (self.scope(), ends || argv.iter().any(|w| w == "--parent")) {
            argv.extend(["--parent".to_string(), id.to_string()]);
        }
        let id = self.step(argv, true, &Self::last_is(text, status));
        self.stored(id, text, status, self.scope());
        id
    }

    fn append(
        &mut self,
        line: &str,
        index: i64,
        text: &str,
        status: &'static str,
        meta: Option<String>,
        err: bool,
    ) -> i64 {
        self.append_with(line, index, text, status, meta, err, &[])
    }

    /// Ends the innermost open construct (`exec-append --ends`, the guide's line for it), and
    /// takes it off the stack.
    fn end(&mut self, line: &str, status: &'static str, meta: Option<String>) -> i64 {
        let open = self.stack.pop().expect("a construct to end");
        let vars: Vec<(&'static str, i64)> = CONSTRUCT_VARS.iter().map(|k| (*k, open.id)).collect();
        let id = self.append_with(line, 0, &open.text, status, meta, false, &vars);
        self.done(&open.text);
        id
    }

    /// A binding step of the guide (not killed: it is no record), its values put in.
    fn bind(
        &mut self,
        line: &str,
        positionals: &[&str],
        set: &[(&str, String)],
        with: &[(&'static str, i64)],
    ) {
        let mut vars = self.vars();
        for (k, v) in with {
            vars.insert(k, v.to_string());
        }
        let argv = with_positionals(fill(line, set, &vars), positionals);
        let sent = self.via.send(self.run, &argv);
        assert_eq!(sent.code, 0, "{argv:?}: {}", sent.json);
    }

    /// A subagent's session writes its output binding in the innermost construct's scope,
    /// given the block the VM's `guide subagent` line prints for it.
    fn subagent(&mut self, name: &str) {
        let l = self.lines;
        let scope = self.scope();
        let line = match scope {
            Some(_) => l.with(&["guide subagent", "--execution-id"]),
            None => l.with(&["guide subagent"]),
        };
        assert_eq!(scope.is_some(), line.contains("--execution-id"), "{line}");
        let set = [("--name", name.to_string()), ("--agent", name.to_string())];
        let argv = fill(&line, &set, &self.vars());
        let output = format!("{name}: the output\n");
        self.via.subagent(self.run, &argv, &output);
        // It lands in the frame of the innermost construct (the root, if that is a loop or a
        // try at the top level), where the program reads it.
        assert_eq!(
            self.visible(name),
            Some(output),
            "{name} from scope {scope:?}"
        );
    }

    /// The value of `name` as `get` reads it from the innermost open construct.
    fn visible(&self, name: &str) -> Option<String> {
        let mut get = self.run.cmd();
        get.args(["get", name]);
        if let Some(id) = self.scope() {
            get.args(["--execution-id", &id.to_string()]);
        }
        let out = get.output().unwrap();
        out.status
            .success()
            .then(|| String::from_utf8(out.stdout).unwrap())
    }

    /// A gate of the run as listed (`gates --status all`).
    fn listed(&mut self, gate: &str) -> Value {
        let argv: Vec<String> = ["--json", "gates", "--status", "all"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let sent = self.via.send(self.run, &argv);
        assert_eq!(sent.code, 0, "{}", sent.json);
        // Through MCP a list is under `gates`, with its page.
        let list = match &sent.json {
            Value::Array(all) => all.clone(),
            page => page["gates"].as_array().unwrap().clone(),
        };
        list.into_iter().find(|g| g["id"] == gate).unwrap()
    }

    fn next_index(&mut self) -> i64 {
        self.index += 1;
        self.index
    }

    /// A body: `--index` counts from 1 in every body.
    fn play(&mut self, nodes: &[Node]) {
        let outer = std::mem::take(&mut self.index);
        for n in nodes {
            self.node(n);
        }
        self.index = outer;
    }

    /// A construct's start appended: it is the innermost open one.
    fn open(&mut self, text: &str, id: i64) {
        self.stack.push(Open {
            text: text.to_string(),
            id,
            after: None,
        });
        self.check(text);
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
                self.subagent(name);
                self.append(&stmt_line, at, text, "completed", None, false);
                self.done(text);
                self.check(text);
            }
            Block(text, args, body) => {
                let start = l.with(&["CALL=$(", "--status executing"]);
                let id = self.append(&start, at, text, "executing", None, false);
                self.open(text, id);
                // Each argument is a const of the call's frame.
                let param = l.with(&["bind", "--kind const", "--execution-id \"$CALL\""]);
                for (name, value) in args {
                    self.bind(
                        &param,
                        &[name, value],
                        &[("--source", text.to_string())],
                        &[],
                    );
                    let (_, _, got, _, _) = self.run.view().binding(name, Some(id)).unwrap();
                    assert_eq!(got.as_deref(), Some(*value), "{name}");
                }
                self.play(body);
                let end = l.with(&["--ends \"$CALL\" --status completed"]);
                self.end(&end, "completed", None);
                self.check(text);
            }
            Try(body, failing, catch) => {
                let start = l.with(&["TRY=$("]);
                let id = self.append(&start, at, "try:", "started", None, false);
                self.open("try:", id);
                self.play(body);
                let fail = l.with(&["--status failed", "\"$TRY\""]);
                let fat = body.len() as i64 + 1;
                self.append(&fail, fat, failing, "failed", None, true);
                self.done(failing);
                self.check(failing);
                // The catch: its own start inside the try, `err` bound at it alone.
                let cat = fat + 1;
                let start = l.with(&["CATCH=$("]);
                let cid = self.append(&start, cat, "catch as err:", "started", None, false);
                self.open("catch as err:", cid);
                let err = l.with(&["bind err", "--local"]);
                self.bind(&err, &["err", "it failed"], &[], &[]);
                let bound = self.run.view().binding("err", Some(cid));
                assert!(bound.is_some(), "err is bound at the catch's record");
                self.play(catch);
                let end = l.with(&["--ends \"$CATCH\" --status completed"]);
                self.end(&end, "completed", None);
                self.check("end of catch");
                let end = l.with(&["--ends \"$TRY\" --status completed"]);
                self.end(&end, "completed", None);
                self.check("end of try");
            }
            Retry(text, failures) => {
                let fail = l.with(&["'session \"Flaky\"' --status failed"]);
                let retry = l.with(&["'session \"Flaky\"' --status retry"]);
                let ok = l.with(&["'session \"Flaky\"' --status completed"]);
                for attempt in 1..=*failures {
                    let meta = format!(r#"{{"attempt": {attempt}, "max": 3}}"#);
                    self.append(&fail, at, text, "failed", Some(meta), true);
                    self.done(text);
                    self.check(text);
                    // resume names the next attempt.
                    let doc = self.resume();
                    let r = &doc["retries"][0];
                    assert_eq!(r["state"], "next", "{doc}");
                    assert_eq!(r["next_attempt"], attempt + 1, "{doc}");
                    let meta = format!(r#"{{"attempt": {}, "max": 3}}"#, attempt + 1);
                    self.append(&retry, at, text, "retry", Some(meta), false);
                    self.done(text);
                    self.check(text);
                    let doc = self.resume();
                    let r = &doc["retries"][0];
                    assert_eq!(
                        (&r["state"], &r["attempt"]),
                        (&json!("running"), &json!(attempt + 1)),
                        "{doc}"
                    );
                }
                let meta = format!(r#"{{"attempt": {}}}"#, failures + 1);
                self.append(&ok, at, text, "completed", Some(meta), false);
                self.done(text);
                self.check(text);
                let doc = self.resume();
                assert_eq!(doc["retries"], json!([]), "{doc}");
            }
            Parallel(branches) => {
                let pid = format!("p{at}");
                // The shared list is made first.
                let list = l.with(&["bind findings '[]'"]);
                self.bind(&list, &["findings", "[]"], &[], &[]);
                let start = l.with(&["PAR=$("]);
                let all: Vec<String> = branches.iter().map(|b| format!("\"{b}\"")).collect();
                let meta = format!(
                    r#"{{"parallel_id": "{pid}", "branches": [{}]}}"#,
                    all.join(", ")
                );
                let id = self.append(&start, at, "parallel:", "started", Some(meta), false);
                self.open("parallel:", id);
                let branch = l.with(&["BRANCH=$(", "--construct branch"]);
                let named = l.with(&["bind", "--execution-id \"$PAR\""]);
                let append = l.with(&["bind", "--append", "--key \"$BRANCH\""]);
                let end = l.with(&["--ends \"$BRANCH\" --status completed"]);
                for (i, b) in branches.iter().enumerate() {
                    // Each branch is a frame of its own, started inside the parallel.
                    let text = format!("{b} = session \"Branch {b}\"");
                    let meta = format!(r#"{{"parallel_id": "{pid}", "branch": "{b}"}}"#);
                    let bid =
                        self.append(&branch, i as i64 + 1, &text, "started", Some(meta), false);
                    self.open(&text, bid);
                    let with = [("PAR", id), ("BRANCH", bid)];
                    let value = format!("{b}: found");
                    self.bind(&named, &[b, &value], &[], &with);
                    self.bind(
                        &append,
                        &["findings"],
                        &[("--append", format!("\"{b}\""))],
                        &with,
                    );
                    // Sent again, as after a crash: the key keeps it once.
                    self.bind(
                        &append,
                        &["findings"],
                        &[("--append", format!("\"{b}\""))],
                        &with,
                    );
                    self.end(&end, "completed", None);
                    let doc = self.resume();
                    let outstanding = doc["parallel"][0]["outstanding"].as_array().unwrap().len();
                    assert_eq!(outstanding, branches.len() - i - 1, "{doc}");
                }
                let join = l.with(&["--ends \"$PAR\" --status joined"]);
                self.end(&join, "joined", None);
                self.check("join");
                // The named branches are readable after the join, and the list holds each once.
                for b in branches {
                    let got = self.visible(b).unwrap_or_default();
                    assert_eq!(got.trim_end(), format!("{b}: found"), "{b}");
                }
                let got = self.visible("findings").unwrap();
                let got: Value = serde_json::from_str(&got).unwrap();
                for b in branches {
                    let n = got.as_array().unwrap().iter().filter(|x| *x == b).count();
                    assert_eq!(n, 1, "{b} in {got}");
                }
            }
            Loop(n, body) => {
                let lid = format!("l{at}");
                let text = format!("repeat {n} as i:");
                let start = l.with(&["LOOP=$("]);
                let meta = format!(r#"{{"loop_id": "{lid}", "max": {n}}}"#);
                let id = self.append(&start, at, &text, "started", Some(meta), false);
                self.open(&text, id);
                let var = l.with(&["bind i", "--local", "\"$LOOP\""]);
                for i in 1..=*n {
                    // The variable counts from 0, the iterations from 1.
                    self.bind(&var, &["i", &(i - 1).to_string()], &[], &[]);
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
                    self.append(&it, at, &text, "iteration", Some(meta), false);
                    self.done(&text);
                    self.check("iteration");
                }
                let exit = l.with(&["--ends \"$LOOP\" --status exited"]);
                let meta = format!(r#"{{"iteration": {n}, "reason": "max"}}"#);
                self.end(&exit, "exited", Some(meta));
                self.check("loop exit");
            }
            Approve(gate, rejections) => {
                let text = format!("approve {gate}:");
                let vars = self.vars();
                let scope = self.scope();
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
                    // At the top level there is no innermost record: a guide line's
                    // `--execution-id "$CALL"` is left out there.
                    if scope.is_none() {
                        if let Some(i) = w.iter().position(|x| x == "--execution-id") {
                            if w.get(i + 1).is_some_and(|v| v.starts_with('$')) {
                                w.drain(i..i + 2);
                            }
                        }
                    }
                    // Inside a construct `gates create` takes `--execution-id` with the
                    // innermost one's id (the guide, under its table).
                    let creates = w[1] == "create";
                    if let (Some(id), true) =
                        (scope, creates && !w.contains(&"--execution-id".into()))
                    {
                        w.extend(["--execution-id".to_string(), id.to_string()]);
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
                let sent = self.via.send(self.run, &first);
                assert_eq!(sent.code, 0, "{first:?}: {}", sent.json);
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
                    // The opening's `approve GATE:` record (pending: the log is append-only) is in
                    // the innermost construct.
                    let listed = self.listed(gate);
                    let record = listed["execution_id"].as_i64().unwrap();
                    self.stored(record, &text, "pending", scope);
                    // A person decides, on the command line (no tool decides a gate).
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
                    let instance = listed["instance"].as_i64().unwrap();
                    let mut wait_argv = gate_set(&wait);
                    let at = wait_argv.iter().position(|w| w == "--instance").unwrap();
                    wait_argv[at + 1] = instance.to_string();
                    let code = self.via.send(self.run, &wait_argv).code;
                    let doc = self.resume();
                    let g = doc["gates"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|g| g["id"] == *gate)
                        .unwrap()
                        .clone();
                    if r < *rejections {
                        assert_eq!(code, 5);
                        // The create line's on_reject, as the program wrote it, names the step.
                        assert_eq!(g["next_step"]["action"], "retry", "{doc}");
                        let again = gate_set(&reopen);
                        let sent = self.via.send(self.run, &again);
                        assert_eq!(sent.code, 0, "{again:?}: {}", sent.json);
                        self.gate_records += 1;
                    } else {
                        assert_eq!(code, 0);
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
    play_the_corpus(b, false);
}

fn the_literal_vm_plays_the_corpus_through_mcp(b: Backend) {
    play_the_corpus(b, true);
}

fn play_the_corpus(b: Backend, mcp: bool) {
    let Some(p) = Project::on(b) else { return };
    let mut kills = 0;
    let mut resent = 0;
    let mut steps = 0;
    let mut sessions = 0;
    let mut answered = 0;
    let mut how = "";
    for (name, program) in corpus() {
        let run = p.init();
        let mut via = if mcp { Via::mcp(&run) } else { Via::Cli };
        how = via.name();
        let lines = Lines::read(&mut via, &run);
        let mut vm = Vm {
            run: &run,
            db: Db {
                run: &run,
                sqlite: None,
                pg: None,
            },
            lines: &lines,
            via,
            stack: Vec::new(),
            after: None,
            index: 0,
            steps: 0,
            kills: 0,
            resent: 0,
            kill_every: 4,
            rng: 0x9e37_79b9_7f4a_7c15 ^ name.len() as u64,
            gate_records: 0,
        };
        vm.play(&program);
        assert!(vm.stack.is_empty(), "{name}");
        kills += vm.kills;
        resent += vm.resent;
        steps += vm.steps;
        // Nothing ran twice and nothing was lost to a kill: one record per step, as resume
        // counts them and in the database itself.
        let doc = vm.resume();
        assert!(doc["position"]["current"].is_null(), "{name}: {doc}");
        let records = (vm.steps + vm.gate_records) as i64;
        assert_eq!(doc["counts"]["records"].as_i64(), Some(records), "{name}");
        assert_eq!(
            count_rows(&p, &run, "execution", "1 = 1"),
            records,
            "{name}"
        );
        if let Via::Mcp(m) = &vm.via {
            sessions += m.sessions;
            answered += m.answered;
        }
    }
    let mcp = if mcp {
        format!(" ({answered} after the server answered; {sessions} sessions)")
    } else {
        String::new()
    };
    eprintln!(
        "literal VM through {how} on {b:?}: {kills} kills in {steps} steps, {resent} of them not landed and sent again{mcp}"
    );
    assert!(kills >= 20, "{kills} kills in {steps} steps");
}
