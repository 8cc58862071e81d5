//! The command line, parsed fast: every command is a fresh process, and building clap's whole
//! tree (about twenty subcommands, four global options propagated into each) then dropping it
//! was about a quarter of a `get`'s instructions. Only the subcommand argv names is built;
//! help, version and anything that does not parse go through the full definition, with every
//! help text and error message.

use crate::cli::{self, Cli};
use clap::{Args, FromArgMatches};
use std::ffi::OsString;

/// The global options that take a value, to step over when looking for the subcommand.
pub const GLOBAL_VALUE_OPTIONS: &[&str] = &["--run", "--root", "--busy-timeout"];

/// Parses argv, reporting help, version and usage errors itself: Err is then the exit code
/// (0 after help or version, 2 after a usage error).
pub fn parse(args: Vec<OsString>) -> Result<Cli, u8> {
    if let Some(cli) = parse_fast(&args) {
        return Ok(cli);
    }
    use clap::CommandFactory;
    let parsed = with_exit_codes(Cli::command())
        .try_get_matches_from(&args)
        .and_then(|m| Cli::from_arg_matches(&m));
    match parsed {
        Ok(cli) => Ok(cli),
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                return Err(if e.use_stderr() { 2 } else { 0 });
            }
            // One line, as every other error, then where to look.
            crate::output::report(&format!("{} (see --help)", first_paragraph(&e)));
            Err(2)
        }
    }
}

/// Every subcommand's help ends with the exit codes, as the top level's does. Only help and
/// command lines the fast path could not parse build this.
fn with_exit_codes(c: clap::Command) -> clap::Command {
    c.after_help(cli::EXIT_CODES)
        .mut_subcommands(with_exit_codes)
}

/// clap's first paragraph, joined into one line ("...were not provided:" is followed by the
/// names of the missing arguments).
fn first_paragraph(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let first: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .skip_while(|l| l.is_empty())
        .take_while(|l| !l.is_empty())
        .collect();
    let first = first.join(" ");
    let first = first.trim_start_matches("error: ");
    let first = if first.is_empty() {
        "invalid usage".to_string()
    } else {
        first.to_string()
    };
    // Only a command line that did not parse gets here: the suggestion costs nothing on the
    // path of one that does.
    match suggestion(e) {
        Some(s) => format!("{first}: did you mean {s}?"),
        None => first,
    }
}

/// The closest name clap found to an unknown subcommand, option or value (clap lists its
/// candidates from the least to the most similar).
fn suggestion(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    for kind in [
        ContextKind::SuggestedSubcommand,
        ContextKind::SuggestedArg,
        ContextKind::SuggestedValue,
    ] {
        match e.get(kind) {
            Some(ContextValue::String(s)) => return Some(format!("'{s}'")),
            Some(ContextValue::Strings(v)) => {
                if let Some(best) = v.last() {
                    return Some(format!("'{best}'"));
                }
            }
            _ => {}
        }
    }
    None
}

/// The definition that parses argv of one subcommand: the global options and that subcommand
/// alone (None for an unknown name). Built once, it parses any number of argvs
/// ([`parse_with`]).
pub fn command_for(name: &str) -> Option<clap::Command> {
    Some(
        cli::Global::augment_args(clap::Command::new("prose-state"))
            .subcommand(one_subcommand(name)?),
    )
}

/// Parses argv with a definition from [`command_for`], printing nothing: a usage error is its
/// one-line message.
pub fn parse_with(command: &mut clap::Command, args: Vec<OsString>) -> Result<Cli, String> {
    let matches = command
        .try_get_matches_from_mut(args)
        .map_err(|e| first_paragraph(&e))?;
    Cli::from_arg_matches(&matches).map_err(|e| first_paragraph(&e))
}

/// The subcommand argv names, built alone (None for an unknown name).
fn one_subcommand(name: &str) -> Option<clap::Command> {
    use clap::Command as C;
    Some(match name {
        "init" => cli::InitArgs::augment_args(C::new("init")),
        "bind" => cli::BindArgs::augment_args(C::new("bind")),
        "get" => cli::GetArgs::augment_args(C::new("get")),
        "history" => cli::HistoryArgs::augment_args(C::new("history")),
        "exec-append" => cli::ExecAppendArgs::augment_args(C::new("exec-append")),
        "query" => cli::QueryArgs::augment_args(C::new("query")),
        "gates" => cli::GatesArgs::augment_args(C::new("gates")),
        "approve" => cli::ApproveArgs::augment_args(C::new("approve")),
        "reject" => cli::RejectArgs::augment_args(C::new("reject")),
        "principals" => cli::PrincipalsArgs::augment_args(C::new("principals")),
        "agent" => cli::AgentArgs::augment_args(C::new("agent")),
        "imports" => cli::ImportsArgs::augment_args(C::new("imports")),
        "finish" => cli::FinishArgs::augment_args(C::new("finish")),
        "runs" => cli::RunsArgs::augment_args(C::new("runs")),
        "log" => cli::LogArgs::augment_args(C::new("log")),
        "diff" => cli::DiffArgs::augment_args(C::new("diff")),
        "completions" => cli::CompletionsArgs::augment_args(C::new("completions")),
        "doctor" => cli::DoctorArgs::augment_args(C::new("doctor")),
        "checkpoint" => cli::CheckpointArgs::augment_args(C::new("checkpoint")),
        "prune" => cli::PruneArgs::augment_args(C::new("prune")),
        "migrate" => cli::MigrateArgs::augment_args(C::new("migrate")),
        "mcp" => cli::McpArgs::augment_args(C::new("mcp")),
        "serve" => cli::ServeArgs::augment_args(C::new("serve")),
        "guide" => cli::GuideArgs::augment_args(C::new("guide")),
        "export" => cli::ExportArgs::augment_args(C::new("export")),
        "import" => cli::ImportArgs::augment_args(C::new("import")),
        "fork" => cli::ForkArgs::augment_args(C::new("fork")),
        "resume" => cli::ResumeArgs::augment_args(C::new("resume")),
        "man" => C::new("man"),
        "stats" => cli::StatsArgs::augment_args(C::new("stats")),
        "vacuum" => C::new("vacuum"),
        _ => return None,
    })
}

