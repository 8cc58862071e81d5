//! Which runs and gates this project has. A listing reads each run in one of three places:
//! the project's catalog of its SQLite runs (`store::catalog`: a few queries, whatever the
//! number of runs), the project's PostgreSQL server (a few queries there), or the run's own
//! store, opened one at a time (with `--run` or `--scan`, when the catalog cannot be used, and
//! for what the catalog does not keep). [`Listing`] is the plan of where each run is read, and
//! the one merge of what the three places answer: `gates`, `gates audit`, `gates verify`,
//! `runs`, `stats` and `prune` ask it, and `doctor` and the maintenance commands ask it which
//! runs to visit.
//!
//! It needs the resolved [`Context`] (the one rule for where a run lives and how it is opened,
//! the server's URL, `--run`), and `gates verify` checks signatures (`services::sign`): so it
//! sits with the commands, not in the store.

use crate::context::Context;
use crate::model::{GateStatus, RunStatus};
use crate::run::RunPaths;
use crate::store::catalog::ProjectCatalog;
use crate::store::chain::{self, ChainReport};
use crate::store::sqlite::SqliteStore;
use crate::store::{
    run_stats, AuditFilter, AuditRow, Backend, Catalog, GateRow, RunFilter, RunStats, RunSummary,
    ServerCatalog, Store,
};
use anyhow::Result;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// How a listing reads the project's runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// From the project's catalog and its server, in a few queries, where they answer.
    Catalog,
    /// Every run visited, the catalog first read again from every run (`--scan`: it picks up
    /// what raw SQL wrote behind prose-state's back).
    Scan,
    /// Every run visited or read on the server: what the catalog does not keep.
    Visit,
}

/// The project's runs, each with where it is read: those the catalog keeps, those on the
/// server (every one, or the one `--run` names), and those visited one store at a time (the
/// SQLite runs, when the catalog is not read; a directory here that cannot say where its run
/// lives is visited too, so that it is reported). Each question plans the listing it needs,
/// and answers with what it found and the warnings to say, one line each.
pub struct Listing<'c> {
    ctx: &'c Context,
    /// The project's catalog of its SQLite runs, up to date.
    local: Option<ProjectCatalog>,
    /// Which runs of the project's server are read there.
    server: Option<RunFilter>,
    /// The runs read one store at a time.
    visit: Vec<RunPaths>,
    /// What planning found (the catalog unusable; the runs it could not read and the copied
    /// run directories it keeps), said first.
    warnings: Vec<String>,
}

/// What a gate listing asks.
#[derive(Debug, Clone, Copy)]
pub struct GateQuery<'a> {
    /// One status, or every status (None).
    pub status: Option<&'a str>,
    /// Only the gates whose deadline is at or before this time.
    pub due_by: Option<&'a str>,
    /// At most this many.
    pub limit: Option<u64>,
    /// Every run visited, and each gate checked against its run's sealed log (the run read
    /// whole).
    pub scan: bool,
    /// Each gate of a run visited checked against its run's sealed log, without `scan`'s
    /// visit of every run (a listing of the one run `--run` names).
    pub check: bool,
    pub now: &'a str,
}

/// A gate as a listing found it.
#[derive(Debug)]
pub struct ListedGate {
    /// Its `run_id` is the run it is listed under: the run directory that holds it.
    pub gate: GateRow,
    pub program_path: Option<String>,
    /// Its run's sealed log, checked, when the listing checked it (`scan`).
    pub checked: Option<Arc<ChainReport>>,
}

/// What a run listing asks.
#[derive(Debug, Clone, Copy)]
pub struct RunQuery<'a> {
    pub now: &'a str,
    /// Only the runs of this status.
    pub status: Option<&'a RunStatus>,
    /// Only the runs started at or after this time.
    pub since: Option<&'a str>,
    /// At most this many, newest first.
    pub limit: u64,
    /// Every run visited, after the catalog is read again.
    pub scan: bool,
}

/// A run's audit log, checked.
#[derive(Debug)]
pub struct CheckedChain {
    pub run_id: String,
    /// Where its state is, or would be, here.
    pub db: PathBuf,
    pub report: ChainReport,
}

/// Every run of the project, planned to be read once each ([`Listing::every_run`]).
pub struct EveryRun<'c>(Listing<'c>);

