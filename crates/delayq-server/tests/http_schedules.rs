//! `/schedules` through a real socket (docs/schedules.md): create, read with the next
//! occurrences, list, pause, resume, delete (path and JSON forms), validation naming the
//! field, and the tokens. The queue runs on a manual clock and the scheduler's look is driven
//! by hand, as the loop of `delayq serve` would at each pending due.

mod support;

use delayq::Clock;
use delayq_server::config::TokenConfig;
use serde_json::{Value, json};
use support::server;

/// An instant on a whole minute (2027-01-15T08:00:00Z).
const NOW: u64 = 1_800_000_000_000;

async fn tick(s: &support::Server) {
    s.state
        .scheduler()
        .tick(s.clock().now_ms())
        .await
        .expect("a look");
}

#[tokio::test]
async fn create_read_pause_resume_delete() {
    let s = server().manual_clock(NOW).start().await;
    let created = s
        .post(
            "/schedules",
            json!({"topic": "reports", "name": "minutely", "cron": "* * * * *", "body": "go", "priority": 7}),
        )
        .await;
    let data = created.ok();
    assert_eq!(data["outcome"], "created");
    let view = &data["schedule"];
    assert_eq!(view["timezone"], "UTC");
    let next: Vec<u64> = serde_json::from_value(view["next_ms"].clone()).unwrap();
    let want: Vec<u64> = (1..=10).map(|k| NOW + k * 60_000).collect();
    assert_eq!(next, want, "the next 10 occurrences");
    let again = s
        .post(
            "/schedules",
            json!({"topic": "reports", "name": "minutely", "cron": "* * * * *", "body": "go", "priority": 7}),
        )
        .await;
    assert_eq!(again.ok()["outcome"], "unchanged");

    // A look adds the pending occurrence: an ordinary task with the schedule's options.
    tick(&s).await;
    let id = format!("minutely@{}", NOW + 60_000);
    let task = s.get_task("reports", &id).await;
    let task = task.ok();
    assert_eq!(
        (&task["state_name"], &task["body"], &task["priority"]),
        (&json!("delayed"), &json!("go"), &json!(7))
    );
    let one = s.get("/schedules/reports/minutely?next=3").await;
    let one = one.ok();
    assert_eq!(one["cursor_ms"], json!(NOW + 60_000));
    assert_eq!(one["next_ms"].as_array().unwrap().len(), 3);

    let list = s.get("/schedules?topic=reports").await;
    assert_eq!(list.ok()["total"], 1);
    let other = s.get("/schedules?topic=nothing").await;
    assert_eq!(other.ok()["total"], 0);

    let paused = s
        .post(
            "/schedules/pause",
            json!({"topic": "reports", "name": "minutely"}),
        )
        .await;
    assert_eq!(paused.ok()["paused"], true);
    assert_eq!(paused.ok()["next_ms"], json!([]));
    assert_eq!(
        s.get_task("reports", &id).await.ok()["state_name"],
        "cancelled"
    );

    s.clock().advance(150_000);
    tick(&s).await;
    let resumed = s
        .post(
            "/schedules/resume",
            json!({"topic": "reports", "name": "minutely"}),
        )
        .await;
    assert_eq!(
        resumed.ok()["next_ms"][0],
        json!(NOW + 180_000),
        "after now only"
    );
    tick(&s).await;
    let next_id = format!("minutely@{}", NOW + 180_000);
    assert_eq!(
        s.get_task("reports", &next_id).await.ok()["state_name"],
        "delayed"
    );

    let deleted = s
        .request(reqwest::Method::DELETE, "/schedules/reports/minutely")
        .await;
    assert!(deleted.ok().is_null());
    assert_eq!(
        s.get_task("reports", &next_id).await.ok()["state_name"],
        "cancelled"
    );
    s.get("/schedules/reports/minutely").await.err(404);
    s.post(
        "/schedules/delete",
        json!({"topic": "reports", "name": "minutely"}),
    )
    .await
    .err(404);
}

