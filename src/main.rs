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
use cli::{Cli, Command, GatesCommand, Global};
use output::emit;
use std::io::{self, IsTerminal};
use std::process::ExitCode;
use std::time::Duration;
use store::{OpenOptions, Store};

fn open_run(g: &Global) -> Result<(run::RunPaths, Box<dyn Store>)> {
    open_named(g, g.run.as_deref())
}

/// Opens the run a command names: its directory here, or, for a run id that has none here,
/// the run on the project's PostgreSQL server (a run made from another machine).
fn open_named(g: &Global, run_arg: Option<&str>) -> Result<(run::RunPaths, Box<dyn Store>)> {
    let opts = options(g);
    match run::locate(g.root.as_deref(), run_arg) {
        Ok(paths) => {
            let store = store::open(&paths, opts)?;
            Ok((paths, store))
        }
        Err(e) => {
            let runs_dir = run::runs_dir(g.root.as_deref());
            let prose_dir = runs_dir
                .parent()
                .map(std::path::Path::to_path_buf)
                .unwrap_or_default();
            match run_arg {
                Some(id)
                    if exit_code(&e) == error::Code::NotFound as u8
                        && model::check_run_id(id).is_ok()
                        && store::project_uses_postgres(&prose_dir) =>
                {
                    let store = store::open_server_run(&prose_dir, id, opts)?;
                    Ok((run::RunPaths::in_dir(runs_dir.join(id)), store))
                }
                _ => Err(e),
            }
        }
    }
}

fn options(g: &Global) -> OpenOptions {
    OpenOptions {
        busy_timeout: Duration::from_millis(g.busy_timeout),
    }
}

/// The principal acting: `--as`/PROSE_PRINCIPAL, else the login name.
fn principal(arg: &cli::PrincipalArg) -> String {
    // A principal given explicitly is used as given (an empty one is then refused); only
    // when none is given does the login name stand in.
    arg.principal.clone().unwrap_or_else(|| {
        std::env::var("USER")
            .ok()
            .or_else(|| std::env::var("LOGNAME").ok())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "unknown".to_string())
    })
}