/// What [`EveryRun::read`] found.
pub struct RunsRead<T> {
    /// What was read of each run: the catalog's rows first, then the runs visited.
    pub read: Vec<T>,
    /// The runs visited one store at a time, in order: those with nothing in `read` could not
    /// be read.
    pub visited: Vec<RunPaths>,
    /// What planning found (the catalog unusable; the runs it could not read and the copied
    /// run directories it keeps), said first.
    pub plan_warnings: Vec<String>,
    /// What reading found: the runs that could not be read ("skipped run ID: why"), and
    /// copied run directories.
    pub warnings: Vec<String>,
}

impl<'c> Listing<'c> {
    /// Plans a listing that reads as `reading` says, or as `Reading::Scan` with `scan`. The
    /// catalog is used only for `Reading::Catalog` and with no `--run`; when it cannot be used
    /// (of a newer prose-state, or unreadable) every run is visited, and the listing says so
    /// first.
    fn plan(ctx: &'c Context, scan: bool, reading: Reading) -> Result<Self> {
        let reading = if scan { Reading::Scan } else { reading };
        if reading == Reading::Scan {
            rescan_catalog(ctx);
        }
        if reading != Reading::Catalog || ctx.run_flag().is_some() {
            return Self::visiting(ctx, Vec::new());
        }
        let opened = ProjectCatalog::open(ctx.runs_dir(), ctx.opts).and_then(|c| match c {
            Some(mut c) => c.refresh(false).map(|_| Some(c)),
            None => Ok(None),
        });
        let mut local = match opened {
            Ok(Some(c)) => c,
            Ok(None) => {
                let file = ctx.prose_dir().join(crate::store::catalog::CATALOG_FILE);
                let why = "the project catalog is of a newer prose-state: every run visited";
                return Self::visiting(ctx, vec![format!("{why} ({})", file.display())]);
            }
            Err(e) => {
                let why = format!("the project catalog cannot be used, every run visited: {e:#}");
                return Self::visiting(ctx, vec![why]);
            }
        };
        let server = ctx
            .uses_postgres()
            .then(|| local.unreadable_runs())
            .transpose()?
            .map(|except| RunFilter { only: None, except });
        let warnings = Catalog::warnings(&mut local);
        Ok(Listing {
            ctx,
            local: Some(local),
            server,
            visit: Vec::new(),
            warnings,
        })
    }

    /// The plan without the catalog: the runs on the project's server read there in a few
    /// queries (every one, or the one `--run` names), the others visited.
    fn visiting(ctx: &'c Context, warnings: Vec<String>) -> Result<Self> {
        let runs = match ctx.run_flag() {
            Some(r) => vec![ctx.locate(Some(r))?],
            None => crate::run::all_runs(ctx.root.as_deref())?,
        };
        let mut listing = Listing {
            ctx,
            local: None,
            server: None,
            visit: Vec::new(),
            warnings,
        };
        if !ctx.uses_postgres() {
            listing.visit = runs;
            return Ok(listing);
        }
        let (mut ids, mut unknown) = (Vec::new(), Vec::new());
        for run in runs {
            match (run.exists(), run.backend()) {
                (false, _) | (true, Ok(Backend::Postgres)) => ids.push(run.id),
                (true, Ok(_)) => listing.visit.push(run),
                // Visited, so that it is reported, and not read from the server meanwhile.
                (true, Err(_)) => {
                    unknown.push(run.id.clone());
                    listing.visit.push(run);
                }
            }
        }
        listing.server = match (ctx.run_flag(), ids.is_empty()) {
            (None, _) => Some(RunFilter {
                only: None,
                except: unknown,
            }),
            (Some(_), true) => None,
            (Some(_), false) => Some(RunFilter {
                only: Some(ids),
                except: Vec::new(),
            }),
        };
        Ok(listing)
    }

    /// Whether a run visited is one of several the listing reads: then one that cannot be
    /// read is a warning; when it is the listing's only run, the error.
    fn several(&self) -> bool {
        self.visit.len() > 1 || self.server.is_some() || self.local.is_some()
    }

