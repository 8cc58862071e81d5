//! What revision 2025-11-25 says on the wire that rmcp does not: its form of tasks.
//!
//! rmcp 3.11 speaks tasks only as the 2026-07-28 extension has them. Revision 2025-11-25 has
//! them in the base protocol, in shapes rmcp's types cannot carry: `capabilities.tasks` in the
//! server's `initialize` answer, `execution.taskSupport` on a tool, `params.task` on a
//! `tools/call`, and the methods `tasks/result` and `tasks/list`. And rmcp lets a request's
//! `_meta` name another revision than the session's handshake agreed on. So the transport
//! keeps the session to the revision its handshake agreed on:
//!
//! - **the handshake**: the first `initialize` request with an id is given to rmcp, and no
//!   line after it is read until the server has answered it ([`Announcing`] sees the answer):
//!   an answer naming a revision makes the session that revision's (2025-11-25's tasks if it
//!   asked for them and this role has a task tool); an error leaves it open for another
//!   `initialize`. What the session is follows what the server answered, never what a
//!   request asked;
//! - **in** ([`Dialect::inbound`], called by [`super::request_limit::LimitedLines`] on each
//!   line): on a handshake session, a request's `_meta` loses the keys that would name another
//!   revision or declare capabilities the handshake did not; on a 2025-11-25 session,
//!   `tools/list`, a `tools/call` carrying `task`, and `tasks/get`, `tasks/result`,
//!   `tasks/list`, `tasks/cancel` reach the server under the method [`PREFIX`] + their own, as
//!   requests of its own that rmcp hands over untouched, and [`super::tasks_2025`] answers them
//!   in the revision's shapes. A message is read as JSON reads it (`"tasks\/get"` is
//!   `tasks/get`; a leading byte order mark is dropped), never by its spelling;
//! - **out** ([`Announcing`]): a 2025-11-25 session's `initialize` answer gains
//!   `capabilities.tasks` (listing, cancelling, and task-augmented `tools/call`).
//!
//! A session without a handshake (a 2026-07-28 client) keeps each request's own revision.

use serde::Deserialize;
use serde_json::Value;
use std::borrow::Cow;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::AsyncWrite;

/// The prefix a renamed request's method is given.
pub const PREFIX: &str = "prose-state/2025-11-25/";

/// The revision whose tasks this module carries.
pub const REVISION: &str = "2025-11-25";

/// Where the session's handshake stands.
#[derive(Clone, Debug, PartialEq)]
enum Phase {
    /// No handshake yet (or none will come: a 2026-07-28 client).
    Open,
    /// The `initialize` with this id was given to rmcp; nothing more is read until it is
    /// answered. `tasks_2025`: it asked for 2025-11-25 and the role has a task tool.
    Awaiting { id: Value, tasks_2025: bool },
    /// The handshake agreed; `tasks_2025`: on 2025-11-25, with its tasks.
    Agreed { tasks_2025: bool },
}

/// What the session speaks, as its handshake agreed.
pub struct Dialect {
    /// Whether the session's role has a tool that runs as a task (else no tasks are declared).
    tasks: bool,
    phase: std::sync::Mutex<Phase>,
    /// The reader, paused until the handshake's answer.
    waker: std::sync::Mutex<Option<std::task::Waker>>,
}

/// The `_meta` keys by which a request names its own revision and capabilities (2026-07-28):
/// on a handshake session they are the handshake's, never a request's.
const REQUEST_REVISION_KEYS: [&str; 3] = [
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientCapabilities",
    "io.modelcontextprotocol/clientInfo",
];

/// What a message is, read without keeping anything else of it: its method, id, whether its
/// params carry `task`, an `initialize`'s revision, and its `_meta`'s keys. Escapes are read
/// as JSON reads them; a message with a key twice is none of these (rmcp does not read it
/// either).
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    params: Option<Params<'a>>,
}

