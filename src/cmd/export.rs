//! `export`: a self-contained copy of one run, as a run directory of its own.

use crate::cli::ExportArgs;
use crate::context::Context;
use crate::error::{refused, shown};
use crate::output::Render;
use crate::services::transfer::{self, Moved};
use anyhow::Result;
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
        self.moved.text(w, &self.rows)?;
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
    let how = transfer::How {
        reseal: false,
        event: None,
        now: crate::model::now(),
    };
    // The run checked as `gates verify` checks it: a gate it finds tampered (its row, or what
    // its openings name: a version rewritten, a value changed in place) is not carried out.
    crate::services::inputs::refuse_tampered(
        store.as_mut(),
        &paths.dir,
        &paths.id,
        "not exported",
    )?;
    let mut tries = 0;
    loop {
        // One snapshot of the run: rows and values as they were at one moment, however many
        // writers go on meanwhile.
        let dump = transfer::read(store.as_mut())?;
        // A name raw SQL wrote that could leave the copy's directory: the whole export is
        // refused, before anything is written.
        dump.check_names()?;
        let moved = transfer::build_and_place(
            &parent,
            &format!(".{name}.prose-export-"),
            |tmp| transfer::build_dir(store.as_mut(), &paths.dir, &dump, tmp, ctx.opts, &how),
            |tmp| crate::run::rename_noreplace(tmp, &out),
            exists,
            &format!("the copy to {}", out.display()),
        );
        match moved {
            // A file replaced after the snapshot was taken: again, with a new snapshot.
            Err(e) if transfer::value_gone(&e) && tries < 5 => {
                tries += 1;
                store = ctx.open(paths)?;
            }
            moved => {
                return Ok(Exported {
                    run_id: dump.run.id.clone(),
                    dir: out.display().to_string(),
                    moved: moved?,
                    rows: dump.counts(),
                    not_carried: dump.server_only.clone(),
                })
            }
        }
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
