//! What revision 2025-11-25 says on the wire that rmcp does not: its form of tasks.
//!
//! rmcp 3.11 speaks tasks only as the 2026-07-28 extension has them. Revision 2025-11-25 has
//! them in the base protocol, in shapes rmcp's types cannot carry: `capabilities.tasks` in the
//! server's `initialize` answer, `execution.taskSupport` on a tool, `params.task` on a
//! `tools/call`, and the methods `tasks/result` and `tasks/list`. So, on a session negotiated at
//! 2025-11-25 (and on no other), the transport carries them:
//!
//! - **out** ([`Announcing`]): the server's `initialize` answer, when it names 2025-11-25, gains
//!   `capabilities.tasks` (listing, cancelling, and task-augmented `tools/call`), and the
//!   session is marked as one of that revision;
//! - **in** ([`Dialect::rename`], called by [`super::request_limit::LimitedLines`] on each line
//!   of such a session): `tools/list`, a `tools/call` carrying `task`, and `tasks/get`,
//!   `tasks/result`, `tasks/list`, `tasks/cancel` reach the server under the method
//!   [`PREFIX`] + their own, as requests of its own that rmcp hands over untouched, and
//!   [`super::tasks_2025`] answers them in the revision's shapes.
//!
//! Every other message, and every message of a session of another revision, passes unread.

use serde_json::Value;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::AsyncWrite;

/// The prefix a renamed request's method is given.
pub const PREFIX: &str = "prose-state/2025-11-25/";

/// The revision whose tasks this module carries.
pub const REVISION: &str = "2025-11-25";

/// What the session speaks, as its `initialize` answer said.
#[derive(Default)]
pub struct Dialect {
    tasks_2025: AtomicBool,
}

impl Dialect {
    /// Whether the session was negotiated at 2025-11-25.
    pub fn tasks_2025(&self) -> bool {
        self.tasks_2025.load(Ordering::Acquire)
    }

    /// The line a request of a 2025-11-25 session reaches rmcp as: renamed if it is one of the
    /// requests the module lists, else None (given on as it is).
    pub fn rename(&self, line: &[u8]) -> Option<Vec<u8>> {
        // Most lines are none of these: they are not parsed.
        let named = |s: &[u8]| line.windows(s.len()).any(|w| w == s);
        if !(named(b"\"tasks/")
            || named(b"\"tools/list\"")
            || (named(b"\"tools/call\"") && named(b"\"task\"")))
        {
            return None;
        }
        let mut message: Value = serde_json::from_slice(line).ok()?;
        let method = message.get("method")?.as_str()?;
        let renamed = match method {
            "tools/call" => message["params"].get("task").is_some(),
            "tools/list" | "tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel" => true,
            _ => false,
        };
        if !renamed || message.get("id").is_none() {
            return None;
        }
        message["method"] = Value::String(format!("{PREFIX}{method}"));
        serde_json::to_vec(&message).ok()
    }

    /// The server's `initialize` answer, as the session is to read it (see the module).
    fn announce(&self, line: &[u8]) -> Option<Vec<u8>> {
        let mut message: Value = serde_json::from_slice(line).ok()?;
        let result = message.get_mut("result")?.as_object_mut()?;
        if result.get("protocolVersion")?.as_str()? != REVISION {
            return None;
        }
        let capabilities = result.get_mut("capabilities")?.as_object_mut()?;
        capabilities.insert("tasks".into(), super::tasks_2025::capability());
        self.tasks_2025.store(true, Ordering::Release);
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

    #[test]
    fn only_a_2025_11_25_answer_gains_tasks_and_marks_the_session() {
        for (revision, gains) in [
            ("2025-11-25", true),
            ("2025-06-18", false),
            ("2026-07-28", false),
            ("2024-11-05", false),
        ] {
            let answer = line(json!({"jsonrpc": "2.0", "id": 0, "result": {
                "protocolVersion": revision, "capabilities": {"tools": {}},
                "serverInfo": {"name": "x", "version": "1"}}}));
            let mut w = Announcing::new(Vec::<u8>::new(), Arc::new(Dialect::default()));
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
            assert_eq!(w.dialect.tasks_2025(), gains, "{revision}");
            assert!(!w.watching);
            assert_eq!(lines[1]["method"], json!("x"));
        }
    }

    #[test]
    fn the_revision_s_task_requests_are_renamed_and_nothing_else() {
        let d = Dialect::default();
        let renamed = |v: Value| {
            d.rename(&line(v))
                .map(|l| serde_json::from_slice::<Value>(&l).unwrap()["method"].clone())
        };
        let call = |params: Value| json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params});
        assert_eq!(
            renamed(call(json!({"name": "gates_wait", "task": {"ttl": 5}}))),
            Some(json!("prose-state/2025-11-25/tools/call"))
        );
        // "task" inside the arguments is no task.
        assert_eq!(
            renamed(call(
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
            assert_eq!(
                renamed(json!({"jsonrpc": "2.0", "id": "a", "method": m, "params": {}})),
                Some(json!(format!("{PREFIX}{m}"))),
                "{m}"
            );
        }
        // A notification has no one to answer; other methods and answers pass.
        assert_eq!(
            renamed(json!({"jsonrpc": "2.0", "method": "tasks/get"})),
            None
        );
        assert_eq!(
            renamed(json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/update"})),
            None
        );
        assert_eq!(
            renamed(json!({"jsonrpc": "2.0", "id": 1, "result": {"x": "tasks/get"}})),
            None
        );
        assert_eq!(d.rename(b"not json \"tasks/get\""), None);
    }
}
