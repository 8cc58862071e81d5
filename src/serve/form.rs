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
        match tokio::time::timeout(BODY_TIME, strict_form::<T, S>(req, state)).await {
            Ok(Ok(form)) => Ok(PageForm(form)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(PageError::new(
                StatusCode::REQUEST_TIMEOUT,
                "the form was not sent in time",
            )),
        }
    }
}

/// The form, read whole first (within the body limit), each of its names and values checked to
/// be UTF-8 once decoded: a byte that is not is refused (400), never read as U+FFFD into what
/// a decision seals. Then decoded as axum's `Form` decodes it.
async fn strict_form<T, S>(req: Request, state: &S) -> Result<T, PageError>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    use axum::body::Bytes;
    use axum::http::header::CONTENT_TYPE;
    let refused = |status: StatusCode, why: String| {
        // Too large stays 413; anything else is a malformed form: 400.
        let status = if status == StatusCode::PAYLOAD_TOO_LARGE {
            status
        } else {
            StatusCode::BAD_REQUEST
        };
        PageError::new(status, format!("not a form of this page: {why}"))
    };
    let (method, content_type) = (
        req.method().clone(),
        req.headers().get(CONTENT_TYPE).cloned(),
    );
    let bytes = Bytes::from_request(req, state)
        .await
        .map_err(|e| refused(e.status(), e.body_text()))?;
    if let Some(field) = not_utf8(&bytes) {
        return Err(refused(
            StatusCode::BAD_REQUEST,
            format!("field {field} is not UTF-8 once decoded"),
        ));
    }
    let mut again = Request::new(axum::body::Body::from(bytes));
    *again.method_mut() = method;
    if let Some(ct) = content_type {
        again.headers_mut().insert(CONTENT_TYPE, ct);
    }
    match Form::<T>::from_request(again, state).await {
        Ok(Form(form)) => Ok(form),
        Err(rejection) => Err(refused(rejection.status(), rejection.body_text())),
    }
}

/// The first field (by its name, as far as it is text) whose name or value is not UTF-8 once
/// percent-decoded, if any.
fn not_utf8(body: &[u8]) -> Option<String> {
    for pair in body.split(|b| *b == b'&') {
        let mut halves = pair.splitn(2, |b| *b == b'=');
        let (name, value) = (
            halves.next().unwrap_or_default(),
            halves.next().unwrap_or_default(),
        );
        let decode = |part: &[u8]| -> Vec<u8> {
            let plus: Vec<u8> = part
                .iter()
                .map(|b| if *b == b'+' { b' ' } else { *b })
                .collect();
            percent_encoding::percent_decode(&plus).collect()
        };
        let (name, value) = (decode(name), decode(value));
        if std::str::from_utf8(&name).is_err() || std::str::from_utf8(&value).is_err() {
            return Some(crate::error::shown(&String::from_utf8_lossy(&name)));
        }
    }
    None
}
