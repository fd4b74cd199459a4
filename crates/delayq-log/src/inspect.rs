//! Offline tools: [`inspect`] reads a log directory without changing it, [`repair`] cuts it
//! back to its last consistent state when asked to.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{Corruption, InspectError, IoContext, IoFailure, IoOp, RepairError};
use crate::layout::{self, header};
use crate::lock::{self, LockError};
use crate::recovery::TornTail;
use crate::segment::{self, ScanError};
use crate::snapshot;

/// One segment file as [`inspect`] found it.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    /// The file.
    pub path: PathBuf,
    /// The sequence number of its first record.
    pub first_seq: u64,
    /// Valid records before any damage.
    pub records: u64,
    /// Size of the file.
    pub bytes: u64,
    /// Bytes up to the end of the last valid record.
    pub valid_bytes: u64,
}

/// One snapshot file as [`inspect`] found it.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The file.
    pub path: PathBuf,
    /// The last sequence number it covers.
    pub covers_seq: u64,
    /// Valid records before any damage.
    pub records: u64,
    /// Size of the file.
    pub bytes: u64,
    /// The damage found, if any.
    pub damage: Option<Corruption>,
}

/// Something wrong with a log directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The newest segment ends in an incomplete or damaged record with nothing valid after
    /// it. Opening the log cuts it automatically.
    TornTail(TornTail),
    /// A file is damaged; opening the log fails with this.
    Corrupt(Corruption),
    /// No file holds these records; opening the log fails with this.
    MissingRecords {
        /// The first missing sequence number.
        from: u64,
        /// The last missing sequence number.
        to: u64,
        /// The file after the gap.
        next_file: PathBuf,
    },
}

impl Problem {
    /// Returns the file the problem is in (for a gap, the file after it).
    pub fn file(&self) -> &Path {
        match self {
            Problem::TornTail(t) => &t.file,
            Problem::Corrupt(c) => &c.file,
            Problem::MissingRecords { next_file, .. } => next_file,
        }
    }

    /// Returns the byte offset of the problem inside [`Problem::file`].
    pub fn offset(&self) -> u64 {
        match self {
            Problem::TornTail(t) => t.offset,
            Problem::Corrupt(c) => c.offset,
            Problem::MissingRecords { .. } => 0,
        }
    }
}

/// What [`inspect`] found in a log directory.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InspectReport {
    /// The directory.
    pub dir: PathBuf,
    /// Segment files in order, including ones the snapshot makes obsolete (which the next
    /// open removes, and whose damage is therefore not listed as a problem).
    pub segments: Vec<SegmentInfo>,
    /// Snapshot files in order.
    pub snapshots: Vec<SnapshotInfo>,
    /// Leftover temporary snapshot files (removed on the next open).
    pub temp_files: Vec<PathBuf>,
    /// Every problem found, in file order (snapshots first, newest first).
    pub problems: Vec<Problem>,
    /// The covered sequence number of the snapshot an open would use (0 without one).
    pub snapshot_covers_seq: u64,
    /// The last sequence number an open would recover.
    pub last_seq: u64,
}

impl InspectReport {
    /// Returns the first problem, if any.
    pub fn first_problem(&self) -> Option<&Problem> {
        self.problems.first()
    }

