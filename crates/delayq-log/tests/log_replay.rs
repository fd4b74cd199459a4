//! Reopening a log replays exactly what was appended: across segment rotation, with
//! snapshots, and with disk use bounded under churn.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use delayq_log::{FsyncPolicy, LogError, LogOptions};
use support::{open, record, small_segments};

#[test]
fn empty_log_opens_and_reopens_empty() {
    let dir = tempfile::tempdir().unwrap();
    let (log, report, replay) = open(dir.path(), LogOptions::default()).unwrap();
    assert_eq!(report.last_seq, 0);
    assert_eq!(log.last_seq(), 0);
    assert!(replay.all().is_empty());
    log.close().unwrap();
    let (log, report, replay) = open(dir.path(), LogOptions::default()).unwrap();
    assert_eq!(report.last_seq, 0);
    assert!(replay.all().is_empty());
    assert_eq!(log.append(b"first").unwrap().wait_blocking().unwrap(), 1);
}

#[test]
fn creates_missing_directories() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("a/b/shard-0");
    let (log, _, _) = open(&nested, LogOptions::default()).unwrap();
    log.append(b"x").unwrap().wait_blocking().unwrap();
    assert!(nested.join("00000000000000000001.seg").is_file());
}

#[test]
fn replay_equals_appended_across_rotation_for_every_policy() {
    for policy in [
        FsyncPolicy::Always,
        FsyncPolicy::Interval(Duration::from_millis(2)),
        FsyncPolicy::Never,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let options = small_segments().with_fsync(policy);
        let (log, _, _) = open(dir.path(), options.clone()).unwrap();
        let mut appended = Vec::new();
        for i in 0..300u64 {
            let body = record(i, (i as usize * 7) % 300);
            let seq = log.append(&body).unwrap().wait_blocking().unwrap();
            assert_eq!(seq, i + 1, "{policy:?}");
            appended.push(body);
        }
        // A batch larger than a segment, and one record larger than a segment.
        let batch: Vec<Vec<u8>> = (300..400).map(|i| record(i, 90)).collect();
        let ticket = log.append_batch(&batch).unwrap();
        assert_eq!((ticket.first_seq(), ticket.last_seq()), (301, 400));
        assert_eq!(ticket.wait_blocking().unwrap(), 400);
        appended.extend(batch);
        let big = vec![b'z'; 10_000];
        log.append(&big).unwrap().wait_blocking().unwrap();
        appended.push(big);
        let stats = log.stats();
        assert!(stats.segments > 5, "{policy:?}: {stats:?}");
        log.close().unwrap();

        let (log, report, replay) = open(dir.path(), options).unwrap();
        assert_eq!(replay.all(), appended, "{policy:?}");
        let seqs: Vec<u64> = replay.records.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, (1..=401).collect::<Vec<_>>());
        assert_eq!(report.last_seq, 401);
        assert_eq!(report.records_replayed, 401);
        assert!(report.torn_tail.is_none());
        assert_eq!(log.append(b"next").unwrap().wait_blocking().unwrap(), 402);
    }
}

#[test]
fn replay_after_drop_without_close() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _, _) = open(dir.path(), small_segments()).unwrap();
    let tickets: Vec<_> = (0..50)
        .map(|i| log.append(&record(i, 40)).unwrap())
        .collect();
    drop(log);
    for t in tickets {
        assert!(t.is_done());
        t.wait_blocking().unwrap();
    }
    let (_, _, replay) = open(dir.path(), small_segments()).unwrap();
    assert_eq!(replay.all().len(), 50);
}

