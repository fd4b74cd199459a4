//! The cases of the task core ([`delayq::TaskStore`], rules 1–10 of docs/design.md §2) and of
//! callbacks, one public async function per rule or operation. Each takes a
//! [`Harness`] on a fresh backend and panics when the backend breaks the rule.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use delayq::{
    AddOutcome, Backoff, Delivery, ErrorKind, Held, MaxRetries, NewTask, OnDuplicate, PopOptions,
    Refusal, ReleaseOptions, State, WorkerOptions,
};

use crate::support::{T, kind, task};
use crate::{Harness, START_MS};

/// `add` then `get` returns every field as given, with defaults filled in.
pub async fn add_then_get(h: &Harness) {
    let outcome = h
        .queue
        .add(
            task("a", 5_000)
                .ttr_ms(7_000)
                .max_retries(MaxRetries::Limited(5))
                .backoff(Backoff::Fixed { ms: 100 }),
        )
        .await
        .unwrap();
    assert_eq!(outcome, AddOutcome::Added);
    let t = h.queue.get(T, "a").await.unwrap();
    assert_eq!(
        (t.topic.as_str(), t.id.as_str(), t.body.as_slice()),
        (T, "a", &b"body of a"[..])
    );
    assert_eq!(t.state, State::Delayed);
    assert_eq!(
        (t.due_ms, t.delay_ms, t.ttr_ms),
        (START_MS + 5_000, 5_000, 7_000)
    );
    assert_eq!((t.max_retries, t.retries), (5, 0));
    assert_eq!(t.created_at_ms, START_MS);
    assert_eq!(t.backoff, Some(Backoff::Fixed { ms: 100 }));
    h.add(task("b", 0)).await;
    let b = h.queue.get(T, "b").await.unwrap();
    assert_eq!((b.ttr_ms, b.max_retries), (30_000, 3), "server defaults");
    assert_eq!(kind(h.queue.get(T, "nope").await), ErrorKind::NotFound);
}

/// Rule 12: `delay_ms` becomes `due = now + delay_ms`; `run_at_ms` is absolute; more than ten
/// years is refused.
pub async fn due_is_absolute(h: &Harness) {
    h.advance(1_234);
    h.add(task("rel", 100)).await;
    h.add(NewTask::new(T, "abs").run_at_ms(START_MS + 9_999))
        .await;
    assert_eq!(
        h.queue.get(T, "rel").await.unwrap().due_ms,
        START_MS + 1_334
    );
    assert_eq!(
        h.queue.get(T, "abs").await.unwrap().due_ms,
        START_MS + 9_999
    );
    let ten_years = delayq::core::validate::TEN_YEARS_MS;
    h.add(task("far", ten_years)).await;
    assert_eq!(
        kind(h.queue.add(task("too-far", ten_years + 1)).await),
        ErrorKind::Invalid
    );
    assert_eq!(
        kind(h.queue.add(task("huge", u64::MAX)).await),
        ErrorKind::Invalid
    );
}

/// Rule 1: never visible to pop or `state=ready` before its due, even 1 ms before.
pub async fn never_early(h: &Harness) {
    h.add(task("a", 1_000)).await;
    h.advance(999);
    // Give the backend every chance to fire early.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(h.pop_now(T, 10).await.is_empty());
    assert_eq!(h.state(T, "a").await, Some(State::Delayed));
    let ready = h.queue.list(T, Some(State::Ready), 1, 100).await.unwrap();
    assert_eq!(ready.total, 0);
    h.advance(1);
    let d = h.pop_ready(T).await;
    assert_eq!(d.id, "a");
    assert!(h.now() >= d.due_ms);
}

/// Rule 2: a task becomes ready at its due with nothing else happening: no add, no pop.
pub async fn prompt_without_other_activity(h: &Harness) {
    h.add(task("a", 60_000)).await;
    h.advance(60_000);
    h.wait_state(T, "a", State::Ready).await;
}

/// A long-poll that started before the due time returns the task when it comes due.
pub async fn long_poll_wakes_when_due(h: &Harness) {
    h.add(task("a", 500)).await;
    let q = h.queue.clone();
    let waiter =
        tokio::spawn(async move { q.pop(T, PopOptions::default().timeout_ms(60_000)).await });
    h.eventually("the pop is parked", || async {
        h.queue.context().waiters.parked() == 1
    })
    .await;
    h.advance(500);
    let got = tokio::time::timeout(crate::EVENTUALLY, waiter)
        .await
        .expect("pop returned")
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, "a");
    assert_eq!(
        h.queue.context().waiters.parked(),
        0,
        "no waiter left behind"
    );
}

