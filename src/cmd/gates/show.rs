//! `gates` (the listing), `gates show` and `gates audit`: gates and their audit events, read
//! and written as text.

use super::view::{resolution, team_view, visible_json, GateView, IntegrityView, LazyRoster};
use super::{gate_not_found, in_future};
use crate::cli::{GateAuditArgs, GateFilter, GatesListArgs};
use crate::cmd::listing::{GateQuery, Listing};
use crate::context::Context;
use crate::error::Code;
use crate::model::{check_gate_id, now, now_plus, parse_duration};
use crate::output::{one_line, table, visible_line, Render};
use crate::store::{AuditFilter, AuditRow, Store};
use anyhow::Result;
use serde::Serialize;
use std::io::{self, Write};

#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct GateList {
    pub gates: Vec<GateView>,
    #[serde(skip)]
    pub warnings: Vec<String>,
}

impl Render for GateList {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        if self.gates.is_empty() {
            return writeln!(w, "no gates");
        }
        let mut header = [
            "RUN",
            "GATE",
            "STATUS",
            "CREATED",
            "TIME LEFT",
            "PROGRAM",
            "PROMPT",
        ]
        .map(String::from)
        .to_vec();
        // The votes of team's gates, when the listing derived them (`--scan`).
        let teams = self.gates.iter().any(|g| g.team.is_some());
        if teams {
            header.insert(6, "PROGRESS".into());
        }
        let rows: Vec<Vec<String>> = self
            .gates
            .iter()
            .map(|g| {
                vec![
                    g.gate.run_id.clone().unwrap_or_default(),
                    g.gate.id.clone(),
                    match g.integrity.as_ref().map(|i| i.state) {
                        Some(state @ ("tampered" | "unattested" | "unsealed")) => {
                            format!("{} ({})", g.gate.status, state.to_uppercase())
                        }
                        _ => g.gate.status.to_string(),
                    },
                    g.gate.created_at.clone().unwrap_or_default(),
                    g.left(),
                    g.program_path.clone().unwrap_or_else(|| "-".into()),
                    one_line(&g.gate.prompt, 50),
                ]
            })
            .zip(&self.gates)
            .map(|(mut row, g)| {
                if teams {
                    let progress = g.team.as_ref().map_or("-".into(), |t| t.progress.clone());
                    row.insert(6, progress);
                }
                row
            })
            .collect();
        table(w, &header, &rows)
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }

    /// A listing read from the catalog vouches for nothing: it says so.
    fn notes(&self) -> Vec<String> {
        if self.gates.iter().any(|g| g.integrity.is_none()) {
            vec!["listed from the catalog, not checked against the gates' sealed logs: `gates --scan`, `gates show` or `gates verify` checks them".into()]
        } else {
            Vec::new()
        }
    }
}

