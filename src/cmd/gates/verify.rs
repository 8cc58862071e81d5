//! `gates verify`: each run's audit chain, and its gates against their logs, checked (for
//! signatures too, with `--signed`).

use super::gate_not_found;
use crate::cmd::listing::Listing;
use crate::context::Context;
use crate::error::Code;
use crate::model::check_gate_id;
use crate::output::Render;
use crate::store::chain::{ChainReport, Integrity};
use anyhow::Result;
use serde::Serialize;
use std::io::{self, Write};

#[derive(Debug, Serialize)]
pub struct RunChain {
    pub run_id: String,
    pub db: String,
    /// `intact`, `unattested` or `broken`.
    pub verdict: &'static str,
    pub rows: usize,
    pub unchained_legacy: usize,
    /// Rows sealed with this machine's key, in an unbroken sequence.
    pub attested: usize,
    /// Ids of rows nothing attests (another tool's, or sealed elsewhere).
    pub unattested: Vec<i64>,
    /// Of those, rows sealed with another machine's key.
    pub sealed_elsewhere: usize,
    /// Sealed rows exist and this machine has no audit key to check them.
    pub key_missing: bool,
    /// The sequence number this machine anchored and found in place.
    pub anchored_seq: Option<i64>,
    pub first_broken: Option<Broken>,
    /// Gates that disagree with their log, or whose decision is unattested.
    pub gates: Vec<GateProblem>,
}

/// The first row of a chain that does not match, and why (id 0: no one row, the log's end).
#[derive(Debug, Serialize)]
pub struct Broken {
    pub id: i64,
    pub reason: String,
}

#[derive(Debug, Serialize)]
pub struct GateProblem {
    pub gate: String,
    /// `unattested` or `tampered`.
    pub state: &'static str,
    pub detail: String,
}

