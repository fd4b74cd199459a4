//! Opening a log: choose a snapshot, replay it and the segments after it, cut a torn tail,
//! and prepare the newest segment for appending.
//!
//! The rules:
//! - The newest snapshot whose header and end frames are intact is used; newer ones whose
//!   ends are damaged are skipped and reported. Damage inside the chosen snapshot is an error.
//! - Segments whose records are all covered by the snapshot are not read (and are removed).
//!   The others must follow each other without a gap; a gap is an error that names it.
//! - Damage in any segment but the newest, or damage in the newest one that is followed by
//!   a valid frame, is an error naming the file and offset. Damage at the end of the newest
//!   segment with nothing valid after it is a torn tail: an interrupted write. It is cut and
//!   reported. A newest segment whose header itself is torn is removed.
//! - Records are replayed in sequence order: first the snapshot's, then every log record
//!   after the snapshot's covered sequence number.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Corruption, IoContext, IoFailure, IoOp, OpenError};
use crate::layout::{self, Listing, header};
use crate::options::LogOptions;
use crate::segment::{self, ScanError};
use crate::snapshot::{self, SnapshotMeta};
use crate::writer::{Active, Files, SegmentMeta};

/// One item handed to the replay callback of [`Log::open`](crate::Log::open).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replayed<'a> {
    /// First, once: how much is coming, for the caller to size its tables before the records
    /// arrive. A hint: the log's records are not counted ahead, only its size.
    Begin {
        /// How many records the chosen snapshot holds (0 without one).
        snapshot_records: u64,
        /// The bytes of the segments that will be read after it.
        log_bytes: u64,
    },
    /// One record of the snapshot, in the order they were given to
    /// [`Log::write_snapshot`](crate::Log::write_snapshot). All snapshot records come first.
    Snapshot(&'a [u8]),
    /// One log record appended after the snapshot was taken, in sequence order.
    Record {
        /// The record's sequence number.
        seq: u64,
        /// The record as it was appended.
        bytes: &'a [u8],
    },
}

/// A torn tail that recovery cut from the newest segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The segment that was cut.
    pub file: PathBuf,
    /// Where it was cut: the offset of the first incomplete or damaged frame.
    pub offset: u64,
    /// How many bytes were cut.
    pub bytes_cut: u64,
}

/// What [`Log::open`](crate::Log::open) found and did.
#[non_exhaustive]
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    /// The snapshot replayed, if any.
    pub snapshot: Option<PathBuf>,
    /// The last sequence number the snapshot covers (0 without a snapshot).
    pub snapshot_covers_seq: u64,
    /// Records replayed from the snapshot.
    pub snapshot_records: u64,
    /// Segments read.
    pub segments_read: usize,
    /// Log records replayed (after the snapshot).
    pub records_replayed: u64,
    /// The last sequence number in the log; the next append gets the one after it.
    pub last_seq: u64,
    /// The torn tail that was cut, if there was one.
    pub torn_tail: Option<TornTail>,
    /// Newer snapshots that were skipped because their header or end was damaged.
    pub skipped_snapshots: Vec<Corruption>,
    /// Obsolete files removed: segments covered by the snapshot, older snapshots, leftover
    /// temporary files, and a newest segment whose header was torn.
    pub removed_files: Vec<PathBuf>,
    /// How long opening took.
    pub elapsed: Duration,
}

/// The result of recovery: what the writer needs to continue.
pub(crate) struct Recovered {
    pub(crate) report: RecoveryReport,
    pub(crate) next_seq: u64,
    pub(crate) files: Files,
    pub(crate) active: Active,
    pub(crate) segment_len: u64,
}

