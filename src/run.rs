//! Where runs live on disk: `<root>/.prose/runs/{id}/` with `state.db`, `program.prose` and
//! `attachments/`. Backend-neutral: a run directory exists whatever store holds its state.

use crate::error::{not_found, shown, usage};
use anyhow::Result;
use std::path::{Path, PathBuf};

pub const DB_FILE: &str = "state.db";
pub const PROGRAM_FILE: &str = "program.prose";
pub const ATTACHMENTS_DIR: &str = "attachments";
/// Present in a run directory whose state is not in its own state.db.
pub const BACKEND_FILE: &str = "backend.json";

/// The paths of one run.
#[derive(Debug, Clone)]
pub struct RunPaths {
    pub id: String,
    pub dir: PathBuf,
    pub db: PathBuf,
}

impl RunPaths {
    /// Whether a run lives here: a state.db, or a record of another backend.
    pub fn exists(&self) -> bool {
        self.db.is_file() || self.dir.join(BACKEND_FILE).is_file()
    }

    pub fn backend(&self) -> Result<crate::model::Backend> {
        let marker = self.dir.join(BACKEND_FILE);
        if !marker.is_file() {
            return Ok(crate::model::Backend::Sqlite);
        }
        let text = std::fs::read_to_string(&marker)?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("invalid {} ({e}): {}", BACKEND_FILE, marker.display()))?;
        match v["backend"].as_str() {
            Some("postgres") => Ok(crate::model::Backend::Postgres),
            Some("sqlite") => Ok(crate::model::Backend::Sqlite),
            other => Err(anyhow::anyhow!(
                "unknown backend {other:?} in {}",
                marker.display()
            )),
        }
    }

    pub fn in_dir(dir: PathBuf) -> Self {
        let id = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let db = dir.join(DB_FILE);
        RunPaths { id, dir, db }
    }
}

/// `<root>/.prose/runs`, written relative when the root is the current directory so that the
/// paths prose-state prints are the ones the spec shows (`.prose/runs/{id}/state.db`).
pub fn runs_dir(root: Option<&Path>) -> PathBuf {
    match root {
        Some(r) if r != Path::new(".") && r != Path::new("") => r.join(".prose").join("runs"),
        _ => PathBuf::from(".prose").join("runs"),
    }
}

/// Finds a run from what `--run` was given: a run id under the root, a run directory, or the
/// path of a state.db (so a subagent handed `.prose/runs/ID/state.db` can pass it as it is).
pub fn locate(root: Option<&Path>, run: Option<&str>) -> Result<RunPaths> {
    let Some(run) = run else {
        return Err(usage(
            "no run given: pass --run RUN (a run id, a run directory or a state.db path) or set PROSE_RUN",
        ));
    };
    if run.is_empty() {
        return Err(usage("empty --run"));
    }
    let looks_like_path = run.contains('/') || run.contains('\\') || run.starts_with('.');
    if !looks_like_path {
        let paths = RunPaths::in_dir(runs_dir(root).join(run));
        if paths.exists() {
            return Ok(paths);
        }
    }
    let path = Path::new(run);
    if path.is_dir() {
        let paths = RunPaths::in_dir(path.to_path_buf());
        if paths.exists() {
            return Ok(paths);
        }
        return Err(not_found(format!(
            "run directory has no {DB_FILE}: {}",
            path.display()
        )));
    }
    if path.is_file() {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let id = if path.file_name().is_some_and(|n| n == DB_FILE) {
            RunPaths::in_dir(dir.clone()).id
        } else {
            String::new()
        };
        return Ok(RunPaths {
            id,
            dir,
            db: path.to_path_buf(),
        });
    }
    Err(not_found(format!(
        "run not found (no run with that id under {}, and no such directory or state.db): {}",
        runs_dir(root).display(),
        shown(run)
    )))
}

/// Every run under the root that has a state.db, oldest id first (ids sort by time).
pub fn all_runs(root: Option<&Path>) -> Result<Vec<RunPaths>> {
    let dir = runs_dir(root);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(
                anyhow::Error::new(e).context(format!("could not list runs: {}", dir.display()))
            )
        }
    };
    let mut runs: Vec<RunPaths> = entries
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| RunPaths::in_dir(e.path()))
        .filter(RunPaths::exists)
        .collect();
    runs.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(runs)
}

/// `<home>/.prose/agents.db`: user-scoped agent memory.
pub fn user_agents_db(home: &Path) -> PathBuf {
    home.join(".prose").join("agents.db")
}

/// Renames `from` to `to`, failing with `AlreadyExists` if `to` exists, whatever it is (a plain
/// rename(2) silently replaces an empty directory or a file).
pub fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    renameat2(from, to, libc::RENAME_NOREPLACE)
}

/// Swaps `from` and `to` in one step: each is found under the other's name, never neither.
pub fn rename_exchange(from: &Path, to: &Path) -> std::io::Result<()> {
    renameat2(from, to, libc::RENAME_EXCHANGE)
}

fn renameat2(from: &Path, to: &Path, flags: libc::c_uint) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
    };
    let (from_c, to_c) = (c(from)?, c(to)?);
    // SAFETY: two valid NUL-terminated paths, relative to the current directory.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from_c.as_ptr(),
            libc::AT_FDCWD,
            to_c.as_ptr(),
            flags,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Syncs a directory, so that a rename or creation inside it survives power loss.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Temporary directories of `init` start with this prefix, beside the runs, in `runs/`.
pub const INIT_PREFIX: &str = ".init-";

/// What is left in `runs/` of an init that never finished: this version's temporary
/// directories whose lock no live `init` holds, and run directories an older version left
/// half-made (no state.db and no backend record, or a state.db that is empty or has no
/// tables: `has_tables` asks the store). Each with why.
pub fn leftovers(
    root: Option<&Path>,
    has_tables: &dyn Fn(&Path) -> bool,
) -> Vec<(PathBuf, String)> {
    let Ok(entries) = std::fs::read_dir(runs_dir(root)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if name.starts_with(INIT_PREFIX) {
            let owned = std::fs::File::open(&path).is_ok_and(|d| d.try_lock().is_err());
            if !owned {
                out.push((path, "an init that did not finish (killed)".to_string()));
            }
            continue;
        }
        if name.starts_with('.') {
            continue;
        }
        let run = RunPaths::in_dir(path.clone());
        if run.dir.join(BACKEND_FILE).is_file() {
            continue;
        }
        let why = match std::fs::symlink_metadata(&run.db) {
            Err(_) => Some("a run directory with no state.db (an init that did not finish)"),
            Ok(m) if m.is_file() && m.len() == 0 => {
                Some("an empty state.db (an init that did not finish)")
            }
            Ok(m) if m.is_file() && !has_tables(&run.db) => {
                Some("a state.db with no tables (an init that did not finish)")
            }
            _ => None,
        };
        if let Some(why) = why {
            out.push((path, why.to_string()));
        }
    }
    out.sort();
    out
}

/// Files in a run's attachments/ and their total size (none counted through a symlinked
/// directory: what it points at is not the run's).
pub fn footprint(run_dir: &Path) -> (u64, u64) {
    let dir = run_dir.join(ATTACHMENTS_DIR);
    if !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
        return (0, 0);
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    entries
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .fold((0, 0), |(n, b), m| (n + 1, b + m.len()))
}
