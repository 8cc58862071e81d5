//! What a page answers when it cannot do what was asked: the sign-in page (401) to a request
//! nobody signed in, or an error page. An error of the store, the rules or a command is
//! shown with the status of its exit class (`status_of`), so a handler ends its calls in `?`.

use super::layout::{layout, login_form, page, visible};
use crate::error::{code_of, Code};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::html;

pub(super) enum PageError {
    /// Nobody is signed in (no session, one ended, its token revoked or replaced, a token
    /// that is not valid): the sign-in page, under this note.
    SignIn(&'static str),
    /// An error page with this status and message.
    Page(StatusCode, String),
}

impl PageError {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        PageError::Page(status, message.into())
    }
}

/// What asks a visitor to sign in before a page is shown or a form taken.
pub(super) const SIGN_IN: PageError = PageError::SignIn("Sign in with your token to continue.");

/// The status an error of the store or the rules is shown with.
fn status_of(e: &anyhow::Error) -> StatusCode {
    match code_of(e) {
        Some(Code::NotFound) => StatusCode::NOT_FOUND,
        Some(Code::Usage) => StatusCode::BAD_REQUEST,
        Some(Code::Refused) => StatusCode::FORBIDDEN,
        Some(Code::Tampered) | Some(Code::Unattested) => StatusCode::CONFLICT,
        Some(Code::Busy) => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// An error shown with its exit class's status and its whole chain, as the command line
/// prints it.
impl<E: Into<anyhow::Error>> From<E> for PageError {
    fn from(e: E) -> Self {
        let e = e.into();
        PageError::Page(status_of(&e), format!("{e:#}"))
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        match self {
            PageError::SignIn(note) => page(
                StatusCode::UNAUTHORIZED,
                layout("Sign in", None, login_form(Some(note))),
            ),
            PageError::Page(status, message) => page(
                status,
                layout(
                    "Error",
                    None,
                    html! { h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("")) } p.error { (visible(&message)) } },
                ),
            ),
        }
    }
}
