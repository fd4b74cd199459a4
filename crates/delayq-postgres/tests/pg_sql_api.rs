//! The SQL API (issue 28 step 3, docs/postgres.md): `delayq.add`, `delayq.cancel` and
//! `delayq.reschedule` called by an application inside its own transaction, against a
//! PostgreSQL server of the test's own and a delayq instance (a `Queue` over the backend) as
//! the consumer. A task added in a transaction is seen by consumers only after the commit and
//! wakes a parked pop then; a rollback leaves nothing (and leaves a cancelled or rescheduled
//! task as it was); bad input raises naming the field, with the same limits as the library's
//! validation; the rows are the ones the instance's own add writes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq::{
    AddOutcome, Backoff, Clock, Error, FlowLimits, Limits, MaxRetries, NewTask, PopOptions, Queue,
    State, StorageContext, SystemClock,
};
use delayq_postgres::PostgresOptions;
use delayq_postgres::tokio_postgres::types::ToSql;
use delayq_postgres::tokio_postgres::{self, Client, GenericClient, NoTls};
use delayq_testkit::PostgresServer;

mod support;
use support::parked_pop;

/// The limits of the instance in these tests: small bodies, so the body limit is cheap to
/// cross; the others as configured by default.
fn limits() -> Limits {
    let mut limits = Limits::default();
    limits.max_body_bytes = 64;
    limits
}

async fn instance(pg: &PostgresServer) -> Queue {
    let ctx = StorageContext::new(Arc::new(SystemClock::new())).with_limits(limits());
    let storage = delayq_postgres::start(ctx.clone(), PostgresOptions::new(pg.url()))
        .await
        .expect("start the PostgreSQL backend");
    Queue::new(Arc::new(storage), ctx)
}

/// The application's own connection (its search_path is the default: it names `delayq.`).
async fn app(pg: &PostgresServer) -> Client {
    let (client, conn) = tokio_postgres::connect(&pg.url(), NoTls).await.unwrap();
    tokio::spawn(conn);
    client
}

/// The boolean that `sql` answers (cancel, reschedule).
async fn flag(client: &impl GenericClient, sql: &str, params: &[&(dyn ToSql + Sync)]) -> bool {
    client.query_one(sql, params).await.unwrap().get(0)
}

