//! The operations of rules 11–15 on the Redis backend, against a real redis-server and a
//! real Redis Cluster: the ready order (priority, due, insertion) within a partition and
//! across partitions and topics, bury and kick, kick-job, reschedule, pause and resume
//! (strict, ending by itself, waking long-polls on every instance), peek, locate, the job id
//! counter and the settings store; and the upgrade of a partition written by the previous
//! version (no priority, bare ids in READY and DEAD).
//!
//! Each check is an async fn over a queue factory, run once on a standalone server and once
//! on the shared cluster (own key prefix per test). Time is a manual clock.

mod support;

use std::sync::Arc;
use std::time::Duration;

use delayq::{
    BuryOptions, ErrorKind, ManualClock, NewTask, PopOptions, Queue, State, StorageContext, When,
};
use delayq_redis::RedisOptions;
use delayq_testkit::{RedisCluster, RedisServer};
use support::Instance;

const T0: u64 = 1_800_000_000_000;

/// Where a check runs: a standalone server of its own, or the shared cluster.
enum Target {
    Standalone(RedisServer),
    Cluster(String),
}

impl Target {
    fn standalone() -> Self {
        Target::Standalone(RedisServer::start())
    }

    fn cluster() -> Self {
        Target::Cluster(support::unique_prefix("r11"))
    }

    fn options(&self, partitions: u32) -> RedisOptions {
        let base = match self {
            Target::Standalone(server) => support::options(server),
            Target::Cluster(prefix) => RedisOptions::new(RedisCluster::shared().url())
                .key_prefix(prefix)
                .connect_timeout(Duration::from_millis(500))
                .response_timeout(Duration::from_secs(2)),
        };
        base.partitions(partitions)
    }

    /// An instance with `partitions` per topic on `clock`.
    async fn instance(&self, clock: &ManualClock, partitions: u32) -> Instance {
        let ctx = StorageContext::new(Arc::new(clock.clone()));
        Instance::start(ctx, self.options(partitions)).await
    }
}

fn kind<T: std::fmt::Debug>(r: delayq::Result<T>) -> ErrorKind {
    r.expect_err("an error").kind()
}

async fn pop_ids(q: &Queue, topic: &str, n: usize) -> Vec<String> {
    q.pop(topic, PopOptions::default().count(n))
        .await
        .expect("pop")
        .into_iter()
        .map(|d| d.id)
        .collect()
}

/// Rule 11 in one partition: priority, then due, then insertion; priority kept in the record.
async fn ready_order_in_a_partition(target: Target) {
    let clock = ManualClock::new(T0);
    let i = target.instance(&clock, 1).await;
    let q = &i.queue;
    // (id, priority, delay): added in this order, all due within 100 ms.
    let tasks = [
        ("late-hi", 5, 90),
        ("c", 1024, 50),
        ("a", 1024, 0),
        ("b", 1024, 0),
        ("urgent", 0, 99),
        ("d", 1024, 50),
    ];
    for (id, pri, delay) in tasks {
        q.add(NewTask::new("o", id).body(id).priority(pri).delay_ms(delay))
            .await
            .expect("add");
    }
    // A delayed task of the best priority, due later: promoted when due, then first.
    q.add(NewTask::new("o", "zero").priority(0).delay_ms(1_000))
        .await
        .expect("add");
    clock.advance(100);
    assert_eq!(q.get("o", "urgent").await.unwrap().priority, 0);
    let first = q
        .pop("o", PopOptions::default().count(2))
        .await
        .expect("pop");
    assert_eq!(
        first
            .iter()
            .map(|d| (d.id.as_str(), d.priority))
            .collect::<Vec<_>>(),
        [("urgent", 0), ("late-hi", 5)]
    );
    clock.advance(900);
    assert_eq!(pop_ids(q, "o", 10).await, ["zero", "a", "b", "c", "d"]);
}