#[derive(Deserialize)]
struct Params<'a> {
    #[serde(default)]
    task: Option<serde::de::IgnoredAny>,
    #[serde(borrow, default, rename = "protocolVersion")]
    protocol_version: Option<Cow<'a, str>>,
    #[serde(default, rename = "_meta")]
    meta: Option<std::collections::BTreeMap<String, serde::de::IgnoredAny>>,
}

/// What [`Dialect::inbound`] makes of a line.
pub struct Inbound {
    /// The line rmcp is given in its place (None: the line as it is).
    pub line: Option<Vec<u8>>,
    /// The line is the handshake's `initialize`: read nothing more until it is answered.
    pub pause: bool,
}

impl Dialect {
    /// The dialect of a session whose role has a task tool (`tasks`) or not.
    pub fn new(tasks: bool) -> Self {
        Dialect {
            tasks,
            phase: std::sync::Mutex::new(Phase::Open),
            waker: std::sync::Mutex::new(None),
        }
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the session agreed on 2025-11-25 with its tasks.
    pub fn tasks_2025(&self) -> bool {
        *self.phase() == Phase::Agreed { tasks_2025: true }
    }

    /// Whether the reader is to wait for the handshake's answer; if so, it is woken by it.
    pub fn paused(&self, cx: &Context<'_>) -> bool {
        if !matches!(*self.phase(), Phase::Awaiting { .. }) {
            return false;
        }
        *self.waker.lock().unwrap_or_else(|e| e.into_inner()) = Some(cx.waker().clone());
        // Answered meanwhile: go on.
        matches!(*self.phase(), Phase::Awaiting { .. })
    }

    /// Gives up waiting for an answer that will not come (the reader's safety net): the
    /// session stays open.
    pub fn give_up(&self) {
        let mut phase = self.phase();
        if matches!(*phase, Phase::Awaiting { .. }) {
            *phase = Phase::Open;
        }
    }

    /// A line from the client, read as the module says.
    pub fn inbound(&self, line: &[u8]) -> Inbound {
        let plain = Inbound {
            line: None,
            pause: false,
        };
        let body = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        let bom = body.len() != line.len();
        let Ok(head) = serde_json::from_slice::<Head>(body) else {
            return plain;
        };
        let Some(method) = head.method.as_deref() else {
            return plain;
        };
        let id_ok = head
            .id
            .as_ref()
            .is_some_and(|id| id.is_string() || id.is_i64() || id.is_u64());
        let phase = self.phase().clone();
        let tasks_2025 = match phase {
            Phase::Open if method == "initialize" && id_ok => {
                let asked = head
                    .params
                    .as_ref()
                    .and_then(|p| p.protocol_version.as_deref());
                *self.phase() = Phase::Awaiting {
                    id: head.id.clone().unwrap_or_default(),
                    tasks_2025: self.tasks && asked == Some(REVISION),
                };
                return Inbound {
                    line: bom.then(|| body.to_vec()),
                    pause: true,
                };
            }
            Phase::Open | Phase::Awaiting { .. } => {
                return Inbound {
                    line: bom.then(|| body.to_vec()),
                    pause: false,
                }
            }
            Phase::Agreed { tasks_2025 } => tasks_2025,
        };
        let foreign_meta = head
            .params
            .as_ref()
            .and_then(|p| p.meta.as_ref())
            .is_some_and(|m| REQUEST_REVISION_KEYS.iter().any(|k| m.contains_key(*k)));
        let renamed = tasks_2025
            && id_ok
            && match method {
                "tools/call" => head.params.as_ref().is_some_and(|p| p.task.is_some()),
                "tools/list" | "tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel" => true,
                _ => false,
            };
        if !renamed && !foreign_meta {
            return Inbound {
                line: bom.then(|| body.to_vec()),
                pause: false,
            };
        }
        let Ok(mut message) = serde_json::from_slice::<Value>(body) else {
            return plain;
        };
        if foreign_meta {
            if let Some(meta) = message["params"]["_meta"].as_object_mut() {
                for key in REQUEST_REVISION_KEYS {
                    meta.remove(key);
                }
            }
        }
        if renamed {
            message["method"] = Value::String(format!("{PREFIX}{method}"));
        }
        Inbound {
            line: serde_json::to_vec(&message).ok(),
            pause: false,
        }
    }

    /// Whether the writer is to read what goes out (the handshake's answer is awaited).
    fn awaiting(&self) -> bool {
        matches!(*self.phase(), Phase::Awaiting { .. })
    }

    /// A message going out, while the handshake's answer is awaited: the answer decides the
    /// session, and is given the tasks capability on 2025-11-25. The line to write instead, if
    /// any.
    fn outbound(&self, line: &[u8]) -> Option<Vec<u8>> {
        let mut message: Value = serde_json::from_slice(line).ok()?;
        let (id, tasks_2025) = match &*self.phase() {
            Phase::Awaiting { id, tasks_2025 } => (id.clone(), *tasks_2025),
            _ => return None,
        };
        if message.get("id") != Some(&id) || message.get("method").is_some() {
            return None;
        }
        let agreed = message["result"]["protocolVersion"]
            .as_str()
            .map(str::to_owned);
        let decided = match agreed.as_deref() {
            Some(v) => Phase::Agreed {
                tasks_2025: tasks_2025 && v == REVISION,
            },
            // Refused: another initialize may come.
            None => Phase::Open,
        };
        let announce = decided == Phase::Agreed { tasks_2025: true };
        *self.phase() = decided;
        if let Some(w) = self.waker.lock().unwrap_or_else(|e| e.into_inner()).take() {
            w.wake();
        }
        if !announce {
            return None;
        }
        let capabilities = message["result"].get_mut("capabilities")?.as_object_mut()?;
        capabilities.insert("tasks".into(), super::tasks_2025::capability());
        let mut line = serde_json::to_vec(&message).ok()?;
        line.push(b'\n');
        Some(line)
    }
}

/// Stdout, with the server's `initialize` answer read as the module says; every message after
/// it is written as it comes.
pub struct Announcing<W> {
    inner: W,
    dialect: Arc<Dialect>,
    /// The last byte taken ended a line (a message begins with the next).
    at_line_start: bool,
    /// A message read while the handshake's answer is awaited, not yet ended.
    partial: Vec<u8>,
    /// Bytes taken and not yet written.
    pending: Vec<u8>,
    written: usize,
}

impl<W> Announcing<W> {
    pub fn new(inner: W, dialect: Arc<Dialect>) -> Self {
        Announcing {
            inner,
            dialect,
            at_line_start: true,
            partial: Vec::new(),
            pending: Vec::new(),
            written: 0,
        }
    }

