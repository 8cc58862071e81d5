//! prose-state: parse → resolve the context → run the command → render → exit.

mod attach;
mod cli;
mod cmd;
mod context;
mod error;
mod mcp;
mod model;
mod output;
mod parse;
mod run;
mod seal;
mod store;
mod term;

use cli::Command;
use cmd::Run;
use context::Context;
use output::finish;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match parse::parse(std::env::args_os().collect()) {
        Ok(cli) => cli,
        Err(code) => return ExitCode::from(code),
    };
    let ctx = Context::resolve(&cli.global);
    ExitCode::from(match &cli.command {
        Command::Log(a) => {
            let mut out = |line| output::emit(line, ctx.json);
            finish(cmd::log::follow(a, &ctx, &mut out).map(|()| Nothing), false)
        }
        // Generated text is written as it is, never as JSON.
        Command::Completions(a) => finish(a.run(&ctx), false),
        Command::Man => finish(cmd::docs::Man.run(&ctx), false),
        Command::Mcp(a) => finish(mcp::serve(a, &cli.global, &ctx).map(|()| Nothing), false),
        other => cmd::dispatch(other, &ctx, &mut Terminal).unwrap_or(2),
    })
}

/// Writes each command's output for a person or a pipe, and gives its exit code.
struct Terminal;

impl cmd::Sink for Terminal {
    type Out = u8;
    fn take<R: Run>(&mut self, command: &R, ctx: &Context) -> u8 {
        finish(command.run(ctx), ctx.json)
    }
}

/// The output of a command that wrote its own (`log`).
#[derive(serde::Serialize)]
struct Nothing;

impl output::Render for Nothing {
    fn text(self, _: &mut dyn std::io::Write, _: bool) -> std::io::Result<()> {
        Ok(())
    }
}