#[tokio::test]
async fn a_topic_with_a_slash_and_the_json_delete() {
    let s = server().manual_clock(NOW).start().await;
    s.post(
        "/schedules",
        json!({"topic": "a/b", "name": "n", "every_ms": 5000, "missed": "skip"}),
    )
    .await
    .ok();
    let got = s.get("/schedules/a/b/n").await;
    let got = got.ok();
    assert_eq!(
        (&got["topic"], &got["missed"]),
        (&json!("a/b"), &json!("skip"))
    );
    assert_eq!(
        got["next_ms"][0],
        json!(NOW + 5_000),
        "every_ms counts from the epoch"
    );
    s.post("/schedules/delete", json!({"topic": "a/b", "name": "n"}))
        .await
        .ok();
    assert_eq!(s.get("/schedules").await.ok()["total"], 0);
}

#[tokio::test]
async fn bad_input_names_the_field() {
    let s = server().manual_clock(NOW).start().await;
    let base = json!({"topic": "t", "name": "n"});
    let with = |extra: Value| {
        let mut body = base.clone();
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    let table = [
        (with(json!({"cron": "61 * * * *"})), "cron"),
        (with(json!({"cron": "not a cron"})), "cron"),
        (with(json!({})), "cron"),
        (
            with(json!({"cron": "@daily", "timezone": "Mars/Base"})),
            "timezone",
        ),
        (with(json!({"every_ms": 999})), "every_ms"),
        (with(json!({"every_ms": -5})), "every_ms"),
        (
            with(json!({"every_ms": 1000, "cron": "@daily"})),
            "every_ms",
        ),
        (with(json!({"every_ms": 1000, "name": "a@1"})), "name"),
        (with(json!({"every_ms": 1000, "name": ""})), "name"),
        (with(json!({"every_ms": 1000, "topic": "a b"})), "topic"),
        (with(json!({"every_ms": 1000, "missed": "twice"})), "missed"),
    ];
    for (body, field) in table {
        let reply = s.post("/schedules", body.clone()).await;
        reply.err(400);
        assert_eq!(reply.data()["field"], field, "{body}: {}", reply.text);
        assert!(reply.message().contains(field), "{}", reply.text);
    }
    let next = s.get("/schedules/t/n?next=5000").await;
    next.err(400);
    assert_eq!(next.data()["field"], "next");
    assert_eq!(
        s.get("/schedules").await.ok()["total"],
        0,
        "nothing was created"
    );
}

#[tokio::test]
async fn writes_need_a_token_that_may_write_and_use_the_topic() {
    let s = server()
        .manual_clock(NOW)
        .with_auth()
        .config(|c| {
            c.tokens
                .push(TokenConfig::new("reader-token-0123456789").read_only())
        })
        .start()
        .await;
    s.post(
        "/schedules",
        json!({"topic": "orders", "name": "o", "every_ms": 1000}),
    )
    .await
    .ok();
    s.post(
        "/schedules",
        json!({"topic": "billing", "name": "b", "every_ms": 1000}),
    )
    .await
    .ok();
    let reader = Some("reader-token-0123456789");
    let refused = s
        .post_raw(
            "/schedules",
            json!({"topic": "orders", "name": "x", "every_ms": 1000}).to_string(),
            "application/json",
            reader,
        )
        .await;
    refused.err(403);
    let refused = s
        .post_raw(
            "/schedules/pause",
            json!({"topic": "orders", "name": "o"}).to_string(),
            "application/json",
            reader,
        )
        .await;
    refused.err(403);
    assert_eq!(s.get_as("/schedules", reader).await.ok()["total"], 2);
    let orders_only = Some(support::ORDERS_ONLY);
    let list = s.get_as("/schedules", orders_only).await;
    assert_eq!(
        list.ok()["total"],
        1,
        "a limited token sees its topics only"
    );
    s.get_as("/schedules/billing/b", orders_only).await.err(403);
    let other = s
        .post_raw(
            "/schedules",
            json!({"topic": "billing", "name": "x", "every_ms": 1000}).to_string(),
            "application/json",
            orders_only,
        )
        .await;
    other.err(403);
}