/// A long-poll with nothing ready returns empty at its timeout (queue time).
pub async fn long_poll_times_out_empty(h: &Harness) {
    let q = h.queue.clone();
    let waiter =
        tokio::spawn(async move { q.pop(T, PopOptions::default().timeout_ms(1_000)).await });
    h.eventually("the pop is parked", || async {
        h.queue.context().waiters.parked() == 1
    })
    .await;
    h.advance(1_000);
    let got = tokio::time::timeout(crate::EVENTUALLY, waiter)
        .await
        .expect("pop returned")
        .unwrap()
        .unwrap();
    assert!(got.is_empty());
    assert_eq!(h.queue.context().waiters.parked(), 0);
}

/// Rule 11: among ready tasks, pop returns the earliest due first.
pub async fn pop_order_is_earliest_due_first(h: &Harness) {
    for (id, delay) in [("c", 300), ("a", 100), ("d", 400), ("b", 200)] {
        h.add(task(id, delay)).await;
    }
    h.advance(400);
    h.eventually("all ready", || async {
        h.queue.stats(T).await.unwrap().ready == 4
    })
    .await;
    let ids: Vec<String> = h.pop_now(T, 10).await.into_iter().map(|d| d.id).collect();
    assert_eq!(ids, ["a", "b", "c", "d"]);
}

/// `count` takes several; `auto_finish` finishes them as they are handed out.
pub async fn pop_count_and_auto_finish(h: &Harness) {
    for i in 0..5 {
        h.add(task(&format!("t{i}"), 0)).await;
    }
    let got = h.pop_now(T, 3).await;
    assert_eq!(got.len(), 3);
    assert!(got.iter().all(|d| d.receipt.len() >= 8 && d.retries == 0));
    let auto = h
        .queue
        .pop(T, PopOptions::default().count(10).auto_finish(true))
        .await
        .unwrap();
    assert_eq!(auto.len(), 2);
    for d in &auto {
        assert_eq!(h.state(T, &d.id).await, Some(State::Finished));
    }
    assert_eq!(
        kind(h.queue.pop(T, PopOptions::default().count(0)).await),
        ErrorKind::Invalid
    );
}

/// Rule 4: an ACTIVE task not finished within its ttr goes back to READY with retries + 1.
pub async fn ttr_expiry_redelivers(h: &Harness) {
    h.add(task("a", 0).ttr_ms(1_000)).await;
    let first = h.pop_ready(T).await;
    h.advance(999);
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(
        h.state(T, "a").await,
        Some(State::Active),
        "not before the ttr"
    );
    h.advance(1);
    let second = h.pop_ready(T).await;
    assert_eq!(second.id, "a");
    assert_eq!(second.retries, 1);
    assert_ne!(second.receipt, first.receipt);
    let info = h.queue.get(T, "a").await.unwrap();
    assert_eq!(info.history.len(), 1);
    assert_eq!(info.history[0].outcome, "ttr_expired");
}

/// `touch` restarts the ttr.
pub async fn touch_restarts_ttr(h: &Harness) {
    h.add(task("a", 0).ttr_ms(1_000)).await;
    let d = h.pop_ready(T).await;
    h.advance(800);
    let deadline = h.queue.touch(T, "a", Some(&d.receipt)).await.unwrap();
    assert_eq!(deadline, START_MS + 1_800);
    h.advance(800);
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(h.state(T, "a").await, Some(State::Active));
    h.queue.finish(T, "a", Some(&d.receipt)).await.unwrap();
}

/// Rule 8: a receipt of an earlier attempt is a conflict for finish, release and touch.
pub async fn stale_receipt_is_conflict(h: &Harness) {
    h.add(task("a", 0).ttr_ms(100)).await;
    let old = h.pop_ready(T).await;
    h.advance(100);
    let new = h.pop_ready(T).await;
    for result in [
        h.queue.finish(T, "a", Some(&old.receipt)).await.map(|_| ()),
        h.queue.touch(T, "a", Some(&old.receipt)).await.map(|_| ()),
        h.queue
            .release(
                T,
                "a",
                ReleaseOptions::default().receipt(old.receipt.clone()),
            )
            .await
            .map(|_| ()),
    ] {
        let e = result.expect_err("stale receipt");
        assert_eq!(e.kind(), ErrorKind::Conflict);
        assert!(
            matches!(
                e,
                delayq::Error::Conflict {
                    refusal: Refusal::StaleReceipt,
                    ..
                }
            ),
            "{e}"
        );
    }
    h.queue.finish(T, "a", Some(&new.receipt)).await.unwrap();
    assert_eq!(h.state(T, "a").await, Some(State::Finished));
}

/// The held task `id` of topic [`T`] with `receipt`.
fn held_by<'a>(id: &'a str, receipt: Option<&'a str>) -> Held<'a> {
    Held {
        topic: T,
        id,
        receipt,
    }
}

