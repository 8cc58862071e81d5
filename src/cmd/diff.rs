//! `diff RUN_A RUN_B`: what differs between two runs of the project (a fork and its source, or
//! any two): their bindings, execution records and gates. Read-only: each run is read in one
//! snapshot of its own store, and nothing is written to either.
//!
//! What is compared is what two copies of one run share on any backend (a server numbers its
//! execution ids itself, and keeps large values as blobs where SQLite keeps files):
//! - bindings by name and scope, an execution's scope by its record's place in that run's
//!   log: their kind, and their value by its bytes wherever they are kept (inline, a file in
//!   the run directory, a blob on the server), never by where;
//! - execution records by their place in the log: statement index, statement text, status and
//!   parent (by its place): how many records both logs begin with, then each run's own;
//! - gates by id: status, who decided, which opening.
//!
//! Every list is bounded (`--limit` entries and about [`LIST_BYTES`] of JSON), with counts of
//! what was left out and the way to the rest; `--all` lifts the bounds.

use crate::cli::{BackendArg, DiffArgs};
use crate::context::Context;
use crate::error::{shown, Code};
use crate::output::{one_line, visible_line, Render};
use crate::run::RunPaths;
use crate::services::{attach, transfer};
use crate::store::{server_blob, Backend, BindingRow, ExecutionRow, GateRow, Store};
use anyhow::{anyhow, Result};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read, Write};

/// Each list holds about this many bytes of JSON at most (its first entry whatever its size),
/// so that the four lists and the rest stay within an MCP answer's bound of about 32 KiB.
pub const LIST_BYTES: usize = 7 * 1024;
/// Stored texts shown (names, statement texts, gate ids, principals) are cut to this many
/// characters.
const TEXT_CHARS: usize = 200;
/// A value's preview: its first characters.
const PREVIEW_CHARS: usize = 60;
/// How many times the runs are read again when a value was replaced while they were read.
const TRIES: usize = 5;

/// The two runs compared.
#[derive(Debug, Serialize)]
pub struct Diffed {
    pub a: RunSide,
    pub b: RunSide,
    /// Whether nothing compared differs (with `--name`, only that name's bindings were).
    pub identical: bool,
    /// `--name`: the one binding name compared.
    pub name: Option<String>,
    pub bindings: Bindings,
    pub records: Records,
    pub gates: Gates,
    /// `--exit-code`: exit 1 when the runs differ.
    #[serde(skip)]
    exit_code: bool,
    /// The runs as named on the command line, for the ways to see more.
    #[serde(skip)]
    given: [String; 2],
}

/// One of the runs: its id, where it was read, and how much it holds.
#[derive(Debug, Serialize)]
pub struct RunSide {
    pub run: String,
    pub backend: &'static str,
    pub records: usize,
    pub bindings: usize,
    pub gates: usize,
}

/// The bindings that differ, in name order (the root scope first, then by record).
#[derive(Debug, Serialize)]
pub struct Bindings {
    /// How many differ in all: added + removed + changed.
    pub differ: usize,
    pub added: usize,
    pub removed: usize,
    pub changed: usize,
    /// Where this page starts among them.
    pub cursor: u64,
    pub shown: Vec<BindingDiff>,
    /// How many differ after this page.
    pub left_out: usize,
    /// Pass as `--cursor` for the next page; null on the last.
    pub next_cursor: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    /// Only in RUN_B.
    Added,
    /// Only in RUN_A.
    Removed,
    /// In both, different.
    Changed,
}

impl Change {
    fn mark(self) -> char {
        match self {
            Change::Added => '+',
            Change::Removed => '-',
            Change::Changed => '~',
        }
    }
}

#[derive(Debug, Serialize)]
pub struct BindingDiff {
    pub change: Change,
    pub name: String,
    /// `root`, or `execution`.
    pub scope: &'static str,
    /// The place in the log (1: the first record) of the execution whose scope it is; null in
    /// the root scope, or for an execution id no record of the log has.
    pub position: Option<usize>,
    /// That execution's id in each run (null where the binding is absent, or in the root).
    pub execution_id_a: Option<i64>,
    pub execution_id_b: Option<i64>,
    /// What differs: `kind`, `value` (empty for a binding added or removed).
    pub differs: Vec<&'static str>,
    pub a: Option<ValueSide>,
    pub b: Option<ValueSide>,
}

