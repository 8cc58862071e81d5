//! Fixtures: a project in a temp directory (removed on drop), runs made through the real
//! binary, and direct connections to check what the binary really wrote.

#![allow(dead_code)]

pub mod pg;

use assert_cmd::Command;
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use tempfile::TempDir;

pub const BIN: &str = env!("CARGO_BIN_EXE_prose-state");

/// The caller's settings that would change what the binary does: every spawner of the
/// binary (or of a shell that runs it) clears them, so a test sees only what it sets.
pub const CLEARED_ENV: &[&str] = &[
    "PROSE_RUN",
    "PROSE_ROOT",
    "PROSE_STATE_BUSY_TIMEOUT",
    "PROSE_PRINCIPAL",
    "PROSE_HOME",
    "OPENPROSE_POSTGRES_URL",
    "DATABASE_URL",
];

/// Says a test was skipped where the normal `cargo test` output shows it: written to the
/// process's stderr directly, which the test harness does not capture (it captures only the
/// print macros). Under CI=true a skip is a failure instead, at the call site.
pub fn skipped(why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
}

/// What a test driving a client no one here wrote needs (`.ci/run` installs it all).
#[derive(Clone, Copy, PartialEq)]
pub enum Needs {
    /// The reference MCP client: Python with the `mcp` package.
    Mcp,
    /// A real browser: Python with `selenium`, Debian's `chromium` and `chromium-driver`.
    Browser,
    /// Both.
    McpAndBrowser,
}

/// The Python of target/mcp-venv (PROSE_STATE_TEST_PYTHON overrides) with what `test` needs;
/// anything missing, `test` is skipped, visibly, and under CI=true it fails.
pub fn test_python(test: &str, needs: Needs) -> Option<PathBuf> {
    let python = std::env::var_os("PROSE_STATE_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/mcp-venv/bin/python")
        });
    let imports = |module: &str| {
        std::process::Command::new(&python)
            .args(["-c", &format!("import {module}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let mut missing = Vec::new();
    if needs != Needs::Browser && !imports("mcp") {
        missing.push("Python with the `mcp` package in target/mcp-venv");
    }
    if needs != Needs::Mcp {
        if !imports("selenium") {
            missing.push("Python selenium in target/mcp-venv");
        }
        for binary in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
            if !Path::new(binary).exists() {
                missing.push(binary);
            }
        }
    }
    if missing.is_empty() {
        return Some(python);
    }
    let why = format!(
        "{test} needs {} (bash .ci/run installs them)",
        missing.join(", ")
    );
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{why}, under CI"
    );
    skipped(&why);
    None
}

/// The test Python (see [`test_python`]) running tests/fixtures/`script`, a client built on
/// the reference MCP SDK, in `p`'s root: HOME the project's [`test_home`], [`CLEARED_ENV`]
/// cleared. The caller adds the script's arguments and its pipes.
pub fn mcp_client(p: &Project, python: &Path, script: &str) -> std::process::Command {
    let mut c = std::process::Command::new(python);
    c.arg(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(script),
    )
    .current_dir(p.root())
    .env("HOME", test_home(p.root()))
    .envs(test_clock(p.root()));
    for var in CLEARED_ENV {
        c.env_remove(var);
    }
    c
}

/// The home a test's commands see: inside its project, so that the audit key and anchors a
/// test makes are its own (and the caller's `~/.prose` is never touched).
pub fn test_home(root: &Path) -> PathBuf {
    root.join(".home")
}

/// The file in a project that holds how far its clock is ahead of real time, in seconds.
const CLOCK_FILE: &str = ".test-clock";

/// What the binary under test is told of the project's clock (`PROSE_STATE_TEST_CLOCK`, which
/// only a test build reads; always set, so the caller's setting never reaches a test): real
/// time until [`advance_clock`] moved it. Every command a test starts in the project, or in a
/// run of it, sees the same time.
pub fn test_clock(root: &Path) -> [(&'static str, String); 1] {
    let skew = std::fs::read_to_string(root.join(CLOCK_FILE)).unwrap_or_else(|_| "0".into());
    [("PROSE_STATE_TEST_CLOCK", skew.trim().to_string())]
}

/// Moves the clock of the project at `root` `seconds` ahead, for every command started after:
/// a test steps past a deadline instead of sleeping to it.
pub fn advance_clock(root: &Path, seconds: i64) {
    let now: i64 = test_clock(root)[0].1.parse().unwrap();
    std::fs::write(root.join(CLOCK_FILE), (now + seconds).to_string()).unwrap();
}

/// `sh -c SCRIPT` in `dir`, with [`CLEARED_ENV`] cleared, HOME set to the project's
/// [`test_home`] and `$BIN` naming the binary.
pub fn sh(dir: &Path, script: &str) -> std::process::Command {
    let mut c = std::process::Command::new("sh");
    c.arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("BIN", BIN)
        .env("HOME", test_home(dir))
        .envs(test_clock(dir));
    for var in CLEARED_ENV {
        c.env_remove(var);
    }
    c
}

/// Runs each named test function (taking a [`Backend`]) once on SQLite and once on the real
/// PostgreSQL server the tests start: `mod NAME { fn sqlite(); fn postgres(); }`.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn sqlite() {
                super::$name($crate::common::Backend::Sqlite)
            }
            #[test]
            fn postgres() {
                super::$name($crate::common::Backend::Postgres)
            }
        }
    )*};
}
pub(crate) use on_both;

