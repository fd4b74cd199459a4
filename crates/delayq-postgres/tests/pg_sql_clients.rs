//! The order example of docs/postgres.md with the three real clients (issue 28 step 3):
//! psycopg (Python, from PyPI: `scripts/python-deps`), node-postgres (`pg` from npm:
//! `scripts/node-deps`) and tokio-postgres. Each, in one transaction, inserts an order into
//! the application's own table and calls `delayq.add`, commits; then does the same for a
//! second order and rolls back. A delayq instance pops the committed task at its due (never
//! early) and never sees the rolled-back one; the application's table has the first order
//! only. The Python and Node programs are `tests/clients/order.py` and `order.js`.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use delayq::{Clock, Error, PopOptions, Queue, StorageContext, SystemClock};
use delayq_postgres::PostgresOptions;
use delayq_postgres::tokio_postgres::{self, NoTls};
use delayq_testkit::PostgresServer;
use serde_json::Value;

/// The delay of the order's cancellation in these tests.
const DELAY_MS: u64 = 800;

/// The cargo target directory, where `scripts/python-deps` and `scripts/node-deps` install.
fn target() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .to_path_buf()
}

fn client_script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(name)
}

/// Runs a client program to its end; returns the JSON line it printed.
fn run(mut command: Command) -> Value {
    let out = command.output().expect("run the client");
    assert!(
        out.status.success(),
        "{command:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    serde_json::from_str(stdout.lines().last().expect("a line")).expect("JSON")
}

/// Runs the client program `script` of `tests/clients` with `interpreter` against `url`.
async fn run_script(mut interpreter: Command, script: &str, url: String) -> Value {
    interpreter
        .arg(client_script(script))
        .arg(url)
        .arg(DELAY_MS.to_string());
    tokio::task::spawn_blocking(move || run(interpreter))
        .await
        .unwrap()
}

/// Starts a server and an instance, lets `client` run the example, and checks what it did.
async fn order_example(client: impl AsyncFnOnce(String) -> Value) {
    let pg = PostgresServer::start();
    let ctx = StorageContext::new(Arc::new(SystemClock::new()));
    let storage = delayq_postgres::start(ctx.clone(), PostgresOptions::new(pg.url()))
        .await
        .expect("start the PostgreSQL backend");
    let q = Queue::new(Arc::new(storage), ctx);
    // A consumer parked before the application commits: woken at the due.
    let parked = {
        let q = q.clone();
        tokio::spawn(async move {
            q.pop("orders", PopOptions::default().timeout_ms(30_000))
                .await
                .unwrap()
        })
    };

    let report = client(pg.url()).await;
    let due = report["due_ms"].as_u64().expect("due_ms");
    let got = parked.await.unwrap();
    let popped_at = SystemClock::new().now_ms();
    assert_eq!(got.len(), 1, "{report}");
    assert_eq!(got[0].id, "cancel-1");
    assert_eq!(got[0].due_ms, due);
    assert_eq!(
        got[0].body_text().unwrap().replace(' ', ""),
        "{\"order\":1}"
    );
    assert!(
        popped_at >= due,
        "popped at {popped_at}, before its due {due}"
    );
    assert!(
        popped_at < due + 3_000,
        "popped {} ms late",
        popped_at - due
    );
    q.finish("orders", "cancel-1", Some(&got[0].receipt))
        .await
        .unwrap();

    assert!(matches!(
        q.get("orders", "cancel-2").await,
        Err(Error::NotFound { .. })
    ));
    let (app, conn) = tokio_postgres::connect(&pg.url(), NoTls).await.unwrap();
    tokio::spawn(conn);
    let orders: Vec<i64> = app
        .query("SELECT id FROM orders ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(orders, [1], "the rolled-back order is gone with its task");

    let bad = &report["bad"];
    assert_eq!(bad["sqlstate"], "22023", "{report}");
    assert_eq!(bad["column"], "delay_ms", "{report}");
    let message = bad["message"].as_str().unwrap();
    assert!(
        message.contains("delayq.add: invalid delay_ms") && message.contains("got -5"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_order_example_with_psycopg() {
    let python = target().join("otel-venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/python-deps (scripts/test does)",
        python.display()
    );
    order_example(async |url| run_script(Command::new(&python), "order.py", url).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_order_example_with_node_postgres() {
    let modules = target().join("node-deps/node_modules");
    assert!(
        modules.join("pg").exists(),
        "{} is missing: run scripts/node-deps (scripts/test does)",
        modules.join("pg").display()
    );
    let mut node = Command::new("node");
    node.env("NODE_PATH", &modules);
    order_example(async |url| run_script(node, "order.js", url).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_order_example_with_tokio_postgres() {
    order_example(async |url| {
        let (mut client, conn) = tokio_postgres::connect(&url, NoTls).await.unwrap();
        tokio::spawn(conn);
        client
            .batch_execute("CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL)")
            .await
            .unwrap();
        let body = serde_json::json!({"order": 1}).to_string();
        let delay = DELAY_MS as i64;

        // The order and its delayed cancellation commit together, or not at all.
        let tx = client.transaction().await.unwrap();
        tx.execute(
            "INSERT INTO orders (id, status) VALUES ($1, 'unpaid')",
            &[&1i64],
        )
        .await
        .unwrap();
        let row = tx
            .query_one(
                "SELECT outcome, due_ms FROM delayq.add('orders', $1, $2::text, delay_ms => $3)",
                &[&"cancel-1", &body, &delay],
            )
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(row.get::<_, String>(0), "added");
        let due: i64 = row.get(1);

        // An order whose transaction fails: its task is gone with it.
        let tx = client.transaction().await.unwrap();
        tx.execute(
            "INSERT INTO orders (id, status) VALUES ($1, 'unpaid')",
            &[&2i64],
        )
        .await
        .unwrap();
        tx.execute(
            "SELECT delayq.add('orders', $1, $2::text, delay_ms => $3)",
            &[&"cancel-2", &body, &delay],
        )
        .await
        .unwrap();
        tx.rollback().await.unwrap();

        let err = client
            .execute(
                "SELECT delayq.add('orders', 'x', '{}', delay_ms => -5)",
                &[],
            )
            .await
            .expect_err("a negative delay");
        let db = err.as_db_error().unwrap();
        serde_json::json!({
            "due_ms": due,
            "bad": {"sqlstate": db.code().code(), "column": db.column(), "message": db.message()},
        })
    })
    .await;
}
