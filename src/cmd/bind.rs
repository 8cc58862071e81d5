use crate::cli::BindArgs;
use crate::error::{not_found, refused, shown, usage};
use crate::model::{check_name, now};
use crate::output::{one_line, Render};
use crate::services::attach::{self, Staged};
use crate::store::{NewBinding, Store, Update};
use anyhow::Result;
use serde::Serialize;
use std::io::{self, Write};

#[derive(Debug, Serialize)]
pub struct Bound {
    pub name: String,
    pub execution_id: Option<i64>,
    pub kind: &'static str,
    pub db: String,
    pub attachment_path: Option<String>,
    pub bytes: u64,
    pub summary: String,
    /// The binding's own version after this write: its number in its scope, as `history`
    /// lists it and `bind --if-version` compares it.
    pub version: Option<i64>,
    #[serde(skip)]
    location: String,
}

impl Render for Bound {
    /// The confirmation the spec has subagents return to the VM.
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        writeln!(w, "Binding written: {}", self.name)?;
        writeln!(w, "Location: {}", self.location)?;
        if let Some(id) = self.execution_id {
            writeln!(w, "Execution ID: {id}")?;
        }
        if let Some(path) = &self.attachment_path {
            writeln!(w, "Attachment: {path} ({} bytes)", self.bytes)?;
        }
        writeln!(w, "Summary: {}", self.summary)
    }
}

impl BindArgs {
    /// Where the binding is written: the language's frame of `--execution-id` (the root
    /// without one); with `--assign`, and for an update of a binding that exists, the binding
    /// `get` would read; with `--local`, the record itself. A binding an older run already wrote between the record and its frame (in a
    /// loop's or a `try:`'s scope) is written where it is, so that reads keep finding it.
    fn scope(&self, store: &mut dyn Store, named: &[(String, Option<i64>)]) -> Result<Option<i64>> {
        let Some(at) = self.execution_id else {
            return self.assigned(store, None, None);
        };
        if let Some(r) = crate::store::record(store, at)? {
            super::resume::not_after_its_end(store, &r, "a binding")?;
            super::resume::not_an_abandoned_result(store, &r, &self.name)?;
        }
        if self.local {
            return Ok(Some(at));
        }
        let found = store.resolve(&self.name, Some(at))?;
        if self.assign || self.append.is_some() || self.merge.is_some() {
            self.not_past_an_answer(store, named, at, found.as_ref())?;
        }
        if self.assign {
            return self.assigned(store, Some(at), found);
        }
        // An update (`--append`, `--merge`) changes the list or object `get` reads from
        // here, wherever it was made: subagents of branches append to the one list.
        if self.append.is_some() || self.merge.is_some() {
            if let Some(f) = &found {
                return Ok(f.row.execution_id);
            }
        }
        let frame = crate::store::frame_of(store, at, Some(&self.name))?;
        if let Some(e) = found.as_ref().and_then(|f| f.row.execution_id) {
            let chain = store.scope_chain(at)?;
            let below = chain.iter().take_while(|c| Some(**c) != frame);
            if below.into_iter().any(|c| *c == e) {
                return Ok(Some(e));
            }
        }
        Ok(frame)
    }

    /// An assignment or update from `at` acts on the binding `get` reads from there (`found`),
    /// which is never one past a gate's response binding that no decision has answered yet
    /// (refused, exit 4): the answer's place is the gate's, and `get` does not read past it.
    fn not_past_an_answer(
        &self,
        store: &mut dyn Store,
        named: &[(String, Option<i64>)],
        at: i64,
        found: Option<&crate::store::Found>,
    ) -> Result<()> {
        // Nothing found: nothing outer would be written (the write lands in a frame, where
        // the rules of a response binding's own scope apply).
        let Some(f) = found else {
            return Ok(());
        };
        if named.is_empty() {
            return Ok(());
        }
        let mut passed: Vec<Option<i64>> = store.scope_chain(at)?.into_iter().map(Some).collect();
        passed.push(None);
        let end = passed
            .iter()
            .position(|s| *s == f.row.execution_id)
            .unwrap_or(passed.len());
        match named.iter().find(|(_, s)| passed[..end].contains(s)) {
            Some((gate, scope)) => Err(refused(format!(
                "binding {} in {} is gate {}'s answer, and no decision has answered it: an outer binding is not written in its place",
                shown(&self.name),
                scope.map_or("the root".to_string(), |e| format!("execution {e}")),
                shown(gate)
            ))),
            None => Ok(()),
        }
    }

    /// `--assign`: the scope of the binding `get` would read from `at`.
    fn assigned(
        &self,
        store: &mut dyn Store,
        at: Option<i64>,
        found: Option<crate::store::Found>,
    ) -> Result<Option<i64>> {
        if !self.assign {
            return Ok(at);
        }
        let found = match (at, found) {
            (Some(_), f) => f,
            (None, _) => store.resolve(&self.name, None)?,
        };
        match found {
            Some(f) if f.row.kind.as_deref() == Some("const") => Err(refused(format!(
                "{} is a const: an assignment cannot change it",
                shown(&self.name)
            ))),
            Some(f) => Ok(f.row.execution_id),
            None => Err(not_found(format!(
                "{} is not bound in any frame visible here: an assignment needs its `let` first ({})",
                shown(&self.name),
                at.map_or("the root".into(), |a| format!("from execution {a}"))
            ))),
        }
    }
}

