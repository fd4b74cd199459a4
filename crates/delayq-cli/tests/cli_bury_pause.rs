//! The commands of docs/design.md §2 rules 11–15 through the real binary against a real
//! server: `--priority` on add and release, binary bodies (`--body-file`, `--body-base64`)
//! shown decoded, `bury`, `reschedule`, `pause` and `resume`, with `--json` parsed and the
//! sentences and tables checked.

mod support;

use support::Server;

#[test]
fn priorities_and_binary_bodies_are_added_and_shown() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("body.bin");
    std::fs::write(&file, [0x00, 0x01, 0xfe]).unwrap();
    let file = file.to_string_lossy().into_owned();
    server
        .run(&["add", "-t", "t", "-i", "plain", "--body", "hello"])
        .assert_code(0);
    let added = server.json(&[
        "add",
        "-t",
        "t",
        "-i",
        "bin",
        "--body-base64",
        "/wCA",
        "--priority",
        "5",
    ]);
    assert_eq!(added["outcome"], "added");
    server
        .run(&[
            "add",
            "-t",
            "t",
            "-i",
            "file",
            "--body-file",
            &file,
            "-p",
            "9",
        ])
        .assert_code(0);

    let bin = server.json(&["get", "-t", "t", "-i", "bin"]);
    assert_eq!(
        (&bin["body"], &bin["body_encoding"], &bin["priority"]),
        (
            &serde_json::json!("/wCA"),
            &serde_json::json!("base64"),
            &serde_json::json!(5)
        )
    );
    let from_file = server.json(&["get", "-t", "t", "-i", "file"]);
    assert_eq!(from_file["body"], "AAH+", "the file's bytes, as base64");
    let plain = server.json(&["get", "-t", "t", "-i", "plain"]);
    assert_eq!(
        (&plain["body_encoding"], &plain["priority"]),
        (&serde_json::json!("text"), &serde_json::json!(1024))
    );

    // For people: the bytes decoded, with escapes, and the priority.
    let table = server.run(&["get", "-t", "t", "-i", "bin"]);
    table.assert_code(0);
    assert!(
        table.stdout.contains("\\xff\\x00\\x80 (binary, 3 bytes)"),
        "{}",
        table.stdout
    );
    assert!(
        table
            .stdout
            .lines()
            .any(|l| l.contains("priority") && l.contains(" 5 ")),
        "{}",
        table.stdout
    );

    // Pops come lowest priority number first; the table has a priority column.
    let popped = server.run(&["pop", "-t", "t", "-n", "3", "--timeout", "2s"]);
    popped.assert_code(0);
    let out = &popped.stdout;
    assert!(out.contains("priority"), "{out}");
    let at = |id: &str| {
        out.find(id)
            .unwrap_or_else(|| panic!("{id} missing:\n{out}"))
    };
    assert!(
        at("bin") < at("file") && at("file") < at("plain"),
        "order by priority:\n{out}"
    );
    assert!(out.contains("\\x00\\x01\\xfe"), "{out}");
}

#[test]
fn bad_priority_and_base64_are_usage_errors() {
    let server = Server::start();
    for (args, names) in [
        (
            &["add", "-t", "t", "-i", "a", "--priority", "-1"][..],
            "--priority",
        ),
        (
            &["add", "-t", "t", "-i", "a", "--priority", "4294967296"][..],
            "--priority",
        ),
        (
            &["add", "-t", "t", "-i", "a", "--body-base64", "not base64!"][..],
            "--body-base64",
        ),
        (&["pause", "-t", "t", "--for", "soon"][..], "--for"),
    ] {
        let run = server.run(args);
        run.assert_code(1);
        assert!(run.stderr.contains(names), "{args:?}: {}", run.stderr);
    }
    let topics = server.json(&["topics"]);
    assert_eq!(topics["total"], 0, "nothing was added: {topics}");
}

