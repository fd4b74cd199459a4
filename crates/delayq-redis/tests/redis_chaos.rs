//! Chaos between delayq and Redis: three instances (each a backend and a queue in this
//! process) reach one test-started `redis-server` (append-only, fsync always) each through
//! its own [`FaultProxy`], and faults are injected at random under a mixed load of recorded
//! operations; the history checker must find nothing.
//!
//! - `random_faults_under_mixed_load`: for a bounded time (`DELAYQ_CHAOS_SECS`, default 20 s)
//!   a chaos loop puts latency with jitter, a bandwidth limit, a blackhole (half-open
//!   connections), refused connections, lost replies, cuts and replies reset in the middle on
//!   random instances, while four clients add, pop, finish, release, touch, cancel and read
//!   through random instances. Then the faults end, the topics are drained and every
//!   acknowledged task must be settled.
//! - `a_lease_holder_cut_off_from_redis_is_fenced_while_another_takes_over`: the instance
//!   holding every lease is blackholed past its lease, the other takes the leases over and
//!   fires what comes due; then the first one's held requests (ticks with its old token)
//!   reach Redis and must be refused by the fence. Every task is delivered to one holder at
//!   a time, never early.
//! - `a_reply_lost_after_the_write_is_outcome_unknown`: requests reach Redis and their
//!   replies are lost: the caller gets `Outcome::Unknown`, and the change is there.
//!
//! The same against a Redis Cluster ([`ProxiedCluster`]: 3 masters, 3 replicas, a proxy in
//! front of every node, which every node announces as its own address):
//!
//! - `a_cluster_client_reaches_every_node_only_through_its_proxy`: `CLUSTER SLOTS` names
//!   proxies only; with every proxy refusing and cut, every request fails and nothing
//!   arrives; restored, everything goes through.
//! - `random_faults_on_a_proxied_cluster_with_a_failover`: the random faults on random
//!   nodes' proxies under the mixed load of three instances, with a manual failover of a
//!   random master half-way (`CLUSTER FAILOVER` on its replica: lossless; a SIGKILLed master
//!   may lose writes Redis acknowledged before they reached the replica, pops included,
//!   which no `WAIT` covers); the history checker must find nothing.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq::{ErrorKind, NewTask, Outcome as LibOutcome, PopOptions, Queue};
use delayq_conformance::recorded::{
    Chaos, Client, Load, TOPICS, adds_with_lost_replies, chaos_secs, check, seed,
};
use delayq_redis::RedisOptions;
use delayq_testkit::history::{Answer, Outcome, Recorder, TaskKey, TaskState};
use delayq_testkit::{FaultProxy, Faults, ProxiedCluster, cli};
use support::{Instance, RedisServer, eventually, lease_owners};

/// One instance and the proxy it reaches Redis through.
struct Node {
    proxy: FaultProxy,
    instance: Instance,
}

async fn node(server: &RedisServer, lease_ms: u64) -> Node {
    let proxy = FaultProxy::start(([127, 0, 0, 1], server.port()).into()).await;
    let options = RedisOptions::new(format!("redis://{}", proxy.addr()))
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(1))
        .lease_ms(lease_ms);
    let instance = Instance::system(options).await;
    Node { proxy, instance }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_faults_under_mixed_load() {
    let secs = chaos_secs();
    let seed = seed();
    eprintln!("chaos seed {seed} (DELAYQ_CHAOS_SEED repeats it), {secs} s");
    let server = RedisServer::start_with_aof();
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(node(&server, 1_000).await);
    }
    let queues: Arc<Vec<Queue>> =
        Arc::new(nodes.iter().map(|n| n.instance.queue.clone()).collect());
    let load = Load::start(queues, seed);
    let mut chaos = Chaos::new(nodes.iter().map(|n| &n.proxy).collect(), seed);
    chaos.run_for(Duration::from_secs(secs)).await;
    load.stop_and_check(&chaos.heal()).await;
    for n in nodes {
        n.instance.queue.shutdown().await.ok();
    }
}

