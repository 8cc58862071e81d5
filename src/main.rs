//! prose-state: parse → resolve the context → run the command → render → exit.

use prose_state::cli::Command;
use prose_state::cmd::{self, Run};
use prose_state::context::Context;
use prose_state::output::{self, finish, Nothing};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match prose_state::parse::parse(std::env::args_os().collect()) {
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
        // The server is a binary of its own, next to this one (see src/lib.rs).
        Command::Mcp(_) => finish(become_server("prose-state-mcp").map(|()| Nothing), false),
        Command::Serve(_) => finish(become_server("prose-state-serve").map(|()| Nothing), false),
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

/// Becomes one of the servers installed next to this binary (`prose-state-mcp`,
/// `prose-state-serve`), with the same command line.
fn become_server(name: &str) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let me = std::env::current_exe()?;
    let server = me.with_file_name(name);
    let err = std::process::Command::new(&server)
        .args(std::env::args_os().skip(1))
        .exec();
    Err(anyhow::anyhow!(
        "could not start the server {} ({err}): every install of prose-state puts it beside prose-state (README.md#install)",
        server.display()
    ))
}
