//! Format stability of the embedded backend: data directories written by earlier builds (format
//! N under `tests/fixtures/embedded-vN/`, N = 1, 2, 3, 4) must open with every later build and show
//! the same tasks. The fixtures hold tasks in every state,
//! with backoffs, errors and attempt history, and both a snapshot and log records written after
//! it, so the snapshot reader and the record codec are both pinned. Format 2 adds priorities,
//! insertion order, buried tasks, paused topics, the meta store and the job id counter; format 3
//! moves the settings (the meta store) out of shard 0 into their own log, `settings/`; format 4
//! adds the trace context of a task (`Put v3`); format 5 the expiry of a task (`Put v4`);
//! format 6 the flow-control key of a task (`Put v5`) and holds flow limits in its settings. A
//! change of the format must come with its upgrade path; these tests then keep the old
//! directories opening (formats 1 to 5 are upgraded to 6 in place when opened).
//!
//! The format 6 fixture was written by this same file with `DELAYQ_WRITE_FORMAT_FIXTURE=1` (it
//! replaces the directory and `expected.json`); do that only for a new format version, in a new
//! folder. The format 1 to 5 fixtures were written the same way by builds of their format.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use delayq::storage::embedded::{self, EmbeddedOptions, EmbeddedStorage};
use delayq::{
    Backoff, BuryOptions, Clock, DEFAULT_PRIORITY, FlowLimits, ManualClock, MaxRetries, NewTask,
    OnDuplicate, OnExpire, PopOptions, Queue, ReleaseOptions, SettingsStore, State, StorageContext,
    TaskInfo, TraceContext,
};
use delayq_log::FsyncPolicy;
use serde_json::{Value, json};

/// The fixture's clock: tasks were written at this moment and are read back at it, so nothing
/// is promoted, redelivered or retired between writing and reading.
const START: u64 = 1_800_000_000_000;
const TOPICS: [&str; 2] = ["orders", "pay-callback"];

/// The topics format 2 adds to the fixture: priorities and a bury, a pause until resumed, a
/// pause with an end.
const V2_TOPICS: [&str; 3] = ["tube-a", "paused", "paused-until"];

/// The topic format 4 adds to the fixture: tasks with trace contexts.
const V4_TOPICS: [&str; 1] = ["traced"];

/// The topic format 5 adds to the fixture: tasks with expiries.
const V5_TOPICS: [&str; 1] = ["expiring"];

/// The topic format 6 adds to the fixture: tasks with keys, and limits on the topic.
const V6_TOPICS: [&str; 1] = ["keyed"];

/// The format this build writes.
const FORMAT: u32 = 6;

fn fixture_dir(version: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/embedded-v{version}"))
}

async fn open(dir: &Path, clock: &ManualClock) -> Queue {
    open_storage(dir, clock).await.0
}

async fn open_storage(dir: &Path, clock: &ManualClock) -> (Queue, Arc<EmbeddedStorage>) {
    let ctx = StorageContext::new(Arc::new(clock.clone()));
    let options = EmbeddedOptions::new(dir)
        .fsync(FsyncPolicy::Always)
        .shards(2)
        // Small thresholds so the fixture has a snapshot and log records after it.
        .snapshot_min_bytes(2_048)
        .segment_bytes(4_096);
    let (storage, _) = embedded::start(ctx.clone(), options)
        .await
        .expect("open the data directory");
    (Queue::new(storage.clone(), ctx), storage)
}