/// Across partitions and across topics (pop_any): priority, due, then insertion (the
/// insertion number comes from the adding instance, so it orders across partitions).
async fn ready_order_across_partitions_and_topics(target: Target) {
    let clock = ManualClock::new(T0);
    let i = target.instance(&clock, 4).await;
    let q = &i.queue;
    let mut want = Vec::new();
    for n in 0..24u32 {
        let pri = (n * 7) % 5;
        let back = u64::from(n % 3) * 10;
        let topic = if n % 2 == 0 { "x" } else { "y" };
        q.add(
            NewTask::new(topic, format!("t{n}"))
                .priority(pri)
                .delay_ms(back),
        )
        .await
        .expect("add");
        want.push((pri, T0 + back, n, format!("t{n}")));
    }
    want.sort();
    clock.advance(100);
    let topics = vec!["x".to_owned(), "y".to_owned()];
    let mut got = Vec::new();
    for _ in 0..6 {
        let batch = q
            .pop_any(&topics, PopOptions::default().count(4))
            .await
            .expect("pop_any");
        assert_eq!(batch.len(), 4);
        got.extend(batch.into_iter().map(|d| d.id));
    }
    let want: Vec<String> = want.into_iter().map(|w| w.3).collect();
    assert_eq!(got, want);
    assert!(
        q.pop_any(&topics, PopOptions::default().count(4))
            .await
            .unwrap()
            .is_empty()
    );
}

/// Bury (receipt, priority, reason), then kick: DEAD first oldest-buried-first, and only
/// when there are none, DELAYED earliest due first.
async fn bury_and_kick(target: Target) {
    let clock = ManualClock::new(T0);
    let i = target.instance(&clock, 4).await;
    let q = &i.queue;
    for id in ["a", "b", "c"] {
        q.add(NewTask::new("k", id)).await.expect("add");
    }
    q.add(NewTask::new("k", "later").delay_ms(5_000))
        .await
        .unwrap();
    q.add(NewTask::new("k", "latest").delay_ms(9_000))
        .await
        .unwrap();
    let got = q
        .pop("k", PopOptions::default().count(3))
        .await
        .expect("pop");
    assert_eq!(got.len(), 3);
    let receipt = |id: &str| got.iter().find(|d| d.id == id).unwrap().receipt.clone();
    // A stale receipt, a task not ACTIVE, a missing task.
    assert_eq!(
        kind(
            q.bury("k", "a", BuryOptions::default().receipt("nope"))
                .await
        ),
        ErrorKind::Conflict
    );
    assert_eq!(
        kind(q.bury("k", "later", BuryOptions::default()).await),
        ErrorKind::Conflict
    );
    assert_eq!(
        kind(q.bury("k", "none", BuryOptions::default()).await),
        ErrorKind::NotFound
    );
    for id in ["b", "a", "c"] {
        let mut options = BuryOptions::default().receipt(receipt(id));
        if id == "c" {
            options = options.error("bad input");
            options.priority = Some(3);
        }
        q.bury("k", id, options).await.expect("bury");
        clock.advance(10);
    }
    let b = q.get("k", "b").await.unwrap();
    assert_eq!(b.state, State::Dead);
    assert_eq!(b.last_error.as_deref(), Some("buried"));
    assert_eq!(b.history.last().map(|a| a.outcome.as_str()), Some("buried"));
    let c = q.get("k", "c").await.unwrap();
    assert_eq!(
        (c.priority, c.last_error.as_deref()),
        (3, Some("bad input"))
    );
    assert_eq!(q.stats("k").await.unwrap().dead, 3);
    // Oldest buried first: b, then a.
    assert_eq!(q.kick("k", 2).await.unwrap(), 2);
    assert_eq!(q.get("k", "b").await.unwrap().state, State::Ready);
    assert_eq!(q.get("k", "a").await.unwrap().state, State::Ready);
    assert_eq!(q.get("k", "c").await.unwrap().state, State::Dead);
    // Still a DEAD task: the DELAYED ones stay.
    assert_eq!(q.kick("k", 10).await.unwrap(), 1);
    assert_eq!(q.get("k", "later").await.unwrap().state, State::Delayed);
    // No DEAD task left: the earliest DELAYED, due now.
    assert_eq!(q.kick("k", 1).await.unwrap(), 1);
    let later = q.get("k", "later").await.unwrap();
    assert_eq!((later.state, later.due_ms), (State::Ready, T0 + 30));
    assert_eq!(q.get("k", "latest").await.unwrap().state, State::Delayed);
    assert_eq!(q.kick("k", 100).await.unwrap(), 1);
    assert_eq!(q.kick("k", 100).await.unwrap(), 0);
    assert_eq!(q.kick("never-added", 5).await.unwrap(), 0);
    // c kept its new priority and comes out first; retries were reset.
    let next = q.pop_one("k", 0).await.unwrap().unwrap();
    assert_eq!((next.id.as_str(), next.priority, next.retries), ("c", 3, 0));
}

