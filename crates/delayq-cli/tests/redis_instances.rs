//! Several `delayq serve --redis` processes on one Redis (docs/design.md §4): none is special. Tasks
//! added through any instance fire and are taken through any, a ttr expiry redelivers to
//! another instance, and when an instance is SIGKILLed its promotion leases are taken over
//! within about a second, losing nothing and duplicating nothing.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use delayq_client::{Ack, Client, NewTask, PopOptions};
use delayq_testkit::{RedisCluster, RedisServer};
use support::Server;

fn instances(redis: &RedisServer, n: usize) -> Vec<Server> {
    (0..n)
        .map(|_| Server::start_with(&["--redis", &redis.url()]))
        .collect()
}

fn client(server: &Server) -> Client {
    Client::new(&server.url, None).expect("client")
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Pops `topic` through every client in turn until `want` tasks arrived or `limit` passed;
/// returns how often each id was delivered and the latest lateness seen.
async fn drain(
    clients: &[Client],
    topic: &str,
    want: usize,
    poll_ms: u64,
    limit: Duration,
) -> (BTreeMap<String, usize>, u64) {
    let mut seen = BTreeMap::new();
    let mut worst = 0;
    let start = Instant::now();
    let mut turn = 0;
    while seen.values().sum::<usize>() < want && start.elapsed() < limit {
        let c = &clients[turn % clients.len()];
        turn += 1;
        let got = c
            .pop(topic, PopOptions::default().count(50).timeout_ms(poll_ms))
            .await
            .expect("pop");
        let now = now_ms();
        for d in got {
            assert!(
                now >= d.due_ms,
                "{} handed out {} ms early",
                d.id,
                d.due_ms - now
            );
            worst = worst.max(now - d.due_ms);
            // Finish through another instance than the one that handed it out.
            let other = &clients[turn % clients.len()];
            other
                .finish(topic, &d.id, Some(&d.receipt))
                .await
                .expect("finish through another instance");
            *seen.entry(d.id).or_insert(0) += 1;
        }
    }
    (seen, worst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_added_through_any_instance_fire_and_are_taken_through_any() {
    let redis = RedisServer::start();
    let servers = instances(&redis, 3);
    let clients: Vec<Client> = servers.iter().map(client).collect();
    for i in 0..60 {
        let task = NewTask::new("orders", format!("o{i}"))
            .delay_ms(300 + (i % 7) * 50)
            .ttr_ms(60_000);
        clients[i as usize % 3].add(&task).await.expect("add");
    }
    let (seen, _) = drain(&clients, "orders", 60, 200, Duration::from_secs(30)).await;
    assert_eq!(seen.len(), 60, "every task arrived: {seen:?}");
    assert!(seen.values().all(|&n| n == 1), "none twice: {seen:?}");
    for c in &clients {
        assert_eq!(
            c.stats("orders").await.unwrap().finished,
            60,
            "every instance sees the same queue"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttr_expiry_redelivers_through_another_instance() {
    let redis = RedisServer::start();
    let servers = instances(&redis, 2);
    let (a, b) = (client(&servers[0]), client(&servers[1]));
    a.add(&NewTask::new("jobs", "j1").ttr_ms(500))
        .await
        .unwrap();
    let first = a
        .pop("jobs", PopOptions::default().timeout_ms(5_000))
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    // A never finishes; B long-polls and gets it back after the ttr, with a new receipt.
    let again = b
        .pop("jobs", PopOptions::default().timeout_ms(10_000))
        .await
        .unwrap();
    assert_eq!(again.len(), 1, "redelivered within the long-poll");
    assert_eq!((again[0].id.as_str(), again[0].retries), ("j1", 1));
    assert_ne!(again[0].receipt, first[0].receipt);
    let stale = a
        .finish("jobs", "j1", Some(&first[0].receipt))
        .await
        .unwrap_err();
    assert_eq!(stale.status(), Some(409), "{stale}");
    b.finish("jobs", "j1", Some(&again[0].receipt))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_instance_has_its_leases_taken_over() {
    let redis = RedisServer::start();
    let mut servers = instances(&redis, 3);
    let clients: Vec<Client> = servers.iter().map(client).collect();
    // Let the instances spread the leases between them.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let due = now_ms() + 2_500;
    // One task per topic, each with its own parked consumer: a task in a partition whose lease
    // died with the instance can only fire once a survivor has taken the lease over (a pop
    // that is woken for another task of the same topic would otherwise sweep it up).
    let topics: Vec<String> = (0..30).map(|i| format!("solo.{i}")).collect();
    for (i, topic) in topics.iter().enumerate() {
        let task = NewTask::new(topic.as_str(), "x")
            .run_at_ms(due)
            .ttr_ms(60_000);
        clients[i % 3].add(&task).await.expect("add");
    }
    let survivors = [client(&servers[0]), client(&servers[2])];
    let mut waiting = Vec::new();
    for topic in topics.clone() {
        let survivors = survivors.clone();
        waiting.push(tokio::spawn(async move {
            drain(&survivors, &topic, 1, 15_000, Duration::from_secs(30)).await
        }));
    }
    // Kill one instance just before the tasks are due, while it holds its share of leases.
    let kill_at = due - 100;
    tokio::time::sleep(Duration::from_millis(kill_at.saturating_sub(now_ms()))).await;
    servers[1].kill9();
    let mut worst = 0;
    let mut late_ones = 0;
    for (topic, handle) in topics.iter().zip(waiting) {
        let (seen, late) = handle.await.unwrap();
        assert_eq!(
            seen.get("x"),
            Some(&1),
            "{topic}: the task arrived once: {seen:?}"
        );
        if late > 200 {
            late_ones += 1;
        }
        worst = worst.max(late);
    }
    eprintln!("{late_ones} of 30 tasks waited for a lease takeover");
    // The killed instance held about a third of the leases; if no task waited, this test did
    // not exercise a takeover at all ((2/3)^30 odds).
    assert!(
        late_ones > 0,
        "no task depended on the killed instance's leases"
    );
    eprintln!("worst lateness after the SIGKILL: {worst} ms");
    // About a second of lease takeover plus polling: a generous bound, not a speed check.
    assert!(worst < 10_000, "tasks fired {worst} ms late");
}

/// Consumers on one instance loop "ack and take the next" (each pop carries the finish of the
/// task popped before) while tasks are added through another: every task arrives once, never
/// before its due, and every finish rode on a pop with the receipt it was handed out with.
async fn ack_and_next_across_instances(producer: &Client, consumer: &Client, topic: &str) {
    const TASKS: u64 = 300;
    let base = now_ms() + 300;
    let tasks: Vec<NewTask> = (0..TASKS)
        .map(|i| {
            NewTask::new(topic, format!("t{i}"))
                .run_at_ms(base + i * 3)
                .ttr_ms(60_000)
        })
        .collect();
    for item in producer.add_batch(&tasks).await.expect("add") {
        assert!(item.is_ok(), "{item:?}");
    }
    let mut consumers = Vec::new();
    for _ in 0..8 {
        let (c, topic) = (consumer.clone(), topic.to_owned());
        consumers.push(tokio::spawn(async move {
            let mut seen: Vec<(String, u64)> = Vec::new();
            let mut held: Option<(String, String)> = None;
            let options = PopOptions::default().timeout_ms(1_500);
            loop {
                let got = match &held {
                    Some((id, receipt)) => {
                        let finish = Ack::Finish {
                            topic: &topic,
                            id,
                            receipt: Some(receipt),
                        };
                        c.pop_after(finish, &topic, options).await
                    }
                    None => c.pop(&topic, options).await,
                }
                .expect("pop carrying the last finish");
                let now = now_ms();
                let Some(task) = got.into_iter().next() else {
                    return seen;
                };
                assert!(
                    now >= task.due_ms,
                    "{} handed out {} ms early",
                    task.id,
                    task.due_ms - now
                );
                seen.push((task.id.clone(), now - task.due_ms));
                held = Some((task.id, task.receipt));
            }
        }));
    }
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    let mut late = Vec::new();
    for handle in consumers {
        for (id, lateness) in handle.await.expect("consumer") {
            *count.entry(id).or_insert(0) += 1;
            late.push(lateness);
        }
    }
    assert_eq!(count.len() as u64, TASKS, "every task arrived");
    assert!(count.values().all(|&n| n == 1), "none twice: {count:?}");
    late.sort_unstable();
    eprintln!(
        "lateness through the other instance: p50 {} ms, max {} ms",
        late[late.len() / 2],
        late[late.len() - 1]
    );
    // Every finish rode on a pop: the producer's instance sees them all finished.
    let stats = producer.stats(topic).await.expect("stats");
    assert_eq!((stats.finished, stats.active), (TASKS, 0), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_and_next_consumers_on_another_instance() {
    let redis = RedisServer::start();
    let servers = instances(&redis, 2);
    let (a, b) = (client(&servers[0]), client(&servers[1]));
    ack_and_next_across_instances(&a, &b, "orders").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_and_next_consumers_on_another_instance_over_a_cluster() {
    let cluster = RedisCluster::start_masters_only();
    let servers: Vec<Server> = (0..2)
        .map(|_| Server::start_with(&["--redis", &cluster.url()]))
        .collect();
    let (a, b) = (client(&servers[0]), client(&servers[1]));
    ack_and_next_across_instances(&a, &b, "orders").await;
}
