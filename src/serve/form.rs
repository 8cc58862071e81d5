//! The page's forms as a request carries them.

use super::error::PageError;
use axum::extract::{Form, FromRequest, Request};
use axum::http::StatusCode;
use std::time::Duration;

/// The largest form body read (a comment is at most 4,000 characters).
pub(super) const FORM_BYTES: usize = 64 * 1024;
/// A form body must arrive within this once its headers have.
const BODY_TIME: Duration = Duration::from_secs(30);

/// A form body as the page's own forms send it (`application/x-www-form-urlencoded`, each
/// field once, at most `FORM_BYTES`, sent within `BODY_TIME`). Anything else is 400 (413 too
/// large, 408 too slow) with one line saying what, never axum's 415 or 422: README promises
/// 400 for a malformed form.
pub(super) struct PageForm<T>(pub T);

impl<T, S> FromRequest<S> for PageForm<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = PageError;

    async fn from_request(req: Request, state: &S) -> Result<Self, PageError> {
        match tokio::time::timeout(BODY_TIME, Form::<T>::from_request(req, state)).await {
            Ok(Ok(Form(form))) => Ok(PageForm(form)),
            Ok(Err(rejection)) => {
                let status = if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    StatusCode::PAYLOAD_TOO_LARGE
                } else {
                    StatusCode::BAD_REQUEST
                };
                Err(PageError::new(
                    status,
                    format!("not a form of this page: {}", rejection.body_text()),
                ))
            }
            Err(_) => Err(PageError::new(
                StatusCode::REQUEST_TIMEOUT,
                "the form was not sent in time",
            )),
        }
    }
}
