//! The beanstalkd extras ([`delayq::BeanstalkOps`]): kick, kick-job, reserve-job (take) and
//! peek.
//!
//! Each case takes a [`Harness`] on a fresh backend and panics when the backend breaks the
//! rule. As in [`crate::tasks`], time moves only when a case moves the manual clock, so "not
//! before" is checked one millisecond before a due or an end, and "at" exactly at it.

use delayq::{ErrorKind, MaxRetries, Op, Refusal, ReleaseOptions, State};

use crate::Harness;
use crate::support::*;

/// Kick: buried (DEAD) tasks first, oldest buried first, with retries reset; only when none is
/// buried, DELAYED tasks earliest due first, due at once.
pub async fn kick_buried_first_then_delayed(h: &Harness) {
    h.add(task("b", 0).ttr_ms(100)).await;
    // b is redelivered once, so its retries are 1 when it is buried.
    h.pop_ready(T).await;
    h.advance(100);
    h.wait_state(T, "b", State::Ready).await;
    pop_and_bury(h, "b").await;
    // A later bury, by the clock: "oldest buried first" compares the time each went DEAD.
    h.advance(10);
    h.add(task("a", 0)).await;
    pop_and_bury(h, "a").await;
    h.add(task("d-late", 5_000)).await;
    h.add(task("d-early", 3_000)).await;
    assert_eq!(h.queue.kick(T, 1).await.unwrap(), 1);
    assert_eq!(
        h.state(T, "b").await,
        Some(State::Ready),
        "oldest buried first"
    );
    assert_eq!(h.state(T, "a").await, Some(State::Dead));
    h.advance(1);
    assert_eq!(h.queue.kick(T, 10).await.unwrap(), 1, "only the buried one");
    assert_eq!(h.state(T, "d-early").await, Some(State::Delayed));
    let got = h.pop_now(T, 10).await;
    assert_eq!(ids(&got), ["b", "a"]);
    assert_eq!(got[0].retries, 0, "retries reset as requeue does");
    // Nothing buried now: a kick moves DELAYED tasks, earliest due first.
    assert_eq!(h.queue.kick(T, 1).await.unwrap(), 1);
    assert_eq!(h.state(T, "d-early").await, Some(State::Ready));
    assert_eq!(h.state(T, "d-late").await, Some(State::Delayed));
    let early = h.pop_now(T, 10).await;
    assert_eq!(ids(&early), ["d-early"]);
    assert!(early[0].due_ms <= h.now(), "due becomes now");
    assert_eq!(h.queue.kick(T, 10).await.unwrap(), 1);
    assert_eq!(h.queue.kick(T, 10).await.unwrap(), 0);
    assert_eq!(h.queue.kick("never.seen", 10).await.unwrap(), 0);
}

/// kick-job: one DEAD or DELAYED task → READY; any other state is a conflict.
pub async fn kick_job_moves_one_task(h: &Harness) {
    h.add(task("dead", 0)).await;
    pop_and_bury(h, "dead").await;
    h.add(task("delayed", 60_000)).await;
    h.add(task("ready", 0)).await;
    h.queue.kick_job(T, "dead").await.unwrap();
    h.queue.kick_job(T, "delayed").await.unwrap();
    assert_eq!(h.state(T, "dead").await, Some(State::Ready));
    assert_eq!(h.state(T, "delayed").await, Some(State::Ready));
    assert_refused(
        h.queue.kick_job(T, "ready").await,
        Refusal::WrongState {
            state: State::Ready,
            op: Op::Kick,
        },
    );
    assert_eq!(kind(h.queue.kick_job(T, "nope").await), ErrorKind::NotFound);
    assert_eq!(h.pop_now(T, 10).await.len(), 3);
}

/// Peek shows the next task of a state without taking it: READY in pop order, DELAYED
/// earliest due first, DEAD oldest buried first; `None` when there is none.
pub async fn peek_shows_next_without_taking(h: &Harness) {
    for state in [State::Ready, State::Delayed, State::Dead] {
        assert!(h.queue.peek(T, state).await.unwrap().is_none());
    }
    // The other states have no "next": asking is invalid input, not an arbitrary task.
    for state in [State::Active, State::Finished, State::Cancelled] {
        let err = h.queue.peek(T, state).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Invalid, "{state}: {err}");
    }
    h.add(task("r-low", 0).priority(50)).await;
    h.add(task("r-high", 0).priority(5)).await;
    h.add(task("d-late", 9_000)).await;
    h.add(task("d-early", 7_000)).await;
    h.add(task("x", 0).priority(0)).await;
    pop_and_bury(h, "x").await;
    h.advance(10);
    h.add(task("y", 0).priority(0)).await;
    pop_and_bury(h, "y").await;
    let peek = |state| async move { h.queue.peek(T, state).await.unwrap().unwrap() };
    let ready = peek(State::Ready).await;
    assert_eq!((ready.id.as_str(), ready.state), ("r-high", State::Ready));
    assert_eq!(peek(State::Ready).await.id, "r-high", "peek takes nothing");
    assert_eq!(peek(State::Delayed).await.id, "d-early");
    assert_eq!(peek(State::Dead).await.id, "x");
    assert_eq!(h.queue.stats(T).await.unwrap().ready, 2);
    assert_eq!(h.pop_now(T, 1).await[0].id, "r-high");
    assert_eq!(peek(State::Ready).await.id, "r-low");
}

