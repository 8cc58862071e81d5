//! Sessions, kept in this process only: an `HttpOnly`, `SameSite=Strict` cookie naming 32
//! random bytes, a CSRF token per session carried by every form, and the token hash the
//! session was opened with, so that a revoked or replaced token ends it (`signin::SignedIn`
//! checks it on every request).

use crate::model::Principal;
use axum::http::{header, HeaderMap, HeaderValue};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The session cookie's name.
const COOKIE: &str = "prose_session";
/// How long a session lasts without being used.
const IDLE: Duration = Duration::from_secs(8 * 3600);

struct Session {
    found: Found,
    used: Instant,
}

/// A session as a request finds it.
#[derive(Clone)]
pub(super) struct Found {
    pub principal: Principal,
    /// The token hash the session was opened with: a revoked or reissued token ends it.
    pub token_hash: String,
    pub csrf: String,
}

/// The sessions open, by id.
#[derive(Default)]
pub(super) struct Sessions(Mutex<HashMap<String, Session>>);

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a session for a principal signed in with the token `token_hash` is the hash
    /// of; returns its id.
    pub(super) fn open(&self, principal: Principal, token_hash: String) -> String {
        let id = random_hex();
        self.lock().insert(
            id.clone(),
            Session {
                found: Found {
                    principal,
                    token_hash,
                    csrf: random_hex(),
                },
                used: Instant::now(),
            },
        );
        id
    }

    /// The session `id` names, used now; None if there is none, or it was idle past `IDLE`
    /// (it is ended).
    pub(super) fn used(&self, id: &str) -> Option<Found> {
        let mut sessions = self.lock();
        let s = sessions.get_mut(id)?;
        if s.used.elapsed() > IDLE {
            sessions.remove(id);
            return None;
        }
        s.used = Instant::now();
        Some(s.found.clone())
    }

    /// The session `id` names, not counted as used (an open event stream does not keep its
    /// session from idling out); None if there is none, or it was idle past `IDLE` (it is
    /// ended).
    pub(super) fn peek(&self, id: &str) -> Option<Found> {
        let mut sessions = self.lock();
        let s = sessions.get(id)?;
        if s.used.elapsed() > IDLE {
            sessions.remove(id);
            return None;
        }
        Some(s.found.clone())
    }

    pub(super) fn end(&self, id: &str) {
        self.lock().remove(id);
    }
}

/// 32 random bytes, in hex.
fn random_hex() -> String {
    crate::model::hex(&rand::random::<[u8; 32]>())
}

/// The session a request's cookie names.
pub(super) fn cookie_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_string())
}

/// The cookie that names session `id`; `Secure` when served over TLS.
pub(super) fn cookie(id: &str, secure: bool) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!(
        "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/{}",
        if secure { "; Secure" } else { "" }
    ))
    .ok()
}

/// The cookie that ends a session in the browser.
pub(super) fn cleared() -> HeaderValue {
    HeaderValue::from_static("prose_session=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
}

/// Compares two secrets in time that does not depend on where they differ.
pub(super) fn same(a: &str, b: &str) -> bool {
    crate::model::same_secret(a, b)
}
