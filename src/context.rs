//! One resolved context: where the project root, `.prose/`, the runs and the PostgreSQL server
//! are, and who is acting. Each is looked up at most once, and only when a command asks for
//! it: a `get` never reads `.env`, the home directory or the login name. It is the only place
//! commands ask to open runs, agent stores and the principals book, and it holds the one rule
//! for where a run lives. Which runs a listing reads, and where, is `cmd::listing`'s.

use crate::cli::{AgentScope, Global, PrincipalArg, TokenArg};
use crate::error::{not_found, shown, usage};
use crate::model::{check_run_id, path_in, PathName, Principal};
use crate::run::{self, RunPaths};
use crate::store::postgres::PgStore;
use crate::store::principals::{LocalBook, PrincipalBook};
use crate::store::sqlite::SqliteStore;
use crate::store::{AgentStore, Backend, NewRun, OpenOptions, Store, Wiring};
use anyhow::{Context as _, Result};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

pub struct Context {
    /// `--root` / PROSE_ROOT, else the nearest directory above holding `.prose/`; None: the
    /// current directory.
    pub root: Option<PathBuf>,
    /// The run a command that acts on one run acts on: `--run`, else PROSE_RUN.
    pub run: Option<String>,
    /// `--run` as given on the command line: the only thing that narrows a listing.
    run_flag: Option<String>,
    pub json: bool,
    pub opts: OpenOptions,
    runs_dir: PathBuf,
    prose_dir: PathBuf,
    /// The project's PostgreSQL URL, once looked up (`.env`, then the environment).
    pg_url: OnceLock<Result<Option<String>, String>>,
    /// `--run` came from a client that may name only a run id of this project (MCP): never a
    /// directory or a state.db path.
    run_ids_only: bool,
    /// The process's stdin carries a protocol (the MCP server): no value is ever read from it,
    /// and a VALUE of `-` is the one-character value it spells.
    stdin_is_protocol: bool,
    /// What may stop the wait this context runs (an MCP task its client cancels).
    stop: Option<std::sync::Arc<Stop>>,
}

/// The wiring of a process that works in the project whose prose directory is `prose_dir`:
/// its commits announced to the project's hook (`notify`), and each run's commits watched by
/// the project catalog. The caller shapes it further (keeping, a home) and leaks it.
pub fn project_wiring(prose_dir: &Path) -> Wiring {
    Wiring::new()
        .announcing(crate::services::notify::announcer(prose_dir))
        .watching(crate::store::catalog::watch)
}

impl Context {
    /// The context of a command (or the page): the process's wiring made for it (see
    /// [`Self::resolve_in`]).
    pub fn resolve(g: &Global) -> Self {
        Self::wired(g, Wiring::ending_soon)
    }

    /// The context of a long-lived process whose calls come one after another to the same
    /// runs (the MCP server): its wiring keeps their connections between calls.
    pub fn resolve_keeping(g: &Global) -> Self {
        Self::wired(g, Wiring::keeping)
    }

    /// The process's wiring, made once where it starts: commits announced to the project's
    /// hook (`notify`), and each run's commits watched by the project catalog.
    fn wired(g: &Global, shape: impl FnOnce(Wiring) -> Wiring) -> Self {
        let (root, runs_dir, prose_dir) = places(g);
        let wiring = project_wiring(&prose_dir);
        Self::at(g, root, runs_dir, prose_dir, shape(wiring).leak())
    }

    /// The context of one call in a process already wired (each MCP call, with the server's).
    pub fn resolve_in(g: &Global, wiring: &'static Wiring) -> Self {
        let (root, runs_dir, prose_dir) = places(g);
        Self::at(g, root, runs_dir, prose_dir, wiring)
    }

    fn at(
        g: &Global,
        root: Option<PathBuf>,
        runs_dir: PathBuf,
        prose_dir: PathBuf,
        wiring: &'static Wiring,
    ) -> Self {
        let from_env = || std::env::var("PROSE_RUN").ok().filter(|r| !r.is_empty());
        Context {
            root,
            run: g.run.clone().or_else(from_env),
            run_flag: g.run.clone(),
            json: g.json,
            opts: OpenOptions {
                busy_timeout: Duration::from_millis(g.busy_timeout),
                wiring,
            },
            runs_dir,
            prose_dir,
            pg_url: OnceLock::new(),
            run_ids_only: false,
            stdin_is_protocol: false,
            stop: None,
        }
    }

