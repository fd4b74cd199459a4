//! A real disk failure under the HTTP server (embedded backend): the log's next segment file
//! cannot be created because a directory stands at its name (EISDIR, which root gets too).
//!
//! The add whose write fails answers 500 with `data.outcome: "unknown"` (it is applied in
//! memory, maybe not on disk); later writes answer 500 without it (refused before anything
//! changed); no body names a server path, per task of a batch either.

use std::path::PathBuf;
use std::sync::Arc;

use delayq::storage::embedded::{self, EmbeddedOptions};
use delayq::{ManualClock, Queue, StorageContext};
use delayq_daemon::ServerConfig;
use delayq_log::FsyncPolicy;
use delayq_server::{AppState, app};
use serde_json::{Value, json};

const START: u64 = 1_800_000_000_000;

/// A fresh data directory under the target's scratch space.
fn scratch() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "http-storage-failure-{}-{}",
        std::process::id(),
        START
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

struct Reply {
    status: u16,
    json: Value,
    text: String,
}

async fn post(client: &reqwest::Client, url: &str, body: Value) -> Reply {
    let resp = client.post(url).json(&body).send().await.expect("send");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    let json = serde_json::from_str(&text).expect("a JSON envelope");
    Reply { status, json, text }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_failure_is_a_500_without_paths_that_says_whether_it_happened() {
    let dir = scratch();
    let ctx = StorageContext::new(Arc::new(ManualClock::new(START)));
    let options = EmbeddedOptions::new(&dir)
        .fsync(FsyncPolicy::Always)
        .shards(1)
        .segment_bytes(4096);
    let (storage, _) = embedded::start(ctx.clone(), options).await.expect("start");
    let queue = Queue::new(storage, ctx);
    let state = AppState::new(queue, &ServerConfig::default().app());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/add", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app(state)).await });
    let client = reqwest::Client::new();

    for seq in 2..=2_000u64 {
        std::fs::create_dir(dir.join(format!("shard-0/{seq:020}.seg"))).unwrap();
    }
    let dir_text = dir.display().to_string();
    let no_path = |r: &Reply| {
        assert!(!r.text.contains(&dir_text), "a path in {}", r.text);
        assert!(!r.text.contains(".seg"), "a file in {}", r.text);
    };

    // Add until the log has to rotate into the blocked file.
    let mut failed = None;
    for i in 0..2_000 {
        let body = json!({"topic": "t", "id": format!("t-{i}"), "delay_ms": 60_000,
                          "body": "x".repeat(200)});
        let r = post(&client, &url, body).await;
        if r.status != 200 {
            failed = Some((i, r));
            break;
        }
    }
    let (i, r) = failed.expect("the log never rotated into the blocked segment");
    assert_eq!(r.status, 500, "{}", r.text);
    assert_eq!(r.json["code"], 500);
    assert_eq!(r.json["data"]["outcome"], "unknown", "{}", r.text);
    let message = r.json["message"].as_str().unwrap();
    assert!(message.contains("writing the log"), "{message}");
    no_path(&r);
    // Applied in memory: the task is visible, which is why the outcome is unknown.
    let get = client
        .get(url.replace("/add", &format!("/get?topic=t&id=t-{i}")))
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 200);

    // Refused before anything changed: a 500 that does not say "unknown".
    let r = post(&client, &url, json!({"topic": "t", "id": "later"})).await;
    assert_eq!(r.status, 500, "{}", r.text);
    assert!(r.json["data"]["outcome"].is_null(), "{}", r.text);
    no_path(&r);

    // A batch answers per task, with the same care.
    let r = post(
        &client,
        &url,
        json!({"tasks": [{"topic": "t", "id": "b-1"}, {"topic": "t", "id": "b-2"}]}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    for item in r.json["data"].as_array().unwrap() {
        assert_eq!(item["code"], 500, "{}", r.text);
    }
    no_path(&r);
    let _ = std::fs::remove_dir_all(&dir);
}
