//! A process for the crash tests: opens the embedded storage in a data directory and keeps
//! making changes, printing each one only after it was acknowledged, until it is killed.
//!
//! Usage: `delayq-crash-writer <data-dir> <always|interval|never> <round>`. Output lines:
//! `A <id> <priority>` (added, due in ten minutes), `F <id>` (popped and finished), `B <id>`
//! (popped and buried), `J <n>` (a job id handed out), `M <key>` (a meta value stored).

use std::io::Write;
use std::sync::Arc;

use delayq::storage::embedded::{self, EmbeddedOptions};
use delayq::{BuryOptions, NewTask, PopOptions, Queue, StorageContext, SystemClock};
use delayq_log::FsyncPolicy;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir, policy, round] = args.as_slice() else {
        eprintln!("usage: delayq-crash-writer <data-dir> <always|interval|never> <round>");
        std::process::exit(2);
    };
    let fsync = match policy.as_str() {
        "always" => FsyncPolicy::Always,
        "interval" => FsyncPolicy::default(),
        "never" => FsyncPolicy::Never,
        other => {
            eprintln!("unknown fsync policy {other:?}");
            std::process::exit(2);
        }
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
        let mut out = std::io::stdout().lock();
        for i in 0u64.. {
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
            writeln!(out, "A {id} {priority}")
                .and_then(|_| out.flush())
                .expect("stdout");
            let job = queue.next_job_id().await.expect("job id");
            writeln!(out, "J {job}")
                .and_then(|_| out.flush())
                .expect("stdout");
            if i % 10 == 0 {
                let key = format!("r{round}-k{i}");
                queue
                    .settings()
                    .put("crash", &key, key.as_bytes().to_vec())
                    .await
                    .expect("put meta");
                writeln!(out, "M {key}")
                    .and_then(|_| out.flush())
                    .expect("stdout");
            }
            if i % 2 == 0 {
                let fid = format!("r{round}-f{i}");
                queue
                    .add(NewTask::new("crash.now", fid))
                    .await
                    .expect("add");
                // Finish whatever is ready: possibly a task an earlier, killed round had popped.
                if let Some(d) = queue
                    .pop("crash.now", PopOptions::default())
                    .await
                    .expect("pop")
                    .pop()
                {
                    // Every fourth one is buried instead: it must stay DEAD.
                    let line = if i % 8 == 0 {
                        queue
                            .bury(&d.topic, &d.id, BuryOptions::default().receipt(d.receipt))
                            .await
                            .expect("bury");
                        format!("B {}", d.id)
                    } else {
                        queue
                            .finish(&d.topic, &d.id, Some(&d.receipt))
                            .await
                            .expect("finish");
                        format!("F {}", d.id)
                    };
                    writeln!(out, "{line}")
                        .and_then(|_| out.flush())
                        .expect("stdout");
                }
            }
        }
    });
}
