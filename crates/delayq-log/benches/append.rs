//! Append throughput of 100-byte records, per fsync policy:
//!
//! - `batch1000`: one thread appends batches of 1000 records and waits for each batch's
//!   ticket (the queue's batched add);
//! - `batch1000_x2`: two threads doing the same, so their batches share fdatasyncs;
//! - `single_x8`: eight threads each appending one record and waiting for it (concurrent
//!   single adds; under `Always` this measures group commit);
//! - `single_async64`: 64 tasks on a two-worker tokio runtime, each appending one record and
//!   awaiting it (the HTTP server's shape).
//!
//! Throughput is reported in records per second; MB/s of payload is that times 100 bytes
//! (on disk each record takes 109 bytes).
//!
//! Run: `cargo bench -p delayq-log --bench append`.

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_main};
use delayq_log::{FsyncPolicy, Log, LogOptions};

const RECORD: usize = 100;
const BATCH: usize = 1000;

fn open(policy: FsyncPolicy) -> (tempfile::TempDir, Log) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (log, _) = Log::open(dir.path(), LogOptions::default().with_fsync(policy), |_| {
        Ok::<(), std::convert::Infallible>(())
    })
    .expect("open");
    (dir, log)
}

/// Keeps the disk bounded: an empty snapshot covering everything lets old segments go.
fn trim(log: &Log) {
    if log.stats().segments > 4 {
        log.sync().expect("sync");
        log.write_snapshot(log.last_seq(), std::iter::empty::<&[u8]>())
            .expect("snapshot");
    }
}

/// Runs `per_thread(log)` on `threads` threads `iters` times, timing only the appends
/// (a single thread runs inline: spawning one would cost as much as a batch).
fn timed(log: &Log, threads: usize, iters: u64, per_thread: impl Fn(&Log) + Sync) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let start = Instant::now();
        if threads == 1 {
            per_thread(log);
        } else {
            std::thread::scope(|s| {
                for _ in 0..threads {
                    s.spawn(|| per_thread(log));
                }
            });
        }
        total += start.elapsed();
        trim(log);
    }
    total
}

fn bench_policy(c: &mut Criterion, name: &str, policy: FsyncPolicy) {
    let record = [0x5au8; RECORD];
    let batch: Vec<&[u8]> = vec![&record[..]; BATCH];
    let mut group = c.benchmark_group(format!("append/{name}"));
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));

    let (_dir, log) = open(policy);
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("batch1000", |b| {
        b.iter_custom(|iters| {
            timed(&log, 1, iters, |log| {
                log.append_batch(&batch).unwrap().wait_blocking().unwrap();
            })
        })
    });
    group.throughput(Throughput::Elements(2 * 10 * BATCH as u64));
    group.bench_function("batch1000_x2", |b| {
        b.iter_custom(|iters| {
            timed(&log, 2, iters, |log| {
                for _ in 0..10 {
                    log.append_batch(&batch).unwrap().wait_blocking().unwrap();
                }
            })
        })
    });
    let singles: u64 = if policy == FsyncPolicy::Always {
        50
    } else {
        1000
    };
    group.throughput(Throughput::Elements(8 * singles));
    group.bench_function("single_x8", |b| {
        b.iter_custom(|iters| {
            timed(&log, 8, iters, |log| {
                for _ in 0..singles {
                    log.append(&record).unwrap().wait_blocking().unwrap();
                }
            })
        })
    });
    let tasks = 64;
    group.throughput(Throughput::Elements(tasks * singles));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let log = std::sync::Arc::new(log);
    group.bench_function("single_async64", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                runtime.block_on(async {
                    let handles: Vec<_> = (0..tasks)
                        .map(|_| {
                            let log = log.clone();
                            tokio::spawn(async move {
                                for _ in 0..singles {
                                    log.append(&record).unwrap().wait().await.unwrap();
                                }
                            })
                        })
                        .collect();
                    for h in handles {
                        h.await.unwrap();
                    }
                });
                total += start.elapsed();
                trim(&log);
            }
            total
        })
    });
    group.finish();
    drop(runtime);
    std::sync::Arc::into_inner(log)
        .expect("no other owner")
        .close()
        .expect("close");
}

fn append(c: &mut Criterion) {
    bench_policy(c, "always", FsyncPolicy::Always);
    bench_policy(c, "interval10ms", FsyncPolicy::default());
    bench_policy(c, "never", FsyncPolicy::Never);
}

/// Runs every append benchmark (what `criterion_group!` would generate, documented).
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    append(&mut c);
}

criterion_main!(benches);