    /// The one merge of the three places: the plan's warnings; what the catalog answers, and
    /// what it could not read; what the server answers; then each run visited (a few at a
    /// time), and what could not be read.
    fn gather<T: Send, V: IntoIterator<Item = T> + Send>(
        self,
        local: impl FnOnce(&mut ProjectCatalog) -> Result<Vec<T>>,
        server: impl FnOnce(&mut dyn ServerCatalog, &RunFilter) -> Result<Vec<T>>,
        visit: impl Fn(&RunPaths, &mut dyn Store) -> Result<V> + Sync,
    ) -> Result<(Vec<T>, Vec<String>)> {
        let several = self.several();
        let Listing {
            ctx,
            local: catalog,
            server: on_server,
            visit: runs,
            mut warnings,
        } = self;
        let mut found = Vec::new();
        if let Some(mut catalog) = catalog {
            found = local(&mut catalog)?;
            warnings.extend(Catalog::warnings(&mut catalog));
        }
        if let Some(runs) = &on_server {
            found.extend(server(ctx.server_catalog()?.as_mut(), runs)?);
        }
        let (visited, unread) = visit_runs(&runs, several, ctx, visit)?;
        warnings.extend(unread);
        found.extend(visited.into_iter().flatten());
        Ok((found, warnings))
    }

    /// Does what is due on the pending gates of every run (timeouts, escalations, reminders):
    /// the runs with something due, as the catalog and the server say, and every run that must
    /// be visited. How many runs had something done, and what.
    pub fn sweep(
        ctx: &'c Context,
        now: &str,
        scan: bool,
    ) -> Result<(usize, crate::store::rules::Swept, Vec<String>)> {
        let (found, warnings) = Self::plan(ctx, scan, Reading::Catalog)?.gather(
            |local| Ok(vec![local.sweep_overdue(&RunFilter::default(), now)?]),
            |server, runs| Ok(vec![server.sweep_overdue(runs, now)?]),
            |_, store| {
                let done = store.sweep_timeouts(now)?;
                Ok([(usize::from(done.total() > 0), done)])
            },
        )?;
        let mut all = crate::store::rules::Swept::default();
        let mut runs = 0;
        for (n, done) in found {
            runs += n;
            all.add(done);
        }
        Ok((runs, all, warnings))
    }

    /// The gates of `q.status`, oldest first across runs. Overdue gates are swept first (only
    /// the runs with one are opened). The catalog keeps only pending gates: other statuses are
    /// read from the server and from every run visited.
    pub fn gates(ctx: &'c Context, q: &GateQuery) -> Result<(Vec<ListedGate>, Vec<String>)> {
        let reading = if q.status == Some("pending") {
            Reading::Catalog
        } else {
            Reading::Visit
        };
        let unchecked = |found: Vec<(GateRow, Option<String>)>| {
            let listed = |(gate, program_path)| ListedGate {
                gate,
                program_path,
                checked: None,
            };
            found.into_iter().map(listed).collect()
        };
        // With a deadline to meet, the limit applies after it: every gate is read.
        let limit = q.limit.filter(|_| q.due_by.is_none()).map(|n| n as i64);
        let (mut gates, warnings) = Self::plan(ctx, q.scan, reading)?.gather(
            |local| {
                let all = RunFilter::default();
                local.sweep_overdue(&all, q.now)?;
                Ok(unchecked(local.pending_gates_of(&all, limit)?))
            },
            |server, runs| {
                server.sweep_overdue(runs, q.now)?;
                Ok(unchecked(server.gates_of(runs, q.status, limit)?))
            },
            |run, store| {
                let program = store.run_info()?.program_path;
                // With `scan`, each gate is checked against its sealed log (the run read whole).
                // As `gates verify` checks it: the log, and the bindings its openings name.
                let checked = (q.scan || q.check).then(|| {
                    crate::services::inputs::verify_run(store, &run.dir, None)
                        .map(|(report, _)| Arc::new(report))
                });
                let checked = checked.transpose()?;
                let gates = store.gates(q.status.map(GateStatus::parse).as_ref(), q.now)?;
                Ok(gates
                    .into_iter()
                    .map(|mut gate| {
                        // Listed under the run directory that holds it (a copy's rows name
                        // the original).
                        gate.run_id = Some(listed_id(run, gate.run_id.as_deref()));
                        ListedGate {
                            gate,
                            program_path: program.clone(),
                            checked: checked.clone(),
                        }
                    })
                    .collect::<Vec<_>>())
            },
        )?;
        if let Some(by) = q.due_by {
            gates.retain(|g| g.gate.timeout_at.as_deref().is_some_and(|at| at <= by));
        }
        gates.sort_by(|a, b| a.gate.created_at.cmp(&b.gate.created_at));
        if let Some(n) = q.limit {
            gates.truncate(n as usize);
        }
        Ok((gates, warnings))
    }