    /// The process's stdin carries a protocol (the MCP server's): no value is read from it.
    pub fn stdin_is_protocol(mut self) -> Self {
        self.stdin_is_protocol = true;
        self
    }

    /// Whether stdin carries a protocol, and no value may be read from it.
    pub fn reads_no_stdin(&self) -> bool {
        self.stdin_is_protocol
    }

    /// A wait run in this context can be stopped by `stop` (see [`Stop`]).
    pub fn stoppable_by(mut self, stop: Option<std::sync::Arc<Stop>>) -> Self {
        self.stop = stop;
        self
    }

    /// What may stop a wait run in this context.
    pub fn stop(&self) -> Option<std::sync::Arc<Stop>> {
        self.stop.clone()
    }

    /// The run comes from a client (an MCP call) that may name only a run id of this project
    /// or its server, never a path: anything else is "run not found", saying nothing of what
    /// exists where.
    pub fn run_ids_only(mut self) -> Self {
        self.run_ids_only = true;
        self
    }

    /// `--run` as given on the command line (which narrows a listing).
    pub fn run_flag(&self) -> Option<&str> {
        self.run_flag.as_deref()
    }

    /// `<root>/.prose/runs`.
    pub fn runs_dir(&self) -> &Path {
        &self.runs_dir
    }

    /// `<root>/.prose`.
    pub fn prose_dir(&self) -> &Path {
        &self.prose_dir
    }

    /// The project's PostgreSQL URL, in the spec's order: OPENPROSE_POSTGRES_URL in
    /// `.prose/.env`, then in the environment, then DATABASE_URL (which alone does not make a
    /// project use the server). Read once.
    fn pg_url(&self) -> Result<Option<&str>> {
        let found = self.pg_url.get_or_init(|| {
            let dotenv = dotenv_value(&self.prose_dir.join(".env"), "OPENPROSE_POSTGRES_URL")
                .map_err(|e| format!("{e:#}"))?;
            Ok(dotenv.or_else(|| {
                std::env::var("OPENPROSE_POSTGRES_URL")
                    .ok()
                    .map(|u| u.trim().to_string())
                    .filter(|u| !u.is_empty())
            }))
        });
        match found {
            Ok(url) => Ok(url.as_deref()),
            Err(e) => Err(anyhow::anyhow!("{e}")),
        }
    }

    /// Whether the project is set up for PostgreSQL (OPENPROSE_POSTGRES_URL in `.prose/.env` or
    /// the environment): then runs without a directory here, and project agents, live there.
    pub fn uses_postgres(&self) -> bool {
        matches!(self.pg_url(), Ok(Some(_)))
    }

    /// The server's URL, for a run that lives there.
    pub fn postgres_url(&self) -> Result<String> {
        if let Some(url) = self.pg_url()? {
            return Ok(url.to_string());
        }
        match std::env::var("DATABASE_URL") {
            Ok(url) if !url.trim().is_empty() => Ok(url.trim().to_string()),
            _ => Err(usage(format!(
                "no PostgreSQL URL: set OPENPROSE_POSTGRES_URL in {} or the environment (or DATABASE_URL)",
                self.prose_dir.join(".env").display()
            ))),
        }
    }

    /// The one rule for where a run lives: a run directory here holds a state.db, or a record
    /// of the backend that holds its state; a run id with no directory here is looked up on
    /// the project's server, when it has one.
    pub fn open(&self, paths: &RunPaths) -> Result<Box<dyn Store>> {
        let backend = if paths.exists() {
            paths.backend()?
        } else if self.uses_postgres() && check_run_id(&paths.id).is_ok() {
            Backend::Postgres
        } else {
            return Err(not_found(format!("run not found: {}", shown(&paths.id))));
        };
        Ok(match backend {
            Backend::Sqlite => {
                let mut store = SqliteStore::open(&paths.db, self.opts)?;
                if let Some(why) = read_only(paths, &mut store) {
                    store.refuse_writes(why);
                }
                Box::new(store)
            }
            Backend::Postgres => Box::new(PgStore::open_run(
                &self.postgres_url()?,
                &paths.id,
                self.opts,
            )?),
        })
    }

