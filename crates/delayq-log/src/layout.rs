//! What lives in a log directory and what the files are called.
//!
//! - `<first_seq:020>.seg`: a segment, whose records have sequence numbers `first_seq`,
//!   `first_seq + 1`, ... in file order.
//! - `<covers_seq:020>.snap`: a snapshot of the caller's state after record `covers_seq`.
//! - `<covers_seq:020>.snap.tmp`: a snapshot being written; a leftover one is removed on open.
//! - `LOCK`: the directory lock.
//!
//! Zero-padded names sort in sequence order. Any other file is left alone (the repair tool
//! sets damaged files aside under names ending in `.discarded`).

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{IoContext, IoFailure, IoOp};

const SEGMENT_EXT: &str = ".seg";
const SNAPSHOT_EXT: &str = ".snap";
const TEMP_EXT: &str = ".snap.tmp";

/// The file name of the segment whose first record is `first_seq`.
pub(crate) fn segment_name(first_seq: u64) -> String {
    format!("{first_seq:020}{SEGMENT_EXT}")
}

/// The file name of the snapshot covering records up to `covers_seq`.
pub(crate) fn snapshot_name(covers_seq: u64) -> String {
    format!("{covers_seq:020}{SNAPSHOT_EXT}")
}

/// The file name of the temporary file a snapshot is written to before it is renamed.
pub(crate) fn snapshot_temp_name(covers_seq: u64) -> String {
    format!("{covers_seq:020}{TEMP_EXT}")
}

/// Parses the 20-digit sequence number in front of `ext`.
fn parse_seq(name: &str, ext: &str) -> Option<u64> {
    let digits = name.strip_suffix(ext)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The files of a log directory, sorted by sequence number.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// `(first_seq, path)` of every segment.
    pub(crate) segments: Vec<(u64, PathBuf)>,
    /// `(covers_seq, path)` of every snapshot.
    pub(crate) snapshots: Vec<(u64, PathBuf)>,
    /// Leftover temporary snapshot files.
    pub(crate) temps: Vec<PathBuf>,
}

/// Lists `dir`.
pub(crate) fn list(dir: &Path) -> Result<Listing, IoFailure> {
    let mut listing = Listing::default();
    for entry in fs::read_dir(dir).ctx(IoOp::ListDir, dir)? {
        let entry = entry.ctx(IoOp::ListDir, dir)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = entry.path();
        if let Some(seq) = parse_seq(name, SEGMENT_EXT) {
            listing.segments.push((seq, path));
        } else if let Some(seq) = parse_seq(name, SNAPSHOT_EXT) {
            listing.snapshots.push((seq, path));
        } else if parse_seq(name, TEMP_EXT).is_some() {
            listing.temps.push(path);
        }
    }
    listing.segments.sort();
    listing.snapshots.sort();
    Ok(listing)
}

/// Fixed parts of the header frames.
pub(crate) mod header {
    use crate::frame::{self, kind};

    const SEGMENT_MAGIC: &[u8; 8] = b"DQLOGSEG";
    const SNAPSHOT_MAGIC: &[u8; 8] = b"DQLOGSNP";
    const VERSION: u32 = 1;
    const BODY_LEN: usize = 8 + 4 + 8;

    /// Bytes of the header frame at the start of every segment and snapshot.
    pub(crate) const HEADER_FRAME_LEN: usize = frame::HEADER_LEN + BODY_LEN;
    /// Bytes of the end frame of every snapshot.
    pub(crate) const SNAPSHOT_END_LEN: usize = frame::HEADER_LEN + 16;

    fn encode(out: &mut Vec<u8>, ty: u8, magic: &[u8; 8], seq: u64) {
        let mut body = [0u8; BODY_LEN];
        body[..8].copy_from_slice(magic);
        body[8..12].copy_from_slice(&VERSION.to_le_bytes());
        body[12..].copy_from_slice(&seq.to_le_bytes());
        frame::encode(out, ty, &body);
    }

    fn decode(body: &[u8], magic: &[u8; 8]) -> Result<u64, &'static str> {
        if body.len() != BODY_LEN || &body[..8] != magic {
            return Err("wrong magic: not a delayq log file");
        }
        if body[8..12] != VERSION.to_le_bytes() {
            return Err("unsupported format version");
        }
        Ok(u64::from_le_bytes(body[12..].try_into().expect("8 bytes")))
    }

    /// Appends the header frame of the segment starting at `first_seq`.
    pub(crate) fn encode_segment(out: &mut Vec<u8>, first_seq: u64) {
        encode(out, kind::SEGMENT_HEADER, SEGMENT_MAGIC, first_seq);
    }

    /// Reads the first sequence number from a segment header's body.
    pub(crate) fn decode_segment(body: &[u8]) -> Result<u64, &'static str> {
        decode(body, SEGMENT_MAGIC)
    }

    /// Appends the header frame of a snapshot covering `covers_seq`.
    pub(crate) fn encode_snapshot(out: &mut Vec<u8>, covers_seq: u64) {
        encode(out, kind::SNAPSHOT_HEADER, SNAPSHOT_MAGIC, covers_seq);
    }

    /// Reads the covered sequence number from a snapshot header's body.
    pub(crate) fn decode_snapshot(body: &[u8]) -> Result<u64, &'static str> {
        decode(body, SNAPSHOT_MAGIC)
    }

    /// Appends the end frame of a snapshot.
    pub(crate) fn encode_snapshot_end(out: &mut Vec<u8>, covers_seq: u64, records: u64) {
        let mut body = [0u8; 16];
        body[..8].copy_from_slice(&covers_seq.to_le_bytes());
        body[8..].copy_from_slice(&records.to_le_bytes());
        frame::encode(out, kind::SNAPSHOT_END, &body);
    }

    /// Reads `(covers_seq, records)` from a snapshot end frame's body.
    pub(crate) fn decode_snapshot_end(body: &[u8]) -> Result<(u64, u64), &'static str> {
        if body.len() != 16 {
            return Err("end frame of the wrong size");
        }
        Ok((
            u64::from_le_bytes(body[..8].try_into().expect("8 bytes")),
            u64::from_le_bytes(body[8..].try_into().expect("8 bytes")),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sort() {
        assert_eq!(segment_name(42), "00000000000000000042.seg");
        assert_eq!(
            parse_seq(&segment_name(u64::MAX), SEGMENT_EXT),
            Some(u64::MAX)
        );
        assert_eq!(parse_seq(&snapshot_name(7), SNAPSHOT_EXT), Some(7));
        assert_eq!(parse_seq(&snapshot_temp_name(7), TEMP_EXT), Some(7));
        assert!(segment_name(9) < segment_name(10));
        for bad in [
            "42.seg",
            "0000000000000000004x.seg",
            "00000000000000000042.seg.discarded",
        ] {
            assert_eq!(parse_seq(bad, SEGMENT_EXT), None, "{bad}");
        }
        // A temp file is not a snapshot.
        assert_eq!(parse_seq(&snapshot_temp_name(7), SNAPSHOT_EXT), None);
    }
}
