//! SIGKILL, for real: a writer process makes acknowledged changes until it is killed at a
//! random moment; the data directory is then recovered and every acknowledged change must be
//! there. Under every fsync policy a *process* crash loses nothing acknowledged (the log
//! acknowledges after write(2) at the earliest), so the check is strict for all of them.
//! Acknowledged means: adds with their priorities, finishes, buries, meta values, and job ids
//! (the counter never hands out an id again after recovery).
//!
//! The writer is this test binary itself, run again with only [`crash_writer_child`] selected
//! and [`WRITER_ENV`] set, so the library crate ships no binary for it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq::storage::embedded::{self, EmbeddedOptions};
use delayq::{BuryOptions, NewTask, PopOptions, Queue, State, StorageContext, SystemClock};
use delayq_log::FsyncPolicy;

/// Set in the writer process: `<data dir>\t<always|interval|never>\t<round>`.
const WRITER_ENV: &str = "DELAYQ_CRASH_WRITER";

const ROUNDS: u32 = 6;

/// A pseudo-random kill delay in 50..450 ms, different every round and run.
fn kill_after(round: u32) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    Duration::from_millis(
        50 + u64::from(nanos.wrapping_mul(2_654_435_761).wrapping_add(round * 7919) % 400),
    )
}

fn run_policy(policy: &str) {
    let dir = tempfile::Builder::new()
        .prefix("crash-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
        .keep();
    let mut seen = Seen::default();
    for round in 0..ROUNDS {
        let exe = std::env::current_exe().expect("the test binary");
        let mut child = Command::new(exe)
            .args([
                "--exact",
                "crash_writer_child",
                "--quiet",
                "--test-threads",
                "1",
            ])
            .env(
                WRITER_ENV,
                format!("{}\t{policy}\t{round}", dir.to_str().unwrap()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("writer starts");
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<String>>()
        });
        // Wait for the first acknowledgement, then kill at a random moment.
        let started = Instant::now();
        std::thread::sleep(kill_after(round));
        child.kill().expect("SIGKILL");
        let status = child.wait().unwrap();
        assert!(!status.success(), "the writer was killed");
        let lines = reader.join().unwrap();
        assert!(
            !lines.is_empty() || started.elapsed() < Duration::from_secs(1),
            "round {round} acknowledged nothing"
        );
        for line in lines {
            // A line cut by the kill was never fully reported: only whole lines count, and a
            // line is whole when it parses.
            let words: Vec<&str> = line.split(' ').collect();
            match words.as_slice() {
                ["A", id, priority] => {
                    if let Ok(p) = priority.parse::<u32>() {
                        seen.added.insert((*id).to_owned(), p);
                    }
                }
                ["F", id] => {
                    seen.finished.insert((*id).to_owned());
                }
                ["B", id] => {
                    seen.buried.insert((*id).to_owned());
                }
                ["J", n] => {
                    if let Ok(n) = n.parse::<u64>() {
                        assert!(
                            seen.job_ids.insert(n),
                            "round {round}: job id {n} handed out twice"
                        );
                    }
                }
                ["M", key] => {
                    seen.meta.insert((*key).to_owned());
                }
                _ => {}
            }
        }
        check(&dir, &seen, round);
    }
    assert!(
        seen.added.len() > 10,
        "the writer got some work done ({} adds)",
        seen.added.len()
    );
}

/// What the writers acknowledged so far.
#[derive(Default)]
struct Seen {
    added: BTreeMap<String, u32>,
    finished: BTreeSet<String>,
    buried: BTreeSet<String>,
    job_ids: BTreeSet<u64>,
    meta: BTreeSet<String>,
}

fn check(dir: &std::path::Path, seen: &Seen, round: u32) {
    let (added, finished) = (&seen.added, &seen.finished);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let ctx = StorageContext::new(Arc::new(SystemClock::new()));
        let (storage, _) = embedded::start(ctx.clone(), EmbeddedOptions::new(dir))
            .await
            .expect("recovery after SIGKILL");
        let queue = Queue::new(storage, ctx);
        for (id, &priority) in added {
            let t = queue
                .get("crash", id)
                .await
                .unwrap_or_else(|e| panic!("round {round}: acknowledged add {id} lost: {e}"));
            assert_eq!(
                t.state,
                State::Delayed,
                "round {round}: {id} is due in ten minutes, never early"
            );
            assert_eq!(t.priority, priority, "round {round}: {id}'s priority");
        }
        for id in &seen.buried {
            let t = queue
                .get("crash.now", id)
                .await
                .unwrap_or_else(|e| panic!("round {round}: buried {id} lost: {e}"));
            assert_eq!(t.state, State::Dead, "round {round}: bury of {id} lost");
        }
        let meta: BTreeSet<String> = queue
            .settings()
            .list("crash")
            .await
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert!(
            meta.is_superset(&seen.meta),
            "round {round}: acknowledged meta values lost"
        );
        if let Some(&last) = seen.job_ids.last() {
            let next = queue.next_job_id().await.unwrap();
            assert!(next > last, "round {round}: job id {next} after {last}");
        }
        for id in finished {
            let t = queue
                .get("crash.now", id)
                .await
                .unwrap_or_else(|e| panic!("round {round}: finished {id} lost: {e}"));
            assert_eq!(
                t.state,
                State::Finished,
                "round {round}: acknowledged finish of {id} lost"
            );
        }
        let delayed = queue.stats("crash").await.unwrap().delayed;
        assert!(
            delayed as usize >= added.len(),
            "round {round}: no add lost"
        );
        queue.shutdown().await.unwrap();
    });
}

