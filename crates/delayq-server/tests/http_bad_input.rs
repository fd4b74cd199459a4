//! Bad input, table-driven: each case asserts the HTTP status, the envelope's `code` and that
//! the `message` names the field or the limit. None of them may panic or reach storage.

mod support;

use serde_json::json;
use support::{ADMIN, ORDERS_ONLY, server};

/// One bad request.
struct Case {
    name: &'static str,
    method: &'static str,
    path: &'static str,
    body: String,
    /// `None`: the admin token; `Some("")`: no token; else that token.
    token: Option<&'static str>,
    status: u16,
    /// Text the message must contain (the field or limit).
    names: &'static [&'static str],
    /// The `data.field` expected, if any.
    field: Option<&'static str>,
}

fn case(
    name: &'static str,
    path: &'static str,
    body: impl Into<String>,
    status: u16,
    names: &'static [&'static str],
    field: Option<&'static str>,
) -> Case {
    Case {
        name,
        method: "POST",
        path,
        body: body.into(),
        token: None,
        status,
        names,
        field,
    }
}

fn get(
    name: &'static str,
    path: &'static str,
    status: u16,
    names: &'static [&'static str],
    field: Option<&'static str>,
) -> Case {
    Case {
        method: "GET",
        ..case(name, path, "", status, names, field)
    }
}

fn as_token(mut c: Case, token: &'static str) -> Case {
    c.token = Some(token);
    c
}

