//! Fault injection against a model, after redb's fuzz target: the log's file operations go
//! through a storage wrapper that fails writes (optionally after writing part of the
//! buffer), fsyncs, file creations or directory syncs on command, and remembers how much of
//! each file was synced. After a run the wrapper simulates a crash of the machine (every
//! file cut to a random length between what was synced and what was written) or of the
//! process (nothing cut), the log is reopened on the real file system, and what it replays is
//! checked against a `Vec` of what was appended:
//!
//! - it is a prefix of what was appended (nothing invented, order kept, no duplicates);
//! - it holds every acknowledged record (under `Always` even after a machine crash);
//! - an injected failure is reported (by a ticket, an append, `sync` or `write_snapshot`),
//!   with the injected OS error, and never swallowed; without one, nothing fails.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;

use crate::error::{ErrorKind, IoOp, LogError, OpenError};
use crate::options::{FsyncPolicy, LogOptions};
use crate::storage::{RealStorage, Storage, WriteFile};
use crate::{Log, Replayed, Ticket};

/// What to break.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    /// Writes succeed until `bytes` more bytes have been written in total; the write that
    /// crosses the budget writes up to it and then fails with `errno`.
    WriteBudget {
        bytes: u64,
        errno: i32,
    },
    /// The `nth` fdatasync of a file (counting from 0) fails with EIO.
    SyncFails {
        nth: u64,
    },
    /// The `nth` file creation fails with `errno`.
    CreateFails {
        nth: u64,
        errno: i32,
    },
    /// The `nth` directory fsync fails with EIO.
    DirSyncFails {
        nth: u64,
    },
}

const ENOSPC: i32 = 28;
const EACCES: i32 = 13;
const EIO: i32 = 5;

#[derive(Debug, Default, Clone, Copy)]
struct FileState {
    written: u64,
    synced: u64,
}

#[derive(Debug)]
struct Plan {
    fault: Fault,
    /// Set when the fault fired, with the errno it injected.
    fired: Option<i32>,
    syncs: u64,
    creates: u64,
    dir_syncs: u64,
    files: HashMap<PathBuf, FileState>,
    /// The name of the thread of every write(2), in order.
    write_threads: Vec<String>,
}

#[derive(Debug, Clone)]
struct FaultyStorage {
    plan: Arc<Mutex<Plan>>,
}

impl FaultyStorage {
    fn new(fault: Fault) -> Self {
        Self {
            plan: Arc::new(Mutex::new(Plan {
                fault,
                fired: None,
                syncs: 0,
                creates: 0,
                dir_syncs: 0,
                files: HashMap::new(),
                write_threads: Vec::new(),
            })),
        }
    }

    fn fired(&self) -> Option<i32> {
        self.plan.lock().unwrap().fired
    }

    /// Stops injecting faults from now on.
    fn heal(&self) {
        self.plan.lock().unwrap().fault = Fault::None;
    }

    /// Cuts every file written through this storage back to a length between what was
    /// synced and what was written, as a machine crash would.
    fn crash_machine(&self, mut pick: impl FnMut(u64, u64) -> u64) {
        let plan = self.plan.lock().unwrap();
        for (path, state) in &plan.files {
            if !path.exists() || state.written == state.synced {
                continue;
            }
            let len = pick(state.synced, state.written);
            OpenOptions::new()
                .write(true)
                .open(path)
                .unwrap()
                .set_len(len)
                .unwrap();
        }
    }

    fn track(&self, path: &Path, file: Box<dyn WriteFile>, len: u64) -> Box<dyn WriteFile> {
        self.plan.lock().unwrap().files.insert(
            path.to_path_buf(),
            FileState {
                written: len,
                synced: len,
            },
        );
        Box::new(FaultyFile {
            inner: file,
            path: path.to_path_buf(),
            plan: self.plan.clone(),
        })
    }

    fn check_create(&self) -> io::Result<()> {
        let mut plan = self.plan.lock().unwrap();
        let n = plan.creates;
        plan.creates += 1;
        if let Fault::CreateFails { nth, errno } = plan.fault
            && n == nth
        {
            plan.fired = Some(errno);
            return Err(io::Error::from_raw_os_error(errno));
        }
        Ok(())
    }
}

