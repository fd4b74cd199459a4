//! The endpoints of docs/design.md §2 rules 11–15 through a real socket: `/bury`,
//! `/reschedule`, `/pause`, `/resume`, `priority` on add and release, binary bodies with
//! `body_encoding`, and the pause in `/stats`, `/topics` and `/metrics`. The queue runs on a
//! manual clock, so every due and every pause end is exact.

mod support;

use serde_json::{Value, json};
use support::server;

const NOW: u64 = 1_800_000_000_000;

#[tokio::test]
async fn bury_moves_the_held_task_to_dead_and_checks_the_receipt() {
    let s = server().manual_clock(NOW).start().await;
    s.add("t", "a", json!({"ttr_ms": 1000})).await;
    let old = s.pop_wait("t").await;
    s.clock().advance(1000);
    let new = s.pop_wait("t").await;
    let stale = s
        .post(
            "/bury",
            json!({"topic": "t", "id": "a", "receipt": old["receipt"]}),
        )
        .await;
    stale.err(409);
    assert!(stale.message().contains("receipt"), "{}", stale.text);
    let buried = s
        .post(
            "/bury",
            json!({"topic": "t", "id": "a", "receipt": new["receipt"], "priority": 5}),
        )
        .await;
    assert!(buried.ok().is_null());
    let task = s.get_task("t", "a").await;
    let task = task.ok();
    assert_eq!(
        (&task["state_name"], &task["last_error"], &task["priority"]),
        (&json!("dead"), &json!("buried"), &json!(5))
    );
    // Not ACTIVE any more: a second bury is a conflict; an unknown task is 404.
    s.post("/bury", json!({"topic": "t", "id": "a"}))
        .await
        .err(409);
    s.post("/bury", json!({"topic": "t", "id": "nope"}))
        .await
        .err(404);
    let stats = s.get("/stats?topic=t").await;
    assert_eq!(stats.ok()["dead"], 1);
    // A requeue brings it back.
    s.post("/requeue", json!({"topic": "t", "id": "a"}))
        .await
        .ok();
    assert_eq!(s.pop_wait("t").await["id"], "a");
}

#[tokio::test]
async fn bury_keeps_the_error_given() {
    let s = server().manual_clock(NOW).start().await;
    s.add("t", "a", json!({})).await;
    s.pop_wait("t").await;
    s.post(
        "/bury",
        json!({"topic": "t", "id": "a", "error": "cannot parse"}),
    )
    .await
    .ok();
    let task = s.get_task("t", "a").await;
    assert_eq!(task.ok()["last_error"], "cannot parse");
}

#[tokio::test]
async fn reschedule_sets_a_new_due_and_refuses_an_active_task() {
    let s = server().manual_clock(NOW).start().await;
    s.add("t", "a", json!({"delay_ms": 60_000, "body": "keep me"}))
        .await;
    let r = s
        .post(
            "/reschedule",
            json!({"topic": "t", "id": "a", "delay_ms": 5000}),
        )
        .await;
    assert_eq!(r.ok(), &json!({"state": 0, "state_name": "delayed"}));
    let task = s.get_task("t", "a").await;
    assert_eq!(task.ok()["due_ms"], NOW + 5000);
    s.clock().advance(4999);
    assert!(s.pop_now("t").await.is_null(), "never early");
    let r = s
        .post(
            "/reschedule",
            json!({"topic": "t", "id": "a", "run_at_ms": NOW - 1}),
        )
        .await;
    assert_eq!(r.ok()["state_name"], "ready", "a past instant means now");
    let got = s.pop_wait("t").await;
    assert_eq!((&got["id"], &got["body"]), (&json!("a"), &json!("keep me")));
    let refused = s
        .post("/reschedule", json!({"topic": "t", "id": "a"}))
        .await;
    refused.err(409);
    assert!(refused.message().contains("active"), "{}", refused.text);
    s.post("/reschedule", json!({"topic": "t", "id": "nope"}))
        .await
        .err(404);
}

#[tokio::test]
async fn reschedule_without_a_time_means_now() {
    let s = server().manual_clock(NOW).start().await;
    s.add("t", "a", json!({"delay_ms": 60_000})).await;
    let r = s
        .post("/reschedule", json!({"topic": "t", "id": "a"}))
        .await;
    assert_eq!(r.ok()["state"], 1);
    assert_eq!(s.pop_wait("t").await["id"], "a");
}

#[tokio::test]
async fn pause_holds_pops_and_shows_in_stats_topics_and_metrics() {
    let s = server().manual_clock(NOW).start().await;
    s.add("t", "a", json!({})).await;
    let r = s
        .post("/pause", json!({"topic": "t", "for_ms": 10_000}))
        .await;
    assert_eq!(
        r.ok(),
        &json!({"topic": "t", "paused": true, "paused_until_ms": NOW + 10_000})
    );
    // Adds are accepted; nothing is handed out.
    s.add("t", "b", json!({})).await;
    assert!(s.pop_now("t").await.is_null());
    let stats = s.get("/stats?topic=t").await;
    let stats = stats.ok();
    assert_eq!(
        (&stats["paused"], &stats["paused_until_ms"], &stats["ready"]),
        (&json!(true), &json!(NOW + 10_000), &json!(2))
    );
    assert_eq!(stats["stats"]["paused"], true, "in seqdelay's map too");
    let all = s.get("/stats").await;
    assert_eq!(all.ok()["topics"]["t"]["paused"], true);
    let topics = s.get("/topics").await;
    assert_eq!(topics.ok()["topics"][0]["stats"]["paused"], true);
    let metrics = s.get("/metrics").await.text;
    assert!(
        metrics.contains("delayq_topic_paused{topic=\"t\"} 1"),
        "{metrics}"
    );
    // The pause ends by itself at its end.
    s.clock().advance(10_000);
    let stats = s.get("/stats?topic=t").await;
    assert_eq!(
        (&stats.ok()["paused"], &stats.ok()["paused_until_ms"]),
        (&json!(false), &Value::Null)
    );
    assert_eq!(s.pop_wait("t").await["id"], "a");
    let metrics = s.get("/metrics").await.text;
    assert!(
        metrics.contains("delayq_topic_paused{topic=\"t\"} 0"),
        "{metrics}"
    );
}

