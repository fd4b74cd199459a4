//! Shared helpers of the integration tests: open a log and collect what it replays.

#![allow(dead_code)]

pub mod crash_writer;

use std::convert::Infallible;
use std::path::Path;

use delayq_log::{Log, LogOptions, OpenError, RecoveryReport, Replayed};

/// Everything a log replayed on open.
#[derive(Debug, Default)]
pub struct Replay {
    /// Snapshot records, in order.
    pub snapshot: Vec<Vec<u8>>,
    /// Log records after the snapshot, with their sequence numbers.
    pub records: Vec<(u64, Vec<u8>)>,
}

impl Replay {
    /// The snapshot records followed by the log records' bytes.
    pub fn all(&self) -> Vec<Vec<u8>> {
        let mut all = self.snapshot.clone();
        all.extend(self.records.iter().map(|(_, r)| r.clone()));
        all
    }
}

/// Opens the log in `dir`, collecting the replay.
pub fn open(
    dir: &Path,
    options: LogOptions,
) -> Result<(Log, RecoveryReport, Replay), OpenError<Infallible>> {
    let mut replay = Replay::default();
    let mut begin = None;
    let (log, report) = Log::open(dir, options, |item| {
        match item {
            Replayed::Begin {
                snapshot_records,
                log_bytes,
            } => {
                assert!(
                    begin.is_none() && replay.all().is_empty(),
                    "Begin came first and once"
                );
                begin = Some((snapshot_records, log_bytes));
            }
            Replayed::Snapshot(bytes) => replay.snapshot.push(bytes.to_vec()),
            Replayed::Record { seq, bytes } => replay.records.push((seq, bytes.to_vec())),
        }
        Ok(())
    })?;
    // The hint tells the snapshot's size exactly, and the log's bytes at least as many as
    // its records hold.
    let (snapshot_records, log_bytes) = begin.expect("Begin was replayed");
    assert_eq!(snapshot_records, replay.snapshot.len() as u64);
    let record_bytes: usize = replay.records.iter().map(|(_, r)| r.len()).sum();
    assert!(
        log_bytes >= record_bytes as u64,
        "{log_bytes} < {record_bytes}"
    );
    Ok((log, report, replay))
}

/// Options with small segments, for tests that want rotation.
pub fn small_segments() -> LogOptions {
    LogOptions::default().with_segment_bytes(4096)
}

/// A record body of `len` bytes derived from `i`.
pub fn record(i: u64, len: usize) -> Vec<u8> {
    let mut body = format!("record-{i}-").into_bytes();
    body.resize(len.max(body.len()), b'a' + (i % 26) as u8);
    body
}
