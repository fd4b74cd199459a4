//! The write path: appenders fill a shared buffer, one writer thread drains it.
//!
//! # Appending
//!
//! [`Shared::append`] takes the state mutex, encodes the records into the buffer (frames,
//! plus a segment header where a new segment must start), assigns the next sequence numbers
//! and returns a [`Ticket`]. It does no IO. The only way it can block is back-pressure: when
//! more than `max_buffered_bytes` are waiting for the writer, it waits until the writer has
//! taken the buffer (one write(2) plus, under `Always`, one fdatasync).
//!
//! # Group commit
//!
//! The writer thread sleeps on a condition variable while there is nothing to do (no timer:
//! an idle log costs no CPU). When woken it swaps the whole buffer out under the mutex, so
//! appenders keep going while it writes everything in one write(2) per segment, then, per
//! policy, one fdatasync for the whole group. Then it publishes the new acknowledged sequence
//! number and wakes the tickets it covers. The more appenders arrive during one fdatasync,
//! the bigger the next group: throughput under `Always` grows with concurrency.
//!
//! # Rotation
//!
//! The appender decides where a segment ends (it knows the sizes) and records the buffer
//! offset and first sequence number of the next segment. At that offset the writer
//! fdatasyncs the old segment (under every policy, so only the newest segment can ever have
//! a torn tail), creates the new file, fsyncs the directory, and carries on.
//!
//! # Failure
//!
//! A write refused for lack of space (`ENOSPC`, `EDQUOT`, `EFBIG`) **stalls** the log instead
//! of failing it: the writer cuts the segment back to the length it had before the write (so
//! no partial frame stays on disk), keeps the group in memory, fails every ticket issued so
//! far, and every ticket issued while it stays stalled, with [`LogError::Stalled`] (their
//! records are not lost yet, but nothing promises they will be written), and tries the same
//! write again every `retry_interval`. When a try succeeds the log carries on as if nothing
//! happened: the kept records, then the ones appended during the stall, are written in order.
//! A caller that must not add to the backlog asks [`Log::stalled`](crate::Log::stalled) before
//! it changes anything. Closing a stalled log tries once more and then fails it.
//!
//! Any other IO error is final: fsync errors cannot be retried safely (the kernel may have
//! dropped the dirty pages). The writer stores the cause, fails every pending ticket with it,
//! and exits. Later appends fail at once.

use std::mem;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::error::{IoContext, IoFailure, IoOp, LogError};
use crate::frame::{self, kind};
use crate::layout::{self, header};
use crate::options::{FsyncPolicy, LogOptions};
use crate::snapshot::SnapshotMeta;
use crate::storage::{Storage, WriteFile};
use crate::ticket::{Ticket, Waiters};

/// A segment of the running log.
#[derive(Debug, Clone)]
pub(crate) struct SegmentMeta {
    /// Sequence number of its first record.
    pub(crate) first_seq: u64,
    /// Its file.
    pub(crate) path: PathBuf,
    /// Bytes written to it so far.
    pub(crate) bytes: u64,
}

/// The files of the running log, for statistics and snapshot clean-up.
#[derive(Debug, Default)]
pub(crate) struct Files {
    /// Segments in order; the last one is the one being written.
    pub(crate) segments: Vec<SegmentMeta>,
    /// The newest snapshot.
    pub(crate) snapshot: Option<SnapshotMeta>,
}

/// Where a new segment starts inside the buffer.
#[derive(Debug, Clone, Copy)]
struct Rotation {
    /// Offset in the buffer of the new segment's header frame.
    at: usize,
    /// Sequence number of the new segment's first record.
    first_seq: u64,
}

/// Everything appenders and the writer share under one mutex.
#[derive(Debug)]
struct State {
    /// Encoded frames not yet taken by the writer.
    buf: Vec<u8>,
    /// Segment starts inside `buf`.
    rotations: Vec<Rotation>,
    /// The sequence number the next record gets.
    next_seq: u64,
    /// Size the newest segment will have once `buf` is written.
    segment_len: u64,
    /// The writer is waiting on `writer_cv` and must be notified.
    writer_idle: bool,
    /// Appenders waiting on `space_cv`.
    blocked_appenders: usize,
    /// `sync()` wants everything up to this seq fdatasynced.
    sync_wanted: u64,
    /// Callers waiting on `synced_cv`.
    sync_waiters: usize,
    /// `close()` asked the writer to flush and stop.
    closing: bool,
    /// The writer thread has exited.
    stopped: bool,
}

