//! What revision 2025-11-25 says on the wire that rmcp does not: its form of tasks.
//!
//! rmcp 3.11 speaks tasks only as the 2026-07-28 extension has them. Revision 2025-11-25 has
//! them in the base protocol, in shapes rmcp's types cannot carry: `capabilities.tasks` in the
//! server's `initialize` answer, `execution.taskSupport` on a tool, `params.task` on a
//! `tools/call`, and the methods `tasks/result` and `tasks/list`. So, on a session whose first
//! `initialize` asks for 2025-11-25 (and on no other), the transport carries them:
//!
//! - **in** ([`Dialect::inbound`], called by [`super::request_limit::LimitedLines`] on each
//!   line until the first `initialize`, and on each line of such a session): the
//!   `initialize` marks the session; then `tools/list`, a `tools/call` carrying `task`, and
//!   `tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel` reach the server under the
//!   method [`PREFIX`] + their own, as requests of its own that rmcp hands over untouched, and
//!   [`super::tasks_2025`] answers them in the revision's shapes. A message is read as JSON
//!   reads it (`"tasks\/get"` is `tasks/get`), never by its spelling;
//! - **out** ([`Announcing`]): the server's `initialize` answer, when it names 2025-11-25, gains
//!   `capabilities.tasks` (listing, cancelling, and task-augmented `tools/call`), for a role
//!   with a tool that runs as a task.
//!
//! Every other message, and every message of a session of another revision, passes unread.

use serde::Deserialize;
use serde_json::Value;
use std::borrow::Cow;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::AsyncWrite;

/// The prefix a renamed request's method is given.
pub const PREFIX: &str = "prose-state/2025-11-25/";

/// The revision whose tasks this module carries.
pub const REVISION: &str = "2025-11-25";

/// What the session speaks, as its `initialize` request said.
pub struct Dialect {
    /// Whether the session's role has a tool that runs as a task (else no tasks are declared).
    tasks: bool,
    /// The session's first `initialize` has been read (later ones are refused by the server).
    initialized: AtomicBool,
    tasks_2025: AtomicBool,
}

/// What a message is, read without keeping anything else of it: its method, whether its
/// params carry `task`, and an `initialize`'s revision. Escapes are read as JSON reads them;
/// a message with a key twice is none of these (rmcp does not read it either).
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(default)]
    id: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    params: Option<Params<'a>>,
}

#[derive(Deserialize)]
struct Params<'a> {
    #[serde(default)]
    task: Option<serde::de::IgnoredAny>,
    #[serde(borrow, default, rename = "protocolVersion")]
    protocol_version: Option<Cow<'a, str>>,
}

impl Dialect {
    /// The dialect of a session whose role has a task tool (`tasks`) or not.
    pub fn new(tasks: bool) -> Self {
        Dialect {
            tasks,
            initialized: AtomicBool::new(false),
            tasks_2025: AtomicBool::new(false),
        }
    }

    /// Whether the session was opened at 2025-11-25 (its first `initialize` asked for it).
    pub fn tasks_2025(&self) -> bool {
        self.tasks_2025.load(Ordering::Acquire)
    }

    /// Whether each line is to be read ([`Dialect::inbound`]): until the first `initialize`,
    /// and on a 2025-11-25 session.
    pub fn reading(&self) -> bool {
        !self.initialized.load(Ordering::Acquire) || self.tasks_2025()
    }

    /// A line from the client, read as the module says: the line rmcp is given in its place
    /// (renamed), or None (given on as it is). The first `initialize` marks the session: a
    /// client that asks for 2025-11-25 is answered with it, and requests it sends right after
    /// (before reading the answer) are already read as that revision's.
    pub fn inbound(&self, line: &[u8]) -> Option<Vec<u8>> {
        let head: Head = serde_json::from_slice(line).ok()?;
        let method = head.method.as_deref()?;
        if method == "initialize" && !self.initialized.swap(true, Ordering::AcqRel) {
            let asked = head
                .params
                .as_ref()
                .and_then(|p| p.protocol_version.as_deref());
            self.tasks_2025
                .store(asked == Some(REVISION), Ordering::Release);
            return None;
        }
        if !self.tasks_2025() || head.id.is_none() {
            return None;
        }
        let renamed = match method {
            "tools/call" => head.params.as_ref().is_some_and(|p| p.task.is_some()),
            "tools/list" | "tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel" => true,
            _ => false,
        };
        if !renamed {
            return None;
        }
        let mut message: Value = serde_json::from_slice(line).ok()?;
        message["method"] = Value::String(format!("{PREFIX}{method}"));
        serde_json::to_vec(&message).ok()
    }

