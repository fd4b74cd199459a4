//! Flow limits (docs/design.md §11, docs/flow-control.md): a topic's `max_active`, its rate
//! (`rate_per_s` with `burst`) and `max_active_per_key` bound what every pop hands out; a
//! slot frees when a task leaves ACTIVE (finish, release, bury, ttr expiry); a busy key does
//! not hold back other keys; a pop held back only by limits waits and wakes when a slot frees,
//! when the rate allows the next task, or when a limit is raised; limits are listed, replaced
//! and removed; `/stats` counts the READY tasks they hold back.
//!
//! Run by [`crate::flow_suite!`] on every backend.

use std::time::Duration;

use delayq::{ErrorKind, FlowLimits, NewTask, PopOptions, ReleaseOptions, State};

use crate::Harness;
use crate::support::{ids, kind, returned, wait_parked};

const T: &str = "limited";

fn ready(id: &str) -> NewTask {
    NewTask::new(T, id).body(id.to_owned())
}

async fn set(h: &Harness, limits: FlowLimits) {
    h.queue.set_limits(T, limits).await.expect("set limits");
}

/// `max_active` hands out at most that many; a finish frees a slot; the rest are counted as
/// held back by it.
pub async fn max_active_bounds_active_tasks(h: &Harness) {
    set(h, FlowLimits::max_active(2)).await;
    for i in 0..5 {
        h.add(ready(&format!("t{i}"))).await;
    }
    let first = h.pop_now(T, 5).await;
    assert_eq!(ids(&first), ["t0", "t1"]);
    assert!(h.pop_now(T, 5).await.is_empty(), "at the limit");
    let stats = h.queue.stats(T).await.unwrap();
    assert_eq!((stats.active, stats.ready), (2, 3));
    assert_eq!(stats.held_back.max_active, 3);
    h.queue
        .finish(T, "t0", Some(&first[0].receipt))
        .await
        .unwrap();
    assert_eq!(ids(&h.pop_now(T, 5).await), ["t2"]);
    // A release and a bury free a slot too.
    h.queue
        .release(T, "t1", ReleaseOptions::default().delay_ms(60_000))
        .await
        .unwrap();
    assert_eq!(ids(&h.pop_now(T, 5).await), ["t3"]);
    h.queue
        .bury(T, "t2", delayq::BuryOptions::default())
        .await
        .unwrap();
    assert_eq!(ids(&h.pop_now(T, 5).await), ["t4"]);
    assert_eq!(h.queue.stats(T).await.unwrap().active, 2);
}

/// A pop that waits at the limit is woken when a slot frees, and not before.
pub async fn a_waiting_pop_wakes_when_a_slot_frees(h: &Harness) {
    set(h, FlowLimits::max_active(1)).await;
    h.add(ready("a")).await;
    h.add(ready("b")).await;
    let a = h.pop_now(T, 1).await;
    assert_eq!(ids(&a), ["a"]);
    let q = h.queue.clone();
    let waiter =
        tokio::spawn(async move { q.pop(T, PopOptions::default().timeout_ms(60_000)).await });
    wait_parked(h, 1).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(!waiter.is_finished(), "the pop waits at the limit");
    h.queue.finish(T, "a", Some(&a[0].receipt)).await.unwrap();
    assert_eq!(ids(&returned(waiter).await), ["b"]);
}

/// A task whose ttr runs out holds its slot until then, and frees it when it comes back.
pub async fn a_slot_is_held_until_the_ttr_passes(h: &Harness) {
    set(h, FlowLimits::max_active(1)).await;
    h.add(ready("a").ttr_ms(1_000)).await;
    h.add(ready("b")).await;
    assert_eq!(ids(&h.pop_now(T, 2).await), ["a"]);
    h.advance(999);
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(h.pop_now(T, 2).await.is_empty(), "the slot is still held");
    h.advance(1);
    h.wait_state(T, "a", State::Ready).await;
    // a is READY again (first in order) and the slot is free: one of them goes.
    assert_eq!(ids(&h.pop_now(T, 2).await), ["a"]);
}

/// A key at its limit does not hold back other keys or unkeyed tasks, and its own tasks go,
/// in order, as its slots free.
pub async fn a_busy_key_does_not_hold_back_others(h: &Harness) {
    set(h, FlowLimits::default().with_max_active_per_key(1)).await;
    for id in ["a1", "a2", "a3"] {
        h.add(ready(id).key("merchant-a")).await;
    }
    h.add(ready("b1").key("merchant-b")).await;
    h.add(ready("plain")).await;
    let got = h.pop_now(T, 10).await;
    assert_eq!(ids(&got), ["a1", "b1", "plain"]);
    // A delivery carries its task's key.
    let keys: Vec<Option<&str>> = got.iter().map(|d| d.key.as_deref()).collect();
    assert_eq!(keys, [Some("merchant-a"), Some("merchant-b"), None]);
    let stats = h.queue.stats(T).await.unwrap();
    assert_eq!((stats.ready, stats.held_back.key), (2, 2));
    assert!(h.pop_now(T, 10).await.is_empty());
    h.queue
        .finish(T, "a1", Some(&got[0].receipt))
        .await
        .unwrap();
    assert_eq!(ids(&h.pop_now(T, 10).await), ["a2"]);
    // The key is visible on the task.
    assert_eq!(
        h.queue.get(T, "a3").await.unwrap().key.as_deref(),
        Some("merchant-a")
    );
    // A set replaces the whole limits: without the per-key limit, a3 goes.
    set(h, FlowLimits::max_active(10)).await;
    assert_eq!(ids(&h.pop_now(T, 10).await), ["a3"]);
    let bad_key = h.queue.add(ready("x").key("no spaces")).await;
    match bad_key {
        Err(delayq::Error::Invalid(f)) => assert_eq!(f.field, "key"),
        other => panic!("expected an invalid key, got {other:?}"),
    }
}

