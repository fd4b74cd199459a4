//! Rules 11–15 of docs/design.md §2: priorities and the ready order (also across topics with
//! `pop_any`), bury, pause and resume, reschedule, and binary bodies.
//!
//! Each case takes a [`Harness`] on a fresh backend and panics when the backend breaks the
//! rule. As in [`crate::tasks`], time moves only when a case moves the manual clock, so "not
//! before" is checked one millisecond before a due or an end, and "at" exactly at it.

use std::time::Duration;

use delayq::{
    BuryOptions, ErrorKind, NewTask, Op, Pause, PopOptions, Refusal, ReleaseOptions, State, When,
};

use crate::support::*;
use crate::{Harness, START_MS};

/// Rule 11: among READY tasks, the lowest priority number first, then the earliest due, then
/// the earliest added; no priority means 1024.
pub async fn pop_order_is_priority_then_due_then_added(h: &Harness) {
    // Two equal tasks (priority 1, due 100) that share a Redis partition, the later added
    // first by name.
    let twins = same_partition_ids("p1-early", 2);
    let (first, second) = (twins[1].as_str(), twins[0].as_str());
    let adds: [(&str, Option<u32>, u64); 7] = [
        ("p2-now", Some(2), 0),
        ("default", None, 0),
        ("p1-late", Some(1), 300),
        (first, Some(1), 100),
        (second, Some(1), 100),
        ("p0-latest", Some(0), 400),
        ("p1025", Some(1025), 0),
    ];
    for (id, priority, delay) in adds {
        let mut t = task(id, delay);
        if let Some(p) = priority {
            t = t.priority(p);
        }
        h.add(t).await;
    }
    assert_eq!(h.queue.get(T, "default").await.unwrap().priority, 1024);
    h.advance(400);
    wait_ready(h, T, 7).await;
    let got = h.pop_now(T, 10).await;
    assert_eq!(
        ids(&got),
        [
            "p0-latest",
            first,
            second,
            "p1-late",
            "p2-now",
            "default",
            "p1025"
        ]
    );
    assert_eq!(got[0].priority, 0);
    assert_eq!(got[5].priority, 1024);
}

/// `n` ids `{prefix}-N` that share a Redis partition whatever the topic's partition count.
///
/// In Redis mode the insertion order is kept per partition (a hash of the id) and is best
/// effort across partitions (docs/design.md §2 rule 11), so cases about FIFO among equals use
/// ids whose FNV-1a hashes agree modulo 1024, the most partitions a topic may have, and so
/// modulo every power of two below it. To the other backends they are just ids.
fn same_partition_ids(prefix: &str, n: usize) -> Vec<String> {
    let hash = |id: &str| delayq::core::hash::fnv1a(&[id.as_bytes()]) % 1024;
    let target = hash(&format!("{prefix}-0"));
    (0u64..)
        .map(|i| format!("{prefix}-{i}"))
        .filter(|id| hash(id) == target)
        .take(n)
        .collect()
}

/// Rule 11: tasks of one priority and one due come out in the order they were added (FIFO
/// among equals), whatever their ids: added in neither their name order nor their hash
/// order.
pub async fn equal_tasks_come_out_in_added_order(h: &Harness) {
    let same_partition = same_partition_ids("eq", 8);
    let order: Vec<String> = [5, 0, 7, 2, 6, 1, 4, 3]
        .iter()
        .map(|&i| same_partition[i].clone())
        .collect();
    for id in &order {
        h.add(task(id, 50).priority(7)).await;
    }
    h.advance(50);
    wait_ready(h, T, 8).await;
    let mut got = Vec::new();
    for _ in 0..order.len() {
        got.extend(ids(&h.pop_now(T, 1).await));
    }
    assert_eq!(got, order);
}

/// A release with a priority changes it; the task then takes its place by the new priority.
pub async fn release_priority_reorders(h: &Harness) {
    h.add(task("a", 0).priority(10)).await;
    h.add(task("b", 0).priority(20)).await;
    let a = h.pop_ready(T).await;
    assert_eq!(a.id, "a");
    h.queue
        .release(
            T,
            "a",
            ReleaseOptions::default().receipt(a.receipt).priority(30),
        )
        .await
        .unwrap();
    assert_eq!(h.queue.get(T, "a").await.unwrap().priority, 30);
    let got = h.pop_now(T, 10).await;
    assert_eq!(ids(&got), ["b", "a"]);
    assert_eq!((got[1].priority, got[1].retries), (30, 1));
}

