//! `fork --run R --at RECORD`: a new run whose state is R's as of one record, written whole
//! or not at all by `import`'s landing (a directory built beside the runs and moved into
//! place; on a server, one transaction). The source is only read, in one snapshot.

use super::import::{into_dir, into_server, Imported, Incoming};
use crate::cli::{BackendArg, ForkArgs};
use crate::context::Context;
use crate::error::{refused, shown};
use crate::output::Render;
use crate::services::fork::{self, Carried, Plan};
use crate::services::transfer::{self, How, Moved};
use anyhow::Result;
use serde::Serialize;
use std::io::{self, Write};

#[derive(Serialize)]
pub struct Forked {
    pub run_id: String,
    pub backend: &'static str,
    /// The run forked from, and the record it was forked at.
    pub source: String,
    pub at: i64,
    #[serde(flatten)]
    pub carried: Carried,
    #[serde(flatten)]
    pub moved: Moved,
    /// The fork's content digest.
    pub digest: String,
}

impl Render for Forked {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        writeln!(
            w,
            "Run forked: {} ({}) from {} at record {}",
            self.run_id, self.backend, self.source, self.at
        )?;
        let c = &self.carried;
        writeln!(
            w,
            "Carried: {} records, {} bindings, {} agents",
            c.records, c.bindings, c.agents
        )?;
        if !c.rebound.is_empty() {
            writeln!(w, "Rebound: {}", c.rebound.join(", "))?;
        }
        let list = |v: &[String]| v.join(", ");
        if !c.gates_decided.is_empty() {
            writeln!(w, "Gates decided by then: {}", list(&c.gates_decided))?;
        }
        if !c.gates_pending.is_empty() {
            writeln!(w, "Gates pending then: {}", list(&c.gates_pending))?;
        }
        if !c.gates_not_carried.is_empty() {
            writeln!(
                w,
                "Gates not carried (their log is not attested here): {}",
                list(&c.gates_not_carried)
            )?;
        }
        writeln!(
            w,
            "Values: {} ({} bytes)",
            self.moved.values, self.moved.value_bytes
        )?;
        writeln!(w, "Next: prose-state resume --run {}", self.run_id)
    }
}

impl super::Run for ForkArgs {
    type Output = Forked;
    fn run(&self, ctx: &Context) -> Result<Forked> {
        let binds = self
            .bind
            .iter()
            .map(|b| fork::parse_bind(b))
            .collect::<Result<Vec<_>>>()?;
        let new_id = match &self.run_id {
            Some(id) => {
                crate::model::check_run_id(id)?;
                id.clone()
            }
            None => crate::model::new_run_id(),
        };
        let by = ctx.writer(&self.principal)?;
        let (paths, mut src) = ctx.the_run()?;
        if paths.id == new_id {
            return Err(refused(format!(
                "a fork is a new run: --run-id {} is its source's",
                shown(&new_id)
            )));
        }
        let dump = transfer::read(src.as_mut())?;
        dump.check_names()?;
        // The source's own chain, checked: what a fork carries is only what it attests.
        let report = crate::services::inputs::verify_copy(&dump, src.as_mut(), &paths.dir)?;
        let now = crate::model::now();
        let (copy, carried) = fork::build(
            &dump,
            &report,
            &Plan {
                at: self.at,
                new_id: &new_id,
                binds: &binds,
                by: &by,
                now: &now,
            },
        )?;
        let postgres = self
            .backend
            .map_or_else(|| ctx.uses_postgres(), |b| b == BackendArg::Postgres);
        let digest = transfer::digest(src.as_mut(), &paths.dir, &copy)?;
        let mut incoming = Incoming {
            label: format!("fork of {} at record {}", paths.id, self.at),
            src: src.as_mut(),
            src_dir: &paths.dir,
            dump: copy,
            digest: digest.clone(),
            report: Default::default(),
            unmapped: Vec::new(),
        };
        // Sealed here: this machine made the fork from what it attests.
        let how = How {
            reseal: true,
            event: None,
            now,
        };
        let mut out = Imported {
            run_id: new_id.clone(),
            backend: if postgres { "postgres" } else { "sqlite" },
            unchanged: false,
            replaced: false,
            renumbered: postgres,
            moved: Moved::default(),
            rows: incoming.dump.counts(),
            sealed_elsewhere: 0,
            vouched: false,
            decisions_sealed_elsewhere: Vec::new(),
            digest: digest.clone(),
            not_carried: Vec::new(),
            unmapped: Vec::new(),
        };
        let exists = if postgres {
            crate::store::postgres::PgStore::open_maybe(&ctx.postgres_url()?, &new_id, ctx.opts)?.1
        } else {
            ctx.runs_dir().join(&new_id).symlink_metadata().is_ok()
        };
        if exists {
            return Err(refused(format!(
                "run {} already exists: a fork is a new run (choose another --run-id)",
                shown(&new_id)
            )));
        }
        if postgres {
            into_server(&mut incoming, false, ctx, &how, &mut out)?;
        } else {
            into_dir(&mut incoming, false, ctx, &how, &mut out)?;
        }
        Ok(Forked {
            run_id: new_id,
            backend: out.backend,
            source: paths.id.clone(),
            at: self.at,
            carried,
            moved: out.moved,
            digest,
        })
    }
}
