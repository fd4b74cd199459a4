//! Task expiry over HTTP (docs/flow-control.md): `expires_at_ms` / `expires_in_ms` and
//! `on_expire` on `/add` (one task and each task of a batch) and on schedules, shown by `/get`
//! and `/tasks`; bad input is a 400 naming the field; an expired task is counted in `/stats`,
//! `/topics` and `/metrics`; a reschedule past the expiry is a 409.

mod support;

use serde_json::{Value, json};
use support::server;

const NOW: u64 = 1_800_000_000_000;

/// (what, body, the field the message must name)
type BadCase<'a> = (&'a str, Value, &'a str);

#[tokio::test]
async fn bad_expiries_are_refused_naming_the_field() {
    let s = server().manual_clock(NOW).start().await;
    let ten_years = 315_576_000_000u64;
    let cases: Vec<BadCase<'_>> = vec![
        (
            "both forms",
            json!({"topic": "t", "id": "a", "expires_at_ms": NOW + 5_000, "expires_in_ms": 5_000}),
            "expires_in_ms",
        ),
        (
            "relative expiry at the due",
            json!({"topic": "t", "id": "a", "delay_ms": 1_000, "expires_in_ms": 1_000}),
            "expires_in_ms",
        ),
        (
            "absolute expiry before the due",
            json!({"topic": "t", "id": "a", "run_at_ms": NOW + 2_000, "expires_at_ms": NOW + 1_000}),
            "expires_at_ms",
        ),
        (
            "absolute expiry in the past",
            json!({"topic": "t", "id": "a", "expires_at_ms": NOW - 1}),
            "expires_at_ms",
        ),
        (
            "relative expiry over ten years",
            json!({"topic": "t", "id": "a", "expires_in_ms": ten_years + 1}),
            "expires_in_ms",
        ),
        (
            "absolute expiry over ten years ahead",
            json!({"topic": "t", "id": "a", "expires_at_ms": NOW + ten_years + 1}),
            "expires_at_ms",
        ),
        (
            "negative expiry",
            json!({"topic": "t", "id": "a", "expires_in_ms": -5}),
            "expires_in_ms",
        ),
        (
            "unknown policy",
            json!({"topic": "t", "id": "a", "expires_in_ms": 5, "on_expire": "keep"}),
            "on_expire",
        ),
    ];
    for (what, body, field) in cases {
        let reply = s.post("/add", body).await;
        reply.err(400);
        assert!(
            reply.message().contains(field),
            "{what}: the message names {field}: {}",
            reply.text
        );
    }
    // Nothing was added.
    assert_eq!(s.get("/stats?topic=t").await.ok()["total"], 0);

    // A batch: the bad task fails alone, naming its place.
    let batch = json!({"tasks": [
        {"topic": "t", "id": "ok", "expires_in_ms": 60_000, "on_expire": "drop"},
        {"topic": "t", "id": "bad", "delay_ms": 500, "expires_in_ms": 400},
    ]});
    let items = s.post("/add", batch).await.ok().clone();
    assert_eq!(items[0]["code"], 0, "{items}");
    assert_eq!(items[1]["code"], 400, "{items}");
    assert!(
        items[1]["message"]
            .as_str()
            .unwrap()
            .contains("tasks[1].expires_in_ms"),
        "{items}"
    );
    let view = s.get_task("t", "ok").await.ok().clone();
    assert_eq!(
        (&view["expires_at_ms"], &view["on_expire"]),
        (&json!(NOW + 60_000), &json!("drop"))
    );

    // A schedule's expiry must be at least 1 ms.
    let reply = s
        .post(
            "/schedules",
            json!({"topic": "t", "name": "s", "every_ms": 60_000, "expires_in_ms": 0}),
        )
        .await;
    reply.err(400);
    assert!(reply.message().contains("expires_in_ms"), "{}", reply.text);
}

#[tokio::test]
async fn an_expired_task_is_dead_and_counted_in_stats_topics_and_metrics() {
    let s = server().manual_clock(NOW).start().await;
    s.add("t", "a", json!({"delay_ms": 1_000, "expires_in_ms": 2_000}))
        .await;
    s.add("t", "b", json!({"delay_ms": 1_000})).await;
    let view = s.get_task("t", "a").await.ok().clone();
    assert_eq!(
        (&view["expires_at_ms"], &view["on_expire"]),
        (&json!(NOW + 2_000), &json!("dead"))
    );
    assert!(
        s.get_task("t", "b")
            .await
            .ok()
            .get("expires_at_ms")
            .is_none()
    );
    let listed = s.get("/tasks?topic=t").await.ok().clone();
    assert!(listed.to_string().contains("expires_at_ms"), "{listed}");

    // Moving the due to or past the expiry is a conflict that names the expiry.
    let reply = s
        .post(
            "/reschedule",
            json!({"topic": "t", "id": "a", "run_at_ms": NOW + 2_000}),
        )
        .await;
    reply.err(409);
    assert!(reply.message().contains("expires at"), "{}", reply.text);

    s.clock().advance(2_000);
    s.eventually("a expired", async || {
        s.get_task("t", "a").await.ok()["state_name"] == "dead"
    })
    .await;
    let dead = s.get_task("t", "a").await.ok().clone();
    assert_eq!(dead["last_error"], "expired");
    let stats = s.get("/stats?topic=t").await.ok().clone();
    assert_eq!((&stats["expired"], &stats["dead"]), (&json!(1), &json!(1)));
    let topics = s.get("/topics").await.ok().clone();
    assert!(
        topics["topics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "t" && t["stats"]["expired"] == 1),
        "{topics}"
    );
    let metrics = s.get("/metrics").await.text;
    assert!(
        metrics.contains("delayq_tasks_expired_total{topic=\"t\"} 1"),
        "{metrics}"
    );
    // Only the task without an expiry is handed out.
    assert_eq!(s.pop_wait("t").await["id"], "b");
    assert!(s.pop_now("t").await.is_null());
}
