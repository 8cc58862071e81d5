//! `import --from filesystem DIR`: a run of OpenProse's filesystem state mode (`state.md`,
//! `bindings/`, `agents/`; the format is `filesystem.md` of the spec) brought into a database.
//!
//! The directory is read into a run (nothing in it is changed), staged as a run directory of
//! prose-state's beside the runs, and imported from there like any other, so it lands whole
//! or not at all and a second import of the same directory is a no-op. Every line and file
//! that has no place in the database is reported, never dropped silently.
//!
//! How the format maps:
//! - `state.md`: each event line becomes an execution record, in order, its statement index
//!   the line's `N` (`2a` is statement 2, branch `a`): `name ✓` completed, `∥start a,b`
//!   started (branches in metadata), `Na→` completed under its parallel record, `∥done`
//!   joined, `loop:I/M` iteration, `loop:I/M exit(why)` exited, `block:name#ID` started (with
//!   every record up to `#ID done` inside it: the scope chain), `#ID done` completed, `✗ why`
//!   failed, `retry:A/M` retry. `---end T` and `---error T why` finish the run. The line and
//!   its markers are kept in each record's metadata. The file has no times but the end's:
//!   records carry the file's modification time.
//! - `bindings/{name}.md` and `{name}__{ID}.md`: the value below the header's `---` line (one
//!   blank line after it and one newline at its end are the format's, not the value's), its
//!   `kind:`, and its `source:` block; `__ID` scopes it to the record of `block:…#ID`.
//! - `agents/{name}/memory.md` and `{name}-NNN.md`: the run's agent, its memory and segments
//!   (`timestamp:`, `prompt:`, and the text under `## Summary`).
//! - `imports/{handle}--{slug}/`: an import entry per nested program (its own state is not
//!   brought in, and is reported).
//! - `.prose/agents/` of the project the run is in, and `~/.prose/agents/`: project and user
//!   agents, added where they are absent (the same memory is a no-op; another is reported).

use super::import::{checked, land, Imported};
use crate::cli::{AgentScope, ImportArgs};
use crate::context::Context;
use crate::error::{not_found, refused, shown};
use crate::model::PathName;
use crate::services::transfer;
use crate::store::dump::{
    AgentRecord, BindingRecord, ImportRecord, RunDump, RunRecord, SegmentRecord,
};
use crate::store::sqlite::SqliteStore;
use anyhow::{Context as _, Result};
use serde_json::json;
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Values larger than this become attachment files, as `bind` makes them.
const INLINE_MAX: usize = 100 * 1024;