/// Which backend a contract test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A project root in a temp directory.
pub struct Project {
    pub dir: TempDir,
    pub backend: Backend,
    /// For PostgreSQL: the URL of this project's own database.
    pub pg_url: Option<String>,
    /// The database this project made, dropped with it (a test suite's hundreds of databases
    /// would otherwise fill a small disk).
    _owned: Option<pg::Dropped>,
}

impl Project {
    pub fn new() -> Self {
        Project {
            dir: tempfile::Builder::new()
                .prefix("prose-state-test")
                .tempdir()
                .unwrap(),
            backend: Backend::Sqlite,
            pg_url: None,
            _owned: None,
        }
    }

    /// A project on the given backend: for PostgreSQL, a database of its own named in
    /// `.prose/.env`, as a user would set it up. None when no server can be had.
    pub fn on(backend: Backend) -> Option<Self> {
        let mut p = Project::new();
        if backend == Backend::Postgres {
            let url = pg::fresh_database()?;
            p.use_server(&url);
            p._owned = Some(pg::Dropped(url));
        }
        Some(p)
    }

    /// Another machine of the same team: a project directory of its own, on this project's
    /// database.
    pub fn elsewhere(&self) -> Project {
        let mut p = Project::new();
        if let Some(url) = &self.pg_url {
            p.use_server(url);
        }
        p
    }

    /// Points the project at a server, as a user would: OPENPROSE_POSTGRES_URL in
    /// `.prose/.env`.
    fn use_server(&mut self, url: &str) {
        std::fs::create_dir_all(self.root().join(".prose")).unwrap();
        std::fs::write(
            self.root().join(".prose/.env"),
            format!("OPENPROSE_POSTGRES_URL={url}\n"),
        )
        .unwrap();
        self.backend = Backend::Postgres;
        self.pg_url = Some(url.to_string());
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// The binary, run in the project root with none of the caller's PROSE_* settings.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(BIN);
        c.current_dir(self.root())
            .env("HOME", test_home(self.root()))
            .envs(test_clock(self.root()));
        for var in CLEARED_ENV {
            c.env_remove(var);
        }
        c
    }

    /// A std Command for the binary (for spawning many at once).
    pub fn std_cmd(&self) -> std::process::Command {
        let mut c = std::process::Command::new(BIN);
        c.current_dir(self.root())
            .env("HOME", test_home(self.root()))
            .envs(test_clock(self.root()));
        for var in CLEARED_ENV {
            c.env_remove(var);
        }
        c
    }

    pub fn write(&self, name: &str, content: &[u8]) -> PathBuf {
        let p = self.root().join(name);
        std::fs::write(&p, content).unwrap();
        p
    }

    /// `init`'s flag choosing this project's backend.
    pub fn backend_flag(&self) -> [&'static str; 2] {
        match self.backend {
            Backend::Sqlite => ["--backend", "sqlite"],
            Backend::Postgres => ["--backend", "postgres"],
        }
    }

    /// Makes a run through `init --json` and returns it.
    pub fn init(&self) -> Run {
        let out = self
            .cmd()
            .args(["init", "--json"])
            .args(self.backend_flag())
            .assert()
            .success();
        let v: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
        let run = self.run(v["run_id"].as_str().unwrap());
        assert_eq!(run.dir, self.root().join(v["dir"].as_str().unwrap()));
        run
    }

    /// The run of this project with the given id (made by `init`, or by a tool).
    pub fn run(&self, id: &str) -> Run {
        let dir = self.root().join(".prose/runs").join(id);
        Run {
            id: id.to_string(),
            db: dir.join("state.db"),
            dir,
            root: self.root().to_path_buf(),
            pg_url: self.pg_url.clone(),
        }
    }
}

/// A project's whole state at one moment, to go back to: its files (runs, the home with its
/// audit key and anchors) and, on PostgreSQL, its database, kept as a template. A fixture
/// built once through the binary then serves many cases, each from the same start.
pub struct Snapshot {
    files: TempDir,
    /// The template database's name, dropped with the snapshot.
    db: Option<String>,
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        if let (Some(db), Ok(base)) = (&self.db, pg::server()) {
            if let Ok(mut c) = postgres::Client::connect(base, postgres::NoTls) {
                let _ = c.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
            }
        }
    }
}

