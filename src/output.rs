//! Rendering of command outputs: human text, or with `--json` exactly one JSON document.

use serde::Serialize;
use std::io::{self, BufWriter, IsTerminal, Write};

/// A command's output: serialisable for `--json`, and with a human rendering.
pub trait Render: Serialize + Sized {
    /// Writes the human rendering. `tty` says whether stdout is a terminal.
    fn text(self, w: &mut dyn Write, tty: bool) -> io::Result<()>;

    /// Diagnostics to print on stderr (say, runs that could not be read while listing).
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }

    /// Lines for the person reading the human rendering, written to stderr (made visible)
    /// so that stdout holds only the result (say, a token alone, for `> file`). Not written
    /// with `--json`, whose document holds everything.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// The names of a table's columns in their order, where the output is rows of a table
    /// (a `query`): kept beside the rows by a reader whose JSON objects lose key order.
    fn columns(&self) -> Option<Vec<String>> {
        None
    }

    /// The exit code this output stands for (0 unless the command documents others).
    fn exit_code(&self) -> crate::error::Code {
        crate::error::Code::Ok
    }

    /// Whether the rendering makes its stored strings [`visible`] itself, because it writes
    /// what must pass unfiltered (colour, or a value's exact bytes off a terminal). Every other
    /// rendering is made visible whole by [`emit`].
    fn escapes_itself(&self) -> bool {
        false
    }
}

/// Writes a value as JSON, exact, and safe on a terminal: characters a terminal would
/// interpret or hide are written as JSON `\uXXXX` escapes, which decode to the same string.
pub fn write_json<T: Serialize + ?Sized>(w: &mut dyn Write, value: &T) -> io::Result<()> {
    let text = serde_json::to_string(value).map_err(io::Error::from)?;
    if !any_hidden(&text, is_hidden) {
        return w.write_all(text.as_bytes());
    }
    // serde_json escapes C0 controls, quotes and backslashes; what is left hidden can only
    // stand inside a string, where an escape means the same character.
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_hidden(c) {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    w.write_all(out.as_bytes())
}

/// Writes a command's output to stdout.
pub fn emit<T: Render>(value: T, json: bool) -> io::Result<()> {
    for w in value.warnings() {
        warn(&w);
    }
    let stdout = io::stdout();
    let tty = stdout.is_terminal();
    let mut w = BufWriter::with_capacity(256 * 1024, stdout.lock());
    if json {
        write_json(&mut w, &value)?;
        w.write_all(b"\n")?;
    } else {
        // What a reader must know of the output (a listing unchecked): in JSON, its fields say
        // it (a gate listed unchecked has no `integrity`).
        for note in value.notes() {
            let _ = writeln!(io::stderr().lock(), "{}", visible_line(&note));
        }
        if value.escapes_itself() {
            value.text(&mut w, tty)?;
        } else {
            // Stored strings reach a person here: everything a terminal would interpret is
            // shown escaped instead.
            let mut text = Vec::new();
            value.text(&mut text, tty)?;
            w.write_all(visible(&String::from_utf8_lossy(&text)).as_bytes())?;
        }
    }
    w.flush()
}

/// Whether a character would change what a terminal shows rather than be shown: control
/// characters (C0, DEL, C1: `\r` returns the cursor, ESC starts a sequence), bidirectional
/// overrides, zero-width and other invisible format characters, and line separators.
fn is_hidden(c: char) -> bool {
    c.is_control() || crate::model::is_invisible(c)
}

/// Whether `text` holds a character for which `hidden` holds. Printable ASCII is never hidden,
/// so text made only of it (most output, and a listing of 100,000 gates is 35 MB of it) is
/// settled by a scan of its bytes.
fn any_hidden(text: &str, hidden: impl Fn(char) -> bool) -> bool {
    text.bytes().any(|b| !(0x20..0x7f).contains(&b)) && text.chars().any(hidden)
}

/// A stored string as a terminal may show it: every character that would be interpreted or
/// hidden rather than shown is written as a visible escape (`\r`, `\u{1b}`, `\u{202e}`), and
/// newlines and tabs are kept. Plain text comes back unchanged (and borrowed); applying it
/// twice changes nothing more. JSON output never goes through this: it stays exact.
pub fn visible(text: &str) -> std::borrow::Cow<'_, str> {
    visible_keeping(text, &['\n', '\t'])
}

/// Whether a text area shows `text` as it is stored: no character [`visible`] escapes but a
/// line end (a browser sends a text area's lines as CRLF, so a CR before a newline is kept).
pub fn shown_as_is_in_a_text_area(text: &str) -> bool {
    !any_hidden(text, |c| is_hidden(c) && !['\n', '\t', '\r'].contains(&c))
        && !text.replace("\r\n", "").contains('\r')
}

/// [`visible`] for one line of output: newlines and tabs are escaped too.
pub fn visible_line(text: &str) -> std::borrow::Cow<'_, str> {
    visible_keeping(text, &[])
}

fn visible_keeping<'a>(text: &'a str, keep: &[char]) -> std::borrow::Cow<'a, str> {
    let hidden = |c: char| is_hidden(c) && !keep.contains(&c);
    if !any_hidden(text, hidden) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            c if !hidden(c) => out.push(c),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Shortens text for one cell or line of human output: first line only, at most `max` chars
/// of it, made [`visible`].
pub fn one_line(text: &str, max: usize) -> String {
    // Cut first, escape after, so an escape is never cut in half.
    let first = text.split('\n').next().unwrap_or("");
    let more = first.len() < text.trim_end().len();
    if first.chars().count() > max {
        let cut: String = first.chars().take(max.saturating_sub(1)).collect();
        format!("{}…", visible_line(&cut))
    } else if more {
        format!("{} …", visible_line(first))
    } else {
        visible_line(first).into_owned()
    }
}