pub fn list(args: &GatesListArgs, ctx: &Context) -> Result<GateList> {
    let now = now();
    let horizon = args.expiring.as_deref().map(in_future).transpose()?;
    let status = match (args.status, &horizon) {
        (_, Some(_)) | (GateFilter::Pending, None) => Some("pending"),
        (GateFilter::Approved, None) => Some("approved"),
        (GateFilter::Rejected, None) => Some("rejected"),
        (GateFilter::Timeout, None) => Some("timeout"),
        (GateFilter::All, None) => None,
    };
    // The pending gates of the project's catalog and server: swept and listed in a few
    // queries (only the runs with an overdue gate are opened). Gates of other statuses are
    // listed from the server, and from every SQLite run visited.
    // Checked (`--scan`), a gate is listed by the status its sealed log gives it, a gate at odds
    // with its log under every status, and one whose decision nothing here attests under both
    // its sealed status and its row's: a row rewritten behind the tool's back hides no gate
    // from the list. So every gate is read, and filtered once checked.
    // A listing of one run (`--run`, an MCP session's run) is checked too: one read of its log.
    let check = args.scan || ctx.run_flag().is_some();
    // `--expiring` too: by the deadline its sealed log gives a gate, never its row's.
    let by_log = check && status.is_some();
    let (found, warnings) = Listing::gates(
        ctx,
        &GateQuery {
            status: if by_log { None } else { status },
            due_by: if by_log { None } else { horizon.as_deref() },
            limit: if by_log { None } else { args.limit },
            scan: args.scan,
            check,
            now: &now,
        },
    )?;
    // `--scan` checks every gate against its sealed log: the runs the server listed are opened
    // and checked here (each once), as the SQLite runs were while they were read.
    let mut found = found;
    if check {
        use crate::cmd::listing::ListedGate;
        use std::sync::Arc;
        let mut checked: std::collections::HashMap<String, Arc<_>> = Default::default();
        let open_checked = |run: &str| -> Result<Arc<crate::store::chain::ChainReport>> {
            let (paths, mut store) = ctx.open_run(Some(run))?;
            let (report, _) =
                crate::services::inputs::verify_run(store.as_mut(), &paths.dir, None)?;
            Ok(Arc::new(report))
        };
        for f in found.iter_mut() {
            let run = f.gate.run_id.clone().unwrap_or_default();
            match &f.checked {
                Some(report) => {
                    checked.entry(run).or_insert_with(|| report.clone());
                }
                None => {
                    if !checked.contains_key(&run) {
                        checked.insert(run.clone(), open_checked(&run)?);
                    }
                    f.checked = checked.get(&run).cloned();
                }
            }
        }
        // The run a listing of one run names is checked even when no row of it was found.
        if let Some(run) = ctx.run_flag() {
            let id = ctx.locate(Some(run))?.id;
            if !checked.contains_key(&id) {
                checked.insert(id.clone(), open_checked(&id)?);
            }
        }
        // A gate its sealed log opened whose row is gone is listed, marked, from its log: a
        // row deleted behind prose-state's back hides no gate.
        for (run, report) in &checked {
            for (gate, d) in &report.derived {
                let listed = found
                    .iter()
                    .any(|f| f.gate.id == *gate && f.gate.run_id.as_deref() == Some(run));
                if listed || d.instance == 0 {
                    continue;
                }
                let mut row = crate::store::gate_read::gone_row(gate, d);
                row.run_id = Some(run.clone());
                found.push(ListedGate {
                    gate: row,
                    program_path: found
                        .iter()
                        .find(|f| f.gate.run_id.as_deref() == Some(run))
                        .and_then(|f| f.program_path.clone()),
                    checked: Some(report.clone()),
                });
            }
        }
        found.sort_by(|a, b| a.gate.created_at.cmp(&b.gate.created_at));
    }
    if let (true, Some(wanted)) = (by_log, status) {
        use crate::store::chain::Integrity;
        found.retain(|f| {
            let Some(report) = f.checked.as_deref() else {
                return f.gate.status.as_str() == wanted;
            };
            match (report.gate(&f.gate.id), report.derived.get(&f.gate.id)) {
                (Integrity::Tampered(_), _) => true,
                (Integrity::Attested, Some(d)) => d.status().as_str() == wanted,
                // A decision nothing here attests, of a gate opened by a sealed event: under the
                // status its sealed events give it (no decision stands) and under the one its
                // row claims, marked so. One with no sealed opening (the spec's own SQL): as
                // its row says, marked.
                (_, Some(d)) if d.instance > 0 => {
                    d.status().as_str() == wanted || f.gate.status.as_str() == wanted
                }
                _ => f.gate.status.as_str() == wanted,
            }
        });
        if let Some(by) = horizon.as_deref() {
            found.retain(|f| {
                // The sealed deadline of a sealed opening; the row's only where none is sealed.
                let sealed = f
                    .checked
                    .as_deref()
                    .and_then(|r| r.derived.get(&f.gate.id))
                    .filter(|d| d.instance > 0 && d.instance == f.gate.instance)
                    .and_then(|d| d.timeout_at.clone());
                let deadline = sealed.unwrap_or_else(|| f.gate.timeout_at.clone());
                deadline.is_some_and(|at| {
                    crate::model::seconds_between(by, &at).is_some_and(|s| s <= 0)
                })
            });
        }
        if let Some(n) = args.limit {
            found.truncate(n as usize);
        }
    }
    let mut roster = LazyRoster::new(ctx);
    let gates = found
        .into_iter()
        .map(|found| {
            let checked = found.checked.as_deref();
            let integrity = checked.map(|report| IntegrityView::of(report, &found.gate.id));
            // Checked (`--scan`, one run), a gate is shown as its sealed log has it where its
            // row is at odds with the log (marked), with its answer and edits as the log holds
            // them, and a team's gate with its votes and schedule as the log derives them.
            let derived = checked.and_then(|report| report.derived.get(&found.gate.id));
            let row = match checked {
                Some(report) => crate::store::gate_read::shown_in(found.gate, report),
                None => found.gate,
            };
            let team = match derived {
                Some(d) => team_view(&row, d, &now, &mut roster)?,
                None => None,
            };
            Ok(GateView {
                integrity,
                team,
                ..GateView::new(row, found.program_path, &now).answered(derived)
            })
        })
        .collect::<Result<_>>()?;
    Ok(GateList { gates, warnings })
}

