//! The web dashboard (docs/design.md §10) in a real headless Chromium, on the embedded
//! storage and on Redis: the overview's numbers are those of `/stats` and follow changes
//! without a reload; find by id opens the right task, whose body is shown as text (a
//! `<script>` in it does not run); cancel, reschedule, run now, requeue, pause and resume
//! done through the page change the server's state (checked through the HTTP API); an error
//! from the server is shown; a read-only token sees no actions and its forged POST is
//! refused; a storage outage shows a banner and the page recovers by itself; a server that
//! stops answering is shown as such. Screenshots go to `target/dashboard-screenshots/`.

#[path = "support/browser.rs"]
mod browser;
mod support;

use browser::Browser;
use delayq_daemon::config::{FsyncPolicy, StorageConfig};
use delayq_testkit::{FaultProxy, Faults, RedisServer};
use serde_json::{Value, json};
use support::{Builder, READER, Server, WRITER, server};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Embedded,
    Redis,
}

/// A server in `mode` and what it runs on.
struct Setup {
    server: Server,
    redis: Option<RedisServer>,
    _dir: tempfile::TempDir,
}

async fn start(mode: Mode, tweak: impl FnOnce(Builder) -> Builder) -> Setup {
    let dir = tempfile::tempdir().expect("data dir");
    let (storage, redis) = match mode {
        Mode::Embedded => (
            StorageConfig::Embedded {
                data_dir: dir.path().to_owned(),
                fsync: FsyncPolicy::Never,
            },
            None,
        ),
        Mode::Redis => {
            // With its append-only file, so that a restarted Redis has the tasks again.
            let redis = RedisServer::start_with_aof();
            (StorageConfig::Redis { url: redis.url() }, Some(redis))
        }
    };
    let server = tweak(server().storage(storage)).start().await;
    // The history behind the charts, as `delayq serve` samples it.
    server.state.history().spawn_sampler(server.queue.clone());
    Setup {
        server,
        redis,
        _dir: dir,
    }
}

fn name(mode: Mode, what: &str) -> String {
    format!("{}-{what}", format!("{mode:?}").to_lowercase())
}

/// Topics in every state: `orders` (38 delayed, 2 ready, 1 active, 1 dead), `emails` (one
/// delayed task whose body is a script), `payments:eu` (6 ready, 5 of them fired by due).
async fn populate(s: &Server) {
    for id in ["d1", "d2", "d3"] {
        s.add(
            "orders",
            id,
            json!({"delay_ms": 3_600_000, "body": "{\"order\":1}"}),
        )
        .await;
    }
    s.add("orders", "held", json!({"priority": 1})).await;
    let held = s.pop_now("orders").await;
    assert_eq!(held["id"], "held");
    s.add(
        "orders",
        "gone",
        json!({"priority": 2, "max_retries": 0, "body": "{\"order\":7,\"items\":[\"book\",\"pen\"],\"total\":12.5}"}),
    )
        .await;
    let gone = s.pop_now("orders").await;
    assert_eq!(gone["id"], "gone");
    s.post(
        "/bury",
        json!({"topic": "orders", "id": "gone", "receipt": gone["receipt"], "error": "card declined"}),
    )
    .await
    .ok();
    for id in ["r1", "r2"] {
        s.add("orders", id, json!({})).await;
    }
    // A timeline ahead worth drawing: due every 4 minutes for two hours, then daily.
    let later: Vec<Value> = (1..=30u64)
        .map(|i| json!({"topic": "orders", "id": format!("later-{i}"), "delay_ms": i * 240_000}))
        .chain((1..=5u64).map(
            |d| json!({"topic": "orders", "id": format!("day-{d}"), "delay_ms": d * 86_400_000 + 3_600_000}),
        ))
        .collect();
    s.post("/add", json!({"tasks": later})).await.ok();
    s.add(
        "emails",
        "xss-1",
        json!({"delay_ms": 600_000, "body": "<script>window.__xss=1</script>"}),
    )
    .await;
    s.add("payments:eu", "p1", json!({})).await;
    // A few that fall due at once, so the charts have fires and lateness; settled before the
    // page is compared with /stats.
    for i in 0..5 {
        s.add(
            "payments:eu",
            &format!("soon-{i}"),
            json!({"delay_ms": 200 + 100 * i}),
        )
        .await;
    }
    s.eventually("the short delays fire", async || {
        s.get("/stats?topic=payments:eu").await.ok()["ready"] == 6
    })
    .await;
}

