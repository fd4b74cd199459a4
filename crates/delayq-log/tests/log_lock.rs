//! One open log per directory: a second open fails clearly, in this process or another.

mod support;

use delayq_log::{ErrorKind, LogOptions, OpenError};
use support::{crash_writer, open};

#[test]
fn second_open_in_the_same_process_fails_naming_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _, _) = open(dir.path(), LogOptions::default()).unwrap();
    let err = open(dir.path(), LogOptions::default()).unwrap_err();
    assert!(matches!(&err, OpenError::Locked { dir: d } if d == dir.path()));
    assert_eq!(err.kind(), ErrorKind::Locked);
    let message = err.to_string();
    assert!(message.contains(dir.path().to_str().unwrap()), "{message}");
    assert!(message.contains("already in use"), "{message}");

    // Closing releases the lock; so does dropping.
    log.close().unwrap();
    let (log, _, _) = open(dir.path(), LogOptions::default()).unwrap();
    drop(log);
    open(dir.path(), LogOptions::default()).unwrap();
}

/// Not a test of its own: the body of the crash writer the next test starts by running this
/// test binary again ([`crash_writer::spawn`]); without its variable it does nothing.
#[test]
fn crash_writer_child() {
    crash_writer::run_if_child();
}

#[test]
fn open_in_another_process_fails_and_succeeds_once_it_died() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = crash_writer::spawn(dir.path(), "never", 1, 0);
    let mut lines = crash_writer::lines(child.stdout.take().unwrap());
    let first = lines.next().unwrap();
    assert!(first.starts_with("open "), "{first}");
    let second = lines.next().unwrap();
    assert!(second.starts_with("ack "), "{second}");

    let err = open(dir.path(), LogOptions::default()).unwrap_err();
    assert!(matches!(err, OpenError::Locked { .. }), "{err}");
    assert!(matches!(
        delayq_log::repair(dir.path(), Default::default()),
        Err(delayq_log::RepairError::Locked { .. })
    ));

    child.kill().unwrap();
    child.wait().unwrap();
    let (_, _, replay) = open(dir.path(), LogOptions::default()).unwrap();
    assert!(!replay.all().is_empty());
}
