//! `prose-state serve`: the approval page, a binary of its own (see src/lib.rs). It takes the
//! command line `prose-state` was given (`prose-state [GLOBAL OPTIONS] serve [--listen ADDR]`),
//! which `prose-state` hands over by exec.

use prose_state::cli::Command;
use prose_state::context::Context;
use prose_state::output::finish;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match prose_state::parse::parse(std::env::args_os().collect()) {
        Ok(cli) => cli,
        Err(code) => return ExitCode::from(code),
    };
    let Command::Serve(args) = &cli.command else {
        prose_state::output::report(
            "prose-state-serve serves `prose-state serve` only: run prose-state serve",
        );
        return ExitCode::from(2);
    };
    let ctx = Context::resolve(&cli.global);
    ExitCode::from(finish(
        prose_state::serve::serve(args, &cli.global, ctx).map(|()| prose_state::output::Nothing),
        false,
    ))
}