pub fn run(args: &ImportArgs, ctx: &Context) -> Result<Imported> {
    let dir = &args.path;
    let there = |name: &str| fs::symlink_metadata(dir.join(name)).is_ok();
    if !there("state.md") && !there("bindings") {
        return Err(not_found(format!(
            "no state.md or bindings/ in {}: not a run of the filesystem state mode",
            dir.display()
        )));
    }
    let mut unmapped = Vec::new();
    let mut dump = read_run(dir, &mut unmapped)?;
    // The project's and the user's agents are read (and refused) before anything is written.
    let mut outside_unmapped = Vec::new();
    let outside = agents_around_the_run(dir, ctx, &mut outside_unmapped)?;
    // Values over the threshold go to files of the staged run, as `bind` would keep them.
    let runs = ctx.runs_dir().to_path_buf();
    let (stage, _lock) = transfer::temp_dir(
        &runs,
        &format!("{}fs-{}-", crate::run::INIT_PREFIX, dump.run.id),
    )?;
    let result = (|| {
        let files = stage.join(crate::run::ATTACHMENTS_DIR);
        fs::create_dir(&files)?;
        let mut paths = HashMap::new();
        for b in &mut dump.bindings {
            let Some(value) = b.value.as_ref().filter(|v| v.len() > INLINE_MAX) else {
                continue;
            };
            let name = b.name.clone().unwrap_or_default();
            let file = crate::services::attach::file_name(&name, b.execution_id)?;
            fs::write(crate::model::path_in(&files, &file, PathName::File)?, value)?;
            let rel = format!("{}/{file}", crate::run::ATTACHMENTS_DIR);
            b.value = Some(crate::services::attach::summary(value.len() as u64, &rel).into_bytes());
            b.attachment_path = Some(rel.clone());
            paths.insert(rel.clone(), rel);
        }
        if let Some(program) = read_plain(&dir.join(crate::run::PROGRAM_FILE))? {
            fs::write(stage.join(crate::run::PROGRAM_FILE), program)?;
        }
        let how = transfer::How {
            reseal: false,
            event: None,
            now: crate::model::now(),
        };
        transfer::write_db(&stage, &dump, &paths, ctx.opts, &how)?;
        let mut src = SqliteStore::open(&stage.join("state.db"), ctx.opts)?;
        let staged = transfer::read(&mut src)?;
        let mut incoming = checked(&mut src, &stage, staged, std::mem::take(&mut unmapped))?;
        incoming.label = format!("filesystem:{}", dir.display());
        let mut imported = land(incoming, args, ctx)?;
        imported.unmapped.append(&mut outside_unmapped);
        agents_outside_the_run(outside, ctx, &mut imported.unmapped)?;
        Ok(imported)
    })();
    let _ = fs::remove_dir_all(&stage);
    result
}

/// The largest `state.md` read, and the most lines and the deepest nesting of blocks in it: a
/// run's log is read whole into memory, so a larger one is refused (exit 2) before it is.
pub const MAX_STATE_BYTES: u64 = 8 * 1024 * 1024;
pub const MAX_STATE_LINES: usize = 20_000;
pub const MAX_BLOCK_DEPTH: usize = 1_000;

/// A path of the source as an error names it: escaped, on one line, whole (the file's own
/// name is at its end).
fn named(path: &Path) -> String {
    format!("{:?}", path.to_string_lossy())
}

/// Refuses a symlink in the source (exit 4): nothing in it is ever followed, so that a link
/// to a private file never lands its content in a run or an agent's memory.
fn linked(path: &Path) -> anyhow::Error {
    refused(format!(
        "a symlink in the run to import; import never follows one (nothing was imported): {}",
        named(path)
    ))
}

/// Reads a file of the source, never through a symlink: None when it is absent; refused
/// (exit 4) when it is a symlink or not a plain file.
fn read_plain(path: &Path) -> Result<Option<Vec<u8>>> {
    use std::io::Read as _;
    let cannot = || format!("could not read {}", named(path));
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(anyhow::Error::new(e).context(cannot())),
        Ok(m) if m.file_type().is_symlink() => return Err(linked(path)),
        Ok(m) if !m.is_file() => {
            return Err(refused(format!(
                "not a plain file (nothing was imported): {}",
                named(path)
            )))
        }
        Ok(_) => {}
    }
    // Opened without following a link, in case one replaced the file since it was looked at.
    let mut file = match crate::services::attach::open_nofollow(path) {
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(linked(path)),
        file => file.with_context(cannot)?,
    };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).with_context(cannot)?;
    Ok(Some(bytes))
}

/// A file of the source as text (None when absent; see [`read_plain`]); None too when it is
/// not UTF-8, as a file that cannot be read as text was always taken.
fn read_text(path: &Path) -> Result<Option<String>> {
    Ok(read_plain(path)?.and_then(|b| String::from_utf8(b).ok()))
}

/// The entries of a directory of the source, sorted, with their names, never through a
/// symlink: None when it is absent; refused (exit 4) when it is a symlink.
fn list_plain(dir: &Path) -> Result<Option<Vec<(PathBuf, String)>>> {
    match fs::symlink_metadata(dir) {
        Err(_) => return Ok(None),
        Ok(m) if m.file_type().is_symlink() => return Err(linked(dir)),
        Ok(m) if !m.is_dir() => return Ok(None),
        Ok(_) => {}
    }
    let mut entries: Vec<(PathBuf, String)> = fs::read_dir(dir)
        .with_context(|| format!("could not read {}", named(dir)))?
        .flatten()
        .map(|e| (e.path(), e.file_name().to_string_lossy().into_owned()))
        .collect();
    entries.sort();
    Ok(Some(entries))
}

