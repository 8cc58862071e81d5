//! `import`: a run brought into this project's backend, whole or not at all.

use crate::cli::{BackendArg, ImportArgs};
use crate::context::Context;
use crate::error::{not_found, refused, shown, usage};
use crate::output::Render;
use crate::run::{RunPaths, BACKEND_FILE, INIT_PREFIX};
use crate::services::transfer::{self, How, Moved};
use crate::store::dump::RunDump;
use crate::store::postgres::PgStore;
use crate::store::rules::Restore;
use crate::store::sqlite::SqliteStore;
use crate::store::Store;
use anyhow::Result;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

#[derive(Debug, Serialize)]
pub struct Imported {
    pub run_id: String,
    pub backend: &'static str,
    /// The same run with the same content was here already: nothing was written.
    pub unchanged: bool,
    /// A run with the same id and other content was replaced.
    pub replaced: bool,
    /// Execution and audit ids were numbered anew by the destination (a server numbers its
    /// own); every reference moved with them.
    pub renumbered: bool,
    #[serde(flatten)]
    pub moved: Moved,
    pub rows: BTreeMap<&'static str, usize>,
    /// Audit rows sealed with another machine's key: resealed here with `--vouch`, else kept
    /// as they came (unattested here).
    pub sealed_elsewhere: usize,
    /// Whether this import vouched for them (`--vouch`).
    pub vouched: bool,
    /// The decisions among them (approvals, rejections, votes, timeouts), each as
    /// "approved g1 by bob at TIME, sealed under key KEYID": what a person vouching makes
    /// count here, which this machine cannot check (another machine's key, or one made up).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub decisions_sealed_elsewhere: Vec<String>,
    /// The content digest: the same for every copy of the same run.
    pub digest: String,
    /// What the source held that the destination has no column for.
    pub not_carried: Vec<String>,
    /// Lines of the source that could not be mapped (filesystem mode).
    pub unmapped: Vec<String>,
}

impl Render for Imported {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        if self.unchanged {
            writeln!(
                w,
                "Run unchanged: {} (already here with the same content)",
                self.run_id
            )?;
            if self.sealed_elsewhere > 0 {
                writeln!(
                    w,
                    "Audit: {} rows sealed on another machine, not vouched for by this import (nothing was written): to vouch for them, import the copy under a new id with --run-id NEW --vouch",
                    self.sealed_elsewhere
                )?;
            }
        } else {
            let how = if self.replaced {
                "replaced"
            } else {
                "imported"
            };
            writeln!(w, "Run {how}: {} ({})", self.run_id, self.backend)?;
            self.moved.text(w, &self.rows)?;
            if self.renumbered {
                writeln!(w, "Ids: execution and audit ids numbered by the server")?;
            }
            if self.sealed_elsewhere > 0 {
                let how = if self.vouched {
                    "vouched for and sealed here"
                } else {
                    "kept as they came: their decisions are unattested here (to vouch for them, import the copy again with --vouch under a new id: --run-id NEW --vouch)"
                };
                let n = self.sealed_elsewhere;
                writeln!(w, "Audit: {n} rows sealed on another machine, {how}")?;
                for d in &self.decisions_sealed_elsewhere {
                    writeln!(w, "Sealed elsewhere: {}", crate::output::visible(d))?;
                }
            }
        }
        for n in &self.not_carried {
            writeln!(w, "Not carried: {n}")?;
        }
        for n in &self.unmapped {
            writeln!(w, "Not mapped: {n}")?;
        }
        Ok(())
    }
}

/// The run directory and state.db that PATH names. A state.db that is a symbolic link is
/// refused (exit 4), as every symlink in a copy is: read through it, the database would be
/// another run's, read with this directory's attachments (or none), and a dangling one would
/// look like no run at all.
fn source(path: &Path) -> Result<(PathBuf, PathBuf)> {
    let db = match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => path.join("state.db"),
        _ => path.to_path_buf(),
    };
    if std::fs::symlink_metadata(&db).is_ok_and(|m| m.is_symlink()) {
        let target =
            std::fs::read_link(&db).map_or_else(|_| "?".to_string(), |t| t.display().to_string());
        return Err(refused(format!(
            "{} is a symbolic link (to {target}), which import does not follow (nothing was imported): import the run directory it points into",
            db.display()
        )));
    }
    let meta = std::fs::metadata(path)
        .map_err(|_| not_found(format!("nothing to import at {}", path.display())))?;
    if meta.is_dir() {
        if path.join(BACKEND_FILE).is_file() {
            return Err(refused(format!(
                "{} holds no state: its run lives on a server (export it there with `prose-state export --run ID`)",
                path.display()
            )));
        }
        let db = path.join("state.db");
        if !db.is_file() {
            return Err(not_found(format!(
                "no state.db in {} (a run of the filesystem state mode is imported with --from filesystem)",
                path.display()
            )));
        }
        return Ok((path.to_path_buf(), db));
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((dir, path.to_path_buf()))
}