    /// The runs `q` asks for, newest first (by start, then id). The catalog and the server
    /// each answer in one query, limited there; only the runs of the page are read whole.
    pub fn runs(ctx: &'c Context, q: &RunQuery) -> Result<(Vec<RunSummary>, Vec<String>)> {
        let status = q.status.map(RunStatus::as_str);
        let page = |c: &mut dyn Catalog, runs: &RunFilter| {
            c.summaries_of(runs, q.now, status, q.since, Some(q.limit as i64))
        };
        let (mut runs, warnings) = Self::plan(ctx, q.scan, Reading::Catalog)?.gather(
            |local| page(local, &RunFilter::default()),
            |server, runs| page(server, runs),
            |run, store| {
                let mut s = store.run_summary(q.now)?;
                s.run.id = listed_id(run, Some(&s.run.id));
                Ok([s])
            },
        )?;
        runs.retain(|r| {
            q.status.is_none_or(|w| r.run.status.as_ref() == Some(w))
                && q.since
                    .is_none_or(|s| r.run.started_at.as_deref().is_some_and(|t| t >= s))
        });
        runs.sort_by(|a, b| (&b.run.started_at, &b.run.id).cmp(&(&a.run.started_at, &a.run.id)));
        runs.truncate(q.limit as usize);
        Ok((runs, warnings))
    }

    /// Every run's stats, by where it lives (its directory's name; on the server, its id): a
    /// SQLite run of the catalog opened only when its files changed since its stats were
    /// kept, the server's in a few grouped queries; with `scan`, every run opened.
    pub fn stats(ctx: &'c Context, scan: bool) -> Result<(Vec<RunStats>, Vec<String>)> {
        let (mut keyed, warnings) = Self::plan(ctx, scan, Reading::Catalog)?.gather(
            |local| local.stats_of(&RunFilter::default()),
            |server, runs| {
                let mut keyed = server.stats_of(runs)?;
                for (id, st) in &mut keyed {
                    // A server run's attachments are files here, in its directory (if any).
                    (st.attachment_files, st.attachment_bytes) =
                        crate::run::footprint(&ctx.runs_dir().join(&*id));
                }
                Ok(keyed)
            },
            |run, store| Ok([(run.id.clone(), run_stats(store, &run.dir, &run.id)?)]),
        )?;
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        Ok((keyed.into_iter().map(|(_, st)| st).collect(), warnings))
    }

    /// The audit rows `filter` keeps, by run, each run's in their order: the server's in one
    /// query, every other run visited (the catalog keeps no audit rows).
    pub fn audits(ctx: &'c Context, filter: &AuditFilter) -> Result<(Vec<AuditRow>, Vec<String>)> {
        let (mut rows, warnings) = Self::plan(ctx, false, Reading::Visit)?.gather(
            // The catalog keeps no audit rows: this plan reads none.
            |_| Ok(Vec::new()),
            |server, runs| server.audits_of(runs, filter),
            |_, store| store.audit(filter),
        )?;
        rows.sort_by(|a, b| (&a.run_id, a.id).cmp(&(&b.run_id, b.id)));
        Ok((rows, warnings))
    }

