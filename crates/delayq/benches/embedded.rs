//! Figures for the embedded backend (docs/design.md §6), printed as a table:
//!
//! - durable add throughput through the library, batched and single, per fsync policy, with
//!   several concurrent producers;
//! - memory per delayed task beyond its 100-byte body: the growth of the process's RSS over the
//!   fill (mimalloc, as the server ships; so what the allocator keeps counts too);
//! - bytes on disk per task;
//! - restart: time from opening the data directory to serving, with N pending tasks, and the
//!   process's CPU time over it (user and system): first from the log alone (the fill runs
//!   with the background snapshots off), then from the snapshots of every shard.
//!
//! `cargo bench -p delayq --bench embedded` (N = 1M in 8 topics). Set
//! `DELAYQ_BENCH_TASKS=10000000` for the 10M restart figure (needs ~4 GiB of memory and ~2 GiB
//! of disk), `DELAYQ_BENCH_TOPICS=1` for one topic (one shard then replays it all), and
//! `DELAYQ_BENCH_ONLY=restart` to skip the add throughput rounds.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq::storage::embedded::{self, EmbeddedOptions, EmbeddedStorage};
use delayq::{NewTask, Queue, StorageContext, SystemClock};
use delayq_log::FsyncPolicy;
use mimalloc::MiMalloc;
/// The allocator the server ships with: memory and restart time both depend on it.
#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

/// This process's resident set (`VmRSS`), in bytes, as `delayq bench memory` reads a server's.
/// Panics where it cannot be read: a memory figure of 0 would pass for a measurement.
fn rss_bytes() -> u64 {
    delayq_bench::memory::rss_bytes(std::process::id()).expect("this process's VmRSS")
}

/// This process's CPU time so far, user and system, in seconds.
fn cpu_seconds() -> (f64, f64) {
    let (user, system) =
        delayq_bench::memory::cpu_time(std::process::id()).expect("this process's CPU time");
    (user.as_secs_f64(), system.as_secs_f64())
}

