//! One module per command: each takes its args and what it works on, and returns a value
//! that main renders. Commands never print and never build SQL.

pub mod agent;
pub mod bind;
pub mod decide;
pub mod diff;
pub mod docs;
pub mod doctor;
pub mod exec_append;
pub mod export;
pub mod finish;
pub mod fork;
pub mod fs_import;
pub mod gates;
pub mod get;
pub mod guide;
pub mod history;
pub mod import;
pub mod imports;
pub mod init;
pub mod listing;
pub mod log;
pub mod maintain;
pub mod outcome;
pub mod principals;
pub mod prune;
pub mod query;
pub mod resume;
pub mod rows;
pub mod runs;

use crate::cli::Command;
use crate::context::Context;
use crate::error::{not_found, usage};
use crate::output::Render;
use crate::run::RunPaths;
use crate::store::Store;
use anyhow::Result;
use std::fs::File;
use std::io::{self, IsTerminal, Read};
use std::path::Path;

/// What is done with a command's output: written for a person or a pipe (`main`), or taken
/// as the JSON a tool call returns (`mcp`).
pub trait Sink {
    type Out;
    fn take<R: Run>(&mut self, command: &R, ctx: &Context) -> Self::Out;
}

/// Runs a command that returns its output through `sink`. None for the commands that write
/// their own (`log`, `completions`, `man`) and for the server (`mcp`): their callers run those.
pub fn dispatch<S: Sink>(command: &Command, ctx: &Context, sink: &mut S) -> Option<S::Out> {
    // The commands whose args are their `Run`, then the others (the match stays exhaustive).
    macro_rules! by_args {
        ($($command:ident),*) => {
            match command {
                $(Command::$command(a) => sink.take(a, ctx),)*
                Command::Vacuum => sink.take(&maintain::VacuumCmd, ctx),
                Command::Log(_)
                | Command::Completions(_)
                | Command::Man
                | Command::Mcp(_)
                | Command::Serve(_) => return None,
            }
        };
    }
    Some(by_args!(
        Init, Bind, Get, History, ExecAppend, Query, Gates, Approve, Reject, Principals, Agent,
        Imports, Finish, Runs, Resume, Diff, Stats, Doctor, Checkpoint, Migrate, Prune, Guide,
        Export, Import, Fork
    ))
}

/// A command: it takes its own args and the resolved context, and returns a value that main
/// renders as text or JSON, with the exit code that value stands for.
pub trait Run {
    type Output: Render;
    fn run(&self, ctx: &Context) -> Result<Self::Output>;
}

/// Where a value comes from: `--file PATH`, the VALUE argument, or stdin (`-`, or no VALUE
/// with piped input). Nothing at all, on a terminal, is a usage error. The flag says the value
/// comes from stdin, where an input that ends before its first byte means no value was given
/// (`/dev/null`, an empty pipe): an intentionally empty value is VALUE `""`. A context whose
/// stdin carries a protocol (the MCP server's) never reads it, and `-` is then the value `-`.
pub fn value_source(
    ctx: &Context,
    value: Option<&str>,
    file: Option<&Path>,
) -> Result<(Box<dyn Read>, bool)> {
    let protocol = ctx.reads_no_stdin();
    let reader: Box<dyn Read> = match (file, value) {
        (Some(path), _) => return value_from_file(ctx, path),
        (None, Some("-")) if !protocol => Box::new(io::stdin().lock()),
        (None, Some(value)) => Box::new(io::Cursor::new(value.as_bytes().to_vec())),
        (None, None) if protocol => return Err(usage("no value given: give value or file")),
        (None, None) if !io::stdin().is_terminal() => Box::new(io::stdin().lock()),
        (None, None) => {
            return Err(usage(
                "no value given: give VALUE, --file PATH, or pipe the value on stdin",
            ))
        }
    };
    Ok((reader, !protocol && matches!(value, None | Some("-"))))
}

/// The value of `--file PATH`.
fn value_from_file(ctx: &Context, path: &Path) -> Result<(Box<dyn Read>, bool)> {
    if path.is_dir() {
        return Err(usage(format!("--file is a directory: {}", path.display())));
    }
    let file = File::open(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => not_found(format!("--file not found: {}", path.display())),
        _ => anyhow::Error::new(e).context(format!("could not read --file {}", path.display())),
    })?;
    // The user's prose directory holds the audit key, the page's signing key and the anchors:
    // no value is ever read from there (an agent's `bind --file ~/.prose/audit.key` would put
    // the key where every agent reads it). Checked on the file opened, whatever links led to it.
    if let Some(home) = ctx.opts.wiring.home().and_then(|h| h.canonicalize().ok()) {
        use std::os::fd::AsRawFd;
        let opened = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .or_else(|_| path.canonicalize())
            .ok();
        if opened.is_none_or(|o| o.starts_with(&home)) {
            return Err(crate::error::refused(format!(
                "--file {} is in the user's prose directory ({}), which holds keys: it is never read as a value",
                path.display(),
                home.display()
            )));
        }
    }
    Ok((Box::new(file), false))
}

/// A table with a header of `names` and a row of cells for each of `items`.
fn table_of<T>(
    w: &mut dyn io::Write,
    names: &[impl AsRef<str>],
    items: &[T],
    row: impl Fn(&T) -> Vec<String>,
) -> io::Result<()> {
    let header: Vec<String> = names.iter().map(|s| s.as_ref().to_string()).collect();
    let rows: Vec<Vec<String>> = items.iter().map(row).collect();
    crate::output::table(w, &header, &rows)
}

/// Applies `f` to every run of a command that visits each (`listing::visit_runs`): a run
/// that cannot be read is a warning when there are several runs, and the error when there is
/// one.
fn over_runs<T: Send>(
    runs: &[RunPaths],
    ctx: &Context,
    f: impl Fn(&RunPaths, &mut dyn Store) -> Result<T> + Sync,
) -> Result<(Vec<T>, Vec<String>)> {
    listing::visit_runs(runs, runs.len() > 1, ctx, f)
}
