//! Recovery of the embedded backend: what was acknowledged before a shutdown (or a crash, in
//! `embedded_crash.rs`) is there after a restart, time that passed while the process was down
//! takes effect at once, snapshots keep disk use bounded, and damage is reported, not skipped.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use delayq::storage::embedded::{self, EmbeddedOptions};
use delayq::{
    ErrorKind, Held, ManualClock, MaxRetries, NewTask, PopOptions, Queue, ReleaseOptions, State,
    StorageContext, TaskInfo,
};
use delayq_log::FsyncPolicy;

const START: u64 = 1_800_000_000_000;
const T: &str = "orders";

fn scratch() -> PathBuf {
    tempfile::Builder::new()
        .prefix("embedded-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
        .keep()
}

async fn open(
    dir: &Path,
    clock: &ManualClock,
    options: impl FnOnce(EmbeddedOptions) -> EmbeddedOptions,
) -> Queue {
    let ctx = StorageContext::new(Arc::new(clock.clone()));
    let options = options(
        EmbeddedOptions::new(dir)
            .fsync(FsyncPolicy::Always)
            .shards(3),
    );
    let (storage, _) = embedded::start(ctx.clone(), options).await.expect("start");
    Queue::new(storage, ctx)
}

async fn all_tasks(q: &Queue, topic: &str) -> Vec<TaskInfo> {
    q.list(topic, None, 1, 1000).await.unwrap().items
}

async fn eventually_state(q: &Queue, id: &str, state: State) {
    for _ in 0..5_000 {
        if q.get(T, id).await.ok().map(|t| t.state) == Some(state) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("{id} never became {state}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_state_survives_a_restart() {
    let dir = scratch();
    let clock = ManualClock::new(START);
    let q = open(&dir, &clock, |o| o).await;
    let pop = |id: &'static str| {
        let q = q.clone();
        async move {
            q.add(
                NewTask::new(T, id)
                    .body(id)
                    .max_retries(MaxRetries::Limited(0)),
            )
            .await
            .unwrap();
            let d = q
                .pop(T, PopOptions::default())
                .await
                .unwrap()
                .pop()
                .expect("ready at once");
            assert_eq!(d.id, id);
            d
        }
    };
    let f = pop("finished").await;
    q.finish(T, "finished", Some(&f.receipt)).await.unwrap();
    let d = pop("dead").await;
    q.release(
        T,
        "dead",
        ReleaseOptions::default().receipt(d.receipt).error("boom"),
    )
    .await
    .unwrap();
    let active = pop("active").await;
    q.add(NewTask::new(T, "ready").body("ready")).await.unwrap();
    q.add(NewTask::new(T, "delayed").body("d").delay_ms(60_000))
        .await
        .unwrap();
    q.add(NewTask::new(T, "cancelled").delay_ms(5_000))
        .await
        .unwrap();
    q.cancel(T, "cancelled").await.unwrap();
    let before = all_tasks(&q, T).await;
    let states: Vec<State> = before.iter().map(|t| t.state).collect();
    for s in [
        State::Delayed,
        State::Ready,
        State::Active,
        State::Finished,
        State::Cancelled,
        State::Dead,
    ] {
        assert!(
            states.contains(&s),
            "{s} present before restart: {states:?}"
        );
    }
    q.shutdown().await.unwrap();
    drop(q);

    let q = open(&dir, &clock, |o| o).await;
    let after = all_tasks(&q, T).await;
    assert_eq!(after, before, "every record is back as it was");
    // The holder of the active task can still finish it with its receipt.
    q.finish(T, "active", Some(&active.receipt)).await.unwrap();
    let dead = q.get(T, "dead").await.unwrap();
    assert_eq!(dead.last_error.as_deref(), Some("boom"));
    q.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_that_passed_while_down_takes_effect_at_start() {
    let dir = scratch();
    let clock = ManualClock::new(START);
    let q = open(&dir, &clock, |o| o).await;
    q.add(NewTask::new(T, "due-while-down").delay_ms(10_000))
        .await
        .unwrap();
    q.add(NewTask::new(T, "not-yet").delay_ms(3_600_000))
        .await
        .unwrap();
    q.add(NewTask::new(T, "held").ttr_ms(5_000)).await.unwrap();
    let held = q
        .pop(T, PopOptions::default())
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(held.id, "held");
    q.add(NewTask::new(T, "retained")).await.unwrap();
    let r = q
        .pop(T, PopOptions::default())
        .await
        .unwrap()
        .pop()
        .unwrap();
    q.finish(T, "retained", Some(&r.receipt)).await.unwrap();
    q.shutdown().await.unwrap();
    drop(q);

    clock.advance(120_000); // down for two minutes
    let q = open(&dir, &clock, |o| o).await;
    eventually_state(&q, "due-while-down", State::Ready).await;
    eventually_state(&q, "held", State::Ready).await;
    assert_eq!(
        q.get(T, "held").await.unwrap().retries,
        1,
        "ttr expiry counted"
    );
    assert_eq!(
        q.get(T, "not-yet").await.unwrap().state,
        State::Delayed,
        "never early"
    );
    for _ in 0..5_000 {
        if q.get(T, "retained").await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(
        q.get(T, "retained").await.unwrap_err().kind(),
        ErrorKind::NotFound,
        "retention passed"
    );
    assert_eq!(
        q.finish(T, "held", Some(&held.receipt))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Conflict
    );
    q.shutdown().await.unwrap();
}

/// Bytes under `dir`; files the log removes while we look are skipped.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .map_while(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_keep_disk_bounded_under_churn() {
    let dir = scratch();
    let clock = ManualClock::new(START);
    let q = open(&dir, &clock, |o| {
        o.fsync(FsyncPolicy::Never)
            .snapshot_min_bytes(256 << 10)
            .segment_bytes(64 << 10)
    })
    .await;
    // A few long-lived tasks that every snapshot must carry.
    for i in 0..50 {
        q.add(NewTask::new(T, format!("keep-{i}")).delay_ms(3_600_000))
            .await
            .unwrap();
    }
    let mut peak = 0;
    for round in 0..40 {
        let batch: Vec<NewTask> = (0..500)
            .map(|i| NewTask::new(T, format!("c{round}-{i}")).body("x".repeat(100)))
            .collect();
        for r in q.add_batch(batch).await.unwrap() {
            r.unwrap();
        }
        loop {
            let got = q.pop(T, PopOptions::default().count(500)).await.unwrap();
            if got.is_empty() {
                break;
            }
            for d in got {
                q.finish(T, &d.id, Some(&d.receipt)).await.unwrap();
            }
        }
        clock.advance(61_000); // past retention: finished records go
        for _ in 0..5_000 {
            if q.stats(T).await.unwrap().finished == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        peak = peak.max(dir_bytes(&dir));
    }
    // 20 000 tasks went through (~15 MB of log); the directory stays near the threshold.
    let bound = 3 * (256 << 10) * 3 + (1 << 20);
    assert!(peak < bound, "peak {peak} bytes on disk, bound {bound}");
    q.shutdown().await.unwrap();
    drop(q);
    let q = open(&dir, &clock, |o| o).await;
    let stats = q.stats(T).await.unwrap();
    assert_eq!(
        (stats.delayed, stats.total),
        (50, 50),
        "only the live tasks come back"
    );
    q.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_cannot_open_the_same_directory() {
    let dir = scratch();
    let clock = ManualClock::new(START);
    let q = open(&dir, &clock, |o| o).await;
    let ctx = StorageContext::new(Arc::new(clock.clone()));
    let err = embedded::start(ctx, EmbeddedOptions::new(&dir))
        .await
        .err()
        .expect("second open fails");
    assert!(
        err.to_string().contains("in use by another delayq process"),
        "{err}"
    );
    assert!(
        err.to_string().contains(&dir.display().to_string()),
        "{err}"
    );
    q.shutdown().await.unwrap();
}

/// Writes `tasks` delayed tasks into a one-shard data directory, shuts it down, and returns
/// its (only) log segment.
async fn one_segment_with(dir: &Path, clock: &ManualClock, tasks: usize) -> PathBuf {
    let q = open(dir, clock, |o| o.shards(1)).await;
    for i in 0..tasks {
        q.add(NewTask::new(T, format!("t{i}")).delay_ms(1_000))
            .await
            .unwrap();
    }
    q.shutdown().await.unwrap();
    drop(q);
    std::fs::read_dir(dir.join("shard-0"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "seg"))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_in_the_middle_is_an_error_naming_file_and_offset() {
    let dir = scratch();
    let clock = ManualClock::new(START);
    let seg = one_segment_with(&dir, &clock, 20).await;
    let mut bytes = std::fs::read(&seg).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&seg, &bytes).unwrap();
    let ctx = StorageContext::new(Arc::new(clock.clone()));
    let err = embedded::start(ctx, EmbeddedOptions::new(&dir))
        .await
        .err()
        .expect("damage is an error");
    let text = err.to_string();
    assert!(
        text.contains(&seg.display().to_string()),
        "names the file: {text}"
    );
    assert!(text.contains("offset"), "names the offset: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_tail_is_cut_and_the_rest_recovered() {
    let dir = scratch();
    let clock = ManualClock::new(START);
    let seg = one_segment_with(&dir, &clock, 10).await;
    let len = std::fs::metadata(&seg).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(len - 5)
        .unwrap();
    let ctx = StorageContext::new(Arc::new(clock.clone()));
    let (storage, summary) = embedded::start(ctx.clone(), EmbeddedOptions::new(&dir))
        .await
        .unwrap();
    assert_eq!(summary.torn_tails.len(), 1, "{summary:?}");
    let q = Queue::new(storage, ctx);
    let stats = q.stats(T).await.unwrap();
    assert_eq!(
        stats.total, 9,
        "the last, torn add is gone, the rest is there"
    );
    q.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finish_batch_answers_each_task_and_what_it_finished_survives_a_restart() {
    let dir = scratch();
    let clock = ManualClock::new(START);
    let q = open(&dir, &clock, |o| o).await;
    // Topics over several shards, each with one held task.
    let topics = ["t-a", "t-b", "t-c", "t-d"];
    let mut held = Vec::new();
    for topic in topics {
        q.add(NewTask::new(topic, "x")).await.unwrap();
        let d = q.pop(topic, PopOptions::default()).await.unwrap().pop();
        held.push(d.expect("ready at once"));
    }
    let (a, b, d) = (&held[0], &held[1], &held[3]);
    let results = q
        .finish_batch(&[
            ("t-a", "x", Some(&a.receipt)),
            ("t-b", "x", Some("stale")),
            ("t-c", "x", None),
            ("t-a", "nope", None),
            ("bad topic!", "x", None),
            ("t-d", "x", Some(&d.receipt)),
        ])
        .await
        .expect("a batch within the limit");
    let kinds: Vec<Option<ErrorKind>> = results
        .iter()
        .map(|r| r.as_ref().err().map(|e| e.kind()))
        .collect();
    assert_eq!(
        kinds,
        [
            None,
            Some(ErrorKind::Conflict),
            None,
            Some(ErrorKind::NotFound),
            Some(ErrorKind::Invalid),
            None
        ]
    );
    match &results[4] {
        Err(delayq::Error::Invalid(f)) => assert_eq!(f.field, "topic"),
        other => panic!("an invalid topic is named: {other:?}"),
    }
    q.shutdown().await.unwrap();
    drop(q);

    // Each finish was acknowledged durably (fsync always): a restart shows the same states.
    let q = open(&dir, &clock, |o| o).await;
    for (topic, state) in [
        ("t-a", State::Finished),
        ("t-b", State::Active),
        ("t-c", State::Finished),
        ("t-d", State::Finished),
    ] {
        assert_eq!(q.get(topic, "x").await.unwrap().state, state, "{topic}");
    }
    // The stale receipt did not touch the holder's attempt.
    q.finish("t-b", "x", Some(&b.receipt)).await.unwrap();

    // Over the batch limit the whole call fails, naming the limit.
    let max = q.context().limits.max_batch;
    let many = vec![("t-a", "x", None); max + 1];
    let err = q.finish_batch(&many).await.expect_err("over max_batch");
    assert_eq!(err.kind(), ErrorKind::TooLarge);
    assert!(err.to_string().contains(&max.to_string()), "{err}");
    q.shutdown().await.unwrap();
}

/// Ack and take the next is one step and one durable write when the held task and the popped
/// topic share a shard, two steps when they do not: either way the finish and the new attempt
/// are both there after a restart, and a refused finish pops nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_and_take_the_next_survives_a_restart_within_a_shard_and_across() {
    let dir = scratch();
    let clock = ManualClock::new(START);
    let q = open(&dir, &clock, |o| o).await;
    // Four topics over three shards: t-a, t-b and t-d share one, t-c is on another (the
    // hash is fixed by the format; `shard_of_is_stable_and_in_range` holds these four), so
    // the walk below takes both paths. `embedded_faults` tells the two steps apart.
    let topics = ["t-a", "t-b", "t-c", "t-d"];
    for topic in topics {
        for id in ["1", "2"] {
            q.add(NewTask::new(topic, id)).await.unwrap();
        }
    }
    let now = PopOptions::default().timeout_ms(0);
    let mut held = q.pop("t-a", now).await.unwrap().pop().expect("ready");
    let mut finished = Vec::new();
    // t-a then t-a again (one topic), then t-b, t-c and t-d.
    for topic in ["t-a", "t-b", "t-c", "t-d"] {
        let done = Held {
            topic: &held.topic,
            id: &held.id,
            receipt: Some(&held.receipt),
        };
        let mut next = q
            .finish_then_pop(done, topic, now)
            .await
            .expect("the finish")
            .expect("the pop");
        finished.push((held.topic.clone(), held.id.clone()));
        assert_eq!(next.len(), 1, "{topic}");
        held = next.pop().unwrap();
        assert_eq!(held.topic, topic);
    }
    // A stale receipt: refused, and nothing of t-d is popped.
    let stale = Held {
        topic: &held.topic,
        id: &held.id,
        receipt: Some("stale"),
    };
    let refused = q
        .finish_then_pop(stale, "t-d", now)
        .await
        .expect_err("stale");
    assert_eq!(refused.kind(), ErrorKind::Conflict, "{refused}");
    q.shutdown().await.unwrap();
    drop(q);

    let q = open(&dir, &clock, |o| o).await;
    for (topic, id) in &finished {
        assert_eq!(
            q.get(topic, id).await.unwrap().state,
            State::Finished,
            "{topic}/{id}"
        );
    }
    let active = q.get(&held.topic, &held.id).await.unwrap();
    assert_eq!(active.state, State::Active, "the last one taken");
    let ready: Vec<(String, String)> = [("t-b", "2"), ("t-c", "2"), ("t-d", "2")]
        .iter()
        .filter(|(t, i)| (*t, *i) != (held.topic.as_str(), held.id.as_str()))
        .map(|(t, i)| (t.to_string(), i.to_string()))
        .collect();
    for (topic, id) in &ready {
        assert_eq!(
            q.get(topic, id).await.unwrap().state,
            State::Ready,
            "{topic}/{id}"
        );
    }
    // The attempt that was handed out is the one that survived: its receipt finishes it.
    q.finish(&held.topic, &held.id, Some(&held.receipt))
        .await
        .unwrap();
    q.shutdown().await.unwrap();
}

/// A snapshot reads a shard's records a piece at a time while requests go on between the
/// pieces (docs/storage.md): whatever changed meanwhile, a restart from that snapshot and
/// the log after it brings back every task exactly as it stood at the shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_taken_while_tasks_change_restores_their_final_state() {
    const TASKS: usize = 100_000;
    let dir = scratch();
    let clock = ManualClock::new(START);
    let start = |dir: PathBuf, clock: ManualClock| async move {
        let ctx = StorageContext::new(Arc::new(clock));
        let options = EmbeddedOptions::new(dir)
            .fsync(FsyncPolicy::Never)
            .shards(1);
        let (storage, summary) = embedded::start(ctx.clone(), options).await.expect("start");
        (Queue::new(storage.clone(), ctx), storage, summary)
    };
    let (q, storage, _) = start(dir.clone(), clock.clone()).await;
    for chunk in 0..TASKS / 1000 {
        let tasks = (chunk * 1000..(chunk + 1) * 1000)
            .map(|i| {
                let task = NewTask::new(T, format!("t-{i:06}")).body(format!("b{i}"));
                // Every third is delayed, the rest ready.
                if i % 3 == 0 {
                    task.delay_ms(60_000)
                } else {
                    task
                }
            })
            .collect();
        for r in q.add_batch(tasks).await.unwrap() {
            r.unwrap();
        }
    }

    // Change tasks all over the shard (early slots, late slots, new ones that may take freed
    // slots) until the snapshot is written.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let changer = {
        let (q, done) = (q.clone(), Arc::clone(&done));
        tokio::spawn(async move {
            let mut changes = 0u64;
            let mut i = 0usize;
            while !done.load(std::sync::atomic::Ordering::Acquire) || changes < 200 {
                // Spread over the whole range: 7919 is prime, so the steps visit every id.
                let id = format!("t-{:06}", (i * 7919) % TASKS);
                match i % 5 {
                    0 => drop(q.cancel(T, &id).await),
                    1 => drop(q.delete(T, &id).await),
                    2 => {
                        let popped = q.pop(T, PopOptions::default()).await.unwrap();
                        if let Some(d) = popped.first() {
                            q.finish(T, &d.id, Some(&d.receipt)).await.unwrap();
                        }
                    }
                    3 => drop(q.pop(T, PopOptions::default()).await.unwrap()),
                    _ => {
                        q.add(NewTask::new(T, format!("new-{i:06}")).body("n"))
                            .await
                            .unwrap();
                    }
                }
                changes += 1;
                i += 1;
            }
            changes
        })
    };
    let during = {
        let storage = Arc::clone(&storage);
        tokio::spawn(async move { embedded::snapshot_shard(&storage, 0, true).await })
    };
    assert!(
        during.await.unwrap().unwrap(),
        "a forced snapshot is written"
    );
    done.store(true, std::sync::atomic::Ordering::Release);
    let changes = changer.await.unwrap();

    let listing = |q: Queue| async move {
        let mut all = Vec::new();
        for page in 1.. {
            let items = q.list(T, None, page, 1000).await.unwrap().items;
            if items.is_empty() {
                return all;
            }
            all.extend(items);
        }
        unreachable!()
    };
    let before = listing(q.clone()).await;
    q.shutdown().await.unwrap();
    drop((q, storage));

    let (q, _storage, summary) = start(dir, clock).await;
    assert!(summary.snapshot_records > 0, "{summary:?}");
    assert!(
        summary.log_records > 0,
        "the changes after the snapshot's position: {summary:?}"
    );
    let after = listing(q.clone()).await;
    assert_eq!(
        after.len(),
        before.len(),
        "{changes} changes ran beside the snapshot"
    );
    for (a, b) in after.iter().zip(&before) {
        assert_eq!(a, b, "{changes} changes ran beside the snapshot");
    }
    q.shutdown().await.unwrap();
}
