//! The HTTP listener: accepting connections under a cap and cutting off clients that are too
//! slow or idle.
//!
//! `axum::serve` has neither header nor idle timeouts, so the listener drives hyper's HTTP/1
//! connections itself:
//!
//! - **Cap**: a semaphore of `max_connections` permits. A permit is taken *before* `accept`,
//!   so connections past the cap are not accepted at all: they wait in the kernel's listen
//!   backlog and are served as others close (past the backlog the kernel refuses them).
//!   Nothing is accepted only to be dropped, and no file descriptor is spent on them.
//! - **Header and idle timeouts**: every connection's reads go through [`Tracked`], which
//!   notices the first byte of a request; the service notices when a request starts and when
//!   its answer is ready. From that, [`Activity`] knows whether the connection is idle
//!   (`idle_timeout_ms` applies), receiving headers (`header_read_timeout_ms`, counted from
//!   their first byte) or busy with a request (no limit here: a long-poll may take a minute).
//!   A connection past its limit is dropped, which closes the socket. (hyper's own
//!   `header_read_timeout` counts from the moment it starts waiting for a request, so it
//!   would also cut idle keep-alive connections at the header limit; it is turned off.)
//! - **Body timeout**: every request body is a [`TimedBody`] that fails once
//!   `body_read_timeout_ms` has passed since the headers; the extractor then answers 400 with
//!   that error, and hyper closes the connection since the body was not read to its end.
//! - **TLS**: with an acceptor, the handshake must finish within the header read timeout. A
//!   client that speaks plain HTTP to the TLS port gets one plain-HTTP 400 saying to use
//!   `https://`, instead of a handshake failure it would show as a broken connection.
//! - **Graceful shutdown**: when `stop` turns true the listener closes its socket, tells
//!   every connection to finish its request in flight and close, and returns once all have.
//!   Dropping the task that runs [`serve`] drops every connection with it.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::Request;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use super::tls::HANDSHAKE_RECORD;
use crate::app::AppState;
use crate::config::HttpLimits;
use crate::error::AppError;
use crate::metrics::Cut;

/// What every connection of one listener is served with: the router, the timeouts, TLS.
struct ConnectionSetup {
    router: Router,
    state: AppState,
    idle: Duration,
    header: Duration,
    body: Duration,
    body_ms: u64,
    tls: Option<TlsAcceptor>,
}

/// Accepts connections on `listener` and serves `router` on them (see the module doc) until
/// `stop` turns true (or its sender is dropped); then waits for the open connections to
/// finish their requests and close.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    state: AppState,
    http: HttpLimits,
    tls: Option<TlsAcceptor>,
    mut stop: watch::Receiver<bool>,
) {
    let shared = Arc::new(ConnectionSetup {
        router,
        state,
        idle: Duration::from_millis(http.idle_timeout_ms),
        header: Duration::from_millis(http.header_read_timeout_ms),
        body: Duration::from_millis(http.body_read_timeout_ms),
        body_ms: http.body_read_timeout_ms,
        tls,
    });
    let slots = Arc::new(Semaphore::new(http.max_connections));
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            biased;
            _ = stop.wait_for(|stop| *stop) => break,
            // Reap ended connections as they end, so a quiet listener does not keep them.
            Some(ended) = connections.join_next() => {
                report(ended);
                continue;
            }
            // Cancel-safe: a permit not yet used for a connection goes back.
            accepted = accept(&listener, &slots) => accepted,
        };
        if let Some((tcp, peer, permit)) = accepted {
            connections.spawn(connection(
                tcp,
                peer,
                permit,
                Arc::clone(&shared),
                stop.clone(),
            ));
        }
    }
    // Close the listening socket first, so that new clients are refused rather than queued.
    drop(listener);
    while let Some(ended) = connections.join_next().await {
        report(ended);
    }
}

/// Waits for a free connection slot, then for a connection. `None` when `accept` failed; the
/// caller just tries again.
async fn accept(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
) -> Option<(TcpStream, SocketAddr, OwnedSemaphorePermit)> {
    // The semaphore is never closed.
    let permit = Arc::clone(slots).acquire_owned().await.ok()?;
    match listener.accept().await {
        Ok((tcp, peer)) => Some((tcp, peer, permit)),
        // The client gave up between connecting and being accepted: nothing to do.
        Err(e) if is_connection_error(&e) => None,
        Err(e) => {
            // Out of file descriptors or memory: accepting again at once would spin.
            tracing::error!(error = %e, "accepting a connection failed; retrying in 1 s");
            tokio::time::sleep(Duration::from_secs(1)).await;
            None
        }
    }
}

fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

fn report(ended: Result<(), tokio::task::JoinError>) {
    if let Err(e) = ended
        && e.is_panic()
    {
        tracing::error!(error = %e, "a connection task panicked");
    }
}

/// Counts a connection in `delayq_http_connections_open` while it lives.
struct Open(AppState);

impl Open {
    fn new(state: &AppState) -> Open {
        state.metrics().connection_opened();
        Open(state.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.metrics().connection_closed();
    }
}

/// Serves one accepted connection; its slot is freed when this returns.
async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    _slot: OwnedSemaphorePermit,
    shared: Arc<ConnectionSetup>,
    stop: watch::Receiver<bool>,
) {
    let _open = Open::new(&shared.state);
    // Answers are small and written whole; do not let Nagle hold them back.
    let _ = tcp.set_nodelay(true);
    match shared.tls.clone() {
        None => serve_http(tcp, peer, shared, stop).await,
        Some(acceptor) => serve_tls(tcp, peer, acceptor, shared, stop).await,
    }
}

/// Completes the TLS handshake within the header read timeout, then serves HTTP over it.
async fn serve_tls(
    tcp: TcpStream,
    peer: SocketAddr,
    acceptor: TlsAcceptor,
    shared: Arc<ConnectionSetup>,
    stop: watch::Receiver<bool>,
) {
    let handshake = async {
        let mut first = [0u8; 1];
        match tcp.peek(&mut first).await? {
            // Connected and left: nothing to serve.
            0 => Ok(None),
            _ if first[0] != HANDSHAKE_RECORD => Ok(Some(Err(tcp))),
            _ => acceptor.accept(tcp).await.map(|tls| Some(Ok(tls))),
        }
    };
    match tokio::time::timeout(shared.header, handshake).await {
        Ok(Ok(Some(Ok(tls)))) => serve_http(tls, peer, shared, stop).await,
        Ok(Ok(Some(Err(plain)))) => refuse_plain_http(plain, peer, &shared).await,
        Ok(Ok(None)) => {}
        Ok(Err(e)) => {
            shared.state.metrics().cut(Cut::Handshake);
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
        }
        Err(_) => {
            shared.state.metrics().cut(Cut::Handshake);
            tracing::debug!(%peer, "TLS handshake timed out");
        }
    }
}

/// Answers a plain-HTTP request on the TLS port with a 400 that says to use `https://`, then
/// closes the connection.
async fn refuse_plain_http(tcp: TcpStream, peer: SocketAddr, shared: &ConnectionSetup) {
    let service = hyper::service::service_fn(|_req: Request<Incoming>| async {
        Ok::<_, Infallible>(axum::response::IntoResponse::into_response(
            AppError::invalid(
                "scheme",
                "this port speaks HTTPS (TLS): send the request to https://",
            ),
        ))
    });
    let conn = http1::Builder::new()
        .keep_alive(false)
        .header_read_timeout(None)
        .serve_connection(TokioIo::new(tcp), service);
    // The client is no TLS client, so bound it as a slow one.
    if tokio::time::timeout(shared.header, conn).await.is_err() {
        shared.state.metrics().cut(Cut::Header);
    }
    tracing::debug!(%peer, "refused a plain-HTTP request on the TLS port");
}

