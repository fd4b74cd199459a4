//! A process for the crash tests: opens the embedded storage in a data directory and keeps
//! making changes, printing each one only after it was acknowledged, until it is killed.
//!
//! Usage: `delayq-crash-writer <data-dir> <always|interval|never> <round>`. Output lines:
//! `A <id>` (added, due in ten minutes), `F <id>` (popped and finished).

use std::io::Write;
use std::sync::Arc;

use delayq::storage::embedded::{self, EmbeddedOptions};
use delayq::{NewTask, PopOptions, Queue, StorageContext, SystemClock};
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
            queue
                .add(NewTask::new("crash", id.clone()).delay_ms(600_000))
                .await
                .expect("add");
            writeln!(out, "A {id}")
                .and_then(|_| out.flush())
                .expect("stdout");
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
                    queue
                        .finish(&d.topic, &d.id, Some(&d.receipt))
                        .await
                        .expect("finish");
                    writeln!(out, "F {}", d.id)
                        .and_then(|_| out.flush())
                        .expect("stdout");
                }
            }
        }
    });
}
