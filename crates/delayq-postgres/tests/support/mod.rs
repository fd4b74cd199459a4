//! Shared by the PostgreSQL integration tests: instances (a backend and a queue on it, in
//! this process) over a URL, a connection of the test's own, and a pop parked on an instance.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Instant;

use delayq::{Delivery, PopOptions, Queue, StorageContext, SystemClock};
use delayq_postgres::PostgresOptions;
use delayq_postgres::tokio_postgres::{self, Client, NoTls};

// Not every test binary that includes this module uses it.
#[allow(unused_imports)]
pub use delayq_testkit::eventually;

/// An instance over `url` on the system clock, with a pool of `pool_size` connections.
pub async fn instance_of(url: &str, pool_size: usize) -> Queue {
    let ctx = StorageContext::new(Arc::new(SystemClock::new()));
    let storage =
        delayq_postgres::start(ctx.clone(), PostgresOptions::new(url).pool_size(pool_size))
            .await
            .expect("start the PostgreSQL backend");
    Queue::new(Arc::new(storage), ctx)
}

/// A connection of the test's own (not through any proxy), its driver spawned.
pub async fn connect(url: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .expect("connect to PostgreSQL");
    tokio::spawn(conn);
    client
}

/// The backend pids of the connections listening on delayq's channel.
pub async fn listeners(client: &Client) -> Vec<i32> {
    client
        .query(
            "SELECT pid FROM pg_stat_activity WHERE query = 'LISTEN delayq_events' \
             ORDER BY pid",
            &[],
        )
        .await
        .expect("read pg_stat_activity")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// A pop of `topic` parked up to 30 s: what it got and when.
pub fn parked_pop(q: &Queue, topic: &str) -> tokio::task::JoinHandle<(Vec<Delivery>, Instant)> {
    let (q, topic) = (q.clone(), topic.to_owned());
    tokio::spawn(async move {
        let got = q
            .pop(&topic, PopOptions::default().timeout_ms(30_000))
            .await
            .unwrap();
        (got, Instant::now())
    })
}