/// Ack and take the next (docs/design.md §3): `finish_then_pop` finishes the held task exactly
/// as `finish` does, then pops in rule 11's order; a finish that is refused (stale receipt,
/// not ACTIVE, unknown) is the error and nothing is popped.
pub async fn finish_then_pop_acks_then_takes(h: &Harness) {
    for id in ["a", "b"] {
        h.add(task(id, 0).ttr_ms(100)).await;
    }
    let first = h.pop_ready(T).await;
    assert_eq!(first.id, "a");
    let now = PopOptions::default().timeout_ms(0);
    let held = |d: &Delivery| (d.id.clone(), d.receipt.clone());
    let (id, receipt) = held(&first);
    let next = h
        .queue
        .finish_then_pop(held_by(&id, Some(&receipt)), T, now)
        .await
        .expect("the finish")
        .expect("the pop");
    assert_eq!(h.state(T, "a").await, Some(State::Finished));
    assert_eq!(
        next.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(),
        ["b"]
    );
    // "b" is redelivered after its ttr: its first receipt is stale, and a finish with it
    // neither finishes nor pops ("c" stays READY).
    let stale = held(&next[0]);
    h.advance(100);
    h.wait_state(T, "b", State::Ready).await;
    let again = h.pop_ready(T).await;
    assert_eq!(again.id, "b");
    h.add(task("c", 0)).await;
    let refused = h
        .queue
        .finish_then_pop(held_by(&stale.0, Some(&stale.1)), T, now)
        .await
        .expect_err("a stale receipt");
    assert!(
        matches!(
            refused,
            delayq::Error::Conflict {
                refusal: Refusal::StaleReceipt,
                ..
            }
        ),
        "{refused}"
    );
    assert_eq!(
        h.state(T, "c").await,
        Some(State::Ready),
        "nothing was popped"
    );
    // Not ACTIVE, and unknown: refused the same way.
    let finished = h
        .queue
        .finish_then_pop(held_by("a", None), T, now)
        .await
        .expect_err("a finished task");
    assert_eq!(finished.kind(), ErrorKind::Conflict);
    let unknown = h
        .queue
        .finish_then_pop(held_by("nope", None), T, now)
        .await
        .expect_err("an unknown task");
    assert_eq!(unknown.kind(), ErrorKind::NotFound);
    assert_eq!(
        h.state(T, "c").await,
        Some(State::Ready),
        "nothing was popped"
    );
    // The held task of another topic, and an empty topic: finished, nothing to take.
    let (id, receipt) = held(&again);
    let none = h
        .queue
        .finish_then_pop(held_by(&id, Some(&receipt)), "empty", now)
        .await
        .expect("the finish")
        .expect("the pop");
    assert!(none.is_empty());
    assert_eq!(h.state(T, "b").await, Some(State::Finished));
    assert_eq!(h.queue.stats(T).await.unwrap().finished, 2);
    // With a timeout, the pop that follows the finish waits for a task to become ready.
    let last = h.pop_ready(T).await;
    assert_eq!(last.id, "c");
    let waiting = {
        let queue = h.queue.clone();
        tokio::spawn(async move {
            let wait = PopOptions::default().timeout_ms(60_000);
            queue
                .finish_then_pop(held_by("c", Some(&last.receipt)), T, wait)
                .await
        })
    };
    h.wait_state(T, "c", State::Finished).await;
    h.add(task("d", 0)).await;
    let got = waiting
        .await
        .expect("the waiting consumer")
        .expect("the finish")
        .expect("the pop");
    assert_eq!(got.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(), ["d"]);
}

/// Rule 8: finish only from ACTIVE; a missing receipt is accepted; unknown is 404.
pub async fn finish_only_from_active(h: &Harness) {
    h.add(task("delayed", 1_000)).await;
    h.add(task("ready", 0)).await;
    assert_eq!(
        kind(h.queue.finish(T, "delayed", None).await),
        ErrorKind::Conflict
    );
    assert_eq!(
        kind(h.queue.finish(T, "nope", None).await),
        ErrorKind::NotFound
    );
    h.wait_state(T, "ready", State::Ready).await;
    assert_eq!(
        kind(h.queue.finish(T, "ready", None).await),
        ErrorKind::Conflict
    );
    h.pop_ready(T).await;
    h.queue.finish(T, "ready", None).await.unwrap();
    assert_eq!(
        kind(h.queue.finish(T, "ready", None).await),
        ErrorKind::Conflict,
        "twice"
    );
}