/// Options of an instance over the proxied cluster: 8 partitions a topic, so that every
/// topic has keys on every master.
fn cluster_options(cluster: &ProxiedCluster) -> RedisOptions {
    RedisOptions::new(cluster.url())
        .partitions(8)
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(1))
        .lease_ms(1_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_client_reaches_every_node_only_through_its_proxy() {
    let cluster = ProxiedCluster::start().await;
    // What the cluster tells clients names the proxies only, never a node's own port.
    let any = cluster.proxies()[0].addr().port();
    let slots = tokio::task::block_in_place(|| cli(any, &["CLUSTER", "SLOTS"]));
    // redis-cli prints each node as its address, port and id on lines of their own.
    let lines: Vec<&str> = slots.lines().map(str::trim).collect();
    let ports: Vec<u16> = lines
        .windows(2)
        .filter(|w| w[0] == "127.0.0.1")
        .filter_map(|w| w[1].parse().ok())
        .collect();
    assert!(!ports.is_empty(), "{slots}");
    for port in &ports {
        assert!(
            cluster.proxy_at(*port).is_some(),
            "CLUSTER SLOTS names {port}, which is no proxy:\n{slots}"
        );
    }
    let instance = Instance::system(cluster_options(&cluster)).await;
    let q = &instance.queue;
    let add = |id: String| q.add(NewTask::new("reach", id).delay_ms(60_000));
    for k in 0..32 {
        add(format!("before-{k}")).await.expect("a healthy add");
    }
    // The tasks of the 8 partitions live on all three masters: the client went to each
    // through its proxy.
    for master in cluster.master_proxies() {
        let proxy = cluster.proxy_at(master.port()).expect("a proxy");
        assert!(proxy.accepted() > 0, "no connection through {master}");
    }
    // Every proxy refuses and resets: no request may succeed, there is no other route.
    for proxy in cluster.proxies() {
        proxy.set(Faults::refuse());
        proxy.cut();
    }
    // A request already on its way through a proxy when it cut may have reached Redis: its
    // error says so (outcome unknown), and only the others must be absent afterwards.
    let mut not_applied = Vec::new();
    for k in 0..16 {
        let id = format!("cut-{k}");
        let added = add(id.clone()).await;
        match added {
            Ok(_) => panic!("{id} was added with every proxy cut"),
            Err(e) if e.outcome() == LibOutcome::NotApplied => not_applied.push(id.clone()),
            Err(_) => {}
        }
        assert!(
            q.get("reach", &id).await.is_err(),
            "a get with every proxy cut"
        );
    }
    assert!(
        q.stats("reach").await.is_err(),
        "stats with every proxy cut"
    );
    // Restored: every request goes through again, and nothing sent while cut arrived.
    for proxy in cluster.proxies() {
        proxy.heal();
    }
    assert!(
        eventually(Duration::from_secs(20), || async {
            q.stats("reach").await.is_ok()
        })
        .await,
        "the client is back once the proxies are"
    );
    for k in 0..32 {
        let id = format!("after-{k}");
        let mut tries = 0;
        while add(id.clone()).await.is_err() {
            tries += 1;
            assert!(tries < 50, "{id} cannot be added once the proxies are back");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // A request written on a connection the proxy then resets is "outcome unknown" too, so
    // some of them may be; the promise checked is that none refused as not applied is there.
    assert!(!not_applied.is_empty(), "no add was refused as not applied");
    for id in &not_applied {
        let found = q.get("reach", id).await;
        assert!(
            matches!(&found, Err(e) if e.kind() == ErrorKind::NotFound),
            "{id}, refused as not applied while every proxy refused, is there: {found:?}"
        );
    }
    let stats = q.stats("reach").await.expect("stats");
    let unknown = 16 - not_applied.len() as u64;
    assert!((64..=64 + unknown).contains(&stats.delayed), "{stats:?}");
    q.shutdown().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_faults_on_a_proxied_cluster_with_a_failover() {
    let secs = chaos_secs();
    let seed = seed();
    eprintln!("cluster chaos seed {seed} (DELAYQ_CHAOS_SEED repeats it), {secs} s");
    let cluster = ProxiedCluster::start().await;
    let mut instances = Vec::new();
    for _ in 0..3 {
        instances.push(Instance::system(cluster_options(&cluster)).await);
    }
    let queues: Arc<Vec<Queue>> = Arc::new(instances.iter().map(|i| i.queue.clone()).collect());
    let load = Load::start(queues, seed);
    let mut chaos = Chaos::new(cluster.proxies().iter().collect(), seed);
    let half = Duration::from_secs(secs) / 2;
    chaos.run_for(half).await;
    // Half-way, a master hands over to its replica (the faults pause meanwhile; the load
    // goes on): the clients must follow the redirects, through the proxies.
    let masters = cluster.cluster().masters();
    let old = masters[chaos.rng.below(masters.len() as u64) as usize];
    let new = tokio::task::block_in_place(|| cluster.fail_over(old));
    eprintln!("failed over the master on {old} to {new}");
    chaos.run_for(half).await;
    let report = chaos.heal();
    load.stop_and_check(&format!("{report}; failover {old} -> {new}"))
        .await;
    for i in instances {
        i.queue.shutdown().await.ok();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_holder_cut_off_from_redis_is_fenced_while_another_takes_over() {
    let server = RedisServer::start_with_aof();
    let a = node(&server, 1_000).await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            lease_owners(&server).get(a.instance.storage.instance_id()) == Some(&64)
        })
        .await,
        "the first instance takes every lease: {:?}",
        lease_owners(&server)
    );
    // Tasks come due while the holder is cut off: only a lease holder can make them ready.
    let rec = Arc::new(Recorder::new());
    let b = node(&server, 1_000).await;
    let mut client = Client::new(
        0,
        Arc::clone(&rec),
        Arc::new(vec![b.instance.queue.clone()]),
        seed(),
    );
    a.proxy.set(Faults::blackhole());
    for i in 0..40 {
        let topic = TOPICS[i % 2];
        client
            .add(
                TaskKey::new(topic, format!("lease-{i}")),
                300 + (i as u64) * 20,
                2_000,
            )
            .await;
    }
    // The holder cannot renew: its leases run out and the other instance takes them.
    assert!(
        eventually(Duration::from_secs(10), || async {
            lease_owners(&server).get(b.instance.storage.instance_id()) == Some(&64)
        })
        .await,
        "the other instance takes the leases over: {:?}",
        lease_owners(&server)
    );
    let mut delivered = 0;
    let started = Instant::now();
    while delivered < 20 && started.elapsed() < Duration::from_secs(15) {
        for topic in TOPICS {
            for d in client.pop(topic, 10, 200).await {
                delivered += 1;
                client.finish(&d).await;
            }
        }
    }
    assert!(
        delivered >= 20,
        "only {delivered} tasks fired while the holder was cut off"
    );
    // The cut-off holder comes back: whatever it sent meanwhile reaches Redis now, late,
    // with its old lease token, and must change nothing.
    a.proxy.heal();
    client.queues = Arc::new(vec![a.instance.queue.clone(), b.instance.queue.clone()]);
    assert!(
        client.drain(Duration::from_secs(20)).await,
        "the topics drain"
    );
    for key in client.added.clone() {
        assert_eq!(
            client.get(key.clone()).await,
            Some(Answer::Found {
                state: TaskState::Finished
            }),
            "{key}"
        );
    }
    check(&rec.history(), true);
    // The leases spread over both again, with newer tokens.
    assert!(
        eventually(Duration::from_secs(10), || async {
            lease_owners(&server).len() == 2
        })
        .await,
        "{:?}",
        lease_owners(&server)
    );
    a.instance.queue.shutdown().await.ok();
    b.instance.queue.shutdown().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_lost_after_the_write_is_outcome_unknown() {
    let server = RedisServer::start_with_aof();
    let a = node(&server, 1_000).await;
    let b = node(&server, 1_000).await;
    let rec = Arc::new(Recorder::new());
    let mut client = Client::new(
        0,
        Arc::clone(&rec),
        Arc::new(vec![a.instance.queue.clone()]),
        seed(),
    );

    // Adds whose write reaches Redis and whose reply is lost (the proxy loses replies once a
    // request naming the task went through): each must say its outcome is unknown, and the
    // task is there. A failure that says nothing happened must be true.
    // A first add loads the scripts into Redis: an FCALL of a function Redis does not have
    // writes nothing, whatever becomes of its reply.
    a.instance
        .queue
        .add(NewTask::new("lost", "warm-up"))
        .await
        .expect("a healthy add");
    let ids: Vec<String> = (0..5).map(|k| format!("one-{k}")).collect();
    let (unknown_and_written, attempts) = adds_with_lost_replies(
        &a.instance.queue,
        &b.instance.queue,
        "lost",
        &ids,
        |id| a.proxy.set(Faults::lose_replies_after(id)),
        || a.proxy.heal(),
    )
    .await;
    eprintln!("adds with lost replies: {attempts:#?}");
    assert!(
        unknown_and_written >= 3,
        "too few adds reached Redis with their reply lost: {attempts:#?}"
    );

    // The same through the recorder, with a finish (after one healthy finish, which loads
    // its script): every unknown is allowed for.
    for id in ["warm-finish", "two"] {
        client.add(TaskKey::new("finish", id), 0, 5_000).await;
    }
    let d = client.pop("finish", 1, 2_000).await;
    assert_eq!(d.len(), 1, "the task fires");
    client.finish(&d[0]).await;
    let d = client.pop("finish", 1, 2_000).await;
    assert_eq!(d.len(), 1, "the task fires");
    a.proxy
        .set(Faults::lose_replies_after(d[0].receipt.clone()));
    client.finish(&d[0]).await;
    let events = rec.history().events;
    let finish = events.last().expect("the finish");
    assert!(
        matches!(finish.outcome, Outcome::Unknown(_)),
        "{:?}",
        finish.outcome
    );
    a.proxy.heal();
    client.queues = Arc::new(vec![b.instance.queue.clone()]);
    assert_eq!(
        client.get(d[0].key.clone()).await,
        Some(Answer::Found {
            state: TaskState::Finished
        })
    );
    // A reply cut in the middle: the connection is reset, the next request goes through.
    a.proxy.reset_next_reply();
    let cut = a.instance.queue.get("finish", "two").await;
    if let Err(e) = &cut {
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    }
    assert!(a.proxy.resets() >= 2, "resets {}", a.proxy.resets());
    assert!(
        eventually(Duration::from_secs(5), || async {
            a.instance.queue.get("finish", "two").await.is_ok()
        })
        .await
    );
    check(&rec.history(), false);
    a.instance.queue.shutdown().await.ok();
    b.instance.queue.shutdown().await.ok();
}

/// Puts `faults` on every proxy of `cluster` until one of them resets a connection, then
/// heals them all: the fault happens once, and whatever is sent next goes through.
async fn once(cluster: &ProxiedCluster, faults: Faults) -> impl Future<Output = ()> + '_ {
    let resets = || {
        cluster
            .proxies()
            .iter()
            .map(FaultProxy::resets)
            .sum::<u64>()
    };
    let before = resets();
    for p in cluster.proxies() {
        p.set(faults.clone());
    }
    async move {
        assert!(
            eventually(Duration::from_secs(5), || async { resets() > before }).await,
            "no proxy reset a connection"
        );
        for p in cluster.proxies() {
            p.heal();
        }
    }
}

/// Regression: redis-rs's cluster client resent a command whose connection dropped after it
/// was sent, so a script whose reply was lost ran twice and answered for the second run: an
/// add "already exists" (a definite 409 for an add that did happen), a release a conflict
/// with its own receipt. A reply lost once must leave the outcome unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_reply_lost_once_is_not_resent_into_a_wrong_answer() {
    let cluster = ProxiedCluster::start().await;
    let instance = Instance::system(cluster_options(&cluster)).await;
    let q = instance.queue.clone();
    // Warm the scripts up on every master.
    for k in 0..32 {
        q.add(NewTask::new("once", format!("warm-{k}")).ttr_ms(60_000))
            .await
            .expect("a healthy add");
    }
    let mut unknown = 0;
    let mut seen = Vec::new();
    for k in 0..5 {
        let id = format!("add-{k}");
        let healed = once(&cluster, Faults::lose_replies_after(id.clone())).await;
        let add = q.add(NewTask::new("once", &id).delay_ms(60_000));
        let (result, ()) = tokio::join!(add, healed);
        let found = q.get("once", &id).await;
        seen.push(format!(
            "{id}: {result:?} / {:?}",
            found.as_ref().map(|t| t.state)
        ));
        match &result {
            Err(e) if e.outcome() == LibOutcome::Unknown => unknown += 1,
            Err(e) => assert!(
                found.is_err(),
                "{id}: a definite failure ({e}), yet the add took effect: {found:?}"
            ),
            Ok(_) => {}
        }
    }
    eprintln!("{seen:#?}");
    assert!(unknown >= 3, "too few adds lost their reply: {seen:#?}");
    // A release whose reply is lost once: never a conflict with its own receipt. (Every
    // warm-up task is released once first, which loads the release script on every master.)
    let all = q
        .pop("once", PopOptions::default().count(32).timeout_ms(2_000))
        .await
        .expect("a pop");
    assert_eq!(all.len(), 32, "the warm-up tasks are ready");
    for d in &all {
        let options = delayq::ReleaseOptions::default().receipt(d.receipt.clone());
        q.release(&d.topic, &d.id, options)
            .await
            .expect("a healthy release");
    }
    let held = q
        .pop("once", PopOptions::default().count(3).timeout_ms(2_000))
        .await
        .expect("a pop");
    assert_eq!(held.len(), 3, "the warm-up tasks are ready again");
    for d in &held {
        let healed = once(&cluster, Faults::lose_replies_after(d.receipt.clone())).await;
        let options = delayq::ReleaseOptions::default()
            .receipt(d.receipt.clone())
            .delay_ms(60_000);
        let release = q.release(&d.topic, &d.id, options);
        let (result, ()) = tokio::join!(release, healed);
        let state = q.get(&d.topic, &d.id).await.expect("a get").state;
        assert_eq!(state, delayq::State::Delayed, "{}: {result:?}", d.id);
        if let Err(e) = &result {
            assert_eq!(e.outcome(), LibOutcome::Unknown, "{}: {e}", d.id);
        }
    }
    // A reply cut in the middle is a connection failure: unavailable (a 503), its outcome
    // unknown, never a storage failure (a 500). redis-rs's async reader reports it as a parse
    // error; it was hidden by the resend before.
    let mut cut = Vec::new();
    for k in 0..5 {
        for p in cluster.proxies() {
            p.reset_next_reply();
        }
        if let Err(e) = q.get("once", &format!("add-{k}")).await {
            assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
            assert_eq!(e.outcome(), LibOutcome::Unknown, "{e}");
            cut.push(e.to_string());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!cut.is_empty(), "no reply was cut");
    q.shutdown().await.ok();
}
