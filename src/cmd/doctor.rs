//! `doctor`: what is wrong with the runs, one line a problem; `--fix` repairs what is safe.

use super::listing::Listing;
use super::{over_runs, Run};
use crate::cli::DoctorArgs;
use crate::context::Context;
use crate::output::Render;
use crate::run::{RunPaths, ATTACHMENTS_DIR};
use crate::services::attach::{self, TEMP_PREFIX};
use crate::store::chain::Integrity;
use crate::store::{server_blob, BindingRow, Store, SERVER_PREFIX};
use anyhow::Result;
use serde::Serialize;
use std::collections::HashSet;
use std::io::{self, Write};

#[derive(Debug, Serialize)]
pub struct Problem {
    pub run_id: String,
    pub kind: &'static str,
    pub detail: String,
    /// Repaired by --fix.
    pub fixed: bool,
}

#[derive(Debug, Serialize)]
pub struct Diagnosis {
    pub runs_checked: usize,
    pub problems: Vec<Problem>,
}

impl Render for Diagnosis {
    /// 0 when nothing is left wrong, 1 otherwise.
    fn exit_code(&self) -> crate::error::Code {
        if self.problems.iter().any(|p| !p.fixed) {
            crate::error::Code::Error
        } else {
            crate::error::Code::Ok
        }
    }

    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        if self.problems.is_empty() {
            return writeln!(w, "healthy: {} runs checked", self.runs_checked);
        }
        for p in &self.problems {
            let fixed = if p.fixed { " (fixed)" } else { "" };
            writeln!(w, "{}: {}: {}{fixed}", p.run_id, p.kind, p.detail)?;
        }
        Ok(())
    }
}

impl Problem {
    fn new(run_id: impl Into<String>, kind: &'static str, detail: String, fixed: bool) -> Self {
        let run_id = run_id.into();
        Problem {
            run_id,
            kind,
            detail,
            fixed,
        }
    }
}

/// The size of a value on the server, as a problem names it.
/// The schema's triggers the database does not hold, each with what its absence means, made
/// again with `fix`: (name, detail, made again).
fn triggers(store: &mut dyn Store, fix: bool) -> Result<Vec<(String, String, bool)>> {
    let missing = store.missing_triggers()?;
    let made = match fix && !missing.is_empty() {
        true => store.restore_triggers()?,
        false => Vec::new(),
    };
    Ok(missing
        .into_iter()
        .map(|t| {
            use crate::store::history::Kept;
            let meaning = if Kept::Bindings.keeps_by(&t) {
                "bindings' writes are not kept in history, and `bind` refuses to write"
            } else if Kept::Agents.keeps_by(&t) {
                "agents' memory writes are not kept in history"
            } else if t.starts_with("gate_audit_log") {
                "the gate audit log is not append-only"
            } else if t.ends_with("_notify") {
                "waiters are not woken by commits (they look every 30 s)"
            } else {
                "the schema's rule it keeps is not kept"
            };
            let keeps_history = Kept::Bindings.keeps_by(&t) || Kept::Agents.keeps_by(&t);
            let again = if made.contains(&t) && keeps_history {
                "made again, and the history it keeps marked as not known before now"
            } else if made.contains(&t) {
                "made again"
            } else {
                "`prose-state doctor --fix` makes it again"
            };
            let detail = format!(
                "trigger {t} is missing (dropped behind prose-state's back): {meaning}; {again}"
            );
            let fixed = made.contains(&t);
            (t, detail, fixed)
        })
        .collect())
}

fn size(bytes: Option<i64>) -> String {
    bytes.map_or("an incomplete upload".to_string(), |b| format!("{b} bytes"))
}

