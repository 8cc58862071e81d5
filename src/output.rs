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

    /// The exit code this output stands for (0 unless the command documents others).
    fn exit_code(&self) -> crate::error::Code {
        crate::error::Code::Ok
    }
}

/// Writes a command's output to stdout.
pub fn emit<T: Render>(value: T, json: bool) -> io::Result<()> {
    for w in value.warnings() {
        let _ = writeln!(io::stderr().lock(), "prose-state: warning: {w}");
    }
    let stdout = io::stdout();
    let tty = stdout.is_terminal();
    let mut w = BufWriter::with_capacity(256 * 1024, stdout.lock());
    if json {
        serde_json::to_writer(&mut w, &value).map_err(io::Error::from)?;
        w.write_all(b"\n")?;
    } else {
        value.text(&mut w, tty)?;
    }
    w.flush()
}

/// Shortens text for one cell or line of human output: first line only, at most `max` chars.
pub fn one_line(text: &str, max: usize) -> String {
    let first = text.lines().next().unwrap_or("");
    let more = first.len() < text.trim_end().len();
    if first.chars().count() > max {
        let cut: String = first.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else if more {
        format!("{first} …")
    } else {
        first.to_string()
    }
}

/// Writes rows as an aligned table with a header, for humans.
pub fn table(w: &mut dyn Write, header: &[String], rows: &[Vec<String>]) -> io::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |w: &mut dyn Write, cells: &[String]| -> io::Result<()> {
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
        writeln!(w, "{out}")
    };
    line(w, header)?;
    let rule: Vec<String> = widths.iter().map(|&n| "-".repeat(n)).collect();
    line(w, &rule)?;
    for row in rows {
        line(w, row)?;
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

            fn warnings(&self) -> Vec<String> {
                match self {
                    $(Self::$variant(o) => o.warnings()),*
                }
            }

            fn exit_code(&self) -> $crate::error::Code {
                match self {
                    $(Self::$variant(o) => o.exit_code()),*
                }
            }
        }
    };
}
pub(crate) use one_of;

/// Writes the one-line error to stderr. Never panics: `eprintln!` would, if stderr cannot be
/// written (a full disk under a redirect), and the exit code must still reach the caller.
pub fn report(message: &str) {
    // Clipped, because a message may quote an argument of up to 128 KiB (a path, a name).
    let message = crate::error::clip(message, 500);
    let _ = writeln!(io::stderr().lock(), "prose-state: error: {message}");
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
