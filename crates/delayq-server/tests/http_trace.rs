//! W3C trace context over HTTP, through a real socket (docs/tracing.md): taken from the add
//! request's `traceparent`/`tracestate` headers or from a task's fields (which win), per task
//! in a batch; shown by `/get` and `/tasks`; handed back by `/pop` as fields and, for a single
//! task, as response headers; stored with a schedule. A malformed context is a 400 (413 when
//! too large) naming the field or header.

mod support;

use serde_json::{Value, json};
use support::server;

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const OTHER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

#[tokio::test]
async fn the_add_headers_travel_with_the_task_to_its_consumer() {
    let s = server().start().await;
    let (reply, _) = s
        .post_with_headers(
            "/add",
            json!({"topic": "orders", "id": "a"}),
            &[
                ("traceparent", PARENT),
                ("tracestate", "congo=t61rcWkgMzE, rojo=1"),
            ],
        )
        .await;
    reply.ok();
    s.add("orders", "plain", json!({})).await;
    let view = s.get_task("orders", "a").await.ok().clone();
    assert_eq!(view["traceparent"], PARENT, "{view}");
    // Stored normalised: the members rejoined without the optional spaces.
    assert_eq!(view["tracestate"], "congo=t61rcWkgMzE,rojo=1", "{view}");
    let plain = s.get_task("orders", "plain").await.ok().clone();
    assert!(plain.get("traceparent").is_none(), "{plain}");
    let listed = s.get("/tasks?topic=orders").await.ok().clone();
    assert!(listed.to_string().contains(PARENT), "{listed}");

    // A single task comes back with the context as fields and as response headers.
    let (reply, headers) = s
        .post_with_headers("/pop", json!({"topic": "orders", "timeout_ms": 0}), &[])
        .await;
    let task = reply.ok().clone();
    assert_eq!(task["id"], "a");
    assert_eq!(task["traceparent"], PARENT);
    assert_eq!(task["tracestate"], "congo=t61rcWkgMzE,rojo=1");
    assert_eq!(headers["traceparent"], PARENT);
    assert_eq!(headers["tracestate"], "congo=t61rcWkgMzE,rojo=1");
    // An untraced task has neither.
    let (reply, headers) = s
        .post_with_headers("/pop", json!({"topic": "orders", "timeout_ms": 0}), &[])
        .await;
    let task = reply.ok().clone();
    assert_eq!(task["id"], "plain");
    assert!(task.get("traceparent").is_none(), "{task}");
    assert!(headers.get("traceparent").is_none());
}

#[tokio::test]
async fn fields_win_over_headers_and_each_task_of_a_batch_keeps_its_own() {
    let s = server().start().await;
    let batch = json!({"tasks": [
        {"topic": "b", "id": "own", "traceparent": OTHER, "tracestate": "k=v"},
        {"topic": "b", "id": "inherits"},
    ]});
    let (reply, _) = s
        .post_with_headers("/add", batch, &[("traceparent", PARENT)])
        .await;
    let items = reply.ok().clone();
    assert!(
        items.as_array().unwrap().iter().all(|i| i["code"] == 0),
        "{items}"
    );
    let own = s.get_task("b", "own").await.ok().clone();
    assert_eq!(
        (&own["traceparent"], &own["tracestate"]),
        (&json!(OTHER), &json!("k=v"))
    );
    let inherits = s.get_task("b", "inherits").await.ok().clone();
    assert_eq!(inherits["traceparent"], PARENT);
    assert!(inherits.get("tracestate").is_none(), "{inherits}");

    // A pop of several: the fields, and no headers (they could name only one task).
    let (reply, headers) = s
        .post_with_headers(
            "/pop",
            json!({"topic": "b", "count": 2, "timeout_ms": 0}),
            &[],
        )
        .await;
    let tasks = reply.ok().clone();
    let parents: Vec<&Value> = tasks
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["traceparent"])
        .collect();
    assert_eq!(parents.len(), 2);
    assert!(parents.contains(&&json!(PARENT)) && parents.contains(&&json!(OTHER)));
    assert!(headers.get("traceparent").is_none());
}