#[test]
fn snapshot_then_records_replay_in_order_and_old_segments_go() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _, _) = open(dir.path(), small_segments()).unwrap();
    let mut state: Vec<Vec<u8>> = Vec::new();
    for i in 0..200 {
        state.push(record(i, 100));
        log.append(state.last().unwrap()).unwrap();
    }
    // Only segments the writer has finished can be removed.
    log.sync().unwrap();
    let before = log.stats();
    let report = log.write_snapshot(log.last_seq(), &state).unwrap();
    assert_eq!((report.covers_seq, report.records), (200, 200));
    assert!(report.segments_removed > 0);
    let after = log.stats();
    assert_eq!(after.segments, before.segments - report.segments_removed);
    assert_eq!(after.snapshot_covers_seq, 200);
    for i in 200..230 {
        state.push(record(i, 100));
        log.append(state.last().unwrap()).unwrap();
    }
    log.close().unwrap();

    let (_, report, replay) = open(dir.path(), small_segments()).unwrap();
    assert_eq!(report.snapshot_covers_seq, 200);
    assert_eq!(report.snapshot_records, 200);
    assert_eq!(replay.snapshot.len(), 200);
    assert_eq!(replay.records.first().map(|r| r.0), Some(201));
    assert_eq!(replay.all(), state);
}

#[test]
fn snapshot_covering_everything_and_a_newer_snapshot_replace_older_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _, _) = open(dir.path(), small_segments()).unwrap();
    log.append(b"a").unwrap();
    log.write_snapshot(1, [b"state-1"]).unwrap();
    log.append(b"b").unwrap();
    let report = log.write_snapshot(2, [b"state-2"]).unwrap();
    assert_eq!(report.snapshots_removed, 1);
    // Covering the same seq again replaces the file in place.
    log.write_snapshot(2, [b"state-2b"]).unwrap();
    assert!(matches!(
        log.write_snapshot(1, [b"old"]),
        Err(LogError::SnapshotBehind {
            covers: 1,
            current: 2
        })
    ));
    assert!(matches!(
        log.write_snapshot(3, [b"future"]),
        Err(LogError::SnapshotAhead { covers: 3, last: 2 })
    ));
    log.close().unwrap();
    let snaps: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".snap"))
        .collect();
    assert_eq!(snaps, vec!["00000000000000000002.snap"]);
    let (log, report, replay) = open(dir.path(), small_segments()).unwrap();
    assert_eq!(replay.snapshot, vec![b"state-2b".to_vec()]);
    assert!(replay.records.is_empty());
    assert_eq!(report.last_seq, 2);
    assert_eq!(log.append(b"c").unwrap().wait_blocking().unwrap(), 3);
}

/// The queue's use: state is a map; every change is logged; snapshots of the map are taken
/// now and then. Disk use must stay bounded however long this goes on.
#[test]
fn disk_stays_bounded_under_churn_with_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let options = small_segments().with_fsync(FsyncPolicy::Never);
    let (log, _, _) = open(dir.path(), options.clone()).unwrap();
    let mut model: BTreeMap<u8, Vec<u8>> = BTreeMap::new();
    let encode = |k: u8, v: &[u8]| {
        let mut r = vec![k];
        r.extend_from_slice(v);
        r
    };
    let mut max_segments = 0;
    let mut max_bytes = 0;
    for round in 0..100u64 {
        for i in 0..100u64 {
            let key = ((round * 31 + i * 7) % 64) as u8;
            let value = record(round * 1000 + i, 80);
            log.append(&encode(key, &value)).unwrap();
            model.insert(key, value);
        }
        if round % 3 == 2 {
            let records: Vec<Vec<u8>> = model.iter().map(|(k, v)| encode(*k, v)).collect();
            log.write_snapshot(log.last_seq(), &records).unwrap();
        }
        log.sync().unwrap();
        let stats = log.stats();
        max_segments = max_segments.max(stats.segments);
        max_bytes = max_bytes.max(stats.bytes_on_disk);
    }
    // Three rounds of ~9 KiB between snapshots, in 4 KiB segments, plus a ~6 KiB snapshot.
    assert!(max_segments <= 10, "segments grew to {max_segments}");
    assert!(max_bytes <= 48 << 10, "disk use grew to {max_bytes}");
    let files = std::fs::read_dir(dir.path()).unwrap().count();
    assert!(files <= 12, "{files} files on disk");
    log.close().unwrap();

    let mut replayed: BTreeMap<u8, Vec<u8>> = BTreeMap::new();
    let (_, _, replay) = open(dir.path(), options).unwrap();
    for r in replay.all() {
        replayed.insert(r[0], r[1..].to_vec());
    }
    assert_eq!(replayed, model);
}

