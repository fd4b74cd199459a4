//! Add and fire throughput of the Redis backend on one Redis (a standalone redis-server)
//! and on a Redis Cluster of three masters (no replicas), all on this machine:
//!
//! 1. add: `TASKS` tasks with 100-byte bodies due in 15 s, through `Queue::add_batch` in
//!    batches of 1 000 by 8 concurrent producers, over a topic of 16 partitions;
//! 2. fire: from their due time until all of them are READY (the promoter moving them);
//! 3. the CPU cores this process and the Redis servers kept busy while adding.
//!
//! The point is whether delayq scales past one Redis core (a single Redis runs every
//! script on one thread), not the absolute figures of a shared machine.
//!
//! `cargo run --release -p delayq-redis --example redis_scale [tasks]`

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq::{Clock, NewTask, Queue, State, StorageContext, SystemClock};
use delayq_redis::RedisOptions;
use delayq_testkit::{RedisCluster, RedisServer};

const PRODUCERS: usize = 8;
const BATCH: usize = 1_000;
const PARTITIONS: u32 = 16;
const DUE_IN_MS: u64 = 15_000;

struct Figures {
    add_per_s: f64,
    fire_per_s: f64,
    /// CPU cores busy while adding: this process, and all Redis processes together.
    add_cores: (f64, f64),
}

/// CPU seconds this process used (user + system), from /proc.
fn own_cpu() -> f64 {
    delayq_bench::memory::cpu_seconds(std::process::id()).expect("this process's CPU time")
}

/// CPU seconds the Redis servers on `ports` used (user + system, `INFO cpu`).
fn redis_cpu(ports: &[u16]) -> f64 {
    ports
        .iter()
        .map(|&port| {
            let info = delayq_testkit::cli(port, &["INFO", "cpu"]);
            ["used_cpu_user:", "used_cpu_sys:"]
                .iter()
                .filter_map(|field| {
                    info.lines()
                        .find_map(|l| l.strip_prefix(field))
                        .and_then(|v| v.trim().parse::<f64>().ok())
                })
                .sum::<f64>()
        })
        .sum()
}

async fn measure(url: String, ports: &[u16], tasks: usize) -> Figures {
    let clock = Arc::new(SystemClock::new());
    let ctx = StorageContext::new(clock.clone());
    let options = RedisOptions::new(url)
        .partitions(PARTITIONS)
        .response_timeout(Duration::from_secs(10));
    let storage = delayq_redis::start(ctx.clone(), options)
        .await
        .expect("start");
    let queue = Queue::new(storage, ctx);
    queue.add(NewTask::new("scale", "warmup")).await.unwrap();
    queue.delete("scale", "warmup").await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_000)).await;

    let due_at = clock.now_ms() + DUE_IN_MS;
    let (own_before, redis_before) = (own_cpu(), redis_cpu(ports));
    let started = Instant::now();
    let per_producer = tasks / PRODUCERS;
    let delay = {
        let clock = clock.clone();
        Arc::new(move || due_at.saturating_sub(clock.now_ms()).max(1))
    };
    support::add_concurrently(&queue, "scale", PRODUCERS, per_producer, BATCH, delay).await;
    let added = per_producer * PRODUCERS;
    let add_took = started.elapsed();
    let add_cores = (
        (own_cpu() - own_before) / add_took.as_secs_f64(),
        (redis_cpu(ports) - redis_before) / add_took.as_secs_f64(),
    );
    let now = clock.now_ms();
    assert!(
        now < due_at,
        "adding took longer than {DUE_IN_MS} ms: use fewer tasks"
    );
    tokio::time::sleep(Duration::from_millis(due_at - now)).await;
    let fire_start = Instant::now();
    loop {
        let stats = queue.stats("scale").await.expect("stats");
        if stats.count(State::Ready) as usize >= added {
            break;
        }
        assert!(fire_start.elapsed() < Duration::from_secs(300), "{stats:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let fire_took = fire_start.elapsed();
    let _ = queue.shutdown().await;
    Figures {
        add_per_s: added as f64 / add_took.as_secs_f64(),
        fire_per_s: added as f64 / fire_took.as_secs_f64(),
        add_cores,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let tasks: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(500_000);
    let one = {
        let server = RedisServer::start();
        measure(server.url(), &[server.port()], tasks).await
    };
    let three = {
        let cluster = RedisCluster::start_masters_only();
        measure(cluster.url(), &cluster.ports(), tasks).await
    };
    println!("{tasks} tasks, {PARTITIONS} partitions, {PRODUCERS} producers, batches of {BATCH}");
    println!(
        "| Redis              | add (tasks/s) | fire (tasks/s) | cores busy adding: delayq / Redis |"
    );
    println!(
        "|--------------------|--------------:|---------------:|-----------------------------------|"
    );
    for (name, f) in [("1 master", &one), ("cluster, 3 masters", &three)] {
        println!(
            "| {name:<18} | {:>13.0} | {:>14.0} | {:.2} / {:.2} |",
            f.add_per_s, f.fire_per_s, f.add_cores.0, f.add_cores.1
        );
    }
}
