//! A PostgreSQL server for the contract suite: `PROSE_STATE_TEST_PG_URL` when set, else a
//! throwaway cluster started here (initdb and postgres on a free loopback port, as the
//! `postgres` user when running as root), stopped and removed by a watchdog when this test
//! process exits. Each test gets a database of its own, a file copy of one template per test
//! process into which the binary under test made its schema (as its first use of an empty
//! database does): a test's database costs a copy, not the template's WAL and the schema's
//! statements again (about 35 ms of the server's time in place of 550).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

static SERVER: OnceLock<Result<String, String>> = OnceLock::new();

/// The server's base URL (database `postgres`), or why there is none.
pub fn server() -> Result<&'static str, &'static str> {
    SERVER
        .get_or_init(|| match std::env::var("PROSE_STATE_TEST_PG_URL") {
            Ok(url) if !url.is_empty() => Ok(url),
            _ => start_cluster(),
        })
        .as_deref()
        .map_err(|e| e.as_str())
}

/// The role that must log in with a password on the throwaway cluster.
pub const PASSWORD_ROLE: &str = "prose_pw";

/// Whether the server is the throwaway cluster (whose settings the tests know).
pub fn is_throwaway() -> bool {
    server().is_ok() && std::env::var("PROSE_STATE_TEST_PG_URL").map_or(true, |u| u.is_empty())
}

/// A URL to a new, empty database on the server; None (after saying so loudly) when no
/// server can be had, which under CI=true is a failure instead.
pub fn fresh_database() -> Option<String> {
    let base = match server() {
        Ok(b) => b,
        Err(why) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "PostgreSQL is required under CI=true but none could be started: {why}"
            );
            {
                // Straight to stderr, which the test harness does not capture: seen in the
                // normal output.
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED: no PostgreSQL ({why}); set PROSE_STATE_TEST_PG_URL to run it"
                );
            }
            return None;
        }
    };
    let template = match template(base) {
        Ok(t) => t,
        Err(why) => panic!("the test databases' template could not be made: {why}"),
    };
    let name = format!("t_{:016x}", rand::random::<u64>());
    let mut client = postgres::Client::connect(base, postgres::NoTls).unwrap_or_else(|e| {
        // The server stopped while the tests went on: its own last words say why.
        let log = std::fs::read_to_string(died_log()).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        panic!(
            "connect to test server: {e}\nthe server's log ended:\n{}",
            tail.join("\n")
        )
    });
    // Copied while no session is on the template: the binary that made it may still be
    // leaving it a moment after it exited.
    let mut tries = 0;
    loop {
        match client.batch_execute(&format!(
            "CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY"
        )) {
            Ok(()) => break,
            Err(e)
                if tries < 100 && e.code() == Some(&postgres::error::SqlState::OBJECT_IN_USE) =>
            {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("create test database: {e}"),
        }
    }
    Some(with_database(base, &name))
}

static TEMPLATE: OnceLock<Result<String, String>> = OnceLock::new();

