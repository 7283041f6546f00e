//! The HTTPS accept loop and each connection's life, written for the shutdown a rollout needs:
//! every request a client sent on a connection the guard accepted is answered.
//!
//! A server stops in three [`Phase`]s. `Serving`. `Closing` (SIGTERM, for `--shutdown-delay`):
//! still accepting, while the endpoints drop this pod; each answer closes its connection
//! (HTTP/1.1 `Connection: close`, HTTP/2 GOAWAY), so clients move to another replica. `Draining`:
//! the connections the kernel has already accepted are taken (a client counts them as open;
//! left in the queue they would be reset), the listener closes, and each connection ends as it
//! would: a handshake under way completes and its first request is answered, an answer in flight
//! is sent, a connection idle since an earlier answer closes at once; past `--shutdown-grace` the
//! rest are cut.
//!
//! The loop is the guard's own, not axum-server's: that one ends a connection still in its
//! handshake or waiting for its first request at its graceful shutdown, and leaves the kernel's
//! queue to be reset, which under load lost 4 to 6 of 100,000 requests across a SIGTERM
//! (BENCHMARKS.md, "Hostile clients").

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderValue, Request, Version, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower::ServiceExt as _;

use super::limits::{ConnectionLimits, FIRST_BYTE_TIMEOUT, HANDSHAKE_TIMEOUT, LimitAcceptor, SourceSlots};
use super::tls::ServingConfig;

/// Where a server is in its life; it only moves forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Accepting and answering.
    Serving,
    /// SIGTERM came: still accepting, and each answer closes its connection.
    Closing,
    /// No more connections; those open finish.
    Draining,
}

/// A connection must send its first request within this (hyper's header timer starts only once
/// a request has begun).
const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// After a failed accept (out of file descriptors, say), before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// What each connection is served with.
struct Shared {
    tls: ServingConfig,
    limits: LimitAcceptor,
    http: auto::Builder<TokioExecutor>,
    app: Router,
}

