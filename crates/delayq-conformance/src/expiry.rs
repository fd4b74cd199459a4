//! Task expiry (docs/design.md §11, docs/flow-control.md) on every backend: a task not handed
//! out by its `expires_at_ms` goes DEAD with the last error `expired` (or is deleted with
//! `on_expire: drop`) at that instant, by the backend's own timer; it is never handed out at
//! or after it; an ACTIVE task is never cut short, and expires when it comes back; a paused
//! topic's tasks still expire; requeue and kick clear the expiry; a reschedule cannot move
//! the due to or past it; a replace takes the new task's expiry; each expiry is counted.

use delayq::core::schedule::{ScheduleDef, occurrence_id};
use delayq::{
    AddOutcome, Error, ErrorKind, NewTask, OnDuplicate, OnExpire, PopOptions, Refusal,
    ReleaseOptions, Scheduler, SchedulerOptions, State, When,
};

use crate::{Harness, START_MS};

const T: &str = "expiring";

/// How many tasks of `topic` expired, by the storage's counter (`/stats`).
async fn expired(h: &Harness, topic: &str) -> u64 {
    h.queue.stats(topic).await.expect("stats").expired
}

/// A DELAYED task becomes READY at its due, then goes DEAD at its expiry exactly, with no pop
/// or other activity: one millisecond before, it is still READY.
pub async fn ready_task_goes_dead_at_its_expiry(h: &Harness) {
    h.add(NewTask::new(T, "a").delay_ms(1_000).expires_in_ms(3_000))
        .await;
    h.add(NewTask::new(T, "plain").delay_ms(1_000)).await;
    let info = h.queue.get(T, "a").await.unwrap();
    assert_eq!(info.expires_at_ms, Some(START_MS + 3_000));
    assert_eq!(info.on_expire, OnExpire::Dead);
    assert_eq!(h.queue.get(T, "plain").await.unwrap().expires_at_ms, None);
    h.advance(1_000);
    h.wait_state(T, "a", State::Ready).await;
    h.advance(1_999);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert_eq!(h.state(T, "a").await, Some(State::Ready));
    assert_eq!(expired(h, T).await, 0);
    h.advance(1);
    h.wait_state(T, "a", State::Dead).await;
    let dead = h.queue.get(T, "a").await.unwrap();
    assert_eq!(dead.last_error.as_deref(), Some("expired"));
    assert_eq!((dead.retries, dead.history.len()), (0, 0));
    let stats = h.queue.stats(T).await.unwrap();
    assert_eq!((stats.expired, stats.dead, stats.ready), (1, 1, 1));
    // The task without an expiry is handed out; the expired one never is.
    let got = h.pop_now(T, 10).await;
    assert_eq!(
        got.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(),
        ["plain"]
    );
    let m = h.queue.context().metrics.snapshot();
    assert_eq!((m.expired, m.dead), (1, 1));
    let activity = h.queue.activity();
    let (_, a) = activity.iter().find(|(t, _)| t == T).expect("activity");
    assert_eq!((a.expired, a.dead), (1, 1));
}

/// A DELAYED task whose expiry passes before it was promoted (the backend's timers lag
/// behind a jump of the clock) is never handed out either: a pop at or after the expiry
/// finds nothing, and the task is DEAD.
pub async fn task_is_never_handed_out_at_or_after_its_expiry(h: &Harness) {
    h.add(NewTask::new(T, "a").delay_ms(100).expires_in_ms(200))
        .await;
    h.add(NewTask::new(T, "b").expires_in_ms(150)).await;
    h.advance(200);
    assert!(h.pop_now(T, 10).await.is_empty());
    h.wait_state(T, "a", State::Dead).await;
    h.wait_state(T, "b", State::Dead).await;
    assert_eq!(expired(h, T).await, 2);
}

/// With `on_expire: drop` the task is deleted at its expiry, and still counted.
pub async fn drop_deletes_the_task_at_its_expiry(h: &Harness) {
    h.add(
        NewTask::new(T, "a")
            .expires_in_ms(500)
            .on_expire(OnExpire::Drop),
    )
    .await;
    h.add(
        NewTask::new(T, "later")
            .delay_ms(100)
            .expires_at_ms(START_MS + 900)
            .on_expire(OnExpire::Drop),
    )
    .await;
    assert_eq!(h.queue.get(T, "a").await.unwrap().on_expire, OnExpire::Drop);
    h.advance(500);
    h.eventually("a is deleted", || async { h.state(T, "a").await.is_none() })
        .await;
    assert_eq!(h.state(T, "later").await, Some(State::Ready));
    h.advance(400);
    h.eventually("later is deleted", || async {
        h.state(T, "later").await.is_none()
    })
    .await;
    let stats = h.queue.stats(T).await.unwrap();
    assert_eq!((stats.expired, stats.total, stats.dead), (2, 0, 0));
}

