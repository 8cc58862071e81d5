//! Signing in and out, and who a request comes from (`SignedIn`).

use super::app::{blocking, App};
use super::error::{PageError, SIGN_IN};
use super::form::PageForm;
use super::layout::{layout, login_form, redirect, Page};
use super::limits::Attempts;
use super::listen::Peer;
use super::session::{cleared, cookie, cookie_of, same, Found};
use crate::error::{code_of, Code};
use crate::model::Principal;
use axum::extract::{ConnectInfo, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Instant;

/// Who is signed in: the session's principal, if its token is still the one the session was
/// opened with (not revoked, not reissued); otherwise the session is ended. A handler that
/// takes it is not called for a request without one: the answer is the sign-in page (401).
/// A form's handler takes `Result<SignedIn, PageError>` and answers for it once its form is
/// read, so that a form that is not one of the page's is 400 (413, 408) whoever sends it.
#[derive(Clone)]
pub(super) struct SignedIn {
    /// The session's id (a decision form is bound to it, `decide::view_tag`).
    pub session: String,
    pub principal: Principal,
    /// The session's CSRF token, which every form must carry.
    pub csrf: String,
    /// The token hash the session was opened with (asked again when a decision is taken).
    pub token_hash: String,
}

impl FromRequestParts<Arc<App>> for SignedIn {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Self, PageError> {
        let id = cookie_of(&parts.headers).ok_or(SIGN_IN)?;
        let found = app.sessions.used(&id).ok_or(SIGN_IN)?;
        checked(app, id, found).await
    }
}

/// Whether session `id` is still signed in (as `SignedIn` checks a request), without counting
/// as its use: what an event stream asks before each event it sends.
pub(super) async fn still_signed_in(app: &Arc<App>, id: &str) -> Result<SignedIn, PageError> {
    let found = app.sessions.peek(id).ok_or(SIGN_IN)?;
    checked(app, id.to_string(), found).await
}

/// The session `id`, found as `found`, if its token is still the one it was opened with;
/// otherwise it is ended.
async fn checked(app: &Arc<App>, id: String, found: Found) -> Result<SignedIn, PageError> {
    let name = found.principal.as_str().to_string();
    let hash = found.token_hash.clone();
    let live = blocking(app, move |app| token_live(app, &name, &hash)).await;
    // A book gone (removed by hand) authenticates nobody: the session ends, as on
    // revocation.
    let live = match live {
        Ok(live) => live,
        Err(e) if code_of(&e) == Some(Code::Refused) => false,
        Err(e) => return Err(e.into()),
    };
    if !live {
        app.sessions.end(&id);
        return Err(SIGN_IN);
    }
    Ok(SignedIn {
        session: id,
        principal: found.principal,
        csrf: found.csrf,
        token_hash: found.token_hash,
    })
}

/// Whether `name`'s token is still the one hashed `hash`, as the book's sealed log says it
/// now: a row un-revoked or re-hashed behind the tool's back, or a log broken, cut or bound
/// elsewhere, is not live, as a revocation is not.
pub(super) fn token_live(app: &App, name: &str, hash: &str) -> anyhow::Result<bool> {
    app.with_book(|book| {
        let Ok(state) = crate::store::principals::book_state(book)? else {
            return Ok(false);
        };
        Ok(book.principal(name)?.is_some_and(|row| {
            row.token_hash == hash && crate::store::principals::unissued(&state, &row).is_none()
        }))
    })
}

pub(super) async fn login_page() -> Page {
    Page(layout("Sign in", None, login_form(None)))
}

#[derive(Deserialize)]
pub(super) struct LoginForm {
    token: String,
}

pub(super) async fn login(
    State(app): State<Arc<App>>,
    ConnectInfo(Peer(peer)): ConnectInfo<Peer>,
    PageForm(form): PageForm<LoginForm>,
) -> Result<Response, PageError> {
    let ip = peer.ip();
    let token = form.token;
    let who = Attempts::keys(ip, &token);
    // Counted before the hash, under one lock: parallel guesses cannot all pass the check
    // before any of them is counted.
    let counted = app
        .attempts
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .begin(&who, Instant::now());
    if !counted {
        crate::output::report(&format!("refused sign-in from {ip}: too many failed"));
        return Err(PageError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too many failed sign-ins from this address or for this principal: wait a minute",
        ));
    }
    let checked = blocking(&app, move |app| {
        app.with_book(|book| {
            let p = crate::services::auth::authenticate(book, &token)?;
            let row = book
                .principal(p.as_str())?
                .ok_or_else(|| crate::error::refused("the token is not valid"))?;
            Ok((p, row.token_hash))
        })
    })
    .await;
    let (principal, token_hash) = checked.map_err(|e| {
        crate::output::report(&format!("refused sign-in from {ip}: {e:#}"));
        PageError::SignIn("That token is not valid (unknown, revoked or wrong).")
    })?;
    // A sign-in that succeeds is no failure: its count is given back.
    app.attempts
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .give_back(&who);
    let id = app.sessions.open(principal, token_hash);
    Ok(redirect(
        StatusCode::SEE_OTHER,
        "/",
        cookie(&id, app.secure),
    ))
}

#[derive(Deserialize)]
pub(super) struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

pub(super) async fn logout(
    State(app): State<Arc<App>>,
    user: Result<SignedIn, PageError>,
    PageForm(form): PageForm<CsrfForm>,
) -> Result<Response, PageError> {
    let user = user?;
    if !same(&form.csrf, &user.csrf) {
        return Err(PageError::new(
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or wrong",
        ));
    }
    app.sessions.end(&user.session);
    Ok(redirect(StatusCode::SEE_OTHER, "/login", Some(cleared())))
}
