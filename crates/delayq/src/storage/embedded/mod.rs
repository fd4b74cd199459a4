//! The embedded durable backend: the engine, with every change of a shard written to that
//! shard's own append-only log (`delayq-log`), and the log compacted by snapshots.
//!
//! A data directory holds `delayq.meta` (format version and shard count, fixed when the
//! directory is created), one log directory per shard, `shard-<i>/`, and the settings' own
//! log, `settings/`. Each shard's log is written under the shard's mutex, so the log's order
//! is the order changes were applied, and each operation waits for its records to be durable
//! (per the fsync policy) before it reports success: with `always`, nothing acknowledged is
//! lost, even by a machine crash; with `interval` (default, 10 ms) a process crash loses
//! nothing acknowledged and a machine crash up to about the interval; with `never`, whatever
//! the OS had not written back.
//!
//! What is logged: every operation's change as the task's whole record (`Put`) or its removal
//! (`Remove`), and ttr expiries; a topic's pause; job id reservations (in shard 0). Changes of
//! the settings store go to the settings' log, under its own lock, the same way; no shard
//! holds settings (formats 1 and 2 kept them in shard 0; the first start moves them; format 4 adds a task's
//! trace context to its record, format 5 its expiry). An expiry is logged when it happens
//! (the task's record goes DEAD, or its removal): it changes the record, unlike a promotion;
//! an expiry that passed while the process was down happens right after start. What is not: the
//! promotion of a due task to READY and the end of a record's retention — both follow from
//! time alone, so recovery re-derives them: a DELAYED task whose due passed while the process
//! was down fires right after start, an ACTIVE task whose ttr passed is redelivered, a
//! retained record whose retention passed goes.
//!
//! Snapshots: when a shard has logged more than `snapshot_min_bytes` since its last snapshot,
//! a background task notes the log position, then a blocking thread reads the shard's live
//! records a piece at a time under its lock and writes each piece out ([`snapshot_shard`]
//! says why records newer than the position are harmless); the log then deletes the
//! segments the snapshot covers. Disk use therefore stays proportional to the live tasks plus
//! the threshold. The shard's lock is held for one piece at a time (4096 records).
//!
//! The settings' log is snapshotted the same way, after the same threshold.
//!
//! Recovery opens the shards' logs in parallel, replaying each into its shard on two threads
//! (one reads and decodes, one applies), then the settings' log.

mod codec;

/// Entry points for the fuzz targets of `crates/delayq-fuzz` and their replay tests; not a
/// stable API.
#[doc(hidden)]
pub mod fuzzing {
    use super::codec;

    /// Decodes `bytes` as a log or snapshot record. A record that decodes must encode back
    /// to bytes that decode to the same change and encode to the same bytes; this panics
    /// when it does not (a codec bug). Returns the decoding error of damaged input.
    pub fn record_round_trip(bytes: &[u8]) -> Result<(), String> {
        let change = codec::decode(bytes).map_err(|e| e.to_string())?;
        let mut again = Vec::new();
        codec::encode(&mut again, &change);
        let decoded = codec::decode(&again)
            .unwrap_or_else(|e| panic!("a re-encoded record does not decode: {e}"));
        assert_eq!(
            decoded, change,
            "a record changed through encode and decode"
        );
        let mut third = Vec::new();
        codec::encode(&mut third, &decoded);
        assert_eq!(third, again, "encoding is not stable");
        Ok(())
    }
}

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq_core::Pause;
use delayq_log::{FsyncPolicy, Log, LogOptions, Replayed, Ticket};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use self::codec::Change;
use super::StorageContext;
use super::engine::{Engine, Journal, NoJournal, Record, Settings, SettingsMap, Shard};
use crate::error::{Error, Result};

/// The embedded backend: the engine with a log per shard.
pub type EmbeddedStorage = Engine<LogJournal>;

/// The name of the file that records a data directory's layout.
pub const META_FILE: &str = "delayq.meta";

/// The directory of the settings' log in a data directory (from format 3).
pub const SETTINGS_DIR: &str = "settings";

/// How the embedded backend stores its data.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EmbeddedOptions {
    /// The data directory.
    pub dir: PathBuf,
    /// When log writes are flushed to stable storage (default every 10 ms).
    pub fsync: FsyncPolicy,
    /// Shards of a new data directory (an existing one keeps its own count). Default 8.
    pub shards: usize,
    /// A shard snapshots after it has logged this many bytes since its last snapshot.
    /// Default 64 MiB.
    pub snapshot_min_bytes: u64,
    /// Size of one log segment. Default 64 MiB.
    pub segment_bytes: u64,
}

