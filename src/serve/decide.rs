//! The decision: the approve and reject forms a gate's page carries, what binds them to the
//! view that showed them (`view_tag`), and the handler that takes one.

use super::answer::{self, Errors, Fields};
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
use std::collections::BTreeMap;
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

/// What a posted approval said, shown again beside its errors: the answer's fields and the
/// comment as posted, and the errors by field name (`r…` for the answer, `edit/NAME`).
#[derive(Default)]
struct Filled {
    answer: Option<Fields>,
    errors: Errors,
    comment: String,
}

/// The largest input the page offers for editing (a bigger one is edited with `approve
/// --edit NAME=@FILE`): it must fit, with the rest, in a form body.
pub(super) const EDITABLE_BYTES: usize = 16 * 1024;

/// A text area's text as a decision reads it: browsers send its line ends as CRLF.
fn lf(text: &str) -> String {
    text.replace("\r\n", "\n")
}

/// The approve and reject forms of gate `g` as `user` is shown it: each carries the session's
/// CSRF token, the prompt's hash, the gate's instance and the view's tag over them. The
/// approval carries the answer the gate's response schema asks for, as a form, and each input
/// the decision is about (`editable`: name and value) for editing.
pub(super) fn forms(
    app: &App,
    user: &SignedIn,
    g: &GateRow,
    inputs: &[crate::services::inputs::InputNow],
    schema: Option<&serde_json::Value>,
    editable: &[(String, String)],
) -> Markup {
    let hash = sha256_tag(&g.prompt);
    // What the page showed of the decision's inputs: a change since is refused.
    let inputs_hash =
        crate::store::signatures::inputs_digest(&crate::services::inputs::digests(inputs));
    let (run, instance) = (g.run_id.as_deref().unwrap_or(""), g.instance.to_string());
    let view = view_tag(&app.view_key, [&user.session, run, &g.id, &instance, &hash]);
    let action = format!("{}/decide", gate_link(g));
    let hidden = |verb: &str| {
        [
            ("csrf", user.csrf.as_str()),
            ("prompt_hash", &hash),
            ("inputs_hash", &inputs_hash),
            ("instance", &instance),
            ("view", &view),
            ("action", verb),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
    };
    let principal = &user.principal;
    // Each input the page does not offer for editing, said: it is edited on the command line.
    let kept: Vec<&str> = inputs
        .iter()
        .map(|i| i.name.as_str())
        .filter(|n| !editable.iter().any(|(e, _)| e == n))
        .collect();
    html! {
        div.decide {
            (approve_form(&action, &hidden("approve"), principal, schema, editable, &Filled::default()))
            @if !kept.is_empty() {
                p.hint #not-editable {
                    "Not editable on this page (a const, an attachment, unbound, over " (EDITABLE_BYTES / 1024)
                    " KiB, or holding characters this page shows escaped): "
                    @for (i, n) in kept.iter().enumerate() {
                        @if i > 0 { ", " }
                        code { (visible(n)) }
                    }
                    ". To edit one, approve on the command line: "
                    code { "prose-state approve " (visible(&g.id)) " --edit NAME=@FILE" }
                }
            }
            form #reject method="post" action=(action) {
                @for (k, v) in hidden("reject") { input type="hidden" name=(k) value=(v); }
                label for="reject-reason" { "Reason (required)" }
                input #reject-reason type="text" name="comment" maxlength="4000" required;
                button type="submit" { "Reject as " (principal.as_str()) }
            }
        }
    }
}

