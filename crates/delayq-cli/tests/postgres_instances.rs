//! `delayq serve --postgres` through the real binary (issue 28): two instances over one
//! PostgreSQL server of the test's own (never the machine's on 5432). A task added through one
//! with the CLI is popped through the other; a long-poll parked on one wakes when a task added
//! through the other becomes due (LISTEN/NOTIFY, no polling); and an instance finds the schema
//! the first one created.

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
