//! `prose-state serve`: the approval page, a binary of its own (`prose-state-serve`, see
//! src/lib.rs) so that no other command carries its runtime or its HTTP code.
//!
//! What it serves, to a person logged in with a principal's token (`principals add`):
//! - `/`: the pending gates of every run of the project, SQLite and server runs alike, read
//!   the way `gates` reads them (the project catalog, one query on PostgreSQL), updated every
//!   2 s by a small script of its own (`/app.js`); the page works without it;
//! - `/runs/{run}/gates/{gate}`: the prompt exactly as stored (escaped, control and
//!   direction characters made visible), its hash, who may decide, `on_reject`, the time
//!   left, the run's recent log and the bindings visible from the gate's execution scope,
//!   with the approve and reject forms;
//! - `/runs` and `/runs/{run}`: each run's status, its log and its gates.
//!
//! A decision is taken by the store's own rules, as the logged-in principal (never a form
//! field), authenticated, and against the prompt hash the page showed: the first decision
//! wins across the web and the command line, and a refused one is audit-logged by the store.
//! Sessions live in this process only: an `HttpOnly`, `SameSite=Strict` cookie naming 32
//! random bytes, a CSRF token per session carried by every form, and the principal's token
//! hash checked again on every request, so a revoked or replaced token ends its sessions.
//! Sign-ins are limited per client address and per principal name, counted before the hash
//! (`Attempts`). A decision form is bound to the gate instance and the view that showed it
//! (`view_tag`); a run in a URL is a run id of this project, never a path (`page_run`); slow
//! clients are closed and connections capped (`accept_loop`).

