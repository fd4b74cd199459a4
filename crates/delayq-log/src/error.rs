//! Errors, one type per entry point: [`LogError`] for a running log, [`OpenError`] for
//! [`Log::open`](crate::Log::open), [`InspectError`] and [`RepairError`] for the offline tools.
//!
//! Every IO failure is wrapped in an [`IoFailure`] that says what the log was doing and with
//! which file. Every error answers [`kind`](LogError::kind), so a caller can tell the rare
//! retryable failure from a permanent one (for the HTTP edge: 503 versus 500).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use thiserror::Error;

/// What the log was doing when an IO operation failed.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoOp {
    /// Creating the log directory.
    CreateDir,
    /// Creating or locking the `LOCK` file.
    Lock,
    /// Listing the files of the log directory.
    ListDir,
    /// Reading a segment or snapshot.
    Read,
    /// Cutting a torn tail or a damaged segment.
    Truncate,
    /// Creating a new segment file.
    CreateSegment,
    /// Opening the newest segment to append to it.
    OpenSegment,
    /// Writing records to a segment.
    WriteSegment,
    /// Flushing a segment to stable storage (fdatasync).
    SyncSegment,
    /// Flushing a directory entry change to stable storage (fsync of the directory).
    SyncDir,
    /// Creating or writing a snapshot's temporary file.
    WriteSnapshot,
    /// Flushing a snapshot to stable storage.
    SyncSnapshot,
    /// Renaming a file into place.
    Rename,
    /// Removing a file that is no longer needed.
    Remove,
    /// Saving bytes that repair cuts from a segment.
    SaveDiscarded,
    /// Starting the writer thread of the log in a directory.
    StartWriter,
}

impl fmt::Display for IoOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IoOp::CreateDir => "creating the log directory",
            IoOp::Lock => "locking the log directory with",
            IoOp::ListDir => "listing the log directory",
            IoOp::Read => "reading",
            IoOp::Truncate => "truncating",
            IoOp::CreateSegment => "creating segment",
            IoOp::OpenSegment => "opening segment",
            IoOp::WriteSegment => "writing to segment",
            IoOp::SyncSegment => "syncing (fdatasync) segment",
            IoOp::SyncDir => "syncing directory",
            IoOp::WriteSnapshot => "writing snapshot",
            IoOp::SyncSnapshot => "syncing snapshot",
            IoOp::Rename => "renaming",
            IoOp::Remove => "removing",
            IoOp::SaveDiscarded => "saving the cut bytes to",
            IoOp::StartWriter => "starting the writer thread for",
        })
    }
}

/// An IO operation that failed: what was being done, on which file, and the OS error.
#[derive(Debug, Error)]
#[error("{op} {}: {source}", path.display())]
pub struct IoFailure {
    op: IoOp,
    path: PathBuf,
    #[source]
    source: io::Error,
}

impl IoFailure {
    pub(crate) fn new(op: IoOp, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self {
            op,
            path: path.into(),
            source,
        }
    }

    /// Returns what the log was doing.
    pub fn op(&self) -> IoOp {
        self.op
    }

    /// Returns the file or directory the operation was applied to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Returns the underlying OS error.
    pub fn io_error(&self) -> &io::Error {
        &self.source
    }

    /// Returns whether the operation failed for lack of space: a full file system
    /// (`ENOSPC`), a quota (`EDQUOT`) or a file size limit (`EFBIG`). Such a write can succeed
    /// later, once space is freed.
    pub fn is_out_of_space(&self) -> bool {
        matches!(
            self.source.kind(),
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded | io::ErrorKind::FileTooLarge
        )
    }
}

/// Adds "what and which file" to an `io::Result`.
pub(crate) trait IoContext<T> {
    fn ctx(self, op: IoOp, path: &Path) -> Result<T, IoFailure>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, op: IoOp, path: &Path) -> Result<T, IoFailure> {
        self.map_err(|e| IoFailure::new(op, path, e))
    }
}