/// A name that could not be a binding's or an agent's (`what`) is refused, as in every import
/// source; `shown` is the file it came from.
fn refuse_name(dir: &Path, name: &str, what: PathName, shown: &str) -> Result<()> {
    crate::model::path_in(dir, name, what)
        .map(drop)
        .map_err(|e| crate::error::usage(format!("{shown} is refused (nothing was imported): {e}")))
}

/// A file's modification time, in the form every timestamp is stored in (of a link itself,
/// never of what it points to).
fn mtime(path: &Path) -> Option<String> {
    let t = fs::symlink_metadata(path).and_then(|m| m.modified()).ok()?;
    let t: chrono::DateTime<chrono::Utc> = t.into();
    Some(t.format("%Y-%m-%d %H:%M:%S").to_string())
}

/// The run id: the directory's name when it is one, else the id `state.md`'s header names.
fn run_id(dir: &Path, header: Option<&str>) -> Result<String> {
    let name = dir
        .canonicalize()
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()));
    for id in [name.as_deref(), header].into_iter().flatten() {
        if crate::model::check_run_id(id).is_ok() {
            return Ok(id.to_string());
        }
    }
    Err(refused(format!(
        "no run id: neither the directory's name nor state.md's `# run:ID` header is one: {}",
        dir.display()
    )))
}

/// Reads the whole run directory into rows.
fn read_run(dir: &Path, unmapped: &mut Vec<String>) -> Result<RunDump> {
    let state_path = dir.join("state.md");
    if let Ok(m) = fs::symlink_metadata(&state_path) {
        if m.is_file() && m.len() > MAX_STATE_BYTES {
            return Err(crate::error::usage(format!(
                "state.md is larger than {MAX_STATE_BYTES} bytes ({}); a run's log this large is not imported: {}",
                m.len(),
                named(&state_path)
            )));
        }
    }
    let state = match read_plain(&state_path)? {
        Some(bytes) => String::from_utf8(bytes)
            .map_err(|_| refused(format!("{} is not UTF-8 text", named(&state_path))))?,
        None => String::new(),
    };
    if state.lines().count() > MAX_STATE_LINES {
        return Err(crate::error::usage(format!(
            "state.md has more than {MAX_STATE_LINES} lines; a run's log this large is not imported: {}",
            named(&state_path)
        )));
    }
    let at = mtime(&state_path)
        .or_else(|| mtime(dir))
        .unwrap_or_else(crate::model::now);
    let mut header: Option<(String, Option<String>)> = None;
    let mut log = Log {
        at: at.clone(),
        ..Default::default()
    };
    for (n, line) in state.lines().enumerate() {
        let line_no = n + 1;
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        if let Some(rest) = text.strip_prefix("# run:") {
            let (id, program) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            let program = Some(program.trim().to_string()).filter(|p| !p.is_empty());
            header = Some((id.to_string(), program));
            continue;
        }
        if log.event(text, line_no).is_none() {
            unmapped.push(format!("state.md line {line_no}: {}", shown(text)));
        }
        if log.blocks.len() > MAX_BLOCK_DEPTH {
            return Err(crate::error::usage(format!(
                "state.md line {line_no} nests blocks more than {MAX_BLOCK_DEPTH} deep; such a log is not imported: {}",
                named(&state_path)
            )));
        }
    }
    let id = run_id(dir, header.as_ref().map(|(id, _)| id.as_str()))?;
    let program_source = read_text(&dir.join(crate::run::PROGRAM_FILE))?;
    let (status, ended, error) = log.end.take().unwrap_or(("interrupted".into(), None, None));
    for (id, _) in &log.blocks {
        unmapped.push(format!(
            "state.md: block #{id} has no `#{id} done` (its record stays started)"
        ));
    }
    let mut dump = RunDump {
        run: RunRecord {
            id,
            program_path: header.and_then(|(_, p)| p),
            program_source,
            started_at: Some(at.clone()),
            updated_at: Some(ended.unwrap_or_else(|| at.clone())),
            status: Some(status),
            error_message: error,
        },
        ..Default::default()
    };
    read_bindings(dir, &mut log, &mut dump, unmapped)?;
    dump.executions = log.records;
    (dump.agents, dump.segments) = read_agents(&dir.join("agents"), "execution", unmapped)?;
    for (_, name) in list_plain(&dir.join("imports"))?.unwrap_or_default() {
        let alias = name.split("--").next().unwrap_or(&name).to_string();
        unmapped.push(format!(
            "{}: registered as import {}; the nested program's own state is not imported (import it as a run of its own)",
            shown(&format!("imports/{name}")),
            shown(&alias)
        ));
        dump.imports.push(ImportRecord {
            alias,
            source_url: Some(format!("filesystem:imports/{name}")),
            fetched_at: Some(at.clone()),
            inputs_schema: None,
            outputs_schema: None,
        });
    }
    Ok(dump)
}

