//! What every page shares: the headers every response carries, the page around a body, and
//! text, names and links as a page shows them.

use crate::model::Principal;
use crate::store::GateRow;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};

/// Headers every response carries: nothing from elsewhere, no inline script, no framing, no
/// caching of pages that show a run's state.
pub(super) fn secured(mut r: Response) -> Response {
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        r.headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    r
}

/// One of the page's own files (its style sheet, its script).
pub(super) fn asset(kind: &'static str, body: &'static str) -> Response {
    secured(([(header::CONTENT_TYPE, kind)], body).into_response())
}

/// HTML with this status.
pub(super) fn page(status: StatusCode, markup: Markup) -> Response {
    secured(
        (
            status,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            markup.into_string(),
        )
            .into_response(),
    )
}

/// A redirect to `to`, setting the session cookie `cookie` when given.
pub(super) fn redirect(status: StatusCode, to: &str, cookie: Option<HeaderValue>) -> Response {
    let mut r = (status, [(header::LOCATION, to)]).into_response();
    if let Some(v) = cookie {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    secured(r)
}

/// A page a handler shows (200).
pub(super) struct Page(pub Markup);

impl IntoResponse for Page {
    fn into_response(self) -> Response {
        page(StatusCode::OK, self.0)
    }
}

/// The page around `body`: the navigation, and who is signed in with the sign-out form
/// (which carries the session's CSRF token).
pub(super) fn layout(title: &str, who: Option<(&Principal, &str)>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · prose-state" }
                link rel="stylesheet" href="/style.css";
                script src="/app.js" defer {}
            }
            body {
                header {
                    nav {
                        a href="/" { "Pending gates" }
                        " "
                        a href="/runs" { "Runs" }
                    }
                    @if let Some((p, csrf)) = who {
                        form.logout method="post" action="/logout" {
                            span.who { "Signed in as " strong { (p.as_str()) } }
                            input type="hidden" name="csrf" value=(csrf);
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The sign-in form, under a note saying why it is shown.
pub(super) fn login_form(note: Option<&str>) -> Markup {
    html! {
        h1 { "Sign in" }
        @if let Some(n) = note { p.note { (n) } }
        form method="post" action="/login" {
            label for="token" { "Token (" code { "prose-state principals add NAME" } " printed it)" }
            input #token type="password" name="token" autocomplete="off" required;
            button type="submit" { "Sign in" }
        }
    }
}

/// Text as stored, with what a page would hide or reorder made visible, as every other
/// output of prose-state shows it (`output::visible`: control characters, direction
/// overrides, zero-width characters escaped; line breaks and tabs kept). maud escapes HTML.
pub(super) fn visible(text: &str) -> String {
    crate::output::visible(text).into_owned()
}

/// A path segment, percent-encoded.
pub(super) fn enc(s: &str) -> String {
    crate::output::url_segment(s)
}

/// A gate's page.
pub(super) fn gate_link(g: &GateRow) -> String {
    format!(
        "/runs/{}/gates/{}",
        enc(g.run_id.as_deref().unwrap_or("")),
        enc(&g.id)
    )
}

/// The time a gate has left, in words.
pub(super) fn left(seconds: Option<i64>) -> String {
    match seconds {
        Some(s) => crate::output::human_duration(s),
        None => "no deadline".into(),
    }
}

/// A gate's status as the page shows it (and its live status says it): marked where nothing
/// here attests it or its row is at odds with its sealed log.
pub(super) fn status_shown(status: &crate::model::GateStatus, integrity: &str) -> String {
    match integrity {
        "tampered" | "unattested" => format!("{status} ({})", integrity.to_uppercase()),
        _ => status.to_string(),
    }
}