use crate::cli::{Global, ServeArgs};
use crate::context::Context;
use crate::error::{code_of, Code};
use crate::model::{now, sha256_tag, Principal};
use crate::store::{BindingRow, Decided, Decision, ExecutionRow, GateRow, Store};
use anyhow::{anyhow, Result};
use axum::extract::{ConnectInfo, Form, FromRequest, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use maud::{html, Markup, DOCTYPE};
use rand::RngCore;
use serde::Deserialize;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The session cookie's name.
const COOKIE: &str = "prose_session";
/// How long a session lasts without being used.
const IDLE: Duration = Duration::from_secs(8 * 3600);
/// Sign-ins allowed to fail in `WINDOW` from one client address, and for one principal name
/// (from any number of addresses); more are refused (429) unchecked (`Attempts`).
const FAILURES: u32 = 5;
const NAME_FAILURES: u32 = 10;
const WINDOW: Duration = Duration::from_secs(60);
/// Past this many addresses and names counted, the expired ones are dropped; past
/// `MOST_COUNTED`, sign-ins are refused (429) until some expire: a flood of new addresses or
/// names cannot grow the server's memory without end.
const PRUNE_AT: usize = 10_000;
const MOST_COUNTED: usize = 100_000;
/// Recent log entries shown on a gate's page.
const RECENT: usize = 20;
/// The most records the run page shows (the newest).
const RUN_LOG: usize = 500;
/// A binding's value is shown up to this many bytes; the whole is a link away.
const SHOWN_BYTES: usize = 2048;
/// A value's page shows at most this much of it (`get` reads the rest).
const WHOLE_MOST: u64 = 16 * 1024 * 1024;

const STYLE: &str = include_str!("serve/style.css");
const SCRIPT: &str = include_str!("serve/app.js");

struct Session {
    principal: Principal,
    /// The token hash the session was opened with: a revoked or reissued token ends it.
    token_hash: String,
    csrf: String,
    used: Instant,
}

struct App {
    ctx: Context,
    /// Signs every decision taken here (`sign`).
    signer: crate::services::sign::Signer,
    /// Served over TLS: the session cookie is `Secure`.
    secure: bool,
    sessions: Mutex<HashMap<String, Session>>,
    attempts: Mutex<Attempts>,
    /// The project's principal book on its server, kept open between requests (a connection
    /// each): every request checks its session's token against it. A local book is opened
    /// for each request (see `PrincipalBook::keep_open`).
    books: Mutex<Vec<Box<dyn crate::store::principals::PrincipalBook>>>,
    /// Binds a decision form to the view that showed it (`view_tag`); made at start, so a
    /// form outlives neither its session nor the server.
    view_key: [u8; 32],
}

/// At most this many books are kept open (one per request served at once, up to it).
const BOOKS_KEPT: usize = 8;

impl App {
    /// Runs `read` on a book kept open, or on one opened for it (kept for the next request).
    /// A kept book that fails (a server restarted, a connection dropped) is closed and the
    /// read made once more on a new one.
    fn with_book<T>(
        &self,
        read: impl Fn(&mut dyn crate::store::principals::PrincipalBook) -> Result<T>,
    ) -> Result<T> {
        let kept = self.books.lock().unwrap_or_else(|e| e.into_inner()).pop();
        if let Some(mut book) = kept {
            match read(book.as_mut()) {
                Ok(found) => {
                    self.keep(book);
                    return Ok(found);
                }
                // An answer (a token refused): the book is fine, and the read not made
                // twice (a failed sign-in costs one hash).
                Err(e) if code_of(&e).is_some_and(|c| c != Code::Busy) => {
                    self.keep(book);
                    return Err(e);
                }
                Err(_) => {}
            }
        }
        let mut book = self
            .ctx
            .principal_book(false)?
            .ok_or_else(|| crate::error::refused("this project has no principals"))?;
        let found = read(book.as_mut())?;
        self.keep(book);
        Ok(found)
    }

    fn keep(&self, book: Box<dyn crate::store::principals::PrincipalBook>) {
        if !book.keep_open() {
            return;
        }
        let mut books = self.books.lock().unwrap_or_else(|e| e.into_inner());
        if books.len() < BOOKS_KEPT {
            books.push(book);
        }
    }
}

/// Runs the server until it is killed.
pub fn serve(args: &ServeArgs, _global: &Global, ctx: Context) -> Result<()> {
    let signer = crate::services::sign::Signer::load_or_create()?;
    if args.show_key {
        println!("{}", signer.public);
        return Ok(());
    }
    let addr: SocketAddr = args.listen.parse().map_err(|_| {
        crate::error::usage(format!(
            "--listen is not an address and port (127.0.0.1:7433): {}",
            crate::error::shown(&args.listen)
        ))
    })?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(tls_config(cert, key)?),
        _ => None,
    };
    if !addr.ip().is_loopback() && !args.insecure_http && tls.is_none() {
        return Err(crate::error::usage(format!(
            "--listen {addr} is not a loopback address: tokens and decisions would cross the network in clear; \
             serve HTTPS (--tls-cert and --tls-key), or pass --insecure-http to do it anyway"
        )));
    }
    // The book must exist: nobody could log in otherwise.
    let mut book = ctx.principal_book(false)?.ok_or_else(|| {
        crate::error::refused(
            "this project has no principals, so nobody could log in: `prose-state principals add NAME` issues a token",
        )
    })?;
    if book.principals()?.iter().all(|p| p.revoked_at.is_some()) {
        return Err(crate::error::refused(
            "every principal of this project is revoked, so nobody could log in: `prose-state principals add NAME` issues a token",
        ));
    }
    // A project that pinned another key would accept none of this server's decisions.
    if let Some(pinned) = crate::services::sign::pinned(book.as_mut())? {
        let pinned = crate::services::sign::public_tag(&pinned);
        if pinned != signer.public {
            return Err(crate::error::refused(format!(
                "this server signs with {}, and the project requires decisions signed by {pinned}: \
                 run serve as the user that key belongs to, or pin this one \
                 (`prose-state principals require --signed --key {}`)",
                signer.public, signer.public
            )));
        }
    }
    let app = Arc::new(App {
        ctx,
        signer,
        secure: tls.is_some(),
        sessions: Mutex::new(HashMap::new()),
        attempts: Mutex::new(Attempts::default()),
        books: Mutex::new(Vec::new()),
        view_key: {
            let mut k = [0u8; 32];
            rand::rng().fill_bytes(&mut k);
            k
        },
    });
    app.keep(book);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_io()
        .enable_time()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow!("could not listen on {addr}: {e}"))?;
        let local = listener.local_addr()?;
        if !local.ip().is_loopback() && tls.is_none() {
            crate::output::report(&format!(
                "warning: serving plain HTTP on {local}, not loopback (--insecure-http): anyone on the path can read tokens and sessions"
            ));
        }
        // The one line a script waits for (the port, when --listen asked for port 0).
        let scheme = if tls.is_some() { "https" } else { "http" };
        println!("listening on {scheme}://{local}/");
        let router = Router::new()
            .route("/", get(pending_page))
            .route("/pending", get(pending_rows))
            .route("/login", get(login_page).post(login))
            .route("/logout", post(logout))
            .route("/runs", get(runs_page))
            .route("/runs/{run}", get(run_page))
            .route("/runs/{run}/gates/{gate}", get(gate_page))
            .route("/runs/{run}/gates/{gate}/decide", post(decide))
            .route("/runs/{run}/bindings/{execution}/{name}", get(binding_value))
            .route("/style.css", get(|| async { asset("text/css", STYLE) }))
            .route("/app.js", get(|| async { asset("text/javascript", SCRIPT) }))
            .fallback(|| async { page_error(StatusCode::NOT_FOUND, "no such page") })
            .layer(axum::extract::DefaultBodyLimit::max(FORM_BYTES))
            .with_state(app);
        let limits = Limits {
            connections: args.max_connections as usize,
            header_time: Duration::from_secs(args.header_timeout),
        };
        let tls = tls.map(|config| tokio_rustls::TlsAcceptor::from(Arc::new(config)));
        accept_loop(listener, tls, router, limits).await;
        Ok(())
    })
}

/// What a client may hold of the server: how many connections at once, and how long it
/// may take to send a request's headers (or to finish its TLS handshake).
#[derive(Clone, Copy)]
struct Limits {
    connections: usize,
    header_time: Duration,
}

/// Serves connections until the process is killed: at most `limits.connections` at once (the
/// next waits in the listen queue until one closes, so descriptors are never exhausted),
/// each closed when its request headers, or its TLS handshake, take longer than
/// `limits.header_time` (hyper's header timeout, which also ends a kept-alive connection left
/// idle that long), and a form body bounded too (`PageForm`). So slow clients hold up no one
/// for longer than the header time.
async fn accept_loop(
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    router: Router,
    limits: Limits,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.connections));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(_) => {
                // Out of descriptors, or a connection reset before it was taken.
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let (tls, router) = (tls.clone(), router.clone());
        tokio::spawn(async move {
            match tls {
                None => serve_connection(stream, peer, router, limits).await,
                Some(acceptor) => {
                    let shake = tokio::time::timeout(limits.header_time, acceptor.accept(stream));
                    if let Ok(Ok(stream)) = shake.await {
                        serve_connection(stream, peer, router, limits).await;
                    }
                }
            }
            drop(slot);
        });
    }
}