/// Rule 6: with no backoff a released task is READY again at once, counting a retry.
pub async fn release_without_backoff_is_immediate(h: &Harness) {
    h.add(task("a", 0)).await;
    let d = h.pop_ready(T).await;
    let state = h
        .queue
        .release(
            T,
            "a",
            ReleaseOptions::default().receipt(d.receipt).error("boom"),
        )
        .await
        .unwrap();
    assert_eq!(state, State::Ready);
    let again = h.pop_ready(T).await;
    assert_eq!(again.retries, 1);
    let info = h.queue.get(T, "a").await.unwrap();
    assert_eq!(info.last_error.as_deref(), Some("boom"));
}

/// Release with `delay_ms` waits that long, whatever the backoff says.
pub async fn release_with_delay_overrides_backoff(h: &Harness) {
    h.add(task("a", 0).backoff(Backoff::Fixed { ms: 60_000 }))
        .await;
    let d = h.pop_ready(T).await;
    let state = h
        .queue
        .release(
            T,
            "a",
            ReleaseOptions::default().receipt(d.receipt).delay_ms(500),
        )
        .await
        .unwrap();
    assert_eq!(state, State::Delayed);
    assert_eq!(h.queue.get(T, "a").await.unwrap().due_ms, START_MS + 500);
    h.advance(499);
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(h.pop_now(T, 1).await.is_empty());
    h.advance(1);
    assert_eq!(h.pop_ready(T).await.retries, 1);
}

/// Rule 6: each backoff kind decides the wait before each redelivery; never early.
pub async fn backoff_kinds_delay_redelivery(h: &Harness) {
    let cases = [
        ("fixed", Backoff::Fixed { ms: 1_000 }, [1_000, 1_000, 1_000]),
        (
            "exp",
            Backoff::Exponential {
                base_ms: 100,
                max_ms: 300,
            },
            [100, 200, 300],
        ),
        (
            "sched",
            Backoff::Schedule {
                ms: vec![120_000, 600_000],
            },
            [120_000, 600_000, 600_000],
        ),
    ];
    for (id, backoff, waits) in cases {
        h.add(
            task(id, 0)
                .backoff(backoff)
                .max_retries(MaxRetries::Limited(5)),
        )
        .await;
        for (n, wait) in waits.into_iter().enumerate() {
            let d = h.pop_ready(T).await;
            assert_eq!((d.id.as_str(), d.retries), (id, n as u32));
            h.queue
                .release(T, id, ReleaseOptions::default().receipt(d.receipt))
                .await
                .unwrap();
            let info = h.queue.get(T, id).await.unwrap();
            assert_eq!(info.state, State::Delayed, "{id} after failure {n}");
            assert_eq!(info.due_ms, h.now() + wait, "{id} wait {n}");
            h.advance(wait - 1);
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(h.pop_now(T, 1).await.is_empty(), "{id} early at retry {n}");
            h.advance(1);
        }
        h.pop_ready(T).await;
        h.queue.delete(T, id).await.unwrap();
    }
}

async fn fail_until_dead(h: &Harness, id: &str) -> u32 {
    let mut deliveries = 0;
    loop {
        let d = h.pop_ready(T).await;
        deliveries += 1;
        let state = h
            .queue
            .release(
                T,
                id,
                ReleaseOptions::default()
                    .receipt(d.receipt)
                    .error(format!("fail {deliveries}")),
            )
            .await
            .unwrap();
        if state == State::Dead {
            return deliveries;
        }
        assert!(deliveries < 100, "never went dead");
    }
}

/// Rule 5: `max_retries = 3` means at most 4 deliveries, then DEAD (never FINISHED).
pub async fn max_retries_counts_redeliveries(h: &Harness) {
    h.add(task("a", 0).max_retries(MaxRetries::Limited(3)))
        .await;
    assert_eq!(fail_until_dead(h, "a").await, 4);
    let info = h.queue.get(T, "a").await.unwrap();
    assert_eq!((info.state, info.retries), (State::Dead, 3));
    // The default is 3 as well.
    h.add(task("b", 0)).await;
    assert_eq!(fail_until_dead(h, "b").await, 4);
    // A ttr expiry counts the same as a release.
    h.add(task("c", 0).ttr_ms(10).max_retries(MaxRetries::Limited(1)))
        .await;
    h.pop_ready(T).await;
    h.advance(10);
    h.pop_ready(T).await;
    h.advance(10);
    h.wait_state(T, "c", State::Dead).await;
}

/// Rule 5: `max_retries = 0` means one attempt.
pub async fn zero_retries_means_one_attempt(h: &Harness) {
    h.add(task("a", 0).max_retries(MaxRetries::Limited(0)))
        .await;
    assert_eq!(fail_until_dead(h, "a").await, 1);
}