/// The approval's form: its hidden fields, the answer's fields (filled, with errors beside
/// them), the inputs offered for editing, the comment.
fn approve_form(
    action: &str,
    hidden: &[(String, String)],
    principal: &crate::model::Principal,
    schema: Option<&serde_json::Value>,
    editable: &[(String, String)],
    filled: &Filled,
) -> Markup {
    let answer = schema.map(|s| {
        let fields = filled
            .answer
            .clone()
            .unwrap_or_else(|| answer::fields_of(s, None));
        answer::form(s, &fields, &filled.errors)
    });
    html! {
        // The server is the one judge of an answer: its errors are shown beside the fields.
        form #approve method="post" action=(action) novalidate {
            @for (k, v) in hidden { input type="hidden" name=(k) value=(v); }
            @if let Some(a) = &answer { (a) }
            @if !editable.is_empty() {
                fieldset.edits #edits {
                    legend { "Edit what the decision is about (optional)" }
                    p.hint { "An edit becomes a new version of the binding, written by you with the approval. You see the change before it is approved." }
                    @for (i, (name, value)) in editable.iter().enumerate() {
                        @let field = format!("edit/{name}");
                        @let id = format!("edit{i}");
                        div.field {
                            label for=(id) { (visible(name)) }
                            // A text area drops the newline its content starts with: one is put first.
                            textarea #(id) name=(field) rows="6" aria-describedby=(format!("{id}-error")) { "\n" (value) }
                            @if let Some(e) = filled.errors.get(&field) {
                                span.field-error id=(format!("{id}-error")) role="alert" { (visible(e)) }
                            }
                        }
                    }
                }
            }
            label for="approve-comment" { "Comment (optional)" }
            input #approve-comment type="text" name="comment" maxlength="4000" value=(filled.comment);
            button type="submit" { "Approve as " (principal.as_str()) }
        }
    }
}

/// The approval posted with errors, shown again: the gate's prompt, and the form as it was
/// posted (the same hidden fields, so what the person was shown is still what is decided on)
/// with each error beside its field. Nothing is written.
fn invalid(
    form: &DecideForm,
    action: &str,
    back: &str,
    principal: &crate::model::Principal,
    prompt: &str,
    schema: Option<&serde_json::Value>,
    errors: Errors,
) -> Markup {
    let hidden: Vec<(String, String)> = form
        .pairs()
        .into_iter()
        .filter(|(k, _)| {
            [
                "csrf",
                "action",
                "prompt_hash",
                "inputs_hash",
                "instance",
                "view",
            ]
            .contains(&k.as_str())
        })
        .collect();
    let editable: Vec<(String, String)> =
        form.edits.iter().map(|(k, v)| (k.clone(), lf(v))).collect();
    let filled = Filled {
        answer: Some(form.answer.clone()),
        errors,
        comment: form.comment.clone(),
    };
    html! {
        h1 { "Check your answer" }
        p.note #not-decided { "Nothing was decided: correct what is marked, then approve again." }
        h2 { "Prompt" }
        pre #prompt { (visible(prompt)) }
        (approve_form(action, &hidden, principal, schema, &editable, &filled))
        p { a #back href=(back) { "Back to the gate" } }
    }
}

/// The tag that says an approval's edits and answer were shown to the person as a preview
/// in this session, on this view (`view_tag`'s MAC, with the preview's own parts).
fn preview_tag(key: &[u8; 32], session: &str, view: &str, digest: &str) -> String {
    view_tag(key, [session, "preview", view, digest, ""])
}

/// What a preview covers: the answer, the edits and the comment.
fn preview_digest(
    answer: Option<&serde_json::Value>,
    edits: &[(String, String)],
    comment: &str,
) -> String {
    sha256_tag(&serde_json::json!([answer, edits, comment]).to_string())
}

/// The preview of an approval's edits (and its answer), with the form that approves them as
/// shown: each edit as a line diff of the value before and after, and its sizes.
fn preview(
    form: &DecideForm,
    principal: &crate::model::Principal,
    action: &str,
    back: &str,
    answer: Option<&serde_json::Value>,
    edits: &[(String, String, String)],
    tag: &str,
) -> Markup {
    html! {
        h1 { "Approve with these edits?" }
        p { "Nothing is decided yet. Approving writes each edit as a new version of its binding, by you, with the decision." }
        @for (name, before, after) in edits {
            section.edit {
                h2 { "Edit of " code { (visible(name)) } }
                p.sizes { (before.len()) " bytes → " (after.len()) " bytes" }
                pre.diff data-binding=(name) {
                    @for change in similar::TextDiff::from_lines(before.as_str(), after.as_str()).iter_all_changes() {
                        @let (sign, class) = match change.tag() {
                            similar::ChangeTag::Delete => ("- ", "del"),
                            similar::ChangeTag::Insert => ("+ ", "ins"),
                            similar::ChangeTag::Equal => ("  ", "same"),
                        };
                        span class=(class) { (sign) (visible(change.as_str().unwrap_or_default().trim_end_matches('\n'))) "\n" }
                    }
                }
            }
        }
        @if let Some(a) = answer {
            h2 { "Your answer" }
            pre #answer-json { (visible(&serde_json::to_string_pretty(a).unwrap_or_default())) }
        }
        form #confirm method="post" action=(action) {
            @for (k, v) in form.pairs() {
                input type="hidden" name=(k) value=(v);
            }
            input type="hidden" name="preview" value=(tag);
            button #confirm-approve type="submit" { "Approve with these edits as " (principal.as_str()) }
        }
        p { a #back href=(back) { "Back to the gate (the edits are not kept)" } }
    }
}

/// A decision form's fields; one left out is empty. The answer's fields (`r…`) and the
/// edits (`edit/NAME`) are kept by name.
#[derive(Default, Clone)]
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
    /// The preview's tag: the approval's edits were shown to the person (`preview_tag`).
    preview: String,
    answer: Fields,
    edits: BTreeMap<String, String>,
}

