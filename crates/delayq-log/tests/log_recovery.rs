//! Recovery from damaged files: torn tails are cut, damage elsewhere is an error that names
//! the file and offset; `inspect` sees the same, `repair` cuts back to the valid prefix.

mod support;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use delayq_log::{
    ErrorKind, FrameProblem, FsyncPolicy, LogOptions, OpenError, Problem, RepairAction,
    RepairOptions, inspect, repair,
};
use support::{open, record, small_segments};

const HEADER: u64 = 29;
const BODY: usize = 40;
const FRAME: u64 = 9 + BODY as u64;

fn files_with(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_str().unwrap().ends_with(ext))
        .collect();
    files.sort();
    files
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

fn flip_byte(path: &Path, offset: u64) {
    let mut bytes = fs::read(path).unwrap();
    bytes[offset as usize] ^= 0x55;
    fs::write(path, bytes).unwrap();
}

fn truncate(path: &Path, len: u64) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

/// Writes `n` records of `BODY` bytes with 4 KiB segments, closes, returns them.
fn fill(dir: &Path, n: u64) -> Vec<Vec<u8>> {
    let (log, _, _) = open(dir, small_segments().with_fsync(FsyncPolicy::Always)).unwrap();
    let records: Vec<Vec<u8>> = (0..n).map(|i| record(i, BODY)).collect();
    log.append_batch(&records).unwrap().wait_blocking().unwrap();
    log.close().unwrap();
    records
}

#[test]
fn torn_tail_is_cut_at_every_byte_offset_of_the_last_records() {
    let source = tempfile::tempdir().unwrap();
    // 100 records of 49 bytes fill 4 KiB segments with 83 records each: the newest segment
    // holds the last 17 records.
    let records = fill(source.path(), 100);
    let segments = files_with(source.path(), ".seg");
    assert_eq!(segments.len(), 2);
    let newest_name = segments[1].file_name().unwrap().to_owned();
    let in_newest = 17u64;
    let len = fs::metadata(&segments[1]).unwrap().len();
    assert_eq!(len, HEADER + in_newest * FRAME);

    // Every offset of the header and first record, and of the last two records.
    let cuts = (0..HEADER + FRAME).chain(len - 2 * FRAME..=len);
    for cut in cuts {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(source.path(), dir.path());
        let newest = dir.path().join(&newest_name);
        truncate(&newest, cut);
        let whole = if cut < HEADER {
            0
        } else {
            (cut - HEADER) / FRAME
        };
        let expected = (100 - in_newest + whole) as usize;

        let (log, report, replay) =
            open(dir.path(), small_segments()).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert_eq!(replay.all(), records[..expected], "cut at {cut}");
        assert_eq!(report.last_seq, expected as u64, "cut at {cut}");
        let clean_cut = cut == len || (cut >= HEADER && (cut - HEADER).is_multiple_of(FRAME));
        match &report.torn_tail {
            None => assert!(clean_cut, "cut at {cut}: torn tail not reported"),
            Some(torn) => {
                assert!(!clean_cut, "cut at {cut}: clean file reported torn");
                assert_eq!(torn.file, newest);
                let valid = if cut < HEADER {
                    0
                } else {
                    HEADER + whole * FRAME
                };
                assert_eq!(
                    (torn.offset, torn.bytes_cut),
                    (valid, cut - valid),
                    "cut {cut}"
                );
            }
        }
        // The log continues right after what survived.
        let seq = log.append(b"after").unwrap().wait_blocking().unwrap();
        assert_eq!(seq, expected as u64 + 1, "cut at {cut}");
        log.close().unwrap();
        let (_, report, replay) = open(dir.path(), small_segments()).unwrap();
        assert!(report.torn_tail.is_none(), "cut at {cut}");
        assert_eq!(replay.all().len(), expected + 1);
        assert_eq!(replay.all().last().unwrap(), b"after");
    }
}

#[test]
fn garbage_or_zeros_after_the_last_record_are_a_torn_tail() {
    for tail in [vec![0u8; 4096], vec![0xab; 100], vec![0xff; 3]] {
        let dir = tempfile::tempdir().unwrap();
        let records = fill(dir.path(), 10);
        let segment = files_with(dir.path(), ".seg").pop().unwrap();
        let len = fs::metadata(&segment).unwrap().len();
        OpenOptions::new()
            .append(true)
            .open(&segment)
            .unwrap()
            .write_all(&tail)
            .unwrap();
        let (_, report, replay) = open(dir.path(), small_segments()).unwrap();
        assert_eq!(replay.all(), records);
        let torn = report.torn_tail.unwrap();
        assert_eq!((torn.offset, torn.bytes_cut), (len, tail.len() as u64));
        assert_eq!(fs::metadata(&segment).unwrap().len(), len);
    }
}