impl super::Run for BindArgs {
    type Output = Bound;
    fn run(&self, ctx: &crate::context::Context) -> Result<Bound> {
        let (run, mut store) = ctx.the_run()?;
        check_name(&self.name)?;
        let writer = ctx.writer(&self.principal)?;
        if self.summary.as_ref().is_some_and(|s| s.contains('\0')) {
            return Err(usage("--summary contains a NUL byte"));
        }
        if let Some(id) = self.execution_id {
            if !store.execution_exists(id)? {
                return Err(not_found(format!(
                    "execution not found: {id} (a scoped binding needs its execution record; omit --execution-id for the root scope)"
                )));
            }
        }
        // A name some gate answers into is written only where the log, checked whole, says
        // it may be: with the log broken (a move's row unsealed or cut, say) the scopes it
        // answers into cannot be told, and nothing of that name is written (exit 9).
        // Read once, for a scoped write (one at the root is checked in the write's own
        // transaction, and a root scope is never renumbered).
        let named = match self.execution_id {
            Some(_) => store.response_gates(&self.name)?,
            None => Vec::new(),
        };
        if !named.is_empty() {
            if let Some(b) = store.verify_audit()?.first_broken {
                return Err(crate::error::tampered(format!(
                    "binding {} is a gate's answer, and the run's audit log is broken ({}): nothing of that name is written (run `prose-state gates verify`)",
                    shown(&self.name),
                    b.reason
                )));
            }
        }
        let scope = self.scope(store.as_mut(), &named)?;
        // Nor is a gate's answer hidden below its scope: the rule checks that in its
        // transaction (`rules::bind`).

        // An update computes its value in the store, from the stored one: nothing is read here.
        let update = match (&self.append, &self.merge) {
            (Some(item), _) => Some(Update::Append(
                serde_json::from_str(item)
                    .unwrap_or_else(|_| serde_json::Value::String(item.clone())),
            )),
            (None, Some(patch)) => match serde_json::from_str(patch) {
                Ok(p @ serde_json::Value::Object(_)) => Some(Update::Merge(p)),
                _ => {
                    return Err(usage(format!(
                        "--merge needs a JSON object: {}",
                        shown(patch)
                    )))
                }
            },
            (None, None) => None,
        };
        if let Some(key) = &self.key {
            if update.is_none() {
                return Err(usage(
                    "--key applies to --append or --merge: a whole value is simply written again",
                ));
            }
            crate::model::check_key(key)?;
        }
        if update.is_some() && self.summary.is_some() {
            return Err(usage(
                "--summary applies to a value given whole, not to --append or --merge",
            ));
        }
        let attached = |bytes: u64, rel: &str| {
            let summary = self
                .summary
                .clone()
                .unwrap_or_else(|| attach::summary(bytes, rel));
            (summary.clone(), summary, bytes)
        };
        let ((value, summary, bytes), mut file, blob) = if update.is_some() {
            ((String::new(), String::new(), 0), None, None)
        } else {
            let (mut input, from_stdin) = match &self.from {
                // `let a = b`: b as `get` reads it from here, never through the caller.
                Some(from) => {
                    check_name(from)?;
                    let source = crate::cli::GetArgs {
                        name: from.clone(),
                        execution_id: self.from_execution_id.or(self.execution_id),
                        explain: false,
                        offset: None,
                        length: None,
                        version: None,
                        as_of: None,
                    };
                    (super::get::whole_value(&source, ctx)?, false)
                }
                None => super::value_source(ctx, self.value.as_deref(), self.file.as_deref())?,
            };
            // A large value goes where the store keeps them: on a server, into the server (every
            // machine reads it); else a file in the run directory.
            let dest = if store.keeps_values() {
                attach::Dest::Store(&mut *store)
            } else {
                attach::Dest::Dir(&run.dir)
            };
            let staged = attach::stage(
                &mut input,
                self.attach_over,
                dest,
                &self.name,
                scope,
                from_stdin,
            )?;
            match staged {
                Staged::Inline(text) => {
                    let summary = self.summary.clone().unwrap_or_else(|| one_line(&text, 100));
                    let bytes = text.len() as u64;
                    ((text, summary, bytes), None, None)
                }
                Staged::File(f) => (attached(f.bytes, &f.rel), Some(f), None),
                Staged::Server(b) => (attached(b.bytes, &b.rel), None, Some(b)),
            }
        };
        let attachment_path = file
            .as_ref()
            .map(|f| f.rel.clone())
            .or(blob.as_ref().map(|b| b.rel.clone()));
        let outcome = store.bind(
            &NewBinding {
                name: &self.name,
                execution_id: scope,
                kind: self.kind.as_str(),
                value: &value,
                source_statement: self.source.as_deref(),
                attachment_path: attachment_path.as_deref(),
                update: update.as_ref(),
                if_version: self.if_version,
                now: &now(),
                principal: &writer,
                key: self.key.as_deref(),
            },
            &mut || file.as_mut().map_or(Ok(()), |f| f.publish()),
        );
        if let Some(b) = &blob {
            // Linked, or refused: a refused bind leaves nothing of its value behind.
            let _ = store.end_upload(&b.blob, outcome.is_ok());
        }
        let outcome = outcome?;
        for old in &outcome.released {
            // The bind has committed; a value no row or kept version names any more goes (a
            // kept version still names the replaced one, unless the run's bound cut it). One
            // that cannot be removed is only clutter that `doctor --fix` collects, never a
            // wrong value, so this is best effort.
            let _ = store.release_attachment(old, &mut || attach::remove(&run.dir, old));
        }
        // Only now, after the commit, does the new file's lock go.
        drop(file);
        let (summary, bytes) = match &outcome.written {
            Some(v) => (one_line(v, 100), v.len() as u64),
            None => (summary, bytes),
        };
        Ok(Bound {
            name: self.name.clone(),
            execution_id: scope,
            version: outcome.version,
            kind: self.kind.as_str(),
            db: store.location(),
            location: store.binding_location(&self.name, scope),
            attachment_path,
            bytes,
            summary,
        })
    }
}
