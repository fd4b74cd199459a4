//! Format stability of the embedded backend: a data directory written by an earlier build (format
//! 1, committed under `tests/fixtures/embedded-v1/`) must open with every later build and show
//! the same tasks. The fixture holds tasks in every state, with backoffs, errors and attempt
//! history, and both a snapshot and log records written after it, so the snapshot reader and the
//! record codec are both pinned. A change of the format must come with its upgrade path; this
//! test then keeps the old directory opening.
//!
//! The fixture was written by this same file with `DELAYQ_WRITE_FORMAT_FIXTURE=1` (it replaces
//! the directory and `expected.json`); do that only for a new format version, in a new folder.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use delayq::storage::embedded::{self, EmbeddedOptions};
use delayq::{
    Backoff, Clock, ManualClock, MaxRetries, NewTask, OnDuplicate, PopOptions, Queue,
    ReleaseOptions, State, StorageContext, TaskInfo,
};
use delayq_log::FsyncPolicy;
use serde_json::{Value, json};

/// The fixture's clock: tasks were written at this moment and are read back at it, so nothing
/// is promoted, redelivered or retired between writing and reading.
const START: u64 = 1_800_000_000_000;
const TOPICS: [&str; 2] = ["orders", "pay-callback"];

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/embedded-v1")
}

async fn open(dir: &Path, clock: &ManualClock) -> Queue {
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
    Queue::new(storage, ctx)
}

/// Every field of a task as the format stores it, in a form that does not change when the
/// in-memory types gain fields.
fn view(t: &TaskInfo) -> Value {
    json!({
        "id": t.id,
        "topic": t.topic,
        "body": t.body_text().expect("the fixture's bodies are text"),
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

async fn all_views(q: &Queue) -> Value {
    let mut out = Vec::new();
    for topic in TOPICS {
        let mut items = q.list(topic, None, 1, 1000).await.expect("list").items;
        items.sort_by(|a, b| a.id.cmp(&b.id));
        out.extend(items.iter().map(view));
    }
    Value::Array(out)
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
    let fixture = fixture_dir();
    if std::env::var_os("DELAYQ_WRITE_FORMAT_FIXTURE").is_some() {
        write_fixture(&fixture).await;
    }
    let expected: Value = serde_json::from_slice(
        &std::fs::read(fixture.join("expected.json")).expect("expected.json of the fixture"),
    )
    .expect("expected.json parses");
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
    assert_eq!(all_views(&q).await, expected["tasks"]);
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
    q.shutdown().await.unwrap();
}

async fn write_fixture(fixture: &Path) {
    let data = fixture.join("data");
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data).unwrap();
    let clock = ManualClock::new(START);
    let q = open(&data, &clock).await;
    let receipt = write_tasks(&q, &clock).await;
    let mut stats = serde_json::Map::new();
    for topic in TOPICS {
        stats.insert(
            topic.into(),
            serde_json::to_value(q.stats(topic).await.unwrap()).unwrap(),
        );
    }
    let expected = json!({
        "clock_ms": clock.now_ms(),
        "tasks": all_views(&q).await,
        "stats": stats,
        "active_receipt": receipt,
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
