//! `/push` over a real socket (docs/push.md): targets are set, shown without their secret
//! and removed; bad input is a 400 naming the field; read-only tokens may only look; a
//! topic with a target refuses client pops with 409; deliveries to a real receiver show in
//! `/stats` and `/metrics`.

mod support;

use delayq_server::config::TokenConfig;
use delayq_testkit::Receiver;
use reqwest::Method;
use serde_json::json;
use support::{PATIENCE, server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_are_set_shown_without_secret_and_deleted() {
    let s = server().with_push().start().await;
    let set = s
        .post(
            "/push",
            json!({"topic": "orders", "url": "https://hooks.example.com/o", "secret": "k",
                   "headers": {"X-Env": "prod"}, "rate_per_s": 5}),
        )
        .await;
    let view = set.ok().clone();
    assert_eq!(view["url"], "https://hooks.example.com/o");
    assert_eq!(view["concurrency"], 4, "the default");
    assert_eq!(view["burst"], 5);
    assert_eq!(view["has_secret"], true);
    assert!(view.get("secret").is_none());
    s.post(
        "/push",
        json!({"topic": "pay", "url": "http://127.0.0.1:1/"}),
    )
    .await
    .ok();

    let all = s.get("/push").await;
    let data = all.ok();
    assert_eq!(data["total"], 2);
    assert_eq!(data["targets"][0]["topic"], "orders");
    assert!(
        !all.text.contains("\"k\""),
        "the secret never leaves: {}",
        all.text
    );
    let one = s.get("/push?topic=pay").await;
    assert_eq!(one.ok()["targets"][0]["topic"], "pay");
    assert_eq!(s.get("/push?topic=none").await.ok()["total"], 0);

    let del = s.request(Method::DELETE, "/push?topic=pay").await;
    assert_eq!(del.ok()["deleted"], true);
    let again = s.request(Method::DELETE, "/push?topic=pay").await;
    assert_eq!(again.ok()["deleted"], false);
    assert_eq!(s.get("/push").await.ok()["total"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_targets_are_400_naming_the_field() {
    let s = server().with_push().start().await;
    let cases = [
        (json!({"url": "http://h/"}), "topic"),
        (json!({"topic": "t"}), "url"),
        (json!({"topic": "t", "url": "ftp://h/"}), "url"),
        (
            json!({"topic": "t", "url": "http://h/", "concurrency": 0}),
            "concurrency",
        ),
        (
            json!({"topic": "t", "url": "http://h/", "concurrency": "x"}),
            "concurrency",
        ),
        (
            json!({"topic": "t", "url": "http://h/", "timeout_ms": 0}),
            "timeout_ms",
        ),
        (
            json!({"topic": "t", "url": "http://h/", "rate_per_s": -1}),
            "rate_per_s",
        ),
        (
            json!({"topic": "t", "url": "http://h/", "burst": 3}),
            "burst",
        ),
        (
            json!({"topic": "t", "url": "http://h/", "headers": {"Delayq-Attempt": "9"}}),
            "headers.Delayq-Attempt",
        ),
        (
            json!({"topic": "t", "url": "http://h/", "headers": {"Host": "x"}}),
            "headers.Host",
        ),
        (
            json!({"topic": "t", "url": "http://h/", "secret": ""}),
            "secret",
        ),
    ];
    for (body, field) in cases {
        let reply = s.post("/push", body.clone()).await;
        reply.err(400);
        assert_eq!(reply.data()["field"], field, "{body}: {}", reply.message());
    }
    let reply = s.request(Method::DELETE, "/push").await;
    reply.err(400);
    assert_eq!(reply.data()["field"], "topic");
    assert_eq!(s.get("/push").await.ok()["total"], 0, "nothing was stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_and_topic_limited_tokens() {
    const WRITER: &str = "writer-token-0123456789";
    const READER: &str = "reader-token-0123456789";
    const ORDERS: &str = "orders-token-0123456789";
    let s = server()
        .with_push()
        .config(|c| {
            c.tokens = vec![
                TokenConfig::new(WRITER),
                TokenConfig::new(READER).read_only(),
                TokenConfig::for_topics(ORDERS, vec!["orders".into()]),
            ]
        })
        .start()
        .await;
    let target = json!({"topic": "orders", "url": "http://127.0.0.1:1/"});
    s.post_raw(
        "/push",
        target.to_string(),
        "application/json",
        Some(READER),
    )
    .await
    .err(403);
    s.post_raw(
        "/push",
        target.to_string(),
        "application/json",
        Some(ORDERS),
    )
    .await
    .ok();
    let other = json!({"topic": "pay", "url": "http://127.0.0.1:1/"});
    s.post_raw("/push", other.to_string(), "application/json", Some(ORDERS))
        .await
        .err(403);
    s.post_raw("/push", other.to_string(), "application/json", Some(WRITER))
        .await
        .ok();
    // The reader sees every target; the orders token only its own.
    assert_eq!(s.get_as("/push", Some(READER)).await.ok()["total"], 2);
    assert_eq!(s.get_as("/push", Some(ORDERS)).await.ok()["total"], 1);
    let del = reqwest::Client::new()
        .delete(s.url("/push?topic=orders"))
        .bearer_auth(READER)
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), 403);
    assert_eq!(s.get_as("/push", Some(READER)).await.ok()["total"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_topic_refuses_client_pops_with_409() {
    let s = server().with_push().start().await;
    s.post(
        "/push",
        json!({"topic": "hooked", "url": "http://127.0.0.1:1/"}),
    )
    .await
    .ok();
    let reply = s
        .post("/pop", json!({"topic": "hooked", "timeout_ms": 0}))
        .await;
    reply.err(409);
    assert!(
        reply.message().contains("push target"),
        "{}",
        reply.message()
    );
    assert_eq!(reply.data()["field"], "topic");
    // Other topics pop as before; without the target the topic does too.
    s.post("/pop", json!({"topic": "other", "timeout_ms": 0}))
        .await
        .ok();
    s.request(Method::DELETE, "/push?topic=hooked").await.ok();
    s.post("/pop", json!({"topic": "hooked", "timeout_ms": 0}))
        .await
        .ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_show_in_stats_and_metrics() {
    let receiver = Receiver::ok().await;
    let s = server().with_push().start().await;
    s.post(
        "/push",
        json!({"topic": "hooked", "url": receiver.url("/in")}),
    )
    .await
    .ok();
    for i in 0..3 {
        s.add("hooked", &format!("t{i}"), json!({"body": "hello"}))
            .await;
    }
    let calls = receiver.wait_for(3, PATIENCE).await;
    assert_eq!(calls.len(), 3);
    assert!(calls.iter().all(|c| c.body == b"hello"));
    s.eventually("the three are finished", async || {
        s.get("/stats?topic=hooked").await.ok()["finished"] == 3
    })
    .await;
    let stats = s.get("/stats?topic=hooked").await;
    let push = &stats.ok()["push"];
    assert_eq!(push["delivered"], 3, "{}", stats.text);
    assert_eq!(push["failed_status"], 0);
    assert_eq!(push["in_flight"], 0);
    assert!(push["latency_p99_ms"].as_u64().unwrap() > 0);
    // A topic without a target has no push figures.
    s.add("plain", "x", json!({})).await;
    let plain = s.get("/stats?topic=plain").await;
    assert!(plain.ok().get("push").is_none(), "{}", plain.text);
    let all = s.get("/stats").await;
    assert_eq!(all.ok()["topics"]["hooked"]["push"]["delivered"], 3);

    let metrics = reqwest::get(s.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "delayq_push_delivered_total{topic=\"hooked\"} 3",
        "delayq_push_failed_total{topic=\"hooked\",class=\"timeout\"} 0",
        "delayq_push_in_flight{topic=\"hooked\"} 0",
        "delayq_push_latency_seconds_bucket{topic=\"hooked\",le=\"+Inf\"} 3",
        "delayq_push_latency_seconds_count{topic=\"hooked\"} 3",
    ] {
        assert!(metrics.contains(line), "missing {line:?} in\n{metrics}");
    }
}
