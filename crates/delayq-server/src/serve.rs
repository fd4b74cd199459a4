//! Running the server: storage, socket and a graceful shutdown.
//!
//! [`serve`] builds the queue ([`build_queue`], the one place that picks the backend), binds
//! the listen address and hands over to [`run`]. When the shutdown future completes, `run`
//! stops accepting connections, ends open long-polls (they answer "no task"), waits for the
//! requests in flight up to `shutdown_timeout_ms`, and finally shuts the queue down, which
//! flushes the storage. [`shutdown_signal`] is the usual shutdown future: SIGTERM or Ctrl-C.
//! The listener itself (the connection cap, the timeouts for slow clients, HTTPS) is in
//! `listener.rs` and `tls.rs`.
//!
//! With `--beanstalk-listen`, `run` also binds the beanstalkd protocol listener
//! (`delayq-beanstalk`) beside the HTTP one, over the same queue. At shutdown it enters drain
//! mode with the HTTP side (a `put` is answered `DRAINING`), keeps serving the other commands
//! while requests in flight finish, then closes: every connection gives back the jobs it holds
//! before the queue is shut down. SIGUSR1 puts it in drain mode for good, as it does
//! beanstalkd.

mod listener;
mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use delayq::storage::embedded::{self, EmbeddedOptions};
use delayq::{Queue, StorageContext, SystemClock};
use delayq_redis::{RedisClock, RedisOptions};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::app::{AppState, app};
use crate::config::{ConfigError, FsyncPolicy, ServerConfig, StorageConfig};

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The listen address cannot be bound.
    #[error("binding the listen address {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Serving connections failed.
    #[error("serving HTTP on {addr}: {source}")]
    Serve {
        /// The address.
        addr: SocketAddr,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The storage failed to start or to shut down (flush).
    #[error("{op}: {source}")]
    Storage {
        /// What was being done.
        op: &'static str,
        /// The library's error.
        source: delayq::Error,
    },
    /// The TLS certificate or key cannot be used.
    #[error("{what} {path}: {reason}")]
    Tls {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Logging could not be set up.
    #[error("setting up logging: {0}")]
    Logging(String),
    /// The beanstalk listener could not start.
    #[error(transparent)]
    Beanstalk(#[from] delayq_beanstalk::BeanstalkError),
}

/// Builds the queue the configuration asks for. This is the one place that picks the storage
/// backend. Must be called inside a tokio runtime. (Async because opening a durable backend
/// recovers its data first.)
pub async fn build_queue(config: &ServerConfig) -> Result<Queue, ServerError> {
    let ctx = StorageContext::new(Arc::new(system_clock()))
        .with_limits(config.limits.clone())
        .with_defaults(config.defaults);
    match &config.storage {
        StorageConfig::Memory => Ok(Queue::memory_with(ctx)),
        StorageConfig::Embedded { data_dir, fsync } => {
            let fsync = match *fsync {
                FsyncPolicy::Always => delayq_log::FsyncPolicy::Always,
                FsyncPolicy::Interval { ms } => {
                    delayq_log::FsyncPolicy::Interval(Duration::from_millis(ms))
                }
                FsyncPolicy::Never => delayq_log::FsyncPolicy::Never,
            };
            let options = EmbeddedOptions::new(data_dir.clone()).fsync(fsync);
            let (storage, _) = embedded::start(ctx.clone(), options)
                .await
                .map_err(|source| ServerError::Storage {
                    op: "opening the embedded storage",
                    source,
                })?;
            Ok(Queue::new(storage, ctx))
        }
        StorageConfig::Redis { url } => {
            let mut options = RedisOptions::new(url.clone());
            if config.redis_wait_replicas > 0 {
                options = options.wait_replicas(
                    config.redis_wait_replicas,
                    Duration::from_millis(config.redis_wait_timeout_ms),
                );
            }
            // All instances read one clock, Redis's TIME (docs/clock.md).
            let clock = RedisClock::default();
            clock
                .connect(&options)
                .await
                .map_err(|source| ServerError::Storage {
                    op: "connecting the reference clock to Redis",
                    source,
                })?;
            let mut ctx = ctx;
            ctx.clock = Arc::new(clock.clone());
            let storage = delayq_redis::start(ctx.clone(), options)
                .await
                .map_err(|source| ServerError::Storage {
                    op: "connecting to Redis",
                    source,
                })?;
            if let Err(e) = clock.wait_bounded(Duration::from_secs(2)).await {
                tracing::warn!(error = %e, "the reference clock is not bounded yet; requests get 503 until it is");
            }
            Ok(Queue::new(storage, ctx))
        }
    }
}

/// The clock of an embedded or in-memory server: the system's wall clock. A debug build (the
/// tests') shifts it by `DELAYQ_TEST_WALL_SKEW_MS` when set (instances whose clocks disagree
/// on one machine), or by the milliseconds written in the file `DELAYQ_TEST_WALL_SKEW_FILE`
/// (a test steps the clock of the running server); a release build ignores both.
fn system_clock() -> SystemClock {
    #[cfg(debug_assertions)]
    {
        use delayq::clock::{SkewFileWall, SkewedWall};
        if let Some(skew) = std::env::var("DELAYQ_TEST_WALL_SKEW_MS")
            .ok()
            .and_then(|v| v.parse::<i64>().ok())
        {
            tracing::warn!(skew_ms = skew, "test build: the wall clock is skewed");
            return SystemClock::with_wall(Arc::new(SkewedWall::new(skew)));
        }
        if let Some(path) = std::env::var_os("DELAYQ_TEST_WALL_SKEW_FILE") {
            tracing::warn!(?path, "test build: the wall clock is skewed by a file");
            return SystemClock::with_wall(Arc::new(SkewFileWall::new(path)));
        }
    }
    SystemClock::new()
}

/// Builds the storage, binds `config.listen` and serves until `shutdown` completes; then shuts
/// down gracefully (see the module doc).
pub async fn serve(
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let queue = build_queue(&config).await?;
    let listener = match TcpListener::bind(config.listen).await {
        Ok(listener) => listener,
        Err(source) => {
            // Nothing was served; still stop the storage cleanly.
            let _ = queue.shutdown().await;
            return Err(ServerError::Bind {
                addr: config.listen,
                source,
            });
        }
    };
    run(listener, queue, &config, shutdown).await
}

/// Serves the API of `queue` on a bound `listener` until `shutdown` completes, then shuts down
/// gracefully and shuts the queue down. Useful when the caller binds the socket itself (tests,
/// socket activation).
pub async fn run(
    listener: TcpListener,
    queue: Queue,
    config: &ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let addr = listener.local_addr().map_err(|source| ServerError::Serve {
        addr: config.listen,
        source,
    })?;
    let tls = match config.tls.as_ref().map(tls::acceptor).transpose() {
        Ok(tls) => tls,
        Err(e) => {
            // Nothing was served; still stop the storage cleanly.
            let _ = queue.shutdown().await;
            return Err(e);
        }
    };
    let beanstalk = match &config.beanstalk {
        Some(b) => {
            let options = delayq_beanstalk::BeanstalkOptions::default()
                .max_job_size(b.max_job_size)
                .max_connections(b.max_connections)
                .read_timeout_ms(b.read_timeout_ms)
                .idle_timeout_ms(b.idle_timeout_ms);
            // `--beanstalk-tls on` was refused at start without a certificate.
            let acceptor = match config.tls.as_ref().filter(|_| b.tls) {
                Some(t) => match tls::beanstalk_acceptor(t) {
                    Ok(a) => Some(a),
                    Err(e) => {
                        let _ = queue.shutdown().await;
                        return Err(e);
                    }
                },
                None => None,
            };
            match delayq_beanstalk::BeanstalkServer::bind(&b.listen, queue.clone(), options).await {
                Ok(server) => Some(match acceptor {
                    Some(a) => server.with_tls(a),
                    None => server,
                }),
                Err(e) => {
                    let _ = queue.shutdown().await;
                    return Err(e.into());
                }
            }
        }
        None => None,
    };
    let beanstalk = beanstalk.map(|server| {
        let control = server.control();
        tracing::info!(addr = ?server.local_addr().map(|a| a.to_string()), "beanstalk protocol is listening");
        drain_on_sigusr1(control.clone());
        (control, tokio::spawn(server.run()))
    });
    let scheme = if tls.is_some() { "https" } else { "http" };
    let state = AppState::new(queue.clone(), config);
    // The dashboard's history: sampled every second until the queue shuts down.
    let sampler = state.history().spawn_sampler(queue.clone());
    let router = app(state.clone());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut server = tokio::spawn(listener::serve(
        listener,
        router,
        state.clone(),
        config.http,
        tls,
        stop_rx,
    ));
    tracing::info!(%addr, scheme, storage = ?config.storage, "delayq is listening");

    tokio::pin!(shutdown);
    let served = tokio::select! {
        joined = &mut server => Some(joined),
        () = &mut shutdown => None,
    };
    let result = match served {
        // The listener stopped on its own: only a panic does that.
        Some(joined) => flatten(joined, addr),
        None => {
            tracing::info!("shutting down: no new connections, finishing requests in flight");
            state.begin_drain();
            if let Some((control, _)) = &beanstalk {
                control.drain();
            }
            let _ = stop_tx.send(true);
            let grace = Duration::from_millis(config.shutdown_timeout_ms);
            match tokio::time::timeout(grace, &mut server).await {
                Ok(joined) => flatten(joined, addr),
                Err(_) => {
                    tracing::warn!(
                        timeout_ms = config.shutdown_timeout_ms,
                        "requests still in flight after the shutdown timeout; closing them"
                    );
                    server.abort();
                    Ok(())
                }
            }
        }
    };
    if let Some((control, task)) = beanstalk {
        // Every beanstalk connection gives back the jobs it holds while the queue still runs.
        control.close();
        let grace = Duration::from_millis(config.shutdown_timeout_ms.max(1_000));
        if tokio::time::timeout(grace, task).await.is_err() {
            tracing::warn!("beanstalk connections still open after the shutdown timeout");
        }
    }
    sampler.abort();
    let flushed = queue
        .shutdown()
        .await
        .map_err(|source| ServerError::Storage {
            op: "shutting down the storage",
            source,
        });
    tracing::info!("delayq stopped");
    result.and(flushed)
}

fn flatten(
    joined: Result<(), tokio::task::JoinError>,
    addr: SocketAddr,
) -> Result<(), ServerError> {
    joined.map_err(|e| ServerError::Serve {
        addr,
        source: std::io::Error::other(e.to_string()),
    })
}

/// Puts the beanstalk listener in drain mode on SIGUSR1, as beanstalkd does.
fn drain_on_sigusr1(control: delayq_beanstalk::Control) {
    #[cfg(unix)]
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::user_defined1()) {
            Ok(mut sig) => {
                if sig.recv().await.is_some() {
                    tracing::info!("received SIGUSR1: beanstalk drain mode");
                    control.drain();
                }
            }
            Err(e) => tracing::error!(error = %e, "cannot listen for SIGUSR1"),
        }
    });
    #[cfg(not(unix))]
    let _ = control;
}

/// Completes on SIGTERM or Ctrl-C (SIGINT). If a handler cannot be installed, that signal is
/// logged and ignored; the other still works.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut sig) => {
                sig.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("received Ctrl-C"),
        () = terminate => tracing::info!("received SIGTERM"),
    }
}