/// An ACTIVE task runs on past its expiry (finish still works); one that comes back after its
/// expiry — released, or past its ttr — expires then instead of being handed out again, with
/// its failed attempt in its history.
pub async fn active_task_is_not_cut_short_and_expires_when_it_comes_back(h: &Harness) {
    for id in ["finished", "released", "ttr"] {
        h.add(
            NewTask::new(T, id)
                .ttr_ms(5_000)
                .expires_in_ms(1_000)
                .max_retries(delayq::MaxRetries::Limited(3)),
        )
        .await;
    }
    h.add(
        NewTask::new(T, "dropped")
            .ttr_ms(5_000)
            .expires_in_ms(1_000)
            .on_expire(OnExpire::Drop),
    )
    .await;
    let held = h
        .queue
        .pop(T, PopOptions::default().count(4))
        .await
        .unwrap();
    assert_eq!(held.len(), 4);
    let receipt = |id: &str| held.iter().find(|d| d.id == id).unwrap().receipt.clone();
    h.advance(2_000);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    for id in ["finished", "released", "ttr", "dropped"] {
        assert_eq!(h.state(T, id).await, Some(State::Active), "{id}");
    }
    assert_eq!(expired(h, T).await, 0);
    h.queue
        .finish(T, "finished", Some(&receipt("finished")))
        .await
        .unwrap();
    assert_eq!(h.state(T, "finished").await, Some(State::Finished));
    let state = h
        .queue
        .release(
            T,
            "released",
            ReleaseOptions::default()
                .receipt(receipt("released"))
                .error("busy"),
        )
        .await
        .unwrap();
    assert_eq!(state, State::Dead);
    let dead = h.queue.get(T, "released").await.unwrap();
    assert_eq!(dead.state, State::Dead);
    assert_eq!(dead.last_error.as_deref(), Some("expired"));
    assert_eq!(dead.history.len(), 1);
    assert_eq!(dead.history[0].error.as_deref(), Some("busy"));
    h.queue
        .release(
            T,
            "dropped",
            ReleaseOptions::default().receipt(receipt("dropped")),
        )
        .await
        .unwrap();
    assert_eq!(h.state(T, "dropped").await, None);
    // Past the ttr: the attempt fails, and the task expires instead of a redelivery.
    h.advance(3_000);
    h.wait_state(T, "ttr", State::Dead).await;
    let dead = h.queue.get(T, "ttr").await.unwrap();
    assert_eq!(dead.last_error.as_deref(), Some("expired"));
    assert_eq!(dead.history[0].outcome, "ttr_expired");
    assert!(h.pop_now(T, 10).await.is_empty());
    assert_eq!(expired(h, T).await, 3);
}

/// A paused topic hands nothing out, but its tasks still expire on time.
pub async fn paused_topic_tasks_still_expire(h: &Harness) {
    h.queue.pause(T, None).await.unwrap();
    h.add(NewTask::new(T, "a").expires_in_ms(100)).await;
    h.add(NewTask::new(T, "b").delay_ms(50).expires_in_ms(100))
        .await;
    h.advance(100);
    h.wait_state(T, "a", State::Dead).await;
    h.wait_state(T, "b", State::Dead).await;
    assert_eq!(expired(h, T).await, 2);
    h.queue.resume(T).await.unwrap();
    assert!(h.pop_now(T, 10).await.is_empty());
}

/// Requeue and kick of an expired task are an operator's explicit act: the task comes back
/// without its expiry and is handed out however late.
pub async fn requeue_and_kick_clear_the_expiry(h: &Harness) {
    for id in ["requeued", "kicked", "taken"] {
        h.add(NewTask::new(T, id).expires_in_ms(100)).await;
    }
    h.advance(100);
    for id in ["requeued", "kicked", "taken"] {
        h.wait_state(T, id, State::Dead).await;
    }
    h.queue.requeue(T, "requeued").await.unwrap();
    h.queue.kick_job(T, "kicked").await.unwrap();
    for id in ["requeued", "kicked"] {
        let info = h.queue.get(T, id).await.unwrap();
        assert_eq!(
            (info.state, info.expires_at_ms),
            (State::Ready, None),
            "{id}"
        );
    }
    let taken = h.queue.take(T, "taken").await.unwrap();
    assert_eq!(taken.id, "taken");
    assert_eq!(h.queue.get(T, "taken").await.unwrap().expires_at_ms, None);
    h.advance(10_000);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let mut got: Vec<String> = h.pop_now(T, 10).await.into_iter().map(|d| d.id).collect();
    got.sort();
    assert_eq!(got, ["kicked", "requeued"]);
    assert_eq!(expired(h, T).await, 3);
}