    /// The run at `paths` read from `backend`, whichever [`Context::open`]'s rule would
    /// choose: for a run id kept in both places (a run imported to the server, and its
    /// directory still here), the copy named (`diff --backend-a/--backend-b`).
    pub fn open_in(&self, paths: &RunPaths, backend: Backend) -> Result<Box<dyn Store>> {
        match backend {
            Backend::Sqlite if paths.db.is_file() => {
                let mut store = SqliteStore::open(&paths.db, self.opts)?;
                if let Some(why) = read_only(paths, &mut store) {
                    store.refuse_writes(why);
                }
                Ok(Box::new(store))
            }
            Backend::Sqlite => Err(not_found(format!(
                "run not found in SQLite here (no state.db): {}",
                shown(&paths.id)
            ))),
            Backend::Postgres => {
                check_run_id(&paths.id)
                    .map_err(|_| not_found(format!("run not found: {}", shown(&paths.id))))?;
                Ok(Box::new(PgStore::open_run(
                    &self.postgres_url()?,
                    &paths.id,
                    self.opts,
                )?))
            }
        }
    }

    /// The run `--run` names (or `run_arg`, for commands that take it as an argument): a run
    /// id, a run directory or a state.db path, or an id known only to the server.
    pub fn open_run(&self, run_arg: Option<&str>) -> Result<(RunPaths, Box<dyn Store>)> {
        let paths = self.locate(run_arg)?;
        let store = self.open(&paths)?;
        Ok((paths, store))
    }

    /// Where the run `run_arg` names is, or would be: a run here, or an id the project's
    /// server may hold (checked when it is opened).
    pub fn locate(&self, run_arg: Option<&str>) -> Result<RunPaths> {
        if self.run_ids_only {
            return self.locate_id(run_arg);
        }
        match run::locate(self.root.as_deref(), run_arg) {
            Ok(paths) => Ok(paths),
            Err(e) => match run_arg {
                Some(id)
                    if crate::error::code_of(&e) == Some(crate::error::Code::NotFound)
                        && check_run_id(id).is_ok()
                        && self.uses_postgres() =>
                {
                    path_in(&self.runs_dir, id, PathName::Run).map(RunPaths::in_dir)
                }
                _ => Err(e),
            },
        }
    }

    /// The run a run id names, and nothing else: its directory here (through the one
    /// boundary for names that become paths), or the project's server.
    fn locate_id(&self, run_arg: Option<&str>) -> Result<RunPaths> {
        let id = run_arg.ok_or_else(|| usage("no run given: pass run (a run id)"))?;
        let gone = || not_found(format!("run not found: {}", shown(id)));
        let dir = path_in(&self.runs_dir, id, PathName::Run).map_err(|_| gone())?;
        let paths = RunPaths::in_dir(dir);
        if paths.exists() || self.uses_postgres() {
            Ok(paths)
        } else {
            Err(gone())
        }
    }

    /// The run of `--run`.
    pub fn the_run(&self) -> Result<(RunPaths, Box<dyn Store>)> {
        self.open_run(self.run.as_deref())
    }

    /// Creates the state of a new run (its directory is `paths.dir`, still being built).
    pub fn create(
        &self,
        paths: &RunPaths,
        backend: Backend,
        new: &NewRun,
    ) -> Result<Box<dyn Store>> {
        Ok(match backend {
            Backend::Sqlite => Box::new(SqliteStore::create(&paths.db, new, self.opts)?),
            Backend::Postgres => {
                Box::new(PgStore::create_run(&self.postgres_url()?, new, self.opts)?)
            }
        })
    }

