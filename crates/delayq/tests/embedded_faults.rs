//! A disk that fails under the embedded backend, for real: the log's next segment file cannot
//! be created because a directory stands at its name (EISDIR, which root gets too).
//!
//! The change whose write fails is already applied in memory, so its error says the outcome
//! is unknown; later changes are refused before they apply anything, and say so; a batch
//! reports each task's own fate, since its tasks are written shard by shard. The cause names
//! the file for the log; the public message does not.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use delayq::storage::embedded::{self, EmbeddedOptions};
use delayq::{
    ErrorKind, Held, ManualClock, NewTask, Outcome, PopOptions, Queue, State, StorageContext,
};
use delayq_log::FsyncPolicy;

const START: u64 = 1_800_000_000_000;

fn scratch() -> PathBuf {
    tempfile::Builder::new()
        .prefix("embedded-faults-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
        .keep()
}

async fn open(dir: &Path, shards: usize) -> Queue {
    let ctx = StorageContext::new(Arc::new(ManualClock::new(START)));
    let options = EmbeddedOptions::new(dir)
        .fsync(FsyncPolicy::Always)
        .shards(shards)
        .segment_bytes(4096);
    let (storage, _) = embedded::start(ctx.clone(), options).await.expect("start");
    Queue::new(storage, ctx)
}

/// Puts a directory where the next segments of `shard`'s log would go (after its newest), so
/// its next rotation fails.
fn block_rotation(dir: &Path, shard: usize) {
    let shard_dir = dir.join(format!("shard-{shard}"));
    let newest = std::fs::read_dir(&shard_dir)
        .expect("the shard's directory")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|name| name.strip_suffix(".seg")?.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    for seq in newest + 1..=newest + 100 {
        let blocker = shard_dir.join(format!("{seq:020}.seg"));
        std::fs::create_dir(&blocker).expect("create a blocking directory");
    }
}

/// Adds tasks to `topic` one by one until one fails, and returns its id and error.
async fn add_until_the_disk_fails(q: &Queue, topic: &str) -> (String, delayq::Error) {
    for i in 0..2_000 {
        let id = format!("{topic}-{i}");
        let task = NewTask::new(topic, id.clone())
            .delay_ms(60_000)
            .body("x".repeat(200));
        if let Err(e) = q.add(task).await {
            return (id, e);
        }
    }
    panic!("the log never rotated into the blocked segment");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_log_write_is_outcome_unknown_and_later_writes_are_not_applied() {
    let dir = scratch();
    let q = open(&dir, 1).await;
    block_rotation(&dir, 0);

    let (id, err) = add_until_the_disk_fails(&q, "t").await;
    assert_eq!(err.kind(), ErrorKind::Storage, "{err}");
    assert_eq!(err.outcome(), Outcome::Unknown, "{err}");
    // The whole text (for the log) names the file; what a client is shown does not.
    let shard_dir = dir.join("shard-0").display().to_string();
    assert!(err.to_string().contains(&shard_dir), "{err}");
    let public = err.public_message();
    assert!(!public.contains(&shard_dir), "{public}");
    assert!(
        public.contains("may or may not have taken effect"),
        "{public}"
    );
    // It was applied in memory: that is why its outcome is unknown.
    assert_eq!(q.get("t", &id).await.unwrap().id, id);

    // The log takes nothing more, and refuses before anything is applied.
    let later = q
        .add(NewTask::new("t", "later"))
        .await
        .expect_err("the log is failed");
    assert_eq!(later.kind(), ErrorKind::Storage, "{later}");
    assert_eq!(later.outcome(), Outcome::NotApplied, "{later}");
    assert_eq!(
        q.get("t", "later").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    let finish = q.finish("t", &id, None).await.expect_err("refused");
    assert_eq!(finish.outcome(), Outcome::NotApplied, "{finish}");
}

/// Ack and take the next on a failed log is refused before the finish or the pop is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_and_take_the_next_on_a_failed_log_changes_nothing() {
    let dir = scratch();
    let q = open(&dir, 1).await;
    for id in ["held", "next"] {
        q.add(NewTask::new("t", id)).await.unwrap();
    }
    let now = PopOptions::default().timeout_ms(0);
    let held = q.pop("t", now).await.unwrap().pop().expect("ready");
    assert_eq!(held.id, "held");
    block_rotation(&dir, 0);
    add_until_the_disk_fails(&q, "t").await;

    let done = Held {
        topic: "t",
        id: "held",
        receipt: Some(&held.receipt),
    };
    let err = q
        .finish_then_pop(done, "t", now)
        .await
        .expect_err("the log is failed");
    assert_eq!(err.outcome(), Outcome::NotApplied, "{err}");
    assert_eq!(q.get("t", "held").await.unwrap().state, State::Active);
    assert_eq!(q.get("t", "next").await.unwrap().state, State::Ready);
}

/// Ack and take the next across two shards is two steps, each with its own log write: when
/// the write of the pop fails (its shard's log cannot rotate), the finish on the other shard is
/// done and the pop's error is the inner one; within one shard, where both are one write, it
/// would be the outer error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_and_take_the_next_across_shards_finishes_even_when_the_pop_fails() {
    let dir = scratch();
    let q = open(&dir, 2).await;
    let (broken, healthy) = two_shards(&q, &dir).await;
    let now = PopOptions::default().timeout_ms(0);
    // The probes: the broken topic's out of the way, the healthy one's held.
    let probe = q.pop("broken", now).await.unwrap().pop().expect("ready");
    q.finish("broken", &probe.id, Some(&probe.receipt))
        .await
        .unwrap();
    let held = q.pop(&healthy, now).await.unwrap().pop().expect("ready");
    // Handing this one out writes its whole record: more than the segment has left.
    q.add(NewTask::new("broken", "big").body("x".repeat(3_000)))
        .await
        .unwrap();
    block_rotation(&dir, broken);

    let done = Held {
        topic: &healthy,
        id: &held.id,
        receipt: Some(&held.receipt),
    };
    let pop = q
        .finish_then_pop(done, "broken", now)
        .await
        .expect("the finish, on the healthy shard");
    let err = pop.expect_err("the pop, whose write failed");
    assert_eq!(err.kind(), ErrorKind::Storage, "{err}");
    assert_eq!(err.outcome(), Outcome::Unknown, "{err}");
    assert_eq!(
        q.get(&healthy, &held.id).await.unwrap().state,
        State::Finished
    );
    // Now every shard refuses changes, and names the log whose write failed.
    let refused = q
        .add(NewTask::new(&healthy, "after"))
        .await
        .expect_err("refused");
    assert_eq!(refused.outcome(), Outcome::NotApplied, "{refused}");
    let cause = format!("{refused:?}");
    assert!(cause.contains(&format!("shard-{broken}")), "{cause}");
}

/// The sizes of each shard's first segment.
fn segment_sizes(dir: &Path, shards: usize) -> Vec<u64> {
    (0..shards)
        .map(|s| {
            let seg = dir.join(format!("shard-{s}/{:020}.seg", 1));
            std::fs::metadata(seg).map(|m| m.len()).unwrap_or(0)
        })
        .collect()
}

/// The shard `topic` lives in, seen from which log a probe task is written to.
async fn shard_of(q: &Queue, dir: &Path, shards: usize, topic: &str) -> usize {
    let before = segment_sizes(dir, shards);
    q.add(NewTask::new(topic, "probe")).await.unwrap();
    let after = segment_sizes(dir, shards);
    (0..shards)
        .find(|&s| after[s] > before[s])
        .expect("one log grew")
}

/// Of a queue of two shards: the shard of topic `broken`, and a topic on the other one (each
/// with its probe task).
async fn two_shards(q: &Queue, dir: &Path) -> (usize, String) {
    let broken = shard_of(q, dir, 2, "broken").await;
    for n in 0..64 {
        let topic = format!("healthy-{n}");
        if shard_of(q, dir, 2, &topic).await != broken {
            return (broken, topic);
        }
    }
    panic!("no topic on the other shard");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_fails_on_one_shard_reports_each_task() {
    let dir = scratch();
    let q = open(&dir, 2).await;
    let (broken, healthy) = two_shards(&q, &dir).await;
    // Only the broken shard's log cannot rotate; this batch overflows its segment.
    block_rotation(&dir, broken);
    let big = "x".repeat(3_000);
    let results = q
        .add_batch(vec![
            NewTask::new("broken", "b-1").body(big.clone()),
            NewTask::new(&healthy, "h-1"),
            NewTask::new("broken", "b-2").body(big),
        ])
        .await
        .expect("the batch is answered task by task");
    for i in [0, 2] {
        let e = results[i]
            .as_ref()
            .expect_err("the broken shard's write failed");
        assert_eq!(e.kind(), ErrorKind::Storage, "{e}");
        assert_eq!(e.outcome(), Outcome::Unknown, "{e}");
    }
    // The other shard's write is done and durable: the batch was partly applied.
    assert!(results[1].is_ok(), "{:?}", results[1]);
    assert!(q.get(&healthy, "h-1").await.is_ok());
    // The broken shard's tasks are in memory, not on disk: hence "unknown".
    assert!(q.get("broken", "b-1").await.is_ok());
}
