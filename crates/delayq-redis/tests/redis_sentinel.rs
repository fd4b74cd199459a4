//! Sentinel: a real master, replica and three sentinels; the master is killed and delayq
//! follows the failover without a restart, losing nothing it acknowledged with `WAIT`.

mod support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use delayq::NewTask;
use delayq_redis::RedisOptions;
use delayq_testkit::RedisSentinel;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_a_failover_and_keeps_what_it_acknowledged() {
    let mut setup = RedisSentinel::start();
    let options = RedisOptions::new(setup.url())
        .partitions(4)
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(2))
        // Generous (below the response timeout): with the whole suite running, two tests
        // at a time on two cores, a replica's ack once took over 500 ms before any failover.
        .wait_replicas(1, Duration::from_millis(1_500));
    let instance = support::Instance::system(options).await;
    let q = instance.queue.clone();
    assert!(
        support::eventually(Duration::from_secs(20), || async {
            q.check_ready().await.is_ok()
        })
        .await,
        "delayq reaches the master through the sentinels"
    );
    let load = support::FailoverLoad::start(&q).await;

    let old = setup.master_port().expect("the sentinels name a master");
    setup.kill(old);
    let killed = Instant::now();
    let new = setup
        .wait_failover(old, Duration::from_secs(60))
        .expect("the sentinels promote the replica");
    // delayq follows: reads work again without a restart.
    assert!(
        support::eventually(Duration::from_secs(30), || async {
            q.stats("jobs").await.is_ok()
        })
        .await,
        "delayq serves again after the failover to {new}"
    );
    let followed = killed.elapsed();
    // The old master comes back as a replica of the new one (it keeps no data, see
    // `restart_as_replica_of`): writes are acknowledged as replicated again.
    setup.restart_as_replica_of(old, new);
    let attempt = std::sync::atomic::AtomicU32::new(0);
    assert!(
        support::eventually(Duration::from_secs(60), || async {
            let n = attempt.fetch_add(1, Ordering::Relaxed);
            let add = NewTask::new("jobs", format!("after-{n}")).body("x");
            match q.add(add).await {
                Ok(_) => true,
                Err(e) => {
                    assert_eq!(e.kind(), delayq::ErrorKind::Unavailable, "{e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    false
                }
            }
        })
        .await,
        "writes are acknowledged again once a replica is back"
    );
    load.check(&q, followed, || setup.report()).await;
    let _ = q.shutdown().await;
}