/// Shows a gate's prompt on the terminal and asks for a yes.
fn confirm_on_terminal(gate: &store::GateRow, action: &str) -> Result<bool> {
    use std::io::{BufRead, Write};
    let mut err = io::stderr().lock();
    writeln!(
        err,
        "Gate {} (run {}):",
        gate.id,
        gate.run_id.as_deref().unwrap_or("-")
    )?;
    for line in gate.prompt.lines() {
        writeln!(err, "  {line}")?;
    }
    if let Some(at) = &gate.timeout_at {
        writeln!(err, "Deadline: {at} UTC")?;
    }
    write!(err, "{action} this gate? [y/N] ")?;
    err.flush()?;
    let mut answer = String::new();
    io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

fn dispatch(cli: Cli) -> Result<u8> {
    let g = &cli.global;
    let json = g.json;
    let opts = options(g);
    let prose_dir = run::project_agents_db(g.root.as_deref())
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    // A run with a directory here opens by what the directory records; a run known only to
    // the project's PostgreSQL server opens there.
    let open = |paths: &run::RunPaths| {
        if paths.exists() {
            store::open(paths, opts)
        } else {
            store::open_server_run(&prose_dir, &paths.id, opts)
        }
    };
    // The runs a cross-run command visits: the one given, or every run under the root.
    let runs = || -> Result<Vec<run::RunPaths>> {
        match &g.run {
            Some(r) => Ok(vec![run::locate(g.root.as_deref(), Some(r))?]),
            None => all_runs(g, opts),
        }
    };
    match &cli.command {
        Command::Init(args) => emit(cmd::init::run(args, g.root.as_deref(), opts)?, json)?,
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
        Command::Gates(args) => match &args.command {
            None => emit(cmd::gates::list(&args.list, &runs()?, &open)?, json)?,
            Some(GatesCommand::Create(a)) => {
                let (_, mut store) = open_run(g)?;
                emit(cmd::gates::create(a, store.as_mut())?, json)?
            }
            Some(GatesCommand::Show(a)) => {
                let (_, mut store) = open_named(g, Some(&a.run))?;
                let viewer = principal(&a.principal);
                cmd::decide::check_principal(&viewer)?;
                emit(cmd::gates::show(&a.gate, &viewer, store.as_mut())?, json)?
            }
            Some(GatesCommand::Wait(a)) => {
                let reopen = || open_named(g, Some(&a.run)).map(|(_, s)| s);
                let waited = cmd::gates::wait(a, &reopen)?;
                let code = waited.exit_code();
                emit(waited, json)?;
                return Ok(code);
            }
            Some(GatesCommand::Audit(a)) => emit(cmd::gates::audit(a, &runs()?, &open)?, json)?,
            Some(GatesCommand::Verify) => {
                let verified = cmd::gates::verify(&runs()?, &open)?;
                let code = verified.exit_code();
                emit(verified, json)?;
                return Ok(code);
            }
        },
        Command::Approve(a) => {
            let who = principal(&a.principal);
            let request = cmd::decide::DecideRequest {
                gate: &a.gate,
                approve: !a.reject,
                principal: &who,
                comment: if a.reject {
                    a.reason.as_deref()
                } else {
                    a.comment.as_deref()
                },
                yes: a.yes,
                interactive: io::stdin().is_terminal(),
            };
            decide(g, &a.run, &request, json)?
        }
        Command::Reject(a) => {
            let who = principal(&a.principal);
            let request = cmd::decide::DecideRequest {
                gate: &a.gate,
                approve: false,
                principal: &who,
                comment: Some(&a.reason),
                yes: a.yes,
                interactive: io::stdin().is_terminal(),
            };
            decide(g, &a.run, &request, json)?
        }
        Command::Agent(a) => agent(g, a, json)?,
        Command::Imports(a) => {
            let (_, mut store) = open_run(g)?;
            match &a.command {
                None => emit(cmd::imports::list(store.as_mut())?, json)?,
                Some(cli::ImportsCommand::Add {
                    alias,
                    source,
                    inputs_schema,
                    outputs_schema,
                    replace,
                }) => {
                    let request = cmd::imports::AddRequest {
                        alias,
                        source,
                        inputs_schema: inputs_schema.as_deref(),
                        outputs_schema: outputs_schema.as_deref(),
                        replace: *replace,
                    };
                    emit(cmd::imports::add(&request, store.as_mut())?, json)?
                }
            }
        }
        Command::Finish(a) => {
            let (_, mut store) = open_run(g)?;
            emit(cmd::finish::run(a, store.as_mut())?, json)?
        }
        Command::Runs(a) => emit(cmd::runs::run(a, &all_runs(g, opts)?, &open)?, json)?,
        Command::Resume => {
            let (paths, mut store) = open_run(g)?;
            // Project and user agents too, where their databases exist (never created here).
            let mut others = Vec::new();
            let project = run::project_agents_db(g.root.as_deref());
            let prose_dir = project
                .parent()
                .map(std::path::Path::to_path_buf)
                .unwrap_or_default();
            if store::project_uses_postgres(&prose_dir) {
                others.push((
                    "project",
                    store::open_project_agents_pg(&prose_dir, opts)?.agents()?,
                ));
            } else if project.is_file() {
                others.push((
                    "project",
                    store::open_agents(&project, opts, false)?.agents()?,
                ));
            }
            if let Some(user) = home_dir(None)
                .map(|h| run::user_agents_db(&h))
                .filter(|d| d.is_file())
            {
                others.push(("user", store::open_agents(&user, opts, false)?.agents()?));
            }
            emit(cmd::resume::run(&paths, store.as_mut(), others)?, json)?
        }
        Command::Log(a) => {
            let (_, mut store) = open_run(g)?;
            let mut log = cmd::log::Log::default();
            loop {
                for line in log.next(store.as_mut())? {
                    emit(line, json)?;
                }
                if !a.follow {
                    break;
                }
                std::thread::sleep(Duration::from_millis(a.poll_ms));
            }
        }
        // Rendered into memory first: clap_complete panics when its writer fails, and a
        // closed pipe (`| head`) must stay a quiet exit 0.
        Command::Completions(a) => {
            use clap::CommandFactory;
            let mut script = Vec::new();
            clap_complete::generate(a.shell, &mut Cli::command(), "prose-state", &mut script);
            write_stdout(&script)?;
        }
        Command::Stats => {
            let all = runs()?;
            let result = cmd::maintain::stats(&all, &with_progress(all.len(), &open));
            clear_progress(all.len());
            emit(result?, json)?
        }
        Command::Doctor(a) => {
            let request = cmd::doctor::DoctorRequest {
                stale_hours: a.stale,
                fix: a.fix,
                root: g.root.clone(),
            };
            let all = runs()?;
            let diagnosis = cmd::doctor::run(&request, &all, &with_progress(all.len(), &open));
            clear_progress(all.len());
            let diagnosis = diagnosis?;
            let code = diagnosis.exit_code();
            emit(diagnosis, json)?;
            return Ok(code);
        }
        Command::Checkpoint(a) => {
            let mode = match a.mode {
                cli::CheckpointMode::Passive => "passive",
                cli::CheckpointMode::Full => "full",
                cli::CheckpointMode::Restart => "restart",
                cli::CheckpointMode::Truncate => "truncate",
            };
            emit(cmd::maintain::checkpoint(mode, &runs()?, &open)?, json)?
        }
        Command::Vacuum => emit(cmd::maintain::vacuum(&runs()?, &open)?, json)?,
        Command::Migrate(a) => emit(cmd::maintain::migrate(a.yes, &runs()?, &open)?, json)?,
        Command::Prune(a) => {
            let request = cmd::prune::PruneRequest {
                keep_days: a.keep_days,
                keep_n: a.keep_n,
                yes: a.yes,
                archive: a.archive.clone(),
            };
            emit(
                cmd::prune::run(&request, &run::all_runs(g.root.as_deref())?, &open)?,
                json,
            )?
        }
        Command::Man => {
            use clap::CommandFactory;
            let mut page = Vec::new();
            clap_mangen::Man::new(Cli::command()).render(&mut page)?;
            write_stdout(&page)?;
        }
    }
    Ok(0)
}

/// Below this many runs, work across runs is quick enough to need no progress line.
const PROGRESS_OVER: usize = 20;

/// Wraps a run opener to count the runs visited on stderr (`12/240 runs`), when stderr is a
/// terminal and the work is long; commands stay silent, main draws the line.
fn with_progress<'a>(
    total: usize,
    open: &'a (dyn Fn(&run::RunPaths) -> Result<Box<dyn Store>> + Sync),
) -> impl Fn(&run::RunPaths) -> Result<Box<dyn Store>> + Sync + 'a {
    let show = total > PROGRESS_OVER && io::stderr().is_terminal();
    let done = std::sync::atomic::AtomicUsize::new(0);
    move |paths| {
        if show {
            use std::io::Write;
            let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            let _ = write!(io::stderr().lock(), "\r{n}/{total} runs");
        }
        open(paths)
    }
}

