//! What cross-run commands read of many runs at once: [`Catalog`] and [`ServerCatalog`].

use super::{rules, AuditFilter, AuditRow, GateRow, RunStats, RunSummary};
use anyhow::Result;

/// Which runs a cross-run read covers: `only` these (None: every run), less `except`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    pub only: Option<Vec<String>>,
    pub except: Vec<String>,
}

/// What cross-run commands read of many runs at once, in a few queries rather than a store a
/// run: a server's tables hold every run of the project; a SQLite project keeps a catalog of
/// its runs (`catalog/`).
pub trait Catalog {
    /// Sweeps the gates with something due (a deadline, a reminder) of the runs that have
    /// any, among `runs`, each under its own run's rules; how many runs were swept, and what
    /// was done.
    fn sweep_overdue(&mut self, runs: &RunFilter, now: &str) -> Result<(usize, rules::Swept)>;
    /// The pending gates of `runs`, each with its run's program path, oldest first (by
    /// creation, then run, then id); at most `limit`.
    fn pending_gates_of(
        &mut self,
        runs: &RunFilter,
        limit: Option<i64>,
    ) -> Result<Vec<(GateRow, Option<String>)>>;
    /// The summaries of `runs`, newest first; of one status, started at or after `since`, and
    /// at most `limit`.
    fn summaries_of(
        &mut self,
        runs: &RunFilter,
        now: &str,
        status: Option<&str>,
        since: Option<&str>,
        limit: Option<i64>,
    ) -> Result<Vec<RunSummary>>;
    /// Every run of `runs` as the catalog keeps it, newest first, keyed by where it lives
    /// (its directory's name; on a server, its id), with its pending gates not past their
    /// deadline; `last_event_at` is not kept.
    fn runs_of(&mut self, runs: &RunFilter, now: &str) -> Result<Vec<(String, RunSummary)>>;
    /// The stats of every run of `runs`, keyed by where it lives, in that key's order: a
    /// SQLite run opened only when its files changed since its stats were kept; a server's
    /// in a few grouped queries (its runs' attachments, files here, are counted by the
    /// caller).
    fn stats_of(&mut self, runs: &RunFilter) -> Result<Vec<(String, RunStats)>>;
    /// What could not be read on the way, one line a run ("skipped run ID: why").
    fn warnings(&mut self) -> Vec<String> {
        Vec::new()
    }
}

/// What a server's tables answer beyond a catalog: every gate and every audit row.
pub trait ServerCatalog: Catalog + super::Snapshot {
    /// The gates of `runs`, of one status or all, each with its run's program path, oldest
    /// first; at most `limit`.
    fn gates_of(
        &mut self,
        runs: &RunFilter,
        status: Option<&str>,
        limit: Option<i64>,
    ) -> Result<Vec<(GateRow, Option<String>)>>;
    /// The ids of `runs`, in order.
    fn ids_of(&mut self, runs: &RunFilter) -> Result<Vec<String>>;
    /// The audit rows of `runs` that `filter` keeps, by run, each run's oldest first.
    fn audits_of(&mut self, runs: &RunFilter, filter: &AuditFilter) -> Result<Vec<AuditRow>>;
    /// Where these runs' state is, as [`Store::place`](super::Store::place) names it (for
    /// their anchors).
    fn catalog_place(&self) -> String;
}
