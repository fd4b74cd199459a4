//! Flow limits in Redis mode (docs/flow-control.md) beyond the shared conformance cases: two
//! instances on one Redis share a topic's limits and its slots (a pop on one instance counts
//! against the other, and a finish on one wakes a pop parked on the other); what Redis mode
//! does not do yet is refused naming the field: limits on a topic of several partitions,
//! `max_active_per_key`, a task's `key`.

mod support;

use std::time::Duration;

use delayq::{FlowLimits, NewTask, PopOptions};
use delayq_testkit::RedisServer;
use support::{Instance, options};

fn field_of<T: std::fmt::Debug>(result: delayq::Result<T>) -> String {
    match result {
        Err(delayq::Error::Invalid(f)) => f.field,
        other => panic!("expected an invalid field, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_the_limits_and_the_slots() {
    let server = RedisServer::start();
    let a = Instance::system(options(&server)).await;
    let b = Instance::system(options(&server)).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_redis_mode_does_not_do_yet_is_refused_naming_the_field() {
    let server = RedisServer::start();
    let q = Instance::system(options(&server).topic_partitions("wide", 4))
        .await
        .queue;
    assert_eq!(
        field_of(q.set_limits("wide", FlowLimits::max_active(2)).await),
        "topic"
    );
    assert_eq!(
        field_of(
            q.set_limits("pay", FlowLimits::default().with_max_active_per_key(1))
                .await
        ),
        "max_active_per_key"
    );
    assert_eq!(
        field_of(q.add(NewTask::new("pay", "k").key("m-1")).await),
        "key"
    );
    assert!(q.limits().await.unwrap().is_empty(), "nothing was kept");
    assert_eq!(q.stats("pay").await.unwrap().total, 0);
}