/// Rule 5: `-1` means no limit.
pub async fn unlimited_retries(h: &Harness) {
    h.add(task("a", 0).max_retries(MaxRetries::Unlimited)).await;
    for n in 0..20 {
        let d = h.pop_ready(T).await;
        assert_eq!(d.retries, n);
        let state = h
            .queue
            .release(T, "a", ReleaseOptions::default().receipt(d.receipt))
            .await
            .unwrap();
        assert_eq!(state, State::Ready);
    }
}

/// DEAD keeps the task, its last error and its history.
pub async fn dead_keeps_error_and_history(h: &Harness) {
    h.add(task("a", 0).max_retries(MaxRetries::Limited(2)))
        .await;
    fail_until_dead(h, "a").await;
    let info = h.queue.get(T, "a").await.unwrap();
    assert_eq!(info.state, State::Dead);
    assert_eq!(info.body, b"body of a");
    assert_eq!(info.last_error.as_deref(), Some("fail 3"));
    let errors: Vec<_> = info
        .history
        .iter()
        .map(|a| a.error.clone().unwrap())
        .collect();
    assert_eq!(errors, ["fail 1", "fail 2", "fail 3"]);
    assert!(info.history.iter().all(|a| a.outcome == "released"));
}

/// DEAD → READY by requeue (one, or all of a topic), retries reset.
pub async fn requeue_one_and_all(h: &Harness) {
    for id in ["a", "b", "c"] {
        h.add(task(id, 0).max_retries(MaxRetries::Limited(0))).await;
        fail_until_dead(h, id).await;
    }
    h.add(task("live", 10_000)).await;
    assert_eq!(kind(h.queue.requeue(T, "live").await), ErrorKind::Conflict);
    assert_eq!(kind(h.queue.requeue(T, "nope").await), ErrorKind::NotFound);
    h.queue.requeue(T, "a").await.unwrap();
    let d = h.pop_ready(T).await;
    assert_eq!((d.id.as_str(), d.retries), ("a", 0));
    assert_eq!(h.queue.requeue_all(T).await.unwrap(), 2);
    assert_eq!(h.queue.stats(T).await.unwrap().dead, 0);
    let ids: Vec<String> = h.pop_now(T, 10).await.into_iter().map(|d| d.id).collect();
    assert_eq!(ids.len(), 2);
}

/// Rule 7: after cancel the task is never delivered again, and its holder gets a conflict.
pub async fn cancel_is_final(h: &Harness) {
    h.add(task("delayed", 1_000)).await;
    h.add(task("active", 0).ttr_ms(100)).await;
    let held = h.pop_ready(T).await;
    assert_eq!(held.id, "active");
    h.add(task("ready", 0)).await;
    h.wait_state(T, "ready", State::Ready).await;
    for id in ["delayed", "ready", "active"] {
        h.queue.cancel(T, id).await.unwrap();
        assert_eq!(h.state(T, id).await, Some(State::Cancelled));
    }
    for result in [
        h.queue
            .finish(T, "active", Some(&held.receipt))
            .await
            .map(|_| ()),
        h.queue
            .touch(T, "active", Some(&held.receipt))
            .await
            .map(|_| ()),
        h.queue
            .release(
                T,
                "active",
                ReleaseOptions::default().receipt(held.receipt.clone()),
            )
            .await
            .map(|_| ()),
    ] {
        assert_eq!(kind(result), ErrorKind::Conflict);
    }
    h.advance(5_000); // past every due and ttr, within retention
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(h.pop_now(T, 10).await.is_empty());
}

/// Cancel of a finished task is a conflict; of an unknown one, not found.
pub async fn cancel_conflicts_and_not_found(h: &Harness) {
    h.add(task("a", 0)).await;
    let d = h.pop_ready(T).await;
    h.queue.finish(T, "a", Some(&d.receipt)).await.unwrap();
    let e = h.queue.cancel(T, "a").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict);
    assert_eq!(e.conflicting_state(), Some(State::Finished));
    assert_eq!(kind(h.queue.cancel(T, "nope").await), ErrorKind::NotFound);
}

/// Rule 9: `reject` (default) is a duplicate error, `replace` takes the new body and due,
/// `keep` changes nothing and says the task existed.
pub async fn duplicates_reject_replace_keep(h: &Harness) {
    h.add(task("a", 1_000)).await;
    let e = h.queue.add(task("a", 5)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Duplicate);
    let kept = h
        .queue
        .add(task("a", 5).body("other").on_duplicate(OnDuplicate::Keep))
        .await
        .unwrap();
    assert_eq!(kept, AddOutcome::Existed);
    let info = h.queue.get(T, "a").await.unwrap();
    assert_eq!(
        (info.body.as_slice(), info.due_ms),
        (&b"body of a"[..], START_MS + 1_000)
    );
    let replaced = h
        .queue
        .add(
            task("a", 2_000)
                .body("new")
                .on_duplicate(OnDuplicate::Replace),
        )
        .await
        .unwrap();
    assert_eq!(replaced, AddOutcome::Replaced);
    let info = h.queue.get(T, "a").await.unwrap();
    assert_eq!(
        (info.body.as_slice(), info.due_ms),
        (&b"new"[..], START_MS + 2_000)
    );
    h.advance(1_000); // the old schedule is gone
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(h.pop_now(T, 1).await.is_empty());
    assert_eq!(h.queue.stats(T).await.unwrap().total, 1);
}

