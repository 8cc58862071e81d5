//! `approve` and `reject`: one decision on a pending gate. The first decision wins; every
//! refused attempt is audit-logged by the store.

use super::gates::gate_not_found;
use crate::cli::{PrincipalArg, RunGate, TokenArg};
use crate::context::Context;
use crate::error::{refused, shown, usage};
use crate::model::{check_gate_id, now, sha256_tag, GateStatus, Principal};
use crate::output::Render;
use crate::store::principals::PrincipalBook;
use crate::store::{Decided, GateRow};
use anyhow::Result;
use serde::Serialize;
use std::io::{self, Write};

#[derive(Debug, Serialize)]
pub struct DecisionMade {
    #[serde(flatten)]
    pub gate: GateRow,
    /// A vote short of the gate's quorum: where the gate stands after it.
    #[serde(flatten)]
    pub vote: Option<Vote>,
}

/// A vote counted toward a gate's quorum, the gate still pending.
#[derive(Debug, Serialize)]
pub struct Vote {
    /// `counted`, or `already counted` (the principal had voted so: nothing was written).
    pub vote: &'static str,
    pub require: u32,
    pub approvals: Vec<String>,
    pub rejections: Vec<String>,
    /// "2 of 3 approvals: alice, bob".
    pub progress: String,
}

impl Render for DecisionMade {
    fn text(self, w: &mut dyn Write, _tty: bool) -> io::Result<()> {
        let g = &self.gate;
        if let Some(v) = &self.vote {
            return writeln!(
                w,
                "Gate {} is still pending: your vote was {} ({})",
                g.id, v.vote, v.progress
            );
        }
        writeln!(
            w,
            "Gate {} {} by {} at {}",
            g.id,
            g.status,
            g.resolved_by.as_deref().unwrap_or("-"),
            g.resolved_at.as_deref().unwrap_or("-")
        )?;
        if let Some(c) = &g.resolution_comment {
            writeln!(w, "Comment: {c}")?;
        }
        Ok(())
    }
}

fn resolved_by(g: &GateRow) -> String {
    format!(
        "gate {} was already {} by {} at {}",
        g.id,
        if g.status == GateStatus::Timeout {
            "timed out"
        } else {
            g.status.as_str()
        },
        g.resolved_by.as_deref().unwrap_or("-"),
        g.resolved_at.as_deref().unwrap_or("-")
    )
}

/// A rejection needs a reason, whoever decides: on the command line (exit 2) and on the
/// approval page (400) alike, checked before the gate is read. `how` says how to give one,
/// after the rule's own words.
pub fn reason_given(approve: bool, reason: Option<&str>, how: Option<&str>) -> Result<()> {
    if approve || reason.is_some_and(|r| !r.trim().is_empty()) {
        return Ok(());
    }
    Err(usage(match how {
        Some(how) => format!("a rejection needs a reason: {how}"),
        None => "a rejection needs a reason".to_string(),
    }))
}

/// The gate as decided, or what a decision that did not go through tells the decider, with
/// its exit code: the same words on the command line and on the approval page.
pub fn outcome(
    decided: Decided,
    principal: &Principal,
    run_id: &str,
    gate: &str,
) -> Result<DecisionMade> {
    Err(match decided {
        Decided::Done(g) => return Ok(DecisionMade { gate: g, vote: None }),
        Decided::Counted {
            gate,
            quorum,
            tally,
            already,
        } => {
            return Ok(DecisionMade {
                gate,
                vote: Some(Vote {
                    vote: if already { "already counted" } else { "counted" },
                    require: quorum.require,
                    progress: tally.progress(&quorum),
                    approvals: tally.approvals,
                    rejections: tally.rejections,
                }),
            })
        }
        Decided::NotAuthenticated(g) => refused(format!(
            "gate {} counts only authenticated decisions (a token, or the approval page): pass --token-file FILE or PROSE_TOKEN; this attempt was logged",
            g.id
        )),
        Decided::OwnGate(g, why) => refused(format!(
            "{} may not decide gate {}: {why}; this attempt was logged",
            shown(principal.as_str()),
            g.id
        )),
        Decided::NotFound => gate_not_found(run_id, gate),
        Decided::AlreadyResolved(g, false) => refused(format!(
            "{}; this attempt was logged",
            resolved_by(&g)
        )),
        // Not "already approved by alice": nothing here attests that anyone decided.
        Decided::AlreadyResolved(g, true) => refused(format!(
            "gate {} is {} only in its row (by {}), by no sealed decision: written outside prose-state (the spec's own SQL, or another tool), which nothing here attests, and `gates wait` says so (exit 10); it is not decided again (open a gate under a new id to ask again); this attempt was logged",
            g.id,
            g.status,
            shown(g.resolved_by.as_deref().unwrap_or("-"))
        )),
        Decided::NotAllowed(g) => refused(format!(
            "principal {} may not decide gate {} (allow: {}); this attempt was logged",
            shown(principal.as_str()),
            g.id,
            g.allow.join(", ")
        )),
        Decided::Tampered(g, why) => crate::error::tampered(format!(
            "gate {} was changed behind prose-state's back ({why}); not decided (attempt logged)",
            g.id
        )),
        Decided::PromptChanged(g) => refused(format!(
            "gate {} changed after it was read (its prompt, or it was reopened); look again and retry (attempt logged)",
            g.id
        )),
    })
}

