//! Runs that move: a run read whole from one store (in one snapshot, while writers go on) and
//! written whole into another, its values with it. `export` writes the copy as a run directory
//! of its own (a SQLite `state.db` and `attachments/`); `import` brings such a directory into
//! the project's backend.

use crate::error::{shown, tampered};
use crate::services::attach::{self, OpenError};
use crate::store::dump::RunDump;
use crate::store::rules::Restore;
use crate::store::sqlite::SqliteStore;
use crate::store::{server_blob, NewRun, OpenOptions, Store};
use anyhow::{anyhow, Context as _, Result};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// A value the run's rows name that was gone when it was read: a rebind replaced it after the
/// snapshot was taken. The copy is started again with a new snapshot.
#[derive(Debug)]
pub struct ValueGone(pub String);

impl std::fmt::Display for ValueGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::error::Error for ValueGone {}

/// Whether an error is a [`ValueGone`] (worth a new snapshot).
pub fn value_gone(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<ValueGone>().is_some())
}

/// The whole run, read in one snapshot of `src`.
pub fn read(src: &mut dyn Store) -> Result<RunDump> {
    src.snapshot()?;
    src.dump()
}

/// Refuses a copy whose audit chain does not verify: a row removed, inserted or edited, a
/// seal that claims this machine's key and does not match, or a gate its log contradicts.
/// Rows sealed with another machine's key are not refused: they come as they are, unattested
/// here, unless the import vouches for them (`--vouch`), which its event records.
pub fn verify(
    d: &RunDump,
    wiring: &crate::store::Wiring,
) -> Result<crate::store::chain::ChainReport> {
    let gates: Vec<_> = d.gates.iter().map(|g| g.row(&d.run.id)).collect();
    let key = wiring.key_for_reading()?;
    let report = crate::store::chain::check(&d.audit, &gates, Some(&d.run.id), key, None);
    if let Some(b) = &report.first_broken {
        return Err(tampered(format!(
            "the audit chain of run {} does not verify (broken at row {}: {}); a copy that does not verify is not taken",
            shown(&d.run.id),
            b.id,
            b.reason
        )));
    }
    if let Some((gate, crate::store::chain::Integrity::Tampered(why))) = report
        .gates
        .iter()
        .find(|(_, i)| matches!(i, crate::store::chain::Integrity::Tampered(_)))
    {
        return Err(tampered(format!(
            "gate {} of run {} disagrees with its audit log ({why}); a copy that does not verify is not taken",
            shown(gate),
            shown(&d.run.id)
        )));
    }
    // The rows gate_instances keeps of earlier openings, against their sealed events.
    let earlier = crate::store::gate_read::earlier_openings(&report, |gate, instance| {
        Ok(d.gate_instances
            .iter()
            .map(|g| g.row(&d.run.id))
            .find(|r| r.id == gate && r.instance == instance))
    })?;
    if let Some((gate, crate::store::chain::Integrity::Tampered(why))) = earlier.first() {
        return Err(tampered(format!(
            "gate {} of run {}: {why}; a copy that does not verify is not taken",
            shown(gate),
            shown(&d.run.id)
        )));
    }
    // The kept versions of each binding a sealed opening names, as the log says of them: a
    // changed history is not carried into a copy, where it would read as the copy's own.
    use crate::store::kept;
    for name in kept::names(&report) {
        for scope in kept::scopes(&report, &name) {
            let rows = kept_rows(d, &name, scope);
            if let Some(why) = kept::problem(&report, &name, scope, &rows) {
                return Err(tampered(format!(
                    "{why} (run {}): its history was changed behind prose-state's back; a copy that does not verify is not taken",
                    shown(&d.run.id)
                )));
            }
        }
    }
    // A kept version of any name that says a decision wrote it (`approve G:`) is one a sealed
    // decision of G wrote (or `doctor --fix` restating an answer: no writer, after a gap).
    let writes = crate::store::kept::sealed_writes(&report);
    for h in &d.history {
        let Some(gate) = h
            .source_statement
            .as_deref()
            .and_then(crate::store::rules::decided_by)
        else {
            continue;
        };
        // (Its scope is checked by `kept::problem` where a sealed opening names it: a moved
        // run's frames are renumbered, and the log maps them.)
        let sealed = writes
            .iter()
            .any(|w| w.gate == gate && w.name == h.name && w.version == h.n);
        // A gate whose opening nothing here attests (sealed on another machine) vouches for
        // nothing either way: its claims are read as unattested (10) in the copy.
        let attested = report.derived.get(gate).is_some_and(|g| g.instance > 0);
        if attested && !(sealed || h.gap && h.principal.is_none()) {
            return Err(tampered(format!(
                "version {} of binding {} says gate {}'s decision wrote it, and no sealed decision of that gate wrote that version (run {}); a copy that does not verify is not taken",
                h.n,
                shown(&h.name),
                shown(gate),
                shown(&d.run.id)
            )));
        }
    }
    // Every binding is its history's newest version (where its history keeps any), whatever
    // names it: a value changed in place, or its history rewritten, would come in as the
    // copy's own (an input of a gate still pending, say, on which a person would then decide).
    let mut scopes: Vec<(&str, Option<i64>)> = d
        .history
        .iter()
        .map(|h| (h.name.as_str(), h.execution_id))
        .chain(
            d.bindings
                .iter()
                .filter_map(|b| Some((b.name.as_deref()?, b.execution_id))),
        )
        .collect();
    scopes.sort_unstable();
    scopes.dedup();
    for (name, scope) in scopes {
        let rows = kept_rows(d, name, scope);
        if let Some(why) = current_problem(d, name, scope, &rows)? {
            return Err(tampered(format!(
                "{why} (run {}); a copy that does not verify is not taken",
                shown(&d.run.id)
            )));
        }
    }
    Ok(report)
}

