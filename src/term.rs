//! What prose-state asks of a person at a terminal: the confirmation before a decision, and
//! a progress count on stderr for work across many runs.

use crate::output::{visible, visible_line};
use anyhow::Result;
use std::io::{self, BufRead, IsTerminal, Write};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Whether stdin is a terminal (a person can be asked).
pub fn interactive() -> bool {
    io::stdin().is_terminal()
}

/// What a person is asked to decide: a gate, as stored.
pub struct Asked<'a> {
    pub gate: &'a str,
    pub run: &'a str,
    pub prompt: &'a str,
    pub timeout_at: Option<&'a str>,
}

/// Shows a gate's prompt on the terminal and asks for a yes.
pub fn confirm(gate: &Asked, action: &str) -> Result<bool> {
    let mut err = io::stderr().lock();
    writeln!(
        err,
        "Gate {} (run {}):",
        visible_line(gate.gate),
        visible_line(gate.run)
    )?;
    // The prompt as stored, every hidden character shown: what is approved is what is seen.
    for line in visible(gate.prompt).lines() {
        writeln!(err, "  {line}")?;
    }
    if let Some(at) = gate.timeout_at {
        writeln!(err, "Deadline: {} UTC", visible_line(at))?;
    }
    write!(err, "{action} this gate? [y/N] ")?;
    err.flush()?;
    let mut answer = String::new();
    io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

/// Below this many runs, work across runs is quick enough to need no progress line.
const PROGRESS_OVER: usize = 20;

/// Counts the runs visited on stderr (`12/240 runs`), when stderr is a terminal and the work
/// is long; cleared when dropped.
pub struct Progress {
    total: usize,
    done: AtomicUsize,
    shown: bool,
}

impl Progress {
    pub fn new(total: usize) -> Self {
        Progress {
            total,
            done: AtomicUsize::new(0),
            shown: total > PROGRESS_OVER && io::stderr().is_terminal(),
        }
    }

    pub fn step(&self) {
        if self.shown {
            let n = self.done.fetch_add(1, Ordering::Relaxed) + 1;
            let _ = write!(io::stderr().lock(), "\r{n}/{} runs", self.total);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if self.shown {
            let _ = write!(io::stderr().lock(), "\r\x1b[K");
        }
    }
}