/// Rule 11 over several topics (beanstalkd's watch list): one order across them.
pub async fn pop_any_orders_across_topics(h: &Harness) {
    h.add(NewTask::new("t.b", "b-p5").priority(5).delay_ms(100))
        .await;
    h.add(NewTask::new("t.a", "a-p5").priority(5).delay_ms(200))
        .await;
    h.add(NewTask::new("t.a", "a-p1").priority(1).delay_ms(300))
        .await;
    h.add(NewTask::new("t.c", "c-p0").priority(0)).await;
    h.advance(300);
    wait_ready(h, "t.a", 2).await;
    wait_ready(h, "t.b", 1).await;
    let topics = ["t.a".to_string(), "t.b".to_string()];
    let got = h
        .queue
        .pop_any(&topics, PopOptions::default().count(10).timeout_ms(0))
        .await
        .unwrap();
    let keys: Vec<_> = got
        .iter()
        .map(|d| format!("{}/{}", d.topic, d.id))
        .collect();
    assert_eq!(
        keys,
        ["t.a/a-p1", "t.b/b-p5", "t.a/a-p5"],
        "t.c not watched"
    );
    assert_eq!(h.state("t.c", "c-p0").await, Some(State::Ready));
    assert_eq!(h.state("t.b", "b-p5").await, Some(State::Active));
}

/// A pop over several topics waits for the first task due in any of them.
pub async fn pop_any_long_poll_wakes_on_any_topic(h: &Harness) {
    h.add(NewTask::new("t.b", "late").delay_ms(500)).await;
    let q = h.queue.clone();
    let waiter = tokio::spawn(async move {
        let topics = ["t.a".to_string(), "t.b".to_string()];
        q.pop_any(&topics, PopOptions::default().timeout_ms(60_000))
            .await
    });
    // A consumer waiting on two topics may count once per topic.
    h.eventually("the pop over two topics is parked", || async {
        h.queue.context().waiters.parked() >= 1
    })
    .await;
    h.advance(500);
    let got = returned(waiter).await;
    assert_eq!(ids(&got), ["late"]);
    assert_eq!(got[0].topic, "t.b");
}

/// Rule 13: the holder buries its task: ACTIVE → DEAD with the reason "buried" (or the error
/// given), kept past retention, optionally with a new priority.
pub async fn bury_moves_active_to_dead(h: &Harness) {
    h.add(task("a", 0)).await;
    h.add(task("b", 0)).await;
    h.add(task("c", 0)).await;
    pop_and_bury(h, "a").await;
    let a = h.queue.get(T, "a").await.unwrap();
    assert_eq!(a.state, State::Dead);
    assert_eq!(a.last_error.as_deref(), Some("buried"));
    assert_eq!(a.body, b"body of a");
    let b = h.pop_ready(T).await;
    h.queue
        .bury(
            T,
            "b",
            BuryOptions::default()
                .receipt(b.receipt)
                .error("bad input")
                .priority(3),
        )
        .await
        .unwrap();
    let b = h.queue.get(T, "b").await.unwrap();
    assert_eq!(
        (b.state, b.last_error.as_deref(), b.priority),
        (State::Dead, Some("bad input"), 3)
    );
    // Without a receipt, the current holder's task is buried too.
    h.pop_ready(T).await;
    h.queue.bury(T, "c", BuryOptions::default()).await.unwrap();
    assert_eq!(h.queue.stats(T).await.unwrap().dead, 3);
    h.advance(3_600_000);
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(
        h.state(T, "a").await,
        Some(State::Dead),
        "kept past retention"
    );
    assert!(
        h.pop_now(T, 10).await.is_empty(),
        "a buried task is not handed out"
    );
}