/// The part of a log shared by its handle, its tickets and its writer thread.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) dir: PathBuf,
    pub(crate) policy: FsyncPolicy,
    pub(crate) storage: Arc<dyn Storage>,
    max_record_bytes: usize,
    segment_bytes: u64,
    max_buffered_bytes: usize,
    retry_interval: Duration,
    state: Mutex<State>,
    writer_cv: Condvar,
    space_cv: Condvar,
    synced_cv: Condvar,
    /// Last sequence number assigned.
    last_seq: AtomicU64,
    /// Last sequence number handed to write(2).
    written: AtomicU64,
    /// Last sequence number covered by an fdatasync.
    durable: AtomicU64,
    /// Last sequence number whose ticket completes successfully.
    pub(crate) acked: AtomicU64,
    /// Why the log stopped, once it has.
    pub(crate) failure: OnceLock<LogError>,
    /// Whether the writer is waiting for space to write the records it holds. Changed only
    /// under the state mutex, so an append sees it set or is covered by `unknown_upto`.
    stalled: AtomicBool,
    /// The newest cause of a stall (kept after it ends, for the tickets it failed).
    stall_cause: Mutex<Option<Arc<IoFailure>>>,
    /// Tickets up to this sequence number fail with [`LogError::Stalled`] unless acknowledged.
    unknown_upto: AtomicU64,
    pub(crate) waiters: Mutex<Waiters>,
    pub(crate) files: Mutex<Files>,
}

/// Locks a mutex, ignoring poisoning: every critical section leaves the state consistent
/// before anything that can panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The segment the writer appends to.
pub(crate) struct Active {
    pub(crate) file: Box<dyn WriteFile>,
    pub(crate) path: PathBuf,
    /// Its length: what was written to it successfully.
    pub(crate) len: u64,
}

impl Shared {
    /// Creates the shared state of a log whose next record is `next_seq` and whose newest
    /// segment holds `segment_len` bytes.
    pub(crate) fn new(
        dir: &Path,
        options: &LogOptions,
        next_seq: u64,
        segment_len: u64,
        files: Files,
    ) -> Self {
        let last = next_seq - 1;
        Self {
            dir: dir.to_path_buf(),
            policy: options.fsync,
            storage: options.storage.clone(),
            max_record_bytes: options.max_record_bytes,
            segment_bytes: options.segment_bytes,
            max_buffered_bytes: options.max_buffered_bytes,
            retry_interval: options.retry_interval,
            state: Mutex::new(State {
                buf: Vec::new(),
                rotations: Vec::new(),
                next_seq,
                segment_len,
                writer_idle: false,
                blocked_appenders: 0,
                sync_wanted: 0,
                sync_waiters: 0,
                closing: false,
                stopped: false,
            }),
            writer_cv: Condvar::new(),
            space_cv: Condvar::new(),
            synced_cv: Condvar::new(),
            last_seq: AtomicU64::new(last),
            written: AtomicU64::new(last),
            durable: AtomicU64::new(last),
            acked: AtomicU64::new(last),
            failure: OnceLock::new(),
            stalled: AtomicBool::new(false),
            stall_cause: Mutex::new(None),
            unknown_upto: AtomicU64::new(0),
            waiters: Mutex::new(Waiters::default()),
            files: Mutex::new(files),
        }
    }

    /// The last sequence number assigned.
    pub(crate) fn last_seq(&self) -> u64 {
        self.last_seq.load(Ordering::Acquire)
    }

