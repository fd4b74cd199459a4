//! Schema upgrades (issue 28 step 1): a database laid out by the first schema version, with
//! tasks in it, is migrated to the newest version when an instance of this build starts; the
//! tasks are still there and served, and what the newer migrations add works; the same from
//! version 2 to the batched add of version 3, after which a build that knows only version 2
//! refuses the schema; and from version 3 to the key of version 4, which leads with the id.
//! (A schema newer than the build is refused: `pg_instances.rs` too.)

use std::sync::Arc;
use std::time::Duration;

use delayq::{
    AddOutcome, Clock, Error, NewTask, OnDuplicate, PopOptions, Queue, State, StorageContext,
    SystemClock,
};
use delayq_postgres::PostgresOptions;
use delayq_postgres::schema;
use delayq_postgres::tokio_postgres::{self, NoTls};
use delayq_testkit::PostgresServer;

/// A connection to a database laid out at schema `version`, when this build knows newer ones.
async fn laid_out_at(pg: &PostgresServer, version: i32) -> tokio_postgres::Client {
    let (mut client, conn) = tokio_postgres::connect(&pg.url(), NoTls).await.unwrap();
    tokio::spawn(conn);
    assert_eq!(
        schema::migrate_to(&mut client, "delayq", version)
            .await
            .unwrap(),
        version
    );
    assert!(schema::known_version() > version, "nothing to upgrade to");
    client
}

/// An instance of this build on `pg`, whose schema was at `version`: it migrates it.
async fn instance(pg: &PostgresServer, version: i32) -> Queue {
    let ctx = StorageContext::new(Arc::new(SystemClock::new()));
    let storage = delayq_postgres::start(ctx.clone(), PostgresOptions::new(pg.url()))
        .await
        .unwrap_or_else(|e| {
            panic!("an instance of this build migrates a version {version} schema: {e}")
        });
    Queue::new(Arc::new(storage), ctx)
}

/// How many functions of schema `delayq` are called `name`.
async fn functions_named(client: &tokio_postgres::Client, name: &str) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
             WHERE n.nspname = 'delayq' AND p.proname = $1",
            &[&name],
        )
        .await
        .unwrap()
        .get(0)
}

