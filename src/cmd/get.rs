use crate::cli::GetArgs;
use crate::error::{not_found, shown};
use crate::output::{visible, Render};
use crate::run::RunPaths;
use crate::services::attach::{self, OpenError};
use crate::store::{server_blob, BindingRow, Store, SERVER_PREFIX};
use anyhow::Result;
use serde::Serialize;
use std::io::{self, Read, Write};

/// A binding found through the scope chain.
#[derive(Serialize)]
pub struct Got {
    #[serde(flatten)]
    pub row: BindingRow,
    /// `root` or `execution`: the kind of scope the binding was found in.
    pub scope: &'static str,
    /// Parent links above the starting execution (0: its own scope); null in the root scope.
    pub depth: Option<u64>,
    /// The value's length in bytes (the attachment's, for an attachment).
    pub bytes: u64,
    /// The attachment file's path, for reading it directly.
    pub attachment: Option<String>,
    /// With `--offset`/`--length`: where the part given as `value` starts in the whole value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// With `--offset`/`--length`: the part's length in bytes (`bytes` stays the whole's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub length: Option<u64>,
    #[serde(skip)]
    content: Option<Box<dyn Read>>,
    /// A value kept in the store, to stream from it once the command is done with the store.
    #[serde(skip)]
    blob: Option<String>,
}

impl Render for Got {
    /// The value exactly as stored, with nothing added; an attachment is streamed. On a
    /// terminal, where a person reads it, it is made visible instead.
    fn text(self, w: &mut dyn Write, tty: bool) -> io::Result<()> {
        let mut content = self
            .content
            .unwrap_or_else(|| Box::new(io::Cursor::new(self.row.value.unwrap_or_default())));
        if !tty {
            return io::copy(&mut content, w).map(|_| ());
        }
        let mut bytes = Vec::new();
        content.read_to_end(&mut bytes)?;
        w.write_all(visible(&String::from_utf8_lossy(&bytes)).as_bytes())
    }

    fn escapes_itself(&self) -> bool {
        true
    }
}

/// The scope chain a lookup walked, for `--explain`.
#[derive(Debug, Serialize)]
pub struct Explained {
    pub name: String,
    /// The execution the lookup started from; null for a root-scope lookup.
    pub start: Option<i64>,
    /// Execution ids walked, nearest first; the root scope is searched after them.
    pub chain: Vec<i64>,
    /// Where the binding was found.
    pub found_execution_id: Option<i64>,
    pub scope: &'static str,
    pub depth: Option<u64>,
    pub kind: Option<String>,
}

impl Render for Explained {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        match self.start {
            Some(id) => writeln!(w, "lookup of {} from execution {id}:", self.name)?,
            None => writeln!(w, "lookup of {} in the root scope:", self.name)?,
        }
        let kind = self.kind.as_deref().unwrap_or("?");
        for (depth, id) in self.chain.iter().enumerate() {
            let mark = if self.depth == Some(depth as u64) {
                format!("found ({kind})")
            } else if self.depth.is_some_and(|d| (depth as u64) > d) {
                "not reached".to_string()
            } else {
                "searched, absent".to_string()
            };
            writeln!(w, "  execution {id:<8} {mark}")?;
        }
        let root = match (self.scope, self.depth) {
            ("root", _) => format!("found ({kind})"),
            (_, Some(_)) => "not reached".to_string(),
            _ => "searched, absent".to_string(),
        };
        writeln!(w, "  root               {root}")
    }
}

/// The kind of scope a binding is in: `execution`, or `root`.
pub(super) fn scope_name(in_execution: bool) -> &'static str {
    if in_execution {
        "execution"
    } else {
        "root"
    }
}

/// The bindings visible from `scope` (None: the root alone), a page of `names` names after
/// `after`: for each name, the one nearest the scope (the root last), in name order; with the
/// chain walked from it. Only the rows of the chain and the root are read (`bindings_page`);
/// the nearest of each name is chosen here, since the store has no read of every name's
/// nearest binding (`resolve` finds one name's). `resume` and the gate page both see by it.
pub fn nearest_bindings(
    store: &mut dyn Store,
    scope: Option<i64>,
    after: Option<&str>,
    names: i64,
) -> Result<(Vec<i64>, Vec<BindingRow>)> {
    let chain = match scope {
        Some(id) => store.scope_chain(id)?,
        None => Vec::new(),
    };
    let mut nearest: std::collections::BTreeMap<String, (usize, BindingRow)> = Default::default();
    for b in store.bindings_page(&chain, after, names)? {
        let rank = match b.execution_id {
            None => chain.len(),
            Some(e) => match chain.iter().position(|c| *c == e) {
                Some(i) => i,
                None => continue,
            },
        };
        if nearest.get(&b.name).is_none_or(|(r, _)| rank < *r) {
            nearest.insert(b.name.clone(), (rank, b));
        }
    }
    Ok((chain, nearest.into_values().map(|(_, b)| b).collect()))
}