const BODY: usize = 100;

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map_while(Result::ok)
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_bytes(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("delayq-bench-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

/// What the background snapshotter does while a phase runs.
#[derive(Clone, Copy)]
enum Snapshots {
    /// As the server does: a shard snapshots after 64 MiB of log.
    Default,
    /// Never on its own: the fill before "restart from the log" leaves only the log, so that
    /// restart replays all of it (with the default, the fill's own snapshots left a snapshot
    /// and its tail in some runs and not in others, and the two restarts measured the same).
    Off,
}

async fn open(
    dir: &Path,
    fsync: FsyncPolicy,
    snapshots: Snapshots,
) -> (Queue, Arc<EmbeddedStorage>) {
    let ctx = StorageContext::new(Arc::new(SystemClock::new()));
    let mut options = EmbeddedOptions::new(dir).fsync(fsync);
    if let Snapshots::Off = snapshots {
        options = options.snapshot_min_bytes(u64::MAX);
    }
    let (storage, _) = embedded::start(ctx.clone(), options).await.unwrap();
    (Queue::new(storage.clone(), ctx), storage)
}

async fn total_tasks(q: &Queue) -> usize {
    q.topics()
        .await
        .unwrap()
        .iter()
        .map(|(_, s)| s.total)
        .sum::<u64>() as usize
}

fn batch(prefix: &str, start: usize, n: usize, topics: usize) -> Vec<NewTask> {
    let body = "x".repeat(BODY);
    (start..start + n)
        .map(|i| {
            NewTask::new(format!("bench{}", i % topics), format!("{prefix}-{i}"))
                .body(body.clone())
                .delay_ms(3_600_000)
        })
        .collect()
}

/// Adds `total` tasks in batches of `batch_size` from `producers` concurrent producers.
async fn add_batched(
    q: &Queue,
    total: usize,
    batch_size: usize,
    producers: usize,
    topics: usize,
) -> Duration {
    let per = total / producers;
    let started = Instant::now();
    let mut handles = Vec::new();
    for p in 0..producers {
        let q = q.clone();
        handles.push(tokio::spawn(async move {
            let mut i = 0;
            while i < per {
                let n = batch_size.min(per - i);
                for r in q
                    .add_batch(batch(&format!("p{p}"), i, n, topics))
                    .await
                    .unwrap()
                {
                    r.unwrap();
                }
                i += n;
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    started.elapsed()
}

async fn add_single(q: &Queue, total: usize, producers: usize) -> Duration {
    let per = total / producers;
    let started = Instant::now();
    let mut handles = Vec::new();
    for p in 0..producers {
        let q = q.clone();
        handles.push(tokio::spawn(async move {
            let body = "x".repeat(BODY);
            for i in 0..per {
                q.add(
                    NewTask::new("single", format!("s{p}-{i}"))
                        .body(body.clone())
                        .delay_ms(3_600_000),
                )
                .await
                .unwrap();
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    started.elapsed()
}

/// Opens the data directory, prints how long it took to serve `pending` tasks again.
async fn timed_restart(
    dir: &Path,
    pending: usize,
    from: &str,
    snapshots: Snapshots,
) -> (Queue, Arc<EmbeddedStorage>) {
    let (user, system) = cpu_seconds();
    let started = Instant::now();
    let opened = open(dir, FsyncPolicy::default(), snapshots).await;
    let restart = started.elapsed();
    let (user_after, system_after) = cpu_seconds();
    assert_eq!(total_tasks(&opened.0).await, pending);
    println!(
        "{:<58} {:>12.2} s   (CPU: {:.2} s user, {:.2} s system)",
        format!("restart with {pending} pending, from {from}"),
        restart.as_secs_f64(),
        user_after - user,
        system_after - system,
    );
    opened
}

fn rate(n: usize, d: Duration) -> String {
    format!("{:>12.0} tasks/s", n as f64 / d.as_secs_f64())
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: run a tiny version.
    let quick = !std::env::args().any(|a| a == "--bench");
    let pending: usize = std::env::var("DELAYQ_BENCH_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 10_000 } else { 1_000_000 });
    let topics: usize = std::env::var("DELAYQ_BENCH_TOPICS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(8);
    let only_restart = std::env::var("DELAYQ_BENCH_ONLY").is_ok_and(|v| v == "restart");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "delayq embedded backend, {} cores, body {BODY} B",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("{:<58} figure", "measure");

    rt.block_on(async {
        // Memory and disk per task, then restart time; first, while the process is fresh: the
        // memory line is the RSS's growth over the fill, and what the allocator kept of the
        // add rounds' queues would come off it (it read -82 B a task after them).
        let dir = scratch();
        let rss_before = rss_bytes();
        let (q, _) = open(dir.path(), FsyncPolicy::default(), Snapshots::Off).await;
        let d = add_batched(&q, pending, 10_000, 2, topics).await;
        let rss = rss_bytes().saturating_sub(rss_before) as f64 / pending as f64;
        println!(
            "{:<58} {}",
            format!("add {pending} tasks in {topics} topics, batches of 10 000, fsync interval"),
            rate(pending, d)
        );
        println!(
            "{:<58} {:>12.0} B/task",
            "memory per delayed task beyond its body (RSS)",
            rss - BODY as f64
        );
        q.shutdown().await.unwrap();
        drop(q);
        println!(
            "{:<58} {:>12.0} B/task",
            "bytes on disk per task (log, no snapshot)",
            dir_bytes(dir.path()) as f64 / pending as f64
        );

        let (q, storage) = timed_restart(dir.path(), pending, "the log", Snapshots::Off).await;
        for shard in 0..storage.shard_count() {
            embedded::snapshot_shard(&storage, shard, true)
                .await
                .unwrap();
        }
        q.shutdown().await.unwrap();
        drop((q, storage));
        println!(
            "{:<58} {:>12.0} B/task",
            "bytes on disk per task (snapshot)",
            dir_bytes(dir.path()) as f64 / pending as f64
        );
        let (q, _) = timed_restart(dir.path(), pending, "snapshots", Snapshots::Default).await;
        q.shutdown().await.unwrap();
        drop((q, dir));

        let policies = [
            ("always", FsyncPolicy::Always),
            ("interval 10ms", FsyncPolicy::default()),
            ("never", FsyncPolicy::Never),
        ];
        for (name, policy) in policies.into_iter().filter(|_| !only_restart) {
            let dir = scratch();
            let (q, _) = open(dir.path(), policy, Snapshots::Default).await;
            let n = if quick { 20_000 } else { 1_000_000 };
            let d = add_batched(&q, n, 1_000, 4, 8).await;
            println!(
                "{:<58} {}",
                format!("add, batches of 1000, 4 producers, fsync {name}"),
                rate(n, d)
            );
            let n = if quick { 2_000 } else { 100_000 };
            let d = add_single(&q, n, 64).await;
            println!(
                "{:<58} {}",
                format!("add, single, 64 producers, fsync {name}"),
                rate(n, d)
            );
            q.shutdown().await.unwrap();
        }
    });
}
