//! Shared by the integration tests: real `redis-server` processes on free loopback ports,
//! each with its own temporary directory, killed when dropped; and backends over them.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use delayq::{Backend, Clock, ManualClock, Queue, StorageContext, SystemClock};
use delayq_redis::{RedisOptions, RedisStorage};

#[allow(unused_imports)] // not every test polls
pub use delayq_testkit::{RedisServer, eventually};

/// Options for tests: short timeouts so that fault tests fail fast.
pub fn options(server: &RedisServer) -> RedisOptions {
    RedisOptions::new(server.url())
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(2))
}

/// One instance: a backend over `server`, and a queue on it.
pub struct Instance {
    pub storage: Arc<RedisStorage>,
    pub queue: Queue,
}

impl Instance {
    pub async fn start(ctx: StorageContext, options: RedisOptions) -> Self {
        let storage = delayq_redis::start(ctx.clone(), options)
            .await
            .expect("start the Redis backend");
        let queue = Queue::new(storage.clone(), ctx);
        Instance { storage, queue }
    }

    /// An instance on a manual clock standing at `now`.
    pub async fn manual(server: &RedisServer, clock: &ManualClock) -> Self {
        Self::manual_with(server, clock, |o| o).await
    }

    /// An instance on a manual clock with the test's `options` (e.g. a partition count).
    pub async fn manual_with(
        server: &RedisServer,
        clock: &ManualClock,
        options: impl FnOnce(RedisOptions) -> RedisOptions,
    ) -> Self {
        let ctx = StorageContext::new(Arc::new(clock.clone()));
        Self::start(ctx, options(self::options(server))).await
    }

    /// An instance on the system clock.
    pub async fn system(options: RedisOptions) -> Self {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        Self::start(StorageContext::new(clock), options).await
    }
}

/// How many lease buckets each instance holds, read from Redis (`dq` prefix).
pub fn lease_owners(server: &RedisServer) -> std::collections::HashMap<String, usize> {
    let keys: Vec<String> = (0..delayq_redis::keys::LEASE_BUCKETS)
        .map(|b| format!("dq:{{lease}}:bucket:{b}"))
        .collect();
    let reply = server
        .command(&format!("MGET {}", keys.join(" ")))
        .expect("MGET the leases");
    let mut owners = std::collections::HashMap::new();
    let mut lines = reply.lines();
    lines.next(); // *64
    while let Some(len) = lines.next() {
        if len == "$-1" {
            continue;
        }
        let value = lines.next().unwrap_or_default();
        let owner = value.split(':').next().unwrap_or_default().to_owned();
        *owners.entry(owner).or_insert(0) += 1;
    }
    owners
}

/// A Redis backend over `storage` that keeps `server` alive as long as the backend lives
/// (for the conformance suite, whose harness owns only the backend).
fn backend(storage: Arc<RedisStorage>, server: Option<RedisServer>) -> Backend {
    delayq_conformance::with_guard(Backend::from(storage), server)
}

/// Starts a redis-server and a backend over it, on `ctx`.
pub async fn served(ctx: StorageContext) -> Backend {
    served_with_options(ctx, |o| o).await
}

/// Starts a redis-server and a backend over it, on `ctx`, with the test options changed by
/// `change`.
pub async fn served_with_options(
    ctx: StorageContext,
    change: impl FnOnce(RedisOptions) -> RedisOptions,
) -> Backend {
    let server = RedisServer::start();
    let storage = delayq_redis::start(ctx, change(options(&server)))
        .await
        .expect("start the Redis backend");
    backend(storage, Some(server))
}

/// A backend with `options` on `ctx`, over a Redis that someone else owns (a shared
/// cluster).
pub async fn served_with(ctx: StorageContext, options: RedisOptions) -> Backend {
    let storage = delayq_redis::start(ctx, options)
        .await
        .expect("start the Redis backend");
    backend(storage, None)
}

/// A key prefix no other test of this process uses (for tests sharing one cluster).
pub fn unique_prefix(base: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{base}{n}-{}", std::process::id())
}