/// Writes rows as an aligned table with a header, for humans.
pub fn table(w: &mut dyn Write, header: &[String], rows: &[Vec<String>]) -> io::Result<()> {
    // Every cell is shown visible: cells hold stored strings.
    let mut lines: Vec<Vec<String>> = std::iter::once(header)
        .chain(rows.iter().map(Vec::as_slice))
        .map(|r| r.iter().map(|c| visible_line(c).into_owned()).collect())
        .collect();
    let mut widths = vec![0; header.len()];
    for row in &lines {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    // The rule under the header.
    lines.insert(1, widths.iter().map(|&n| "-".repeat(n)).collect());
    for cells in lines {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            out.push_str(cell);
            if i + 1 < cells.len() {
                out.extend(std::iter::repeat_n(' ', widths[i] - cell.chars().count()));
            }
        }
        writeln!(w, "{out}")?;
    }
    Ok(())
}

/// Seconds as a short human duration: `45s`, `12m`, `3h12m`, `2d4h`.
pub fn human_duration(secs: i64) -> String {
    let s = secs.max(0);
    let (d, h, m) = (s / 86_400, s % 86_400 / 3_600, s % 3_600 / 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, m) => format!("{m}m"),
        (0, h, 0) => format!("{h}h"),
        (0, h, m) => format!("{h}h{m}m"),
        (d, 0, _) => format!("{d}d"),
        (d, h, _) => format!("{d}d{h}h"),
    }
}

/// An output that is one of several, for a command whose subcommands return different
/// things: serialised as the one it holds, rendered by it.
macro_rules! one_of {
    ($(#[$m:meta])* $name:ident { $($variant:ident($ty:ty)),* $(,)? }) => {
        $(#[$m])*
        #[derive(serde::Serialize)]
        #[serde(untagged)]
        pub enum $name {
            $($variant($ty)),*
        }

        impl $crate::output::Render for $name {
            fn text(self, w: &mut dyn std::io::Write, tty: bool) -> std::io::Result<()> {
                match self {
                    $(Self::$variant(o) => o.text(w, tty)),*
                }
            }

            $crate::output::one_of!(@ask [$($variant)*] warnings -> Vec<String>);
            $crate::output::one_of!(@ask [$($variant)*] exit_code -> $crate::error::Code);
            $crate::output::one_of!(@ask [$($variant)*] escapes_itself -> bool);
            $crate::output::one_of!(@ask [$($variant)*] notes -> Vec<String>);
        }
    };
    // One of `Render`'s questions, answered by the output held.
    (@ask [$($variant:ident)*] $method:ident -> $answer:ty) => {
        fn $method(&self) -> $answer {
            match self {
                $(Self::$variant(o) => o.$method()),*
            }
        }
    };
}
pub(crate) use one_of;

/// Writes a one-line warning to stderr, made visible.
pub fn warn(message: &str) {
    say("warning", message);
}

/// Writes one line of `kind` (a warning, an error) to stderr, made visible.
fn say(kind: &str, message: &str) {
    let _ = writeln!(
        io::stderr().lock(),
        "prose-state: {kind}: {}",
        visible_line(message)
    );
}

/// Writes the one-line error to stderr. Never panics: `eprintln!` would, if stderr cannot be
/// written (a full disk under a redirect), and the exit code must still reach the caller.
pub fn report(message: &str) {
    // Clipped, because a message may quote an argument of up to 128 KiB (a path, a name).
    say("error", &crate::error::clip(message, 500));
}

/// Renders a command's output and returns its exit code; an error is reported here, as one
/// line, and becomes its exit code. A reader of stdout that went away (`get big | head`) is
/// a quiet success.
pub fn finish<T: Render>(result: anyhow::Result<T>, json: bool) -> u8 {
    let written = result.and_then(|out| {
        let code = out.exit_code() as u8;
        emit(out, json)?;
        Ok(code)
    });
    match written {
        Ok(code) => code,
        Err(e) if broken_pipe(&e) => 0,
        Err(e) => {
            report(&format!("{e:#}").replace(['\n', '\r'], " "));
            crate::error::code_of(&e).unwrap_or(crate::error::Code::Error) as u8
        }
    }
}

fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// The output of a command that wrote its own (`log`, the MCP server).
#[derive(Serialize)]
pub struct Nothing;

impl Render for Nothing {
    fn text(self, _: &mut dyn Write, _: bool) -> io::Result<()> {
        Ok(())
    }
}

/// Text as one percent-encoded URL path segment (unreserved characters kept).
pub fn url_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every character: a text area shows it as it is exactly when [`visible`] keeps it, but
    /// a CR, kept only before a newline.
    #[test]
    fn a_text_area_is_offered_only_what_it_shows_as_stored() {
        for c in (0..=0x10FFFF).filter_map(char::from_u32) {
            let text = format!("a{c}b");
            let kept = matches!(visible(&text), std::borrow::Cow::Borrowed(_));
            assert_eq!(
                shown_as_is_in_a_text_area(&text),
                kept,
                "U+{:04X}",
                c as u32
            );
        }
        assert!(shown_as_is_in_a_text_area("one\r\ntwo\r\n\tthree\n"));
        assert!(!shown_as_is_in_a_text_area("one\rtwo"));
        assert!(!shown_as_is_in_a_text_area("one\r"));
        assert!(!shown_as_is_in_a_text_area("account \u{202e}9876\u{202c}"));
    }
}
