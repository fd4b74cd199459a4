//! Several instances over one database (issue 28): the schema is created once and shared, a
//! schema newer than an instance knows is refused, pops on two instances never hand a task
//! out twice, max_active holds across instances, a long-poll parked on one instance wakes
//! for a task added through another, and one instance at a time leads the time-driven work.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use delayq::{FlowLimits, ManualClock, NewTask, PopOptions, Queue, StorageContext, SystemClock};
use delayq_postgres::PostgresOptions;
use delayq_testkit::PostgresServer;

async fn instance(pg: &PostgresServer) -> Queue {
    let ctx = StorageContext::new(Arc::new(SystemClock::new()));
    let storage = delayq_postgres::start(ctx.clone(), PostgresOptions::new(pg.url()))
        .await
        .expect("start the PostgreSQL backend");
    Queue::new(Arc::new(storage), ctx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_newer_than_this_build_is_refused() {
    let pg = PostgresServer::start();
    let first = instance(&pg).await;
    first.add(NewTask::new("t", "kept")).await.unwrap();
    // A second instance of the same version joins the schema the first created.
    let second = instance(&pg).await;
    assert_eq!(second.get("t", "kept").await.unwrap().id, "kept");

    let (client, conn) =
        delayq_postgres::tokio_postgres::connect(&pg.url(), delayq_postgres::tokio_postgres::NoTls)
            .await
            .unwrap();
    tokio::spawn(conn);
    client
        .execute("UPDATE delayq.schema_version SET version = 99", &[])
        .await
        .unwrap();
    let ctx = StorageContext::new(Arc::new(SystemClock::new()));
    let err = delayq_postgres::start(ctx, PostgresOptions::new(pg.url()))
        .await
        .expect_err("a newer schema must be refused");
    let text = format!("{err} {:?}", std::error::Error::source(&err));
    assert!(
        text.contains("version 99") && text.contains("newer"),
        "{text}"
    );
    // Nothing was changed by the refused instance.
    let version: i32 = client
        .query_one("SELECT version FROM delayq.schema_version", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, 99);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pops_on_two_instances_never_hand_a_task_out_twice() {
    let pg = PostgresServer::start();
    let (a, b) = (instance(&pg).await, instance(&pg).await);
    for i in 0..60 {
        a.add(NewTask::new("jobs", format!("j{i}"))).await.unwrap();
    }
    let mut pops = Vec::new();
    for k in 0..12 {
        let q = if k % 2 == 0 { a.clone() } else { b.clone() };
        pops.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let batch = q.pop("jobs", PopOptions::default().count(3)).await.unwrap();
                if batch.is_empty() {
                    return got;
                }
                got.extend(batch.into_iter().map(|d| d.id));
            }
        }));
    }
    let mut all = Vec::new();
    for p in pops {
        all.extend(p.await.unwrap());
    }
    let distinct: BTreeSet<&String> = all.iter().collect();
    assert_eq!(all.len(), 60, "every task handed out once: {all:?}");
    assert_eq!(distinct.len(), 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_active_holds_across_instances_and_a_freed_slot_wakes_the_other() {
    let pg = PostgresServer::start();
    let (a, b) = (instance(&pg).await, instance(&pg).await);
    a.set_limits("mail", FlowLimits::max_active(3))
        .await
        .unwrap();
    for i in 0..10 {
        a.add(NewTask::new("mail", format!("m{i}"))).await.unwrap();
    }
    let first = a
        .pop("mail", PopOptions::default().count(10))
        .await
        .unwrap();
    assert_eq!(first.len(), 3);
    assert!(
        b.pop("mail", PopOptions::default().count(10))
            .await
            .unwrap()
            .is_empty()
    );
    // A pop parked on B wakes when A finishes one of its three.
    let parked = {
        let b = b.clone();
        tokio::spawn(async move {
            b.pop("mail", PopOptions::default().count(10).timeout_ms(20_000))
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.finish("mail", &first[0].id, Some(&first[0].receipt))
        .await
        .unwrap();
    let got = parked.await.unwrap();
    assert_eq!(got.len(), 1, "one slot freed: {got:?}");
    assert_eq!(a.stats("mail").await.unwrap().active, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_on_one_instance_wakes_for_a_task_added_through_another() {
    let pg = PostgresServer::start();
    let (a, b) = (instance(&pg).await, instance(&pg).await);
    let parked = {
        let b = b.clone();
        tokio::spawn(async move {
            b.pop("later", PopOptions::default().timeout_ms(30_000))
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.add(NewTask::new("later", "l1").delay_ms(300))
        .await
        .unwrap();
    let got = parked.await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, "l1");
    assert!(
        delayq::Clock::now_ms(&SystemClock::new()) >= got[0].due_ms,
        "never early"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_clock_bounds_itself_and_reads_the_servers_time() {
    use delayq::Clock;
    let pg = PostgresServer::start();
    let options =
        delayq_postgres::clock::PostgresClockOptions::default().refresh(Duration::from_millis(100));
    let clock = delayq_postgres::clock::new_clock(options);
    let unbounded = clock.check().expect_err("no reading yet");
    assert!(
        unbounded.reason.contains("clock_timestamp()"),
        "{unbounded}"
    );
    delayq_postgres::clock::connect(&clock, &PostgresOptions::new(pg.url())).unwrap();
    clock
        .wait_bounded(Duration::from_secs(10))
        .await
        .expect("bounded after a probe");
    // The server runs on this machine: its clock and ours agree closely.
    let ours = SystemClock::new().now_ms();
    let (lo, hi) = clock.bounds_ns().unwrap();
    assert!(lo <= hi);
    let theirs = clock.now_ms();
    assert!(
        theirs.abs_diff(ours) < 1_000,
        "ours {ours}, the database's {theirs}"
    );
    assert!(clock.upper_ms() >= theirs);
}

/// An instance on `clock`, with its storage kept apart to ask whether it leads.
async fn instance_on(
    pg: &PostgresServer,
    clock: &ManualClock,
) -> (Queue, Arc<delayq_postgres::PostgresStorage>, StorageContext) {
    let ctx = StorageContext::new(Arc::new(clock.clone()));
    let storage = Arc::new(
        delayq_postgres::start(ctx.clone(), PostgresOptions::new(pg.url()))
            .await
            .expect("start the PostgreSQL backend"),
    );
    (Queue::new(Arc::clone(&storage), ctx.clone()), storage, ctx)
}

/// Waits up to 10 s (real time) for `check`.
async fn within_10s(what: &str, check: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !check() {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits up to 3 s (real time) until the instance of `ctx` has promoted `n` tasks in all (a
/// read reports a due task READY before any driver moved it: only the counter tells).
async fn fired_within_3s(ctx: &StorageContext, n: u64) {
    let start = std::time::Instant::now();
    while ctx.metrics.snapshot().fired < n {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{n} promotions not made 3 s after the due time: {}",
            ctx.metrics.snapshot().fired
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One instance leads the time-driven work (the driver lock); a follower ticks only a grace
/// after a timer, so the lead must hear of the timers the follower makes. Both instances run
/// on one manual clock that the test moves exactly to the due time: the follower's grace is
/// never reached, so only the lead can promote, and it does so without waiting for its slow
/// look (5 s of real time) only if the follower's add told it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lead_promotes_what_a_follower_adds_at_its_due_time() {
    let pg = PostgresServer::start();
    let clock = ManualClock::new(1_800_000_000_000);
    let (a, a_storage, a_ctx) = instance_on(&pg, &clock).await;
    within_10s("the first instance leads", || a_storage.leads()).await;
    let (b, b_storage, b_ctx) = instance_on(&pg, &clock).await;
    // b asks for the lock at once and then every second: it never gets it while a holds it.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(
        a_storage.leads() && !b_storage.leads(),
        "one lead at a time"
    );

    for (n, delay) in [(1, 1_000), (2, 40), (3, 5)] {
        b.add(NewTask::new("later", format!("f{n}")).delay_ms(delay))
            .await
            .unwrap();
        clock.advance(delay);
        fired_within_3s(&a_ctx, n).await;
    }
    assert_eq!(a_ctx.metrics.snapshot().fired, 3, "the lead promoted them");
    assert_eq!(
        b_ctx.metrics.snapshot().fired,
        0,
        "the follower waited its grace"
    );
    let got = a
        .pop("later", PopOptions::default().count(3))
        .await
        .unwrap();
    assert_eq!(got.len(), 3);

    // A lead that stops lets the lock go: the follower leads and promotes at the due time.
    a.shutdown().await.unwrap();
    within_10s("the follower leads", || b_storage.leads()).await;
    b.add(NewTask::new("later", "after").delay_ms(100))
        .await
        .unwrap();
    clock.advance(100);
    fired_within_3s(&b_ctx, 1).await;
}

/// A ttr starts no earlier than the task's last change. A pop reads the clock when its
/// transaction begins; a tick may commit a later `now` before the pop reaches the row, and
/// may have made this very task READY again (its ttr expired). Here the pops come from an
/// instance whose clock stands a whole ttr behind the lead's: counted from its own reading the
/// new ttr would end before it began.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pop_with_a_clock_older_than_the_last_tick_gets_its_whole_ttr() {
    const T0: u64 = 1_800_000_000_000;
    let pg = PostgresServer::start();
    let ticking = ManualClock::new(T0);
    let (a, a_storage, _) = instance_on(&pg, &ticking).await;
    within_10s("the first instance leads", || a_storage.leads()).await;
    let behind = ManualClock::new(T0);
    let (b, _, _) = instance_on(&pg, &behind).await;
    a.add(NewTask::new("t", "slow").ttr_ms(1_000))
        .await
        .unwrap();
    let first = b.pop("t", PopOptions::default()).await.unwrap();
    assert_eq!(first[0].retries, 0);
    ticking.advance(1_000);
    let start = std::time::Instant::now();
    while a.get("t", "slow").await.unwrap().retries != 1 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the lead's tick expired the ttr"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let again = b.pop("t", PopOptions::default()).await.unwrap();
    assert_eq!(again[0].retries, 1);
    let info = a.get("t", "slow").await.unwrap();
    assert_eq!(
        (info.state, info.deadline_ms),
        (delayq::State::Active, Some(T0 + 2_000)),
        "the ttr counts from the tick's change, not from the pop's older reading"
    );
}