    /// Whether messages are read as they go out: while the handshake's answer is awaited
    /// (from a message's start), and to the end of a message begun so.
    fn reading(&self) -> bool {
        !self.partial.is_empty() || (self.at_line_start && self.dialect.awaiting())
    }

    fn take(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if !self.reading() {
                // Written as it comes, to the end of this message at least.
                let end = bytes
                    .iter()
                    .position(|b| *b == b'\n')
                    .map_or(bytes.len(), |at| at + 1);
                self.pending.extend_from_slice(&bytes[..end]);
                self.at_line_start = bytes[end - 1] == b'\n';
                bytes = &bytes[end..];
                continue;
            }
            let Some(at) = bytes.iter().position(|b| *b == b'\n') else {
                self.partial.extend_from_slice(bytes);
                self.at_line_start = false;
                return;
            };
            self.partial.extend_from_slice(&bytes[..=at]);
            bytes = &bytes[at + 1..];
            let line = std::mem::take(&mut self.partial);
            let body = line.strip_suffix(b"\n").unwrap_or(&line);
            match self.dialect.outbound(body) {
                Some(announced) => self.pending.extend_from_slice(&announced),
                None => self.pending.extend_from_slice(&line),
            }
            self.at_line_start = true;
        }
    }
}

impl<W: AsyncWrite + Unpin> Announcing<W> {
    /// Writes out what was taken.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while self.written < self.pending.len() {
            let n =
                ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Announcing<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if !this.reading() && this.pending.is_empty() && buf.last() == Some(&b'\n') {
            // At a message's end or past the handshake: straight through.
            let n = ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
            this.at_line_start = n == buf.len();
            return Poll::Ready(Ok(n));
        }
        this.take(buf);
        // Taken either way: what cannot be written now is written at the next write or flush.
        if let Poll::Ready(Err(e)) = this.drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(v: Value) -> Vec<u8> {
        serde_json::to_vec(&v).unwrap()
    }

