//! Every endpoint of docs/design.md §3 on its happy path, through a real socket.

mod support;

use serde_json::json;
use support::server;

#[tokio::test]
async fn seqdelay_readme_flow_with_form_content_type() {
    // seqdelay's README uses `curl -d`, which sends application/x-www-form-urlencoded.
    let s = server().start().await;
    let form = "application/x-www-form-urlencoded";
    let r = s
        .post_raw(
            "/add",
            r#"{"topic":"notify","id":"msg-1","delay_ms":0,"ttr_ms":30000}"#,
            form,
            None,
        )
        .await;
    let data = r.ok();
    assert_eq!(data["outcome"], "added");
    assert_eq!(data["existed"], false);

    let r = s
        .post_raw(
            "/pop",
            r#"{"topic":"notify","timeout_ms":5000}"#,
            form,
            None,
        )
        .await;
    let task = r.ok();
    assert_eq!(task["id"], "msg-1");
    assert_eq!(task["topic"], "notify");
    assert_eq!(task["retries"], 0);
    assert_eq!(task["ttr_ms"], 30_000);
    for key in ["body", "receipt", "due_ms"] {
        assert!(task.get(key).is_some(), "pop data has {key}: {task}");
    }

    let r = s
        .post_raw("/finish", r#"{"topic":"notify","id":"msg-1"}"#, form, None)
        .await;
    assert!(r.ok().is_null());
    let got = s.get_task("notify", "msg-1").await;
    assert_eq!(got.ok()["state"], 3);
    assert_eq!(got.ok()["state_name"], "finished");
}

#[tokio::test]
async fn python_worker_flow_with_body_and_no_receipt() {
    let s = server().start().await;
    s.add(
        "order-auto-cancel",
        "cancel-42",
        json!({"body": "{\"order_id\": \"42\"}", "delay_ms": 0, "ttr_ms": 30000}),
    )
    .await;
    let task = s.pop_wait("order-auto-cancel").await;
    assert_eq!(task["body"], "{\"order_id\": \"42\"}");
    s.post(
        "/finish",
        json!({"topic": "order-auto-cancel", "id": task["id"]}),
    )
    .await
    .ok();
}

#[tokio::test]
async fn add_only_needs_topic_id_and_delay() {
    let s = server().start().await;
    let data = s.add("t", "a", json!({"delay_ms": 60_000})).await;
    assert_eq!(
        data,
        json!({"topic": "t", "id": "a", "outcome": "added", "existed": false})
    );
    let task = s.get_task("t", "a").await;
    let task = task.ok();
    assert_eq!(task["state"], 0);
    assert_eq!(task["state_name"], "delayed");
    assert_eq!(task["body"], "");
    assert_eq!(task["delay_ms"], 60_000);
    assert_eq!(task["ttr_ms"], 30_000, "server default ttr");
    assert_eq!(task["max_retries"], 3, "server default max_retries");
    for key in [
        "due_ms",
        "created_at_ms",
        "updated_at_ms",
        "retries",
        "history",
    ] {
        assert!(task.get(key).is_some(), "get data has {key}: {task}");
    }
}

#[tokio::test]
async fn add_with_every_option_and_json_body() {
    let s = server().start().await;
    s.add(
        "t",
        "full",
        json!({
            "body": {"order_id": 7},
            "run_at_ms": 1,
            "ttr_ms": 1234,
            "max_retries": -1,
            "backoff": {"kind": "schedule", "ms": [120000, 600000]},
            "on_duplicate": "reject",
            "some_future_field": true
        }),
    )
    .await;
    let task = s.get_task("t", "full").await;
    let task = task.ok();
    assert_eq!(task["body"], r#"{"order_id":7}"#);
    assert_eq!(task["max_retries"], -1);
    assert_eq!(task["ttr_ms"], 1234);
    assert_eq!(
        task["backoff"],
        json!({"kind": "schedule", "ms": [120000, 600000]})
    );
    assert_eq!(
        task["state_name"], "ready",
        "a past run_at_ms is due at once"
    );
}

#[tokio::test]
async fn batch_add_reports_each_task() {
    let s = server().start().await;
    s.add("b", "exists", json!({})).await;
    let r = s
        .post(
            "/add",
            json!({"tasks": [
                {"topic": "b", "id": "one", "delay_ms": 1000},
                {"topic": "b", "id": "exists"},
                {"topic": "b", "id": "bad id!"},
                {"topic": "b", "id": "both", "delay_ms": 1, "run_at_ms": 2},
                {"topic": "c", "id": "two"},
                {"topic": "b", "id": "exists", "on_duplicate": "keep"}
            ]}),
        )
        .await;
    let items = r.ok().as_array().unwrap().clone();
    assert_eq!(items.len(), 6);
    let summary: Vec<(String, i64, Option<String>)> = items
        .iter()
        .map(|i| {
            (
                i["id"].as_str().unwrap().to_owned(),
                i["code"].as_i64().unwrap(),
                i["outcome"].as_str().map(str::to_owned),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("one".into(), 0, Some("added".into())),
            ("exists".into(), 409, None),
            ("bad id!".into(), 400, None),
            ("both".into(), 400, None),
            ("two".into(), 0, Some("added".into())),
            ("exists".into(), 0, Some("existed".into())),
        ]
    );
    assert!(
        items[2]["message"]
            .as_str()
            .unwrap()
            .contains("tasks[2].id"),
        "{}",
        items[2]
    );
    assert!(
        items[3]["message"]
            .as_str()
            .unwrap()
            .contains("tasks[3].run_at_ms"),
        "{}",
        items[3]
    );
    assert_eq!(items[0]["message"], "ok");
    s.get_task("c", "two").await.ok();
}

#[tokio::test]
async fn batch_errors_name_the_place_in_the_request() {
    // Task 0 is refused by the HTTP layer, task 1 by the queue: the message must still say
    // tasks[1], not the place task 1 had among the tasks the queue saw.
    let s = server().start().await;
    let r = s
        .post(
            "/add",
            json!({"tasks": [
                {"topic": "b", "id": "x", "delay_ms": 1, "run_at_ms": 2},
                {"topic": "b", "id": "bad id"},
                {"topic": "b", "id": "fine", "ttr_ms": 0}
            ]}),
        )
        .await;
    let items = r.ok().as_array().unwrap().clone();
    let messages: Vec<&str> = items
        .iter()
        .map(|i| i["message"].as_str().unwrap())
        .collect();
    assert!(messages[0].contains("tasks[0].run_at_ms"), "{messages:?}");
    assert!(messages[1].contains("tasks[1].id"), "{messages:?}");
    assert!(messages[2].contains("tasks[2].ttr_ms"), "{messages:?}");
}

#[tokio::test]
async fn pop_count_returns_a_list_and_auto_finish_finishes() {
    let s = server().start().await;
    for id in ["a", "b", "c"] {
        s.add("p", id, json!({})).await;
    }
    let r = s
        .post("/pop", json!({"topic": "p", "count": 2, "timeout_ms": 0}))
        .await;
    let list = r.ok().as_array().unwrap().clone();
    assert_eq!(list.len(), 2);
    let r = s
        .post(
            "/pop",
            json!({"topic": "p", "count": 5, "timeout_ms": 0, "auto_finish": true}),
        )
        .await;
    let list = r.ok().as_array().unwrap().clone();
    assert_eq!(list.len(), 1);
    let id = list[0]["id"].as_str().unwrap();
    assert_eq!(s.get_task("p", id).await.ok()["state_name"], "finished");
    // Nothing left: null without count, an empty list with it.
    assert!(s.pop_now("p").await.is_null());
    let r = s
        .post("/pop", json!({"topic": "p", "count": 3, "timeout_ms": 0}))
        .await;
    assert_eq!(r.ok(), &json!([]));
}

#[tokio::test]
async fn release_touch_cancel_requeue_delete() {
    let s = server().start().await;
    s.add("m", "r", json!({"max_retries": 0})).await;
    let task = s.pop_wait("m").await;
    let receipt = task["receipt"].as_str().unwrap().to_owned();

    let r = s
        .post(
            "/touch",
            json!({"topic": "m", "id": "r", "receipt": receipt}),
        )
        .await;
    assert!(r.ok()["deadline_ms"].as_u64().unwrap() >= task["due_ms"].as_u64().unwrap());

    let r = s
        .post(
            "/release",
            json!({"topic": "m", "id": "r", "receipt": receipt, "error": "boom"}),
        )
        .await;
    assert_eq!(r.ok(), &json!({"state": 5, "state_name": "dead"}));
    let got = s.get_task("m", "r").await;
    assert_eq!(got.ok()["last_error"], "boom");

    let r = s.post("/requeue", json!({"topic": "m", "id": "r"})).await;
    assert_eq!(r.ok(), &json!({"requeued": 1}));
    assert_eq!(s.get_task("m", "r").await.ok()["state_name"], "ready");

    s.add("m", "c", json!({"delay_ms": 60_000})).await;
    s.post("/cancel", json!({"topic": "m", "id": "c"}))
        .await
        .ok();
    assert_eq!(s.get_task("m", "c").await.ok()["state"], 4);

    s.post("/delete", json!({"topic": "m", "id": "c"}))
        .await
        .ok();
    s.get_task("m", "c").await.err(404);

    // requeue all: two dead tasks.
    for id in ["d1", "d2"] {
        s.add("dead", id, json!({"max_retries": 0})).await;
        let t = s.pop_wait("dead").await;
        s.post("/release", json!({"topic": "dead", "id": t["id"]}))
            .await
            .ok();
    }
    let r = s
        .post("/requeue", json!({"topic": "dead", "all": true}))
        .await;
    assert_eq!(r.ok(), &json!({"requeued": 2}));
}

#[tokio::test]
async fn tasks_stats_and_topics() {
    let s = server().start().await;
    for i in 0..5 {
        s.add(
            "l",
            &format!("t{i}"),
            json!({"delay_ms": 60_000 + i * 1000}),
        )
        .await;
    }
    s.add("l", "ready", json!({})).await;
    s.add("other", "x", json!({})).await;

    let r = s
        .get("/tasks?topic=l&state=delayed&page=1&page_size=2")
        .await;
    let page = r.ok();
    assert_eq!(page["total"], 5);
    assert_eq!(page["page"], 1);
    assert_eq!(page["page_size"], 2);
    let ids: Vec<_> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].clone())
        .collect();
    assert_eq!(ids, vec![json!("t0"), json!("t1")], "ordered by due");
    assert_eq!(page["items"][0]["state_name"], "delayed");

    let r = s.get("/tasks?topic=l&state=1").await;
    assert_eq!(r.ok()["total"], 1, "state by code");
    let r = s.get("/tasks?topic=l").await;
    assert_eq!(r.ok()["total"], 6);
    assert_eq!(r.ok()["page_size"], 100, "default page size");

    let r = s.get("/stats?topic=l").await;
    let stats = r.ok();
    assert_eq!(stats["delayed"], 5);
    assert_eq!(stats["ready"], 1);
    assert_eq!(stats["total"], 6);
    assert!(stats["next_due_ms"].as_u64().is_some());

    let r = s.get("/stats").await;
    let all = r.ok();
    assert_eq!(all["l"]["total"], 6);
    assert_eq!(all["other"]["ready"], 1);

    let r = s.get("/topics").await;
    let topics = r.ok();
    assert_eq!(topics["total"], 2);
    assert_eq!(topics["topics"][0]["name"], "l");
    assert_eq!(topics["topics"][1]["stats"]["ready"], 1);

    let r = s.get("/stats?topic=never-seen").await;
    assert_eq!(r.ok()["total"], 0);
}

#[tokio::test]
async fn health_readiness_metrics_openapi() {
    let s = server().start().await;
    assert_eq!(s.get("/healthz").await.ok()["status"], "alive");
    assert_eq!(s.get("/readyz").await.ok()["status"], "ready");

    s.add("mt", "a", json!({})).await;
    s.post("/add", json!({"topic": "mt", "id": "a"}))
        .await
        .err(409);
    s.pop_now("mt").await;
    s.pop_now("mt").await;
    let r = s.get("/metrics").await;
    assert_eq!(r.status, 200);
    assert!(
        r.content_type.starts_with("text/plain"),
        "{}",
        r.content_type
    );
    for line in [
        r#"delayq_operations_total{topic="mt",op="add",outcome="ok"} 1"#,
        r#"delayq_operations_total{topic="mt",op="add",outcome="duplicate"} 1"#,
        r#"delayq_operations_total{topic="mt",op="pop",outcome="ok"} 1"#,
        r#"delayq_operations_total{topic="mt",op="pop",outcome="empty"} 1"#,
        r#"delayq_tasks{topic="mt",state="active"} 1"#,
        r#"delayq_fire_lateness_seconds_bucket{le="+Inf"}"#,
        "# TYPE delayq_fire_lateness_seconds histogram",
        r#"delayq_http_request_duration_seconds_count{method="POST",route="/add",status="200"} 1"#,
        r#"delayq_http_request_duration_seconds_count{method="POST",route="/add",status="409"} 1"#,
        "delayq_long_polls_open 0",
        r#"delayq_topic_events_total{topic="mt",event="added"} 1"#,
        r#"delayq_topic_events_total{topic="mt",event="finished"} 0"#,
    ] {
        assert!(r.text.contains(line), "metrics lack {line:?}:\n{}", r.text);
    }

    let r = s.get("/openapi.json").await;
    assert_eq!(r.status, 200);
    assert!(r.json["openapi"].as_str().unwrap().starts_with("3."));
    assert!(r.json["paths"]["/pop"]["post"].is_object());
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_in_the_envelope() {
    let s = server().start().await;
    let r = s.get("/nope").await;
    r.err(404);
    assert!(r.message().contains("/nope"), "{}", r.text);
    let r = s.get("/add").await;
    r.err(405);
    assert!(
        r.message().contains("GET") && r.message().contains("/add"),
        "{}",
        r.text
    );
    let r = s
        .request(reqwest::Method::DELETE, "/get?topic=t&id=i")
        .await;
    r.err(405);
}