/// Waits for the notice of an action (the page it was on may still show an older one).
async fn notice(b: &Browser, word: &str) {
    let script = "const n = document.getElementById('notice'); return n ? n.textContent : '';";
    b.until(word, async |b| {
        // Tolerates the page being replaced while it asks.
        let text = b.c().execute(script, vec![]).await.unwrap_or_default();
        text.as_str().is_some_and(|t| t.contains(word))
    })
    .await;
}

async fn task_state(s: &Server, topic: &str, id: &str) -> Value {
    s.get_task(topic, id).await.ok().clone()
}

/// The counters of one row of a table as the page shows them.
async fn row_counts(b: &Browser, row_css: &str) -> Value {
    b.js(&format!(
        "const out = {{}}; document.querySelectorAll('{row_css} [data-count]').forEach(td => \
         out[td.dataset.count] = Number(td.textContent)); return out;"
    ))
    .await
}

async fn overview_equals_stats(s: &Server, b: &Browser) {
    let stats = s.get("/stats").await.ok().clone();
    let topics = stats["topics"].as_object().expect("topics").clone();
    assert_eq!(topics.len(), 3, "{stats}");
    let mut sum = json!({});
    for (topic, counts) in &topics {
        let shown = row_counts(b, &format!("#topics tr[data-topic=\"{topic}\"]")).await;
        let fields = delayq::State::ALL.map(|state| state.name());
        for field in fields.into_iter().chain(["total"]) {
            assert_eq!(
                shown[field], counts[field],
                "{topic} {field}: {shown} vs {counts}"
            );
            sum[field] = json!(sum[field].as_u64().unwrap_or(0) + counts[field].as_u64().unwrap());
        }
        let paused = b
            .js(&format!(
                "return document.querySelector('#topics tr[data-topic=\"{topic}\"] [data-paused]').dataset.paused"
            ))
            .await;
        assert_eq!(
            paused,
            json!(counts["paused"].as_bool().unwrap().to_string())
        );
    }
    let shown = row_counts(b, "#sum").await;
    for field in ["delayed", "ready", "active", "dead", "total"] {
        assert_eq!(shown[field], sum[field], "sum {field}");
    }
}

