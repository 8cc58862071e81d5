//! `completions` and `man`: generated from the command-line definitions.

use crate::cli::{Cli, CompletionsArgs};
use crate::context::Context;
use crate::output::Render;
use anyhow::Result;
use serde::{Serialize, Serializer};
use std::io::{self, Write};

/// Generated text, written as it is (never as JSON).
pub struct Generated(Vec<u8>);

impl Serialize for Generated {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&String::from_utf8_lossy(&self.0))
    }
}

impl Render for Generated {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        w.write_all(&self.0)
    }
}

impl super::Run for CompletionsArgs {
    type Output = Generated;
    // Rendered into memory first: clap_complete panics when its writer fails, and a closed
    // pipe (`| head`) must stay a quiet exit 0.
    fn run(&self, _ctx: &Context) -> Result<Generated> {
        use clap::CommandFactory;
        let mut script = Vec::new();
        clap_complete::generate(self.shell, &mut Cli::command(), "prose-state", &mut script);
        Ok(Generated(script))
    }
}

/// `man` (no options).
pub struct Man;

impl super::Run for Man {
    type Output = Generated;
    fn run(&self, _ctx: &Context) -> Result<Generated> {
        use clap::CommandFactory;
        let mut page = Vec::new();
        clap_mangen::Man::new(Cli::command()).render(&mut page)?;
        Ok(Generated(page))
    }
}

/// How docs/commands.md is refreshed, named in the page itself and in the test that keeps it
/// current (tests/readme.rs).
pub const REFERENCE_REFRESH: &str = "PROSE_STATE_BLESS=1 cargo test --test cli readme::";

/// The command reference, docs/commands.md: every command and subcommand of the command-line
/// definition, with its usage line, its description and every argument and option with its
/// help, in Markdown. Generated from [`Cli`] alone, so it is the same on every machine.
pub fn reference() -> String {
    use clap::CommandFactory;
    let mut root = Cli::command().term_width(0);
    root.build();
    let mut out = String::new();
    out.push_str("# Command reference\n\n");
    out.push_str(&format!(
        "<!-- Generated from src/cli.rs (prose_state::cmd::docs::reference); do not edit by \
         hand. Refresh with: {REFERENCE_REFRESH} -->\n\n"
    ));
    out.push_str(
        "Every command and subcommand of `prose-state`, generated from its command-line \
         definition (`src/cli.rs`): the usage line, what the command does, and every argument \
         and option with its help, as `prose-state COMMAND --help` gives them. What the \
         commands do in depth, and the rules behind them, is in the topic pages listed in the \
         [README](../README.md#where-to-read-next).\n\n",
    );
    let mut commands = Vec::new();
    collect(&root, globals(&root).collect(), &mut commands);
    out.push_str("## Commands\n\n");
    for (path, cmd, _) in &commands {
        out.push_str(&link(path, path, cmd));
    }
    out.push_str("\n## Global options\n\nAccepted by every command, before or after its name:\n\n");
    for arg in root.get_arguments().filter(|a| shown(a)) {
        out.push_str(&arg_item(arg));
    }
    out.push_str("- `-h, --help`: print help (`-h` a summary, `--help` in full), ending with the exit codes\n");
    out.push_str("\n`prose-state -V` (`--version`), before any command, prints the version.\n");
    for (path, cmd, inherited) in &commands {
        out.push_str(&format!("\n## `{path}`\n\n"));
        if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
            out.push_str(&format!("{}\n\n", markdown(about.to_string().trim_end())));
        }
        let usage = cmd.clone().render_usage().to_string();
        out.push_str(&format!("```text\n{}\n```\n", usage.trim_end()));
        // Options a parent defines for all its subcommands are listed once, at the parent.
        let own = |a: &&clap::Arg| shown(a) && !inherited.iter().any(|i| i == a.get_id().as_str());
        let (positional, options): (Vec<_>, Vec<_>) = cmd
            .get_arguments()
            .filter(own)
            .partition(|a| a.is_positional());
        for (title, args) in [("Arguments", positional), ("Options", options)] {
            if !args.is_empty() {
                out.push_str(&format!("\n{title}:\n\n"));
                for arg in args {
                    out.push_str(&arg_item(arg));
                }
            }
        }
        let subs: Vec<_> = cmd.get_subcommands().filter(|s| listed(s)).collect();
        if !subs.is_empty() {
            out.push_str("\nSubcommands:\n\n");
            for sub in subs {
                let sub_path = format!("{path} {}", sub.get_name());
                out.push_str(&link(sub.get_name(), &sub_path, sub));
            }
        }
    }
    out.push_str("\n## Exit codes\n\n");
    out.push_str(crate::cli::EXIT_CODES);
    out.push_str(" Each is explained in [exit codes](exit-codes.md).\n");
    out
}