/// Copies the tree `from` into the directory `to`, keeping each file's and directory's mode.
fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let meta = std::fs::symlink_metadata(&src).unwrap();
        if meta.is_dir() {
            std::fs::create_dir(&dst).unwrap();
            copy_tree(&src, &dst);
            std::fs::set_permissions(&dst, meta.permissions()).unwrap();
        } else if meta.is_file() {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

impl Project {
    /// The project's state now (no command of it may be running).
    pub fn snapshot(&self) -> Snapshot {
        let files = tempfile::Builder::new()
            .prefix("prose-state-snap")
            .tempdir()
            .unwrap();
        copy_tree(self.root(), files.path());
        let db = self.database_name().map(|name| {
            let snap = format!("s_{:016x}", rand::random::<u64>());
            self.admin()
                .batch_execute(&format!(
                    "CREATE DATABASE {snap} TEMPLATE {name} STRATEGY FILE_COPY"
                ))
                .expect("snapshot the test database");
            snap
        });
        Snapshot { files, db }
    }

    /// Puts the project back as it was at `snap`: every file the commands since wrote or
    /// removed, and the database.
    pub fn restore(&self, snap: &Snapshot) {
        // The connections in-process commands kept were to what is replaced here.
        if let Some(wiring) = wirings().get(self.root()) {
            wiring.let_go();
        }
        for entry in std::fs::read_dir(self.root()).unwrap() {
            let path = entry.unwrap().path();
            if std::fs::symlink_metadata(&path).unwrap().is_dir() {
                std::fs::remove_dir_all(&path).unwrap();
            } else {
                std::fs::remove_file(&path).unwrap();
            }
        }
        copy_tree(snap.files.path(), self.root());
        if let (Some(name), Some(snap)) = (self.database_name(), &snap.db) {
            // Each alone: neither may run inside the implicit transaction of a batch.
            let mut c = self.admin();
            c.batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
                .expect("drop the test database");
            c.batch_execute(&format!(
                "CREATE DATABASE {name} TEMPLATE {snap} STRATEGY FILE_COPY"
            ))
            .expect("restore the test database");
        }
    }

    /// The name of this project's own PostgreSQL database.
    fn database_name(&self) -> Option<String> {
        let url = self.pg_url.as_ref()?;
        let name = url.split('?').next()?.rsplit('/').next()?;
        Some(name.to_string())
    }

    /// A connection to the server's maintenance database.
    fn admin(&self) -> postgres::Client {
        postgres::Client::connect(pg::server().unwrap(), postgres::NoTls).unwrap()
    }
}

/// Counts rows of a state table for one run, on either backend: the test's own look at the
/// database, independent of the binary.
pub fn count_rows(p: &Project, run: &Run, table: &str, condition: &str) -> i64 {
    match &p.pg_url {
        None => run
            .conn()
            .query_row(
                &format!("SELECT COUNT(*) FROM {table} WHERE {condition}"),
                [],
                |r| r.get(0),
            )
            .unwrap(),
        Some(url) => {
            let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
            c.query_one(
                &format!(
                    "SELECT COUNT(*) FROM openprose.{table} WHERE run_id = $1 AND ({condition})"
                ),
                &[&run.id],
            )
            .unwrap()
            .get(0)
        }
    }
}

/// One run of a project.
pub struct Run {
    pub id: String,
    pub dir: PathBuf,
    pub db: PathBuf,
    pub root: PathBuf,
    /// The server's URL, for a run on PostgreSQL.
    pub pg_url: Option<String>,
}

/// A run as it was before a decision that is to be refused (see [`Run::refused`]).
pub struct Before {
    snapshot: String,
    events: usize,
    gate: String,
}

type Wirings = std::collections::HashMap<PathBuf, &'static prose_state::testing::store::Wiring>;

/// The wirings in-process commands use, one per project (as a process makes one). A wiring
/// keeps its connections; a restore from a snapshot closes them (`Wiring::let_go`) before it
/// replaces the files and the database they were to.
fn wirings() -> std::sync::MutexGuard<'static, Wirings> {
    static WIRINGS: std::sync::OnceLock<std::sync::Mutex<Wirings>> = std::sync::OnceLock::new();
    WIRINGS.get_or_init(Default::default).lock().unwrap()
}

/// The wiring of the project at `root`: its home is the one the binary's commands see.
fn wiring_of(root: &Path) -> &'static prose_state::testing::store::Wiring {
    wirings().entry(root.to_path_buf()).or_insert_with(|| {
        prose_state::testing::commands::wiring(root, &test_home(root).join(".prose"))
    })
}