/// One connection, over HTTP/1.1, with the client's address for the handlers (`Peer`).
async fn serve_connection<S>(stream: S, peer: SocketAddr, router: Router, limits: Limits)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper_util::service::TowerToHyperService::new(router);
    let with_peer =
        hyper::service::service_fn(move |mut req: axum::http::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(ConnectInfo(Peer(peer)));
            hyper::service::Service::call(&service, req)
        });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_time)
        .serve_connection(hyper_util::rt::TokioIo::new(stream), with_peer)
        .await;
}

/// The TLS configuration of `--tls-cert` and `--tls-key` (PEM): a file that is missing is
/// exit 3, one that holds no certificate or key, or a key that does not fit, exit 2.
fn tls_config(cert: &std::path::Path, key: &std::path::Path) -> Result<rustls::ServerConfig> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let shown = |p: &std::path::Path| crate::error::shown(&p.display().to_string());
    let read = |p: &std::path::Path, flag: &str| {
        std::fs::read(p).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                crate::error::not_found(format!("{flag} not found: {}", shown(p)))
            }
            _ => anyhow!("could not read {flag} {}: {e}", shown(p)),
        })
    };
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&read(cert, "--tls-cert")?)
            .collect::<std::result::Result<_, _>>()
            .ok()
            .filter(|c: &Vec<_>| !c.is_empty())
            .ok_or_else(|| {
                crate::error::usage(format!(
                    "--tls-cert holds no PEM certificate: {}",
                    shown(cert)
                ))
            })?;
    let private = PrivateKeyDer::from_pem_slice(&read(key, "--tls-key")?).map_err(|_| {
        crate::error::usage(format!(
            "--tls-key holds no PEM private key: {}",
            shown(key)
        ))
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| anyhow!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, private)
        .map_err(|e| {
            crate::error::usage(format!(
                "--tls-key does not go with --tls-cert ({e}): {}",
                shown(key)
            ))
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The address a connection came from (failed sign-ins are counted by it), over TLS or not.
#[derive(Clone, Copy, Debug)]
struct Peer(SocketAddr);

// ---- responses -------------------------------------------------------------------------

/// Headers every response carries: nothing from elsewhere, no inline script, no framing, no
/// caching of pages that show a run's state.
fn secured(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    secured(([(header::CONTENT_TYPE, kind)], body).into_response())
}

fn page(status: StatusCode, markup: Markup) -> Response {
    secured(
        (
            status,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            markup.into_string(),
        )
            .into_response(),
    )
}

fn layout(title: &str, who: Option<(&Principal, &str)>, body: Markup) -> Markup {
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

fn page_error(status: StatusCode, message: &str) -> Response {
    page(
        status,
        layout(
            "Error",
            None,
            html! { h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("")) } p.error { (visible(message)) } },
        ),
    )
}

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

fn failed(e: &anyhow::Error) -> Response {
    page_error(status_of(e), &format!("{e:#}"))
}

/// Text as stored, with what a page would hide or reorder made visible, as every other
/// output of prose-state shows it (`output::visible`: control characters, direction
/// overrides, zero-width characters escaped; line breaks and tabs kept). maud escapes HTML.
fn visible(text: &str) -> String {
    crate::output::visible(text).into_owned()
}

// ---- sessions ----------------------------------------------------------------------------

fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn cookie_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_string())
}

/// Who is logged in: the session's principal, if its token is still the one the session was
/// opened with (not revoked, not reissued). Otherwise the session is ended.
async fn who(app: &Arc<App>, headers: &HeaderMap) -> Result<(String, Principal, String), Response> {
    let unauthorized = || {
        page(
            StatusCode::UNAUTHORIZED,
            layout(
                "Sign in",
                None,
                login_form(Some("Sign in with your token to continue.")),
            ),
        )
    };
    let id = cookie_of(headers).ok_or_else(unauthorized)?;
    let (principal, hash, csrf) = {
        let mut sessions = app.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let s = sessions.get_mut(&id).ok_or_else(unauthorized)?;
        if s.used.elapsed() > IDLE {
            sessions.remove(&id);
            return Err(unauthorized());
        }
        s.used = Instant::now();
        (s.principal.clone(), s.token_hash.clone(), s.csrf.clone())
    };
    let app2 = app.clone();
    let name = principal.as_str().to_string();
    let live = blocking(move || {
        app2.with_book(|book| {
            Ok(book
                .principal(&name)?
                .is_some_and(|row| row.revoked_at.is_none() && row.token_hash == hash))
        })
    })
    .await;
    // A book gone (removed by hand) authenticates nobody: the session ends, as on revocation.
    let live = match live {
        Ok(live) => live,
        Err(e) if code_of(&e) == Some(Code::Refused) => false,
        Err(e) => return Err(failed(&e)),
    };
    if !live {
        app.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        return Err(unauthorized());
    }
    Ok((id, principal, csrf))
}

/// What a page says of a run it cannot show, whatever the reason: not a run id, no such run
/// here or on the project's server, or a path that exists elsewhere. One body for all, so
/// that a URL learns nothing of what exists.
const NO_SUCH_RUN: &str = "no such run";

/// The run a URL's `{run}` segment names: a run id of this project (a directory under its
/// `.prose/runs/`, or a run on its server), never a path. The command line's lookup
/// (`Context::open_run`) also takes a directory or a state.db path, so a URL reaching it
/// could decide a gate of another project; every page resolves its run here instead.
fn page_run(ctx: &Context, run: &str) -> Result<(crate::run::RunPaths, Box<dyn Store>)> {
    let gone = || crate::error::not_found(NO_SUCH_RUN);
    crate::model::check_run_id(run).map_err(|_| gone())?;
    let paths = crate::run::RunPaths::in_dir(ctx.runs_dir().join(run));
    match ctx.open(&paths) {
        Ok(store) => Ok((paths, store)),
        Err(e) if code_of(&e) == Some(Code::NotFound) => Err(gone()),
        Err(e) => Err(e),
    }
}

