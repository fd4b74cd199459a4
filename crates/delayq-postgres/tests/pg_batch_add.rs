//! The batched add (migration 3, issue 28 item 5): `enqueue_batch` answers, writes and
//! notifies what calling `enqueue` once a task, in batch order, does. Both run from the same
//! rows in two schemas of one database (`pa` takes the batch, `pb` the calls one by one, each
//! in a transaction of its own), and the answers, the rows (every column, the insertion order
//! `seq` by rank) and the notices are compared: for a batch that mixes every case, with its
//! answers written out, then for random batches. Last, the instance's add of a batch wakes
//! parked pops here and on another instance, and its delayed tasks come due on time.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use delayq::{Clock, NewTask, SystemClock};
use delayq_postgres::schema;
use delayq_postgres::tokio_postgres::types::ToSql;
use delayq_postgres::tokio_postgres::{self, AsyncMessage, Client, NoTls};
use delayq_testkit::PostgresServer;
use futures_util::StreamExt;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};
use tokio::sync::mpsc;

mod support;
use support::{instance_of, parked_pop};

/// The batch's `now`: the functions take it as an argument, so both sides see the same.
const NOW: i64 = 1_800_000_000_000;

/// One task of a batch: `enqueue`'s arguments, the times as offsets from [`NOW`].
#[derive(Debug, Clone)]
struct Add {
    policy: i16,
    topic: String,
    id: String,
    body: Vec<u8>,
    priority: i64,
    due: i64,
    ttr: i64,
    max_retries: i64,
    expires: Option<i64>,
    on_expire: i16,
    key: Option<String>,
    trace: Option<Value>,
    extra: Option<Value>,
}

impl Add {
    fn new(policy: i16, topic: &str, id: &str, due: i64) -> Add {
        Add {
            policy,
            topic: topic.into(),
            id: id.into(),
            body: id.as_bytes().to_vec(),
            priority: 1024,
            due,
            ttr: 30_000,
            max_retries: 3,
            expires: None,
            on_expire: 0,
            key: None,
            trace: None,
            extra: None,
        }
    }
}

/// A row in the table before the batch.
#[derive(Debug, Clone)]
struct Existing {
    topic: String,
    id: String,
    state: i16,
    due: i64,
}

/// One outcome, new state and due.
type Answer = (i16, i16, i64);

/// A connection that writes, and the notices a second one hears on both schemas' channels.
struct Db {
    client: Client,
    _listener: Client,
    notices: mpsc::UnboundedReceiver<(String, String)>,
}

async fn connect(
    pg: &PostgresServer,
) -> (
    Client,
    tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
) {
    tokio_postgres::connect(&pg.url(), NoTls).await.unwrap()
}

async fn setup(pg: &PostgresServer) -> Db {
    let (mut client, conn) = connect(pg).await;
    tokio::spawn(conn);
    for s in ["pa", "pb"] {
        schema::migrate(&mut client, s).await.unwrap();
    }
    let (listener, mut conn) = connect(pg).await;
    let (send, notices) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notification(n) = message {
                let _ = send.send((n.channel().to_owned(), n.payload().to_owned()));
            }
        }
    });
    listener
        .batch_execute("LISTEN pa_events; LISTEN pb_events")
        .await
        .unwrap();
    Db {
        client,
        _listener: listener,
        notices,
    }
}

/// `enqueue`'s arguments after `now` and the sender, as arrays (`enqueue_batch`) or one
/// task's values.
struct Columns {
    policy: Vec<i16>,
    topic: Vec<String>,
    id: Vec<String>,
    body: Vec<Vec<u8>>,
    priority: Vec<i64>,
    due: Vec<i64>,
    created: Vec<i64>,
    ttr: Vec<i64>,
    max_retries: Vec<i64>,
    expires: Vec<Option<i64>>,
    on_expire: Vec<i16>,
    key: Vec<Option<String>>,
    trace: Vec<Option<Value>>,
    extra: Vec<Option<Value>>,
}

