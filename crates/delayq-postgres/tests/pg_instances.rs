//! Several instances over one database (issue 28): the schema is created once and shared, a
//! schema newer than an instance knows is refused, pops on two instances never hand a task
//! out twice, max_active holds across instances, and a long-poll parked on one instance wakes
//! for a task added through another.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use delayq::{FlowLimits, NewTask, PopOptions, Queue, StorageContext, SystemClock};
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