#[tokio::test]
async fn bad_requests_are_refused_with_the_field_named() {
    let s = server()
        .with_auth()
        .config(|c| {
            c.http.max_request_bytes = 64 * 1024;
            c.limits.max_body_bytes = 16 * 1024;
            c.limits.max_batch = 3;
        })
        .start()
        .await;
    // A task held by a consumer, for the receipt case.
    s.add("held", "h", json!({})).await;
    s.pop_wait("held").await;

    let long_id = "i".repeat(257);
    let long_topic = "t".repeat(201);
    let big_request = json!({"topic": "t", "id": "big", "body": "x".repeat(70 * 1024)}).to_string();
    let big_task_body =
        json!({"topic": "t", "id": "big", "body": "x".repeat(20 * 1024)}).to_string();
    let big_batch = json!({"tasks": [
        {"topic": "t", "id": "1"}, {"topic": "t", "id": "2"},
        {"topic": "t", "id": "3"}, {"topic": "t", "id": "4"}
    ]})
    .to_string();

    let cases = vec![
        // Syntax and shape.
        case(
            "malformed JSON",
            "/add",
            r#"{"topic": "t", "id": "#,
            400,
            &["JSON"],
            None,
        ),
        case("not an object", "/add", "[1, 2]", 400, &["object"], None),
        case(
            "a bare string",
            "/pop",
            r#""orders""#,
            400,
            &["object"],
            None,
        ),
        case(
            "trailing garbage",
            "/pop",
            r#"{"topic": "t"} x"#,
            400,
            &["trailing"],
            None,
        ),
        // Missing fields.
        case(
            "missing id",
            "/add",
            r#"{"topic": "t"}"#,
            400,
            &["id"],
            Some("id"),
        ),
        case(
            "missing topic",
            "/pop",
            "{}",
            400,
            &["topic"],
            Some("topic"),
        ),
        case("empty body", "/finish", "", 400, &["topic"], Some("topic")),
        // An array is refused however it starts (a struct would read from it by position).
        case(
            "array of tasks to add",
            "/add",
            r#"[{"topic": "t", "id": "a"}]"#,
            400,
            &["expected a JSON object, got an array"],
            None,
        ),
        case(
            "array of tasks to finish",
            "/finish",
            r#" [{"tasks": [{"topic": "t", "id": "a"}]}]"#,
            400,
            &["expected a JSON object, got an array"],
            None,
        ),
        case(
            "missing id in batch",
            "/add",
            r#"{"tasks": [{"topic": "t", "id": "a"}, {"topic": "t"}]}"#,
            400,
            &["tasks[1].id"],
            Some("tasks[1].id"),
        ),
        case(
            "requeue without id or all",
            "/requeue",
            r#"{"topic": "t"}"#,
            400,
            &["id", "all"],
            None,
        ),
        get("get without id", "/get?topic=t", 400, &["id"], Some("id")),
        // Wrong types.
        case(
            "id is a number",
            "/add",
            r#"{"topic": "t", "id": 5}"#,
            400,
            &["id", "integer"],
            Some("id"),
        ),
        case(
            "delay is a string",
            "/add",
            r#"{"topic": "t", "id": "a", "delay_ms": "5000"}"#,
            400,
            &["delay_ms"],
            Some("delay_ms"),
        ),
        case(
            "auto_finish is a string",
            "/pop",
            r#"{"topic": "t", "auto_finish": "yes"}"#,
            400,
            &["auto_finish"],
            Some("auto_finish"),
        ),
        case(
            "batch tasks is an object",
            "/add",
            r#"{"tasks": {"topic": "t"}}"#,
            400,
            &["tasks"],
            Some("tasks"),
        ),
        get(
            "page is not a number",
            "/tasks?topic=t&page=two",
            400,
            &["page"],
            Some("page"),
        ),
        // Names.
        case(
            "overlong id",
            "/add",
            format!(r#"{{"topic": "t", "id": "{long_id}"}}"#),
            400,
            &["id", "256"],
            Some("id"),
        ),
        case(
            "overlong topic",
            "/add",
            format!(r#"{{"topic": "{long_topic}", "id": "a"}}"#),
            400,
            &["topic", "200"],
            Some("topic"),
        ),
        case(
            "topic with a space",
            "/add",
            r#"{"topic": "a b", "id": "a"}"#,
            400,
            &["topic", "' '"],
            Some("topic"),
        ),
        case(
            "id with a slash-free bad char",
            "/finish",
            r#"{"topic": "t", "id": "a#b"}"#,
            400,
            &["id", "'#'"],
            Some("id"),
        ),
        case(
            "empty topic",
            "/pop",
            r#"{"topic": ""}"#,
            400,
            &["topic", "empty"],
            Some("topic"),
        ),
        // Numbers.
        case(
            "negative delay",
            "/add",
            r#"{"topic": "t", "id": "a", "delay_ms": -1}"#,
            400,
            &["delay_ms", "-1"],
            Some("delay_ms"),
        ),
        case(
            "float delay",
            "/add",
            r#"{"topic": "t", "id": "a", "delay_ms": 1.5}"#,
            400,
            &["delay_ms", "1.5"],
            Some("delay_ms"),
        ),
        case(
            "huge delay beyond u64",
            "/add",
            r#"{"topic": "t", "id": "a", "delay_ms": 99999999999999999999999}"#,
            400,
            &["delay_ms"],
            Some("delay_ms"),
        ),
        case(
            "huge delay in u64",
            "/add",
            r#"{"topic": "t", "id": "a", "delay_ms": 18446744073709551615}"#,
            400,
            &["delay_ms", "limit"],
            Some("delay_ms"),
        ),
        case(
            "exponent delay",
            "/add",
            r#"{"topic": "t", "id": "a", "delay_ms": 1e400}"#,
            400,
            &["delay_ms"],
            Some("delay_ms"),
        ),
        case(
            "delay and run_at",
            "/add",
            r#"{"topic": "t", "id": "a", "delay_ms": 1, "run_at_ms": 2}"#,
            400,
            &["delay_ms", "run_at_ms"],
            Some("run_at_ms"),
        ),
        case(
            "zero ttr",
            "/add",
            r#"{"topic": "t", "id": "a", "ttr_ms": 0}"#,
            400,
            &["ttr_ms"],
            Some("ttr_ms"),
        ),
        case(
            "negative ttr",
            "/add",
            r#"{"topic": "t", "id": "a", "ttr_ms": -5}"#,
            400,
            &["ttr_ms"],
            Some("ttr_ms"),
        ),
        case(
            "max_retries -2",
            "/add",
            r#"{"topic": "t", "id": "a", "max_retries": -2}"#,
            400,
            &["max_retries", "-1"],
            Some("max_retries"),
        ),
        case(
            "max_retries float",
            "/add",
            r#"{"topic": "t", "id": "a", "max_retries": 1.5}"#,
            400,
            &["max_retries"],
            Some("max_retries"),
        ),
        case(
            "max_retries too big",
            "/add",
            r#"{"topic": "t", "id": "a", "max_retries": 5000000000}"#,
            400,
            &["max_retries"],
            Some("max_retries"),
        ),
        case(
            "unknown on_duplicate",
            "/add",
            r#"{"topic": "t", "id": "a", "on_duplicate": "sometimes"}"#,
            400,
            &["on_duplicate", "keep"],
            Some("on_duplicate"),
        ),
        case(
            "unknown backoff kind",
            "/add",
            r#"{"topic": "t", "id": "a", "backoff": {"kind": "linear", "ms": 5}}"#,
            400,
            &["backoff.kind", "linear"],
            Some("backoff.kind"),
        ),
        case(
            "empty backoff schedule",
            "/add",
            r#"{"topic": "t", "id": "a", "backoff": {"kind": "schedule", "ms": []}}"#,
            400,
            &["backoff.ms"],
            Some("backoff.ms"),
        ),
        case(
            "pop timeout over the max",
            "/pop",
            r#"{"topic": "t", "timeout_ms": 60001}"#,
            400,
            &["timeout_ms", "60000"],
            Some("timeout_ms"),
        ),
        case(
            "pop count zero",
            "/pop",
            r#"{"topic": "t", "count": 0}"#,
            400,
            &["count"],
            Some("count"),
        ),
        case(
            "pop count negative",
            "/pop",
            r#"{"topic": "t", "count": -1}"#,
            400,
            &["count"],
            Some("count"),
        ),
        case(
            "release delay negative",
            "/release",
            r#"{"topic": "held", "id": "h", "delay_ms": -1}"#,
            400,
            &["delay_ms"],
            Some("delay_ms"),
        ),
        // A page_size over the maximum is clamped, as seqdelay does (http_seqdelay_compat.rs).
        get(
            "page_size zero",
            "/tasks?topic=t&page_size=0",
            400,
            &["page_size", "1000"],
            Some("page_size"),
        ),
        get(
            "page zero",
            "/tasks?topic=t&page=0",
            400,
            &["page"],
            Some("page"),
        ),
        get(
            "unknown state",
            "/tasks?topic=t&state=sleeping",
            400,
            &["state", "delayed"],
            Some("state"),
        ),
        // Sizes.
        case(
            "request over max_request_bytes",
            "/add",
            big_request,
            413,
            &["max_request_bytes", "65536"],
            None,
        ),
        case(
            "task body over max_body_bytes",
            "/add",
            big_task_body,
            413,
            &["body", "16384"],
            Some("body"),
        ),
        case(
            "batch over max_batch",
            "/add",
            big_batch,
            413,
            &["max_batch", "3"],
            None,
        ),
        case(
            "empty batch",
            "/add",
            r#"{"tasks": []}"#,
            400,
            &["tasks"],
            Some("tasks"),
        ),
        // State.
        case(
            "stale receipt",
            "/finish",
            r#"{"topic": "held", "id": "h", "receipt": "bogus"}"#,
            409,
            &["receipt"],
            None,
        ),
        case(
            "finish of an unknown task",
            "/finish",
            r#"{"topic": "held", "id": "nope"}"#,
            404,
            &["nope"],
            None,
        ),
        // Auth.
        as_token(
            case(
                "no token",
                "/add",
                r#"{"topic": "orders", "id": "a"}"#,
                401,
                &["token"],
                None,
            ),
            "",
        ),
        as_token(
            case(
                "wrong token",
                "/pop",
                r#"{"topic": "orders"}"#,
                401,
                &["token"],
                None,
            ),
            "not-a-token",
        ),
        as_token(
            case(
                "other topic",
                "/add",
                r#"{"topic": "payments", "id": "a"}"#,
                403,
                &["payments"],
                None,
            ),
            ORDERS_ONLY,
        ),
        as_token(
            case(
                "other topic in a batch",
                "/add",
                r#"{"tasks": [{"topic": "orders", "id": "a"}, {"topic": "payments", "id": "b"}]}"#,
                403,
                &["payments", "tasks[1].topic"],
                None,
            ),
            ORDERS_ONLY,
        ),
        as_token(
            get(
                "other topic stats",
                "/stats?topic=payments",
                403,
                &["payments"],
                None,
            ),
            ORDERS_ONLY,
        ),
        as_token(
            get(
                "other topic get",
                "/get?topic=payments&id=a",
                403,
                &["payments"],
                None,
            ),
            ORDERS_ONLY,
        ),
        as_token(
            get(
                "metrics with a limited token",
                "/metrics",
                403,
                &["/metrics"],
                None,
            ),
            ORDERS_ONLY,
        ),
        // The operations of rules 11-15 (bury, reschedule, pause, priorities, binary bodies).
        case(
            "bury without id",
            "/bury",
            r#"{"topic": "t"}"#,
            400,
            &["id"],
            Some("id"),
        ),
        case(
            "bury with a negative priority",
            "/bury",
            r#"{"topic": "t", "id": "a", "priority": -1}"#,
            400,
            &["priority"],
            Some("priority"),
        ),
        case(
            "release with a priority over 2^32-1",
            "/release",
            r#"{"topic": "t", "id": "a", "priority": 4294967296}"#,
            400,
            &["priority"],
            Some("priority"),
        ),
        case(
            "add with a priority in words",
            "/add",
            r#"{"topic": "t", "id": "a", "priority": "high"}"#,
            400,
            &["priority"],
            Some("priority"),
        ),
        case(
            "add with an unknown body_encoding",
            "/add",
            r#"{"topic": "t", "id": "a", "body": "00ff", "body_encoding": "hex"}"#,
            400,
            &["body_encoding"],
            Some("body_encoding"),
        ),
        case(
            "add with a body that is not base64",
            "/add",
            r#"{"topic": "t", "id": "a", "body": "not base64!", "body_encoding": "base64"}"#,
            400,
            &["body", "base64"],
            Some("body"),
        ),
        case(
            "reschedule with delay_ms and run_at_ms",
            "/reschedule",
            r#"{"topic": "t", "id": "a", "delay_ms": 5, "run_at_ms": 9}"#,
            400,
            &["run_at_ms", "delay_ms"],
            Some("run_at_ms"),
        ),
        case(
            "reschedule with a negative delay",
            "/reschedule",
            r#"{"topic": "t", "id": "a", "delay_ms": -5}"#,
            400,
            &["delay_ms"],
            Some("delay_ms"),
        ),
        case(
            "reschedule beyond ten years",
            "/reschedule",
            r#"{"topic": "t", "id": "a", "delay_ms": 315576000001}"#,
            400,
            &["delay_ms"],
            Some("delay_ms"),
        ),
        case(
            "pause without topic",
            "/pause",
            r#"{"for_ms": 1000}"#,
            400,
            &["topic"],
            Some("topic"),
        ),
        case(
            "pause for a fraction of a ms",
            "/pause",
            r#"{"topic": "t", "for_ms": 1.5}"#,
            400,
            &["for_ms"],
            Some("for_ms"),
        ),
        case(
            "pause beyond ten years",
            "/pause",
            r#"{"topic": "t", "for_ms": 315576000001}"#,
            400,
            &["for_ms"],
            Some("for_ms"),
        ),
        case(
            "resume of an invalid topic",
            "/resume",
            r#"{"topic": "has space"}"#,
            400,
            &["topic"],
            Some("topic"),
        ),
        as_token(
            case(
                "pause of a topic the token may not use",
                "/pause",
                r#"{"topic": "payments"}"#,
                403,
                &["payments"],
                None,
            ),
            ORDERS_ONLY,
        ),
        as_token(
            get(
                "no token for tasks",
                "/tasks?topic=orders",
                401,
                &["token"],
                None,
            ),
            "",
        ),
    ];

    let mut failures = Vec::new();
    for c in &cases {
        let token = match c.token {
            None => Some(ADMIN),
            Some("") => None,
            Some(t) => Some(t),
        };
        let reply = match c.method {
            "GET" => s.get_as(c.path, token).await,
            _ => {
                s.post_raw(c.path, c.body.clone(), "application/json", token)
                    .await
            }
        };
        let message = reply.message().to_owned();
        let mut problems = Vec::new();
        if reply.status != c.status {
            problems.push(format!("status {} (want {})", reply.status, c.status));
        }
        if reply.code() != i64::from(c.status) {
            problems.push(format!("code {}", reply.code()));
        }
        for needle in c.names {
            if !message.contains(needle) {
                problems.push(format!("message lacks {needle:?}"));
            }
        }
        if let Some(field) = c.field
            && reply.data()["field"] != field
        {
            problems.push(format!(
                "data.field is {} (want {field:?})",
                reply.data()["field"]
            ));
        }
        if !problems.is_empty() {
            failures.push(format!(
                "{}: {} — {}",
                c.name,
                problems.join(", "),
                reply.text
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );

    // Nothing above reached storage as a task.
    let topics = s.get("/topics").await;
    assert_eq!(
        topics.ok()["total"],
        1,
        "only the held topic: {}",
        topics.text
    );
}

#[tokio::test]
async fn auth_errors_carry_the_challenge_and_open_endpoints_stay_open() {
    let s = server().with_auth().start().await;
    let r = s.get_as("/healthz", None).await;
    r.ok();
    s.get_as("/readyz", None).await.ok();
    let r = s.get_as("/topics", None).await;
    r.err(401);
    let r = reqwest::Client::new()
        .get(s.url("/topics"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
}

#[tokio::test]
async fn a_limited_token_sees_only_its_topics() {
    let s = server().with_auth().start().await;
    s.add("orders", "a", json!({})).await;
    s.add("payments", "b", json!({})).await;
    let all = s.get_as("/stats", Some(ORDERS_ONLY)).await;
    let all = all.ok();
    assert!(
        all.get("orders").is_some() && all.get("payments").is_none(),
        "{all}"
    );
    let topics = s.get_as("/topics", Some(ORDERS_ONLY)).await;
    assert_eq!(topics.ok()["total"], 1);
    let r = s
        .post_raw(
            "/pop",
            r#"{"topic": "orders", "timeout_ms": 0}"#,
            "application/json",
            Some(ORDERS_ONLY),
        )
        .await;
    assert_eq!(r.ok()["id"], "a");
    assert_eq!(s.get_as("/topics", Some(ADMIN)).await.ok()["total"], 2);
}