impl EmbeddedOptions {
    /// Options for `dir` with every default.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        EmbeddedOptions {
            dir: dir.into(),
            fsync: FsyncPolicy::default(),
            shards: super::memory::DEFAULT_SHARDS,
            snapshot_min_bytes: 64 << 20,
            segment_bytes: 64 << 20,
        }
    }

    /// Sets the fsync policy.
    pub fn fsync(mut self, fsync: FsyncPolicy) -> Self {
        self.fsync = fsync;
        self
    }

    /// Sets the shard count of a new data directory.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards.max(1);
        self
    }

    /// Sets the snapshot threshold.
    pub fn snapshot_min_bytes(mut self, bytes: u64) -> Self {
        self.snapshot_min_bytes = bytes;
        self
    }

    /// Sets the segment size.
    pub fn segment_bytes(mut self, bytes: u64) -> Self {
        self.segment_bytes = bytes;
        self
    }
}

/// The layout of a data directory, fixed at its creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Meta {
    format: u32,
    shards: usize,
}

/// The data format this build writes: version 5 with the `Put v5` record of a task that
/// carries a flow-control key. Versions 1 (no priorities, pauses, settings or job ids), 2
/// (settings in shard 0's log), 3 (no trace contexts), 4 (no expiries) and 5 (no keys) are
/// read too: opening such a directory moves the settings of a version 1 or 2 to their own log
/// and rewrites its `delayq.meta` to version 6 before anything else is written, as older
/// builds cannot read what this one writes (see [`upgrade`]).
const FORMAT: u32 = 6;

/// The first format with the settings in their own log: the settings records a directory of
/// an older format left in shard 0 are moved at its upgrade, and ignored from this one on
/// (they are stale copies of what the settings' log holds).
const SETTINGS_LOG_FORMAT: u32 = 3;

/// The oldest data format this build reads.
const OLDEST_FORMAT: u32 = 1;

/// What replaying a log hands a shard or the settings.
enum Replay<'a> {
    /// First: about how many records are coming (the snapshot's count and a guess from the
    /// log's bytes), to size the tables before they fill.
    Expect(u64),
    /// One change, in the log's order.
    Change(Change<'a>),
}

/// A decoded change of a shard's log on its way to the thread that applies it (see
/// `Opener::open_shard`): as [`Change`], with what it borrowed from the log's buffer owned.
enum Restore {
    Expect(u64),
    Put(Arc<str>, Record),
    Remove(Arc<str>, Box<str>),
    Pause(Arc<str>, Pause),
    JobIds(u64),
}

impl Restore {
    fn apply(self, shard: &mut Shard<NoJournal>, now: u64) {
        match self {
            Restore::Expect(records) => shard.restore_expect(records),
            Restore::Put(topic, record) => shard.restore(&topic, record, now),
            Restore::Remove(topic, id) => shard.restore_removal(&topic, &id),
            Restore::Pause(topic, pause) => shard.restore_pause(&topic, pause),
            Restore::JobIds(reserved) => shard.restore_job_ids(reserved),
        }
    }
}

/// Changes handed to the applying thread at a time, and batches in flight: a few hundred
/// kilobytes of decoded records, enough for neither thread to wait on the other.
const APPLY_BATCH: usize = 1024;
const APPLY_QUEUE: usize = 8;

/// `name` as an `Arc`, the same one as the last change's when the topic is the same (a log
/// mostly holds runs of one topic), so a change costs no allocation for its topic.
fn shared(last: &mut Option<Arc<str>>, name: &str) -> Arc<str> {
    match last {
        Some(t) if &**t == name => Arc::clone(t),
        _ => Arc::clone(last.insert(Arc::from(name))),
    }
}

/// The guess of log bytes a record takes, for [`Replay::Expect`]: a task's record with a
/// 100-byte body and a 13-byte id takes about 170 in the log, frame included ("bytes on disk
/// per task (log, no snapshot)" of `cargo bench -p delayq --bench embedded`). A guess below
/// that sizes such a log's tables once and for all; at 256 a 10M log in one topic still grew
/// its id table once, 2.5 % of the restart's samples. A log of much smaller records is
/// under-guessed, and the tables then grow as they would have; one of updates to the same
/// tasks is over-guessed, and the tables are trimmed after.
const LOG_BYTES_PER_RECORD: u64 = 128;

/// What recovery found, for logs and `delayq data check`.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RecoverySummary {
    /// Shards opened.
    pub shards: usize,
    /// Live task records after replay.
    pub tasks: usize,
    /// Records replayed from snapshots.
    pub snapshot_records: u64,
    /// Log records replayed after the snapshots.
    pub log_records: u64,
    /// Torn tails cut, as `file@offset (bytes)`.
    pub torn_tails: Vec<String>,
    /// Time spent.
    pub elapsed: Duration,
}