/// A binding as one run holds it, shortened.
#[derive(Debug, Serialize)]
pub struct ValueSide {
    pub kind: Option<String>,
    /// The value's length in bytes (the attachment's, for an attachment).
    pub bytes: u64,
    /// Whether the value is kept outside the row (a file, or a blob on the server).
    pub attachment: bool,
    /// The value's first characters (at most 60); `bytes` says how long the whole is.
    pub preview: String,
}

/// The execution logs: the records both begin with, then each run's own.
#[derive(Debug, Serialize)]
pub struct Records {
    /// How many records both logs begin with, the same.
    pub common: usize,
    pub a: Tail,
    pub b: Tail,
}

/// One run's records after the common part.
#[derive(Debug, Serialize)]
pub struct Tail {
    /// How many there are.
    pub after_common: usize,
    pub shown: Vec<RecordEntry>,
    pub left_out: usize,
    /// With records left out: pass as `log --since` to read them.
    pub next_since: Option<i64>,
}

#[derive(Debug, Serialize)]
pub struct RecordEntry {
    /// Its place in the log (1: the first record).
    pub position: usize,
    pub id: i64,
    pub statement_index: Option<i64>,
    pub statement_text: Option<String>,
    pub status: Option<String>,
    /// The parent record's place in the log, and its id.
    pub parent_position: Option<usize>,
    pub parent_id: Option<i64>,
}

/// The gates that differ, by id.
#[derive(Debug, Serialize)]
pub struct Gates {
    pub differ: usize,
    pub added: usize,
    pub removed: usize,
    pub changed: usize,
    pub shown: Vec<GateDiff>,
    pub left_out: usize,
}

#[derive(Debug, Serialize)]
pub struct GateDiff {
    pub change: Change,
    pub id: String,
    /// What differs: `status`, `resolved_by`, `instance` (empty for a gate added or removed).
    pub differs: Vec<&'static str>,
    pub a: Option<GateSide>,
    pub b: Option<GateSide>,
}

#[derive(Debug, Serialize)]
pub struct GateSide {
    pub status: String,
    pub resolved_by: Option<String>,
    /// Which opening of the gate it is.
    pub instance: i64,
    /// `unattested` where nothing attests its decision (a tampered run is not compared).
    #[serde(skip_serializing_if = "is_attested")]
    pub integrity: &'static str,
}

fn is_attested(state: &&'static str) -> bool {
    *state == "attested"
}

/// A run as read: its rows, in one snapshot, and where its values are.
struct Side {
    paths: RunPaths,
    backend: Backend,
    store: Box<dyn Store>,
    run_id: String,
    records: Vec<ExecutionRow>,
    /// Record id → place in the log, from 1.
    place: HashMap<i64, usize>,
    bindings: Vec<BindingRow>,
    gates: Vec<GateRow>,
    /// Each gate's integrity, as `gates verify` checked the run.
    integrity: std::collections::HashMap<String, &'static str>,
    /// The server's whole blobs of the run: length and sha256.
    blobs: HashMap<String, (Option<i64>, Option<String>)>,
}

/// Where an execution's scope is, as both runs can name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Scope {
    Root,
    /// The scope of the execution at this place in the log.
    At(usize),
    /// An execution id no record of the log has (raw SQL).
    Unknown(i64),
}

fn backend_of(arg: BackendArg) -> Backend {
    match arg {
        BackendArg::Sqlite => Backend::Sqlite,
        BackendArg::Postgres => Backend::Postgres,
    }
}

fn backend_name(b: Backend) -> &'static str {
    match b {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    }
}