    /// Returns whether the log would open without cutting anything.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Reads every file of the log in `dir`, checking every record, and reports what it found.
///
/// Changes nothing and takes no lock, so it can look at a log that is open elsewhere (whose
/// newest segment may then show a torn tail that is simply being written).
pub fn inspect(dir: impl AsRef<Path>) -> Result<InspectReport, InspectError> {
    let dir = dir.as_ref();
    let listing = layout::list(dir)?;
    let mut report = InspectReport {
        dir: dir.to_path_buf(),
        segments: Vec::new(),
        snapshots: Vec::new(),
        temp_files: listing.temps.clone(),
        problems: Vec::new(),
        snapshot_covers_seq: 0,
        last_seq: 0,
    };
    report.snapshot_covers_seq = inspect_snapshots(&listing.snapshots, &mut report)?;
    report.last_seq = inspect_segments(&listing.segments, &mut report)?;
    Ok(report)
}

/// Checks every snapshot into `report`; returns the covered sequence number of the one an
/// open would use, the newest intact one (0 without one).
fn inspect_snapshots(
    snapshots: &[(u64, PathBuf)],
    report: &mut InspectReport,
) -> Result<u64, InspectError> {
    let mut chosen = None;
    for (covers_seq, path) in snapshots.iter().rev() {
        let mut records = 0;
        let damage = match snapshot::read(path, *covers_seq, |_| {
            records += 1;
            Ok::<(), ()>(())
        }) {
            Ok(_) => None,
            Err(ScanError::Corrupt(c)) => Some(c),
            Err(ScanError::Io(f)) => return Err(f.into()),
            Err(ScanError::Callback(())) => unreachable!("the callback never fails"),
        };
        if let Some(c) = &damage {
            report.problems.push(Problem::Corrupt(c.clone()));
        } else if chosen.is_none() {
            chosen = Some(*covers_seq);
        }
        let bytes = fs::metadata(path).ctx(IoOp::Read, path)?.len();
        report.snapshots.push(SnapshotInfo {
            path: path.clone(),
            covers_seq: *covers_seq,
            records,
            bytes,
            damage,
        });
    }
    report.snapshots.reverse();
    Ok(chosen.unwrap_or(0))
}

/// Checks every segment into `report`, after the snapshot covering
/// `report.snapshot_covers_seq`; returns the last sequence number an open would recover.
fn inspect_segments(
    segments: &[(u64, PathBuf)],
    report: &mut InspectReport,
) -> Result<u64, InspectError> {
    let covers = report.snapshot_covers_seq;
    let obsolete = segments
        .windows(2)
        .take_while(|w| w[1].0 <= covers + 1)
        .count();
    let mut expected = covers + 1;
    let mut gap_reported = false;
    for (index, (first_seq, path)) in segments.iter().enumerate() {
        let scan =
            segment::scan(path, *first_seq, |_, _| Ok::<(), ()>(())).map_err(|e| match e {
                ScanError::Io(f) => f,
                _ => unreachable!("segment scans report damage, not errors"),
            })?;
        if index >= obsolete && !gap_reported {
            if *first_seq > expected {
                report.problems.push(Problem::MissingRecords {
                    from: expected,
                    to: first_seq - 1,
                    next_file: path.clone(),
                });
                gap_reported = true;
            } else {
                expected = expected.max(first_seq + scan.records);
            }
        }
        // Damage in a segment the snapshot makes obsolete does not matter: open skips and
        // removes it.
        if let Some(damage) = scan.damage.as_ref().filter(|_| index >= obsolete) {
            let is_newest = index + 1 == segments.len();
            report.problems.push(if is_newest && damage.torn {
                Problem::TornTail(TornTail {
                    file: path.clone(),
                    offset: damage.offset,
                    bytes_cut: scan.file_len - damage.offset,
                })
            } else {
                Problem::Corrupt(Corruption {
                    file: path.clone(),
                    offset: damage.offset,
                    problem: damage.problem.clone(),
                })
            });
        }
        report.segments.push(SegmentInfo {
            path: path.clone(),
            first_seq: *first_seq,
            records: scan.records,
            bytes: scan.file_len,
            valid_bytes: scan.valid_len,
        });
    }
    Ok(expected - 1)
}

/// Options for [`repair`].
#[non_exhaustive]
#[derive(Debug, Clone, Default)]
pub struct RepairOptions {
    /// Only report what would be done. Default `false`.
    pub dry_run: bool,
}

impl RepairOptions {
    /// Sets whether to only report what would be done.
    pub fn with_dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }
}

/// One change [`repair`] made (or, in a dry run, would make).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairAction {
    /// A segment was cut at its first bad record; the bytes cut were saved first.
    Truncated {
        /// The segment.
        file: PathBuf,
        /// Where it was cut.
        offset: u64,
        /// How many bytes were cut.
        bytes_cut: u64,
        /// The file the cut bytes were saved to.
        saved_to: PathBuf,
    },
    /// A file was renamed out of the log (a damaged snapshot, a segment whose header is
    /// damaged, or a segment after the cut).
    SetAside {
        /// The file.
        file: PathBuf,
        /// Its new name, ending in `.discarded`.
        to: PathBuf,
    },
}