    /// The project's server, for reading many of its runs at once.
    pub fn server_catalog(&self) -> Result<Box<dyn crate::store::ServerCatalog>> {
        Ok(Box::new(self.project_server()?))
    }

    /// The project's server, for what it keeps of the project (not of one run).
    pub fn project_server(&self) -> Result<PgStore> {
        PgStore::open_project(&self.postgres_url()?, self.opts)
    }

    /// The place a signed decision names (`Signed::place`): on PostgreSQL the server and
    /// database (`PrincipalBook::identity`); for a SQLite project its id and where it is (the
    /// canonical path of its `.prose/`), since every file in it, its id's included, is the
    /// agents' to write: a decision signed for one directory stands in no other. None for a
    /// SQLite project with no id (nothing is made unless `create`).
    pub fn signature_place(&self, create: bool) -> Result<Option<String>> {
        use crate::store::principals::PrincipalBook as _;
        if self.uses_postgres() {
            return self.project_server()?.identity(false);
        }
        let Some(id) = crate::store::principals::project_id(&self.prose_dir, create)? else {
            return Ok(None);
        };
        let at = std::fs::canonicalize(&self.prose_dir).unwrap_or_else(|_| self.prose_dir.clone());
        Ok(Some(format!("{id} at {}", at.display())))
    }

    /// Deletes a run created on the server by an `init` that could not finish.
    pub fn discard_server_run(&self, id: &str) -> Result<()> {
        PgStore::open_run(&self.postgres_url()?, id, self.opts)?.delete_run()
    }

    /// The store of an agent scope, and where it is (for messages). The execution scope is
    /// the run's state; project agents live on the project's server when it has one, else in
    /// `.prose/agents.db`; user agents in `<home>/.prose/agents.db`. An agents.db is created
    /// by the first write and never by a read: None when it does not exist yet.
    pub fn agent_store(
        &self,
        scope: &AgentScope,
        home: Option<&Path>,
        writes: bool,
    ) -> Result<(Option<Box<dyn AgentStore>>, String)> {
        let db = match scope {
            AgentScope::Execution => {
                let (paths, store) = self.the_run()?;
                return Ok((Some(store), paths.db.display().to_string()));
            }
            AgentScope::Project if self.uses_postgres() => {
                let store = Box::new(self.project_server()?);
                let location = "postgres (openprose.agents, run_id NULL)";
                return Ok((Some(store), location.to_string()));
            }
            AgentScope::Project => self.prose_dir.join("agents.db"),
            AgentScope::User => {
                let home = self.home(home).ok_or_else(|| {
                    usage("user scope needs a home directory: set HOME or PROSE_HOME")
                })?;
                run::user_agents_db(&home)
            }
            // `persist: "PATH"`: under the project root (the path never leaves it, see
            // `AgentScope::parse`), on either backend: a file of this machine.
            AgentScope::Path(path) => {
                let root = self.prose_dir.parent().unwrap_or(Path::new(""));
                let dir = root.join(path);
                if writes {
                    std::fs::create_dir_all(&dir)
                        .with_context(|| format!("creating {}", dir.display()))?;
                }
                dir.join("agents.db")
            }
        };
        let location = db.display().to_string();
        if !writes && !db.is_file() {
            return Ok((None, location));
        }
        let store: Box<dyn AgentStore> =
            Box::new(SqliteStore::open_agents(&db, self.opts, writes)?);
        Ok((Some(store), location))
    }

    /// The project's and the user's agents, where their stores exist (for `resume`; never
    /// created here).
    pub fn other_agents(&self) -> Result<Vec<(&'static str, Vec<crate::store::AgentRow>)>> {
        let mut others = Vec::new();
        for (scope, name) in [(AgentScope::Project, "project"), (AgentScope::User, "user")] {
            let found = match self.agent_store(&scope, None, false) {
                Ok((store, _)) => store,
                // No home directory: there are no user agents to list.
                Err(_) if scope == AgentScope::User => None,
                Err(e) => return Err(e),
            };
            if let Some(mut store) = found {
                others.push((name, store.agents()?));
            }
        }
        Ok(others)
    }

