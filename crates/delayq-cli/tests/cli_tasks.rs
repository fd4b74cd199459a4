//! The task commands through the real binary against a real server: add, get, pop, finish,
//! release, cancel, requeue, delete, tasks, stats and topics, with `--json` parsed and checked
//! and the tables checked for their columns.

mod support;

use serde_json::Value;
use support::Server;

#[test]
fn add_get_pop_finish_round_trip() {
    let server = Server::start();
    let added = server.json(&["add", "-t", "orders", "-i", "o-1", "--body", "{\"n\":1}"]);
    assert_eq!(added["outcome"], "added");
    assert_eq!(added["id"], "o-1");

    let task = server.json(&["get", "-t", "orders", "-i", "o-1"]);
    assert_eq!(task["state"], 1, "{task}");
    assert_eq!(task["state_name"], "ready");
    assert_eq!(task["body"], "{\"n\":1}");

    let popped = server.json(&["pop", "-t", "orders", "--timeout", "2s"]);
    let list = popped.as_array().expect("pop --json prints a list");
    assert_eq!(list.len(), 1, "{popped}");
    assert_eq!(list[0]["id"], "o-1");
    let receipt = list[0]["receipt"].as_str().expect("a receipt").to_owned();

    let active = server.json(&["get", "-t", "orders", "-i", "o-1"]);
    assert_eq!(active["state_name"], "active");

    server
        .run(&["finish", "-t", "orders", "-i", "o-1", "--receipt", &receipt])
        .assert_code(0);
    let finished = server.json(&["get", "-t", "orders", "-i", "o-1"]);
    assert_eq!(finished["state"], 3);
    assert_eq!(finished["state_name"], "finished");

    // Finishing twice is a conflict: exit code 1 and the server's message.
    let again = server.run(&["finish", "-t", "orders", "-i", "o-1"]);
    again.assert_code(1);
    assert!(again.stderr.contains("409"), "{}", again.stderr);
}

#[test]
fn delayed_task_options_and_cancel() {
    let server = Server::start();
    server
        .run(&[
            "add",
            "-t",
            "orders",
            "-i",
            "later",
            "--delay",
            "15m",
            "--ttr",
            "45s",
            "--max-retries",
            "-1",
            "--backoff-schedule",
            "2m,10m,1h",
        ])
        .assert_code(0);
    let task = server.json(&["get", "-t", "orders", "-i", "later"]);
    assert_eq!(task["state_name"], "delayed");
    assert_eq!(task["delay_ms"], 900_000);
    assert_eq!(task["ttr_ms"], 45_000);
    assert_eq!(task["max_retries"], -1);
    assert_eq!(
        task["backoff"],
        serde_json::json!({"kind": "schedule", "ms": [120000, 600000, 3600000]})
    );

    // A duplicate is refused by default, kept with --on-duplicate keep.
    let dup = server.run(&["add", "-t", "orders", "-i", "later"]);
    dup.assert_code(1);
    assert!(dup.stderr.contains("409"), "{}", dup.stderr);
    let kept = server.json(&[
        "add",
        "-t",
        "orders",
        "-i",
        "later",
        "--on-duplicate",
        "keep",
    ]);
    assert_eq!(kept["outcome"], "existed");

    let cancel = server.run(&["cancel", "-t", "orders", "-i", "later"]);
    cancel.assert_code(0);
    assert!(
        cancel.stdout.contains("cancelled task \"later\""),
        "{}",
        cancel.stdout
    );
    let task = server.json(&["get", "-t", "orders", "-i", "later"]);
    assert_eq!(task["state"], 4);
    assert_eq!(task["state_name"], "cancelled");
}

