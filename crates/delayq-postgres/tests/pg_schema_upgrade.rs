//! Schema upgrades (issue 28 step 1): a database laid out by the first schema version, with
//! tasks in it, is migrated to the newest version when an instance of this build starts; the
//! tasks are still there and served, and what the newer migrations add works. (A schema
//! newer than the build is refused: `pg_instances.rs`.)

use std::sync::Arc;
use std::time::Duration;

use delayq::{Clock, PopOptions, Queue, State, StorageContext, SystemClock};
use delayq_postgres::PostgresOptions;
use delayq_postgres::schema;
use delayq_postgres::tokio_postgres::{self, NoTls};
use delayq_testkit::PostgresServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_database_with_tasks_is_migrated_and_its_tasks_served() {
    let pg = PostgresServer::start();
    let (mut client, conn) = tokio_postgres::connect(&pg.url(), NoTls).await.unwrap();
    tokio::spawn(conn);
    assert_eq!(
        schema::migrate_to(&mut client, "delayq", 1).await.unwrap(),
        1
    );
    assert!(schema::known_version() > 1, "nothing to upgrade to");
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
    let functions: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
             WHERE n.nspname = 'delayq' AND p.proname = 'add'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(functions, 0, "version 1 has no SQL API");

    let ctx = StorageContext::new(Arc::new(SystemClock::new()));
    let storage = delayq_postgres::start(ctx.clone(), PostgresOptions::new(pg.url()))
        .await
        .expect("an instance of this build migrates a version 1 schema");
    let q = Queue::new(Arc::new(storage), ctx);
    let version: i32 = client
        .query_one("SELECT version FROM delayq.schema_version", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, schema::known_version());

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
