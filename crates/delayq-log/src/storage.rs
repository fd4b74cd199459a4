//! The file operations the writer and the snapshot code use, behind a small trait.
//!
//! Production uses [`RealStorage`], a thin layer over `std::fs`. Tests substitute a wrapper
//! that fails writes or syncs on command, stops after a number of bytes, and remembers which
//! bytes were synced so that it can simulate a machine crash (see `fault_tests`). Reading
//! (recovery, inspection) is not behind the trait: it is checked by damaging real files.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::path::Path;

/// The file system as the log's writers see it.
pub(crate) trait Storage: Send + Sync + fmt::Debug {
    /// Creates a file that must not exist yet (a new segment).
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn WriteFile>>;
    /// Creates a file, replacing any file of that name (a snapshot's temporary file).
    fn create_truncate(&self, path: &Path) -> io::Result<Box<dyn WriteFile>>;
    /// Opens an existing file for appending (the newest segment after recovery).
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WriteFile>>;
    /// Makes the directory's entries (created, renamed, removed files) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Renames a file, replacing the target.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
}

/// A file open for writing at its end.
pub(crate) trait WriteFile: Send {
    /// Writes all of `buf` at the end of the file (several write(2) calls if needed).
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Flushes the file's data and size to stable storage (fdatasync).
    fn sync_data(&mut self) -> io::Result<()>;
    /// Cuts the file to `len` bytes and makes the next write land there: how a write that
    /// failed part way (a full disk) is taken back before it is tried again.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
}

/// The real file system.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RealStorage;

impl WriteFile for File {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        Write::write_all(self, buf)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        File::sync_data(self)
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.set_len(len)?;
        // A file opened for appending writes at its end anyway; one created for writing
        // keeps its own position, which must come back too or the next write leaves a hole.
        self.seek(SeekFrom::Start(len)).map(|_| ())
    }
}

impl Storage for RealStorage {
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        Ok(Box::new(
            OpenOptions::new().write(true).create_new(true).open(path)?,
        ))
    }

    fn create_truncate(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        Ok(Box::new(File::create(path)?))
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        Ok(Box::new(OpenOptions::new().append(true).open(path)?))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
}
