//! The decision: the approve and reject forms a gate's page carries, what binds them to the
//! view that showed them (`view_tag`), and the handler that takes one.

use super::app::{blocking, page_run, App};
use super::error::PageError;
use super::form::PageForm;
use super::layout::{enc, gate_link, layout, page, redirect, visible};
use super::listen::Peer;
use super::session::same;
use super::signin::SignedIn;
use crate::model::{now, sha256_tag};
use crate::store::{Decided, GateRow};
use axum::extract::{ConnectInfo, Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup};
use serde::Deserialize;
use std::sync::Arc;

/// What binds a decision form to the view that showed it: a MAC, under the server's
/// `view_key`, of `parts`: the session, the run, the gate, its instance and its prompt's hash,
/// in that order. A form carries the instance and this tag; a decision is taken only on that
/// instance (the store refuses another, in the decision's own transaction), so a form
/// replayed after the gate was reopened, with the same prompt or not, decides nothing.
fn view_tag(key: &[u8; 32], parts: [&str; 5]) -> String {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key");
    for part in parts {
        // Each part with its length: no two tuples give the same input.
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part.as_bytes());
    }
    crate::model::hex(&mac.finalize().into_bytes())
}

/// The approve and reject forms of gate `g` as `user` is shown it: each carries the session's
/// CSRF token, the prompt's hash, the gate's instance and the view's tag over them.
pub(super) fn forms(
    app: &App,
    user: &SignedIn,
    g: &GateRow,
    inputs: &[crate::services::inputs::InputNow],
) -> Markup {
    let hash = sha256_tag(&g.prompt);
    // What the page showed of the decision's inputs: a change since is refused.
    let inputs_hash =
        crate::store::signatures::inputs_digest(&crate::services::inputs::digests(inputs));
    let (run, instance) = (g.run_id.as_deref().unwrap_or(""), g.instance.to_string());
    let view = view_tag(&app.view_key, [&user.session, run, &g.id, &instance, &hash]);
    let action = format!("{}/decide", gate_link(g));
    let (principal, csrf) = (&user.principal, &user.csrf);
    html! {
        div.decide {
            // Each form: its action, its comment field's id and label, its button.
            @for (verb, field, label, button) in [
                ("approve", "approve-comment", "Comment (optional)", "Approve as "),
                ("reject", "reject-reason", "Reason (required)", "Reject as "),
            ] {
                form #(verb) method="post" action=(action) {
                    input type="hidden" name="csrf" value=(csrf);
                    input type="hidden" name="prompt_hash" value=(hash);
                    input type="hidden" name="inputs_hash" value=(inputs_hash);
                    input type="hidden" name="instance" value=(g.instance);
                    input type="hidden" name="view" value=(view);
                    input type="hidden" name="action" value=(verb);
                    label for=(field) { (label) }
                    input #(field) type="text" name="comment" maxlength="4000" required[verb == "reject"];
                    button type="submit" { (button) (principal.as_str()) }
                }
            }
        }
    }
}

/// A decision form's fields; one left out is empty.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct DecideForm {
    csrf: String,
    action: String,
    comment: String,
    prompt_hash: String,
    /// The digest of the decision's inputs as the page showed them.
    inputs_hash: String,
    /// The gate instance the page showed, and the view's tag over it (`view_tag`).
    instance: String,
    view: String,
}