/// Runs blocking store work off the server's threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| anyhow!("a request failed: {e}"))?
}

fn login_form(note: Option<&str>) -> Markup {
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

async fn login_page() -> Response {
    page(StatusCode::OK, layout("Sign in", None, login_form(None)))
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

async fn login(
    State(app): State<Arc<App>>,
    ConnectInfo(Peer(peer)): ConnectInfo<Peer>,
    PageForm(form): PageForm<LoginForm>,
) -> Response {
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
        return page_error(
            StatusCode::TOO_MANY_REQUESTS,
            "too many failed sign-ins from this address or for this principal: wait a minute",
        );
    }
    let app2 = app.clone();
    let checked = blocking(move || {
        app2.with_book(|book| {
            let p = crate::services::auth::authenticate(book, &token)?;
            let row = book
                .principal(p.as_str())?
                .ok_or_else(|| crate::error::refused("the token is not valid"))?;
            Ok((p, row.token_hash))
        })
    })
    .await;
    match checked {
        Ok((principal, token_hash)) => {
            // A sign-in that succeeds is no failure: its count is given back.
            app.attempts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .give_back(&who);
            let id = random_hex(32);
            app.sessions
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(
                    id.clone(),
                    Session {
                        principal,
                        token_hash,
                        csrf: random_hex(32),
                        used: Instant::now(),
                    },
                );
            let mut r = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
            if let Ok(v) = HeaderValue::from_str(&format!(
                "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/{}",
                if app.secure { "; Secure" } else { "" }
            )) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            secured(r)
        }
        Err(e) => {
            crate::output::report(&format!("refused sign-in from {ip}: {e:#}"));
            page(
                StatusCode::UNAUTHORIZED,
                layout(
                    "Sign in",
                    None,
                    login_form(Some("That token is not valid (unknown, revoked or wrong).")),
                ),
            )
        }
    }
}

/// Who a sign-in attempt is counted against: its client's address (an IPv6 client by its
/// /64, which one machine usually holds whole), and the principal name its token claims (by
/// hash: a name of any length costs the same to keep).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Attempter {
    Address(IpAddr),
    Name([u8; 32]),
}

/// Sign-in attempts within `WINDOW` of each attempter's first: each one is counted when it
/// begins, before its token is hashed, and given back if it succeeds. At its limit an
/// attempter is refused unchecked until the window ends.
#[derive(Default)]
struct Attempts {
    counted: HashMap<Attempter, (u32, Instant)>,
}

impl Attempts {
    /// The attempters of a sign-in from `ip` with `token`, each with its limit.
    fn keys(ip: IpAddr, token: &str) -> Vec<(Attempter, u32)> {
        use sha2::Digest;
        let address = match ip {
            IpAddr::V4(_) => ip,
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(std::net::Ipv6Addr::from(
                    u128::from(v6) & !((1u128 << 64) - 1),
                )),
            },
        };
        let mut keys = vec![(Attempter::Address(address), FAILURES)];
        // The name as `auth::authenticate` reads it: before the token's last dot.
        if let Some((name, _)) = token.trim().rsplit_once('.').filter(|(n, _)| !n.is_empty()) {
            let hash: [u8; 32] = sha2::Sha256::digest(name.as_bytes()).into();
            keys.push((Attempter::Name(hash), NAME_FAILURES));
        }
        keys
    }

    /// Counts an attempt against each of `keys`, unless one of them is at its limit (or too
    /// many are counted already): then nothing is counted, and the attempt is refused.
    fn begin(&mut self, keys: &[(Attempter, u32)], now: Instant) -> bool {
        if self.counted.len() >= PRUNE_AT {
            self.counted
                .retain(|_, (_, since)| now.duration_since(*since) <= WINDOW);
        }
        let live = |c: &(u32, Instant)| now.duration_since(c.1) <= WINDOW;
        let limited = keys
            .iter()
            .any(|(k, most)| self.counted.get(k).is_some_and(|c| live(c) && c.0 >= *most));
        if limited || self.counted.len() + keys.len() > MOST_COUNTED {
            return false;
        }
        for (k, _) in keys {
            let c = self.counted.entry(*k).or_insert((0, now));
            if !live(c) {
                *c = (0, now);
            }
            c.0 += 1;
        }
        true
    }

    /// Gives back the attempt `begin` counted against each of `keys` (it succeeded).
    fn give_back(&mut self, keys: &[(Attempter, u32)]) {
        for (k, _) in keys {
            if let Some(c) = self.counted.get_mut(k) {
                c.0 = c.0.saturating_sub(1);
            }
        }
    }
}

#[derive(Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

async fn logout(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    PageForm(form): PageForm<CsrfForm>,
) -> Response {
    let (id, _, csrf) = match who(&app, &headers).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    if !same(&form.csrf, &csrf) {
        return page_error(
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or wrong",
        );
    }
    app.sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&id);
    let mut r = (StatusCode::SEE_OTHER, [(header::LOCATION, "/login")]).into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("prose_session=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"),
    );
    secured(r)
}

/// A form body as the page's own forms send it (`application/x-www-form-urlencoded`, each
/// field once, at most `FORM_BYTES`, sent within `BODY_TIME`). Anything else is 400 (413 too
/// large, 408 too slow) with one line saying what, never axum's 415 or 422: README promises
/// 400 for a malformed form.
struct PageForm<T>(T);

/// The largest form body read (a comment is at most 4,000 characters).
const FORM_BYTES: usize = 64 * 1024;
/// A form body must arrive within this once its headers have.
const BODY_TIME: Duration = Duration::from_secs(30);

