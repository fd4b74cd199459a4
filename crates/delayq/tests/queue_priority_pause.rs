//! Rules 11–15 through the library's [`Queue`], on the in-memory and the embedded backend:
//! one pop order across topics of several shards, long-polls over several topics, paused
//! topics whose long-polls wake when the pause ends or on resume, callback workers that
//! respect a pause, and what survives a restart (priorities, buried tasks, pauses, job ids,
//! meta). The clock is a [`ManualClock`]: time moves only when a test says so.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use delayq::storage::embedded::{self, EmbeddedOptions};
use delayq::storage::memory;
use tokio::task::JoinHandle;

use delayq::{
    BuryOptions, Delivery, ManualClock, NewTask, PopOptions, Queue, State, StorageContext,
    WorkerOptions,
};
use delayq_log::FsyncPolicy;

const START: u64 = 1_800_000_000_000;
/// How long a test waits for something that must happen (generous: the machine is shared).
const PATIENCE: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, Debug)]
enum Backend {
    Memory,
    Embedded,
}

const BACKENDS: [Backend; 2] = [Backend::Memory, Backend::Embedded];

async fn open_at(backend: Backend, clock: &ManualClock, dir: &Path) -> Queue {
    let ctx = StorageContext::new(Arc::new(clock.clone()));
    match backend {
        Backend::Memory => Queue::new(memory::start(ctx.clone(), 8), ctx),
        Backend::Embedded => {
            let options = EmbeddedOptions::new(dir)
                .fsync(FsyncPolicy::Always)
                .shards(8);
            let (storage, _) = embedded::start(ctx.clone(), options).await.expect("start");
            Queue::new(storage, ctx)
        }
    }
}

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("rules-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

/// A queue on `backend` at [`START`], with its data directory (kept while the test holds it).
async fn fresh(backend: Backend) -> (tempfile::TempDir, ManualClock, Queue) {
    let dir = scratch();
    let clock = ManualClock::new(START);
    let q = open_at(backend, &clock, dir.path()).await;
    (dir, clock, q)
}

fn topics(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| (*s).to_owned()).collect()
}

/// A consumer long-polling over `names` for up to `count` tasks, in the background.
fn park(q: &Queue, names: &[&str], count: usize) -> JoinHandle<delayq::Result<Vec<Delivery>>> {
    let q = q.clone();
    let names = topics(names);
    tokio::spawn(async move {
        q.pop_any(
            &names,
            PopOptions::default().count(count).timeout_ms(60_000),
        )
        .await
    })
}

