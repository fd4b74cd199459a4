//! Long-polling pops: waking, timing out, the cap on open long-polls, clients that disconnect
//! while waiting, and graceful shutdown with long-polls open.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{PATIENCE, Server, server};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Starts a long-poll in the background; resolves to the reply's JSON.
fn spawn_pop(s: &Server, body: Value) -> tokio::task::JoinHandle<(u16, Value)> {
    let url = s.url("/pop");
    tokio::spawn(async move {
        let resp = reqwest::Client::new()
            .post(url)
            .body(body.to_string())
            .send()
            .await
            .expect("pop request");
        let status = resp.status().as_u16();
        (status, resp.json().await.expect("pop reply"))
    })
}

#[tokio::test]
async fn a_waiting_pop_gets_a_task_added_later() {
    let s = server().start().await;
    let pop = spawn_pop(&s, json!({"topic": "lp", "timeout_ms": 30_000}));
    s.eventually("the pop is parked", async || {
        s.queue.context().waiters.parked() == 1
    })
    .await;
    assert_eq!(s.state.open_long_polls(), 1);
    s.add("lp", "late", json!({})).await;
    let (status, reply) = tokio::time::timeout(PATIENCE, pop).await.unwrap().unwrap();
    assert_eq!(status, 200);
    assert_eq!(reply["data"]["id"], "late");
    s.eventually("the slot is freed", async || s.state.open_long_polls() == 0)
        .await;
}

#[tokio::test]
async fn a_pop_times_out_with_null_on_the_queue_clock() {
    let s = server().manual_clock(1_000_000).start().await;
    let pop = spawn_pop(&s, json!({"topic": "lp", "timeout_ms": 5_000}));
    let counted = spawn_pop(&s, json!({"topic": "lp", "timeout_ms": 5_000, "count": 2}));
    s.eventually("both pops are parked", async || {
        s.queue.context().waiters.parked() == 2
    })
    .await;
    s.clock().advance(5_000);
    let (status, reply) = tokio::time::timeout(PATIENCE, pop).await.unwrap().unwrap();
    assert_eq!(
        (status, reply["code"].clone(), reply["data"].clone()),
        (200, json!(0), Value::Null)
    );
    let (_, reply) = tokio::time::timeout(PATIENCE, counted)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reply["data"], json!([]));
}

#[tokio::test]
async fn the_default_pop_timeout_applies_when_none_is_given() {
    let s = server()
        .manual_clock(1_000_000)
        .config(|c| c.http.default_pop_timeout_ms = 2_000)
        .start()
        .await;
    let pop = spawn_pop(&s, json!({"topic": "lp"}));
    s.eventually("the pop is parked", async || {
        s.queue.context().waiters.parked() == 1
    })
    .await;
    s.clock().advance(1_999);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !pop.is_finished(),
        "still waiting before the default timeout"
    );
    s.clock().advance(1);
    let (_, reply) = tokio::time::timeout(PATIENCE, pop).await.unwrap().unwrap();
    assert_eq!(reply["data"], Value::Null);
}

#[tokio::test]
async fn open_long_polls_are_capped_with_503() {
    let s = server().config(|c| c.http.max_long_polls = 1).start().await;
    let first = spawn_pop(&s, json!({"topic": "cap", "timeout_ms": 30_000}));
    s.eventually("the first pop is parked", async || {
        s.state.open_long_polls() == 1
    })
    .await;

    let r = s
        .post("/pop", json!({"topic": "cap", "timeout_ms": 30_000}))
        .await;
    r.err(503);
    assert!(r.message().contains("max_long_polls"), "{}", r.text);
    // A pop that does not wait is not a long-poll and is not refused.
    assert!(s.pop_now("cap").await.is_null());
    // An invalid pop is still a 400, not a 503.
    s.post("/pop", json!({"topic": "cap", "timeout_ms": 99_999_999}))
        .await
        .err(400);

    s.add("cap", "a", json!({})).await;
    let (_, reply) = tokio::time::timeout(PATIENCE, first)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reply["data"]["id"], "a");
    s.eventually("the slot is freed", async || s.state.open_long_polls() == 0)
        .await;
    s.add("cap", "b", json!({})).await;
    assert_eq!(s.pop_wait("cap").await["id"], "b");
}

#[tokio::test]
async fn a_client_that_disconnects_leaves_no_waiter_and_loses_no_task() {
    let s = server().start().await;
    let waiters = &s.queue.context().waiters;

    // A raw HTTP/1.1 request, so the test controls exactly when the socket goes away.
    let body = r#"{"topic":"gone","timeout_ms":60000}"#;
    let mut sock = TcpStream::connect(s.addr).await.unwrap();
    let request = format!(
        "POST /pop HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        s.addr,
        body.len()
    );
    sock.write_all(request.as_bytes()).await.unwrap();
    s.eventually("the pop is parked", async || waiters.parked() == 1)
        .await;
    assert_eq!(s.state.open_long_polls(), 1);

    drop(sock);
    s.eventually("the waiter is gone", async || waiters.parked() == 0)
        .await;
    s.eventually("the long-poll slot is freed", async || {
        s.state.open_long_polls() == 0
    })
    .await;

    s.add("gone", "t1", json!({})).await;
    let got = s.get_task("gone", "t1").await;
    assert_eq!(got.ok()["state_name"], "ready", "nobody took it");
    let task = s.pop_wait("gone").await;
    assert_eq!(task["id"], "t1");
    assert_eq!(task["retries"], 0);
    assert_eq!(waiters.parked(), 0);
}

#[tokio::test]
async fn many_waiters_share_tasks_without_loss() {
    let s = server().start().await;
    let pops: Vec<_> = (0..8)
        .map(|_| spawn_pop(&s, json!({"topic": "many", "timeout_ms": 30_000})))
        .collect();
    s.eventually("all pops are parked", async || {
        s.queue.context().waiters.parked() == 8
    })
    .await;
    let r = s
        .post(
            "/add",
            json!({"tasks": (0..8).map(|i| json!({"topic": "many", "id": format!("t{i}")})).collect::<Vec<_>>()}),
        )
        .await;
    r.ok();
    let mut ids = Vec::new();
    for pop in pops {
        let (_, reply) = tokio::time::timeout(PATIENCE, pop).await.unwrap().unwrap();
        ids.push(
            reply["data"]["id"]
                .as_str()
                .expect("every pop got a task")
                .to_owned(),
        );
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 8, "each task once: {ids:?}");
}

#[tokio::test]
async fn graceful_shutdown_ends_long_polls_and_flushes() {
    let mut config = delayq_daemon::ServerConfig::default();
    config.shutdown_timeout_ms = 30_000;
    let queue = delayq::Queue::memory();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn({
        let queue = queue.clone();
        async move {
            delayq_daemon::run(listener, queue, &config, async {
                let _ = stopped.await;
            })
            .await
        }
    });
    let client = reqwest::Client::new();
    let pop = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .post(format!("http://{addr}/pop"))
                .body(r#"{"topic":"sd","timeout_ms":60000}"#)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    });
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while queue.context().waiters.parked() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the pop never parked"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.send(()).unwrap();
    let reply = tokio::time::timeout(PATIENCE, pop).await.unwrap().unwrap();
    assert_eq!(reply["code"], 0);
    assert_eq!(
        reply["data"],
        Value::Null,
        "the long-poll ended with no task"
    );
    let result = tokio::time::timeout(PATIENCE, running)
        .await
        .unwrap()
        .unwrap();
    assert!(result.is_ok(), "{result:?}");
    assert!(queue.is_closing(), "the queue was shut down");
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "the listener is closed"
    );
}
