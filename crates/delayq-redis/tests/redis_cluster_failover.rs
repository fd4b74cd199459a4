//! Redis Cluster failover: a master of a cluster of our own (3 masters, 3 replicas) is
//! killed while delayq adds tasks; its replica takes over by itself (node timeout 1 s),
//! delayq keeps serving (events too: the node killed is the one events were subscribed on),
//! and nothing it acknowledged with `WAIT` is lost.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use delayq::{NewTask, PopOptions};
use delayq_redis::RedisOptions;
use delayq_testkit::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_dies_and_nothing_acknowledged_is_lost() {
    let mut cluster = RedisCluster::start();
    let options = RedisOptions::new(cluster.url())
        .partitions(8)
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(2))
        // Generous (below the response timeout): with the whole suite running, two tests
        // at a time on two cores, a replica's ack once took over 500 ms before any failover.
        .wait_replicas(1, Duration::from_millis(1_500));
    let instance = support::Instance::system(options.clone()).await;
    let q = instance.queue.clone();
    // A second instance, to check that events (pub/sub) still cross instances after the
    // node it subscribed on died.
    let other = support::Instance::system(options).await;
    let load = support::FailoverLoad::start(&q).await;

    // Kill the master of partition 0 of "jobs".
    let slot = cluster.keyslot("dq:{jobs#0}:records");
    let victim = cluster
        .master_of_slot(slot)
        .expect("a master serves the slot");
    cluster.kill(victim);
    let killed = Instant::now();
    assert!(
        cluster.wait_healthy(Duration::from_secs(60)),
        "the replica of {victim} takes over"
    );
    // delayq serves every partition again, on the promoted replica.
    assert!(
        support::eventually(Duration::from_secs(30), || async {
            q.stats("jobs").await.is_ok() && q.check_ready().await.is_ok()
        })
        .await,
        "delayq serves again after the failover"
    );
    let followed = killed.elapsed();
    // The dead master comes back as a replica of its successor: writes to its slots are
    // acknowledged as replicated again.
    cluster.restart(victim);
    let attempt = AtomicU32::new(0);
    assert!(
        support::eventually(Duration::from_secs(60), || async {
            let n = attempt.fetch_add(1, Ordering::Relaxed);
            // 16 ids: some land in every partition.
            let batch: Vec<NewTask> = (0..16)
                .map(|k| NewTask::new("jobs", format!("after-{n}-{k}")).body("x"))
                .collect();
            match q.add_batch(batch).await {
                Ok(results) if results.iter().all(Result::is_ok) => true,
                _ => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    false
                }
            }
        })
        .await,
        "writes are acknowledged again once the old master is back as a replica"
    );
    let parked = {
        let q = other.queue.clone();
        tokio::spawn(async move {
            q.pop("wake", PopOptions::default().timeout_ms(20_000))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let woke = Instant::now();
    let mut added = false;
    while !added && woke.elapsed() < Duration::from_secs(20) {
        added = q.add(NewTask::new("wake", "w-1").body("x")).await.is_ok();
        if !added {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let got = parked.await.expect("join").expect("parked pop");
    assert_eq!(
        got.len(),
        1,
        "the other instance's parked consumer was woken"
    );
    assert!(
        woke.elapsed() < Duration::from_secs(15),
        "{:?}",
        woke.elapsed()
    );
    load.check(&q, followed, || cluster.report()).await;
    let _ = q.shutdown().await;
    let _ = other.queue.shutdown().await;
}