pub fn run(req: &DoctorArgs, runs: &[RunPaths], ctx: &Context) -> Result<Diagnosis> {
    let now = crate::model::now();
    // Whether every run is checked (no `--run`).
    let all_runs = ctx.run_flag().is_none();
    // What killed inits left: never a run, so checked apart from the runs and removed whole
    // (remove_dir_all removes a symlink inside, never what it points at).
    let leftovers = crate::run::leftovers(ctx.root.as_deref(), &crate::store::sqlite::has_schema);
    let mut problems = Vec::new();
    for (dir, why) in &leftovers {
        let fixed = req.fix && std::fs::remove_dir_all(dir).is_ok();
        let name = dir
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned());
        let detail = format!("{}: {why}", dir.display());
        problems.push(Problem::new(name, "incomplete run", detail, fixed));
    }
    if all_runs {
        problems.extend(book_problems(ctx)?);
    }
    // A run directory that is a symbolic link is named as the link it is, never as the run
    // it leads to (that run, when it is one of the project's, is checked under its own
    // name), and is not followed: prose-state reads through such a link but never writes
    // through it, so whatever is found there could not be repaired there.
    let (links, runs): (Vec<RunPaths>, Vec<RunPaths>) = runs
        .iter()
        .filter(|r| !leftovers.iter().any(|(d, _)| *d == r.dir))
        .cloned()
        .partition(|r| std::fs::symlink_metadata(&r.dir).is_ok_and(|m| m.is_symlink()));
    for link in &links {
        problems.push(Problem::new(
            link.id.clone(),
            "symlink",
            symlinked_run(link, ctx.runs_dir()),
            false,
        ));
    }
    let saw_server = std::sync::atomic::AtomicBool::new(false);
    let (per_run, warnings) = over_runs(&runs, ctx, |run, store| {
        let id = store
            .run_info()
            .map(|r| r.id)
            .unwrap_or_else(|_| run.id.clone());
        let mut found = Vec::new();
        let mut problem = |kind, detail, fixed| found.push(Problem::new(&id, kind, detail, fixed));
        for p in store.health()? {
            problem("database", p, false);
        }
        // A finished run with a construct never ended: the VM skipped an end, or ended the
        // wrong start (resume would still show it in progress).
        let finished = store
            .run_info()
            .is_ok_and(|r| r.status.is_some_and(|s| s.is_finished()));
        if finished {
            let open = super::resume::open_records(store)?;
            if let Some(inner) = open.last() {
                let detail = format!(
                    "the run is finished, but {} construct{} never ended (innermost: record {}, {})",
                    open.len(),
                    if open.len() == 1 { "" } else { "s" },
                    inner.id,
                    crate::output::one_line(inner.statement_text.as_deref().unwrap_or(""), 60)
                );
                problem("open construct", detail, false);
            }
        }
        // A server's triggers are every run's: checked once, after the runs.
        if store.keeps_values() {
            saw_server.store(true, std::sync::atomic::Ordering::Relaxed);
        } else {
            for (_, detail, fixed) in triggers(store, req.fix)? {
                problem("missing trigger", detail, fixed);
            }
        }
        // The state.db itself must be a plain file: a symlink may point anywhere.
        if std::fs::symlink_metadata(&run.db).is_ok_and(|m| m.file_type().is_symlink()) {
            problem(
                "symlink",
                format!(
                    "{} is a symlink; a run's state.db should be a plain file",
                    run.db.display()
                ),
                false,
            );
        }
        // Attachments: every referenced file present and inside the run, every file
        // referenced. Nothing outside the run's own attachments/ is read or deleted, no
        // symlink is followed, and a file a live writer holds locked is never touched.
        let bindings = store.bindings()?;
        let mut referenced = HashSet::new();
        let on_server = store.keeps_values();
        for b in &bindings {
            let Some(rel) = &b.attachment_path else {
                continue;
            };
            referenced.insert(rel.clone());
            let scope = b
                .execution_id
                .map_or("root".into(), |e| format!("execution {e}"));
            let binding = format!("binding {} ({scope})", b.name);
            if let Some(blob) = server_blob(rel) {
                if store.blob_len(blob)?.is_none() {
                    let detail =
                        format!("{binding} points at {rel}, which the server does not hold whole");
                    problem("missing attachment", detail, false);
                }
                continue;
            }
            match attach::open(&run.dir, rel) {
                // On a server, a value kept as a file is read only on this machine: --fix
                // uploads it and points the binding at the server's copy.
                Ok((mut file, path)) if on_server => {
                    let fixed = req.fix && upload_local(store, b, rel, &mut file, &path, run)?;
                    let detail = format!("{binding} is kept in {rel} on this machine only; other machines cannot read it");
                    problem("local attachment", detail, fixed);
                }
                Ok(_) => {}
                Err(attach::OpenError::Missing(_)) => {
                    let which = if on_server {
                        "is not on this machine (run `prose-state doctor --fix` on the machine that bound it, to upload it)"
                    } else {
                        "is missing"
                    };
                    let detail = format!("{binding} points at {rel}, which {which}");
                    problem("missing attachment", detail, false)
                }
                Err(attach::OpenError::Refused(e) | attach::OpenError::Other(e)) => {
                    problem("unsafe attachment", format!("{binding}: {e:#}"), false)
                }
            }
        }
        match attach::dir(&run.dir, false) {
            Err(e) if run.dir.join(ATTACHMENTS_DIR).symlink_metadata().is_ok() => {
                problem("unsafe attachment", format!("{e:#}"), false)
            }
            Err(_) => {}
            Ok(dir) => {
                let entries = std::fs::read_dir(&dir).map(|d| d.flatten().collect::<Vec<_>>());
                for e in entries.unwrap_or_default() {
                    let file = e.file_name().to_string_lossy().into_owned();
                    let rel = format!("{ATTACHMENTS_DIR}/{file}");
                    let path = e.path();
                    if e.file_type().is_ok_and(|t| t.is_symlink()) {
                        problem(
                            "unsafe attachment",
                            format!("{rel} is a symlink; it is never followed nor removed"),
                            false,
                        );
                        continue;
                    }
                    // A writer still at work: its file is none of doctor's business.
                    if attach::owned_by_live_writer(&path) {
                        continue;
                    }
                    if file.starts_with(TEMP_PREFIX) {
                        let fixed = req.fix && attach::remove_temp(&path);
                        problem(
                            "temporary file",
                            format!("{rel} was left by a writer that did not finish"),
                            fixed,
                        );
                    } else if !referenced.contains(&rel) {
                        // Checked again and removed under the run's write lock: a row may
                        // have committed since the bindings were read.
                        let mut removed = false;
                        let unreferenced = if req.fix {
                            store
                                .release_attachment(&rel, &mut || {
                                    removed = true;
                                    attach::remove(&run.dir, &rel)
                                })
                                .unwrap_or(false)
                        } else {
                            !store.attachment_referenced(&rel).unwrap_or(true)
                        };
                        if unreferenced {
                            problem(
                                "unreferenced file",
                                format!("{rel} is referenced by no binding"),
                                removed && !path.exists(),
                            );
                        }
                    }
                }
            }
        }
        // Values on the server that no binding links: what a bind that failed or was killed
        // after its upload left, and not a live upload's.
        for blob in store.blobs()? {
            let rel = format!("{SERVER_PREFIX}{}", blob.blob);
            if blob.in_upload || referenced.contains(&rel) {
                continue;
            }
            // Checked again, and deleted, under the run's write lock.
            let unreferenced = if req.fix {
                store.release_attachment(&rel, &mut || Ok(()))?
            } else {
                !store.attachment_referenced(&rel)?
            };
            if unreferenced {
                problem(
                    "unreferenced value",
                    format!(
                        "{rel} ({}) on the server is linked by no binding",
                        size(blob.bytes)
                    ),
                    unreferenced && req.fix,
                );
            }
        }
        // A run still `running` with no event for too long.
        let summary = store.run_summary(&now)?;
        if summary.run.status == Some(crate::model::RunStatus::Running) {
            let last = summary
                .last_event_at
                .clone()
                .or(summary.run.started_at.clone());
            let seconds = last.and_then(|l| crate::model::seconds_between(&l, &now));
            let hours = seconds.map(|s| s as f64 / 3600.0);
            if let Some(h) = hours.filter(|h| *h >= req.stale) {
                let why = format!("running with no event for {h:.1} h");
                let interrupted = crate::model::RunStatus::Interrupted;
                let note = format!("marked interrupted by doctor: {why}");
                let fixed = req.fix && store.finish(&interrupted, Some(&note), &now).is_ok();
                problem("stale run", why, fixed);
            }
        }
        // As `gates verify` checks it: the log, the versions its sealed openings name, and the
        // values those bindings hold now, as `get` reads them.
        let (chain, values) = crate::services::inputs::verify_run(store, &run.dir, None)?;
        for (name, why) in values {
            problem("tampered binding", format!("binding {name}: {why}"), false);
        }
        if let Some(b) = &chain.first_broken {
            let at = if b.id > 0 {
                format!("broken at row {}", b.id)
            } else {
                "broken".to_string()
            };
            problem("audit chain", format!("{at}: {}", b.reason), false);
        }
        for (gate, integrity) in &chain.gates {
            let (kind, d) = match integrity {
                Integrity::Tampered(d) => ("tampered gate", d),
                Integrity::Unattested(d) => ("unattested gate", d),
                Integrity::Attested => continue,
            };
            problem(kind, format!("gate {gate}: {d}"), false);
        }
        Ok(found)
    })?;
    problems.extend(per_run.into_iter().flatten());
    if saw_server.load(std::sync::atomic::Ordering::Relaxed) || (ctx.uses_postgres() && all_runs) {
        let mut server = ctx.project_server()?;
        for (_, detail, fixed) in triggers(&mut server, req.fix)? {
            problems.push(Problem::new("(server)", "missing trigger", detail, fixed));
        }
    }
    // Values on the project's server that belong to no run (an import killed between its
    // uploads and its rows): checked when every run is.
    if ctx.uses_postgres() && all_runs {
        for o in ctx.project_server()?.orphan_values(req.fix)? {
            let detail = format!(
                "{SERVER_PREFIX}{} ({}) on the server belongs to no run",
                o.blob,
                size(o.bytes)
            );
            let kind = "unreferenced value";
            problems.push(Problem::new(o.run_id, kind, detail, o.removed));
        }
    }
    // The project catalog against the runs, when every run is checked: what differs (a raw
    // write behind prose-state's back, a run it has not seen) is reported, and `--fix`
    // builds it anew from the runs.
    if all_runs {
        match Listing::project_catalog(ctx) {
            Ok(Some(mut catalog)) => {
                // What the catalog would learn by itself first (new runs, dead writers).
                catalog.refresh(false)?;
                let _ = crate::store::Catalog::warnings(&mut catalog);
                let check = catalog.check()?;
                // A difference is a write behind prose-state's back: the run's row is read
                // again at once (nothing of the run changes); --fix builds the catalog anew.
                let rebuilt = req.fix && !check.differences.is_empty() && catalog.rebuild().is_ok();
                for (id, d) in check.differences {
                    let fixed = rebuilt || catalog.repair(&id).is_ok();
                    problems.push(Problem::new(id, "catalog", d, fixed));
                }
            }
            Ok(None) => {}
            Err(e) => problems.push(Problem::new("-", "catalog", format!("{e:#}"), false)),
        }
    }
    for w in warnings {
        problems.push(Problem::new("-", "unreadable run", w, false));
    }
    Ok(Diagnosis {
        runs_checked: runs.len(),
        problems,
    })
}