/// The execution log being read from `state.md`.
#[derive(Default)]
struct Log {
    records: Vec<crate::store::ExecutionRow>,
    /// Open blocks, innermost last: (the block's own ID, its record's id).
    blocks: Vec<(i64, i64)>,
    /// Every block's record, by its ID.
    block_records: HashMap<i64, i64>,
    /// The open parallel record of each statement index.
    parallels: HashMap<String, i64>,
    at: String,
    /// How the run ended: status, when, why.
    end: Option<(String, Option<String>, Option<String>)>,
}

impl Log {
    /// Appends a record; its id.
    fn push(
        &mut self,
        index: Option<i64>,
        text: String,
        status: &str,
        parent: Option<i64>,
        metadata: serde_json::Value,
        error: Option<String>,
    ) -> i64 {
        let id = self.records.len() as i64 + 1;
        let parent = parent.or_else(|| self.blocks.last().map(|(_, r)| *r));
        let done = matches!(status, "completed" | "failed" | "joined" | "exited");
        self.records.push(crate::store::ExecutionRow {
            id,
            statement_index: index,
            statement_text: Some(text),
            status: Some(crate::model::ExecStatus::parse(status)),
            started_at: (!done).then(|| self.at.clone()),
            completed_at: done.then(|| self.at.clone()),
            error_message: error,
            parent_id: parent,
            metadata: Some(metadata.to_string()),
            idempotency_key: None,
            principal: None,
        });
        id
    }