/// (body, headers, status, text the message must hold)
type BadCase<'a> = (Value, Vec<(&'a str, &'a str)>, u16, &'a str);

#[tokio::test]
async fn a_bad_trace_context_is_refused_naming_the_field_or_header() {
    let s = server().start().await;
    let long_state = format!("k={}", "v".repeat(600));
    let cases: Vec<BadCase<'_>> = vec![
        (
            json!({"topic": "t", "id": "a"}),
            vec![("traceparent", "00-nothex-00f067aa0ba902b7-01")],
            400,
            "traceparent",
        ),
        (
            json!({"topic": "t", "id": "a"}),
            vec![("traceparent", "00-\u{e9}")],
            400,
            "traceparent: header is not visible ASCII text",
        ),
        (
            json!({"topic": "t", "id": "a", "traceparent": PARENT.to_uppercase()}),
            vec![],
            400,
            "lower-case hex",
        ),
        (
            json!({"topic": "t", "id": "a", "tracestate": "k=v"}),
            vec![],
            400,
            "tracestate",
        ),
        (
            json!({"topic": "t", "id": "a", "traceparent": PARENT, "tracestate": long_state}),
            vec![],
            413,
            "512 bytes",
        ),
        (
            json!({"topic": "t", "id": "a", "traceparent":
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}),
            vec![],
            400,
            "all-zero trace id",
        ),
        (
            json!({"topic": "t", "id": "a", "traceparent": PARENT, "tracestate": "no-equals"}),
            vec![],
            400,
            "not key=value",
        ),
    ];
    for (body, headers, status, text) in cases {
        let (reply, _) = s.post_with_headers("/add", body.clone(), &headers).await;
        reply.err(status);
        assert!(
            reply.message().contains(text),
            "{body} {headers:?}: {}",
            reply.text
        );
    }
    assert!(
        s.get_task("t", "a").await.status == 404,
        "nothing was added"
    );

    // In a batch, a bad task fails alone and is named by its index.
    let batch = json!({"tasks": [
        {"topic": "t", "id": "good", "traceparent": PARENT},
        {"topic": "t", "id": "bad", "traceparent": "01-x"},
    ]});
    let items = s.post("/add", batch).await.ok().clone();
    assert_eq!(items[0]["code"], 0, "{items}");
    assert_eq!(items[1]["code"], 400, "{items}");
    assert!(
        items[1]["message"]
            .as_str()
            .unwrap()
            .contains("tasks[1].traceparent"),
        "{items}"
    );
    // A tracestate header without its traceparent is ignored, as the W3C specification says.
    let (reply, _) = s
        .post_with_headers(
            "/add",
            json!({"topic": "t", "id": "state-only"}),
            &[("tracestate", "k=v")],
        )
        .await;
    reply.ok();
    let view = s.get_task("t", "state-only").await.ok().clone();
    assert!(view.get("tracestate").is_none(), "{view}");
}

#[tokio::test]
async fn a_schedule_keeps_the_context_it_was_created_with() {
    let s = server().start().await;
    let (reply, _) = s
        .post_with_headers(
            "/schedules",
            json!({"topic": "reports", "name": "daily", "cron": "@daily"}),
            &[("traceparent", PARENT)],
        )
        .await;
    let data = reply.ok().clone();
    assert_eq!(data["schedule"]["traceparent"], PARENT, "{data}");
    let (reply, _) = s
        .post_with_headers(
            "/schedules",
            json!({"topic": "reports", "name": "bad", "cron": "@daily", "traceparent": "x"}),
            &[],
        )
        .await;
    reply.err(400);
    assert!(reply.message().contains("traceparent"), "{}", reply.text);
}