/// Parses argv by building only the subcommand it names; None when that is not enough
/// (help, version, or anything that does not parse), and the full parse must decide.
pub fn parse_fast(args: &[OsString]) -> Option<Cli> {
    let mut name = None;
    let mut skip_value = false;
    for a in args.iter().skip(1) {
        let a = a.to_str()?;
        if matches!(a, "-h" | "--help" | "-V" | "--version" | "help") {
            return None;
        }
        if skip_value {
            skip_value = false;
        } else if GLOBAL_VALUE_OPTIONS.contains(&a) {
            skip_value = true;
        } else if !a.starts_with('-') {
            name = Some(a);
            break;
        }
    }
    let mut command = command_for(name?)?;
    let matches = command.try_get_matches_from_mut(args).ok()?;
    let parsed = Cli::from_arg_matches(&matches).ok();
    // The process ends soon: freeing the tree node by node is work for nothing.
    std::mem::forget(command);
    parsed
}

/// The full definition, for tests.
#[cfg(test)]
fn full() -> clap::Command {
    use clap::CommandFactory;
    Cli::command()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(args: &[&str]) -> Vec<OsString> {
        std::iter::once("prose-state")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect()
    }

    /// Every subcommand of the full definition has a fast-path builder (a missing one would
    /// still work, through the full parse, only slower).
    #[test]
    fn fast_path_covers_every_subcommand() {
        for sub in full().get_subcommands() {
            let name = sub.get_name();
            assert!(one_subcommand(name).is_some(), "{name}");
        }
    }

    /// The global options that take a value are exactly those clap declares.
    #[test]
    fn global_value_options_match_the_definition() {
        let mut declared: Vec<String> = full()
            .get_arguments()
            .filter(|a| a.is_global_set() && a.get_action().takes_values())
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect();
        declared.sort();
        let mut ours: Vec<String> = GLOBAL_VALUE_OPTIONS.iter().map(|s| s.to_string()).collect();
        ours.sort();
        assert_eq!(ours, declared);
    }

    /// Over argvs of every command and option form the suite uses, the fast parse and the
    /// full one agree: the same result, or the fast one steps aside.
    #[test]
    fn fast_and_full_parse_agree() {
        // One argv a line, split at spaces.
        let corpus = [
            "init",
            "--json init program.prose --run-id r1 --backend postgres",
            "--run r1 bind x value",
            "bind --run r1 x --execution-id 3 --kind const",
            "--root /tmp/p --run r1 bind big --attach-over 10 --summary s",
            "bind x -",
            "bind x --file f.txt --source let_x=1",
            "--busy-timeout 200 get x",
            "get x --execution-id 4 --explain",
            "--json get -- -weird",
            "exec-append --index 1 --text t --status executing",
            "exec-append --index 2 --text t --status completed --parent 1 --metadata {} --key k",
            "query SELECT_1",
            "gates",
            "gates --status all --expiring 1h",
            "gates create g --prompt p --allow alice --timeout 4h",
            "gates show r1 g --as bob",
            "gates wait r1 g --poll 1s --timeout 60s",
            "gates audit --gate g",
            "gates verify",
            "gates verify --signed",
            "approve r1 g --yes --as alice --comment ok",
            "approve r1 g --reject --reason no",
            "reject r1 g --reason no -y",
            "agent --scope project remember a m",
            "agent memory a --scope user --home /tmp/h",
            "agent segment a --prompt p --summary s",
            "agent list",
            "imports",
            "imports add research --source u --inputs-schema {} --replace",
            "finish --status failed --error boom",
            "runs --status running --limit 5",
            "resume",
            "log --follow --poll-ms 100",
            "diff r1 r2",
            "--json diff r1 r2 --backend-b postgres --name x --limit 5 --cursor 20 --exit-code",
            "diff r1 r2 --all",
            "completions bash",
            "man",
            "stats",
            "stats --scan",
            "doctor --stale 2 --fix",
            "checkpoint --mode full",
            "vacuum",
            "migrate --yes",
            "prune --keep-days 30 --keep-n 1 --yes --archive a",
            "--help",
            "bind --help",
            "nope",
            "bind",
            "get x --no-such-option",
        ];
        for line in corpus {
            let args: Vec<&str> = line.split_whitespace().collect();
            let argv = argv(&args);
            let fast = parse_fast(&argv).map(|c| format!("{c:?}"));
            let full = <Cli as clap::Parser>::try_parse_from(&argv)
                .ok()
                .map(|c| format!("{c:?}"));
            if fast.is_some() {
                assert_eq!(fast, full, "{args:?}");
            }
        }
    }
}
