//! The beanstalkd listener, in mini-redis's shape: the listener accepts, a `connection`
//! frames bytes, a `session` holds one connection's state and runs commands, and
//! `handler` loops between the two.
//!
//! - This file: [`BeanstalkServer::bind`] binds a TCP address (sockets get `TCP_NODELAY`, as
//!   beanstalkd sets it) or a Unix socket (`unix:PATH`), and [`BeanstalkServer::run`] accepts
//!   connections until it is told to stop, spawning one `handler` per connection. It holds
//!   at most `max_connections` connections: one past the cap is accepted and closed at once.
//!   With [`BeanstalkServer::with_tls`] every connection is a TLS one (the handshake runs in
//!   the connection's task, within the read timeout).
//! - `connection`: command lines and job bodies in, replies out, and the timeouts that
//!   hold slow clients; nothing about jobs.
//! - `session`: one connection's state (used tube, watch list, held jobs and their
//!   receipts) and `Session::apply`, which runs a command and answers a reply without a
//!   socket; the commands are in `cmd`, one file per group, the `stats*` documents and their
//!   OS probes in `stats`.
//! - `state`: what every connection shares, `ServerState`: the [`delayq::Queue`], and what
//!   beanstalkd keeps that delayq's storage does not (the `tubes` connections use and
//!   watch, the command counters of `stats`, the `jobs` aliases of tasks whose ids are not
//!   numbers), in process memory like beanstalkd's own.
//!
//! Shutdown has two steps. [`Control::drain`] puts the server in drain mode (beanstalkd's
//! SIGUSR1): a `put` is answered `DRAINING`, everything else works, so workers can finish
//! what they hold. [`Control::close`] then stops accepting, and every connection gives back
//! the jobs it still holds (as beanstalkd does when a connection closes) and ends.

mod cmd;
mod connection;
mod handler;
mod jobs;
mod session;
mod state;
mod stats;
mod tubes;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use delayq::Queue;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::proto::DEFAULT_MAX_JOB_SIZE;
use state::ServerState;

pub use jobs::{JobRef, format_job_id, parse_task_id};
pub use state::SkipTube;

/// Where the listener listens: a TCP address or a Unix socket path.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BeanstalkAddr {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix domain socket at this path (`unix:PATH`).
    Unix(PathBuf),
}

impl BeanstalkAddr {
    /// Parses `HOST:PORT` (an IP address and a port) or `unix:PATH`.
    pub fn parse(text: &str) -> Result<BeanstalkAddr, String> {
        if let Some(path) = text.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("unix: needs a socket path after it".into());
            }
            return Ok(BeanstalkAddr::Unix(PathBuf::from(path)));
        }
        text.parse::<SocketAddr>()
            .map(BeanstalkAddr::Tcp)
            .map_err(|_| format!("{text:?} is neither IP:PORT nor unix:PATH"))
    }
}

impl std::fmt::Display for BeanstalkAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BeanstalkAddr::Tcp(addr) => write!(f, "{addr}"),
            BeanstalkAddr::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// The listener's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BeanstalkOptions {
    /// The largest job body a `put` may send (beanstalkd's `-z`, 65 535 by default).
    pub max_job_size: u32,
    /// Most connections open at once; a connection past it is accepted and closed at once.
    pub max_connections: usize,
    /// How long a command line may take from its first byte, a job body from the end of its
    /// `put` line, a reply to be taken by the client, and a TLS handshake; then the
    /// connection is closed.
    pub read_timeout_ms: u64,
    /// How long a connection may send nothing while not in a `reserve` before it is closed;
    /// 0 (the default, as in beanstalkd) never closes it.
    pub idle_timeout_ms: u64,
}

/// The default of [`BeanstalkOptions::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// The default of [`BeanstalkOptions::read_timeout_ms`].
pub const DEFAULT_READ_TIMEOUT_MS: u64 = 30_000;

impl Default for BeanstalkOptions {
    fn default() -> Self {
        BeanstalkOptions {
            max_job_size: DEFAULT_MAX_JOB_SIZE,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            read_timeout_ms: DEFAULT_READ_TIMEOUT_MS,
            idle_timeout_ms: 0,
        }
    }
}

