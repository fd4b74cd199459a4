//! The crash writer: a process that appends numbered records to a log from several threads
//! until it is killed, and prints every acknowledged record (`tests/log_crash.rs`,
//! `tests/log_lock.rs`).
//!
//! It is the test binary itself, started again by [`spawn`] to run only its
//! `crash_writer_child` test with [`CHILD_ENV`] set, so the library ships no test fixture as a
//! binary of its own.
//!
//! Output, one line each, flushed as written (after the test harness's own header lines,
//! which [`lines`] skips):
//! - `open <last_seq>` once the log is open;
//! - `ack <seq> <payload>` for every acknowledged record, payload `r<round>-t<thread>-<n>`.
//!
//! The writer's state is the list of all records; a snapshot thread writes it every few
//! milliseconds, so kills also land in the middle of snapshots and segment removals.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use delayq_log::{FsyncPolicy, Log, LogOptions, Replayed};

/// The variable that makes `crash_writer_child` act as the writer: `<dir> <always|interval|never>
/// <threads> <round>`.
pub const CHILD_ENV: &str = "DELAYQ_LOG_CRASH_WRITER";

/// Starts the writer on `dir` with stdout piped, stderr inherited.
pub fn spawn(dir: &Path, policy: &str, threads: usize, round: u32) -> Child {
    let dir = dir.to_str().expect("a UTF-8 temporary directory");
    Command::new(std::env::current_exe().expect("the test binary's path"))
        .args([
            "--exact",
            "crash_writer_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, format!("{dir} {policy} {threads} {round}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the crash writer")
}

/// The writer's output lines from its `open` line on (the test harness prints a header
/// first).
pub fn lines(stdout: ChildStdout) -> impl Iterator<Item = String> {
    BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .skip_while(|line| !line.starts_with("open "))
}

/// Runs the writer when this process was started by [`spawn`], and never returns then.
pub fn run_if_child() {
    let Ok(args) = std::env::var(CHILD_ENV) else {
        return;
    };
    // Ends the harness's `test crash_writer_child ... ` line, so `open` starts a line.
    say("");
    let args: Vec<&str> = args.split(' ').collect();
    let &[dir, policy, threads, round] = &args[..] else {
        eprintln!("{CHILD_ENV}: <dir> <always|interval|never> <threads> <round>, got {args:?}");
        std::process::exit(2);
    };
    let fsync = match policy {
        "always" => FsyncPolicy::Always,
        "interval" => FsyncPolicy::Interval(Duration::from_millis(10)),
        "never" => FsyncPolicy::Never,
        other => {
            eprintln!("unknown policy {other}");
            std::process::exit(2);
        }
    };
    let threads: usize = threads.parse().expect("threads is a number");
    let options = LogOptions::default()
        .with_fsync(fsync)
        .with_segment_bytes(16 << 10);
    let mut state: Vec<Vec<u8>> = Vec::new();
    let opened = Log::open(dir, options, |item| {
        match item {
            Replayed::Snapshot(bytes) | Replayed::Record { bytes, .. } => {
                state.push(bytes.to_vec())
            }
            Replayed::Begin { .. } => {}
        }
        Ok::<(), std::convert::Infallible>(())
    });
    let log = match opened {
        Ok((log, _report)) => Arc::new(log),
        Err(e) => {
            eprintln!("open failed: {e}");
            std::process::exit(1);
        }
    };
    say(&format!("open {}", log.last_seq()));
    let state = Arc::new(Mutex::new(state));
    let snapshotter = {
        let (log, state) = (log.clone(), state.clone());
        thread::spawn(move || snapshot_forever(&log, &state))
    };
    let writers: Vec<_> = (0..threads)
        .map(|t| {
            let (log, state) = (log.clone(), state.clone());
            let prefix = format!("r{round}-t{t}");
            thread::spawn(move || append_forever(&log, &state, &prefix))
        })
        .collect();
    for w in writers {
        let _ = w.join();
    }
    let _ = snapshotter.join();
    std::process::exit(0);
}

/// Writes the whole state as a snapshot every 20 ms.
fn snapshot_forever(log: &Log, state: &Mutex<Vec<Vec<u8>>>) {
    loop {
        thread::sleep(Duration::from_millis(20));
        let (covers, records) = {
            let state = state.lock().expect("state lock");
            (log.last_seq(), state.clone())
        };
        assert_eq!(covers, records.len() as u64, "state and log agree");
        if let Err(e) = log.write_snapshot(covers, &records) {
            eprintln!("snapshot failed: {e}");
            std::process::exit(3);
        }
    }
}

/// Appends `<prefix>-0`, `<prefix>-1`, ... and reports each acknowledged one.
fn append_forever(log: &Log, state: &Mutex<Vec<Vec<u8>>>, prefix: &str) {
    for n in 0u64.. {
        let payload = format!("{prefix}-{n}");
        let ticket = {
            let mut state = state.lock().expect("state lock");
            let ticket = log.append(payload.as_bytes()).expect("append");
            state.push(payload.clone().into_bytes());
            ticket
        };
        match ticket.wait_blocking() {
            Ok(seq) => say(&format!("ack {seq} {payload}")),
            Err(e) => {
                eprintln!("append failed: {e}");
                std::process::exit(4);
            }
        }
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
