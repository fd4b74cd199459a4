//! `POST /pop` carrying the acknowledgement of the task its consumer held (`finish` or
//! `release`), through a real socket: a consumer loop of one request a task. The
//! acknowledgement applies first, exactly as its own call would; when it fails, its error is
//! the answer and nothing is popped; a pop that is itself invalid changes nothing.

mod support;

use serde_json::{Value, json};
use support::{ORDERS_ONLY, server};

fn receipt(task: &Value) -> &str {
    task["receipt"].as_str().expect("a receipt")
}

#[tokio::test]
async fn a_finish_in_a_pop_finishes_the_held_task_and_hands_out_the_next() {
    let s = server().start().await;
    for id in ["a", "b", "c"] {
        s.add("jobs", id, json!({})).await;
    }
    let mut held = s.pop_now("jobs").await;
    let mut seen = vec![held["id"].as_str().unwrap().to_owned()];
    for _ in 0..2 {
        let body = json!({"topic": "jobs", "timeout_ms": 5_000, "finish":
            {"topic": "jobs", "id": held["id"], "receipt": receipt(&held)}});
        let next = s.post("/pop", body).await.ok().clone();
        let done = s.get_task("jobs", held["id"].as_str().unwrap()).await;
        assert_eq!(done.ok()["state_name"], "finished", "{}", done.text);
        seen.push(next["id"].as_str().unwrap().to_owned());
        held = next;
    }
    assert_eq!(seen, ["a", "b", "c"]);
    // The last one: finished, and the pop finds nothing more.
    let body = json!({"topic": "jobs", "timeout_ms": 0, "finish":
        {"topic": "jobs", "id": "c", "receipt": receipt(&held)}});
    assert!(s.post("/pop", body).await.ok().is_null());
    assert_eq!(s.get_task("jobs", "c").await.ok()["state_name"], "finished");
    let stats = s.get("/stats?topic=jobs").await.ok().clone();
    assert_eq!(stats["finished"], 3, "{stats}");
}

#[tokio::test]
async fn a_release_in_a_pop_counts_a_retry_and_keeps_its_error() {
    let s = server().start().await;
    s.add("jobs", "a", json!({})).await;
    let held = s.pop_now("jobs").await;
    let body = json!({"topic": "jobs", "timeout_ms": 0, "release": {"topic": "jobs",
        "id": "a", "receipt": receipt(&held), "delay_ms": 60_000, "error": "HTTP 502"}});
    // Released with a delay: nothing is ready, so the pop finds nothing.
    assert!(s.post("/pop", body).await.ok().is_null());
    let task = s.get_task("jobs", "a").await.ok().clone();
    assert_eq!(task["state_name"], "delayed", "{task}");
    assert_eq!(task["retries"], 1, "{task}");
    assert!(task.to_string().contains("HTTP 502"), "{task}");
}

#[tokio::test]
async fn a_failed_acknowledgement_is_the_answer_and_nothing_is_popped() {
    let s = server().start().await;
    for id in ["a", "b"] {
        s.add("jobs", id, json!({})).await;
    }
    let held = s.pop_now("jobs").await;
    // A stale receipt: 409, as POST /finish would answer; b stays READY.
    let body = json!({"topic": "jobs", "timeout_ms": 0, "finish":
        {"topic": "jobs", "id": "a", "receipt": "not-the-receipt"}});
    let reply = s.post("/pop", body).await;
    reply.err(409);
    assert_eq!(s.get_task("jobs", "b").await.ok()["state_name"], "ready");
    assert_eq!(s.get_task("jobs", "a").await.ok()["state_name"], "active");
    // An unknown task: 404, and still nothing popped.
    let body = json!({"topic": "jobs", "timeout_ms": 0, "release":
        {"topic": "jobs", "id": "nope"}});
    s.post("/pop", body).await.err(404);
    assert_eq!(s.get_task("jobs", "b").await.ok()["state_name"], "ready");
    // The right receipt goes through.
    let body = json!({"topic": "jobs", "timeout_ms": 0, "finish":
        {"topic": "jobs", "id": "a", "receipt": receipt(&held)}});
    assert_eq!(s.post("/pop", body).await.ok()["id"], "b");
}

#[tokio::test]
async fn a_bad_pop_changes_nothing_and_both_acknowledgements_are_refused() {
    let s = server().start().await;
    s.add("jobs", "a", json!({})).await;
    let held = s.pop_now("jobs").await;
    let finish = json!({"topic": "jobs", "id": "a", "receipt": receipt(&held)});
    // The pop's own fields are checked before the finish is applied.
    let body = json!({"topic": "jobs", "count": 1_000_000_000u64, "finish": finish});
    let reply = s.post("/pop", body).await;
    reply.err(400);
    assert!(reply.message().contains("count"), "{}", reply.text);
    assert_eq!(s.get_task("jobs", "a").await.ok()["state_name"], "active");
    // Finish and release together: 400 naming release, and nothing changed.
    let body = json!({"topic": "jobs", "timeout_ms": 0, "finish": finish, "release": finish});
    let reply = s.post("/pop", body).await;
    reply.err(400);
    assert!(reply.message().contains("release"), "{}", reply.text);
    assert_eq!(s.get_task("jobs", "a").await.ok()["state_name"], "active");
    // A malformed acknowledgement names its field.
    let body = json!({"topic": "jobs", "finish": {"topic": "jobs"}});
    let reply = s.post("/pop", body).await;
    reply.err(400);
    assert!(reply.message().contains("finish.id"), "{}", reply.text);
}

#[tokio::test]
async fn the_acknowledged_topic_is_checked_against_the_token() {
    let s = server().with_auth().start().await;
    s.add("secret", "x", json!({})).await;
    let held = s.pop_now("secret").await;
    // A token limited to orders may pop orders, but not finish a task of another topic.
    let reply = reqwest::Client::new()
        .post(s.url("/pop"))
        .bearer_auth(ORDERS_ONLY)
        .json(&json!({"topic": "orders", "timeout_ms": 0, "finish":
            {"topic": "secret", "id": "x", "receipt": receipt(&held)}}))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 403);
    let body: Value = reply.json().await.unwrap();
    assert!(
        body["message"].as_str().unwrap().contains("finish.topic"),
        "{body}"
    );
    assert_eq!(s.get_task("secret", "x").await.ok()["state_name"], "active");
}