impl BeanstalkOptions {
    /// Sets the largest job body.
    pub fn max_job_size(mut self, bytes: u32) -> Self {
        self.max_job_size = bytes;
        self
    }

    /// Sets the most connections open at once (at least 1).
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Sets the time allowed for a command line, a job body, taking a reply and a TLS
    /// handshake (at least 1 ms).
    pub fn read_timeout_ms(mut self, ms: u64) -> Self {
        self.read_timeout_ms = ms.max(1);
        self
    }

    /// Sets the idle timeout; 0 turns it off.
    pub fn idle_timeout_ms(mut self, ms: u64) -> Self {
        self.idle_timeout_ms = ms;
        self
    }
}

/// Why the listener could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BeanstalkError {
    /// The address cannot be bound.
    #[error("binding the beanstalk listen address {addr}: {source}")]
    Bind {
        /// The address.
        addr: BeanstalkAddr,
        /// Why it failed.
        source: std::io::Error,
    },
}

/// Tells a running listener to drain or to close.
#[derive(Debug, Clone)]
pub struct Control {
    draining: Arc<AtomicBool>,
    close: watch::Sender<bool>,
}

impl Control {
    /// Drain mode: `put` is refused with `DRAINING` from now on; the rest works.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Whether drain mode is on.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Stops accepting connections; every session gives its jobs back and ends.
    /// [`BeanstalkServer::run`] returns once they all have.
    pub fn close(&self) {
        self.drain();
        self.close.send_replace(true);
    }
}

enum Sockets {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

/// A bound beanstalkd listener.
pub struct BeanstalkServer {
    sockets: Sockets,
    state: Arc<ServerState>,
    control: Control,
    tls: Option<tokio_rustls::TlsAcceptor>,
    slots: Arc<tokio::sync::Semaphore>,
}

impl std::fmt::Debug for BeanstalkServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BeanstalkServer")
            .field("addr", &self.local_addr())
            .finish_non_exhaustive()
    }
}

impl BeanstalkServer {
    /// Binds `addr`. A Unix socket path that exists is removed first (a stale socket of a
    /// previous run), as beanstalkd does.
    pub async fn bind(
        addr: &BeanstalkAddr,
        queue: Queue,
        options: BeanstalkOptions,
    ) -> Result<BeanstalkServer, BeanstalkError> {
        let bind_err = |source| BeanstalkError::Bind {
            addr: addr.clone(),
            source,
        };
        let sockets = match addr {
            BeanstalkAddr::Tcp(a) => Sockets::Tcp(TcpListener::bind(a).await.map_err(bind_err)?),
            BeanstalkAddr::Unix(path) => {
                if std::fs::symlink_metadata(path).is_ok() {
                    std::fs::remove_file(path).map_err(bind_err)?;
                }
                Sockets::Unix(UnixListener::bind(path).map_err(bind_err)?, path.clone())
            }
        };
        Ok(BeanstalkServer::from_sockets(sockets, queue, options))
    }

    /// Serves on a TCP listener the caller bound (tests, socket activation).
    pub fn from_tcp(listener: TcpListener, queue: Queue, options: BeanstalkOptions) -> Self {
        BeanstalkServer::from_sockets(Sockets::Tcp(listener), queue, options)
    }

    fn from_sockets(sockets: Sockets, queue: Queue, options: BeanstalkOptions) -> Self {
        let draining = Arc::new(AtomicBool::new(false));
        let state = ServerState::new(queue, options, Arc::clone(&draining));
        let slots = Arc::new(tokio::sync::Semaphore::new(state.options.max_connections));
        BeanstalkServer {
            sockets,
            state: Arc::new(state),
            control: Control {
                draining,
                close: watch::Sender::new(false),
            },
            tls: None,
            slots,
        }
    }

    /// Speaks TLS on every connection (TCP and Unix alike), with `acceptor`'s certificate.
    /// The handshake must finish within the read timeout.
    pub fn with_tls(mut self, acceptor: tokio_rustls::TlsAcceptor) -> Self {
        self.tls = Some(acceptor);
        self
    }

    /// Makes `reserve` skip the tubes for which `skip` is true: the topics delayq delivers
    /// itself (push targets, docs/push.md). A reserve whose watched tubes are all skipped
    /// waits (and times out) as if none had a ready job; beanstalkd has no reply for
    /// "refused".
    pub fn skip_tubes(self, skip: SkipTube) -> Self {
        let _ = self.state.skip.set(skip);
        self
    }

