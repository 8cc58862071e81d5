//! One module per command: each takes its args and what it works on, and returns a value
//! that main renders. Commands never print and never build SQL.

pub mod agent;
pub mod bind;
pub mod decide;
pub mod docs;
pub mod doctor;
pub mod exec_append;
pub mod finish;
pub mod gates;
pub mod get;
pub mod imports;
pub mod init;
pub mod log;
pub mod maintain;
pub mod prune;
pub mod query;
pub mod resume;
pub mod rows;
pub mod runs;

use crate::context::Context;
use crate::error::{not_found, usage};
use crate::output::Render;
use crate::run::RunPaths;
use crate::store::Store;
use anyhow::Result;
use std::fs::File;
use std::io::{self, IsTerminal, Read};
use std::path::Path;

/// A command: it takes its own args and the resolved context, and returns a value that main
/// renders as text or JSON, with the exit code that value stands for.
pub trait Run {
    type Output: Render;
    fn run(&self, ctx: &Context) -> Result<Self::Output>;
}

/// Where a value comes from: `--file PATH`, the VALUE argument, or stdin (`-`, or no VALUE
/// with piped input). Nothing at all, on a terminal, is a usage error. The flag says the value
/// comes from stdin, where an input that ends before its first byte means no value was given
/// (`/dev/null`, an empty pipe): an intentionally empty value is VALUE `""`.
pub fn value_source(value: Option<&str>, file: Option<&Path>) -> Result<(Box<dyn Read>, bool)> {
    let from_stdin = file.is_none() && matches!(value, None | Some("-"));
    let reader: Box<dyn Read> = match (file, value) {
        (Some(path), _) if path.is_dir() => {
            return Err(usage(format!("--file is a directory: {}", path.display())))
        }
        (Some(path), _) => Box::new(File::open(path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => not_found(format!("--file not found: {}", path.display())),
            _ => anyhow::Error::new(e).context(format!("could not read --file {}", path.display())),
        })?),
        (None, Some("-")) => Box::new(io::stdin().lock()),
        (None, Some(value)) => Box::new(io::Cursor::new(value.as_bytes().to_vec())),
        (None, None) if !io::stdin().is_terminal() => Box::new(io::stdin().lock()),
        (None, None) => {
            return Err(usage(
                "no value given: give VALUE, --file PATH, or pipe the value on stdin",
            ))
        }
    };
    Ok((reader, from_stdin))
}

/// Applies `f` to every run, a few runs at a time on worker threads (each with its own
/// connection: opening a run's database is most of the cost of a cross-run listing), and
/// returns the results in run order. A run that cannot be read becomes a warning when there
/// are several runs, and the error when there is one.
fn over_runs<T: Send>(
    runs: &[RunPaths],
    ctx: &Context,
    f: impl Fn(&RunPaths, &mut dyn Store) -> Result<T> + Sync,
) -> Result<(Vec<T>, Vec<String>)> {
    let progress = crate::term::Progress::new(runs.len());
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8)
        .min(runs.len().max(1));
    let visit = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(run) = runs.get(i) else { break done };
            progress.step();
            done.push((
                i,
                ctx.open(run).and_then(|mut store| f(run, store.as_mut())),
            ));
        }
    };
    let mut results: Vec<(usize, Result<T>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers).map(|_| s.spawn(visit)).collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    results.sort_by_key(|(i, _)| *i);
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    for (i, result) in results {
        match result {
            Ok(v) => out.push(v),
            Err(e) if runs.len() > 1 => warnings.push(format!("skipped run {}: {e:#}", runs[i].id)),
            Err(e) => return Err(e),
        }
    }
    Ok((out, warnings))
}
