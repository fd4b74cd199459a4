//! The cases of what the dashboard reads (docs/design.md §10): the due-time range
//! counts of [`delayq::Queue::due_counts`] and the per-topic activity counters of
//! [`delayq::Queue::activity`]. Every backend must answer them alike: the counts from its own
//! index of due times, the counters where each transition happens (the queue, or the
//! backend's timers and scripts).

use std::time::Duration;

use delayq::{
    BuryOptions, ErrorKind, MAX_DUE_BOUNDS, MaxRetries, NewTask, ReleaseOptions, State,
    TopicActivity,
};

use crate::{Harness, START_MS};

const T: &str = "orders";

fn task(topic: &str, id: &str, delay_ms: u64) -> NewTask {
    NewTask::new(topic, id).body("x").delay_ms(delay_ms)
}

/// `due_counts` counts the DELAYED tasks by due in `[b_i, b_(i+1))`, per topic, and nothing
/// else (ready, cancelled, other topics); bad bounds are refused naming the field.
pub async fn due_counts_count_delayed_tasks_by_range(h: &Harness) {
    let now = START_MS;
    for (id, delay) in [
        ("ready", 0),
        ("a100", 100),
        ("a199", 199),
        ("a200", 200),
        ("a999", 999),
        ("a1000", 1_000),
        ("a5000", 5_000),
        ("gone", 150),
    ] {
        h.add(task(T, id, delay)).await;
    }
    h.add(task("other", "o150", 150)).await;
    h.queue.cancel(T, "gone").await.unwrap();
    let bounds = [now + 100, now + 200, now + 1_000, now + 1_001];
    assert_eq!(
        h.queue.due_counts(T, &bounds).await.unwrap(),
        [2, 2, 1],
        "100 and 199 | 200 and 999 | 1000; 0 is ready, 5000 is past the last bound"
    );
    assert_eq!(
        h.queue.due_counts(T, &[now, now + 10_000]).await.unwrap(),
        [6]
    );
    assert_eq!(
        h.queue.due_counts("other", &bounds).await.unwrap(),
        [1, 0, 0]
    );
    assert_eq!(
        h.queue.due_counts("never-seen", &bounds).await.unwrap(),
        [0, 0, 0]
    );
    // Once a task fires it is no longer counted.
    h.advance(150);
    h.eventually("a100 fired", || async {
        h.state(T, "a100").await == Some(State::Ready)
    })
    .await;
    assert_eq!(h.queue.due_counts(T, &bounds).await.unwrap(), [1, 2, 1]);

    let too_many: Vec<u64> = (0..=MAX_DUE_BOUNDS as u64).map(|i| now + i).collect();
    for bad in [
        &[][..],
        &[now][..],
        &[now + 10, now + 5][..],
        &[now, now][..],
        &too_many[..],
    ] {
        let err = h.queue.due_counts(T, bad).await.expect_err("bad bounds");
        assert_eq!(err.kind(), ErrorKind::Invalid, "{bad:?}");
        assert!(err.to_string().contains("bounds"), "{err}");
    }
    let most: Vec<u64> = (0..MAX_DUE_BOUNDS as u64).map(|i| now + i * 10).collect();
    let counts = h.queue.due_counts(T, &most).await.unwrap();
    assert_eq!(counts.len(), MAX_DUE_BOUNDS - 1);
    assert_eq!(
        counts.iter().sum::<u64>(),
        5,
        "a199, a200, a999, a1000, a5000"
    );
}

fn counters(a: &TopicActivity) -> [u64; 5] {
    [a.added, a.fired, a.finished, a.failed, a.dead]
}

async fn activity_of(h: &Harness, topic: &str) -> [u64; 5] {
    h.queue
        .activity()
        .into_iter()
        .find(|(t, _)| t == topic)
        .map(|(_, a)| counters(&a))
        .unwrap_or_default()
}

/// Each topic counts its own activity: adds, fires by due (with lateness), finishes (also
/// by `auto_finish`), failed attempts (release, bury, ttr expiry) and tasks gone DEAD.
pub async fn activity_counts_each_topic(h: &Harness) {
    // orders: one due later (fires), three ready at once.
    h.add(task(T, "later", 10)).await;
    for id in ["fin", "rel", "bur"] {
        h.add(
            task(T, id, 0)
                .max_retries(MaxRetries::Limited(0))
                .ttr_ms(60_000),
        )
        .await;
    }
    h.add(task(T, "ttr", 0).ttr_ms(1_000)).await;
    h.add(task("other", "x", 0)).await;
    h.add(task("other", "auto", 0)).await;
    // A duplicate kept as it was is not an add.
    h.queue
        .add(task(T, "fin", 0).on_duplicate(delayq::OnDuplicate::Keep))
        .await
        .unwrap();

    let mut held = std::collections::HashMap::new();
    for _ in 0..4 {
        let d = h.pop_ready(T).await;
        held.insert(d.id.clone(), d.receipt);
    }
    h.queue.finish(T, "fin", Some(&held["fin"])).await.unwrap();
    // max_retries 0: the release is a failed attempt and the task goes DEAD.
    let state = h
        .queue
        .release(
            T,
            "rel",
            ReleaseOptions::default()
                .receipt(held["rel"].clone())
                .error("boom"),
        )
        .await
        .unwrap();
    assert_eq!(state, State::Dead);
    h.queue
        .bury(
            T,
            "bur",
            BuryOptions::default().receipt(held["bur"].clone()),
        )
        .await
        .unwrap();
    // "ttr" expires: a failed attempt, then READY again.
    h.advance(1_000);
    h.wait_state(T, "ttr", State::Ready).await;
    // "later" fires (it was due at +10).
    h.wait_state(T, "later", State::Ready).await;
    let got = h
        .queue
        .pop(
            "other",
            delayq::PopOptions::default().count(2).auto_finish(true),
        )
        .await
        .unwrap();
    assert_eq!(got.len(), 2);

    // [added, fired, finished, failed, dead]
    h.eventually("the counters of orders", || async {
        activity_of(h, T).await == [5, 1, 1, 3, 2]
    })
    .await;
    assert_eq!(activity_of(h, "other").await, [2, 0, 2, 0, 0]);
    let all = h.queue.activity();
    let orders = &all.iter().find(|(t, _)| t == T).unwrap().1;
    // "later" fired 990 ms after its due (the clock jumped): the bucket <= 1000 ms.
    assert_eq!(
        orders.lateness_cumulative.len(),
        delayq::metrics::LATENESS_BUCKETS
    );
    assert_eq!(*orders.lateness_cumulative.last().unwrap(), 1);
    assert_eq!(
        delayq::metrics::lateness_quantile_between(&[], &orders.lateness_cumulative, 0.5),
        Some(1_000)
    );
    // Nothing is counted twice while the queue idles.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(activity_of(h, T).await, [5, 1, 1, 3, 2]);
}
