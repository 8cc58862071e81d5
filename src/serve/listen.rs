//! Connections: accepted up to a cap, each given a header time (and a TLS handshake time),
//! served over HTTP/1.1 with the client's address for the handlers.

use axum::extract::ConnectInfo;
use axum::Router;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// What a client may hold of the server: how many connections at once, and how long it
/// may take to send a request's headers (or to finish its TLS handshake).
#[derive(Clone, Copy)]
pub(super) struct Limits {
    pub(super) connections: usize,
    pub(super) header_time: Duration,
}

/// Serves connections until the process is killed: at most `limits.connections` at once (the
/// next waits in the listen queue until one closes, so descriptors are never exhausted),
/// each closed when its request headers, or its TLS handshake, take longer than
/// `limits.header_time` (hyper's header timeout, which also ends a kept-alive connection left
/// idle that long), and a form body bounded too (`PageForm`). So slow clients hold up no one
/// for longer than the header time.
pub(super) async fn accept_loop(
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
        // An event stream gives its slot back (`Slot::release`): it is long-lived by design,
        // and bounded on its own.
        let slot = Slot(Arc::new(std::sync::Mutex::new(Some(slot))));
        tokio::spawn(async move {
            match tls {
                None => serve_connection(stream, peer, router, limits, slot.clone()).await,
                Some(acceptor) => {
                    let shake = tokio::time::timeout(limits.header_time, acceptor.accept(stream));
                    if let Ok(Ok(stream)) = shake.await {
                        serve_connection(stream, peer, router, limits, slot.clone()).await;
                    }
                }
            }
            drop(slot);
        });
    }
}

/// One connection, over HTTP/1.1, with the client's address for the handlers (`Peer`).
async fn serve_connection<S>(
    stream: S,
    peer: SocketAddr,
    router: Router,
    limits: Limits,
    slot: Slot,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper_util::service::TowerToHyperService::new(router);
    let with_peer =
        hyper::service::service_fn(move |mut req: axum::http::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(ConnectInfo(Peer(peer)));
            req.extensions_mut().insert(slot.clone());
            hyper::service::Service::call(&service, req)
        });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_time)
        .serve_connection(hyper_util::rt::TokioIo::new(stream), with_peer)
        .await;
}

/// A connection's place under the connection cap, which an event stream gives back.
#[derive(Clone)]
pub(super) struct Slot(Arc<std::sync::Mutex<Option<tokio::sync::OwnedSemaphorePermit>>>);

impl Slot {
    /// Frees the connection's place under the cap (it then counts under the event streams'
    /// own bound).
    pub(super) fn release(&self) {
        if let Ok(mut s) = self.0.lock() {
            s.take();
        }
    }
}

/// The address a connection came from (failed sign-ins are counted by it), over TLS or not.
#[derive(Clone, Copy, Debug)]
pub(super) struct Peer(pub SocketAddr);