/// What a run directory that is a symbolic link is: `LINK -> TARGET: ...`, saying whether it
/// leads to another run of the project (by its id) or somewhere else.
fn symlinked_run(link: &RunPaths, runs_dir: &std::path::Path) -> String {
    let target =
        std::fs::read_link(&link.dir).map_or_else(|_| "?".to_string(), |t| t.display().to_string());
    let resolved = std::fs::canonicalize(&link.dir).ok();
    let other_run = resolved.as_ref().and_then(|t| {
        let here = std::fs::canonicalize(runs_dir).ok()?;
        let name = t.file_name()?.to_string_lossy().into_owned();
        (t.parent() == Some(here.as_path()) && RunPaths::in_dir(t.clone()).exists()).then_some(name)
    });
    let what = match other_run {
        Some(id) => format!(
            "a symbolic link to another run's directory (run {}, checked under its own name)",
            crate::error::shown(&id)
        ),
        None => "a symbolic link to a directory that is not a run of this project".to_string(),
    };
    format!(
        "{} -> {target}: {what}; not followed: prose-state reads through it but never writes through it (remove the link, or act on the run where it is)",
        link.dir.display()
    )
}

/// Uploads a binding's local attachment file to the server and points the binding at it; the
/// file goes once nothing references it. False when the binding changed meanwhile (its new
/// value needs nothing).
fn upload_local(
    store: &mut dyn Store,
    b: &BindingRow,
    rel: &str,
    file: &mut std::fs::File,
    path: &std::path::Path,
    run: &RunPaths,
) -> Result<bool> {
    let staged = attach::upload(file, store, &b.name, b.execution_id)
        .map_err(|e| e.context(format!("could not upload {} to the server", path.display())))?;
    let moved = store.relink(&b.name, b.execution_id, rel, &staged.rel);
    let _ = store.end_upload(&staged.blob, matches!(moved, Ok(true)));
    if moved? {
        let _ = store.release_attachment(rel, &mut || attach::remove(&run.dir, rel));
        return Ok(true);
    }
    Ok(false)
}

