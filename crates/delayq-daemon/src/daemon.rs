//! Running the server: [`Daemon::start`] starts every service in order, [`Daemon::stop`]
//! stops them in reverse (`services.rs`), and [`serve`] / [`run`] put a shutdown future
//! between the two.
//!
//! The order of start: the queue (storage), the push dispatcher (after creating the
//! configuration's targets, docs/push.md), the beanstalk listener (`--beanstalk-listen`; it
//! skips the tubes push delivers), the dashboard's history sampler, the scheduler (after
//! writing the configuration's schedules, in the background), and last the HTTP listener. At
//! the stop, the HTTP listener and the beanstalk listener drain together (no new connections,
//! long-polls answer "no task", a beanstalk `put` is answered `DRAINING`), the requests in
//! flight get `shutdown_timeout_ms`, then the rest stops in reverse and the queue is shut
//! down last, which flushes the storage. SIGUSR1 puts the beanstalk listener in drain mode for
//! good, as it does beanstalkd.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use delayq::{Queue, Scheduler, Spans};
use delayq_server::{AppState, Services};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use crate::ServerError;
use crate::config::{BeanstalkConfig, ServerConfig};
use crate::otlp::Exporter;
use crate::push::PushDispatcher;
use crate::services::{self, Running};
use crate::signals::drain_on_sigusr1;
use crate::storage::build_queue_with;

/// A running server: the queue and every service over it. Stop it with [`Daemon::stop`]: one
/// dropped without it leaves its tasks running until the runtime ends, and the storage is not
/// flushed.
pub struct Daemon {
    running: Running,
    addr: SocketAddr,
    /// Completes (with an error) if the HTTP listener ends on its own, which only a panic does;
    /// `None` once it has.
    http_ended: Option<oneshot::Receiver<()>>,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon").field("addr", &self.addr).finish()
    }
}

impl Daemon {
    /// Builds the queue, binds `config.listen` and starts every service.
    pub async fn start(config: &ServerConfig) -> Result<Daemon, ServerError> {
        let exporter = config.otlp.as_ref().map(Exporter::start).transpose()?;
        let spans = exporter.as_ref().map_or_else(Spans::off, Exporter::spans);
        let queue = match build_queue_with(config, spans).await {
            Ok(queue) => queue,
            Err(e) => {
                if let Some(exporter) = exporter {
                    exporter.stop(grace(config)).await;
                }
                return Err(e);
            }
        };
        let listener = match TcpListener::bind(config.listen).await {
            Ok(listener) => listener,
            Err(source) => {
                // Nothing was served; still stop the storage cleanly.
                let _ = queue.shutdown().await;
                if let Some(exporter) = exporter {
                    exporter.stop(grace(config)).await;
                }
                return Err(ServerError::Bind {
                    addr: config.listen,
                    source,
                });
            }
        };
        Daemon::start_with(listener, queue, config, exporter).await
    }

    /// Starts every service over `queue`, serving HTTP on the bound `listener` (tests, socket
    /// activation). If one cannot start, those started are stopped and the queue shut down.
    pub async fn start_on(
        listener: TcpListener,
        queue: Queue,
        config: &ServerConfig,
    ) -> Result<Daemon, ServerError> {
        Daemon::start_with(listener, queue, config, None).await
    }

    /// [`Daemon::start_on`], with the OTLP exporter the queue records its spans to (stopped
    /// last).
    async fn start_with(
        listener: TcpListener,
        queue: Queue,
        config: &ServerConfig,
        exporter: Option<Exporter>,
    ) -> Result<Daemon, ServerError> {
        let mut running = Running::default();
        if let Some(exporter) = exporter {
            running.add(services::Otlp(exporter));
        }
        running.add(services::Storage(queue.clone()));
        match start_services(&mut running, listener, queue, config).await {
            Ok((addr, http_ended)) => Ok(Daemon {
                running,
                addr,
                http_ended: Some(http_ended),
            }),
            Err(e) => {
                let _ = running.stop(grace(config)).await;
                Err(e)
            }
        }
    }