/// What [`repair`] did.
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct RepairReport {
    /// The inspection before repairing.
    pub before: InspectReport,
    /// The changes, in order.
    pub actions: Vec<RepairAction>,
    /// The inspection after repairing (`None` in a dry run). Problems it still lists, such
    /// as missing records, cannot be repaired by cutting.
    pub after: Option<InspectReport>,
}

/// Cuts the log in `dir` back to the longest valid prefix: the first damaged segment is cut
/// at its first bad record, every later segment and every damaged snapshot is set aside
/// (renamed to `*.discarded`, never deleted), and the cut bytes are saved next to it.
///
/// This discards records that follow the damage; it is the explicit "I accept losing them"
/// step after [`Log::open`](crate::Log::open) reported corruption. It takes the directory
/// lock, so it fails while the log is open.
pub fn repair(dir: impl AsRef<Path>, options: RepairOptions) -> Result<RepairReport, RepairError> {
    let dir = dir.as_ref();
    let _lock = lock::lock_dir(dir).map_err(|e| match e {
        LockError::Held => RepairError::Locked {
            dir: dir.to_path_buf(),
        },
        LockError::Io(f) => RepairError::Io(f),
    })?;
    let before = inspect(dir)?;
    let mut actions = Vec::new();

    for snap in before.snapshots.iter().filter(|s| s.damage.is_some()) {
        actions.push(set_aside(&snap.path));
    }
    let first_bad = before
        .segments
        .iter()
        .position(|s| has_problem(&before, &s.path));
    if let Some(index) = first_bad {
        let bad = &before.segments[index];
        if bad.valid_bytes < header::HEADER_FRAME_LEN as u64 {
            actions.push(set_aside(&bad.path));
        } else {
            let mut saved_to = bad.path.clone().into_os_string();
            saved_to.push(format!(".tail-at-{}.discarded", bad.valid_bytes));
            actions.push(RepairAction::Truncated {
                file: bad.path.clone(),
                offset: bad.valid_bytes,
                bytes_cut: bad.bytes - bad.valid_bytes,
                saved_to: saved_to.into(),
            });
        }
        for later in &before.segments[index + 1..] {
            actions.push(set_aside(&later.path));
        }
    }

    if options.dry_run {
        return Ok(RepairReport {
            before,
            actions,
            after: None,
        });
    }
    for action in &actions {
        apply(action)?;
    }
    if !actions.is_empty() {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .ctx(IoOp::SyncDir, dir)?;
    }
    let after = inspect(dir)?;
    Ok(RepairReport {
        before,
        actions,
        after: Some(after),
    })
}

/// Whether the file at `path` is damaged (a gap is not damage of a file).
fn has_problem(report: &InspectReport, path: &Path) -> bool {
    report.problems.iter().any(|p| match p {
        Problem::TornTail(t) => t.file == path,
        Problem::Corrupt(c) => c.file == path,
        Problem::MissingRecords { .. } => false,
    })
}

fn set_aside(path: &Path) -> RepairAction {
    let mut to = path.to_path_buf().into_os_string();
    to.push(".discarded");
    RepairAction::SetAside {
        file: path.to_path_buf(),
        to: to.into(),
    }
}

fn apply(action: &RepairAction) -> Result<(), IoFailure> {
    match action {
        RepairAction::SetAside { file, to } => fs::rename(file, to).ctx(IoOp::Rename, file),
        RepairAction::Truncated {
            file,
            offset,
            saved_to,
            ..
        } => {
            let mut segment = OpenOptions::new()
                .read(true)
                .write(true)
                .open(file)
                .ctx(IoOp::Truncate, file)?;
            let mut tail = Vec::new();
            segment
                .seek(SeekFrom::Start(*offset))
                .and_then(|_| segment.read_to_end(&mut tail))
                .ctx(IoOp::Read, file)?;
            let mut saved = File::create(saved_to).ctx(IoOp::SaveDiscarded, saved_to)?;
            saved
                .write_all(&tail)
                .and_then(|_| saved.sync_all())
                .ctx(IoOp::SaveDiscarded, saved_to)?;
            segment.set_len(*offset).ctx(IoOp::Truncate, file)?;
            segment.sync_all().ctx(IoOp::Truncate, file)
        }
    }
}
