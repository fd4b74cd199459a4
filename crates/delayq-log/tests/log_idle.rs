//! An idle log costs nothing: its writer thread sleeps until there is work, it does not
//! tick. Alone in its own test binary so that only one writer thread exists in the process.

mod support;

#[cfg(target_os = "linux")]
use std::fs;
use std::time::Duration;

use delayq_log::{FsyncPolicy, Log, LogOptions, Ticket, Wait};
use support::open;

/// Context switches of the thread named `delayq-log` (Linux only).
#[cfg(target_os = "linux")]
fn writer_switches() -> Option<u64> {
    for task in fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path();
        let name = fs::read_to_string(path.join("comm")).ok()?;
        if name.trim() != "delayq-log" {
            continue;
        }
        let status = fs::read_to_string(path.join("status")).ok()?;
        let count = |key: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        return Some(count("voluntary_ctxt_switches:") + count("nonvoluntary_ctxt_switches:"));
    }
    None
}

#[cfg(target_os = "linux")]
#[test]
fn an_idle_log_does_not_wake_up() {
    let dir = tempfile::tempdir().unwrap();
    let interval = Duration::from_millis(5);
    let options = LogOptions::default().with_fsync(FsyncPolicy::Interval(interval));
    let (log, _, _) = open(dir.path(), options).unwrap();
    log.append(b"one").unwrap().wait_blocking().unwrap();
    // Let the interval fsync happen, then watch the writer for a while.
    while log.stats().durable_seq < 1 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let before = writer_switches().expect("the writer thread is visible in /proc");
    std::thread::sleep(Duration::from_millis(300));
    let after = writer_switches().unwrap();
    assert!(
        after - before <= 1,
        "idle writer woke up {} times",
        after - before
    );
    // The probe does see the writer work: the waiter writes "two" itself (it leads the
    // group), the writer thread wakes for the interval's fdatasync.
    log.append(b"two").unwrap().wait_blocking().unwrap();
    while log.stats().durable_seq < 2 {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(writer_switches().unwrap() > after);
}

#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Log>();
    send_sync::<Ticket>();
    send::<Wait>();
}
