//! Flow limits in Redis mode (docs/flow-control.md) beyond the shared conformance cases: two
//! instances on one Redis share a topic's limits and its slots (a pop on one instance counts
//! against the other, and a finish on one wakes a pop parked on the other), with one
//! partition and with several (the topic's permits); per-key limits hand out what the engine
//! does, with one partition and with several.

mod support;

use std::time::Duration;

use delayq::{BuryOptions, FlowLimits, NewTask, PopOptions, ReleaseOptions};
use delayq_conformance::Harness;
use delayq_testkit::RedisServer;
use support::{Instance, options};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_the_limits_and_the_slots() {
    two_instances_share(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_the_limits_and_the_slots_of_a_topic_of_several_partitions() {
    two_instances_share(4).await;
}

/// Two instances over one Redis, the topic in `partitions` partitions.
async fn two_instances_share(partitions: u32) {
    let server = RedisServer::start();
    let a = Instance::system(options(&server).partitions(partitions)).await;
    let b = Instance::system(options(&server).partitions(partitions)).await;
    a.queue
        .set_limits("pay", FlowLimits::max_active(1))
        .await
        .unwrap();
    assert_eq!(
        b.queue.limits().await.unwrap(),
        [("pay".to_owned(), FlowLimits::max_active(1))],
        "listed by every instance"
    );
    for id in ["p1", "p2"] {
        a.queue.add(NewTask::new("pay", id)).await.unwrap();
    }
    let held = a
        .queue
        .pop("pay", PopOptions::default().count(5))
        .await
        .unwrap();
    assert_eq!(held.len(), 1);
    let none = b
        .queue
        .pop("pay", PopOptions::default().count(5))
        .await
        .unwrap();
    assert!(none.is_empty(), "the other instance sees the slot taken");
    // A pop parked on b is woken by a's finish.
    let bq = b.queue.clone();
    let waiter = tokio::spawn(async move {
        bq.pop("pay", PopOptions::default().timeout_ms(20_000))
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished());
    a.queue
        .finish("pay", &held[0].id, Some(&held[0].receipt))
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken in time")
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_ne!(got[0].id, held[0].id);
    a.queue.delete_limits("pay").await.unwrap();
    assert!(b.queue.limits().await.unwrap().is_empty());
}

/// Per-key limits in the scripts hand out exactly what the engine does: the same random
/// walk of adds (keys, priorities, unkeyed tasks, promotions), pops of several, finishes,
/// releases, burials, cancels, takes by id and limit changes on the memory backend and on
/// Redis, both on a manual clock, must pop the same tasks in the same order and count the
/// same held back after every step. The engine's per-key queues are checked against a model
/// by their own randomized test; this one holds the scripts' key windows (lib.lua `settle`)
/// to the engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_limits_hand_out_what_the_engine_does() {
    let redis = Harness::new(support::served).await;
    walk_against_the_engine(&redis, true).await;
}

/// The same walk on a topic of four partitions, whose limits its permits count: the same
/// hand-outs in the same order, and the same READY, ACTIVE and held-back counts but the
/// keys'. (What a partition counts as held back by keys is only the part of the topic's
/// count it knows of: it keeps each key's window against its own ACTIVE tasks.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_limits_across_partitions_hand_out_what_the_engine_does() {
    let redis =
        Harness::new(
            |ctx| async move { support::served_with_options(ctx, |o| o.partitions(4)).await },
        )
        .await;
    walk_against_the_engine(&redis, false).await;
}

/// The random walk of the two tests above on `redis` and on the memory engine; `keys`: the
/// keys' held-back counts must agree too.
async fn walk_against_the_engine(redis: &Harness, keys: bool) {
    const T: &str = "keyed";
    let engine = Harness::new(|ctx| async move { delayq::storage::memory::start(ctx, 1) }).await;
    let both = [&engine, redis];
    for h in both {
        h.queue
            .set_limits(T, FlowLimits::default().with_max_active_per_key(2))
            .await
            .unwrap();
    }
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    // What each backend's consumers hold: id -> receipt.
    let mut held: [Vec<(String, String)>; 2] = [Vec::new(), Vec::new()];
    let mut added = 0;
    for step in 0..400 {
        match next(10) {
            0..=3 => {
                added += 1;
                let mut task = NewTask::new(T, format!("t{added}")).priority(next(3) as u32 * 5);
                if next(5) > 0 {
                    task = task.key(format!("k{}", next(4)));
                }
                if next(4) == 0 {
                    // Due at the next step's clock: promoted into its key's order.
                    task = task.delay_ms(1);
                }
                for h in both {
                    h.queue.add(task.clone()).await.unwrap();
                }
            }
            4..=5 => {
                let count = 1 + next(3) as usize;
                let mut got = Vec::new();
                for (i, h) in both.iter().enumerate() {
                    let popped = h.pop_now(T, count).await;
                    got.push(popped.iter().map(|d| d.id.clone()).collect::<Vec<_>>());
                    held[i].extend(popped.into_iter().map(|d| (d.id, d.receipt)));
                }
                assert_eq!(got[0], got[1], "step {step}: the pops differ");
            }
            6..=7 if !held[0].is_empty() => {
                let at = next(held[0].len() as u64) as usize;
                let how = next(4);
                for (i, h) in both.iter().enumerate() {
                    let (id, receipt) = held[i].remove(at);
                    match how {
                        0 => {
                            let options = ReleaseOptions::default().delay_ms(0).receipt(receipt);
                            h.queue.release(T, &id, options).await.unwrap();
                        }
                        1 => {
                            let options = BuryOptions::default().receipt(receipt);
                            h.queue.bury(T, &id, options).await.unwrap();
                        }
                        _ => h.queue.finish(T, &id, Some(&receipt)).await.unwrap(),
                    }
                }
            }
            8 if added > 0 => {
                // A cancel, or a take by id (beanstalk's reserve-job), which may take a task
                // its key's limit holds back.
                let id = format!("t{}", 1 + next(added));
                let take = next(2) == 0;
                let mut results = Vec::new();
                for (i, h) in both.iter().enumerate() {
                    if take {
                        let got = h.queue.take(T, &id).await;
                        results.push(got.is_ok());
                        held[i].extend(got.ok().map(|d| (d.id, d.receipt)));
                    } else {
                        results.push(h.queue.cancel(T, &id).await.is_ok());
                        held[i].retain(|(held_id, _)| *held_id != id);
                    }
                }
                assert_eq!(results[0], results[1], "step {step}: take {take}, {id}");
            }
            9 => {
                let limits = match next(4) {
                    0 => None,
                    1 => Some(FlowLimits::default().with_max_active_per_key(1)),
                    2 => Some(FlowLimits::default().with_max_active_per_key(3)),
                    _ => Some(FlowLimits::max_active(4).with_max_active_per_key(2)),
                };
                for h in both {
                    match limits {
                        Some(l) => h.queue.set_limits(T, l).await.unwrap(),
                        None => h.queue.delete_limits(T).await.unwrap(),
                    }
                }
            }
            _ => {}
        }
        let ms = 1 + next(5);
        for h in both {
            h.advance(ms);
            h.eventually("every due task is promoted", || async {
                h.queue.stats(T).await.unwrap().delayed == 0
            })
            .await;
        }
        let [a, b] = [&engine, redis].map(|h| h.queue.stats(T));
        let (a, mut b) = (a.await.unwrap(), b.await.unwrap());
        if !keys {
            b.held_back.key = a.held_back.key;
        }
        assert_eq!(
            (a.ready, a.active, a.held_back),
            (b.ready, b.active, b.held_back),
            "step {step}: engine vs Redis"
        );
    }
}