/// A replace while the task is held makes the holder's receipt stale.
pub async fn replace_makes_old_receipt_stale(h: &Harness) {
    h.add(task("a", 0)).await;
    let d = h.pop_ready(T).await;
    h.queue
        .add(task("a", 0).on_duplicate(OnDuplicate::Replace))
        .await
        .unwrap();
    assert_eq!(
        kind(h.queue.finish(T, "a", Some(&d.receipt)).await),
        ErrorKind::Conflict
    );
    assert_eq!(h.pop_ready(T).await.retries, 0);
}

/// Rule 10: FINISHED and CANCELLED records stay for the retention (60 s), then go.
pub async fn retention_removes_finished_and_cancelled(h: &Harness) {
    h.add(task("f", 0)).await;
    h.add(task("c", 10_000)).await;
    let d = h.pop_ready(T).await;
    h.queue.finish(T, "f", Some(&d.receipt)).await.unwrap();
    h.queue.cancel(T, "c").await.unwrap();
    h.advance(59_999);
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(h.state(T, "f").await, Some(State::Finished));
    assert_eq!(h.state(T, "c").await, Some(State::Cancelled));
    // While the record exists, the id is taken.
    assert_eq!(kind(h.queue.add(task("f", 0)).await), ErrorKind::Duplicate);
    h.advance(1);
    h.eventually("records removed", || async {
        h.state(T, "f").await.is_none() && h.state(T, "c").await.is_none()
    })
    .await;
    assert_eq!(h.queue.stats(T).await.unwrap().total, 0);
    h.add(task("f", 0)).await;
}

/// Rule 10: DEAD records are kept until requeued or deleted, past any retention.
pub async fn dead_is_kept_past_retention(h: &Harness) {
    h.add(task("a", 0).max_retries(MaxRetries::Limited(0)))
        .await;
    fail_until_dead(h, "a").await;
    h.advance(10 * 86_400_000);
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(h.state(T, "a").await, Some(State::Dead));
}

/// `delete` removes a record in any state.
pub async fn delete_any_state(h: &Harness) {
    h.add(task("delayed", 1_000)).await;
    h.add(task("active", 0)).await;
    h.pop_ready(T).await;
    h.queue.delete(T, "delayed").await.unwrap();
    h.queue.delete(T, "active").await.unwrap();
    assert_eq!(
        kind(h.queue.delete(T, "delayed").await),
        ErrorKind::NotFound
    );
    assert_eq!(h.queue.stats(T).await.unwrap().total, 0);
    h.advance(100_000);
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(h.pop_now(T, 10).await.is_empty(), "no ghost timers");
}

/// A batch gives one result per task, in order; a bad task fails alone, named by index.
pub async fn batch_add_per_task_results(h: &Harness) {
    h.add(task("dup", 0)).await;
    let results = h
        .queue
        .add_batch(vec![
            task("x", 0),
            task("dup", 0),
            NewTask::new(T, "bad id"),
            task("y", 100),
            NewTask::new("other.topic", "z"),
        ])
        .await
        .unwrap();
    assert_eq!(results.len(), 5);
    assert_eq!(results[0].as_ref().ok(), Some(&AddOutcome::Added));
    assert_eq!(
        results[1].as_ref().unwrap_err().kind(),
        ErrorKind::Duplicate
    );
    match &results[2] {
        // The position in the results says which task; the field is named as for one add.
        Err(delayq::Error::Invalid(f)) => assert_eq!(f.field, "id"),
        other => panic!("expected the third task's id to be invalid, got {other:?}"),
    }
    assert!(results[3].is_ok() && results[4].is_ok());
    assert_eq!(h.queue.stats("other.topic").await.unwrap().total, 1);
    let too_many = vec![task("t", 0); delayq::Limits::default().max_batch + 1];
    assert_eq!(kind(h.queue.add_batch(too_many).await), ErrorKind::TooLarge);
}

