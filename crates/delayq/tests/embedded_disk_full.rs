//! A full disk under the embedded backend, for real: the data directory lives on an 8 MiB
//! tmpfs the test mounts for itself ([`SmallFs`]), filled to the last page by a filler file.
//!
//! The change whose write meets the full disk is already applied in memory: its error is a
//! retryable `Unavailable` whose outcome is unknown, and the log keeps it and writes it once
//! space returns. Later changes are refused before they apply anything. Once the filler is
//! removed, writes resume without a restart, and a reopen finds every task, the kept one
//! included. A snapshot that cannot be written leaves the log and its files as they were.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq::storage::embedded::{self, EmbeddedOptions, EmbeddedStorage};
use delayq::{ErrorKind, ManualClock, NewTask, Outcome, Queue, StorageContext};
use delayq_log::FsyncPolicy;
use delayq_testkit::SmallFs;

const START: u64 = 1_800_000_000_000;

async fn open(dir: &Path) -> (Queue, Arc<EmbeddedStorage>) {
    let ctx = StorageContext::new(Arc::new(ManualClock::new(START)));
    let options = EmbeddedOptions::new(dir)
        .fsync(FsyncPolicy::Always)
        .shards(1);
    // A child process forked by another test of this binary (mount, umount) holds a copy of
    // the log's lock file until it execs; a reopen in that instant finds the lock still
    // taken. Such a moment passes within milliseconds.
    let mut tries = 0;
    let storage = loop {
        match embedded::start(ctx.clone(), options.clone()).await {
            Ok((storage, _)) => break storage,
            Err(e) if tries < 50 && e.to_string().contains("in use") => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("start: {e}"),
        }
    };
    (Queue::new(storage.clone(), ctx), storage)
}

fn task(id: &str) -> NewTask {
    NewTask::new("t", id)
        .delay_ms(60_000)
        .body("x".repeat(1024))
}

/// The files of the shard's log with their sizes, sorted.
fn files(dir: &Path) -> Vec<(String, u64)> {
    let mut all: Vec<(String, u64)> = std::fs::read_dir(dir.join("shard-0"))
        .expect("list the shard")
        .map(|e| {
            let e = e.expect("an entry");
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().expect("metadata").len(),
            )
        })
        .filter(|(name, _)| name != "LOCK")
        .collect();
    all.sort();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_retryable_and_writes_resume_by_themselves_once_space_is_freed() {
    let fs = SmallFs::mount(8 << 20).unwrap_or_else(|e| panic!("{e}"));
    let dir = fs.path().join("data");
    let (q, _) = open(&dir).await;
    let mut acked = Vec::new();
    for i in 0..20 {
        let id = format!("before-{i}");
        q.add(task(&id)).await.expect("room on the disk");
        acked.push(id);
    }
    fs.fill().expect("fill");
    let mut failed = None;
    for i in 0..5_000 {
        let id = format!("filling-{i}");
        match q.add(task(&id)).await {
            Ok(_) => acked.push(id),
            Err(e) => {
                failed = Some((id, e));
                break;
            }
        }
    }
    let (kept, err) = failed.expect("an add met the full disk");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable(), "{err}");
    // Applied in memory before its write failed: the outcome is unknown, and it is visible.
    assert_eq!(err.outcome(), Outcome::Unknown, "{err}");
    assert!(err.to_string().contains("shard-0/"), "{err}");
    assert!(err.to_string().contains("No space left on device"), "{err}");
    assert_eq!(q.get("t", &kept).await.expect("in memory").id, kept);

    // Refused up front while the disk stays full; reads still answer.
    let refused = q.add(task("refused")).await.expect_err("the disk is full");
    assert_eq!(refused.kind(), ErrorKind::Unavailable, "{refused}");
    assert_eq!(refused.outcome(), Outcome::NotApplied, "{refused}");
    assert_eq!(
        q.get("t", "refused").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    for id in &acked {
        q.get("t", id).await.expect("reads are served");
    }

    fs.free().expect("free");
    let started = Instant::now();
    loop {
        match q.add(task("after")).await {
            Ok(_) => break,
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "never resumed: {e}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    acked.push("after".to_owned());
    q.shutdown()
        .await
        .expect("a clean shutdown once space is back");
    drop(q);

    let (q, _) = open(&dir).await;
    for id in acked.iter().chain([&kept]) {
        q.get("t", id).await.unwrap_or_else(|e| panic!("{id}: {e}"));
    }
    assert_eq!(
        q.get("t", "refused").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    q.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_that_cannot_be_written_leaves_the_log_intact() {
    let fs = SmallFs::mount(8 << 20).unwrap_or_else(|e| panic!("{e}"));
    let dir = fs.path().join("data");
    let (q, storage) = open(&dir).await;
    let ids: Vec<String> = (0..200).map(|i| format!("task-{i}")).collect();
    for id in &ids {
        q.add(task(id)).await.expect("room on the disk");
    }
    let before = files(&dir);
    fs.fill().expect("fill");
    let err = embedded::snapshot_shard(&storage, 0, true)
        .await
        .expect_err("no room for the snapshot");
    assert!(err.to_string().contains("No space left on device"), "{err}");
    // No temporary file left taking space, no segment touched.
    assert_eq!(files(&dir), before);

    fs.free().expect("free");
    q.add(task("after")).await.expect("the log still works");
    assert!(
        embedded::snapshot_shard(&storage, 0, true)
            .await
            .expect("room now")
    );
    q.shutdown().await.unwrap();
    drop((q, storage));

    let (q, _) = open(&dir).await;
    for id in ids.iter().chain([&"after".to_owned()]) {
        q.get("t", id).await.unwrap_or_else(|e| panic!("{id}: {e}"));
    }
    q.shutdown().await.unwrap();
}