impl Run {
    /// `prose-state --json --run ID ARGS…` run in the test's own process (see
    /// `prose_state::testing::commands`): for a property whose point is a rule, not the
    /// process. It reads no stdin and sees no moved clock, so a project whose clock moved
    /// refuses it.
    pub fn here(&self, args: &[&str]) -> prose_state::testing::commands::Ran {
        assert!(
            !self.root.join(CLOCK_FILE).exists(),
            "a command run in-process does not see the project's moved clock"
        );
        // A command in this process reads this process's environment, which no spawner
        // clears: a caller's setting that would change what it does stops the test instead.
        for var in CLEARED_ENV.iter().chain(&["PROSE_STATE_TEST_CLOCK"]) {
            assert!(
                std::env::var_os(var).is_none(),
                "{var} is set in the test's environment: a command run in-process would see it (unset it)"
            );
        }
        let run = format!("--run={}", self.id);
        let args: Vec<&str> = std::iter::once(run.as_str())
            .chain(args.iter().copied())
            .collect();
        prose_state::testing::commands::run(&self.root, &args, wiring_of(&self.root))
    }

    /// The binary with `--run ID` in the project root.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(BIN);
        c.current_dir(&self.root)
            .env("HOME", test_home(&self.root))
            .envs(test_clock(&self.root))
            .args(["--run", &self.id]);
        for var in CLEARED_ENV {
            c.env_remove(var);
        }
        c
    }

    pub fn std_cmd(&self) -> std::process::Command {
        let mut c = std::process::Command::new(BIN);
        c.current_dir(&self.root)
            .env("HOME", test_home(&self.root))
            .envs(test_clock(&self.root))
            .args(["--run", &self.id]);
        for var in CLEARED_ENV {
            c.env_remove(var);
        }
        c
    }

    /// A direct connection to the run's state.db.
    pub fn conn(&self) -> Connection {
        let c = Connection::open(&self.db).unwrap();
        c.busy_timeout(std::time::Duration::from_secs(30)).unwrap();
        c
    }

    /// Appends an execution record through the binary and returns its id.
    pub fn exec(&self, index: i64, text: &str, status: &str, parent: Option<i64>) -> i64 {
        let mut c = self.cmd();
        c.args([
            "exec-append",
            "--index",
            &index.to_string(),
            "--text",
            text,
            "--status",
            status,
        ]);
        if let Some(p) = parent {
            c.args(["--parent", &p.to_string()]);
        }
        let out = c.assert().success();
        String::from_utf8(out.get_output().stdout.clone())
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// Binds through the binary.
    pub fn bind(&self, name: &str, value: &str, execution_id: Option<i64>) {
        let mut c = self.cmd();
        c.args(["bind", name, value]);
        if let Some(id) = execution_id {
            c.args(["--execution-id", &id.to_string()]);
        }
        c.assert().success();
    }

    /// The value `get` prints.
    pub fn get(&self, name: &str, execution_id: Option<i64>) -> Vec<u8> {
        let mut c = self.cmd();
        c.args(["get", name]);
        if let Some(id) = execution_id {
            c.args(["--execution-id", &id.to_string()]);
        }
        c.assert().success().get_output().stdout.clone()
    }

    /// Everything in the run, for "unchanged" assertions: the db's content and schema (on
    /// PostgreSQL, the run's rows of every table) and the files of the run directory.
    pub fn snapshot(&self) -> String {
        let db = match &self.pg_url {
            Some(url) => snapshot_pg(url, &self.id),
            None => snapshot_db(&self.db),
        };
        db + &snapshot_files(&self.dir)
    }

    /// [`Run::snapshot`] without the audit log (its rows, and SQLite's counters): what a
    /// refused decision, which is audit-logged, must leave as it was.
    pub fn snapshot_except_audit(&self) -> String {
        let mut out = String::new();
        let mut skipping = false;
        for line in self.snapshot().lines() {
            if let Some(row) = line.strip_prefix("  ") {
                if !skipping {
                    out += &format!("  {row}\n");
                }
                continue;
            }
            // A new object's header (its SQL may go on over lines of its own).
            let header = ["table ", "index ", "trigger ", "view "]
                .iter()
                .any(|k| line.starts_with(k))
                || (line.ends_with(':') && !line.contains(' '));
            if header {
                skipping = line == "gate_audit_log:"
                    || line.starts_with("table gate_audit_log:")
                    || line.starts_with("table sqlite_sequence:");
            }
            out += line;
            out += "\n";
        }
        out
    }

    /// Runs `args` (the binary, in the run's project), which must be refused with exit `code`
    /// in one line that says `says`, and leave the run exactly as it was: what every refusal
    /// test checks, after a write behind the tool's back or of bad input. Returns the line.
    pub fn refuses(&self, args: &[&str], code: i32, says: &str) -> String {
        let before = self.snapshot();
        let a = self.cmd().args(args).assert().failure();
        let err = stderr(&a);
        assert_eq!(crate::common::code(&a), code, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert_eq!(self.snapshot(), before, "{args:?} changed the run");
        err
    }

    /// What a decision about to be refused is checked against (see [`Run::refused`]).
    pub fn before_refusal(&self, gate: &str) -> Before {
        Before {
            snapshot: self.snapshot_except_audit(),
            events: self.view().events(gate).len(),
            gate: gate.to_string(),
        }
    }

    /// Asserts that since `before` only the audit log changed, by `n` `refused` events on
    /// the gate, and returns them.
    pub fn refused(
        &self,
        before: &Before,
        n: usize,
        what: &str,
    ) -> Vec<(String, Option<String>, serde_json::Value)> {
        assert_eq!(
            self.snapshot_except_audit(),
            before.snapshot,
            "{what}: a refusal changed more than the audit log"
        );
        let events = self.view().events(&before.gate);
        assert_eq!(events.len(), before.events + n, "{what}: audit rows");
        let new = events[before.events..].to_vec();
        for e in &new {
            assert_eq!(e.0, "refused", "{what}: {e:?}");
        }
        new
    }

    /// The bytes an attachment path names, read by the test itself: the file in the run
    /// directory, or the chunks of a value kept on the server; None when there are none.
    pub fn stored(&self, path: &str) -> Option<Vec<u8>> {
        match path.strip_prefix("server:") {
            None => std::fs::read(self.dir.join(path)).ok(),
            Some(blob) => {
                let mut c =
                    postgres::Client::connect(self.pg_url.as_deref()?, postgres::NoTls).unwrap();
                let whole: bool = c
                    .query_one(
                        "SELECT EXISTS (SELECT 1 FROM openprose.attachments
                         WHERE run_id = $1 AND blob = $2)",
                        &[&self.id, &blob],
                    )
                    .unwrap()
                    .get(0);
                whole.then(|| {
                    c.query(
                        "SELECT data FROM openprose.attachment_chunks
                         WHERE run_id = $1 AND blob = $2 ORDER BY seq",
                        &[&self.id, &blob],
                    )
                    .unwrap()
                    .iter()
                    .flat_map(|r| r.get::<_, Vec<u8>>(0))
                    .collect()
                })
            }
        }
    }

    /// Every attachment the run keeps, as paths: its files (`attachments/NAME`), or on
    /// PostgreSQL the values on the server (`server:BLOB`), whole or not; sorted.
    pub fn attachments(&self) -> Vec<String> {
        let mut v: Vec<String> = match &self.pg_url {
            None => std::fs::read_dir(self.dir.join("attachments"))
                .map(|d| {
                    d.flatten()
                        .map(|e| format!("attachments/{}", e.file_name().to_string_lossy()))
                        .collect()
                })
                .unwrap_or_default(),
            Some(url) => postgres::Client::connect(url, postgres::NoTls)
                .unwrap()
                .query(
                    "SELECT blob FROM openprose.attachments WHERE run_id = $1
                     UNION SELECT blob FROM openprose.attachment_chunks WHERE run_id = $1",
                    &[&self.id],
                )
                .unwrap()
                .iter()
                .map(|r| format!("server:{}", r.get::<_, String>(0)))
                .collect(),
        };
        v.sort();
        v
    }

    /// The state read back from whichever backend holds the run, independent of the binary.
    pub fn view(&self) -> View<'_> {
        View { run: self }
    }
}

