//! The backend's operations against a real redis-server, on a manual clock: the rules of
//! docs/design.md §2 that need Redis-specific care (lazy promotion, retention by the queue's clock,
//! partitions, the registry). The shared conformance suite covers the rest.

mod support;

use std::time::Duration;

use delayq::{
    AddOutcome, Backoff, Clock, ErrorKind, ManualClock, MaxRetries, NewTask, PopOptions,
    ReleaseOptions, State,
};
use support::{Instance, RedisServer, eventually};

const T0: u64 = 1_800_000_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_pop_finish_round_trip() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let i = Instance::manual(&server, &clock).await;
    let q = &i.queue;
    assert_eq!(
        q.add(NewTask::new("orders", "o-1").body("hello"))
            .await
            .unwrap(),
        AddOutcome::Added
    );
    let d = q.pop_one("orders", 0).await.unwrap().expect("a ready task");
    assert_eq!(
        (d.id.as_str(), d.body_text().unwrap(), d.retries),
        ("o-1", "hello", 0)
    );
    assert_eq!(d.receipt.len(), 16);
    let info = q.get("orders", "o-1").await.unwrap();
    assert_eq!(info.state, State::Active);
    assert_eq!(info.deadline_ms, Some(T0 + 30_000));
    q.finish("orders", "o-1", Some(&d.receipt)).await.unwrap();
    let info = q.get("orders", "o-1").await.unwrap();
    assert_eq!(info.state, State::Finished);
    let stats = q.stats("orders").await.unwrap();
    assert_eq!((stats.finished, stats.active, stats.total), (1, 0, 1));
    let err = q.finish("orders", "o-1", None).await.unwrap_err();
    assert_eq!(err.conflicting_state(), Some(State::Finished));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_early_and_due_at_once() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let i = Instance::manual(&server, &clock).await;
    let q = &i.queue;
    q.add(NewTask::new("t", "a").delay_ms(1_000)).await.unwrap();
    assert!(q.pop_one("t", 0).await.unwrap().is_none());
    clock.advance(999);
    assert!(q.pop_one("t", 0).await.unwrap().is_none());
    assert_eq!(q.get("t", "a").await.unwrap().state, State::Delayed);
    clock.advance(1);
    // The promoter makes it READY on its own, without a pop.
    assert!(
        eventually(Duration::from_secs(5), || async {
            q.get("t", "a").await.unwrap().state == State::Ready
        })
        .await
    );
    assert_eq!(q.pop_one("t", 0).await.unwrap().unwrap().id, "a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pop_returns_earliest_due_first_across_partitions() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let i = Instance::manual(&server, &clock).await;
    let q = &i.queue;
    let tasks: Vec<NewTask> = (0..40)
        .map(|n| NewTask::new("t", format!("task-{n}")).run_at_ms(T0 + 1_000 - n * 10))
        .collect();
    for r in q.add_batch(tasks).await.unwrap() {
        assert_eq!(r.unwrap(), AddOutcome::Added);
    }
    clock.advance(1_000);
    let got = q.pop("t", PopOptions::default().count(40)).await.unwrap();
    let dues: Vec<u64> = got.iter().map(|d| d.due_ms).collect();
    let mut sorted = dues.clone();
    sorted.sort();
    assert_eq!(dues, sorted);
    assert_eq!(got.len(), 40);
    // Singles, too.
    let q2 = (0..5).map(|n| NewTask::new("u", format!("x{n}")).run_at_ms(T0 + 2_000 - n));
    q.add_batch(q2.collect()).await.unwrap();
    clock.advance(1_000);
    let mut order = Vec::new();
    while let Some(d) = q.pop_one("u", 0).await.unwrap() {
        order.push(d.id);
    }
    assert_eq!(order, ["x4", "x3", "x2", "x1", "x0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_follows_backoff_then_dead_then_requeue() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let i = Instance::manual(&server, &clock).await;
    let q = &i.queue;
    q.add(
        NewTask::new("pay", "p-1")
            .max_retries(MaxRetries::Limited(2))
            .backoff(Backoff::Schedule {
                ms: vec![100, 1_000],
            }),
    )
    .await
    .unwrap();
    let d = q.pop_one("pay", 0).await.unwrap().unwrap();
    clock.advance(5);
    let state = q
        .release(
            "pay",
            "p-1",
            ReleaseOptions::default().receipt(&d.receipt).error("boom"),
        )
        .await
        .unwrap();
    assert_eq!(state, State::Delayed);
    let info = q.get("pay", "p-1").await.unwrap();
    assert_eq!((info.retries, info.due_ms), (1, T0 + 105));
    assert_eq!(info.last_error.as_deref(), Some("boom"));
    assert_eq!(info.history.len(), 1);
    assert_eq!(info.history[0].started_at_ms, T0);
    assert_eq!(info.history[0].ended_at_ms, T0 + 5);
    assert_eq!(info.history[0].outcome, "released");
    // The old receipt is stale once the task is redelivered.
    clock.advance(100);
    let d2 = q.pop_one("pay", 0).await.unwrap().unwrap();
    assert_eq!(d2.retries, 1);
    let err = q.finish("pay", "p-1", Some(&d.receipt)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(
        err.conflicting_state(),
        None,
        "stale receipt, not wrong state"
    );
    // An explicit delay wins over the backoff.
    let state = q
        .release("pay", "p-1", ReleaseOptions::default().delay_ms(0))
        .await
        .unwrap();
    assert_eq!(state, State::Ready);
    let info = q.get("pay", "p-1").await.unwrap();
    assert_eq!((info.retries, info.due_ms), (2, T0 + 105), "keeps its due");
    q.pop_one("pay", 0).await.unwrap().unwrap();
    let state = q
        .release("pay", "p-1", ReleaseOptions::default().error("again"))
        .await
        .unwrap();
    assert_eq!(state, State::Dead);
    let info = q.get("pay", "p-1").await.unwrap();
    assert_eq!(
        (info.state, info.retries),
        (State::Dead, 2),
        "DEAD keeps retries"
    );
    assert_eq!(info.history.len(), 3);
    assert_eq!(q.stats("pay").await.unwrap().dead, 1);
    q.requeue("pay", "p-1").await.unwrap();
    let info = q.get("pay", "p-1").await.unwrap();
    assert_eq!((info.state, info.retries), (State::Ready, 0));
    let err = q.requeue("pay", "p-1").await.unwrap_err();
    assert_eq!(err.conflicting_state(), Some(State::Ready));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttr_expiry_redelivers_with_history() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let i = Instance::manual(&server, &clock).await;
    let q = &i.queue;
    q.add(
        NewTask::new("t", "a")
            .ttr_ms(1_000)
            .max_retries(MaxRetries::Limited(1)),
    )
    .await
    .unwrap();
    let d = q.pop_one("t", 0).await.unwrap().unwrap();
    clock.advance(500);
    let deadline = q.touch("t", "a", Some(&d.receipt)).await.unwrap();
    assert_eq!(deadline, T0 + 1_500);
    clock.advance(999);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(q.get("t", "a").await.unwrap().state, State::Active);
    clock.advance(1);
    assert!(
        eventually(Duration::from_secs(5), || async {
            q.get("t", "a").await.unwrap().state == State::Ready
        })
        .await
    );
    let info = q.get("t", "a").await.unwrap();
    assert_eq!(info.retries, 1);
    assert_eq!(info.history[0].outcome, "ttr_expired");
    assert_eq!(info.history[0].ended_at_ms, T0 + 1_500);
    assert_eq!(i.queue.context().metrics.snapshot().ttr_expired, 1);
    // The second expiry exhausts max_retries = 1: DEAD.
    q.pop_one("t", 0).await.unwrap().unwrap();
    clock.advance(1_000);
    assert!(
        eventually(Duration::from_secs(5), || async {
            q.get("t", "a").await.unwrap().state == State::Dead
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_follow_the_policy() {
    use delayq::OnDuplicate;
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let i = Instance::manual(&server, &clock).await;
    let q = &i.queue;
    q.add(NewTask::new("t", "a").body("one").delay_ms(10))
        .await
        .unwrap();
    let err = q.add(NewTask::new("t", "a")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Duplicate);
    let kept = q
        .add(
            NewTask::new("t", "a")
                .body("two")
                .on_duplicate(OnDuplicate::Keep),
        )
        .await
        .unwrap();
    assert_eq!(kept, AddOutcome::Existed);
    assert_eq!(q.get("t", "a").await.unwrap().body, b"one");
    let replaced = q
        .add(
            NewTask::new("t", "a")
                .body("three")
                .delay_ms(500)
                .on_duplicate(OnDuplicate::Replace),
        )
        .await
        .unwrap();
    assert_eq!(replaced, AddOutcome::Replaced);
    let info = q.get("t", "a").await.unwrap();
    assert_eq!(
        (info.body_text().unwrap(), info.due_ms),
        ("three", T0 + 500)
    );
    assert_eq!(q.stats("t").await.unwrap().total, 1);
    // In one batch, the second of two equal ids is the duplicate.
    let results = q
        .add_batch(vec![NewTask::new("t", "b"), NewTask::new("t", "b")])
        .await
        .unwrap();
    assert!(results[0].is_ok());
    assert_eq!(
        results[1].as_ref().unwrap_err().kind(),
        ErrorKind::Duplicate
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_ends_by_the_queue_clock() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let i = Instance::manual(&server, &clock).await;
    let q = &i.queue;
    q.add(NewTask::new("t", "a")).await.unwrap();
    q.add(NewTask::new("t", "b").delay_ms(10)).await.unwrap();
    q.pop_one("t", 0).await.unwrap().unwrap();
    q.finish("t", "a", None).await.unwrap();
    q.cancel("t", "b").await.unwrap();
    let stats = q.stats("t").await.unwrap();
    assert_eq!((stats.finished, stats.cancelled), (1, 1));
    clock.advance(59_999);
    assert_eq!(
        q.get("t", "a").await.unwrap().deadline_ms,
        Some(T0 + 60_000)
    );
    clock.advance(1);
    // Gone exactly at the end of the retention, whatever the promoter did yet.
    assert_eq!(
        q.get("t", "a").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(q.stats("t").await.unwrap().total, 0);
    assert!(
        eventually(Duration::from_secs(5), || async {
            let keys = server.command("DBSIZE").unwrap();
            // Left: the registry, lease keys, fences and empty sets are deleted by Redis.
            !keys.is_empty() && q.topics().await.unwrap().is_empty()
        })
        .await
    );
    // Re-adding the same id after retention is a new task.
    assert_eq!(
        q.add(NewTask::new("t", "a")).await.unwrap(),
        AddOutcome::Added
    );
}

/// The promoter drops records whose retention passed in batches (tick.lua, `drop_retained`):
/// every record and index entry of them goes, with nothing read first, a record of an earlier
/// release's form too, and an index entry that no longer matches its record (planted here)
/// goes without touching the record; nothing goes before its retention ends, and the sweep
/// comes at most 100 ms after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_promoter_drops_what_retention_ended() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let i = Instance::manual(&server, &clock).await;
    let q = &i.queue;
    let ready = (0..300)
        .map(|n| NewTask::new("t", format!("f{n}")))
        .collect();
    q.add_batch(ready).await.unwrap();
    let delayed = (0..120)
        .map(|n| NewTask::new("t", format!("c{n}")).delay_ms(3_600_000))
        .collect();
    q.add_batch(delayed).await.unwrap();
    // Half finished by the pop itself, half one by one.
    let auto = q
        .pop("t", PopOptions::default().count(150).auto_finish(true))
        .await
        .unwrap();
    assert_eq!(auto.len(), 150);
    for d in q.pop("t", PopOptions::default().count(150)).await.unwrap() {
        q.finish("t", &d.id, Some(&d.receipt)).await.unwrap();
    }
    for n in 0..120 {
        q.cancel("t", &format!("c{n}")).await.unwrap();
    }
    q.add(NewTask::new("t", "kept").delay_ms(3_600_000))
        .await
        .unwrap();
    // Due 1 ms before the retentions end: a tick runs then, and must sweep nothing of them.
    q.add(NewTask::new("t", "nudge").run_at_ms(T0 + 59_999))
        .await
        .unwrap();
    let cmd = |line: &str| server.command(line).expect(line);
    // A stale entry: "kept" is DELAYED, yet listed as FINISHED with a retention that ends.
    cmd(&format!("ZADD dq:{{t#0}}:finished {T0} kept"));
    cmd(&format!(
        "ZADD dq:{{t#0}}:finished:expiry {} kept",
        T0 + 1_000
    ));
    // A FINISHED record in the decimal form of an earlier release, its retention ending.
    let old = format!(
        "3,{},{},{},30000,3,,{},,,{:016x}",
        T0 - 3_000,
        T0 - 5_000,
        T0 - 100,
        T0 + 1_000,
        (T0 - 5_000) << 20
    );
    cmd(&format!("HSET dq:{{t#0}}:records old \"{old}\\nbody\""));
    cmd(&format!("ZADD dq:{{t#0}}:finished {} old", T0 - 3_000));
    cmd(&format!(
        "ZADD dq:{{t#0}}:finished:expiry {} old",
        T0 + 1_000
    ));
    let count = |line: &str| {
        cmd(line)
            .trim()
            .trim_start_matches(':')
            .parse::<u64>()
            .unwrap()
    };
    assert_eq!(count("HLEN dq:{t#0}:records"), 423);
    assert_eq!(
        q.get("t", "old").await.unwrap().body.as_slice(),
        b"body".as_slice()
    );
    clock.advance(59_999);
    // The tick that promoted "nudge" swept the two entries whose retention had ended ("old"
    // and the stale one) and kept every record still in its retention (rule 10).
    assert!(
        eventually(Duration::from_secs(10), || async {
            count("ZCARD dq:{t#0}:delayed") == 1 && count("HLEN dq:{t#0}:records") == 422
        })
        .await,
        "records: {}",
        count("HLEN dq:{t#0}:records")
    );
    assert_eq!(count("ZCARD dq:{t#0}:finished:expiry"), 300);
    assert_eq!(count("ZCARD dq:{t#0}:cancelled:expiry"), 120);
    clock.advance(1);
    // Reads judge the end exactly; the memory goes with the sweep, at most 100 ms later.
    assert_eq!(
        q.get("t", "f0").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    clock.advance(100);
    assert!(
        eventually(Duration::from_secs(10), || async {
            count("HLEN dq:{t#0}:records") == 2
                && count("ZCARD dq:{t#0}:finished:expiry") == 0
                && count("ZCARD dq:{t#0}:cancelled:expiry") == 0
        })
        .await,
        "records left: {}",
        count("HLEN dq:{t#0}:records")
    );
    assert_eq!(count("ZCARD dq:{t#0}:finished"), 0);
    assert_eq!(count("ZCARD dq:{t#0}:cancelled"), 0);
    let kept = q.get("t", "kept").await.unwrap();
    assert_eq!(kept.state, State::Delayed);
    let stats = q.stats("t").await.unwrap();
    assert_eq!((stats.total, stats.delayed, stats.ready), (2, 1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_by_due_across_states() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let i = Instance::manual(&server, &clock).await;
    let q = &i.queue;
    let tasks = (0..25)
        .map(|n| NewTask::new("t", format!("k{n:02}")).run_at_ms(T0 + 100 * n))
        .collect();
    q.add_batch(tasks).await.unwrap();
    clock.advance(450); // k00..k04 due
    let popped = q.pop("t", PopOptions::default().count(2)).await.unwrap();
    assert_eq!(popped.len(), 2);
    let all = q.list("t", None, 1, 10).await.unwrap();
    assert_eq!(all.total, 25);
    let ids: Vec<&str> = all.items.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "k00", "k01", "k02", "k03", "k04", "k05", "k06", "k07", "k08", "k09"
        ]
    );
    let page3 = q.list("t", None, 3, 10).await.unwrap();
    assert_eq!(page3.items.len(), 5);
    assert_eq!(page3.items[0].id, "k20");
    let active = q.list("t", Some(State::Active), 1, 10).await.unwrap();
    assert_eq!(active.total, 2);
    assert!(active.items.iter().all(|t| t.state == State::Active));
    let beyond = q.list("t", None, 9, 10).await.unwrap();
    assert!(beyond.items.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_count_is_recorded_and_never_silently_changed() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let a = Instance::manual_with(&server, &clock, |o| o.partitions(4)).await;
    a.queue.add(NewTask::new("orders", "o-1")).await.unwrap();
    let b = Instance::manual_with(&server, &clock, |o| o.partitions(8)).await;
    let err = b
        .queue
        .add(NewTask::new("orders", "o-2"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Storage);
    let text = err.to_string();
    assert!(
        text.contains("4 partitions") && text.contains("configured with 8"),
        "{text}"
    );
    assert!(b.queue.get("orders", "o-1").await.is_err());
    // Per-topic settings that agree are fine, and other topics use the default.
    let c = Instance::manual_with(&server, &clock, |o| {
        o.partitions(8).topic_partitions("orders", 4)
    })
    .await;
    assert_eq!(
        c.queue.get("orders", "o-1").await.unwrap().state,
        State::Ready
    );
    c.queue.add(NewTask::new("other", "x")).await.unwrap();
    let recorded = server.command("HGET dq:topics other").unwrap();
    assert!(recorded.contains("\r\n8\r\n"), "{recorded}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_wakes_on_add_from_another_instance() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let a = Instance::manual(&server, &clock).await;
    let b = Instance::manual(&server, &clock).await;
    b.queue.add(NewTask::new("t", "warmup")).await.unwrap();
    a.queue.pop_one("t", 0).await.unwrap().unwrap();
    let waiter = {
        let q = a.queue.clone();
        tokio::spawn(async move { q.pop_one("t", 30_000).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished());
    b.queue.add(NewTask::new("t", "x")).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by the event")
        .unwrap()
        .unwrap();
    assert_eq!(got.unwrap().id, "x");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_all_and_delete() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let i = Instance::manual(&server, &clock).await;
    let q = &i.queue;
    let tasks = (0..30)
        .map(|n| NewTask::new("t", format!("d{n}")).max_retries(MaxRetries::Limited(0)))
        .collect();
    q.add_batch(tasks).await.unwrap();
    let got = q.pop("t", PopOptions::default().count(30)).await.unwrap();
    for d in &got {
        assert_eq!(
            q.release("t", &d.id, ReleaseOptions::default())
                .await
                .unwrap(),
            State::Dead
        );
    }
    assert_eq!(q.stats("t").await.unwrap().dead, 30);
    assert_eq!(q.requeue_all("t").await.unwrap(), 30);
    let stats = q.stats("t").await.unwrap();
    assert_eq!((stats.dead, stats.ready), (0, 30));
    q.delete("t", "d3").await.unwrap();
    assert_eq!(
        q.get("t", "d3").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        q.delete("t", "d3").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(q.stats("t").await.unwrap().total, 29);
    let topics = q.topics().await.unwrap();
    assert_eq!(topics.len(), 1);
    assert_eq!(topics[0].1.ready, 29);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_consumers_leave_no_ready_task_behind() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let four = || Instance::manual_with(&server, &clock, |o| o.partitions(4));
    let (a, b) = (four().await, four().await);
    // One task per partition (4), all ready; as many consumers as tasks, all
    // aiming first at the partition with the earliest task. Each must get one: a consumer
    // that loses the race for a partition goes on to the others instead of returning empty.
    for round in 0..20u64 {
        let tasks: Vec<NewTask> = (0..4u32)
            .map(|p| {
                let id = (0..)
                    .map(|n| format!("r{round}-p{p}-{n}"))
                    .find(|id| delayq_redis::partition_of(id, 4) == p)
                    .unwrap();
                NewTask::new("t", id).run_at_ms(clock.now_ms() + u64::from(p))
            })
            .collect();
        let n = tasks.len();
        a.queue.add_batch(tasks).await.unwrap();
        clock.advance(10);
        let consumers: Vec<_> = (0..n)
            .map(|c| {
                let q = if c % 2 == 0 {
                    a.queue.clone()
                } else {
                    b.queue.clone()
                };
                tokio::spawn(async move { q.pop("t", PopOptions::default()).await.unwrap().len() })
            })
            .collect();
        let mut got = 0;
        for c in consumers {
            got += c.await.unwrap();
        }
        assert_eq!(
            got, n,
            "round {round}: a consumer came back empty with tasks ready"
        );
        assert_eq!(a.queue.stats("t").await.unwrap().ready, 0);
    }
}

/// Concurrent single adds to one partition share add scripts (`storage/add.rs`, "Concurrent
/// adds share a script"): Redis runs fewer add scripts than there are adds, every caller
/// still gets its own outcome, and adds of one id race as if they ran one after the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_adds_share_scripts_and_keep_their_own_outcomes() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let i = Instance::manual_with(&server, &clock, |o| o.partitions(1)).await;
    let q = &i.queue;
    // Registers the topic and loads the script, so that what follows is adds only.
    q.add(NewTask::new("orders", "first")).await.unwrap();
    let before = fcalls(&server);
    let n = 200;
    let adds = (0..n).map(|k| {
        // Even: an id of its own; odd: all the same id.
        let id = if k % 2 == 0 {
            format!("o-{k}")
        } else {
            "same".to_owned()
        };
        q.add(NewTask::new("orders", id).body(format!("body {k}")))
    });
    let outcomes = futures_util::future::join_all(adds).await;
    let scripts = fcalls(&server) - before;
    assert!(
        scripts >= 1 && scripts < n as u64,
        "{n} concurrent adds ran {scripts} add scripts"
    );
    let mut same_added = Vec::new();
    for (k, outcome) in outcomes.iter().enumerate() {
        match (k % 2, outcome) {
            (0, Ok(AddOutcome::Added)) => {}
            (1, Ok(AddOutcome::Added)) => same_added.push(k),
            (1, Err(e)) if e.kind() == ErrorKind::Duplicate => {}
            (_, other) => panic!("add {k}: {other:?}"),
        }
    }
    assert_eq!(same_added.len(), 1, "one add of the shared id wins");
    let winner = q.get("orders", "same").await.unwrap();
    assert_eq!(winner.body, format!("body {}", same_added[0]).into_bytes());
    let stats = q.stats("orders").await.unwrap();
    assert_eq!(stats.total, 1 + n as u64 / 2 + 1);
}

/// Concurrent pops, finishes and "ack and take the next" calls of one partition share
/// `consume` scripts (`storage/consume.rs`): Redis runs fewer scripts than there are calls,
/// and every caller gets its own outcome as if the calls ran one after the other
/// (`delayq_conformance::consumers`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_consumers_share_scripts_and_keep_their_own_outcomes() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let i = Instance::manual_with(&server, &clock, |o| o.partitions(1)).await;
    delayq_conformance::consumers::share_rounds_and_keep_their_own_outcomes(
        &i.queue,
        "scripts",
        || async { fcalls(&server) },
    )
    .await;
}

/// Ack and take the next on a topic of several partitions takes the next task from the held
/// task's partition in the same script as the finish (`storage/acks.rs`), what that partition
/// lacks from the others, and on a fair turn the best task of the topic: a consumer that keeps
/// finding work in its partition does not leave a better task of another partition waiting
/// until its own runs dry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_and_next_across_partitions_stays_but_leaves_no_partition_behind() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let i = Instance::manual_with(&server, &clock, |o| o.partitions(4)).await;
    let q = &i.queue;
    let id_in = |p: u32, n: u64| {
        (0..)
            .map(|k| format!("p{p}-{n}-{k}"))
            .find(|id| delayq_redis::partition_of(id, 4) == p)
            .unwrap()
    };
    let tasks = (0..40).map(|n| {
        NewTask::new("t", id_in(0, n))
            .run_at_ms(T0 + 1 + n)
            .priority(10)
    });
    q.add_batch(tasks.collect()).await.unwrap();
    clock.advance(100);
    let mut held = q.pop_one("t", 0).await.unwrap().expect("ready");
    assert_eq!(held.id, id_in(0, 0));
    // Once the consumer works in partition 0, a better task lands in partition 1.
    let lone = id_in(1, 0);
    q.add(NewTask::new("t", &lone).priority(1)).await.unwrap();
    let before = fcalls(&server);
    let mut order = Vec::new();
    loop {
        let (id, receipt) = (held.id.clone(), held.receipt.clone());
        let next = q
            .finish_then_pop(
                delayq::Held {
                    topic: "t",
                    id: &id,
                    receipt: Some(&receipt),
                },
                "t",
                PopOptions::default().timeout_ms(0),
            )
            .await
            .expect("the finish")
            .expect("the pop");
        assert!(next.len() <= 1);
        let Some(d) = next.into_iter().next() else {
            break;
        };
        order.push(d.id.clone());
        held = d;
    }
    let calls = order.len() as u64 + 1;
    let scripts = fcalls(&server) - before;
    assert_eq!(order.len(), 40, "every other task once: {order:?}");
    let mut unique = order.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 40, "none twice: {order:?}");
    let at = order
        .iter()
        .position(|id| *id == lone)
        .expect("the lone task");
    assert!(
        at < 9,
        "partition 1's task waited for {at} of partition 0's (a fair turn is one call in 8)"
    );
    // Partition 0's tasks in their order around it.
    let zeros: Vec<&String> = order.iter().filter(|id| **id != lone).collect();
    let want: Vec<String> = (1..40).map(|n| id_in(0, n)).collect();
    assert_eq!(zeros, want.iter().collect::<Vec<_>>());
    // Most calls were one script; a look across the topic is five (a peek a partition and
    // a pop) after the finish's.
    assert!(
        scripts < 2 * calls,
        "{calls} ack-and-next calls ran {scripts} scripts"
    );
    assert_eq!(q.stats("t").await.unwrap().finished, 41);
}

/// How many functions Redis has run (`FCALL`s), from `INFO commandstats`.
fn fcalls(server: &RedisServer) -> u64 {
    let stat = server
        .info_field("commandstats", "cmdstat_fcall")
        .expect("fcall in commandstats");
    let calls = stat
        .split(',')
        .find_map(|kv| kv.strip_prefix("calls="))
        .expect("calls=");
    calls.parse::<u64>().expect("a count")
}

/// A window a consumer gets starts no earlier than the partition's latest tick. A script's
/// clock is read before it is sent, so a pop may reach Redis after a tick that ran at a later
/// `now` and expired the task's previous attempt; counted from the pop's older reading, the
/// new ttr would end before it began and the next tick would expire it at once (the
/// conformance case `callback_past_ttr_is_redelivered` once saw two redeliveries so). Here
/// the pops come from an instance whose clock stands a whole ttr behind the ticking one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pop_with_a_clock_older_than_the_last_tick_gets_its_whole_ttr() {
    let server = RedisServer::start();
    let ticking = ManualClock::new(T0);
    let a = Instance::manual(&server, &ticking).await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            support::lease_owners(&server).values().sum::<usize>()
                == delayq_redis::keys::LEASE_BUCKETS as usize
        })
        .await,
        "the first instance holds every lease"
    );
    let behind = ManualClock::new(T0);
    let b = Instance::manual(&server, &behind).await;
    a.queue
        .add(NewTask::new("t", "slow").ttr_ms(1_000))
        .await
        .unwrap();
    let first = b.queue.pop_one("t", 0).await.unwrap().expect("ready");
    assert_eq!(first.retries, 0);
    ticking.advance(1_000);
    assert!(
        eventually(Duration::from_secs(5), || async {
            a.queue.get("t", "slow").await.unwrap().retries == 1
        })
        .await,
        "the tick at T0 + 1 000 expired the first attempt"
    );
    let again = b.queue.pop_one("t", 0).await.unwrap().expect("redelivered");
    assert_eq!(again.retries, 1);
    let info = a.queue.get("t", "slow").await.unwrap();
    assert_eq!(
        (info.state, info.deadline_ms),
        (State::Active, Some(T0 + 2_000)),
        "the ttr counts from the tick's now, not from the pop's older reading"
    );
}
