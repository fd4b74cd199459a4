//! delayq's append-only log: opaque byte records, framed and checksummed, written with group
//! commit, compacted by snapshots, recovered after a crash.
//!
//! The log knows nothing about tasks. The queue engine opens one [`Log`] per shard (each in
//! its own directory, each with its own writer thread), appends one record per state change
//! while holding the shard's mutex, and awaits the returned [`Ticket`] outside the mutex.
//!
//! ```no_run
//! use delayq_log::{Log, LogOptions, Replayed};
//!
//! let (log, report) = Log::open("data/shard-0", LogOptions::default(), |item| {
//!     match item {
//!         Replayed::Begin { .. } => { /* size tables */ }
//!         Replayed::Snapshot(bytes) => { /* load state */ }
//!         Replayed::Record { seq, bytes } => { /* apply change */ }
//!     }
//!     Ok::<(), std::convert::Infallible>(())
//! })?;
//! let ticket = log.append(b"a state change")?; // under the caller's mutex
//! let seq = ticket.wait_blocking()?;             // or `ticket.wait().await`
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # On disk
//!
//! A log directory holds segments `<first_seq:020>.seg`, snapshots `<covers_seq:020>.snap`
//! and a `LOCK` file. Every record is one frame:
//!
//! ```text
//! [len: u32 LE][crc32c: u32 LE over type+body][type: u8][body: len bytes]
//! ```
//!
//! A segment starts with a header frame (magic `DQLOGSEG`, format version, first sequence
//! number) followed by record frames; record `i` of the segment has sequence number
//! `first_seq + i`, so sequence numbers are implicit. Sequence numbers start at 1. A segment
//! is closed when the next record would make it larger than `segment_bytes` (64 MiB by
//! default). A snapshot is a header frame (`DQLOGSNP`, version, `covers_seq`), the caller's
//! records, and an end frame (`covers_seq`, record count). The directory is fsynced after
//! every file creation, rename and removal.
//!
//! # Writer and group commit
//!
//! [`Log::append`] never does IO: it encodes the record into a shared buffer under a mutex,
//! assigns the next sequence number and returns a [`Ticket`]. Whoever holds the log's write
//! token takes the whole buffer at once and writes it with one write(2) per segment touched,
//! while appenders fill the next group. Under [`FsyncPolicy::Interval`] and
//! [`FsyncPolicy::Never`] that is usually a **leader**: the first appender that waits on its
//! ticket and finds nobody writing writes the group on its own thread, which saves a
//! hand-off to a thread and back. The log's writer thread does what may block for long or
//! must happen without a waiter: the timed fdatasync of `Interval`, every write and
//! fdatasync under [`FsyncPolicy::Always`] (one fdatasync for the whole group, so
//! throughput grows with concurrency), `sync`, closing, a group nobody waits for, and the
//! retries while the disk is full. An idle log's thread sleeps on a condition variable and
//! costs no CPU. Appends block only for back-pressure, when more than `max_buffered_bytes`
//! (64 MiB by default) wait to be written. The module doc of `writer.rs` gives the details.
//!
//! A write refused for lack of space (`ENOSPC`, `EDQUOT`, `EFBIG`) **stalls** the log
//! instead of failing it: the segment is cut back to its length before the write, the group
//! is kept in memory, the tickets issued so far and during the stall fail with
//! [`LogError::Stalled`] (nothing promises their records will be written), and the write is
//! tried again every `retry_interval`; when it succeeds the log carries on in order.
//! [`Log::stalled`] tells a caller not to add to the backlog meanwhile. Any other IO error
//! (a failed fsync cannot be retried safely) fails the log for good: the pending tickets get
//! a [`LogError`] naming the operation and the file, and every later append fails at once
//! with the same cause.
//!
//! # Loss window per policy
//!
//! A ticket completes, and the record counts as acknowledged:
//!
//! | policy | when | a process crash loses | a machine crash loses |
//! | --- | --- | --- | --- |
//! | `Always` | after the fdatasync covering it | nothing acknowledged | nothing acknowledged |
//! | `Interval(d)` (default 10 ms) | after write(2) | nothing acknowledged | up to ~`d` (+ one fdatasync) of acknowledged records |
//! | `Never` | after write(2) | nothing acknowledged | whatever the OS had not written back |
//!
//! # Recovery
//!
//! [`Log::open`] locks the directory, loads the newest snapshot whose header and end frames
//! are intact, replays its records and then every log record after its covered sequence
//! number, in order. A torn tail (an incomplete or damaged frame at the end of the newest
//! segment with nothing valid after it) is an interrupted write: it is cut and reported in
//! the [`RecoveryReport`]. Damage anywhere else, or records missing between files, is an
//! error that names the file and byte offset; nothing is skipped silently. [`inspect`] shows
//! the same findings without changing anything, and [`repair`] cuts the log back to its
//! valid prefix when explicitly asked.
//!
//! # Snapshots
//!
//! [`Log::write_snapshot`] writes the caller's state as of a sequence number to a temporary
//! file, fdatasyncs it, renames it into place and fsyncs the directory; then it removes the
//! segments whose records it all covers and the older snapshots, so disk use stays bounded.
//! Appends continue meanwhile.

mod error;
mod frame;
mod inspect;
mod layout;
mod lock;
mod log;
mod options;
mod recovery;
mod segment;
mod snapshot;
mod storage;
mod ticket;
mod writer;

#[cfg(test)]
mod fault_tests;

pub use error::{
    Corruption, ErrorKind, FrameProblem, InspectError, IoFailure, IoOp, LogError, OpenError,
    RepairError,
};
pub use inspect::{
    InspectReport, Problem, RepairAction, RepairOptions, RepairReport, SegmentInfo, SnapshotInfo,
    inspect, repair,
};
pub use log::{Log, LogStats, SnapshotReport};
pub use options::{FsyncPolicy, LogOptions};
pub use recovery::{RecoveryReport, Replayed, TornTail};
pub use ticket::{Ticket, Wait};