    /// Every run's audit log checked against its seals and this machine's anchor, and every
    /// gate against its log; with `signed`, every decision checked for that key's signature.
    /// The server's runs are read in two queries and each checked as `Store::verify_audit`
    /// checks one; every other run is visited. By run id.
    pub fn chains(
        ctx: &'c Context,
        signed: Option<&crate::store::signatures::SignedBy>,
    ) -> Result<(Vec<CheckedChain>, Vec<String>)> {
        let (mut chains, warnings) = Self::plan(ctx, false, Reading::Visit)?.gather(
            // The catalog keeps no audit rows: this plan reads none.
            |_| Ok(Vec::new()),
            |server, runs| {
                let ids = server.ids_of(runs)?;
                // Each anchor before the logs (see `Store::verify_audit`).
                let place = server.catalog_place();
                let home = ctx.opts.wiring.home();
                let anchors: Vec<_> = ids
                    .iter()
                    .map(|id| crate::store::seal::anchored(home.as_deref(), &place, id))
                    .collect();
                // The gates and the logs in one snapshot: a decision committed between the
                // two reads would otherwise show its row ahead of its sealed events.
                let (gate_rows, audit_rows) = crate::store::consistent(server, |s| {
                    Ok((
                        s.gates_of(runs, None, None)?,
                        s.audits_of(runs, &AuditFilter::default())?,
                    ))
                })?;
                let mut gates: HashMap<String, Vec<GateRow>> = HashMap::new();
                for (gate, _) in gate_rows {
                    gates
                        .entry(gate.run_id.clone().unwrap_or_default())
                        .or_default()
                        .push(gate);
                }
                let mut audits: HashMap<String, Vec<AuditRow>> = HashMap::new();
                for row in audit_rows {
                    audits.entry(row.run_id.clone()).or_default().push(row);
                }
                let key = ctx.opts.wiring.key_for_reading()?;
                let mut chains = Vec::new();
                for (id, anchor) in ids.into_iter().zip(anchors) {
                    let rows = audits.get(&id).map_or(&[][..], Vec::as_slice);
                    let gates = gates.get(&id).map_or(&[][..], Vec::as_slice);
                    let mut report = chain::check(rows, gates, Some(&id), key, anchor.as_ref());
                    if let Some(signed) = signed {
                        crate::services::sign::check(&mut report, rows, gates, signed);
                    }
                    let db = RunPaths::in_dir(ctx.runs_dir().join(&id)).db;
                    chains.push(CheckedChain {
                        run_id: id,
                        db,
                        report,
                    });
                }
                Ok(chains)
            },
            |run, store| {
                let report = store.verify_signed(signed)?;
                let run_id = store
                    .run_info()
                    .map(|r| r.id)
                    .unwrap_or_else(|_| run.id.clone());
                Ok([CheckedChain {
                    run_id,
                    db: run.db.clone(),
                    report,
                }])
            },
        )?;
        chains.sort_by(|a, b| a.run_id.cmp(&b.run_id));
        Ok((chains, warnings))
    }

    /// Every run of the project, to be read once each by a plan over all of them (`prune`):
    /// the catalog's runs from their rows, and every other run visited: those the catalog
    /// could not read, those on the project's server (each opened, as a plan acts on each),
    /// and, without the catalog, every run.
    pub fn every_run(ctx: &'c Context) -> Result<EveryRun<'c>> {
        let mut listing = Self::plan(ctx, false, Reading::Catalog)?;
        if let Some(filter) = listing.server.take() {
            let ids = ctx.server_catalog()?.ids_of(&filter)?;
            add_server_runs(ctx, &mut listing.visit, ids);
        }
        Ok(EveryRun(listing))
    }

    /// The runs a command that visits each run acts on (`doctor`, `checkpoint`, `vacuum`,
    /// `migrate`): the one `--run` names on the command line, or every run (an exported
    /// PROSE_RUN does not narrow a listing).
    pub fn runs_to_visit(ctx: &Context) -> Result<Vec<RunPaths>> {
        match ctx.run_flag() {
            Some(r) => Ok(vec![ctx.locate(Some(r))?]),
            None => all_runs(ctx),
        }
    }

    /// The project's catalog of its SQLite runs, as it is (`doctor`); None when it is of a
    /// newer version.
    pub fn project_catalog(ctx: &Context) -> Result<Option<ProjectCatalog>> {
        ProjectCatalog::open(ctx.runs_dir(), ctx.opts)
    }
}

impl EveryRun<'_> {
    /// Reads every run once: a run the catalog keeps becomes `from_catalog(its paths, its
    /// row)`, without opening it; a run visited, `from_store`.
    pub fn read<T: Send>(
        self,
        now: &str,
        mut from_catalog: impl FnMut(RunPaths, RunSummary) -> T,
        from_store: impl Fn(&RunPaths, &mut dyn Store) -> Result<T> + Sync,
    ) -> Result<RunsRead<T>> {
        let Listing {
            ctx,
            local,
            server: _,
            mut visit,
            warnings: plan_warnings,
        } = self.0;
        let catalogued = local.is_some();
        let mut read = Vec::new();
        let mut warnings = Vec::new();
        if let Some(mut local) = local {
            let at = |dir: String| RunPaths::in_dir(ctx.runs_dir().join(dir));
            for (dir, s) in local.runs_of(&RunFilter::default(), now)? {
                read.push(from_catalog(at(dir), s));
            }
            // The runs it could not read are visited first.
            visit.splice(0..0, local.unreadable_runs()?.into_iter().map(at));
            warnings = local.warnings();
        }
        let several = visit.len() > 1 || catalogued;
        let (visited, unread) = visit_runs(&visit, several, ctx, from_store)?;
        read.extend(visited);
        warnings.extend(unread);
        Ok(RunsRead {
            read,
            visited: visit,
            plan_warnings,
            warnings,
        })
    }
}