fn clear_progress(total: usize) {
    if total > PROGRESS_OVER && io::stderr().is_terminal() {
        use std::io::Write;
        let _ = write!(io::stderr().lock(), "\r\x1b[K");
    }
}

fn write_stdout(bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut out = io::stdout().lock();
    out.write_all(bytes)?;
    out.flush()
}

/// Every run under the root, and the runs on the project's PostgreSQL server that have no
/// directory here.
fn all_runs(g: &Global, opts: OpenOptions) -> Result<Vec<run::RunPaths>> {
    let mut runs = run::all_runs(g.root.as_deref())?;
    let runs_dir = run::runs_dir(g.root.as_deref());
    let prose_dir = runs_dir
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    for id in store::server_run_ids(&prose_dir, opts)? {
        // An id written on the server by other means must not become a path elsewhere.
        if model::check_run_id(&id).is_err() {
            continue;
        }
        if !runs.iter().any(|r| r.id == id) {
            runs.push(run::RunPaths::in_dir(runs_dir.join(&id)));
        }
    }
    runs.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(runs)
}

/// The home directory for user-scoped agents: --home / PROSE_HOME, else HOME.
fn home_dir(arg: Option<&std::path::Path>) -> Option<std::path::PathBuf> {
    arg.map(std::path::Path::to_path_buf)
        .or_else(|| std::env::var_os("PROSE_HOME").map(Into::into))
        .or_else(|| std::env::var_os("HOME").map(Into::into))
        .filter(|h: &std::path::PathBuf| !h.as_os_str().is_empty())
}

