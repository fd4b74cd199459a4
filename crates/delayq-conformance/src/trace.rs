//! Trace contexts (docs/tracing.md) on every backend: a task added with a W3C trace context
//! keeps it through every transition — delivery, ttr expiry, release, bury, kick, take,
//! finish, ack and take the next — and shows it in every view; a task without one has none; a
//! replace takes the new
//! task's; each task of a batch keeps its own; each occurrence of a traced schedule starts a
//! trace of its own.

use delayq::core::schedule::{ScheduleDef, occurrence_id, occurrence_trace};
use delayq::{
    BuryOptions, Held, NewTask, OnDuplicate, PopOptions, ReleaseOptions, Scheduler,
    SchedulerOptions, State, TraceContext,
};

use crate::{Harness, START_MS};

const T: &str = "traced";

fn trace(span: u64, state: Option<&str>) -> TraceContext {
    TraceContext::parse(
        &format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{span:016x}-01"),
        state,
    )
    .expect("a valid trace context")
}

/// The context goes with the task from its add to its end, through every state.
pub async fn trace_context_is_kept_through_the_life_of_a_task(h: &Harness) {
    let t = trace(0xa1, Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"));
    h.add(NewTask::new(T, "a").ttr_ms(1_000).trace(t.clone()))
        .await;
    h.add(NewTask::new(T, "plain").delay_ms(60_000)).await;
    assert_eq!(h.queue.get(T, "a").await.unwrap().trace, Some(t.clone()));
    assert_eq!(h.queue.get(T, "plain").await.unwrap().trace, None);

    // Delivered, then redelivered after a ttr expiry and after a release with a delay.
    let first = h.pop_ready(T).await;
    assert_eq!(first.trace, Some(t.clone()));
    h.advance(1_000);
    let second = h.pop_ready(T).await;
    assert_eq!((second.retries, second.trace.as_ref()), (1, Some(&t)));
    h.queue
        .release(
            T,
            "a",
            ReleaseOptions::default()
                .receipt(&second.receipt)
                .delay_ms(500),
        )
        .await
        .unwrap();
    assert_eq!(h.queue.get(T, "a").await.unwrap().trace, Some(t.clone()));
    h.advance(500);
    let third = h.pop_ready(T).await;
    assert_eq!((third.retries, third.trace.as_ref()), (2, Some(&t)));

    // Buried, kicked, taken by id, finished: still there.
    h.queue
        .bury(T, "a", BuryOptions::default().receipt(&third.receipt))
        .await
        .unwrap();
    let dead = h.queue.get(T, "a").await.unwrap();
    assert_eq!((dead.state, dead.trace.as_ref()), (State::Dead, Some(&t)));
    let taken = h.queue.take(T, "a").await.unwrap();
    assert_eq!(taken.trace, Some(t.clone()));
    h.queue.finish(T, "a", Some(&taken.receipt)).await.unwrap();
    let done = h.queue.get(T, "a").await.unwrap();
    assert_eq!((done.state, done.trace), (State::Finished, Some(t)));
    // The untraced task is delivered without one.
    h.advance(60_000);
    let plain = h.pop_ready(T).await;
    assert_eq!((plain.id.as_str(), plain.trace), ("plain", None));
}

/// Ack and take the next (`finish_then_pop`, one script on Redis) hands back the next task's
/// context as a pop does, and the finished task keeps its own.
pub async fn finish_then_pop_hands_back_the_trace_context(h: &Harness) {
    let (ta, tb) = (
        trace(0xa1, None),
        trace(0xb2, Some("congo=t61rcWkgMzE,rojo=a b")),
    );
    h.add(NewTask::new(T, "a").trace(ta.clone())).await;
    h.add(NewTask::new(T, "b").trace(tb.clone())).await;
    h.add(NewTask::new(T, "c")).await;
    let mut held = h.pop_ready(T).await;
    assert_eq!((held.id.as_str(), held.trace.as_ref()), ("a", Some(&ta)));
    for (id, want) in [("b", Some(&tb)), ("c", None)] {
        let next = h
            .queue
            .finish_then_pop(
                Held {
                    topic: T,
                    id: &held.id,
                    receipt: Some(&held.receipt),
                },
                T,
                PopOptions::default().timeout_ms(0),
            )
            .await
            .expect("the finish")
            .expect("the pop");
        let [next] = <[_; 1]>::try_from(next).expect("one task");
        assert_eq!((next.id.as_str(), next.trace.as_ref()), (id, want));
        held = next;
    }
    let a = h.queue.get(T, "a").await.unwrap();
    assert_eq!((a.state, a.trace), (State::Finished, Some(ta)));
}

/// A replace stores the new task's context, or none when the new task has none; a kept
/// duplicate keeps the old one.
pub async fn replace_takes_the_new_trace_context(h: &Harness) {
    let (old, new) = (trace(0xb1, None), trace(0xb2, Some("k=v")));
    h.add(NewTask::new(T, "a").delay_ms(10).trace(old.clone()))
        .await;
    h.add(
        NewTask::new(T, "a")
            .delay_ms(10)
            .trace(new.clone())
            .on_duplicate(OnDuplicate::Keep),
    )
    .await;
    assert_eq!(h.queue.get(T, "a").await.unwrap().trace, Some(old));
    h.add(
        NewTask::new(T, "a")
            .delay_ms(10)
            .trace(new.clone())
            .on_duplicate(OnDuplicate::Replace),
    )
    .await;
    assert_eq!(h.queue.get(T, "a").await.unwrap().trace, Some(new));
    h.add(
        NewTask::new(T, "a")
            .delay_ms(10)
            .on_duplicate(OnDuplicate::Replace),
    )
    .await;
    assert_eq!(h.queue.get(T, "a").await.unwrap().trace, None);
    // A requeued dead task keeps its context too.
    h.add(NewTask::new(T, "d").trace(trace(0xb3, None))).await;
    let d = h.pop_ready(T).await;
    assert_eq!(d.id, "d");
    h.queue
        .bury(T, "d", BuryOptions::default().receipt(&d.receipt))
        .await
        .unwrap();
    h.queue.requeue(T, "d").await.unwrap();
    let again = h.pop_ready(T).await;
    assert_eq!(again.trace, Some(trace(0xb3, None)));
}

/// Each task of a batch keeps its own context (or none).
pub async fn batch_tasks_keep_their_own_trace_contexts(h: &Harness) {
    let results = h
        .queue
        .add_batch(vec![
            NewTask::new(T, "x").trace(trace(0xc1, None)),
            NewTask::new(T, "y"),
            NewTask::new(T, "z").trace(trace(0xc3, Some("a=1"))),
        ])
        .await
        .unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let mut got: Vec<_> = h
        .pop_now(T, 3)
        .await
        .into_iter()
        .map(|d| (d.id, d.trace))
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        vec![
            ("x".to_owned(), Some(trace(0xc1, None))),
            ("y".to_owned(), None),
            ("z".to_owned(), Some(trace(0xc3, Some("a=1")))),
        ]
    );
}

/// The schedule's context is stored with it, and each occurrence starts its own trace.
pub async fn schedule_occurrences_start_their_own_traces(h: &Harness) {
    let scheduler = Scheduler::new(h.queue.clone(), SchedulerOptions::default());
    let t = trace(0xd1, None);
    let mut def = ScheduleDef::default();
    def.topic = T.into();
    def.name = "tick".into();
    def.every_ms = Some(1_000);
    def.trace = Some(t.clone());
    scheduler.put(def).await.unwrap();
    let info = scheduler.get(T, "tick", 1).await.unwrap();
    assert_eq!(info.def.trace, Some(t.clone()));
    scheduler.tick(h.now()).await.unwrap();
    let pending = h.queue.list(T, None, 1, 10).await.unwrap().items;
    assert_eq!(pending.len(), 1, "one pending occurrence");
    let occurrence = &pending[0];
    assert!(occurrence.due_ms > START_MS);
    assert_eq!(occurrence.id, occurrence_id("tick", occurrence.due_ms));
    let expected = occurrence_trace(&t, "tick", occurrence.due_ms);
    assert_ne!(expected.trace_id(), t.trace_id());
    assert_eq!(occurrence.trace, Some(expected));
}