    /// The last sequence number written with write(2).
    pub(crate) fn written_seq(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    /// The last sequence number covered by an fdatasync.
    pub(crate) fn durable_seq(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// The error of a stall: the current one's cause, or the last one's.
    pub(crate) fn stall_error(&self) -> Option<LogError> {
        lock(&self.stall_cause).clone().map(LogError::Stalled)
    }

    /// The stall under way, if the writer is waiting for space.
    pub(crate) fn stalled(&self) -> Option<LogError> {
        if self.stalled.load(Ordering::Acquire) {
            self.stall_error()
        } else {
            None
        }
    }

    /// Whether a ticket ending at `seq` was failed by a stall.
    pub(crate) fn failed_by_stall(&self, seq: u64) -> bool {
        seq <= self.unknown_upto.load(Ordering::Acquire)
    }

    fn check_failed(&self) -> Result<(), LogError> {
        match self.failure.get() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Encodes `records` into the buffer, assigning consecutive sequence numbers.
    ///
    /// Either all records are accepted or none is.
    pub(crate) fn append<R: AsRef<[u8]>>(
        self: &Arc<Self>,
        records: impl IntoIterator<Item = R>,
    ) -> Result<Ticket, LogError> {
        let mut st = lock(&self.state);
        self.check_failed()?;
        // A stalled writer takes nothing until space returns: only the appends that passed
        // `stalled()` just before the stall get here, and they must not wait for it.
        while st.buf.len() >= self.max_buffered_bytes
            && !st.stopped
            && !self.stalled.load(Ordering::Acquire)
        {
            st.blocked_appenders += 1;
            st = self
                .space_cv
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
            st.blocked_appenders -= 1;
            self.check_failed()?;
        }
        if st.stopped {
            self.check_failed()?;
            return Err(LogError::WriterStopped);
        }
        let saved = (
            st.buf.len(),
            st.rotations.len(),
            st.next_seq,
            st.segment_len,
        );
        let first = st.next_seq;
        for record in records {
            let record = record.as_ref();
            if record.len() > self.max_record_bytes {
                st.buf.truncate(saved.0);
                st.rotations.truncate(saved.1);
                st.next_seq = saved.2;
                st.segment_len = saved.3;
                return Err(LogError::RecordTooLarge {
                    len: record.len(),
                    max: self.max_record_bytes,
                });
            }
            let len = frame::frame_len(record.len()) as u64;
            let has_records = st.segment_len > header::HEADER_FRAME_LEN as u64;
            if has_records && st.segment_len + len > self.segment_bytes {
                let at = st.buf.len();
                let first_seq = st.next_seq;
                st.rotations.push(Rotation { at, first_seq });
                header::encode_segment(&mut st.buf, first_seq);
                st.segment_len = header::HEADER_FRAME_LEN as u64;
            }
            frame::encode(&mut st.buf, kind::RECORD, record);
            st.segment_len += len;
            st.next_seq += 1;
        }
        let last = st.next_seq - 1;
        self.last_seq.store(last, Ordering::Release);
        if self.stalled.load(Ordering::Acquire) {
            self.unknown_upto.fetch_max(last, Ordering::AcqRel);
        }
        if st.writer_idle && last >= first {
            st.writer_idle = false;
            self.writer_cv.notify_one();
        }
        drop(st);
        Ok(Ticket::new(self.clone(), first, last))
    }

    /// Flushes and fdatasyncs everything appended so far, waiting for it.
    pub(crate) fn sync(&self) -> Result<(), LogError> {
        let mut st = lock(&self.state);
        let target = st.next_seq - 1;
        if target > st.sync_wanted {
            st.sync_wanted = target;
        }
        if st.writer_idle {
            st.writer_idle = false;
            self.writer_cv.notify_one();
        }
        while self.durable_seq() < target {
            self.check_failed()?;
            if let Some(stall) = self.stalled() {
                return Err(stall);
            }
            if st.stopped {
                return Err(LogError::WriterStopped);
            }
            st.sync_waiters += 1;
            st = self
                .synced_cv
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
            st.sync_waiters -= 1;
        }
        Ok(())
    }

    /// Asks the writer to flush, fdatasync and exit.
    pub(crate) fn request_close(&self) {
        let mut st = lock(&self.state);
        st.closing = true;
        st.writer_idle = false;
        self.writer_cv.notify_one();
    }

    /// Marks the log stalled by `cause` and fails every ticket issued so far with it.
    fn stall(&self, cause: Arc<IoFailure>) {
        *lock(&self.stall_cause) = Some(cause);
        {
            let st = lock(&self.state);
            self.stalled.store(true, Ordering::Release);
            self.unknown_upto
                .fetch_max(st.next_seq - 1, Ordering::AcqRel);
            self.space_cv.notify_all();
            self.synced_cv.notify_all();
        }
        self.wake(u64::MAX);
    }

    /// Ends a stall: the writer wrote what it held.
    fn resume(&self) {
        let _st = lock(&self.state);
        self.stalled.store(false, Ordering::Release);
    }

    /// Sleeps `retry_interval` (less when a close is asked for); returns whether the log is
    /// closing.
    fn wait_retry(&self) -> bool {
        let st = lock(&self.state);
        if st.closing {
            return true;
        }
        let st = self
            .writer_cv
            .wait_timeout(st, self.retry_interval)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
        st.closing
    }

    /// Records `failure` as the log's cause of death and fails everything pending.
    fn fail(&self, failure: LogError) {
        let _ = self.failure.set(failure);
        {
            let mut st = lock(&self.state);
            st.stopped = true;
            st.buf = Vec::new();
            st.rotations.clear();
            self.space_cv.notify_all();
            self.synced_cv.notify_all();
        }
        self.wake(u64::MAX);
    }

    /// Wakes the tickets up to `acked` (all of them, when failing).
    fn wake(&self, upto: u64) {
        let ready = lock(&self.waiters).take_upto(upto);
        for waker in ready {
            waker.wake();
        }
    }
}

/// The writer thread's body.
pub(crate) fn run(shared: Arc<Shared>, active: Active) {
    let mut writer = Writer {
        guard: StopGuard(shared.clone()),
        shared,
        active,
        buf: Vec::new(),
        rotations: Vec::new(),
        pos: 0,
        next_rotation: 0,
        unsynced_since: None,
    };
    if let Err(failure) = writer.run() {
        writer.shared.fail(LogError::Failed(Arc::new(failure)));
    }
    drop(writer.guard);
}

/// Marks the log stopped when the writer thread exits, also by panic, so that nobody waits
/// for it forever.
struct StopGuard(Arc<Shared>);

impl Drop for StopGuard {
    fn drop(&mut self) {
        let shared = &self.0;
        if shared.acked.load(Ordering::Acquire) < shared.last_seq() {
            shared.fail(LogError::WriterStopped);
        } else {
            let mut st = lock(&shared.state);
            st.stopped = true;
            shared.space_cv.notify_all();
            shared.synced_cv.notify_all();
        }
    }
}

struct Writer {
    shared: Arc<Shared>,
    guard: StopGuard,
    active: Active,
    /// The group being written; swapped with the appenders' buffer.
    buf: Vec<u8>,
    rotations: Vec<Rotation>,
    /// How much of `buf` is written (a group a full disk interrupted is resumed there).
    pos: usize,
    /// The first rotation of `rotations` not done yet.
    next_rotation: usize,
    /// When the oldest write not yet covered by an fdatasync happened.
    unsynced_since: Option<Instant>,
}

/// What the writer took from the shared state for one round.
struct Round {
    last: u64,
    sync_wanted: u64,
    closing: bool,
}

impl Writer {
    fn run(&mut self) -> Result<(), IoFailure> {
        loop {
            let round = self.next_round();
            self.write_group_retrying()?;
            let shared = &self.shared;
            let wrote = round.last > shared.written_seq();
            if wrote {
                shared.written.store(round.last, Ordering::Release);
                if self.unsynced_since.is_none() {
                    self.unsynced_since = Some(Instant::now());
                }
            }
            let due = match shared.policy {
                FsyncPolicy::Always => true,
                FsyncPolicy::Interval(every) => {
                    self.unsynced_since.is_some_and(|t| t.elapsed() >= every)
                }
                FsyncPolicy::Never => false,
            };
            let sync = due || round.closing || round.sync_wanted > shared.durable_seq();
            if sync && shared.durable_seq() < shared.written_seq() {
                self.active
                    .file
                    .sync_data()
                    .ctx(IoOp::SyncSegment, &self.active.path)?;
                self.unsynced_since = None;
                shared.durable.store(round.last, Ordering::Release);
                let st = lock(&shared.state);
                if st.sync_waiters > 0 {
                    shared.synced_cv.notify_all();
                }
            }
            let acked = match shared.policy {
                FsyncPolicy::Always => shared.durable_seq(),
                FsyncPolicy::Interval(_) | FsyncPolicy::Never => shared.written_seq(),
            };
            if acked > shared.acked.load(Ordering::Acquire) {
                shared.acked.store(acked, Ordering::Release);
                shared.wake(acked);
            }
            if round.closing {
                return Ok(());
            }
        }
    }

    /// Waits until there is something to do and takes it.
    fn next_round(&mut self) -> Round {
        let shared = &self.shared;
        let mut st = lock(&shared.state);
        loop {
            let work = !st.buf.is_empty() || st.closing || st.sync_wanted > shared.durable_seq();
            if work {
                break;
            }
            st.writer_idle = true;
            match (self.unsynced_since, shared.policy) {
                (Some(since), FsyncPolicy::Interval(every)) => {
                    let deadline = since + every;
                    let now = Instant::now();
                    if now >= deadline {
                        st.writer_idle = false;
                        break;
                    }
                    st = shared
                        .writer_cv
                        .wait_timeout(st, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                _ => {
                    st = shared
                        .writer_cv
                        .wait(st)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            }
            st.writer_idle = false;
        }
        mem::swap(&mut st.buf, &mut self.buf);
        mem::swap(&mut st.rotations, &mut self.rotations);
        if st.blocked_appenders > 0 {
            shared.space_cv.notify_all();
        }
        Round {
            last: st.next_seq - 1,
            sync_wanted: st.sync_wanted,
            closing: st.closing,
        }
    }

    /// Writes the taken buffer; while the disk is full, stalls the log and tries again every
    /// `retry_interval` (see the module doc). Closing gives up after one more try.
    fn write_group_retrying(&mut self) -> Result<(), IoFailure> {
        let mut stalled = false;
        let mut closing = false;
        loop {
            match self.write_group() {
                Ok(()) => {
                    if stalled {
                        self.shared.resume();
                    }
                    return Ok(());
                }
                Err(failure) if failure.is_out_of_space() && !closing => {
                    if !stalled {
                        stalled = true;
                        self.shared.stall(Arc::new(failure));
                    }
                    closing = self.shared.wait_retry();
                }
                Err(failure) => return Err(failure),
            }
        }
    }

    /// Writes the taken buffer from where it stopped, rotating segments where the appenders
    /// marked it.
    fn write_group(&mut self) -> Result<(), IoFailure> {
        while let Some(&rotation) = self.rotations.get(self.next_rotation) {
            self.write(self.pos, rotation.at)?;
            self.pos = rotation.at;
            self.rotate(rotation.first_seq)?;
            self.next_rotation += 1;
        }
        self.write(self.pos, self.buf.len())?;
        self.buf.clear();
        self.rotations.clear();
        self.pos = 0;
        self.next_rotation = 0;
        Ok(())
    }

    fn write(&mut self, from: usize, to: usize) -> Result<(), IoFailure> {
        if from == to {
            return Ok(());
        }
        if let Err(e) = self.active.file.write_all(&self.buf[from..to]) {
            let failure = IoFailure::new(IoOp::WriteSegment, &self.active.path, e);
            if failure.is_out_of_space() {
                // Part of the frames may be on disk: cut them, so that the retry (or a
                // restart) finds the segment as it was before this write.
                self.active
                    .file
                    .truncate(self.active.len)
                    .ctx(IoOp::Truncate, &self.active.path)?;
            }
            return Err(failure);
        }
        self.active.len += (to - from) as u64;
        let mut files = lock(&self.shared.files);
        if let Some(segment) = files.segments.last_mut() {
            segment.bytes += (to - from) as u64;
        }
        Ok(())
    }

    /// Finishes the current segment durably and starts the one whose first record is
    /// `first_seq`.
    fn rotate(&mut self, first_seq: u64) -> Result<(), IoFailure> {
        self.active
            .file
            .sync_data()
            .ctx(IoOp::SyncSegment, &self.active.path)?;
        let dir = &self.shared.dir;
        let path = dir.join(layout::segment_name(first_seq));
        let file = self
            .shared
            .storage
            .create_new(&path)
            .ctx(IoOp::CreateSegment, &path)?;
        self.shared.storage.sync_dir(dir).ctx(IoOp::SyncDir, dir)?;
        lock(&self.shared.files).segments.push(SegmentMeta {
            first_seq,
            path: path.clone(),
            bytes: 0,
        });
        self.active = Active { file, path, len: 0 };
        Ok(())
    }
}