    /// Who is acting: `--as` or PROSE_PRINCIPAL (refused, exit 2, when outside the grammar),
    /// else the login name (USER, then LOGNAME) when it is in the grammar, else no one. No
    /// principal is ever invented: commands that decide refuse to act as no one.
    pub fn principal(&self, arg: &PrincipalArg) -> Result<Option<Principal>> {
        if let Some(p) = &arg.principal {
            return Principal::parse(p, "--as / PROSE_PRINCIPAL").map(Some);
        }
        Ok(["USER", "LOGNAME"]
            .iter()
            .filter_map(|v| std::env::var(v).ok())
            .find(|p| !p.is_empty())
            .and_then(|p| Principal::parse(&p, "login name").ok()))
    }

    /// Who writes, as a run's history records it (claimed, not proved): [`Context::principal`],
    /// else the account the process runs as ([`account`]). Never `unknown`, which names a raw
    /// writer.
    pub fn writer(&self, arg: &PrincipalArg) -> Result<String> {
        Ok(self
            .principal(arg)?
            .map_or_else(account, |p| p.as_str().to_string()))
    }

    /// The principal a decision is taken as, and whether a token authenticated it
    /// (`auth::decider`): the token's (`--token-file`, else PROSE_TOKEN) when there is one,
    /// else [`Context::principal`], which must be someone, unless the project requires a token.
    pub fn decider(
        &self,
        arg: &PrincipalArg,
        token: &TokenArg,
        page: Option<String>,
    ) -> Result<(Principal, bool)> {
        let token = match &token.token_file {
            Some(file) => Some(crate::services::auth::read_token_file(file)?),
            None => std::env::var("PROSE_TOKEN")
                .ok()
                .filter(|t| !t.trim().is_empty()),
        };
        let claimed = match (&arg.principal, &token) {
            // With a token, only an explicit --as is compared with it.
            (Some(_), _) | (None, None) => self.principal(arg)?,
            (None, Some(_)) => None,
        };
        let mut book = self.principal_book(false)?;
        crate::services::auth::decider(book.as_deref_mut(), token.as_deref(), claimed, page)
    }

    /// Who starts a run or creates a gate, as it is recorded for separation of duties: the
    /// token's principal when there is a token (`--token-file`, else PROSE_TOKEN; one that is
    /// not valid is refused), else [`Context::writer`].
    pub fn actor(&self, arg: &PrincipalArg, token: &TokenArg) -> Result<String> {
        let has_token = token.token_file.is_some()
            || std::env::var("PROSE_TOKEN").is_ok_and(|t| !t.trim().is_empty());
        if has_token {
            return Ok(self.decider(arg, token, None)?.0.as_str().to_string());
        }
        self.writer(arg)
    }

    /// The project's principals: on its server when it has one, else `.prose/principals.db`
    /// (None there until the first `principals add`, unless `create`).
    pub fn principal_book(&self, create: bool) -> Result<Option<Box<dyn PrincipalBook>>> {
        if self.uses_postgres() {
            return Ok(Some(Box::new(self.project_server()?)));
        }
        let book = LocalBook::open(&self.prose_dir, create, self.opts.wiring)?;
        Ok(book.map(|b| Box::new(b) as Box<dyn PrincipalBook>))
    }

    /// The home directory for user-scoped agents: `--home` / PROSE_HOME, else HOME.
    pub fn home(&self, arg: Option<&Path>) -> Option<PathBuf> {
        arg.map(Path::to_path_buf)
            .or_else(|| std::env::var_os("PROSE_HOME").map(Into::into))
            .or_else(|| std::env::var_os("HOME").map(Into::into))
            .filter(|h: &PathBuf| !h.as_os_str().is_empty())
    }
}