#[test]
fn bury_then_requeue() {
    let server = Server::start();
    server.run(&["add", "-t", "t", "-i", "a"]).assert_code(0);
    let popped = server.json(&["pop", "-t", "t", "--timeout", "2s"]);
    let receipt = popped[0]["receipt"].as_str().unwrap().to_owned();
    let buried = server.run(&[
        "bury",
        "-t",
        "t",
        "-i",
        "a",
        "-r",
        &receipt,
        "--error",
        "cannot parse",
        "--priority",
        "3",
    ]);
    buried.assert_code(0);
    assert!(
        buried.stdout.contains("buried task \"a\""),
        "{}",
        buried.stdout
    );
    let task = server.json(&["get", "-t", "t", "-i", "a"]);
    assert_eq!(
        (&task["state_name"], &task["last_error"], &task["priority"]),
        (
            &serde_json::json!("dead"),
            &serde_json::json!("cannot parse"),
            &serde_json::json!(3)
        )
    );
    let again = server.run(&["bury", "-t", "t", "-i", "a"]);
    again.assert_code(1);
    assert!(again.stderr.contains("409"), "{}", again.stderr);
    server
        .run(&["requeue", "-t", "t", "-i", "a"])
        .assert_code(0);
    assert_eq!(
        server.json(&["get", "-t", "t", "-i", "a"])["state_name"],
        "ready"
    );
}

#[test]
fn reschedule_moves_the_due_and_refuses_a_held_task() {
    let server = Server::start();
    server
        .run(&[
            "add", "-t", "t", "-i", "a", "--delay", "1h", "--body", "keep",
        ])
        .assert_code(0);
    let now = server.run(&["reschedule", "-t", "t", "-i", "a"]);
    now.assert_code(0);
    assert!(now.stdout.contains("ready, due now"), "{}", now.stdout);
    let later = server.json(&["reschedule", "-t", "t", "-i", "a", "--delay", "10m"]);
    assert_eq!(
        later,
        serde_json::json!({"state": 0, "state_name": "delayed"})
    );
    let task = server.json(&["get", "-t", "t", "-i", "a"]);
    assert_eq!(
        (&task["body"], &task["retries"]),
        (&serde_json::json!("keep"), &serde_json::json!(0))
    );
    let at = server.run(&[
        "reschedule",
        "-t",
        "t",
        "-i",
        "a",
        "--at",
        "2001-01-01T00:00:00Z",
    ]);
    at.assert_code(0);
    assert!(
        at.stdout.contains("ready"),
        "a past instant means now: {}",
        at.stdout
    );
    server
        .run(&["pop", "-t", "t", "--timeout", "2s"])
        .assert_code(0);
    let held = server.run(&["reschedule", "-t", "t", "-i", "a", "--delay", "1m"]);
    held.assert_code(1);
    assert!(held.stderr.contains("409"), "{}", held.stderr);
}

#[test]
fn pause_and_resume_a_topic() {
    let server = Server::start();
    server.run(&["add", "-t", "t", "-i", "a"]).assert_code(0);
    let paused = server.run(&["pause", "-t", "t", "--for", "10m"]);
    paused.assert_code(0);
    assert!(
        paused.stdout.contains("topic \"t\" is paused until") && paused.stdout.contains("(in "),
        "{}",
        paused.stdout
    );
    let stats = server.json(&["stats", "-t", "t"]);
    assert_eq!(stats["paused"], true, "{stats}");
    assert!(stats["paused_until_ms"].as_u64().is_some(), "{stats}");
    let table = server.run(&["stats", "-t", "t"]);
    assert!(
        table.stdout.contains("paused") && table.stdout.contains("until"),
        "{}",
        table.stdout
    );
    let none = server.run(&["pop", "-t", "t", "--timeout", "0s"]);
    none.assert_code(0);
    assert!(
        none.stdout.contains("no task became ready"),
        "a paused topic hands nothing out: {}",
        none.stdout
    );
    let forever = server.json(&["pause", "-t", "t"]);
    assert_eq!(
        forever,
        serde_json::json!({"topic": "t", "paused": true, "paused_until_ms": null})
    );
    let resumed = server.run(&["resume", "-t", "t"]);
    resumed.assert_code(0);
    assert!(
        resumed.stdout.contains("topic \"t\" is not paused"),
        "{}",
        resumed.stdout
    );
    let popped = server.json(&["pop", "-t", "t", "--timeout", "2s"]);
    assert_eq!(popped[0]["id"], "a");
}

#[test]
fn release_with_a_priority() {
    let server = Server::start();
    server.run(&["add", "-t", "t", "-i", "a"]).assert_code(0);
    let popped = server.json(&["pop", "-t", "t", "--timeout", "2s"]);
    let receipt = popped[0]["receipt"].as_str().unwrap().to_owned();
    server
        .run(&[
            "release",
            "-t",
            "t",
            "-i",
            "a",
            "-r",
            &receipt,
            "--priority",
            "7",
        ])
        .assert_code(0);
    let task = server.json(&["get", "-t", "t", "-i", "a"]);
    assert_eq!(
        (&task["priority"], &task["retries"]),
        (&serde_json::json!(7), &serde_json::json!(1))
    );
}