/// kick-job: DEAD or DELAYED → READY; anything else is a conflict.
async fn kick_job(target: Target) {
    let clock = ManualClock::new(T0);
    let i = target.instance(&clock, 2).await;
    let q = &i.queue;
    q.add(NewTask::new("j", "d").delay_ms(60_000))
        .await
        .unwrap();
    q.add(NewTask::new("j", "r")).await.unwrap();
    q.kick_job("j", "d").await.expect("kick a delayed task");
    let d = q.get("j", "d").await.unwrap();
    assert_eq!((d.state, d.due_ms), (State::Ready, T0));
    assert_eq!(kind(q.kick_job("j", "r").await), ErrorKind::Conflict);
    assert_eq!(kind(q.kick_job("j", "none").await), ErrorKind::NotFound);
    let got = q.pop_one("j", 0).await.unwrap().unwrap();
    q.bury("j", &got.id, BuryOptions::default()).await.unwrap();
    q.kick_job("j", &got.id).await.expect("kick a buried task");
    assert_eq!(q.get("j", &got.id).await.unwrap().state, State::Ready);
}

/// Rule 15: DELAYED/READY get a new due; ACTIVE is refused.
async fn reschedule(target: Target) {
    let clock = ManualClock::new(T0);
    let i = target.instance(&clock, 2).await;
    let q = &i.queue;
    q.add(NewTask::new("s", "a").body("keep").delay_ms(60_000))
        .await
        .unwrap();
    q.add(NewTask::new("s", "b")).await.unwrap();
    q.add(NewTask::new("s", "c")).await.unwrap();
    assert_eq!(
        q.reschedule("s", "a", When::Delay(0)).await.unwrap(),
        State::Ready
    );
    assert_eq!(
        q.reschedule("s", "b", When::At(T0 + 500)).await.unwrap(),
        State::Delayed
    );
    let a = q.get("s", "a").await.unwrap();
    assert_eq!(
        (a.state, a.due_ms, a.body.as_slice()),
        (State::Ready, T0, &b"keep"[..])
    );
    assert_eq!(q.get("s", "b").await.unwrap().due_ms, T0 + 500);
    let got = pop_ids(q, "s", 1).await;
    assert_eq!(
        kind(q.reschedule("s", &got[0], When::Delay(5)).await),
        ErrorKind::Conflict
    );
    assert_eq!(
        kind(q.reschedule("s", "none", When::Delay(5)).await),
        ErrorKind::NotFound
    );
    clock.advance(500);
    let rest = pop_ids(q, "s", 5).await;
    assert_eq!(rest.len(), 2);
}