/// The copy's kept versions of binding `name` in `scope`, in order.
fn kept_rows(
    d: &RunDump,
    name: &str,
    scope: Option<i64>,
) -> Vec<crate::store::history::HistoryRow> {
    let mut rows: Vec<_> = d
        .history
        .iter()
        .filter(|h| h.name == name && h.execution_id == scope)
        .cloned()
        .collect();
    rows.sort_by_key(|h| (h.n, h.seq));
    rows
}

/// Why the copy's current value of binding `name` in `scope` is not its newest kept version
/// (`rows`, that scope's whole history, checked), if it is not: a value changed in place behind
/// prose-state's back, its history left as written, would otherwise come in as the copy's own.
fn current_problem(
    d: &RunDump,
    name: &str,
    scope: Option<i64>,
    rows: &[crate::store::history::HistoryRow],
) -> Result<Option<String>> {
    let Some(newest) = rows.len().checked_sub(1) else {
        return Ok(None);
    };
    let now = d
        .bindings
        .iter()
        .find(|b| b.name.as_deref() == Some(name) && b.execution_id == scope);
    let place = scope.map_or("the root".to_string(), |e| format!("execution {e}"));
    let kept = crate::store::history::as_row(rows, newest)?;
    let same_value = |a: &Option<Vec<u8>>, b: &Option<Vec<u8>>| match (a, b) {
        (Some(a), Some(b)) if a != b => {
            // The same JSON, written by two writers' serialisers, is the same value.
            let parse = |v: &[u8]| serde_json::from_slice::<serde_json::Value>(v).ok();
            parse(a).is_some_and(|a| Some(a) == parse(b))
        }
        (a, b) => a == b,
    };
    let why = match now {
        None if rows[newest].deleted => return Ok(None),
        None => format!(
            "binding {} in {place} is gone, and its history's newest version {} holds a value",
            shown(name),
            kept.own_version.unwrap_or_default()
        ),
        Some(_) if rows[newest].deleted => format!(
            "binding {} in {place} holds a value, and its history's newest version deleted it",
            shown(name)
        ),
        Some(b)
            if !same_value(&b.value, &kept.value)
                || b.attachment_path != kept.attachment_path
                || b.kind != kept.kind =>
        {
            format!(
                "binding {} in {place} is not its history's newest version {}: it was changed in place behind prose-state's back",
                shown(name),
                kept.own_version.unwrap_or_default()
            )
        }
        Some(_) => return Ok(None),
    };
    Ok(Some(why))
}

/// A value kept in a store, read in order through the store's own range reads (in its
/// snapshot), a chunk at a time.
struct StoreValue<'a> {
    store: &'a mut dyn Store,
    blob: String,
    at: u64,
    len: u64,
    buf: Vec<u8>,
    pos: usize,
}