/// What is wrong with the project's principals book, as its sealed log says: broken, cut,
/// bound elsewhere, not bound, or not checkable here (none of which `--fix` repairs: each
/// needs a person who may change the book).
fn book_problems(ctx: &Context) -> Result<Vec<Problem>> {
    let Some(mut book) = ctx.principal_book(false)? else {
        return Ok(Vec::new());
    };
    let kind = "principals book";
    let problem = |detail: String| Problem::new("principals", kind, detail, false);
    let state = match crate::store::principals::book_state(book.as_mut())? {
        Ok(s) => s,
        Err(why) => return Ok(vec![problem(format!("{why}; it admits no one"))]),
    };
    let mut found = Vec::new();
    if state.events > 0 && state.bound.is_none() {
        found.push(problem(
            "not bound to this project (made before books were bound): its next change binds it, or `prose-state principals rebind`".into(),
        ));
    }
    if let Some(why) = &state.unchecked {
        found.push(problem(format!(
            "{why}: its tokens and groups are read as its log chains, which holds against no one who can write the book; pin the approval page's key (`prose-state principals require --signed`, as the approver)"
        )));
    }
    // A live row the log did not issue (inserted, re-issued or un-revoked behind
    // prose-state's back): its token is refused, and the row is said.
    for (name, why) in crate::store::principals::not_issued(&state, &book.principals()?) {
        found.push(problem(format!(
            "principal {}: {why}; its token is refused",
            crate::error::shown(&name)
        )));
    }
    Ok(found)
}

impl Run for DoctorArgs {
    type Output = Diagnosis;
    fn run(&self, ctx: &Context) -> Result<Diagnosis> {
        run(self, &Listing::runs_to_visit(ctx)?, ctx)
    }
}