/// A reschedule to a due at or after the task's expiry is refused (409), naming the expiry;
/// one before it is applied.
pub async fn reschedule_cannot_pass_the_expiry(h: &Harness) {
    let expires = START_MS + 5_000;
    h.add(NewTask::new(T, "a").delay_ms(1_000).expires_at_ms(expires))
        .await;
    for due in [expires, expires + 1] {
        match h.queue.reschedule(T, "a", When::At(due)).await {
            Err(Error::Conflict {
                refusal:
                    Refusal::PastExpiry {
                        due_ms,
                        expires_at_ms,
                    },
                ..
            }) => assert_eq!((due_ms, expires_at_ms), (due, expires)),
            other => panic!("rescheduling to {due}: {other:?}"),
        }
    }
    let err = h
        .queue
        .reschedule(T, "a", When::Delay(10_000))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert!(err.to_string().contains("expires at"), "{err}");
    assert_eq!(
        h.queue
            .reschedule(T, "a", When::At(expires - 1))
            .await
            .unwrap(),
        State::Delayed
    );
    let info = h.queue.get(T, "a").await.unwrap();
    assert_eq!(
        (info.due_ms, info.expires_at_ms),
        (expires - 1, Some(expires))
    );
}

/// `on_duplicate: replace` takes the new task's expiry, or none.
pub async fn replace_takes_the_new_expiry_or_none(h: &Harness) {
    h.add(NewTask::new(T, "a").expires_in_ms(100)).await;
    h.add(
        NewTask::new(T, "a")
            .body("new")
            .on_duplicate(OnDuplicate::Replace),
    )
    .await;
    assert_eq!(h.queue.get(T, "a").await.unwrap().expires_at_ms, None);
    h.advance(200);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert_eq!(h.state(T, "a").await, Some(State::Ready));
    h.add(
        NewTask::new(T, "a")
            .expires_in_ms(300)
            .on_expire(OnExpire::Drop)
            .on_duplicate(OnDuplicate::Replace),
    )
    .await;
    let info = h.queue.get(T, "a").await.unwrap();
    assert_eq!(
        (info.expires_at_ms, info.on_expire),
        (Some(START_MS + 500), OnExpire::Drop)
    );
    h.advance(300);
    h.eventually("the replacing task is dropped", || async {
        h.state(T, "a").await.is_none()
    })
    .await;
}

/// Each task of a batch carries its own expiry, and a bad one fails alone, naming the field.
pub async fn batch_tasks_carry_their_own_expiry(h: &Harness) {
    let results = h
        .queue
        .add_batch(vec![
            NewTask::new(T, "a").expires_in_ms(100),
            NewTask::new(T, "bad").delay_ms(500).expires_in_ms(500),
            NewTask::new(T, "b")
                .delay_ms(50)
                .expires_at_ms(START_MS + 300),
            NewTask::new(T, "c"),
        ])
        .await
        .unwrap();
    assert_eq!(results[0].as_ref().ok(), Some(&AddOutcome::Added));
    match &results[1] {
        Err(Error::Invalid(f)) => assert_eq!(f.field, "expires_in_ms"),
        other => panic!("expected the second task's expiry to be invalid, got {other:?}"),
    }
    assert!(results[2].is_ok() && results[3].is_ok());
    let at = |id: &'static str| async move { h.queue.get(T, id).await.unwrap().expires_at_ms };
    assert_eq!(at("a").await, Some(START_MS + 100));
    assert_eq!(at("b").await, Some(START_MS + 300));
    assert_eq!(at("c").await, None);
    assert_eq!(h.state(T, "bad").await, None);
    // A single add with an expiry at its due is refused the same way.
    let err = h
        .queue
        .add(
            NewTask::new(T, "d")
                .delay_ms(10)
                .expires_at_ms(START_MS + 10),
        )
        .await
        .unwrap_err();
    match err {
        Error::Invalid(f) => assert_eq!(f.field, "expires_at_ms"),
        other => panic!("{other:?}"),
    }
}

/// Each occurrence of a schedule with `expires_in_ms` expires that long after its own due.
pub async fn schedule_occurrences_expire_after_their_due(h: &Harness) {
    let scheduler = Scheduler::new(h.queue.clone(), SchedulerOptions::default());
    let mut def = ScheduleDef::default();
    def.topic = T.into();
    def.name = "tick".into();
    def.every_ms = Some(10_000);
    def.expires_in_ms = Some(2_000);
    def.on_expire = Some(OnExpire::Drop);
    scheduler.put(def).await.expect("put the schedule");
    scheduler.tick(h.now()).await.expect("a look");
    let page = h.queue.list(T, Some(State::Delayed), 1, 10).await.unwrap();
    assert_eq!(page.items.len(), 1, "{:?}", page.items);
    let next = &page.items[0];
    assert_eq!(next.id, occurrence_id("tick", next.due_ms));
    assert_eq!(
        (next.expires_at_ms, next.on_expire),
        (Some(next.due_ms + 2_000), OnExpire::Drop)
    );
    let (id, due) = (next.id.clone(), next.due_ms);
    h.advance(due + 2_000 - h.now());
    h.eventually("the occurrence is dropped at its expiry", || async {
        h.state(T, &id).await.is_none()
    })
    .await;
}
