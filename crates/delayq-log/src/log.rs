//! The [`Log`] handle: open, append, sync, snapshot, close.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use crate::error::{IoContext, IoFailure, IoOp, LogError, OpenError};
use crate::lock::{self, DirLock, LockError};
use crate::options::LogOptions;
use crate::recovery::{self, RecoveryReport, Replayed};
use crate::snapshot;
use crate::ticket::Ticket;
use crate::writer::{self, GroupCommit, lock as lock_mutex};

/// An open append-only log in one directory, with its own writer thread.
///
/// All methods take `&self`; share it between threads with an `Arc`. Dropping it closes it
/// (best effort, errors ignored); call [`Log::close`] to see them.
#[derive(Debug)]
pub struct Log {
    shared: Arc<GroupCommit>,
    writer: Option<JoinHandle<()>>,
    snapshot_lock: Mutex<()>,
    lock: Option<DirLock>,
}

/// Counters of a running log, from [`Log::stats`].
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogStats {
    /// Segment files.
    pub segments: usize,
    /// Bytes in segment files.
    pub segments_bytes: u64,
    /// Bytes in the snapshot file.
    pub snapshot_bytes: u64,
    /// Segments and snapshot together.
    pub bytes_on_disk: u64,
    /// The last sequence number assigned.
    pub last_seq: u64,
    /// The last sequence number written with write(2).
    pub written_seq: u64,
    /// The last sequence number covered by an fdatasync.
    pub durable_seq: u64,
    /// The last sequence number the newest snapshot covers (0 without one).
    pub snapshot_covers_seq: u64,
    /// Whether the log has failed and refuses appends.
    pub failed: bool,
    /// Whether the writer is stalled for lack of space (see [`Log::stalled`]).
    pub stalled: bool,
}

/// What [`Log::write_snapshot`] wrote and removed.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotReport {
    /// The snapshot file.
    pub path: PathBuf,
    /// The last sequence number it covers.
    pub covers_seq: u64,
    /// Records in it.
    pub records: u64,
    /// Its size.
    pub bytes: u64,
    /// Segments removed because the snapshot covers all their records.
    pub segments_removed: usize,
    /// Older snapshots removed.
    pub snapshots_removed: usize,
}