/// Rule 13 with rule 8: only the current holder buries; a stale receipt, a task not ACTIVE and
/// an unknown task are refused and change nothing.
pub async fn bury_refuses_stale_receipt_and_wrong_state(h: &Harness) {
    h.add(task("a", 0).ttr_ms(100)).await;
    let old = h.pop_ready(T).await;
    h.advance(100);
    let new = h.pop_ready(T).await;
    assert_refused(
        h.queue
            .bury(T, "a", BuryOptions::default().receipt(old.receipt))
            .await,
        Refusal::StaleReceipt,
    );
    assert_eq!(h.state(T, "a").await, Some(State::Active));
    h.add(task("ready", 0)).await;
    h.add(task("delayed", 1_000)).await;
    for id in ["ready", "delayed"] {
        let state = h.state(T, id).await.unwrap();
        assert_refused(
            h.queue.bury(T, id, BuryOptions::default()).await,
            Refusal::WrongState {
                state,
                op: Op::Bury,
            },
        );
    }
    assert_eq!(
        kind(h.queue.bury(T, "nope", BuryOptions::default()).await),
        ErrorKind::NotFound
    );
    h.queue
        .bury(T, "a", BuryOptions::default().receipt(new.receipt.clone()))
        .await
        .unwrap();
    assert_refused(
        h.queue.finish(T, "a", Some(&new.receipt)).await,
        Refusal::WrongState {
            state: State::Dead,
            op: Op::Finish,
        },
    );
}

/// Rule 14: a paused topic accepts adds and fires due tasks into READY, but a pop gets
/// nothing until it is resumed; stats show the pause.
pub async fn pause_holds_ready_tasks(h: &Harness) {
    h.add(task("early", 0)).await;
    h.add(task("due-later", 500)).await;
    h.queue.pause(T, None).await.unwrap();
    let s = h.queue.stats(T).await.unwrap();
    assert_eq!(
        s.pause,
        Pause {
            paused: true,
            until_ms: None
        }
    );
    h.advance(1);
    h.add(task("added-while-paused", 0)).await;
    h.advance(500);
    h.wait_state(T, "due-later", State::Ready).await;
    wait_ready(h, T, 3).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(
        h.pop_now(T, 10).await.is_empty(),
        "a paused topic hands nothing out"
    );
    assert!(
        h.queue
            .pop_any(
                &[T.to_string()],
                PopOptions::default().count(10).timeout_ms(0)
            )
            .await
            .unwrap()
            .is_empty()
    );
    h.queue.resume(T).await.unwrap();
    assert!(!h.queue.stats(T).await.unwrap().pause.holds(h.now()));
    assert_eq!(
        ids(&h.pop_now(T, 10).await),
        ["early", "added-while-paused", "due-later"]
    );
}

/// Rule 14: a long-poll on a paused topic waits, and a resume wakes it.
pub async fn resume_wakes_a_waiting_pop(h: &Harness) {
    h.add(task("a", 0)).await;
    h.queue.pause(T, None).await.unwrap();
    let q = h.queue.clone();
    let waiter =
        tokio::spawn(async move { q.pop(T, PopOptions::default().timeout_ms(60_000)).await });
    wait_parked(h, 1).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(!waiter.is_finished(), "the pop waits while paused");
    h.queue.resume(T).await.unwrap();
    let got = returned(waiter).await;
    assert_eq!(ids(&got), ["a"]);
}

/// Rule 14: a pause with an end ends by itself at that instant (not before), waking a pop
/// that waits; stats show the end while it holds.
pub async fn pause_with_end_ends_by_itself(h: &Harness) {
    h.add(task("a", 0)).await;
    h.queue.pause(T, Some(1_000)).await.unwrap();
    let s = h.queue.stats(T).await.unwrap();
    assert!(s.pause.paused);
    assert_eq!(s.pause.until_ms, Some(START_MS + 1_000));
    let q = h.queue.clone();
    let waiter =
        tokio::spawn(async move { q.pop(T, PopOptions::default().timeout_ms(60_000)).await });
    wait_parked(h, 1).await;
    h.advance(999);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished(), "not before the pause's end");
    h.advance(1);
    let got = returned(waiter).await;
    assert_eq!(ids(&got), ["a"]);
    assert!(!h.queue.stats(T).await.unwrap().pause.holds(h.now()));
}

/// Rule 14: ACTIVE tasks keep their ttr under a pause: they can be finished, and one whose
/// ttr passes goes back to READY (retries + 1) but is not handed out until the resume.
pub async fn pause_keeps_ttr_of_active_tasks(h: &Harness) {
    h.add(task("a", 0).ttr_ms(1_000)).await;
    h.add(task("b", 0).ttr_ms(1_000)).await;
    let got = h.pop_now(T, 2).await;
    assert_eq!(got.len(), 2);
    h.queue.pause(T, None).await.unwrap();
    let b = got.iter().find(|d| d.id == "b").unwrap();
    h.queue.finish(T, "b", Some(&b.receipt)).await.unwrap();
    h.advance(999);
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(h.state(T, "a").await, Some(State::Active));
    h.advance(1);
    h.wait_state(T, "a", State::Ready).await;
    assert!(h.pop_now(T, 10).await.is_empty());
    h.queue.resume(T).await.unwrap();
    let again = h.pop_now(T, 10).await;
    assert_eq!((ids(&again), again[0].retries), (vec!["a".to_string()], 1));
}