#[test]
fn records_too_large_are_refused_and_batches_are_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let options = small_segments().with_max_record_bytes(1000);
    let (log, _, _) = open(dir.path(), options.clone()).unwrap();
    log.append(b"ok").unwrap();
    let err = log.append(&[0; 1001]).unwrap_err();
    assert!(matches!(
        err,
        LogError::RecordTooLarge {
            len: 1001,
            max: 1000
        }
    ));
    assert_eq!(err.kind(), delayq_log::ErrorKind::InvalidInput);
    let batch: Vec<Vec<u8>> = (0..100u8)
        .map(|i| vec![i; if i == 99 { 5000 } else { 500 }])
        .collect();
    assert!(log.append_batch(&batch).is_err());
    assert_eq!(log.last_seq(), 1);
    assert_eq!(log.append(b"after").unwrap().wait_blocking().unwrap(), 2);
    let empty: [&[u8]; 0] = [];
    let ticket = log.append_batch(empty).unwrap();
    assert_eq!(ticket.wait_blocking().unwrap(), 2);
    log.close().unwrap();
    let (_, _, replay) = open(dir.path(), options).unwrap();
    assert_eq!(replay.all(), vec![b"ok".to_vec(), b"after".to_vec()]);
}

#[test]
fn interval_policy_syncs_on_its_own_and_sync_forces_it() {
    let dir = tempfile::tempdir().unwrap();
    let interval = Duration::from_millis(20);
    let options = LogOptions::default().with_fsync(FsyncPolicy::Interval(interval));
    let (log, _, _) = open(dir.path(), options).unwrap();
    log.append(b"x").unwrap().wait_blocking().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while log.stats().durable_seq < 1 {
        assert!(std::time::Instant::now() < deadline, "never synced");
        std::thread::sleep(Duration::from_millis(2));
    }
    let never = LogOptions::default().with_fsync(FsyncPolicy::Never);
    let dir2 = tempfile::tempdir().unwrap();
    let (log2, _, _) = open(dir2.path(), never).unwrap();
    log2.append(b"y").unwrap().wait_blocking().unwrap();
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(log2.stats().durable_seq, 0);
    log2.sync().unwrap();
    let stats = log2.stats();
    assert_eq!((stats.written_seq, stats.durable_seq), (1, 1));
}

#[test]
fn async_waits_complete_in_any_order() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions::default().with_fsync(FsyncPolicy::Always);
    let (log, _, _) = open(dir.path(), options).unwrap();
    let log = std::sync::Arc::new(log);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut handles = Vec::new();
        for task in 0..20u64 {
            let log = log.clone();
            handles.push(tokio::spawn(async move {
                let mut seqs = Vec::new();
                for i in 0..20 {
                    let ticket = log.append(&record(task * 100 + i, 30)).unwrap();
                    seqs.push(ticket.wait().await.unwrap());
                }
                seqs
            }));
        }
        let mut all = Vec::new();
        for h in handles {
            let seqs = h.await.unwrap();
            assert!(seqs.windows(2).all(|w| w[0] < w[1]));
            all.extend(seqs);
        }
        all.sort();
        assert_eq!(all, (1..=400).collect::<Vec<_>>());
        // A wait dropped before completion deregisters itself.
        let ticket = log.append(b"dropped").unwrap();
        let wait = ticket.wait();
        drop(wait);
        let t = log.append(b"awaited").unwrap();
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(5), t.wait())
                .await
                .unwrap()
                .unwrap(),
            402
        );
    });
}
