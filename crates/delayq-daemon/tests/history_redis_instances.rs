//! The dashboard's history in Redis mode: two instances on one Redis, each served on a real
//! socket with its sampler running, each see both instances and the sum of their activity.
//!
//! Real time: instances publish every `PUBLISH_EVERY_MS` (5 s), so the test waits with a
//! generous bound and never asserts on speed.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use delayq_daemon::config::StorageConfig;
use delayq_daemon::{ServerConfig, build_queue};
use delayq_server::history::{History, Series};
use delayq_server::{AppState, app};
use delayq_testkit::RedisServer;
use serde_json::{Value, json};

/// How long to wait for the instances to see each other.
const PATIENCE: Duration = Duration::from_secs(40);

struct Instance {
    addr: SocketAddr,
    state: AppState,
}

async fn start(redis: &RedisServer) -> Instance {
    let mut config = ServerConfig::default();
    config.storage = StorageConfig::Redis { url: redis.url() };
    let queue = build_queue(&config).await.expect("a Redis-mode queue");
    let state = AppState::new(queue.clone(), &config.app());
    state.history().spawn_sampler(queue);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = app(state.clone());
    tokio::spawn(async move { axum::serve(listener, router).await });
    Instance { addr, state }
}

/// Adds `n` tasks of `topic` due in an hour through the server at `addr`.
async fn add(client: &reqwest::Client, addr: SocketAddr, topic: &str, n: usize) {
    let tasks: Vec<Value> = (0..n)
        .map(|i| json!({"topic": topic, "id": format!("{}-{i}", addr.port()), "delay_ms": 3_600_000}))
        .collect();
    let reply: Value = client
        .post(format!("http://{addr}/add"))
        .json(&json!({ "tasks": tasks }))
        .send()
        .await
        .expect("POST /add")
        .json()
        .await
        .expect("a JSON envelope");
    assert_eq!(reply["code"], 0, "{reply}");
}

/// The number of tasks a series says were added: each bucket's rate times the seconds it
/// covers (the whole step, the newest up to `end_ms`).
fn added(s: &Series) -> f64 {
    let n = s.added.len() as u64;
    s.added
        .iter()
        .enumerate()
        .map(|(i, rate)| {
            let start = s.start_ms + i as u64 * s.step_ms;
            let covered = if i as u64 + 1 == n {
                s.end_ms.saturating_sub(start).clamp(1, s.step_ms)
            } else {
                s.step_ms
            };
            rate * covered as f64 / 1_000.0
        })
        .sum()
}

fn sees_both(h: &History, want_total: u64, want_orders: u64) -> bool {
    let instances = h.instances();
    instances.len() == 2
        && instances.iter().all(|i| i.alive)
        && instances.iter().filter(|i| i.this).count() == 1
        && instances.iter().map(|i| i.totals.added).sum::<u64>() == want_total
        && (added(&h.series(None)) - want_total as f64).abs() < 1e-6
        && (added(&h.series(Some("orders"))) - want_orders as f64).abs() < 1e-6
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_each_see_both_and_the_sum() {
    let redis = RedisServer::start();
    let one = start(&redis).await;
    let two = start(&redis).await;
    let client = reqwest::Client::new();
    add(&client, one.addr, "orders", 3).await;
    add(&client, two.addr, "orders", 5).await;
    add(&client, two.addr, "mail", 2).await;

    let began = Instant::now();
    loop {
        let (a, b) = (one.state.history(), two.state.history());
        if sees_both(a, 10, 8) && sees_both(b, 10, 8) {
            break;
        }
        assert!(
            began.elapsed() < PATIENCE,
            "the instances did not see each other: one {:#?}, two {:#?}",
            a.instances(),
            b.instances()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Each sees itself as `this` with its own count, and the other with its own.
    for (me, mine, theirs) in [(&one, 3, 7), (&two, 7, 3)] {
        let instances = me.state.history().instances();
        let this = instances.iter().find(|i| i.this).unwrap();
        let other = instances.iter().find(|i| !i.this).unwrap();
        assert_eq!((this.totals.added, other.totals.added), (mine, theirs));
        assert_ne!(this.id, other.id);
    }
    assert_eq!(one.state.history().topics(), ["mail", "orders"]);
}

/// `delayq_daemon::run`, as `delayq serve` calls it, starts the sampler: each instance's entry
/// appears in Redis with its own count of adds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_publishes_each_instance_into_redis() {
    let redis = RedisServer::start();
    let mut config = ServerConfig::default();
    config.storage = StorageConfig::Redis { url: redis.url() };
    let client = reqwest::Client::new();
    let mut stops = Vec::new();
    for n in [2usize, 4] {
        let queue = build_queue(&config).await.expect("a Redis-mode queue");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let config = config.clone();
        tokio::spawn(async move {
            delayq_daemon::run(listener, queue, &config, async {
                let _ = stopped.await;
            })
            .await
        });
        stops.push(stop);
        add(&client, addr, "jobs", n).await;
    }
    let began = Instant::now();
    let added = loop {
        let all = delayq_testkit::cli(redis.port(), &["HGETALL", "dq:meta:instances"]);
        let mut added: Vec<u64> = all
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter_map(|entry| entry["topics"]["jobs"][0].as_u64())
            .collect();
        added.sort();
        if added == [2, 4] || began.elapsed() > PATIENCE {
            break added;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(added, [2, 4], "each instance's entry counts its own adds");
    for stop in stops {
        let _ = stop.send(());
    }
}