impl Storage for FaultyStorage {
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        self.check_create()?;
        let file = RealStorage.create_new(path)?;
        Ok(self.track(path, file, 0))
    }

    fn create_truncate(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        self.check_create()?;
        let file = RealStorage.create_truncate(path)?;
        Ok(self.track(path, file, 0))
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        let file = RealStorage.open_append(path)?;
        let len = std::fs::metadata(path)?.len();
        Ok(self.track(path, file, len))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        {
            let mut plan = self.plan.lock().unwrap();
            let n = plan.dir_syncs;
            plan.dir_syncs += 1;
            if plan.fault == (Fault::DirSyncFails { nth: n }) {
                plan.fired = Some(EIO);
                return Err(io::Error::from_raw_os_error(EIO));
            }
        }
        RealStorage.sync_dir(dir)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        RealStorage.rename(from, to)?;
        let mut plan = self.plan.lock().unwrap();
        if let Some(state) = plan.files.remove(from) {
            plan.files.insert(to.to_path_buf(), state);
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        RealStorage.remove_file(path)?;
        self.plan.lock().unwrap().files.remove(path);
        Ok(())
    }
}

struct FaultyFile {
    inner: Box<dyn WriteFile>,
    path: PathBuf,
    plan: Arc<Mutex<Plan>>,
}

impl WriteFile for FaultyFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut plan = self.plan.lock().unwrap();
        let thread = std::thread::current();
        plan.write_threads
            .push(thread.name().unwrap_or("unnamed").to_string());
        let (allowed, error) = match plan.fault {
            Fault::WriteBudget { bytes, errno } if (buf.len() as u64) > bytes => {
                plan.fault = Fault::WriteBudget { bytes: 0, errno };
                plan.fired = Some(errno);
                (bytes as usize, Some(errno))
            }
            Fault::WriteBudget { bytes, errno } => {
                plan.fault = Fault::WriteBudget {
                    bytes: bytes - buf.len() as u64,
                    errno,
                };
                (buf.len(), None)
            }
            _ => (buf.len(), None),
        };
        self.inner.write_all(&buf[..allowed])?;
        plan.files.entry(self.path.clone()).or_default().written += allowed as u64;
        match error {
            Some(errno) => Err(io::Error::from_raw_os_error(errno)),
            None => Ok(()),
        }
    }

    fn sync_data(&mut self) -> io::Result<()> {
        let mut plan = self.plan.lock().unwrap();
        let n = plan.syncs;
        plan.syncs += 1;
        if plan.fault == (Fault::SyncFails { nth: n }) {
            plan.fired = Some(EIO);
            return Err(io::Error::from_raw_os_error(EIO));
        }
        self.inner.sync_data()?;
        let state = plan.files.entry(self.path.clone()).or_default();
        state.synced = state.written;
        Ok(())
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.inner.truncate(len)?;
        let mut plan = self.plan.lock().unwrap();
        let state = plan.files.entry(self.path.clone()).or_default();
        state.written = len;
        state.synced = state.synced.min(len);
        Ok(())
    }
}

fn options(policy: FsyncPolicy, storage: &FaultyStorage) -> LogOptions {
    LogOptions::default()
        .with_fsync(policy)
        .with_segment_bytes(4096)
        .with_retry_interval(Duration::from_millis(2))
        .with_storage(Arc::new(storage.clone()))
}

/// Reopens `dir` on the real file system and returns everything it replays.
fn replay(dir: &Path) -> Vec<Vec<u8>> {
    let mut all = Vec::new();
    let opened = Log::open(
        dir,
        LogOptions::default().with_segment_bytes(4096),
        |item| {
            match item {
                Replayed::Snapshot(b) | Replayed::Record { bytes: b, .. } => all.push(b.to_vec()),
                Replayed::Begin { .. } => {}
            }
            Ok::<(), std::convert::Infallible>(())
        },
    );
    let (log, _) = opened.unwrap_or_else(|e| panic!("reopen after the fault failed: {e}"));
    log.close().unwrap();
    all
}

fn body(i: usize, len: usize) -> Vec<u8> {
    let mut b = format!("{i}:").into_bytes();
    b.resize(len.max(b.len()), (i % 251) as u8);
    b
}

#[derive(Debug, Clone)]
enum Op {
    Append(usize),
    Batch(usize, usize),
    Wait,
    Sync,
    Snapshot,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0usize..300).prop_map(Op::Append),
        2 => (1usize..30, 0usize..120).prop_map(|(n, len)| Op::Batch(n, len)),
        2 => Just(Op::Wait),
        1 => Just(Op::Sync),
        1 => Just(Op::Snapshot),
    ]
}