#[tokio::test]
async fn resume_wakes_a_waiting_pop() {
    let s = server().manual_clock(NOW).start().await;
    s.add("t", "a", json!({})).await;
    let r = s.post("/pause", json!({"topic": "t"})).await;
    assert_eq!(
        r.ok(),
        &json!({"topic": "t", "paused": true, "paused_until_ms": null})
    );
    let url = s.url("/pop");
    let waiting = tokio::spawn(async move {
        let reply = reqwest::Client::new()
            .post(url)
            .json(&json!({"topic": "t", "timeout_ms": 60_000}))
            .send()
            .await
            .unwrap();
        reply.json::<Value>().await.unwrap()
    });
    s.eventually("the pop is waiting", async || {
        s.state.open_long_polls() == 1
    })
    .await;
    let r = s.post("/resume", json!({"topic": "t"})).await;
    assert_eq!(r.ok()["paused"], false);
    let got = tokio::time::timeout(std::time::Duration::from_secs(30), waiting)
        .await
        .expect("the pop returned")
        .unwrap();
    assert_eq!(got["data"]["id"], "a", "{got}");
}

#[tokio::test]
async fn a_topic_without_tasks_can_be_paused_and_is_listed() {
    let s = server().manual_clock(NOW).start().await;
    s.post("/pause", json!({"topic": "empty"})).await.ok();
    let topics = s.get("/topics").await;
    let topics = topics.ok();
    assert_eq!(topics["total"], 1);
    assert_eq!(topics["topics"][0]["name"], "empty");
    assert_eq!(topics["topics"][0]["stats"]["paused"], true);
    s.post("/resume", json!({"topic": "empty"})).await.ok();
}

#[tokio::test]
async fn priorities_order_pops_and_release_changes_them() {
    let s = server().manual_clock(NOW).start().await;
    s.add("t", "default", json!({})).await;
    s.add("t", "urgent", json!({"priority": 0})).await;
    s.add("t", "low", json!({"priority": 4_294_967_295u64}))
        .await;
    let first = s.pop_wait("t").await;
    assert_eq!(
        (&first["id"], &first["priority"]),
        (&json!("urgent"), &json!(0))
    );
    let r = s
        .post(
            "/release",
            json!({"topic": "t", "id": "urgent", "receipt": first["receipt"], "priority": 2000}),
        )
        .await;
    assert_eq!(r.ok()["state_name"], "ready");
    let order: Vec<Value> = [
        s.pop_wait("t").await,
        s.pop_wait("t").await,
        s.pop_wait("t").await,
    ]
    .into_iter()
    .map(|d| d["id"].clone())
    .collect();
    assert_eq!(order, [json!("default"), json!("urgent"), json!("low")]);
    let task = s.get_task("t", "default").await;
    assert_eq!(task.ok()["priority"], 1024, "the default priority");
}

#[tokio::test]
async fn binary_bodies_travel_as_base64_and_text_as_text() {
    let s = server().manual_clock(NOW).start().await;
    // 0xff 0x00 0x80: not UTF-8.
    s.add(
        "t",
        "bin",
        json!({"body": "/wCA", "body_encoding": "base64"}),
    )
    .await;
    // Base64 of UTF-8 text is stored as those bytes and read back as text.
    s.add(
        "t",
        "text",
        json!({"body": "aGVsbG8=", "body_encoding": "base64"}),
    )
    .await;
    let bin = s.get_task("t", "bin").await;
    assert_eq!(
        (&bin.ok()["body"], &bin.ok()["body_encoding"]),
        (&json!("/wCA"), &json!("base64"))
    );
    let text = s.get_task("t", "text").await;
    assert_eq!(
        (&text.ok()["body"], &text.ok()["body_encoding"]),
        (&json!("hello"), &json!("text"))
    );
    let listed = s.get("/tasks?topic=t").await;
    let items = listed.ok()["items"].as_array().unwrap().clone();
    let bin_item = items.iter().find(|t| t["id"] == "bin").unwrap();
    assert_eq!(bin_item["body_encoding"], "base64");
    let popped = s.pop_wait("t").await;
    assert_eq!(
        (&popped["id"], &popped["body"], &popped["body_encoding"]),
        (&json!("bin"), &json!("/wCA"), &json!("base64"))
    );
    let stored = s.queue.get("t", "bin").await.unwrap();
    assert_eq!(stored.body, [0xff, 0x00, 0x80]);
}