/// Why a SQLite run takes no writes, though it can be read (None: it takes them):
/// - its `state.db` is a symlink: a write through it would land in another run's database
///   (its values in this one's `attachments/`), so it is refused, as a symlinked attachment is;
/// - it is a copy: a run directory of the project whose name is not the id its database
///   records (made by `cp -r`). It is listed under its directory's name, and a decision in it
///   would be a decision of no run anyone is shown, so none is taken in it while it sits
///   among the project's runs under a name that is not its id.
pub fn read_only(paths: &RunPaths, store: &mut SqliteStore) -> Option<String> {
    use crate::store::Store as _;
    for (path, what) in [
        (&paths.dir, "the run directory is a symlink; prose-state reads through it but never writes through it"),
        (&paths.db, "state.db is a symlink; prose-state reads through it but never writes through it (replace it with the database itself)"),
    ] {
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            return Some(format!("{what}: {}", path.display()));
        }
    }
    let (_, dir_id) = crate::store::catalog::of_state_db(&paths.db)?;
    let recorded = store.run_info().ok()?.id;
    (recorded != dir_id).then(|| copy_refusal(&paths.dir, &recorded))
}

/// What a write in a copied run directory is told (see [`read_only`]).
pub fn copy_refusal(dir: &Path, recorded: &str) -> String {
    format!(
                "run directory {} is a copy of run {} (its name is not the id it records): nothing is decided or written in it; act on the run itself (--run {}), or give the copy an id of its own (`import {} --run-id NEW_ID --vouch`, then remove the copy)",
        dir.display(),
        shown(recorded),
        shown(recorded),
        dir.display()
    )
}

/// The project root (given, or found from the working directory), its runs directory and its
/// `.prose` directory.
fn places(g: &Global) -> (Option<PathBuf>, PathBuf, PathBuf) {
    let root = g.root.clone().or_else(discover_root);
    let runs_dir = run::runs_dir(root.as_deref());
    let prose_dir = runs_dir
        .parent()
        .map_or_else(|| PathBuf::from(".prose"), Path::to_path_buf);
    (root, runs_dir, prose_dir)
}

/// The project root when none is given: the nearest directory, from the current one up,
/// that holds a `.prose/` directory (as git finds `.git/`), never the user's prose home
/// (`~/.prose`, or `$PROSE_HOME/.prose`), which holds keys and user agents, not runs. None when
/// the current directory itself holds `.prose/` (paths stay relative, as they always were) or
/// no directory above does (the current directory is the root, and `init` makes `.prose/`).
fn discover_root() -> Option<PathBuf> {
    // Start-up is the hot path: one getcwd and a stat per level, compared lexically with the
    // prose home named by the environment (no canonicalisation).
    let home = crate::store::seal::prose_home();
    let cwd = std::env::current_dir().ok()?;
    let found = cwd.ancestors().find(|dir| {
        let candidate = dir.join(".prose");
        Some(&candidate) != home.as_ref() && candidate.is_dir()
    })?;
    (found != cwd).then(|| found.to_path_buf())
}

/// A value as a shell reads it after `KEY=`: in single quotes, everything up to the closing
/// quote; in double quotes, up to the closing quote with `\"`, `\\`, `\$` and `\``
/// unescaped; unquoted, up to the first whitespace (so `# comment` after it is a comment).
/// Quoted and unquoted parts run together as in a shell (`a"b c"` is `ab c`). None when a
/// quote is left open.
fn shell_value(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => loop {
                match chars.next()? {
                    '\'' => break,
                    c => out.push(c),
                }
            },
            '"' => loop {
                match chars.next()? {
                    '"' => break,
                    '\\' if matches!(chars.peek(), Some('"' | '\\' | '$' | '`')) => {
                        out.push(chars.next()?)
                    }
                    c => out.push(c),
                }
            },
            '\\' => out.push(chars.next().unwrap_or('\\')),
            c if c.is_whitespace() => break,
            c => out.push(c),
        }
    }
    Some(out)
}

/// One KEY=VALUE from a .env file, read as a shell would (`export`, quotes, comments).
fn dotenv_value(path: &Path, key: &str) -> Result<Option<String>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(anyhow::Error::new(e))
                .with_context(|| format!("could not read {}", path.display()))
        }
    };
    for line in text.lines() {
        let line = line.trim_start();
        let line = line
            .strip_prefix("export")
            .filter(|rest| rest.starts_with([' ', '\t']))
            .map_or(line, str::trim_start);
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        if k.trim_end() == key {
            if let Some(v) = shell_value(v).filter(|v| !v.is_empty()) {
                return Ok(Some(v));
            }
        }
    }
    Ok(None)
}