impl DecideForm {
    /// The form from its posted fields: each at most once (a field twice is 400, with one line
    /// naming it).
    pub(super) fn from_pairs(pairs: Vec<(String, String)>) -> Result<DecideForm, PageError> {
        let bad = |why: String| PageError::new(StatusCode::BAD_REQUEST, why);
        let mut f = DecideForm::default();
        let mut seen = std::collections::BTreeSet::new();
        for (k, v) in pairs {
            if !seen.insert(k.clone()) {
                return Err(bad(format!(
                    "not a form of this page: the field {} is given twice",
                    crate::error::shown(&k)
                )));
            }
            let slot = match k.as_str() {
                "csrf" => &mut f.csrf,
                "action" => &mut f.action,
                "comment" => &mut f.comment,
                "prompt_hash" => &mut f.prompt_hash,
                "inputs_hash" => &mut f.inputs_hash,
                "instance" => &mut f.instance,
                "view" => &mut f.view,
                "preview" => &mut f.preview,
                _ if k == "r" || k.starts_with("r/") => {
                    f.answer.insert(k, v);
                    continue;
                }
                _ if k.starts_with("edit/") => {
                    f.edits.insert(k["edit/".len()..].to_string(), v);
                    continue;
                }
                // A field the page does not send (a `principal`, say) is ignored: the
                // decider is the session's.
                _ => continue,
            };
            *slot = v;
        }
        Ok(f)
    }

