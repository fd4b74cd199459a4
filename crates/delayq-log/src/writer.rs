//! The write path: appenders fill a shared buffer; whoever holds the write token drains it.
//!
//! # Appending
//!
//! [`GroupCommit::append`] takes the state mutex, encodes the records into the buffer (frames,
//! plus a segment header where a new segment must start), assigns the next sequence numbers
//! and returns a [`Ticket`]. It does no IO. The only way it can block is back-pressure: when
//! more than `max_buffered_bytes` are waiting to be written, it waits until somebody takes
//! the buffer.
//!
//! # Group commit, and who writes
//!
//! One party at a time holds the *write token* (`State::holder`) and with it the segment
//! file (`GroupCommit::io`): it swaps the whole buffer out under the state mutex, so appenders
//! keep going while it writes everything in one write(2) per segment, then publishes the new
//! written (and, per policy, acknowledged) sequence number and wakes the tickets it covers.
//!
//! Under `Interval` and `Never` the token usually goes to a **leader**: the first waiter that
//! finds its records not yet written and nobody writing takes the token and writes the
//! waiting group on its own thread (see [`GroupCommit::lead`]). Records appended while it writes
//! are taken by its next round (at most [`LEADER_ROUNDS`] of them), then by the next leader
//! or the writer thread. This saves the hand-off to a thread and back that would otherwise
//! cost more than the write itself: an add arriving every few microseconds found the writer
//! thread asleep and had to wake it, and be woken by it.
//!
//! The **writer thread** keeps everything that may block for long or must happen without a
//! waiter: the fdatasync of `Interval` (timed from the first write it does not cover), every
//! write and fdatasync under `Always` (a leader must not block an async worker on the disk),
//! `sync()`, closing, retrying while the disk is full, and any group a leader left behind
//! (more rounds than it takes, a failed write, a ticket dropped without being waited on).
//! It sleeps on a condition variable while there is nothing to do, so an idle log costs no
//! CPU. Under `Always` the more appenders arrive during one fdatasync, the bigger the next
//! group: throughput grows with concurrency.
//!
//! Whoever gives the token back with work left (records in the buffer, a failed write, a
//! close or sync asked for, an fdatasync to schedule) wakes the writer thread, so no record
//! waits for a waiter that will never come.
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
//! A leader whose write fails leaves the group, where it stopped, and the error to the
//! writer thread, which handles it as if its own write had failed.
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

/// At most this many groups are written by one leader before it hands the rest to the
/// writer thread: its own records are in the first, and its caller is waiting for it.
pub(crate) const LEADER_ROUNDS: usize = 4;

/// Who holds the write token (and may lock [`GroupCommit::io`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    /// Nobody: the next leader or the writer thread may take it.
    Nobody,
    /// A waiter writing on its own thread.
    Leader,
    /// The writer thread.
    Thread,
}

/// Everything appenders and the writers share under one mutex.
#[derive(Debug)]
struct State {
    /// Encoded frames not yet taken by a writer.
    buf: Vec<u8>,
    /// Segment starts inside `buf`.
    rotations: Vec<Rotation>,
    /// The sequence number the next record gets.
    next_seq: u64,
    /// Size the newest segment will have once `buf` is written.
    segment_len: u64,
    /// Who holds the write token.
    holder: Holder,
    /// A leader's write failed: the group and the error wait in `Io::handoff` for the thread.
    handoff: bool,
    /// When the oldest write not yet covered by an fdatasync happened.
    unsynced_since: Option<Instant>,
    /// The writer thread is waiting on `writer_cv` and must be notified.
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

impl State {
    /// Whether the writer thread has something to do once it holds the token.
    fn thread_work(&self, policy: FsyncPolicy, durable: u64) -> bool {
        let fsync_due = match (self.unsynced_since, policy) {
            (Some(since), FsyncPolicy::Interval(every)) => since.elapsed() >= every,
            _ => false,
        };
        !self.buf.is_empty()
            || self.handoff
            || self.closing
            || self.sync_wanted > durable
            || fsync_due
    }