/// Opens (creating if needed) the data directory, recovers every shard and the settings, and
/// starts the engine. Must be called inside a tokio runtime; recovery runs on blocking
/// threads.
pub async fn start(
    ctx: StorageContext,
    options: EmbeddedOptions,
) -> Result<(Arc<EmbeddedStorage>, RecoverySummary)> {
    let started = Instant::now();
    let dir = options.dir.clone();
    let found = tokio::task::spawn_blocking({
        let options = options.clone();
        move || read_or_create_meta(&options)
    })
    .await
    .map_err(|e| storage_error("opening the data directory", &dir, e))??;

    let wake_snapshotter = Arc::new(Notify::new());
    let failed = Arc::new(FailedLog::new());
    let opener = Opener {
        ctx: ctx.clone(),
        options: options.clone(),
        now: ctx.clock.now_ms(),
        wake_snapshotter: Arc::clone(&wake_snapshotter),
        failed,
    };
    let (shards, legacy, mut summary) = opener.open_shards(found.shards).await?;
    let (settings, report) = tokio::task::spawn_blocking({
        let opener = opener.clone();
        move || opener.open_settings()
    })
    .await
    .map_err(|e| storage_error("recovering the settings", &dir, e))??;
    summary.add(&report);
    if found.format < FORMAT {
        let legacy = if found.format < SETTINGS_LOG_FORMAT {
            legacy
        } else {
            SettingsMap::new()
        };
        upgrade(&options, found, &settings, legacy).await?;
    }
    let engine = Engine::start(ctx, shards, settings);
    let weak = Arc::downgrade(&engine);
    engine.spawn_background(move |stop| snapshotter(weak, wake_snapshotter, stop));
    summary.elapsed = started.elapsed();
    tracing::info!(
        dir = %dir.display(),
        shards = summary.shards,
        tasks = summary.tasks,
        snapshot_records = summary.snapshot_records,
        log_records = summary.log_records,
        elapsed_ms = summary.elapsed.as_millis() as u64,
        "embedded storage recovered"
    );
    for torn in &summary.torn_tails {
        tracing::warn!(tail = %torn, "cut a torn tail left by an interrupted write");
    }
    Ok((engine, summary))
}

impl RecoverySummary {
    /// Counts what the recovery of one log found.
    fn add(&mut self, report: &delayq_log::RecoveryReport) {
        self.snapshot_records += report.snapshot_records;
        self.log_records += report.records_replayed;
        if let Some(t) = &report.torn_tail {
            self.torn_tails.push(format!(
                "{}@{} ({} bytes)",
                t.file.display(),
                t.offset,
                t.bytes_cut
            ));
        }
    }
}

/// Brings a directory of an older format to this build's: the settings a format 1 or 2
/// directory kept in shard 0 (`legacy`) are written to the settings log and made durable
/// whatever the fsync policy, then `delayq.meta` says this build's format. Nothing else is
/// written before, so an upgrade cut short is done again at the next start (the same values
/// again); after it, the settings records left in shard 0's log are ignored, and its next
/// snapshot drops them.
async fn upgrade(
    options: &EmbeddedOptions,
    found: Meta,
    settings: &Settings<LogJournal>,
    legacy: SettingsMap,
) -> Result<()> {
    if !legacy.is_empty() {
        let ticket = settings.with_state(|s| {
            for ((namespace, key), value) in legacy {
                s.journal.put_meta(&namespace, &key, &value);
                s.values.insert((namespace, key), value);
            }
            s.journal.commit()
        });
        if let Some(ticket) = ticket {
            LogJournal::wait(ticket).await?;
        }
        settings.close()?;
    }
    let dir = options.dir.clone();
    let upgraded = Meta {
        format: FORMAT,
        ..found
    };
    tokio::task::spawn_blocking(move || {
        let path = dir.join(META_FILE);
        write_meta(&dir, &path, &upgraded)
            .map_err(|e| storage_error("upgrading the data directory's layout", &path, e))
    })
    .await
    .map_err(|e| storage_error("upgrading the data directory's layout", &options.dir, e))??;
    tracing::info!(dir = %options.dir.display(), from = found.format, to = FORMAT, "upgraded the data directory's format");
    Ok(())
}