/// Rule 14: a paused topic accepts adds, promotes, hands nothing out; shows its pause; ends
/// by itself; long-polls wake at the end and on resume.
async fn pause_and_resume(target: Target) {
    let clock = ManualClock::new(T0);
    let i = target.instance(&clock, 4).await;
    let q = &i.queue;
    // A topic without records can be paused, and shows.
    q.pause("empty", None).await.expect("pause");
    let stats = q.stats("empty").await.unwrap();
    assert!(stats.pause.paused && stats.pause.until_ms.is_none());
    let topics = q.topics().await.unwrap();
    assert!(topics.iter().any(|(t, s)| t == "empty" && s.pause.paused));
    q.resume("empty").await.unwrap();
    assert!(!q.stats("empty").await.unwrap().pause.paused);
    assert!(!q.topics().await.unwrap().iter().any(|(t, _)| t == "empty"));

    q.pause("p", Some(1_000)).await.expect("pause");
    assert_eq!(q.stats("p").await.unwrap().pause.until_ms, Some(T0 + 1_000));
    for n in 0..6 {
        q.add(NewTask::new("p", format!("t{n}"))).await.unwrap();
    }
    q.add(NewTask::new("p", "soon").delay_ms(100))
        .await
        .unwrap();
    clock.advance(100);
    assert!(pop_ids(q, "p", 10).await.is_empty());
    assert!(
        q.pop_any(&["p".to_owned()], PopOptions::default().count(10))
            .await
            .unwrap()
            .is_empty()
    );
    // Due tasks still become READY: the promoter's tick moves "soon" (it runs on its own
    // timer, so a loaded machine may take a moment).
    assert!(
        support::eventually(Duration::from_secs(10), || async {
            q.stats("p").await.unwrap().ready == 7
        })
        .await,
        "the due task of a paused topic becomes READY: {:?}",
        q.stats("p").await.unwrap()
    );
    assert!(pop_ids(q, "p", 10).await.is_empty());
    // A long-poll parked during the pause is woken when it ends by itself.
    let waiter = {
        let q = q.clone();
        tokio::spawn(async move { q.pop("p", PopOptions::default().timeout_ms(60_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished());
    clock.advance(900);
    let got = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken at the end of the pause")
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 1);
    assert!(!q.stats("p").await.unwrap().pause.paused);

    // Until resumed; a long-poll is woken by the resume.
    q.pause("p", None).await.unwrap();
    assert!(pop_ids(q, "p", 1).await.is_empty());
    let waiter = {
        let q = q.clone();
        tokio::spawn(async move { q.pop("p", PopOptions::default().timeout_ms(60_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished());
    q.resume("p").await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken by the resume")
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(pop_ids(q, "p", 10).await.len(), 5);
}

/// peek: READY in pop order, DELAYED earliest due, DEAD oldest buried; None when empty.
async fn peek(target: Target) {
    let clock = ManualClock::new(T0);
    let i = target.instance(&clock, 4).await;
    let q = &i.queue;
    assert!(q.peek("v", State::Ready).await.unwrap().is_none());
    assert_eq!(kind(q.peek("v", State::Active).await), ErrorKind::Invalid);
    q.add(NewTask::new("v", "r1").priority(9)).await.unwrap();
    q.add(NewTask::new("v", "r0").priority(2)).await.unwrap();
    q.add(NewTask::new("v", "d2").delay_ms(2_000))
        .await
        .unwrap();
    q.add(NewTask::new("v", "d1").delay_ms(1_000))
        .await
        .unwrap();
    let r = q.peek("v", State::Ready).await.unwrap().unwrap();
    assert_eq!((r.id.as_str(), r.state), ("r0", State::Ready));
    let d = q.peek("v", State::Delayed).await.unwrap().unwrap();
    assert_eq!((d.id.as_str(), d.state), ("d1", State::Delayed));
    assert!(q.peek("v", State::Dead).await.unwrap().is_none());
    for _ in 0..2 {
        let got = q.pop_one("v", 0).await.unwrap().unwrap();
        q.bury("v", &got.id, BuryOptions::default()).await.unwrap();
        clock.advance(5);
    }
    let dead = q.peek("v", State::Dead).await.unwrap().unwrap();
    assert_eq!(dead.id, "r0");
    // A due DELAYED task not moved yet by a promoter is peeked as READY.
    clock.advance(1_000);
    let r = q.peek("v", State::Ready).await.unwrap().unwrap();
    assert_eq!((r.id.as_str(), r.state), ("d1", State::Ready));
    assert_eq!(q.peek("v", State::Delayed).await.unwrap().unwrap().id, "d2");
}

/// locate, job ids, settings: shared by the instances of a deployment.
async fn locate_ids_and_settings(target: Target) {
    let clock = ManualClock::new(T0);
    let one = target.instance(&clock, 4).await;
    let two = target.instance(&clock, 4).await;
    assert!(one.queue.locate("42").await.unwrap().is_empty());
    for topic in ["b-tube", "a-tube"] {
        one.queue.add(NewTask::new(topic, "42")).await.unwrap();
    }
    one.queue.add(NewTask::new("c-tube", "43")).await.unwrap();
    assert_eq!(two.queue.locate("42").await.unwrap(), ["a-tube", "b-tube"]);
    one.queue.delete("a-tube", "42").await.unwrap();
    assert_eq!(two.queue.locate("42").await.unwrap(), ["b-tube"]);

    assert_eq!(one.queue.next_job_id().await.unwrap(), 1);
    assert_eq!(one.queue.next_job_id().await.unwrap(), 2);
    assert_eq!(two.queue.next_job_id().await.unwrap(), 3);

    let s1 = one.queue.settings();
    let s2 = two.queue.settings();
    assert!(s1.list("push").await.unwrap().is_empty());
    s1.put("push", "b", b"2".to_vec()).await.unwrap();
    s1.put("push", "a", vec![0, 255]).await.unwrap();
    s2.put("push", "b", b"two".to_vec()).await.unwrap();
    s1.put("other", "a", b"x".to_vec()).await.unwrap();
    assert_eq!(
        s2.list("push").await.unwrap(),
        [
            ("a".to_owned(), vec![0, 255]),
            ("b".to_owned(), b"two".to_vec())
        ]
    );
    assert!(s2.delete("push", "a").await.unwrap());
    assert!(!s1.delete("push", "a").await.unwrap());
    assert_eq!(s1.list("push").await.unwrap().len(), 1);
    assert_eq!(kind(s1.list("").await), ErrorKind::Invalid);
}

/// A settings change through one instance wakes the readers of that namespace on another
/// (over the events channel), and only of that namespace; a delete of a missing key wakes
/// nobody. Without the notice the other instance would have to poll Redis to see it.
async fn settings_changes_reach_other_instances(target: Target) {
    let clock = ManualClock::new(T0);
    let one = target.instance(&clock, 4).await;
    let two = target.instance(&clock, 4).await;
    let mut push = two.queue.context().settings.subscribe("push");
    let other = two.queue.context().settings.subscribe("schedules");
    let mut local = one.queue.context().settings.subscribe("push");
    // The subscription of `two` may still be starting: write until a notice arrives.
    let patience = Duration::from_secs(10);
    let seen = tokio::time::timeout(patience, async {
        loop {
            one.queue
                .settings()
                .put("push", "t", b"1".to_vec())
                .await
                .unwrap();
            if tokio::time::timeout(Duration::from_millis(200), push.changed())
                .await
                .is_ok()
            {
                break;
            }
        }
    })
    .await;
    assert!(seen.is_ok(), "a put on one instance reaches the other");
    assert!(local.has_changed().unwrap(), "and the writer's own readers");
    local.mark_unchanged();
    assert!(!other.has_changed().unwrap(), "other namespaces stay quiet");
    push.mark_unchanged();
    assert!(
        !one.queue
            .settings()
            .delete("push", "missing")
            .await
            .unwrap()
    );
    assert!(one.queue.settings().delete("push", "t").await.unwrap());
    tokio::time::timeout(patience, push.changed())
        .await
        .expect("a delete on one instance reaches the other")
        .unwrap();
    assert!(!other.has_changed().unwrap());
}

macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod standalone {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Target::standalone()).await;
                }
            )*
        }
        mod cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Target::cluster()).await;
                }
            )*
        }
    };
}

