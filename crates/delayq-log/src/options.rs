//! Options of a log: the fsync policy, segment size and limits.

use std::sync::Arc;
use std::time::Duration;

use crate::frame::MAX_BODY_LEN;
use crate::storage::{RealStorage, Storage};

/// When the writer flushes records to stable storage, and therefore what a crash can lose.
///
/// A crash of the *process* (panic, SIGKILL, OOM kill) loses nothing acknowledged under any
/// policy: an acknowledged record has been handed to the kernel with write(2), and the kernel
/// keeps it. The policies differ for a crash of the *machine* (power loss, kernel panic).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// A ticket completes after an fdatasync that covers its record. Nothing acknowledged is
    /// lost, even by a machine crash. One fdatasync serves a whole group of records, so
    /// throughput grows with the number of concurrent appenders.
    Always,
    /// A ticket completes after write(2); the writer runs fdatasync at most this long after
    /// the first unsynced write (only while there is unsynced data: an idle log does not
    /// wake up). A machine crash can lose what was acknowledged in roughly the last interval
    /// (plus the duration of one fdatasync). After such a crash the unsynced tail may also be
    /// damaged in a way that recovery reports as corruption; [`repair`](crate::repair) cuts it.
    Interval(Duration),
    /// A ticket completes after write(2) and the writer never calls fdatasync on its own
    /// (only at segment rotation, on [`Log::sync`](crate::Log::sync) and on close). What a
    /// machine crash loses is up to the operating system's writeback (typically up to 30 s).
    Never,
}

impl Default for FsyncPolicy {
    /// `Interval(10 ms)`.
    fn default() -> Self {
        FsyncPolicy::Interval(Duration::from_millis(10))
    }
}

/// Options for [`Log::open`](crate::Log::open). Build them from [`LogOptions::default`] with
/// the `with_*` methods.
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// When records are flushed to stable storage. Default `Interval(10 ms)`.
    pub fsync: FsyncPolicy,
    /// A segment is closed and a new one started when the next record would make it larger
    /// than this. A single record larger than this gets a segment of its own. Default 64 MiB.
    pub segment_bytes: u64,
    /// The largest record [`Log::append`](crate::Log::append) accepts. Default 16 MiB; at most
    /// 1 GiB.
    pub max_record_bytes: usize,
    /// How many bytes of records may wait for the writer before `append` blocks until the
    /// writer has taken them (see [`Log::append`](crate::Log::append)). Default 64 MiB.
    pub max_buffered_bytes: usize,
    /// How often a writer stalled by a full disk tries its write again. Default 100 ms.
    pub retry_interval: Duration,
    pub(crate) storage: Arc<dyn Storage>,
}

impl Default for LogOptions {
    fn default() -> Self {
        Self {
            fsync: FsyncPolicy::default(),
            segment_bytes: 64 << 20,
            max_record_bytes: 16 << 20,
            max_buffered_bytes: 64 << 20,
            retry_interval: Duration::from_millis(100),
            storage: Arc::new(RealStorage),
        }
    }
}

impl LogOptions {
    /// Sets the fsync policy.
    pub fn with_fsync(mut self, fsync: FsyncPolicy) -> Self {
        self.fsync = fsync;
        self
    }

    /// Sets the size at which segments are rotated.
    pub fn with_segment_bytes(mut self, bytes: u64) -> Self {
        self.segment_bytes = bytes;
        self
    }

    /// Sets the largest record accepted.
    pub fn with_max_record_bytes(mut self, bytes: usize) -> Self {
        self.max_record_bytes = bytes;
        self
    }

    /// Sets how many bytes may wait for the writer before appends block.
    pub fn with_max_buffered_bytes(mut self, bytes: usize) -> Self {
        self.max_buffered_bytes = bytes;
        self
    }

    /// Sets how often a writer stalled by a full disk tries again.
    pub fn with_retry_interval(mut self, every: Duration) -> Self {
        self.retry_interval = every;
        self
    }

    /// Replaces the file system, for fault-injection tests.
    #[cfg(test)]
    pub(crate) fn with_storage(mut self, storage: Arc<dyn Storage>) -> Self {
        self.storage = storage;
        self
    }

    /// Checks the options for consistency.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.max_record_bytes > MAX_BODY_LEN as usize {
            return Err(format!(
                "max_record_bytes {} is larger than the format's limit of {MAX_BODY_LEN}",
                self.max_record_bytes
            ));
        }
        if self.segment_bytes < 4096 {
            return Err(format!(
                "segment_bytes {} is smaller than the minimum of 4096",
                self.segment_bytes
            ));
        }
        if let FsyncPolicy::Interval(d) = self.fsync
            && d.is_zero()
        {
            return Err("the fsync interval must be larger than zero; use Always instead".into());
        }
        Ok(())
    }
}
