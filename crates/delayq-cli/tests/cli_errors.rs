//! Exit codes and messages of the binary: bad flags (1), an unreachable server (2, naming
//! the URL), an API refusal (1, with the server's message).

mod support;

use support::{Server, delayq, free_port};

#[test]
fn bad_flags_exit_with_1_and_say_why() {
    let table: [(&[&str], &str); 6] = [
        (&["add", "--bogus"], "--bogus"),
        (&["add", "-t", "a", "-i", "b", "--delay", "15"], "a unit"),
        (
            &["add", "-t", "a", "-i", "b", "--at", "tomorrow"],
            "RFC 3339",
        ),
        (&["add", "-t", "a"], "needs --topic and --id"),
        (
            &["tasks", "-t", "a", "--state", "sleeping"],
            "unknown state",
        ),
        (&["requeue", "-t", "a"], "--id"),
    ];
    for (args, message) in table {
        let run = delayq(args);
        run.assert_code(1);
        assert!(
            run.stderr.contains(message),
            "{args:?}: {message} missing:\n{}",
            run.stderr
        );
    }
}

#[test]
fn help_documents_the_exit_codes() {
    let run = delayq(&["--help"]);
    run.assert_code(0);
    assert!(run.stdout.contains("Exit status"), "{}", run.stdout);
    assert!(
        run.stdout.contains("cannot reach the server"),
        "{}",
        run.stdout
    );
}

#[test]
fn unreachable_server_exits_with_2_naming_the_url() {
    let url = format!("http://127.0.0.1:{}", free_port());
    for args in [
        vec!["get", "-t", "a", "-i", "b", "--server", &url],
        vec!["add", "-t", "a", "-i", "b", "--server", &url, "--json"],
        vec!["stats", "--server", &url],
        vec!["bench", "add", "--duration", "1s", "--server", &url],
    ] {
        let run = delayq(&args);
        run.assert_code(2);
        assert!(
            run.stderr.contains("cannot reach the server"),
            "{}",
            run.stderr
        );
        assert!(run.stderr.contains(&url), "{url} missing:\n{}", run.stderr);
    }
}

#[test]
fn api_errors_exit_with_1_and_show_the_server_message() {
    let server = Server::start();
    let run = server.run(&["get", "-t", "orders", "-i", "missing"]);
    run.assert_code(1);
    assert!(run.stderr.contains("404"), "{}", run.stderr);
    assert!(run.stderr.contains("missing"), "{}", run.stderr);
    let run = server.run(&["add", "-t", "bad topic!", "-i", "x"]);
    run.assert_code(1);
    assert!(run.stderr.contains("topic"), "{}", run.stderr);
}

#[test]
fn invalid_server_url_is_a_usage_error() {
    let run = delayq(&["stats", "--server", "127.0.0.1:9280"]);
    run.assert_code(1);
    assert!(run.stderr.contains("invalid server URL"), "{}", run.stderr);
}