/// A look at a run's state on either backend, the test's own.
pub struct View<'a> {
    run: &'a Run,
}

/// A gate's outcome as stored: status, resolved_by, resolution_comment, resolved_at.
pub type GateOutcome = (String, Option<String>, Option<String>, Option<String>);

impl View<'_> {
    fn pg(&self) -> Option<postgres::Client> {
        self.run
            .pg_url
            .as_deref()
            .map(|u| postgres::Client::connect(u, postgres::NoTls).unwrap())
    }

    pub fn gate(&self, id: &str) -> GateOutcome {
        match self.pg() {
            Some(mut c) => {
                let r = c
                    .query_one(
                        "SELECT status, resolved_by, resolution_comment,
                                to_char(resolved_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')
                         FROM openprose.gates WHERE run_id = $1 AND id = $2",
                        &[&self.run.id, &id],
                    )
                    .unwrap();
                (r.get(0), r.get(1), r.get(2), r.get(3))
            }
            None => self
                .run
                .conn()
                .query_row(
                    "SELECT status, resolved_by, resolution_comment, resolved_at FROM gates WHERE id = ?1",
                    [id],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .unwrap(),
        }
    }

    /// (event_type, principal, metadata) of a gate's audit rows, in order.
    pub fn events(&self, id: &str) -> Vec<(String, Option<String>, serde_json::Value)> {
        let parse = |m: Option<String>| {
            m.map(|m| serde_json::from_str(&m).unwrap())
                .unwrap_or_default()
        };
        match self.pg() {
            Some(mut c) => c
                .query(
                    "SELECT event_type, principal, metadata FROM openprose.gate_audit_log
                     WHERE run_id = $1 AND gate_id = $2 ORDER BY id",
                    &[&self.run.id, &id],
                )
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1), parse(r.get(2))))
                .collect(),
            None => {
                let c = self.run.conn();
                let mut s = c
                    .prepare("SELECT event_type, principal, metadata FROM gate_audit_log WHERE gate_id = ?1 ORDER BY id")
                    .unwrap();
                s.query_map([id], |r| Ok((r.get(0)?, r.get(1)?, parse(r.get(2)?))))
                    .unwrap()
                    .map(|r| r.unwrap())
                    .collect()
            }
        }
    }

    /// (execution_id, kind, value, source_statement, attachment_path) of a binding.
    #[allow(clippy::type_complexity)]
    pub fn binding(
        &self,
        name: &str,
        execution_id: Option<i64>,
    ) -> Option<(
        Option<i64>,
        String,
        Option<String>,
        Option<String>,
        Option<String>,
    )> {
        match self.pg() {
            Some(mut c) => c
                .query_opt(
                    "SELECT execution_id, kind, value, source_statement, attachment_path
                     FROM openprose.bindings WHERE run_id = $1 AND name = $2
                       AND COALESCE(execution_id, -1) = COALESCE($3::bigint, -1)",
                    &[&self.run.id, &name, &execution_id],
                )
                .unwrap()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4))),
            None => {
                use rusqlite::OptionalExtension;
                self.run
                    .conn()
                    .query_row(
                        "SELECT execution_id, kind, value, source_statement, attachment_path FROM bindings
                         WHERE name = ?1 AND IFNULL(execution_id, -1) = IFNULL(?2, -1)",
                        rusqlite::params![name, execution_id],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
                    )
                    .optional()
                    .unwrap()
            }
        }
    }

    /// (statement_index, statement_text, status, metadata as JSON) of an execution record.
    pub fn execution(
        &self,
        id: i64,
    ) -> (
        Option<i64>,
        Option<String>,
        Option<String>,
        serde_json::Value,
    ) {
        let parse = |m: Option<String>| {
            m.map(|m| serde_json::from_str(&m).unwrap())
                .unwrap_or_default()
        };
        match self.pg() {
            Some(mut c) => {
                let r = c
                    .query_one(
                        "SELECT statement_index, statement_text, status, metadata::text
                         FROM openprose.execution WHERE run_id = $1 AND id = $2",
                        &[&self.run.id, &id],
                    )
                    .unwrap();
                (r.get(0), r.get(1), r.get(2), parse(r.get(3)))
            }
            None => self
                .run
                .conn()
                .query_row(
                    "SELECT statement_index, statement_text, status, metadata FROM execution WHERE id = ?1",
                    [id],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, parse(r.get(3)?))),
                )
                .unwrap(),
        }
    }

    /// A gate's created_at and timeout_at, in the stored text form.
    pub fn gate_times(&self, id: &str) -> (Option<String>, Option<String>) {
        match self.pg() {
            Some(mut c) => {
                let r = c
                    .query_one(
                        "SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'),
                                to_char(timeout_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')
                         FROM openprose.gates WHERE run_id = $1 AND id = $2",
                        &[&self.run.id, &id],
                    )
                    .unwrap();
                (r.get(0), r.get(1))
            }
            None => self
                .run
                .conn()
                .query_row(
                    "SELECT created_at, timeout_at FROM gates WHERE id = ?1",
                    [id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap(),
        }
    }

    /// The run row's status, updated_at and error_message.
    pub fn run_row(&self) -> (String, Option<String>, Option<String>) {
        match self.pg() {
            Some(mut c) => {
                let r = c
                    .query_one(
                        "SELECT status, to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'),
                                error_message FROM openprose.run WHERE id = $1",
                        &[&self.run.id],
                    )
                    .unwrap();
                (r.get(0), r.get(1), r.get(2))
            }
            None => self
                .run
                .conn()
                .query_row(
                    "SELECT status, updated_at, error_message FROM run",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .unwrap(),
        }
    }

    /// The numbers of an agent's segments, in order.
    pub fn segments(&self, agent: &str) -> Vec<i64> {
        match self.pg() {
            Some(mut c) => c
                .query(
                    "SELECT segment_number FROM openprose.agent_segments
                     WHERE run_id = $1 AND agent_name = $2 ORDER BY segment_number",
                    &[&self.run.id, &agent],
                )
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect(),
            None => self
                .run
                .conn()
                .prepare("SELECT segment_number FROM agent_segments WHERE agent_name = ?1 ORDER BY segment_number")
                .unwrap()
                .query_map([agent], |r| r.get(0))
                .unwrap()
                .map(|r| r.unwrap())
                .collect(),
        }
    }

    /// The id of the newest execution record.
    pub fn last_execution_id(&self) -> i64 {
        match self.pg() {
            Some(mut c) => c
                .query_one(
                    "SELECT MAX(id) FROM openprose.execution WHERE run_id = $1",
                    &[&self.run.id],
                )
                .unwrap()
                .get(0),
            None => self
                .run
                .conn()
                .query_row("SELECT MAX(id) FROM execution", [], |r| r.get(0))
                .unwrap(),
        }
    }

    /// The columns of one of the run's tables, with their declared types, as the database's
    /// own catalog lists them.
    pub fn columns(&self, table: &str) -> Vec<(String, String)> {
        match self.pg() {
            Some(mut c) => c
                .query(
                    "SELECT column_name::text, data_type::text FROM information_schema.columns
                     WHERE table_schema = 'openprose' AND table_name = $1 ORDER BY ordinal_position",
                    &[&table],
                )
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect(),
            None => {
                let c = self.run.conn();
                let mut st = c
                    .prepare("SELECT name, type FROM pragma_table_info(?1) ORDER BY cid")
                    .unwrap();
                st.query_map([table], |r| Ok((r.get(0)?, r.get(1)?)))
                    .unwrap()
                    .map(Result::unwrap)
                    .collect()
            }
        }
    }

    /// [`View::raw`], or why the database refused it (a constraint of its own).
    pub fn try_raw(&self, sqlite: &str, postgres: &str) -> Result<(), String> {
        match self.pg() {
            Some(mut c) => c
                .batch_execute(&postgres.replace("$RUN", &self.run.id))
                .map_err(|e| format!("{e:?}")),
            None => self
                .run
                .conn()
                .execute_batch(sqlite)
                .map_err(|e| e.to_string()),
        }
    }

    /// Runs a write behind the tool's back, in each backend's dialect.
    pub fn raw(&self, sqlite: &str, postgres: &str) {
        match self.pg() {
            Some(mut c) => c
                .batch_execute(&postgres.replace("$RUN", &self.run.id))
                .unwrap(),
            None => self.run.conn().execute_batch(sqlite).unwrap(),
        }
    }
}

/// A PostgreSQL run's rows in every openprose table, as text, for "unchanged" assertions.
pub fn snapshot_pg(url: &str, run_id: &str) -> String {
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let mut out = String::new();
    for (table, key) in [
        ("run", "id"),
        ("execution", "run_id"),
        ("bindings", "run_id"),
        ("agents", "run_id"),
        ("agent_segments", "run_id"),
        ("imports", "run_id"),
        ("gates", "run_id"),
        ("gate_audit_log", "run_id"),
        ("attachments", "run_id"),
    ] {
        out += &format!("{table}:\n");
        for r in c
            .query(
                &format!("SELECT t::text FROM openprose.{table} t WHERE {key} = $1 ORDER BY 1"),
                &[&run_id],
            )
            .unwrap()
        {
            out += &format!("  {}\n", r.get::<_, String>(0));
        }
    }
    out += "attachment_chunks:\n";
    for r in c
        .query(
            "SELECT blob || ' ' || seq || ' ' || md5(data) FROM openprose.attachment_chunks
             WHERE run_id = $1 ORDER BY 1",
            &[&run_id],
        )
        .unwrap()
    {
        out += &format!("  {}\n", r.get::<_, String>(0));
    }
    out
}

/// A logical dump of a database: user_version, schema and every row of every table.
pub fn snapshot_db(db: &Path) -> String {
    let c = Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let mut out = String::new();
    let v: i64 = c
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    out += &format!("user_version={v}\n");
    let mut s = c
        .prepare("SELECT type, name, IFNULL(sql, '') FROM sqlite_master ORDER BY type, name")
        .unwrap();
    let objects: Vec<(String, String, String)> = s
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    for (ty, name, sql) in &objects {
        out += &format!("{ty} {name}: {sql}\n");
        if ty == "table" {
            let mut q = c
                .prepare(&format!("SELECT * FROM \"{name}\" ORDER BY rowid"))
                .unwrap();
            let n = q.column_count();
            let mut rows = q.query([]).unwrap();
            while let Some(row) = rows.next().unwrap() {
                let vals: Vec<String> = (0..n)
                    .map(|i| format!("{:?}", row.get_ref(i).unwrap()))
                    .collect();
                out += &format!("  {}\n", vals.join(" | "));
            }
        }
    }
    out
}

/// The files under a directory (sizes and names), except the SQLite side files.
pub fn snapshot_files(dir: &Path) -> String {
    let mut out = Vec::new();
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().display().to_string();
            if rel.ends_with("-wal") || rel.ends_with("-shm") || rel.ends_with(".db") {
                continue;
            }
            if p.is_dir() {
                out.push(format!("{rel}/"));
                walk(&p, base, out);
            } else {
                out.push(format!("{rel} {}", std::fs::metadata(&p).unwrap().len()));
            }
        }
    }
    walk(dir, dir, &mut out);
    out.sort();
    out.join("\n")
}

/// The exit code of a finished assert_cmd command.
pub fn code(a: &assert_cmd::assert::Assert) -> i32 {
    a.get_output().status.code().unwrap_or(-1)
}

pub fn stdout_text(a: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&a.get_output().stdout).into_owned()
}

