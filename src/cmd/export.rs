//! `export`: a self-contained copy of one run, as a run directory of its own.

use crate::cli::ExportArgs;
use crate::context::Context;
use crate::error::{refused, shown};
use crate::output::Render;
use crate::services::transfer::{self, Moved};
use anyhow::{Context as _, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::PathBuf;

#[derive(Debug, Serialize)]
pub struct Exported {
    pub run_id: String,
    /// The run directory written.
    pub dir: String,
    #[serde(flatten)]
    pub moved: Moved,
    pub rows: BTreeMap<&'static str, usize>,
    /// What the source held that the copy has no column for (a server's metadata columns).
    pub not_carried: Vec<String>,
}

impl Render for Exported {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        writeln!(w, "Run exported: {}", self.run_id)?;
        writeln!(w, "Directory: {}", self.dir)?;
        let rows: Vec<String> = self.rows.iter().map(|(k, v)| format!("{v} {k}")).collect();
        writeln!(w, "Rows: {}", rows.join(", "))?;
        writeln!(
            w,
            "Values: {} ({} bytes)",
            self.moved.values, self.moved.value_bytes
        )?;
        for n in &self.not_carried {
            writeln!(w, "Not carried (no such column in SQLite): {n}")?;
        }
        Ok(())
    }
}

/// Writes the run at `paths` (its store open in `store`) as a new run directory `out`.
pub fn copy_out(
    ctx: &Context,
    paths: &crate::run::RunPaths,
    mut store: Box<dyn crate::store::Store>,
    out: &std::path::Path,
) -> Result<Exported> {
    let out = out.to_path_buf();
    let exists = || {
        refused(format!(
            "{} exists: export writes a new directory",
            out.display()
        ))
    };
    if out.symlink_metadata().is_ok() {
        return Err(exists());
    }
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| crate::error::usage(format!("not a directory name: {}", out.display())))?;
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let now = crate::model::now();
    let mut tries = 0;
    loop {
        // One snapshot of the run: rows and values as they were at one moment, however many
        // writers go on meanwhile.
        let dump = transfer::read(store.as_mut())?;
        // A name raw SQL wrote that could leave the copy's directory: the whole export is
        // refused, before anything is written.
        dump.check_names()?;
        let (tmp, lock) = transfer::temp_dir(&parent, &format!(".{name}.prose-export-"))?;
        let how = transfer::How {
            reseal: false,
            event: None,
            now: now.clone(),
        };
        let built = transfer::build_dir(store.as_mut(), &paths.dir, &dump, &tmp, ctx.opts, &how);
        let moved = match built {
            Ok(moved) => moved,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&tmp);
                // A file replaced after the snapshot was taken: again, with a new snapshot.
                if transfer::value_gone(&e) && tries < 5 {
                    tries += 1;
                    store = ctx.open(paths)?;
                    continue;
                }
                return Err(e);
            }
        };
        if let Err(e) = crate::run::rename_noreplace(&tmp, &out) {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(if e.kind() == io::ErrorKind::AlreadyExists {
                exists()
            } else {
                anyhow::Error::new(e)
                    .context(format!("could not move the copy to {}", out.display()))
            });
        }
        drop(lock);
        crate::run::sync_dir(&parent)
            .with_context(|| format!("could not sync {}", parent.display()))?;
        return Ok(Exported {
            run_id: dump.run.id.clone(),
            dir: out.display().to_string(),
            moved,
            rows: dump.counts(),
            not_carried: dump.server_only.clone(),
        });
    }
}

impl super::Run for ExportArgs {
    type Output = Exported;
    fn run(&self, ctx: &Context) -> Result<Exported> {
        let copied = ctx.the_run().and_then(|(paths, store)| {
            let out = self
                .output
                .clone()
                .unwrap_or_else(|| paths.id.clone().into());
            copy_out(ctx, &paths, store, &out)
        });
        copied.map_err(|e| {
            if crate::error::code_of(&e).is_some() {
                e
            } else {
                e.context(format!(
                    "export of run {} failed",
                    shown(ctx.run.as_deref().unwrap_or("?"))
                ))
            }
        })
    }
}
