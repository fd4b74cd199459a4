//! Chaos between real `delayq serve --redis` processes and Redis (issue 16 item 2): each
//! server reaches Redis through a [`FaultProxy`] of the test's, HTTP clients drive the
//! servers and record every operation, and the history checker must find nothing.
//!
//! - `random_faults_between_servers_and_redis`: three servers over one redis-server
//!   (append-only, fsync always), each through its own proxy; random faults on random proxies
//!   (latency, jitter, bandwidth, blackhole, refused connections, lost replies, cuts, replies
//!   reset in the middle) under a mixed HTTP load for `DELAYQ_CHAOS_SECS` (15 s by default);
//!   then the faults end, the topics are drained and every acknowledged task must be settled.
//! - `random_faults_between_servers_and_a_proxied_cluster`: the same with three servers over
//!   a [`ProxiedCluster`] (every node behind a proxy it announces as its address), the faults
//!   on the nodes' proxies, and a manual failover of a master half-way.
//! - `a_server_cut_off_from_redis_is_fenced_while_another_takes_over`: the server holding
//!   every promotion lease (and a delivery) is blackholed; a second server takes the leases
//!   over and fires what comes due, the held task included once its ttr ran out; then the
//!   blackhole ends and the first server's late requests (old lease token, old receipt) must
//!   change nothing. Every task reaches one holder at a time, never early, and is finished.
//! - `a_redis_reply_lost_after_the_write_is_a_503_with_outcome_unknown`: an add and a finish
//!   whose write reaches Redis and whose reply is lost answer 503 with `data.outcome:
//!   "unknown"` and `Retry-After`, the change is there, and the checker accepts the history.
//!   `a_cluster_reply_lost_after_the_write_is_a_503_with_outcome_unknown` does the same over
//!   the proxied cluster (the reply lost on whichever node's proxy carried the write).
//!
//! A run prints its seed; `DELAYQ_CHAOS_SEED` repeats its random choices.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use delayq_testkit::history::{
    Answer, CheckOptions, Delivery, History, Op, Outcome, Recorder, TaskKey, TaskState,
};
use delayq_testkit::{FaultProxy, Faults, ProxiedCluster, RedisServer, cli, random_faults};
use serde_json::json;
use support::http_history::{Client, Reply, Rng};
use support::{DELAYQ, Server, free_port};
use tempfile::TempDir;

const TOPICS: [&str; 2] = ["chaos-a", "chaos-b"];
/// Longer than the servers' Redis response timeout (2 s), so that the server answers first.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(4);

