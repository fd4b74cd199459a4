//! Failover of PostgreSQL under load (issue 28): a primary with a synchronous streaming
//! replica ([`PostgresPair`]), three instances (each a backend and a queue in this process)
//! over a URL naming both servers with `target_session_attrs=read-write`.
//!
//! - `a_failover_loses_nothing_acknowledged_under_synchronous_replication`: four clients add,
//!   pop, finish, release, touch, cancel and read through random instances, recorded; the
//!   primary is SIGKILLed and a second later the replica promoted; meanwhile operations fail
//!   with errors (none hangs, none pretends); the instances reconnect to the new primary by
//!   themselves; once the load stops the topics drain (ttr expiries included, so every
//!   instance's driver came back) and the history checker finds nothing acknowledged lost,
//!   no task with two holders, nothing early.
//! - `a_replica_that_fell_behind_loses_nothing_acknowledged_when_promoted`: the replica
//!   streams through a fault proxy; adds run, the stream is blackholed (the replica falls
//!   behind), the primary is SIGKILLed and the replica promoted. Under synchronous
//!   replication the adds made while the replica could not confirm were never acknowledged
//!   (their outcome is unknown), so every acknowledged add is on the new primary. With
//!   `synchronous_commit = local` the same run loses acknowledged adds and fails.
//! - `every_instance_s_driver_and_listener_work_after_a_failover`: after the failover, a
//!   long-poll parked on each instance wakes for a delayed task added through another (the
//!   driver promotes it, the listener carries the wake-up), and a task whose ttr runs out is
//!   handed out again (only a driver does that).
//! - `a_crash_and_restart_of_postgres_loses_nothing_the_driver_did`: the server crashes
//!   (immediate shutdown) and restarts under a running instance, right after its driver
//!   promoted tasks and ran out others' ttr; the instance comes back by itself and every one
//!   of them is delivered, once.

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use delayq::{Clock, NewTask, PopOptions, Queue, SystemClock};
use delayq_conformance::recorded::{Client, Load, check, seed};
use delayq_testkit::history::{Op, Outcome, Recorder, TaskKey, now_us};
use delayq_testkit::{FaultProxy, Faults, PostgresPair, PostgresServer};
use support::{eventually, instance_of};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_loses_nothing_acknowledged_under_synchronous_replication() {
    let seed = seed();
    eprintln!("failover seed {seed} (DELAYQ_CHAOS_SEED repeats it)");
    let mut pair = tokio::task::block_in_place(|| PostgresPair::start("on"));
    let url = pair.url();
    let mut queues = Vec::new();
    for _ in 0..3 {
        queues.push(instance_of(&url, 4).await);
    }
    let queues = Arc::new(queues);
    let load = Load::start(Arc::clone(&queues), seed);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let before = load.rec.history().counts();
    assert!(
        before.ok > 20,
        "the load runs before the failover: {before:?}"
    );

    // The primary dies; a second later (a cluster manager's detection) the replica is
    // promoted. Meanwhile every operation must fail with an error, not hang or pretend.
    let killed_us = delayq_testkit::history::now_us();
    tokio::task::block_in_place(|| pair.kill_primary());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let failed_over_us = delayq_testkit::history::now_us();
    tokio::task::block_in_place(|| pair.promote_replica());
    eprintln!("primary killed at {killed_us} µs, replica promoted at {failed_over_us} µs");
    // The load goes on; every instance must find the new primary by itself.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after = load.rec.history();
    let unavailable = after
        .events
        .iter()
        .filter(|e| {
            e.invoked_us > killed_us
                && e.invoked_us < failed_over_us
                && matches!(&e.outcome, Outcome::Failed(why) | Outcome::Unknown(why)
                    if why.contains("PostgreSQL"))
        })
        .count();
    assert!(
        unavailable > 0,
        "operations while no server accepted writes failed with errors: {:?}",
        after.failures()
    );
    let ok_after = after
        .events
        .iter()
        .filter(|e| e.invoked_us > failed_over_us && matches!(e.outcome, Outcome::Ok(_)))
        .count();
    assert!(
        ok_after > 20,
        "the load goes on after the failover: {ok_after} calls succeeded; failures {:?}",
        after.failures()
    );
    for (i, q) in queues.iter().enumerate() {
        let id = format!("after-{i}");
        assert!(
            eventually(Duration::from_secs(20), || async {
                q.add(NewTask::new("probe", &id)).await.is_ok()
            })
            .await,
            "instance {i} reaches the new primary"
        );
    }
    // The tasks live on the promoted replica now.
    let on_replica = tokio::task::block_in_place(|| {
        pair.replica()
            .psql("SELECT count(*) FROM delayq.tasks WHERE topic = 'probe'")
    });
    assert_eq!(on_replica, "3");
    load.stop_and_check(&format!("failover; failures {:?}", after.failures()))
        .await;
    for q in queues.iter() {
        q.shutdown().await.ok();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_fell_behind_loses_nothing_acknowledged_when_promoted() {
    let primary = tokio::task::block_in_place(PostgresServer::start);
    let stream = FaultProxy::start(([127, 0, 0, 1], primary.port()).into()).await;
    let port = stream.addr().port();
    let mut pair = tokio::task::block_in_place(|| PostgresPair::with_primary(primary, "on", port));
    let queue = instance_of(&pair.url(), 8).await;
    let rec = Arc::new(Recorder::new());
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicU64::new(0));
    let mut adders = Vec::new();
    for n in 0..4 {
        let mut client = Client::new(n, Arc::clone(&rec), Arc::new(vec![queue.clone()]), 1);
        let (stop, next) = (Arc::clone(&stop), Arc::clone(&next));
        adders.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let id = format!("a{}", next.fetch_add(1, Ordering::Relaxed));
                client.add(TaskKey::new("lag", id), 60_000, 30_000).await;
            }
            client
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The replica stops hearing from the primary: it falls behind.
    let behind_us = now_us();
    stream.set(Faults::blackhole());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let killed_us = now_us();
    tokio::task::block_in_place(|| pair.fail_over());
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let mut added = Vec::new();
    let mut reader = None;
    for a in adders {
        let client = a.await.expect("an adder");
        added.extend(client.added.iter().cloned());
        reader = Some(client);
    }
    let mut reader = reader.expect("a client");
    reader.n = 99;
    reader.read_back(&added).await;
    let history = rec.history();
    let adds = |from: u64, to: u64, ok: bool| {
        history
            .events
            .iter()
            .filter(|e| {
                matches!(e.op, Op::Add { .. })
                    && e.invoked_us >= from
                    && e.invoked_us < to
                    && matches!(e.outcome, Outcome::Ok(_)) == ok
            })
            .count()
    };
    eprintln!(
        "adds acknowledged before the lag {}, while behind {} (not {}), after the failover {}; {:?}",
        adds(0, behind_us, true),
        adds(behind_us, killed_us, true),
        adds(behind_us, killed_us, false),
        adds(killed_us, u64::MAX, true),
        history.counts()
    );
    assert!(adds(0, behind_us, true) > 0, "adds before the lag");
    assert_eq!(
        adds(behind_us, killed_us, true),
        0,
        "no add made while the replica could not confirm it is acknowledged"
    );
    assert!(
        adds(killed_us, u64::MAX, true) > 0,
        "adds after the failover"
    );
    check(&history, false);
    queue.shutdown().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_instance_s_driver_and_listener_work_after_a_failover() {
    let mut pair = tokio::task::block_in_place(|| PostgresPair::start("remote_apply"));
    let url = pair.url();
    let (a, b) = (instance_of(&url, 4).await, instance_of(&url, 4).await);
    a.add(NewTask::new("before", "x")).await.unwrap();
    tokio::task::block_in_place(|| pair.fail_over());
    assert!(
        eventually(Duration::from_secs(20), || async {
            a.get("before", "x").await.is_ok() && b.get("before", "x").await.is_ok()
        })
        .await,
        "both instances reach the new primary, the task acknowledged before is there"
    );

    for (name, parked_on, added_on) in [("on-a", &a, &b), ("on-b", &b, &a)] {
        let parked = {
            let q: Queue = parked_on.clone();
            let topic = name.to_owned();
            tokio::spawn(async move {
                q.pop(&topic, PopOptions::default().timeout_ms(20_000))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let started = Instant::now();
        added_on
            .add(NewTask::new(name, "later").delay_ms(500))
            .await
            .expect("add after the failover");
        let got = parked
            .await
            .unwrap()
            .expect("the long-poll after the failover");
        assert_eq!(got.len(), 1, "{name}: the parked long-poll wakes: {got:?}");
        assert!(SystemClock::new().now_ms() >= got[0].due_ms, "never early");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{name}: woken at the task's due, not at the long-poll's timeout"
        );
    }

    // ttr expiry is the drivers' alone: a task held past its ttr comes back.
    a.add(NewTask::new("ttr", "t").ttr_ms(300)).await.unwrap();
    let first = a.pop("ttr", PopOptions::default()).await.unwrap();
    assert_eq!(first.len(), 1);
    let again = b
        .pop("ttr", PopOptions::default().timeout_ms(15_000))
        .await
        .unwrap();
    assert_eq!(again.len(), 1, "the ttr ran out and the task came back");
    assert_eq!(again[0].retries, 1);
    assert_ne!(again[0].receipt, first[0].receipt);
    a.shutdown().await.ok();
    b.shutdown().await.ok();
}

/// PostgreSQL crashes (an immediate shutdown: SIGQUIT, no checkpoint) and restarts on the
/// same data directory while an instance runs: the tasks the driver promoted and the tasks
/// whose ttr it ran out are READY at the crash; after the restart the instance reconnects by
/// itself and every one of them is delivered, once, the expired ones as a redelivery, none
/// lost and none early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_and_restart_of_postgres_loses_nothing_the_driver_did() {
    let mut server = tokio::task::block_in_place(PostgresServer::start);
    let url = server.url();
    let q = instance_of(&url, 4).await;
    let topic = "crash";
    for i in 0..20 {
        q.add(NewTask::new(topic, format!("ttr-{i}")).ttr_ms(300))
            .await
            .unwrap();
    }
    let held = q.pop(topic, PopOptions::default().count(20)).await.unwrap();
    assert_eq!(held.len(), 20, "the tasks whose ttr will run out are held");
    for i in 0..100 {
        q.add(NewTask::new(topic, format!("due-{i}")).delay_ms(300 + i))
            .await
            .unwrap();
    }
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.stats(topic).await.is_ok_and(|s| s.ready == 120)
        })
        .await,
        "the driver promotes the 100 and hands the 20 back: {:?}",
        q.stats(topic).await
    );
    tokio::task::block_in_place(|| {
        server.stop();
        server.restart();
    });

    let mut got: HashMap<String, u32> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < 120 && Instant::now() < deadline {
        // Errors while the instance reconnects; it comes back by itself.
        let Ok(tasks) = q
            .pop(
                topic,
                PopOptions::default()
                    .count(200)
                    .timeout_ms(1_000)
                    .auto_finish(true),
            )
            .await
        else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let now = SystemClock::new().now_ms();
        for t in tasks {
            assert!(
                now >= t.due_ms,
                "never early: {} due {} at {now}",
                t.id,
                t.due_ms
            );
            assert!(
                got.insert(t.id.clone(), t.retries).is_none(),
                "{} delivered twice after the crash",
                t.id
            );
        }
    }
    assert_eq!(got.len(), 120, "every task is delivered after the restart");
    for (id, retries) in &got {
        let expected = u32::from(id.starts_with("ttr-"));
        assert_eq!(*retries, expected, "{id}: its retries after the crash");
    }
    q.shutdown().await.ok();
}