/// `list` orders by due, filters by state, pages.
pub async fn list_orders_by_due_and_pages(h: &Harness) {
    for i in (0..25u64).rev() {
        h.add(task(&format!("t{i:02}"), 1_000 + i)).await;
    }
    h.add(task("ready", 0)).await;
    h.wait_state(T, "ready", State::Ready).await;
    let page1 = h.queue.list(T, None, 1, 10).await.unwrap();
    assert_eq!((page1.total, page1.items.len()), (26, 10));
    assert_eq!(page1.items[0].id, "ready");
    assert_eq!(page1.items[1].id, "t00");
    let page3 = h.queue.list(T, None, 3, 10).await.unwrap();
    let ids: Vec<_> = page3.items.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["t19", "t20", "t21", "t22", "t23", "t24"]);
    let delayed = h
        .queue
        .list(T, Some(State::Delayed), 1, 1000)
        .await
        .unwrap();
    assert_eq!(delayed.total, 25);
    assert!(delayed.items.windows(2).all(|w| w[0].due_ms <= w[1].due_ms));
    assert!(h.queue.list(T, None, 9, 10).await.unwrap().items.is_empty());
    assert_eq!(
        kind(h.queue.list(T, None, 1, 1001).await),
        ErrorKind::Invalid
    );
    assert_eq!(kind(h.queue.list(T, None, 0, 10).await), ErrorKind::Invalid);
}

/// Stats count every state and give the earliest delayed due.
pub async fn stats_are_counters(h: &Harness) {
    h.add(task("d1", 500)).await;
    h.add(task("d2", 700)).await;
    h.add(task("r", 0)).await;
    h.add(task("a", 0)).await;
    h.add(task("f", 0)).await;
    h.add(task("c", 900)).await;
    h.add(task("x", 0).max_retries(MaxRetries::Limited(0)))
        .await;
    h.eventually("3 ready", || async {
        h.queue.stats(T).await.unwrap().ready == 4
    })
    .await;
    // Pop all four ready ones, then put each where the test wants it.
    let got = h.pop_now(T, 4).await;
    for d in got {
        match d.id.as_str() {
            "a" => {}
            "f" => h.queue.finish(T, "f", Some(&d.receipt)).await.unwrap(),
            "x" => {
                h.queue
                    .release(T, "x", ReleaseOptions::default().receipt(d.receipt))
                    .await
                    .unwrap();
            }
            "r" => {
                h.queue
                    .release(T, "r", ReleaseOptions::default().receipt(d.receipt))
                    .await
                    .unwrap();
            }
            other => panic!("unexpected {other}"),
        }
    }
    h.queue.cancel(T, "c").await.unwrap();
    let s = h.queue.stats(T).await.unwrap();
    assert_eq!(
        (
            s.delayed,
            s.ready,
            s.active,
            s.finished,
            s.cancelled,
            s.dead,
            s.total
        ),
        (2, 1, 1, 1, 1, 1, 7)
    );
    assert_eq!(s.next_due_ms, Some(START_MS + 500));
    assert_eq!(
        h.queue.stats("never.seen").await.unwrap(),
        delayq::TopicStats::default()
    );
}

/// `topics` lists every topic with records, by name, with its stats.
pub async fn topics_lists_every_topic(h: &Harness) {
    h.add(NewTask::new("b.topic", "1")).await;
    h.add(NewTask::new("a.topic", "1").delay_ms(10)).await;
    h.add(NewTask::new("a.topic", "2").delay_ms(10)).await;
    let topics = h.queue.topics().await.unwrap();
    let names: Vec<_> = topics.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["a.topic", "b.topic"]);
    assert_eq!(topics[0].1.delayed, 2);
}

/// Deadlines far beyond the wheel's span (years) fire on time, not early.
pub async fn far_future_task_fires_on_time(h: &Harness) {
    let five_years = 5 * 365 * 86_400_000;
    h.add(task("far", five_years)).await;
    h.add(task("near", 10)).await;
    h.advance(10);
    let near = h.pop_ready(T).await;
    assert_eq!(near.id, "near");
    h.queue
        .finish(T, "near", Some(&near.receipt))
        .await
        .unwrap();
    h.advance(five_years - 11);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(h.state(T, "far").await, Some(State::Delayed));
    h.advance(1);
    assert_eq!(h.pop_ready(T).await.id, "far");
}

/// `on_expire`: `Ok` finishes, `Err` releases (retries, then DEAD).
pub async fn callbacks_finish_and_release(h: &Harness) {
    h.add(task("ok", 0)).await;
    h.add(task("bad", 0).max_retries(MaxRetries::Limited(1)))
        .await;
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    let workers = h
        .queue
        .on_expire(T, WorkerOptions::default(), move |d| {
            let c = Arc::clone(&c);
            async move {
                c.fetch_add(1, Ordering::SeqCst);
                if d.id == "bad" {
                    Err(format!("cannot handle {}", d.id))
                } else {
                    Ok(())
                }
            }
        })
        .unwrap();
    h.wait_state(T, "ok", State::Finished).await;
    h.wait_state(T, "bad", State::Dead).await;
    assert_eq!(calls.load(Ordering::SeqCst), 3, "ok once, bad twice");
    let info = h.queue.get(T, "bad").await.unwrap();
    assert_eq!(info.last_error.as_deref(), Some("cannot handle bad"));
    workers.shutdown().await;
}

