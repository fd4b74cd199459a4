//! The targets over the log's files: the input becomes a segment or a snapshot in a fresh
//! log directory, which the log's recovery ([`Log::open`]) and its offline checker
//! ([`delayq_log::inspect`]) then read, as after a crash or a damaged disk.
//!
//! Checked for every input: no panic; a refusal to open names the file or the directory; a
//! log that opened once opens again and replays exactly the same items, without cutting
//! anything the second time; and once it has opened, the offline checker finds no problem.

use std::convert::Infallible;
use std::path::Path;

use delayq_log::{FsyncPolicy, Log, LogOptions, OpenError, RecoveryReport, Replayed};

/// Bytes of a frame's header: length (u32 LE), checksum (u32 LE), type (u8).
const FRAME_HEADER_LEN: usize = 9;

/// A segment file, after a flag byte (see the crate doc). It is named after the first
/// sequence number its header gives (1 when there is none, or with bit 1 of the flags set,
/// which lets the name and the header disagree).
pub fn log_segment(data: &[u8]) {
    let Some((file, first_seq)) = prepare(data) else {
        return;
    };
    let dir = scratch();
    std::fs::write(dir.path().join(format!("{first_seq:020}.seg")), &file)
        .expect("write the segment");
    open_twice(dir.path());
}

/// A snapshot file, after a flag byte (see the crate doc), named after the sequence number
/// its header says it covers (as [`log_segment`] names a segment); no segment beside it.
pub fn log_snapshot(data: &[u8]) {
    let Some((file, covers_seq)) = prepare(data) else {
        return;
    };
    let dir = scratch();
    std::fs::write(dir.path().join(format!("{covers_seq:020}.snap")), &file)
        .expect("write the snapshot");
    open_twice(dir.path());
}

/// Splits off the flag byte, fixes the checksums unless told not to, and picks the sequence
/// number of the file's name.
fn prepare(data: &[u8]) -> Option<(Vec<u8>, u64)> {
    let (&flags, bytes) = data.split_first()?;
    let mut file = bytes.to_vec();
    if flags & 1 == 0 {
        fix_checksums(&mut file);
    }
    let seq = if flags & 2 == 0 {
        header_seq(&file).unwrap_or(1)
    } else {
        1
    };
    Some((file, seq))
}