impl<T, S> FromRequest<S> for PageForm<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Response> {
        match tokio::time::timeout(BODY_TIME, Form::<T>::from_request(req, state)).await {
            Ok(Ok(Form(form))) => Ok(PageForm(form)),
            Ok(Err(rejection)) => {
                let status = if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    StatusCode::PAYLOAD_TOO_LARGE
                } else {
                    StatusCode::BAD_REQUEST
                };
                Err(page_error(
                    status,
                    &format!("not a form of this page: {}", rejection.body_text()),
                ))
            }
            Err(_) => Err(page_error(
                StatusCode::REQUEST_TIMEOUT,
                "the form was not sent in time",
            )),
        }
    }
}

/// Compares two secrets in time that does not depend on where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

// ---- pages -------------------------------------------------------------------------------

fn gate_link(g: &GateRow) -> String {
    format!(
        "/runs/{}/gates/{}",
        enc(g.run_id.as_deref().unwrap_or("")),
        enc(&g.id)
    )
}

/// A path segment, percent-encoded.
fn enc(s: &str) -> String {
    crate::output::url_segment(s)
}

fn left(seconds: Option<i64>) -> String {
    match seconds {
        Some(s) => crate::output::human_duration(s),
        None => "no deadline".into(),
    }
}

fn pending_table(list: &crate::cmd::gates::GateList) -> Markup {
    html! {
        table #pending {
            thead { tr { th { "Run" } th { "Gate" } th { "Prompt" } th { "May decide" } th { "Time left" } th { "Created" } } }
            tbody {
                @if list.gates.is_empty() {
                    tr { td colspan="6" { "Nothing is waiting." } }
                }
                @for g in &list.gates {
                    tr {
                        td { (visible(g.gate.run_id.as_deref().unwrap_or("-"))) }
                        td { a href=(gate_link(&g.gate)) { (visible(&g.gate.id)) } }
                        td { (visible(&crate::output::one_line(&g.gate.prompt, 80))) }
                        td { (visible(&g.gate.allow.join(", "))) }
                        td data-deadline=[g.gate.timeout_at.as_deref()] { (left(g.time_left_seconds)) }
                        td { (g.gate.created_at.as_deref().unwrap_or("-")) }
                    }
                }
            }
        }
        @if !list.warnings.is_empty() {
            ul.warnings { @for w in &list.warnings { li { (visible(w)) } } }
        }
    }
}

async fn pending_list(app: &Arc<App>) -> Result<crate::cmd::gates::GateList> {
    let app = app.clone();
    blocking(move || {
        let args = crate::cli::GatesListArgs {
            status: crate::cli::GateStatus::Pending,
            pending: true,
            expiring: None,
            scan: false,
            limit: Some(500),
        };
        crate::cmd::gates::list(&args, &app.ctx)
    })
    .await
}

async fn pending_page(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let (_, principal, csrf) = match who(&app, &headers).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    match pending_list(&app).await {
        Ok(list) => page(
            StatusCode::OK,
            layout(
                "Pending gates",
                Some((&principal, &csrf)),
                html! {
                    h1 { "Pending gates" }
                    p.note { "Oldest first. This list refreshes itself every 2 seconds." }
                    div #live data-src="/pending" { (pending_table(&list)) }
                },
            ),
        ),
        Err(e) => failed(&e),
    }
}

/// The pending list alone, for the page's script to swap in.
async fn pending_rows(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(r) = who(&app, &headers).await {
        return r;
    }
    match pending_list(&app).await {
        Ok(list) => page(StatusCode::OK, pending_table(&list)),
        Err(e) => failed(&e),
    }
}

async fn runs_page(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let (_, principal, csrf) = match who(&app, &headers).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let app2 = app.clone();
    let runs = blocking(move || {
        let args = crate::cli::RunsArgs {
            status: None,
            limit: 200,
            since: None,
            scan: false,
        };
        crate::cmd::runs::run(&args, &app2.ctx)
    })
    .await;
    match runs {
        Ok(list) => page(
            StatusCode::OK,
            layout(
                "Runs",
                Some((&principal, &csrf)),
                html! {
                    h1 { "Runs" }
                    table {
                        thead { tr { th { "Run" } th { "Status" } th { "Program" } th { "Started" } th { "Last event" } th { "Pending gates" } } }
                        tbody {
                            @for r in &list.runs {
                                tr {
                                    td { a href=(format!("/runs/{}", enc(&r.run.id))) { (visible(&r.run.id)) } }
                                    td { (r.run.status.as_ref().map_or("-", |s| s.as_str())) }
                                    td { (visible(r.run.program_path.as_deref().unwrap_or("-"))) }
                                    td { (r.run.started_at.as_deref().unwrap_or("-")) }
                                    td { (r.last_event_at.as_deref().unwrap_or("-")) }
                                    td { (r.pending_gates) }
                                }
                            }
                        }
                    }
                    @if !list.warnings.is_empty() {
                        ul.warnings { @for w in &list.warnings { li { (visible(w)) } } }
                    }
                },
            ),
        ),
        Err(e) => failed(&e),
    }
}

fn log_table(rows: &[ExecutionRow]) -> Markup {
    html! {
        table {
            thead { tr { th { "#" } th { "Statement" } th { "Status" } th { "At" } th { "Parent" } } }
            tbody {
                @for e in rows {
                    tr {
                        td { (e.id) }
                        td { (visible(&crate::output::one_line(e.statement_text.as_deref().unwrap_or("-"), 100))) }
                        td { (e.status.as_ref().map_or("-".to_string(), |s| s.to_string())) }
                        td { (e.at().unwrap_or("-")) }
                        td { (e.parent_id.map_or("-".to_string(), |p| p.to_string())) }
                    }
                }
            }
        }
    }
}