/// A copy read in, checked, and ready to write.
pub struct Incoming<'a> {
    pub src: &'a mut dyn Store,
    pub src_dir: &'a Path,
    pub dump: RunDump,
    pub digest: String,
    pub report: crate::store::chain::ChainReport,
    pub unmapped: Vec<String>,
    /// Where the copy came from, as the `imported` event records it.
    pub label: String,
}

/// `import` of a run directory of prose-state's (`fs_import` dispatches: it also takes a run
/// of the filesystem state mode).
pub fn from_run(args: &ImportArgs, ctx: &Context) -> Result<Imported> {
    if let Some(new) = &args.run_id {
        crate::model::check_run_id(new)?;
        if !args.vouch {
            return Err(usage(
                "--run-id chains every audit row again under the new id and seals it here: it needs --vouch",
            ));
        }
    }
    let (src_dir, db) = source(&args.path)?;
    let mut src = SqliteStore::open(&db, ctx.opts)?;
    let dump = transfer::read(&mut src)?;
    let mut incoming = checked(&mut src, &src_dir, dump, Vec::new())?;
    if let Some(new) = &args.run_id {
        reidentify(&mut incoming, new)?;
    }
    land(incoming, args, ctx)
}

/// Gives a checked copy a new run id: the run's rows and every audit row name it, and the
/// sealed chain is computed again over them (the import then seals it here, `--vouch`). Rows
/// of the older unsealed chain hash their database ids and run id as they were: such a run
/// is refused, whole.
fn reidentify(c: &mut Incoming, new: &str) -> Result<()> {
    let old = std::mem::replace(&mut c.dump.run.id, new.to_string());
    if c.dump
        .audit
        .iter()
        .any(|r| r.seq.is_none() && r.hash.is_some())
    {
        return Err(refused(format!(
            "run {} holds audit rows from before prose-state schema 5, whose hashes cover its id: it cannot be re-identified (nothing was imported)",
            shown(&old)
        )));
    }
    for r in &mut c.dump.audit {
        r.run_id = new.to_string();
    }
    let mut sealed: Vec<&mut crate::store::AuditRow> = c
        .dump
        .audit
        .iter_mut()
        .filter(|r| r.seq.is_some())
        .collect();
    sealed.sort_by_key(|r| r.seq);
    let mut prev = String::new();
    for r in sealed {
        r.prev_hash = Some(prev.clone());
        let hash = r.chain_hash(&prev);
        r.hash = Some(hash.clone());
        r.seal = None;
        prev = hash;
    }
    c.digest = transfer::digest(c.src, c.src_dir, &c.dump)?;
    c.label = format!("{} (run {} re-identified)", c.label, old);
    Ok(())
}

/// Checks a copy: its id, its chain, and its content digest.
pub fn checked<'a>(
    src: &'a mut dyn Store,
    src_dir: &'a Path,
    dump: RunDump,
    unmapped: Vec<String>,
) -> Result<Incoming<'a>> {
    crate::model::check_run_id(&dump.run.id).map_err(|_| {
        refused(format!(
            "the run's id is not one prose-state gives a run: {}",
            shown(&dump.run.id)
        ))
    })?;
    dump.check_names()?;
    let report = crate::services::inputs::verify_copy(&dump, src, src_dir)?;
    let digest = transfer::digest(src, src_dir, &dump)?;
    Ok(Incoming {
        label: src_dir.display().to_string(),
        src,
        src_dir,
        dump,
        digest,
        report,
        unmapped,
    })
}

