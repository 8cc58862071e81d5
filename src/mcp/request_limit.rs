//! The MCP server's limit on one request, answered rather than dropped.
//!
//! rmcp's stdio transport drops a line longer than its own cap (16 MiB) with a log line and
//! no response, so the client waits for ever. This reader sits between stdin and rmcp: a
//! request line longer than [`MAX_REQUEST_BYTES`] is cut off before rmcp's cap (what rmcp was
//! given of it is ended so that it cannot parse, and rmcp ignores it), the rest is read and
//! discarded in bounded memory, and in its place rmcp receives a small request with the same
//! id and the method [`TOO_LARGE_METHOD`], which the server answers with a JSON-RPC error
//! naming the limit. The session goes on. A line whose id cannot be found (a notification, or
//! not JSON) has no one to answer and is dropped, as the protocol has it.
//!
//! Each line is also held until it ends and given to [`Dialect::inbound`] (see
//! [`super::dialect`]); after the handshake's `initialize`, nothing more is read until the
//! server has answered it (at most [`HANDSHAKE_LIMIT`]).

use super::dialect::Dialect;
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};

/// The most bytes one request line may have (without its newline): below rmcp's own cap of
/// 16 MiB, so that rmcp never drops a line unanswered.
pub const MAX_REQUEST_BYTES: usize = 16_000_000;

/// How long the reader waits for the server's answer to the handshake's `initialize` before it
/// reads on anyway (an answer that never comes must not stall the session).
pub const HANDSHAKE_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The method an over-long request is replaced by, answered with the error.
pub const TOO_LARGE_METHOD: &str = "prose-state/request-too-large";

/// The error an over-long request is answered with.
pub fn too_large_message(bytes: u64) -> String {
    format!(
        "request too large: {bytes} bytes, over the MCP server's limit of {MAX_REQUEST_BYTES} \
         bytes a request (16 MB); bind a large value from a file (the `file` argument)"
    )
}

/// Stdin, with each line over the limit replaced as the module says.
pub struct LimitedLines<R> {
    inner: R,
    limit: usize,
    /// Bytes of the current line read so far (given on or discarded).
    line: u64,
    /// The current line went past the limit: the rest of it is discarded.
    over: bool,
    scanner: IdScanner,
    /// Bytes for rmcp, handed out before anything more is read.
    out: Vec<u8>,
    given: usize,
    scratch: Box<[u8]>,
    dialect: Arc<Dialect>,
    held: Vec<u8>,
    /// Bytes read and not yet taken (what came after the handshake's `initialize`).
    rest: Vec<u8>,
    /// The safety net of a pause for the handshake's answer.
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<R> LimitedLines<R> {
    pub fn new(inner: R, dialect: Arc<Dialect>) -> Self {
        let mut lines = Self::with_limit(inner, MAX_REQUEST_BYTES);
        lines.dialect = dialect;
        lines
    }

    fn with_limit(inner: R, limit: usize) -> Self {
        LimitedLines {
            inner,
            limit,
            line: 0,
            over: false,
            scanner: IdScanner::default(),
            out: Vec::new(),
            given: 0,
            scratch: vec![0; 64 * 1024].into_boxed_slice(),
            dialect: Arc::new(Dialect::new(false)),
            held: Vec::new(),
            rest: Vec::new(),
            pause: None,
        }
    }

    /// Takes bytes read from stdin, putting what rmcp is to see in `out`; after the handshake's
    /// `initialize`, the bytes after it are kept in `rest` for when it is answered.
    fn take(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let newline = bytes.iter().position(|b| *b == b'\n');
            let segment = &bytes[..newline.unwrap_or(bytes.len())];
            self.scanner.feed(segment);
            if !self.over {
                let room = (self.limit as u64).saturating_sub(self.line);
                if (segment.len() as u64) <= room {
                    self.held.extend_from_slice(segment);
                } else {
                    // An over-long line is given on as it is, up to the limit.
                    self.out.append(&mut self.held);
                    self.out.extend_from_slice(&segment[..room as usize]);
                    // A NUL is never valid JSON where it lands (in a string it is an
                    // unescaped control character, elsewhere a stray byte): rmcp cannot read
                    // what it was given of this line as a message, and ignores it.
                    self.out.extend_from_slice(b"\x00\n");
                    self.over = true;
                }
            }
            self.line += segment.len() as u64;
            let Some(at) = newline else { break };
            let mut pause = false;
            if self.over {
                self.answer_instead();
            } else {
                let line = std::mem::take(&mut self.held);
                let read = self.dialect.inbound(&line);
                self.out
                    .extend_from_slice(read.line.as_deref().unwrap_or(&line));
                self.out.push(b'\n');
                pause = read.pause;
            }
            self.line = 0;
            self.over = false;
            self.scanner = IdScanner::default();
            bytes = &bytes[at + 1..];
            if pause {
                self.rest.extend_from_slice(bytes);
                return;
            }
        }
    }