/// A decision, taken as the signed-in principal (never a form field), through the store's
/// rules as `approve` takes it, on the instance and prompt the page showed.
pub(super) async fn decide(
    State(app): State<Arc<App>>,
    ConnectInfo(Peer(peer)): ConnectInfo<Peer>,
    Path((run, gate)): Path<(String, String)>,
    user: Result<SignedIn, PageError>,
    PageForm(form): PageForm<DecideForm>,
) -> Result<Response, PageError> {
    // A decision without a session is not written into the run's log (anyone who can reach
    // the page could fill it that way): it is reported here, with the client's address.
    let SignedIn {
        session,
        principal,
        csrf,
    } = user.inspect_err(|_| {
        crate::output::report(&format!(
            "refused a decision without a session from {}: run {}, gate {}",
            peer.ip(),
            crate::error::shown(&run),
            crate::error::shown(&gate)
        ))
    })?;
    let approve = match form.action.as_str() {
        "approve" => true,
        "reject" => false,
        _ => {
            return Err(PageError::new(
                StatusCode::BAD_REQUEST,
                "the action is approve or reject",
            ))
        }
    };
    let comment = form.comment.trim().to_string();
    let (who2, run2, gate2) = (principal.clone(), run.clone(), gate.clone());
    let header_csrf = csrf.clone();
    let posted = blocking(&app, move |app2| {
        // The run first: a URL naming no run of this project learns nothing more.
        let (paths, mut store) = page_run(&app2.ctx, &run2)?;
        crate::model::check_gate_id(&gate2)?;
        // The form must carry this session's CSRF token, and be one this page showed, in
        // this session, for this gate instance and prompt (`view_tag`): otherwise the
        // attempt is refused and audit-logged on the gate as the signed-in principal, like
        // the store's own refusals. (An attempt without a session is not: anyone who can
        // reach the page could fill a run's append-only log; serve's log reports it.)
        let shown = form.instance.parse::<i64>().ok().filter(|i| {
            let parts = [&session, &run2, &gate2, &i.to_string(), &form.prompt_hash];
            same(
                &form.view,
                &view_tag(&app2.view_key, parts.map(String::as_str)),
            )
        });
        let refusal = if !same(&form.csrf, &csrf) {
            Some("the form's CSRF token is missing or wrong")
        } else {
            crate::cmd::decide::reason_given(approve, Some(&comment), None)?;
            shown
                .is_none()
                .then_some("the form is not one this page showed for this gate")
        };
        if let Some(reason) = refusal {
            let recorded = store.refuse_attempt(&crate::store::Attempt {
                gate_id: &gate2,
                approve,
                principal: Some(who2.as_str()),
                authenticated: true,
                client: "web",
                reason,
                now: &now(),
            })?;
            let mut refused = format!("{reason}: reload the gate's page");
            if recorded {
                refused.push_str("; this attempt was logged");
            }
            return Ok(Err(refused));
        }
        let roster = app2.with_book(|b| crate::cmd::decide::roster(Some(b)))?;
        // The page signs only for a project whose sealed book is pinned to its key: a book
        // that is not (made anew, cut, or never pinned) is one whoever can write it controls,
        // and a signature would vouch for it.
        let pinned = app2.with_book(|b| crate::services::sign::pinned(b))?;
        let signs =
            pinned.is_some_and(|k| crate::services::sign::public_tag(&k) == app2.signer.public);
        // The one decision path: the inputs as the page showed them must be what they are.
        let decided = crate::services::decide::decide(
            store.as_mut(),
            &paths.dir,
            &crate::services::decide::Request {
                // The page's form for a response schema is yet to come: a gate that asks for
                // an answer is refused an approval here (the rule says why).
                response: None,
                edits: &[],
                gate_id: &gate2,
                approve,
                principal: &who2,
                authenticated: true,
                client: "web",
                comment: (!comment.is_empty()).then_some(comment.as_str()),
                // The prompt as the page showed it: a prompt changed since is refused.
                prompt_hash: &form.prompt_hash,
                // The instance the page showed: a gate reopened since is refused, in the
                // decision's own transaction.
                instance: shown,
                shown_inputs: Some(&form.inputs_hash),
                signer: signs.then_some(&app2.signer as _),
                roster: &roster,
            },
        )?;
        Ok(decided
            .map_err(|reason| format!("{reason}: reload the gate's page; this attempt was logged")))
    })
    .await?;
    // Refused by the page itself (a CSRF token or a form it did not show).
    let decided = posted.map_err(|refused| PageError::new(StatusCode::FORBIDDEN, refused))?;
    // The command line's words; a lost race, a changed prompt or a reopened gate is a
    // conflict.
    let status = match &decided {
        Decided::Done(_) | Decided::Counted { .. } => StatusCode::SEE_OTHER,
        Decided::NotFound => StatusCode::NOT_FOUND,
        Decided::NotAllowed(_) => StatusCode::FORBIDDEN,
        _ => StatusCode::CONFLICT,
    };
    let back = format!("/runs/{}/gates/{}", enc(&run), enc(&gate));
    match crate::cmd::decide::outcome(decided, &principal, &run, &gate) {
        Ok(_) => Ok(redirect(status, &back, None)),
        // What did not go through (a race lost, a refusal): its words, under the signed-in
        // header, with a link back to the gate.
        Err(e) => Ok(page(
            status,
            layout(
                "Not decided",
                Some((&principal, &header_csrf)),
                html! {
                    h1 { "Not decided" }
                    p.error #outcome { (visible(&format!("{e:#}"))) }
                    p { a #back href=(back) { "Back to the gate" } }
                },
            ),
        )),
    }
}
