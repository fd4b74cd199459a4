//! The frame codec: how one record is laid out in a segment or snapshot file.
//!
//! A frame is `[len: u32 LE][crc32c: u32 LE][type: u8][body: len bytes]`. `len` counts the
//! body only; the checksum covers the type byte and the body, so a frame whose type byte was
//! damaged does not pass for another kind of frame. The codec is pure: it encodes into a
//! `Vec<u8>` and decodes from a byte slice. [`FrameReader`] adds streaming over any
//! [`Read`] for files that are too large to hold in memory (snapshots).

use std::io::{self, Read};

use crate::error::FrameProblem;

/// Bytes in front of every body: length, checksum and type.
pub(crate) const HEADER_LEN: usize = 9;

/// The largest body the decoder accepts. Anything larger is treated as a damaged length
/// field rather than an allocation request. `LogOptions::max_record_bytes` is capped by it.
pub(crate) const MAX_BODY_LEN: u32 = 1 << 30;

/// The kinds of frame. Unknown kinds are damage, not something to skip.
pub(crate) mod kind {
    /// First frame of a segment file: magic, format version, first sequence number.
    pub(crate) const SEGMENT_HEADER: u8 = 0x01;
    /// One caller record in a segment.
    pub(crate) const RECORD: u8 = 0x02;
    /// First frame of a snapshot file: magic, format version, covered sequence number.
    pub(crate) const SNAPSHOT_HEADER: u8 = 0x11;
    /// One caller record in a snapshot.
    pub(crate) const SNAPSHOT_RECORD: u8 = 0x12;
    /// Last frame of a snapshot file: covered sequence number and record count.
    pub(crate) const SNAPSHOT_END: u8 = 0x13;

    /// Whether `ty` is a frame type this version writes.
    pub(crate) fn is_known(ty: u8) -> bool {
        matches!(
            ty,
            SEGMENT_HEADER | RECORD | SNAPSHOT_HEADER | SNAPSHOT_RECORD | SNAPSHOT_END
        )
    }
}

/// The number of bytes a frame with a body of `body_len` bytes takes on disk.
pub(crate) fn frame_len(body_len: usize) -> usize {
    HEADER_LEN + body_len
}

/// The checksum stored in a frame: CRC-32C over the type byte followed by the body.
pub(crate) fn checksum(ty: u8, body: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&[ty]), body)
}

/// Appends one frame to `out`. The caller has checked `body.len() <= MAX_BODY_LEN`.
pub(crate) fn encode(out: &mut Vec<u8>, ty: u8, body: &[u8]) {
    debug_assert!(body.len() <= MAX_BODY_LEN as usize);
    out.reserve(frame_len(body.len()));
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&checksum(ty, body).to_le_bytes());
    out.push(ty);
    out.extend_from_slice(body);
}

/// What [`decode`] found at the start of a byte slice.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decoded<'a> {
    /// A whole, valid frame of `len` bytes in total.
    Frame { ty: u8, body: &'a [u8], len: usize },
    /// The slice ends inside the frame; `needed` is the frame's full length when the header
    /// was readable, or [`HEADER_LEN`] when it was not.
    Incomplete { needed: usize },
    /// The bytes are not a frame.
    Bad(FrameProblem),
}

/// Decodes the frame at the start of `buf`.
pub(crate) fn decode(buf: &[u8]) -> Decoded<'_> {
    let Some(header) = buf.get(..HEADER_LEN) else {
        return Decoded::Incomplete { needed: HEADER_LEN };
    };
    let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
    let stored = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
    let ty = header[8];
    if len > MAX_BODY_LEN {
        return Decoded::Bad(FrameProblem::BadLength { len });
    }
    let total = frame_len(len as usize);
    let Some(body) = buf.get(HEADER_LEN..total) else {
        return Decoded::Incomplete { needed: total };
    };
    let computed = checksum(ty, body);
    if computed != stored {
        return Decoded::Bad(FrameProblem::BadChecksum { stored, computed });
    }
    if !kind::is_known(ty) {
        return Decoded::Bad(FrameProblem::UnknownType { ty });
    }
    Decoded::Frame {
        ty,
        body,
        len: total,
    }
}

/// Whether a valid frame starts anywhere in `buf` at an offset of at least one byte.
///
/// Recovery uses it to tell a torn tail (garbage up to the end of the file) from damage in
/// the middle of the log (a valid frame follows the bad one).
pub(crate) fn valid_frame_after(buf: &[u8]) -> Option<usize> {
    (1..buf.len()).find(|&at| matches!(decode(&buf[at..]), Decoded::Frame { .. }))
}