fn describe_chain(chain: &[i64]) -> String {
    let mut parts: Vec<String> = chain.iter().map(|id| format!("execution {id}")).collect();
    if chain.len() > 8 {
        parts.splice(
            4..chain.len() - 1,
            [format!("… ({} executions)", chain.len())],
        );
    }
    parts.push("root".to_string());
    parts.join(" → ")
}

/// A read of the past that found no version (gone, a deletion, not known then) of a name a
/// sealed opening names: when its kept versions do not stand against the log, that is why
/// (exit 9), not the absence.
fn kept_or(
    store: &mut dyn Store,
    run_dir: &std::path::Path,
    name: &str,
    found: Result<crate::store::Found>,
) -> Result<crate::store::Found> {
    let Err(e) = found else { return found };
    let naming = store.naming(name)?;
    if naming.input || !naming.response.is_empty() {
        let report = store.verify_audit()?;
        crate::services::inputs::check_kept(store, run_dir, name, &report)?;
    }
    Err(e)
}

fn lookup(
    args: &GetArgs,
    store: &mut dyn Store,
    run_dir: &std::path::Path,
) -> Result<(crate::store::Found, Vec<i64>)> {
    crate::model::check_name(&args.name)?;
    if let Some(id) = args.execution_id {
        if !store.execution_exists(id)? {
            return Err(not_found(format!("execution not found: {id}")));
        }
    }
    // A version of the past, from the binding's history.
    if let Some(n) = args.version {
        let found = super::history::version(store, &args.name, args.execution_id, n);
        return Ok((kept_or(store, run_dir, &args.name, found)?, Vec::new()));
    }
    if let Some(at) = &args.as_of {
        let at = super::history::parse_as_of(store, at)?;
        let found = super::history::as_of(store, &args.name, args.execution_id, &at);
        return Ok((kept_or(store, run_dir, &args.name, found)?, Vec::new()));
    }
    let found = store.resolve(&args.name, args.execution_id)?;
    // The chain itself is walked again only when it is shown: to explain, or to say where a
    // missing binding was looked for.
    let chain = match (args.execution_id, args.explain || found.is_none()) {
        (Some(id), true) => store.scope_chain(id)?,
        _ => Vec::new(),
    };
    let Some(found) = found else {
        // A response binding a sealed decision wrote cannot be missing.
        crate::store::gate_read::check_response_binding(
            store,
            &args.name,
            args.execution_id,
            None,
        )?;
        return Err(not_found(format!(
            "binding not found (searched {}): {}",
            describe_chain(&chain),
            shown(&args.name)
        )));
    };
    Ok((found, chain))
}

pub fn explain(args: &GetArgs, run: &RunPaths, store: &mut dyn Store) -> Result<Explained> {
    let (found, chain) = lookup(args, store, &run.dir)?;
    Ok(Explained {
        name: args.name.clone(),
        start: args.execution_id,
        chain,
        found_execution_id: found.row.execution_id,
        scope: scope_name(found.depth.is_some()),
        depth: found.depth,
        kind: found.row.kind,
    })
}

/// What a value found must stand against before it is printed: a version a sealed decision
/// was about is read only as it was decided, and a name some gate answers into only where its
/// answers vouch for it. `found` is the very row printed.
fn check_found(
    args: &GetArgs,
    run: &RunPaths,
    store: &mut dyn Store,
    found: &crate::store::Found,
    names: &std::collections::BTreeSet<String>,
) -> Result<()> {
    // A read of the past (of a version the history keeps).
    let past = args
        .version
        .or(args.as_of.as_ref().and(found.row.own_version));
    let Some(n) = past else {
        if args.version.is_some() || args.as_of.is_some() {
            return Ok(());
        }
        return crate::services::inputs::check_read_now(
            store,
            &run.dir,
            names,
            args.execution_id,
            &found.row,
        );
    };
    let naming = store.naming_among(names, &args.name)?;
    let point = match &args.as_of {
        Some(at) => Some(super::history::parse_as_of(store, at)?),
        None => None,
    };
    if naming.input || !naming.response.is_empty() {
        // A name some opening names: the log, checked whole once, must vouch for it here; an
        // input some gate is about is read in the past only while the log is whole.
        let report = store.verify_audit()?;
        crate::store::gate_read::check_vouched(&report, &args.name, &naming)?;
        if naming.input {
            crate::store::gate_read::log_whole(
                &report,
                &args.name,
                "is an input a gate decided on",
            )?;
        }
        crate::store::gate_read::check_response_binding_named(
            store,
            &args.name,
            args.execution_id,
            Some(found.row.execution_id),
            naming.response,
            crate::store::gate_read::Read::Past(point.as_ref()),
            Some(&report),
        )?;
        if let Some(point) = &point {
            crate::store::gate_read::check_standing_at(
                &report,
                &args.name,
                found.row.execution_id,
                n,
                point,
            )?;
        }
    }
    crate::services::inputs::check_decided_version(
        store,
        &run.dir,
        &args.name,
        found.row.execution_id,
        n,
    )
}

