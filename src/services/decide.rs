//! Deciding a gate: the one path the command line and the approval page take. It reads what
//! the decision is about (the gate's inputs, their digests and the versions it pins), refuses
//! and logs a decision whose inputs changed since the decider was shown them, and hands the
//! decision to the store's one rule (`rules::decide_gate`: the sealed log, the quorum,
//! refusals). A front end keeps only its own form checks (a terminal's confirmation, a page's
//! CSRF token and view tag).

use crate::model::Principal;
use crate::store::signatures::SignsDecisions;
use crate::store::{Decided, Decision, Store};
use anyhow::Result;
use std::path::Path;

/// A decision as a front end asks for it.
pub struct Request<'a> {
    pub gate_id: &'a str,
    pub approve: bool,
    pub principal: &'a Principal,
    /// Whether a token (or the page's sign-in) authenticated the principal.
    pub authenticated: bool,
    /// `cli` or `web`.
    pub client: &'a str,
    pub comment: Option<&'a str>,
    /// The hash of the prompt the decider was shown.
    pub prompt_hash: &'a str,
    /// The opening the decider was shown (None: whichever is there).
    pub instance: Option<i64>,
    /// The digest of the inputs as the decider was shown them, where a front end showed them
    /// before this call (the page); None where they are read for the decision now.
    pub shown_inputs: Option<&'a str>,
    pub signer: Option<&'a dyn SignsDecisions>,
    /// The answer given with the decision (`--response`), parsed; checked by the rule.
    pub response: Option<&'a serde_json::Value>,
    /// Edits of the gate's inputs an approval makes (`--edit NAME=VALUE`), checked by the rule.
    pub edits: &'a [(String, String)],
    /// Who decides as the principals book says it, asked again by the rule once the decision
    /// holds the run's write lock (`Decision::authority`).
    pub authority: &'a dyn Fn() -> Result<crate::store::Authority>,
}

/// Why a decision was refused before it reached the gate (logged on the gate).
pub const INPUTS_CHANGED: &str = "what the decision is about changed since the page showed it";

/// Takes a decision: Ok(Err(reason)) when it was refused here (and logged), before the store's
/// rule saw it.
pub fn decide(
    store: &mut dyn Store,
    run_dir: &Path,
    r: &Request,
) -> Result<std::result::Result<Decided, &'static str>> {
    // An input that moved between the read and the decision's transaction (another
    // approver's edit committing beside it): read again, a few times.
    let mut tries = 0;
    loop {
        match decide_once(store, run_dir, r) {
            Err(e) if tries < 3 && is_inputs_moved(&e) => tries += 1,
            done => return done,
        }
    }
}

fn is_inputs_moved(e: &anyhow::Error) -> bool {
    crate::error::code_of(e) == Some(crate::error::Code::Busy)
        && e.to_string() == crate::store::rules::INPUTS_MOVED
}

fn decide_once(
    store: &mut dyn Store,
    run_dir: &Path,
    r: &Request,
) -> Result<std::result::Result<Decided, &'static str>> {
    let now = crate::model::now();
    let (derived, inputs) = match crate::store::gate_read::read(store, r.gate_id, &now)? {
        Some(g) => {
            // What its openings name (its inputs, its answer's binding) stands as `gates
            // verify` checks it, or no one decides on it (exit 9, nothing written).
            if let Some(why) = super::inputs::gate_problem(store, run_dir, &g.derived)? {
                return Err(crate::error::tampered(format!(
                    "gate {}: {why}; no decision is taken on it",
                    crate::error::shown(r.gate_id)
                )));
            }
            let inputs = super::inputs::read_to_decide(store, run_dir, &g.derived)?;
            (g.derived, inputs)
        }
        None => Default::default(),
    };
    let digests = super::inputs::digests(&inputs);
    let pins = super::inputs::pins(&inputs);
    let about_inputs = !derived.inputs.is_empty();
    if let (Some(shown), true) = (r.shown_inputs, about_inputs) {
        if !crate::model::same_secret(shown, &crate::store::signatures::inputs_digest(&digests)) {
            store.refuse_attempt(&crate::store::Attempt {
                gate_id: r.gate_id,
                approve: r.approve,
                principal: Some(r.principal.as_str()),
                authenticated: r.authenticated,
                client: r.client,
                reason: INPUTS_CHANGED,
                now: &now,
            })?;
            return Ok(Err(INPUTS_CHANGED));
        }
    }
    let decision = Decision {
        gate_id: r.gate_id,
        approve: r.approve,
        principal: r.principal,
        client: r.client,
        comment: r.comment,
        prompt_hash: r.prompt_hash,
        instance: r.instance,
        signer: r.signer,
        authority: r.authority,
        inputs: about_inputs.then_some(&digests),
        pins: about_inputs.then_some(&pins),
        response: r.response,
        edits: r.edits,
    };
    crate::model::test_faults::before_decision();
    Ok(Ok(store.decide_gate(&decision)?))
}