    fn initialize_line(id: Value, revision: &str) -> Vec<u8> {
        line(json!({"jsonrpc": "2.0", "id": id, "method": "initialize",
            "params": {"protocolVersion": revision, "capabilities": {}}}))
    }

    fn answer_line(id: Value, revision: &str) -> Vec<u8> {
        line(json!({"jsonrpc": "2.0", "id": id, "result": {
            "protocolVersion": revision, "capabilities": {"tools": {}},
            "serverInfo": {"name": "x", "version": "1"}}}))
    }

    /// The handshake: `initialize` asking `asked`, answered with `agreed` through the writer
    /// (in pieces, as a writer may cut it, then a later message); what went out.
    fn handshake(d: &Arc<Dialect>, asked: &str, agreed: &str) -> Vec<Value> {
        let read = d.inbound(&initialize_line(json!(0), asked));
        assert!(read.pause && read.line.is_none());
        assert!(d.awaiting());
        let mut w = Announcing::new(Vec::<u8>::new(), Arc::clone(d));
        // A notification before the answer passes as it is.
        w.take(b"{\"jsonrpc\":\"2.0\",\"method\":\"n\"}\n");
        for piece in answer_line(json!(0), agreed).chunks(5) {
            w.take(piece);
        }
        w.take(b"\n{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n");
        assert!(!d.awaiting());
        String::from_utf8(w.pending.clone())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn what_the_server_answered_decides_the_session() {
        for (asked, agreed, tasks, gains) in [
            ("2025-11-25", "2025-11-25", true, true),
            ("2025-11-25", "2025-11-25", false, false),
            ("2025-06-18", "2025-06-18", true, false),
            ("1999-01-01", "2025-11-25", true, false),
            ("2024-11-05", "2024-11-05", true, false),
        ] {
            let d = Arc::new(Dialect::new(tasks));
            let out = handshake(&d, asked, agreed);
            assert_eq!(out.len(), 3, "{out:?}");
            assert_eq!(out[0]["method"], "n");
            assert_eq!(
                out[1]["result"]["capabilities"].get("tasks").is_some(),
                gains,
                "{asked} {agreed}"
            );
            assert_eq!(d.tasks_2025(), gains);
            assert_eq!(out[2]["method"], "x");
        }
        // A refused initialize decides nothing: another may come.
        let d = Arc::new(Dialect::new(true));
        assert!(d.inbound(&initialize_line(json!("a"), "2025-11-25")).pause);
        let mut w = Announcing::new(Vec::<u8>::new(), Arc::clone(&d));
        w.take(&line(
            json!({"jsonrpc": "2.0", "id": "a", "error": {"code": -32602, "message": "no"}}),
        ));
        w.take(b"\n");
        assert!(!d.awaiting() && !d.tasks_2025());
        assert_eq!(handshake(&d, "2025-06-18", "2025-06-18").len(), 3);
        assert!(!d.tasks_2025());
        // An initialize rmcp cannot answer by id (a fractional id) is not waited for.
        let d = Dialect::new(true);
        assert!(!d.inbound(&initialize_line(json!(1.5), "2025-11-25")).pause);
        assert!(!d.awaiting());
    }

    #[test]
    fn the_revision_s_task_requests_are_renamed_and_nothing_else() {
        let d = Arc::new(Dialect::new(true));
        let method = |v: &[u8]| {
            d.inbound(v)
                .line
                .map(|l| serde_json::from_slice::<Value>(&l).unwrap()["method"].clone())
        };
        let call = |params: Value| {
            line(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params}))
        };
        let task_call = call(json!({"name": "gates_wait", "task": {"ttl": 5}}));
        // Before the handshake nothing is renamed.
        assert_eq!(method(&task_call), None);
        handshake(&d, "2025-11-25", "2025-11-25");
        assert!(d.tasks_2025());
        // A second initialize is given to the server (which refuses it) and changes nothing.
        let again = d.inbound(&initialize_line(json!(9), "2025-06-18"));
        assert!(!again.pause && again.line.is_none() && d.tasks_2025());
        assert_eq!(
            method(&task_call),
            Some(json!("prose-state/2025-11-25/tools/call"))
        );
        // "task" inside the arguments is no task.
        assert_eq!(
            method(&call(
                json!({"name": "bind", "arguments": {"task": "x", "v": "tools/call"}})
            )),
            None
        );
        for m in [
            "tasks/get",
            "tasks/result",
            "tasks/list",
            "tasks/cancel",
            "tools/list",
        ] {
            let plain = line(json!({"jsonrpc": "2.0", "id": "a", "method": m, "params": {}}));
            assert_eq!(method(&plain), Some(json!(format!("{PREFIX}{m}"))), "{m}");
            // The same message spelled with escapes, or after a byte order mark, is the same.
            let escaped = String::from_utf8(plain)
                .unwrap()
                .replace('/', "\\/")
                .replace("tasks", "t\\u0061sks");
            assert_eq!(
                method(escaped.as_bytes()),
                Some(json!(format!("{PREFIX}{m}"))),
                "{escaped}"
            );
            let bom = [b"\xEF\xBB\xBF".as_slice(), escaped.as_bytes()].concat();
            assert_eq!(method(&bom), Some(json!(format!("{PREFIX}{m}"))));
        }
        assert_eq!(
            method(br#"{"jsonrpc":"2.0","id":3,"method":"tools\/call","params":{"name":"gates_wait","t\u0061sk":{}}}"#),
            Some(json!("prose-state/2025-11-25/tools/call"))
        );
        // A notification has no one to answer; other methods, answers, and a message with a
        // key twice pass as they are.
        assert_eq!(
            method(&line(json!({"jsonrpc": "2.0", "method": "tasks/get"}))),
            None
        );
        assert_eq!(
            method(&line(
                json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/update"})
            )),
            None
        );
        assert_eq!(
            method(&line(
                json!({"jsonrpc": "2.0", "id": 1, "result": {"x": "tasks/get"}})
            )),
            None
        );
        assert_eq!(
            method(br#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"tasks/get"}"#),
            None
        );
        assert!(d.inbound(b"not json \"tasks/get\"").line.is_none());
    }

    #[test]
    fn a_handshake_session_s_requests_name_no_other_revision() {
        let d = Arc::new(Dialect::new(true));
        handshake(&d, "2025-06-18", "2025-06-18");
        let asked = line(
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params":
            {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                       "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
                       "progressToken": 7}}}),
        );
        let read: Value = serde_json::from_slice(&d.inbound(&asked).line.unwrap()).unwrap();
        assert_eq!(read["params"]["_meta"], json!({"progressToken": 7}));
        assert_eq!(read["method"], "tools/list");
        // Without a handshake (a 2026-07-28 client), a request's own revision stands.
        let open = Dialect::new(true);
        assert!(open.inbound(&asked).line.is_none());
    }
}
