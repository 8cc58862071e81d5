use crate::cli::{BackendArg, InitArgs};
use crate::error::{not_found, refused, shown, usage};
use crate::model::{check_run_id, new_run_id, now};
use crate::output::Render;
use crate::run::{runs_dir, RunPaths, ATTACHMENTS_DIR, BACKEND_FILE, PROGRAM_FILE};
use crate::store::{self, Backend, NewRun, OpenOptions};
use anyhow::{Context, Result};
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
}

impl Render for Initialized {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        writeln!(w, "Run created: {}", self.run_id)?;
        writeln!(w, "Directory: {}", self.dir)?;
        writeln!(w, "Database: {}", self.db)?;
        if let Some(p) = self.program {
            writeln!(w, "Program: {p}")?;
        }
        Ok(())
    }
}

pub fn run(args: &InitArgs, root: Option<&Path>, opts: OpenOptions) -> Result<Initialized> {
    if let Some(id) = &args.run_id {
        check_run_id(id)?;
    }
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

    let runs = runs_dir(root);
    fs::create_dir_all(&runs)
        .with_context(|| format!("could not create runs directory: {}", runs.display()))?;
    // Creating the run directory is what reserves the id: it fails if the id is taken.
    let mut attempts = 0;
    let paths = loop {
        let id = args.run_id.clone().unwrap_or_else(new_run_id);
        let paths = RunPaths::in_dir(runs.join(&id));
        match fs::create_dir(&paths.dir) {
            Ok(()) => break paths,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                attempts += 1;
                if args.run_id.is_some() || attempts >= 5 {
                    return Err(refused(format!("run already exists: {}", shown(&id))));
                }
            }
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "could not create run directory: {}",
                    paths.dir.display()
                )))
            }
        }
    };

    let made = (|| -> Result<String> {
        let attachments = paths.dir.join(ATTACHMENTS_DIR);
        fs::create_dir(&attachments)
            .with_context(|| format!("could not create {}", attachments.display()))?;
        if let Some((_, source)) = &program {
            let copy = paths.dir.join(PROGRAM_FILE);
            fs::write(&copy, source)
                .with_context(|| format!("could not write {}", copy.display()))?;
        }
        let backend = match args.backend {
            BackendArg::Sqlite => Backend::Sqlite,
            BackendArg::Postgres => {
                let marker = paths.dir.join(BACKEND_FILE);
                fs::write(&marker, "{\"backend\": \"postgres\"}\n")
                    .with_context(|| format!("could not write {}", marker.display()))?;
                Backend::Postgres
            }
        };
        let created = store::create(
            &paths,
            backend,
            &NewRun {
                id: &paths.id,
                program_path: program.as_ref().map(|(p, _)| p.as_str()),
                program_source: program.as_ref().map(|(_, s)| s.as_str()),
                created_at: &now(),
            },
            opts,
        )?;
        Ok(created.location())
    })();
    let location = match made {
        Ok(l) => l,
        Err(e) => {
            // Nothing half-made is left behind under the run's id.
            let _ = fs::remove_dir_all(&paths.dir);
            return Err(e);
        }
    };
    Ok(Initialized {
        run_id: paths.id.clone(),
        dir: paths.dir.display().to_string(),
        db: location,
        program: program.map(|(p, _)| p),
    })
}