/// The roster a decision is counted against: the principals book's sealed log (no book, no
/// groups), or why it cannot be trusted.
pub fn roster(
    book: Option<&mut dyn PrincipalBook>,
) -> Result<std::result::Result<crate::team::Roster, String>> {
    Ok(match book {
        None => Ok(Default::default()),
        Some(b) => crate::store::principals::book_state(b)?.map(|s| s.roster),
    })
}

/// The page of the gate a command names, when the project says where its approval page is.
fn page(ctx: &Context, target: &RunGate) -> Option<String> {
    crate::services::notify::gate_page(target.run().or(ctx.run.as_deref())?, target.gate())
}

/// Who decides (`Context::decider`). A decision refused there (a token that is not valid, a
/// token or a signature the project requires) is audit-logged on the gate like the refusals
/// the store makes, as the principal claimed, unauthenticated.
fn decider(
    ctx: &Context,
    arg: &PrincipalArg,
    token: &TokenArg,
    target: &RunGate,
    approve: bool,
) -> Result<(Principal, bool)> {
    let e = match ctx.decider(arg, token, page(ctx, target)) {
        Ok(found) => return Ok(found),
        Err(e)
            if matches!(
                crate::error::code_of(&e),
                Some(crate::error::Code::Refused | crate::error::Code::Tampered)
            ) =>
        {
            e
        }
        Err(e) => return Err(e),
    };
    let tampered = crate::error::code_of(&e) == Some(crate::error::Code::Tampered);
    let claimed = ctx.principal(arg).ok().flatten();
    let reason = format!("{e:#}");
    let recorded = check_gate_id(target.gate()).and_then(|()| {
        let (_, mut store) = ctx.open_run(target.run().or(ctx.run.as_deref()))?;
        store.refuse_attempt(&crate::store::Attempt {
            gate_id: target.gate(),
            approve,
            principal: claimed.as_ref().map(|p| p.as_str()),
            authenticated: false,
            client: "cli",
            reason: &reason,
            now: &now(),
        })
    });
    Err(match recorded {
        Ok(true) if tampered => {
            crate::error::tampered(format!("{reason}; this attempt was logged"))
        }
        Ok(true) => refused(format!("{reason}; this attempt was logged")),
        _ => e,
    })
}