fn fault() -> impl Strategy<Value = Fault> {
    let errno = prop_oneof![Just(ENOSPC), Just(EACCES)];
    prop_oneof![
        1 => Just(Fault::None),
        4 => (0u64..6_000, errno.clone()).prop_map(|(bytes, errno)| Fault::WriteBudget { bytes, errno }),
        2 => (0u64..12).prop_map(|nth| Fault::SyncFails { nth }),
        1 => (0u64..4, errno).prop_map(|(nth, errno)| Fault::CreateFails { nth, errno }),
        1 => (0u64..4).prop_map(|nth| Fault::DirSyncFails { nth }),
    ]
}

fn policy() -> impl Strategy<Value = FsyncPolicy> {
    prop_oneof![
        2 => Just(FsyncPolicy::Always),
        1 => Just(FsyncPolicy::Interval(Duration::from_millis(1))),
        1 => Just(FsyncPolicy::Never),
    ]
}

/// Records every error the log reports and checks it is the injected one.
#[derive(Default)]
struct Reported {
    log_failed: Option<LogError>,
    snapshot_failed: bool,
    stalled: bool,
}

impl Reported {
    fn see(&mut self, e: LogError, fired: Option<i32>) {
        let errno = fired.unwrap_or_else(|| panic!("an error without an injected fault: {e}"));
        let failure = e
            .io_failure()
            .unwrap_or_else(|| panic!("not an IO error: {e}"));
        assert_eq!(failure.io_error().raw_os_error(), Some(errno), "{e}");
        // The message says what was done and with which file.
        assert!(
            e.to_string().contains(&*failure.path().to_string_lossy()),
            "{e}"
        );
        match e {
            LogError::Snapshot(_) => self.snapshot_failed = true,
            LogError::Failed(_) => self.log_failed = Some(e),
            LogError::Stalled(ref f) => {
                assert!(f.is_out_of_space(), "{e}");
                assert!(e.is_retryable(), "{e}");
                self.stalled = true;
            }
            other => panic!("unexpected {other}"),
        }
    }
}