    /// The server's `initialize` answer, as the session is to read it (see the module).
    fn announce(&self, line: &[u8]) -> Option<Vec<u8>> {
        let mut message: Value = serde_json::from_slice(line).ok()?;
        let result = message.get_mut("result")?.as_object_mut()?;
        // Declared only where served: a session whose `initialize` asked for the revision (one
        // that asked for a revision unknown here is answered with it, and served no tasks).
        if result.get("protocolVersion")?.as_str()? != REVISION || !self.tasks || !self.tasks_2025()
        {
            return None;
        }
        let capabilities = result.get_mut("capabilities")?.as_object_mut()?;
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
    /// Until the `initialize` answer has gone out: messages are read, line by line.
    watching: bool,
    /// A message not yet ended, while watching.
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
            watching: true,
            partial: Vec::new(),
            pending: Vec::new(),
            written: 0,
        }
    }

    fn take(&mut self, bytes: &[u8]) {
        if !self.watching {
            self.pending.extend_from_slice(bytes);
            return;
        }
        self.partial.extend_from_slice(bytes);
        while self.watching {
            let Some(at) = self.partial.iter().position(|b| *b == b'\n') else {
                break;
            };
            let line: Vec<u8> = self.partial.drain(..=at).collect();
            let body = line.strip_suffix(b"\n").unwrap_or(&line);
            let is_answer = serde_json::from_slice::<Value>(body)
                .ok()
                .is_some_and(|m| m["result"].get("protocolVersion").is_some());
            match self.dialect.announce(body) {
                Some(announced) => self.pending.extend_from_slice(&announced),
                None => self.pending.extend_from_slice(&line),
            }
            self.watching = !is_answer;
        }
        if !self.watching {
            let rest = std::mem::take(&mut self.partial);
            self.pending.extend_from_slice(&rest);
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
        if !this.watching && this.pending.is_empty() {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
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

    fn initialize(d: &Dialect, revision: &str) {
        assert_eq!(
            d.inbound(&line(
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": revision, "capabilities": {}}})
            )),
            None
        );
    }

    #[test]
    fn only_a_2025_11_25_answer_gains_tasks() {
        for (revision, tasks, gains) in [
            ("2025-11-25", true, true),
            ("2025-11-25", false, false),
            ("2025-06-18", true, false),
            ("2026-07-28", true, false),
            ("2024-11-05", true, false),
        ] {
            let answer = line(json!({"jsonrpc": "2.0", "id": 0, "result": {
                "protocolVersion": revision, "capabilities": {"tools": {}},
                "serverInfo": {"name": "x", "version": "1"}}}));
            let dialect = Dialect::new(tasks);
            initialize(&dialect, revision);
            let mut w = Announcing::new(Vec::<u8>::new(), Arc::new(dialect));
            // Written in pieces, as a writer may cut it, then a later message.
            for piece in answer.chunks(5) {
                w.take(piece);
            }
            w.take(b"\n{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n");
            let out = String::from_utf8(w.pending.clone()).unwrap();
            let lines: Vec<Value> = out
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            assert_eq!(lines.len(), 2, "{out}");
            assert_eq!(
                lines[0]["result"]["capabilities"].get("tasks").is_some(),
                gains,
                "{revision}"
            );
            assert!(!w.watching);
            assert_eq!(lines[1]["method"], json!("x"));
        }
    }

    #[test]
    fn the_revision_s_task_requests_are_renamed_and_nothing_else() {
        let d = Dialect::new(true);
        let renamed = |v: &[u8]| {
            d.inbound(v)
                .map(|l| serde_json::from_slice::<Value>(&l).unwrap()["method"].clone())
        };
        let call = |params: Value| {
            line(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params}))
        };
        let task_call = call(json!({"name": "gates_wait", "task": {"ttl": 5}}));
        // Before the handshake, and on another revision's session, nothing is renamed.
        assert_eq!(renamed(&task_call), None);
        assert!(d.reading());
        initialize(&d, "2025-11-25");
        assert!(d.tasks_2025() && d.reading());
        // A second initialize changes nothing.
        initialize(&d, "2025-06-18");
        assert!(d.tasks_2025());
        assert_eq!(
            renamed(&task_call),
            Some(json!("prose-state/2025-11-25/tools/call"))
        );
        // "task" inside the arguments is no task.
        assert_eq!(
            renamed(&call(
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
            assert_eq!(renamed(&plain), Some(json!(format!("{PREFIX}{m}"))), "{m}");
            // The same message spelled with escapes is the same message.
            let escaped = String::from_utf8(plain)
                .unwrap()
                .replace('/', "\\/")
                .replace("tasks", "t\\u0061sks");
            assert_eq!(
                renamed(escaped.as_bytes()),
                Some(json!(format!("{PREFIX}{m}"))),
                "{escaped}"
            );
        }
        assert_eq!(
            renamed(br#"{"jsonrpc":"2.0","id":3,"method":"tools\/call","params":{"name":"gates_wait","t\u0061sk":{}}}"#),
            Some(json!("prose-state/2025-11-25/tools/call"))
        );
        // A notification has no one to answer; other methods, answers, and a message with a
        // key twice pass as they are.
        assert_eq!(
            renamed(&line(json!({"jsonrpc": "2.0", "method": "tasks/get"}))),
            None
        );
        assert_eq!(
            renamed(&line(
                json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/update"})
            )),
            None
        );
        assert_eq!(
            renamed(&line(
                json!({"jsonrpc": "2.0", "id": 1, "result": {"x": "tasks/get"}})
            )),
            None
        );
        assert_eq!(
            renamed(br#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"tasks/get"}"#),
            None
        );
        assert_eq!(d.inbound(b"not json \"tasks/get\""), None);
        // Another revision's session reads no line after its initialize.
        let other = Dialect::new(true);
        initialize(&other, "2025-06-18");
        assert!(!other.tasks_2025() && !other.reading());
    }
}