impl RunChain {
    fn new(run_id: String, db: String, report: ChainReport) -> Self {
        // Broken: the log itself; tampered: the log whole, and a gate or a binding it names
        // at odds with it.
        let verdict = if report.first_broken.is_some() {
            "broken"
        } else if report.is_broken() {
            "tampered"
        } else if report.is_unattested() {
            "unattested"
        } else {
            "intact"
        };
        let gates = report
            .gates
            .iter()
            .map(|(gate, i)| {
                let detail = match i {
                    Integrity::Tampered(d) | Integrity::Unattested(d) => d.clone(),
                    Integrity::Attested => String::new(),
                };
                GateProblem {
                    gate: gate.clone(),
                    state: i.state(),
                    detail,
                }
            })
            .collect();
        RunChain {
            run_id,
            db,
            verdict,
            rows: report.rows,
            unchained_legacy: report.unchained_legacy,
            attested: report.attested,
            unattested: report.unattested,
            sealed_elsewhere: report.other_key,
            key_missing: report.key_missing,
            anchored_seq: report.anchored,
            first_broken: report.first_broken.map(|b| Broken {
                id: b.id,
                reason: b.reason,
            }),
            gates,
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct Verified {
    pub runs: Vec<RunChain>,
    #[serde(skip)]
    pub warnings: Vec<String>,
}

impl Render for Verified {
    /// 0 when every log is intact and attested; 9 when any is broken or any gate disagrees
    /// with its log; else 1 when a run could not be read; else 10 when anything is unattested.
    fn exit_code(&self) -> Code {
        let any = |v: &str| self.runs.iter().any(|r| r.verdict == v);
        if any("broken") || any("tampered") {
            Code::Tampered
        } else if !self.warnings.is_empty() {
            Code::Error
        } else if any("unattested") {
            Code::Unattested
        } else {
            Code::Ok
        }
    }

    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        if self.runs.is_empty() && self.warnings.is_empty() {
            return writeln!(w, "no runs");
        }
        for r in &self.runs {
            let mut notes = Vec::new();
            if r.unchained_legacy > 0 {
                notes.push(format!(
                    "{} unchained rows from before the chain",
                    r.unchained_legacy
                ));
            }
            if !r.unattested.is_empty() {
                notes.push(format!("{} unattested", r.unattested.len()));
            }
            if r.sealed_elsewhere > 0 {
                notes.push(format!("{} sealed on another machine", r.sealed_elsewhere));
            }
            if r.key_missing {
                notes.push("no audit key here to check seals".to_string());
            }
            let notes: String = notes.iter().map(|n| format!(", {n}")).collect();
            match (&r.first_broken, r.verdict) {
                (Some(b), _) if b.id > 0 => {
                    writeln!(w, "{}: BROKEN at row {}: {}", r.run_id, b.id, b.reason)?
                }
                (Some(b), _) => writeln!(w, "{}: BROKEN: {}", r.run_id, b.reason)?,
                (None, verdict) => writeln!(w, "{}: {verdict} ({} rows{notes})", r.run_id, r.rows)?,
            }
            for g in &r.gates {
                let state = if g.state == "tampered" {
                    "TAMPERED"
                } else {
                    g.state
                };
                writeln!(w, "  gate {}: {state}: {}", g.gate, g.detail)?;
            }
        }
        Ok(())
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }
}

/// What decisions must be signed by (`--signed`, `--require-signed`): the key (`--key`, else
/// the one the project pinned; a usage error when there is none), for this project's place.
pub(super) fn signed_by(
    ctx: &Context,
    given: Option<&str>,
    accept_carried: Option<String>,
) -> Result<crate::store::signatures::SignedBy> {
    Ok(crate::store::signatures::SignedBy {
        key: pinned_key(ctx, given)?,
        place: ctx.signature_place(false)?,
        accept_carried,
    })
}

/// The key decisions must be signed by: `--key`, else the one the project pinned.
fn pinned_key(ctx: &Context, given: Option<&str>) -> Result<ed25519_dalek::VerifyingKey> {
    if let Some(k) = given {
        return crate::services::sign::parse_public(k);
    }
    let mut book = ctx.principal_book(false)?;
    let pinned = match book.as_deref_mut() {
        Some(b) => crate::services::sign::pinned(b)?,
        None => None,
    };
    pinned.ok_or_else(|| {
        crate::error::usage(
            "this project pinned no signing key to check decisions against: \
             `prose-state principals require --signed` pins the approval page's",
        )
    })
}

pub fn verify(args: &crate::cli::GateVerifyArgs, ctx: &Context) -> Result<Verified> {
    verify_gates(args, &[], ctx)
}

/// `gates verify [[RUN] GATE]`: with no gate, every run's audit chain (of `--run`'s alone, when
/// given) and every gate against its log. With a gate (`ids`: `[RUN] GATE`, the run by
/// default `--run`, else PROSE_RUN), its run's chain, which is one for all the run's gates (a
/// break anywhere is a break in the gate's history), and that gate alone against its log; a
/// gate the run has neither as a row nor in its log is exit 3.
pub fn verify_gates(
    args: &crate::cli::GateVerifyArgs,
    ids: &[String],
    ctx: &Context,
) -> Result<Verified> {
    let signed = args
        .signed
        .then(|| signed_by(ctx, args.key.as_deref(), args.accept_carried_from.clone()))
        .transpose()?;
    let (chains, mut warnings) = match ids {
        [] => Listing::chains(ctx, signed.as_ref())?,
        [gate] => (one_gate(ctx, None, gate, signed.as_ref())?, Vec::new()),
        [run, gate] => (one_gate(ctx, Some(run), gate, signed.as_ref())?, Vec::new()),
        _ => {
            return Err(crate::error::usage(
                "gates verify takes at most a run and a gate: gates verify [[RUN] GATE]",
            ))
        }
    };
    // One gate asked for: a run checked again is narrowed to it as before.
    let one = !ids.is_empty();
    let mut runs = Vec::new();
    for mut c in chains {
        // The rows gate_instances keeps of earlier openings; the versions sealed decisions
        // were made about or wrote, against the bindings' history; and the values they hold
        // now, as `get` reads them (`inputs::check_run`).
        // Any gate: a binding of any name that claims a decision is checked as `get` checks it.
        if !c.report.derived.is_empty() {
            let dir =
                c.db.parent()
                    .map_or_else(|| ctx.runs_dir().join(&c.run_id), |d| d.to_path_buf());
            let paths = crate::run::RunPaths::in_dir(dir);
            let checked = ctx.open(&paths).and_then(|mut store| {
                let values =
                    crate::services::inputs::check_run(store.as_mut(), &paths.dir, &mut c.report)?;
                // A finding while decisions commit beside the check (the log itself whole):
                // the run checked again (`verify_run` reads again while the log grows),
                // narrowed as before. Where that fails, what was found stands.
                let raced =
                    c.report.first_broken.is_none() && (c.report.is_broken() || !values.is_empty());
                if raced {
                    let keep: Option<Vec<String>> =
                        one.then(|| c.report.derived.keys().cloned().collect());
                    if let Ok((mut again, _)) = crate::services::inputs::verify_run(
                        store.as_mut(),
                        &paths.dir,
                        signed.as_ref(),
                    ) {
                        if let Some(keep) = keep {
                            again.gates.retain(|(g, _)| keep.contains(g));
                            again.earlier.retain(|(g, ..)| keep.contains(g));
                            again.derived.retain(|g, _| keep.contains(g));
                        }
                        c.report = again;
                    }
                }
                Ok(())
            });
            if let Err(e) = checked {
                warnings.push(format!(
                    "run {}: its decisions' inputs could not be checked against history: {e:#}",
                    c.run_id
                ));
            }
        }
        runs.push(RunChain::new(
            c.run_id,
            c.db.display().to_string(),
            c.report,
        ));
    }
    Ok(Verified { runs, warnings })
}

/// The chain of `gate`'s run (`run`, else `--run`/PROSE_RUN), its gates narrowed to `gate`.
fn one_gate(
    ctx: &Context,
    run: Option<&str>,
    gate: &str,
    signed: Option<&crate::store::signatures::SignedBy>,
) -> Result<Vec<crate::cmd::listing::CheckedChain>> {
    check_gate_id(gate)?;
    let (paths, mut store) = ctx.open_run(run.or(ctx.run.as_deref()))?;
    let run_id = store.run_info()?.id;
    let mut report = store.verify_signed(signed)?;
    if store.read_gate(gate)?.is_none() && !report.derived.contains_key(gate) {
        return Err(gate_not_found(&run_id, gate));
    }
    report.gates.retain(|(g, _)| g == gate);
    report.earlier.retain(|(g, ..)| g == gate);
    report.derived.retain(|g, _| g == gate);
    Ok(vec![crate::cmd::listing::CheckedChain {
        run_id,
        db: paths.db,
        report,
    }])
}