fn run_case(policy: FsyncPolicy, fault: Fault, ops: Vec<Op>, crash_machine: bool, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let storage = FaultyStorage::new(fault);
    let opened = Log::open(dir.path(), options(policy, &storage), |_| {
        Ok::<(), std::convert::Infallible>(())
    });
    let log = match opened {
        Ok((log, _)) => log,
        Err(OpenError::Io(failure)) => {
            // Creating the first segment failed: reported at open, nothing to check.
            assert!(
                storage.fired().is_some(),
                "open failed without a fault: {failure}"
            );
            assert_eq!(
                failure.op(),
                match fault {
                    Fault::CreateFails { .. } => IoOp::CreateSegment,
                    Fault::SyncFails { .. } => IoOp::SyncSegment,
                    Fault::DirSyncFails { .. } => IoOp::SyncDir,
                    Fault::WriteBudget { .. } => IoOp::WriteSegment,
                    Fault::None => unreachable!(),
                }
            );
            return;
        }
        Err(e) => panic!("{e}"),
    };

    let mut appended: Vec<Vec<u8>> = Vec::new();
    let mut acked: Vec<u64> = Vec::new();
    let mut pending: Vec<Ticket> = Vec::new();
    let mut reported = Reported::default();
    let wait_all = |pending: &mut Vec<Ticket>, acked: &mut Vec<u64>, reported: &mut Reported| {
        for t in pending.drain(..) {
            let (first, last) = (t.first_seq(), t.last_seq());
            match t.wait_blocking() {
                Ok(seq) => {
                    assert_eq!(seq, last);
                    acked.extend(first..=last);
                }
                Err(e) => reported.see(e, storage.fired()),
            }
        }
    };
    for op in ops {
        match op {
            Op::Append(len) => match log.append(&body(appended.len(), len)) {
                Ok(t) => {
                    assert_eq!(t.last_seq(), appended.len() as u64 + 1);
                    appended.push(body(appended.len(), len));
                    pending.push(t);
                }
                Err(e) => reported.see(e, storage.fired()),
            },
            Op::Batch(n, len) => {
                let records: Vec<Vec<u8>> = (0..n).map(|i| body(appended.len() + i, len)).collect();
                match log.append_batch(&records) {
                    Ok(t) => {
                        assert_eq!(t.first_seq(), appended.len() as u64 + 1);
                        appended.extend(records);
                        pending.push(t);
                    }
                    Err(e) => reported.see(e, storage.fired()),
                }
            }
            Op::Wait => wait_all(&mut pending, &mut acked, &mut reported),
            Op::Sync => {
                if let Err(e) = log.sync() {
                    reported.see(e, storage.fired());
                }
            }
            Op::Snapshot => {
                let covers = log.last_seq();
                if let Err(e) = log.write_snapshot(covers, &appended[..covers as usize]) {
                    reported.see(e, storage.fired());
                }
            }
        }
    }
    wait_all(&mut pending, &mut acked, &mut reported);
    // Force everything through once more: a fault that has fired must be visible.
    if let Err(e) = log.sync() {
        reported.see(e, storage.fired());
    }
    // A log stalled for lack of space resumes by itself once space is freed, and then
    // writes everything it kept: every record appended is acknowledged after all.
    if reported.stalled && reported.log_failed.is_none() {
        // (A fault that fires once, such as a failed creation, may have let it resume already.)
        storage.heal();
        let give_up = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            match log.sync() {
                Ok(()) => break,
                Err(LogError::Stalled(_)) if std::time::Instant::now() < give_up => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("the stalled log did not resume: {e}"),
            }
        }
        assert!(!log.stats().stalled);
        acked.push(log.last_seq());
    }
    let failed = log.stats().failed;
    assert_eq!(failed, reported.log_failed.is_some());
    if let Some(errno) = storage.fired() {
        // A lack of space that passed (a creation refused once) may be retried away before
        // any ticket is looked at: then the log just goes on, and the checks below show
        // that nothing was lost.
        let absorbed = errno == ENOSPC && !failed && !log.stats().stalled;
        assert!(
            failed || reported.snapshot_failed || reported.stalled || absorbed,
            "fault fired (errno {errno}) but nothing reported it"
        );
    }
    if let Some(cause) = &reported.log_failed {
        // A failed log refuses appends with the original cause.
        let again = log.append(b"after the failure").unwrap_err();
        assert_eq!(again.to_string(), cause.to_string());
        assert_eq!(again.kind(), ErrorKind::Io);
        assert!(!again.is_retryable());
    }
    let closed = log.close();
    assert_eq!(closed.is_err(), failed);
    storage.heal();

    let mut rng = seed | 1;
    if crash_machine {
        storage.crash_machine(|synced, written| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            synced + rng % (written - synced + 1)
        });
    }
    let recovered = replay(dir.path());
    assert!(
        recovered.len() <= appended.len(),
        "recovered {} records, only {} were appended",
        recovered.len(),
        appended.len()
    );
    assert_eq!(
        recovered[..],
        appended[..recovered.len()],
        "not a prefix of the appended records"
    );
    if let Some(&last_acked) = acked.iter().max() {
        assert!(
            recovered.len() as u64 >= last_acked,
            "acknowledged seq {last_acked} lost; recovered {}",
            recovered.len()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Process crash after an injected failure, every policy: nothing acknowledged is lost.
    #[test]
    fn faults_then_process_crash(
        policy in policy(),
        fault in fault(),
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        run_case(policy, fault, ops, false, 0);
    }

    /// Machine crash (unsynced bytes cut at random) under `Always`: nothing acknowledged is
    /// lost either.
    #[test]
    fn faults_then_machine_crash_under_always(
        fault in fault(),
        ops in proptest::collection::vec(op(), 1..40),
        seed in any::<u64>(),
    ) {
        run_case(FsyncPolicy::Always, fault, ops, true, seed);
    }
}

fn open_faulty(dir: &Path, policy: FsyncPolicy, fault: Fault) -> (Log, FaultyStorage) {
    let storage = FaultyStorage::new(fault);
    let (log, _) = Log::open(dir, options(policy, &storage), |_| {
        Ok::<(), std::convert::Infallible>(())
    })
    .unwrap();
    (log, storage)
}

/// One of each policy, with a short interval.
fn every_policy() -> [FsyncPolicy; 3] {
    [
        FsyncPolicy::Always,
        FsyncPolicy::Interval(Duration::from_millis(5)),
        FsyncPolicy::Never,
    ]
}

/// Under `Interval` the write happens on the leader's thread (here the waiting test
/// thread), then the failure is the writer thread's: a stall.
#[test]
fn disk_full_stalls_the_log_until_space_returns_then_writes_everything_in_order() {
    for policy in every_policy() {
        disk_full_stalls_then_writes_everything(policy);
    }
}

fn disk_full_stalls_then_writes_everything(policy: FsyncPolicy) {
    let dir = tempfile::tempdir().unwrap();
    let budget = Fault::WriteBudget {
        bytes: 100,
        errno: ENOSPC,
    };
    let (log, storage) = open_faulty(dir.path(), policy, budget);
    let a = log.append(&[1; 60]).unwrap();
    let b = log.append(&[2; 60]).unwrap();
    let err = b.wait_blocking().unwrap_err();
    // Whether `a` made it depends on grouping; if it was in the stalled group it failed too.
    let _ = a.wait_blocking();
    assert!(err.is_disk_full(), "{err}");
    assert_eq!(err.kind(), ErrorKind::OutOfSpace);
    assert!(err.is_retryable());
    let failure = err.io_failure().unwrap();
    assert_eq!(failure.op(), IoOp::WriteSegment);
    assert_eq!(failure.path(), dir.path().join("00000000000000000001.seg"));
    let message = err.to_string();
    assert!(message.contains("writing to segment"), "{message}");
    assert!(message.contains("00000000000000000001.seg"), "{message}");
    assert!(message.contains("No space left on device"), "{message}");

    // Stalled, not failed: the state says so, appends are kept, their tickets fail at once.
    assert_eq!(log.stalled().unwrap().to_string(), message);
    assert!(log.stats().stalled && !log.stats().failed);
    let during = log.append(b"during").unwrap();
    assert_eq!(during.wait_blocking().unwrap_err().to_string(), message);
    assert!(matches!(log.sync(), Err(LogError::Stalled(_))));

    // Space is freed: the writer's next try writes what it kept, then the rest.
    storage.heal();
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    while log.sync().is_err() {
        assert!(std::time::Instant::now() < give_up, "never resumed");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(log.stalled().is_none());
    log.append(b"after").unwrap().wait_blocking().unwrap();
    log.close().unwrap();
    let replayed = replay(dir.path());
    assert_eq!(
        replayed,
        vec![
            vec![1; 60],
            vec![2; 60],
            b"during".to_vec(),
            b"after".to_vec()
        ]
    );
}

/// Who writes: under `Interval` and `Never` the waiter itself (no hand-off to the writer
/// thread and back), under `Always` the writer thread (its fdatasync must not block a waiter).
///
/// Under `Interval` the writer thread also holds the token now and then: when it wakes to
/// arm the fdatasync timer (once per interval here, 1 s) it writes what it finds buffered,
/// so there the waiter writes nearly every record, not all (a full run saw 19 of 20). Under
/// `Never` a full run also saw the thread write one record of 20 (cause not found: it takes
/// whatever it finds buffered when it holds the token), so both ask for most records, which a
/// hand-off to the thread for every write would not give.
#[test]
fn waiters_lead_the_write_except_under_always() {
    let me = std::thread::current()
        .name()
        .unwrap_or("unnamed")
        .to_string();
    for (policy, writer, at_least) in [
        (FsyncPolicy::Always, "delayq-log", 20),
        (
            FsyncPolicy::Interval(Duration::from_secs(1)),
            me.as_str(),
            15,
        ),
        (FsyncPolicy::Never, me.as_str(), 15),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (log, storage) = open_faulty(dir.path(), policy, Fault::None);
        let first = storage.plan.lock().unwrap().write_threads.len();
        for i in 0..20u8 {
            log.append(&[i; 30]).unwrap().wait_blocking().unwrap();
        }
        let threads = storage.plan.lock().unwrap().write_threads[first..].to_vec();
        assert_eq!(
            threads.len(),
            20,
            "{policy:?}: one write a record, {threads:?}"
        );
        let by_writer = threads.iter().filter(|t| *t == writer).count();
        assert!(
            by_writer >= at_least,
            "{policy:?}: {by_writer} of 20 by {writer}: {threads:?}"
        );
        assert!(
            threads.iter().all(|t| t == writer || t == "delayq-log"),
            "{policy:?}: {threads:?}"
        );
        log.close().unwrap();
        assert_eq!(replay(dir.path()).len(), 20);
    }
}

/// A ticket dropped without waiting has no leader: the writer thread writes its records.
#[test]
fn records_of_a_dropped_ticket_are_written_all_the_same() {
    for policy in every_policy() {
        let dir = tempfile::tempdir().unwrap();
        let (log, storage) = open_faulty(dir.path(), policy, Fault::None);
        drop(log.append(b"dropped").unwrap());
        let give_up = std::time::Instant::now() + Duration::from_secs(20);
        while log.stats().written_seq < 1 {
            assert!(
                std::time::Instant::now() < give_up,
                "{policy:?}: never written"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            storage
                .plan
                .lock()
                .unwrap()
                .write_threads
                .last()
                .map(String::as_str),
            Some("delayq-log"),
            "{policy:?}"
        );
        // A wait dropped before it resolved does the same (here: dropped unpolled).
        drop(log.append(b"wait dropped").unwrap().wait());
        while log.stats().written_seq < 2 {
            assert!(
                std::time::Instant::now() < give_up,
                "{policy:?}: never written"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(log);
        assert_eq!(
            replay(dir.path()),
            vec![b"dropped".to_vec(), b"wait dropped".to_vec()]
        );
    }
}

#[test]
fn a_disk_that_stays_full_fails_the_log_at_close() {
    let dir = tempfile::tempdir().unwrap();
    let (log, storage) = open_faulty(dir.path(), FsyncPolicy::Always, Fault::None);
    storage.plan.lock().unwrap().fault = Fault::WriteBudget {
        bytes: 0,
        errno: ENOSPC,
    };
    let err = log.append(b"x").unwrap().wait_blocking().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutOfSpace);
    let closed = log.close().unwrap_err();
    assert_eq!(closed.kind(), ErrorKind::Io, "{closed}");
    assert!(closed.is_disk_full(), "{closed}");
    // Nothing of the record reached the segment: it reopens empty and intact.
    assert!(replay(dir.path()).is_empty());
}

#[test]
fn permission_denied_on_a_new_segment_is_reported_with_the_file() {
    let dir = tempfile::tempdir().unwrap();
    // Creation 0 is the first segment at open; creation 1 is the first rotation.
    let fault = Fault::CreateFails {
        nth: 1,
        errno: EACCES,
    };
    let (log, _storage) = open_faulty(
        dir.path(),
        FsyncPolicy::Interval(Duration::from_millis(5)),
        fault,
    );
    let records: Vec<Vec<u8>> = (0..100).map(|i| body(i, 100)).collect();
    let err = log
        .append_batch(&records)
        .unwrap()
        .wait_blocking()
        .unwrap_err();
    assert!(err.is_permission_denied(), "{err}");
    let failure = err.io_failure().unwrap();
    assert_eq!(failure.op(), IoOp::CreateSegment);
    assert!(err.to_string().contains("creating segment"), "{err}");
    assert!(err.to_string().contains("Permission denied"), "{err}");
    assert!(log.append(b"x").is_err());
}

#[test]
fn a_failed_fdatasync_fails_the_tickets_it_covered() {
    let dir = tempfile::tempdir().unwrap();
    // Sync 0 is the first segment's header at open.
    let (log, _storage) = open_faulty(dir.path(), FsyncPolicy::Always, Fault::SyncFails { nth: 1 });
    let err = log.append(b"x").unwrap().wait_blocking().unwrap_err();
    assert_eq!(err.io_failure().unwrap().op(), IoOp::SyncSegment);
    assert!(
        err.to_string().contains("syncing (fdatasync) segment"),
        "{err}"
    );
    assert_eq!(log.stats().durable_seq, 0);
}

#[test]
fn a_failed_snapshot_leaves_the_log_working() {
    let dir = tempfile::tempdir().unwrap();
    let (log, storage) = open_faulty(dir.path(), FsyncPolicy::Always, Fault::None);
    let mut last = None;
    for i in 0..10 {
        last = Some(log.append(&body(i, 10)).unwrap());
    }
    // The records are on disk before the disk fills, so only the snapshot meets the fault
    // (under load the writer could otherwise still be writing them and fail the log).
    last.unwrap().wait_blocking().unwrap();
    storage.plan.lock().unwrap().fault = Fault::WriteBudget {
        bytes: 0,
        errno: ENOSPC,
    };
    let err = log.write_snapshot(10, [b"state"]).unwrap_err();
    assert!(matches!(err, LogError::Snapshot(_)), "{err}");
    assert!(err.is_retryable() && err.is_disk_full());
    assert_eq!(err.io_failure().unwrap().op(), IoOp::WriteSnapshot);
    assert!(err.to_string().contains(".snap.tmp"), "{err}");
    // Space is freed; the log never noticed.
    storage.heal();
    log.append(b"more").unwrap().wait_blocking().unwrap();
    log.write_snapshot(11, [b"state"]).unwrap();
    assert!(!log.stats().failed);
    let temps = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .to_string_lossy()
                .ends_with(".tmp")
        })
        .count();
    assert_eq!(temps, 0);
}