impl Columns {
    fn of(adds: &[Add]) -> Columns {
        let col = |f: fn(&Add) -> i64| adds.iter().map(f).collect::<Vec<_>>();
        Columns {
            policy: adds.iter().map(|a| a.policy).collect(),
            topic: adds.iter().map(|a| a.topic.clone()).collect(),
            id: adds.iter().map(|a| a.id.clone()).collect(),
            body: adds.iter().map(|a| a.body.clone()).collect(),
            priority: col(|a| a.priority),
            due: col(|a| NOW + a.due),
            created: col(|_| NOW - 7),
            ttr: col(|a| a.ttr),
            max_retries: col(|a| a.max_retries),
            expires: adds.iter().map(|a| a.expires.map(|e| NOW + e)).collect(),
            on_expire: adds.iter().map(|a| a.on_expire).collect(),
            key: adds.iter().map(|a| a.key.clone()).collect(),
            trace: adds.iter().map(|a| a.trace.clone()).collect(),
            extra: adds.iter().map(|a| a.extra.clone()).collect(),
        }
    }
}

const ARGS: &str = "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16";

/// The rows of `existing` in schema `s` (the same order in both, so the same `seq` ranks).
async fn lay_out(client: &Client, s: &str, existing: &[Existing]) {
    client
        .batch_execute(&format!("TRUNCATE {s}.tasks"))
        .await
        .unwrap();
    for e in existing {
        client
            .execute(
                &format!(
                    "INSERT INTO {s}.tasks (topic, id, state, priority, due_ms, deadline_ms, \
                     updated_at_ms, created_at_ms, receipt, retries, ttr_ms, max_retries, \
                     body) VALUES ($1, $2, $3::smallint, 5, $4, CASE WHEN $3::smallint IN (2, 3, 4) \
                     THEN $5::bigint ELSE 0 END, $5, $5, CASE WHEN $3::smallint = 2 THEN 'rcpt' END, \
                     1, 1000, 0, 'old')"
                ),
                &[&e.topic, &e.id, &e.state, &(NOW + e.due), &(NOW - 1_000)],
            )
            .await
            .unwrap();
    }
}

/// `pa.enqueue_batch` of `c`.
async fn enqueue_batch(
    client: &Client,
    sender: Option<&str>,
    c: &Columns,
) -> Result<tokio_postgres::Row, tokio_postgres::Error> {
    client
        .query_one(
            &format!("SELECT outcomes, new_states, dues FROM pa.enqueue_batch({ARGS})"),
            &[
                &NOW,
                &sender,
                &c.policy,
                &c.topic,
                &c.id,
                &c.body,
                &c.priority,
                &c.due,
                &c.created,
                &c.ttr,
                &c.max_retries,
                &c.expires,
                &c.on_expire,
                &c.key,
                &c.trace,
                &c.extra,
            ],
        )
        .await
}

/// `enqueue_batch` in schema pa, in a transaction of its own.
async fn batch(client: &Client, sender: Option<&str>, adds: &[Add]) -> Vec<Answer> {
    client.batch_execute("BEGIN").await.unwrap();
    let row = enqueue_batch(client, sender, &Columns::of(adds))
        .await
        .unwrap();
    client.batch_execute("COMMIT").await.unwrap();
    let (o, s, d): (Vec<i16>, Vec<i16>, Vec<i64>) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(
        (o.len(), s.len(), d.len()),
        (adds.len(), adds.len(), adds.len())
    );
    o.into_iter()
        .zip(s)
        .zip(d)
        .map(|((o, s), d)| (o, s, d))
        .collect()
}

