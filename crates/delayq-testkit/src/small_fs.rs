//! A small file system of the test's own, to fill up for real: a size-limited `tmpfs` mounted
//! on a fresh temporary directory, unmounted when dropped.
//!
//! Mounting needs root (or `CAP_SYS_ADMIN`); the machines the suite runs on have it, and
//! [`SmallFs::mount`] says clearly when it is missing. A tmpfs refuses a write that needs a
//! page it cannot have with `ENOSPC` at write(2) time, never later at fsync, which is the
//! case the log can recover from; [`SmallFs::fill`] takes every free page with a filler file
//! and [`SmallFs::free`] gives them back.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

/// A size-limited tmpfs mounted on a temporary directory.
pub struct SmallFs {
    dir: Option<TempDir>,
    mounted: bool,
}

impl SmallFs {
    /// Mounts a tmpfs of `bytes` (rounded up to pages by the kernel) on a new temporary
    /// directory. Fails with the `mount` command's own message when mounting is not allowed.
    pub fn mount(bytes: u64) -> Result<SmallFs, String> {
        let dir = tempfile::Builder::new()
            .prefix("delayq-small-fs-")
            .tempdir()
            .map_err(|e| format!("creating the mount point: {e}"))?;
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={bytes},mode=0755"))
            .arg("delayq-test")
            .arg(dir.path())
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "mount -t tmpfs -o size={bytes} failed ({}): {}; the disk tests need root or \
                 CAP_SYS_ADMIN to make a small file system",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(SmallFs {
            dir: Some(dir),
            mounted: true,
        })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        self.dir.as_ref().expect("mounted").path()
    }

    fn filler(&self) -> PathBuf {
        self.path().join("filler")
    }

    /// Takes every free byte with a filler file (appending to it if it exists) and returns
    /// how many bytes it added. Afterwards a write that needs a new page fails with `ENOSPC`.
    pub fn fill(&self) -> io::Result<u64> {
        let mut file = File::options()
            .create(true)
            .append(true)
            .open(self.filler())?;
        let chunk = vec![0xA5u8; 64 << 10];
        let mut added = 0u64;
        let mut len = chunk.len();
        // Smaller and smaller writes, so the last partial page is taken too.
        while len > 0 {
            match file.write(&chunk[..len]) {
                Ok(0) => break,
                Ok(n) => added += n as u64,
                Err(e) if e.kind() == io::ErrorKind::StorageFull => len /= 2,
                Err(e) => return Err(e),
            }
        }
        Ok(added)
    }

    /// Removes the filler file: the space [`SmallFs::fill`] took is free again.
    pub fn free(&self) -> io::Result<()> {
        match std::fs::remove_file(self.filler()) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    /// Bytes still free, as `df` would say (from `stat -f`).
    pub fn available(&self) -> u64 {
        let output = Command::new("stat")
            .args(["-f", "-c", "%a %S"])
            .arg(self.path())
            .output()
            .expect("run stat -f");
        let text = String::from_utf8_lossy(&output.stdout);
        let mut parts = text
            .split_whitespace()
            .map(|p| p.parse::<u64>().unwrap_or(0));
        parts.next().unwrap_or(0) * parts.next().unwrap_or(0)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        if self.mounted {
            // Lazy: a process the test failed to stop may still hold files open in it.
            let _ = Command::new("umount").arg("-l").arg(self.path()).status();
            self.mounted = false;
        }
        if let Some(dir) = self.dir.take() {
            let _ = dir.close();
        }
    }
}