    /// Reads one event line; None when it is none the format has.
    fn event(&mut self, text: &str, line: usize) -> Option<()> {
        if let Some(rest) = text.strip_prefix("---end") {
            let when = crate::model::canonical_time(rest.trim());
            self.end = Some(("completed".into(), when, None));
            return Some(());
        }
        if let Some(rest) = text.strip_prefix("---error") {
            let rest = rest.trim();
            let (when, why) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            self.end = Some((
                "failed".into(),
                crate::model::canonical_time(when),
                Some(why.trim().to_string()).filter(|w| !w.is_empty()),
            ));
            return Some(());
        }
        let (label, body) = text.split_once('→')?;
        let (label, body) = (label.trim(), body.trim());
        let digits: String = label.chars().take_while(char::is_ascii_digit).collect();
        let branch = &label[digits.len()..];
        let index = digits.parse::<i64>().ok()?;
        if !branch.chars().all(|c| c.is_ascii_lowercase()) {
            return None;
        }
        let statement = || format!("statement {index}");
        // The record the line is: its text, status, parent (None: the innermost open block),
        // what its metadata adds to the line's, and its error; and the block it opens.
        let mut opens = None;
        let (name, status, parent, extra, error) = if !branch.is_empty() {
            // A parallel branch, under its block's record.
            let name = completion(body)?.unwrap_or_else(|| format!("branch {branch}"));
            let parent = self.parallels.get(&digits).copied();
            (name, "completed", parent, json!({ "branch": branch }), None)
        } else if let Some(list) = body.strip_prefix("∥start") {
            let branches: Vec<&str> = list
                .split(',')
                .map(str::trim)
                .filter(|b| !b.is_empty())
                .collect();
            // The record pushed below.
            self.parallels.insert(digits, self.records.len() as i64 + 1);
            let extra = json!({ "parallel": true, "branches": branches });
            ("parallel".into(), "started", None, extra, None)
        } else if body == "∥done" {
            let parent = self.parallels.remove(&digits);
            let extra = json!({ "parallel": true });
            ("parallel".into(), "joined", parent, extra, None)
        } else if let Some(rest) = body.strip_prefix("loop:") {
            let (count, exit) = match rest.split_once(" exit(") {
                Some((c, why)) => (c.trim(), Some(why.trim_end_matches(')').to_string())),
                None => (rest.trim(), None),
            };
            let (i, max) = count.split_once('/')?;
            let (i, max) = (i.parse::<i64>().ok()?, max.parse::<i64>().ok()?);
            let status = exit.as_ref().map_or("iteration", |_| "exited");
            let extra = json!({ "iteration": i, "max": max, "reason": exit });
            ("loop".into(), status, None, extra, None)
        } else if let Some(rest) = body.strip_prefix("block:") {
            let (name, id) = rest.rsplit_once('#')?;
            let block = id.trim().parse::<i64>().ok()?;
            opens = Some(block);
            let name = format!("block:{}", name.trim());
            let extra = json!({ "execution_id": block });
            (name, "started", None, extra, None)
        } else if let Some(rest) = body.strip_prefix('#') {
            let block = rest.strip_suffix("done")?.trim().parse::<i64>().ok()?;
            // The block's own completion sits beside its start, not inside it.
            let at = self.blocks.iter().rposition(|(b, _)| *b == block)?;
            let (_, record) = self.blocks[at];
            self.blocks.truncate(at);
            let parent = self.records[(record - 1) as usize].parent_id;
            // It names its start, as an end does (`exec-append --ends`).
            let extra = json!({ "execution_id": block, "ends": record });
            (format!("#{block} done"), "completed", parent, extra, None)
        } else if let Some(why) = body.strip_prefix('✗') {
            let why = Some(why.trim().to_string());
            (statement(), "failed", None, json!({}), why)
        } else if let Some(rest) = body.strip_prefix("retry:") {
            let (a, max) = rest.trim().split_once('/')?;
            let (a, max) = (a.parse::<i64>().ok()?, max.parse::<i64>().ok()?);
            let extra = json!({ "attempt": a, "max": max });
            (statement(), "retry", None, extra, None)
        } else {
            let name = completion(body)?.unwrap_or_else(statement);
            (name, "completed", None, json!({}), None)
        };
        let mut meta = json!({ "source": "state.md", "line": line, "event": text });
        if let (Some(m), Some(extra)) = (meta.as_object_mut(), extra.as_object()) {
            m.extend(extra.clone());
        }
        let record = self.push(Some(index), name, status, parent, meta, error);
        if let Some(block) = opens {
            self.blocks.push((block, record));
            self.block_records.insert(block, record);
        }
        Some(())
    }
}

/// `name ✓` or `✓`: None when it is no completion; else its name, if it has one.
fn completion(body: &str) -> Option<Option<String>> {
    let name = body.strip_suffix('✓')?.trim();
    Some((!name.is_empty()).then(|| name.to_string()))
}

/// A binding file: its kind, scope, source and value.
struct BindingFile {
    kind: Option<String>,
    execution_id: Option<i64>,
    source: Option<String>,
    value: Vec<u8>,
}

