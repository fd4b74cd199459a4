//! Callback workers: the embedded mode of the seeds, where the queue calls your async function
//! for each ready task instead of you pulling.
//!
//! One loop per registration pops as many tasks as it has free handler slots (a semaphore of
//! `concurrency` permits), long-polling when there is nothing, and spawns one handler task per
//! delivery. A handler's `Ok` finishes the task with its receipt, an `Err` releases it with
//! the error text; if the handler outlives the ttr, the task is redelivered by the ttr timer
//! and the late finish is refused as stale (at-least-once, docs/design.md §2 rule 4).

use std::future::Future;
use std::sync::Arc;

use delayq_core::Delivery;
use parking_lot::Mutex;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

use crate::error::ErrorKind;
use crate::queue::{PopOptions, Queue};
use crate::storage::ReleaseOptions;

/// How callback workers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerOptions {
    /// Most handlers running at once (default 16).
    pub concurrency: usize,
    /// How long one long-poll waits before polling again (default 30 s).
    pub poll_timeout_ms: u64,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            concurrency: 16,
            poll_timeout_ms: 30_000,
        }
    }
}

impl WorkerOptions {
    /// At most `n` handlers at once (at least 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }
}

/// The workers of one `on_expire` registration. Clones share the workers.
#[derive(Clone)]
pub struct Workers {
    stop: watch::Sender<bool>,
    task: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers").finish_non_exhaustive()
    }
}

impl Workers {
    pub(crate) fn start<F, Fut, E>(
        queue: Queue,
        topic: String,
        options: WorkerOptions,
        handler: F,
    ) -> Workers
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(run(queue, topic, options, Arc::new(handler), stop_rx));
        Workers {
            stop,
            task: Arc::new(Mutex::new(Some(task))),
        }
    }

    /// Stops popping and waits for every handler in flight to finish.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        let task = self.task.lock().take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

async fn run<F, Fut, E>(
    queue: Queue,
    topic: String,
    options: WorkerOptions,
    handler: Arc<F>,
    mut stop: watch::Receiver<bool>,
) where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(options.concurrency));
    let mut in_flight = tokio::task::JoinSet::new();
    loop {
        // Wait for one free slot, then take every other free one: pop as many as can run.
        let first = tokio::select! {
            p = Arc::clone(&slots).acquire_owned() => p.expect("semaphore is never closed"),
            _ = stop.wait_for(|s| *s) => break,
        };
        let mut permits = vec![first];
        while let Ok(p) = Arc::clone(&slots).try_acquire_owned() {
            permits.push(p);
        }
        let pop = queue.pop(
            &topic,
            PopOptions::default()
                .count(permits.len())
                .timeout_ms(options.poll_timeout_ms),
        );
        let deliveries = tokio::select! {
            r = pop => r,
            _ = stop.wait_for(|s| *s) => break,
        };
        let deliveries = match deliveries {
            Ok(d) => d,
            Err(e) if e.kind() == ErrorKind::ShuttingDown => break,
            Err(e) => {
                tracing::warn!(topic = %topic, error = %e, "callback worker could not pop; retrying in 1 s");
                let clock = Arc::clone(queue.clock());
                let wake = clock.now_ms() + 1_000;
                tokio::select! {
                    _ = clock.sleep_until(wake) => {}
                    _ = stop.wait_for(|s| *s) => break,
                }
                continue;
            }
        };
        for (delivery, permit) in deliveries.into_iter().zip(permits.drain(..)) {
            let queue = queue.clone();
            let handler = Arc::clone(&handler);
            in_flight.spawn(async move {
                let _permit = permit;
                // The handler, and the finish or release after it, run with the task's trace
                // context as the current one: the handler's spans and delayq's settle span
                // continue the producer's trace.
                #[cfg(feature = "opentelemetry")]
                if let Some(cx) = delivery.trace.as_ref().map(crate::otel::context_of) {
                    use opentelemetry::trace::FutureExt as _;
                    return handle(&queue, handler.as_ref(), delivery)
                        .with_context(cx)
                        .await;
                }
                handle(&queue, handler.as_ref(), delivery).await
            });
        }
        // Reap finished handlers so the set does not grow.
        while in_flight.try_join_next().is_some() {}
    }
    while in_flight.join_next().await.is_some() {}
}

/// Runs the handler for one delivery, then finishes the task (`Ok`) or releases it (`Err`).
async fn handle<F, Fut, E>(queue: &Queue, handler: &F, delivery: Delivery)
where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let (topic, id, receipt) = (
        delivery.topic.clone(),
        delivery.id.clone(),
        delivery.receipt.clone(),
    );
    let acked = match handler(delivery).await {
        Ok(()) => queue.finish(&topic, &id, Some(&receipt)).await,
        Err(e) => queue
            .release(
                &topic,
                &id,
                ReleaseOptions::default()
                    .receipt(receipt)
                    .error(e.to_string()),
            )
            .await
            .map(|_| ()),
    };
    if let Err(e) = acked {
        // Typically: the handler outlived its ttr and the task was redelivered.
        tracing::warn!(topic = %topic, id = %id, error = %e, "callback result not applied");
    }
}
