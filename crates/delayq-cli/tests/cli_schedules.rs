//! `delayq schedule add|list|get|delete|pause|resume` through the real binary against a real
//! `delayq serve`, whose scheduler loop adds the occurrences: the sentences and tables, `--json`,
//! `--next N`, a refused cron expression, and occurrences of an every-second schedule popped
//! as ordinary tasks.

mod support;

use std::time::{Duration, Instant};

use support::Server;

#[test]
fn add_get_list_pause_resume_delete() {
    let server = Server::start();
    let added = server.run(&[
        "schedule",
        "add",
        "-t",
        "reports",
        "-n",
        "hourly",
        "--cron",
        "0 * * * *",
        "--timezone",
        "Europe/Berlin",
        "--body",
        "make the report",
        "--next",
        "3",
    ]);
    added.assert_code(0);
    assert!(added.stdout.contains("created"), "{}", added.stdout);
    assert!(
        added.stdout.contains("cron 0 * * * * (Europe/Berlin)"),
        "{}",
        added.stdout
    );
    assert_eq!(
        added.stdout.matches("  hourly@").count(),
        3,
        "{}",
        added.stdout
    );

    let got = server.json(&[
        "schedule", "get", "-t", "reports", "-n", "hourly", "--next", "4",
    ]);
    let next: Vec<u64> = serde_json::from_value(got["next_ms"].clone()).unwrap();
    assert_eq!(next.len(), 4);
    assert!(
        next.iter().all(|at| at % 3_600_000 == 0),
        "on the hour: {next:?}"
    );
    assert!(
        next.windows(2).all(|w| w[1] - w[0] == 3_600_000),
        "{next:?}"
    );

    // The server's loop adds the pending occurrence as soon as the schedule exists.
    let id = format!("hourly@{}", next[0]);
    let start = Instant::now();
    loop {
        let task = server.run(&["get", "-t", "reports", "-i", &id, "--json"]);
        if task.code == 0 {
            let task: serde_json::Value = serde_json::from_str(&task.stdout).unwrap();
            assert_eq!(task["state_name"], "delayed");
            assert_eq!(task["body"], "make the report");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{id} was never added"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let list = server.run(&["schedule", "list"]);
    list.assert_code(0);
    assert!(
        list.stdout.contains("hourly") && list.stdout.contains("reports"),
        "{}",
        list.stdout
    );
    let list = server.json(&["schedule", "list", "-t", "other"]);
    assert_eq!(list["total"], 0);

    let paused = server.run(&["schedule", "pause", "-t", "reports", "-n", "hourly"]);
    paused.assert_code(0);
    assert!(
        paused.stdout.contains("paused schedule"),
        "{}",
        paused.stdout
    );
    let got = server.json(&["schedule", "get", "-t", "reports", "-n", "hourly"]);
    assert_eq!(
        (&got["paused"], &got["next_ms"]),
        (&serde_json::json!(true), &serde_json::json!([]))
    );
    let task = server.json(&["get", "-t", "reports", "-i", &id]);
    assert_eq!(
        task["state_name"], "cancelled",
        "pausing cancels the pending occurrence"
    );
    server
        .run(&["schedule", "resume", "-t", "reports", "-n", "hourly"])
        .assert_code(0);
    let deleted = server.run(&["schedule", "delete", "-t", "reports", "-n", "hourly"]);
    deleted.assert_code(0);
    assert!(
        deleted.stdout.contains("deleted schedule"),
        "{}",
        deleted.stdout
    );
    let gone = server.run(&["schedule", "get", "-t", "reports", "-n", "hourly"]);
    gone.assert_code(1);
    assert!(gone.stderr.contains("not found"), "{}", gone.stderr);
}

#[test]
fn bad_input_is_refused_naming_the_field() {
    let server = Server::start();
    let table: [(&[&str], &str); 3] = [
        (&["--cron", "99 * * * *"], "cron"),
        (&["--cron", "@daily", "--timezone", "Moon/Base"], "timezone"),
        (&["--every", "10ms"], "every_ms"),
    ];
    for (extra, field) in table {
        let mut args = vec!["schedule", "add", "-t", "t", "-n", "n"];
        args.extend(extra);
        let run = server.run(&args);
        run.assert_code(1);
        assert!(run.stderr.contains(field), "{extra:?}: {}", run.stderr);
    }
    let bad_name = server.run(&["schedule", "add", "-t", "t", "-n", "a@b", "--every", "1s"]);
    bad_name.assert_code(1);
    assert!(bad_name.stderr.contains("name"), "{}", bad_name.stderr);
    let neither = server.run(&["schedule", "add", "-t", "t", "-n", "n"]);
    neither.assert_code(1);
    assert!(
        neither.stderr.contains("--cron"),
        "a usage error: {}",
        neither.stderr
    );
}

#[test]
fn occurrences_of_an_every_second_schedule_are_popped_once_each() {
    let server = Server::start();
    server
        .run(&["schedule", "add", "-t", "beat", "-n", "s", "--every", "1s"])
        .assert_code(0);
    let mut seen: Vec<u64> = Vec::new();
    let start = Instant::now();
    while seen.len() < 3 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "only {seen:?} fired"
        );
        let got = server.json(&["pop", "-t", "beat", "--count", "10", "--timeout", "2s"]);
        for d in got.as_array().cloned().unwrap_or_default() {
            let id = d["id"].as_str().unwrap();
            let due: u64 = id.strip_prefix("s@").unwrap().parse().unwrap();
            assert_eq!(due % 1_000, 0, "{id}: whole seconds from the epoch");
            assert!(!seen.contains(&due), "{id} delivered twice");
            seen.push(due);
        }
    }
    seen.sort();
    assert!(
        seen.windows(2).all(|w| w[1] - w[0] == 1_000),
        "consecutive seconds: {seen:?}"
    );
}