pub fn stderr(a: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&a.get_output().stderr).into_owned()
}

pub fn stdout_json(a: &assert_cmd::assert::Assert) -> serde_json::Value {
    serde_json::from_slice(&a.get_output().stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}): {}",
            String::from_utf8_lossy(&a.get_output().stdout)
        )
    })
}

/// Whether `path` is the attachment file name prose-state gives one version of a binding's
/// value: `attachments/{name}@{root|execution id}.{16 hex digits}.md`.
/// On PostgreSQL the value is kept on the server, as `server:{name}@{scope}.{hex}.md`.
pub fn is_attachment_of(path: &str, name: &str, execution_id: Option<i64>) -> bool {
    let scope = execution_id.map_or_else(|| "root".to_string(), |id| id.to_string());
    let Some(rest) = path
        .strip_prefix("attachments/")
        .or_else(|| path.strip_prefix("server:"))
        .and_then(|p| p.strip_prefix(&format!("{name}@{scope}.")))
    else {
        return false;
    };
    let Some(unique) = rest.strip_suffix(".md") else {
        return false;
    };
    unique.len() == 16 && unique.chars().all(|c| c.is_ascii_hexdigit())
}

/// A run finished with `status` (unless running), made to look `days_ago` days old.
pub fn aged(p: &Project, status: &str, days_ago: i64) -> Run {
    let run = p.init();
    if status != "running" {
        run.cmd()
            .args(["finish", "--status", status])
            .assert()
            .success();
    }
    let when = (chrono::Utc::now() - chrono::Duration::days(days_ago))
        .format("%Y-%m-%d %H:%M:%S")
        .to_string();
    run.conn()
        .execute("UPDATE run SET started_at = ?1, updated_at = ?1", [&when])
        .unwrap();
    run
}