/// What a parked consumer got, once something woke it (`what` says what should have).
async fn woken(consumer: JoinHandle<delayq::Result<Vec<Delivery>>>, what: &str) -> Vec<Delivery> {
    tokio::time::timeout(PATIENCE, consumer)
        .await
        .unwrap_or_else(|_| panic!("not woken: {what}"))
        .unwrap()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pop_any_keeps_one_order_across_topics_of_several_shards() {
    for backend in BACKENDS {
        let (_dir, _clock, q) = fresh(backend).await;
        // Eight topics spread over eight shards; priorities and insertion interleaved.
        let names: Vec<String> = (0..8).map(|i| format!("watch-{i}")).collect();
        let mut want = Vec::new();
        for round in 0..3u32 {
            for (i, topic) in names.iter().enumerate() {
                let priority = (i as u32 + round) % 3;
                let id = format!("{topic}-r{round}");
                q.add(NewTask::new(topic, &id).priority(priority))
                    .await
                    .unwrap();
                want.push((priority, want.len(), id));
            }
        }
        // One task due earlier than all, with the worst priority: priority comes first.
        q.add(NewTask::new(&names[0], "late-but-low").priority(9))
            .await
            .unwrap();
        want.sort();
        let mut want: Vec<String> = want.into_iter().map(|(_, _, id)| id).collect();
        want.push("late-but-low".to_owned());

        // A topic named twice and a topic with nothing change nothing.
        let mut watch = names.clone();
        watch.push(names[3].clone());
        watch.push("empty".to_owned());
        let mut got = Vec::new();
        while got.len() < want.len() {
            let batch = q
                .pop_any(&watch, PopOptions::default().count(5))
                .await
                .unwrap();
            assert!(!batch.is_empty(), "{backend:?}: ran dry at {got:?}");
            got.extend(batch.into_iter().map(|d| d.id));
        }
        assert_eq!(got, want, "{backend:?}");
        q.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_over_several_topics_wakes_on_any_of_them() {
    for backend in BACKENDS {
        let (_dir, clock, q) = fresh(backend).await;
        let waiting = park(&q, &["alpha", "beta", "gamma"], 1);
        // Let it park, then make a task ready on one of its topics.
        tokio::time::sleep(Duration::from_millis(50)).await;
        q.add(NewTask::new("gamma", "g1").delay_ms(1_000))
            .await
            .unwrap();
        clock.advance(1_000);
        let got = woken(waiting, "woken by gamma").await;
        assert_eq!(got.len(), 1, "{backend:?}");
        assert_eq!((got[0].topic.as_str(), got[0].id.as_str()), ("gamma", "g1"));
        q.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_taken_for_another_topic_is_handed_on() {
    // C1 watches a and b, C2 only a. One add makes a task ready on each; whichever topic's
    // wake-up reaches C1, both consumers end up with a task: none is stranded.
    for backend in BACKENDS {
        let (_dir, _clock, q) = fresh(backend).await;
        let c1 = park(&q, &["a", "b"], 1);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let c2 = park(&q, &["a"], 1);
        tokio::time::sleep(Duration::from_millis(50)).await;
        q.add_batch(vec![
            NewTask::new("a", "task-a").priority(5),
            NewTask::new("b", "task-b").priority(0),
        ])
        .await
        .unwrap();
        let mut ids = Vec::new();
        for c in [c1, c2] {
            let got = woken(c, "a consumer was stranded").await;
            ids.extend(got.into_iter().map(|d| d.id));
        }
        ids.sort();
        assert_eq!(ids, ["task-a", "task-b"], "{backend:?}");
        q.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_topic_holds_its_tasks_and_its_long_poll_wakes_when_the_pause_ends() {
    for backend in BACKENDS {
        let (_dir, clock, q) = fresh(backend).await;
        q.pause("held", Some(5_000)).await.unwrap();
        // Adds are taken and due tasks are promoted, but nothing is handed out.
        q.add(NewTask::new("held", "now")).await.unwrap();
        q.add(NewTask::new("held", "soon").delay_ms(1_000))
            .await
            .unwrap();
        clock.advance(1_000);
        let mut ready = 0;
        for _ in 0..1_000 {
            ready = q.stats("held").await.unwrap().ready;
            if ready == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert_eq!(ready, 2, "{backend:?}: due tasks are promoted while paused");
        let stats = q.stats("held").await.unwrap();
        assert!(stats.pause.paused);
        assert_eq!(stats.pause.until_ms, Some(START + 5_000));
        assert!(
            q.pop("held", PopOptions::default())
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            q.pop_any(&topics(&["held", "other"]), PopOptions::default())
                .await
                .unwrap()
                .is_empty()
        );
        let waiting = park(&q, &["held"], 2);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !waiting.is_finished(),
            "{backend:?}: a paused topic hands nothing out"
        );
        clock.advance(4_000);
        let got = woken(waiting, "woken when the pause ended").await;
        let ids: Vec<&str> = got.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, ["now", "soon"], "{backend:?}");
        assert!(!q.stats("held").await.unwrap().pause.paused);
        q.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_wakes_a_long_poll_and_an_empty_topic_shows_its_pause() {
    for backend in BACKENDS {
        let (_dir, _clock, q) = fresh(backend).await;
        q.pause("empty", None).await.unwrap();
        let listed = q.topics().await.unwrap();
        let (_, stats) = listed
            .iter()
            .find(|(name, _)| name == "empty")
            .expect("a paused topic without tasks is listed");
        assert_eq!((stats.total, stats.pause.paused), (0, true));
        q.resume("empty").await.unwrap();
        assert!(q.topics().await.unwrap().iter().all(|(n, _)| n != "empty"));

        q.pause("forever", None).await.unwrap();
        q.add(NewTask::new("forever", "t")).await.unwrap();
        let waiting = park(&q, &["forever", "idle"], 1);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "{backend:?}: paused until resumed");
        q.resume("forever").await.unwrap();
        let got = woken(waiting, "woken by resume").await;
        assert_eq!(got[0].id, "t", "{backend:?}");
        q.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callback_workers_respect_a_pause() {
    for backend in BACKENDS {
        let (_dir, _clock, q) = fresh(backend).await;
        q.pause("jobs", None).await.unwrap();
        let handled = Arc::new(AtomicUsize::new(0));
        let workers = {
            let handled = Arc::clone(&handled);
            q.on_expire("jobs", WorkerOptions::default(), move |_| {
                let handled = Arc::clone(&handled);
                async move {
                    handled.fetch_add(1, Ordering::SeqCst);
                    Ok::<(), String>(())
                }
            })
            .unwrap()
        };
        q.add(NewTask::new("jobs", "j1")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(handled.load(Ordering::SeqCst), 0, "{backend:?}: paused");
        q.resume("jobs").await.unwrap();
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while handled.load(Ordering::SeqCst) == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{backend:?}: never handled"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        workers.shutdown().await;
        q.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bury_kick_reschedule_and_peek() {
    for backend in BACKENDS {
        let (_dir, clock, q) = fresh(backend).await;
        for id in ["x1", "x2", "x3"] {
            q.add(NewTask::new("k", id)).await.unwrap();
        }
        q.add(NewTask::new("k", "later").delay_ms(60_000))
            .await
            .unwrap();
        // Bury x1 then x2 (x2 with a new priority and a reason).
        for (id, step) in [("x1", 0), ("x2", 1)] {
            clock.advance(10 * step);
            let d = q.pop_one("k", 0).await.unwrap().unwrap();
            assert_eq!(d.id, id);
            let mut options = BuryOptions::default().receipt(d.receipt.clone());
            if id == "x2" {
                options.priority = Some(3);
                options.error = Some("bad input".into());
            }
            q.bury("k", id, options).await.unwrap();
            // A stale receipt cannot bury it again.
            let again = q
                .bury("k", id, BuryOptions::default().receipt(d.receipt))
                .await
                .unwrap_err();
            assert_eq!(again.kind(), delayq::ErrorKind::Conflict);
        }
        let x2 = q.get("k", "x2").await.unwrap();
        assert_eq!(
            (x2.state, x2.priority, x2.last_error.as_deref()),
            (State::Dead, 3, Some("bad input"))
        );
        let x1 = q.get("k", "x1").await.unwrap();
        assert_eq!(x1.last_error.as_deref(), Some("buried"));
        assert_eq!(q.peek("k", State::Dead).await.unwrap().unwrap().id, "x1");
        assert_eq!(q.peek("k", State::Ready).await.unwrap().unwrap().id, "x3");
        assert_eq!(
            q.peek("k", State::Delayed).await.unwrap().unwrap().id,
            "later"
        );
        assert!(q.peek("nothing", State::Ready).await.unwrap().is_none());
        // kick 1 takes the oldest buried; kick 5 the other; then DELAYED ones move.
        assert_eq!(q.kick("k", 1).await.unwrap(), 1);
        assert_eq!(q.get("k", "x1").await.unwrap().state, State::Ready);
        assert_eq!(q.kick("k", 5).await.unwrap(), 1);
        assert_eq!(q.kick("k", 5).await.unwrap(), 1);
        let later = q.get("k", "later").await.unwrap();
        assert_eq!(
            (later.state, later.due_ms),
            (State::Ready, clock_now(&clock))
        );
        assert_eq!(q.kick("k", 5).await.unwrap(), 0);
        // Reschedule: READY → DELAYED and back; ACTIVE is refused.
        let state = q
            .reschedule("k", "x3", delayq::When::Delay(30_000))
            .await
            .unwrap();
        assert_eq!(state, State::Delayed);
        q.kick_job("k", "x3").await.unwrap();
        assert_eq!(q.get("k", "x3").await.unwrap().state, State::Ready);
        let d = q.pop_one("k", 0).await.unwrap().unwrap();
        let refused = q
            .reschedule("k", &d.id, delayq::When::Delay(0))
            .await
            .unwrap_err();
        assert_eq!(refused.kind(), delayq::ErrorKind::Conflict);
        assert_eq!(q.locate("x3").await.unwrap(), ["k"]);
        q.add(NewTask::new("a-first", "x3")).await.unwrap();
        assert_eq!(q.locate("x3").await.unwrap(), ["a-first", "k"]);
        assert!(q.locate("nobody").await.unwrap().is_empty());
        q.shutdown().await.unwrap();
    }
}

fn clock_now(clock: &ManualClock) -> u64 {
    use delayq::Clock;
    clock.now_ms()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priorities_buries_pauses_job_ids_and_meta_survive_a_restart() {
    let dir = scratch();
    let clock = ManualClock::new(START);
    let q = open_at(Backend::Embedded, &clock, dir.path()).await;
    assert_eq!(
        q.next_job_id().await.unwrap(),
        1,
        "a fresh directory starts at 1"
    );
    assert_eq!(q.next_job_id().await.unwrap(), 2);
    for (id, priority) in [("low", 50), ("high", 1), ("mid", 10), ("high-2", 1)] {
        q.add(NewTask::new("r", id).priority(priority))
            .await
            .unwrap();
    }
    q.add(NewTask::new("r", "gone")).await.unwrap();
    let d = q.pop_one("r", 0).await.unwrap().unwrap();
    assert_eq!(d.id, "high");
    q.bury("r", "high", BuryOptions::default().priority(0))
        .await
        .unwrap();
    q.pause("p", Some(10_000)).await.unwrap();
    q.pause("p-forever", None).await.unwrap();
    q.pause("resumed", None).await.unwrap();
    q.resume("resumed").await.unwrap();
    q.add(NewTask::new("p", "held")).await.unwrap();
    let settings = Arc::clone(q.settings());
    settings.put("ns", "k1", vec![1, 2, 3]).await.unwrap();
    settings.put("ns", "k2", b"two".to_vec()).await.unwrap();
    settings.put("other", "k1", vec![9]).await.unwrap();
    assert!(settings.delete("ns", "k2").await.unwrap());
    assert!(!settings.delete("ns", "k2").await.unwrap());
    q.shutdown().await.unwrap();
    drop((q, settings));

    let q = open_at(Backend::Embedded, &clock, dir.path()).await;
    let high = q.get("r", "high").await.unwrap();
    assert_eq!((high.state, high.priority), (State::Dead, 0));
    let order: Vec<String> = q
        .pop("r", PopOptions::default().count(10))
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(order, ["high-2", "mid", "low", "gone"]);
    let p = q.stats("p").await.unwrap().pause;
    assert_eq!((p.paused, p.until_ms), (true, Some(START + 10_000)));
    assert!(q.stats("p-forever").await.unwrap().pause.paused);
    assert!(!q.stats("resumed").await.unwrap().pause.paused);
    assert!(q.pop("p", PopOptions::default()).await.unwrap().is_empty());
    // A long-poll on a pause restored from disk wakes when it ends.
    let waiting = park(&q, &["p"], 1);
    tokio::time::sleep(Duration::from_millis(50)).await;
    clock.advance(10_000);
    let got = woken(waiting, "woken at the end of a restored pause").await;
    assert_eq!(got[0].id, "held");
    let id = q.next_job_id().await.unwrap();
    assert!(id > 2, "job ids never repeat after a restart: {id}");
    let settings = q.settings();
    assert_eq!(
        settings.list("ns").await.unwrap(),
        [("k1".to_owned(), vec![1, 2, 3])]
    );
    assert_eq!(
        settings.list("other").await.unwrap(),
        [("k1".to_owned(), vec![9])]
    );
    assert!(settings.list("none").await.unwrap().is_empty());
    q.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pops_over_several_shards_hand_each_task_out_once() {
    for backend in BACKENDS {
        let (_dir, _clock, q) = fresh(backend).await;
        let names: Vec<String> = (0..6).map(|i| format!("many-{i}")).collect();
        let per_topic = 150;
        let mut all = std::collections::BTreeSet::new();
        for topic in &names {
            let tasks: Vec<NewTask> = (0..per_topic)
                .map(|i| {
                    let id = format!("{topic}-{i}");
                    all.insert((topic.clone(), id.clone()));
                    NewTask::new(topic, id).priority(i % 4)
                })
                .collect();
            for r in q.add_batch(tasks).await.unwrap() {
                r.unwrap();
            }
        }
        // Four consumers over every topic and two over one topic each, all at once.
        let mut consumers = Vec::new();
        for c in 0..6 {
            let q = q.clone();
            let watch = if c < 4 {
                names.clone()
            } else {
                vec![names[c].clone()]
            };
            consumers.push(tokio::spawn(async move {
                let mut got = Vec::new();
                loop {
                    let batch = q
                        .pop_any(&watch, PopOptions::default().count(1 + c % 3))
                        .await
                        .unwrap();
                    if batch.is_empty() {
                        return got;
                    }
                    got.extend(batch.into_iter().map(|d| (d.topic, d.id)));
                }
            }));
        }
        let mut seen = std::collections::BTreeSet::new();
        for c in consumers {
            for task in c.await.unwrap() {
                assert!(
                    seen.insert(task.clone()),
                    "{backend:?}: {task:?} handed out twice"
                );
            }
        }
        assert_eq!(seen, all, "{backend:?}: every task handed out");
        q.shutdown().await.unwrap();
    }
}
