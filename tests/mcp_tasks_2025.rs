//! MCP tasks in the form of revision 2025-11-25 (src/mcp/tasks_2025.rs, src/mcp/dialect.rs),
//! driven with raw JSON-RPC lines, as a host that writes its own messages would: what an outside
//! attack of the first build found, closed. The SDK's own view of the same shapes is
//! tests/mcp_ts.rs (`tasks`).

use crate::common::{on_both, Backend, Project, Run};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

on_both!(
    a_message_is_read_as_json_reads_it,
    a_session_keeps_the_revision_its_handshake_agreed,
    waits_are_bounded_by_the_open_file_limit,
);

/// A server and the messages it has written.
struct Raw {
    child: Child,
    stdin: ChildStdin,
    seen: Arc<(Mutex<Vec<Value>>, Condvar)>,
}

impl Raw {
    /// `prose-state --run RUN mcp --role vm`, its open files limited to `files` when given.
    fn start(run: &Run, files: Option<u64>) -> Raw {
        let mut c = run.std_cmd();
        c.args(["mcp", "--role", "vm"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(files) = files {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe; the struct lives for the call.
            unsafe {
                c.pre_exec(move || {
                    let limit = libc::rlimit {
                        rlim_cur: files,
                        rlim_max: files,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = c.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let seen = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let reader = Arc::clone(&seen);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let v = serde_json::from_str(&line).unwrap_or(Value::String(line));
                reader.0.lock().unwrap().push(v);
                reader.1.notify_all();
            }
        });
        Raw { child, stdin, seen }
    }

    fn send(&mut self, line: &str) {
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The answer to the request `id` (waiting at most a minute for it).
    fn answer(&self, id: &Value) -> Value {
        let until = Instant::now() + Duration::from_secs(60);
        let mut seen = self.seen.0.lock().unwrap();
        loop {
            if let Some(m) = seen
                .iter()
                .find(|m| &m["id"] == id && m.get("method").is_none())
            {
                return m.clone();
            }
            let left = until.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no answer to {id}: {seen:?}");
            seen = self.seen.1.wait_timeout(seen, left).unwrap().0;
        }
    }

    fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        );
        self.answer(&json!(id))
    }

    fn initialize(&mut self, revision: &str, capabilities: Value) -> Value {
        let r = self.request(
            0,
            "initialize",
            json!({"protocolVersion": revision, "capabilities": capabilities,
                   "clientInfo": {"name": "raw", "version": "0"}}),
        );
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        r
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn decided(run: &Run, gate: &str) {
    run.cmd()
        .args(["gates", "create", gate, "--prompt", "Go?"])
        .assert()
        .success();
    run.cmd()
        .args(["approve", gate, "--as", "alice", "-y"])
        .assert()
        .success();
}

/// A request spelled with JSON escapes (`"tasks\/list"`, `"t\u0061sk"`, PHP's `json_encode`
/// escapes every `/`) is the request it means; a message with a key twice is none; an unknown
/// task's id is shown escaped; a `ttl` that is no whole number is refused.
fn a_message_is_read_as_json_reads_it(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    decided(&run, "g");
    let mut s = Raw::start(&run, None);
    let init = s.initialize("2025-11-25", json!({}));
    assert!(
        init["result"]["capabilities"]["tasks"].is_object(),
        "{init}"
    );
    assert!(
        init["result"]["capabilities"].get("extensions").is_none(),
        "{init}"
    );
    s.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools\/list"}"#);
    let tools = s.answer(&json!(1));
    let wait = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "gates_wait")
        .unwrap()
        .clone();
    assert_eq!(wait["execution"], json!({"taskSupport": "optional"}));
    s.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools\/call","params":{"name":"gates_wait","arguments":{"gate":"g"},"t\u0061sk":{}}}"#);
    let created = s.answer(&json!(2));
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_string();
    s.send(&format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"t\u0061sks\/result","params":{{"taskId":"{id}"}}}}"#
    ));
    let result = s.answer(&json!(3));
    assert_eq!(
        result["result"]["structuredContent"]["status"], "approved",
        "{result}"
    );
    s.send(r#"{"jsonrpc":"2.0","id":4,"method":"tasks\/list"}"#);
    let listed = s.answer(&json!(4));
    assert_eq!(
        listed["result"]["tasks"][0]["taskId"],
        json!(id),
        "{listed}"
    );
    // A key twice: rmcp reads no such message, and neither does the renaming.
    s.send(r#"{"jsonrpc":"2.0","id":5,"method":"ping","method":"tasks/list"}"#);
    let unknown = s.request(6, "tasks/get", json!({"taskId": "a\nb\u{202e}"}));
    let message = unknown["error"]["message"].as_str().unwrap();
    assert_eq!(message, r#"unknown task: "a\nb\u{202e}""#, "{unknown}");
    assert_eq!(unknown["error"]["code"], -32602);
    let ttl = s.request(
        7,
        "tools/call",
        json!({"name": "gates_wait", "arguments": {"gate": "g"}, "task": {"ttl": "x"}}),
    );
    assert_eq!(ttl["error"]["code"], -32602, "{ttl}");
    // The ping with a key twice was never answered as tasks/list.
    let seen = s.seen.0.lock().unwrap();
    assert!(
        !seen
            .iter()
            .any(|m| m["id"] == 5 && m.get("result").is_some()),
        "{seen:?}"
    );
}

/// The handshake decides the session's revision: a second `initialize` is refused; a request's
/// `_meta` naming 2026-07-28 on an older session gets no 2026-07-28 task and no task methods;
/// requests written right after `initialize`, before its answer was read, are already read as
/// the revision's; an `initialize` asking for a revision unknown here is served no tasks.
fn a_session_keeps_the_revision_its_handshake_agreed(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    decided(&run, "g");
    let meta_2026 = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities":
            {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    });
    for revision in ["2025-06-18", "2025-11-25"] {
        let mut s = Raw::start(&run, None);
        s.initialize(revision, json!({}));
        let again = s.request(
            1,
            "initialize",
            json!({"protocolVersion": "2024-11-05",
            "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}),
        );
        assert_eq!(again["error"]["code"], -32600, "{again}");
        let r = s.request(
            2,
            "tools/call",
            json!({"name": "gates_wait", "arguments": {"gate": "g"}, "_meta": meta_2026}),
        );
        assert_eq!(
            r["result"]["structuredContent"]["status"], "approved",
            "{revision}: {r}"
        );
        // (rmcp writes the 2026-07-28 `resultType: "complete"` for such a request: no task.)
        assert_ne!(r["result"]["resultType"], "task", "{revision}: {r}");
        let get = s.request(
            3,
            "tasks/update",
            json!({"taskId": "x", "_meta": meta_2026}),
        );
        assert_eq!(get["error"]["code"], -32601, "{revision}: {get}");
        // The revision's own task on 2025-11-25, even after the second initialize.
        let task = s.request(
            4,
            "tools/call",
            json!({"name": "gates_wait", "arguments": {"gate": "g"}, "task": {}}),
        );
        assert_eq!(
            task["result"].get("task").is_some(),
            revision == "2025-11-25",
            "{revision}: {task}"
        );
    }
    // Written at once, before the answer is read.
    let mut s = Raw::start(&run, None);
    s.send(
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params":
        {"protocolVersion": "2025-11-25", "capabilities": {},
         "clientInfo": {"name": "raw", "version": "0"}}})
        .to_string(),
    );
    s.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    s.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
    s.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"gates_wait","arguments":{"gate":"g"},"task":{}}}"#);
    let tools = s.answer(&json!(1));
    assert!(
        tools["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["execution"]["taskSupport"] == "optional"),
        "{tools}"
    );
    let task = s.answer(&json!(2));
    assert!(task["result"]["task"]["taskId"].is_string(), "{task}");
    // An initialize the server cannot answer (a fractional id) decides nothing: the next one,
    // asking 2025-06-18, makes a session with no tasks, whose requests' `_meta` name no other
    // revision.
    let mut s = Raw::start(&run, None);
    s.send(r#"{"jsonrpc":"2.0","id":1.5,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#);
    let init = s.initialize("2025-06-18", json!({}));
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    let r = s.request(
        1,
        "tools/call",
        json!({"name": "gates_wait", "arguments": {"gate": "g"}, "task": {}}),
    );
    assert_eq!(
        r["result"]["structuredContent"]["status"], "approved",
        "{r}"
    );
    let listed = s.request(2, "tools/list", json!({"_meta": meta_2026}));
    assert!(listed["result"].get("resultType").is_none(), "{listed}");
    let listed = s.request(3, "tasks/list", json!({}));
    assert_eq!(listed["error"]["code"], -32601, "{listed}");
    // A byte order mark before the initialize is dropped: the session is 2025-11-25's.
    let mut s = Raw::start(&run, None);
    s.send(&format!(
        "{}{}",
        '\u{feff}',
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params":
            {"protocolVersion": "2025-11-25", "capabilities": {},
             "clientInfo": {"name": "raw", "version": "0"}}})
    ));
    let init = s.answer(&json!(0));
    assert!(
        init["result"]["capabilities"]["tasks"].is_object(),
        "{init}"
    );
    // A revision unknown here: answered with one the server has, no tasks declared or served.
    let mut s = Raw::start(&run, None);
    let init = s.initialize("1999-01-01", json!({}));
    assert!(
        init["result"]["capabilities"].get("tasks").is_none(),
        "{init}"
    );
    let r = s.request(
        1,
        "tools/call",
        json!({"name": "gates_wait", "arguments": {"gate": "g"}, "task": {}}),
    );
    assert_eq!(
        r["result"]["structuredContent"]["status"], "approved",
        "{r}"
    );
}

/// A session runs at most as many waits as its limit on open files leaves room for: past it a
/// wait (here a task) fails as busy, saying why, and every other call goes on working.
fn waits_are_bounded_by_the_open_file_limit(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "Go?"])
        .assert()
        .success();
    // 128 files, hard limit too: (128 - 64) / 5 = 12 waits.
    let mut s = Raw::start(&run, Some(128));
    s.initialize("2025-11-25", json!({}));
    let mut ids = Vec::new();
    for i in 0..14 {
        let r = s.request(
            10 + i,
            "tools/call",
            json!({"name": "gates_wait", "arguments": {"gate": "g"}, "task": {}}),
        );
        ids.push(r["result"]["task"]["taskId"].as_str().unwrap().to_string());
    }
    let bind = s.request(
        100,
        "tools/call",
        json!({"name": "bind", "arguments": {"name": "x", "value": "1"}}),
    );
    assert_eq!(bind["result"]["_meta"]["class"], "ok", "{bind}");
    let mut working = 0;
    let mut busy = 0;
    let mut next = 1000;
    for (i, id) in ids.iter().enumerate() {
        // The first twelve took the room (in order: a task takes it when it is created); the
        // others end at once, failed.
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            next += 1;
            let t = s.request(next, "tasks/get", json!({"taskId": id}));
            match t["result"]["status"].as_str() {
                Some("working") if i < 12 => {
                    working += 1;
                    break;
                }
                Some("working") if Instant::now() < until => {}
                Some("failed") => {
                    assert_eq!(t["result"]["statusMessage"], "ended: busy", "{t}");
                    next += 1;
                    let r = s.request(next, "tasks/result", json!({"taskId": id}));
                    let text = r["result"]["content"][0]["text"].as_str().unwrap();
                    assert!(text.contains("limit on open files"), "{text}");
                    busy += 1;
                    break;
                }
                _ => panic!("task {i}: {t}"),
            }
        }
    }
    assert_eq!((working, busy), (12, 2));
}