/// Every field of a task as the format stores it, in a form that does not change when the
/// in-memory types gain fields.
fn view(t: &TaskInfo) -> Value {
    json!({
        "id": t.id,
        "topic": t.topic,
        // Text bodies as text (all of format 1's), others as their bytes.
        "body": t.body_text().map_or_else(|| json!(t.body), |b| json!(b)),
        "state": t.state.name(),
        "due_ms": t.due_ms,
        "delay_ms": t.delay_ms,
        "ttr_ms": t.ttr_ms,
        "max_retries": t.max_retries,
        "retries": t.retries,
        "created_at_ms": t.created_at_ms,
        "updated_at_ms": t.updated_at_ms,
        "backoff": t.backoff,
        "deadline_ms": t.deadline_ms,
        "last_error": t.last_error,
        "history": t.history.iter().map(|a| json!({
            "started_at_ms": a.started_at_ms,
            "ended_at_ms": a.ended_at_ms,
            "outcome": a.outcome,
            "error": a.error,
        })).collect::<Vec<_>>(),
    })
}

async fn all_views(q: &Queue, topics: &[&str]) -> Value {
    let mut out = Vec::new();
    for topic in topics {
        let mut items = q.list(topic, None, 1, 1000).await.expect("list").items;
        items.sort_by(|a, b| a.id.cmp(&b.id));
        out.extend(items.iter().map(view));
    }
    Value::Array(out)
}

/// Format 2's view: format 1's with the priority, and (format 4) the trace context of a task
/// that has one.
async fn all_views_v2(q: &Queue, topics: &[&str]) -> Value {
    let mut out = Vec::new();
    for topic in topics {
        let mut items = q.list(topic, None, 1, 1000).await.expect("list").items;
        items.sort_by(|a, b| a.id.cmp(&b.id));
        out.extend(items.iter().map(|t| {
            let mut v = view(t);
            v["priority"] = json!(t.priority);
            if let Some(trace) = &t.trace {
                v["trace"] = json!(trace);
            }
            if let Some(at) = t.expires_at_ms {
                v["expires_at_ms"] = json!(at);
                v["on_expire"] = json!(t.on_expire);
            }
            if let Some(key) = &t.key {
                v["key"] = json!(key);
            }
            v
        }));
    }
    Value::Array(out)
}

/// The topics of the fixture of format `version` (2 or later).
fn all_topics(version: u32) -> Vec<&'static str> {
    let v4: &[&str] = if version >= 4 { &V4_TOPICS } else { &[] };
    let v5: &[&str] = if version >= 5 { &V5_TOPICS } else { &[] };
    let v6: &[&str] = if version >= 6 { &V6_TOPICS } else { &[] };
    TOPICS
        .iter()
        .chain(V2_TOPICS.iter())
        .chain(v4)
        .chain(v5)
        .chain(v6)
        .copied()
        .collect()
}

/// Pops one task of `topic`, waiting for the engine to promote it if needed.
async fn pop(q: &Queue, topic: &str) -> delayq::Delivery {
    q.pop(topic, PopOptions::default().timeout_ms(5_000))
        .await
        .expect("pop")
        .pop()
        .expect("a ready task")
}

