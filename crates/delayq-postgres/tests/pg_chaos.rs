//! Faults between delayq and PostgreSQL (issue 28): instances (each a backend and a queue in
//! this process) reach one test-started PostgreSQL each through its own [`FaultProxy`].
//!
//! - `random_faults_under_mixed_load`: for a bounded time (`DELAYQ_CHAOS_SECS`, default 20 s)
//!   the chaos loop the Redis tests share puts latency with jitter, a bandwidth limit, a
//!   blackhole, refused connections, lost replies, cuts and replies reset in the middle on
//!   random instances' proxies, while four clients add, pop, finish, release, touch, cancel
//!   and read through random instances. Then the faults end, the topics drain and the history
//!   checker must find nothing, every acknowledged task settled.
//! - `a_commit_whose_reply_is_lost_is_outcome_unknown`: the reply to `COMMIT` is lost: the
//!   caller gets a retryable error whose outcome is unknown, and the change is there. The
//!   reply to a statement before the commit is lost: the error says nothing was applied, and
//!   nothing was.
//! - `a_parked_long_poll_wakes_after_its_listen_connection_was_terminated`: the LISTEN
//!   connection of an instance is terminated (`pg_terminate_backend`); it comes back and a
//!   parked consumer wakes for a task added through another instance. Terminated again while
//!   the instance cannot reconnect for a while: a task made ready then has its notice lost,
//!   and the parked consumer still wakes once the instance listens again.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq::{ErrorKind, NewTask, Outcome as LibOutcome, PopOptions, Queue};
use delayq_conformance::recorded::{
    Chaos, Client, Load, adds_with_lost_replies, chaos_secs, check, seed,
};
use delayq_testkit::history::{Answer, Outcome, Recorder, TaskKey, TaskState};
use delayq_testkit::{FaultProxy, Faults, PostgresServer};
use support::{connect, eventually, instance_of, listeners};

/// One instance and the proxy it reaches PostgreSQL through.
struct Node {
    proxy: FaultProxy,
    queue: Queue,
}

