//! Read-only tokens (DESIGN §5: a token can be limited to topics, and to read-only): such a
//! token may GET what its topics allow and gets 403 naming why on every POST, which changes
//! nothing; a token that may write, given beside it, still can.

mod support;

use delayq_server::config::TokenConfig;
use serde_json::{Value, json};
use support::{Server, server};

const WRITER: &str = "writer-token-0123456789";
const READER: &str = "reader-token-0123456789";
const ORDERS_READER: &str = "orders-reader-token-0123456789";

async fn start() -> Server {
    server()
        .config(|c| {
            c.tokens = vec![
                TokenConfig::new(WRITER),
                TokenConfig::new(READER).read_only(),
                TokenConfig::for_topics(ORDERS_READER, vec!["orders".into()]).read_only(),
            ]
        })
        .start()
        .await
}

async fn post_as(s: &Server, token: &str, path: &str, body: Value) -> support::Reply {
    s.post_raw(path, body.to_string(), "application/json", Some(token))
        .await
}

/// Every POST of the API with a body it would accept from a writer.
fn writes(receipt: &Value) -> Vec<(&'static str, Value)> {
    vec![
        ("/add", json!({"topic": "orders", "id": "new"})),
        (
            "/add",
            json!({"tasks": [{"topic": "orders", "id": "batch"}]}),
        ),
        ("/pop", json!({"topic": "orders", "timeout_ms": 0})),
        (
            "/finish",
            json!({"topic": "orders", "id": "held", "receipt": receipt}),
        ),
        (
            "/release",
            json!({"topic": "orders", "id": "held", "receipt": receipt}),
        ),
        (
            "/touch",
            json!({"topic": "orders", "id": "held", "receipt": receipt}),
        ),
        ("/cancel", json!({"topic": "orders", "id": "ready"})),
        ("/requeue", json!({"topic": "orders", "id": "ready"})),
        ("/delete", json!({"topic": "orders", "id": "ready"})),
        (
            "/bury",
            json!({"topic": "orders", "id": "held", "receipt": receipt}),
        ),
        (
            "/reschedule",
            json!({"topic": "orders", "id": "ready", "delay_ms": 1000}),
        ),
        ("/pause", json!({"topic": "orders"})),
        ("/resume", json!({"topic": "orders"})),
    ]
}

#[tokio::test]
async fn read_only_tokens_may_read_and_are_refused_every_write() {
    let s = start().await;
    // One task held by a consumer, one ready.
    post_as(&s, WRITER, "/add", json!({"topic": "orders", "id": "held"}))
        .await
        .ok();
    let popped = post_as(
        &s,
        WRITER,
        "/pop",
        json!({"topic": "orders", "timeout_ms": 0}),
    )
    .await;
    let receipt = popped.ok()["receipt"].clone();
    post_as(
        &s,
        WRITER,
        "/add",
        json!({"topic": "orders", "id": "ready"}),
    )
    .await
    .ok();
    post_as(&s, WRITER, "/add", json!({"topic": "payments", "id": "p"}))
        .await
        .ok();
    let stats_before = s.get_as("/stats?topic=orders", Some(WRITER)).await.text;

    // Reads: every GET, for an unrestricted reader; the topic-limited one only its topic.
    for path in [
        "/get?topic=orders&id=held",
        "/get?topic=payments&id=p",
        "/tasks?topic=orders",
        "/stats?topic=orders",
        "/stats",
        "/topics",
        "/metrics",
        "/openapi.json",
    ] {
        let reply = s.get_as(path, Some(READER)).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.text);
    }
    for path in [
        "/get?topic=orders&id=held",
        "/tasks?topic=orders",
        "/stats?topic=orders",
        "/topics",
    ] {
        let reply = s.get_as(path, Some(ORDERS_READER)).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.text);
    }
    let topics = s.get_as("/topics", Some(ORDERS_READER)).await.text;
    assert!(!topics.contains("payments"), "{topics}");
    for path in ["/get?topic=payments&id=p", "/metrics"] {
        s.get_as(path, Some(ORDERS_READER)).await.err(403);
    }

    // Writes: 403 naming the reason, for both readers, on every POST.
    for token in [READER, ORDERS_READER] {
        for (path, body) in writes(&receipt) {
            let reply = post_as(&s, token, path, body.clone()).await;
            reply.err(403);
            assert!(
                reply.message().contains("read-only") && reply.message().contains(path),
                "{path} {body}: {}",
                reply.text
            );
        }
    }
    // Nothing changed: the same counts, the held task still held by its receipt.
    assert_eq!(
        s.get_as("/stats?topic=orders", Some(WRITER)).await.text,
        stats_before
    );
    let held = s.get_as("/get?topic=orders&id=held", Some(WRITER)).await;
    assert_eq!(held.ok()["state_name"], "active", "{}", held.text);

    // The writer still may: every refused write succeeds with its token.
    for (path, body) in writes(&receipt) {
        if [
            "/release",
            "/touch",
            "/requeue",
            "/delete",
            "/bury",
            "/reschedule",
        ]
        .contains(&path)
        {
            continue; // finished or cancelled by the writes before them
        }
        let reply = post_as(&s, WRITER, path, body.clone()).await;
        assert_eq!(reply.status, 200, "{path} {body}: {}", reply.text);
    }
    let cancelled = s.get_as("/get?topic=orders&id=ready", Some(WRITER)).await;
    assert_eq!(
        cancelled.ok()["state_name"],
        "cancelled",
        "{}",
        cancelled.text
    );
}