    /// The address HTTP is served on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Completes when `shutdown` does, or early when the HTTP listener ends on its own (at
    /// once if it already has).
    pub async fn wait(&mut self, shutdown: impl Future<Output = ()>) {
        let Some(ended) = self.http_ended.as_mut() else {
            return;
        };
        let ended_early = tokio::select! {
            _ = ended => true,
            () = shutdown => false,
        };
        if ended_early {
            // A oneshot may not be polled again once it has completed.
            self.http_ended = None;
        } else {
            tracing::info!("shutting down: no new connections, finishing requests in flight");
        }
    }

    /// Drains every service, then stops each in the reverse order of its start, giving the
    /// work in flight up to `grace`; the queue is shut down last.
    pub async fn stop(self, grace: Duration) -> Result<(), ServerError> {
        let result = self.running.stop(grace).await;
        tracing::info!("delayq stopped");
        result
    }
}

/// Builds the storage, binds `config.listen` and serves until `shutdown` completes; then shuts
/// down gracefully (see the module doc).
pub async fn serve(
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let mut daemon = Daemon::start(&config).await?;
    daemon.wait(shutdown).await;
    daemon.stop(grace(&config)).await
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
    let mut daemon = Daemon::start_on(listener, queue, config).await?;
    daemon.wait(shutdown).await;
    daemon.stop(grace(config)).await
}

/// How long a stop waits for the work in flight.
fn grace(config: &ServerConfig) -> Duration {
    Duration::from_millis(config.shutdown_timeout_ms)
}

/// Starts the services after the queue, in order (see the module doc), adding each to
/// `running` as it starts. Returns the HTTP address and the signal of its early end.
async fn start_services(
    running: &mut Running,
    listener: TcpListener,
    queue: Queue,
    config: &ServerConfig,
) -> Result<(SocketAddr, oneshot::Receiver<()>), ServerError> {
    let addr = listener.local_addr().map_err(|source| ServerError::Serve {
        addr: config.listen,
        source,
    })?;
    let tls = config
        .tls
        .as_ref()
        .map(delayq_server::serve::https_acceptor)
        .transpose()?;
    let push = start_push(&queue, config).await?;
    running.add(services::Push(push.clone()));
    if let Some(b) = &config.beanstalk {
        running.add(start_beanstalk(b, &queue, config, &push).await?);
    }
    let services = Services::new(&queue).with_push(Arc::new(PushDispatcher(push)));
    running.add(services::Background(
        services.history.spawn_sampler(queue.clone()),
    ));
    set_flow_limits(&queue, &config.flow_limits).await;
    running.add(services::Schedules(start_scheduler(
        services.scheduler.clone(),
        config,
    )));
    let scheme = if tls.is_some() { "https" } else { "http" };
    let state = AppState::with_services(queue, &config.app(), services);
    let (stop, stopped) = watch::channel(false);
    let (ended_tx, http_ended) = oneshot::channel::<()>();
    let serving = delayq_server::serve::serve_app(listener, state.clone(), tls, stopped);
    let task = tokio::spawn(async move {
        serving.await;
        // Dropped without a send if the listener panics, which ends `Daemon::wait`; a normal
        // end (after a stop) sends, and nobody waits any more.
        let _ = ended_tx.send(());
    });
    running.add(services::Http {
        state,
        stop,
        task,
        addr,
    });
    tracing::info!(%addr, scheme, storage = ?config.storage, "delayq is listening");
    Ok((addr, http_ended))
}

/// Starts the push dispatcher (docs/push.md): the targets of the configuration are created
/// or updated first, then every stored target is delivered.
async fn start_push(
    queue: &Queue,
    config: &ServerConfig,
) -> Result<delayq_push::Push, ServerError> {
    let push = delayq_push::Push::new(queue.clone(), config.push.options())?;
    for target in &config.push.targets {
        let topic = target.topic.clone();
        push.set(target.clone())
            .await
            .map_err(|source| ServerError::Storage {
                op: "storing the push targets of the configuration",
                source,
            })?;
        tracing::info!(%topic, "push target from the configuration");
    }
    push.start().await;
    Ok(push)
}