/// Recomputes the checksum of every frame, walking the frames by their length fields, up to
/// the first one that does not fit in the file.
fn fix_checksums(file: &mut [u8]) {
    let mut at = 0usize;
    while let Some(header) = file.get(at..at + FRAME_HEADER_LEN) {
        let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let start = at + FRAME_HEADER_LEN;
        let Some(end) = start.checked_add(len).filter(|&end| end <= file.len()) else {
            break;
        };
        // CRC-32C over the type byte, then the body.
        let crc = crc32c::crc32c_append(crc32c::crc32c(&file[at + 8..start]), &file[start..end]);
        file[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
        at = end;
    }
}

/// The sequence number in the body of the file's first frame (magic, version, seq), if the
/// file is long enough to have one.
fn header_seq(file: &[u8]) -> Option<u64> {
    let seq = file.get(FRAME_HEADER_LEN + 12..FRAME_HEADER_LEN + 20)?;
    Some(u64::from_le_bytes(seq.try_into().ok()?))
}

/// A fresh directory, in `/dev/shm` where there is one: a fuzzer writes and reads thousands
/// of small files a second.
fn scratch() -> tempfile::TempDir {
    let builder = {
        let mut b = tempfile::Builder::new();
        b.prefix("delayq-fuzz-");
        b
    };
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = builder.tempdir_in(shm)
    {
        return dir;
    }
    builder.tempdir().expect("a temporary directory")
}

/// What one open replayed: `(seq, bytes)` of each item (no seq for a snapshot record).
type Replay = Vec<(Option<u64>, Vec<u8>)>;

/// Opens the log in `dir`, collects what it replays, and closes it.
fn open(dir: &Path) -> Result<(Replay, RecoveryReport), OpenError<Infallible>> {
    let mut replayed = Vec::new();
    let options = LogOptions::default().with_fsync(FsyncPolicy::Never);
    let (log, report) = Log::open(dir, options, |item| {
        match item {
            Replayed::Snapshot(bytes) => replayed.push((None, bytes.to_vec())),
            Replayed::Record { seq, bytes } => replayed.push((Some(seq), bytes.to_vec())),
            Replayed::Begin { .. } => {}
        }
        Ok(())
    })?;
    log.close().expect("closing a log that was only opened");
    Ok((replayed, report))
}

fn open_twice(dir: &Path) {
    match open(dir) {
        Ok((first, _)) => {
            let (second, report) = open(dir)
                .unwrap_or_else(|e| panic!("a log that opened once does not open again: {e}"));
            assert_eq!(second, first, "a second open replays something else");
            assert!(
                report.torn_tail.is_none(),
                "the second open cut a tail again: {report:?}"
            );
            // The checker may list a damaged snapshot that the open skipped (its records
            // are all in the segments); nothing else.
            let inspected = delayq_log::inspect(dir).expect("inspect an opened log");
            let skipped: Vec<&Path> = report.skipped_snapshots.iter().map(|c| &*c.file).collect();
            for problem in &inspected.problems {
                assert!(
                    skipped.contains(&problem.file()),
                    "the checker finds a problem in a log that opens: {problem:?}"
                );
            }
        }
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains(&*dir.to_string_lossy()),
                "a refusal that names no file: {text}"
            );
            // The offline checker reads the same directory without panicking.
            let _ = delayq_log::inspect(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A segment the real log wrote, with every checksum spoiled.
    fn spoiled_segment() -> Vec<u8> {
        let dir = tempfile::tempdir().expect("a directory");
        let (log, _) = Log::open(dir.path(), LogOptions::default(), |_| {
            Ok::<(), Infallible>(())
        })
        .expect("open");
        for record in [&b"one"[..], b"two", b"three"] {
            log.append(record)
                .expect("append")
                .wait_blocking()
                .expect("written");
        }
        log.close().expect("close");
        let mut file = std::fs::read(dir.path().join(format!("{:020}.seg", 1))).expect("read");
        let mut at = 0;
        while at + FRAME_HEADER_LEN <= file.len() {
            let len = u32::from_le_bytes(file[at..at + 4].try_into().unwrap()) as usize;
            file[at + 4] ^= 0xFF;
            at += FRAME_HEADER_LEN + len;
        }
        file
    }

    fn replayed(flags: u8, file: &[u8]) -> Result<Replay, String> {
        let mut data = vec![flags];
        data.extend_from_slice(file);
        let (file, seq) = prepare(&data).expect("a flag byte");
        let dir = scratch();
        std::fs::write(dir.path().join(format!("{seq:020}.seg")), &file).expect("write");
        open(dir.path()).map(|(r, _)| r).map_err(|e| e.to_string())
    }

    #[test]
    fn fixed_checksums_let_the_records_through_and_flag_1_keeps_them_spoiled() {
        let file = spoiled_segment();
        let records: Vec<Vec<u8>> = replayed(0, &file)
            .expect("opens")
            .into_iter()
            .map(|(_, bytes)| bytes)
            .collect();
        assert_eq!(records, [&b"one"[..], b"two", b"three"]);
        // As they are: no frame has a valid checksum, so recovery takes the whole file for a
        // torn write and cuts it.
        assert_eq!(replayed(1, &file).expect("opens"), Replay::new());
    }

    #[test]
    fn the_checks_hold_for_a_real_segment_and_a_torn_copy() {
        let file = spoiled_segment();
        for cut in [file.len(), file.len() - 3, 20, 0] {
            let mut data = vec![0u8];
            data.extend_from_slice(&file[..cut]);
            log_segment(&data);
        }
    }
}