/// The template of this test process's databases: an empty database into which the binary
/// under test made the openprose schema, by its first connection (a project's agents listed,
/// which writes nothing else), and checked to hold it.
fn template(base: &str) -> Result<&'static str, String> {
    TEMPLATE
        .get_or_init(|| {
            let name = format!("t_tmpl_{:016x}", rand::random::<u64>());
            let mut c = postgres::Client::connect(base, postgres::NoTls)
                .map_err(|e| format!("connect: {e}"))?;
            c.batch_execute(&format!("CREATE DATABASE {name} STRATEGY FILE_COPY"))
                .map_err(|e| format!("create {name}: {e}"))?;
            let url = with_database(base, &name);
            let root = tempfile::tempdir().map_err(|e| e.to_string())?;
            // (This file is the benchmarks' too: nothing of `common` is named here.)
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_prose-state"));
            cmd.args(["agent", "--scope", "project", "list"])
                .current_dir(root.path())
                .env("HOME", root.path())
                .env("OPENPROSE_POSTGRES_URL", &url)
                .stdin(Stdio::null());
            for var in ["PROSE_RUN", "PROSE_ROOT", "PROSE_HOME", "DATABASE_URL"] {
                cmd.env_remove(var);
            }
            let out = cmd.output().map_err(|e| format!("run the binary: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "the binary's first use of {name}: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            let mut t = postgres::Client::connect(&url, postgres::NoTls)
                .map_err(|e| format!("connect to {name}: {e}"))?;
            let made: bool = t
                .query_one("SELECT to_regclass('openprose.run') IS NOT NULL", &[])
                .map_err(|e| e.to_string())?
                .get(0);
            if !made {
                return Err(format!("the binary made no schema in {name}"));
            }
            let runs: i64 = t
                .query_one("SELECT count(*) FROM openprose.run", &[])
                .map_err(|e| e.to_string())?
                .get(0);
            if runs != 0 {
                return Err(format!("{name} holds {runs} runs: it is no empty template"));
            }
            drop(t);
            Ok(name)
        })
        .as_deref()
        .map_err(|e| e.clone())
}

/// A test database that is dropped (its sessions ended first) when this goes out of scope.
pub struct Dropped(pub String);

impl Drop for Dropped {
    fn drop(&mut self) {
        let Ok(base) = server() else { return };
        let Some(name) = self.0.split('?').next().and_then(|u| u.rsplit('/').next()) else {
            return;
        };
        if !name.starts_with("t_") {
            return;
        }
        if let Ok(mut c) = postgres::Client::connect(base, postgres::NoTls) {
            let _ = c.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
        }
    }
}

/// The role `query` runs as in tests: it logs in (trusted, like every role but
/// [`PASSWORD_ROLE`]) and may read the openprose schema, and holds none of the privileges
/// `query` refuses (superuser, server files, server programs).
pub const READER_ROLE: &str = "prose_reader";

/// `url` as [`READER_ROLE`], after letting that role read the openprose tables of `url`'s
/// database (which must exist: a run made there first).
pub fn as_reader(url: &str) -> String {
    let admin = url.replace("sslmode=require", "sslmode=disable");
    let mut c = postgres::Client::connect(&admin, postgres::NoTls).expect("connect as admin");
    c.batch_execute(&format!(
        "DO $$ BEGIN CREATE ROLE {READER_ROLE} LOGIN;
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$;
         GRANT USAGE ON SCHEMA openprose TO {READER_ROLE};
         GRANT SELECT ON ALL TABLES IN SCHEMA openprose TO {READER_ROLE};"
    ))
    .expect("grant the reader role");
    let (scheme, rest) = url.split_once("://").unwrap();
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    format!("{scheme}://{READER_ROLE}@{host}")
}

/// The same server URL with another database.
pub fn with_database(url: &str, db: &str) -> String {
    let (before, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let (scheme, rest) = before.split_once("://").unwrap();
    let authority = rest.split('/').next().unwrap();
    format!("{scheme}://{authority}/{db}{query}")
}

fn find_bin(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|e| e.path().join("bin"))
        .collect();
    dirs.sort();
    dirs.into_iter()
        .rev()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Where the watchdog keeps the server's log when the server stopped before the tests did.
fn died_log() -> PathBuf {
    std::env::temp_dir().join(format!("prose-state-pg-{}-died.log", std::process::id()))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// The CA that signed the throwaway cluster's TLS certificate, when it serves TLS.
pub fn test_ca() -> Option<PathBuf> {
    server().ok()?;
    let dir = std::env::temp_dir().join(format!("prose-state-pg-{}", std::process::id()));
    let ca = dir.join("ca.pem");
    ca.is_file().then_some(ca)
}

/// A throwaway CA and a server certificate for 127.0.0.1 signed by it (openssl CLI), so the
/// cluster serves TLS that a client can verify. False when openssl is not there.
fn make_certificates(dir: &Path, root: bool) -> bool {
    let run = |args: &[&str]| {
        Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let _ = std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    );
    let ok = run(&[
        "req",
        "-new",
        "-x509",
        "-days",
        "2",
        "-nodes",
        "-subj",
        "/CN=prose-state test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]) && run(&[
        "req",
        "-new",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]) && run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-out",
        "server.crt",
        "-extfile",
        "san.ext",
    ]);
    if !ok {
        return false;
    }
    // The server refuses a key others can read; as root, the files go to `postgres`.
    use std::os::unix::fs::PermissionsExt;
    let key = dir.join("server.key");
    let _ = std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600));
    if root {
        for f in ["server.key", "server.crt"] {
            let _ = Command::new("chown")
                .arg("postgres:postgres")
                .arg(dir.join(f))
                .status();
        }
    }
    true
}