/// The database's clock, as the SQL functions read it.
async fn db_now(client: &Client) -> u64 {
    let ms: i64 = client
        .query_one("SELECT delayq.now_ms()", &[])
        .await
        .unwrap()
        .get(0);
    ms as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_add_is_seen_only_after_commit_and_wakes_a_parked_pop_then() {
    let pg = PostgresServer::start();
    let q = instance(&pg).await;
    let mut client = app(&pg).await;
    let parked = parked_pop(&q, "orders");
    tokio::time::sleep(Duration::from_millis(200)).await;

    let tx = client.transaction().await.unwrap();
    let row = tx
        .query_one(
            "SELECT * FROM delayq.add('orders', 'cancel-1', '{\"order\":1}')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>("outcome"), "added");
    // Before the commit: no consumer sees it, none is woken, the instance cannot read it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!parked.is_finished(), "a pop got an uncommitted task");
    assert!(matches!(
        q.get("orders", "cancel-1").await,
        Err(Error::NotFound { .. })
    ));
    assert!(
        q.pop("orders", PopOptions::default())
            .await
            .unwrap()
            .is_empty()
    );
    tx.commit().await.unwrap();
    let committed = Instant::now();

    let (got, at) = parked.await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, "cancel-1");
    assert_eq!(got[0].body, b"{\"order\":1}");
    // Woken by the commit's NOTIFY, not by the pop's timeout nor the driver's slow look.
    let woke = at.duration_since(committed);
    assert!(woke < Duration::from_secs(2), "woken {woke:?} after commit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_add_never_existed() {
    let pg = PostgresServer::start();
    let q = instance(&pg).await;
    let mut client = app(&pg).await;
    let tx = client.transaction().await.unwrap();
    tx.execute("SELECT delayq.add('orders', 'gone', 'x')", &[])
        .await
        .unwrap();
    tx.execute(
        "SELECT delayq.add('orders', 'later', 'x', delay_ms => 300)",
        &[],
    )
    .await
    .unwrap();
    tx.rollback().await.unwrap();

    let got = q
        .pop("orders", PopOptions::default().timeout_ms(1_500))
        .await
        .unwrap();
    assert!(got.is_empty(), "{got:?}");
    for id in ["gone", "later"] {
        assert!(matches!(
            q.get("orders", id).await,
            Err(Error::NotFound { .. })
        ));
    }
    assert_eq!(q.stats("orders").await.unwrap().total, 0);
    // The same ids are free to add.
    client
        .execute("SELECT delayq.add('orders', 'gone', 'x')", &[])
        .await
        .unwrap();
    assert_eq!(q.get("orders", "gone").await.unwrap().state, State::Ready);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_add_wakes_the_drivers_on_commit_and_is_never_early() {
    let pg = PostgresServer::start();
    let q = instance(&pg).await;
    let client = app(&pg).await;
    // Let the instance's driver go to sleep with nothing due (its slow look is 5 s away).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let parked = parked_pop(&q, "later");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let row = client
        .query_one(
            "SELECT outcome, due_ms FROM delayq.add('later', 'l1', 'x', delay_ms => 700)",
            &[],
        )
        .await
        .unwrap();
    let due = row.get::<_, i64>("due_ms") as u64;
    let (got, _) = parked.await.unwrap();
    let popped_at = db_now(&client).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].due_ms, due);
    assert!(
        SystemClock::new().now_ms() >= due,
        "never early by this machine's clock"
    );
    // Prompt: well before the driver's slow look would have found it.
    assert!(
        popped_at < due + 2_000,
        "popped {} ms after its due",
        popped_at - due
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_reschedule_in_a_rolled_back_transaction_leave_the_task_as_it_was() {
    let pg = PostgresServer::start();
    let q = instance(&pg).await;
    let mut client = app(&pg).await;
    q.add(NewTask::new("orders", "o1").delay_ms(60_000))
        .await
        .unwrap();
    let before = q.get("orders", "o1").await.unwrap();

    let tx = client.transaction().await.unwrap();
    let cancelled = flag(&tx, "SELECT delayq.cancel('orders', 'o1')", &[]).await;
    assert!(cancelled);
    tx.rollback().await.unwrap();
    let after = q.get("orders", "o1").await.unwrap();
    assert_eq!((after.state, after.due_ms), (State::Delayed, before.due_ms));

    let parked = parked_pop(&q, "orders");
    let tx = client.transaction().await.unwrap();
    let moved = flag(&tx, "SELECT delayq.reschedule('orders', 'o1')", &[]).await;
    assert!(moved);
    tx.rollback().await.unwrap();
    let after = q.get("orders", "o1").await.unwrap();
    assert_eq!((after.state, after.due_ms), (State::Delayed, before.due_ms));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!parked.is_finished(), "a rolled-back reschedule woke a pop");

    // Committed, the reschedule to now wakes the parked pop.
    let moved = flag(
        &client,
        "SELECT delayq.reschedule('orders', 'o1', delay_ms => 0)",
        &[],
    )
    .await;
    assert!(moved);
    let (got, _) = parked.await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, "o1");
    // ACTIVE: neither reschedule nor the end of the task's life is the SQL caller's to see
    // as an error: reschedule says false, cancel cancels (rule 7).
    let moved = flag(
        &client,
        "SELECT delayq.reschedule('orders', 'o1', delay_ms => 10)",
        &[],
    )
    .await;
    assert!(!moved, "an ACTIVE task cannot be rescheduled (rule 15)");
    let cancelled = flag(&client, "SELECT delayq.cancel('orders', 'o1')", &[]).await;
    assert!(cancelled);
    assert_eq!(q.get("orders", "o1").await.unwrap().state, State::Cancelled);
    assert!(matches!(
        q.finish("orders", "o1", Some(&got[0].receipt)).await,
        Err(Error::Conflict { .. })
    ));
    // Nothing left to cancel: false, for an ended task and for an unknown one.
    for id in ["o1", "never"] {
        let cancelled = flag(&client, "SELECT delayq.cancel('orders', $1)", &[&id]).await;
        assert!(!cancelled, "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_of_an_active_task_frees_its_slot_for_a_consumer_parked_on_max_active() {
    let pg = PostgresServer::start();
    let q = instance(&pg).await;
    let client = app(&pg).await;
    q.set_limits("mail", FlowLimits::max_active(1))
        .await
        .unwrap();
    for id in ["m1", "m2"] {
        q.add(NewTask::new("mail", id)).await.unwrap();
    }
    let first = q.pop("mail", PopOptions::default()).await.unwrap();
    assert_eq!(first.len(), 1);
    let parked = parked_pop(&q, "mail");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!parked.is_finished(), "max_active 1 let a second one go");
    let cancelled_at = Instant::now();
    client
        .execute("SELECT delayq.cancel('mail', $1)", &[&first[0].id])
        .await
        .unwrap();
    let (got, at) = parked.await.unwrap();
    assert_eq!(got.len(), 1);
    assert_ne!(got[0].id, first[0].id);
    let woke = at.duration_since(cancelled_at);
    assert!(
        woke < Duration::from_secs(2),
        "woken {woke:?} after the cancel"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rows_of_a_sql_add_are_the_rows_of_the_instances_add() {
    let pg = PostgresServer::start();
    let q = instance(&pg).await;
    let client = app(&pg).await;
    q.add(
        NewTask::new("shape", "rust")
            .body("hello")
            .delay_ms(60_000)
            .priority(7)
            .ttr_ms(5_000)
            .max_retries(MaxRetries::Unlimited)
            .key("merchant-1")
            .expires_in_ms(120_000)
            .on_expire(delayq::OnExpire::Drop)
            .backoff(Backoff::Schedule {
                ms: vec![120_000, 600_000],
            }),
    )
    .await
    .unwrap();
    client
        .execute(
            "SELECT delayq.add('shape', 'sql', 'hello'::bytea, delay_ms => 60000, priority => 7, \
             ttr_ms => 5000, max_retries => -1, key => 'merchant-1', expires_in_ms => 120000, \
             on_expire => 'drop', \
             backoff => '{\"kind\": \"schedule\", \"ms\": [120000, 600000]}')",
            &[],
        )
        .await
        .unwrap();
    let (rust, sql) = (
        q.get("shape", "rust").await.unwrap(),
        q.get("shape", "sql").await.unwrap(),
    );
    let shape = |t: &delayq::TaskInfo| {
        (
            (
                t.state,
                t.body.clone(),
                t.priority,
                t.ttr_ms,
                t.max_retries,
                t.retries,
                t.key.clone(),
            ),
            (
                t.delay_ms,
                t.expires_at_ms.map(|e| e - t.created_at_ms),
                t.on_expire,
                t.deadline_ms,
                t.backoff.clone(),
                t.history.clone(),
            ),
        )
    };
    assert_eq!(shape(&rust), shape(&sql));
    // The defaults are the instance's: ttr, max_retries, priority.
    client
        .execute("SELECT delayq.add('shape', 'plain', 'x')", &[])
        .await
        .unwrap();
    q.add(NewTask::new("shape", "plain-rust").body("x"))
        .await
        .unwrap();
    let (a, b) = (
        q.get("shape", "plain").await.unwrap(),
        q.get("shape", "plain-rust").await.unwrap(),
    );
    assert_eq!(
        (a.state, a.priority, a.ttr_ms, a.max_retries, a.delay_ms),
        (b.state, b.priority, b.ttr_ms, b.max_retries, b.delay_ms)
    );

    // A backoff given in SQL is applied on a failure (rule 6).
    client
        .execute(
            "SELECT delayq.add('retry', 'r', 'x', backoff => '{\"kind\":\"fixed\",\"ms\":60000}')",
            &[],
        )
        .await
        .unwrap();
    let got = q.pop("retry", PopOptions::default()).await.unwrap();
    let released_at = SystemClock::new().now_ms();
    let state = q
        .release(
            "retry",
            "r",
            delayq::ReleaseOptions::default().receipt(got[0].receipt.clone()),
        )
        .await
        .unwrap();
    assert_eq!(state, State::Delayed);
    assert!(q.get("retry", "r").await.unwrap().due_ms >= released_at + 59_000);

    // Duplicates per rule 9: reject raises 23505, keep reports it existed, replace replaces.
    let err = client
        .execute("SELECT delayq.add('shape', 'plain', 'y')", &[])
        .await
        .expect_err("a duplicate is rejected by default");
    let db = err.as_db_error().unwrap();
    assert_eq!(db.code().code(), "23505", "{db}");
    assert!(db.message().contains("'plain'"), "{db}");
    let row = client
        .query_one(
            "SELECT * FROM delayq.add('shape', 'plain', 'y', on_duplicate => 'keep')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>("outcome"), "existed");
    assert_eq!(q.get("shape", "plain").await.unwrap().body, b"x");
    let row = client
        .query_one(
            "SELECT * FROM delayq.add('shape', 'plain', '{\"v\":2}'::jsonb, \
             on_duplicate => 'replace')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>("outcome"), "replaced");
    assert_eq!(q.get("shape", "plain").await.unwrap().body, b"{\"v\": 2}");
    // And the instance's add sees the SQL add's task as a duplicate, and the other way round.
    assert!(matches!(
        q.add(NewTask::new("shape", "sql")).await,
        Err(Error::Duplicate { .. })
    ));
    assert_eq!(
        q.add(NewTask::new("shape", "sql").on_duplicate(delayq::OnDuplicate::Keep))
            .await
            .unwrap(),
        AddOutcome::Existed
    );
}

/// One add with one field set, as SQL arguments and as the library's task.
struct Case {
    sql: String,
    task: NewTask,
}

fn case(args: &str, task: NewTask) -> Case {
    Case {
        sql: format!("SELECT delayq.add({args})"),
        task,
    }
}

/// The field a library refusal names.
fn rust_field(e: &Error) -> Option<String> {
    match e {
        Error::Invalid(f) => Some(f.field.clone()),
        Error::TooLarge { field, .. } => Some(field.clone()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_raises_naming_the_field_with_the_librarys_limits() {
    let pg = PostgresServer::start();
    let q = instance(&pg).await;
    let client = app(&pg).await;
    let l = limits();
    let t = |id: &str| NewTask::new("v", id);
    let long = |n: usize| "a".repeat(n);
    let max_delay = l.max_delay_ms;
    let max_ttr = l.max_ttr_ms;
    // Each case at a limit and past it: the library and the SQL function must agree on
    // accepting it, and on the field a refusal names.
    let cases = vec![
        case(
            &format!("'{}', 'i1', 'x'", long(200)),
            NewTask::new(long(200), "i1"),
        ),
        case(
            &format!("'{}', 'i1', 'x'", long(201)),
            NewTask::new(long(201), "i1"),
        ),
        case("'', 'i1', 'x'", NewTask::new("", "i1")),
        case("'a b', 'i1', 'x'", NewTask::new("a b", "i1")),
        case("'a;$()+', 'i1', 'x'", NewTask::new("a;$()+", "i1")),
        case(&format!("'v', '{}', 'x'", long(256)), t(&long(256))),
        case(&format!("'v', '{}', 'x'", long(257)), t(&long(257))),
        case("'v', 'é', 'x'", t("é")),
        case("'v', 'a@b=c', 'x'", t("a@b=c")),
        case("'v', 'k1', 'x', key => 'k;1'", t("k1").key("k;1")),
        case("'v', 'k2', 'x', key => ''", t("k2").key("")),
        case(
            &format!("'v', 'b1', '{}'", long(64)),
            t("b1").body(long(64)),
        ),
        case(
            &format!("'v', 'b2', '{}'", long(65)),
            t("b2").body(long(65)),
        ),
        case(
            &format!("'v', 'd1', 'x', delay_ms => {max_delay}"),
            t("d1").delay_ms(max_delay),
        ),
        case(
            &format!("'v', 'd2', 'x', delay_ms => {}", max_delay + 1),
            t("d2").delay_ms(max_delay + 1),
        ),
        case("'v', 't0', 'x', ttr_ms => 0", t("t0").ttr_ms(0)),
        case("'v', 't1', 'x', ttr_ms => 1", t("t1").ttr_ms(1)),
        case(
            &format!("'v', 't2', 'x', ttr_ms => {max_ttr}"),
            t("t2").ttr_ms(max_ttr),
        ),
        case(
            &format!("'v', 't3', 'x', ttr_ms => {}", max_ttr + 1),
            t("t3").ttr_ms(max_ttr + 1),
        ),
        case(
            "'v', 'e1', 'x', delay_ms => 1000, expires_in_ms => 1000",
            t("e1").delay_ms(1000).expires_in_ms(1000),
        ),
        case(
            "'v', 'e2', 'x', delay_ms => 1000, expires_in_ms => 1001",
            t("e2").delay_ms(1000).expires_in_ms(1001),
        ),
        case(
            &format!("'v', 'e3', 'x', expires_in_ms => {}", max_delay + 1),
            t("e3").expires_in_ms(max_delay + 1),
        ),
        case(
            "'v', 'e4', 'x', expires_at_ms => 1",
            t("e4").expires_at_ms(1),
        ),
        case("'v', 'r1', 'x', run_at_ms => 1", t("r1").run_at_ms(1)),
        case(
            "'v', 'm1', 'x', max_retries => 4294967295",
            t("m1").max_retries(MaxRetries::Limited(u32::MAX)),
        ),
        case(
            "'v', 'p1', 'x', priority => 4294967295",
            t("p1").priority(u32::MAX),
        ),
        case(
            &format!("'v', 'f1', 'x', backoff => '{{\"kind\":\"fixed\",\"ms\":{max_delay}}}'"),
            t("f1").backoff(Backoff::Fixed { ms: max_delay }),
        ),
        case(
            &format!(
                "'v', 'f2', 'x', backoff => '{{\"kind\":\"fixed\",\"ms\":{}}}'",
                max_delay + 1
            ),
            t("f2").backoff(Backoff::Fixed { ms: max_delay + 1 }),
        ),
        case(
            "'v', 'x1', 'x', backoff => '{\"kind\":\"exponential\",\"base_ms\":0,\"max_ms\":5}'",
            t("x1").backoff(Backoff::Exponential {
                base_ms: 0,
                max_ms: 5,
            }),
        ),
        case(
            "'v', 'x2', 'x', backoff => '{\"kind\":\"exponential\",\"base_ms\":6,\"max_ms\":5}'",
            t("x2").backoff(Backoff::Exponential {
                base_ms: 6,
                max_ms: 5,
            }),
        ),
        case(
            &format!(
                "'v', 'x3', 'x', backoff => '{{\"kind\":\"exponential\",\"base_ms\":1,\"max_ms\":{}}}'",
                max_delay + 1
            ),
            t("x3").backoff(Backoff::Exponential {
                base_ms: 1,
                max_ms: max_delay + 1,
            }),
        ),
        case(
            "'v', 's1', 'x', backoff => '{\"kind\":\"schedule\",\"ms\":[]}'",
            t("s1").backoff(Backoff::Schedule { ms: vec![] }),
        ),
        case(
            &format!(
                "'v', 's2', 'x', backoff => '{{\"kind\":\"schedule\",\"ms\":{:?}}}'",
                vec![1u64; l.max_schedule_len]
            ),
            t("s2").backoff(Backoff::Schedule {
                ms: vec![1; l.max_schedule_len],
            }),
        ),
        case(
            &format!(
                "'v', 's3', 'x', backoff => '{{\"kind\":\"schedule\",\"ms\":{:?}}}'",
                vec![1u64; l.max_schedule_len + 1]
            ),
            t("s3").backoff(Backoff::Schedule {
                ms: vec![1; l.max_schedule_len + 1],
            }),
        ),
        case(
            &format!(
                "'v', 's4', 'x', backoff => '{{\"kind\":\"schedule\",\"ms\":[1, {}]}}'",
                max_delay + 1
            ),
            t("s4").backoff(Backoff::Schedule {
                ms: vec![1, max_delay + 1],
            }),
        ),
    ];
    for c in cases {
        let (topic, id) = (c.task.topic.clone(), c.task.id.clone());
        let rust = q.add(c.task).await;
        if rust.is_ok() {
            // Make room for the SQL add of the same task.
            q.delete(&topic, &id).await.unwrap();
        }
        let sql = client.execute(c.sql.as_str(), &[]).await;
        match (&rust, &sql) {
            (Ok(_), Ok(_)) => {}
            (Err(r), Err(s)) => {
                let field = rust_field(r).unwrap_or_else(|| panic!("{}: {r}", c.sql));
                let db = s.as_db_error().unwrap_or_else(|| panic!("{}: {s}", c.sql));
                assert!(
                    matches!(db.code().code(), "22023" | "54000"),
                    "{}: {db:?}",
                    c.sql
                );
                assert_eq!(db.column(), Some(field.as_str()), "{}: {db:?}", c.sql);
                assert!(
                    db.message()
                        .starts_with(&format!("delayq.add: invalid {field}: ")),
                    "{}: {}",
                    c.sql,
                    db.message()
                );
            }
            _ => panic!("{}: the library says {rust:?}, SQL says {sql:?}", c.sql),
        }
    }

    // What only SQL can be given: negative numbers, NULLs, both of two, unknown words.
    let refused = [
        ("'v', 'n1', 'x', delay_ms => -5", "delay_ms", "got -5"),
        ("'v', 'n2', 'x', priority => -1", "priority", "4294967295"),
        (
            "'v', 'n3', 'x', max_retries => -2",
            "max_retries",
            "-1 (no limit)",
        ),
        ("'v', 'n4', 'x', ttr_ms => -1", "ttr_ms", "got -1"),
        (
            "'v', 'n5', 'x', expires_in_ms => -1",
            "expires_in_ms",
            "got -1",
        ),
        ("NULL, 'n6', 'x'", "topic", "NULL"),
        ("'v', NULL, 'x'", "id", "NULL"),
        ("'v', 'n8', NULL::text", "body", "NULL"),
        (
            "'v', 'n9', 'x', delay_ms => 1, run_at_ms => 1",
            "run_at_ms",
            "together with delay_ms",
        ),
        (
            "'v', 'n10', 'x', expires_in_ms => 1, expires_at_ms => 1",
            "expires_in_ms",
            "together with expires_at_ms",
        ),
        (
            "'v', 'n11', 'x', on_duplicate => 'skip'",
            "on_duplicate",
            "'skip'",
        ),
        (
            "'v', 'n12', 'x', on_expire => 'later'",
            "on_expire",
            "'later'",
        ),
        (
            "'v', 'n13', 'x', backoff => '{\"kind\":\"linear\"}'",
            "backoff.kind",
            "'linear'",
        ),
        (
            "'v', 'n14', 'x', backoff => '{\"kind\":\"fixed\",\"ms\":-1}'",
            "backoff.ms",
            "got -1",
        ),
        (
            "'v', 'n15', 'x', backoff => '{\"kind\":\"fixed\",\"ms\":1.5}'",
            "backoff.ms",
            "got 1.5",
        ),
        ("'v', 'n16', 'x', backoff => '[1]'", "backoff", "[1]"),
    ];
    for (args, field, says) in refused {
        let sql = format!("SELECT delayq.add({args})");
        let err = client.execute(sql.as_str(), &[]).await.expect_err(&sql);
        let db = err.as_db_error().unwrap();
        assert_eq!(db.code().code(), "22023", "{sql}: {db:?}");
        assert_eq!(db.column(), Some(field), "{sql}: {db:?}");
        assert!(
            db.message().contains(field) && db.message().contains(says),
            "{sql}: {}",
            db.message()
        );
    }
    for (sql, field) in [
        ("SELECT delayq.cancel('v', 'a b')", "id"),
        ("SELECT delayq.cancel(NULL, 'a')", "topic"),
        (
            "SELECT delayq.reschedule('v', 'a', delay_ms => -1)",
            "delay_ms",
        ),
        (
            "SELECT delayq.reschedule('v', 'a', delay_ms => 1, run_at_ms => 1)",
            "run_at_ms",
        ),
    ] {
        let err = client.execute(sql, &[]).await.expect_err(sql);
        let db = err.as_db_error().unwrap();
        assert_eq!(
            (db.code().code(), db.column()),
            ("22023", Some(field)),
            "{sql}: {db:?}"
        );
    }
    // A reschedule past the task's expiry: the library's conflict, SQL's error on the field.
    q.add(t("x1").delay_ms(10_000).expires_in_ms(20_000))
        .await
        .unwrap();
    assert!(matches!(
        q.reschedule("v", "x1", delayq::When::Delay(30_000)).await,
        Err(Error::Conflict { .. })
    ));
    let err = client
        .execute(
            "SELECT delayq.reschedule('v', 'x1', delay_ms => 30000)",
            &[],
        )
        .await
        .expect_err("past the expiry");
    let db = err.as_db_error().unwrap();
    assert_eq!((db.code().code(), db.column()), ("22023", Some("delay_ms")));
    assert!(db.message().contains("expiry"), "{}", db.message());
}

/// The core SQL functions decide which states a cancel and a reschedule change; the library's
/// rules are `lifecycle::check_op`. For a task in each state, the function changes it exactly
/// when the rules allow the operation (in a transaction rolled back after each try).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sql_functions_change_the_states_the_lifecycle_allows() {
    use delayq::core::lifecycle::{Op, check_op};
    let pg = PostgresServer::start();
    let q = instance(&pg).await;
    let mut client = app(&pg).await;
    q.add(NewTask::new("rules", "t").delay_ms(60_000))
        .await
        .unwrap();
    for state in State::ALL {
        for op in [Op::Cancel, Op::Reschedule] {
            let tx = client.transaction().await.unwrap();
            tx.execute(
                "UPDATE delayq.tasks SET state = $1 WHERE topic = 'rules' AND id = 't'",
                &[&(state.code() as i16)],
            )
            .await
            .unwrap();
            let sql = match op {
                Op::Cancel => "SELECT delayq.cancel('rules', 't')",
                _ => "SELECT delayq.reschedule('rules', 't', delay_ms => 1000)",
            };
            let said = flag(&tx, sql, &[]).await;
            let now: i16 = tx
                .query_one(
                    "SELECT state FROM delayq.tasks WHERE topic = 'rules' AND id = 't'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            let changed = match op {
                Op::Cancel => now == State::Cancelled.code() as i16 && state != State::Cancelled,
                _ => now == State::Delayed.code() as i16 && said,
            };
            let allowed = check_op(state, op).is_ok();
            assert_eq!(
                (said, changed),
                (allowed, allowed),
                "{op:?} of a {state:?} task"
            );
            tx.rollback().await.unwrap();
        }
    }
}

/// The grants docs/postgres.md lists are enough for a role that does not own the schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_grants_let_an_application_role_call_the_functions() {
    let pg = PostgresServer::start();
    let q = instance(&pg).await;
    let client = app(&pg).await;
    client
        .batch_execute(
            "CREATE ROLE app;
             GRANT USAGE ON SCHEMA delayq TO app;
             GRANT SELECT, INSERT, UPDATE ON delayq.tasks TO app;
             GRANT SELECT ON delayq.topics, delayq.sql_config TO app;
             GRANT USAGE ON SEQUENCE delayq.task_seq TO app;
             SET ROLE app;",
        )
        .await
        .unwrap();
    client
        .execute("SELECT delayq.add('g', 'a', 'x', delay_ms => 60000)", &[])
        .await
        .unwrap();
    client
        .execute(
            "SELECT delayq.add('g', 'a', 'y', on_duplicate => 'replace')",
            &[],
        )
        .await
        .unwrap();
    assert!(
        flag(
            &client,
            "SELECT delayq.reschedule('g', 'a', delay_ms => 5)",
            &[]
        )
        .await
    );
    assert!(flag(&client, "SELECT delayq.cancel('g', 'a')", &[]).await);
    assert_eq!(q.get("g", "a").await.unwrap().state, State::Cancelled);
    // Without the grants, the role is refused: the test would pass for a reason.
    client
        .batch_execute("RESET ROLE; CREATE ROLE other; SET ROLE other")
        .await
        .unwrap();
    let err = client
        .execute("SELECT delayq.add('g', 'b', 'x')", &[])
        .await
        .expect_err("no grants");
    assert_eq!(err.as_db_error().unwrap().code().code(), "42501");
}
