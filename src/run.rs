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

    /// The `.prose` directory the run belongs to (`.prose/runs/{id}` → `.prose`).
    pub fn prose_dir(&self) -> PathBuf {
        self.dir
            .parent()
            .and_then(Path::parent)
            .map_or_else(|| PathBuf::from(".prose"), Path::to_path_buf)
    }

    pub fn backend(&self) -> Result<crate::store::Backend> {
        let marker = self.dir.join(BACKEND_FILE);
        if !marker.is_file() {
            return Ok(crate::store::Backend::Sqlite);
        }
        let text = std::fs::read_to_string(&marker)?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("invalid {} ({e}): {}", BACKEND_FILE, marker.display()))?;
        match v["backend"].as_str() {
            Some("postgres") => Ok(crate::store::Backend::Postgres),
            Some("sqlite") => Ok(crate::store::Backend::Sqlite),
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

/// `<root>/.prose/agents.db`: project-scoped agent memory.
pub fn project_agents_db(root: Option<&Path>) -> PathBuf {
    match runs_dir(root).parent() {
        Some(prose) => prose.join("agents.db"),
        None => PathBuf::from(".prose").join("agents.db"),
    }
}

/// `<home>/.prose/agents.db`: user-scoped agent memory.
pub fn user_agents_db(home: &Path) -> PathBuf {
    home.join(".prose").join("agents.db")
}