/// An event of a gate's history as `gates show` lists it: the row, and where its own seal
/// does not vouch for it, what the seal says (`unattested`, `broken`; see [`seal_word`]): an
/// event only a row makes (the spec's own SQL, say) is never shown as the gate's own.
#[derive(Debug, Serialize)]
pub struct ShownEvent {
    #[serde(flatten)]
    pub row: AuditRow,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sealed: Option<&'static str>,
}

#[derive(Debug, Serialize)]
pub struct GateShown {
    #[serde(flatten)]
    pub gate: GateView,
    pub history: Vec<ShownEvent>,
    pub integrity: IntegrityView,
    /// The bindings the decision is about, as they are now (`gates create --inputs`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<crate::services::inputs::InputNow>,
    /// Why the decision no longer stands: an input changed after it and before the VM
    /// consumed it (exit 11). Open the gate again (`gates create --reopen`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<String>,
}

/// What a row's own seal says of it, as `gates audit` and `gates show` state it: `attested`
/// (its hash matches its content and this machine's seal its hash), `unattested` (no seal,
/// another machine's, or no key here) or `broken` (changed behind prose-state's back).
pub(super) fn seal_word(row: &AuditRow, key: Option<&crate::store::seal::Key>) -> &'static str {
    use crate::store::chain::{self_state, RowState};
    match self_state(row, key) {
        RowState::Attested => "attested",
        RowState::Broken => "broken",
        RowState::Unattested | RowState::Legacy => "unattested",
    }
}

/// The audit table; `with_run`: the run and gate of each row; with `seals`, what each row's
/// own seal says.
fn audit_table(
    w: &mut dyn Write,
    rows: &[AuditRow],
    seals: Option<&[&str]>,
    with_run: bool,
) -> io::Result<()> {
    let mut header = vec!["ID", "TIME", "EVENT", "PRINCIPAL", "COMMENT"];
    if with_run {
        header.splice(1..1, ["RUN", "GATE"]);
    }
    if seals.is_some() {
        header.push("SEAL");
    }
    let header: Vec<String> = header.iter().map(|s| s.to_string()).collect();
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut v = vec![
                r.id.to_string(),
                r.timestamp.clone().unwrap_or_default(),
                r.event_type.clone(),
                r.principal.clone().unwrap_or_default(),
                one_line(r.comment.as_deref().unwrap_or(""), 50),
            ];
            if with_run {
                v.splice(1..1, [r.run_id.clone(), r.gate_id.clone()]);
            }
            v
        })
        .zip(0..)
        .map(|(mut v, i)| {
            if let Some(seals) = seals {
                v.push(seals[i].to_uppercase());
            }
            v
        })
        .collect();
    table(w, &header, &rows)
}

