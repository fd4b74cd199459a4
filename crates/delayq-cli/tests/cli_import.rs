//! `delayq add --file`: a JSON-lines import with good and bad lines, through the real binary.

mod support;

use support::{Server, write_file};

#[test]
fn import_reports_bad_lines_and_adds_the_good_ones() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = write_file(
        dir.path(),
        "tasks.jsonl",
        concat!(
            "{\"topic\":\"imp\",\"id\":\"a\",\"body\":\"one\"}\n",
            "{\"topic\":\"imp\",\"id\":\"b\",\"delay_ms\":60000}\n",
            "\n",
            "{\"topic\":\"imp\",\"id\":\"c\",\n",
            "{\"id\":\"d\"}\n",
            "{\"topic\":\"imp\",\"id\":\"a\"}\n",
            "{\"topic\":\"imp\",\"id\":\"e\",\"ttr_ms\":-5}\n",
            "{\"topic\":\"imp\",\"id\":\"f\"}\n",
        ),
    );
    // A batch size of 2 makes the bad lines land in different batches.
    let run = server.run(&["add", "--file", &file, "--batch-size", "2"]);
    run.assert_code(1);
    assert!(
        run.stdout
            .contains("7 task lines, 3 added, 0 replaced, 0 existed, 4 failed"),
        "summary:\n{}",
        run.stdout
    );
    // Line 4 is not JSON, line 6 is a duplicate of line 1, line 7 has a negative ttr. Line 5
    // has no topic and gets none from the flags: refused by the server too.
    for expected in [
        "line 4: invalid JSON",
        "line 6 (id \"a\")",
        "409",
        "line 7 (id \"e\")",
    ] {
        assert!(
            run.stderr.contains(expected),
            "{expected} missing:\n{}",
            run.stderr
        );
    }
    assert!(run.stderr.contains("line 5"), "{}", run.stderr);
    assert!(
        run.stderr.contains("4 of 7 lines"),
        "final error:\n{}",
        run.stderr
    );

    let stats = server.json(&["stats", "-t", "imp"]);
    assert_eq!(stats["total"], 3, "{stats}");
    assert_eq!(stats["delayed"], 1);
    let a = server.json(&["get", "-t", "imp", "-i", "a"]);
    assert_eq!(a["body"], "one");
}

#[test]
fn import_fills_in_defaults_from_flags_and_reports_json() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = write_file(
        dir.path(),
        "t.jsonl",
        "{\"id\":\"x\"}\n{\"id\":\"y\",\"topic\":\"other\"}\n",
    );
    let summary = server.json(&["add", "--file", &file, "-t", "dflt", "--ttr", "5s"]);
    assert_eq!(summary["lines"], 2, "{summary}");
    assert_eq!(summary["added"], 2);
    assert_eq!(summary["failed"], 0);
    assert_eq!(summary["errors"], serde_json::json!([]));
    let x = server.json(&["get", "-t", "dflt", "-i", "x"]);
    assert_eq!(x["ttr_ms"], 5_000);
    let y = server.json(&["get", "-t", "other", "-i", "y"]);
    assert_eq!(y["ttr_ms"], 5_000);
}

#[test]
fn import_of_a_missing_file_names_it() {
    let run = support::delayq(&[
        "add",
        "--file",
        "/nonexistent/tasks.jsonl",
        "--server",
        "http://127.0.0.1:9",
    ]);
    run.assert_code(1);
    assert!(
        run.stderr.contains("/nonexistent/tasks.jsonl"),
        "{}",
        run.stderr
    );
}