/// Serves `app` over TLS on `listener` until `phase` is [`Phase::Draining`], then lets the open
/// connections finish, for at most `grace`.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    tls: ServingConfig,
    limits: ConnectionLimits,
    app: Router,
    mut phase: watch::Receiver<Phase>,
    grace: Duration,
) {
    let shared = Arc::new(Shared { tls, limits: LimitAcceptor::new(limits), http: http(limits), app });
    let mut connections = JoinSet::new();
    let each_connection = phase.clone();
    loop {
        tokio::select! {
            biased;
            () = draining(&mut phase) => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => {
                    connections.spawn(connection(tcp, shared.clone(), each_connection.clone()));
                }
                Err(error) => {
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    // The connections the kernel has accepted: their clients count them as open, and may have
    // sent a request on them already.
    match listener.into_std() {
        Ok(listener) => {
            while let Ok((tcp, _)) = listener.accept() {
                if let Ok(tcp) = tcp.set_nonblocking(true).and_then(|()| TcpStream::from_std(tcp)) {
                    connections.spawn(connection(tcp, shared.clone(), each_connection.clone()));
                }
            }
        }
        Err(error) => tracing::warn!(%error, "taking the queued connections failed"),
    }
    let finished = tokio::time::timeout(grace, async { while connections.join_next().await.is_some() {} });
    if finished.await.is_err() {
        tracing::warn!(
            open = connections.len(),
            ?grace,
            "connections still open after --shutdown-grace are cut"
        );
        connections.shutdown().await;
    }
}

/// Resolves once `stop` says so (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// Resolves once the phase is [`Phase::Draining`] (or its sender is gone).
async fn draining(phase: &mut watch::Receiver<Phase>) {
    let _ = phase.wait_for(|phase| *phase == Phase::Draining).await;
}

/// HTTP/1.1 and HTTP/2 as the API server speaks them.
fn http(limits: ConnectionLimits) -> auto::Builder<TokioExecutor> {
    let mut http = auto::Builder::new(TokioExecutor::new());
    // A client that never finishes its headers must not hold a connection forever. hyper times
    // the headers from the end of the previous answer, so this also closes a kept-alive
    // connection that waits this long for its next request: it is the idle timeout, which the
    // API server's own (90 s) undercuts, so that it is the client that closes: a server that
    // closed first would close the API server's idle connections under it, and a request sent as
    // one closes fails.
    http.http1().timer(TokioTimer::new()).header_read_timeout(limits.idle_timeout).max_buf_size(64 * 1024);
    // The API server multiplexes its calls; a handful of streams each is plenty, and each
    // stream's body waits for a permit before it is read.
    http.http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(32)
        .max_header_list_size(64 * 1024)
        .max_send_buf_size(256 * 1024);
    http
}

/// A request extension: closes the connection the request came on once it is answered.
#[derive(Debug, Clone)]
pub(crate) struct LastRequest(Arc<watch::Sender<bool>>);

impl LastRequest {
    /// The connection closes after this answer (HTTP/2: with a GOAWAY now, the streams under way
    /// finishing).
    pub(crate) fn close(&self) {
        self.0.send_replace(true);
    }
}

/// One connection, from the TLS handshake to its close.
async fn connection(tcp: TcpStream, shared: Arc<Shared>, mut phase: watch::Receiver<Phase>) {
    // An answer goes out as soon as it is written: with Nagle's algorithm an HTTP/2 answer's
    // last frame waited for the client's delayed ACK (40 ms a request).
    let _ = tcp.set_nodelay(true);
    // Over a cap, dropping the stream closes it: the client retries elsewhere or later. The
    // handshake holds a handshake place only; the connection slot is taken once it is done.
    let Ok(source) = tcp.peer_addr().map(|peer| peer.ip()) else { return };
    let Some(handshake) = shared.limits.handshake(source) else { return };
    let started = tokio::time::Instant::now();
    // Peeked, not read: the byte stays for the TLS handshake (readiness alone can be a false
    // positive).
    let mut first = [0u8; 1];
    if !matches!(tokio::time::timeout(FIRST_BYTE_TIMEOUT, tcp.peek(&mut first)).await, Ok(Ok(1..))) {
        return;
    }
    let acceptor = tokio_rustls::TlsAcceptor::from(shared.tls.load_full());
    let Ok(Ok(stream)) = tokio::time::timeout_at(started + HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
    else {
        return;
    };
    drop(handshake);
    let Ok(stream) = shared.limits.admit(stream, source) else { return };
    // Set by each request that must be the connection's last; read by the loop below.
    let (last_request, mut close) = watch::channel(false);
    let last_request = LastRequest(Arc::new(last_request));
    let had_request = Arc::new(AtomicBool::new(false));
    let service = {
        let (app, phase, had_request) = (shared.app.clone(), phase.clone(), had_request.clone());
        hyper::service::service_fn(move |request: Request<Incoming>| {
            had_request.store(true, Ordering::Release);
            let closing = *phase.borrow() != Phase::Serving;
            if closing {
                last_request.close();
            }
            let version = request.version();
            let mut request = request.map(axum::body::Body::new);
            request.extensions_mut().insert(last_request.clone());
            let answer = app.clone().oneshot(request);
            async move {
                let mut response = answer.await.unwrap_or_else(|never: Infallible| match never {});
                // HTTP/1.1 says it in the answer itself, so the client knows before it sends
                // another request here; HTTP/2 gets its GOAWAY.
                if closing && version == Version::HTTP_11 {
                    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                Ok::<_, Infallible>(response)
            }
        })
    };
    let conn = shared.http.serve_connection_with_upgrades(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let first_request_by = tokio::time::Instant::now() + FIRST_REQUEST_TIMEOUT;
    let (mut graceful, mut draining, mut timed) = (false, false, true);
    loop {
        let asked = had_request.load(Ordering::Acquire);
        // Ended once its last request is answered; when draining, at once if idle. One that has
        // not had its first request yet waits for it: it closes with that answer.
        if !graceful && (*close.borrow() || (draining && asked)) {
            conn.as_mut().graceful_shutdown();
            graceful = true;
        }
        tokio::select! {
            biased;
            _ = conn.as_mut() => return,
            Ok(()) = close.changed(), if !graceful => {}
            Ok(()) = phase.changed(), if !draining => draining = *phase.borrow() == Phase::Draining,
            () = tokio::time::sleep_until(first_request_by), if timed => {
                if !had_request.load(Ordering::Acquire) {
                    return;
                }
                timed = false;
            }
        }
    }
}

/// Connections to the metrics and health listener at once, in all and from one source address.
const PLAIN_CONNECTIONS: usize = 2048;
const PLAIN_PER_SOURCE: usize = 16;
/// A request's headers there must arrive within this; it is also how long a kept-alive
/// connection may wait for its next request (Prometheus and the kubelet reconnect).
const PLAIN_HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `app` over plain HTTP/1.1 on `listener` (the metrics and health endpoints) until `stop`
/// says so, bounded as the webhook's listener is: connections in all and per source address,
/// headers within [`PLAIN_HEADER_TIMEOUT`], 16 KiB of them. Without the bounds, half-sent
/// requests from any pod grew the guard by 51 MiB per 3,000 until the kubelet's probes (on this
/// listener) failed with it.
pub(crate) async fn serve_plain(
    listener: tokio::net::TcpListener,
    app: Router,
    mut stop: watch::Receiver<bool>,
) {
    let slots = SourceSlots::new(PLAIN_CONNECTIONS, PLAIN_PER_SOURCE);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(PLAIN_HEADER_TIMEOUT).max_buf_size(16 * 1024);
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            () = stopped(&mut stop) => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => {
                    // Over a cap, dropping the stream closes it.
                    let Some(slot) = slots.take(peer.ip()) else { continue };
                    let service = hyper_util::service::TowerToHyperService::new(app.clone());
                    let conn = http.serve_connection(TokioIo::new(tcp), service);
                    connections.spawn(async move {
                        let _slot = slot;
                        let _ = conn.await;
                    });
                }
                Err(error) => {
                    tracing::warn!(%error, "accepting a metrics connection failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.shutdown().await;
}