/// Why bytes at some offset of a file are not a valid record.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameProblem {
    /// The length field is larger than any record can be.
    #[error("length field {len} is larger than any record can be")]
    BadLength {
        /// The length that was read.
        len: u32,
    },
    /// The stored checksum does not match the type and body.
    #[error("checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    BadChecksum {
        /// The checksum in the frame header.
        stored: u32,
        /// The checksum of the bytes that follow it.
        computed: u32,
    },
    /// The frame is intact but of a type this version does not know.
    #[error("unknown frame type {ty:#04x}")]
    UnknownType {
        /// The type byte.
        ty: u8,
    },
    /// The file ends inside a frame.
    #[error("the file ends inside a record ({available} bytes of it present)")]
    Truncated {
        /// How many bytes of the frame the file holds.
        available: usize,
    },
    /// A valid frame of a type that does not belong at this place in this kind of file.
    #[error("unexpected frame type {ty:#04x} here")]
    UnexpectedType {
        /// The type byte.
        ty: u8,
    },
    /// The file's header frame is missing or does not match the file name or format.
    #[error("bad file header: {0}")]
    BadHeader(&'static str),
    /// A snapshot does not end with a matching end frame.
    #[error("bad snapshot end: {0}")]
    BadEnd(&'static str),
}

/// A damaged place in a file of the log.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{} is damaged at byte offset {offset}: {problem}", file.display())]
pub struct Corruption {
    /// The damaged file.
    pub file: PathBuf,
    /// The byte offset of the first bad frame.
    pub offset: u64,
    /// What is wrong there.
    pub problem: FrameProblem,
}

/// The category of an error, to decide between retrying, reporting a server error and
/// reporting a caller error.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// An IO operation failed. For a running log this is permanent: the log is failed and
    /// accepts no more records, because a failed fsync cannot be retried safely.
    Io,
    /// A write found no space (full disk, quota, file size limit). The log is stalled, not
    /// failed: it keeps the records and writes them once space returns.
    OutOfSpace,
    /// The caller passed something the log refuses (a record that is too large, a snapshot
    /// sequence number that was never assigned). Retrying the same call fails the same way.
    InvalidInput,
    /// Writing a snapshot failed. The log itself is unaffected; trying again later may work.
    SnapshotFailed,
    /// The log directory is locked by another open log, in this process or another one.
    Locked,
    /// A file of the log is damaged, or records are missing between files.
    Corrupt,
    /// The replay callback returned an error.
    Replay,
    /// The log's writer thread stopped unexpectedly.
    WriterStopped,
}

/// An error from a running [`Log`](crate::Log) or one of its [`Ticket`](crate::Ticket)s.
///
/// It is cheap to clone: the same cause is handed to every ticket of a failed group and to
/// every later append.
#[non_exhaustive]
#[derive(Debug, Clone, Error)]
pub enum LogError {
    /// An IO operation failed; the log is failed and every later append returns this again.
    #[error("the log failed and accepts no more records: {0}")]
    Failed(Arc<IoFailure>),
    /// A write found no space; the log is stalled. The records of this ticket (or of the
    /// appends made during the stall) are kept in memory and written, in order, when the
    /// writer's next try succeeds, unless the process stops first: whether they last is not
    /// known yet. The log resumes by itself once space is freed.
    #[error(
        "no space to write the log (the records are kept and written when space returns, unless the process stops first): {0}"
    )]
    Stalled(Arc<IoFailure>),
    /// The writer thread stopped without a cause (it panicked); nothing more is written.
    #[error("the log's writer thread stopped unexpectedly; nothing more is written")]
    WriterStopped,
    /// A record is larger than `LogOptions::max_record_bytes`.
    #[error("record of {len} bytes is larger than the limit of {max} bytes")]
    RecordTooLarge {
        /// The record's length.
        len: usize,
        /// The configured limit.
        max: usize,
    },
    /// A snapshot was asked to cover a sequence number that was never assigned.
    #[error("a snapshot cannot cover seq {covers}: the last assigned seq is {last}")]
    SnapshotAhead {
        /// The requested covered sequence number.
        covers: u64,
        /// The last sequence number assigned.
        last: u64,
    },
    /// A snapshot was asked to cover less than the snapshot already on disk.
    #[error("a snapshot cannot cover seq {covers}: the newest snapshot already covers {current}")]
    SnapshotBehind {
        /// The requested covered sequence number.
        covers: u64,
        /// What the newest snapshot on disk covers.
        current: u64,
    },
    /// Writing a snapshot failed; the log and the previous snapshot are unaffected.
    #[error("writing the snapshot failed (the log is unaffected): {0}")]
    Snapshot(Arc<IoFailure>),
}

