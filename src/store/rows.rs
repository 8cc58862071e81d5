//! The reads a backend makes alike in a transaction and outside one: each one statement over
//! one table, returning that table's row. A store and each of its transactions implement
//! [`Rows`], so that a read is declared once and the logic over it (`Store`'s defaults, the
//! rules) is written once, above the backends.

use super::dump::GateRecord;
use super::history::{HistoryRow, Kept};
use super::{AuditFilter, AuditRow};
use crate::model::GateStatus;
use anyhow::Result;

/// Which gates rows a read wants.
#[derive(Debug, Clone, Copy)]
pub enum GateSelect<'a> {
    /// The run's gates, oldest first (by `created_at`, then id); with a status, only those.
    Listed(Option<&'a GateStatus>),
    /// The gate stored under this id (as the table's key finds it: a caller that needs that
    /// exact id compares, as `rules::load_exact` does).
    Id(&'a str),
    /// An earlier opening of a gate, as `gate_instances` keeps it: a projection, compared with
    /// that opening's sealed events and never trusted (`chain::opening_integrity`).
    Opening(&'a str, i64),
    /// Pending gates with something due at this time (past their deadline, an unparseable
    /// deadline counting as passed, or a reminder), oldest first; in a transaction, locked
    /// where the dialect locks rows.
    Due(&'a str),
}

/// What the sealed openings of a run say of one binding (`Rows::gates_naming`).
#[derive(Debug, Default)]
pub struct Naming {
    /// The gates that answer into it, each with the scope of its response binding.
    pub response: Vec<(String, Option<i64>)>,
    /// Whether some gate is about it (`--inputs`).
    pub input: bool,
    /// The gates about it.
    pub about: Vec<String>,
}

/// The single-table reads a backend provides, in a transaction and outside one alike.
pub trait Rows {
    /// The gates rows `which` selects, as stored.
    fn gate_rows(&mut self, which: GateSelect<'_>) -> Result<Vec<GateRecord>>;
    /// The run's audit rows the filter selects, in id order.
    fn audit(&mut self, filter: &AuditFilter) -> Result<Vec<AuditRow>>;
    /// Whether the run has an execution record of this id.
    fn execution_exists(&mut self, id: i64) -> Result<bool>;
    /// The scope chain from `execution_id` up to the topmost execution, nearest first (empty
    /// for no such record).
    fn scope_chain(&mut self, execution_id: i64) -> Result<Vec<i64>>;
    /// The scopes a binding of this name is bound in now (None: the root).
    fn bound_scopes(&mut self, name: &str) -> Result<Vec<Option<i64>>>;
    /// Whether a binding, or a kept version of one, refers to this attachment.
    fn attachment_referenced(&mut self, attachment_path: &str) -> Result<bool>;
    /// Every kept version of the binding (or agent) of this name in exactly this scope (None:
    /// the root), oldest first.
    fn kept_versions(
        &mut self,
        kept: Kept,
        name: &str,
        execution_id: Option<i64>,
    ) -> Result<Vec<HistoryRow>>;
    /// What the process carries to its stores: the audit key among it.
    fn wiring(&self) -> &'static super::Wiring;

    /// The gates row stored under `id`, if any.
    fn gate_row(&mut self, id: &str) -> Result<Option<GateRecord>> {
        Ok(self.gate_rows(GateSelect::Id(id))?.into_iter().next())
    }

    /// The gates whose sealed openings name binding `name`, in one narrow read of the
    /// openings that mention it: those that answer into it (`--response-binding`), each with
    /// its scope, and whether any is about it (`--inputs`).
    fn gates_naming(&mut self, name: &str) -> Result<Naming> {
        // The rule writes the metadata as compact JSON: the name as a JSON string narrows the
        // read to the openings that mention it (any other spelling is no rule's).
        let [member, escaped] = super::spellings(name);
        naming_in(
            self,
            name,
            &AuditFilter {
                event: Some("created"),
                mentions: Some(&[&member, &escaped]),
                ..AuditFilter::default()
            },
        )
    }

    /// The gates that answer into binding `name` (`--response-binding`), each with its scope:
    /// the openings read are only those whose compact JSON (as the rule writes it) names it as
    /// their response binding, not every gate about an input of that name.
    fn response_gates(&mut self, name: &str) -> Result<Vec<(String, Option<i64>)>> {
        let openings = AuditFilter {
            event: Some("created"),
            answers_into: Some(name),
            ..AuditFilter::default()
        };
        Ok(naming_in(self, name, &openings)?.response)
    }

    /// The run's `renumbered` events, oldest first: how copies renumbered its log
    /// (`chain::Moves`).
    fn moves_of_run(&mut self) -> Result<Vec<AuditRow>> {
        self.audit(&AuditFilter {
            gate_id: Some(super::dump::RUN_EVENT),
            event: Some(super::chain::RENUMBERED),
            ..AuditFilter::default()
        })
    }

    /// A gate's audit history, oldest first.
    fn gate_history(&mut self, gate_id: &str) -> Result<Vec<AuditRow>> {
        self.audit(&AuditFilter {
            gate_id: Some(gate_id),
            ..AuditFilter::default()
        })
    }

    /// A gate's audit history and the run's moves ([`Rows::moves_of_run`]), each oldest
    /// first, in one read: what a gate is judged against.
    fn gate_history_and_moves(&mut self, gate_id: &str) -> Result<(Vec<AuditRow>, Vec<AuditRow>)> {
        let rows = self.audit(&AuditFilter {
            gate_id: Some(gate_id),
            with_moves: true,
            ..AuditFilter::default()
        })?;
        // No gate is named as the run's own events are (an empty id).
        Ok(rows.into_iter().partition(|r| r.gate_id == gate_id))
    }
}

/// [`Rows::gates_naming`] over the `created` events `openings` selects. Each
/// response binding's scope is read as the run numbers its executions now: through the moves
/// of the run this machine vouches for (`chain::Moves`; a run moved to a store that
/// renumbered it seals its old ids), so that no lookup misses an answer in its new frame.
fn naming_in<R: Rows + ?Sized>(rows: &mut R, name: &str, openings: &AuditFilter) -> Result<Naming> {
    let found = rows.audit(openings)?;
    let mut naming = Naming::default();
    if found.is_empty() {
        return Ok(naming);
    }
    // Every reading of the scope is kept: as sealed, through the moves this machine vouches
    // for, and through any the rows hold. A move's row unsealed or deleted behind the tool's
    // back then still leaves the scope the answer is in now among them, so no check of it is
    // skipped and no write to it allowed (a scope too many costs a check that finds no
    // answer there).
    let (trusted, all) = moves_of(rows, &found[0].run_id)?;
    for r in found {
        let m = r.metadata_json();
        if m["response_binding"].as_str() == Some(name) {
            for moves in [None, Some(&trusted), Some(&all)] {
                let mut m = m.clone();
                if let Some(moves) = moves {
                    moves.renumber(r.seq, &mut m);
                }
                let at = (r.gate_id.clone(), m["response_scope"].as_i64());
                if !naming.response.contains(&at) {
                    naming.response.push(at);
                }
            }
        }
        if names_as_input(&m, name) {
            naming.input = true;
            if !naming.about.contains(&r.gate_id) {
                naming.about.push(r.gate_id.clone());
            }
        }
    }
    Ok(naming)
}

/// Whether an opening's metadata lists binding `name` among the gate's inputs.
pub(crate) fn names_as_input(m: &serde_json::Value, name: &str) -> bool {
    m["inputs"]
        .as_array()
        .is_some_and(|i| i.iter().any(|n| n.as_str() == Some(name)))
}

/// The moves of run `run` (its `renumbered` events): those that vouch for themselves with this
/// machine's key, and all its rows hold. One more narrow read, of the few rows a move writes.
fn moves_of<R: Rows + ?Sized>(
    rows: &mut R,
    run: &str,
) -> Result<(super::chain::Moves, super::chain::Moves)> {
    use super::chain::{self_state, Moves, RowState};
    let events = rows.moves_of_run()?;
    if events.is_empty() {
        return Ok(Default::default());
    }
    let key = rows.wiring().key_for_reading()?;
    let mine = events.iter().filter(|r| r.run_id == run);
    Ok((
        Moves::of(
            mine.clone()
                .filter(|r| self_state(r, key) == RowState::Attested),
        ),
        Moves::of(mine),
    ))
}