/// The rate hands out the burst at once, then one task per interval.
pub async fn the_rate_bounds_hand_outs(h: &Harness) {
    set(h, FlowLimits::default().with_rate(10.0, Some(2))).await;
    for i in 0..10 {
        h.add(ready(&format!("t{i}"))).await;
    }
    assert_eq!(h.pop_now(T, 10).await.len(), 2, "the burst");
    assert!(h.pop_now(T, 10).await.is_empty());
    assert_eq!(h.queue.stats(T).await.unwrap().held_back.rate, 8);
    h.advance(100);
    assert_eq!(h.pop_now(T, 10).await.len(), 1, "one per 100 ms");
    h.advance(5_000);
    assert_eq!(h.pop_now(T, 10).await.len(), 2, "never more than the burst");
}

/// A pop held back by the rate wakes when the rate lets the next task go.
pub async fn a_rate_limited_pop_wakes_when_the_rate_allows(h: &Harness) {
    set(h, FlowLimits::default().with_rate(1.0, Some(1))).await;
    h.add(ready("a")).await;
    h.add(ready("b")).await;
    assert_eq!(ids(&h.pop_now(T, 1).await), ["a"]);
    let q = h.queue.clone();
    let waiter =
        tokio::spawn(async move { q.pop(T, PopOptions::default().timeout_ms(60_000)).await });
    wait_parked(h, 1).await;
    h.advance(999);
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(!waiter.is_finished(), "not before the rate allows");
    h.advance(1);
    assert_eq!(ids(&returned(waiter).await), ["b"]);
}

/// Raising a limit wakes a waiting pop; removing the limits lets everything go.
pub async fn raising_a_limit_wakes_a_waiting_pop(h: &Harness) {
    set(h, FlowLimits::max_active(1)).await;
    for id in ["a", "b", "c", "d"] {
        h.add(ready(id)).await;
    }
    assert_eq!(ids(&h.pop_now(T, 1).await), ["a"]);
    let q = h.queue.clone();
    let waiter =
        tokio::spawn(async move { q.pop(T, PopOptions::default().timeout_ms(60_000)).await });
    wait_parked(h, 1).await;
    set(h, FlowLimits::max_active(2)).await;
    assert_eq!(ids(&returned(waiter).await), ["b"]);
    h.queue.delete_limits(T).await.unwrap();
    assert_eq!(ids(&h.pop_now(T, 10).await), ["c", "d"]);
}

/// Limits are listed by topic, replaced whole, removed; bad limits and keys are refused
/// naming the field.
pub async fn limits_are_listed_replaced_and_removed(h: &Harness) {
    assert!(h.queue.limits().await.unwrap().is_empty());
    set(h, FlowLimits::max_active(3)).await;
    h.queue
        .set_limits("other", FlowLimits::default().with_rate(5.0, None))
        .await
        .unwrap();
    let listed = h.queue.limits().await.unwrap();
    assert_eq!(
        listed,
        [
            (T.to_owned(), FlowLimits::max_active(3)),
            (
                "other".to_owned(),
                FlowLimits::default().with_rate(5.0, None)
            ),
        ]
    );
    set(h, FlowLimits::default().with_rate(2.0, Some(3))).await;
    assert_eq!(
        h.queue.topic_limits(T).await.unwrap(),
        Some(FlowLimits::default().with_rate(2.0, Some(3))),
        "a set replaces the whole limits"
    );
    h.queue.delete_limits("other").await.unwrap();
    assert_eq!(h.queue.limits().await.unwrap().len(), 1);
    for bad in [
        FlowLimits::max_active(0),
        FlowLimits::default().with_rate(-1.0, None),
        FlowLimits::default(),
    ] {
        assert_eq!(
            kind(h.queue.set_limits(T, bad).await),
            ErrorKind::Invalid,
            "{bad:?}"
        );
    }
}

/// A pop over several topics skips a topic at its limit and takes the others' tasks.
pub async fn pop_any_skips_a_topic_at_its_limit(h: &Harness) {
    set(h, FlowLimits::max_active(1)).await;
    h.add(ready("l1")).await;
    h.add(ready("l2")).await;
    h.add(NewTask::new("free", "f1")).await;
    let topics = [T.to_owned(), "free".to_owned()];
    let got = h
        .queue
        .pop_any(&topics, PopOptions::default().count(10))
        .await
        .unwrap();
    let mut got = ids(&got);
    got.sort();
    assert_eq!(got, ["f1", "l1"]);
}