    /// The over-long line just ended: rmcp gets a request for the error in its place.
    fn answer_instead(&mut self) {
        let Some(id) = self.scanner.id.take() else {
            crate::output::report(&format!(
                "mcp: dropped a message of {} bytes with no id, over the limit of {MAX_REQUEST_BYTES} bytes",
                self.line
            ));
            return;
        };
        let request = serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": TOO_LARGE_METHOD,
            "params": {"bytes": self.line, "limit": MAX_REQUEST_BYTES},
        });
        self.out.extend_from_slice(request.to_string().as_bytes());
        self.out.push(b'\n');
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for LimitedLines<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.given < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.given);
                buf.put_slice(&this.out[this.given..this.given + n]);
                this.given += n;
                if this.given == this.out.len() {
                    this.out.clear();
                    this.given = 0;
                }
                return Poll::Ready(Ok(()));
            }
            // The handshake's answer first: then the session is read as it agreed.
            if this.dialect.paused(cx) {
                let net = this
                    .pause
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(HANDSHAKE_LIMIT)));
                if net.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.dialect.give_up();
            }
            this.pause = None;
            if !this.rest.is_empty() {
                let rest = std::mem::take(&mut this.rest);
                this.take(&rest);
                continue;
            }
            let mut read = ReadBuf::new(&mut this.scratch);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    let n = read.filled().len();
                    if n == 0 {
                        // End of input.
                        return Poll::Ready(Ok(()));
                    }
                    let bytes = this.scratch[..n].to_vec();
                    this.take(&bytes);
                }
            }
        }
    }
}

/// Finds the top-level `"id"` of one JSON-RPC message as its bytes stream past, in constant
/// memory, without parsing the rest.
#[derive(Default)]
struct IdScanner {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// A top-level key being read (None for other strings); at most a few bytes of it.
    key: Option<Vec<u8>>,
    expecting_key: bool,
    /// The last top-level key read was `id`: its value comes after the colon.
    at_id: bool,
    /// The id's value being read, raw.
    value: Option<Vec<u8>>,
    id: Option<Value>,
}

impl IdScanner {
    const MOST_ID_BYTES: usize = 256;

    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.in_string {
                if let Some(v) = self.value.as_mut() {
                    if v.len() <= Self::MOST_ID_BYTES {
                        v.push(b);
                    }
                }
                let closing = b == b'"' && !self.escaped;
                if let Some(k) = self.key.as_mut() {
                    if !closing && k.len() <= 2 {
                        k.push(b);
                    }
                }
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if closing {
                    self.in_string = false;
                    if let Some(k) = self.key.take() {
                        self.at_id = k == b"id";
                    }
                }
                continue;
            }
            if self.depth == 1 && (b == b',' || b == b'}') {
                if let Some(v) = self.value.take() {
                    let id = serde_json::from_slice::<Value>(v.trim_ascii()).ok();
                    if self.id.is_none() {
                        self.id = id.filter(|id| id.is_string() || id.is_i64() || id.is_u64());
                    }
                }
            }
            if let Some(v) = self.value.as_mut() {
                if v.len() <= Self::MOST_ID_BYTES {
                    v.push(b);
                }
            }
            match b {
                b'"' => {
                    self.in_string = true;
                    if self.depth == 1 && self.expecting_key {
                        self.key = Some(Vec::new());
                        self.expecting_key = false;
                    }
                }
                b'{' | b'[' => {
                    self.depth += 1;
                    if self.depth == 1 {
                        self.expecting_key = b == b'{';
                    }
                }
                b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                b',' if self.depth == 1 => self.expecting_key = true,
                b':' if self.depth == 1 && self.at_id => {
                    self.at_id = false;
                    if self.id.is_none() {
                        self.value = Some(Vec::new());
                    }
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn id_of(line: &str) -> Option<Value> {
        let mut s = IdScanner::default();
        // Fed in pieces, as reads cut it.
        for piece in line.as_bytes().chunks(3) {
            s.feed(piece);
        }
        s.id
    }

    #[test]
    fn the_top_level_id_is_found_wherever_it_is() {
        assert_eq!(
            id_of(r#"{"jsonrpc":"2.0","id":7,"method":"x","params":{"id":9}}"#),
            Some(json!(7))
        );
        assert_eq!(
            id_of(r#"{"params":{"id":9,"a":"\"id\":3"},"method":"x", "id" : "a\"b" }"#),
            Some(json!("a\"b"))
        );
        assert_eq!(id_of(r#"{"method":"x","params":[{"id":1}]}"#), None);
        assert_eq!(id_of(r#"{"id":{"x":1},"method":"x"}"#), None);
        assert_eq!(id_of(r#"{"idx":1,"method":"x"}"#), None);
        assert_eq!(id_of("not json"), None);
    }

    #[test]
    fn a_line_over_the_limit_becomes_a_request_for_the_error() {
        let mut l = LimitedLines::with_limit(tokio::io::empty(), 40);
        let big = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{{\"v\":\"{}\"}}}}\n",
            "x".repeat(100)
        );
        let small = "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"ping\"}\n";
        for piece in format!("{big}{small}").as_bytes().chunks(7) {
            l.take(piece);
        }
        let out = String::from_utf8(l.out.clone()).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert_eq!(lines[0].len(), 41);
        assert!(lines[0].ends_with('\0'));
        let answer: Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(answer["id"], json!(5));
        assert_eq!(answer["method"], json!(TOO_LARGE_METHOD));
        assert_eq!(answer["params"]["bytes"], json!(big.len() - 1));
        assert_eq!(lines[2], small.trim_end());
    }
}