/// The schema version the database is at.
async fn version_of(client: &tokio_postgres::Client) -> i32 {
    client
        .query_one("SELECT version FROM delayq.schema_version", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_database_with_tasks_is_migrated_and_its_tasks_served() {
    let pg = PostgresServer::start();
    let client = laid_out_at(&pg, 1).await;
    let now = SystemClock::new().now_ms() as i64;
    // Rows as version 1 lays them out: one READY, one DELAYED, one with a key and an expiry.
    for (id, state, due, key, expires) in [
        ("ready", 1i16, now - 10, None, None),
        ("soon", 0, now + 1_500, None, None),
        ("keyed", 0, now + 600_000, Some("m-1"), Some(now + 900_000)),
    ] {
        client
            .execute(
                "INSERT INTO delayq.tasks (topic, id, state, priority, due_ms, updated_at_ms, \
                 created_at_ms, ttr_ms, max_retries, expires_at_ms, key, body) \
                 VALUES ('old', $1, $2, 1024, $3, $4, $4, 30000, 3, $5, $6, $7)",
                &[&id, &state, &due, &now, &expires, &key, &id.as_bytes()],
            )
            .await
            .unwrap();
    }
    assert_eq!(
        functions_named(&client, "add").await,
        0,
        "version 1 has no SQL API"
    );

    let q = instance(&pg, 1).await;
    assert_eq!(version_of(&client).await, schema::known_version());

    // The tasks are there, as they were, and served.
    let keyed = q.get("old", "keyed").await.unwrap();
    assert_eq!(
        (keyed.state, keyed.key.as_deref(), keyed.expires_at_ms),
        (State::Delayed, Some("m-1"), Some((now + 900_000) as u64))
    );
    let got = q.pop("old", PopOptions::default()).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].id.as_str(), got[0].body.as_slice()),
        ("ready", &b"ready"[..])
    );
    let got = q
        .pop("old", PopOptions::default().timeout_ms(10_000))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, "soon");
    assert!(SystemClock::new().now_ms() >= got[0].due_ms, "never early");

    // What version 2 brought works on the migrated schema: the SQL API, beside old rows.
    client
        .execute("SELECT delayq.add('old', 'new', 'x', delay_ms => 0)", &[])
        .await
        .unwrap();
    let cancelled: bool = client
        .query_one("SELECT delayq.cancel('old', 'keyed')", &[])
        .await
        .unwrap()
        .get(0);
    assert!(cancelled);
    let got = q
        .pop("old", PopOptions::default().timeout_ms(5_000))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, "new");

    // A second start finds the newest version and changes nothing.
    let ctx = StorageContext::new(Arc::new(SystemClock::new()));
    let again = delayq_postgres::start(ctx, PostgresOptions::new(pg.url()))
        .await
        .unwrap();
    drop(again);
    assert_eq!(q.get("old", "keyed").await.unwrap().state, State::Cancelled);
    tokio::time::sleep(Duration::from_millis(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_2_database_gets_the_batched_add_and_a_version_2_build_then_refuses_it() {
    let pg = PostgresServer::start();
    let mut client = laid_out_at(&pg, 2).await;
    // Tasks as version 2 adds them: through its SQL API.
    client
        .batch_execute(
            "SELECT delayq.add('old', 'a', 'x'); \
             SELECT delayq.add('old', 'b', 'y', delay_ms => 600000)",
        )
        .await
        .unwrap();
    assert_eq!(
        functions_named(&client, "enqueue_batch").await,
        0,
        "version 2 has no enqueue_batch"
    );

    let q = instance(&pg, 2).await;
    assert_eq!(functions_named(&client, "enqueue_batch").await, 1);
    // A batch over the old rows: one kept, one replaced, new ones added, one rejected.
    let results = q
        .add_batch(vec![
            NewTask::new("old", "a").on_duplicate(OnDuplicate::Keep),
            NewTask::new("old", "c").body("c"),
            NewTask::new("old", "b")
                .body("b2")
                .on_duplicate(OnDuplicate::Replace),
            NewTask::new("old", "c"),
        ])
        .await
        .unwrap();
    assert!(matches!(
        results.as_slice(),
        [
            Ok(AddOutcome::Existed),
            Ok(AddOutcome::Added),
            Ok(AddOutcome::Replaced),
            Err(Error::Duplicate { .. })
        ]
    ));
    // In insertion order: the old task, then the batch's, the replaced one last.
    let got = q.pop("old", PopOptions::default().count(5)).await.unwrap();
    let got: Vec<(&str, &[u8])> = got
        .iter()
        .map(|d| (d.id.as_str(), d.body.as_slice()))
        .collect();
    assert_eq!(got, [("a", &b"x"[..]), ("c", b"c"), ("b", b"b2")]);
    // The SQL API's add, whose enqueue is migration 3's now, works as before.
    client
        .execute("SELECT delayq.add('old', 'd', 'z', delay_ms => 60000)", &[])
        .await
        .unwrap();
    let err = client
        .execute("SELECT delayq.add('old', 'd', 'z')", &[])
        .await
        .expect_err("a duplicate is rejected");
    assert_eq!(err.as_db_error().unwrap().code().code(), "23505");
    assert_eq!(q.get("old", "d").await.unwrap().state, State::Delayed);

    // A build that knows only version 2 refuses the schema, naming both versions, and
    // changes nothing.
    let err = schema::migrate_as_build(&mut client, "delayq", 2, 2)
        .await
        .expect_err("a version 2 build must refuse a version 3 schema");
    let text = format!("{err} {:?}", std::error::Error::source(&err));
    assert!(
        text.contains(&format!("version {}", schema::known_version()))
            && text.contains("newer than the 2"),
        "{text}"
    );
    assert_eq!(version_of(&client).await, schema::known_version());
}

/// The names of the key columns of `index`, in order.
async fn key_columns(client: &tokio_postgres::Client, index: &str) -> Vec<String> {
    client
        .query(
            "SELECT a.attname::text FROM pg_index i \
             JOIN pg_class c ON c.oid = i.indexrelid \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, nth) \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
             WHERE n.nspname = 'delayq' AND c.relname = $1 ORDER BY k.nth",
            &[&index],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_3_database_gets_the_key_that_leads_with_the_id() {
    let pg = PostgresServer::start();
    let client = laid_out_at(&pg, 3).await;
    // The same id in two topics, as version 3 adds them.
    client
        .batch_execute(
            "SELECT delayq.add('one', 'same', 'x'); \
             SELECT delayq.add('two', 'same', 'y', delay_ms => 600000)",
        )
        .await
        .unwrap();
    assert_eq!(key_columns(&client, "tasks_pkey").await, ["topic", "id"]);
    assert_eq!(key_columns(&client, "tasks_id").await, ["id"]);

    let q = instance(&pg, 3).await;
    assert_eq!(version_of(&client).await, schema::known_version());
    // The key leads with the id, so a lookup by the id alone reads its prefix.
    assert_eq!(key_columns(&client, "tasks_pkey").await, ["id", "topic"]);
    assert!(
        key_columns(&client, "tasks_id").await.is_empty(),
        "the index on the id alone is gone"
    );
    // The old rows are found by id, by (topic, id), and served.
    assert_eq!(q.locate("same").await.unwrap(), ["one", "two"]);
    assert_eq!(q.get("two", "same").await.unwrap().state, State::Delayed);
    let got = q.pop("one", PopOptions::default()).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body, b"x");
    // The key still refuses a duplicate, through the instance and through the SQL API.
    assert!(matches!(
        q.add(NewTask::new("two", "same")).await,
        Err(Error::Duplicate { .. })
    ));
    let err = client
        .execute("SELECT delayq.add('two', 'same', 'z')", &[])
        .await
        .expect_err("a duplicate is rejected");
    assert_eq!(err.as_db_error().unwrap().code().code(), "23505");
    // And a batch over the old rows: the same id in a third topic is new.
    let results = q
        .add_batch(vec![
            NewTask::new("three", "same"),
            NewTask::new("one", "same").on_duplicate(OnDuplicate::Keep),
        ])
        .await
        .unwrap();
    assert!(matches!(
        results.as_slice(),
        [Ok(AddOutcome::Added), Ok(AddOutcome::Existed)]
    ));
    assert_eq!(q.locate("same").await.unwrap(), ["one", "three", "two"]);
}