#[test]
fn sigkill_loses_nothing_acknowledged_with_fsync_always() {
    run_policy("always");
}

#[test]
fn sigkill_loses_nothing_acknowledged_with_fsync_interval() {
    run_policy("interval");
}

/// The writer process: when [`WRITER_ENV`] is set (by [`run_policy`]), opens the embedded
/// storage in the directory it names and keeps making changes, printing each one only after
/// it was acknowledged, until it is killed. Run as an ordinary test, it does nothing.
///
/// Output lines: `A <id> <priority>` (added, due in ten minutes), `F <id>` (popped and
/// finished), `B <id>` (popped and buried), `J <n>` (a job id handed out), `M <key>` (a meta
/// value stored). The lines go straight to the process's stdout (not through the test
/// harness's capture); the harness's own lines do not parse as any of these.
#[test]
fn crash_writer_child() {
    let Ok(args) = std::env::var(WRITER_ENV) else {
        return;
    };
    let [dir, policy, round] = args.split('\t').collect::<Vec<_>>()[..] else {
        panic!("{WRITER_ENV} is {args:?}");
    };
    let fsync = match policy {
        "always" => FsyncPolicy::Always,
        "interval" => FsyncPolicy::default(),
        "never" => FsyncPolicy::Never,
        other => panic!("unknown fsync policy {other:?}"),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let ctx = StorageContext::new(Arc::new(SystemClock::new()));
        let (storage, _) = embedded::start(
            ctx.clone(),
            EmbeddedOptions::new(dir)
                .fsync(fsync)
                .shards(2)
                .snapshot_min_bytes(64 << 10),
        )
        .await
        .expect("embedded storage starts");
        let queue = Queue::new(storage, ctx);
        for i in 0u64.. {
            write_round(&queue, round, i).await;
        }
    });
}

/// Writes one acknowledged line to stdout.
fn ack(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|_| out.flush())
        .expect("stdout");
}

/// Step `i` of the writer: an add and a job id, every tenth step a meta value, every second
/// one a task popped and finished (every eighth buried).
async fn write_round(queue: &Queue, round: &str, i: u64) {
    let id = format!("r{round}-{i}");
    // A task due in ten minutes: after any restart within the test it must still be DELAYED.
    let priority = (i % 5) as u32;
    queue
        .add(
            NewTask::new("crash", id.clone())
                .delay_ms(600_000)
                .priority(priority),
        )
        .await
        .expect("add");
    ack(&format!("A {id} {priority}"));
    let job = queue.next_job_id().await.expect("job id");
    ack(&format!("J {job}"));
    if i.is_multiple_of(10) {
        let key = format!("r{round}-k{i}");
        queue
            .settings()
            .put("crash", &key, key.as_bytes().to_vec())
            .await
            .expect("put meta");
        ack(&format!("M {key}"));
    }
    if !i.is_multiple_of(2) {
        return;
    }
    let fid = format!("r{round}-f{i}");
    queue
        .add(NewTask::new("crash.now", fid))
        .await
        .expect("add");
    // Finish whatever is ready: possibly a task an earlier, killed round had popped.
    let Some(d) = queue
        .pop("crash.now", PopOptions::default())
        .await
        .expect("pop")
        .pop()
    else {
        return;
    };
    // Every fourth one is buried instead: it must stay DEAD.
    if i.is_multiple_of(8) {
        queue
            .bury(&d.topic, &d.id, BuryOptions::default().receipt(d.receipt))
            .await
            .expect("bury");
        ack(&format!("B {}", d.id));
    } else {
        queue
            .finish(&d.topic, &d.id, Some(&d.receipt))
            .await
            .expect("finish");
        ack(&format!("F {}", d.id));
    }
}
