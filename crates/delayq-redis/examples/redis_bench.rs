//! Measures the Redis backend on its own redis-server (no persistence):
//!
//! 1. library batched add throughput: `TASKS` tasks with 100-byte bodies due in an hour,
//!    added through `Queue::add_batch` in batches of 10 000 by `PRODUCERS` concurrent
//!    producers;
//! 2. Redis memory per delayed task: `INFO memory` `used_memory` before and after, less the
//!    100-byte body;
//! 3. fire lateness: 50 000 more tasks due at 10 000 per second over 5 s, the lateness
//!    histogram of the promoter (the queue's metrics) once all are READY;
//! 4. the idle command rate of one instance with the million tasks due in an hour: `INFO
//!    commandstats` over 10 s (commands sent by the instance, and every command Redis ran,
//!    including those inside scripts).
//!
//! `cargo run --release -p delayq-redis --example redis_bench [tasks]`

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq::{Clock, NewTask, Queue, StorageContext, SystemClock};
use support::{RedisServer, options};

const PRODUCERS: usize = 4;
const BATCH: usize = 10_000;

fn used_memory(server: &RedisServer) -> u64 {
    server
        .info_field("memory", "used_memory")
        .and_then(|v| v.parse().ok())
        .expect("used_memory")
}

/// CPU seconds redis-server used (user + system).
fn redis_cpu(server: &RedisServer) -> f64 {
    let user: f64 = server
        .info_field("cpu", "used_cpu_user")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    let sys: f64 = server
        .info_field("cpu", "used_cpu_sys")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    user + sys
}

/// CPU seconds this process used (user + system), from /proc.
fn own_cpu() -> f64 {
    delayq_bench::memory::cpu_seconds(std::process::id()).expect("this process's CPU time")
}

/// (calls of commands clients sent, calls of every command) since the last CONFIG RESETSTAT.
fn command_calls(server: &RedisServer) -> (u64, u64, Vec<String>) {
    let info = server
        .command("INFO commandstats")
        .expect("INFO commandstats");
    let mut sent = 0;
    let mut all = 0;
    let mut lines = Vec::new();
    for line in info.lines().filter(|l| l.starts_with("cmdstat_")) {
        let name = line.split(':').next().unwrap_or_default();
        let calls: u64 = line
            .split("calls=")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        all += calls;
        // What a client sends; everything else ran inside those scripts.
        if matches!(name, "cmdstat_fcall" | "cmdstat_ping" | "cmdstat_subscribe") {
            sent += calls;
        }
        lines.push(line.to_owned());
    }
    (sent, all, lines)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let tasks: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let server = RedisServer::start();
    let ctx = StorageContext::new(Arc::new(SystemClock::new()));
    let storage = delayq_redis::start(ctx.clone(), options(&server))
        .await
        .expect("start");
    let queue = Queue::new(storage.clone(), ctx);
    // Register the topic and let the leases settle before measuring.
    queue.add(NewTask::new("bench", "warmup")).await.unwrap();
    queue.delete("bench", "warmup").await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let added = batched_add(&queue, &server, tasks).await;
    fire_lateness(&queue).await;
    idle_commands(&server, added).await;
    queue.shutdown().await.unwrap();
}

/// Parts 1 and 2: adds about `tasks` tasks due in an hour and reports the throughput, the CPU
/// it took and the memory per task. Returns how many were added.
async fn batched_add(queue: &Queue, server: &RedisServer, tasks: usize) -> usize {
    let before = used_memory(server);
    server.command("CONFIG RESETSTAT").unwrap();
    let redis_cpu_before = redis_cpu(server);
    let own_cpu_before = own_cpu();

    let started = Instant::now();
    let per_producer = tasks / PRODUCERS;
    support::add_concurrently(
        queue,
        "bench",
        PRODUCERS,
        per_producer,
        BATCH,
        Arc::new(|| 3_600_000),
    )
    .await;
    let took = started.elapsed();
    let added = per_producer * PRODUCERS;
    println!(
        "batched add: {added} tasks in {:.2} s = {:.0} tasks/s ({PRODUCERS} producers, batches of {BATCH})",
        took.as_secs_f64(),
        added as f64 / took.as_secs_f64()
    );
    let redis_cpu = redis_cpu(server) - redis_cpu_before;
    let own_cpu = own_cpu() - own_cpu_before;
    let (_, _, lines) = command_calls(server);
    println!(
        "  CPU during the adds: redis-server {redis_cpu:.2} s ({:.2} µs per task), this process {own_cpu:.2} s ({:.2} µs per task)",
        redis_cpu * 1e6 / added as f64,
        own_cpu * 1e6 / added as f64
    );
    for line in lines.iter().filter(|l| l.starts_with("cmdstat_fcall")) {
        println!("  {line}");
    }
    let stats = queue.stats("bench").await.unwrap();
    assert_eq!(stats.delayed as usize, added);

    let after = used_memory(server);
    let per_task = (after - before) as f64 / added as f64;
    println!(
        "memory: used_memory {before} -> {after} B: {per_task:.1} B per delayed task, {:.1} B beyond the 100-byte body (ids like \"task-0-0000001\", 14 bytes)",
        per_task - 100.0
    );
    added
}

/// Part 3: the promoter's lateness for 50 000 tasks due at 10 000 per second.
async fn fire_lateness(queue: &Queue) {
    let clock = SystemClock::new();
    let start = clock.now_ms() + 2_000;
    let late: Vec<NewTask> = (0..50_000u64)
        .map(|i| NewTask::new("late", format!("l{i}")).run_at_ms(start + i / 10))
        .collect();
    for chunk in late.chunks(BATCH) {
        for r in queue.add_batch(chunk.to_vec()).await.expect("add_batch") {
            r.expect("added");
        }
    }
    let fired_before = queue.context().metrics.snapshot();
    while queue.stats("late").await.unwrap().ready < 50_000 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let fired = queue.context().metrics.snapshot();
    let counts: Vec<u64> = fired
        .lateness_cumulative
        .iter()
        .zip(&fired_before.lateness_cumulative)
        .map(|(a, b)| a - b)
        .collect();
    let total = *counts.last().unwrap_or(&0);
    let quantile = |q: f64| {
        let rank = (q * total as f64).ceil() as u64;
        let i = counts
            .iter()
            .position(|&c| c >= rank)
            .unwrap_or(counts.len() - 1);
        delayq::metrics::LATENESS_BUCKETS_MS
            .get(i)
            .map_or("> 5000 ms".to_owned(), |b| format!("<= {b} ms"))
    };
    println!(
        "fire lateness, {total} tasks due at 10 000/s: p50 {}, p99 {}, p99.9 {} (promoter's histogram)",
        quantile(0.5),
        quantile(0.99),
        quantile(0.999)
    );
}

/// Part 4: the commands of an idle instance over 10 s, with `added` tasks due in an hour.
async fn idle_commands(server: &RedisServer, added: usize) {
    server.command("CONFIG RESETSTAT").unwrap();
    let window = Duration::from_secs(10);
    tokio::time::sleep(window).await;
    let (sent, all, lines) = command_calls(server);
    println!(
        "idle, {added} tasks due in an hour: {:.1} commands/s sent by the instance, {:.1} commands/s run by Redis including inside scripts",
        sent as f64 / window.as_secs_f64(),
        all as f64 / window.as_secs_f64()
    );
    for line in lines {
        println!("  {line}");
    }
}
