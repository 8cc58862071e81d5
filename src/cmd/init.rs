use crate::cli::{BackendArg, InitArgs};
use crate::context::Context;
use crate::error::{not_found, refused, shown, usage};
use crate::model::{check_run_id, new_run_id, now};
use crate::output::Render;
use crate::run::{
    rename_noreplace, sync_dir, RunPaths, ATTACHMENTS_DIR, BACKEND_FILE, INIT_PREFIX, PROGRAM_FILE,
};
use crate::store::catalog::changing_runs;
use crate::store::{Backend, NewRun};
use anyhow::{Context as _, Result};
use serde::Serialize;
use std::fs;
use std::io::{self, Write};
use std::path::Path;

#[derive(Debug, Serialize)]
pub struct Initialized {
    pub run_id: String,
    pub dir: String,
    pub db: String,
    pub program: Option<String>,
    /// `--quiet`: the text is the run id alone.
    #[serde(skip)]
    pub quiet: bool,
}

impl Render for Initialized {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        if self.quiet {
            return writeln!(w, "{}", self.run_id);
        }
        writeln!(w, "Run created: {}", self.run_id)?;
        writeln!(w, "Directory: {}", self.dir)?;
        writeln!(w, "Database: {}", self.db)?;
        if let Some(p) = self.program {
            writeln!(w, "Program: {p}")?;
        }
        Ok(())
    }
}

pub fn run(args: &InitArgs, ctx: &Context) -> Result<Initialized> {
    args.run_id.as_deref().map(check_run_id).transpose()?;
    let program = match &args.program {
        Some(path) => {
            let bytes = fs::read(path).map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => {
                    not_found(format!("program not found: {}", path.display()))
                }
                _ => anyhow::Error::new(e)
                    .context(format!("could not read program: {}", path.display())),
            })?;
            let source = String::from_utf8(bytes)
                .map_err(|_| usage(format!("program is not valid UTF-8: {}", path.display())))?;
            Some((path.to_string_lossy().into_owned(), source))
        }
        None => None,
    };

    // Who starts the run, sealed in its genesis (a token that is not valid is refused here,
    // before anything is written).
    let starter = ctx.actor(&args.principal, &args.token)?;
    let runs = ctx.runs_dir().to_path_buf();
    fs::create_dir_all(&runs)
        .with_context(|| format!("could not create runs directory: {}", runs.display()))?;
    // The project's id, which its principals book is bound to (made once).
    if !ctx.uses_postgres() {
        crate::store::principals::project_id(ctx.prose_dir(), true)?;
    }
    // The run is built whole in a temporary directory beside the runs, locked while this
    // process lives, and renamed into place complete: a killed init leaves nothing under a
    // run id, only a temporary directory that `doctor --fix` removes.
    let mut attempts = 0;
    let (paths, location) = loop {
        let id = args.run_id.clone().unwrap_or_else(new_run_id);
        let target = RunPaths::in_dir(runs.join(&id));
        if target.dir.symlink_metadata().is_err() {
            let suffix: u64 = rand::random();
            let tmp = runs.join(format!("{INIT_PREFIX}{id}-{suffix:016x}"));
            // Both changes to the runs directory are announced to the catalog, so that the
            // next listing need not compare the directory's names with its rows.
            changing_runs(&runs, None, || fs::create_dir(&tmp))
                .with_context(|| format!("could not create run directory: {}", tmp.display()))?;
            let built = build(args, &tmp, &id, program.as_ref(), ctx, &starter);
            let result = built.and_then(|(lock, location)| {
                sync_dir(&tmp)?;
                match changing_runs(&runs, Some(&id), || rename_noreplace(&tmp, &target.dir)) {
                    Ok(()) => {
                        drop(lock);
                        sync_dir(&runs)?;
                        Ok(Some(location))
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
                    Err(e) => Err(anyhow::Error::new(e).context(format!(
                        "could not move the new run into place: {}",
                        target.dir.display()
                    ))),
                }
            });
            if let Ok(Some(location)) = result {
                break (target, location);
            }
            let _ = fs::remove_dir_all(&tmp);
            result?;
            // Made meanwhile by another init with the same id.
            if matches!(args.backend, BackendArg::Postgres) {
                let _ = ctx.discard_server_run(&id);
            }
        }
        attempts += 1;
        if args.run_id.is_some() || attempts >= 5 {
            return Err(refused(format!("run already exists: {}", shown(&id))));
        }
    };
    // An anchor left by an earlier run of this id at this place (pruned, then the id used
    // again) would say rows were cut from this new run's log: forgotten.
    if let Ok(store) = ctx.open(&paths) {
        let home = ctx.opts.wiring.home();
        crate::store::seal::forget(home.as_deref(), &store.place(), &paths.id);
    }
    let location = if matches!(args.backend, BackendArg::Sqlite) {
        paths.db.display().to_string()
    } else {
        location
    };
    Ok(Initialized {
        run_id: paths.id.clone(),
        dir: paths.dir.display().to_string(),
        db: location,
        program: program.map(|(p, _)| p),
        quiet: args.quiet,
    })
}