impl LogError {
    /// Returns the category of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            LogError::Failed(_) => ErrorKind::Io,
            LogError::Stalled(_) => ErrorKind::OutOfSpace,
            LogError::WriterStopped => ErrorKind::WriterStopped,
            LogError::RecordTooLarge { .. }
            | LogError::SnapshotAhead { .. }
            | LogError::SnapshotBehind { .. } => ErrorKind::InvalidInput,
            LogError::Snapshot(_) => ErrorKind::SnapshotFailed,
        }
    }

    /// Returns whether the same call may succeed later: a failed snapshot, and a stall for
    /// lack of space. A failed log stays failed until it is reopened.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind(),
            ErrorKind::SnapshotFailed | ErrorKind::OutOfSpace
        )
    }

    /// Returns the IO failure behind this error, if there is one.
    pub fn io_failure(&self) -> Option<&IoFailure> {
        match self {
            LogError::Failed(f) | LogError::Stalled(f) | LogError::Snapshot(f) => Some(f),
            _ => None,
        }
    }

    /// Returns whether the cause is a full disk (`ENOSPC`).
    pub fn is_disk_full(&self) -> bool {
        self.io_failure()
            .is_some_and(|f| f.io_error().kind() == io::ErrorKind::StorageFull)
    }

    /// Returns whether the cause is a permission error (`EACCES`, `EPERM`).
    pub fn is_permission_denied(&self) -> bool {
        self.io_failure()
            .is_some_and(|f| f.io_error().kind() == io::ErrorKind::PermissionDenied)
    }
}

/// An error from [`Log::open`](crate::Log::open). `E` is the replay callback's error type.
#[derive(Debug, Error)]
pub enum OpenError<E> {
    /// The options are inconsistent.
    #[error("invalid log options: {0}")]
    InvalidOptions(String),
    /// Another open log holds the directory's lock.
    #[error(
        "the log directory {} is already in use by another open log (in this or another process)",
        dir.display()
    )]
    Locked {
        /// The log directory.
        dir: PathBuf,
    },
    /// An IO operation failed while opening.
    #[error("opening the log failed while {0}")]
    Io(#[from] IoFailure),
    /// A file is damaged somewhere other than the tail of the newest segment.
    #[error("the log cannot be opened: {0}")]
    Corrupt(#[from] Corruption),
    /// Records are missing: no file holds the records between a snapshot or segment and the
    /// next segment.
    #[error(
        "the log cannot be opened: records {from}..={to} are missing (no snapshot or segment holds them; next file is {})",
        next_file.display()
    )]
    MissingRecords {
        /// The first missing sequence number.
        from: u64,
        /// The last missing sequence number.
        to: u64,
        /// The file that follows the gap.
        next_file: PathBuf,
    },
    /// The replay callback returned an error; opening stopped there.
    #[error("the replay callback failed: {0}")]
    Replay(#[source] E),
}

impl<E> OpenError<E> {
    /// Returns the category of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            OpenError::InvalidOptions(_) => ErrorKind::InvalidInput,
            OpenError::Locked { .. } => ErrorKind::Locked,
            OpenError::Io(_) => ErrorKind::Io,
            OpenError::Corrupt(_) | OpenError::MissingRecords { .. } => ErrorKind::Corrupt,
            OpenError::Replay(_) => ErrorKind::Replay,
        }
    }

    /// Returns whether opening again may succeed without anyone repairing anything: only when
    /// the directory was locked by a log that may since have closed.
    pub fn is_retryable(&self) -> bool {
        self.kind() == ErrorKind::Locked
    }
}

/// An error from [`inspect`](crate::inspect).
#[non_exhaustive]
#[derive(Debug, Error)]
pub enum InspectError {
    /// The directory or one of its files could not be read.
    #[error("inspecting the log failed while {0}")]
    Io(#[from] IoFailure),
}

/// An error from [`repair`](crate::repair).
#[non_exhaustive]
#[derive(Debug, Error)]
pub enum RepairError {
    /// An open log holds the directory's lock.
    #[error(
        "the log directory {} is in use by an open log; close it before repairing",
        dir.display()
    )]
    Locked {
        /// The log directory.
        dir: PathBuf,
    },
    /// An IO operation failed.
    #[error("repairing the log failed while {0}")]
    Io(#[from] IoFailure),
}

impl From<InspectError> for RepairError {
    fn from(e: InspectError) -> Self {
        match e {
            InspectError::Io(f) => RepairError::Io(f),
        }
    }
}