pub fn run(args: &GetArgs, run: &RunPaths, store: &mut dyn Store) -> Result<Got> {
    // A rebind commits its new file and then removes the previous one: a row read just
    // before may name a file already gone. The lookup is then made again, a few times. A
    // value kept in the store is read in one snapshot with its row instead: never gone.
    let mut tries = 0;
    let mut snapshot = false;
    loop {
        // The lookup and its checks, read again when a decision committed beside them; the
        // row printed is the very one checked.
        let found = crate::services::inputs::settled(store, |s, names| {
            let (found, _) = lookup(args, s, &run.dir)?;
            check_found(args, run, s, &found, names).map(|()| found)
        })?;
        let mut row = found.row;
        let rel = row.attachment_path.clone().filter(|r| !r.is_empty());
        let blob = rel.as_deref().and_then(server_blob).map(str::to_string);
        if blob.is_some() && !snapshot {
            // Looked up again inside the snapshot, so the row and its chunks are one version.
            store.snapshot()?;
            snapshot = true;
            continue;
        }
        let (mut file, bytes, attachment): (Option<std::fs::File>, _, _) =
            match (rel.as_deref(), blob.as_deref()) {
                (_, Some(blob)) => match store.blob_len(blob)? {
                    Some(bytes) => (None, bytes, None),
                    None => {
                        return Err(anyhow::anyhow!(
                            "attachment of binding {} cannot be read: {}{} is not on the server (run `prose-state doctor`)",
                            shown(&row.name),
                            SERVER_PREFIX,
                            shown(blob)
                        ))
                    }
                },
                (Some(rel), None) => match attach::open(&run.dir, rel) {
                    Ok((file, path)) => {
                        let bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
                        (Some(file), bytes, Some(path.display().to_string()))
                    }
                    Err(OpenError::Missing(_)) if tries < 5 => {
                        tries += 1;
                        continue;
                    }
                    Err(OpenError::Missing(path)) => {
                        let elsewhere = if store.keeps_values() {
                            " (a file on the machine that bound it: run `prose-state doctor --fix` there to upload it to the server)"
                        } else {
                            ""
                        };
                        return Err(anyhow::anyhow!(
                            "attachment of binding {} cannot be read: No such file or directory: {}{elsewhere}",
                            shown(&row.name),
                            path.display()
                        ));
                    }
                    Err(OpenError::Refused(e) | OpenError::Other(e)) => return Err(e),
                },
                (None, _) => (None, row.value.as_ref().map_or(0, |v| v.len() as u64), None),
            };
        let (mut offset, mut length) = (None, None);
        let mut whole_blob = blob.clone();
        if args.offset.is_some() || args.length.is_some() {
            // A part of the value, the attachment's or the row's: the value is then exactly
            // those bytes, and `bytes` still the whole value's length.
            let start = args.offset.unwrap_or(0).min(bytes);
            let want = args.length.unwrap_or(u64::MAX).min(bytes - start);
            let part = match (file.take(), blob.as_deref()) {
                (_, Some(blob)) => store.read_blob(blob, start, want)?,
                (Some(mut file), None) => {
                    use std::io::{Seek, SeekFrom};
                    file.seek(SeekFrom::Start(start))?;
                    let mut part = Vec::with_capacity(want as usize);
                    file.take(want).read_to_end(&mut part)?;
                    part
                }
                (None, None) => row.value.as_deref().unwrap_or_default()
                    [start as usize..(start + want) as usize]
                    .to_vec(),
            };
            offset = Some(start);
            length = Some(part.len() as u64);
            row.value = Some(part);
            whole_blob = None;
        }
        return Ok(Got {
            offset,
            length,
            scope: scope_name(found.depth.is_some()),
            depth: found.depth,
            bytes,
            attachment,
            content: file.map(|f| Box::new(f) as Box<dyn Read>),
            blob: whole_blob,
            row,
        });
    }
}

/// The whole value of the binding `args` names, as `get` prints it off a terminal (an
/// attachment's bytes, not its summary), for copying it without printing it (`bind --from`).
/// It is read in its own connection, which the reader may hold until it ends.
pub fn whole_value(args: &GetArgs, ctx: &crate::context::Context) -> Result<Box<dyn Read>> {
    let (paths, mut store) = ctx.the_run()?;
    let mut got = run(args, &paths, store.as_mut())?;
    Ok(match (got.blob.take(), got.content.take()) {
        (Some(blob), _) => store.into_blob_reader(&blob)?,
        (None, Some(content)) => content,
        (None, None) => Box::new(io::Cursor::new(got.row.value.unwrap_or_default())),
    })
}

crate::output::one_of!(
    /// A value, or with `--explain` the scope chain walked.
    Lookup {
        Value(Box<Got>),
        Explained(Explained),
    }
);

impl super::Run for GetArgs {
    type Output = Lookup;
    fn run(&self, ctx: &crate::context::Context) -> Result<Lookup> {
        let (paths, mut store) = ctx.the_run()?;
        Ok(if self.explain {
            Lookup::Explained(explain(self, &paths, store.as_mut())?)
        } else {
            let mut got = run(self, &paths, store.as_mut())?;
            // A value kept in the store streams from it, in the snapshot its row was read in.
            if let Some(blob) = got.blob.take() {
                got.content = Some(store.into_blob_reader(&blob)?);
            }
            Lookup::Value(Box::new(got))
        })
    }
}