/// One step of a [`FrameReader`].
#[derive(Debug)]
pub(crate) enum Next<'a> {
    /// A valid frame starting at file offset `offset`.
    Frame { offset: u64, ty: u8, body: &'a [u8] },
    /// The file ends inside the frame starting at `offset`: `available` bytes of it exist.
    Truncated { offset: u64, available: usize },
    /// The bytes at `offset` are not a frame.
    Bad { offset: u64, problem: FrameProblem },
    /// The file ends exactly after the previous frame.
    End,
}

/// Reads frames one after another from a file without holding the whole file in memory.
///
/// After a `Truncated` or `Bad` step the reader stays at the damaged offset; callers stop.
pub(crate) struct FrameReader<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// File offset of `buf[start]`.
    offset: u64,
    eof: bool,
}

const READ_CHUNK: usize = 1 << 20;

impl<R: Read> FrameReader<R> {
    /// Starts reading `inner`, whose current position is file offset `offset`.
    pub(crate) fn new(inner: R, offset: u64) -> Self {
        Self {
            inner,
            buf: vec![0; READ_CHUNK],
            start: 0,
            end: 0,
            offset,
            eof: false,
        }
    }

    /// The file offset of the next frame.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// Reads until at least `want` bytes are buffered from `start`, or the file ends.
    fn fill(&mut self, want: usize) -> io::Result<()> {
        while self.end - self.start < want && !self.eof {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            // Grow only as the file delivers bytes, doubling: `want` comes from a length field
            // that a damaged file can set to anything up to MAX_BODY_LEN, and a torn 9-byte
            // tail must not cost a gigabyte of zeroes.
            if self.end == self.buf.len() {
                let grow = self.buf.len().max(READ_CHUNK);
                self.buf.resize(self.buf.len() + grow, 0);
            }
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Decodes the next frame, reading more of the file as needed.
    pub(crate) fn next_frame(&mut self) -> io::Result<Next<'_>> {
        self.fill(HEADER_LEN)?;
        if self.start == self.end {
            return Ok(Next::End);
        }
        let needed = match decode(&self.buf[self.start..self.end]) {
            Decoded::Incomplete { needed } => needed,
            _ => HEADER_LEN,
        };
        self.fill(needed)?;
        let offset = self.offset;
        match decode(&self.buf[self.start..self.end]) {
            Decoded::Frame { ty, len, .. } => {
                let body = &self.buf[self.start + HEADER_LEN..self.start + len];
                self.start += len;
                self.offset += len as u64;
                Ok(Next::Frame { offset, ty, body })
            }
            Decoded::Incomplete { .. } => Ok(Next::Truncated {
                offset,
                available: self.end - self.start,
            }),
            Decoded::Bad(problem) => Ok(Next::Bad { offset, problem }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_length_field_in_a_short_file_allocates_only_what_the_file_holds() {
        let mut file = frame(kind::RECORD, b"x");
        file[0..4].copy_from_slice(&(MAX_BODY_LEN - 1).to_le_bytes());
        let mut reader = FrameReader::new(&file[..], 0);
        match reader.next_frame().unwrap() {
            Next::Truncated {
                offset: 0,
                available,
            } => assert_eq!(available, file.len()),
            other => panic!("{other:?}"),
        }
        assert!(reader.buf.len() <= READ_CHUNK, "{} bytes", reader.buf.len());
    }

    #[test]
    fn frames_larger_than_the_read_chunk_are_read_whole() {
        let body = vec![7u8; READ_CHUNK * 2 + 5];
        let mut file = frame(kind::RECORD, &body);
        file.extend(frame(kind::RECORD, b"next"));
        let mut reader = FrameReader::new(&file[..], 0);
        match reader.next_frame().unwrap() {
            Next::Frame { body: b, .. } => assert_eq!(b, &body[..]),
            other => panic!("{other:?}"),
        }
        match reader.next_frame().unwrap() {
            Next::Frame { body: b, .. } => assert_eq!(b, b"next"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(reader.next_frame().unwrap(), Next::End));
    }

    fn frame(ty: u8, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode(&mut out, ty, body);
        out
    }

    fn with_len(mut bytes: Vec<u8>, len: u32) -> Vec<u8> {
        bytes[0..4].copy_from_slice(&len.to_le_bytes());
        bytes
    }

    fn flip(mut bytes: Vec<u8>, at: usize) -> Vec<u8> {
        bytes[at] ^= 0x40;
        bytes
    }

    #[derive(Debug, PartialEq)]
    enum Want {
        Frame(u8, Vec<u8>, usize),
        Incomplete(usize),
        BadLength,
        BadChecksum,
        UnknownType,
    }

    fn observe(input: &[u8]) -> Want {
        match decode(input) {
            Decoded::Frame { ty, body, len } => Want::Frame(ty, body.to_vec(), len),
            Decoded::Incomplete { needed } => Want::Incomplete(needed),
            Decoded::Bad(FrameProblem::BadLength { .. }) => Want::BadLength,
            Decoded::Bad(FrameProblem::BadChecksum { .. }) => Want::BadChecksum,
            Decoded::Bad(FrameProblem::UnknownType { .. }) => Want::UnknownType,
            Decoded::Bad(other) => panic!("decode never reports {other:?}"),
        }
    }

    #[test]
    fn decode_table() {
        let good = frame(kind::RECORD, b"hello");
        let mut unknown = good.clone();
        unknown[8] = 0x7f;
        unknown[4..8].copy_from_slice(&checksum(0x7f, b"hello").to_le_bytes());
        let mut two = good.clone();
        two.extend_from_slice(&frame(kind::RECORD, b"next"));
        let hello = || Want::Frame(kind::RECORD, b"hello".to_vec(), 14);

        let cases: Vec<(&str, Vec<u8>, Want)> = vec![
            ("good", good.clone(), hello()),
            (
                "empty body",
                frame(kind::RECORD, b""),
                Want::Frame(kind::RECORD, vec![], 9),
            ),
            ("followed by another", two, hello()),
            ("empty input", vec![], Want::Incomplete(HEADER_LEN)),
            (
                "truncated header",
                good[..5].to_vec(),
                Want::Incomplete(HEADER_LEN),
            ),
            ("header only", good[..9].to_vec(), Want::Incomplete(14)),
            ("truncated body", good[..13].to_vec(), Want::Incomplete(14)),
            ("bad crc in body", flip(good.clone(), 10), Want::BadChecksum),
            ("bad crc field", flip(good.clone(), 5), Want::BadChecksum),
            (
                "damaged type byte",
                flip(good.clone(), 8),
                Want::BadChecksum,
            ),
            (
                "absurd length",
                with_len(good.clone(), u32::MAX),
                Want::BadLength,
            ),
            (
                "length just over the cap",
                with_len(good.clone(), MAX_BODY_LEN + 1),
                Want::BadLength,
            ),
            (
                "length longer than input",
                with_len(good.clone(), 100),
                Want::Incomplete(109),
            ),
            (
                "length shorter, crc mismatch",
                with_len(good.clone(), 2),
                Want::BadChecksum,
            ),
            ("zeros", vec![0; 32], Want::BadChecksum),
            ("unknown type with valid crc", unknown, Want::UnknownType),
        ];
        for (name, input, want) in cases {
            assert_eq!(observe(&input), want, "{name}");
        }
    }

    #[test]
    fn finds_valid_frame_after_garbage() {
        let mut buf = vec![0xff; 7];
        buf.extend_from_slice(&frame(kind::RECORD, b"x"));
        assert_eq!(valid_frame_after(&buf), Some(7));
        assert_eq!(valid_frame_after(&[0u8; 64]), None);
        assert_eq!(valid_frame_after(&buf[..buf.len() - 1]), None);
    }

    #[test]
    fn reader_streams_frames_larger_than_its_buffer() {
        let big = vec![7u8; READ_CHUNK * 2 + 3];
        let mut file = frame(kind::RECORD, b"a");
        file.extend_from_slice(&frame(kind::RECORD, &big));
        file.extend_from_slice(&frame(kind::RECORD, b"b"));
        let mut r = FrameReader::new(&file[..], 0);
        let mut bodies = Vec::new();
        loop {
            match r.next_frame().unwrap() {
                Next::Frame { body, .. } => bodies.push(body.len()),
                Next::End => break,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(bodies, vec![1, big.len(), 1]);
        assert_eq!(r.offset(), file.len() as u64);
    }

    #[test]
    fn reader_reports_truncation_and_damage_with_offsets() {
        let mut file = frame(kind::RECORD, b"first");
        let second_at = file.len() as u64;
        file.extend_from_slice(&frame(kind::RECORD, b"second"));
        let cut = &file[..file.len() - 2];
        let mut r = FrameReader::new(cut, 0);
        assert!(matches!(
            r.next_frame().unwrap(),
            Next::Frame { offset: 0, .. }
        ));
        match r.next_frame().unwrap() {
            Next::Truncated { offset, available } => {
                assert_eq!(offset, second_at);
                assert_eq!(available, 13);
            }
            other => panic!("{other:?}"),
        }
        let damaged = flip(file.clone(), second_at as usize + 10);
        let mut r = FrameReader::new(&damaged[..], 0);
        r.next_frame().unwrap();
        assert!(matches!(
            r.next_frame().unwrap(),
            Next::Bad { offset, problem: FrameProblem::BadChecksum { .. } } if offset == second_at
        ));
    }
}