/// Decides on the gate a command names, in the run it names, as the principal it gives.
fn decide(
    ctx: &Context,
    (arg, token, target): (&PrincipalArg, &TokenArg, &RunGate),
    approve: bool,
    comment: Option<&str>,
    response: Option<&str>,
    edits: &[String],
    yes: bool,
) -> Result<DecisionMade> {
    let (principal, authenticated) = decider(ctx, arg, token, target, approve)?;
    let (paths, mut store) = ctx.open_run(target.run().or(ctx.run.as_deref()))?;
    let gate_id = target.gate();
    check_gate_id(gate_id)?;
    reason_given(approve, comment, Some("--reason TEXT"))?;
    let response = response
        .map(|a| {
            let what = "--response";
            let text = crate::response::text_of(what, a, crate::response::ANSWER_MAX_BYTES)?;
            crate::response::parse_answer(what, &text)
        })
        .transpose()?;
    let edits = parse_edits(edits)?;
    let now = now();
    let run_id = store.run_info()?.id;
    let read = crate::store::gate_read::read(store.as_mut(), gate_id, &now)?
        .ok_or_else(|| gate_not_found(&run_id, gate_id))?;
    let gate = &read.row;
    let mut book = ctx.principal_book(false)?;
    let roster = roster(book.as_mut().map(|b| b.as_mut() as &mut dyn PrincipalBook))?;
    let empty = crate::team::Roster::default();
    // Who may decide, as the opening's sealed event has it (the row's, for a gate no sealed
    // event opened).
    let allow = match read.derived.instance {
        0 => &gate.allow,
        _ => &read.derived.allow,
    };
    let admitted =
        !crate::team::admitting(allow, &principal, roster.as_ref().unwrap_or(&empty)).is_empty();
    let action = if approve { "approve" } else { "reject" };
    // Ask only when the decision could be taken; otherwise let the store refuse (and log) it.
    if read.decision().0.is_pending() && admitted && !yes {
        if !crate::term::interactive() {
            return Err(usage(format!(
                "{action} needs confirmation and stdin is not a terminal: pass --yes"
            )));
        }
        let asked = crate::term::Asked {
            gate: &gate.id,
            run: gate.run_id.as_deref().unwrap_or("-"),
            prompt: &gate.prompt,
            timeout_at: gate.timeout_at.as_deref(),
        };
        if !crate::term::confirm(&asked, action)? {
            return Err(refused(format!(
                "not confirmed; gate {} left {}",
                gate.id, gate.status
            )));
        }
    }
    // Who decides is asked again by the rule once the decision holds the run's write lock: a
    // token revoked while it waited (another writer holding the lock) no longer decides.
    let authority = || -> Result<crate::store::Authority> {
        let (again, authenticated) = ctx.decider(arg, token, page(ctx, target))?;
        if again != principal {
            return Err(refused(format!(
                "the token now names {}, not {}: decide again",
                again.as_str(),
                principal.as_str()
            )));
        }
        let mut book = ctx.principal_book(false)?;
        Ok(crate::store::Authority {
            authenticated,
            roster: self::roster(book.as_mut().map(|b| b.as_mut() as &mut dyn PrincipalBook))?,
        })
    };
    // What the decision is about is read with it, as it is now (what a person at a terminal
    // was just shown), on the one path every front end decides through.
    let decided = crate::services::decide::decide(
        store.as_mut(),
        &paths.dir,
        &crate::services::decide::Request {
            gate_id,
            approve,
            principal: &principal,
            authenticated,
            client: "cli",
            comment,
            // The prompt as it was shown (or, with --yes, as it was read) just now.
            prompt_hash: &sha256_tag(&gate.prompt),
            instance: Some(gate.instance),
            shown_inputs: None,
            signer: None,
            response: response.as_ref(),
            edits: &edits,
            authority: &authority,
        },
    )?
    .map_err(|why| refused(format!("{why}; this attempt was logged")))?;
    outcome(decided, &principal, &run_id, gate_id)
}

impl super::Run for crate::cli::ApproveArgs {
    type Output = DecisionMade;
    fn run(&self, ctx: &Context) -> Result<DecisionMade> {
        let comment = if self.reject {
            self.reason.as_deref()
        } else {
            self.comment.as_deref()
        };
        let who = (&self.principal, &self.token, &self.target);
        decide(
            ctx,
            who,
            !self.reject,
            comment,
            self.response.as_deref(),
            &self.edit,
            self.yes,
        )
    }
}

impl super::Run for crate::cli::RejectArgs {
    type Output = DecisionMade;
    fn run(&self, ctx: &Context) -> Result<DecisionMade> {
        let who = (&self.principal, &self.token, &self.target);
        decide(
            ctx,
            who,
            false,
            Some(&self.reason),
            self.response.as_deref(),
            &[],
            self.yes,
        )
    }
}

/// The largest value an `--edit` gives (a larger input is bound with `bind --file`).
pub const EDIT_MAX_BYTES: usize = 1 << 20;

/// `--edit NAME=VALUE|@FILE`, each: a binding name and its new value; a name edited twice is
/// bad input.
fn parse_edits(edits: &[String]) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    for e in edits {
        let Some((name, value)) = e.split_once('=') else {
            return Err(usage(format!(
                "--edit {}: expected NAME=VALUE or NAME=@FILE",
                shown(e)
            )));
        };
        crate::model::check_name(name).map_err(|err| usage(format!("--edit: {err:#}")))?;
        if out.iter().any(|(n, _)| n == name) {
            return Err(usage(format!("--edit names {} twice", shown(name))));
        }
        let what = format!("--edit {name}");
        let value = crate::response::text_of(&what, value, EDIT_MAX_BYTES)?;
        // Refused on every backend alike (PostgreSQL's text holds none).
        if value.contains('\0') {
            return Err(usage(format!("{what}: the value contains a NUL byte")));
        }
        out.push((name.to_string(), value));
    }
    Ok(out)
}
