//! The runs' stats the catalog keeps, each under the files it was read from: a run is
//! opened only when its files changed since.

use super::{all, begin, file_stamp, in_parallel, stamp_of, ProjectCatalog};
use crate::store::{RunFilter, RunStats, StoreStats};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// A SQLite run's stats as the catalog keeps them (`run_stats.stats`): every figure but the
/// backend, in one JSON object.
#[derive(Serialize, Deserialize)]
#[serde(remote = "RunStats")]
struct KeptStats {
    run_id: String,
    #[serde(flatten, with = "KeptStore")]
    store: StoreStats,
    attachment_files: u64,
    attachment_bytes: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(remote = "StoreStats")]
struct KeptStore {
    #[serde(skip, default = "sqlite")]
    backend: &'static str,
    schema_version: i64,
    db_bytes: Option<u64>,
    wal_bytes: Option<u64>,
    tables: BTreeMap<String, i64>,
    execution_status: BTreeMap<String, i64>,
    binding_inline_bytes: i64,
    settings: BTreeMap<String, String>,
    /// Kept for SQLite runs only, which keep nothing on a server.
    #[serde(skip)]
    server: Option<crate::store::ServerStats>,
}

fn sqlite() -> &'static str {
    "sqlite"
}

/// What a run's stats are read from: its state.db and log (`stamp_of`), and its attachments
/// directory (identity and modification time: a file added, replaced or removed changes it).
fn stats_files(dir: &Path) -> String {
    let attachments = std::fs::symlink_metadata(dir.join(crate::run::ATTACHMENTS_DIR));
    let attachments = file_stamp(attachments, |m| m.file_type().is_dir());
    format!("{}/{attachments}", stamp_of(&dir.join(crate::run::DB_FILE)))
}

impl ProjectCatalog {
    /// The stats of every SQLite run of `runs` (see `Catalog::stats_of`).
    pub(super) fn kept_stats(&mut self, runs: &RunFilter) -> Result<Vec<(String, RunStats)>> {
        let Some(c) = self.db() else {
            return Ok(Vec::new());
        };
        let sql = "SELECT r.id, s.files, s.stats FROM runs r LEFT JOIN run_stats s ON s.id = r.id
                   WHERE +r.kind = 'sqlite' ORDER BY r.id";
        type Kept = (String, Option<String>, Option<String>);
        let kept: Vec<Kept> = all::<Kept>(c, sql, [], |r| r.try_into())
            .map_err(self.err())?
            .into_iter()
            .filter(|(id, ..)| Self::wanted(runs, id))
            .collect();
        let runs_dir = &self.runs_dir;
        let now = in_parallel(&kept, |(id, ..)| stats_files(&runs_dir.join(id)));
        let mut out = Vec::with_capacity(kept.len());
        let mut changed = Vec::new();
        for ((id, files, stats), before) in kept.into_iter().zip(now) {
            if files.as_deref() == Some(before.as_str()) {
                let kept = stats.and_then(|s| {
                    KeptStats::deserialize(&mut serde_json::Deserializer::from_str(&s)).ok()
                });
                if let Some(k) = kept {
                    out.push((id, k));
                    continue;
                }
            }
            changed.push((id, before));
        }
        let progress = crate::term::Progress::new(changed.len());
        let mut read = Vec::new();
        for (id, before) in changed {
            progress.step();
            let dir = self.runs_dir.join(&id);
            let paths = crate::run::RunPaths::in_dir(dir.clone());
            let st = crate::store::sqlite::SqliteStore::open(&paths.db, self.opts)
                .and_then(|mut s| crate::store::run_stats(&mut s, &dir, &id));
            match st {
                Ok(st) => {
                    // Kept under the files read only if they did not change meanwhile (the
                    // first open may make the log): otherwise read again next time.
                    if stats_files(&dir) == before {
                        let mut json = Vec::new();
                        KeptStats::serialize(&st, &mut serde_json::Serializer::new(&mut json))?;
                        let json = String::from_utf8(json)?;
                        read.push((id.clone(), before, json));
                    }
                    out.push((id, st));
                }
                Err(e) => self.problems.push(format!("skipped run {id}: {e:#}")),
            }
        }
        if !read.is_empty() {
            let c = self.db().expect("checked above");
            let tx = begin(c).map_err(self.err())?;
            for (id, files, json) in &read {
                tx.prepare_cached(
                    "INSERT OR REPLACE INTO run_stats (id, files, stats) VALUES (?1, ?2, ?3)",
                )
                .and_then(|mut s| s.execute([id, files, json]))
                .map_err(self.err())?;
            }
            tx.commit().map_err(self.err())?;
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }
}