/// A failure at a path. The path goes into the cause, which is logged, and not into `op`,
/// which clients see: a server path is nobody's business outside the server.
fn storage_error(
    op: &str,
    path: &Path,
    e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> Error {
    Error::storage(
        op,
        AtPath {
            path: path.to_path_buf(),
            source: e.into(),
        },
    )
}

/// A cause that names the file or directory it happened at.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
struct AtPath {
    path: PathBuf,
    source: Box<dyn std::error::Error + Send + Sync>,
}

fn read_or_create_meta(options: &EmbeddedOptions) -> Result<Meta> {
    let dir = &options.dir;
    std::fs::create_dir_all(dir)
        .map_err(|e| storage_error("creating the data directory", dir, e))?;
    let path = dir.join(META_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => {
            let meta: Meta = serde_json::from_slice(&bytes)
                .map_err(|e| storage_error("reading the data directory's layout", &path, e))?;
            if !(OLDEST_FORMAT..=FORMAT).contains(&meta.format) {
                return Err(storage_error(
                    "reading the data directory's layout",
                    &path,
                    format!(
                        "data format {} is not supported (this build reads formats \
                         {OLDEST_FORMAT} to {FORMAT})",
                        meta.format
                    ),
                ));
            }
            if meta.shards == 0 {
                return Err(storage_error(
                    "reading the data directory's layout",
                    &path,
                    "the shard count is 0",
                ));
            }
            Ok(meta)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let meta = Meta {
                format: FORMAT,
                shards: options.shards.max(1),
            };
            write_meta(dir, &path, &meta)
                .map_err(|e| storage_error("creating the data directory's layout", &path, e))?;
            Ok(meta)
        }
        Err(e) => Err(storage_error(
            "reading the data directory's layout",
            &path,
            e,
        )),
    }
}

/// Writes `delayq.meta` atomically (temporary file, fsync, rename, fsync of the directory).
fn write_meta(dir: &Path, path: &Path, meta: &Meta) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = dir.join(format!("{META_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&serde_json::to_vec(meta).expect("meta serializes"))?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// What opening a shard's or the settings' log needs.
#[derive(Clone)]
struct Opener {
    ctx: StorageContext,
    options: EmbeddedOptions,
    now: u64,
    wake_snapshotter: Arc<Notify>,
    failed: Arc<FailedLog>,
}

impl Opener {
    /// Opens the shards in parallel (replay is CPU-bound and independent per shard). Returns
    /// them, the settings an older format kept in shard 0, and what recovery found.
    async fn open_shards(
        &self,
        count: usize,
    ) -> Result<(Vec<Shard<LogJournal>>, SettingsMap, RecoverySummary)> {
        let opening: Vec<_> = (0..count)
            .map(|index| {
                let opener = self.clone();
                tokio::task::spawn_blocking(move || opener.open_shard(index))
            })
            .collect();
        let mut shards = Vec::with_capacity(count);
        let mut legacy = SettingsMap::new();
        let mut summary = RecoverySummary {
            shards: count,
            ..RecoverySummary::default()
        };
        for handle in opening {
            let (shard, settings, report) = handle
                .await
                .map_err(|e| storage_error("recovering a shard", &self.options.dir, e))??;
            summary.tasks += shard.len();
            summary.add(&report);
            legacy.extend(settings);
            shards.push(shard);
        }
        Ok((shards, legacy, summary))
    }

    /// Opens shard `index`. Settings records (only in shard 0 of formats 1 and 2) are
    /// returned apart: no shard holds settings.
    fn open_shard(
        &self,
        index: usize,
    ) -> Result<(Shard<LogJournal>, SettingsMap, delayq_log::RecoveryReport)> {
        let dir = self.options.dir.join(format!("shard-{index}"));
        let now = self.now;
        let mut shard = Shard::new(
            now,
            super::memory::seed(index),
            self.ctx.defaults,
            self.ctx.limits.max_error_bytes,
            Arc::clone(&self.ctx.metrics),
            NoJournal,
        );
        let mut settings = SettingsMap::new();
        // Two stages on two threads: this one reads the log, checks its frames and decodes
        // them; the other applies the changes to the shard (the id lookup, the orderings).
        // Either half alone is about half of a shard's replay, and one topic lives in one
        // shard, so without this one core restored it while the other idled.
        let (opened, applied) = std::thread::scope(|scope| {
            let (to_apply, batches) = std::sync::mpsc::sync_channel::<Vec<Restore>>(APPLY_QUEUE);
            let shard = &mut shard;
            let applier = scope.spawn(move || {
                for batch in batches {
                    for item in batch {
                        item.apply(shard, now);
                    }
                }
            });
            let mut batch = Vec::with_capacity(APPLY_BATCH);
            let mut topic = None;
            let opened = self.open_log(&dir, "recovering a shard", |item| {
                let restore = match item {
                    Replay::Expect(records) => Restore::Expect(records),
                    Replay::Change(Change::Put { topic: t, record }) => {
                        Restore::Put(shared(&mut topic, t), record)
                    }
                    Replay::Change(Change::Remove { topic: t, id }) => {
                        Restore::Remove(shared(&mut topic, t), id.into())
                    }
                    Replay::Change(Change::Pause { topic: t, pause }) => {
                        Restore::Pause(shared(&mut topic, t), pause)
                    }
                    Replay::Change(Change::JobIds { reserved }) => Restore::JobIds(reserved),
                    Replay::Change(
                        change @ (Change::MetaPut { .. } | Change::MetaDelete { .. }),
                    ) => {
                        restore_setting(&mut settings, change);
                        return Ok(());
                    }
                };
                batch.push(restore);
                if batch.len() == APPLY_BATCH {
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(APPLY_BATCH));
                    // Only a panic stops the applier; joining it below passes that on.
                    to_apply
                        .send(full)
                        .map_err(|_| "the thread applying the replay stopped".to_owned())?;
                }
                Ok(())
            });
            if !batch.is_empty() {
                let _ = to_apply.send(batch);
            }
            drop(to_apply);
            (opened, applier.join())
        });
        if let Err(panic) = applied {
            std::panic::resume_unwind(panic);
        }
        let (log, report, replayed) = opened?;
        shard.restore_done();
        Ok((
            shard.with_journal(self.journal(log, replayed)),
            settings,
            report,
        ))
    }

    /// Opens the settings' log (`settings/`, created empty in a directory of an older
    /// format).
    fn open_settings(&self) -> Result<(Settings<LogJournal>, delayq_log::RecoveryReport)> {
        let dir = self.options.dir.join(SETTINGS_DIR);
        let mut values = SettingsMap::new();
        let (log, report, replayed) =
            self.open_log(&dir, "recovering the settings", |item| match item {
                Replay::Expect(_) => Ok(()),
                Replay::Change(change @ (Change::MetaPut { .. } | Change::MetaDelete { .. })) => {
                    restore_setting(&mut values, change);
                    Ok(())
                }
                _ => Err("a record of a task in the settings log".to_owned()),
            })?;
        let journal = self.journal(log, replayed);
        let settings = Settings::new(values, journal, Arc::clone(&self.ctx.settings));
        Ok((settings, report))
    }

    /// Opens the log in `dir`, replaying each change into `apply` (after a guess of how many
    /// records are coming). Returns the log, what
    /// recovery found and the bytes of log records replayed (they count toward the next
    /// snapshot). `what` names the recovery in errors.
    fn open_log(
        &self,
        dir: &Path,
        what: &str,
        mut apply: impl FnMut(Replay<'_>) -> std::result::Result<(), String>,
    ) -> Result<(Log, delayq_log::RecoveryReport, u64)> {
        let log_options = LogOptions::default()
            .with_fsync(self.options.fsync)
            .with_segment_bytes(self.options.segment_bytes);
        let mut replayed_bytes = 0u64;
        let opened = Log::open(dir, log_options, |item| {
            let (bytes, seq) = match item {
                Replayed::Begin {
                    snapshot_records,
                    log_bytes,
                } => {
                    let records = snapshot_records + log_bytes / LOG_BYTES_PER_RECORD;
                    return apply(Replay::Expect(records));
                }
                Replayed::Snapshot(bytes) => (bytes, None),
                Replayed::Record { seq, bytes } => {
                    replayed_bytes += bytes.len() as u64;
                    (bytes, Some(seq))
                }
            };
            let place = || seq.map_or("the snapshot".to_owned(), |s| format!("record {s}"));
            let change = codec::decode(bytes).map_err(|e| format!("{}: {e}", place()))?;
            apply(Replay::Change(change)).map_err(|e| format!("{}: {e}", place()))
        });
        let (log, report) = opened.map_err(|e| match e {
            delayq_log::OpenError::Locked { .. } => storage_error(
                "opening the data directory",
                &self.options.dir,
                "the data directory is in use by another delayq process",
            ),
            other @ (delayq_log::OpenError::InvalidOptions(_)
            | delayq_log::OpenError::Io(_)
            | delayq_log::OpenError::Corrupt(_)
            | delayq_log::OpenError::MissingRecords { .. }
            | delayq_log::OpenError::Replay(_)) => storage_error(what, dir, other.to_string()),
        })?;
        Ok((log, report, replayed_bytes))
    }

    /// The journal over an opened log.
    fn journal(&self, log: Log, replayed_bytes: u64) -> LogJournal {
        LogJournal {
            log: Arc::new(log),
            buf: Vec::new(),
            ends: Vec::new(),
            since_snapshot: replayed_bytes,
            snapshot_min_bytes: self.options.snapshot_min_bytes,
            snapshot_requested: false,
            wake_snapshotter: Arc::clone(&self.wake_snapshotter),
            failed: Arc::clone(&self.failed),
        }
    }
}

/// Applies a settings record read back from a log to `values`.
fn restore_setting(values: &mut SettingsMap, change: Change<'_>) {
    match change {
        Change::MetaPut {
            namespace,
            key,
            value,
        } => {
            values.insert((namespace.into(), key.into()), value.to_vec());
        }
        Change::MetaDelete { namespace, key } => {
            values.remove(&(Box::<str>::from(namespace), Box::<str>::from(key)));
        }
        _ => {}
    }
}

/// A shard's journal: encodes changes into one buffer and appends them as one batch per
/// operation.
pub struct LogJournal {
    log: Arc<Log>,
    buf: Vec<u8>,
    ends: Vec<usize>,
    since_snapshot: u64,
    snapshot_min_bytes: u64,
    snapshot_requested: bool,
    wake_snapshotter: Arc<Notify>,
    failed: Arc<FailedLog>,
}

impl LogJournal {
    /// The shard's log.
    pub fn log(&self) -> &Arc<Log> {
        &self.log
    }
}

/// The first log of the data directory whose write failed, once one did: every shard then
/// refuses changes, since what the failed one holds on disk is no longer known.
type FailedLog = std::sync::OnceLock<PathBuf>;

/// What an operation waits for: its batch in the log, or the error appending it.
pub struct LogTicket {
    ticket: std::result::Result<Ticket, delayq_log::LogError>,
    failed: Arc<FailedLog>,
    dir: PathBuf,
}

impl Journal for LogJournal {
    type Ticket = LogTicket;

    fn check(&self) -> Result<()> {
        if let Some(dir) = self.failed.get() {
            // The log whose write failed, which may be another shard's than this one.
            return Err(storage_error(
                "writing the log, which takes no more changes since a write failed",
                dir,
                "an earlier write failed; the data directory needs attention (see the log)",
            ));
        }
        if let Some(stall) = self.log.stalled() {
            return Err(out_of_space(self.log.dir(), &stall));
        }
        Ok(())
    }

    fn put(&mut self, topic: &str, record: &Record) {
        codec::encode_put(&mut self.buf, topic, record);
        self.ends.push(self.buf.len());
    }

    fn remove(&mut self, topic: &str, id: &str) {
        codec::encode_remove(&mut self.buf, topic, id);
        self.ends.push(self.buf.len());
    }

    fn pause(&mut self, topic: &str, pause: Pause) {
        codec::encode_pause(&mut self.buf, topic, pause);
        self.ends.push(self.buf.len());
    }

    fn put_meta(&mut self, namespace: &str, key: &str, value: &[u8]) {
        codec::encode_meta_put(&mut self.buf, namespace, key, value);
        self.ends.push(self.buf.len());
    }

    fn delete_meta(&mut self, namespace: &str, key: &str) {
        codec::encode_meta_delete(&mut self.buf, namespace, key);
        self.ends.push(self.buf.len());
    }

    fn job_ids(&mut self, reserved: u64) {
        codec::encode_job_ids(&mut self.buf, reserved);
        self.ends.push(self.buf.len());
    }

    fn commit(&mut self) -> Option<LogTicket> {
        if self.ends.is_empty() {
            return None;
        }
        let mut start = 0;
        let records = self.ends.iter().map(|&end| {
            let r = &self.buf[start..end];
            start = end;
            r
        });
        let ticket = self.log.append_batch(records);
        self.since_snapshot += self.buf.len() as u64;
        self.buf.clear();
        self.ends.clear();
        if self.since_snapshot >= self.snapshot_min_bytes && !self.snapshot_requested {
            self.snapshot_requested = true;
            self.wake_snapshotter.notify_one();
        }
        Some(LogTicket {
            ticket,
            failed: Arc::clone(&self.failed),
            dir: self.log.dir().to_path_buf(),
        })
    }

    async fn wait(ticket: LogTicket) -> Result<()> {
        let outcome = match ticket.ticket {
            Ok(t) => t.wait().await.map(|_| ()),
            Err(e) => Err(e),
        };
        outcome.map_err(|e| {
            if e.kind() == delayq_log::ErrorKind::OutOfSpace {
                // Not fatal: the log keeps the records and writes them once space returns.
                tracing::warn!(dir = %ticket.dir.display(), error = %e, "no space to write the log; changes are refused until space is freed");
                return out_of_space(&ticket.dir, &e);
            }
            let _ = ticket.failed.set(ticket.dir.clone());
            tracing::error!(dir = %ticket.dir.display(), error = %e, "a log write failed; refusing further changes");
            storage_error("writing the log", &ticket.dir, e)
        })
    }

    fn close(&mut self) -> Result<()> {
        self.log
            .sync()
            .map_err(|e| storage_error("making the log durable", self.log.dir(), e))
    }
}

/// The answer to a change while a shard's log is stalled for lack of space: a retryable
/// [`Error::Unavailable`] whose operation names the file relative to the data directory (the
/// client may see it; the full path goes to the server's log) and whose cause is the OS error.
fn out_of_space(shard_dir: &Path, stall: &delayq_log::LogError) -> Error {
    let data_dir = shard_dir.parent().unwrap_or(shard_dir);
    let (file, cause) = match stall.io_failure() {
        Some(f) => (
            f.path()
                .strip_prefix(data_dir)
                .unwrap_or(f.path())
                .display()
                .to_string(),
            f.io_error().to_string(),
        ),
        None => (shard_dir.display().to_string(), stall.to_string()),
    };
    Error::unavailable(
        format!(
            "writing the log file {file} of the data directory (no space left; writes resume by themselves once space is freed)"
        ),
        cause,
    )
}

/// Snapshots every shard, and the settings, that asked for one, when woken, until told to
/// stop.
async fn snapshotter(
    engine: std::sync::Weak<EmbeddedStorage>,
    wake: Arc<Notify>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = wake.notified() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let Some(engine) = engine.upgrade() else {
            return;
        };
        for index in 0..engine.shard_count() {
            if let Err(e) = snapshot_shard(&engine, index, false).await {
                tracing::error!(shard = index, error = %e, "snapshot failed; the log keeps growing until one succeeds");
                engine.with_shard_at(index, |shard| ask_again(&mut shard.journal));
            }
        }
        if let Err(e) = snapshot_settings(&engine, false).await {
            tracing::error!(error = %e, "snapshot of the settings failed; their log keeps growing until one succeeds");
            engine.settings().with_state(|s| ask_again(&mut s.journal));
        }
    }
}

/// After a failed snapshot: asks again with the log's next change rather than after another
/// threshold.
fn ask_again(journal: &mut LogJournal) {
    journal.since_snapshot = journal.since_snapshot.max(journal.snapshot_min_bytes);
}

/// How many records a snapshot encodes per hold of a shard's lock: a few hundred
/// microseconds, so the shard's requests wait no longer than that for a snapshot.
const SNAPSHOT_PIECE: usize = 4096;

/// Writes a snapshot of shard `index` if it asked for one (or always, with `force`). Returns
/// whether one was written.
///
/// The snapshot covers the log up to where it stood when this started, but its records are
/// read later, `SNAPSHOT_PIECE` at a time under the shard's lock, on a blocking thread that
/// writes each piece before it reads the next (so neither the lock nor a tokio worker is held
/// for the whole shard, and the encoded snapshot is never all in memory). A record read after
/// it changed is newer than the log position the snapshot covers; that is harmless because
/// every log record is a task's whole record or its removal: replaying the log after that
/// position over the snapshot sets each changed task to its final state again (a record
/// that came and went meanwhile is removed again, one that was removed before it was read is
/// simply not in the snapshot). Slots do not move while a record lives, so reading by slot
/// misses no record that stayed put.
pub async fn snapshot_shard(engine: &EmbeddedStorage, index: usize, force: bool) -> Result<bool> {
    let shard = engine.shard_handle(index);
    let taken = shard.with(|shard| {
        if !shard.journal.wants_snapshot(force) {
            return None;
        }
        // Pauses and the job-id reservation are a few records: read with the position.
        let mut tail = SnapshotRecords::default();
        for (topic, pause) in shard.pauses() {
            tail.push(|buf| codec::encode_pause(buf, topic, pause));
        }
        let reserved = shard.job_ids_reserved();
        if reserved > 0 {
            tail.push(|buf| codec::encode_job_ids(buf, reserved));
        }
        Some(shard.journal.snapshot_of(tail))
    });
    let Some(pending) = taken else {
        return Ok(false);
    };
    let records = move || {
        let mut next = 0;
        let pieces = std::iter::from_fn(move || {
            let piece = shard.with(|shard| {
                let mut piece = SnapshotRecords::default();
                for (slot, topic, record) in shard.records_from(next).take(SNAPSHOT_PIECE) {
                    piece.push(|buf| codec::encode_put(buf, topic, record));
                    next = slot + 1;
                }
                piece
            });
            (!piece.ends.is_empty()).then_some(piece)
        });
        pieces.flat_map(SnapshotRecords::into_records)
    };
    write_snapshot(pending, records).await
}

/// Writes a snapshot of the settings if their log asked for one (or always, with `force`).
/// Returns whether one was written.
pub async fn snapshot_settings(engine: &EmbeddedStorage, force: bool) -> Result<bool> {
    let taken = engine.settings().with_state(|s| {
        if !s.journal.wants_snapshot(force) {
            return None;
        }
        let mut records = SnapshotRecords::default();
        for ((namespace, key), value) in &s.values {
            records.push(|buf| codec::encode_meta_put(buf, namespace, key, value));
        }
        Some(s.journal.snapshot_of(records))
    });
    match taken {
        Some(pending) => write_snapshot(pending, std::iter::empty::<EncodedRecord>).await,
        None => Ok(false),
    }
}

/// The records of a snapshot being encoded: one buffer, and where each record ends.
#[derive(Default)]
struct SnapshotRecords {
    buf: Vec<u8>,
    ends: Vec<usize>,
}

impl SnapshotRecords {
    /// Adds the record `encode` writes.
    fn push(&mut self, encode: impl FnOnce(&mut Vec<u8>)) {
        encode(&mut self.buf);
        self.ends.push(self.buf.len());
    }

    /// Each record, as the snapshot writer takes them.
    fn into_records(self) -> impl Iterator<Item = EncodedRecord> {
        let records = std::rc::Rc::new(self);
        (0..records.ends.len()).map(move |i| EncodedRecord {
            records: std::rc::Rc::clone(&records),
            i,
        })
    }
}

/// Record `i` of a [`SnapshotRecords`].
struct EncodedRecord {
    records: std::rc::Rc<SnapshotRecords>,
    i: usize,
}

impl AsRef<[u8]> for EncodedRecord {
    fn as_ref(&self) -> &[u8] {
        let start = match self.i {
            0 => 0,
            i => self.records.ends[i - 1],
        };
        &self.records.buf[start..self.records.ends[self.i]]
    }
}

/// A snapshot encoded under its lock, to be written outside it.
struct PendingSnapshot {
    log: Arc<Log>,
    covers: u64,
    records: SnapshotRecords,
}

impl LogJournal {
    /// Whether a snapshot is due (or `force`d).
    fn wants_snapshot(&self, force: bool) -> bool {
        force || self.snapshot_requested
    }

    /// `records` as the snapshot of everything logged so far; the threshold starts again.
    fn snapshot_of(&mut self, records: SnapshotRecords) -> PendingSnapshot {
        self.since_snapshot = 0;
        self.snapshot_requested = false;
        PendingSnapshot {
            log: Arc::clone(&self.log),
            covers: self.log.last_seq(),
            records,
        }
    }
}

/// Writes `pending` from a blocking thread: first the records `first` makes there (a
/// shard's, read a piece at a time), then `pending`'s own. Returns `Ok(true)`.
async fn write_snapshot<I, F>(pending: PendingSnapshot, first: F) -> Result<bool>
where
    F: FnOnce() -> I + Send + 'static,
    I: Iterator,
    I::Item: AsRef<[u8]>,
{
    let PendingSnapshot {
        log,
        covers,
        records,
    } = pending;
    let dir = log.dir().to_path_buf();
    tokio::task::spawn_blocking(move || {
        let records = first()
            .map(Either::Left)
            .chain(records.into_records().map(Either::Right));
        log.write_snapshot(covers, records)
    })
    .await
    .map_err(|e| storage_error("writing a snapshot", &dir, e))?
    .map_err(|e| storage_error("writing a snapshot", &dir, e))?;
    Ok(true)
}

/// One of two kinds of record bytes.
enum Either<A, B> {
    Left(A),
    Right(B),
}

impl<A: AsRef<[u8]>, B: AsRef<[u8]>> AsRef<[u8]> for Either<A, B> {
    fn as_ref(&self) -> &[u8] {
        match self {
            Either::Left(a) => a.as_ref(),
            Either::Right(b) => b.as_ref(),
        }
    }
}

/// The shard log directories of a data directory, per its `delayq.meta`, without opening
/// (or locking) anything: for `delayq data check|repair`.
pub fn shard_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let path = dir.join(META_FILE);
    let what = "reading the data directory's layout";
    let bytes = std::fs::read(&path).map_err(|e| storage_error(what, &path, e))?;
    let meta: Meta = serde_json::from_slice(&bytes).map_err(|e| storage_error(what, &path, e))?;
    Ok((0..meta.shards)
        .map(|i| dir.join(format!("shard-{i}")))
        .collect())
}

/// Every log directory of a data directory: the shards' (see [`shard_dirs`]) and, when it
/// exists (format 3), the settings' log.
pub fn log_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut dirs = shard_dirs(dir)?;
    let settings = dir.join(SETTINGS_DIR);
    if settings.is_dir() {
        dirs.push(settings);
    }
    Ok(dirs)
}