impl Read for StoreValue<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.buf.len() {
            if self.at >= self.len {
                return Ok(0);
            }
            self.buf = self
                .store
                .read_blob(&self.blob, self.at, 1 << 20)
                .map_err(|e| io::Error::other(format!("{e:#}")))?;
            if self.buf.is_empty() {
                return Err(io::Error::other(format!(
                    "the server's value {} ended early",
                    shown(&self.blob)
                )));
            }
            self.at += self.buf.len() as u64;
            self.pos = 0;
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// The bytes an attachment path names, wherever they are kept.
pub fn value<'a>(
    store: &'a mut dyn Store,
    run_dir: &Path,
    path: &str,
    name: &str,
) -> Result<Box<dyn Read + 'a>> {
    if let Some(blob) = server_blob(path) {
        let len = store.blob_len(blob)?.ok_or_else(|| {
            anyhow!(
                "the value of binding {} ({path}) is not whole on the server: run `prose-state doctor`",
                shown(name)
            )
        })?;
        return Ok(Box::new(StoreValue {
            store,
            blob: blob.to_string(),
            at: 0,
            len,
            buf: Vec::new(),
            pos: 0,
        }));
    }
    match attach::open(run_dir, path) {
        Ok((file, _)) => Ok(Box::new(file)),
        Err(OpenError::Missing(p)) if store.keeps_values() => Err(anyhow!(
            "the value of binding {} is a file on another machine ({}): run `prose-state doctor --fix` there to upload it, then copy the run",
            shown(name),
            p.display()
        )),
        Err(OpenError::Missing(p)) => Err(anyhow::Error::new(ValueGone(format!(
            "the value of binding {} was replaced while the run was read: {}",
            shown(name),
            p.display()
        )))),
        Err(OpenError::Refused(e) | OpenError::Other(e)) => Err(e),
    }
}

/// The content digest of the run of `d` (see [`RunDump::digest`]), over the sha256 of every
/// value its bindings keep outside their rows.
pub fn digest(store: &mut dyn Store, run_dir: &Path, d: &RunDump) -> Result<String> {
    let on_server: HashMap<String, String> = store
        .blobs()?
        .into_iter()
        .filter_map(|b| Some((b.blob, b.sha256?)))
        .collect();
    let mut out = HashMap::new();
    for (path, name, _) in d.values() {
        let digest = match server_blob(path).and_then(|blob| on_server.get(blob)) {
            Some(sha) => sha.clone(),
            None => {
                let mut reader = value(store, run_dir, path, name)?;
                let mut h = Sha256::new();
                io::copy(&mut reader, &mut h)?;
                format!("sha256:{}", crate::model::hex(&h.finalize()))
            }
        };
        out.insert(path.to_string(), digest);
    }
    Ok(d.digest(&out))
}

/// How a copy is written: resealed with an `imported` event (an import), or as it was (an
/// export).
pub struct How {
    pub reseal: bool,
    /// Who imported, and the event's metadata.
    pub event: Option<(Option<String>, serde_json::Value)>,
    pub now: String,
}

/// What a copy holds, for the report.
#[derive(Debug, Default, serde::Serialize)]
pub struct Moved {
    pub values: usize,
    pub value_bytes: u64,
}

impl Moved {
    /// The copy's rows (`rows`) and values, as `export` and `import` print them.
    pub fn text(&self, w: &mut dyn Write, rows: &BTreeMap<&str, usize>) -> io::Result<()> {
        let rows: Vec<String> = rows.iter().map(|(k, v)| format!("{v} {k}")).collect();
        writeln!(w, "Rows: {}", rows.join(", "))?;
        writeln!(w, "Values: {} ({} bytes)", self.values, self.value_bytes)
    }
}