    /// The bound address.
    pub fn local_addr(&self) -> Option<BeanstalkAddr> {
        match &self.sockets {
            Sockets::Tcp(l) => l.local_addr().ok().map(BeanstalkAddr::Tcp),
            Sockets::Unix(_, path) => Some(BeanstalkAddr::Unix(path.clone())),
        }
    }

    /// The handle that drains and closes this listener.
    pub fn control(&self) -> Control {
        self.control.clone()
    }

    /// Accepts connections until [`Control::close`], then waits for every session to give back
    /// its jobs and end.
    pub async fn run(self) {
        let mut closed = self.control.close.subscribe();
        let mut sessions = JoinSet::new();
        loop {
            let accepted = tokio::select! {
                _ = closed.wait_for(|c| *c) => break,
                // Reap ended sessions as they end, so the set does not grow.
                Some(_) = sessions.join_next(), if !sessions.is_empty() => continue,
                a = accept(&self.sockets) => a,
            };
            let conn = match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors and the like: wait a moment, as the HTTP
                    // listener does, instead of spinning.
                    tracing::warn!(error = %e, "beanstalk listener: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            // Past the cap the connection is closed at once rather than left in the backlog:
            // beanstalkd has no "busy" reply, and a client sees a closed connection at once
            // (and may try again) where a connection waiting in the backlog looks open.
            let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() else {
                self.state
                    .counters
                    .refused_connections
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    max = self.state.options.max_connections,
                    "beanstalk connection refused: too many open"
                );
                drop(conn);
                continue;
            };
            let state = Arc::clone(&self.state);
            let close = self.control.close.subscribe();
            let tls = self.tls.clone();
            sessions.spawn(async move {
                serve_conn(state, conn, tls, close).await;
                drop(permit);
            });
        }
        while sessions.join_next().await.is_some() {}
        if let Sockets::Unix(_, path) = &self.sockets {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Runs one session on `conn`, after a TLS handshake when `tls` is set.
async fn serve_conn(
    state: Arc<ServerState>,
    conn: Conn,
    tls: Option<tokio_rustls::TlsAcceptor>,
    close: watch::Receiver<bool>,
) {
    if let Conn::Tcp(stream) = &conn {
        // beanstalkd sets TCP_NODELAY: replies are small and must not wait. A socket that
        // refuses it still works, only slower: say so and serve it.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "beanstalk listener: TCP_NODELAY not set");
        }
    }
    match (conn, tls) {
        (Conn::Tcp(stream), None) => {
            let (r, w) = stream.into_split();
            handler::run(state, r, w, close).await;
        }
        (Conn::Unix(stream), None) => {
            let (r, w) = stream.into_split();
            handler::run(state, r, w, close).await;
        }
        (Conn::Tcp(stream), Some(tls)) => tls_session(state, stream, tls, close).await,
        (Conn::Unix(stream), Some(tls)) => tls_session(state, stream, tls, close).await,
    }
}

async fn tls_session<S>(
    state: Arc<ServerState>,
    stream: S,
    tls: tokio_rustls::TlsAcceptor,
    close: watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send,
{
    let ms = state.options.read_timeout_ms;
    let limit = std::time::Duration::from_millis(ms);
    match tokio::time::timeout(limit, tls.accept(stream)).await {
        Ok(Ok(stream)) => {
            let (r, w) = tokio::io::split(stream);
            handler::run(state, r, w, close).await;
        }
        Ok(Err(e)) => tracing::debug!(error = %e, "beanstalk TLS handshake failed"),
        Err(_) => tracing::debug!(
            read_timeout_ms = ms,
            "beanstalk TLS handshake took longer than read_timeout_ms"
        ),
    }
}

enum Conn {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

async fn accept(sockets: &Sockets) -> std::io::Result<Conn> {
    match sockets {
        Sockets::Tcp(l) => l.accept().await.map(|(s, _)| Conn::Tcp(s)),
        Sockets::Unix(l, _) => l.accept().await.map(|(s, _)| Conn::Unix(s)),
    }
}
