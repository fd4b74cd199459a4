//! Push delivery with several `delayq serve --redis` processes on one Redis (docs/push.md):
//! a target set through one instance is stored in Redis, so every instance delivers it and
//! refuses client pops of it; an instance SIGKILLed in the middle of a call loses nothing:
//! after the task's ttr another instance delivers it again.

mod support;

use std::time::{Duration, Instant};

use delayq_testkit::{Receiver, RedisServer, Reply};
use support::Server;

const WAIT: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_set_through_one_instance_is_delivered_by_another() {
    let redis = RedisServer::start();
    let receiver = Receiver::ok().await;
    let mut a = Server::start_with(&["--redis", &redis.url()]);
    let b = Server::start_with(&["--redis", &redis.url()]);
    a.run(&["push", "set", "-t", "shared", "--url", &receiver.url("/s")])
        .assert_code(0);
    assert_eq!(b.json(&["push", "get"])["targets"][0]["topic"], "shared");
    // B picks the target up within about a second: its pops of the topic are refused.
    let start = Instant::now();
    loop {
        let pop = b.run(&["pop", "-t", "shared", "--timeout", "0ms"]);
        if pop.code == 1 && pop.stderr.contains("409") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "B still lets clients pop: {pop:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // With A gone, B alone delivers what is added through it.
    a.terminate(Duration::from_secs(10));
    for i in 0..5 {
        b.run(&["add", "-t", "shared", "-i", &format!("s{i}")])
            .assert_code(0);
    }
    let calls = receiver.wait_for(5, WAIT).await;
    let mut ids: Vec<&str> = calls
        .iter()
        .map(|c| c.header("delayq-id").unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, ["s0", "s1", "s2", "s3", "s4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_killed_mid_call_has_its_task_delivered_by_another() {
    let redis = RedisServer::start();
    // The first call never gets an answer (the instance making it is killed meanwhile).
    let receiver = Receiver::start(|_, n| if n == 0 { Reply::Hang } else { Reply::ok() }).await;
    let mut a = Server::start_with(&["--redis", &redis.url()]);
    a.run(&["push", "set", "-t", "kill", "--url", &receiver.url("/k")])
        .assert_code(0);
    a.run(&[
        "add", "-t", "kill", "-i", "k1", "--ttr", "2s", "--body", "payload",
    ])
    .assert_code(0);
    let first = receiver.wait_for(1, WAIT).await;
    assert_eq!(first[0].header("delayq-attempt"), Some("1"));

    let b = Server::start_with(&["--redis", &redis.url()]);
    a.kill9();
    let calls = receiver.wait_for(2, WAIT).await;
    assert_eq!(calls.len(), 2, "the task came back after its ttr");
    assert_eq!(calls[1].header("delayq-id"), Some("k1"));
    assert_eq!(calls[1].header("delayq-attempt"), Some("2"));
    assert_eq!(calls[1].body, b"payload");
    let start = Instant::now();
    loop {
        let task = b.json(&["get", "-t", "kill", "-i", "k1"]);
        if task["state_name"] == "finished" {
            assert_eq!(task["retries"], 1);
            break;
        }
        assert!(start.elapsed() < WAIT, "not finished: {task}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Delivered, finished, and not again.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(receiver.calls().len(), 2);
}
