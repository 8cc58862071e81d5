//! `prose-state serve`: the approval page, a binary of its own (`prose-state-serve`, see
//! src/lib.rs) so that no other command carries its runtime or its HTTP code.
//!
//! What it serves, to a person logged in with a principal's token (`principals add`):
//! - `/`: the pending gates of every run of the project, SQLite and server runs alike, read
//!   the way `gates` reads them (the project catalog, one query on PostgreSQL), read again by
//!   a small script of its own (`/app.js`) at each change its event stream (`/events`) hears,
//!   or every 2 s without one; the page works without it;
//! - `/runs/{run}/gates/{gate}`: the prompt exactly as stored (escaped, control and
//!   direction characters made visible), its hash, who may decide, `on_reject`, the time
//!   left, the run's recent log and the bindings visible from the gate's execution scope,
//!   with the approve and reject forms;
//! - `/runs` and `/runs/{run}`: each run's status, its log and its gates.
//!
//! An ordinary axum application: a handler takes `signin::SignedIn` (an extractor whose
//! rejection is the sign-in page) and returns `Result<_, error::PageError>` (which shows an
//! error with the status of its exit class), so it ends its calls in `?`. Each file's header
//! says what it holds: `app.rs` (the state; `page_run`: a run in a URL is a run id of this
//! project, never a path), `session.rs` and `signin.rs` (sessions, signing in and out),
//! `limits.rs` (sign-in attempts), `listen.rs` and `tls.rs` (connections, HTTPS), `layout.rs`,
//! `error.rs` and `form.rs` (what every page shares), `pages.rs` (the pages) and `decide.rs`
//! (the decision, taken by the store's own rules as the signed-in principal, never a form
//! field, against the prompt hash and the gate instance the page showed: the first decision
//! wins across the web and the command line, and a refused one is audit-logged).

mod answer;
mod app;
mod decide;
mod error;
mod form;
mod gate;
mod layout;
mod limits;
mod listen;
mod pages;
mod session;
mod signin;
mod tls;

use crate::cli::{Global, ServeArgs};
use crate::context::Context;
use anyhow::{anyhow, Result};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

const STYLE: &str = include_str!("style.css");
const SCRIPT: &str = include_str!("app.js");

/// Runs the server until it is killed.
pub fn serve(args: &ServeArgs, _global: &Global, ctx: Context) -> Result<()> {
    let signer = crate::services::sign::Signer::load_or_create(ctx.opts.wiring)?;
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
        (Some(cert), Some(key)) => Some(tls::config(cert, key)?),
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
                 run serve as the user that key belongs to (whose `prose-state principals require --signed` \
                 may pin another)",
                signer.public
            )));
        }
    } else if let Ok(Some(why)) = crate::store::principals::book_state(book.as_mut())
        .map(|s| s.ok().and_then(|s| s.unchecked))
    {
        crate::output::warn(&format!(
            "{why}: tokens are read from the principals book's log as it chains, which holds against no one who can write the book; pin this server's key, as this user (`prose-state principals require --signed`), so that only its holder changes the book"
        ));
    }
    // Every decision the page signs names the project's place, so it stands in no other.
    let mut signer = signer;
    signer.place = Some(ctx.signature_place(true)?.ok_or_else(|| {
        anyhow!("the project's place has no identity for the page's signatures to name")
    })?);
    let app = Arc::new(app::App::new(ctx, signer, tls.is_some()));
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
        let limits = listen::Limits {
            connections: args.max_connections as usize,
            header_time: Duration::from_secs(args.header_timeout),
        };
        let tls = tls.map(|config| tokio_rustls::TlsAcceptor::from(Arc::new(config)));
        listen::accept_loop(listener, tls, router(app), limits).await;
        Ok(())
    })
}

/// The page's routes.
fn router(app: Arc<app::App>) -> Router {
    Router::new()
        .route("/", get(pages::pending_page))
        .route("/pending", get(pages::pending_rows))
        .route("/events", get(pages::pending_events))
        .route("/login", get(signin::login_page).post(signin::login))
        .route("/logout", post(signin::logout))
        .route("/runs", get(pages::runs_page))
        .route("/runs/{run}", get(pages::run_page))
        .route("/runs/{run}/gates/{gate}", get(gate::gate_page))
        .route("/runs/{run}/gates/{gate}/decide", post(decide::decide))
        .route("/runs/{run}/events", get(pages::run_events))
        .route("/runs/{run}/gates/{gate}/status", get(pages::gate_status))
        .route(
            "/runs/{run}/bindings/{execution}/{name}",
            get(pages::binding_value),
        )
        .route(
            "/style.css",
            get(|| async { layout::asset("text/css", STYLE) }),
        )
        .route(
            "/app.js",
            get(|| async { layout::asset("text/javascript", SCRIPT) }),
        )
        .fallback(|| async { error::PageError::new(StatusCode::NOT_FOUND, "no such page") })
        .layer(axum::extract::DefaultBodyLimit::max(form::FORM_BYTES))
        .with_state(app)
}
