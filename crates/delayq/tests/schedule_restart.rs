//! Recurring schedules across a restart of the embedded backend (docs/schedules.md): the
//! schedule, its cursor and its pending occurrence are on disk, so a server that stops and
//! starts again (with time gone by) loses and doubles no occurrence, and the missed ones fire
//! once. The conformance suite checks the scheduler restarting over live storage; this checks
//! the storage restarting under it.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use delayq::core::schedule::{ScheduleDef, occurrence_id};
use delayq::storage::embedded::{self, EmbeddedOptions};
use delayq::{
    Clock, ManualClock, PopOptions, Queue, Scheduler, SchedulerOptions, State, StorageContext,
};
use delayq_log::FsyncPolicy;

const START: u64 = 1_800_000_000_000;
const T: &str = "beat";

async fn open(dir: &Path, clock: &ManualClock) -> (Queue, Scheduler) {
    let ctx = StorageContext::new(Arc::new(clock.clone()));
    let options = EmbeddedOptions::new(dir)
        .fsync(FsyncPolicy::Always)
        .shards(2);
    let (storage, _) = embedded::start(ctx.clone(), options).await.expect("start");
    let queue = Queue::new(storage, ctx);
    let scheduler = Scheduler::new(queue.clone(), SchedulerOptions::default());
    (queue, scheduler)
}

/// Pops and finishes what is ready, waiting a little for the engine's promotion.
async fn drain(q: &Queue, want: usize) -> BTreeSet<String> {
    let mut got = BTreeSet::new();
    for _ in 0..2_000 {
        for d in q.pop(T, PopOptions::default().count(100)).await.unwrap() {
            q.finish(T, &d.id, Some(&d.receipt)).await.unwrap();
            assert!(got.insert(d.id.clone()), "{} delivered twice", d.id);
        }
        if got.len() >= want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        q.pop(T, PopOptions::default().count(100))
            .await
            .unwrap()
            .is_empty(),
        "nothing more than {want}: {got:?}"
    );
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_loses_and_doubles_no_occurrence() {
    let dir = tempfile::Builder::new()
        .prefix("schedule-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
        .keep();
    let clock = ManualClock::new(START);
    let (q, s) = open(&dir, &clock).await;
    let mut def = ScheduleDef::default();
    def.topic = T.into();
    def.name = "tick".into();
    def.every_ms = Some(1_000);
    s.put(def).await.unwrap();
    s.tick(clock.now_ms()).await.unwrap();
    for _ in 0..3 {
        clock.advance(1_000);
        s.tick(clock.now_ms()).await.unwrap();
    }
    let fired = drain(&q, 3).await;
    let want: BTreeSet<String> = (1..=3)
        .map(|k| occurrence_id("tick", START + k * 1_000))
        .collect();
    assert_eq!(fired, want);
    q.shutdown().await.unwrap();
    // The scheduler holds the queue too: both go before the directory is opened again.
    drop((q, s));

    // Down for 3 s: within the grace, every occurrence of the outage fires once at start.
    clock.advance(3_000);
    let (q, s) = open(&dir, &clock).await;
    let info = s.get(T, "tick", 3).await.expect("the schedule survived");
    assert_eq!(info.cursor_ms, Some(START + 4_000), "and its cursor");
    // The reopened engine fires what came due while it was down on its own timer: wait
    // for it (bounded) rather than race it.
    let pending = occurrence_id("tick", START + 4_000);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while q.get(T, &pending).await.unwrap().state != State::Ready
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        q.get(T, &pending).await.unwrap().state,
        State::Ready,
        "the pending occurrence survived and came due"
    );
    s.tick(clock.now_ms()).await.unwrap();
    let fired = drain(&q, 3).await;
    let want: BTreeSet<String> = (4..=6)
        .map(|k| occurrence_id("tick", START + k * 1_000))
        .collect();
    assert_eq!(fired, want, "none lost, none twice");
    q.shutdown().await.unwrap();
    // The scheduler holds the queue too: both go before the directory is opened again.
    drop((q, s));

    // Down for a minute: the pending occurrence, one for the missed ones, and those within the
    // grace; never one per missed occurrence.
    clock.advance(60_000);
    let now = clock.now_ms(); // START + 66 s
    let (q, s) = open(&dir, &clock).await;
    s.tick(now).await.unwrap();
    let grace = SchedulerOptions::default().grace_ms;
    let mut want = BTreeSet::from([
        occurrence_id("tick", START + 7_000),
        occurrence_id("tick", now - grace - 1_000),
    ]);
    for due in (now - grace..=now).step_by(1_000) {
        want.insert(occurrence_id("tick", due));
    }
    let fired = drain(&q, want.len()).await;
    assert_eq!(fired, want);
    let pending = q.list(T, Some(State::Delayed), 1, 100).await.unwrap().items;
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].id, occurrence_id("tick", now + 1_000));
    q.shutdown().await.unwrap();
}
