//! Concurrent consumers of one topic share transactions (`src/consume.rs`): fewer
//! transactions than calls, and every caller gets its own outcome as if the calls ran one
//! after the other (`delayq_conformance::consumers`: no task handed out twice, a finish with
//! a stale receipt or of a task finished already refused, and its ack-and-next popping
//! nothing), flow limits bounding each pop in turn.

mod support;

use std::collections::{HashMap, HashSet};

use delayq::{Delivery, FlowLimits, NewTask, PopOptions, Queue};
use delayq_postgres::tokio_postgres::Client;
use delayq_testkit::PostgresServer;
use futures_util::future::join_all;

use support::{connect, instance_of};

/// How many transactions that wrote (or locked a row, or notified) the server began: each
/// takes a transaction id, and the snapshot's `xmax` is one past the newest one completed
/// (read while none is running, the next one to be given). Reading it takes none.
async fn transactions(client: &Client) -> u64 {
    let xmax: i64 = client
        .query_one(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint",
            &[],
        )
        .await
        .expect("read the snapshot's xmax")
        .get(0);
    xmax as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_consumers_share_transactions_and_keep_their_own_outcomes() {
    let pg = PostgresServer::start();
    let q = instance_of(&pg.url(), 16).await;
    let client = connect(&pg.url()).await;
    delayq_conformance::consumers::share_rounds_and_keep_their_own_outcomes(
        &q,
        "transactions",
        || transactions(&client),
    )
    .await;
}

/// Many pops at once on topics with limits, some of them `auto_finish`: each pop of a round
/// is bounded by what the pops before it took, as if it ran alone after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_limits_bound_each_pop_of_a_round_in_turn() {
    let pg = PostgresServer::start();
    let q = instance_of(&pg.url(), 16).await;

    // max_active 5: forty concurrent pops of two hand out five, whatever the rounds.
    limited_topic(&q, "capped", FlowLimits::max_active(5), 100, |_| None).await;
    let got = pop_all(&q, "capped", 40, |_| PopOptions::default().count(2)).await;
    assert_eq!(got.len(), 5, "{got:?}");
    assert_eq!(q.stats("capped").await.unwrap().active, 5);

    // max_active_per_key 2 over four keys: thirty concurrent pops of one take two of each.
    let limits = FlowLimits::default().with_max_active_per_key(2);
    limited_topic(&q, "keyed", limits, 80, |k| Some(format!("key-{}", k % 4))).await;
    let got = pop_all(&q, "keyed", 30, |_| PopOptions::default()).await;
    assert_eq!(got.len(), 8, "{got:?}");
    let mut per_key: HashMap<String, usize> = HashMap::new();
    for d in &got {
        let key = q.get("keyed", &d.id).await.unwrap().key.unwrap();
        *per_key.entry(key).or_default() += 1;
    }
    assert!(per_key.values().all(|&n| n == 2), "{per_key:?}");

    // A rate of one a thousand seconds with a burst of 5: thirty concurrent pops take five.
    let limits = FlowLimits::default().with_rate(0.001, Some(5));
    limited_topic(&q, "rated", limits, 50, |_| None).await;
    let got = pop_all(&q, "rated", 30, |_| PopOptions::default()).await;
    assert_eq!(got.len(), 5, "{got:?}");

    // max_active 3, every other pop auto_finish: a task finished as it is handed out holds
    // no slot for the pops after it. The pops join the topic's queue in the order join_all
    // first polls them (0, 1, 2, ...), so one after the other they go: 0 (auto) finishes
    // two, 1 takes two, 2 (auto) finishes the one left of the three, 3 takes it, the rest
    // get nothing; however the calls are cut into rounds.
    limited_topic(&q, "mixed", FlowLimits::max_active(3), 200, |_| None).await;
    let options = |k: usize| {
        PopOptions::default()
            .count(2)
            .auto_finish(k.is_multiple_of(2))
    };
    let got = pop_all(&q, "mixed", 40, options).await;
    let stats = q.stats("mixed").await.unwrap();
    assert_eq!((stats.finished, stats.active), (3, 3), "{stats:?}");
    assert_eq!(got.len(), 6);
}

/// Gives `topic` `limits` and `tasks` ready tasks, the k-th with the key `key(k)`.
async fn limited_topic(
    q: &Queue,
    topic: &str,
    limits: FlowLimits,
    tasks: usize,
    key: impl Fn(usize) -> Option<String>,
) {
    q.set_limits(topic, limits).await.unwrap();
    let tasks: Vec<NewTask> = (0..tasks)
        .map(|k| {
            let task = NewTask::new(topic, format!("{topic}-{k}"));
            match key(k) {
                Some(key) => task.key(key),
                None => task,
            }
        })
        .collect();
    q.add_batch(tasks).await.unwrap();
}

/// `pops` concurrent pops of `topic` with `options(k)`: every task they got, each once.
async fn pop_all(
    q: &Queue,
    topic: &str,
    pops: usize,
    options: impl Fn(usize) -> PopOptions,
) -> Vec<Delivery> {
    let calls = (0..pops).map(|k| {
        let options = options(k);
        async move {
            let got = q.pop(topic, options.timeout_ms(0)).await.unwrap();
            assert!(got.len() <= options.count, "a pop took more than it asked");
            got
        }
    });
    let got: Vec<Delivery> = join_all(calls).await.into_iter().flatten().collect();
    let ids: HashSet<&str> = got.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids.len(), got.len(), "a task handed out twice");
    got
}