/// Retries under max_retries still end in DEAD after a bury and kick cycle: a kicked task
/// starts its retries again.
pub async fn kicked_task_gets_its_retries_again(h: &Harness) {
    h.add(task("a", 0).max_retries(MaxRetries::Limited(0)))
        .await;
    pop_and_bury(h, "a").await;
    assert_eq!(h.queue.kick(T, 1).await.unwrap(), 1);
    let d = h.pop_ready(T).await;
    assert_eq!(
        h.queue
            .release(T, "a", ReleaseOptions::default().receipt(d.receipt))
            .await
            .unwrap(),
        State::Dead,
        "max_retries 0: the one delivery after the kick, then DEAD"
    );
}

/// reserve-job: `take` hands out one named READY (not the head), DELAYED or DEAD task as
/// ACTIVE with a fresh receipt; a DELAYED task is due now, a DEAD one gets its retries again;
/// an ACTIVE, FINISHED or unknown task is refused.
pub async fn take_hands_out_one_named_task(h: &Harness) {
    h.add(task("head", 0).priority(1)).await;
    h.add(task("ready", 0).priority(5)).await;
    h.add(task("delayed", 60_000).priority(7)).await;
    h.add(
        task("dead", 0)
            .priority(9)
            .max_retries(MaxRetries::Limited(1)),
    )
    .await;
    // "dead" through two failed attempts: retries 1, then DEAD.
    for _ in 0..2 {
        let d = h.queue.take(T, "dead").await.unwrap();
        h.queue
            .release(T, "dead", ReleaseOptions::default().receipt(d.receipt))
            .await
            .unwrap();
    }
    assert_eq!(h.state(T, "dead").await, Some(State::Dead));
    assert_eq!(h.state(T, "delayed").await, Some(State::Delayed));

    let ready = h.queue.take(T, "ready").await.unwrap();
    assert_eq!(
        (ready.id.as_str(), ready.topic.as_str(), ready.priority),
        ("ready", T, 5)
    );
    assert_eq!(ready.body, b"body of ready");
    assert_eq!(h.state(T, "ready").await, Some(State::Active));
    let delayed = h.queue.take(T, "delayed").await.unwrap();
    assert!(delayed.due_ms <= h.now(), "a taken DELAYED task is due now");
    let dead = h.queue.take(T, "dead").await.unwrap();
    assert_eq!(dead.retries, 0, "a taken DEAD task gets its retries again");
    let receipts = [&ready.receipt, &delayed.receipt, &dead.receipt];
    assert!(receipts.iter().all(|r| !r.is_empty()));
    assert_ne!(ready.receipt, delayed.receipt);
    assert_ne!(delayed.receipt, dead.receipt);

    // Only the head is left for a pop.
    assert_eq!(ids(&h.pop_now(T, 10).await), ["head"]);
    assert_refused(
        h.queue.take(T, "ready").await,
        Refusal::WrongState {
            state: State::Active,
            op: Op::Take,
        },
    );
    h.queue
        .finish(T, "ready", Some(&ready.receipt))
        .await
        .unwrap();
    assert_refused(
        h.queue.take(T, "ready").await,
        Refusal::WrongState {
            state: State::Finished,
            op: Op::Take,
        },
    );
    assert_eq!(kind(h.queue.take(T, "nope").await), ErrorKind::NotFound);
    assert_eq!(
        kind(h.queue.take("never.seen", "ready").await),
        ErrorKind::NotFound
    );
    // The taken DEAD task fails like any delivery: one more attempt left after the reset.
    assert_eq!(
        h.queue
            .release(T, "dead", ReleaseOptions::default().receipt(dead.receipt))
            .await
            .unwrap(),
        State::Ready
    );
}

/// reserve-job on a paused topic: the named task is handed out (beanstalkd does the same),
/// while pops still get nothing; an earlier receipt of the task is stale after a take, and a
/// taken task whose ttr ends is redelivered.
pub async fn take_ignores_pause_and_renews_receipt(h: &Harness) {
    h.add(task("a", 0).ttr_ms(1_000)).await;
    h.add(task("b", 0)).await;
    let first = h.pop_ready(T).await;
    assert_eq!(first.id, "a");
    h.queue
        .release(
            T,
            "a",
            ReleaseOptions::default().receipt(first.receipt.clone()),
        )
        .await
        .unwrap();
    h.queue.pause(T, None).await.unwrap();
    let taken = h.queue.take(T, "a").await.unwrap();
    assert_ne!(taken.receipt, first.receipt);
    assert!(
        h.pop_now(T, 10).await.is_empty(),
        "the pause still holds for pops"
    );
    assert_refused(
        h.queue.finish(T, "a", Some(&first.receipt)).await,
        Refusal::StaleReceipt,
    );
    h.queue.touch(T, "a", Some(&taken.receipt)).await.unwrap();
    h.advance(1_000);
    h.wait_state(T, "a", State::Ready).await;
    h.queue.resume(T).await.unwrap();
    let mut got = ids(&h.pop_now(T, 10).await);
    got.sort();
    assert_eq!(got, ["a", "b"]);
}