/// `enqueue` once a task in order in schema pb, in one transaction.
async fn one_by_one(client: &Client, sender: Option<&str>, adds: &[Add]) -> Vec<Answer> {
    let c = Columns::of(adds);
    let st = client
        .prepare(&format!(
            "SELECT outcome, new_state, due FROM pb.enqueue({ARGS})"
        ))
        .await
        .unwrap();
    client.batch_execute("BEGIN").await.unwrap();
    let mut answers = Vec::new();
    for i in 0..adds.len() {
        let args: [&(dyn ToSql + Sync); 16] = [
            &NOW,
            &sender,
            &c.policy[i],
            &c.topic[i],
            &c.id[i],
            &c.body[i],
            &c.priority[i],
            &c.due[i],
            &c.created[i],
            &c.ttr[i],
            &c.max_retries[i],
            &c.expires[i],
            &c.on_expire[i],
            &c.key[i],
            &c.trace[i],
            &c.extra[i],
        ];
        let row = client.query_one(&st, &args).await.unwrap();
        answers.push((row.get(0), row.get(1), row.get(2)));
    }
    client.batch_execute("COMMIT").await.unwrap();
    answers
}

/// Every row of schema `s`, every column, `seq` as its rank, as JSON text.
async fn rows(client: &Client, s: &str) -> String {
    client
        .query_one(
            &format!(
                "SELECT coalesce(json_agg(x ORDER BY x.topic, x.id), '[]')::text FROM (
                     SELECT topic, id, state, priority, due_ms, deadline_ms, updated_at_ms,
                         created_at_ms, receipt, retries, ttr_ms, max_retries, expires_at_ms,
                         on_expire, key, encode(body, 'hex') AS body, trace, extra,
                         rank() OVER (ORDER BY seq) AS seq_rank
                     FROM {s}.tasks) x"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// The notices of the transactions committed since the last call, per schema (pa, pb),
/// sorted: a marker sent last on each channel says all came.
async fn notices(db: &mut Db) -> (Vec<String>, Vec<String>) {
    db.client
        .batch_execute("NOTIFY pa_events, 'end'; NOTIFY pb_events, 'end'")
        .await
        .unwrap();
    let (mut pa, mut pb) = (Vec::new(), Vec::new());
    let mut ends = 0;
    while ends < 2 {
        let (channel, payload) = tokio::time::timeout(Duration::from_secs(10), db.notices.recv())
            .await
            .expect("the notices come within 10 s")
            .expect("the listener is up");
        if payload == "end" {
            ends += 1;
        } else if channel == "pa_events" {
            pa.push(payload);
        } else {
            pb.push(payload);
        }
    }
    pa.sort();
    pb.sort();
    (pa, pb)
}

/// Runs `adds` both ways from `existing`: the batch's answers, which must equal the calls'
/// with the same rows and notices after.
async fn compare(
    db: &mut Db,
    existing: &[Existing],
    adds: &[Add],
    sender: Option<&str>,
) -> Result<(Vec<Answer>, Vec<String>), TestCaseError> {
    for s in ["pa", "pb"] {
        lay_out(&db.client, s, existing).await;
    }
    let got = batch(&db.client, sender, adds).await;
    let want = one_by_one(&db.client, sender, adds).await;
    prop_assert_eq!(&got, &want, "answers");
    prop_assert_eq!(
        rows(&db.client, "pa").await,
        rows(&db.client, "pb").await,
        "rows"
    );
    let (pa, pb) = notices(db).await;
    prop_assert_eq!(&pa, &pb, "notices");
    Ok((got, pa))
}

fn existing(topic: &str, id: &str, state: i16, due: i64) -> Existing {
    Existing {
        topic: topic.into(),
        id: id.into(),
        state,
        due,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_mixing_every_case_answers_what_enqueue_once_a_task_does() {
    let pg = PostgresServer::start();
    let mut db = setup(&pg).await;
    let before = [
        existing("t1", "x", 2, -100),
        existing("t1", "y", 0, 5_000),
        existing("t1", "z", 3, -50),
    ];
    let keyed = |mut a: Add, key: &str| {
        a.key = Some(key.into());
        a
    };
    let expiring = |mut a: Add, at: i64, on_expire: i16| {
        a.expires = Some(at);
        a.on_expire = on_expire;
        a
    };
    let mut traced = Add::new(0, "t2", "d", 400);
    traced.trace =
        Some(json!({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}));
    traced.extra = Some(json!({"backoff": {"kind": "fixed", "ms": 5000}}));
    traced.priority = 3;
    let adds = vec![
        Add::new(0, "t1", "a", 0),                                     // new, ready
        Add::new(0, "t1", "x", 0),                                     // exists ACTIVE: rejected
        Add::new(2, "t1", "y", -3),                                    // exists DELAYED: kept
        Add::new(1, "t1", "z", 1_000),                                 // exists FINISHED: replaced
        Add::new(2, "t1", "a", 700),                                   // repeat: kept
        expiring(keyed(Add::new(1, "t1", "a", 2_000), "k"), 9_000, 1), // repeat: replaced
        expiring(Add::new(0, "t2", "b", 3_000), 4_000, 0),             // new, delayed, expiring
        Add::new(0, "t2", "b", 0),                                     // repeat: rejected
        keyed(Add::new(1, "t2", "c", -20), "k"),                       // new by replace, ready
        Add::new(0, "t2", "a", 0),                                     // an id of t1 in t2: new
        traced,                                                        // trace, backoff, priority
    ];
    let (answers, notices) = compare(&mut db, &before, &adds, Some("me")).await.unwrap();
    assert_eq!(
        answers,
        vec![
            (0, 1, NOW),
            (3, 2, NOW - 100),
            (2, 0, NOW + 5_000),
            (1, 0, NOW + 1_000),
            (2, 1, NOW),
            (1, 0, NOW + 2_000),
            (0, 0, NOW + 3_000),
            (3, 0, NOW + 3_000),
            (0, 1, NOW - 20),
            (0, 1, NOW),
            (0, 0, NOW + 400),
        ]
    );
    assert_eq!(notices, ["me|r|t1", "me|r|t2"]);
    // An application's call (no sender): the drivers hear of the dues and expiries too.
    let (_, notices) = compare(&mut db, &before, &adds, None).await.unwrap();
    let mut want: Vec<String> = ["sql|r|t1", "sql|r|t2"]
        .iter()
        .map(|s| s.to_string())
        .chain([1_000, 2_000, 9_000, 3_000, 4_000, 400].map(|at| format!("sql|t|{}", NOW + at)))
        .collect();
    want.sort();
    assert_eq!(notices, want);
    // Nothing at all, and one task alone, as well.
    compare(&mut db, &before, &[], Some("me")).await.unwrap();
    compare(&mut db, &before, &adds[1..2], Some("me"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrays_of_different_lengths_are_refused_naming_the_argument() {
    let pg = PostgresServer::start();
    let db = setup(&pg).await;
    let mut c = Columns::of(&[Add::new(0, "t", "a", 0), Add::new(0, "t", "b", 0)]);
    c.body.pop();
    let err = enqueue_batch(&db.client, Some("me"), &c)
        .await
        .expect_err("a body short");
    let e = err.as_db_error().unwrap();
    assert_eq!(e.code().code(), "22023", "{e}");
    assert!(
        e.message().contains("p_body") && e.message().contains("has 1 elements where p_id has 2"),
        "{e}"
    );
    let rows: i64 = db
        .client
        .query_one("SELECT count(*) FROM pa.tasks", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0);
}

const TOPICS: [&str; 2] = ["t1", "t2"];
const IDS: [&str; 5] = ["a", "b", "c", "d", "e"];

fn add_strategy() -> impl Strategy<Value = Add> {
    (
        (
            0i16..3,
            0..TOPICS.len(),
            0..IDS.len(),
            prop::collection::vec(any::<u8>(), 0..6),
        ),
        (
            prop_oneof![Just(0i64), Just(1), Just(1024)],
            prop_oneof![Just(-30i64), Just(0), Just(1), 2..60_000i64],
            prop_oneof![Just(-1i64), 0..5i64],
        ),
        (
            prop::option::of((1..90_000i64, 0i16..2)),
            prop::option::of(prop_oneof![Just("k1"), Just("k2")]),
            any::<bool>(),
            prop::option::of(1..10_000i64),
        ),
    )
        .prop_map(
            |(
                (policy, t, i, body),
                (priority, due, max_retries),
                (expiry, key, trace, backoff),
            )| {
                let mut a = Add::new(policy, TOPICS[t], IDS[i], due);
                a.body = body;
                a.priority = priority;
                a.max_retries = max_retries;
                if let Some((after_due, on_expire)) = expiry {
                    a.expires = Some(due.max(0) + after_due);
                    a.on_expire = on_expire;
                }
                a.key = key.map(str::to_owned);
                a.trace = trace.then(
                    || json!({"traceparent": format!("00-{:032x}-{:016x}-01", due, priority + 1)}),
                );
                a.extra = backoff.map(|ms| json!({"backoff": {"kind": "fixed", "ms": ms}}));
                a
            },
        )
}

fn existing_strategy() -> impl Strategy<Value = Vec<Existing>> {
    prop::collection::vec(
        (0..TOPICS.len(), 0..IDS.len(), 0i16..6, -100..100_000i64),
        0..8,
    )
    .prop_map(|rows| {
        let mut seen = std::collections::HashSet::new();
        rows.into_iter()
            .filter(|(t, i, _, _)| seen.insert((*t, *i)))
            .map(|(t, i, state, due)| existing(TOPICS[t], IDS[i], state, due))
            .collect()
    })
}

#[test]
fn random_batches_answer_what_enqueue_once_a_task_does() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let pg = PostgresServer::start();
    let db = RefCell::new(rt.block_on(setup(&pg)));
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        existing_strategy(),
        prop::collection::vec(add_strategy(), 0..30),
        prop::option::of(Just("me")),
    );
    runner
        .run(&strategy, |(existing, adds, sender)| {
            rt.block_on(compare(&mut db.borrow_mut(), &existing, &adds, sender))?;
            Ok(())
        })
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_wakes_parked_pops_here_and_on_another_instance_and_comes_due_on_time() {
    let pg = PostgresServer::start();
    let (a, b) = (
        instance_of(&pg.url(), 4).await,
        instance_of(&pg.url(), 4).await,
    );
    // Let the drivers go to sleep with nothing due (their slow look is seconds away).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let here = parked_pop(&a, "here");
    let there = parked_pop(&b, "there");
    let later = parked_pop(&a, "later");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let added_at = Instant::now();
    let results = a
        .add_batch(vec![
            NewTask::new("here", "h1"),
            NewTask::new("there", "t1"),
            NewTask::new("later", "l1").delay_ms(600),
            NewTask::new("here", "h1"),
        ])
        .await
        .unwrap();
    assert!(results[..3].iter().all(|r| r.is_ok()), "{results:?}");
    assert!(
        matches!(results[3], Err(delayq::Error::Duplicate { .. })),
        "{results:?}"
    );
    for (parked, id) in [(here, "h1"), (there, "t1")] {
        let (got, at) = parked.await.unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].id, id);
        let woke = at.duration_since(added_at);
        assert!(
            woke < Duration::from_secs(2),
            "{id} woken {woke:?} after the add"
        );
    }
    let (got, at) = later.await.unwrap();
    assert_eq!(got.len(), 1);
    assert!(SystemClock::new().now_ms() >= got[0].due_ms, "never early");
    let woke = at.duration_since(added_at);
    assert!(
        woke < Duration::from_millis(2_600),
        "the delayed task came {woke:?} after the add (due after 600 ms)"
    );
}