/// Rule 14: a topic with no records can be paused, and shows the pause in `stats` and
/// `topics`; pausing again sets the new end; resume ends it.
pub async fn pause_of_an_empty_topic_is_listed(h: &Harness) {
    h.queue.pause("empty.topic", Some(60_000)).await.unwrap();
    let s = h.queue.stats("empty.topic").await.unwrap();
    assert_eq!(s.total, 0);
    assert_eq!(
        s.pause,
        Pause {
            paused: true,
            until_ms: Some(START_MS + 60_000)
        }
    );
    let topics = h.queue.topics().await.unwrap();
    let listed = topics
        .iter()
        .find(|(name, _)| name == "empty.topic")
        .expect("a paused topic is listed");
    assert!(listed.1.pause.holds(h.now()));
    h.queue.pause("empty.topic", None).await.unwrap();
    assert_eq!(
        h.queue.stats("empty.topic").await.unwrap().pause,
        Pause {
            paused: true,
            until_ms: None
        }
    );
    h.queue.resume("empty.topic").await.unwrap();
    assert!(
        !h.queue
            .stats("empty.topic")
            .await
            .unwrap()
            .pause
            .holds(h.now())
    );
    h.queue.resume("never.paused").await.unwrap();
    assert_eq!(
        kind(
            h.queue
                .pause(T, Some(delayq::core::validate::TEN_YEARS_MS + 1))
                .await
        ),
        ErrorKind::Invalid
    );
}

/// Rule 15: a DELAYED task gets a new due, later or earlier, never handed out before it.
pub async fn reschedule_delayed_task(h: &Harness) {
    h.add(task("a", 1_000)).await;
    assert_eq!(
        h.queue
            .reschedule(T, "a", When::Delay(5_000))
            .await
            .unwrap(),
        State::Delayed
    );
    assert_eq!(h.queue.get(T, "a").await.unwrap().due_ms, START_MS + 5_000);
    h.advance(4_999);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        h.pop_now(T, 10).await.is_empty(),
        "never early, not at the old due"
    );
    assert_eq!(h.state(T, "a").await, Some(State::Delayed));
    h.advance(1);
    assert_eq!(h.pop_ready(T).await.id, "a");
    // Earlier: an absolute due, then a past one, which means now.
    h.add(task("b", 60_000)).await;
    let at = h.now() + 10;
    assert_eq!(
        h.queue.reschedule(T, "b", When::At(at)).await.unwrap(),
        State::Delayed
    );
    h.advance(10);
    assert_eq!(h.pop_ready(T).await.id, "b");
    h.add(task("c", 60_000)).await;
    assert_eq!(
        h.queue
            .reschedule(T, "c", When::At(START_MS))
            .await
            .unwrap(),
        State::Ready
    );
    let c = h.queue.get(T, "c").await.unwrap();
    assert_eq!((c.state, c.due_ms), (State::Ready, h.now()));
}

/// Rule 15: a READY task can be delayed again or made due now; body, id and retries are kept.
pub async fn reschedule_ready_task_keeps_body_and_retries(h: &Harness) {
    h.add(task("a", 0).ttr_ms(100).priority(9)).await;
    h.pop_ready(T).await;
    h.advance(100);
    h.wait_state(T, "a", State::Ready).await;
    assert_eq!(
        h.queue
            .reschedule(T, "a", When::Delay(2_000))
            .await
            .unwrap(),
        State::Delayed
    );
    let a = h.queue.get(T, "a").await.unwrap();
    assert_eq!(
        (a.state, a.due_ms, a.retries, a.body.as_slice(), a.priority),
        (State::Delayed, h.now() + 2_000, 1, &b"body of a"[..], 9)
    );
    assert!(h.pop_now(T, 10).await.is_empty());
    assert_eq!(
        h.queue.reschedule(T, "a", When::Delay(0)).await.unwrap(),
        State::Ready
    );
    let d = h.pop_ready(T).await;
    assert_eq!(
        (d.id.as_str(), d.retries, d.body.as_slice()),
        ("a", 1, &b"body of a"[..])
    );
}

