//! Recurring schedules (docs/design.md §9) on every backend: occurrences are never early,
//! each occurrence is exactly one task, the next one is always pending, deleting stops a
//! schedule, pausing skips occurrences, and a scheduler that restarts in the middle loses and
//! doubles nothing.
//!
//! The scheduler is driven by hand: each case moves the manual clock and calls
//! [`Scheduler::tick`] with its time, as the loop of `delayq serve` would when woken. Two
//! schedulers over the same queue stand for two instances racing on the same storage.

use std::collections::BTreeSet;

use delayq::core::schedule::{Missed, ScheduleDef, occurrence_id};
use delayq::{Scheduler, SchedulerOptions, State};

use crate::Harness;

const TOPIC: &str = "sched";
const EVERY: u64 = 1_000;

fn every_second(name: &str) -> ScheduleDef {
    let mut def = ScheduleDef::default();
    def.topic = TOPIC.into();
    def.name = name.into();
    def.every_ms = Some(EVERY);
    def.body = b"tick".to_vec();
    def
}

fn scheduler(h: &Harness) -> Scheduler {
    Scheduler::new(h.queue.clone(), SchedulerOptions::default())
}

/// Every task id of the topic in `state` (all states when `None`).
async fn ids(h: &Harness, state: Option<State>) -> BTreeSet<String> {
    let page = h
        .queue
        .list(TOPIC, state, 1, 1_000)
        .await
        .expect("listing the topic");
    page.items.into_iter().map(|t| t.id).collect()
}

/// The single DELAYED occurrence of the topic, with its due; panics unless exactly one.
async fn the_pending(h: &Harness) -> (String, u64) {
    let page = h
        .queue
        .list(TOPIC, Some(State::Delayed), 1, 1_000)
        .await
        .expect("listing the topic");
    assert_eq!(
        page.items.len(),
        1,
        "exactly one pending occurrence: {:?}",
        page.items.iter().map(|t| &t.id).collect::<Vec<_>>()
    );
    let t = &page.items[0];
    (t.id.clone(), t.due_ms)
}

/// Moves the clock to `to`, looks with every scheduler, and pops what became ready.
async fn step(h: &Harness, schedulers: &[&Scheduler], to: u64) {
    let now = h.now();
    if to > now {
        h.advance(to - now);
    }
    // All at once, as instances on one storage would: they race to add the same occurrences.
    let now = h.now();
    let looks: Vec<_> = schedulers
        .iter()
        .map(|s| {
            let s = (*s).clone();
            tokio::spawn(async move { s.tick(now).await })
        })
        .collect();
    for look in looks {
        let report = look.await.expect("a look ran").expect("a look");
        assert_eq!(
            report.failed, 0,
            "every schedule's look succeeded: {report:?}"
        );
    }
}

/// Pops every task that is ready now (after the backend promoted what is due) and returns
/// their ids, finishing them.
async fn drain(h: &Harness, expect: usize) -> Vec<String> {
    let mut got = Vec::new();
    for _ in 0..expect {
        let d = h.pop_ready(TOPIC).await;
        h.queue
            .finish(&d.topic, &d.id, Some(&d.receipt))
            .await
            .expect("finishing an occurrence");
        got.push(d.id);
    }
    assert!(
        h.pop_now(TOPIC, 10).await.is_empty(),
        "no more occurrences than expected"
    );
    got
}

