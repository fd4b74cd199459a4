//! SIGKILL, for real: a writer process makes acknowledged changes until it is killed at a
//! random moment; the data directory is then recovered and every acknowledged change must be
//! there. Under every fsync policy a *process* crash loses nothing acknowledged (the log
//! acknowledges after write(2) at the earliest), so the check is strict for all of them.
//! Acknowledged means: adds with their priorities, finishes, buries, meta values, and job ids
//! (the counter never hands out an id again after recovery).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq::storage::embedded::{self, EmbeddedOptions};
use delayq::{Queue, State, StorageContext, SystemClock};

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
        let mut child = Command::new(env!("CARGO_BIN_EXE_delayq-crash-writer"))
            .args([dir.to_str().unwrap(), policy, &round.to_string()])
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