#[test]
fn release_to_dead_then_requeue_and_delete() {
    let server = Server::start();
    for id in ["d-1", "d-2"] {
        server
            .run(&["add", "-t", "jobs", "-i", id, "--max-retries", "0"])
            .assert_code(0);
    }
    let popped = server.json(&["pop", "-t", "jobs", "--count", "2", "--timeout", "2s"]);
    assert_eq!(popped.as_array().map(Vec::len), Some(2), "{popped}");
    for id in ["d-1", "d-2"] {
        let released = server.json(&["release", "-t", "jobs", "-i", id, "--error", "boom"]);
        assert_eq!(released["state_name"], "dead", "{released}");
    }
    let dead = server.json(&["tasks", "-t", "jobs", "--state", "dead"]);
    assert_eq!(dead["total"], 2, "{dead}");
    assert_eq!(dead["items"][0]["last_error"], "boom");

    server
        .run(&["requeue", "-t", "jobs", "-i", "d-1"])
        .assert_code(0);
    assert_eq!(
        server.json(&["get", "-t", "jobs", "-i", "d-1"])["state_name"],
        "ready"
    );
    let all = server.json(&["requeue", "-t", "jobs", "--all"]);
    assert_eq!(all["requeued"], 1, "{all}");

    server
        .run(&["delete", "-t", "jobs", "-i", "d-2"])
        .assert_code(0);
    let gone = server.run(&["get", "-t", "jobs", "-i", "d-2"]);
    gone.assert_code(1);
    assert!(gone.stderr.contains("404"), "{}", gone.stderr);
}

#[test]
fn stats_tasks_and_topics() {
    let server = Server::start();
    for id in ["a", "b", "c"] {
        server.run(&["add", "-t", "mail", "-i", id]).assert_code(0);
    }
    server
        .run(&["add", "-t", "mail", "-i", "d", "--delay", "1h"])
        .assert_code(0);
    server.run(&["add", "-t", "sms", "-i", "x"]).assert_code(0);

    let stats = server.json(&["stats", "-t", "mail"]);
    assert_eq!(
        (stats["ready"].as_u64(), stats["delayed"].as_u64()),
        (Some(3), Some(1))
    );
    assert_eq!(stats["total"], 4);
    let all = server.json(&["stats"]);
    assert_eq!(all["sms"]["ready"], 1, "{all}");

    let page = server.json(&["tasks", "-t", "mail", "--page-size", "2"]);
    assert_eq!(page["total"], 4);
    assert_eq!(page["items"].as_array().map(Vec::len), Some(2));
    let topics = server.json(&["topics"]);
    let names: Vec<&str> = topics["topics"]
        .as_array()
        .expect("a list of topics")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["mail", "sms"]);
    assert_eq!(topics["total"], 2);
}

#[test]
fn tables_for_people() {
    let server = Server::start();
    let add = server.run(&[
        "add", "-t", "mail", "-i", "m-1", "--body", "hello", "--delay", "15m",
    ]);
    add.assert_code(0);
    assert!(add.stdout.contains("added task \"m-1\""), "{}", add.stdout);
    assert!(add.stdout.contains("due in 15m"), "{}", add.stdout);

    let get = server.run(&["get", "-t", "mail", "-i", "m-1"]);
    get.assert_code(0);
    for expected in ["state", "delayed", "due", "in 14m", "ttr", "30s", "hello"] {
        assert!(
            get.stdout.contains(expected),
            "{expected} missing:\n{}",
            get.stdout
        );
    }

    let tasks = server.run(&["tasks", "-t", "mail"]);
    tasks.assert_code(0);
    for expected in [
        "id",
        "state",
        "due",
        "retries",
        "ttr",
        "body",
        "m-1",
        "1 of 1 tasks",
    ] {
        assert!(
            tasks.stdout.contains(expected),
            "{expected} missing:\n{}",
            tasks.stdout
        );
    }

    let stats = server.run(&["stats"]);
    stats.assert_code(0);
    for expected in [
        "topic", "delayed", "ready", "active", "dead", "next due", "mail",
    ] {
        assert!(
            stats.stdout.contains(expected),
            "{expected} missing:\n{}",
            stats.stdout
        );
    }
    let topics = server.run(&["topics"]);
    topics.assert_code(0);
    assert!(topics.stdout.contains("mail"), "{}", topics.stdout);

    let empty = server.run(&["pop", "-t", "nothing", "--timeout", "0ms"]);
    empty.assert_code(0);
    assert!(empty.stdout.contains("no task"), "{}", empty.stdout);
}

#[test]
fn pop_table_shows_the_receipt() {
    let server = Server::start();
    server
        .run(&["add", "-t", "q", "-i", "p-1", "--body", "x"])
        .assert_code(0);
    let pop = server.run(&["pop", "-t", "q", "--timeout", "2s"]);
    pop.assert_code(0);
    for expected in ["topic", "id", "receipt", "p-1"] {
        assert!(
            pop.stdout.contains(expected),
            "{expected} missing:\n{}",
            pop.stdout
        );
    }
    let task: Value = server.json(&["get", "-t", "q", "-i", "p-1"]);
    assert_eq!(task["state_name"], "active");
}
