//! Flow limits over HTTP (docs/flow-control.md): `POST /limits`, `GET /limits`, `DELETE
//! /limits`; a task's `key` on `/add` and in `/get`; what limits hold back in `/stats`,
//! `/topics` and `/metrics`; every pop (one, `count`, ack-and-take-next) obeys them; bad limits
//! and keys are a 400 naming the field.

mod support;

use serde_json::{Value, json};
use support::server;

const NOW: u64 = 1_800_000_000_000;

#[tokio::test]
async fn limits_are_set_shown_and_deleted() {
    let s = server().manual_clock(NOW).start().await;
    let set = s
        .post(
            "/limits",
            json!({"topic": "pay", "max_active_per_key": 2, "rate_per_s": 7.5}),
        )
        .await
        .ok()
        .clone();
    assert_eq!(
        set,
        json!({"topic": "pay", "rate_per_s": 7.5, "burst": 8, "max_active_per_key": 2}),
        "the burst in effect is shown"
    );
    s.post("/limits", json!({"topic": "mail", "max_active": 3}))
        .await
        .ok();
    let all = s.get("/limits").await.ok().clone();
    assert_eq!(all["total"], 2);
    assert_eq!(all["limits"][0]["topic"], "mail");
    let one = s.get("/limits?topic=pay").await.ok().clone();
    assert_eq!(one["total"], 1);
    assert_eq!(one["limits"][0]["max_active_per_key"], 2);
    // A set replaces the whole limits.
    s.post("/limits", json!({"topic": "pay", "max_active": 1}))
        .await
        .ok();
    let one = s.get("/limits?topic=pay").await.ok().clone();
    assert_eq!(one["limits"][0], json!({"topic": "pay", "max_active": 1}));
    let deleted = s
        .request(reqwest::Method::DELETE, "/limits?topic=pay")
        .await
        .ok()
        .clone();
    assert_eq!(deleted, json!({"topic": "pay", "deleted": true}));
    let again = s
        .request(reqwest::Method::DELETE, "/limits?topic=pay")
        .await
        .ok()
        .clone();
    assert_eq!(again["deleted"], false);
    assert_eq!(s.get("/limits").await.ok()["total"], 1);
    s.request(reqwest::Method::DELETE, "/limits").await.err(400);
}

#[tokio::test]
async fn bad_limits_and_keys_are_refused_naming_the_field() {
    let s = server().manual_clock(NOW).start().await;
    let cases: [(Value, &str); 9] = [
        (json!({"topic": "t", "max_active": 0}), "max_active"),
        (json!({"topic": "t", "max_active": -1}), "max_active"),
        (json!({"topic": "t", "max_active": 2.5}), "max_active"),
        (
            json!({"topic": "t", "max_active": 4_294_967_296u64}),
            "max_active",
        ),
        (json!({"topic": "t", "rate_per_s": 0}), "rate_per_s"),
        (json!({"topic": "t", "rate_per_s": 1e9}), "rate_per_s"),
        (json!({"topic": "t", "burst": 5}), "burst"),
        (
            json!({"topic": "t", "max_active_per_key": 2_000_000}),
            "max_active_per_key",
        ),
        (json!({"topic": "t"}), "max_active"),
    ];
    for (body, field) in cases {
        let reply = s.post("/limits", body.clone()).await;
        reply.err(400);
        assert!(
            reply.message().contains(field),
            "{body}: the message names {field}: {}",
            reply.text
        );
    }
    assert_eq!(s.get("/limits").await.ok()["total"], 0, "nothing was set");
    let reply = s
        .post("/add", json!({"topic": "t", "id": "a", "key": "bad key"}))
        .await;
    reply.err(400);
    assert!(reply.message().contains("key"), "{}", reply.text);
    let long = "k".repeat(257);
    s.post("/add", json!({"topic": "t", "id": "a", "key": long}))
        .await
        .err(400);
    assert_eq!(s.get("/stats?topic=t").await.ok()["total"], 0);
}

#[tokio::test]
async fn every_pop_obeys_the_limits_and_stats_show_what_they_hold_back() {
    let s = server().manual_clock(NOW).start().await;
    s.post("/limits", json!({"topic": "pay", "max_active_per_key": 1}))
        .await
        .ok();
    for id in ["a1", "a2", "a3"] {
        s.add("pay", id, json!({"key": "merchant-a"})).await;
    }
    s.add("pay", "b1", json!({"key": "merchant-b"})).await;
    assert_eq!(s.get_task("pay", "a1").await.ok()["key"], "merchant-a");
    // pop with count: one task of each key.
    let got = s
        .post(
            "/pop",
            json!({"topic": "pay", "count": 10, "timeout_ms": 0}),
        )
        .await
        .ok()
        .clone();
    let ids: Vec<&str> = got
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a1", "b1"]);
    let stats = s.get("/stats?topic=pay").await.ok().clone();
    assert_eq!(
        stats["held_back"],
        json!({"max_active": 0, "rate": 0, "key": 2})
    );
    let topics = s.get("/topics").await.ok().clone();
    assert!(topics.to_string().contains("\"held_back\""), "{topics}");
    let metrics = s.get("/metrics").await.text;
    assert!(
        metrics.contains("delayq_topic_held_back{topic=\"pay\",reason=\"key\"} 2"),
        "{metrics}"
    );
    // Ack and take the next: the finish frees a1's slot, the pop takes a2.
    let a1 = &got[0];
    let next = s
        .post(
            "/pop",
            json!({"topic": "pay", "timeout_ms": 0,
                   "finish": {"topic": "pay", "id": "a1", "receipt": a1["receipt"]}}),
        )
        .await
        .ok()
        .clone();
    assert_eq!(next["id"], "a2");
    assert!(s.pop_now("pay").await.is_null(), "both keys are busy");
}