impl Render for GateShown {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        let g = &self.gate.gate;
        writeln!(w, "Gate: {}", g.id)?;
        writeln!(w, "Run: {}", g.run_id.as_deref().unwrap_or("-"))?;
        if let Some(p) = &self.gate.program_path {
            writeln!(w, "Program: {p}")?;
        }
        // Marked on stdout too where nothing here attests it or its row is at odds with its
        // sealed log (the status shown is then the log's).
        match self.integrity.state {
            state @ ("tampered" | "unattested") => {
                writeln!(w, "Status: {} ({})", g.status, state.to_uppercase())?
            }
            _ => writeln!(w, "Status: {}", g.status)?,
        }
        writeln!(w, "Allow: {}", g.allow.join(", "))?;
        if let Some(t) = &self.gate.team {
            t.write(w)?;
        }
        writeln!(w, "Created: {}", g.created_at.as_deref().unwrap_or("-"))?;
        match (&g.timeout, &g.timeout_at) {
            (Some(t), Some(at)) if g.status.is_pending() => writeln!(
                w,
                "Timeout: {t} (deadline {at} UTC, {} left)",
                self.gate.left()
            )?,
            (Some(t), Some(at)) => writeln!(w, "Timeout: {t} (deadline {at} UTC)")?,
            _ => writeln!(w, "Timeout: none")?,
        }
        writeln!(
            w,
            "On reject: {}",
            g.on_reject.as_deref().unwrap_or("throw")
        )?;
        if g.resolved_by.is_some() {
            writeln!(w, "Resolved: {}", resolution(g))?;
        }
        if let Some(r) = &self.gate.response {
            writeln!(w, "Response: {}", visible_json(r))?;
        }
        if !self.gate.responses.is_empty() {
            writeln!(w, "Responses, vote by vote:")?;
            for a in &self.gate.responses {
                writeln!(w, "  {}: {}", a.by, visible_json(&a.response))?;
            }
        }
        if let Some(s) = &self.gate.response_schema {
            writeln!(w, "Response schema: {}", visible_json(s))?;
        }
        for line in self.gate.edit_lines() {
            writeln!(w, "Edited: {line}")?;
        }
        if let Some(b) = &self.gate.response_binding {
            let scope = match b.execution_id {
                Some(e) => format!("execution {e}"),
                None => "the root scope".to_string(),
            };
            let name = crate::output::visible(&b.name);
            writeln!(w, "Response binding: {name} (in {scope})")?;
        }
        if let Some(why) = &self.stale {
            writeln!(w, "STALE: {why}: reopen it (gates create --reopen)")?;
        }
        writeln!(w, "Prompt:")?;
        for line in g.prompt.lines() {
            writeln!(w, "  {}", visible_line(line))?;
        }
        if !self.inputs.is_empty() {
            writeln!(w, "Inputs:")?;
            for i in &self.inputs {
                // What a person decides on, line by line (its start, escaped), and where the
                // whole is read when it is longer.
                match &i.digest {
                    Some(_) => {
                        writeln!(w, "  {} ({} bytes):", visible_line(&i.name), i.bytes)?;
                        for line in i.preview.lines() {
                            writeln!(w, "    {}", visible_line(line))?;
                        }
                        if i.preview.ends_with('…') {
                            let scope = match i.at {
                                Some((Some(e), _)) => format!(" --execution-id {e}"),
                                _ => String::new(),
                            };
                            writeln!(
                                w,
                                "    (the whole: prose-state get {} --run {}{scope})",
                                visible_line(&i.name),
                                visible_line(g.run_id.as_deref().unwrap_or("RUN"))
                            )?;
                        }
                    }
                    None => writeln!(w, "  {}: (not bound)", visible_line(&i.name))?,
                }
            }
        }
        writeln!(w, "History:")?;
        // A SEAL column where some event's own seal does not vouch for it.
        let seals: Vec<&str> = self
            .history
            .iter()
            .map(|e| e.sealed.unwrap_or("attested"))
            .collect();
        let marked = self.history.iter().any(|e| e.sealed.is_some());
        let rows: Vec<AuditRow> = self.history.into_iter().map(|e| e.row).collect();
        audit_table(w, &rows, marked.then_some(&seals[..]), false)
    }

    /// 9 when the gate disagrees with its log, 10 when its decision is unattested, 11 when it
    /// is stale.
    fn exit_code(&self) -> Code {
        self.integrity
            .code(false)
            .or(self.stale.as_ref().map(|_| Code::Stale))
            .unwrap_or(Code::Ok)
    }

    fn warnings(&self) -> Vec<String> {
        let mut w = self.integrity.warnings(&self.gate.gate.id);
        if let Some(why) = &self.stale {
            w.push(format!(
                "gate {}'s decision is stale: {why}",
                self.gate.gate.id
            ));
        }
        w
    }
}