struct RunView {
    info: crate::store::RunInfo,
    log: Vec<ExecutionRow>,
    gates: Vec<GateRow>,
}

async fn run_page(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(run): Path<String>,
) -> Response {
    let (_, principal, csrf) = match who(&app, &headers).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let app2 = app.clone();
    let view = blocking(move || {
        let (_, mut store) = page_run(&app2.ctx, &run)?;
        let now = now();
        Ok(RunView {
            info: store.run_info()?,
            // The newest records, one more than shown, to know whether any were left out.
            log: {
                let mut log = store.executions_matching(&crate::store::ExecQuery {
                    newest_first: true,
                    limit: Some(RUN_LOG as i64 + 1),
                    ..Default::default()
                })?;
                log.reverse();
                log
            },
            gates: store.gates(None, &now)?,
        })
    })
    .await;
    let v = match view {
        Ok(v) => v,
        Err(e) => return failed(&e),
    };
    page(
        StatusCode::OK,
        layout(
            &v.info.id,
            Some((&principal, &csrf)),
            html! {
                h1 { "Run " (visible(&v.info.id)) }
                dl {
                    dt { "Status" } dd { (v.info.status.as_ref().map_or("-", |s| s.as_str())) }
                    dt { "Program" } dd { (visible(v.info.program_path.as_deref().unwrap_or("-"))) }
                    dt { "Started" } dd { (v.info.started_at.as_deref().unwrap_or("-")) }
                    dt { "Updated" } dd { (v.info.updated_at.as_deref().unwrap_or("-")) }
                }
                h2 { "Gates" }
                table {
                    thead { tr { th { "Gate" } th { "Status" } th { "Decided by" } th { "Prompt" } } }
                    tbody {
                        @for g in &v.gates {
                            tr {
                                td { a href=(gate_link(g)) { (visible(&g.id)) } }
                                td { (g.status.to_string()) }
                                td { (visible(g.resolved_by.as_deref().unwrap_or("-"))) }
                                td { (visible(&crate::output::one_line(&g.prompt, 80))) }
                            }
                        }
                    }
                }
                h2 { "Execution log" }
                @if v.log.len() > RUN_LOG {
                    p { "The newest " (RUN_LOG) " records; the whole log: "
                        code { "prose-state log --run " (visible(&v.info.id)) } }
                }
                (log_table(&v.log[v.log.len().saturating_sub(RUN_LOG)..]))
            },
        ),
    )
}

struct GateViewData {
    shown: crate::cmd::gates::GateShown,
    recent: Vec<ExecutionRow>,
    bindings: Vec<BindingRow>,
}

/// The bindings a gate's execution sees: for each name, the one nearest its scope (the root
/// scope last); every root binding for a gate with no execution. Only the rows of the scope
/// chain and the root are read (`bindings_page`, as `resume` reads them); the nearest of
/// each name is chosen here, as `resume` chooses it, since the store has no read of every
/// name's nearest binding (`resolve` finds one name's).
fn visible_bindings(store: &mut dyn Store, execution: Option<i64>) -> Result<Vec<BindingRow>> {
    // An execution that does not exist has no chain: the root alone.
    let chain = match execution {
        Some(id) => store.scope_chain(id)?,
        None => Vec::new(),
    };
    let mut best: HashMap<String, (usize, BindingRow)> = HashMap::new();
    for b in store.bindings_page(&chain, None, i64::MAX)? {
        let rank = match b.execution_id {
            None => chain.len(),
            Some(e) => match chain.iter().position(|c| *c == e) {
                Some(i) => i,
                None => continue,
            },
        };
        match best.get(&b.name) {
            Some((r, _)) if *r <= rank => {}
            _ => {
                best.insert(b.name.clone(), (rank, b));
            }
        }
    }
    let mut out: Vec<BindingRow> = best.into_values().map(|(_, b)| b).collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

async fn gate_page(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path((run, gate)): Path<(String, String)>,
) -> Response {
    let (session, principal, csrf) = match who(&app, &headers).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let app2 = app.clone();
    let viewer = principal.as_str().to_string();
    let data = blocking(move || {
        let (_, mut store) = page_run(&app2.ctx, &run)?;
        let shown = crate::cmd::gates::show_to(&gate, Some(&viewer), "web", store.as_mut())?;
        // The newest records only, read newest first and put back in order.
        let mut recent = store.executions_matching(&crate::store::ExecQuery {
            newest_first: true,
            limit: Some(RECENT as i64),
            ..Default::default()
        })?;
        recent.reverse();
        let bindings = visible_bindings(store.as_mut(), shown.gate.gate.execution_id)?;
        Ok(GateViewData {
            shown,
            recent,
            bindings,
        })
    })
    .await;
    match data {
        Ok(d) => {
            let g = &d.shown.gate.gate;
            let view = view_tag(
                &app.view_key,
                &session,
                g.run_id.as_deref().unwrap_or(""),
                &g.id,
                g.instance,
                &sha256_tag(&g.prompt),
            );
            page(StatusCode::OK, gate_markup(&d, &principal, &csrf, &view))
        }
        Err(e) => failed(&e),
    }
}

/// What binds a decision form to the view that showed it: a MAC, under the server's
/// `view_key`, of the session, the run, the gate, its instance and its prompt's hash. A form
/// carries the instance and this tag; a decision is taken only on that instance (the store
/// refuses another, in the decision's own transaction), so a form replayed after the gate
/// was reopened, with the same prompt or not, decides nothing.
fn view_tag(
    key: &[u8; 32],
    session: &str,
    run: &str,
    gate: &str,
    instance: i64,
    prompt_hash: &str,
) -> String {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key");
    for part in [session, run, gate, &instance.to_string(), prompt_hash] {
        // Each part with its length: no two tuples give the same input.
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part.as_bytes());
    }
    crate::model::hex(&mac.finalize().into_bytes())
}