async fn node(server: &PostgresServer) -> Node {
    let proxy = FaultProxy::start(([127, 0, 0, 1], server.port()).into()).await;
    let url = format!("postgres://postgres@{}/postgres", proxy.addr());
    let queue = instance_of(&url, 4).await;
    Node { proxy, queue }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_faults_under_mixed_load() {
    let secs = chaos_secs();
    let seed = seed();
    eprintln!("chaos seed {seed} (DELAYQ_CHAOS_SEED repeats it), {secs} s");
    let server = tokio::task::block_in_place(PostgresServer::start);
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(node(&server).await);
    }
    let queues: Arc<Vec<Queue>> = Arc::new(nodes.iter().map(|n| n.queue.clone()).collect());
    let load = Load::start(queues, seed);
    let mut chaos = Chaos::new(nodes.iter().map(|n| &n.proxy).collect(), seed);
    chaos.run_for(Duration::from_secs(secs)).await;
    let report = chaos.heal();
    let failures = load.rec.history().failures();
    assert!(
        failures
            .keys()
            .any(|k| k.starts_with("add") || k.starts_with("pop")),
        "the faults reached the load: {failures:?}"
    );
    load.stop_and_check(&format!("{report}; failures {failures:?}"))
        .await;
    for n in nodes {
        n.queue.shutdown().await.ok();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_reply_is_lost_is_outcome_unknown() {
    let server = tokio::task::block_in_place(PostgresServer::start);
    let a = node(&server).await;
    let b = instance_of(&server.url(), 4).await;
    // Prepared statements and the schema are in place before the faults.
    a.queue
        .add(NewTask::new("lost", "warm-up"))
        .await
        .expect("a healthy add");

    // The reply to COMMIT is lost: the commit happened, the caller cannot know it.
    let ids: Vec<String> = (0..5).map(|k| format!("commit-{k}")).collect();
    let (unknown_and_written, attempts) = adds_with_lost_replies(
        &a.queue,
        &b,
        "lost",
        &ids,
        |_| a.proxy.set(Faults::lose_replies_after("COMMIT")),
        || a.proxy.heal(),
    )
    .await;
    eprintln!("adds whose COMMIT reply was lost: {attempts:#?}");
    assert!(
        unknown_and_written >= 3,
        "too few commits reached PostgreSQL with their reply lost: {attempts:#?}"
    );

    // The reply to the statement that names the task is lost, before any COMMIT: the
    // transaction is rolled back with its connection, and the error says so.
    for k in 0..3 {
        let id = format!("before-commit-{k}");
        a.proxy.set(Faults::lose_replies_after(id.clone()));
        let err = a
            .queue
            .add(NewTask::new("lost", &id))
            .await
            .expect_err("the reply is lost");
        a.proxy.heal();
        assert!(err.is_retryable(), "{err}");
        assert_eq!(err.outcome(), LibOutcome::NotApplied, "{err}");
        let found = b.get("lost", &id).await;
        assert_eq!(
            found.as_ref().map_err(delayq::Error::kind).err(),
            Some(ErrorKind::NotFound),
            "{id}: nothing was applied: {found:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The same through the recorder, with a finish whose COMMIT reply is lost.
    let rec = Arc::new(Recorder::new());
    let mut client = Client::new(0, Arc::clone(&rec), Arc::new(vec![a.queue.clone()]), seed());
    client.add(TaskKey::new("finish", "two"), 0, 5_000).await;
    let d = client.pop("finish", 1, 2_000).await;
    assert_eq!(d.len(), 1, "the task fires");
    a.proxy.set(Faults::lose_replies_after("COMMIT"));
    client.finish(&d[0]).await;
    a.proxy.heal();
    let events = rec.history().events;
    let finish = events.last().expect("the finish");
    assert!(
        matches!(finish.outcome, Outcome::Unknown(_)),
        "{:?}",
        finish.outcome
    );
    client.queues = Arc::new(vec![b.clone()]);
    assert_eq!(
        client.get(d[0].key.clone()).await,
        Some(Answer::Found {
            state: TaskState::Finished
        })
    );
    // A reply cut in the middle: an error, and the next request goes through.
    a.proxy.reset_next_reply();
    let cut = a.queue.get("finish", "two").await;
    if let Err(e) = &cut {
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    }
    assert!(
        eventually(Duration::from_secs(5), || async {
            a.queue.get("finish", "two").await.is_ok()
        })
        .await
    );
    check(&rec.history(), false);
    a.queue.shutdown().await.ok();
    b.shutdown().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_long_poll_wakes_after_its_listen_connection_was_terminated() {
    let server = tokio::task::block_in_place(PostgresServer::start);
    let own = connect(&server.url()).await;
    let a = node(&server).await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            listeners(&own).await.len() == 1
        })
        .await,
        "A listens"
    );
    let a_listener = listeners(&own).await[0];
    let b = instance_of(&server.url(), 4).await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            listeners(&own).await.len() == 2
        })
        .await,
        "B listens"
    );
    let b_listener = listeners(&own)
        .await
        .into_iter()
        .find(|pid| *pid != a_listener)
        .expect("B's LISTEN connection");
    let park = |topic: &'static str| {
        let q = a.queue.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let got = q
                .pop(topic, PopOptions::default().timeout_ms(30_000))
                .await
                .expect("the long-poll");
            (got, started.elapsed())
        })
    };

    // Terminated, then back: the notice of a task added through B reaches the new
    // connection.
    let parked = park("first");
    tokio::time::sleep(Duration::from_millis(200)).await;
    own.execute("SELECT pg_terminate_backend($1)", &[&a_listener])
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            let now = listeners(&own).await;
            now.len() == 2 && !now.contains(&a_listener)
        })
        .await,
        "A listens again on a new connection"
    );
    b.add(NewTask::new("first", "f")).await.unwrap();
    let (got, waited) = parked.await.unwrap();
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(waited < Duration::from_secs(10), "woken, not timed out");

    // Terminated while A cannot reconnect (its proxy refuses new connections; those it has
    // stay): the notice of a task made ready meanwhile is lost. Once A listens again, its
    // parked consumer must still wake.
    let parked = park("second");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let a_listener = listeners(&own)
        .await
        .into_iter()
        .find(|pid| *pid != b_listener)
        .expect("A's new LISTEN connection");
    a.proxy.set(Faults::refuse());
    own.execute("SELECT pg_terminate_backend($1)", &[&a_listener])
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            listeners(&own).await == [b_listener]
        })
        .await,
        "A's LISTEN connection is gone"
    );
    b.add(NewTask::new("second", "s")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.proxy.heal();
    let (got, waited) = parked.await.unwrap();
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        waited < Duration::from_secs(15),
        "woken once A listened again, not at the long-poll's timeout ({waited:?})"
    );
    a.queue.shutdown().await.ok();
    b.shutdown().await.ok();
}
