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
use delayq_testkit::{RedisCluster, cli};

fn options(prefix: &str) -> RedisOptions {
    RedisOptions::new(RedisCluster::shared().url())
        .key_prefix(prefix)
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(2))
}

delayq_conformance::suite!(|ctx| async move {
    support::served_with(ctx, options(&support::unique_prefix("c"))).await
});

/// The flow cases, the topics they limit with the Cluster's default partitions (several:
/// their limits are counted by the topics' permits, in a slot of their own).
mod flow {
    use super::{options, support};

    delayq_conformance::flow_suite!(|ctx| async move {
        support::served_with(ctx, options(&support::unique_prefix("f"))).await
    });
}

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

/// A slot in the middle of a migration: its keys have moved to the importing node, so the
/// source answers `ASK` and the backend must send the request there after `ASKING` (the
/// backend follows redirects itself: redis-rs's retries are off, `src/conn.rs`). Once the
/// slot is handed over, `MOVED` is followed too. A cluster of its own: the slot map changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_follow_ask_and_moved_while_a_slot_migrates() {
    let cluster = tokio::task::block_in_place(RedisCluster::start);
    let options = RedisOptions::new(cluster.url())
        .topic_partitions("mig", 1)
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(2));
    let instance = support::Instance::system(options).await;
    let q = &instance.queue;
    q.add(NewTask::new("mig", "before").delay_ms(60_000))
        .await
        .expect("add");
    let (source, target, slot) = tokio::task::block_in_place(|| {
        let slot = cluster.keyslot("dq:{mig#0}:records");
        let source = cluster
            .master_of_slot(slot)
            .expect("a master serves the slot");
        let target = *cluster
            .masters()
            .iter()
            .find(|&&m| m != source)
            .expect("another master");
        let id = |port: u16| cli(port, &["CLUSTER", "MYID"]).trim().to_owned();
        let (source_id, target_id) = (id(source), id(target));
        let slot_arg = slot.to_string();
        let setslot = |port: u16, how: &str, node: &str| {
            let out = cli(port, &["CLUSTER", "SETSLOT", &slot_arg, how, node]);
            assert_eq!(out.trim(), "OK", "SETSLOT {how} on {port}: {out}");
        };
        setslot(target, "IMPORTING", &source_id);
        setslot(source, "MIGRATING", &target_id);
        let keys = cli(source, &["CLUSTER", "GETKEYSINSLOT", &slot_arg, "1000"]);
        let keys: Vec<&str> = keys.lines().filter(|k| !k.trim().is_empty()).collect();
        assert!(!keys.is_empty(), "the topic's keys are in slot {slot}");
        let target_port = target.to_string();
        let mut migrate = vec![
            "MIGRATE",
            "127.0.0.1",
            &target_port,
            "",
            "0",
            "5000",
            "KEYS",
        ];
        migrate.extend(keys.iter().copied());
        let out = cli(source, &migrate);
        assert_eq!(out.trim(), "OK", "MIGRATE: {out}");
        (source, target, slot)
    });
    // Mid-migration: the source answers ASK for the topic's keys.
    let asked = cli(source, &["EXISTS", "dq:{mig#0}:records"]);
    assert!(asked.contains("ASK"), "the source redirects: {asked}");
    let got = q.get("mig", "before").await.expect("a get through ASK");
    assert_eq!(got.state, State::Delayed);
    // An add touches keys the migration has not created on the target yet: Redis refuses
    // such a multi-key request with TRYAGAIN until the slot is handed over. That refusal
    // comes before anything runs, so it must say so (a retryable 503, nothing applied).
    let during = q.add(NewTask::new("mig", "during").delay_ms(60_000)).await;
    if let Err(e) = &during {
        assert!(
            e.outcome() == delayq::Outcome::NotApplied && e.is_retryable(),
            "an add during the migration: {e}"
        );
    }
    // Handed over: every master says so, and a stale slot map meets MOVED.
    tokio::task::block_in_place(|| {
        let target_id = cli(target, &["CLUSTER", "MYID"]).trim().to_owned();
        for m in cluster.masters() {
            let out = cli(
                m,
                &["CLUSTER", "SETSLOT", &slot.to_string(), "NODE", &target_id],
            );
            assert_eq!(out.trim(), "OK", "SETSLOT NODE on {m}: {out}");
        }
    });
    q.add(NewTask::new("mig", "after").delay_ms(60_000))
        .await
        .expect("an add after MOVED");
    let mut ids = vec!["before", "after"];
    if during.is_ok() {
        ids.push("during");
    } else {
        let missing = q.get("mig", "during").await;
        assert!(missing.is_err(), "a refused add took effect: {missing:?}");
    }
    for id in &ids {
        let got = q.get("mig", id).await.expect("a get");
        assert_eq!(got.state, State::Delayed, "{id}");
    }
    let stats = q.stats("mig").await.expect("stats");
    assert_eq!(stats.delayed, ids.len() as u64, "{stats:?}");
    q.shutdown().await.ok();
}

/// Every master gets the scripts (the function library), and a master without them (a node
/// that joined, or one restarted without persistence: here `FUNCTION FLUSH` on each) gets
/// them again on the next call that reaches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_master_gets_the_scripts_again_when_it_lost_them() {
    // A cluster of its own: flushing the shared one's functions would reach other tests.
    let cluster = RedisCluster::start_masters_only();
    let options = RedisOptions::new(cluster.url())
        .key_prefix("flush")
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(2))
        .partitions(16);
    let instance = support::Instance::system(options).await;
    let q = &instance.queue;
    q.add(NewTask::new("orders", "first")).await.expect("add");
    let has_scripts = |port: u16| cli(port, &["FUNCTION", "LIST"]).contains("delayq_");
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3);
    assert!(
        masters.iter().all(|&m| has_scripts(m)),
        "loaded on every master"
    );
    for &m in &masters {
        assert_eq!(cli(m, &["FUNCTION", "FLUSH"]).trim(), "OK");
        assert!(!has_scripts(m));
    }
    // 64 tasks over 16 partitions reach every master.
    for i in 0..64 {
        q.add(NewTask::new("orders", format!("o-{i}")))
            .await
            .expect("an add after the flush");
    }
    assert!(masters.iter().all(|&m| has_scripts(m)), "loaded again");
    let got = q
        .pop("orders", PopOptions::default().count(65))
        .await
        .expect("pop");
    assert_eq!(got.len(), 65);
    let _ = q.shutdown().await;
}
