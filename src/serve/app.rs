//! The server's state, which every handler is given: the project, the signing key, the
//! sessions and sign-in counts, the principal books kept open; and how a handler reaches a
//! run and the store.

use super::limits::Attempts;
use super::session::Sessions;
use crate::context::Context;
use crate::error::{code_of, Code};
use crate::store::principals::PrincipalBook;
use crate::store::Store;
use anyhow::{anyhow, Result};
use std::sync::{Arc, Mutex};

pub(super) struct App {
    pub ctx: Context,
    /// Signs every decision taken here (`sign`).
    pub signer: crate::services::sign::Signer,
    /// Served over TLS: the session cookie is `Secure`.
    pub secure: bool,
    pub sessions: Sessions,
    pub attempts: Mutex<Attempts>,
    /// The project's principal book on its server, kept open between requests (a connection
    /// each): every request checks its session's token against it. A local book is opened
    /// for each request (see `PrincipalBook::keep_open`).
    books: Mutex<Vec<Box<dyn PrincipalBook>>>,
    /// Binds a decision form to the view that showed it (`decide::view_tag`); made at start,
    /// so a form outlives neither its session nor the server.
    pub view_key: [u8; 32],
    /// The event streams open at once (`pages::run_events`, `pages::pending_events`), bounded
    /// on their own.
    pub events: Arc<tokio::sync::Semaphore>,
}

/// At most this many event streams at once; a page past it refreshes by polling instead.
pub(super) const EVENT_STREAMS: usize = 64;

/// At most this many books are kept open (one per request served at once, up to it).
const BOOKS_KEPT: usize = 8;

impl App {
    pub(super) fn new(ctx: Context, signer: crate::services::sign::Signer, secure: bool) -> App {
        App {
            ctx,
            signer,
            secure,
            sessions: Sessions::default(),
            attempts: Mutex::new(Attempts::default()),
            books: Mutex::new(Vec::new()),
            view_key: rand::random(),
            events: Arc::new(tokio::sync::Semaphore::new(EVENT_STREAMS)),
        }
    }

    /// Runs `read` on a book kept open, or on one opened for it (kept for the next request).
    /// A kept book that fails (a server restarted, a connection dropped) is closed and the
    /// read made once more on a new one.
    pub(super) fn with_book<T>(
        &self,
        read: impl Fn(&mut dyn PrincipalBook) -> Result<T>,
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

    /// Keeps a book open for the next request, if it is worth keeping and there is room.
    pub(super) fn keep(&self, book: Box<dyn PrincipalBook>) {
        if !book.keep_open() {
            return;
        }
        let mut books = self.books.lock().unwrap_or_else(|e| e.into_inner());
        if books.len() < BOOKS_KEPT {
            books.push(book);
        }
    }
}

/// What a page says of a run it cannot show, whatever the reason: not a run id, no such run
/// here or on the project's server, or a path that exists elsewhere. One body for all, so
/// that a URL learns nothing of what exists.
const NO_SUCH_RUN: &str = "no such run";

/// The run a URL's `{run}` segment names: a run id of this project (a directory under its
/// `.prose/runs/`, or a run on its server), never a path. The command line's lookup
/// (`Context::open_run`) also takes a directory or a state.db path, so a URL reaching it
/// could decide a gate of another project; every page resolves its run here instead.
pub(super) fn page_run(ctx: &Context, run: &str) -> Result<(crate::run::RunPaths, Box<dyn Store>)> {
    let gone = || crate::error::not_found(NO_SUCH_RUN);
    crate::model::check_run_id(run).map_err(|_| gone())?;
    let paths = crate::run::RunPaths::in_dir(ctx.runs_dir().join(run));
    match ctx.open(&paths) {
        Ok(store) => Ok((paths, store)),
        Err(e) if code_of(&e) == Some(Code::NotFound) => Err(gone()),
        Err(e) => Err(e),
    }
}

/// Runs blocking store work off the server's threads, with the server's state.
pub(super) async fn blocking<T: Send + 'static>(
    app: &Arc<App>,
    f: impl FnOnce(&App) -> Result<T> + Send + 'static,
) -> Result<T> {
    let app = Arc::clone(app);
    tokio::task::spawn_blocking(move || f(&app))
        .await
        .map_err(|e| anyhow!("a request failed: {e}"))?
}