impl Side {
    /// Opens the run `given` names (from `forced`'s backend, when given) and reads it.
    fn read(ctx: &Context, given: &str, forced: Option<BackendArg>) -> Result<Side> {
        let paths = ctx.locate(Some(given))?;
        let (backend, mut store) = match forced.map(backend_of) {
            Some(b) => (b, ctx.open_in(&paths, b)?),
            None => {
                let store = ctx.open(&paths)?;
                // What the one rule chose: the record here, else the server.
                let b = if paths.exists() {
                    paths.backend()?
                } else {
                    Backend::Postgres
                };
                (b, store)
            }
        };
        // Blob names are never reused: what the server says of a blob is true in any snapshot.
        // Read before the snapshot, so that this read holds no lock for the snapshot's length.
        let blobs = store
            .blobs()?
            .into_iter()
            .map(|b| (b.blob, (b.bytes, b.sha256)))
            .collect();
        // Each value a sealed opening names stands against its run's log as `get` checks it
        // (a forged answer or edit is exit 9, not a difference), checked before the snapshot
        // (the log is checked against this machine's anchor, which a snapshot taken before it
        // was read would not hold yet); what the snapshot then shows of them must be exactly
        // what was checked, or the run changed while it was read (read again).
        // The run as `gates verify` checks it: a run it refuses (a gate's row at odds with its
        // log, a decision's value gone or changed) is not compared, as no reader shows it.
        let report = crate::services::inputs::checked_untampered(
            store.as_mut(),
            &paths.dir,
            &paths.id,
            "not compared",
        )?;
        let (checked, unanswered) =
            crate::services::inputs::settled(store.as_mut(), |s, names| {
                // And every binding that says a decision wrote it, whatever its name.
                let named: Vec<BindingRow> = s
                    .bindings()?
                    .into_iter()
                    .filter(|b| {
                        names.contains(&b.name) || crate::services::inputs::claims_decision(b)
                    })
                    .collect();
                let mut unanswered = Vec::new();
                for b in &named {
                    // An answer the gate's standing opening has not given (opened again since) is
                    // no value of the run now, as `get` and `resume` read it: left out.
                    match crate::services::inputs::check_read_now(
                        s,
                        &paths.dir,
                        names,
                        b.execution_id,
                        b,
                    ) {
                        Err(e)
                            if crate::error::code_of(&e) == Some(crate::error::Code::NotFound) =>
                        {
                            unanswered.push((b.name.clone(), b.execution_id))
                        }
                        other => other?,
                    }
                }
                Ok((named, unanswered))
            })?;
        store.snapshot()?;
        let run_id = store.run_info()?.id;
        let records = store.executions()?;
        let place = records
            .iter()
            .enumerate()
            .map(|(i, r)| (r.id, i + 1))
            .collect();
        let bindings = store.bindings()?;
        let shown = |b: &&BindingRow| {
            checked
                .iter()
                .any(|c| c.name == b.name && c.execution_id == b.execution_id)
        };
        let same = bindings.iter().filter(shown).count() == checked.len()
            && bindings.iter().filter(shown).all(|b| checked.contains(b));
        if !same {
            return Err(crate::error::busy(
                "a binding some gate names changed while the run was read: read it again",
            ));
        }
        let bindings: Vec<BindingRow> = bindings
            .into_iter()
            .filter(|b| !unanswered.contains(&(b.name.clone(), b.execution_id)))
            .collect();
        // A decision nothing attests (a row and an event only the spec's SQL wrote) is shown
        // marked, as every listing of a run shows it.
        let gates = store.read_gates(None)?;
        let integrity = gates
            .iter()
            .map(|g| {
                let state = crate::cmd::gates::IntegrityView::of(&report, &g.id).state;
                (g.id.clone(), state)
            })
            .collect();
        Ok(Side {
            integrity,
            paths,
            backend,
            store,
            run_id,
            records,
            place,
            bindings,
            gates,
            blobs,
        })
    }

    fn scope(&self, execution_id: Option<i64>) -> Scope {
        match execution_id {
            None => Scope::Root,
            Some(id) => self
                .place
                .get(&id)
                .map_or(Scope::Unknown(id), |p| Scope::At(*p)),
        }
    }