fn agent(g: &Global, a: &cli::AgentArgs, json: bool) -> Result<()> {
    use cli::{AgentCommand, AgentScope};
    let opts = options(g);
    let writes = matches!(
        a.command,
        AgentCommand::Remember { .. } | AgentCommand::Segment { .. }
    );
    let (scope, db) = match a.scope {
        AgentScope::Execution => ("execution", None),
        AgentScope::Project => ("project", Some(run::project_agents_db(g.root.as_deref()))),
        AgentScope::User => {
            let home = home_dir(a.home.as_deref()).ok_or_else(|| {
                error::usage("user scope needs a home directory: set HOME or PROSE_HOME")
            })?;
            ("user", Some(run::user_agents_db(&home)))
        }
    };
    // The execution scope lives in the run's state.db; the others in an agents.db that is
    // created on the first write and never by a read.
    let mut state;
    let mut standalone;
    let (store, location): (Option<&mut dyn store::AgentStore>, String) = match db {
        None => {
            let (paths, s) = open_run(g)?;
            state = s;
            (Some(state.as_mut()), paths.db.display().to_string())
        }
        // A project set up for PostgreSQL keeps its project agents on the server.
        Some(db)
            if scope == "project"
                && store::project_uses_postgres(
                    db.parent().unwrap_or(std::path::Path::new(".prose")),
                ) =>
        {
            let prose_dir = db.parent().unwrap_or(std::path::Path::new(".prose"));
            standalone = store::open_project_agents_pg(prose_dir, opts)?;
            (
                Some(standalone.as_mut()),
                "postgres (openprose.agents, run_id NULL)".to_string(),
            )
        }
        Some(db) if writes || db.is_file() => {
            standalone = store::open_agents(&db, opts, writes)?;
            (Some(standalone.as_mut()), db.display().to_string())
        }
        Some(db) => (None, db.display().to_string()),
    };
    match &a.command {
        AgentCommand::Memory { name } => emit(cmd::agent::memory(name, scope, store)?, json)?,
        AgentCommand::List => emit(cmd::agent::list(store)?, json)?,
        AgentCommand::Remember { name, value, file } => {
            let input = cmd::value_source(value.as_deref(), file.as_deref())?;
            let store = store.ok_or_else(|| anyhow::anyhow!("agents db was not opened"))?;
            emit(
                cmd::agent::remember(name, scope, input, &location, store)?,
                json,
            )?
        }
        AgentCommand::Segment {
            name,
            prompt,
            summary,
        } => {
            let store = store.ok_or_else(|| anyhow::anyhow!("agents db was not opened"))?;
            emit(
                cmd::agent::segment(name, scope, prompt, summary, store)?,
                json,
            )?
        }
    }
    Ok(())
}

fn decide(
    g: &Global,
    run_arg: &str,
    request: &cmd::decide::DecideRequest,
    json: bool,
) -> Result<()> {
    let (_, mut store) = open_named(g, Some(run_arg))?;
    let made = cmd::decide::run(request, store.as_mut(), &mut confirm_on_terminal)?;
    emit(made, json)?;
    Ok(())
}