    /// Wakes the writer thread if it sleeps.
    fn wake_thread(&mut self, cv: &Condvar) {
        if self.writer_idle {
            self.writer_idle = false;
            cv.notify_one();
        }
    }
}

/// The segment file and the group being written: only the holder of the write token locks
/// it, so the lock is never contended (and may be taken with the state mutex held).
#[derive(Debug)]
pub(crate) struct Io {
    active: Active,
    /// The group being written; swapped with the appenders' buffer.
    buf: Vec<u8>,
    rotations: Vec<Rotation>,
    /// The last sequence number in `buf`.
    last: u64,
    /// How much of `buf` is written (a group a full disk interrupted is resumed there).
    pos: usize,
    /// The first rotation of `rotations` not done yet.
    next_rotation: usize,
    /// A leader's failed write, for the writer thread.
    handoff: Option<IoFailure>,
}

/// The group commit of one log: the appenders' buffer, the write token and the segment it
/// guards, and how far records are written, synced and acknowledged. Shared by the log's
/// handle, its tickets and its writer thread.
#[derive(Debug)]
pub(crate) struct GroupCommit {
    pub(crate) dir: PathBuf,
    pub(crate) policy: FsyncPolicy,
    pub(crate) storage: Arc<dyn Storage>,
    max_record_bytes: usize,
    segment_bytes: u64,
    max_buffered_bytes: usize,
    retry_interval: Duration,
    state: Mutex<State>,
    io: Mutex<Io>,
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

impl std::fmt::Debug for Active {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Active")
            .field("path", &self.path)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl GroupCommit {
    /// Creates the shared state of a log whose next record is `next_seq`, whose newest
    /// segment holds `segment_len` bytes and is open as `active`.
    pub(crate) fn new(
        dir: &Path,
        options: &LogOptions,
        next_seq: u64,
        segment_len: u64,
        files: Files,
        active: Active,
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
                holder: Holder::Nobody,
                handoff: false,
                unsynced_since: None,
                writer_idle: false,
                blocked_appenders: 0,
                sync_wanted: 0,
                sync_waiters: 0,
                closing: false,
                stopped: false,
            }),
            io: Mutex::new(Io {
                active,
                buf: Vec::new(),
                rotations: Vec::new(),
                last,
                pos: 0,
                next_rotation: 0,
                handoff: None,
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

    /// Whether waiters write their own groups (every policy but `Always`, whose fdatasync
    /// must not block a waiter's thread).
    fn leaders_write(&self) -> bool {
        !matches!(self.policy, FsyncPolicy::Always)
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
            // Nobody may be about to lead (every waiter could be an appender blocked here):
            // the thread takes the buffer if the token is free.
            st.wake_thread(&self.writer_cv);
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
        // Under a leader policy the ticket's waiter writes (or the ticket's drop wakes the
        // thread): no thread hand-off per append.
        if !self.leaders_write() && last >= first {
            st.wake_thread(&self.writer_cv);
        }
        drop(st);
        Ok(Ticket::new(self.clone(), first, last))
    }

    /// Writes the waiting group on the calling thread when the records up to `seq` are not
    /// written yet and nobody holds the write token; does nothing otherwise (and always
    /// under `Always`).
    ///
    /// Called by a ticket's waiter before it goes to sleep. It writes what is buffered, then
    /// what was appended meanwhile, up to [`LEADER_ROUNDS`] groups, publishes and wakes the
    /// tickets each group covers, and gives the token back, waking the writer thread when
    /// work is left for it. A failed write is handed to the writer thread with its group.
    pub(crate) fn lead(&self, seq: u64) {
        if !self.leaders_write() || self.written_seq() >= seq {
            return;
        }
        let mut st = lock(&self.state);
        if st.holder != Holder::Nobody
            || st.buf.is_empty()
            || st.stopped
            || st.closing
            || st.handoff
            || self.stalled.load(Ordering::Acquire)
        {
            return;
        }
        st.holder = Holder::Leader;
        // The token is ours: nobody else locks `io` now.
        let mut io = lock(&self.io);
        let mut rounds = 0;
        loop {
            io.take(self, &mut st);
            drop(st);
            let result = io.write_group(self);
            if result.is_ok() {
                self.publish_written(io.last);
            }
            st = lock(&self.state);
            match result {
                Ok(()) => {
                    if st.unsynced_since.is_none() && !matches!(self.policy, FsyncPolicy::Never) {
                        // The writer thread times the fdatasync from here.
                        st.unsynced_since = Some(Instant::now());
                        st.wake_thread(&self.writer_cv);
                    }
                }
                Err(failure) => {
                    io.handoff = Some(failure);
                    st.handoff = true;
                    break;
                }
            }
            rounds += 1;
            if st.buf.is_empty() || st.closing || rounds >= LEADER_ROUNDS {
                break;
            }
        }
        st.holder = Holder::Nobody;
        if st.thread_work(self.policy, self.durable_seq()) {
            st.wake_thread(&self.writer_cv);
        }
    }

    /// Wakes the writer thread if records wait in the buffer with nobody writing: a ticket
    /// is dropped before its records were written, and nobody may wait for them.
    pub(crate) fn nudge(&self) {
        let mut st = lock(&self.state);
        if st.holder == Holder::Nobody && !st.buf.is_empty() {
            st.wake_thread(&self.writer_cv);
        }
    }

    /// Publishes that everything up to `last` is written, and under the policies that
    /// acknowledge at write, acknowledges it and wakes its tickets.
    fn publish_written(&self, last: u64) {
        if last > self.written_seq() {
            self.written.store(last, Ordering::Release);
        }
        if self.leaders_write() && last > self.acked.load(Ordering::Acquire) {
            self.acked.store(last, Ordering::Release);
            self.wake(last);
        }
    }

    /// Flushes and fdatasyncs everything appended so far, waiting for it.
    pub(crate) fn sync(&self) -> Result<(), LogError> {
        let mut st = lock(&self.state);
        let target = st.next_seq - 1;
        if target > st.sync_wanted {
            st.sync_wanted = target;
        }
        st.wake_thread(&self.writer_cv);
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
        // Unconditionally: it also cuts short the retry wait of a stalled writer.
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

    /// The writer thread's wait for the token and for something to do; takes the buffer
    /// (unless a leader handed over a group of its own) and returns the round's facts.
    fn next_round(&self) -> Round {
        let mut st = lock(&self.state);
        loop {
            if st.holder != Holder::Leader && st.thread_work(self.policy, self.durable_seq()) {
                break;
            }
            if st.holder == Holder::Thread {
                // Give the token back while idle, so that the next waiter may lead.
                st.holder = Holder::Nobody;
            }
            st.writer_idle = true;
            let deadline = match (st.unsynced_since, self.policy) {
                (Some(since), FsyncPolicy::Interval(every)) if st.holder != Holder::Leader => {
                    Some(since + every)
                }
                _ => None,
            };
            st = match deadline {
                Some(deadline) => {
                    let wait = deadline.saturating_duration_since(Instant::now());
                    self.writer_cv
                        .wait_timeout(st, wait)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => self
                    .writer_cv
                    .wait(st)
                    .unwrap_or_else(PoisonError::into_inner),
            };
            st.writer_idle = false;
        }
        st.holder = Holder::Thread;
        let mut io = lock(&self.io);
        if st.handoff {
            st.handoff = false;
        } else {
            io.take(self, &mut st);
        }
        Round {
            last: io.last,
            sync_wanted: st.sync_wanted,
            closing: st.closing,
        }
    }
}

/// The writer thread's body.
pub(crate) fn run(shared: Arc<GroupCommit>) {
    let guard = StopGuard(shared.clone());
    if let Err(failure) = run_thread(&shared) {
        shared.fail(LogError::Failed(Arc::new(failure)));
    }
    drop(guard);
}

/// Marks the log stopped when the writer thread exits, also by panic, so that nobody waits
/// for it forever.
struct StopGuard(Arc<GroupCommit>);

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

/// What the writer thread took from the shared state for one round.
struct Round {
    last: u64,
    sync_wanted: u64,
    closing: bool,
}

/// The writer thread's loop: one round per wake-up, holding the token.
fn run_thread(shared: &GroupCommit) -> Result<(), IoFailure> {
    loop {
        let round = shared.next_round();
        let mut io = lock(&shared.io);
        io.write_group_retrying(shared)?;
        shared.publish_written(round.last);
        let mut st = lock(&shared.state);
        if round.last > shared.durable_seq() && st.unsynced_since.is_none() {
            st.unsynced_since = Some(Instant::now());
        }
        let due = match shared.policy {
            FsyncPolicy::Always => true,
            FsyncPolicy::Interval(every) => st.unsynced_since.is_some_and(|t| t.elapsed() >= every),
            FsyncPolicy::Never => false,
        };
        let sync = due || round.closing || round.sync_wanted > shared.durable_seq();
        drop(st);
        if sync && shared.durable_seq() < shared.written_seq() {
            let covers = shared.written_seq();
            io.active
                .file
                .sync_data()
                .ctx(IoOp::SyncSegment, &io.active.path)?;
            shared.durable.store(covers, Ordering::Release);
            let mut st = lock(&shared.state);
            st.unsynced_since = None;
            if st.sync_waiters > 0 {
                shared.synced_cv.notify_all();
            }
        } else if sync {
            lock(&shared.state).unsynced_since = None;
        }
        if matches!(shared.policy, FsyncPolicy::Always) {
            let acked = shared.durable_seq();
            if acked > shared.acked.load(Ordering::Acquire) {
                shared.acked.store(acked, Ordering::Release);
                shared.wake(acked);
            }
        }
        if round.closing {
            return Ok(());
        }
    }
}

impl Io {
    /// Takes the appenders' buffer as the group to write (the holder of the token calls it
    /// with the state locked).
    fn take(&mut self, shared: &GroupCommit, st: &mut State) {
        debug_assert!(self.buf.is_empty() && self.handoff.is_none());
        mem::swap(&mut st.buf, &mut self.buf);
        mem::swap(&mut st.rotations, &mut self.rotations);
        self.last = st.next_seq - 1;
        if st.blocked_appenders > 0 {
            shared.space_cv.notify_all();
        }
    }

    /// Writes the group; while the disk is full, stalls the log and tries again every
    /// `retry_interval` (see the module doc). Closing gives up after one more try. A leader's
    /// failed write is handled here as the first try's outcome.
    fn write_group_retrying(&mut self, shared: &GroupCommit) -> Result<(), IoFailure> {
        let mut stalled = false;
        let mut closing = false;
        loop {
            let outcome = match self.handoff.take() {
                Some(failure) => Err(failure),
                None => self.write_group(shared),
            };
            match outcome {
                Ok(()) => {
                    if stalled {
                        shared.resume();
                    }
                    return Ok(());
                }
                Err(failure) if failure.is_out_of_space() && !closing => {
                    if !stalled {
                        stalled = true;
                        shared.stall(Arc::new(failure));
                    }
                    closing = shared.wait_retry();
                }
                Err(failure) => return Err(failure),
            }
        }
    }

    /// Writes the group from where it stopped, rotating segments where the appenders marked
    /// it.
    fn write_group(&mut self, shared: &GroupCommit) -> Result<(), IoFailure> {
        while let Some(&rotation) = self.rotations.get(self.next_rotation) {
            self.write(shared, self.pos, rotation.at)?;
            self.pos = rotation.at;
            self.rotate(shared, rotation.first_seq)?;
            self.next_rotation += 1;
        }
        self.write(shared, self.pos, self.buf.len())?;
        self.buf.clear();
        self.rotations.clear();
        self.pos = 0;
        self.next_rotation = 0;
        Ok(())
    }

    fn write(&mut self, shared: &GroupCommit, from: usize, to: usize) -> Result<(), IoFailure> {
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
        let mut files = lock(&shared.files);
        if let Some(segment) = files.segments.last_mut() {
            segment.bytes += (to - from) as u64;
        }
        Ok(())
    }

    /// Finishes the current segment durably and starts the one whose first record is
    /// `first_seq`.
    fn rotate(&mut self, shared: &GroupCommit, first_seq: u64) -> Result<(), IoFailure> {
        self.active
            .file
            .sync_data()
            .ctx(IoOp::SyncSegment, &self.active.path)?;
        let dir = &shared.dir;
        let path = dir.join(layout::segment_name(first_seq));
        let file = shared
            .storage
            .create_new(&path)
            .ctx(IoOp::CreateSegment, &path)?;
        shared.storage.sync_dir(dir).ctx(IoOp::SyncDir, dir)?;
        lock(&shared.files).segments.push(SegmentMeta {
            first_seq,
            path: path.clone(),
            bytes: 0,
        });
        self.active = Active { file, path, len: 0 };
        Ok(())
    }
}
