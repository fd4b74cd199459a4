//! Reading one segment file: its header, its records, and where (if anywhere) it is damaged.
//!
//! A segment is a header frame followed by record frames. Scanning stops at the first frame
//! that is not valid and describes it as [`Damage`]. Whether damage is a torn tail (to be cut)
//! or corruption (an error) depends on where the segment is in the log, so the scan only
//! reports the facts: the offset, the problem, and whether any valid frame follows it.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use crate::error::{Corruption, FrameProblem, IoContext, IoFailure, IoOp};
use crate::frame::{self, FrameReader, Next, kind};
use crate::layout::header;

/// The first damaged frame of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Damage {
    /// Byte offset of the damaged frame.
    pub(crate) offset: u64,
    /// What is wrong with it.
    pub(crate) problem: FrameProblem,
    /// True when it looks like an interrupted write: a frame-level problem (short, bad
    /// length, bad checksum) with no valid frame anywhere after it. Only such damage at the
    /// end of the newest segment is cut; anything else is corruption.
    pub(crate) torn: bool,
}

/// What scanning a segment found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SegmentScan {
    /// Valid records, in order.
    pub(crate) records: u64,
    /// Bytes up to the end of the last valid frame.
    pub(crate) valid_len: u64,
    /// Size of the file.
    pub(crate) file_len: u64,
    /// The first damage, if the scan did not reach the end cleanly.
    pub(crate) damage: Option<Damage>,
}

/// Why a scan stopped early.
#[derive(Debug)]
pub(crate) enum ScanError<E> {
    /// Reading failed.
    Io(IoFailure),
    /// The record callback returned an error.
    Callback(E),
    /// The file is damaged (only for files that cannot have a torn tail: snapshots).
    Corrupt(Corruption),
}

impl<E> From<IoFailure> for ScanError<E> {
    fn from(f: IoFailure) -> Self {
        ScanError::Io(f)
    }
}

/// Reads the segment at `path`, whose name says it starts at `first_seq`, calling
/// `on_record(seq, body)` for every valid record before the first damage.
pub(crate) fn scan<E>(
    path: &Path,
    first_seq: u64,
    mut on_record: impl FnMut(u64, &[u8]) -> Result<(), E>,
) -> Result<SegmentScan, ScanError<E>> {
    let file = File::open(path).ctx(IoOp::Read, path)?;
    let file_len = file.metadata().ctx(IoOp::Read, path)?.len();
    let mut reader = FrameReader::new(file, 0);
    let mut records = 0u64;
    let damage = loop {
        let at_header = reader.offset() == 0;
        let step = reader.next_frame().ctx(IoOp::Read, path)?;
        let (offset, problem, frame_level) = match step {
            Next::End if at_header => (0, FrameProblem::Truncated { available: 0 }, true),
            Next::End => break None,
            Next::Truncated { offset, available } => {
                (offset, FrameProblem::Truncated { available }, true)
            }
            Next::Bad { offset, problem } => (offset, problem, true),
            Next::Frame { offset, ty, body } if at_header => {
                if ty != kind::SEGMENT_HEADER {
                    (offset, FrameProblem::UnexpectedType { ty }, false)
                } else {
                    match header::decode_segment(body) {
                        Ok(seq) if seq == first_seq => continue,
                        Ok(_) => (
                            offset,
                            FrameProblem::BadHeader("first seq differs from the file name"),
                            false,
                        ),
                        Err(why) => (offset, FrameProblem::BadHeader(why), false),
                    }
                }
            }
            Next::Frame { ty, body, .. } if ty == kind::RECORD => {
                on_record(first_seq + records, body).map_err(ScanError::Callback)?;
                records += 1;
                continue;
            }
            Next::Frame { offset, ty, .. } => (offset, FrameProblem::UnexpectedType { ty }, false),
        };
        let torn = frame_level && !valid_frame_after(path, offset).ctx(IoOp::Read, path)?;
        break Some(Damage {
            offset,
            problem,
            torn,
        });
    };
    let valid_len = damage.as_ref().map_or(file_len, |d| d.offset);
    Ok(SegmentScan {
        records,
        valid_len,
        file_len,
        damage,
    })
}

/// Whether a valid frame starts anywhere after the damaged frame at `offset`.
fn valid_frame_after(path: &Path, offset: u64) -> io::Result<bool> {
    let mut file = File::open(path)?;
    file.seek(SeekFrom::Start(offset))?;
    let mut rest = Vec::new();
    file.read_to_end(&mut rest)?;
    Ok(frame::valid_frame_after(&rest).is_some())
}