/// Builds a run directory in `dir` (new and empty): its values as files in `attachments/`,
/// the program's copy, and a `state.db` holding the run written by `restore` from `d`.
pub fn build_dir(
    src: &mut dyn Store,
    src_dir: &Path,
    d: &RunDump,
    dir: &Path,
    opts: OpenOptions,
    how: &How,
) -> Result<Moved> {
    let files = dir.join(crate::run::ATTACHMENTS_DIR);
    fs::create_dir(&files).with_context(|| format!("could not create {}", files.display()))?;
    let program = src_dir.join(crate::run::PROGRAM_FILE);
    if program.is_file() && !program.is_symlink() {
        fs::copy(&program, dir.join(crate::run::PROGRAM_FILE))
            .with_context(|| format!("could not copy {}", program.display()))?;
    }
    let mut moved = Moved::default();
    let mut paths = HashMap::new();
    for (path, name, execution_id) in d.values() {
        let file_name = attach::file_name(name, execution_id)?;
        let target = crate::model::path_in(&files, &file_name, crate::model::PathName::File)?;
        let mut reader = value(src, src_dir, path, name)?;
        let mut out = fs::File::create_new(&target)
            .with_context(|| format!("could not create {}", target.display()))?;
        moved.value_bytes += io::copy(&mut reader, &mut out)
            .with_context(|| format!("could not copy the value of binding {}", shown(name)))?;
        out.flush()?;
        out.sync_all()?;
        moved.values += 1;
        paths.insert(
            path.to_string(),
            format!("{}/{file_name}", crate::run::ATTACHMENTS_DIR),
        );
    }
    crate::run::sync_dir(&files)?;
    write_db(dir, d, &paths, opts, how)?;
    Ok(moved)
}

/// Writes `dir/state.db` (new) holding the run of `d`, its attachments at `paths`.
pub fn write_db(
    dir: &Path,
    d: &RunDump,
    paths: &HashMap<String, String>,
    opts: OpenOptions,
    how: &How,
) -> Result<()> {
    let db = dir.join("state.db");
    let mut store = SqliteStore::create(
        &db,
        &NewRun {
            id: &d.run.id,
            program_path: d.run.program_path.as_deref(),
            program_source: d.run.program_source.as_deref(),
            created_at: d.run.started_at.as_deref().unwrap_or_default(),
            // A copy keeps every version it carries; `prune --history` bounds it.
            history_keep: None,
        },
        opts,
    )?;
    store.restore(&Restore {
        dump: d,
        paths,
        fresh: true,
        replace: false,
        reseal: how.reseal,
        event: how.event.as_ref().map(|(p, m)| (p.as_deref(), m.clone())),
        now: &how.now,
    })?;
    // A copy is one file: its log folded in, so `state.db` alone holds everything.
    store.checkpoint("truncate")?;
    drop(store);
    crate::run::sync_dir(dir)?;
    Ok(())
}

/// Builds a run directory with `build` in a new temporary directory in `parent` (see
/// [`temp_dir`]), then puts it in its place with `place`. The temporary directory is removed
/// whatever happened (after an exchange it holds the run replaced), and `parent` synced. A
/// place already taken is the error `taken`; another failure to move names `target`.
pub fn build_and_place<T>(
    parent: &Path,
    prefix: &str,
    build: impl FnOnce(&Path) -> Result<T>,
    place: impl FnOnce(&Path) -> io::Result<()>,
    taken: impl FnOnce() -> anyhow::Error,
    target: &str,
) -> Result<T> {
    let (tmp, lock) = temp_dir(parent, prefix)?;
    let built = build(&tmp).and_then(|done| match place(&tmp) {
        Ok(()) => Ok(done),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(taken()),
        Err(e) => Err(anyhow::Error::new(e).context(format!("could not move {target}"))),
    });
    let _ = fs::remove_dir_all(&tmp);
    let done = built?;
    drop(lock);
    crate::run::sync_dir(parent).with_context(|| format!("could not sync {}", parent.display()))?;
    Ok(done)
}

/// A new temporary directory beside `target`, named after it, and its lock (so `doctor` can
/// tell a live copy's directory from a killed one's).
pub fn temp_dir(parent: &Path, prefix: &str) -> Result<(PathBuf, fs::File)> {
    fs::create_dir_all(parent).with_context(|| format!("could not create {}", parent.display()))?;
    let suffix: u64 = rand::random();
    let tmp = parent.join(format!("{prefix}{suffix:016x}"));
    fs::create_dir(&tmp).with_context(|| format!("could not create {}", tmp.display()))?;
    let lock = fs::File::open(&tmp)?;
    lock.lock()?;
    Ok((tmp, lock))
}