    /// Why the value at `rel` cannot be read, as a copy of the run would say it.
    fn unreadable(&mut self, rel: &str, name: &str) -> anyhow::Error {
        match transfer::value(self.store.as_mut(), &self.paths.dir, rel, name) {
            Err(e) => e,
            Ok(_) => anyhow!(
                "the value of binding {} cannot be read: {}",
                shown(name),
                shown(rel)
            ),
        }
    }

    /// The value's length in bytes, wherever it is kept.
    fn bytes(&mut self, b: &BindingRow) -> Result<u64> {
        let Some(rel) = attachment(b) else {
            return Ok(b.value.as_ref().map_or(0, |v| v.len() as u64));
        };
        let known = match server_blob(rel) {
            Some(blob) => match self.blobs.get(blob) {
                Some((Some(n), _)) => Some(*n as u64),
                _ => self.store.blob_len(blob)?,
            },
            None => attach::open(&self.paths.dir, rel)
                .ok()
                .and_then(|(f, _)| f.metadata().ok())
                .map(|m| m.len()),
        };
        known.ok_or_else(|| self.unreadable(rel, &b.name))
    }

    /// The sha256 of the value's bytes, wherever they are kept.
    fn digest(&mut self, b: &BindingRow) -> Result<String> {
        let Some(rel) = attachment(b) else {
            return Ok(sha256(b.value.as_deref().unwrap_or_default()));
        };
        if let Some((_, Some(sha))) = server_blob(rel).and_then(|blob| self.blobs.get(blob)) {
            return Ok(sha.clone());
        }
        let mut reader = transfer::value(self.store.as_mut(), &self.paths.dir, rel, &b.name)?;
        let mut h = Sha256::new();
        io::copy(&mut reader, &mut h)?;
        Ok(format!("sha256:{}", crate::model::hex(&h.finalize())))
    }

    /// The binding as shown: kind, length and the value's first characters.
    fn value_side(&mut self, b: &BindingRow) -> Result<ValueSide> {
        let bytes = self.bytes(b)?;
        let head = match attachment(b) {
            None => b.value.clone().unwrap_or_default(),
            Some(rel) => {
                let reader = transfer::value(self.store.as_mut(), &self.paths.dir, rel, &b.name)?;
                let mut head = Vec::new();
                reader
                    .take((PREVIEW_CHARS * 4) as u64)
                    .read_to_end(&mut head)?;
                head
            }
        };
        Ok(ValueSide {
            kind: b.kind.clone(),
            bytes,
            attachment: attachment(b).is_some(),
            preview: preview(&head),
        })
    }
}

/// The attachment path a row names (an empty one is none).
fn attachment(b: &BindingRow) -> Option<&str> {
    b.attachment_path.as_deref().filter(|p| !p.is_empty())
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", crate::model::hex(&Sha256::digest(bytes)))
}

/// The first [`PREVIEW_CHARS`] characters of a value's first bytes (a character cut at the
/// end of those bytes left out).
fn preview(head: &[u8]) -> String {
    let whole = match std::str::from_utf8(head) {
        Err(e) if e.error_len().is_none() => &head[..e.valid_up_to()],
        _ => head,
    };
    String::from_utf8_lossy(whole)
        .chars()
        .take(PREVIEW_CHARS)
        .collect()
}