/// Replays the log in `dir` (already locked) into `replay`, repairs a torn tail, and opens
/// the newest segment for appending.
pub(crate) fn recover<E>(
    dir: &Path,
    options: &LogOptions,
    replay: &mut dyn FnMut(crate::Replayed<'_>) -> Result<(), E>,
) -> Result<Recovered, OpenError<E>> {
    let started = Instant::now();
    let mut report = RecoveryReport::default();
    let listing = layout::list(dir)?;

    let snapshot = choose_snapshot(&listing, &mut report)?;
    let covers = snapshot.as_ref().map_or(0, |s| s.covers_seq);
    let segments = &listing.segments;
    // Segments all of whose records the snapshot covers: the next segment starts at or
    // before covers + 1. The newest segment is never obsolete.
    let obsolete = segments
        .windows(2)
        .take_while(|w| w[1].0 <= covers + 1)
        .count();
    // A size that cannot be read counts 0: it is only a hint, and reading the segment
    // reports the failure.
    let log_bytes = segments[obsolete..]
        .iter()
        .map(|(_, path)| std::fs::metadata(path).map_or(0, |m| m.len()))
        .sum();
    replay(crate::Replayed::Begin {
        snapshot_records: snapshot.as_ref().map_or(0, |s| s.records),
        log_bytes,
    })
    .map_err(OpenError::Replay)?;
    if let Some(snap) = &snapshot {
        let records = snapshot::read(&snap.path, covers, |body| {
            replay(crate::Replayed::Snapshot(body))
        })
        .map_err(scan_error)?;
        report.snapshot = Some(snap.path.clone());
        report.snapshot_covers_seq = covers;
        report.snapshot_records = records;
    }

    let replayed = SegmentReplay {
        dir,
        options,
        covers,
        replay,
        report: &mut report,
    }
    .run(&segments[obsolete..])?;
    if let Some(error) = replayed.gap {
        // A gap behind a skipped, damaged snapshot is best explained by that damage.
        return Err(match report.skipped_snapshots.first() {
            Some(damage) => OpenError::Corrupt(damage.clone()),
            None => error,
        });
    }
    let next_seq = replayed.next_seq;
    // A skipped snapshot held the records up to its covered seq; when the segments do not
    // reach that far, some of them were only in it, and opening without them would lose
    // them silently (found by fuzzing: a damaged snapshot with no segment beside it).
    let skipped_covers = listing.snapshots.last().map_or(0, |(c, _)| *c);
    if skipped_covers >= next_seq
        && let Some(damage) = report.skipped_snapshots.first()
    {
        return Err(OpenError::Corrupt(damage.clone()));
    }
    report.last_seq = next_seq - 1;

    remove_obsolete(
        dir,
        options,
        &listing,
        obsolete,
        snapshot.as_ref(),
        &mut report,
    )?;

    let mut live = replayed.live;
    let (active, segment_len) =
        open_active(dir, options, &mut live, replayed.newest_end, next_seq)?;
    report.elapsed = started.elapsed();
    Ok(Recovered {
        report,
        next_seq,
        files: Files {
            segments: live,
            snapshot,
        },
        active,
        segment_len,
    })
}

/// What replaying the segments after the snapshot found.
struct ReplayedSegments<E> {
    /// The segments that remain, in order, with their valid lengths.
    live: Vec<SegmentMeta>,
    /// The sequence number the next append gets.
    next_seq: u64,
    /// One past the last record of the newest segment read.
    newest_end: u64,
    /// A gap in the sequence before a segment; reading stopped there.
    gap: Option<OpenError<E>>,
}

/// Replays the log records that follow a snapshot (or all of them, without one).
struct SegmentReplay<'a, E> {
    dir: &'a Path,
    options: &'a LogOptions,
    /// The last sequence number the snapshot covers: records up to it are not replayed.
    covers: u64,
    replay: &'a mut dyn FnMut(crate::Replayed<'_>) -> Result<(), E>,
    report: &'a mut RecoveryReport,
}

impl<E> SegmentReplay<'_, E> {
    /// Replays every record after `covers` from `segments` (sorted, obsolete ones already left
    /// out), checking that they follow each other without a gap or overlap and cutting a torn
    /// tail of the newest one.
    fn run(mut self, segments: &[(u64, PathBuf)]) -> Result<ReplayedSegments<E>, OpenError<E>> {
        let covers = self.covers;
        let mut out = ReplayedSegments {
            live: Vec::new(),
            next_seq: covers + 1,
            newest_end: 0,
            gap: None,
        };
        for (index, (first_seq, path)) in segments.iter().enumerate() {
            let is_newest = index + 1 == segments.len();
            if *first_seq > out.next_seq {
                out.gap = Some(OpenError::MissingRecords {
                    from: out.next_seq,
                    to: first_seq - 1,
                    next_file: path.clone(),
                });
                break;
            }
            if !out.live.is_empty() && *first_seq < out.next_seq {
                return Err(OpenError::Corrupt(Corruption {
                    file: path.clone(),
                    offset: 0,
                    problem: crate::FrameProblem::BadHeader(
                        "first seq overlaps the records of the previous segment",
                    ),
                }));
            }
            let Some((records, valid_len)) = self.segment(path, *first_seq, is_newest)? else {
                continue;
            };
            out.newest_end = first_seq + records;
            out.next_seq = out.next_seq.max(out.newest_end);
            out.live.push(SegmentMeta {
                first_seq: *first_seq,
                path: path.clone(),
                bytes: valid_len,
            });
        }
        Ok(out)
    }

    /// Replays one segment's records after `covers`. Returns its record count and valid length,
    /// or `None` when it was a newest segment whose header was torn (it is removed).
    fn segment(
        &mut self,
        path: &Path,
        first_seq: u64,
        is_newest: bool,
    ) -> Result<Option<(u64, u64)>, OpenError<E>> {
        let (covers, replay, report) = (self.covers, &mut *self.replay, &mut *self.report);
        let (dir, options) = (self.dir, self.options);
        let mut replayed = 0;
        let scan = segment::scan(path, first_seq, |seq, bytes| {
            if seq > covers {
                replay(crate::Replayed::Record { seq, bytes })?;
                replayed += 1;
            }
            Ok(())
        })
        .map_err(scan_error)?;
        report.records_replayed += replayed;
        report.segments_read += 1;
        let Some(damage) = scan.damage else {
            return Ok(Some((scan.records, scan.file_len)));
        };
        if !(is_newest && damage.torn) {
            return Err(OpenError::Corrupt(Corruption {
                file: path.to_path_buf(),
                offset: damage.offset,
                problem: damage.problem,
            }));
        }
        report.torn_tail = Some(TornTail {
            file: path.to_path_buf(),
            offset: damage.offset,
            bytes_cut: scan.file_len - damage.offset,
        });
        if damage.offset < header::HEADER_FRAME_LEN as u64 {
            // Not even the header survived: the segment holds nothing.
            options.storage.remove_file(path).ctx(IoOp::Remove, path)?;
            options.storage.sync_dir(dir).ctx(IoOp::SyncDir, dir)?;
            report.removed_files.push(path.to_path_buf());
            return Ok(None);
        }
        truncate(path, damage.offset)?;
        Ok(Some((scan.records, damage.offset)))
    }
}