/// A handler that outlives the ttr has its task redelivered; its late result is stale.
pub async fn callback_past_ttr_is_redelivered(h: &Harness) {
    h.add(task("slow", 0).ttr_ms(1_000)).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let (release_tx, release_rx) = tokio::sync::watch::channel(false);
    let c = Arc::clone(&calls);
    let workers = h
        .queue
        .on_expire(T, WorkerOptions::default(), move |_d| {
            let n = c.fetch_add(1, Ordering::SeqCst);
            let mut rx = release_rx.clone();
            async move {
                if n == 0 {
                    // The first attempt hangs until the test lets it go.
                    let _ = rx.wait_for(|v| *v).await;
                }
                Ok::<(), String>(())
            }
        })
        .unwrap();
    h.eventually("first attempt running", || async {
        calls.load(Ordering::SeqCst) == 1
    })
    .await;
    h.advance(1_000);
    h.eventually("redelivered", || async {
        calls.load(Ordering::SeqCst) == 2
    })
    .await;
    h.wait_state(T, "slow", State::Finished).await;
    release_tx.send_replace(true);
    workers.shutdown().await;
    let info = h.queue.get(T, "slow").await.unwrap();
    assert_eq!((info.state, info.retries), (State::Finished, 1));
}

/// At most `concurrency` handlers run at once; shutdown waits for those in flight.
pub async fn callbacks_respect_concurrency(h: &Harness) {
    for i in 0..12 {
        h.add(task(&format!("t{i}"), 0).ttr_ms(3_600_000)).await;
    }
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let (r, p, dn) = (Arc::clone(&running), Arc::clone(&peak), Arc::clone(&done));
    let workers = h
        .queue
        .on_expire(T, WorkerOptions::default().concurrency(3), move |_d| {
            let (r, p, dn) = (Arc::clone(&r), Arc::clone(&p), Arc::clone(&dn));
            async move {
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                r.fetch_sub(1, Ordering::SeqCst);
                dn.fetch_add(1, Ordering::SeqCst);
                Ok::<(), String>(())
            }
        })
        .unwrap();
    h.eventually("some handled", || async {
        done.load(Ordering::SeqCst) >= 4
    })
    .await;
    workers.shutdown().await;
    assert_eq!(
        running.load(Ordering::SeqCst),
        0,
        "shutdown waited for handlers"
    );
    assert!(
        peak.load(Ordering::SeqCst) <= 3,
        "peak {}",
        peak.load(Ordering::SeqCst)
    );
    let finished = h.queue.stats(T).await.unwrap().finished;
    assert_eq!(finished as usize, done.load(Ordering::SeqCst));
}

/// After shutdown, operations are refused as retryable, and parked pops return.
pub async fn shutdown_refuses_work(h: &Harness) {
    let q = h.queue.clone();
    let waiter =
        tokio::spawn(async move { q.pop(T, PopOptions::default().timeout_ms(60_000)).await });
    h.eventually("parked", || async {
        h.queue.context().waiters.parked() == 1
    })
    .await;
    h.queue.shutdown().await.unwrap();
    let got = tokio::time::timeout(crate::EVENTUALLY, waiter)
        .await
        .expect("pop returned")
        .unwrap();
    assert!(matches!(got, Ok(ref v) if v.is_empty()), "{got:?}");
    let e = h.queue.add(task("late", 0)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ShuttingDown);
    assert!(e.is_retryable());
}

/// The race `shutdown_refuses_work` can only catch by chance, made certain: a shutdown that
/// closes the storage while an admitted long-poll takes its first look (the consumer already
/// counts as parked) is the same as one that finds it parked, so the pop answers empty, not
/// with an error. The storage is closed first here, as the queue's shutdown closes it during
/// that look; the queue itself is still open, so the long-poll is admitted.
pub async fn a_long_poll_whose_first_look_meets_shutdown_returns_empty(h: &Harness) {
    h.queue.storage().tasks().shutdown().await.unwrap();
    let got = tokio::time::timeout(
        crate::EVENTUALLY,
        h.queue.pop(T, PopOptions::default().timeout_ms(60_000)),
    )
    .await
    .expect("the long-poll answered at once, not at its timeout");
    assert!(matches!(got, Ok(ref v) if v.is_empty()), "{got:?}");
}