/// Reads a binding file of the format; None when it has no header (then the whole file is
/// the value).
fn parse_binding(bytes: &[u8]) -> Option<BindingFile> {
    let text = std::str::from_utf8(bytes).ok()?;
    if !text.starts_with("# ") {
        return None;
    }
    let mut kind = None;
    let mut execution_id = None;
    let mut source: Option<String> = None;
    let mut offset = 0;
    let mut in_fence = false;
    let mut fence = String::new();
    for line in text.split_inclusive('\n') {
        offset += line.len();
        let l = line.trim_end_matches(['\n', '\r']);
        if in_fence {
            if l.trim_start().starts_with("```") {
                in_fence = false;
                source = Some(fence.trim_end_matches('\n').to_string());
            } else {
                fence.push_str(line);
            }
            continue;
        }
        if l == "---" {
            // The value: after the separator, less the format's blank line and final newline.
            let rest = &text[offset..];
            let rest = rest
                .strip_prefix("\r\n")
                .or_else(|| rest.strip_prefix('\n'))
                .unwrap_or(rest);
            let rest = rest
                .strip_suffix("\r\n")
                .or_else(|| rest.strip_suffix('\n'))
                .unwrap_or(rest);
            return Some(BindingFile {
                kind,
                execution_id,
                source,
                value: rest.as_bytes().to_vec(),
            });
        }
        if let Some(k) = l.strip_prefix("kind:") {
            kind = Some(k.trim().to_string());
        } else if let Some(e) = l.strip_prefix("execution_id:") {
            execution_id = e.trim().parse().ok();
        } else if l.trim_start().starts_with("```") {
            in_fence = true;
            fence.clear();
        }
    }
    None
}

fn read_bindings(
    dir: &Path,
    log: &mut Log,
    dump: &mut RunDump,
    unmapped: &mut Vec<String>,
) -> Result<()> {
    for (path, file) in list_plain(&dir.join("bindings"))?.unwrap_or_default() {
        let shown_file = shown(&format!("bindings/{file}"));
        let Some(stem) = file.strip_suffix(".md") else {
            unmapped.push(format!("{shown_file}: not a binding file (no .md)"));
            continue;
        };
        if path.is_symlink() {
            return Err(linked(&path));
        }
        if !path.is_file() {
            unmapped.push(format!("{shown_file}: not a plain file"));
            continue;
        }
        let (name, scope) = match stem.rsplit_once("__") {
            Some((name, id)) if id.parse::<i64>().is_ok() => (name, id.parse::<i64>().ok()),
            _ => (stem, None),
        };
        refuse_name(dir, name, PathName::Binding, &shown_file)?;
        let bytes = read_plain(&path)?.unwrap_or_default();
        let (kind, value, source, said_scope) = match parse_binding(&bytes) {
            Some(b) => (b.kind, b.value, b.source, b.execution_id),
            None => {
                unmapped.push(format!(
                    "{shown_file}: no `# name` header and `---` separator; the whole file is its value"
                ));
                (None, bytes.clone(), None, None)
            }
        };
        if std::str::from_utf8(&value).is_err() {
            unmapped.push(format!("{shown_file}: not UTF-8 text; not imported"));
            continue;
        }
        let kind = match kind.as_deref() {
            Some(k @ ("input" | "output" | "let" | "const")) => k.to_string(),
            Some(other) => {
                unmapped.push(format!(
                    "{shown_file}: kind {} is none of input, output, let, const; imported as let",
                    shown(other)
                ));
                "let".to_string()
            }
            None => "let".to_string(),
        };
        let scope = scope.or(said_scope);
        if let Some(block) = scope.filter(|b| !log.block_records.contains_key(b)) {
            // A scope state.md never opened: a record of its own keeps the binding.
            unmapped.push(format!(
                "{shown_file}: block #{block} is not in state.md; a started record stands in for it"
            ));
            let record = log.push(
                None,
                format!("block #{block}"),
                "started",
                None,
                json!({ "source": "bindings", "execution_id": block }),
                None,
            );
            // It stands in for a scope that is over: ended, so that nothing reads as open.
            log.push(
                None,
                format!("block #{block}"),
                "completed",
                None,
                json!({ "source": "bindings", "execution_id": block, "ends": record }),
                None,
            );
            log.block_records.insert(block, record);
        }
        let execution_id = scope.map(|block| log.block_records[&block]);
        let at = mtime(&path);
        dump.bindings.push(BindingRecord {
            name: Some(name.to_string()),
            execution_id,
            kind: Some(kind),
            value: Some(value),
            source_statement: source,
            created_at: at.clone(),
            updated_at: at,
            attachment_path: None,
        });
    }
    Ok(())
}

