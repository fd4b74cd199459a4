//! Snapshots: the caller's whole state as of one sequence number, in one file.
//!
//! A snapshot file is a header frame (magic, version, `covers_seq`), one frame per record the
//! caller handed over, and an end frame (`covers_seq`, record count). It is written to
//! `<covers_seq>.snap.tmp`, fdatasynced, renamed to `<covers_seq>.snap` and the directory is
//! fsynced, so a `.snap` file is always complete unless the disk damaged it: a snapshot never
//! has a torn tail, and any damage in it is reported as corruption. Opening checks the header
//! and end frames of the newest snapshot cheaply before replaying it, and falls back to an
//! older one when they are damaged.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::error::{Corruption, FrameProblem, IoContext, IoFailure, IoOp};
use crate::frame::{self, Decoded, FrameReader, MAX_BODY_LEN, Next, kind};
use crate::layout::{self, header};
use crate::segment::ScanError;
use crate::storage::{Storage, WriteFile};

/// A snapshot on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SnapshotMeta {
    /// The last sequence number whose effect the snapshot contains.
    pub(crate) covers_seq: u64,
    /// The snapshot file.
    pub(crate) path: PathBuf,
    /// Its size.
    pub(crate) bytes: u64,
    /// How many records it holds.
    pub(crate) records: u64,
}

/// How much is buffered before a write(2).
const WRITE_CHUNK: usize = 1 << 20;

/// Writes a snapshot of `records` covering `covers_seq` into `dir`, durably.
pub(crate) fn write<R: AsRef<[u8]>>(
    storage: &dyn Storage,
    dir: &Path,
    covers_seq: u64,
    records: impl IntoIterator<Item = R>,
) -> Result<SnapshotMeta, IoFailure> {
    let temp = dir.join(layout::snapshot_temp_name(covers_seq));
    let path = dir.join(layout::snapshot_name(covers_seq));
    let mut file = storage
        .create_truncate(&temp)
        .ctx(IoOp::WriteSnapshot, &temp)?;
    let written = write_frames(&mut *file, &temp, covers_seq, records);
    drop(file);
    let (bytes, count) = match written {
        Ok(done) => done,
        Err(e) => {
            // Best effort: a leftover temp file is removed on the next open anyway.
            let _ = storage.remove_file(&temp);
            return Err(e);
        }
    };
    storage.rename(&temp, &path).ctx(IoOp::Rename, &temp)?;
    storage.sync_dir(dir).ctx(IoOp::SyncDir, dir)?;
    Ok(SnapshotMeta {
        covers_seq,
        path,
        bytes,
        records: count,
    })
}

/// Writes header, records and end frame, then fdatasyncs. Returns (bytes, records).
fn write_frames<R: AsRef<[u8]>>(
    file: &mut dyn WriteFile,
    temp: &Path,
    covers_seq: u64,
    records: impl IntoIterator<Item = R>,
) -> Result<(u64, u64), IoFailure> {
    let mut buf = Vec::with_capacity(WRITE_CHUNK * 2);
    let mut bytes = 0u64;
    let mut count = 0u64;
    header::encode_snapshot(&mut buf, covers_seq);
    for record in records {
        let record = record.as_ref();
        if record.len() > MAX_BODY_LEN as usize {
            let e = io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a snapshot record of {} bytes is larger than 1 GiB",
                    record.len()
                ),
            );
            return Err(IoFailure::new(IoOp::WriteSnapshot, temp, e));
        }
        frame::encode(&mut buf, kind::SNAPSHOT_RECORD, record);
        count += 1;
        if buf.len() >= WRITE_CHUNK {
            file.write_all(&buf).ctx(IoOp::WriteSnapshot, temp)?;
            bytes += buf.len() as u64;
            buf.clear();
        }
    }
    header::encode_snapshot_end(&mut buf, covers_seq, count);
    file.write_all(&buf).ctx(IoOp::WriteSnapshot, temp)?;
    bytes += buf.len() as u64;
    file.sync_data().ctx(IoOp::SyncSnapshot, temp)?;
    Ok((bytes, count))
}

/// Checks the header and end frames of a snapshot without reading its records.
///
/// Returns the snapshot's description, or the damage found.
pub(crate) fn check_ends(
    path: &Path,
    covers_seq: u64,
) -> Result<Result<SnapshotMeta, Corruption>, IoFailure> {
    let mut file = File::open(path).ctx(IoOp::Read, path)?;
    let len = file.metadata().ctx(IoOp::Read, path)?.len();
    let corrupt = |offset, problem| {
        Ok(Err(Corruption {
            file: path.to_path_buf(),
            offset,
            problem,
        }))
    };
    let mut head = vec![0u8; header::HEADER_FRAME_LEN];
    let min_len = (header::HEADER_FRAME_LEN + header::SNAPSHOT_END_LEN) as u64;
    if len < min_len {
        return corrupt(
            0,
            FrameProblem::Truncated {
                available: len as usize,
            },
        );
    }
    file.read_exact(&mut head).ctx(IoOp::Read, path)?;
    match decode_header(&head, covers_seq) {
        Ok(()) => {}
        Err(problem) => return corrupt(0, problem),
    }
    let end_at = len - header::SNAPSHOT_END_LEN as u64;
    let mut end = vec![0u8; header::SNAPSHOT_END_LEN];
    file.seek(SeekFrom::Start(end_at)).ctx(IoOp::Read, path)?;
    file.read_exact(&mut end).ctx(IoOp::Read, path)?;
    match decode_end(&end, covers_seq) {
        Ok(records) => Ok(Ok(SnapshotMeta {
            covers_seq,
            path: path.to_path_buf(),
            bytes: len,
            records,
        })),
        Err(problem) => corrupt(end_at, problem),
    }
}