/// Writes tasks in every state; returns the receipt of the task left ACTIVE.
async fn write_tasks(q: &Queue, clock: &ManualClock) -> String {
    let add = |task: NewTask| async move { q.add(task).await.expect("add") };
    // Enough churn before the interesting tasks that the shards take snapshots.
    for i in 0..60 {
        let id = format!("churn-{i:02}");
        add(NewTask::new("orders", &id).body("x".repeat(40)).delay_ms(5)).await;
        q.cancel("orders", &id).await.expect("cancel");
        q.delete("orders", &id).await.expect("delete");
    }

    // dead-1: two failed deliveries with max_retries 1, the first with a backoff → DEAD with
    // its last error and history. The clock moves here, before any retention starts.
    add(NewTask::new("pay-callback", "dead-1")
        .body("txn-9")
        .max_retries(MaxRetries::Limited(1))
        .backoff(Backoff::Schedule {
            ms: vec![120_000, 600_000],
        }))
    .await;
    let d = pop(q, "pay-callback").await;
    let fail = |id: String, error: &'static str| async move {
        q.release("pay-callback", &id, ReleaseOptions::default().error(error))
            .await
            .expect("release")
    };
    assert_eq!(fail(d.id, "HTTP 502").await, State::Delayed);
    clock.advance(120_000);
    let d = pop(q, "pay-callback").await;
    assert_eq!(fail(d.id, "HTTP 503").await, State::Dead);

    add(NewTask::new("orders", "delayed-1")
        .body(r#"{"order_id":"1"}"#)
        .delay_ms(900_000)
        .ttr_ms(30_000))
    .await;
    add(NewTask::new("orders", "delayed-backoff")
        .body("ünïcode ✓")
        .delay_ms(60_000)
        .backoff(Backoff::Exponential {
            base_ms: 1_000,
            max_ms: 60_000,
        }))
    .await;
    add(NewTask::new("orders", "ready-1").body("ready")).await;
    add(NewTask::new("orders", "replaced").body("old").delay_ms(10)).await;
    add(NewTask::new("orders", "replaced")
        .body("new")
        .delay_ms(20)
        .on_duplicate(OnDuplicate::Replace))
    .await;
    add(NewTask::new("orders", "finished-1").body("f")).await;
    add(NewTask::new("orders", "cancelled-1").body("c").delay_ms(50)).await;
    q.cancel("orders", "cancelled-1").await.expect("cancel");

    // ready-1 and finished-1 are ready: take both, finish one and give the other back with
    // an error, so a READY task with history is kept too.
    let both = q
        .pop("orders", PopOptions::default().count(2).timeout_ms(5_000))
        .await
        .expect("pop");
    assert_eq!(both.len(), 2);
    for d in both {
        if d.id == "finished-1" {
            q.finish("orders", &d.id, Some(&d.receipt))
                .await
                .expect("finish");
        } else {
            q.release("orders", &d.id, ReleaseOptions::default().error("busy"))
                .await
                .expect("release");
        }
    }

    add(NewTask::new("pay-callback", "active-1")
        .body("held")
        .ttr_ms(45_000))
    .await;
    let active = pop(q, "pay-callback").await;
    assert_eq!(active.id, "active-1");
    active.receipt
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_1_directory_opens_with_the_same_tasks() {
    let fixture = fixture_dir(1);
    let expected = expected_of(1);
    let data = fixture.join("data");
    let files = fixture_files(&data);
    assert!(
        files.iter().any(|f| f.ends_with(".snap")) && files.iter().any(|f| f.ends_with(".seg")),
        "the fixture must hold snapshots and segments: {files:?}"
    );

    // Opening may cut, remove or create files: open a copy.
    let copy = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    copy_dir(&data, copy.path());
    let clock = ManualClock::new(expected["clock_ms"].as_u64().expect("clock_ms"));
    let q = open(copy.path(), &clock).await;
    assert_eq!(all_views(&q, &TOPICS).await, expected["tasks"]);
    // Format 1 had no priorities: every task has the default.
    for topic in TOPICS {
        for t in q.list(topic, None, 1, 1000).await.unwrap().items {
            assert_eq!(t.priority, DEFAULT_PRIORITY, "{}", t.id);
        }
    }
    // Opening upgraded the layout to format 2 (a format 1 build refuses it from now on).
    let meta: Value =
        serde_json::from_slice(&std::fs::read(copy.path().join("delayq.meta")).unwrap()).unwrap();
    assert_eq!(meta, json!({"format": FORMAT, "shards": 2}));
    for topic in TOPICS {
        let stats = q.stats(topic).await.expect("stats");
        // Format 1 predates pauses: no topic of it is paused, and its counters are the same.
        assert!(!stats.pause.paused, "{topic}");
        let mut counters = serde_json::to_value(stats).unwrap();
        counters.as_object_mut().unwrap().remove("pause");
        assert_eq!(counters, expected["stats"][topic], "{topic}");
    }
    // The receipt held when the fixture was written still names the current attempt.
    let receipt = expected["active_receipt"].as_str().expect("receipt");
    q.finish("pay-callback", "active-1", Some(receipt))
        .await
        .expect("the old receipt finishes the task");
    assert_eq!(
        q.get("pay-callback", "active-1").await.unwrap().state,
        State::Finished
    );
    // The upgraded directory takes format 2 records and reopens with them.
    q.add(NewTask::new("orders", "after-upgrade").priority(3))
        .await
        .unwrap();
    q.pause("orders", None).await.unwrap();
    q.shutdown().await.unwrap();
    drop(q);
    let q = open(copy.path(), &clock).await;
    assert_eq!(q.get("orders", "after-upgrade").await.unwrap().priority, 3);
    assert!(q.stats("orders").await.unwrap().pause.paused);
    q.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_2_directory_opens_with_the_same_tasks() {
    let copy = check_fixture(2).await;
    // Opening moved the settings out of shard 0 into their own log, durably, and then said
    // format 3 (a format 2 build refuses the directory from now on).
    let meta: Value =
        serde_json::from_slice(&std::fs::read(copy.path().join("delayq.meta")).unwrap()).unwrap();
    assert_eq!(meta, json!({"format": FORMAT, "shards": 2}));
    assert!(copy.path().join("settings").is_dir());
    let expected = expected_of(2);
    let clock = ManualClock::new(expected["clock_ms"].as_u64().expect("clock_ms"));
    // The settings come from their own log now: a snapshot of every shard drops what shard 0
    // still held, and they are all there after a restart.
    let (q, storage) = open_storage(copy.path(), &clock).await;
    for i in 0..storage.shard_count() {
        embedded::snapshot_shard(&storage, i, true).await.unwrap();
    }
    q.shutdown().await.unwrap();
    drop((q, storage));
    let q = open(copy.path(), &clock).await;
    assert_eq!(push_settings(&q).await, expected["meta_push"]);
    q.shutdown().await.unwrap();
    drop(q);
    // An upgrade cut short after the settings were moved (the layout still says format 2)
    // is done again at the next start, to the same values.
    write_layout(copy.path(), 2);
    let q = open(copy.path(), &clock).await;
    assert_eq!(push_settings(&q).await, expected["meta_push"]);
    q.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_3_directory_opens_with_the_same_tasks() {
    let copy = check_fixture(3).await;
    assert!(
        fixture_files(&fixture_dir(3).join("data"))
            .iter()
            .any(|f| f.starts_with("settings/") && f.ends_with(".snap")),
        "the settings' log of the fixture holds a snapshot"
    );
    // Format 3 to 4 changes no record: the layout says format 4, and the settings are the
    // settings' log's (not shard 0's stale copies, which format 3 ignores).
    let meta: Value =
        serde_json::from_slice(&std::fs::read(copy.path().join("delayq.meta")).unwrap()).unwrap();
    assert_eq!(meta, json!({"format": FORMAT, "shards": 2}));
    let expected = expected_of(3);
    let clock = ManualClock::new(expected["clock_ms"].as_u64().expect("clock_ms"));
    let q = open(copy.path(), &clock).await;
    assert_eq!(push_settings(&q).await, expected["meta_push"]);
    q.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_4_directory_opens_with_the_same_tasks_and_trace_contexts() {
    let copy = check_fixture(4).await;
    let meta: Value =
        serde_json::from_slice(&std::fs::read(copy.path().join("delayq.meta")).unwrap()).unwrap();
    assert_eq!(meta, json!({"format": FORMAT, "shards": 2}));
    // The fixture holds traced tasks in the snapshot and in the log, with and without a
    // tracestate, and one that went through a failed attempt; each kept its context.
    let expected = expected_of(4);
    let traced: Vec<&Value> = expected["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t.get("trace").is_some())
        .collect();
    assert_eq!(traced.len(), 4, "{traced:?}");
    assert!(
        traced
            .iter()
            .any(|t| t["trace"].get("tracestate").is_some())
    );
    assert!(traced.iter().any(|t| t["retries"] == json!(1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_5_directory_opens_with_the_same_tasks_and_expiries() {
    let copy = check_fixture(5).await;
    let meta: Value =
        serde_json::from_slice(&std::fs::read(copy.path().join("delayq.meta")).unwrap()).unwrap();
    assert_eq!(meta, json!({"format": FORMAT, "shards": 2}));
    // The fixture holds expiring tasks in the snapshot and in the log, with both policies,
    // one traced, and one that expired into DEAD before the fixture was closed.
    let expected = expected_of(5);
    let expiring: Vec<&Value> = expected["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t.get("expires_at_ms").is_some())
        .collect();
    assert_eq!(expiring.len(), 4, "{expiring:?}");
    assert!(expiring.iter().any(|t| t["on_expire"] == json!("drop")));
    assert!(expiring.iter().any(|t| t.get("trace").is_some()));
    let dead: Vec<&Value> = expected["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["topic"] == json!("expiring") && t["state"] == json!("dead"))
        .collect();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["last_error"], json!("expired"));
    // The expiries still run after a restart: past the drop task's expiry it is gone.
    let at = expiring
        .iter()
        .find(|t| t["on_expire"] == json!("drop"))
        .and_then(|t| t["expires_at_ms"].as_u64())
        .unwrap();
    let clock = ManualClock::new(at);
    let q = open(copy.path(), &clock).await;
    let id = expiring
        .iter()
        .find(|t| t["on_expire"] == json!("drop"))
        .and_then(|t| t["id"].as_str())
        .unwrap();
    let gone = wait_for(|| async { q.get("expiring", id).await.is_err() }).await;
    assert!(
        gone,
        "the dropped task is deleted at its expiry after a restart"
    );
    q.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_6_directory_opens_with_the_same_keys_and_limits() {
    if std::env::var_os("DELAYQ_WRITE_FORMAT_FIXTURE").is_some() {
        write_fixture(&fixture_dir(6)).await;
    }
    let copy = check_fixture(6).await;
    let expected = expected_of(6);
    let keyed: Vec<&Value> = expected["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t.get("key").is_some())
        .collect();
    assert_eq!(
        keyed.len(),
        4,
        "keyed tasks in the snapshot and the log: {keyed:?}"
    );
    let clock = ManualClock::new(expected["clock_ms"].as_u64().unwrap());
    let q = open(copy.path(), &clock).await;
    // The limits came back from the settings, and hold: merchant-a has its one task ACTIVE,
    // so only merchant-b's task goes.
    assert_eq!(
        q.limits().await.unwrap(),
        [(
            "keyed".to_owned(),
            FlowLimits::default().with_max_active_per_key(1)
        )]
    );
    let got: Vec<String> = q
        .pop("keyed", PopOptions::default().count(10))
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(got, ["b1"]);
    q.shutdown().await.unwrap();
}

/// Polls `check` until it holds or five seconds pass; whether it held.
async fn wait_for<F, Fut>(check: F) -> bool
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    false
}

/// The settings of namespace "push" as the fixture's `expected.json` lists them.
async fn push_settings(q: &Queue) -> Value {
    let meta: Vec<Value> = q
        .settings()
        .list("push")
        .await
        .unwrap()
        .into_iter()
        .map(|(k, v)| json!([k, v]))
        .collect();
    json!(meta)
}

/// Rewrites the format of the layout of the data directory `dir`.
fn write_layout(dir: &Path, format: u32) {
    let path = dir.join("delayq.meta");
    let mut meta: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    meta["format"] = json!(format);
    std::fs::write(&path, serde_json::to_vec(&meta).unwrap()).unwrap();
}

fn expected_of(version: u32) -> Value {
    serde_json::from_slice(
        &std::fs::read(fixture_dir(version).join("expected.json"))
            .expect("expected.json of the fixture"),
    )
    .expect("expected.json parses")
}

/// Opens a copy of the fixture of format `version` (2 or later) and compares everything it
/// holds with its `expected.json`. Returns the copy, closed.
async fn check_fixture(version: u32) -> tempfile::TempDir {
    let fixture = fixture_dir(version);
    let expected = expected_of(version);
    let data = fixture.join("data");
    let files = fixture_files(&data);
    assert!(
        files.iter().any(|f| f.ends_with(".snap")) && files.iter().any(|f| f.ends_with(".seg")),
        "the fixture must hold snapshots and segments: {files:?}"
    );
    let copy = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    copy_dir(&data, copy.path());
    let clock = ManualClock::new(expected["clock_ms"].as_u64().expect("clock_ms"));
    let q = open(copy.path(), &clock).await;
    assert_eq!(
        all_views_v2(&q, &all_topics(version)).await,
        expected["tasks"]
    );
    for topic in all_topics(version) {
        let stats = q.stats(topic).await.expect("stats");
        assert_eq!(stats_view(stats), expected["stats"][topic], "{topic}");
    }
    // Pop order (priority, then due, then insertion) and the buried order survived.
    let ready: Vec<String> = q
        .pop("tube-a", PopOptions::default().count(10))
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(json!(ready), expected["tube_a_pop_order"]);
    let buried = q
        .peek("tube-a", State::Dead)
        .await
        .unwrap()
        .expect("buried");
    assert_eq!(json!(buried.id), expected["tube_a_first_buried"]);
    // The paused topics still hold their tasks.
    for topic in ["paused", "paused-until"] {
        assert!(
            q.pop(topic, PopOptions::default())
                .await
                .unwrap()
                .is_empty()
        );
    }
    assert_eq!(push_settings(&q).await, expected["meta_push"]);
    // Job ids never repeat: the next one is past every id handed out before.
    let last = expected["last_job_id"].as_u64().expect("last_job_id");
    let next = q.next_job_id().await.unwrap();
    assert!(next > last, "job id {next} after {last}");
    let receipt = expected["active_receipt"].as_str().expect("receipt");
    q.finish("pay-callback", "active-1", Some(receipt))
        .await
        .expect("the old receipt finishes the task");
    q.shutdown().await.unwrap();
    copy
}

/// What format 2 adds to the fixture, before and after a forced snapshot of every shard, so
/// both the snapshot and the log hold each new kind of record. Returns the last job id.
async fn write_v2_extras(q: &Queue, storage: &EmbeddedStorage) -> u64 {
    let add = |task: NewTask| async move { q.add(task).await.expect("add") };
    // READY in tube-a, added in this order: pop order is b-pri1, d-pri1-early, a-pri5, c-default.
    add(NewTask::new("tube-a", "a-pri5").body("a").priority(5)).await;
    add(NewTask::new("tube-a", "b-pri1").body("b").priority(1)).await;
    add(NewTask::new("tube-a", "c-default").body("c")).await;
    add(NewTask::new("tube-a", "d-pri1").body("d").priority(1)).await;
    // Two buried tasks, one with a new priority, buried in this order.
    for (id, priority) in [("buried-1", Some(7)), ("buried-2", None)] {
        add(NewTask::new("tube-a", id)
            .body(vec![0u8, 159, 146, 150])
            .priority(0))
        .await;
        let d = q
            .pop("tube-a", PopOptions::default())
            .await
            .unwrap()
            .pop()
            .unwrap();
        assert_eq!(d.id, id);
        let mut options = BuryOptions::default().receipt(d.receipt);
        options.priority = priority;
        q.bury("tube-a", id, options).await.expect("bury");
    }
    add(NewTask::new("paused", "held").body("p")).await;
    q.pause("paused", None).await.unwrap();
    q.pause("paused-until", Some(3_600_000)).await.unwrap();
    let s: &dyn SettingsStore = storage;
    s.put("push", "target-1", b"{\"url\":\"http://x\"}".to_vec())
        .await
        .unwrap();
    s.put("push", "gone", b"x".to_vec()).await.unwrap();
    let mut last = 0;
    for _ in 0..3 {
        last = q.next_job_id().await.unwrap();
    }
    for i in 0..storage.shard_count() {
        embedded::snapshot_shard(storage, i, true).await.unwrap();
    }
    embedded::snapshot_settings(storage, true).await.unwrap();
    // After the snapshots: log records of every new kind.
    s.put("push", "target-2", vec![1, 2, 255]).await.unwrap();
    s.delete("push", "gone").await.unwrap();
    add(NewTask::new("paused", "held-2").body("p2").priority(2)).await;
    for _ in 0..2 {
        last = q.next_job_id().await.unwrap();
    }
    last
}

/// What format 4 adds to the fixture: traced tasks before and after a forced snapshot of
/// every shard, one with a failed attempt behind it.
async fn write_v4_extras(q: &Queue, storage: &EmbeddedStorage) {
    let trace = |span: &str, state: Option<&str>| {
        TraceContext::parse(
            &format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{span}-01"),
            state,
        )
        .unwrap()
    };
    let add = |task: NewTask| async move { q.add(task).await.expect("add") };
    add(NewTask::new("traced", "with-state")
        .body("t1")
        .delay_ms(600_000)
        .trace(trace("00f067aa0ba902b7", Some("congo=t61rcWkgMzE,rojo=1"))))
    .await;
    add(NewTask::new("traced", "retried")
        .body("t2")
        .trace(trace("00f067aa0ba902b8", None)))
    .await;
    let d = pop(q, "traced").await;
    assert_eq!(d.trace, Some(trace("00f067aa0ba902b8", None)));
    q.release(
        "traced",
        &d.id,
        ReleaseOptions::default().error("retry").delay_ms(60_000),
    )
    .await
    .expect("release");
    for i in 0..storage.shard_count() {
        embedded::snapshot_shard(storage, i, true).await.unwrap();
    }
    add(NewTask::new("traced", "after-snapshot")
        .body("t3")
        .delay_ms(600_000)
        .trace(trace("00f067aa0ba902b9", Some("k=v"))))
    .await;
    add(NewTask::new("traced", "with-backoff")
        .body("t4")
        .delay_ms(600_000)
        .backoff(Backoff::Fixed { ms: 1_000 })
        .trace(trace("00f067aa0ba902ba", None)))
    .await;
    add(NewTask::new("traced", "untraced")
        .body("t5")
        .delay_ms(600_000))
    .await;
}

/// What format 5 adds to the fixture: tasks with expiries before and after a forced snapshot
/// of every shard, and one that expired into DEAD.
async fn write_v5_extras(q: &Queue, clock: &ManualClock, storage: &EmbeddedStorage) {
    let add = |task: NewTask| async move { q.add(task).await.expect("add") };
    // Expires 1 ms after it is ready; nothing else of the fixture is due that soon.
    add(NewTask::new("expiring", "expired")
        .body("e0")
        .expires_in_ms(1))
    .await;
    clock.advance(1);
    let expired = wait_for(|| async {
        q.get("expiring", "expired")
            .await
            .is_ok_and(|t| t.state == State::Dead)
    })
    .await;
    assert!(expired, "the task expired into DEAD");
    add(NewTask::new("expiring", "delayed-dead")
        .body("e1")
        .delay_ms(600_000)
        .expires_in_ms(700_000))
    .await;
    for i in 0..storage.shard_count() {
        embedded::snapshot_shard(storage, i, true).await.unwrap();
    }
    add(NewTask::new("expiring", "ready-drop")
        .body("e2")
        .expires_in_ms(800_000)
        .on_expire(OnExpire::Drop))
    .await;
    add(NewTask::new("expiring", "traced")
        .body("e3")
        .delay_ms(1_000)
        .expires_at_ms(clock.now_ms() + 900_000)
        .trace(
            TraceContext::parse(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bb-01",
                None,
            )
            .unwrap(),
        ))
    .await;
    add(NewTask::new("expiring", "never").body("e4").delay_ms(1_000)).await;
}

/// What format 6 adds to the fixture: limits on a topic, keyed tasks before and after a
/// forced snapshot of every shard, one of them ACTIVE.
async fn write_v6_extras(q: &Queue, storage: &EmbeddedStorage) {
    let add = |task: NewTask| async move { q.add(task).await.expect("add") };
    q.set_limits("keyed", FlowLimits::default().with_max_active_per_key(1))
        .await
        .unwrap();
    add(NewTask::new("keyed", "a1").body("k1").key("merchant-a")).await;
    add(NewTask::new("keyed", "a2").body("k2").key("merchant-a")).await;
    let active = q
        .pop("keyed", PopOptions::default().count(10))
        .await
        .unwrap();
    assert_eq!(active.len(), 1, "one task of merchant-a");
    for i in 0..storage.shard_count() {
        embedded::snapshot_shard(storage, i, true).await.unwrap();
    }
    add(NewTask::new("keyed", "a3").body("k3").key("merchant-a")).await;
    add(NewTask::new("keyed", "b1")
        .body("k4")
        .key("merchant-b")
        .delay_ms(0))
    .await;
    add(NewTask::new("keyed", "plain").body("k5").delay_ms(600_000)).await;
}

/// A topic's counters as the fixture compares them: `expired` is counted since the process
/// started, so it is not part of what a directory holds.
fn stats_view(stats: delayq::TopicStats) -> Value {
    let mut v = serde_json::to_value(stats).unwrap();
    v.as_object_mut().unwrap().remove("expired");
    v
}

async fn write_fixture(fixture: &Path) {
    let data = fixture.join("data");
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data).unwrap();
    let clock = ManualClock::new(START);
    let (q, storage) = open_storage(&data, &clock).await;
    let receipt = write_tasks(&q, &clock).await;
    let last_job_id = write_v2_extras(&q, &storage).await;
    write_v4_extras(&q, &storage).await;
    write_v5_extras(&q, &clock, &storage).await;
    write_v6_extras(&q, &storage).await;
    let mut stats = serde_json::Map::new();
    for topic in all_topics(FORMAT) {
        stats.insert(topic.into(), stats_view(q.stats(topic).await.unwrap()));
    }
    let tasks = all_views_v2(&q, &all_topics(FORMAT)).await;
    let first_buried = q.peek("tube-a", State::Dead).await.unwrap().unwrap().id;
    let meta: Vec<Value> = SettingsStore::list(&*storage, "push")
        .await
        .unwrap()
        .into_iter()
        .map(|(k, v)| json!([k, v]))
        .collect();
    let expected = json!({
        "clock_ms": clock.now_ms(),
        "tasks": tasks,
        "stats": stats,
        "active_receipt": receipt,
        "tube_a_pop_order": ["b-pri1", "d-pri1", "a-pri5", "c-default"],
        "tube_a_first_buried": first_buried,
        "meta_push": meta,
        "last_job_id": last_job_id,
    });
    q.shutdown().await.unwrap();
    // Lock files belong to a running process, not to the format.
    for file in walk(&data) {
        if file.file_name().is_some_and(|n| n == "LOCK") {
            std::fs::remove_file(file).unwrap();
        }
    }
    std::fs::write(
        fixture.join("expected.json"),
        serde_json::to_string_pretty(&expected).unwrap() + "\n",
    )
    .unwrap();
}

/// The files under `dir`, as paths relative to it.
fn fixture_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in walk(dir) {
        out.push(
            entry
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .into_owned(),
        );
    }
    out.sort();
    out
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("fixture directory") {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn copy_dir(from: &Path, to: &Path) {
    for file in walk(from) {
        let target = to.join(file.strip_prefix(from).unwrap());
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(&file, &target).unwrap();
    }
}