    /// The fields as posted, but the preview's tag: what a preview's form sends again.
    fn pairs(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = [
            ("csrf", &self.csrf),
            ("action", &self.action),
            ("comment", &self.comment),
            ("prompt_hash", &self.prompt_hash),
            ("inputs_hash", &self.inputs_hash),
            ("instance", &self.instance),
            ("view", &self.view),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
        out.extend(self.answer.iter().map(|(k, v)| (k.clone(), lf(v))));
        out.extend(self.edits.iter().map(|(k, v)| (format!("edit/{k}"), lf(v))));
        out
    }
}

/// What a posted decision came to.
pub(super) enum Posted {
    /// Refused by the page itself (a CSRF token, a form it did not show): why.
    Refused(String),
    /// The answer or an edit did not read or fit: the form again, with the errors.
    Invalid(Markup),
    /// Edits not yet shown as a preview: the preview page.
    Preview(Markup),
    /// Taken by the decision service, or refused by its rules.
    Decided(Box<Decided>),
    /// What the decision is about changed since the page showed it (as a prompt changed
    /// since, a conflict): why.
    Changed(String),
}

/// Takes a posted decision, as the signed-in principal (never a form field), through the
/// decision service as `approve` takes it, on the instance and prompt the page showed.
pub(super) fn take(
    app: &App,
    user: &SignedIn,
    run: &str,
    gate: &str,
    form: &DecideForm,
) -> anyhow::Result<Posted> {
    let approve = match form.action.as_str() {
        "approve" => true,
        "reject" => false,
        _ => {
            return Err(crate::error::usage("the action is approve or reject"));
        }
    };
    let comment = form.comment.trim().to_string();
    let who = &user.principal;
    // The run first: a URL naming no run of this project learns nothing more.
    let (paths, mut store) = page_run(&app.ctx, run)?;
    crate::model::check_gate_id(gate)?;
    // The form must carry this session's CSRF token, and be one this page showed, in this
    // session, for this gate instance and prompt (`view_tag`): otherwise the attempt is
    // refused and audit-logged on the gate as the signed-in principal, like the store's own
    // refusals. (An attempt without a session is not: anyone who can reach the page could
    // fill a run's append-only log; serve's log reports it.)
    let shown = form.instance.parse::<i64>().ok().filter(|i| {
        let instance = i.to_string();
        let parts = [
            user.session.as_str(),
            run,
            gate,
            &instance,
            &form.prompt_hash,
        ];
        same(&form.view, &view_tag(&app.view_key, parts))
    });
    let refusal = if !same(&form.csrf, &user.csrf) {
        Some("the form's CSRF token is missing or wrong")
    } else {
        crate::cmd::decide::reason_given(approve, Some(&comment), None)?;
        shown
            .is_none()
            .then_some("the form is not one this page showed for this gate")
    };
    if let Some(reason) = refusal {
        let recorded = store.refuse_attempt(&crate::store::Attempt {
            gate_id: gate,
            approve,
            principal: Some(who.as_str()),
            authenticated: true,
            client: "web",
            reason,
            now: &now(),
        })?;
        let mut refused = format!("{reason}: reload the gate's page");
        if recorded {
            refused.push_str("; this attempt was logged");
        }
        return Ok(Posted::Refused(refused));
    }
    // The answer and the edits, read from the form against the gate's sealed opening.
    let read = crate::store::gate_read::read(store.as_mut(), gate, &now())?;
    let (schema, inputs, scope) = match &read {
        Some(g) => (
            g.derived.response_schema.clone(),
            g.derived.inputs.clone(),
            g.row.execution_id,
        ),
        None => Default::default(),
    };
    if !approve && (!form.answer.is_empty() || !form.edits.is_empty()) {
        return Err(crate::error::usage(
            "a rejection on the page carries no answer and no edits",
        ));
    }
    let mut errors = Errors::new();
    let answer = match (&schema, approve) {
        (Some(s), true) => {
            // Only the fields the form asks for: a constant is shown, not asked.
            let (asked, names) = (answer::asked(s), answer::names(s));
            if let Some(k) = form.answer.keys().find(|k| !asked.contains(k)) {
                return Err(crate::error::usage(format!(
                    "{} is no field this gate's form asks for",
                    crate::error::shown(k)
                )));
            }
            // The fields that do not read are marked; the rest of the answer is still
            // checked, so that every error is shown at once.
            let (answer, unread) = answer::read_answer(s, &form.answer);
            errors = unread;
            match &answer {
                Some(a) => {
                    for (k, v) in answer::check(s, a, &names) {
                        errors.entry(k).or_insert(v);
                    }
                }
                None if errors.is_empty() => {
                    let why = "an approval of this gate needs an answer";
                    errors.insert(answer::name(""), why.into());
                }
                None => {}
            }
            answer
        }
        (None, _) if !form.answer.is_empty() => {
            return Err(crate::error::usage("this gate asks for no answer"));
        }
        _ => None,
    };
    let mut edits = Vec::new();
    if !form.edits.is_empty() {
        let now_values = editable_values(store.as_mut(), scope, &inputs)?;
        for (name, posted) in &form.edits {
            if !inputs.contains(name) {
                return Err(crate::error::usage(format!(
                    "edit/{}: the gate is not about it",
                    crate::error::shown(name)
                )));
            }
            // Only what the page offered (text of at most EDITABLE_BYTES, bound): a larger
            // input or an attachment is edited on the command line.
            let Some(before) = now_values.get(name) else {
                return Err(crate::error::usage(format!(
                    "edit/{}: the page does not edit this input (an attachment, unbound, over {EDITABLE_BYTES} bytes, or holding characters the page shows escaped): approve it with `--edit {}=@FILE`",
                    crate::error::shown(name),
                    crate::error::shown(name)
                )));
            };
            if posted.contains('\0') {
                errors.insert(format!("edit/{name}"), "contains a NUL byte".into());
            } else if lf(posted) != lf(before) {
                // A value whose lines end in CRLF keeps them; any other reads as LF (how a
                // browser sends a text area's lines is not what the value holds).
                let crlf = before.contains("\r\n")
                    && before.matches('\n').count() == before.matches("\r\n").count();
                let after = match crlf {
                    true => lf(posted).replace('\n', "\r\n"),
                    false => lf(posted),
                };
                edits.push((name.clone(), before.clone(), after));
            }
        }
    }
    let back = format!("/runs/{}/gates/{}", enc(run), enc(gate));
    let action = format!("{back}/decide");
    if !errors.is_empty() {
        let prompt = read.as_ref().map(|g| g.row.prompt.as_str()).unwrap_or("");
        return Ok(Posted::Invalid(invalid(
            form,
            &action,
            &back,
            who,
            prompt,
            schema.as_ref(),
            errors,
        )));
    }
    let edit_pairs: Vec<(String, String)> = edits
        .iter()
        .map(|(n, _, after)| (n.clone(), after.clone()))
        .collect();
    let digest = preview_digest(answer.as_ref(), &edit_pairs, &comment);
    let tag = preview_tag(&app.view_key, &user.session, &form.view, &digest);
    if !edits.is_empty() && !same(&form.preview, &tag) {
        return Ok(Posted::Preview(preview(
            form,
            who,
            &action,
            &back,
            answer.as_ref(),
            &edits,
            &tag,
        )));
    }
    // Asked again by the rule once the decision holds the run's write lock: the session's
    // token still live (not revoked or reissued while the decision waited), the roster as
    // the book says it then.
    let authority = || -> anyhow::Result<crate::store::Authority> {
        if !super::signin::token_live(app, who.as_str(), &user.token_hash)? {
            return Err(crate::error::refused(
                "the session's token was revoked or replaced before the decision was taken: sign in again",
            ));
        }
        Ok(crate::store::Authority {
            authenticated: true,
            roster: app.with_book(|b| crate::cmd::decide::roster(Some(b)))?,
        })
    };
    // The page signs only for a project whose sealed book is pinned to its key: a book that
    // is not (made anew, cut, or never pinned) is one whoever can write it controls, and a
    // signature would vouch for it.
    let pinned = app.with_book(|b| crate::services::sign::pinned(b))?;
    let signs = pinned.is_some_and(|k| crate::services::sign::public_tag(&k) == app.signer.public);
    // The one decision path: the inputs as the page showed them must be what they are.
    let decided = crate::services::decide::decide(
        store.as_mut(),
        &paths.dir,
        &crate::services::decide::Request {
            response: answer.as_ref(),
            edits: &edit_pairs,
            gate_id: gate,
            approve,
            principal: who,
            authenticated: true,
            client: "web",
            comment: (!comment.is_empty()).then_some(comment.as_str()),
            // The prompt as the page showed it: a prompt changed since is refused.
            prompt_hash: &form.prompt_hash,
            // The instance the page showed: a gate reopened since is refused, in the
            // decision's own transaction.
            instance: shown,
            shown_inputs: Some(&form.inputs_hash),
            signer: signs.then_some(&app.signer as _),
            authority: &authority,
        },
    )?;
    Ok(match decided {
        Ok(d) => Posted::Decided(Box::new(d)),
        Err(reason) => Posted::Changed(format!(
            "{reason}: reload the gate's page; this attempt was logged"
        )),
    })
}

/// The values of the gate's inputs the page offers for editing, by name: each bound as text
/// (not an attachment) in the gate's scope, of at most [`EDITABLE_BYTES`], holding no
/// character the page shows escaped (a text area shows its text as it is: a bidi override
/// there would show the person other text than the one stored).
pub(super) fn editable_values(
    store: &mut dyn crate::store::Store,
    scope: Option<i64>,
    inputs: &[String],
) -> anyhow::Result<BTreeMap<String, String>> {
    if inputs.is_empty() {
        return Ok(BTreeMap::new());
    }
    let rows = crate::cmd::get::nearest_bindings(store, scope, None, i64::MAX)?.1;
    Ok(editable_of(&rows, inputs))
}

/// [`editable_values`] out of the bindings the gate's scope sees, already read.
pub(super) fn editable_of(
    rows: &[crate::store::BindingRow],
    inputs: &[String],
) -> BTreeMap<String, String> {
    rows.iter()
        .filter(|b| inputs.contains(&b.name))
        // A const (a block's argument) is bound once: no edit rebinds it.
        .filter(|b| b.kind.as_deref() != Some("const"))
        .filter(|b| b.attachment_path.as_deref().is_none_or(str::is_empty))
        .filter_map(|b| {
            let value = std::str::from_utf8(b.value.as_deref()?).ok()?;
            (value.len() <= EDITABLE_BYTES && crate::output::shown_as_is_in_a_text_area(value))
                .then(|| (b.name.clone(), value.to_string()))
        })
        .collect()
}

/// A decision as the page posts it: taken, refused, shown again with its errors, or shown
/// as a preview of its edits.
pub(super) async fn decide(
    State(app): State<Arc<App>>,
    ConnectInfo(Peer(peer)): ConnectInfo<Peer>,
    Path((run, gate)): Path<(String, String)>,
    user: Result<SignedIn, PageError>,
    PageForm(pairs): PageForm<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    // A decision without a session is not written into the run's log (anyone who can reach
    // the page could fill it that way): it is reported here, with the client's address.
    let form = DecideForm::from_pairs(pairs)?;
    let user = user.inspect_err(|_| {
        crate::output::report(&format!(
            "refused a decision without a session from {}: run {}, gate {}",
            peer.ip(),
            crate::error::shown(&run),
            crate::error::shown(&gate)
        ))
    })?;
    let (principal, header_csrf) = (user.principal.clone(), user.csrf.clone());
    let (run2, gate2) = (run.clone(), gate.clone());
    let user2 = user.clone();
    let posted = blocking(&app, move |app2| take(app2, &user2, &run2, &gate2, &form)).await?;
    let back = format!("/runs/{}/gates/{}", enc(&run), enc(&gate));
    let decided = match posted {
        // Refused by the page itself (a CSRF token or a form it did not show).
        Posted::Refused(refused) => return Err(PageError::new(StatusCode::FORBIDDEN, refused)),
        Posted::Changed(why) => return Err(PageError::new(StatusCode::CONFLICT, why)),
        Posted::Preview(body) => {
            let body = layout("Confirm", Some((&principal, &header_csrf)), body);
            return Ok(page(StatusCode::OK, body));
        }
        Posted::Invalid(body) => {
            let body = layout("Check your answer", Some((&principal, &header_csrf)), body);
            return Ok(page(StatusCode::BAD_REQUEST, body));
        }
        Posted::Decided(d) => *d,
    };
    // The command line's words; a lost race, a changed prompt or a reopened gate is a
    // conflict.
    let status = match &decided {
        Decided::Done(_) | Decided::Counted { .. } => StatusCode::SEE_OTHER,
        Decided::NotFound => StatusCode::NOT_FOUND,
        Decided::NotAllowed(_) => StatusCode::FORBIDDEN,
        _ => StatusCode::CONFLICT,
    };
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