/// `gates show`, for a viewer through `client` (`cli`, `web`), as the audit log records it.
pub fn show_to(
    gate: &str,
    viewer: Option<&str>,
    client: &str,
    store: &mut dyn Store,
    run_dir: &std::path::Path,
    roster: &mut LazyRoster,
) -> Result<GateShown> {
    check_gate_id(gate)?;
    let now = now();
    let run = store.run_info()?;
    let Some((row, history)) = store.view_gate(gate, viewer, client, &now)? else {
        return Err(crate::store::gate_read::gone(store, gate)?
            .unwrap_or_else(|| gate_not_found(&run.id, gate)));
    };
    // As `gates verify` checks the run: a decision about inputs stands on the versions it
    // pinned, and the bindings its openings name are what their history keeps (read again
    // when a decision committed beside the check).
    let (report, _) = crate::services::inputs::verify_run(store, run_dir, None)?;
    // A row at odds with its sealed log is shown as the log has it, marked.
    let row = crate::store::gate_read::shown_in(row, &report);
    let team = match report.derived.get(&row.id) {
        Some(d) => team_view(&row, d, &now, roster)?,
        None => None,
    };
    let (stale, inputs) = match report.derived.get(&row.id) {
        Some(d) => crate::services::inputs::stale(store, run_dir, d)?,
        None => (None, Vec::new()),
    };
    let answered = report.derived.get(&row.id).cloned();
    Ok(GateShown {
        inputs,
        stale,
        integrity: IntegrityView::of(&report, &row.id),
        gate: GateView {
            team,
            ..GateView::new(row, run.program_path, &now)
        }
        .answered(answered.as_ref()),
        history: {
            let key = store.wiring().key_for_reading()?;
            history
                .into_iter()
                .map(|row| ShownEvent {
                    sealed: Some(seal_word(&row, key)).filter(|s| *s != "attested"),
                    row,
                })
                .collect()
        },
    })
}

#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct AuditList {
    pub rows: Vec<AuditShown>,
    #[serde(skip)]
    pub warnings: Vec<String>,
}

/// An audit event as `gates audit` lists it: the row, and what its own seal says of it.
#[derive(Debug, Serialize)]
pub struct AuditShown {
    #[serde(flatten)]
    pub row: AuditRow,
    /// `attested` (its hash matches its content and this machine's seal matches its hash),
    /// `unattested` (no seal, another machine's, or no key here: nothing vouches for it) or
    /// `broken` (its hash or its seal does not match: changed behind prose-state's back).
    pub sealed: &'static str,
}

impl Render for AuditList {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        if self.rows.is_empty() {
            return writeln!(w, "no audit events");
        }
        let (rows, seals): (Vec<AuditRow>, Vec<&str>) =
            self.rows.into_iter().map(|r| (r.row, r.sealed)).unzip();
        audit_table(w, &rows, Some(&seals), true)
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }

    /// Each row vouches for itself alone: a row removed between two is found by `gates verify`.
    fn notes(&self) -> Vec<String> {
        if self.rows.iter().any(|r| r.sealed != "attested") {
            vec!["SEAL says what each row's own seal vouches for; `gates verify` checks each run's log whole".into()]
        } else {
            Vec::new()
        }
    }
}

pub fn audit(args: &GateAuditArgs, ctx: &Context) -> Result<AuditList> {
    if let Some(g) = &args.gate {
        check_gate_id(g)?;
    }
    let since = args
        .since
        .as_deref()
        .map(|d| parse_duration(d).map(|s| now_plus(-s)))
        .transpose()?;
    // The filter names a principal as decisions record it: normalised.
    let principal = args
        .principal
        .as_deref()
        .map(crate::model::Principal::normalise);
    let filter = AuditFilter {
        gate_id: args.gate.as_deref(),
        principal: principal.as_deref(),
        since: since.as_deref(),
        ..AuditFilter::default()
    };
    // Runs on the project's server: one query; the others, one store at a time.
    let (rows, warnings) = Listing::audits(ctx, &filter)?;
    let key = ctx.opts.wiring.key_for_reading()?;
    let rows = rows
        .into_iter()
        .map(|row| {
            let sealed = seal_word(&row, key);
            AuditShown { row, sealed }
        })
        .collect();
    Ok(AuditList { rows, warnings })
}
