//! Push delivery through the real binary (docs/push.md): `delayq push set|get|delete`, the
//! `[[push]]` tables of the config file, and targets that survive a restart of an embedded
//! server, each delivered to a real receiver on a loopback port.

mod support;

use std::time::Duration;

use delayq_testkit::Receiver;
use support::{Server, free_port, write_file};

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_set_get_delete_and_a_delivery() {
    let receiver = Receiver::ok().await;
    let server = Server::start();
    let url = receiver.url("/hook");
    server
        .run(&[
            "push",
            "set",
            "-t",
            "orders",
            "--url",
            &url,
            "-H",
            "X-Env: test",
            "--secret",
            "k",
            "--concurrency",
            "2",
        ])
        .assert_code(0);
    let got = server.json(&["push", "get", "-t", "orders"]);
    assert_eq!(got["targets"][0]["url"], url.as_str());
    assert_eq!(got["targets"][0]["concurrency"], 2);
    assert_eq!(got["targets"][0]["has_secret"], true);
    let table = server.run(&["push", "get"]);
    table.assert_code(0);
    assert!(table.stdout.contains("orders") && table.stdout.contains("X-Env: test"));

    server
        .run(&["add", "-t", "orders", "--id", "o1", "--body", "hi"])
        .assert_code(0);
    let calls = receiver.wait_for(1, WAIT).await;
    assert_eq!(calls[0].header("delayq-id"), Some("o1"));
    assert_eq!(calls[0].header("x-env"), Some("test"));
    assert!(calls[0].header("delayq-signature").is_some());

    // A client pop of the topic is refused while the target is there.
    let pop = server.run(&["pop", "-t", "orders", "--timeout", "0ms"]);
    pop.assert_code(1);
    assert!(
        pop.stderr.contains("409") && pop.stderr.contains("push target"),
        "{}",
        pop.stderr
    );

    let bad = server.run(&["push", "set", "-t", "orders", "--url", "gopher://x"]);
    bad.assert_code(1);
    assert!(bad.stderr.contains("url"), "{}", bad.stderr);

    server
        .run(&["push", "delete", "-t", "orders"])
        .assert_code(0);
    assert_eq!(server.json(&["push", "get"])["total"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_of_the_config_file_are_created_at_start() {
    let receiver = Receiver::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_file(
        dir.path(),
        "delayq.toml",
        &format!(
            "storage = \"memory\"\npush_allow = [\"127.0.0.0/8\"]\n\n[[push]]\ntopic = \"from-file\"\nurl = \"{}\"\nconcurrency = 3\n",
            receiver.url("/f")
        ),
    );
    let server = Server::start_with(&["--config", &config]);
    let got = server.json(&["push", "get"]);
    assert_eq!(got["targets"][0]["topic"], "from-file");
    assert_eq!(got["targets"][0]["concurrency"], 3);
    server
        .run(&["add", "-t", "from-file", "--id", "1"])
        .assert_code(0);
    assert_eq!(receiver.wait_for(1, WAIT).await.len(), 1);

    // A bad target in the file stops the start with the field named.
    let bad = write_file(
        dir.path(),
        "bad.toml",
        "storage = \"memory\"\n[[push]]\ntopic = \"t\"\nurl = \"http://h/\"\nheaders = { \"Delayq-Id\" = \"x\" }\n",
    );
    let out = std::process::Command::new(support::DELAYQ)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{}", free_port()),
            "--config",
            &bad,
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("push[0].headers.Delayq-Id"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_survive_a_restart_of_an_embedded_server() {
    let receiver = Receiver::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let port = free_port();
    let log = dir.path().join("server.log");
    let mut server = Server::start_at(support::DELAYQ, port, &["--data-dir", data], &log);
    server
        .run(&["push", "set", "-t", "kept", "--url", &receiver.url("/k")])
        .assert_code(0);
    // A task due after the restart.
    server
        .run(&["add", "-t", "kept", "--id", "later", "--delay", "1500ms"])
        .assert_code(0);
    server.terminate(Duration::from_secs(10));
    assert!(receiver.calls().is_empty(), "not due before the stop");

    let server = Server::start_at(support::DELAYQ, port, &["--data-dir", data], &log);
    assert_eq!(server.json(&["push", "get"])["targets"][0]["topic"], "kept");
    let calls = receiver.wait_for(1, WAIT).await;
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].header("delayq-id"), Some("later"));
}

/// Sends beanstalk command lines and reads one reply line each.
fn beanstalk(stream: &mut std::net::TcpStream, lines: &[&str]) -> Vec<String> {
    use std::io::{BufRead as _, BufReader, Write as _};
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut replies = Vec::new();
    for line in lines {
        stream.write_all(format!("{line}\r\n").as_bytes()).unwrap();
        let mut reply = String::new();
        reader.read_line(&mut reply).unwrap();
        if reply.starts_with("RESERVED") {
            // The job's body line.
            let mut body = String::new();
            reader.read_line(&mut body).unwrap();
        }
        replies.push(reply.trim_end().to_owned());
    }
    replies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beanstalk_reserve_skips_a_pushed_tube() {
    let receiver = Receiver::ok().await;
    let bport = free_port();
    let blisten = format!("127.0.0.1:{bport}");
    let server = Server::start_with(&["--storage", "memory", "--beanstalk-listen", &blisten]);
    // One call, then none for a long time: the second task stays READY.
    server
        .run(&[
            "push",
            "set",
            "-t",
            "hooked",
            "--url",
            &receiver.url("/"),
            "--rate",
            "0.001",
            "--burst",
            "1",
        ])
        .assert_code(0);
    server
        .run(&["add", "-t", "hooked", "-i", "1"])
        .assert_code(0);
    receiver.wait_for(1, WAIT).await;
    server
        .run(&["add", "-t", "hooked", "-i", "2"])
        .assert_code(0);
    let mut conn = std::net::TcpStream::connect(&blisten).unwrap();
    let replies = beanstalk(
        &mut conn,
        &["watch hooked", "ignore default", "reserve-with-timeout 1"],
    );
    assert_eq!(replies, ["WATCHING 2", "WATCHING 1", "TIMED_OUT"]);
    assert_eq!(
        server.json(&["get", "-t", "hooked", "-i", "2"])["state_name"],
        "ready"
    );
    server
        .run(&["push", "delete", "-t", "hooked"])
        .assert_code(0);
    let replies = beanstalk(&mut conn, &["reserve-with-timeout 5"]);
    assert!(replies[0].starts_with("RESERVED"), "{replies:?}");
}
