//! The shared conformance suite against a real Redis Cluster (3 masters, 3 replicas), and a
//! check that one topic's partitions spread over every master.
//!
//! One cluster serves the whole binary (starting one takes seconds); each test has its own
//! key prefix, so tests do not see each other's tasks, leases or events.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use delayq::{NewTask, PopOptions, State};
use delayq_redis::RedisOptions;
use delayq_testkit::RedisCluster;

fn options(prefix: &str) -> RedisOptions {
    RedisOptions::new(RedisCluster::shared().url())
        .key_prefix(prefix)
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(2))
}

delayq_conformance::suite!(|ctx| async move {
    support::served_with(ctx, options(&support::unique_prefix("c"))).await
});

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topics_partitions_land_on_every_master() {
    let cluster = RedisCluster::shared();
    let prefix = support::unique_prefix("spread");
    let instance = support::Instance::system(options(&prefix).partitions(16)).await;
    let q = &instance.queue;
    for i in 0..64 {
        q.add(NewTask::new("orders", format!("o-{i}")).body("x"))
            .await
            .expect("add");
    }
    let mut masters = BTreeSet::new();
    for p in 0..16 {
        let key = format!("{prefix}:{{orders#{p}}}:records");
        let slot = cluster.keyslot(&key);
        let master = cluster
            .master_of_slot(slot)
            .unwrap_or_else(|| panic!("no master serves slot {slot}"));
        masters.insert(master);
    }
    let all: BTreeSet<u16> = cluster.masters().into_iter().collect();
    assert_eq!(
        masters, all,
        "16 partitions of one topic should use all 3 masters"
    );
    // Whole-topic operations gather over the partitions on every master.
    let stats = q.stats("orders").await.expect("stats");
    assert_eq!(stats.count(State::Ready), 64);
    let page = q.list("orders", None, 1, 100).await.expect("list");
    assert_eq!((page.total, page.items.len()), (64, 64));
    let got = q
        .pop("orders", PopOptions::default().count(64))
        .await
        .expect("pop");
    assert_eq!(got.len(), 64);
    let topics = q.topics().await.expect("topics");
    assert_eq!(topics.len(), 1);
    let _ = q.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wakeups_cross_instances_over_the_cluster() {
    let prefix = support::unique_prefix("wake");
    let a = support::Instance::system(options(&prefix).partitions(8)).await;
    let b = support::Instance::system(options(&prefix).partitions(8)).await;
    // Make the topic known first, so that both instances watch it.
    a.queue
        .add(NewTask::new("mail", "warm").body("x"))
        .await
        .expect("add");
    let _ = b.queue.pop("mail", PopOptions::default()).await;
    let waiter = {
        let q = b.queue.clone();
        tokio::spawn(async move {
            q.pop("mail", PopOptions::default().timeout_ms(20_000))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = std::time::Instant::now();
    a.queue
        .add(NewTask::new("mail", "m-1").body("x").delay_ms(300))
        .await
        .expect("add");
    let got = waiter.await.expect("join").expect("pop");
    assert_eq!(
        got.len(),
        1,
        "the parked consumer of the other instance got the task"
    );
    assert_eq!(got[0].id, "m-1");
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    let _ = a.queue.shutdown().await;
    let _ = b.queue.shutdown().await;
}