on_both!(
    ready_order_in_a_partition,
    ready_order_across_partitions_and_topics,
    bury_and_kick,
    kick_job,
    reschedule,
    pause_and_resume,
    peek,
    locate_ids_and_settings,
    settings_changes_reach_other_instances,
);

/// A pause set on one instance holds on another; a resume on one wakes the other's
/// long-poll through the events channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_wakes_long_polls_on_another_instance() {
    let target = Target::standalone();
    let clock = ManualClock::new(T0);
    let a = target.instance(&clock, 2).await;
    let b = target.instance(&clock, 2).await;
    a.queue.pause("x", None).await.unwrap();
    a.queue.add(NewTask::new("x", "1")).await.unwrap();
    assert!(pop_ids(&b.queue, "x", 1).await.is_empty());
    let waiter = {
        let q = b.queue.clone();
        tokio::spawn(async move { q.pop("x", PopOptions::default().timeout_ms(60_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished());
    a.queue.resume("x").await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken by the other instance's resume")
        .unwrap()
        .unwrap();
    assert_eq!(got[0].id, "1");
}

/// A partition written by the previous version (records without priority or insertion
/// number, bare ids in READY and DEAD) reads as priority 1024 and is converted by the first
/// script that touches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_of_the_previous_version_is_upgraded() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let cmd = |line: &str| server.command(line).expect(line);
    cmd("HSET dq:topics old 1");
    let rec = |state: u8, due: u64, body: &str| {
        format!("\"{state},{due},{},,30000,3,,,\\n{body}\"", T0 - 5_000)
    };
    cmd(&format!(
        "HSET dq:{{old#0}}:records r2 {}",
        rec(1, T0 - 100, "two")
    ));
    cmd(&format!(
        "HSET dq:{{old#0}}:records r1 {}",
        rec(1, T0 - 200, "one")
    ));
    cmd(&format!(
        "HSET dq:{{old#0}}:records gone {}",
        rec(5, T0 - 300, "dead")
    ));
    cmd(&format!(
        "ZADD dq:{{old#0}}:ready {} r2 {} r1",
        T0 - 100,
        T0 - 200
    ));
    cmd(&format!("ZADD dq:{{old#0}}:dead {} gone", T0 - 300));
    let i = Instance::manual_with(&server, &clock, |o| o.partitions(1)).await;
    let q = &i.queue;
    assert_eq!(q.get("old", "r1").await.unwrap().priority, 1024);
    q.add(NewTask::new("old", "new").priority(1024))
        .await
        .unwrap();
    q.add(NewTask::new("old", "first").priority(1))
        .await
        .unwrap();
    assert_eq!(
        q.peek("old", State::Dead).await.unwrap().unwrap().id,
        "gone"
    );
    assert_eq!(pop_ids(q, "old", 10).await, ["first", "r1", "r2", "new"]);
    assert_eq!(q.kick("old", 5).await.unwrap(), 1);
    assert_eq!(pop_ids(q, "old", 10).await, ["gone"]);
}

/// A clock whose upper bound is 3 ms above its lower one, as the Redis reference clock is
/// when its reading has an uncertainty.
struct Uncertain(ManualClock);

impl delayq::Clock for Uncertain {
    fn now_ms(&self) -> u64 {
        self.0.now_ms()
    }
    fn upper_ms(&self) -> u64 {
        self.0.now_ms() + 3
    }
    fn sleep_until(&self, deadline: u64) -> delayq::clock::Sleep {
        self.0.sleep_until(deadline)
    }
}

/// Windows given to a consumer (ttr, a release delay) start at the clock's upper bound, so
/// they never end before their length has passed by the true time; due times are judged by
/// the lower bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_start_at_the_clocks_upper_bound() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let ctx = StorageContext::new(Arc::new(Uncertain(clock.clone())));
    let i = Instance::start(ctx, support::options(&server)).await;
    let q = &i.queue;
    q.add(NewTask::new("w", "a").ttr_ms(1_000)).await.unwrap();
    let got = q.pop_one("w", 0).await.unwrap().unwrap();
    let info = q.get("w", "a").await.unwrap();
    assert_eq!(info.deadline_ms, Some(T0 + 3 + 1_000));
    let deadline = q.touch("w", "a", Some(&got.receipt)).await.unwrap();
    assert_eq!(deadline, T0 + 3 + 1_000);
    let state = q
        .release("w", "a", delayq::ReleaseOptions::default().delay_ms(100))
        .await
        .unwrap();
    assert_eq!(state, State::Delayed);
    assert_eq!(q.get("w", "a").await.unwrap().due_ms, T0 + 3 + 100);
}

/// Records in the decimal form of the release before the short one (eleven fields: priority
/// and insertion number, a partition of index format 2), one task in every state, written
/// with raw commands: every field reads back through the new code, each transition works on
/// them (finish with the old receipt, pop by priority, kick, promotion), and a record a
/// script changes is written back in the short form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_the_previous_release_read_and_move() {
    let server = RedisServer::start();
    let mut conn = redis::Client::open(server.url())
        .and_then(|c| c.get_connection())
        .expect("connect");
    // Raw commands (values may hold NUL bytes): the reply as text, empty for none.
    let mut raw = |args: &[&str]| -> String {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        match cmd.query::<redis::Value>(&mut conn).expect("a raw command") {
            redis::Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            _ => String::new(),
        }
    };
    let created = T0 - 5_000;
    let seq = |n: u64| format!("{:016x}", (created << 20) | n);
    let records = "dq:{cur#0}:records";
    // (id, record, the state set, its score, its member)
    let rows = [
        (
            "d1",
            format!("0,{},{created},,30000,3,,,,,{}\nlater", T0 + 60_000, seq(1)),
            "delayed",
            T0 + 60_000,
            "d1".to_owned(),
        ),
        (
            "r1",
            format!(
                "1,{},{created},{},30000,3,,,,7,{}\nfirst, then\nmore",
                T0 - 1_000,
                T0 - 1_000,
                seq(2)
            ),
            "ready",
            7,
            format!("{:012x}{}r1", T0 - 1_000, seq(2)),
        ),
        (
            "a1",
            format!(
                "2,{},{created},{},60000,-1,1,{},abcd00000001,,{}\nheld",
                T0 - 2_000,
                T0 - 1_500,
                T0 + 58_500,
                seq(3)
            ),
            "active",
            T0 - 2_000,
            "a1".to_owned(),
        ),
        (
            "f1",
            format!(
                "3,{},{created},{},30000,3,,{},,,{}\n",
                T0 - 3_000,
                T0 - 100,
                T0 + 86_400_000,
                seq(4)
            ),
            "finished",
            T0 - 3_000,
            "f1".to_owned(),
        ),
        (
            "x1",
            format!(
                "5,{},{created},{},30000,0,,,,,{}\nburied",
                T0 - 4_000,
                T0 - 200,
                seq(5)
            ),
            "dead",
            T0 - 200,
            format!("{}x1", seq(5)),
        ),
    ];
    raw(&["HSET", "dq:topics", "cur", "1"]);
    raw(&["HSET", "dq:{cur#0}:info", "v", "2"]);
    for (id, record, set, score, member) in &rows {
        raw(&["HSET", records, id, record]);
        raw(&[
            "ZADD",
            &format!("dq:{{cur#0}}:{set}"),
            &score.to_string(),
            member,
        ]);
    }
    raw(&[
        "ZADD",
        "dq:{cur#0}:deadlines",
        &(T0 + 58_500).to_string(),
        "a1",
    ]);
    raw(&[
        "ZADD",
        "dq:{cur#0}:finished:expiry",
        &(T0 + 86_400_000).to_string(),
        "f1",
    ]);
    let history = format!(
        "{{\"started_at_ms\":{},\"ended_at_ms\":{},\"outcome\":\"released\",\"error\":\"boom\"}}",
        T0 - 3_500,
        T0 - 3_000
    );
    raw(&[
        "HSET",
        "dq:{cur#0}:extras",
        "a1",
        &format!("\0\"boom\"\0{history}"),
    ]);

    let clock = ManualClock::new(T0);
    let i = Instance::manual_with(&server, &clock, |o| o.partitions(1)).await;
    let q = &i.queue;
    let get = |id: &'static str| async move { q.get("cur", id).await.expect(id) };
    let d1 = get("d1").await;
    assert_eq!(
        (
            d1.state,
            d1.due_ms,
            d1.created_at_ms,
            d1.updated_at_ms,
            d1.body.as_slice()
        ),
        (
            State::Delayed,
            T0 + 60_000,
            created,
            created,
            b"later".as_slice()
        )
    );
    assert_eq!((d1.ttr_ms, d1.max_retries, d1.priority), (30_000, 3, 1024));
    let r1 = get("r1").await;
    assert_eq!(
        (r1.state, r1.priority, r1.updated_at_ms, r1.body.as_slice()),
        (State::Ready, 7, T0 - 1_000, b"first, then\nmore".as_slice())
    );
    let a1 = get("a1").await;
    assert_eq!(
        (
            a1.state,
            a1.ttr_ms,
            a1.max_retries,
            a1.retries,
            a1.deadline_ms
        ),
        (State::Active, 60_000, -1, 1, Some(T0 + 58_500))
    );
    assert_eq!(a1.last_error.as_deref(), Some("boom"));
    assert_eq!(a1.history.len(), 1);
    let f1 = get("f1").await;
    assert_eq!(
        (f1.state, f1.deadline_ms, f1.body.len()),
        (State::Finished, Some(T0 + 86_400_000), 0)
    );
    let x1 = get("x1").await;
    assert_eq!(
        (x1.state, x1.max_retries, x1.updated_at_ms),
        (State::Dead, 0, T0 - 200)
    );
    let stats = q.stats("cur").await.unwrap();
    assert_eq!(
        (
            stats.delayed,
            stats.ready,
            stats.active,
            stats.finished,
            stats.dead
        ),
        (1, 1, 1, 1, 1)
    );

    // The held task finishes with the receipt the old record holds, and is rewritten short.
    q.finish("cur", "a1", Some("abcd00000001")).await.unwrap();
    assert_eq!(get("a1").await.state, State::Finished);
    let rewritten = raw(&["HGET", records, "a1"]);
    assert!(rewritten.starts_with('d'), "{rewritten:?}");
    // The old READY member still orders by its priority against a new task.
    q.add(NewTask::new("cur", "n1").priority(1024))
        .await
        .unwrap();
    // Each task taken is finished, so none comes back by its ttr when the clock moves on.
    let take_and_finish = |n: usize| async move {
        let got = q.pop("cur", PopOptions::default().count(n)).await.unwrap();
        for d in &got {
            q.finish("cur", &d.id, Some(&d.receipt)).await.unwrap();
        }
        got.into_iter().map(|d| d.id).collect::<Vec<_>>()
    };
    assert_eq!(take_and_finish(1).await, ["r1"]);
    assert_eq!(take_and_finish(1).await, ["n1"]);
    // The old DEAD member is kicked, then handed out.
    assert_eq!(q.kick("cur", 5).await.unwrap(), 1);
    assert_eq!(take_and_finish(5).await, ["x1"]);
    // The old DELAYED task, untouched so far, is promoted when due.
    assert!(raw(&["HGET", records, "d1"]).starts_with('0'));
    clock.set(T0 + 60_000);
    let got = q.pop("cur", PopOptions::default()).await.unwrap();
    assert_eq!(
        got.iter()
            .map(|d| (d.id.as_str(), d.body.as_slice()))
            .collect::<Vec<_>>(),
        [("d1", b"later".as_slice())]
    );
    assert!(raw(&["HGET", records, "d1"]).starts_with('c'));
    assert_eq!(get("d1").await.created_at_ms, created);
}