impl Log {
    /// Opens (or creates) the log in `dir` and replays it into `replay`.
    ///
    /// Creates the directory if needed and locks it: a second open of the same directory, in
    /// this process or another, fails with [`OpenError::Locked`]. Then calls `replay` once
    /// with how much is coming ([`Replayed::Begin`]), with every record of the newest valid snapshot ([`Replayed::Snapshot`]), then with every log
    /// record after the snapshot ([`Replayed::Record`]), in order. A torn tail of the newest
    /// segment is cut and reported; damage anywhere else is an error naming the file and the
    /// byte offset. When `replay` returns an error, opening stops and returns it.
    pub fn open<E>(
        dir: impl AsRef<Path>,
        options: LogOptions,
        mut replay: impl FnMut(Replayed<'_>) -> Result<(), E>,
    ) -> Result<(Log, RecoveryReport), OpenError<E>> {
        options.validate().map_err(OpenError::InvalidOptions)?;
        let dir = dir.as_ref();
        create_dir(dir)?;
        let dir_lock = lock::lock_dir(dir).map_err(|e| match e {
            LockError::Held => OpenError::Locked {
                dir: dir.to_path_buf(),
            },
            LockError::Io(f) => OpenError::Io(f),
        })?;
        let recovered = recovery::recover(dir, &options, &mut replay)?;
        let shared = Arc::new(GroupCommit::new(
            dir,
            &options,
            recovered.next_seq,
            recovered.segment_len,
            recovered.files,
            recovered.active,
        ));
        let for_writer = shared.clone();
        let writer = thread::Builder::new()
            .name("delayq-log".into())
            .spawn(move || writer::run(for_writer))
            .ctx(IoOp::StartWriter, dir)?;
        let log = Log {
            shared,
            writer: Some(writer),
            snapshot_lock: Mutex::new(()),
            lock: Some(dir_lock),
        };
        Ok((log, recovered.report))
    }

    /// Returns the stall under way ([`LogError::Stalled`], naming the file and the OS error)
    /// when the writer is waiting for space to write what it holds, `None` otherwise.
    ///
    /// Appends stay possible during a stall (records are kept in memory, their tickets fail
    /// with the stall), so that a caller which already changed its state can always log it;
    /// a caller asks this first to refuse new work instead of adding to the backlog.
    pub fn stalled(&self) -> Option<LogError> {
        self.shared.stalled()
    }

    /// Returns the log's directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Appends one record and returns the ticket to wait on.
    ///
    /// The record is copied into the writer's buffer and gets the next sequence number; no
    /// IO happens here. Calls are ordered by the caller: two appends made under one caller
    /// mutex get sequence numbers in that order. The call blocks only when more than
    /// `max_buffered_bytes` are already waiting for the writer, until the writer takes them.
    ///
    /// Fails at once when the record is too large, or when the log has failed (with the
    /// original cause).
    pub fn append(&self, record: &[u8]) -> Result<Ticket, LogError> {
        self.shared.append(std::iter::once(record))
    }

    /// Appends records with consecutive sequence numbers and returns one ticket for all of
    /// them. Either every record is accepted or none is. See [`Log::append`].
    pub fn append_batch<R: AsRef<[u8]>>(
        &self,
        records: impl IntoIterator<Item = R>,
    ) -> Result<Ticket, LogError> {
        self.shared.append(records)
    }

    /// Returns the last sequence number assigned (0 for an empty log).
    ///
    /// Read under the same mutex that orders appends, it is the sequence number a snapshot
    /// of the caller's state taken there covers.
    pub fn last_seq(&self) -> u64 {
        self.shared.last_seq()
    }

    /// Returns the log's counters.
    pub fn stats(&self) -> LogStats {
        let files = lock_mutex(&self.shared.files);
        let segments_bytes = files.segments.iter().map(|s| s.bytes).sum();
        let snapshot_bytes = files.snapshot.as_ref().map_or(0, |s| s.bytes);
        LogStats {
            segments: files.segments.len(),
            segments_bytes,
            snapshot_bytes,
            bytes_on_disk: segments_bytes + snapshot_bytes,
            last_seq: self.shared.last_seq(),
            written_seq: self.shared.written_seq(),
            durable_seq: self.shared.durable_seq(),
            snapshot_covers_seq: files.snapshot.as_ref().map_or(0, |s| s.covers_seq),
            failed: self.shared.failure.get().is_some(),
            stalled: self.shared.stalled().is_some(),
        }
    }

    /// Writes and fdatasyncs everything appended so far, and waits for it, under any policy.
    /// While the log is stalled for lack of space it fails at once with the stall.
    pub fn sync(&self) -> Result<(), LogError> {
        self.shared.sync()
    }

    /// Writes a snapshot of the caller's state as of record `covers_seq`, then removes the
    /// segments whose records it all covers and older snapshots.
    ///
    /// Blocking; call it from a thread that may block (not an async worker). Appends go on
    /// meanwhile. `records` are written in order and come back in that order as
    /// [`Replayed::Snapshot`] on the next open, followed by the log records after
    /// `covers_seq`. The snapshot is durable when this returns `Ok`. A failure leaves the log
    /// and the previous snapshot as they were ([`LogError::Snapshot`], retryable), except
    /// that when removing obsolete files fails the new snapshot is already in place.
    pub fn write_snapshot<R: AsRef<[u8]>>(
        &self,
        covers_seq: u64,
        records: impl IntoIterator<Item = R>,
    ) -> Result<SnapshotReport, LogError> {
        let _one_at_a_time = lock_mutex(&self.snapshot_lock);
        let last = self.shared.last_seq();
        if covers_seq > last {
            return Err(LogError::SnapshotAhead {
                covers: covers_seq,
                last,
            });
        }
        let current = lock_mutex(&self.shared.files)
            .snapshot
            .as_ref()
            .map_or(0, |s| s.covers_seq);
        if covers_seq < current {
            return Err(LogError::SnapshotBehind {
                covers: covers_seq,
                current,
            });
        }
        let storage = &*self.shared.storage;
        let dir = &self.shared.dir;
        let meta = snapshot::write(storage, dir, covers_seq, records)
            .map_err(|f| LogError::Snapshot(Arc::new(f)))?;
        let mut report = SnapshotReport {
            path: meta.path.clone(),
            covers_seq,
            records: meta.records,
            bytes: meta.bytes,
            segments_removed: 0,
            snapshots_removed: 0,
        };
        let (old_snapshot, covered) = {
            let mut files = lock_mutex(&self.shared.files);
            // The newest segment is never removed: the writer is appending to it.
            let covered = files
                .segments
                .windows(2)
                .take_while(|w| w[1].first_seq <= covers_seq + 1)
                .count();
            let covered: Vec<PathBuf> = files.segments.drain(..covered).map(|s| s.path).collect();
            (files.snapshot.replace(meta), covered)
        };
        let remove = |path: &Path| -> Result<(), LogError> {
            storage
                .remove_file(path)
                .ctx(IoOp::Remove, path)
                .map_err(|f| LogError::Snapshot(Arc::new(f)))
        };
        for path in &covered {
            remove(path)?;
            report.segments_removed += 1;
        }
        if let Some(old) = old_snapshot
            && old.path != report.path
        {
            remove(&old.path)?;
            report.snapshots_removed += 1;
        }
        if report.segments_removed + report.snapshots_removed > 0 {
            storage
                .sync_dir(dir)
                .ctx(IoOp::SyncDir, dir)
                .map_err(|f| LogError::Snapshot(Arc::new(f)))?;
        }
        Ok(report)
    }

    /// Writes and fdatasyncs everything appended, stops the writer thread and releases the
    /// directory lock. Returns the log's failure if it had failed.
    pub fn close(mut self) -> Result<(), LogError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), LogError> {
        let Some(writer) = self.writer.take() else {
            return Ok(());
        };
        self.shared.request_close();
        let joined = writer.join();
        self.lock.take();
        if let Some(failure) = self.shared.failure.get() {
            return Err(failure.clone());
        }
        joined.map_err(|_| LogError::WriterStopped)
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Creates `dir` if it does not exist, durably (its parent is fsynced).
fn create_dir(dir: &Path) -> Result<(), IoFailure> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir).ctx(IoOp::CreateDir, dir)?;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::File::open(parent)
            .and_then(|f| f.sync_all())
            .ctx(IoOp::SyncDir, parent)?;
    }
    Ok(())
}