async fn flows(mode: Mode) {
    let setup = start(mode, |b| b).await;
    let s = &setup.server;
    let b = Browser::start().await;

    // An empty server says so.
    b.goto(&s.url("/")).await;
    assert!(b.text("#empty").await.contains("No topics yet"));

    populate(s).await;
    b.goto(&s.url("/")).await;
    b.find("#topics").await;
    overview_equals_stats(s, &b).await;
    // The charts come with the history's first complete seconds, without a reload.
    b.find("#live #charts #throughput svg").await;
    b.find("#live #charts #lateness svg").await;

    // Live: a change shows up without a reload (the marker survives).
    b.js("window.__marker = 42; return null;").await;
    s.add("emails", "later", json!({"delay_ms": 600_000})).await;
    b.until("the overview shows the new task", async |b| {
        row_counts(b, "#topics tr[data-topic=\"emails\"]").await["delayed"] == json!(2)
    })
    .await;
    assert_eq!(
        b.js("return window.__marker;").await,
        json!(42),
        "the page reloaded"
    );
    overview_equals_stats(s, &b).await;

    // Find by id across topics opens the task; its body is text, the script did not run.
    b.fill("#find input[name=id]", "xss-1").await;
    b.click("#find button").await;
    b.until("the task page", async |b| {
        b.url().await.contains("/ui/task")
    })
    .await;
    assert_eq!(b.text("#task-id").await, "xss-1");
    assert_eq!(b.text("[data-field=topic]").await, "emails");
    assert_eq!(b.text("#body").await, "<script>window.__xss=1</script>");
    assert_eq!(
        b.js("return window.__xss === undefined;").await,
        json!(true)
    );
    // The exact (topic, id) form, and an id in two topics.
    s.add("payments:eu", "xss-1", json!({})).await;
    b.goto(&s.url("/ui/find?id=xss-1")).await;
    assert_eq!(b.all("#found li").await.len(), 2);
    b.goto(&s.url("/ui/find?id=xss-1&topic=payments:eu")).await;
    assert_eq!(b.text("[data-field=topic]").await, "payments:eu");
    b.goto(&s.url("/ui/find?id=nope")).await;
    assert!(b.text("#not-found").await.contains("nope"));

    // The whole record of a task with a failed attempt, and a screenshot of it.
    b.goto(&s.url("/ui/task?topic=orders&id=gone")).await;
    assert_eq!(b.text("#last-error").await, "card declined");
    b.screenshot(&name(mode, "task")).await;
    // Requeue the dead task.
    b.click("button[data-action=requeue]").await;
    notice(&b, "Requeued").await;
    assert_eq!(task_state(s, "orders", "gone").await["state_name"], "ready");

    // Cancel, reschedule, run now.
    b.goto(&s.url("/ui/task?topic=orders&id=d1")).await;
    assert!(
        b.text("#body").await.contains("\"order\": 1"),
        "JSON pretty-printed"
    );
    b.click("button[data-action=cancel]").await;
    notice(&b, "Cancelled").await;
    assert_eq!(
        task_state(s, "orders", "d1").await["state_name"],
        "cancelled"
    );

    let before = task_state(s, "orders", "d2").await["due_ms"]
        .as_u64()
        .unwrap();
    b.goto(&s.url("/ui/task?topic=orders&id=d2")).await;
    b.fill("input[name=delay_ms]", "7200000").await;
    b.click("button[data-action=reschedule]").await;
    notice(&b, "Rescheduled").await;
    let after = task_state(s, "orders", "d2").await["due_ms"]
        .as_u64()
        .unwrap();
    assert!(after >= before + 3_000_000, "{before} -> {after}");

    b.goto(&s.url("/ui/task?topic=orders&id=d3")).await;
    b.click("button[data-action=run_now]").await;
    notice(&b, "Rescheduled").await;
    assert_eq!(task_state(s, "orders", "d3").await["state_name"], "ready");

    // An error from the server is shown: a delay that is no number, refused naming the field.
    b.goto(&s.url("/ui/task?topic=orders&id=d2")).await;
    b.fill("input[name=delay_ms]", "soon").await;
    b.click("button[data-action=reschedule]").await;
    let error = b.text("#error").await;
    assert!(
        error.contains("400") && error.contains("delay_ms"),
        "{error}"
    );

    // Pause and resume the topic from its page.
    b.goto(&s.url("/ui/topic?name=orders")).await;
    b.click("button[data-action=pause]").await;
    notice(&b, "Paused").await;
    let stats = s.get("/stats?topic=orders").await.ok().clone();
    assert_eq!(stats["paused"], true, "{stats}");
    b.until("the page shows the pause", async |b| {
        b.js("return document.querySelector('#live [data-paused]').dataset.paused;")
            .await
            == json!("true")
    })
    .await;
    b.find("#tasks").await;
    b.screenshot(&name(mode, "topic")).await;
    b.click("button[data-action=resume]").await;
    notice(&b, "Resumed").await;
    assert_eq!(s.get("/stats?topic=orders").await.ok()["paused"], false);

    // Add a task from the form; it opens the new task.
    b.goto(&s.url("/")).await;
    b.fill("#add-task input[name=topic]", "new-topic").await;
    b.fill("#add-task input[name=id]", "n1").await;
    b.fill("#add-task input[name=delay_ms]", "60000").await;
    b.fill("#add-task textarea[name=body]", "hello").await;
    b.click("#add-task button").await;
    b.until("the new task's page", async |b| {
        b.url().await.contains("id=n1")
    })
    .await;
    let added = task_state(s, "new-topic", "n1").await;
    assert_eq!(
        (added["state_name"].as_str(), added["body"].as_str()),
        (Some("delayed"), Some("hello"))
    );

    // The topic page draws its timeline ahead from range counts: d2 is due in about 2 h.
    b.goto(&s.url("/ui/topic?name=orders")).await;
    assert_eq!(b.all("#timeline svg").await.len(), 3);

    // Flow limits: the topic page shows them and how many ready tasks each holds back, as
    // /stats counts them (one of three tasks ACTIVE, max_active 1 holds the other two).
    for id in ["c1", "c2", "c3"] {
        s.add("capped", id, json!({"ttr_ms": 600_000})).await;
    }
    assert!(!s.pop_now("capped").await.is_null(), "a ready task to hold");
    s.post(
        "/limits",
        json!({"topic": "capped", "max_active": 1, "rate_per_s": 5, "burst": 2}),
    )
    .await
    .ok();
    let held = s.get("/stats?topic=capped").await.ok()["held_back"].clone();
    assert_eq!(held["max_active"], 2, "{held}");
    b.goto(&s.url("/ui/topic?name=capped")).await;
    let cell = |limit: &str, col: usize| {
        format!(
            "return document.querySelector('#flow-limits tr[data-limit={limit}] td:nth-of-type({col})').textContent;"
        )
    };
    assert_eq!(b.js(&cell("max_active", 1)).await, json!("1"));
    assert_eq!(b.js(&cell("rate", 1)).await, json!("5 /s, burst 2"));
    assert_eq!(b.js(&cell("max_active_per_key", 1)).await, json!("none"));
    assert_eq!(b.js(&cell("max_active", 2)).await, json!("2"));
    assert_eq!(b.js(&cell("rate", 2)).await, json!("0"));
    b.screenshot(&name(mode, "topic-limits")).await;
    s.request(reqwest::Method::DELETE, "/limits?topic=capped")
        .await
        .ok();

    // The overview after all that, for its screenshot: a few seconds of history in the charts.
    b.goto(&s.url("/")).await;
    b.find("#live #charts").await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    b.screenshot(&name(mode, "overview")).await;

    if mode == Mode::Redis {
        // A second instance on the same Redis: the overview lists both and their sum.
        let url = setup.redis.as_ref().expect("redis").url();
        let other = server().storage(StorageConfig::Redis { url }).start().await;
        other.state.history().spawn_sampler(other.queue.clone());
        other.add("orders", "via-other", json!({})).await;
        b.goto(&s.url("/")).await;
        b.until("both instances listed", async |b| {
            b.all("#live #instances tr[data-instance]").await.len() == 2
        })
        .await;
        assert!(b.has("#instances-sum").await);
        b.screenshot(&name(mode, "overview-instances")).await;
    }

    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_flows_embedded() {
    flows(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_flows_redis() {
    flows(Mode::Redis).await;
}

async fn read_only(mode: Mode) {
    let setup = start(mode, |b| b.with_writer_and_reader()).await;
    let s = setup.server;
    populate(&s).await;
    let b = Browser::start().await;

    // The login page asks for the token; a wrong one is refused.
    b.goto(&s.url("/ui/task?topic=orders&id=d1")).await;
    b.until("the login page", async |b| {
        b.url().await.contains("/ui/login")
    })
    .await;
    b.fill("#token", "not-a-token").await;
    b.click("form button").await;
    assert!(b.text("#error").await.contains("401"));
    b.fill("#token", READER).await;
    b.click("form button").await;
    // It goes on to the page first asked for, with no action anywhere.
    b.until("the task page", async |b| {
        b.url().await.contains("/ui/task")
    })
    .await;
    assert_eq!(b.text("#task-id").await, "d1");
    assert!(b.has("#read-only").await);
    assert!(!b.has("#task-actions").await && !b.has("form[action='/ui/act']").await);
    b.goto(&s.url("/ui/topic?name=orders")).await;
    b.find("#tasks").await;
    assert!(!b.has("#topic-actions").await && !b.has("#add-task").await);
    b.goto(&s.url("/")).await;
    b.find("#topics").await;
    assert!(!b.has("#add-task").await);

    // A forged POST with the read-only token is refused by the server and changes nothing.
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let forged = |token: &str, origin: String| {
        client
            .post(s.url("/ui/act"))
            .header("cookie", format!("delayq_session={token}"))
            .header("origin", origin)
            .header("content-type", "application/x-www-form-urlencoded")
            .body("action=cancel&topic=orders&id=d1&back=%2F")
    };
    let refused = forged(READER, s.url("")).send().await.unwrap();
    assert_eq!(refused.status(), 403);
    assert!(refused.text().await.unwrap().contains("read-only"));
    // A writer's cookie from another site's page is refused too.
    let refused = forged(WRITER, "http://evil.example".into())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    assert_eq!(
        task_state(&s, "orders", "d1").await["state_name"],
        "delayed"
    );
    // The same POST from the page's origin with the writer's token works.
    let done = forged(WRITER, s.url("")).send().await.unwrap();
    assert_eq!(done.status(), 303);
    assert_eq!(
        task_state(&s, "orders", "d1").await["state_name"],
        "cancelled"
    );

    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_tokens_see_no_actions_embedded() {
    read_only(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_tokens_see_no_actions_redis() {
    read_only(Mode::Redis).await;
}

/// Redis stops: the page shows the outage (503) and recovers by itself when Redis is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storage_outage_is_shown_and_recovers_redis() {
    let mut setup = start(Mode::Redis, |b| b).await;
    populate(&setup.server).await;
    let b = Browser::start().await;
    b.goto(&setup.server.url("/ui/topic?name=orders")).await;
    b.find("#tasks").await;
    b.js("window.__marker = 7; return null;").await;
    let redis = setup.redis.as_mut().expect("redis");
    redis.kill();
    b.until("the outage banner", async |b| b.has("#live #outage").await)
        .await;
    assert!(b.text("#outage").await.contains("503"));
    b.screenshot("redis-outage").await;
    redis.restart();
    b.until("the page recovers", async |b| {
        !b.has("#live #outage").await && b.has("#live #tasks").await
    })
    .await;
    assert_eq!(
        b.js("return window.__marker;").await,
        json!(7),
        "the page reloaded"
    );
    b.close().await;
}

/// The server stops answering (a proxy in front of it refuses connections): the page says
/// so, and recovers by itself when the server can be reached again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_not_answering_is_shown_and_recovers() {
    let s = server().start().await;
    let proxy = FaultProxy::start(s.addr).await;
    let url = format!("http://{}/", proxy.addr());
    s.add("orders", "a", json!({})).await;
    let b = Browser::start().await;
    b.goto(&url).await;
    b.find("#topics").await;
    assert_eq!(
        b.js("return document.getElementById('offline').hidden;")
            .await,
        json!(true)
    );
    proxy.set(Faults::refuse());
    proxy.cut();
    b.until("the not-answering banner", async |b| {
        b.js("return document.getElementById('offline').hidden;")
            .await
            == json!(false)
    })
    .await;
    assert!(b.text("#offline").await.contains("not answering"));
    s.add("orders", "b", json!({})).await;
    proxy.heal();
    b.until("the page recovers", async |b| {
        b.js("return document.getElementById('offline').hidden;")
            .await
            == json!(true)
            && row_counts(b, "#topics tr[data-topic=\"orders\"]").await["ready"] == json!(2)
    })
    .await;
    b.close().await;
}