/// Writes a checked copy into the project's backend (or `--backend`).
pub fn land(mut c: Incoming, args: &ImportArgs, ctx: &Context) -> Result<Imported> {
    let postgres = args
        .backend
        .map_or_else(|| ctx.uses_postgres(), |b| b == BackendArg::Postgres);
    let principal = ctx.principal(&args.principal)?.map(|p| p.to_string());
    let tip = c
        .dump
        .audit
        .iter()
        .filter(|r| r.seq.is_some())
        .max_by_key(|r| r.seq)
        .map(|r| serde_json::json!({"seq": r.seq, "hash": r.hash}));
    let metadata = serde_json::json!({
        "client": "cli",
        "source": c.label,
        "digest": c.digest,
        "rows": c.dump.counts(),
        "source_head": tip,
        "attested_here": c.report.attested,
        "sealed_elsewhere": c.report.other_key,
        "unattested": c.report.unattested.len(),
        "vouched": if args.vouch { c.report.other_key } else { 0 },
    });
    let how = How {
        // An import raises no row's trust by itself: only a person who vouches does.
        reseal: args.vouch,
        event: Some((principal, metadata)),
        now: crate::model::now(),
    };
    let mut out = Imported {
        run_id: c.dump.run.id.clone(),
        backend: if postgres { "postgres" } else { "sqlite" },
        unchanged: false,
        replaced: false,
        renumbered: postgres,
        moved: Moved::default(),
        rows: c.dump.counts(),
        sealed_elsewhere: c.report.other_key,
        vouched: args.vouch,
        decisions_sealed_elsewhere: decisions_sealed_elsewhere(&c),
        digest: c.digest.clone(),
        not_carried: if postgres {
            Vec::new()
        } else {
            c.dump.server_only.clone()
        },
        unmapped: std::mem::take(&mut c.unmapped),
    };
    if postgres {
        into_server(&mut c, args.replace, ctx, &how, &mut out)?;
    } else {
        into_dir(&mut c, args.replace, ctx, &how, &mut out)?;
    }
    Ok(out)
}

/// The decisions among the copy's rows sealed under a key this machine does not check with
/// (its report's unattested rows that carry a seal), each in words with the key id its seal
/// names: what `--vouch` would make count, shown whether it is given or not.
fn decisions_sealed_elsewhere(c: &Incoming) -> Vec<String> {
    const DECISIONS: [&str; 5] = ["approved", "rejected", "approval", "rejection", "timeout"];
    c.dump
        .audit
        .iter()
        .filter(|r| r.seal.is_some() && c.report.unattested.contains(&r.id))
        .filter(|r| DECISIONS.contains(&r.event_type.as_str()))
        .map(|r| {
            let key = r
                .seal
                .as_deref()
                .and_then(|s| s.split(':').nth(1))
                .unwrap_or("?");
            format!(
                "{} {} by {} at {}, sealed under key {key}",
                r.event_type,
                r.gate_id,
                r.principal.as_deref().unwrap_or("-"),
                r.timestamp.as_deref().unwrap_or("-")
            )
        })
        .collect()
}

/// Whether the run already here (`have`, its directory `dir`) is the copy's: then nothing is
/// written. Else the copy replaces it only with `--replace`, and never rolls it back.
fn already_here(
    have: &mut dyn Store,
    dir: &Path,
    c: &Incoming,
    replace: bool,
    out: &mut Imported,
) -> Result<bool> {
    let here = transfer::read(have)?;
    if transfer::digest(have, dir, &here)? == c.digest {
        // Nothing written: nothing vouched for either, whatever was asked.
        out.unchanged = true;
        out.vouched = false;
        return Ok(true);
    }
    if !replace {
        return Err(other_content(&c.dump.run.id));
    }
    refuse_rollback(have, &c.dump.run.id, &c.dump)?;
    out.replaced = true;
    Ok(false)
}