/// Adds tasks `<name>-0`, `<name>-1`, … one after the other until `stop` is set, and returns
/// the ids whose add was acknowledged, and how many adds failed.
pub fn spawn_writer(
    queue: Queue,
    topic: &'static str,
    name: &'static str,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<(Vec<String>, usize)> {
    tokio::spawn(async move {
        let mut acked = Vec::new();
        let mut failed = 0;
        let mut i = 0u64;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let id = format!("{name}-{i}");
            i += 1;
            match queue.add(delayq::NewTask::new(topic, &id).body("x")).await {
                Ok(_) => acked.push(id),
                Err(e) => {
                    assert_eq!(e.kind(), delayq::ErrorKind::Unavailable, "{e}");
                    failed += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        (acked, failed)
    })
}

/// The ids of `ids` that `queue` does not have (any state).
pub async fn missing(queue: &Queue, topic: &str, ids: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for id in ids {
        loop {
            match queue.get(topic, id).await {
                Ok(_) => break,
                Err(e) if e.kind() == delayq::ErrorKind::NotFound => {
                    out.push(id.clone());
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
    out
}

/// The load a failover test puts on a queue: 100 tasks acknowledged before, a task that comes
/// due during the failover, and a writer adding throughout. [`FailoverLoad::check`] then
/// proves nothing acknowledged was lost and the delayed task still fires.
pub struct FailoverLoad {
    before: Vec<String>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    writer: tokio::task::JoinHandle<(Vec<String>, usize)>,
}

impl FailoverLoad {
    /// Adds the tasks of before the failover and starts the writer on topic `jobs`.
    pub async fn start(queue: &Queue) -> FailoverLoad {
        let before: Vec<String> = (0..100).map(|i| format!("before-{i}")).collect();
        for id in &before {
            queue
                .add(delayq::NewTask::new("jobs", id).body("x"))
                .await
                .expect("add before the failover");
        }
        // Due while the master is down: fires after.
        queue
            .add(
                delayq::NewTask::new("later", "l-1")
                    .body("x")
                    .delay_ms(2_000),
            )
            .await
            .expect("add a delayed task");
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = spawn_writer(queue.clone(), "jobs", "during", Arc::clone(&stop));
        tokio::time::sleep(Duration::from_millis(300)).await;
        FailoverLoad {
            before,
            stop,
            writer,
        }
    }

    /// Stops the writer and checks that every acknowledged add is there and that the task
    /// due during the failover fires. `followed` is how long delayq took to serve again;
    /// `report` tells what the servers logged, shown when an add is missing.
    pub async fn check(self, queue: &Queue, followed: Duration, report: impl Fn() -> String) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (during, failed) = self.writer.await.expect("writer");
        eprintln!(
            "served again {followed:?} after the kill; {} adds acknowledged, {failed} refused meanwhile",
            during.len()
        );
        let lost_before = missing(queue, "jobs", &self.before).await;
        let lost_during = missing(queue, "jobs", &during).await;
        assert!(
            lost_before.is_empty() && lost_during.is_empty(),
            "acknowledged adds are missing: {} of {} before the kill ({lost_before:?}), {} of {} \
             during it ({lost_during:?})\n{}",
            lost_before.len(),
            self.before.len(),
            lost_during.len(),
            during.len(),
            report()
        );
        let fired = queue
            .pop("later", delayq::PopOptions::default().timeout_ms(20_000))
            .await
            .expect("pop the delayed task");
        assert_eq!(fired.len(), 1, "the delayed task fires after the failover");
    }
}

/// Adds `producers × per_producer` tasks (ids `task-<p>-<i:07>`: 14 bytes, as the memory
/// figure was measured with) with 100-byte bodies to `topic` from `producers`
/// concurrent producers, in batches of `batch`; each batch is due `delay_ms()` after it is
/// added (for the benchmarks).
pub async fn add_concurrently(
    queue: &Queue,
    topic: &'static str,
    producers: usize,
    per_producer: usize,
    batch: usize,
    delay_ms: Arc<dyn Fn() -> u64 + Send + Sync>,
) {
    let body = "x".repeat(100);
    let handles: Vec<_> = (0..producers)
        .map(|p| {
            let (queue, body, delay_ms) = (queue.clone(), body.clone(), Arc::clone(&delay_ms));
            tokio::spawn(async move {
                let mut n = 0;
                while n < per_producer {
                    let size = batch.min(per_producer - n);
                    let delay = delay_ms();
                    let tasks = (n..n + size)
                        .map(|i| {
                            delayq::NewTask::new(topic, format!("task-{p}-{i:07}"))
                                .body(body.clone())
                                .delay_ms(delay)
                        })
                        .collect();
                    for r in queue.add_batch(tasks).await.expect("add_batch") {
                        r.expect("added");
                    }
                    n += size;
                }
            })
        })
        .collect();
    for h in handles {
        h.await.expect("producer");
    }
}