/// Pops `beat` until `want` more occurrences arrived; returns their dues.
fn pop_occurrences(server: &Server, want: usize) -> Vec<u64> {
    let mut got = Vec::new();
    let start = Instant::now();
    while got.len() < want {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "only {got:?} fired"
        );
        let popped = server.json(&["pop", "-t", "beat", "--count", "10", "--timeout", "2s"]);
        for d in popped.as_array().cloned().unwrap_or_default() {
            let id = d["id"].as_str().unwrap().to_owned();
            server
                .run(&[
                    "finish",
                    "-t",
                    "beat",
                    "-i",
                    &id,
                    "--receipt",
                    d["receipt"].as_str().unwrap(),
                ])
                .assert_code(0);
            got.push(id.strip_prefix("s@").unwrap().parse().unwrap());
        }
    }
    got
}

#[test]
fn a_file_schedule_is_created_at_start_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = support::write_file(
        dir.path(),
        "delayq.toml",
        "[[schedules]]\ntopic = \"beat\"\nname = \"s\"\nevery_ms = 1000\n",
    );
    let args = ["--config", &config, "--data-dir", data.to_str().unwrap()];
    let mut server = Server::start_with(&args);
    // The server writes the file's schedules right after it starts listening.
    let start = Instant::now();
    loop {
        let list = server.json(&["schedule", "list"]);
        if list["schedules"][0]["name"] == "s" {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{list}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut seen = pop_occurrences(&server, 2);
    let down = Instant::now();
    assert!(server.terminate(Duration::from_secs(15)).success());
    drop(server);
    let server = Server::start_with(&args);
    let downtime = down.elapsed();
    seen.extend(pop_occurrences(&server, 3));
    seen.sort_unstable();
    let mut unique = seen.clone();
    unique.dedup();
    assert_eq!(unique, seen, "no occurrence twice across the restart");
    // Within the 5 s grace, the occurrences of the downtime each fire: no gap at all.
    if downtime < Duration::from_secs(4) {
        assert!(
            seen.windows(2).all(|w| w[1] - w[0] == 1_000),
            "none lost across a restart of {downtime:?}: {seen:?}"
        );
    }
}