fn gate_markup(d: &GateViewData, principal: &Principal, csrf: &str, view: &str) -> Markup {
    let g = &d.shown.gate.gate;
    let run = g.run_id.as_deref().unwrap_or("");
    let hash = sha256_tag(&g.prompt);
    let may = crate::model::principal_allowed(&g.allow, principal);
    let action = format!("{}/decide", gate_link(g));
    layout(
        &g.id,
        Some((principal, csrf)),
        html! {
            p { a href=(format!("/runs/{}", enc(run))) { "Run " (visible(run)) } }
            h1 { "Gate " (visible(&g.id)) }
            dl {
                dt { "Status" } dd #status { (g.status.to_string()) }
                dt { "May decide" } dd { (visible(&g.allow.join(", "))) }
                dt { "On reject" } dd { (visible(g.on_reject.as_deref().unwrap_or("-"))) }
                dt { "Deadline" } dd {
                    (g.timeout_at.as_deref().unwrap_or("none"))
                    @if g.status.is_pending() && g.timeout_at.is_some() {
                        " (" span #countdown data-deadline=[g.timeout_at.as_deref()] { (left(d.shown.gate.time_left_seconds)) } " left)"
                    }
                }
                dt { "Created" } dd { (g.created_at.as_deref().unwrap_or("-")) }
                @if let Some(by) = &g.resolved_by {
                    dt { "Decided by" } dd #decided-by { (visible(by)) " at " (g.resolved_at.as_deref().unwrap_or("-")) }
                    dt { "Comment" } dd { (visible(g.resolution_comment.as_deref().unwrap_or("-"))) }
                }
                dt { "Audit" } dd { (d.shown.integrity.state) (d.shown.integrity.detail.as_deref().map(|x| format!(": {x}")).unwrap_or_default()) }
            }
            h2 { "Prompt" }
            pre #prompt { (visible(&g.prompt)) }
            p.hash { "SHA-256 of the prompt: " code #prompt-hash { (hash) } }
                        @if g.status.is_pending() && d.shown.integrity.state == "tampered" {
                // The gate as re-derived from its sealed log disagrees with its row: no form.
                p.note #tampered { "This gate disagrees with its sealed log; it cannot be decided here." }
            } @else if g.status.is_pending() {
                @if may {
                    div.decide {
                        form #approve method="post" action=(action) {
                            input type="hidden" name="csrf" value=(csrf);
                            input type="hidden" name="prompt_hash" value=(hash);
                            input type="hidden" name="instance" value=(g.instance);
                            input type="hidden" name="view" value=(view);
                            input type="hidden" name="action" value="approve";
                            label for="approve-comment" { "Comment (optional)" }
                            input #approve-comment type="text" name="comment" maxlength="4000";
                            button type="submit" { "Approve as " (principal.as_str()) }
                        }
                        form #reject method="post" action=(action) {
                            input type="hidden" name="csrf" value=(csrf);
                            input type="hidden" name="prompt_hash" value=(hash);
                            input type="hidden" name="instance" value=(g.instance);
                            input type="hidden" name="view" value=(view);
                            input type="hidden" name="action" value="reject";
                            label for="reject-reason" { "Reason (required)" }
                            input #reject-reason type="text" name="comment" maxlength="4000" required;
                            button type="submit" { "Reject as " (principal.as_str()) }
                        }
                    }
                } @else {
                    p.note { (principal.as_str()) " may not decide this gate." }
                }
            }
            h2 { "Bindings in scope" }
            @if d.bindings.is_empty() { p { "None." } }
            @for b in &d.bindings {
                (binding_markup(run, b))
            }
            h2 { "Recent log" }
            (log_table(&d.recent))
            h2 { "History" }
            table {
                thead { tr { th { "Event" } th { "Principal" } th { "Comment" } th { "At" } } }
                tbody {
                    @for a in &d.shown.history {
                        tr {
                            td { (visible(&a.event_type)) }
                            td { (visible(a.principal.as_deref().unwrap_or("-"))) }
                            td { (visible(a.comment.as_deref().unwrap_or("-"))) }
                            td { (a.timestamp.as_deref().unwrap_or("-")) }
                        }
                    }
                }
            }
        },
    )
}

fn binding_markup(run: &str, b: &BindingRow) -> Markup {
    let scope = b.execution_id.map_or("root".to_string(), |e| e.to_string());
    let link = format!("/runs/{}/bindings/{}/{}", enc(run), scope, enc(&b.name));
    html! {
        section.binding {
            h3 { (visible(&b.name)) " " small { "(" (b.kind.as_deref().unwrap_or("let")) ", scope " (scope) ")" } }
            @match (&b.value, &b.attachment_path) {
                (_, Some(path)) => p { "In an attachment: " code { (visible(path)) } " · " a href=(link) { "the whole value" } },
                (Some(v), None) => {
                    @let text = String::from_utf8_lossy(v);
                    @if v.len() > SHOWN_BYTES {
                        @let cut = text.char_indices().take_while(|(i, _)| *i < SHOWN_BYTES).last().map_or(0, |(i, c)| i + c.len_utf8());
                        pre { (visible(&text[..cut])) }
                        p.note { "Truncated at " (SHOWN_BYTES) " of " (v.len()) " bytes · " a href=(link) { "the whole value" } }
                    } @else {
                        pre { (visible(&text)) }
                    }
                },
                (None, None) => p { "(no value)" },
            }
        }
    }
}

