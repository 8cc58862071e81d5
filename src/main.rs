//! prose-state: parse, dispatch, render, map errors to exit codes. Nothing else.

mod attach;
mod cli;
mod cmd;
mod error;
mod model;
mod output;
mod run;
mod store;

use anyhow::Result;
use clap::Parser;
use cli::{Cli, Command, Global};
use output::emit;
use std::io;
use std::process::ExitCode;
use std::time::Duration;
use store::{OpenOptions, Store};

fn open_run(g: &Global) -> Result<(run::RunPaths, Box<dyn Store>)> {
    let paths = run::locate(g.root.as_deref(), g.run.as_deref())?;
    let store = store::open(&paths.db, options(g))?;
    Ok((paths, store))
}

fn options(g: &Global) -> OpenOptions {
    OpenOptions {
        busy_timeout: Duration::from_millis(g.busy_timeout),
    }
}

fn dispatch(cli: Cli) -> Result<()> {
    let g = &cli.global;
    let json = g.json;
    match &cli.command {
        Command::Init(args) => emit(cmd::init::run(args, g.root.as_deref(), options(g))?, json)?,
        Command::Bind(args) => {
            let (paths, mut store) = open_run(g)?;
            emit(cmd::bind::run(args, &paths, store.as_mut())?, json)?
        }
        Command::Get(args) => {
            let (paths, mut store) = open_run(g)?;
            if args.explain {
                emit(cmd::get::explain(args, store.as_mut())?, json)?
            } else {
                emit(cmd::get::run(args, &paths, store.as_mut())?, json)?
            }
        }
        Command::ExecAppend(args) => {
            let (_, mut store) = open_run(g)?;
            emit(cmd::exec_append::run(args, store.as_mut())?, json)?
        }
        Command::Query(args) => {
            let (_, mut store) = open_run(g)?;
            emit(cmd::query::run(args, store.as_mut())?, json)?
        }
    }
    Ok(())
}

fn exit_code(e: &anyhow::Error) -> u8 {
    e.chain()
        .find_map(|c| c.downcast_ref::<error::Coded>())
        .map_or(1, |c| c.code as u8)
}

fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// Writes the one-line error to stderr. Never panics: `eprintln!` would, if stderr cannot be
/// written (a full disk under a redirect), and the exit code must still reach the caller.
fn report(message: &str) {
    use std::io::Write;
    // Clipped, because a message may quote an argument of up to 128 KiB (a path, a name).
    let message = error::clip(message, 500);
    let _ = writeln!(io::stderr().lock(), "prose-state: error: {message}");
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
                || matches!(
                    e.kind(),
                    ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                )
            {
                let _ = e.print();
                return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
            }
            // One line, as every other error: clap's first line, then where to look.
            let rendered = e.render().to_string();
            let first = rendered
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("invalid usage")
                .trim_start_matches("error: ");
            report(&format!("{first} (see --help)"));
            return ExitCode::from(2);
        }
    };
    match dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            report(&format!("{e:#}").replace(['\n', '\r'], " "));
            ExitCode::from(exit_code(&e))
        }
    }
}