/// Builds a complete run in `dir` (its temporary directory): attachments/, the program copy,
/// the backend record and the store with its run row. Returns the directory's lock, held
/// until the run is in place, and where the state is.
fn build(
    args: &InitArgs,
    dir: &Path,
    id: &str,
    program: Option<&(String, String)>,
    ctx: &Context,
    starter: &str,
) -> Result<(fs::File, String)> {
    let lock = fs::File::open(dir)
        .with_context(|| format!("could not open run directory: {}", dir.display()))?;
    lock.lock()
        .with_context(|| format!("could not lock run directory: {}", dir.display()))?;
    let attachments = dir.join(ATTACHMENTS_DIR);
    fs::create_dir(&attachments)
        .with_context(|| format!("could not create {}", attachments.display()))?;
    if let Some((_, source)) = program {
        let copy = dir.join(PROGRAM_FILE);
        fs::write(&copy, source).with_context(|| format!("could not write {}", copy.display()))?;
        fs::File::open(&copy).and_then(|f| f.sync_all())?;
    }
    let backend = match args.backend {
        BackendArg::Sqlite => Backend::Sqlite,
        BackendArg::Postgres => {
            let marker = dir.join(BACKEND_FILE);
            fs::write(&marker, "{\"backend\": \"postgres\"}\n")
                .with_context(|| format!("could not write {}", marker.display()))?;
            fs::File::open(&marker).and_then(|f| f.sync_all())?;
            Backend::Postgres
        }
    };
    let mut paths = RunPaths::in_dir(dir.to_path_buf());
    paths.id = id.to_string();
    let mut created = ctx.create(
        &paths,
        backend,
        &NewRun {
            id,
            program_path: program.map(|(p, _)| p.as_str()),
            program_source: program.map(|(_, s)| s.as_str()),
            created_at: &now(),
            history_keep: history_default(ctx)?,
        },
    )?;
    let location = created.location();
    // Sealed from its first row, its genesis, so that no row can later pass for one from
    // before the chain. Without a home for the audit key (no PROSE_HOME or HOME) the run is
    // made unsealed and sealed at its first gate event, which needs the key anyway.
    if ctx.opts.wiring.home().is_some() {
        created.seal_run(&now(), Some(starter))?;
    }
    // The schema is most of a new run's pages: folded into the file now, so that the first
    // open of every later command (a cross-run listing opens every run) has no log of it to
    // read. Closed before the move.
    if backend == Backend::Sqlite {
        created.checkpoint("truncate")?;
    }
    drop(created);
    Ok((lock, location))
}

impl super::Run for InitArgs {
    type Output = Initialized;
    fn run(&self, ctx: &Context) -> Result<Initialized> {
        run(self, ctx)
    }
}

/// The setting of the project's default bound on binding history (`prune --history KEEP
/// --default`), in its principals book's settings.
pub const HISTORY_KEEP: &str = "history-keep";

/// The project's default bound on versions kept of each binding, which a new run records:
/// None (all) unless `prune --history KEEP --default` set one.
fn history_default(ctx: &crate::context::Context) -> Result<Option<i64>> {
    let Some(mut book) = ctx.principal_book(false)? else {
        return Ok(None);
    };
    Ok(book
        .setting(HISTORY_KEEP)?
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|k| *k > 0))
}