fn start_cluster() -> Result<String, String> {
    let initdb = find_bin("initdb").ok_or("no initdb under /usr/lib/postgresql/*/bin")?;
    let postgres = find_bin("postgres").ok_or("no postgres binary")?;
    let dir = std::env::temp_dir().join(format!("prose-state-pg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let root = is_root();
    // initdb refuses to run as root: run the server's programs as `postgres` then. setpriv
    // execs the program itself (no wrapper process), so the watchdog's $! is the server.
    let as_owner = |program: &Path| -> Command {
        if root {
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid=postgres",
                "--regid=postgres",
                "--init-groups",
                "--",
            ])
            .arg(program);
            c
        } else {
            Command::new(program)
        }
    };
    if root {
        let ok = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err("could not give the cluster directory to the postgres user".into());
        }
    }
    let data = dir.join("data");
    let out = as_owner(&initdb)
        .arg("-D")
        .arg(&data)
        .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
        .output()
        .map_err(|e| format!("initdb: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // One role logs in with a password (scram), to test what a wrong password says; every
    // other login is trusted. The first matching line wins.
    let hba = data.join("pg_hba.conf");
    let rest = std::fs::read_to_string(&hba).map_err(|e| format!("pg_hba.conf: {e}"))?;
    std::fs::write(
        &hba,
        format!("host all {PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256\n{rest}"),
    )
    .map_err(|e| format!("pg_hba.conf: {e}"))?;
    let tls = make_certificates(&dir, root);
    let port = free_port();
    // The watchdog: runs the server and stops it, and removes the cluster, once this test
    // process is gone.
    let server = {
        let mut c = as_owner(&postgres);
        c.arg("-D").arg(&data).args([
            "-p",
            &port.to_string(),
            "-k",
            &dir.display().to_string(),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "fsync=off",
            "-c",
            "max_connections=200",
            // The WAL is recycled early: each test's CREATE DATABASE logs a whole template.
            "-c",
            "max_wal_size=96MB",
            "-c",
            "min_wal_size=32MB",
        ]);
        if tls {
            c.args(["-c", "ssl=on", "-c"])
                .arg(format!(
                    "ssl_cert_file={}",
                    dir.join("server.crt").display()
                ))
                .arg("-c")
                .arg(format!("ssl_key_file={}", dir.join("server.key").display()));
        }
        let parts: Vec<String> = std::iter::once(c.get_program())
            .chain(c.get_args())
            .map(|a| format!("'{}'", a.to_string_lossy()))
            .collect();
        parts.join(" ")
    };
    let script = format!(
        "{server} >'{log}' 2>&1 & pg=$!; \
         while kill -0 {watch} 2>/dev/null && kill -0 $pg 2>/dev/null; do sleep 1; done; \
         kill -0 {watch} 2>/dev/null && cp '{log}' '{died}'; \
         kill -INT $pg 2>/dev/null; wait $pg; rm -rf '{dir}' '{log}'",
        log = std::env::temp_dir()
            .join(format!("prose-state-pg-{}.log", std::process::id()))
            .display(),
        died = died_log().display(),
        watch = std::process::id(),
        dir = dir.display(),
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("could not start postgres: {e}"))?;
    let url = format!("postgresql://postgres@127.0.0.1:{port}/postgres?sslmode=disable");
    let start = Instant::now();
    loop {
        match postgres::Client::connect(&url, postgres::NoTls) {
            Ok(_) => return Ok(url),
            Err(e) if start.elapsed() > Duration::from_secs(30) => {
                return Err(format!("postgres did not come up: {e}"))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Waits (at most 30 s) until no session but this one is connected to the URL's database: a
/// killed client's session, and whatever it had sent (a COMMIT), is then finished.
pub fn await_no_other_sessions(url: &str) {
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let start = std::time::Instant::now();
    loop {
        let others: i64 = c
            .query_one(
                "SELECT COUNT(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
                &[],
            )
            .unwrap()
            .get(0);
        if others == 0 {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "{others} sessions still connected after 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
