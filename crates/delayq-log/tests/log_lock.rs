//! One open log per directory: a second open fails clearly, in this process or another.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use delayq_log::{ErrorKind, LogOptions, OpenError};
use support::open;

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

#[test]
fn open_in_another_process_fails_and_succeeds_once_it_died() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_delayq-log-crash-writer"))
        .args([dir.path().to_str().unwrap(), "never", "1", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.starts_with("open "), "{first}");
    let second = lines.next().unwrap().unwrap();
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