/// The agents of an `agents/` directory: each `{name}/memory.md` and `{name}-NNN.md`.
fn read_agents(
    dir: &Path,
    scope: &str,
    unmapped: &mut Vec<String>,
) -> Result<(Vec<AgentRecord>, Vec<SegmentRecord>)> {
    let (mut agents, mut segments) = (Vec::new(), Vec::new());
    for (agent_dir, name) in list_plain(dir)?.unwrap_or_default() {
        if agent_dir.is_symlink() {
            return Err(linked(&agent_dir));
        }
        if !agent_dir.is_dir() {
            unmapped.push(format!("{}: not an agent directory", named(&agent_dir)));
            continue;
        }
        refuse_name(dir, &name, PathName::Agent, &named(&agent_dir))?;
        let memory_path = agent_dir.join("memory.md");
        let memory = read_text(&memory_path)?;
        let files = list_plain(&agent_dir)?.unwrap_or_default();
        let mut found = Vec::new();
        for (f, file) in files {
            if file == "memory.md" {
                continue;
            }
            let number = file
                .strip_prefix(&format!("{name}-"))
                .and_then(|r| r.strip_suffix(".md"))
                .filter(|n| n.len() >= 3 && n.chars().all(|c| c.is_ascii_digit()))
                .and_then(|n| n.parse::<i64>().ok());
            if f.is_symlink() {
                return Err(linked(&f));
            }
            let text = number.map(|_| read_text(&f)).transpose()?.flatten();
            let (Some(number), Some(text)) = (number, text) else {
                unmapped.push(format!(
                    "{}: not a segment file ({name}-NNN.md) of agent {}",
                    shown(&f.to_string_lossy()),
                    shown(&name)
                ));
                continue;
            };
            found.push((number, segment(&text, mtime(&f))));
        }
        found.sort_by_key(|(n, _)| *n);
        for (i, (n, _)) in found.iter().enumerate() {
            if *n != i as i64 + 1 {
                unmapped.push(format!(
                    "agent {}: segment {n} is not number {} (segments are kept in order, numbered 1, 2, ...)",
                    shown(&name),
                    i + 1
                ));
                break;
            }
        }
        for (i, (_, (timestamp, prompt, summary))) in found.into_iter().enumerate() {
            segments.push(SegmentRecord {
                agent_name: Some(name.clone()),
                segment_number: Some(i as i64 + 1),
                timestamp,
                prompt,
                summary: Some(summary),
                at_record: None,
            });
        }
        let at = mtime(&memory_path).or_else(|| mtime(&agent_dir));
        agents.push(AgentRecord {
            name,
            scope: Some(scope.to_string()),
            memory,
            created_at: at.clone(),
            updated_at: at,
        });
    }
    Ok((agents, segments))
}

