//! Promotion without a leader: leases spread over instances (backends in one process over
//! one Redis), takeover after a crash, ttr redelivery across instances, fencing. Real time,
//! generous bounds: these tests check that things happen, never how fast.

mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq::{Clock, NewTask, PopOptions, State, SystemClock};
use delayq_redis::keys::LEASE_BUCKETS;
use support::{Instance, RedisServer, eventually, lease_owners, options};

/// Waits until the leases are held by exactly `n` instances, every bucket taken.
async fn leases_settle(server: &RedisServer, n: usize) -> bool {
    eventually(Duration::from_secs(10), || async {
        let owners = lease_owners(server);
        owners.len() == n
            && owners.values().sum::<usize>() == LEASE_BUCKETS as usize
            && owners
                .values()
                .all(|&k| k <= (LEASE_BUCKETS as usize).div_ceil(n))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_spread_over_live_instances() {
    let server = RedisServer::start();
    let a = Instance::system(options(&server)).await;
    assert!(
        leases_settle(&server, 1).await,
        "{:?}",
        lease_owners(&server)
    );
    let b = Instance::system(options(&server)).await;
    let c = Instance::system(options(&server)).await;
    assert!(
        leases_settle(&server, 3).await,
        "{:?}",
        lease_owners(&server)
    );
    let owners = lease_owners(&server);
    for i in [&a, &b, &c] {
        assert!(owners.contains_key(i.storage.instance_id()), "{owners:?}");
    }
    // A graceful shutdown gives the leases up at once; the others share them.
    c.queue.shutdown().await.unwrap();
    assert!(!lease_owners(&server).contains_key(c.storage.instance_id()));
    assert!(
        leases_settle(&server, 2).await,
        "{:?}",
        lease_owners(&server)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_added_through_one_instance_fire_and_pop_through_others() {
    let server = RedisServer::start();
    let a = Instance::system(options(&server)).await;
    let b = Instance::system(options(&server)).await;
    let c = Instance::system(options(&server)).await;
    assert!(leases_settle(&server, 3).await);
    let clock = SystemClock::new();
    let base = clock.now_ms() + 300;
    let tasks = (0..200)
        .map(|n| NewTask::new("jobs", format!("j{n}")).run_at_ms(base + n * 3))
        .collect();
    for r in a.queue.add_batch(tasks).await.unwrap() {
        r.unwrap();
    }
    let consumer = |q: delayq::Queue| {
        let clock = clock.clone();
        tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let batch = q
                    .pop("jobs", PopOptions::default().count(10).timeout_ms(2_000))
                    .await
                    .unwrap();
                if batch.is_empty() {
                    return got;
                }
                let now = clock.now_ms();
                for d in batch {
                    assert!(
                        now >= d.due_ms,
                        "{} popped {} ms early",
                        d.id,
                        d.due_ms - now
                    );
                    q.finish("jobs", &d.id, Some(&d.receipt)).await.unwrap();
                    got.push(d.id);
                }
            }
        })
    };
    let (gb, gc) = (consumer(b.queue.clone()), consumer(c.queue.clone()));
    let mut all = gb.await.unwrap();
    all.extend(gc.await.unwrap());
    let unique: HashSet<&String> = all.iter().collect();
    assert_eq!(
        (all.len(), unique.len()),
        (200, 200),
        "each task exactly once"
    );
    let stats = a.queue.stats("jobs").await.unwrap();
    assert_eq!((stats.finished, stats.total), (200, 200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_lease_holder_is_taken_over_and_nothing_is_lost() {
    let server = RedisServer::start();
    let a = Instance::system(options(&server)).await;
    assert!(leases_settle(&server, 1).await);
    // B starts; before A gives anything up, A crashes: every bucket is a dead instance's.
    let b = Instance::system(options(&server)).await;
    a.storage.halt();
    let crashed_at = Instant::now();
    assert_eq!(
        lease_owners(&server).get(a.storage.instance_id()),
        Some(&64)
    );
    let clock = SystemClock::new();
    let due = clock.now_ms() + 200;
    let tasks = (0..100)
        .map(|n| NewTask::new("t", format!("x{n}")).run_at_ms(due))
        .collect();
    for r in b.queue.add_batch(tasks).await.unwrap() {
        r.unwrap();
    }
    // Nothing pops here: only a promoter can make them READY.
    assert!(
        eventually(Duration::from_secs(10), || async {
            b.queue.stats("t").await.unwrap().ready == 100
        })
        .await,
        "B never took the crashed instance's partitions over"
    );
    let takeover = crashed_at.elapsed();
    eprintln!("takeover after a crash: {takeover:?} (lease 1 s)");
    assert!(takeover < Duration::from_secs(5), "{takeover:?}");
    assert!(leases_settle(&server, 1).await);
    assert!(lease_owners(&server).contains_key(b.storage.instance_id()));
    let got = b
        .queue
        .pop("t", PopOptions::default().count(1_000))
        .await
        .unwrap();
    assert_eq!(got.len(), 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttr_expiry_redelivers_to_another_instance() {
    let server = RedisServer::start();
    let a = Instance::system(options(&server)).await;
    let b = Instance::system(options(&server)).await;
    assert!(leases_settle(&server, 2).await);
    for n in 0..20 {
        a.queue
            .add(NewTask::new("t", format!("r{n}")).ttr_ms(500))
            .await
            .unwrap();
    }
    let first = a
        .queue
        .pop("t", PopOptions::default().count(20))
        .await
        .unwrap();
    assert_eq!(first.len(), 20);
    // A "crashes" without finishing; B gets every task again once the ttr has passed.
    a.storage.halt();
    let mut again = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while again.len() < 20 && Instant::now() < deadline {
        let got = b
            .queue
            .pop("t", PopOptions::default().count(20).timeout_ms(1_000))
            .await
            .unwrap();
        for d in got {
            assert_eq!(d.retries, 1);
            let old = first.iter().find(|f| f.id == d.id).unwrap();
            assert_ne!(old.receipt, d.receipt);
            let err = b
                .queue
                .finish("t", &d.id, Some(&old.receipt))
                .await
                .unwrap_err();
            assert_eq!(err.kind(), delayq::ErrorKind::Conflict);
            b.queue.finish("t", &d.id, Some(&d.receipt)).await.unwrap();
            again.push(d.id);
        }
    }
    assert_eq!(again.len(), 20);
    let info = b.queue.get("t", "r0").await.unwrap();
    assert_eq!(info.state, State::Finished);
    assert_eq!(info.history[0].outcome, "ttr_expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_off_holder_takes_a_fresh_token_and_goes_on() {
    let server = RedisServer::start();
    let a = Instance::system(options(&server)).await;
    assert!(leases_settle(&server, 1).await);
    a.queue.add(NewTask::new("t", "warm")).await.unwrap();
    // As if newer holders had worked on every partition and the token counter were lost.
    for p in 0..4 {
        let reply = server
            .command(&format!("SET dq:{{t#{p}}}:fence 1000000"))
            .unwrap();
        assert!(reply.starts_with("+OK"), "{reply}");
    }
    server.command("DEL dq:{lease}:token").unwrap();
    let clock = SystemClock::new();
    let due = clock.now_ms() + 100;
    for n in 0..10 {
        a.queue
            .add(NewTask::new("t", format!("f{n}")).run_at_ms(due))
            .await
            .unwrap();
    }
    assert!(
        eventually(Duration::from_secs(10), || async {
            a.queue.stats("t").await.unwrap().ready == 11
        })
        .await,
        "promotion never recovered from the fence"
    );
    let token = server.command("GET dq:{lease}:token").unwrap();
    let token: u64 = token.lines().nth(1).unwrap().parse().unwrap();
    assert!(token > 1_000_000, "{token}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_idle_long_polls_while_adding_at_full_speed() {
    let server = RedisServer::start();
    let a = Instance::system(options(&server)).await;
    let b = Instance::system(options(&server)).await;
    // 200 consumers parked on topics nobody adds to: they hold no Redis connection.
    let idle: Vec<_> = (0..200)
        .map(|n| {
            let q = b.queue.clone();
            tokio::spawn(async move {
                q.pop(
                    &format!("idle-{}", n % 10),
                    PopOptions::default().timeout_ms(3_000),
                )
                .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(b.queue.context().waiters.parked(), 200);
    let clients = server.info_field("clients", "connected_clients").unwrap();
    assert!(
        clients.parse::<u32>().unwrap() < 20,
        "{clients} connections"
    );
    // Meanwhile: add as fast as we can, and consume it through the other instance.
    let producer = {
        let q = a.queue.clone();
        tokio::spawn(async move {
            for round in 0..20 {
                let batch = (0..500)
                    .map(|n| NewTask::new("busy", format!("b{round}-{n}")))
                    .collect();
                for r in q.add_batch(batch).await.unwrap() {
                    r.unwrap();
                }
            }
        })
    };
    let mut consumed = 0;
    let started = Instant::now();
    while consumed < 10_000 && started.elapsed() < Duration::from_secs(60) {
        let got = b
            .queue
            .pop(
                "busy",
                PopOptions::default()
                    .count(1_000)
                    .timeout_ms(1_000)
                    .auto_finish(true),
            )
            .await
            .unwrap();
        consumed += got.len();
    }
    producer.await.unwrap();
    assert_eq!(consumed, 10_000);
    for w in idle {
        let got = tokio::time::timeout(Duration::from_secs(10), w)
            .await
            .expect("idle long-poll ends at its timeout")
            .unwrap()
            .unwrap();
        assert!(got.is_empty());
    }
    assert_eq!(b.queue.context().waiters.parked(), 0);
    let _ = Arc::clone(&a.storage);
}