/// Never early, exactly one task per occurrence, the next always pending, with two
/// schedulers racing on the same storage.
pub async fn schedule_occurrences_fire_once_on_time(h: &Harness) {
    let a = scheduler(h);
    let b = scheduler(h);
    let created = a.put(every_second("beat")).await.expect("creating");
    assert_eq!(created, delayq::PutOutcome::Created);
    step(h, &[&a, &b], h.now()).await;
    let mut fired = Vec::new();
    for _ in 0..8 {
        let (id, due) = the_pending(h).await;
        assert_eq!(
            id,
            occurrence_id("beat", due),
            "the id is the name and the due"
        );
        assert!(
            due > h.now() && due <= h.now() + EVERY,
            "added ahead of its due"
        );
        // One millisecond before its due: not ready, whatever the schedulers do.
        step(h, &[&a, &b], due - 1).await;
        assert!(h.pop_now(TOPIC, 10).await.is_empty(), "{id} is never early");
        assert_eq!(
            the_pending(h).await.0,
            id,
            "still the one pending occurrence"
        );
        // At its due it fires, and a look adds the next one.
        step(h, &[&b, &a], due).await;
        fired.extend(drain(h, 1).await);
        assert_eq!(fired.last(), Some(&id));
        let (next, next_due) = the_pending(h).await;
        assert_eq!(
            next_due,
            due + EVERY,
            "the next occurrence is pending: {next}"
        );
    }
    let unique: BTreeSet<_> = fired.iter().collect();
    assert_eq!(unique.len(), fired.len(), "each occurrence fired once");
    // Every task of the topic is one occurrence: 8 fired and 1 pending, nothing else.
    assert_eq!(ids(h, None).await.len(), 9);
}

/// Deleting a schedule cancels its pending occurrence and adds no more.
pub async fn schedule_delete_stops_it(h: &Harness) {
    let s = scheduler(h);
    s.put(every_second("gone")).await.expect("creating");
    step(h, &[&s], h.now()).await;
    let (pending, due) = the_pending(h).await;
    s.delete(TOPIC, "gone").await.expect("deleting");
    assert_eq!(h.state(TOPIC, &pending).await, Some(State::Cancelled));
    step(h, &[&s], due + 5 * EVERY).await;
    assert!(h.pop_now(TOPIC, 10).await.is_empty(), "nothing fires");
    assert_eq!(
        ids(h, Some(State::Delayed)).await.len(),
        0,
        "nothing pending"
    );
    let again = s.delete(TOPIC, "gone").await.expect_err("deleting twice");
    assert_eq!(again.kind(), delayq::ErrorKind::NotFound);
    assert!(s.list(Some(TOPIC), 1).await.expect("listing").is_empty());
}

/// Pausing skips the occurrences that fall in the pause; resuming goes on after now.
pub async fn schedule_pause_skips_occurrences(h: &Harness) {
    let s = scheduler(h);
    s.put(every_second("nap")).await.expect("creating");
    step(h, &[&s], h.now()).await;
    let (pending, due) = the_pending(h).await;
    s.pause(TOPIC, "nap").await.expect("pausing");
    assert_eq!(h.state(TOPIC, &pending).await, Some(State::Cancelled));
    let info = s.get(TOPIC, "nap", 10).await.expect("getting");
    assert!(info.def.paused && info.upcoming_ms.is_empty(), "{info:?}");
    // Five occurrences pass while paused: none is added or fires.
    step(h, &[&s], due + 4 * EVERY + 500).await;
    assert!(
        h.pop_now(TOPIC, 10).await.is_empty(),
        "nothing fires while paused"
    );
    assert_eq!(ids(h, Some(State::Delayed)).await.len(), 0);
    s.resume(TOPIC, "nap").await.expect("resuming");
    step(h, &[&s], h.now()).await;
    let (_, next_due) = the_pending(h).await;
    assert_eq!(
        next_due,
        due + 5 * EVERY,
        "the first occurrence after the resume"
    );
    step(h, &[&s], next_due).await;
    assert_eq!(drain(h, 1).await, vec![occurrence_id("nap", next_due)]);
}