fn seed() -> u64 {
    std::env::var("DELAYQ_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(delayq_testkit::history::now_us)
        | 1
}

fn chaos_secs() -> u64 {
    std::env::var("DELAYQ_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15)
}

/// Starts `delayq serve --redis <redis>` on a free port, its log in `dir`.
fn serve(dir: &Path, redis: &str, name: &str) -> Server {
    let log = dir.join(format!("{name}.log"));
    tokio::task::block_in_place(|| {
        Server::start_at(
            DELAYQ,
            free_port(),
            &["--redis", redis, "--retention-ms", "60000"],
            &log,
        )
    })
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("an HTTP client")
}

fn client(n: usize, rec: &Arc<Recorder>, servers: &[&Server], seed: u64) -> Client {
    Client {
        n,
        http: http(),
        rec: Arc::clone(rec),
        urls: Arc::new(servers.iter().map(|s| s.url.clone()).collect()),
        rng: Rng(seed ^ n as u64),
        next_id: 0,
    }
}

/// A client of the mixed load and the tasks it added.
struct Worker {
    client: Client,
    added: Vec<TaskKey>,
}

impl Worker {
    async fn load(&mut self, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            let c = &mut self.client;
            let topic = TOPICS[c.rng.below(2) as usize];
            let roll = c.rng.below(100);
            if roll < 35 {
                c.next_id += 1;
                let key = TaskKey::new(topic, format!("c{}-{}", c.n, c.next_id));
                self.added.push(key.clone());
                c.add(key).await;
            } else if roll < 75 {
                for d in c.pop(topic, Some(4)).await {
                    match c.rng.below(10) {
                        0..=4 => c.ack("finish", &d, None).await,
                        5..=6 => {
                            let delay = c.rng.below(500);
                            c.ack("release", &d, Some(delay)).await;
                        }
                        7 => {
                            c.ack("touch", &d, None).await;
                            c.ack("finish", &d, None).await;
                        }
                        // Abandoned: its ttr runs out and it comes back.
                        _ => {}
                    }
                }
            } else if !self.added.is_empty() {
                let key = self.added[c.rng.below(self.added.len() as u64) as usize].clone();
                if roll < 85 {
                    c.cancel(key).await;
                } else {
                    c.get(key).await;
                }
            }
        }
    }
}

fn check(history: &History, settled: bool) {
    let options = CheckOptions {
        require_settled: settled,
        ..CheckOptions::default()
    };
    let violations = history.check(&options);
    assert!(
        violations.is_empty(),
        "{} violations in {} operations: {violations:#?}",
        violations.len(),
        history.events.len()
    );
}

/// Runs the mixed load of four clients through `servers` while `chaos` injects faults, then
/// drains the topics, reads every task back and checks the history with every task settled.
async fn chaos_run(servers: &[&Server], seed: u64, chaos: impl Future<Output = String>) {
    let rec = Arc::new(Recorder::new());
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|n| {
            let mut worker = Worker {
                client: client(n, &rec, servers, seed),
                added: Vec::new(),
            };
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                worker.load(&stop).await;
                worker
            })
        })
        .collect();
    let report = chaos.await;
    stop.store(true, Ordering::Relaxed);
    let mut added = Vec::new();
    for w in workers {
        added.extend(w.await.expect("a client").added);
    }
    let mut drainer = client(99, &rec, servers, seed);
    let busy = drainer.drain(&TOPICS).await;
    for key in &added {
        let mut tries = 0;
        while drainer.get(key.clone()).await.is_none() {
            tries += 1;
            assert!(tries < 50, "cannot read {key} back once the faults ended");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let history = rec.history();
    let counts = history.counts();
    eprintln!(
        "{report}; history {counts:?}; failed or unknown: {:?}",
        history.failures()
    );
    assert!(busy.is_empty(), "the topics did not drain: {busy:?}");
    check(&history, true);
    // The run must have done what it checks.
    let acked = history
        .events
        .iter()
        .filter(|e| e.outcome == Outcome::Ok(Answer::Added { existed: false }))
        .count();
    assert!(acked >= 20, "only {acked} adds were acknowledged");
    assert!(
        counts.deliveries >= 20,
        "only {} deliveries",
        counts.deliveries
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_faults_between_servers_and_redis() {
    let (seed, secs) = (seed(), chaos_secs());
    eprintln!("chaos seed {seed} (DELAYQ_CHAOS_SEED repeats it), {secs} s");
    let dir = TempDir::new().expect("a temp dir");
    let redis = RedisServer::start_with_aof();
    let mut proxies = Vec::new();
    let mut servers = Vec::new();
    for i in 0..3 {
        let proxy = FaultProxy::start(([127, 0, 0, 1], redis.port()).into()).await;
        let url = format!("redis://{}", proxy.addr());
        servers.push(serve(dir.path(), &url, &format!("server-{i}")));
        proxies.push(proxy);
    }
    let proxy_refs: Vec<&FaultProxy> = proxies.iter().collect();
    let server_refs: Vec<&Server> = servers.iter().collect();
    let chaos = async {
        let mut rng = seed;
        let mut injected = BTreeMap::new();
        let until = Instant::now() + Duration::from_secs(secs);
        random_faults(&proxy_refs, until, &mut rng, &mut injected).await;
        for p in &proxies {
            p.heal();
        }
        let resets: u64 = proxies.iter().map(FaultProxy::resets).sum();
        format!("faults injected {injected:?}; proxy resets {resets}")
    };
    chaos_run(&server_refs, seed, chaos).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_faults_between_servers_and_a_proxied_cluster() {
    let (seed, secs) = (seed(), chaos_secs());
    eprintln!("cluster chaos seed {seed} (DELAYQ_CHAOS_SEED repeats it), {secs} s");
    let dir = TempDir::new().expect("a temp dir");
    let cluster = ProxiedCluster::start().await;
    let servers: Vec<Server> = (0..3)
        .map(|i| serve(dir.path(), &cluster.url(), &format!("server-{i}")))
        .collect();
    let proxies: Vec<&FaultProxy> = cluster.proxies().iter().collect();
    let server_refs: Vec<&Server> = servers.iter().collect();
    let chaos = async {
        let mut rng = seed;
        let mut injected = BTreeMap::new();
        let half = Duration::from_secs(secs) / 2;
        random_faults(&proxies, Instant::now() + half, &mut rng, &mut injected).await;
        // A master hands over to its replica (the faults pause, the load goes on).
        let masters = cluster.cluster().masters();
        let old = masters[(rng % masters.len() as u64) as usize];
        let new = tokio::task::block_in_place(|| cluster.fail_over(old));
        random_faults(&proxies, Instant::now() + half, &mut rng, &mut injected).await;
        for p in cluster.proxies() {
            p.heal();
        }
        let resets: u64 = cluster.proxies().iter().map(FaultProxy::resets).sum();
        format!("faults injected {injected:?}; proxy resets {resets}; failover {old} -> {new}")
    };
    chaos_run(&server_refs, seed, chaos).await;
}

/// How many lease buckets each owner holds, read from Redis (the `dq` prefix's
/// `{lease}:bucket:<n>` keys; a value starts with its owner's instance id).
fn lease_owners(redis: &RedisServer) -> HashMap<String, usize> {
    let script = "local v = {} for _, k in ipairs(redis.call('KEYS', ARGV[1])) do \
                  v[#v + 1] = redis.call('GET', k) end return v";
    let out = cli(redis.port(), &["EVAL", script, "0", "dq:{lease}:bucket:*"]);
    let mut owners = HashMap::new();
    for value in out.lines().filter(|l| !l.trim().is_empty()) {
        let owner = value.split(':').next().unwrap_or_default().to_owned();
        *owners.entry(owner).or_insert(0) += 1;
    }
    owners
}

/// Polls `check` every 50 ms (without blocking the runtime) for at most `limit`.
async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if tokio::task::block_in_place(&mut check) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Pops one task of `topic`, trying for up to 10 s.
async fn pop_one(client: &mut Client, topic: &str) -> Delivery {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Some(d) = client.pop(topic, None).await.pop() {
            return d;
        }
    }
    panic!("nothing to pop from {topic} within 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_cut_off_from_redis_is_fenced_while_another_takes_over() {
    let seed = seed();
    let dir = TempDir::new().expect("a temp dir");
    let redis = RedisServer::start_with_aof();
    let pa = FaultProxy::start(([127, 0, 0, 1], redis.port()).into()).await;
    let pb = FaultProxy::start(([127, 0, 0, 1], redis.port()).into()).await;
    let a = serve(dir.path(), &format!("redis://{}", pa.addr()), "a");
    let mut holder = None;
    assert!(
        eventually(Duration::from_secs(10), || {
            let owners = lease_owners(&redis);
            holder = owners.keys().next().cloned();
            owners.len() == 1 && owners.values().sum::<usize>() >= 64
        })
        .await,
        "the only server takes every lease: {:?}",
        lease_owners(&redis)
    );
    let holder = holder.expect("an owner");
    let rec = Arc::new(Recorder::new());
    let mut via_a = client(0, &rec, &[&a], seed);
    // A delivery held through the server about to be cut off, with a short ttr.
    let held = TaskKey::new(TOPICS[0], "held");
    via_a.add_with(held.clone(), 0, 1_000).await;
    let first = pop_one(&mut via_a, TOPICS[0]).await;
    assert_eq!(first.key, held);
    pa.set(Faults::blackhole());
    let b = serve(dir.path(), &format!("redis://{}", pb.addr()), "b");
    let mut via_b = client(1, &rec, &[&b], seed);
    // Tasks come due while the holder is cut off: only a lease holder makes them ready.
    for i in 0..30 {
        let key = TaskKey::new(TOPICS[i % 2], format!("due-{i}"));
        via_b.add_with(key, 300 + 20 * i as u64, 5_000).await;
    }
    assert!(
        eventually(Duration::from_secs(15), || {
            let owners = lease_owners(&redis);
            owners.len() == 1 && !owners.contains_key(&holder)
        })
        .await,
        "the second server takes every lease over: {:?}",
        lease_owners(&redis)
    );
    // The cut-off server is asked meanwhile: whatever it answers is recorded (it cannot
    // reach Redis; its requests wait in the blackhole).
    let late_finish = {
        let mut via_a = client(2, &rec, &[&a], seed);
        let first = first.clone();
        tokio::spawn(async move { via_a.ack("finish", &first, None).await })
    };
    // Everything fires through the second server, the held task again once its ttr ran out.
    let mut delivered: Vec<Delivery> = Vec::new();
    let started = Instant::now();
    while delivered.len() < 31 && started.elapsed() < Duration::from_secs(20) {
        for topic in TOPICS {
            for d in via_b.pop(topic, Some(10)).await {
                via_b.ack("finish", &d, None).await;
                delivered.push(d);
            }
        }
    }
    assert!(
        delivered.len() >= 31,
        "{} of 31 tasks fired while the holder was cut off",
        delivered.len()
    );
    assert!(
        delivered
            .iter()
            .any(|d| d.key == held && d.receipt != first.receipt),
        "the held task came back to the other server once its ttr ran out"
    );
    // The cut-off server comes back: its held requests (ticks and renewals with its old
    // token, the finish with the old receipt) reach Redis late and must change nothing.
    pa.heal();
    late_finish.await.expect("the late finish");
    let mut both = client(3, &rec, &[&a, &b], seed);
    assert!(both.drain(&TOPICS).await.is_empty(), "the topics drain");
    for key in std::iter::once(held)
        .chain((0..30).map(|i| TaskKey::new(TOPICS[i % 2], format!("due-{i}"))))
    {
        assert_eq!(
            both.get(key.clone()).await,
            Some(Answer::Found {
                state: TaskState::Finished
            }),
            "{key}"
        );
    }
    check(&rec.history(), true);
    // The leases spread over both again, with newer tokens.
    assert!(
        eventually(Duration::from_secs(15), || lease_owners(&redis).len() == 2).await,
        "{:?}",
        lease_owners(&redis)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_reply_lost_after_the_write_is_a_503_with_outcome_unknown() {
    let dir = TempDir::new().expect("a temp dir");
    let redis = RedisServer::start_with_aof();
    let pa = FaultProxy::start(([127, 0, 0, 1], redis.port()).into()).await;
    let a = serve(dir.path(), &format!("redis://{}", pa.addr()), "a");
    let b = serve(dir.path(), &redis.url(), "b");
    lost_replies(&a, &b, &[&pa]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_reply_lost_after_the_write_is_a_503_with_outcome_unknown() {
    let dir = TempDir::new().expect("a temp dir");
    let cluster = ProxiedCluster::start().await;
    let a = serve(dir.path(), &cluster.url(), "a");
    let b = serve(dir.path(), &cluster.url(), "b");
    let proxies: Vec<&FaultProxy> = cluster.proxies().iter().collect();
    lost_replies(&a, &b, &proxies).await;
}

/// Adds and a finish through `a` whose write reaches Redis and whose reply is lost on its
/// way back through one of `proxies` (the one that carried it); `b` reads the truth (through
/// the same proxies once healed, or straight).
async fn lost_replies(a: &Server, b: &Server, proxies: &[&FaultProxy]) {
    let seed = seed();
    let rec = Arc::new(Recorder::new());
    let mut via_a = client(0, &rec, &[a], seed);
    let mut via_b = client(1, &rec, &[b], seed);
    let lose_after = |pattern: &str| {
        for p in proxies {
            p.set(Faults::lose_replies_after(pattern));
        }
    };
    let heal = || {
        for p in proxies {
            p.heal();
        }
    };
    // Healthy calls first, on every partition: they load the scripts into Redis (an FCALL of
    // a function Redis does not have writes nothing, whatever becomes of its reply).
    for k in 0..16 {
        via_a
            .add_with(TaskKey::new("lost", format!("warm-{k}")), 0, 5_000)
            .await;
    }
    let mut warmed = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while warmed < 16 && Instant::now() < deadline {
        for d in via_a.pop("lost", Some(16)).await {
            via_a.ack("finish", &d, None).await;
            warmed += 1;
        }
    }
    assert_eq!(warmed, 16, "the warm-up tasks fire");
    // Adds whose write reaches Redis and whose reply is lost (once a request naming the task
    // went through): each must answer 503 with an unknown outcome, never a failure that
    // says nothing happened, and the task is there.
    let mut unknown_and_written = 0;
    let mut seen = Vec::new();
    for k in 0..5 {
        let key = TaskKey::new("lost", format!("add-{k}"));
        lose_after(&key.id);
        let body = json!({"topic": key.topic, "id": key.id, "delay_ms": 60_000, "ttr_ms": 5_000});
        let call = rec.invoke(
            0,
            Op::Add {
                key: key.clone(),
                delay_ms: Some(60_000),
                due_ms: None,
                ttr_ms: Some(5_000),
            },
        );
        let response = via_a
            .http
            .post(format!("{}/add", a.url))
            .json(&body)
            .send()
            .await
            .expect("the server answers");
        let status = response.status().as_u16();
        let retry_after = response.headers().get("retry-after").cloned();
        let envelope: serde_json::Value = response.json().await.expect("a JSON envelope");
        heal();
        let reply = if status == 200 {
            Reply::Ok(envelope["data"].clone())
        } else {
            Reply::Status(status, envelope.clone())
        };
        let outcome = reply.outcome(|data| Answer::Added {
            existed: data["existed"].as_bool().expect("add answers existed"),
        });
        rec.complete(call, outcome.clone());
        let found = via_b.get(key.clone()).await;
        match (&outcome, &found) {
            (Outcome::Failed(why), Some(Answer::Found { .. })) => {
                panic!("{key}: a failure that says nothing happened ({why}), yet it is there")
            }
            (Outcome::Unknown(_), Some(Answer::Found { state })) => {
                assert_eq!(status, 503, "{envelope}");
                assert_eq!(envelope["data"]["outcome"], "unknown", "{envelope}");
                assert_eq!(retry_after.as_ref().map(|v| v.as_bytes()), Some(&b"1"[..]));
                assert_eq!(*state, TaskState::Delayed);
                unknown_and_written += 1;
            }
            _ => {}
        }
        seen.push(format!("{key}: {status} {envelope} / {found:?}"));
        // Let the server's connection come back before the next try.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    eprintln!("adds with lost replies: {seen:#?}");
    assert!(
        unknown_and_written >= 3,
        "too few adds reached Redis with their reply lost: {seen:#?}"
    );

    // A finish whose reply is lost: unknown to the client, done in Redis; the checker
    // allows for it (the task is not delivered again, and reads finished).
    via_a
        .add_with(TaskKey::new("lost", "finish"), 0, 5_000)
        .await;
    let d = pop_one(&mut via_a, "lost").await;
    lose_after(&d.receipt);
    via_a.ack("finish", &d, None).await;
    heal();
    let history = rec.history();
    let finish = history.events.last().expect("the finish");
    assert!(
        matches!(&finish.outcome, Outcome::Unknown(why) if why.starts_with("503")),
        "{:?}",
        finish.outcome
    );
    assert_eq!(
        via_b.get(d.key.clone()).await,
        Some(Answer::Found {
            state: TaskState::Finished
        })
    );
    check(&rec.history(), false);
}
