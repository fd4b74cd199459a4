//! The services of a running server and the one mechanism that stops them.
//!
//! Each service is started by [`crate::Daemon::start`] in order and pushed on a [`Running`]
//! stack. Stopping is two passes: every service is first told to [`drain`](Service::drain)
//! (stop taking new work, at once and all together, so the HTTP side and the beanstalk side
//! refuse new work at the same moment), then each is [`stop`](Service::stop)ped in the reverse
//! order of its start, so the queue (started first) is shut down last, after everything that
//! uses it has given its work back. A start that fails half-way stops what was started the
//! same way.

use std::net::SocketAddr;
use std::time::Duration;

use async_trait::async_trait;
use delayq::{Queue, Scheduler};
use delayq_server::AppState;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::ServerError;

/// One part of a running server.
#[async_trait]
pub(crate) trait Service: Send {
    /// Stops taking new work; returns at once. Most services have nothing to do here.
    fn drain(&self) {}

    /// Stops, giving the work in flight up to `grace` to finish.
    async fn stop(self: Box<Self>, grace: Duration) -> Result<(), ServerError>;
}

/// The services started so far, in their start order.
#[derive(Default)]
pub(crate) struct Running {
    services: Vec<Box<dyn Service>>,
}

impl Running {
    /// Adds a started service; it is stopped before every service added earlier.
    pub(crate) fn add(&mut self, service: impl Service + 'static) {
        self.services.push(Box::new(service));
    }

    /// Drains every service, then stops each in the reverse order of its start. Every service
    /// is stopped even when one fails; the first failure is returned.
    pub(crate) async fn stop(self, grace: Duration) -> Result<(), ServerError> {
        for service in &self.services {
            service.drain();
        }
        let mut result = Ok(());
        for service in self.services.into_iter().rev() {
            let stopped = service.stop(grace).await;
            result = result.and(stopped);
        }
        result
    }
}

/// The queue itself: shutting it down flushes the storage.
pub(crate) struct Storage(pub(crate) Queue);

#[async_trait]
impl Service for Storage {
    async fn stop(self: Box<Self>, _grace: Duration) -> Result<(), ServerError> {
        self.0
            .shutdown()
            .await
            .map_err(|source| ServerError::Storage {
                op: "shutting down the storage",
                source,
            })
    }
}

/// The OTLP exporter: stopped last, after the queue, so the spans of the work done while
/// stopping go out too.
pub(crate) struct Otlp(pub(crate) crate::otlp::Exporter);

#[async_trait]
impl Service for Otlp {
    async fn stop(self: Box<Self>, grace: Duration) -> Result<(), ServerError> {
        // At least a second to send what is queued; a collector that is down costs no more.
        self.0.stop(grace.max(Duration::from_secs(1))).await;
        Ok(())
    }
}

/// The push dispatcher: calls in flight get the grace; their results are applied while the
/// queue still runs.
pub(crate) struct Push(pub(crate) delayq_push::Push);

#[async_trait]
impl Service for Push {
    async fn stop(self: Box<Self>, grace: Duration) -> Result<(), ServerError> {
        self.0.shutdown(grace).await;
        Ok(())
    }
}

/// The beanstalk listener: drained with the HTTP side (a `put` is answered `DRAINING`), then
/// closed: every connection gives back the jobs it holds while the queue still runs.
pub(crate) struct Beanstalk {
    pub(crate) control: delayq_beanstalk::Control,
    pub(crate) task: JoinHandle<()>,
}

#[async_trait]
impl Service for Beanstalk {
    fn drain(&self) {
        self.control.drain();
    }

    async fn stop(self: Box<Self>, grace: Duration) -> Result<(), ServerError> {
        self.control.close();
        // At least a second: giving jobs back is quick, and worth waiting for.
        let grace = grace.max(Duration::from_secs(1));
        if tokio::time::timeout(grace, self.task).await.is_err() {
            tracing::warn!("beanstalk connections still open after the shutdown timeout");
        }
        Ok(())
    }
}

/// A background task that only reads (the history sampler): aborted.
pub(crate) struct Background(pub(crate) JoinHandle<()>);

#[async_trait]
impl Service for Background {
    async fn stop(self: Box<Self>, _grace: Duration) -> Result<(), ServerError> {
        self.0.abort();
        Ok(())
    }
}

/// The loop that adds the schedules' occurrences.
pub(crate) struct Schedules(pub(crate) Scheduler);

#[async_trait]
impl Service for Schedules {
    async fn stop(self: Box<Self>, _grace: Duration) -> Result<(), ServerError> {
        self.0.stop();
        Ok(())
    }
}

/// The HTTP listener: on drain, open long-polls answer "no task", `/readyz` turns 503 and the
/// socket closes; requests in flight then get the grace, and are cut after it.
pub(crate) struct Http {
    pub(crate) state: AppState,
    pub(crate) stop: watch::Sender<bool>,
    pub(crate) task: JoinHandle<()>,
    pub(crate) addr: SocketAddr,
}

#[async_trait]
impl Service for Http {
    fn drain(&self) {
        self.state.begin_drain();
        self.stop.send_replace(true);
    }

    async fn stop(mut self: Box<Self>, grace: Duration) -> Result<(), ServerError> {
        match tokio::time::timeout(grace, &mut self.task).await {
            Ok(joined) => joined.map_err(|e| ServerError::Serve {
                addr: self.addr,
                source: std::io::Error::other(e.to_string()),
            }),
            Err(_) => {
                tracing::warn!(
                    timeout_ms = grace.as_millis() as u64,
                    "requests still in flight after the shutdown timeout; closing them"
                );
                self.task.abort();
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Records its drain and stop in a shared log; its stop fails when `fails`.
    struct Probe {
        name: &'static str,
        log: Arc<Mutex<Vec<String>>>,
        fails: bool,
    }

    #[async_trait]
    impl Service for Probe {
        fn drain(&self) {
            self.log
                .lock()
                .unwrap()
                .push(format!("drain {}", self.name));
        }

        async fn stop(self: Box<Self>, _grace: Duration) -> Result<(), ServerError> {
            self.log.lock().unwrap().push(format!("stop {}", self.name));
            if self.fails {
                return Err(ServerError::Logging(self.name.to_owned()));
            }
            Ok(())
        }
    }

    #[tokio::test]
    async fn every_service_drains_first_then_stops_in_reverse_and_a_failure_stops_nothing_else() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut running = Running::default();
        for (name, fails) in [("storage", false), ("push", true), ("http", true)] {
            running.add(Probe {
                name,
                log: Arc::clone(&log),
                fails,
            });
        }
        let err = running.stop(Duration::ZERO).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "setting up logging: http",
            "the first failure"
        );
        assert_eq!(
            *log.lock().unwrap(),
            [
                "drain storage",
                "drain push",
                "drain http",
                "stop http",
                "stop push",
                "stop storage"
            ]
        );
    }
}