fn decode_header(bytes: &[u8], covers_seq: u64) -> Result<(), FrameProblem> {
    match frame::decode(bytes) {
        Decoded::Frame { ty, body, .. } if ty == kind::SNAPSHOT_HEADER => {
            match header::decode_snapshot(body) {
                Ok(seq) if seq == covers_seq => Ok(()),
                Ok(_) => Err(FrameProblem::BadHeader(
                    "covered seq differs from the file name",
                )),
                Err(why) => Err(FrameProblem::BadHeader(why)),
            }
        }
        Decoded::Frame { ty, .. } => Err(FrameProblem::UnexpectedType { ty }),
        Decoded::Incomplete { .. } => Err(FrameProblem::Truncated {
            available: bytes.len(),
        }),
        Decoded::Bad(problem) => Err(problem),
    }
}

fn decode_end(bytes: &[u8], covers_seq: u64) -> Result<u64, FrameProblem> {
    match frame::decode(bytes) {
        Decoded::Frame { ty, body, .. } if ty == kind::SNAPSHOT_END => {
            match header::decode_snapshot_end(body) {
                Ok((seq, records)) if seq == covers_seq => Ok(records),
                Ok(_) => Err(FrameProblem::BadEnd("covered seq differs from the header")),
                Err(why) => Err(FrameProblem::BadEnd(why)),
            }
        }
        Decoded::Frame { .. } | Decoded::Incomplete { .. } => Err(FrameProblem::BadEnd(
            "the file does not end with an end frame",
        )),
        Decoded::Bad(problem) => Err(problem),
    }
}

/// Reads every record of the snapshot at `path`, checking every frame.
///
/// Returns the number of records.
pub(crate) fn read<E>(
    path: &Path,
    covers_seq: u64,
    mut on_record: impl FnMut(&[u8]) -> Result<(), E>,
) -> Result<u64, ScanError<E>> {
    let file = File::open(path).ctx(IoOp::Read, path)?;
    let mut reader = FrameReader::new(file, 0);
    let mut count = 0u64;
    let corrupt = |offset, problem| {
        ScanError::Corrupt(Corruption {
            file: path.to_path_buf(),
            offset,
            problem,
        })
    };
    match reader.next_frame().ctx(IoOp::Read, path)? {
        Next::Frame { ty, body, .. } if ty == kind::SNAPSHOT_HEADER => {
            match header::decode_snapshot(body) {
                Ok(seq) if seq == covers_seq => {}
                Ok(_) => {
                    let why = "covered seq differs from the file name";
                    return Err(corrupt(0, FrameProblem::BadHeader(why)));
                }
                Err(why) => return Err(corrupt(0, FrameProblem::BadHeader(why))),
            }
        }
        other => return Err(step_problem(other, 0, corrupt)),
    }
    loop {
        let at = reader.offset();
        match reader.next_frame().ctx(IoOp::Read, path)? {
            Next::Frame { ty, body, .. } if ty == kind::SNAPSHOT_RECORD => {
                on_record(body).map_err(ScanError::Callback)?;
                count += 1;
            }
            Next::Frame { offset, ty, body } if ty == kind::SNAPSHOT_END => {
                match header::decode_snapshot_end(body) {
                    Ok((seq, n)) if seq == covers_seq && n == count => {}
                    Ok(_) => {
                        let why = "covered seq or record count does not match";
                        return Err(corrupt(offset, FrameProblem::BadEnd(why)));
                    }
                    Err(why) => return Err(corrupt(offset, FrameProblem::BadEnd(why))),
                }
                let after = reader.offset();
                return match reader.next_frame().ctx(IoOp::Read, path)? {
                    Next::End => Ok(count),
                    _ => Err(corrupt(
                        after,
                        FrameProblem::BadEnd("data after the end frame"),
                    )),
                };
            }
            other => return Err(step_problem(other, at, corrupt)),
        }
    }
}

/// Turns a reader step that is not what a snapshot should contain into corruption.
fn step_problem<E>(
    step: Next<'_>,
    at: u64,
    corrupt: impl Fn(u64, FrameProblem) -> ScanError<E>,
) -> ScanError<E> {
    match step {
        Next::Frame { offset, ty, .. } => corrupt(offset, FrameProblem::UnexpectedType { ty }),
        Next::Truncated { offset, available } => {
            corrupt(offset, FrameProblem::Truncated { available })
        }
        Next::Bad { offset, problem } => corrupt(offset, problem),
        Next::End => corrupt(
            at,
            FrameProblem::BadEnd("the file ends without an end frame"),
        ),
    }
}