/// A scheduler that stops and another that starts later lose and double nothing: a short
/// outage adds every late occurrence once, a long one fires the missed ones once (or not at
/// all with `missed: skip`), and a crash between adding an occurrence and moving the cursor
/// adds nothing twice.
pub async fn schedule_restart_loses_and_doubles_nothing(h: &Harness) {
    let first = scheduler(h);
    first.put(every_second("r")).await.expect("creating");
    let mut skip = every_second("s");
    skip.missed = Missed::Skip;
    first.put(skip).await.expect("creating");
    step(h, &[&first], h.now()).await;
    let pending = ids(h, Some(State::Delayed)).await;
    assert_eq!(pending.len(), 2, "one pending per schedule: {pending:?}");
    let due = s_due(&pending, "r@");
    drop(first);

    // Short outage: 3 s pass (within the 5 s grace) with no scheduler. Each occurrence in it
    // fires once: the pending one (already a task) and the two added late at the restart.
    step(h, &[], due + 2 * EVERY + 200).await;
    let second = scheduler(h);
    second.tick(h.now()).await.expect("a look");
    let mut got = drain(h, 6).await;
    got.sort();
    let mut want = Vec::new();
    for name in ["r", "s"] {
        for k in 0..3 {
            want.push(occurrence_id(name, due + k * EVERY));
        }
    }
    want.sort();
    assert_eq!(got, want, "every occurrence of the short outage, once");
    let pending = ids(h, Some(State::Delayed)).await;
    assert_eq!(
        pending,
        BTreeSet::from([
            occurrence_id("r", due + 3 * EVERY),
            occurrence_id("s", due + 3 * EVERY)
        ])
    );

    // Long outage: 60 s with no scheduler. Each schedule's pending occurrence is a task
    // and fires late; of the 60 after it, the last 5 s are late (within the grace) and fire
    // one by one, the 55 before are missed: "r" (fire once) fires one for all of them, the
    // latest, and "s" (skip) none. Never one per missed occurrence.
    let before = due + 3 * EVERY;
    step(h, &[], before + 60 * EVERY + 300).await;
    let third = scheduler(h);
    let report = third.tick(h.now()).await.expect("a look");
    assert_eq!(report.failed, 0);
    let mut want = vec![
        occurrence_id("r", before),
        occurrence_id("s", before),
        occurrence_id("r", before + 55 * EVERY),
    ];
    for k in 56..=60 {
        want.push(occurrence_id("r", before + k * EVERY));
        want.push(occurrence_id("s", before + k * EVERY));
    }
    want.sort();
    let mut got = drain(h, want.len()).await;
    got.sort();
    assert_eq!(got, want, "fire once: one for all the missed; skip: none");

    // A crash between adding the next occurrence and moving the cursor: the task is there,
    // the cursor is not. The next scheduler adds nothing twice.
    let (r_pending, r_due) = pending_of(h, "r@").await;
    assert_eq!(r_due, before + 61 * EVERY);
    step(h, &[], r_due).await;
    let crashed_next = occurrence_id("r", r_due + EVERY);
    h.add(
        delayq::NewTask::new(TOPIC, crashed_next.clone())
            .body(b"tick".to_vec())
            .run_at_ms(r_due + EVERY),
    )
    .await;
    let fourth = scheduler(h);
    let report = fourth.tick(h.now()).await.expect("a look");
    assert_eq!(
        report.existed, 1,
        "the crashed instance's add is found: {report:?}"
    );
    assert_eq!(
        report.added, 1,
        "only the other schedule's next: {report:?}"
    );
    let mut got = drain(h, 2).await;
    got.sort();
    assert_eq!(got, vec![r_pending, occurrence_id("s", r_due)]);
    assert_eq!(pending_of(h, "r@").await.0, crashed_next);
    assert_eq!(pending_of(h, "s@").await.1, r_due + EVERY);
}

fn s_due(ids: &BTreeSet<String>, prefix: &str) -> u64 {
    let id = ids
        .iter()
        .find(|i| i.starts_with(prefix))
        .expect("an occurrence");
    id[prefix.len()..].parse().expect("a due")
}

async fn pending_of(h: &Harness, prefix: &str) -> (String, u64) {
    let pending = ids(h, Some(State::Delayed)).await;
    let due = s_due(&pending, prefix);
    assert_eq!(
        pending.iter().filter(|i| i.starts_with(prefix)).count(),
        1,
        "one pending occurrence of {prefix}: {pending:?}"
    );
    (format!("{prefix}{due}"), due)
}