/// Serves HTTP/1 on `io` until the client closes, a timeout cuts it off, or a graceful
/// shutdown has finished its request in flight.
async fn serve_http<IO>(
    io: IO,
    peer: SocketAddr,
    shared: Arc<ConnectionSetup>,
    mut stop: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Tracked {
        io,
        activity: Arc::clone(&activity),
    });
    let service = ConnService {
        shared: Arc::clone(&shared),
        activity: Arc::clone(&activity),
    };
    let conn = http1::Builder::new()
        // The timeouts are the [`Activity`]'s; see the module doc.
        .header_read_timeout(None)
        .serve_connection(io, service);
    tokio::pin!(conn);
    let mut stopping = false;
    loop {
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            cut = activity.expired(&shared) => {
                shared.state.metrics().cut(cut);
                tracing::debug!(%peer, reason = cut.name(), "closing a slow or idle connection");
                return;
            }
            _ = stop.wait_for(|stop| *stop), if !stopping => {
                stopping = true;
                // Closes the connection if it is idle, else after the request in flight.
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// What a connection is doing, as far as the timeouts care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the first byte of a request (or writing an answer out).
    Idle,
    /// Reading a request's headers.
    Head,
    /// A request is being handled (its body read, its answer computed).
    Busy,
}

/// The phase of one connection and when it began. Everything of one connection runs on one
/// task (hyper polls the service and the body inside the connection future), so the lock is
/// never contended; it is there to make the type `Sync`.
struct Activity {
    /// Whether the phase is [`Phase::Idle`]: read on every read, so kept apart from the lock.
    idle: AtomicBool,
    phase: Mutex<(Phase, Instant)>,
    changed: Notify,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            idle: AtomicBool::new(true),
            phase: Mutex::new((Phase::Idle, Instant::now())),
            changed: Notify::new(),
        }
    }

    fn enter(&self, phase: Phase) {
        *self.phase.lock() = (phase, Instant::now());
        self.idle.store(phase == Phase::Idle, Ordering::Relaxed);
        self.changed.notify_one();
    }

    /// Bytes arrived: an idle connection starts receiving a request.
    fn read_some(&self) {
        if self.idle.load(Ordering::Relaxed) {
            self.enter(Phase::Head);
        }
    }

    /// Completes when the connection has been idle or receiving headers for too long.
    async fn expired(&self, shared: &ConnectionSetup) -> Cut {
        loop {
            let (phase, since) = *self.phase.lock();
            let (limit, cut) = match phase {
                Phase::Busy => {
                    self.changed.notified().await;
                    continue;
                }
                Phase::Idle => (shared.idle, Cut::Idle),
                Phase::Head => (shared.header, Cut::Header),
            };
            tokio::select! {
                () = tokio::time::sleep_until(since + limit) => {
                    // The phase may have changed in the same poll that fired the timer.
                    if *self.phase.lock() == (phase, since) {
                        return cut;
                    }
                }
                () = self.changed.notified() => {}
            }
        }
    }
}

/// An IO whose reads tell the connection's [`Activity`] when a request starts arriving.
struct Tracked<IO> {
    io: IO,
    activity: Arc<Activity>,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Tracked<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.read_some();
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Tracked<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// The router as one connection's hyper service: marks the connection busy while a request
/// is handled, and puts a deadline on its body.
struct ConnService {
    shared: Arc<ConnectionSetup>,
    activity: Arc<Activity>,
}

/// Marks a connection busy while it lives; idle again once the answer is ready (or the
/// request was dropped).
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.enter(Phase::Idle);
    }
}

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        self.activity.enter(Phase::Busy);
        let busy = Busy(Arc::clone(&self.activity));
        let shared = Arc::clone(&self.shared);
        let deadline = Instant::now() + shared.body;
        let req = req.map(|body| {
            Body::new(TimedBody {
                inner: body,
                deadline,
                timer: None,
                shared: Arc::clone(&shared),
            })
        });
        Box::pin(async move {
            let answer = shared.router.clone().oneshot(req).await;
            drop(busy);
            answer
        })
    }
}

/// A request body that fails once its deadline has passed.
struct TimedBody {
    inner: Incoming,
    deadline: Instant,
    /// Made only when the body has to wait: most bodies have arrived with their headers.
    timer: Option<Pin<Box<Sleep>>>,
    shared: Arc<ConnectionSetup>,
}

/// Why a request body could not be read.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    /// The client was too slow.
    #[error("the request body did not arrive within {ms} ms of its headers (body_read_timeout_ms)")]
    TimedOut {
        /// The limit.
        ms: u64,
    },
    /// The connection failed.
    #[error(transparent)]
    Read(hyper::Error),
}

impl http_body::Body for TimedBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(BodyError::Read)));
        }
        let deadline = this.deadline;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.as_mut().poll(cx).is_ready() {
            this.shared.state.metrics().cut(Cut::Body);
            return Poll::Ready(Some(Err(BodyError::TimedOut {
                ms: this.shared.body_ms,
            })));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