/// A segment file: its `timestamp:`, its `prompt:` (unquoted), and its summary (the text
/// under `## Summary`, else the whole file).
fn segment(text: &str, fallback: Option<String>) -> (Option<String>, Option<String>, String) {
    let mut timestamp = None;
    let mut prompt = None;
    for line in text.lines() {
        if let Some(t) = line.strip_prefix("timestamp:") {
            timestamp = crate::model::canonical_time(t.trim());
        } else if let Some(p) = line.strip_prefix("prompt:") {
            let p = p.trim();
            let p = p
                .strip_prefix('"')
                .and_then(|p| p.strip_suffix('"'))
                .unwrap_or(p);
            prompt = Some(p.to_string());
        }
    }
    let summary = match text.split_once("## Summary") {
        Some((_, rest)) => rest.trim().to_string(),
        None => text.to_string(),
    };
    (timestamp.or(fallback), prompt, summary)
}

/// The agents found around a run, by scope.
type AgentsFound = Vec<(AgentScope, Vec<AgentRecord>, Vec<SegmentRecord>)>;

/// The agents of the project's `.prose/agents/` (when the run is in a project's
/// `.prose/runs/`) and the user's `~/.prose/agents/`, read (never through a symlink) before
/// anything is written. Then each is added where it is absent; the same memory is left as it
/// is; another memory, or segments already there, are reported and left.
fn agents_around_the_run(
    dir: &Path,
    ctx: &Context,
    unmapped: &mut Vec<String>,
) -> Result<AgentsFound> {
    let mut out = Vec::new();
    let canonical = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let project = canonical
        .parent()
        .filter(|p| p.file_name().is_some_and(|n| n == "runs"))
        .and_then(Path::parent)
        .map(|prose| prose.join("agents"));
    let user = ctx.home(None).map(|h| h.join(".prose").join("agents"));
    for (scope, found) in [(AgentScope::Project, project), (AgentScope::User, user)] {
        // Never through a symlink: the directory itself, and everything in it.
        let Some(found) = found.filter(|d| fs::symlink_metadata(d).is_ok()) else {
            continue;
        };
        let (agents, segments) = read_agents(&found, scope.as_str(), unmapped)?;
        if !agents.is_empty() {
            out.push((scope, agents, segments));
        }
    }
    Ok(out)
}

/// Adds the agents found around the run (see [`agents_around_the_run`]).
fn agents_outside_the_run(
    found: AgentsFound,
    ctx: &Context,
    unmapped: &mut Vec<String>,
) -> Result<()> {
    for (scope, agents, segments) in found {
        let what = scope.column();
        let (store, _) = ctx.agent_store(&scope, None, true)?;
        let Some(mut store) = store else { continue };
        let now = crate::model::now();
        for a in agents {
            let mine: Vec<&SegmentRecord> = segments
                .iter()
                .filter(|s| s.agent_name.as_deref() == Some(a.name.as_str()))
                .collect();
            if let Some(h) = store.agent(&a.name)? {
                if h.memory != a.memory || h.segments != mine.len() as i64 {
                    unmapped.push(format!(
                        "{what} agent {}: already there with other memory or segments; left as it is",
                        shown(&a.name)
                    ));
                }
                continue;
            }
            if let Some(memory) = &a.memory {
                store.remember(&a.name, what, memory, &now)?;
            }
            for s in mine {
                store.append_segment(
                    &a.name,
                    what,
                    s.prompt.as_deref().unwrap_or_default(),
                    s.summary.as_deref().unwrap_or_default(),
                    s.timestamp.as_deref().unwrap_or(&now),
                )?;
            }
        }
    }
    Ok(())
}

/// `import PATH [--from run|filesystem]`: a run directory of prose-state's (`import`), or a run
/// of the filesystem state mode (here).
impl super::Run for ImportArgs {
    type Output = Imported;
    fn run(&self, ctx: &Context) -> Result<Imported> {
        if self.from != crate::cli::ImportFrom::Filesystem {
            return super::import::from_run(self, ctx);
        }
        if self.run_id.is_some() {
            return Err(crate::error::usage(
                "--run-id re-identifies a run of prose-state's; a filesystem run takes its id from its directory",
            ));
        }
        run(self, ctx)
    }
}