/// Binds the beanstalkd protocol listener (docs/beanstalk.md) over `queue`, with TLS when
/// `--beanstalk-tls on` (refused at start without a certificate), and starts it.
async fn start_beanstalk(
    b: &BeanstalkConfig,
    queue: &Queue,
    config: &ServerConfig,
    push: &delayq_push::Push,
) -> Result<services::Beanstalk, ServerError> {
    let options = delayq_beanstalk::BeanstalkOptions::default()
        .max_job_size(b.max_job_size)
        .max_connections(b.max_connections)
        .read_timeout_ms(b.read_timeout_ms)
        .idle_timeout_ms(b.idle_timeout_ms);
    let acceptor = config
        .tls
        .as_ref()
        .filter(|_| b.tls)
        .map(delayq_server::serve::beanstalk_acceptor)
        .transpose()?;
    let mut server =
        delayq_beanstalk::BeanstalkServer::bind(&b.listen, queue.clone(), options).await?;
    if let Some(a) = acceptor {
        server = server.with_tls(a);
    }
    // Tubes delayq delivers itself are not handed to beanstalk workers.
    let pushed = push.clone();
    let server = server.skip_tubes(Arc::new(move |tube| pushed.has_target(tube)));
    let control = server.control();
    tracing::info!(addr = ?server.local_addr().map(|a| a.to_string()), "beanstalk protocol is listening");
    drain_on_sigusr1(control.clone());
    Ok(services::Beanstalk {
        control,
        task: tokio::spawn(server.run()),
    })
}

/// Sets the flow limits of the configuration before the server answers, so that no pop is
/// served without them. A topic whose limits cannot be set now (storage down) is logged and
/// tried again every second in the background, like the schedules.
async fn set_flow_limits(queue: &delayq::Queue, limits: &[(String, delayq::FlowLimits)]) {
    let mut failed = Vec::new();
    for (topic, l) in limits {
        match queue.set_limits(topic, *l).await {
            Ok(()) => tracing::info!(%topic, "flow limits from the configuration"),
            Err(e) => {
                tracing::warn!(%topic, error = %e, "flow limits from the configuration not set yet; trying again every second");
                failed.push((topic.clone(), *l));
            }
        }
    }
    if failed.is_empty() {
        return;
    }
    let queue = queue.clone();
    tokio::spawn(async move {
        while !failed.is_empty() && !queue.is_closing() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let mut still = Vec::new();
            for (topic, l) in failed {
                match queue.set_limits(&topic, l).await {
                    Ok(()) => tracing::info!(%topic, "flow limits from the configuration"),
                    Err(_) => still.push((topic, l)),
                }
            }
            failed = still;
        }
    });
}

/// Creates or updates the schedules of the configuration and starts the loop that adds their
/// occurrences (docs/schedules.md). The server does not wait for them: a schedule that cannot
/// be written now (storage down, the Redis clock not yet read) is tried again every second in
/// the background until it is written or the server stops, as every other storage failure
/// leaves the server running.
fn start_scheduler(scheduler: Scheduler, config: &ServerConfig) -> Scheduler {
    tokio::spawn(write_schedules(scheduler.clone(), config.schedules.clone()));
    scheduler.spawn();
    scheduler
}

/// Writes `pending` until each is written or the queue closes, every second; a failure is
/// logged once.
async fn write_schedules(writer: Scheduler, mut pending: Vec<delayq::core::schedule::ScheduleDef>) {
    let mut logged = false;
    while !pending.is_empty() && !writer.queue().is_closing() {
        let mut failed = Vec::new();
        for def in pending {
            let (topic, name) = (def.topic.clone(), def.name.clone());
            match writer.put(def.clone()).await {
                Ok(outcome) => tracing::info!(
                    %topic, %name, outcome = outcome.name(),
                    "schedule from the configuration"
                ),
                Err(e) => {
                    if !logged {
                        tracing::warn!(
                            %topic, %name, error = %e,
                            "schedule from the configuration not written yet; trying again every second"
                        );
                    }
                    failed.push(def);
                }
            }
        }
        logged = logged || !failed.is_empty();
        pending = failed;
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}