/// Every listed command under `cmd`, depth first, with its full name and the ids of the
/// global options its ancestors define (`inherited`: `cmd`'s and those above it).
fn collect(
    cmd: &clap::Command,
    inherited: Vec<String>,
    out: &mut Vec<(String, clap::Command, Vec<String>)>,
) {
    for sub in cmd.get_subcommands().filter(|s| listed(s)) {
        let path = format!(
            "{} {}",
            cmd.get_bin_name().unwrap_or(cmd.get_name()),
            sub.get_name()
        );
        let mut below = inherited.clone();
        below.extend(globals(sub));
        below.sort();
        below.dedup();
        out.push((path, sub.clone(), inherited.clone()));
        collect(sub, below, out);
    }
}

/// The ids of the global options `cmd` defines.
fn globals(cmd: &clap::Command) -> impl Iterator<Item = String> + '_ {
    let global = cmd.get_arguments().filter(|a| a.is_global_set());
    global.map(|a| a.get_id().to_string())
}

/// A list item naming a command (`name`), linked to its section (`path`), with what it does.
fn link(name: &str, path: &str, cmd: &clap::Command) -> String {
    let about = cmd.get_about().map(|a| a.to_string()).unwrap_or_default();
    format!(
        "- [`{name}`](#{}): {}\n",
        slug(path),
        markdown(&one_line(&about))
    )
}

/// A subcommand the reference lists: not hidden, and not clap's own `help`.
fn listed(cmd: &clap::Command) -> bool {
    !cmd.is_hide_set() && cmd.get_name() != "help"
}

/// An argument the reference lists: not hidden, and not clap's own help and version flags
/// (the global options section names them once).
fn shown(arg: &clap::Arg) -> bool {
    !arg.is_hide_set() && !matches!(arg.get_id().as_str(), "help" | "version")
}

/// One list item: the argument as it is typed, its help, and its possible values, default
/// and environment variable.
fn arg_item(arg: &clap::Arg) -> String {
    let short = arg.get_short().map(|s| format!("-{s}"));
    let names: Vec<String> = short
        .into_iter()
        .chain(arg.get_long().map(|l| format!("--{l}")))
        .collect();
    let value_names: Vec<String> = arg
        .get_value_names()
        .map(|v| v.iter().map(|n| n.to_string()).collect())
        .unwrap_or_else(|| vec![arg.get_id().as_str().to_uppercase()]);
    let takes_value = arg.get_action().takes_values();
    let typed = if arg.is_positional() {
        let multiple = arg.get_num_args().is_some_and(|n| n.max_values() > 1);
        let name = value_names.join(" ");
        let name = if arg.is_required_set() {
            format!("<{name}>")
        } else {
            format!("[{name}]")
        };
        if multiple {
            format!("{name}...")
        } else {
            name
        }
    } else {
        let values = value_names.iter().filter(|_| takes_value);
        names.join(", ") + &values.map(|v| format!(" <{v}>")).collect::<String>()
    };
    let help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| markdown(&one_line(&h.to_string())))
        .unwrap_or_default();
    let mut item = format!("- `{typed}`");
    if !help.is_empty() {
        item.push_str(&format!(": {help}"));
    }
    let values: Vec<_> = arg
        .get_possible_values()
        .into_iter()
        .filter(|v| !v.is_hide_set())
        .collect();
    let mut facts = Vec::new();
    if takes_value && !arg.is_hide_default_value_set() && !arg.get_default_values().is_empty() {
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|d| d.to_string_lossy().into_owned())
            .collect();
        facts.push(format!("default `{}`", defaults.join(",")));
    }
    if let Some(env) = arg.get_env().filter(|_| !arg.is_hide_env_set()) {
        facts.push(format!("env `{}`", env.to_string_lossy()));
    }
    if !facts.is_empty() {
        item.push_str(&format!(" ({})", facts.join("; ")));
    }
    item.push('\n');
    if values.iter().any(|v| v.get_help().is_some()) {
        for v in &values {
            match v.get_help() {
                Some(h) => item.push_str(&format!(
                    "  - `{}`: {}\n",
                    v.get_name(),
                    markdown(&one_line(&h.to_string()))
                )),
                None => item.push_str(&format!("  - `{}`\n", v.get_name())),
            }
        }
    } else if !values.is_empty() && takes_value {
        let names: Vec<String> = values
            .iter()
            .map(|v| format!("`{}`", v.get_name()))
            .collect();
        item.push_str(&format!("  - possible values: {}\n", names.join(", ")));
    }
    item
}

/// Help text as Markdown that shows it as written: outside `code spans`, the characters a
/// renderer would take for HTML or emphasis are escaped.
fn markdown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_code = false;
    for c in text.chars() {
        match c {
            '`' => in_code = !in_code,
            '<' | '*' | '\\' if !in_code => out.push('\\'),
            _ => {}
        }
        out.push(c);
    }
    out
}

/// A help text on one line: clap keeps a doc comment's paragraphs apart with blank lines.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The anchor a Markdown renderer (GitHub's rule) gives a heading: lower case, spaces as
/// hyphens, every other character but letters, digits, `_` and `-` dropped.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c),
            _ => None,
        })
        .collect()
}