/// `--scan`: every row of the project catalog read again from its run (it picks up what raw
/// SQL wrote behind prose-state's back); best effort, the listing visits every run.
fn rescan_catalog(ctx: &Context) {
    if ctx.run_flag().is_none() {
        if let Ok(Some(mut c)) = ProjectCatalog::open(ctx.runs_dir(), ctx.opts) {
            let _ = c.rebuild();
        }
    }
}

/// Every run under the root, and the runs on the project's server that have no directory
/// here; oldest id first.
fn all_runs(ctx: &Context) -> Result<Vec<RunPaths>> {
    let mut runs = crate::run::all_runs(ctx.root.as_deref())?;
    if ctx.uses_postgres() {
        add_server_runs(ctx, &mut runs, ctx.project_server()?.run_ids()?);
        runs.sort_by(|a, b| a.id.cmp(&b.id));
    }
    Ok(runs)
}

/// Adds to `runs` each run of `ids`, on the project's server, that is not among them yet.
fn add_server_runs(ctx: &Context, runs: &mut Vec<RunPaths>, ids: Vec<String>) {
    for id in ids {
        // An id written on the server by other means must not become a path.
        let Ok(dir) = crate::model::path_in(ctx.runs_dir(), &id, crate::model::PathName::Run)
        else {
            continue;
        };
        if !runs.iter().any(|r| r.id == id) {
            runs.push(RunPaths::in_dir(dir));
        }
    }
}

/// Applies `f` to each of `runs`, a few runs at a time on worker threads (each with its own
/// connection: opening a run's database is most of the cost of visiting runs), and returns
/// the results in run order. A run that cannot be read is a warning when the listing has
/// `several` runs, and the error when it is the listing's only run; a copied run directory
/// is named in a warning.
pub(super) fn visit_runs<T: Send>(
    runs: &[RunPaths],
    several: bool,
    ctx: &Context,
    f: impl Fn(&RunPaths, &mut dyn Store) -> Result<T> + Sync,
) -> Result<(Vec<T>, Vec<String>)> {
    let progress = crate::term::Progress::new(runs.len());
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8)
        .min(runs.len().max(1));
    let visit = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(run) = runs.get(i) else { break done };
            progress.step();
            done.push((
                i,
                ctx.open(run).and_then(|mut store| f(run, store.as_mut())),
            ));
        }
    };
    let mut results: Vec<(usize, Result<T>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers).map(|_| s.spawn(visit)).collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    results.sort_by_key(|(i, _)| *i);
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    for (i, result) in results {
        match result {
            Ok(v) => {
                if let Some(recorded) = copy_of(ctx, &runs[i]) {
                    warnings.push(crate::store::catalog::copy_warning(&runs[i].id, &recorded));
                }
                out.push(v)
            }
            Err(e) if several => warnings.push(format!("skipped run {}: {e:#}", runs[i].id)),
            Err(e) => return Err(e),
        }
    }
    Ok((out, warnings))
}

/// The id a run directory of the project records, when it is not the directory's name (a
/// copy made by hand); None for every other run.
fn copy_of(ctx: &Context, paths: &RunPaths) -> Option<String> {
    let (_, dir_id) = crate::store::catalog::of_state_db(&paths.db)?;
    if !paths.db.is_file() || paths.dir.join(crate::run::BACKEND_FILE).is_file() {
        return None;
    }
    let recorded = SqliteStore::open(&paths.db, ctx.opts)
        .ok()?
        .run_info()
        .ok()?
        .id;
    (recorded != dir_id).then_some(recorded)
}

/// The id a listing shows for a run visited at `paths` whose rows say `recorded`: a run
/// directory of the project is listed under its own name (a copy's rows name the original).
fn listed_id(paths: &RunPaths, recorded: Option<&str>) -> String {
    match crate::store::catalog::of_state_db(&paths.db) {
        Some((_, dir_id)) => dir_id,
        None => recorded.unwrap_or(&paths.id).to_string(),
    }
}
