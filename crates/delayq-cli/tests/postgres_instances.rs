//! `delayq serve --postgres` through the real binary (issue 28): two instances over one
//! PostgreSQL server of the test's own (never the machine's on 5432). A task added through one
//! with the CLI is popped through the other; a long-poll parked on one wakes when a task added
//! through the other becomes due (LISTEN/NOTIFY, no polling); an instance finds the schema the
//! first one created; and when the instance that leads the time-driven work is SIGKILLed, the
//! other leads and delivers its tasks.

mod support;

use std::time::{Duration, Instant};

use delayq_testkit::PostgresServer;
use support::Server;

fn serve(pg: &PostgresServer) -> Server {
    Server::start_with(&["--postgres", &pg.url(), "--postgres-pool-size", "4"])
}

#[test]
fn add_through_one_instance_and_pop_through_another() {
    let pg = PostgresServer::start();
    let a = serve(&pg);
    let b = serve(&pg);

    let added = a.json(&["add", "-t", "orders", "-i", "o-1", "--body", "{\"n\":1}"]);
    assert_eq!(added["outcome"], "added", "{added}");
    let seen = b.json(&["get", "-t", "orders", "-i", "o-1"]);
    assert_eq!(seen["state_name"], "ready", "{seen}");

    let popped = b.json(&["pop", "-t", "orders", "--timeout", "2s"]);
    let list = popped.as_array().expect("pop --json prints a list");
    assert_eq!(list.len(), 1, "{popped}");
    assert_eq!(list[0]["id"], "o-1");
    assert_eq!(list[0]["body"], "{\"n\":1}");
    let receipt = list[0]["receipt"].as_str().expect("a receipt").to_owned();
    // Finished through the other instance, with the receipt the first handed out.
    a.run(&["finish", "-t", "orders", "-i", "o-1", "--receipt", &receipt])
        .assert_code(0);
    assert_eq!(
        b.json(&["get", "-t", "orders", "-i", "o-1"])["state_name"],
        "finished"
    );
    // Nothing is handed out twice.
    let again = a.json(&["pop", "-t", "orders", "--timeout", "0ms"]);
    assert_eq!(again.as_array().map(Vec::len), Some(0), "{again}");
}

#[test]
fn a_long_poll_on_one_instance_wakes_for_a_task_added_through_another() {
    let pg = PostgresServer::start();
    let a = serve(&pg);
    let b = serve(&pg);
    let started = Instant::now();
    let waiter = {
        let url = b.url.clone();
        std::thread::spawn(move || {
            support::delayq(&[
                "pop",
                "-t",
                "mail",
                "--timeout",
                "30s",
                "--json",
                "--server",
                &url,
            ])
        })
    };
    // Let the pop park first, then add a task due in 300 ms through the other instance.
    std::thread::sleep(Duration::from_millis(300));
    a.run(&["add", "-t", "mail", "-i", "m-1", "--delay", "300ms"])
        .assert_code(0);
    let run = waiter.join().expect("the pop thread");
    run.assert_code(0);
    let popped: serde_json::Value = serde_json::from_str(&run.stdout).expect("pop --json");
    assert_eq!(popped[0]["id"], "m-1", "{popped}");
    // Woken by the due task, not by the end of its 30 s timeout.
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the parked pop was not woken: {:?}",
        started.elapsed()
    );
}

/// Waits up to `limit` until the server log at `path` says that the instance leads.
fn wait_leads(path: &std::path::Path, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        if log.contains("this instance leads the time-driven work") {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// The instance that leads the time-driven work is SIGKILLed (no shutdown, its driver lock
/// never let go by itself): PostgreSQL ends its session and frees the lock, the other instance
/// leads, and the tasks added through the dead one are delivered through the survivor, each
/// once and none early.
#[test]
fn a_sigkilled_lead_s_tasks_are_delivered_by_the_other_instance() {
    let pg = PostgresServer::start();
    let dir = tempfile::TempDir::new().unwrap();
    let (a_log, b_log) = (dir.path().join("a.log"), dir.path().join("b.log"));
    let args = ["--postgres", &pg.url(), "--postgres-pool-size", "4"];
    let info = [("RUST_LOG", "info")];
    let mut a = Server::start_logged(&args, &info, &a_log);
    assert!(wait_leads(&a_log, Duration::from_secs(10)), "a leads");
    let b = Server::start_logged(&args, &info, &b_log);
    for n in 0..5 {
        a.run(&[
            "add",
            "-t",
            "kill",
            "-i",
            &format!("k{n}"),
            "--delay",
            "1500ms",
        ])
        .assert_code(0);
    }
    a.kill9();
    assert!(
        wait_leads(&b_log, Duration::from_secs(10)),
        "the survivor leads once the killed instance's session is gone"
    );
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 5 {
        let got = b.json(&["pop", "-t", "kill", "--timeout", "10s", "--count", "5"]);
        let list = got.as_array().expect("pop --json prints a list");
        assert!(!list.is_empty(), "the tasks were not delivered: {seen:?}");
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        for d in list {
            let due = d["due_ms"].as_u64().expect("due_ms");
            assert!(now_ms >= due, "early: {d}");
            assert!(
                seen.insert(d["id"].as_str().unwrap().to_owned()),
                "twice: {d}"
            );
        }
    }
}
