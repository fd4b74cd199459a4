//! In-process queue benchmarks on the in-memory backend: add (single and batched), and
//! pop + finish, per task. `cargo bench -p delayq --bench queue`.

use std::sync::Arc;

use criterion::{BatchSize, Criterion, Throughput, criterion_main};
use delayq::{NewTask, PopOptions, Queue, StorageContext, SystemClock};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn queue() -> Queue {
    Queue::memory_with(StorageContext::new(Arc::new(SystemClock::new())))
}

fn tasks(prefix: &str, n: usize, delay_ms: u64) -> Vec<NewTask> {
    (0..n)
        .map(|i| {
            NewTask::new("bench", format!("{prefix}-{i}"))
                .body("x".repeat(100))
                .delay_ms(delay_ms)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("queue");

    group.throughput(Throughput::Elements(1));
    group.bench_function("add single (delayed, 100 B body)", |b| {
        let q = rt.block_on(async { queue() });
        let mut i = 0u64;
        b.to_async(&rt).iter(|| {
            i += 1;
            let task = NewTask::new("bench", format!("s-{i}"))
                .body("x".repeat(100))
                .delay_ms(3_600_000);
            let q = q.clone();
            async move { q.add(task).await.unwrap() }
        });
    });

    group.throughput(Throughput::Elements(10_000));
    group.bench_function("add batch of 10 000 (delayed)", |b| {
        let q = rt.block_on(async { queue() });
        let mut round = 0u64;
        b.to_async(&rt).iter_batched(
            || {
                round += 1;
                tasks(&format!("b{round}"), 10_000, 3_600_000)
            },
            |batch| {
                let q = q.clone();
                async move { q.add_batch(batch).await.unwrap() }
            },
            BatchSize::LargeInput,
        );
    });

    group.throughput(Throughput::Elements(1_000));
    group.bench_function("pop + finish, 1 000 ready tasks, count 100", |b| {
        let q = rt.block_on(async { queue() });
        let mut round = 0u64;
        b.to_async(&rt).iter_custom(|iters| {
            let q = q.clone();
            round += 1;
            let prefix = format!("p{round}");
            async move {
                let mut timed = std::time::Duration::ZERO;
                for i in 0..iters {
                    // Filling the queue is not timed; popping and finishing it is.
                    q.add_batch(tasks(&format!("{prefix}-{i}"), 1_000, 0))
                        .await
                        .unwrap();
                    let started = std::time::Instant::now();
                    loop {
                        let got = q
                            .pop("bench", PopOptions::default().count(100))
                            .await
                            .unwrap();
                        if got.is_empty() {
                            break;
                        }
                        for d in got {
                            q.finish(&d.topic, &d.id, Some(&d.receipt)).await.unwrap();
                        }
                    }
                    timed += started.elapsed();
                }
                timed
            }
        });
    });
    group.finish();
}

// The macro generates an undocumented `benches` function.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::bench);
}
criterion_main!(group::benches);
