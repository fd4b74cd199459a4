//! The web dashboard over plain HTTP (its browser tests are `dashboard_browser.rs`): pages
//! render with every value HTML-escaped, the live part is served alone on request, the login
//! keeps the token in an HttpOnly SameSite=Strict session cookie, POSTs must come from the
//! same origin and need a token that may write, and `--no-dashboard` leaves `/` to the API's
//! 404.

mod support;

use serde_json::json;
use support::{READER, WRITER, server};

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

#[tokio::test]
async fn pages_escape_every_value() {
    let s = server().start().await;
    // Topics and ids cannot hold markup; bodies and errors can.
    let body = "<script>alert('x')</script>";
    s.add("t", "a/b+c=d", json!({"body": body, "max_retries": 0}))
        .await;
    let held = s.pop_now("t").await;
    s.post(
        "/bury",
        json!({"topic": "t", "id": "a/b+c=d", "receipt": held["receipt"], "error": "<img src=x onerror=alert(1)>"}),
    )
    .await
    .ok();
    let c = client();
    let page = c
        .get(s.url("/ui/task?topic=t&id=a%2Fb%2Bc%3Dd"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(
        page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let html = page.text().await.unwrap();
    assert!(!html.contains(body) && !html.contains("<img"), "{html}");
    assert!(
        html.contains("&lt;script&gt;alert('x')&lt;/script&gt;"),
        "{html}"
    );
    assert!(
        html.contains("&lt;img src=x onerror=alert(1)&gt;"),
        "{html}"
    );
    // The task's links carry its id encoded.
    let topic = c
        .get(s.url("/ui/topic?name=t"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        topic.contains("/ui/task?topic=t&amp;id=a%2Fb%2Bc%3Dd"),
        "{topic}"
    );
    assert!(!topic.contains("<img"), "{topic}");
}

#[tokio::test]
async fn the_live_part_is_served_alone_and_errors_keep_their_status() {
    let s = server().start().await;
    s.add("orders", "a", json!({})).await;
    let c = client();
    let part = c
        .get(s.url("/"))
        .header("x-delayq-fragment", "1")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        part.contains("id=\"topics\"") && !part.contains("<html"),
        "{part}"
    );
    let missing = c
        .get(s.url("/ui/task?topic=orders&id=nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert!(missing.text().await.unwrap().contains("not found"));
    let bad = c
        .get(s.url("/ui/topic?name=orders&state=sleeping"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    assert!(bad.text().await.unwrap().contains("state"));
    let static_js = c.get(s.url("/ui/app.js")).send().await.unwrap();
    assert!(
        static_js.headers()["content-type"]
            .to_str()
            .unwrap()
            .contains("javascript")
    );
}

#[tokio::test]
async fn login_keeps_the_token_in_a_strict_http_only_session_cookie() {
    let s = server().with_writer_and_reader().start().await;
    let c = client();
    // No token: the pages send to the login page, the API answers 401 as before.
    let page = c.get(s.url("/ui/topic?name=a")).send().await.unwrap();
    assert_eq!(page.status(), 303);
    let to = page.headers()["location"].to_str().unwrap();
    assert!(to.starts_with("/ui/login?next=%2Fui%2Ftopic"), "{to}");
    assert_eq!(c.get(s.url("/stats")).send().await.unwrap().status(), 401);
    // A wrong token is refused; the right one sets the cookie and goes on.
    let login = |token: &str| {
        c.post(s.url("/ui/login"))
            .header("origin", s.url(""))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}&next=%2Fui%2Ftopic%3Fname%3Da"))
            .send()
    };
    assert_eq!(login("wrong").await.unwrap().status(), 401);
    let ok = login(WRITER).await.unwrap();
    assert_eq!(ok.status(), 303);
    assert_eq!(ok.headers()["location"], "/ui/topic?name=a");
    let cookie = ok.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.starts_with(&format!("delayq_session={WRITER};")),
        "{cookie}"
    );
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(flag), "{cookie}");
    }
    assert!(
        !cookie.contains("Expires") && !cookie.contains("Max-Age"),
        "a session cookie"
    );
    let page = c
        .get(s.url("/"))
        .header("cookie", format!("delayq_session={WRITER}"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    // A login posted from another site is refused.
    let foreign = c
        .post(s.url("/ui/login"))
        .header("origin", "http://evil.example")
        .body(format!("token={WRITER}"))
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
}

#[tokio::test]
async fn actions_need_the_same_origin_and_a_token_that_may_write() {
    let s = server().with_writer_and_reader().start().await;
    s.add("orders", "a", json!({"delay_ms": 60_000})).await;
    let c = client();
    let act = |token: &str, origin: Option<String>| {
        let mut req = c
            .post(s.url("/ui/act"))
            .header("cookie", format!("delayq_session={token}"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body("action=pause&topic=orders&back=%2F");
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        req.send()
    };
    for (token, origin, status) in [
        (READER, Some(s.url("")), 403),
        (WRITER, Some("http://evil.example".to_owned()), 403),
        (WRITER, None, 403),
        ("nobody", Some(s.url("")), 401),
    ] {
        let reply = act(token, origin.clone()).await.unwrap();
        assert_eq!(reply.status(), status, "{token} {origin:?}");
        assert_eq!(s.get("/stats?topic=orders").await.ok()["paused"], false);
    }
    let done = act(WRITER, Some(s.url(""))).await.unwrap();
    assert_eq!(done.status(), 303);
    assert!(
        done.headers()["location"]
            .to_str()
            .unwrap()
            .contains("notice=")
    );
    assert_eq!(s.get("/stats?topic=orders").await.ok()["paused"], true);
    // A refused action comes back with the server's message.
    let bad = c
        .post(s.url("/ui/act"))
        .header("cookie", format!("delayq_session={WRITER}"))
        .header("origin", s.url(""))
        .body("action=reschedule&topic=orders&id=a&delay_ms=soon&back=%2F")
        .send()
        .await
        .unwrap();
    let to = bad.headers()["location"].to_str().unwrap();
    assert!(to.contains("error=400") && to.contains("delay_ms"), "{to}");
}

#[tokio::test]
async fn no_dashboard_leaves_the_root_to_the_api() {
    let s = server().config(|c| c.dashboard = false).start().await;
    let reply = s.get("/").await;
    reply.err(404);
    assert_eq!(s.get("/ui/app.js").await.status, 404);
    s.get("/stats").await.ok();
}

#[tokio::test]
async fn a_token_limited_to_topics_sees_only_those() {
    let s = server().with_auth().start().await;
    s.add("orders", "a", json!({})).await;
    s.add("payments", "b", json!({})).await;
    let c = client();
    let get = |path: &str| {
        c.get(s.url(path))
            .header("cookie", format!("delayq_session={}", support::ORDERS_ONLY))
            .send()
    };
    let overview = get("/").await.unwrap().text().await.unwrap();
    assert!(overview.contains("data-topic=\"orders\""), "{overview}");
    assert!(!overview.contains("payments"), "{overview}");
    // The charts and instances sum every topic, so they are not shown to it.
    assert!(
        !overview.contains("id=\"charts") && !overview.contains("Activity"),
        "{overview}"
    );
    let other = get("/ui/topic?name=payments").await.unwrap();
    assert_eq!(other.status(), 403);
    let task = get("/ui/task?topic=payments&id=b").await.unwrap();
    assert_eq!(task.status(), 403);
    // Find by id does not reveal a task of another topic.
    let found = get("/ui/find?id=b").await.unwrap();
    assert_eq!(found.status(), 404);
}

#[tokio::test]
async fn pause_with_an_end_and_requeue_all_dead_go_through_the_api() {
    let s = server().start().await;
    for id in ["x", "y"] {
        s.add("jobs", id, json!({"max_retries": 0})).await;
        let held = s.pop_now("jobs").await;
        s.post(
            "/bury",
            json!({"topic": "jobs", "id": held["id"], "receipt": held["receipt"]}),
        )
        .await
        .ok();
    }
    assert_eq!(s.get("/stats?topic=jobs").await.ok()["dead"], 2);
    let c = client();
    let act = |body: &'static str| {
        c.post(s.url("/ui/act"))
            .header("origin", s.url(""))
            .body(body)
            .send()
    };
    let done = act("action=requeue_all&topic=jobs&back=%2Fui%2Ftopic%3Fname%3Djobs")
        .await
        .unwrap();
    let to = done.headers()["location"].to_str().unwrap().to_owned();
    assert!(
        to.starts_with("/ui/topic?name=jobs&notice=Requeued+2"),
        "{to}"
    );
    let stats = s.get("/stats?topic=jobs").await.ok().clone();
    assert_eq!(
        (stats["dead"].as_u64(), stats["ready"].as_u64()),
        (Some(0), Some(2))
    );

    act("action=pause&topic=jobs&for_ms=600000&back=%2F")
        .await
        .unwrap();
    let stats = s.get("/stats?topic=jobs").await.ok().clone();
    assert_eq!(stats["paused"], true, "{stats}");
    assert!(stats["paused_until_ms"].as_u64().is_some(), "{stats}");
    let page = c
        .get(s.url("/ui/topic?name=jobs"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("paused") && page.contains(" until "),
        "{page}"
    );
}

#[tokio::test]
async fn the_overview_pages_and_filters_many_topics() {
    let s = server().start().await;
    let tasks: Vec<_> = (0..60)
        .map(|i| json!({"topic": format!("t-{i:02}"), "id": "a"}))
        .collect();
    s.post("/add", json!({"tasks": tasks})).await.ok();
    let c = client();
    let rows = |html: &str| html.matches("<tr data-topic=").count();
    let page = |path: &str| {
        let url = s.url(path);
        let c = c.clone();
        async move { c.get(url).send().await.unwrap().text().await.unwrap() }
    };
    let first = page("/").await;
    assert_eq!(rows(&first), 50);
    assert!(
        first.contains("60 in all") && first.contains("page 1 of 2"),
        "{first}"
    );
    // The sum row counts every topic, not only the page shown.
    assert!(first.contains("data-count=\"total\">60<"), "{first}");
    let second = page("/?page=2").await;
    assert_eq!(rows(&second), 10);
    assert!(second.contains("t-59") && !second.contains("t-00"));
    let filtered = page("/?filter=t-1").await;
    assert_eq!(rows(&filtered), 10, "t-10 to t-19");
    let beyond = c.get(s.url("/?page=3")).send().await.unwrap();
    assert_eq!(beyond.status(), 400);
}

/// The topic page shows the topic's push target (its URL, never its secret) with this
/// instance's delivery figures, and its schedules with their next occurrences; a topic with
/// neither shows neither section.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_topic_page_shows_its_push_target_and_schedules() {
    let receiver = delayq_testkit::Receiver::ok().await;
    let s = server().with_push().start().await;
    s.post(
        "/push",
        json!({"topic": "hooked", "url": receiver.url("/in"), "secret": "whsec_do_not_show", "concurrency": 3}),
    )
    .await
    .ok();
    s.add("hooked", "h1", json!({"body": "hello"})).await;
    receiver
        .wait_for(1, std::time::Duration::from_secs(20))
        .await;
    s.eventually("the call is counted", async || {
        s.get("/stats?topic=hooked").await.ok()["push"]["delivered"] == 1
    })
    .await;
    s.post(
        "/schedules",
        json!({"topic": "hooked", "name": "nightly", "cron": "30 2 * * *", "timezone": "Europe/Berlin"}),
    )
    .await
    .ok();
    let c = client();
    let html = c
        .get(s.url("/ui/topic?name=hooked"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let push = &html[html.find("id=\"push-target\"").expect("a push section")..];
    assert!(push.contains(&receiver.url("/in")), "{html}");
    assert!(
        !html.contains("whsec_do_not_show"),
        "the secret stays hidden"
    );
    assert!(push.contains("yes (Delayq-Signature)"), "{html}");
    let figures = &push[push.find("id=\"push-figures\"").expect("figures")..];
    let first_cell = figures.find("<td class=\"num\">1</td>");
    assert!(first_cell.is_some(), "one delivered: {figures}");
    let schedules = &html[html.find("id=\"schedules\"").expect("a schedules section")..];
    assert!(schedules.contains("data-schedule=\"nightly\""), "{html}");
    assert!(schedules.contains("30 2 * * *"), "{html}");
    assert!(schedules.contains("Europe/Berlin"), "{html}");
    // Its next three occurrences, each a time element.
    let table = &schedules[..schedules.find("</table>").expect("the table ends")];
    assert!(table.matches("<time").count() >= 3, "{table}");

    s.add("plain", "p1", json!({})).await;
    let plain = c
        .get(s.url("/ui/topic?name=plain"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!plain.contains("id=\"push-target\"") && !plain.contains("id=\"schedules\""));
}