/// Rule 15: an ACTIVE task cannot be rescheduled (a conflict), nor a finished one; an unknown
/// task is not found and a due more than ten years ahead is invalid.
pub async fn reschedule_refuses_active(h: &Harness) {
    h.add(task("a", 0)).await;
    let d = h.pop_ready(T).await;
    assert_refused(
        h.queue.reschedule(T, "a", When::Delay(1_000)).await,
        Refusal::WrongState {
            state: State::Active,
            op: Op::Reschedule,
        },
    );
    let a = h.queue.get(T, "a").await.unwrap();
    assert_eq!(a.state, State::Active);
    h.queue.finish(T, "a", Some(&d.receipt)).await.unwrap();
    assert_refused(
        h.queue.reschedule(T, "a", When::Delay(0)).await,
        Refusal::WrongState {
            state: State::Finished,
            op: Op::Reschedule,
        },
    );
    assert_eq!(
        kind(h.queue.reschedule(T, "nope", When::Delay(0)).await),
        ErrorKind::NotFound
    );
    h.add(task("b", 10)).await;
    let too_far = delayq::core::validate::TEN_YEARS_MS + 1;
    assert_eq!(
        kind(h.queue.reschedule(T, "b", When::Delay(too_far)).await),
        ErrorKind::Invalid
    );
    assert_eq!(
        kind(
            h.queue
                .reschedule(T, "b", When::At(h.now() + too_far))
                .await
        ),
        ErrorKind::Invalid
    );
}

/// Bodies are bytes: any byte sequence, not only UTF-8, comes back as given from get, list,
/// pop and peek, and an empty body is empty.
pub async fn binary_bodies_round_trip(h: &Harness) {
    let body: Vec<u8> = (0..=255u8).rev().chain([0, 0xff, 0xc3, 0x28]).collect();
    assert!(std::str::from_utf8(&body).is_err());
    h.add(NewTask::new(T, "bin").body(body.clone())).await;
    h.add(NewTask::new(T, "empty").priority(2_000)).await;
    assert_eq!(h.queue.get(T, "bin").await.unwrap().body, body);
    assert!(h.queue.get(T, "bin").await.unwrap().body_text().is_none());
    assert_eq!(h.queue.get(T, "empty").await.unwrap().body, b"");
    let listed = h.queue.list(T, None, 1, 10).await.unwrap();
    let item = listed.items.iter().find(|t| t.id == "bin").unwrap();
    assert_eq!(item.body, body);
    let peeked = h.queue.peek(T, State::Ready).await.unwrap().unwrap();
    assert_eq!((peeked.id.as_str(), &peeked.body), ("bin", &body));
    let d = h.pop_ready(T).await;
    assert_eq!((d.id.as_str(), &d.body), ("bin", &body));
}

/// DELAYED tasks due in the same millisecond come out in the order they were added, in
/// peek-delayed and kick, whatever their ids (and, in the engine, the record slots they got).
pub async fn delayed_ties_come_out_in_added_order(h: &Harness) {
    // Frees a low record slot (the engine reuses it) so slot order differs from added order.
    h.add(task("x0", 0)).await;
    h.add(task("x1", 0)).await;
    h.add(task("z9", 60_000)).await;
    h.queue.delete(T, "x0").await.unwrap();
    h.add(task("a1", 60_000)).await;
    h.add(task("10", 60_000)).await;
    h.add(task("9", 60_000)).await;
    h.add(task("early", 30_000)).await;
    h.queue.delete(T, "x1").await.unwrap();
    let peeked = h.queue.peek(T, State::Delayed).await.unwrap().unwrap();
    assert_eq!(peeked.id, "early");
    assert_eq!(h.queue.kick(T, 1).await.unwrap(), 1);
    let peeked = h.queue.peek(T, State::Delayed).await.unwrap().unwrap();
    assert_eq!(peeked.id, "z9", "the first added of the tied tasks");
    assert_eq!(h.queue.kick(T, 2).await.unwrap(), 2);
    assert_eq!(h.state(T, "z9").await, Some(State::Ready));
    assert_eq!(h.state(T, "a1").await, Some(State::Ready));
    assert_eq!(h.state(T, "10").await, Some(State::Delayed));
    let peeked = h.queue.peek(T, State::Delayed).await.unwrap().unwrap();
    assert_eq!(peeked.id, "10");
}
