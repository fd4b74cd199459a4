//! Flow limits through the real binary (docs/flow-control.md): `delayq limits set|get|delete`,
//! `delayq add --key`, pops held by the limits, and limits that survive a restart of an
//! embedded server.

mod support;

use std::time::Duration;

use support::{Server, free_port};

#[test]
fn limits_set_get_delete_and_keys() {
    let server = Server::start();
    server
        .run(&[
            "limits",
            "set",
            "-t",
            "pay",
            "--max-active-per-key",
            "1",
            "--rate",
            "100",
        ])
        .assert_code(0);
    let got = server.json(&["limits", "get", "-t", "pay"]);
    assert_eq!(got["limits"][0]["max_active_per_key"], 1);
    assert_eq!(got["limits"][0]["burst"], 100, "the burst in effect");
    let table = server.run(&["limits", "get"]);
    table.assert_code(0);
    assert!(
        table.stdout.contains("pay") && table.stdout.contains("100/s"),
        "{}",
        table.stdout
    );
    for id in ["a1", "a2"] {
        server
            .run(&["add", "-t", "pay", "--id", id, "--key", "merchant-a"])
            .assert_code(0);
    }
    let first = server.json(&["pop", "-t", "pay", "--count", "5", "--timeout", "0ms"]);
    assert_eq!(first.as_array().map(Vec::len), Some(1), "{first}");
    let task = server.json(&["get", "-t", "pay", "--id", "a2"]);
    assert_eq!(task["key"], "merchant-a");

    let bad = server.run(&["limits", "set", "-t", "pay", "--max-active", "0"]);
    bad.assert_code(1);
    assert!(bad.stderr.contains("max_active"), "{}", bad.stderr);
    let none = server.run(&["limits", "set", "-t", "pay"]);
    assert_ne!(none.code, 0);
    assert!(none.stderr.contains("--max-active"), "{}", none.stderr);
    let bad_key = server.run(&["add", "-t", "pay", "--id", "x", "--key", "a b"]);
    bad_key.assert_code(1);
    assert!(bad_key.stderr.contains("key"), "{}", bad_key.stderr);

    let deleted = server.run(&["limits", "delete", "-t", "pay"]);
    deleted.assert_code(0);
    assert!(deleted.stdout.contains("no longer has flow limits"));
    let after = server.json(&["pop", "-t", "pay", "--count", "5", "--timeout", "0ms"]);
    assert_eq!(
        after.as_array().map(Vec::len),
        Some(1),
        "a2 goes without the limit"
    );
    assert_eq!(
        server.run(&["limits", "get"]).stdout.trim(),
        "no flow limits"
    );
}

#[test]
fn limits_survive_a_restart_of_an_embedded_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let port = free_port();
    let log = dir.path().join("server.log");
    let mut server = Server::start_at(support::DELAYQ, port, &["--data-dir", data], &log);
    server
        .run(&["limits", "set", "-t", "one", "--max-active", "1"])
        .assert_code(0);
    for id in ["x", "y"] {
        server
            .run(&["add", "-t", "one", "--id", id, "--ttr", "1h"])
            .assert_code(0);
    }
    let popped = server.json(&["pop", "-t", "one", "--timeout", "0ms"]);
    assert_eq!(popped[0]["id"], "x", "{popped}");
    server.terminate(Duration::from_secs(10));

    let server = Server::start_at(support::DELAYQ, port, &["--data-dir", data], &log);
    assert_eq!(
        server.json(&["limits", "get"])["limits"][0]["max_active"],
        1
    );
    let held = server.json(&["pop", "-t", "one", "--count", "5", "--timeout", "0ms"]);
    assert!(
        held.as_array().is_none_or(Vec::is_empty),
        "x still holds the one slot: {held}"
    );
}
