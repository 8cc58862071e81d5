//! prose-state: parse → resolve the context → run the command → render → exit.

mod attach;
mod cli;
mod cmd;
mod context;
mod error;
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
        Command::Init(a) => run(a, &ctx),
        Command::Bind(a) => run(a, &ctx),
        Command::Get(a) => run(a, &ctx),
        Command::ExecAppend(a) => run(a, &ctx),
        Command::Query(a) => run(a, &ctx),
        Command::Gates(a) => run(a, &ctx),
        Command::Approve(a) => run(a, &ctx),
        Command::Reject(a) => run(a, &ctx),
        Command::Agent(a) => run(a, &ctx),
        Command::Imports(a) => run(a, &ctx),
        Command::Finish(a) => run(a, &ctx),
        Command::Runs(a) => run(a, &ctx),
        Command::Resume => run(&cmd::resume::Resume, &ctx),
        Command::Log(a) => {
            let mut out = |line| output::emit(line, ctx.json);
            finish(cmd::log::follow(a, &ctx, &mut out).map(|()| Nothing), false)
        }
        // Generated text is written as it is, never as JSON.
        Command::Completions(a) => finish(a.run(&ctx), false),
        Command::Man => finish(cmd::docs::Man.run(&ctx), false),
        Command::Stats => run(&cmd::maintain::StatsCmd, &ctx),
        Command::Doctor(a) => run(a, &ctx),
        Command::Checkpoint(a) => run(a, &ctx),
        Command::Vacuum => run(&cmd::maintain::VacuumCmd, &ctx),
        Command::Migrate(a) => run(a, &ctx),
        Command::Prune(a) => run(a, &ctx),
    })
}

fn run<R: Run>(command: &R, ctx: &Context) -> u8 {
    finish(command.run(ctx), ctx.json)
}

/// The output of a command that wrote its own (`log`).
#[derive(serde::Serialize)]
struct Nothing;

impl output::Render for Nothing {
    fn text(self, _: &mut dyn std::io::Write, _: bool) -> std::io::Result<()> {
        Ok(())
    }
}