/// A stored text, cut to [`TEXT_CHARS`] characters (`…` marks the cut).
fn clip(text: &str) -> String {
    if text.chars().count() <= TEXT_CHARS {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(TEXT_CHARS).collect();
    cut.push('…');
    cut
}

/// How much of a list is shown: at most `limit` entries and, unless unbounded, about
/// [`LIST_BYTES`] of JSON (the first entry always).
struct Bound {
    limit: usize,
    bounded: bool,
}

impl Bound {
    /// Takes entries from `items` while they fit; how many were taken is the list's length.
    fn take<T: Serialize>(&self, items: impl Iterator<Item = Result<T>>) -> Result<Vec<T>> {
        let mut out = Vec::new();
        let mut bytes = 0;
        for item in items {
            if out.len() >= self.limit {
                break;
            }
            let item = item?;
            let size = serde_json::to_string(&item).map_or(0, |s| s.len()) + 1;
            if self.bounded && !out.is_empty() && bytes + size > LIST_BYTES {
                break;
            }
            bytes += size;
            out.push(item);
        }
        Ok(out)
    }
}

/// A record as compared: statement index, text, status, and its parent by place.
fn shape(side: &Side, r: &ExecutionRow) -> (Option<i64>, Option<String>, Option<String>, Scope) {
    (
        r.statement_index,
        r.statement_text.clone(),
        r.status.as_ref().map(|s| s.as_str().to_string()),
        side.scope(r.parent_id),
    )
}

fn record_entry(side: &Side, position: usize, r: &ExecutionRow) -> RecordEntry {
    RecordEntry {
        position,
        id: r.id,
        statement_index: r.statement_index,
        statement_text: r.statement_text.as_deref().map(clip),
        status: r.status.as_ref().map(|s| s.as_str().to_string()),
        parent_position: r.parent_id.and_then(|p| side.place.get(&p).copied()),
        parent_id: r.parent_id,
    }
}

fn tail(side: &Side, common: usize, bound: &Bound) -> Result<Tail> {
    let after = &side.records[common.min(side.records.len())..];
    let shown = bound.take(
        after
            .iter()
            .enumerate()
            .map(|(i, r)| Ok(record_entry(side, common + i + 1, r))),
    )?;
    let left_out = after.len() - shown.len();
    let next_since = (left_out > 0).then(|| match shown.last() {
        Some(r) => r.id,
        None => common
            .checked_sub(1)
            .and_then(|i| side.records.get(i))
            .map_or(0, |r| r.id),
    });
    Ok(Tail {
        after_common: after.len(),
        shown,
        left_out,
        next_since,
    })
}

fn gate_side(side: &Side, g: &GateRow) -> GateSide {
    GateSide {
        status: g.status.as_str().to_string(),
        resolved_by: g.resolved_by.as_deref().map(clip),
        instance: g.instance,
        integrity: side.integrity.get(&g.id).copied().unwrap_or("attested"),
    }
}

/// A binding's name and scope.
type Key = (String, Scope);

/// A binding that differs: its key, its row in each run (by index), and how.
type Differing = (Key, Option<usize>, Option<usize>, Change, Vec<&'static str>);

/// Compares the two runs once, each read in a snapshot of its own.
fn compare(args: &DiffArgs, a: &mut Side, b: &mut Side) -> Result<Diffed> {
    let bound = Bound {
        limit: if args.all {
            usize::MAX
        } else {
            args.limit as usize
        },
        bounded: !args.all,
    };

    // Bindings, by (name, scope); the row of each side by index.
    let mut keyed: BTreeMap<Key, (Option<usize>, Option<usize>)> = BTreeMap::new();
    let wanted = |row: &BindingRow| args.name.as_ref().is_none_or(|n| *n == row.name);
    for (i, row) in a.bindings.iter().enumerate().filter(|(_, r)| wanted(r)) {
        keyed
            .entry((row.name.clone(), a.scope(row.execution_id)))
            .or_default()
            .0 = Some(i);
    }
    for (i, row) in b.bindings.iter().enumerate().filter(|(_, r)| wanted(r)) {
        keyed
            .entry((row.name.clone(), b.scope(row.execution_id)))
            .or_default()
            .1 = Some(i);
    }
    let mut differing: Vec<Differing> = Vec::new();
    for (key, (ia, ib)) in keyed {
        let (change, differs) = match (ia, ib) {
            (Some(_), None) => (Change::Removed, Vec::new()),
            (None, Some(_)) => (Change::Added, Vec::new()),
            (Some(ia), Some(ib)) => {
                let (ra, rb) = (a.bindings[ia].clone(), b.bindings[ib].clone());
                let mut differs = Vec::new();
                if ra.kind != rb.kind {
                    differs.push("kind");
                }
                let same_value = match (attachment(&ra), attachment(&rb)) {
                    (None, None) => {
                        ra.value.as_deref().unwrap_or_default()
                            == rb.value.as_deref().unwrap_or_default()
                    }
                    _ => a.bytes(&ra)? == b.bytes(&rb)? && a.digest(&ra)? == b.digest(&rb)?,
                };
                if !same_value {
                    differs.push("value");
                }
                if differs.is_empty() {
                    continue;
                }
                (Change::Changed, differs)
            }
            (None, None) => continue,
        };
        differing.push((key, ia, ib, change, differs));
    }
    let count = |c: Change| differing.iter().filter(|d| d.3 == c).count();
    let cursor = if args.all { 0 } else { args.cursor };
    let start = usize::try_from(cursor)
        .unwrap_or(usize::MAX)
        .min(differing.len());
    let shown = bound.take(
        differing[start..]
            .iter()
            .map(|(key, ia, ib, change, differs)| {
                let ra = ia.map(|i| a.bindings[i].clone());
                let rb = ib.map(|i| b.bindings[i].clone());
                Ok(BindingDiff {
                    change: *change,
                    name: clip(&key.0),
                    scope: if key.1 == Scope::Root {
                        "root"
                    } else {
                        "execution"
                    },
                    position: match key.1 {
                        Scope::At(p) => Some(p),
                        _ => None,
                    },
                    execution_id_a: ra.as_ref().and_then(|r| r.execution_id),
                    execution_id_b: rb.as_ref().and_then(|r| r.execution_id),
                    differs: differs.clone(),
                    a: ra.map(|r| a.value_side(&r)).transpose()?,
                    b: rb.map(|r| b.value_side(&r)).transpose()?,
                })
            }),
    )?;
    let next = start + shown.len();
    let bindings = Bindings {
        differ: differing.len(),
        added: count(Change::Added),
        removed: count(Change::Removed),
        changed: count(Change::Changed),
        cursor: start as u64,
        left_out: differing.len() - next,
        next_cursor: (next < differing.len()).then_some(next as u64),
        shown,
    };

    // Records, by place.
    let common = a
        .records
        .iter()
        .zip(&b.records)
        .take_while(|(ra, rb)| shape(a, ra) == shape(b, rb))
        .count();
    let records = Records {
        common,
        a: tail(a, common, &bound)?,
        b: tail(b, common, &bound)?,
    };

    // Gates, by id.
    let mut gate_keys: BTreeMap<&str, (Option<&GateRow>, Option<&GateRow>)> = BTreeMap::new();
    for g in &a.gates {
        gate_keys.entry(g.id.as_str()).or_default().0 = Some(g);
    }
    for g in &b.gates {
        gate_keys.entry(g.id.as_str()).or_default().1 = Some(g);
    }
    let mut gate_diffs = Vec::new();
    for (id, pair) in gate_keys {
        let (change, differs) = match pair {
            (Some(_), None) => (Change::Removed, Vec::new()),
            (None, Some(_)) => (Change::Added, Vec::new()),
            (Some(ga), Some(gb)) => {
                let mut differs = Vec::new();
                if ga.status != gb.status {
                    differs.push("status");
                }
                if ga.resolved_by != gb.resolved_by {
                    differs.push("resolved_by");
                }
                if ga.instance != gb.instance {
                    differs.push("instance");
                }
                if differs.is_empty() {
                    continue;
                }
                (Change::Changed, differs)
            }
            (None, None) => continue,
        };
        gate_diffs.push(GateDiff {
            change,
            id: clip(id),
            differs,
            a: pair.0.map(|g| gate_side(a, g)),
            b: pair.1.map(|g| gate_side(b, g)),
        });
    }
    let gate_count = |c: Change| gate_diffs.iter().filter(|d| d.change == c).count();
    let (added, removed, changed) = (
        gate_count(Change::Added),
        gate_count(Change::Removed),
        gate_count(Change::Changed),
    );
    let differ = gate_diffs.len();
    let shown = bound.take(gate_diffs.into_iter().map(Ok))?;
    let gates = Gates {
        differ,
        added,
        removed,
        changed,
        left_out: differ - shown.len(),
        shown,
    };

    let side = |s: &Side| RunSide {
        run: clip(&s.run_id),
        backend: backend_name(s.backend),
        records: s.records.len(),
        bindings: s.bindings.len(),
        gates: s.gates.len(),
    };
    let identical = bindings.differ == 0
        && gates.differ == 0
        && records.a.after_common == 0
        && records.b.after_common == 0;
    Ok(Diffed {
        a: side(a),
        b: side(b),
        identical,
        name: args.name.clone(),
        bindings,
        records,
        gates,
        exit_code: args.exit_code,
        given: [args.run_a.clone(), args.run_b.clone()],
    })
}

impl super::Run for DiffArgs {
    type Output = Diffed;
    fn run(&self, ctx: &Context) -> Result<Diffed> {
        if let Some(name) = &self.name {
            crate::model::check_name(name)?;
        }
        let mut tries = 0;
        loop {
            let mut a = Side::read(ctx, &self.run_a, self.backend_a)?;
            let mut b = Side::read(ctx, &self.run_b, self.backend_b)?;
            match compare(self, &mut a, &mut b) {
                // A value replaced after its run's snapshot was taken: both read again.
                Err(e)
                    if (transfer::value_gone(&e)
                        || crate::error::code_of(&e) == Some(crate::error::Code::Busy))
                        && tries + 1 < TRIES =>
                {
                    tries += 1
                }
                done => return done,
            }
        }
    }
}

/// How a binding's scope is shown: `root`, or the execution's record.
fn scope_text(d: &BindingDiff) -> String {
    let ids = match (d.execution_id_a, d.execution_id_b) {
        (Some(x), Some(y)) if x != y => format!("execution {x} in A, {y} in B"),
        (Some(x), _) | (None, Some(x)) => format!("execution {x}"),
        (None, None) => return "root".to_string(),
    };
    match d.position {
        Some(p) => format!("record #{p}: {ids}"),
        None => format!("{ids}, not in the log"),
    }
}

fn value_text(v: &ValueSide) -> String {
    let kind = v.kind.as_deref().unwrap_or("?");
    let kept = if v.attachment { ", attachment" } else { "" };
    let more = if (v.preview.len() as u64) < v.bytes {
        "…"
    } else {
        ""
    };
    format!(
        "{}, {}{kept}: {}{more}",
        visible_line(kind),
        count(v.bytes as usize, "byte"),
        one_line(&v.preview, PREVIEW_CHARS)
    )
}

/// `1 record`, `2 records`.
fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// `1 differs`, `2 differ`.
fn differ(n: usize) -> String {
    if n == 1 {
        "1 differs".to_string()
    } else {
        format!("{n} differ")
    }
}

fn gate_text(g: &GateSide) -> String {
    let by = g
        .resolved_by
        .as_deref()
        .map(|p| format!(" by {}", visible_line(p)))
        .unwrap_or_default();
    let mark = match g.integrity {
        "attested" => String::new(),
        other => format!(" ({})", other.to_uppercase()),
    };
    format!(
        "{}{mark}{by} (opening {})",
        visible_line(&g.status),
        g.instance
    )
}

fn record_text(r: &RecordEntry) -> String {
    let index = r.statement_index.map_or("-".to_string(), |i| i.to_string());
    let parent = match (r.parent_position, r.parent_id) {
        (Some(p), _) => format!(", parent #{p}"),
        (None, Some(id)) => format!(", parent id {id} (not in the log)"),
        (None, None) => String::new(),
    };
    format!(
        "#{} (id {}) {index}→ {} {}{parent}",
        r.position,
        r.id,
        one_line(r.statement_text.as_deref().unwrap_or(""), 60),
        visible_line(r.status.as_deref().unwrap_or("?"))
    )
}

impl Render for Diffed {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        for (label, s) in [("A", &self.a), ("B", &self.b)] {
            writeln!(
                w,
                "{label}: run {} ({}): {}, {}, {}",
                visible_line(&s.run),
                s.backend,
                count(s.records, "record"),
                count(s.bindings, "binding"),
                count(s.gates, "gate")
            )?;
        }
        writeln!(w)?;
        let b = &self.bindings;
        let which = match &self.name {
            Some(n) => format!("Bindings named {}", visible_line(n)),
            None => "Bindings".to_string(),
        };
        if b.differ == 0 {
            writeln!(w, "{which}: the same")?;
        } else {
            writeln!(
                w,
                "{which}: {} ({} added, {} removed, {} changed)",
                differ(b.differ),
                b.added,
                b.removed,
                b.changed
            )?;
            if b.cursor > 0 {
                writeln!(w, "  (from difference {} on)", b.cursor + 1)?;
            }
            for d in &b.shown {
                let what = if d.differs.is_empty() {
                    String::new()
                } else {
                    format!(": {}", d.differs.join(", "))
                };
                writeln!(
                    w,
                    "  {} {} ({}){what}",
                    d.change.mark(),
                    visible_line(&d.name),
                    scope_text(d)
                )?;
                for (label, v) in [("A", &d.a), ("B", &d.b)] {
                    if let Some(v) = v {
                        writeln!(w, "      {label}: {}", value_text(v))?;
                    }
                }
            }
            if let Some(next) = b.next_cursor {
                writeln!(
                    w,
                    "  … {} more: --cursor {next} shows the next ones, --name NAME one name's, --all every one",
                    b.left_out
                )?;
            }
        }
        let r = &self.records;
        if r.a.after_common == 0 && r.b.after_common == 0 {
            writeln!(w, "Records: the same {} in both", count(r.common, "record"))?;
        } else {
            let shared = match r.common {
                0 => "they differ from the first record on".to_string(),
                1 => "they share the first record".to_string(),
                n => format!("they share the first {n} records"),
            };
            writeln!(
                w,
                "Records: A has {}, B has {}; {shared}",
                self.a.records, self.b.records
            )?;
            for (label, t, given) in [("A", &r.a, &self.given[0]), ("B", &r.b, &self.given[1])] {
                if t.after_common == 0 {
                    writeln!(w, "  {label} then has none")?;
                    continue;
                }
                writeln!(w, "  {label} then has {}:", count(t.after_common, "record"))?;
                for e in &t.shown {
                    writeln!(w, "    {}", record_text(e))?;
                }
                if let Some(since) = t.next_since {
                    writeln!(
                        w,
                        "    … {} more: prose-state log --run {} --since {since}",
                        t.left_out,
                        visible_line(given)
                    )?;
                }
            }
        }
        let g = &self.gates;
        if g.differ == 0 {
            writeln!(w, "Gates: the same")?;
        } else {
            writeln!(
                w,
                "Gates: {} ({} added, {} removed, {} changed)",
                differ(g.differ),
                g.added,
                g.removed,
                g.changed
            )?;
            for d in &g.shown {
                let what = if d.differs.is_empty() {
                    String::new()
                } else {
                    format!(": {}", d.differs.join(", "))
                };
                writeln!(w, "  {} {}{what}", d.change.mark(), visible_line(&d.id))?;
                for (label, s) in [("A", &d.a), ("B", &d.b)] {
                    if let Some(s) = s {
                        writeln!(w, "      {label}: {}", gate_text(s))?;
                    }
                }
            }
            if g.left_out > 0 {
                writeln!(
                    w,
                    "  … {} more: --limit N shows more, --all every one",
                    g.left_out
                )?;
            }
        }
        if self.identical {
            writeln!(w, "\nNo differences.")?;
        }
        Ok(())
    }

    fn exit_code(&self) -> Code {
        if self.exit_code && !self.identical {
            Code::Error
        } else {
            Code::Ok
        }
    }
}