/// The account this process runs as, as a principal, for a writer that names no one (no
/// `--as`, PROSE_PRINCIPAL, USER or LOGNAME: a container, a cron job): its user name in
/// `/etc/passwd` when that is in the principal grammar, else `uid:N`. The file is read rather
/// than asked through `getpwuid`: the binary is linked statically, and glibc's lookup would
/// load the system's NSS modules at run time, which a static binary must not. Only writes are
/// attributed so; a decision still needs a name given (`Context::principal`).
pub fn account() -> String {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|passwd| {
            passwd.lines().find_map(|line| {
                let mut fields = line.split(':');
                let name = fields.next()?;
                let id = fields.nth(1)?;
                (id.parse::<u32>().ok()? == uid).then(|| name.to_string())
            })
        })
        .and_then(|name| Principal::parse(&name, "account name").ok())
        .map_or_else(|| format!("uid:{uid}"), |p| p.as_str().to_string())
}

/// A wait another thread may stop (an MCP task its client cancelled), and told of as it goes:
/// the waiting thread asks before each look, and holds [`Stop::permit`] while it writes what a
/// look settled (a decision about inputs, consumed), so that once [`Stop::stop`] has returned
/// the wait writes nothing. After each look that leaves it waiting, `on_pending` is given the
/// run's id and the gates it still waits for.
pub struct Stop {
    /// Whether the wait was stopped; whether it wrote.
    state: std::sync::Mutex<(bool, bool)>,
    on_pending: Box<OnPending>,
}

/// Told the run's id and the gates a wait still waits for, after a look.
type OnPending = dyn Fn(&str, &[&str]) + Send + Sync;

impl Stop {
    pub fn new(on_pending: impl Fn(&str, &[&str]) + Send + Sync + 'static) -> Self {
        Stop {
            state: std::sync::Mutex::new((false, false)),
            on_pending: Box::new(on_pending),
        }
    }

    /// Stops the wait: once this returns, it writes nothing more (a write in progress is
    /// waited for). True when it had written (settled a look) before.
    pub fn stop(&self) -> bool {
        match self.state.lock() {
            Ok(mut state) => {
                state.0 = true;
                state.1
            }
            Err(_) => false,
        }
    }

    pub fn stopped(&self) -> bool {
        self.state.lock().map(|s| s.0).unwrap_or(true)
    }

    /// Leave to write, held while writing; an error once the wait was stopped.
    pub fn permit(&self) -> Result<std::sync::MutexGuard<'_, (bool, bool)>> {
        match self.state.lock() {
            Ok(mut state) if !state.0 => {
                state.1 = true;
                Ok(state)
            }
            _ => Err(anyhow::anyhow!("the wait was stopped: nothing was written")),
        }
    }

    /// Tells whoever waits on the wait the run's id and the gates it still waits for.
    pub fn tell(&self, run: &str, gates: &[&str]) {
        (self.on_pending)(run, gates)
    }
}

#[cfg(test)]
mod tests {
    use super::shell_value;

    #[test]
    fn env_values_read_as_a_shell_reads_them() {
        for (text, want) in [
            ("postgres://u@h/db", Some("postgres://u@h/db")),
            (
                "\"postgres://u@h/db\"  # the team's server",
                Some("postgres://u@h/db"),
            ),
            (
                "'postgres://u:p#w@h/db' # comment",
                Some("postgres://u:p#w@h/db"),
            ),
            ("postgres://u@h/db # comment", Some("postgres://u@h/db")),
            ("\"a \\\"b\\\" c\"", Some("a \"b\" c")),
            ("a\"b c\"d", Some("ab cd")),
            ("", Some("")),
            ("# only a comment", Some("#")),
            ("\"open", None),
            ("'open", None),
        ] {
            assert_eq!(shell_value(text).as_deref(), want, "{text:?}");
        }
    }
}