/// A binding's whole value, as plain text that a browser never runs or renders.
async fn binding_value(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path((run, execution, name)): Path<(String, String, String)>,
) -> Response {
    if let Err(r) = who(&app, &headers).await {
        return r;
    }
    let execution = if execution == "root" {
        None
    } else {
        match execution.parse::<i64>() {
            Ok(n) => Some(n),
            Err(_) => return page_error(StatusCode::NOT_FOUND, "no such scope"),
        }
    };
    let app2 = app.clone();
    let value = blocking(move || {
        let (paths, mut store) = page_run(&app2.ctx, &run)?;
        // The binding at exactly that scope: its own scope is the nearest to it.
        if !store
            .bindings()?
            .iter()
            .any(|b| b.name == name && b.execution_id == execution)
        {
            return Err(crate::error::not_found("no such binding"));
        }
        let args = crate::cli::GetArgs {
            name,
            execution_id: execution,
            explain: false,
            offset: Some(0),
            length: Some(WHOLE_MOST),
        };
        let got = crate::cmd::get::run(&args, &paths, store.as_mut())?;
        Ok(got.row.value.unwrap_or_default())
    })
    .await;
    match value {
        Ok(v) => {
            let mut r =
                secured(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], v).into_response());
            r.headers_mut().insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static("sandbox; default-src 'none'"),
            );
            r
        }
        Err(e) => failed(&e),
    }
}

#[derive(Deserialize)]
struct DecideForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    comment: String,
    #[serde(default)]
    prompt_hash: String,
    /// The gate instance the page showed, and the view's tag over it (`view_tag`).
    #[serde(default)]
    instance: String,
    #[serde(default)]
    view: String,
}

/// What a decision posted to the page came to, before it is put in words.
enum Posted {
    /// Refused by the page itself (a CSRF token or a form it did not show), and whether
    /// the refusal was recorded on the gate.
    Refused(&'static str, bool),
    /// The store's answer.
    Decided(Box<Decided>),
}
async fn decide(
    State(app): State<Arc<App>>,
    ConnectInfo(Peer(peer)): ConnectInfo<Peer>,
    headers: HeaderMap,
    Path((run, gate)): Path<(String, String)>,
    PageForm(form): PageForm<DecideForm>,
) -> Response {
    let (session, principal, csrf) = match who(&app, &headers).await {
        Ok(w) => w,
        Err(r) => {
            crate::output::report(&format!(
                "refused a decision without a session from {}: run {}, gate {}",
                peer.ip(),
                crate::error::shown(&run),
                crate::error::shown(&gate)
            ));
            return r;
        }
    };
    let approve = match form.action.as_str() {
        "approve" => true,
        "reject" => false,
        _ => return page_error(StatusCode::BAD_REQUEST, "the action is approve or reject"),
    };
    let comment = form.comment.trim().to_string();
    let (app2, who2, run2, gate2) = (app.clone(), principal.clone(), run.clone(), gate.clone());
    let posted = blocking(move || {
        // The run first: a URL naming no run of this project learns nothing more.
        let (_, mut store) = page_run(&app2.ctx, &run2)?;
        crate::model::check_gate_id(&gate2)?;
        // The form must carry this session's CSRF token, and be one this page showed, in
        // this session, for this gate instance and prompt (`view_tag`): otherwise the
        // attempt is refused and audit-logged on the gate as the signed-in principal, like
        // the store's own refusals. (An attempt without a session is not: anyone who can
        // reach the page could fill a run's append-only log; serve's log reports it.)
        let shown = form.instance.parse::<i64>().ok().filter(|i| {
            same(
                &form.view,
                &view_tag(
                    &app2.view_key,
                    &session,
                    &run2,
                    &gate2,
                    *i,
                    &form.prompt_hash,
                ),
            )
        });
        let refusal = if !same(&form.csrf, &csrf) {
            Some("the form's CSRF token is missing or wrong")
        } else {
            crate::cmd::decide::reason_given(approve, Some(&comment), None)?;
            if shown.is_none() {
                Some("the form is not one this page showed for this gate")
            } else {
                None
            }
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
            return Ok(Posted::Refused(reason, recorded));
        }
        let decision = Decision {
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
            now: &now(),
            signer: Some(&app2.signer),
        };
        Ok(Posted::Decided(Box::new(store.decide_gate(&decision)?)))
    })
    .await;
    let decided = match posted {
        Ok(Posted::Decided(d)) => *d,
        Ok(Posted::Refused(reason, recorded)) => {
            return page_error(
                StatusCode::FORBIDDEN,
                &format!(
                    "{reason}: reload the gate's page{}",
                    if recorded {
                        "; this attempt was logged"
                    } else {
                        ""
                    }
                ),
            )
        }
        Err(e) => return failed(&e),
    };
    // The command line's words; a lost race, a changed prompt or a reopened gate is a
    // conflict.
    let status = match &decided {
        Decided::Done(_) => StatusCode::SEE_OTHER,
        Decided::NotFound => StatusCode::NOT_FOUND,
        Decided::NotAllowed(_) => StatusCode::FORBIDDEN,
        _ => StatusCode::CONFLICT,
    };
    match crate::cmd::decide::outcome(decided, &principal, &run, &gate) {
        Ok(_) => secured(
            (
                status,
                [(
                    header::LOCATION,
                    format!("/runs/{}/gates/{}", enc(&run), enc(&gate)),
                )],
            )
                .into_response(),
        ),
        Err(e) => page_error(status, &format!("{e:#}")),
    }
}