#[test]
fn damage_in_an_older_segment_is_an_error_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 200);
    let first = files_with(dir.path(), ".seg").remove(0);
    let offset = HEADER + 2 * FRAME;
    flip_byte(&first, offset + 12);

    let err = open(dir.path(), small_segments()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt);
    let OpenError::Corrupt(c) = &err else {
        panic!("{err}")
    };
    assert_eq!((&c.file, c.offset), (&first, offset));
    assert!(matches!(c.problem, FrameProblem::BadChecksum { .. }));
    let message = err.to_string();
    assert!(message.contains(first.to_str().unwrap()), "{message}");
    assert!(
        message.contains(&format!("byte offset {offset}")),
        "{message}"
    );
    // Nothing was changed by the failed open.
    assert_eq!(files_with(dir.path(), ".seg").len(), 3);

    let found = inspect(dir.path()).unwrap();
    assert_eq!(found.first_problem().unwrap().file(), first);
    assert_eq!(found.first_problem().unwrap().offset(), offset);
}

#[test]
fn a_bad_length_in_an_older_segment_is_an_error_too() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 200);
    let first = files_with(dir.path(), ".seg").remove(0);
    let offset = HEADER + 5 * FRAME;
    let mut bytes = fs::read(&first).unwrap();
    bytes[offset as usize..offset as usize + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    fs::write(&first, bytes).unwrap();
    match open(dir.path(), small_segments()) {
        Err(OpenError::Corrupt(c)) => {
            assert_eq!((c.file, c.offset), (first, offset));
            assert!(matches!(
                c.problem,
                FrameProblem::BadLength { len: u32::MAX }
            ));
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
}

#[test]
fn damage_in_the_newest_segment_followed_by_valid_records_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 20);
    let segment = files_with(dir.path(), ".seg").pop().unwrap();
    let offset = HEADER + 7 * FRAME;
    flip_byte(&segment, offset + 20);
    match open(dir.path(), small_segments()) {
        Err(OpenError::Corrupt(c)) => assert_eq!((c.file, c.offset), (segment, offset)),
        other => panic!("{:?}", other.map(|_| ())),
    }
}

#[test]
fn repair_cuts_at_the_first_damage_and_sets_later_segments_aside() {
    let dir = tempfile::tempdir().unwrap();
    let records = fill(dir.path(), 200);
    let segments = files_with(dir.path(), ".seg");
    let offset = HEADER + 10 * FRAME;
    flip_byte(&segments[0], offset + 3);

    let dry = repair(dir.path(), RepairOptions::default().with_dry_run(true)).unwrap();
    assert!(dry.after.is_none());
    assert_eq!(dry.actions.len(), 3);
    assert_eq!(
        files_with(dir.path(), ".seg").len(),
        3,
        "a dry run changes nothing"
    );

    let done = repair(dir.path(), RepairOptions::default()).unwrap();
    assert_eq!(done.actions, dry.actions);
    assert!(matches!(
        &done.actions[0],
        RepairAction::Truncated { file, offset: o, .. } if *file == segments[0] && *o == offset
    ));
    assert!(done.after.as_ref().unwrap().is_clean());
    assert_eq!(files_with(dir.path(), ".discarded").len(), 3);

    let (_, _, replay) = open(dir.path(), small_segments()).unwrap();
    assert_eq!(replay.all(), records[..10]);
}