pub fn into_server(
    c: &mut Incoming,
    replace: bool,
    ctx: &Context,
    how: &How,
    out: &mut Imported,
) -> Result<()> {
    let url = ctx.postgres_url()?;
    let id = c.dump.run.id.clone();
    let (mut dst, exists) = PgStore::open_maybe(&url, &id, ctx.opts)?;
    if exists {
        // Compared on a connection of its own (a snapshot is read-only).
        let (mut probe, _) = PgStore::open_maybe(&url, &id, ctx.opts)?;
        if already_here(&mut probe, &ctx.runs_dir().join(&id), c, replace, out)? {
            return Ok(());
        }
    }
    // The values first, each in a transaction of its own; then the rows, in one.
    let mut staged = Vec::new();
    let mut paths = HashMap::new();
    let mut upload = || -> Result<()> {
        for (path, name, execution_id) in c.dump.values() {
            let mut reader = transfer::value(c.src, c.src_dir, path, name)?;
            let s = crate::services::attach::upload(&mut reader, &mut dst, name, execution_id)?;
            out.moved.values += 1;
            out.moved.value_bytes += s.bytes;
            paths.insert(path.to_string(), s.rel.clone());
            staged.push(s);
        }
        Ok(())
    };
    let mut result = upload();
    if result.is_ok() {
        result = dst.restore(&Restore {
            dump: &c.dump,
            paths: &paths,
            fresh: false,
            replace,
            reseal: how.reseal,
            event: how.event.as_ref().map(|(p, m)| (p.as_deref(), m.clone())),
            now: &how.now,
        });
    }
    for s in &staged {
        let _ = dst.end_upload(&s.blob, result.is_ok());
    }
    result?;
    dst.anchor_chain();
    Ok(())
}

pub fn into_dir(
    c: &mut Incoming,
    replace: bool,
    ctx: &Context,
    how: &How,
    out: &mut Imported,
) -> Result<()> {
    let id = c.dump.run.id.clone();
    let runs = ctx.runs_dir().to_path_buf();
    let target = runs.join(&id);
    let exists = target.symlink_metadata().is_ok();
    let paths = RunPaths::in_dir(target.clone());
    if exists && already_here(ctx.open(&paths)?.as_mut(), &target, c, replace, out)? {
        return Ok(());
    }
    // Built whole beside the runs (a killed import leaves a directory `doctor --fix` removes),
    // then moved into place in one step.
    out.moved = transfer::build_and_place(
        &runs,
        &format!("{INIT_PREFIX}{id}-"),
        |tmp| transfer::build_dir(c.src, c.src_dir, &c.dump, tmp, ctx.opts, how),
        |tmp| {
            if !exists {
                return crate::run::rename_noreplace(tmp, &target);
            }
            // The catalog's row is read again once the run is exchanged.
            crate::store::catalog::while_replacing(&paths.db, ctx.opts, || {
                crate::run::rename_exchange(tmp, &target)
            })
        },
        || other_content(&id),
        &format!("the run into place: {}", target.display()),
    )?;
    // The chain is anchored where the run now is.
    let mut store = ctx.open(&paths)?;
    let home = ctx.opts.wiring.home();
    crate::store::seal::forget(home.as_deref(), &store.place(), &id);
    store.anchor_chain();
    Ok(())
}

/// A copy that would replace a run must not roll it back: it holds the row this machine
/// anchored for the run, or, when that row is the run's own `imported` event (bookkeeping of
/// this destination, never in a copy), every other sealed row the run holds here. Otherwise
/// a reopened gate would go back to an approved opening, a rejection would be cut off, and
/// the anchor that would catch it is forgotten by the import.
fn refuse_rollback(have: &mut dyn Store, id: &str, dump: &RunDump) -> Result<()> {
    let home = have.wiring().home();
    let Some(a) = crate::store::seal::anchored(home.as_deref(), &have.place(), id) else {
        return Ok(());
    };
    let in_copy = |seq: i64, hash: Option<&str>| {
        dump.audit
            .iter()
            .any(|r| r.seq == Some(seq) && r.hash.as_deref() == hash)
    };
    if in_copy(a.seq, Some(a.hash.as_str())) {
        return Ok(());
    }
    let here = have.audit(&crate::store::AuditFilter::default())?;
    let anchored_import = here.iter().any(|r| {
        r.seq == Some(a.seq)
            && r.hash.as_deref() == Some(a.hash.as_str())
            && RunDump::is_import_event(r)
    });
    let kept = here
        .iter()
        .filter(|r| r.seq.is_some() && !RunDump::is_import_event(r))
        .all(|r| in_copy(r.seq.unwrap_or_default(), r.hash.as_deref()));
    if anchored_import && kept {
        return Ok(());
    }
    Err(crate::error::tampered(format!(
        "the copy lacks audit rows run {} holds here (this machine anchored seq {}): it would roll the run back; nothing was imported",
        shown(id),
        a.seq
    )))
}

fn other_content(id: &str) -> anyhow::Error {
    refused(format!(
        "run {} already exists here with other content: import --replace to replace it (nothing was imported)",
        shown(id)
    ))
}