/// Opens the segment appends go to: the newest one if it ends exactly where the log does;
/// otherwise (no segment yet, or the snapshot covers more than the segments hold) a new one,
/// which joins `live`.
fn open_active(
    dir: &Path,
    options: &LogOptions,
    live: &mut Vec<SegmentMeta>,
    newest_end: u64,
    next_seq: u64,
) -> Result<(Active, u64), IoFailure> {
    if let Some(newest) = live.last().filter(|_| newest_end == next_seq) {
        let file = options
            .storage
            .open_append(&newest.path)
            .ctx(IoOp::OpenSegment, &newest.path)?;
        let active = Active {
            file,
            path: newest.path.clone(),
            len: newest.bytes,
        };
        return Ok((active, newest.bytes));
    }
    let (active, len) = create_segment(dir, options, next_seq)?;
    live.push(SegmentMeta {
        first_seq: next_seq,
        path: active.path.clone(),
        bytes: len,
    });
    Ok((active, len))
}

/// Picks the newest snapshot whose header and end frames are intact.
fn choose_snapshot<E>(
    listing: &Listing,
    report: &mut RecoveryReport,
) -> Result<Option<SnapshotMeta>, OpenError<E>> {
    for (covers, path) in listing.snapshots.iter().rev() {
        match snapshot::check_ends(path, *covers)? {
            Ok(meta) => return Ok(Some(meta)),
            Err(damage) => report.skipped_snapshots.push(damage),
        }
    }
    Ok(None)
}

fn scan_error<E>(e: ScanError<E>) -> OpenError<E> {
    match e {
        ScanError::Io(f) => OpenError::Io(f),
        ScanError::Callback(e) => OpenError::Replay(e),
        ScanError::Corrupt(c) => OpenError::Corrupt(c),
    }
}

/// Cuts `path` to `len` bytes, durably.
fn truncate(path: &Path, len: u64) -> Result<(), IoFailure> {
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .ctx(IoOp::Truncate, path)?;
    file.set_len(len).ctx(IoOp::Truncate, path)?;
    file.sync_all().ctx(IoOp::Truncate, path)
}

/// Removes files the chosen snapshot made obsolete, and leftover temporary files.
fn remove_obsolete(
    dir: &Path,
    options: &LogOptions,
    listing: &Listing,
    obsolete_segments: usize,
    snapshot: Option<&SnapshotMeta>,
    report: &mut RecoveryReport,
) -> Result<(), IoFailure> {
    let covers = snapshot.map_or(0, |s| s.covers_seq);
    let older_snapshots = listing
        .snapshots
        .iter()
        .filter(|(seq, _)| snapshot.is_some() && *seq < covers)
        .map(|(_, path)| path);
    let doomed: Vec<&PathBuf> = listing.segments[..obsolete_segments]
        .iter()
        .map(|(_, path)| path)
        .chain(older_snapshots)
        .chain(listing.temps.iter())
        .collect();
    for path in &doomed {
        options.storage.remove_file(path).ctx(IoOp::Remove, path)?;
        report.removed_files.push(path.to_path_buf());
    }
    if !doomed.is_empty() {
        options.storage.sync_dir(dir).ctx(IoOp::SyncDir, dir)?;
    }
    Ok(())
}

/// Creates the segment whose first record will be `first_seq`, with its header, durably.
pub(crate) fn create_segment(
    dir: &Path,
    options: &LogOptions,
    first_seq: u64,
) -> Result<(Active, u64), IoFailure> {
    let path = dir.join(layout::segment_name(first_seq));
    let mut file = options
        .storage
        .create_new(&path)
        .ctx(IoOp::CreateSegment, &path)?;
    let mut head = Vec::new();
    header::encode_segment(&mut head, first_seq);
    file.write_all(&head).ctx(IoOp::WriteSegment, &path)?;
    file.sync_data().ctx(IoOp::SyncSegment, &path)?;
    options.storage.sync_dir(dir).ctx(IoOp::SyncDir, dir)?;
    let len = head.len() as u64;
    Ok((Active { file, path, len }, len))
}
