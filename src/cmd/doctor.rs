//! `doctor`: what is wrong with the runs, one line a problem; `--fix` repairs what is safe.

use super::{over_runs, Opener};
use crate::attach::{self, TEMP_PREFIX};
use crate::output::Render;
use crate::run::{RunPaths, ATTACHMENTS_DIR};
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

impl Diagnosis {
    /// 0 when nothing is left wrong, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        u8::from(self.problems.iter().any(|p| !p.fixed))
    }
}

impl Render for Diagnosis {
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

pub struct DoctorRequest {
    pub stale_hours: f64,
    pub fix: bool,
}

fn hours_since(at: &str, now: &str) -> Option<f64> {
    let parse = |t: &str| chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S").ok();
    Some((parse(now)? - parse(at)?).num_seconds() as f64 / 3600.0)
}

pub fn run(req: &DoctorRequest, runs: &[RunPaths], open: Opener) -> Result<Diagnosis> {
    let now = crate::model::now();
    let (per_run, warnings) = over_runs(runs, open, |run, store| {
        let id = store
            .run_info()
            .map(|r| r.id)
            .unwrap_or_else(|_| run.id.clone());
        let mut found = Vec::new();
        let mut problem = |kind, detail: String, fixed| {
            found.push(Problem {
                run_id: id.clone(),
                kind,
                detail,
                fixed,
            })
        };
        for p in store.health()? {
            problem("database", p, false);
        }
        // Attachments: every referenced file present, every file referenced.
        let bindings = store.bindings()?;
        let mut referenced = HashSet::new();
        for b in &bindings {
            if let Some(rel) = &b.attachment_path {
                referenced.insert(rel.clone());
                if !run.dir.join(rel).is_file() {
                    let scope = b
                        .execution_id
                        .map_or("root".into(), |e| format!("execution {e}"));
                    problem(
                        "missing attachment",
                        format!(
                            "binding {} ({scope}) points at {rel}, which is missing",
                            b.name
                        ),
                        false,
                    );
                }
            }
        }
        if let Ok(entries) = std::fs::read_dir(run.dir.join(ATTACHMENTS_DIR)) {
            for e in entries.flatten() {
                let file = e.file_name().to_string_lossy().into_owned();
                let rel = format!("{ATTACHMENTS_DIR}/{file}");
                if file.starts_with(TEMP_PREFIX) {
                    let fixed = req.fix && std::fs::remove_file(e.path()).is_ok();
                    problem(
                        "temporary file",
                        format!("{rel} was left by a writer that did not finish"),
                        fixed,
                    );
                } else if !referenced.contains(&rel) {
                    // Removed under the write lock, and only if still unreferenced then.
                    let fixed = req.fix
                        && store
                            .release_attachment(&rel, &mut || attach::remove(&run.dir, &rel))
                            .unwrap_or(false);
                    problem(
                        "unreferenced file",
                        format!("{rel} is referenced by no binding"),
                        fixed,
                    );
                }
            }
        }
        // A run still `running` with no event for too long.
        let summary = store.run_summary(&now)?;
        if summary.run.status.as_deref() == Some("running") {
            let last = summary
                .last_event_at
                .clone()
                .or(summary.run.started_at.clone());
            if let Some(h) = last.as_deref().and_then(|l| hours_since(l, &now)) {
                if h >= req.stale_hours {
                    let why = format!("running with no event for {h:.1} h");
                    let fixed = req.fix
                        && store
                            .finish(
                                "interrupted",
                                Some(&format!("marked interrupted by doctor: {why}")),
                                &now,
                            )
                            .is_ok();
                    problem("stale run", why, fixed);
                }
            }
        }
        let chain = store.verify_audit()?;
        if let Some(b) = chain.first_broken {
            problem(
                "audit chain",
                format!("broken at row {}: {}", b.id, b.reason),
                false,
            );
        }
        Ok(found)
    })?;
    let mut problems: Vec<Problem> = per_run.into_iter().flatten().collect();
    for w in warnings {
        problems.push(Problem {
            run_id: "-".into(),
            kind: "unreadable run",
            detail: w,
            fixed: false,
        });
    }
    Ok(Diagnosis {
        runs_checked: runs.len(),
        problems,
    })
}