fn exit_code(e: &anyhow::Error) -> u8 {
    e.chain()
        .find_map(|c| c.downcast_ref::<error::Coded>())
        .map(|c| c.code)
        .or_else(|| store::classify(e))
        .map_or(1, |c| c as u8)
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

/// The global options that take a value, to step over when looking for the subcommand.
const GLOBAL_VALUE_OPTIONS: &[&str] = &["--run", "--root", "--busy-timeout"];

/// The subcommand argv names, built alone (a function per name; None for an unknown name).
fn one_subcommand(name: &str) -> Option<clap::Command> {
    use clap::{Args, Command as C};
    Some(match name {
        "init" => cli::InitArgs::augment_args(C::new("init")),
        "bind" => cli::BindArgs::augment_args(C::new("bind")),
        "get" => cli::GetArgs::augment_args(C::new("get")),
        "exec-append" => cli::ExecAppendArgs::augment_args(C::new("exec-append")),
        "query" => cli::QueryArgs::augment_args(C::new("query")),
        "gates" => cli::GatesArgs::augment_args(C::new("gates")),
        "approve" => cli::ApproveArgs::augment_args(C::new("approve")),
        "reject" => cli::RejectArgs::augment_args(C::new("reject")),
        "agent" => cli::AgentArgs::augment_args(C::new("agent")),
        "imports" => cli::ImportsArgs::augment_args(C::new("imports")),
        "finish" => cli::FinishArgs::augment_args(C::new("finish")),
        "runs" => cli::RunsArgs::augment_args(C::new("runs")),
        "log" => cli::LogArgs::augment_args(C::new("log")),
        "completions" => cli::CompletionsArgs::augment_args(C::new("completions")),
        "doctor" => cli::DoctorArgs::augment_args(C::new("doctor")),
        "checkpoint" => cli::CheckpointArgs::augment_args(C::new("checkpoint")),
        "prune" => cli::PruneArgs::augment_args(C::new("prune")),
        "resume" => C::new("resume"),
        "man" => C::new("man"),
        "stats" => C::new("stats"),
        "vacuum" => C::new("vacuum"),
        "migrate" => cli::MigrateArgs::augment_args(C::new("migrate")),
        _ => return None,
    })
}

/// Parses argv by building only the subcommand it names. Every command is a fresh process
/// and building clap's whole tree (about twenty subcommands, four global options propagated
/// into each) then dropping it was about a quarter of a `get`'s instructions. Help, version,
/// and anything that does not parse return None: the full parse then handles them exactly as
/// before, with every help text and error message.
fn parse_fast() -> Option<Cli> {
    use clap::{Args, FromArgMatches};
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
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
    let mut command = cli::Global::augment_args(clap::Command::new("prose-state"))
        .subcommand(one_subcommand(name?)?);
    let matches = command.try_get_matches_from_mut(&args).ok()?;
    let parsed = Cli::from_arg_matches(&matches).ok();
    // The process ends soon: freeing the tree node by node is work for nothing.
    std::mem::forget(command);
    parsed
}

fn main() -> ExitCode {
    let parsed = match parse_fast() {
        Some(cli) => Ok(cli),
        None => Cli::try_parse(),
    };
    let cli = match parsed {
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
            // clap's first paragraph, joined: "...were not provided:" is followed by the
            // names of the missing arguments on the lines below it.
            let first: Vec<&str> = rendered
                .lines()
                .map(str::trim)
                .skip_while(|l| l.is_empty())
                .take_while(|l| !l.is_empty())
                .collect();
            let first = first.join(" ");
            let first = first.trim_start_matches("error: ");
            let first = if first.is_empty() {
                "invalid usage"
            } else {
                first
            };
            report(&format!("{first} (see --help)"));
            return ExitCode::from(2);
        }
    };
    match dispatch(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            report(&format!("{e:#}").replace(['\n', '\r'], " "));
            ExitCode::from(exit_code(&e))
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every subcommand of the full definition has a fast-path builder (a missing one would
    /// still work, through the full parse, only slower).
    #[test]
    fn fast_path_covers_every_subcommand() {
        use clap::CommandFactory;
        for sub in crate::cli::Cli::command().get_subcommands() {
            let name = sub.get_name();
            assert!(super::one_subcommand(name).is_some(), "{name}");
        }
    }
}