#[test]
fn a_missing_segment_is_an_error_naming_the_gap() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 200);
    let segments = files_with(dir.path(), ".seg");
    fs::remove_file(&segments[1]).unwrap();
    match open(dir.path(), small_segments()) {
        Err(OpenError::MissingRecords {
            from,
            to,
            next_file,
        }) => {
            assert_eq!((from, to), (84, 166));
            assert_eq!(next_file, segments[2]);
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    let found = inspect(dir.path()).unwrap();
    assert!(matches!(
        found.first_problem(),
        Some(Problem::MissingRecords { from: 84, .. })
    ));
}

#[test]
fn a_snapshot_with_a_damaged_end_falls_back_to_the_older_one() {
    let dir = tempfile::tempdir().unwrap();
    // One big segment, so no segment is removed by the snapshots.
    let (log, _, _) = open(dir.path(), LogOptions::default()).unwrap();
    let mut state = Vec::new();
    for i in 0..10 {
        state.push(record(i, 20));
        log.append(state.last().unwrap()).unwrap();
    }
    log.write_snapshot(10, &state).unwrap();
    let older = files_with(dir.path(), ".snap").remove(0);
    let older_bytes = fs::read(&older).unwrap();
    for i in 10..20 {
        state.push(record(i, 20));
        log.append(state.last().unwrap()).unwrap();
    }
    log.write_snapshot(20, &state).unwrap();
    log.close().unwrap();
    fs::write(&older, older_bytes).unwrap();
    let newer = files_with(dir.path(), ".snap").pop().unwrap();
    let len = fs::metadata(&newer).unwrap().len();
    flip_byte(&newer, len - 3);

    let (_, report, replay) = open(dir.path(), LogOptions::default()).unwrap();
    assert_eq!(report.snapshot_covers_seq, 10);
    assert_eq!(report.skipped_snapshots.len(), 1);
    assert_eq!(report.skipped_snapshots[0].file, newer);
    assert_eq!(replay.all(), state);
}

#[test]
fn damage_inside_the_snapshot_in_use_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _, _) = open(dir.path(), small_segments()).unwrap();
    let state: Vec<Vec<u8>> = (0..200).map(|i| record(i, BODY)).collect();
    log.append_batch(&state).unwrap();
    log.sync().unwrap();
    log.write_snapshot(200, &state).unwrap();
    log.close().unwrap();
    let snapshot = files_with(dir.path(), ".snap").pop().unwrap();
    let offset = HEADER + 50 * FRAME;
    flip_byte(&snapshot, offset + 15);
    match open(dir.path(), small_segments()) {
        Err(OpenError::Corrupt(c)) => assert_eq!((c.file, c.offset), (snapshot, offset)),
        other => panic!("{:?}", other.map(|_| ())),
    }
}

#[test]
fn a_damaged_end_with_no_older_snapshot_to_fall_back_on_is_reported_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _, _) = open(dir.path(), small_segments()).unwrap();
    let state: Vec<Vec<u8>> = (0..200).map(|i| record(i, BODY)).collect();
    log.append_batch(&state).unwrap();
    log.sync().unwrap();
    log.write_snapshot(200, &state).unwrap();
    log.close().unwrap();
    let snapshot = files_with(dir.path(), ".snap").pop().unwrap();
    let len = fs::metadata(&snapshot).unwrap().len();
    truncate(&snapshot, len - 1);
    match open(dir.path(), small_segments()) {
        Err(OpenError::Corrupt(c)) => assert_eq!(c.file, snapshot),
        other => panic!("{:?}", other.map(|_| ())),
    }
}

#[test]
fn a_damaged_snapshot_whose_records_no_segment_holds_stops_the_open() {
    // Found by fuzzing (fuzz/crashes/log_snapshot/): the records a skipped snapshot covered
    // were silently missing when no segment reached as far as it did.
    let dir = tempfile::tempdir().unwrap();
    let (log, _, _) = open(dir.path(), LogOptions::default()).unwrap();
    let state: Vec<Vec<u8>> = (0..5).map(|i| record(i, 20)).collect();
    for r in &state {
        log.append(r).unwrap();
    }
    log.write_snapshot(5, &state).unwrap();
    log.close().unwrap();
    // The segment is lost and the snapshot's end damaged.
    for segment in files_with(dir.path(), ".seg") {
        fs::remove_file(segment).unwrap();
    }
    let snapshot = files_with(dir.path(), ".snap").pop().unwrap();
    let len = fs::metadata(&snapshot).unwrap().len();
    flip_byte(&snapshot, len - 3);
    match open(dir.path(), LogOptions::default()) {
        Err(OpenError::Corrupt(c)) => assert_eq!(c.file, snapshot),
        other => panic!(
            "opened without the snapshot's records: {:?}",
            other.map(|r| r.2.all())
        ),
    }
}

#[test]
fn leftover_temporary_snapshot_files_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 5);
    let temp = dir.path().join("00000000000000000003.snap.tmp");
    fs::write(&temp, b"half a snapshot").unwrap();
    assert_eq!(inspect(dir.path()).unwrap().temp_files, vec![temp.clone()]);
    let (_, report, replay) = open(dir.path(), small_segments()).unwrap();
    assert_eq!(replay.all().len(), 5);
    assert!(report.removed_files.contains(&temp));
    assert!(!temp.exists());
}

#[test]
fn inspect_counts_records_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 200);
    let segment = files_with(dir.path(), ".seg").pop().unwrap();
    let len = fs::metadata(&segment).unwrap().len();
    truncate(&segment, len - 5);
    let found = inspect(dir.path()).unwrap();
    assert_eq!(found.segments.iter().map(|s| s.records).sum::<u64>(), 199);
    assert_eq!(found.last_seq, 199);
    assert!(matches!(found.first_problem(), Some(Problem::TornTail(t)) if t.offset == len - FRAME));
    assert_eq!(fs::metadata(&segment).unwrap().len(), len - 5);
}
