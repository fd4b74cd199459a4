//! The directory lock: one open log per directory, across threads and processes.
//!
//! It is an exclusive `flock(2)` on `dir/LOCK` (std's `File::try_lock`). flock locks belong
//! to the open file description, so a second open in the same process conflicts too, and the
//! kernel releases the lock when the process dies, so a crash never leaves a stale lock.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;

use crate::error::{IoContext, IoFailure, IoOp};

/// The name of the lock file inside the log directory.
pub(crate) const LOCK_FILE: &str = "LOCK";

/// A held lock; dropping it releases the lock.
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: File,
}

/// Why the lock was not taken.
#[derive(Debug)]
pub(crate) enum LockError {
    /// Someone else holds it.
    Held,
    /// The lock file could not be opened or locked.
    Io(IoFailure),
}

/// Takes the lock of `dir` without waiting.
///
/// The lock file is not fsynced into the directory: its existence carries no data.
pub(crate) fn lock_dir(dir: &Path) -> Result<DirLock, LockError> {
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .ctx(IoOp::Lock, &path)
        .map_err(LockError::Io)?;
    match file.try_lock() {
        Ok(()) => Ok(DirLock { _file: file }),
        Err(TryLockError::WouldBlock) => Err(LockError::Held),
        Err(TryLockError::Error(e)) => Err(LockError::Io(IoFailure::new(IoOp::Lock, path, e))),
    }
}
