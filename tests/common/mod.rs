//! Fixtures: a project in a temp directory (removed on drop), runs made through the real
//! binary, and direct connections to check what the binary really wrote.

#![allow(dead_code)]

pub mod pg;

use assert_cmd::Command;
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use tempfile::TempDir;

pub const BIN: &str = env!("CARGO_BIN_EXE_prose-state");

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
        }
    }

    /// A project on the given backend: for PostgreSQL, a database of its own named in
    /// `.prose/.env`, as a user would set it up. None when no server can be had.
    pub fn on(backend: Backend) -> Option<Self> {
        let mut p = Project::new();
        if backend == Backend::Postgres {
            let url = pg::fresh_database()?;
            std::fs::create_dir_all(p.root().join(".prose")).unwrap();
            std::fs::write(
                p.root().join(".prose/.env"),
                format!("OPENPROSE_POSTGRES_URL={url}\n"),
            )
            .unwrap();
            p.backend = backend;
            p.pg_url = Some(url);
        }
        Some(p)
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// The binary, run in the project root with none of the caller's PROSE_* settings.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(BIN);
        c.current_dir(self.root())
            .env_remove("PROSE_RUN")
            .env_remove("PROSE_ROOT")
            .env_remove("PROSE_STATE_BUSY_TIMEOUT")
            .env_remove("PROSE_PRINCIPAL")
            .env_remove("OPENPROSE_POSTGRES_URL")
            .env_remove("DATABASE_URL");
        c
    }

    /// A std Command for the binary (for spawning many at once).
    pub fn std_cmd(&self) -> std::process::Command {
        let mut c = std::process::Command::new(BIN);
        c.current_dir(self.root())
            .env_remove("PROSE_RUN")
            .env_remove("PROSE_ROOT")
            .env_remove("PROSE_STATE_BUSY_TIMEOUT")
            .env_remove("OPENPROSE_POSTGRES_URL")
            .env_remove("DATABASE_URL");
        c
    }

    pub fn write(&self, name: &str, content: &[u8]) -> PathBuf {
        let p = self.root().join(name);
        std::fs::write(&p, content).unwrap();
        p
    }

    /// Makes a run through `init --json` and returns it.
    pub fn init(&self) -> Run {
        let backend = match self.backend {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        };
        let out = self
            .cmd()
            .args(["init", "--json", "--backend", backend])
            .assert()
            .success();
        let v: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
        let dir = self.root().join(v["dir"].as_str().unwrap());
        Run {
            id: v["run_id"].as_str().unwrap().to_string(),
            db: dir.join("state.db"),
            dir,
            root: self.root().to_path_buf(),
        }
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
}

impl Run {
    /// The binary with `--run ID` in the project root.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(BIN);
        c.current_dir(&self.root)
            .env_remove("PROSE_RUN")
            .env_remove("PROSE_ROOT")
            .env_remove("PROSE_STATE_BUSY_TIMEOUT")
            .env_remove("PROSE_PRINCIPAL")
            .env_remove("OPENPROSE_POSTGRES_URL")
            .env_remove("DATABASE_URL")
            .args(["--run", &self.id]);
        c
    }

    pub fn std_cmd(&self) -> std::process::Command {
        let mut c = std::process::Command::new(BIN);
        c.current_dir(&self.root)
            .env_remove("PROSE_RUN")
            .env_remove("PROSE_ROOT")
            .env_remove("PROSE_STATE_BUSY_TIMEOUT")
            .env_remove("OPENPROSE_POSTGRES_URL")
            .env_remove("DATABASE_URL")
            .args(["--run", &self.id]);
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

    /// Everything in the run, for "unchanged" assertions: the db's content and schema and the
    /// files of the run directory.
    pub fn snapshot(&self) -> String {
        snapshot_db(&self.db) + &snapshot_files(&self.dir)
    }
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
pub fn is_attachment_of(path: &str, name: &str, execution_id: Option<i64>) -> bool {
    let scope = execution_id.map_or_else(|| "root".to_string(), |id| id.to_string());
    let Some(rest) = path.strip_prefix(&format!("attachments/{name}@{scope}.")) else {
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
