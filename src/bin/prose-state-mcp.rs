//! `prose-state mcp`: the MCP server, a binary of its own (see src/lib.rs). It takes the
//! command line `prose-state` was given (`prose-state [GLOBAL OPTIONS] mcp --agent NAME`), which
//! `prose-state` hands over by exec.

use prose_state::cli::Command;
use prose_state::context::Context;
use prose_state::output::finish;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match prose_state::parse::parse(std::env::args_os().collect()) {
        Ok(cli) => cli,
        Err(code) => return ExitCode::from(code),
    };
    let Command::Mcp(args) = &cli.command else {
        prose_state::output::report(
            "prose-state-mcp serves `prose-state mcp` only: run prose-state mcp --agent NAME",
        );
        return ExitCode::from(2);
    };
    let ctx = Context::resolve_keeping(&cli.global);
    ExitCode::from(finish(
        prose_state::mcp::serve(args, &cli.global, &ctx).map(|()| prose_state::output::Nothing),
        false,
    ))
}