/// Runs a command on a pseudo-terminal (util-linux `script`), typing `input`.
pub fn on_terminal(p: &Project, command: &str, input: &str) -> Option<(i32, String)> {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "`script` missing under CI"
        );
        crate::common::skipped("terminal confirmation test needs util-linux `script`");
        return None;
    }
    let mut child = std::process::Command::new("script")
        .args(["-qec", command, "/dev/null"])
        .current_dir(p.root())
        .env("HOME", test_home(p.root()))
        .envs(test_clock(p.root()))
        .env_remove("PROSE_PRINCIPAL")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    Some((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    ))
}

/// A documented example run as it is written: the first ```sh block after `marker` in `doc`
/// (a path from the checkout), line by line in `dir` with the binary first on PATH (each
/// line's stdout dropped when `quiet`), each line's exit code checked against the one its
/// comment says (`# exit N`; 0 when it says none). Returns what the lines printed.
pub fn run_documented(dir: &Path, doc: &str, marker: &str, quiet: bool) -> String {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(doc)).unwrap();
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("{doc}: no {marker}"));
    let lines: Vec<String> = text[at..]
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap()
        .replace("\\\n", " ")
        .lines()
        .map(str::to_string)
        .filter(|l| !l.trim().is_empty())
        .collect();
    let mut script = String::from("PATH=\"$(dirname \"$BIN\"):$PATH\"\n");
    let drop = if quiet { " >/dev/null" } else { "" };
    for l in &lines {
        script += &format!("{l}{drop}\necho \"EXIT $?\"\n");
    }
    let out = sh(dir, &script).output().unwrap();
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    let codes: Vec<i32> = printed
        .lines()
        .filter_map(|l| l.strip_prefix("EXIT "))
        .map(|c| c.trim().parse().unwrap())
        .collect();
    let want: Vec<i32> = lines
        .iter()
        .map(|l| {
            l.split("# exit ")
                .nth(1)
                .map_or(0, |c| c.split(':').next().unwrap().trim().parse().unwrap())
        })
        .collect();
    assert_eq!(
        codes,
        want,
        "{printed}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    printed
}

/// Gate `G` opened to answer into `ans` (an integer) and about `doc` (bound `orig` first),
/// with `extra` options, approved by alice with the answer 5 and `doc` edited to `edited`.
pub fn answered_and_edited(run: &Run, extra: &[&str]) {
    run.bind("doc", "orig", None);
    run.cmd()
        .args(["gates", "create", "G", "--prompt", "P"])
        .args(["--response-schema", r#"{"type":"integer"}"#])
        .args(["--response-binding", "ans", "--inputs", "doc"])
        .args(extra)
        .assert()
        .success();
    run.cmd()
        .args(["approve", "G", "--as", "alice", "-y", "--response", "5"])
        .args(["--edit", "doc=edited"])
        .assert()
        .success();
}
