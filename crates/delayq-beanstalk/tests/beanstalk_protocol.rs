//! The listener over real sockets: the exchanges of beanstalkd's own `testserv.c` that need
//! no internals, the input that must never panic, lose or double a job, and what is delayq's
//! own (aliases of non-numeric ids, job ids across a restart, drain mode, Unix sockets).

mod support;

use std::time::Duration;

use delayq::NewTask;
use delayq_beanstalk::{BeanstalkAddr, BeanstalkOptions, BeanstalkServer};
use support::{Client, Delayq, Got, Mode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(5);

/// The value of `key` in a YAML reply shown as `OK n|doc`.
fn field(reply: &str, key: &str) -> String {
    reply
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("no {key} in {reply}"))
        .to_owned()
}

async fn put(client: &mut Client, body: &str) -> String {
    client
        .send(format!("put 0 0 100 {}\r\n{body}\r\n", body.len()).as_bytes())
        .await;
    support::show(&client.read(WAIT).await)
}

#[tokio::test]
async fn testserv_basic_exchanges() {
    for mode in [Mode::Memory, Mode::Embedded] {
        let server = Delayq::start(mode).await;
        let mut c = Client::connect(server.addr).await;
        // cttest_unknown_command, cttest_peek_not_found, cttest_peek_bad_format
        assert_eq!(c.cmd("nont10knowncommand").await, "UNKNOWN_COMMAND");
        assert_eq!(c.cmd("peek 1").await, "NOT_FOUND");
        assert_eq!(c.cmd("peek 18446744073709551616").await, "BAD_FORMAT");
        assert_eq!(c.cmd("peek 184467440737095516160000").await, "BAD_FORMAT");
        // cttest_peek_ok
        assert_eq!(put(&mut c, "a").await, "INSERTED 1");
        assert_eq!(c.cmd("peek 1").await, "FOUND 1 1|a");
        // cttest_touch_bad_format, cttest_touch_not_found, cttest_bury_bad_format
        assert_eq!(c.cmd("touch a111").await, "BAD_FORMAT");
        assert_eq!(c.cmd("touch 1").await, "NOT_FOUND");
        assert_eq!(c.cmd("bury 111abc 2").await, "BAD_FORMAT");
        // cttest_kickjob_bad_format, cttest_release_bad_format, cttest_release_not_found
        assert_eq!(c.cmd("kick-job a111").await, "BAD_FORMAT");
        assert_eq!(
            c.cmd("release 18446744073709551616 1 1").await,
            "BAD_FORMAT"
        );
        assert_eq!(c.cmd("release 1 1 1").await, "NOT_FOUND");
        // cttest_underscore
        assert_eq!(c.cmd("use x_y").await, "USING x_y");
        // cttest_2cmdpacket
        c.send(b"use a\r\nuse b\r\n").await;
        assert_eq!(support::show(&c.read(WAIT).await), "USING a");
        assert_eq!(support::show(&c.read(WAIT).await), "USING b");
        // cttest_negative_delay, cttest_garbage_priority, cttest_negative_priority,
        // cttest_max_priority, cttest_too_big_priority
        assert_eq!(c.cmd("put 512 -1 100 0").await, "BAD_FORMAT");
        assert_eq!(c.cmd("put -1kkdj9djjkd9 0 100 1").await, "BAD_FORMAT");
        assert_eq!(c.cmd("put -1 0 100 0").await, "BAD_FORMAT");
        c.send(b"put 4294967295 0 100 0\r\n\r\n").await;
        assert_eq!(support::show(&c.read(WAIT).await), "INSERTED 2");
        assert_eq!(c.cmd("put 4294967296 0 100 0").await, "BAD_FORMAT");
        // cttest_delete_ready, cttest_delete_bad_format
        assert_eq!(c.cmd("delete 2").await, "DELETED");
        assert_eq!(c.cmd("delete 2").await, "NOT_FOUND");
        assert_eq!(c.cmd("delete 18446744073709551616").await, "BAD_FORMAT");
        // cttest_longest_command: a 224-byte pause-tube line is read whole
        let name = "x".repeat(200);
        assert_eq!(c.cmd(&format!("use {name}")).await, format!("USING {name}"));
        assert_eq!(
            c.cmd(&format!("pause-tube {name} 4294967295")).await,
            "PAUSED"
        );
        // cttest_use_tube_long
        assert_eq!(c.cmd(&format!("use {name}b")).await, "BAD_FORMAT");
        server.stop().await;
    }
}

#[tokio::test]
async fn testserv_kick_and_peek() {
    let server = Delayq::start(Mode::Memory).await;
    let mut c = Client::connect(server.addr).await;
    // cttest_peek_delayed
    assert_eq!(c.cmd("peek-delayed").await, "NOT_FOUND");
    c.send(b"put 0 0 1 1\r\nA\r\n").await;
    assert_eq!(support::show(&c.read(WAIT).await), "INSERTED 1");
    c.send(b"put 0 99 1 1\r\nB\r\n").await;
    assert_eq!(support::show(&c.read(WAIT).await), "INSERTED 2");
    c.send(b"put 0 1 1 1\r\nC\r\n").await;
    assert_eq!(support::show(&c.read(WAIT).await), "INSERTED 3");
    assert_eq!(c.cmd("peek-delayed").await, "FOUND 3 1|C");
    // cttest_kickjob_delayed
    assert_eq!(c.cmd("kick-job 2").await, "KICKED");
    assert_eq!(c.cmd("kick-job 2").await, "NOT_FOUND");
    // cttest_peek_buried_kick, cttest_kickjob_buried
    assert_eq!(c.cmd("peek-buried").await, "NOT_FOUND");
    assert_eq!(c.cmd("reserve-with-timeout 0").await, "RESERVED 1 1|A");
    assert_eq!(c.cmd("bury 1 1").await, "BURIED");
    assert_eq!(c.cmd("peek-buried").await, "FOUND 1 1|A");
    assert_eq!(c.cmd("kick 1").await, "KICKED 1");
    assert_eq!(c.cmd("peek-buried").await, "NOT_FOUND");
    assert_eq!(c.cmd("kick 1").await, "KICKED 1", "then the delayed one");
    server.stop().await;
}

#[tokio::test]
async fn testserv_reserve_job() {
    let server = Delayq::start(Mode::Embedded).await;
    let mut c = Client::connect(server.addr).await;
    let mut other = Client::connect(server.addr).await;
    // cttest_reserve_job_ready, cttest_reserve_job_already_reserved
    assert_eq!(put(&mut c, "A").await, "INSERTED 1");
    assert_eq!(put(&mut c, "B").await, "INSERTED 2");
    assert_eq!(c.cmd("reserve-job 2").await, "RESERVED 2 1|B");
    assert_eq!(c.cmd("reserve-job 2").await, "NOT_FOUND");
    assert_eq!(other.cmd("reserve-job 2").await, "NOT_FOUND");
    assert_eq!(c.cmd("reserve-job 3").await, "NOT_FOUND");
    assert_eq!(c.cmd("reserve-job 3x").await, "BAD_FORMAT");
    assert_eq!(
        c.cmd("release 1 1 0").await,
        "NOT_FOUND",
        "1 was not reserved"
    );
    assert_eq!(c.cmd("release 2 1 0").await, "RELEASED");
    // cttest_reserve_job_delayed: a delayed job comes back ready when released.
    c.send(b"put 0 100 1 1\r\nC\r\n").await;
    assert_eq!(support::show(&c.read(WAIT).await), "INSERTED 3");
    assert_eq!(c.cmd("reserve-job 3").await, "RESERVED 3 1|C");
    assert_eq!(field(&c.cmd("stats-job 3").await, "state"), "reserved");
    assert_eq!(c.cmd("release 3 1 0").await, "RELEASED");
    assert_eq!(field(&c.cmd("stats-job 3").await, "state"), "ready");
    // cttest_reserve_job_buried
    assert_eq!(c.cmd("reserve-job 1").await, "RESERVED 1 1|A");
    assert_eq!(c.cmd("bury 1 1").await, "BURIED");
    assert_eq!(other.cmd("reserve-job 1").await, "RESERVED 1 1|A");
    assert_eq!(
        c.cmd("delete 1").await,
        "NOT_FOUND",
        "held by the other connection"
    );
    assert_eq!(other.cmd("delete 1").await, "DELETED");
    assert_eq!(c.cmd("reserve-job 1").await, "NOT_FOUND");
    // A paused tube hands a named job out (beanstalkd does), but not to reserve.
    assert_eq!(c.cmd("pause-tube default 100").await, "PAUSED");
    assert_eq!(c.cmd("reserve-with-timeout 0").await, "TIMED_OUT");
    assert_eq!(c.cmd("reserve-job 3").await, "RESERVED 3 1|C");
    // cttest_reserve_job_ttr_deadline_soon: a job taken this way has its ttr.
    assert_eq!(c.cmd("reserve-with-timeout 1").await, "DEADLINE_SOON");
    // A closing connection gives its reserve-job jobs back, as any reserved job.
    drop(c);
    let mut c = other;
    for _ in 0..100 {
        if field(&c.cmd("stats-job 3").await, "state") == "ready" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(field(&c.cmd("stats-job 3").await, "state"), "ready");
    let mut c2 = Client::connect(server.addr).await;
    assert_eq!(c.cmd("reserve-job 2").await, "RESERVED 2 1|B");
    assert_eq!(field(&c2.cmd("stats-job 2").await, "state"), "reserved");
    assert_eq!(field(&c2.cmd("stats-job 2").await, "reserves"), "2");
    assert_eq!(c2.cmd("reserve-job 2").await, "NOT_FOUND");
    server.stop().await;
}

#[tokio::test]
async fn testserv_delete_reserved_by_other_and_close_releases() {
    let server = Delayq::start(Mode::Embedded).await;
    let mut a = Client::connect(server.addr).await;
    let mut b = Client::connect(server.addr).await;
    assert_eq!(put(&mut a, "a").await, "INSERTED 1");
    assert_eq!(a.cmd("reserve").await, "RESERVED 1 1|a");
    // cttest_delete_reserved_by_other
    assert_eq!(b.cmd("delete 1").await, "NOT_FOUND");
    // cttest_close_releases_job: the other connection waits and gets it once a closes.
    b.send(b"reserve-with-timeout 5\r\n").await;
    assert_eq!(b.read(Duration::from_millis(200)).await, Got::Nothing);
    drop(a);
    assert_eq!(support::show(&b.read(WAIT).await), "RESERVED 1 1|a");
    // cttest_quit_releases_job
    b.send(b"quit\r\n").await;
    assert_eq!(b.read(WAIT).await, Got::Closed);
    let mut c = Client::connect(server.addr).await;
    assert_eq!(c.cmd("reserve-with-timeout 5").await, "RESERVED 1 1|a");
    let stats = c.cmd("stats-job 1").await;
    assert_eq!(field(&stats, "reserves"), "3");
    assert_eq!(c.cmd("delete 1").await, "DELETED");
    server.stop().await;
}

#[tokio::test]
async fn testserv_deadline_soon_and_ttr() {
    let server = Delayq::start(Mode::Memory).await;
    let mut c = Client::connect(server.addr).await;
    // cttest_reserve_ttr_deadline_soon: ttr 1 puts the job inside the margin at once.
    c.send(b"put 0 0 1 1\r\na\r\n").await;
    assert_eq!(support::show(&c.read(WAIT).await), "INSERTED 1");
    assert_eq!(c.cmd("reserve-with-timeout 1").await, "RESERVED 1 1|a");
    assert_eq!(c.cmd("reserve-with-timeout 1").await, "DEADLINE_SOON");
    // The ttr runs out: the job is handed out again, and its first holder lost it.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(c.cmd("reserve-with-timeout 5").await, "RESERVED 1 1|a");
    let stats = c.cmd("stats-job 1").await;
    assert_eq!(field(&stats, "timeouts"), "1");
    assert_eq!(field(&stats, "ttr"), "1");
    // cttest_ttr_small: a ttr of 0 becomes 1.
    c.send(b"put 0 0 0 1\r\nb\r\n").await;
    assert_eq!(support::show(&c.read(WAIT).await), "INSERTED 2");
    assert_eq!(field(&c.cmd("stats-job 2").await, "ttr"), "1");
    // A waiting reserve answers DEADLINE_SOON when a held job enters the margin.
    c.send(b"put 0 0 2 1\r\nc\r\n").await;
    assert_eq!(support::show(&c.read(WAIT).await), "INSERTED 3");
    drop(c);
    let mut d = Client::connect(server.addr).await;
    assert_eq!(d.cmd("reserve-with-timeout 0").await, "RESERVED 1 1|a");
    assert_eq!(d.cmd("delete 1").await, "DELETED");
    assert_eq!(d.cmd("reserve-with-timeout 0").await, "RESERVED 2 1|b");
    assert_eq!(d.cmd("delete 2").await, "DELETED");
    assert_eq!(d.cmd("reserve-with-timeout 0").await, "RESERVED 3 1|c");
    let started = std::time::Instant::now();
    assert_eq!(d.cmd("reserve-with-timeout 10").await, "DEADLINE_SOON");
    assert!(started.elapsed() < Duration::from_secs(5));
    server.stop().await;
}

#[tokio::test]
async fn bad_input_is_answered_and_loses_nothing() {
    let server =
        Delayq::start_with(Mode::Embedded, BeanstalkOptions::default().max_job_size(10)).await;
    let mut c = Client::connect(server.addr).await;
    // A bad line (too long) is BAD_FORMAT and the next command works.
    c.send(format!("{}\r\n", "u".repeat(1000)).as_bytes()).await;
    assert_eq!(support::show(&c.read(WAIT).await), "BAD_FORMAT");
    assert_eq!(c.cmd("hello").await, "UNKNOWN_COMMAND");
    // Oversized job: JOB_TOO_BIG once the body is skipped, nothing stored.
    c.send(b"put 0 0 10 11\r\n01234567890\r\n").await;
    assert_eq!(support::show(&c.read(WAIT).await), "JOB_TOO_BIG");
    // Missing CRLF after the body: EXPECTED_CRLF, nothing stored.
    c.send(b"put 0 0 10 3\r\nabcXY").await;
    assert_eq!(support::show(&c.read(WAIT).await), "EXPECTED_CRLF");
    c.send(b"\r\n").await;
    assert_eq!(support::show(&c.read(WAIT).await), "UNKNOWN_COMMAND");
    // A NUL inside a line.
    c.send(b"stats\0\r\n").await;
    assert_eq!(support::show(&c.read(WAIT).await), "BAD_FORMAT");
    // A body at the limit is taken.
    c.send(b"put 0 0 10 10\r\n0123456789\r\n").await;
    let inserted = support::show(&c.read(WAIT).await);
    assert!(inserted.starts_with("INSERTED "), "{inserted}");
    // A connection dropped in the middle of a body adds nothing.
    let mut d = Client::connect(server.addr).await;
    d.send(b"put 0 0 10 8\r\nhalf").await;
    drop(d);
    // Nor one dropped before the body starts.
    let mut e = Client::connect(server.addr).await;
    e.send(b"put 0 0 10 8\r\n").await;
    drop(e);
    // A client that closes its sending side inside a body still gets the replies before it.
    let mut f = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    f.write_all(b"list-tube-used\r\nput 0 0 10 8\r\nhalf")
        .await
        .unwrap();
    f.shutdown().await.unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(WAIT, f.read_to_end(&mut got)).await;
    read.unwrap().unwrap();
    assert_eq!(got, b"USING default\r\n");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stats = c.cmd("stats").await;
    assert_eq!(field(&stats, "current-jobs-ready"), "1", "{stats}");
    assert_eq!(field(&stats, "total-jobs"), "1");
    let page = server.queue.list("default", None, 1, 100).await.unwrap();
    assert_eq!(page.items.len(), 1, "exactly one task in storage");
    assert_eq!(page.items[0].body, b"0123456789");
    // The server still serves.
    assert_eq!(
        c.cmd("reserve-with-timeout 0").await,
        format!("RESERVED {} 10|0123456789", &inserted[9..])
    );
    server.stop().await;
}

#[tokio::test]
async fn a_waiting_reserve_whose_client_leaves_takes_nothing() {
    let server = Delayq::start(Mode::Memory).await;
    let mut waiter = Client::connect(server.addr).await;
    waiter.send(b"reserve\r\n").await;
    assert_eq!(waiter.read(Duration::from_millis(200)).await, Got::Nothing);
    drop(waiter);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut p = Client::connect(server.addr).await;
    assert_eq!(put(&mut p, "x").await, "INSERTED 1");
    let mut w = Client::connect(server.addr).await;
    assert_eq!(w.cmd("reserve-with-timeout 5").await, "RESERVED 1 1|x");
    server.stop().await;
}

#[tokio::test]
async fn a_task_added_over_http_gets_an_alias() {
    let server = Delayq::start(Mode::Memory).await;
    let mut c = Client::connect(server.addr).await;
    assert_eq!(put(&mut c, "first").await, "INSERTED 1");
    assert_eq!(c.cmd("reserve").await, "RESERVED 1 5|first");
    assert_eq!(c.cmd("delete 1").await, "DELETED");
    server
        .queue
        .add(NewTask::new("default", "order-17").body("from http"))
        .await
        .unwrap();
    server
        .queue
        .add(NewTask::new("default", "42").body("numeric"))
        .await
        .unwrap();
    assert_eq!(
        c.cmd("peek-ready").await,
        "FOUND 2 9|from http",
        "an alias from the counter"
    );
    assert_eq!(c.cmd("reserve").await, "RESERVED 2 9|from http");
    assert_eq!(c.cmd("reserve").await, "RESERVED 42 7|numeric");
    assert_eq!(c.cmd("delete 2").await, "DELETED");
    assert_eq!(c.cmd("release 42 0 0").await, "RELEASED");
    assert_eq!(c.cmd("peek 42").await, "FOUND 42 7|numeric");
    let info = server.queue.get("default", "order-17").await.unwrap();
    assert_eq!(info.state, delayq::State::Finished);
    // The reverse: a beanstalk job is task "3" of its tube over HTTP.
    assert_eq!(put(&mut c, "beanstalk").await, "INSERTED 3");
    let info = server.queue.get("default", "3").await.unwrap();
    assert_eq!(info.body, b"beanstalk");
    assert_eq!(info.priority, 0);
    server.stop().await;
}

#[tokio::test]
async fn job_ids_continue_after_a_restart() {
    let server = Delayq::start(Mode::Embedded).await;
    let mut c = Client::connect(server.addr).await;
    assert_eq!(put(&mut c, "a").await, "INSERTED 1");
    assert_eq!(put(&mut c, "b").await, "INSERTED 2");
    assert_eq!(c.cmd("bury 1 0").await, "NOT_FOUND");
    assert_eq!(c.cmd("reserve").await, "RESERVED 1 1|a");
    assert_eq!(c.cmd("bury 1 5").await, "BURIED");
    drop(c);
    let dir = server.stop_keep().await;
    let server = Delayq::start_in(dir, BeanstalkOptions::default()).await;
    let mut c = Client::connect(server.addr).await;
    let id: u64 = put(&mut c, "c").await[9..].parse().unwrap();
    assert!(id > 2, "ids never repeat: {id}");
    assert_eq!(c.cmd("peek-buried").await, "FOUND 1 1|a");
    assert_eq!(field(&c.cmd("stats-job 1").await, "pri"), "5");
    assert_eq!(c.cmd("peek 2").await, "FOUND 2 1|b");
    server.stop().await;
}

#[tokio::test]
async fn drain_mode_refuses_puts_only() {
    let server = Delayq::start(Mode::Memory).await;
    let mut c = Client::connect(server.addr).await;
    assert_eq!(put(&mut c, "a").await, "INSERTED 1");
    server.control.drain();
    // cttest_put_in_drain
    assert_eq!(put(&mut c, "b").await, "DRAINING");
    assert_eq!(field(&c.cmd("stats").await, "draining"), "true");
    assert_eq!(c.cmd("reserve").await, "RESERVED 1 1|a");
    assert_eq!(c.cmd("delete 1").await, "DELETED");
    server.stop().await;
}

#[tokio::test]
async fn a_closing_listener_gives_held_jobs_back() {
    let server = Delayq::start(Mode::Memory).await;
    let queue = server.queue.clone();
    let mut c = Client::connect(server.addr).await;
    assert_eq!(put(&mut c, "a").await, "INSERTED 1");
    assert_eq!(c.cmd("reserve").await, "RESERVED 1 1|a");
    server.control.close();
    assert_eq!(c.read(WAIT).await, Got::Closed);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        queue.get("default", "1").await.unwrap().state,
        delayq::State::Ready
    );
    queue.shutdown().await.unwrap();
}

#[tokio::test]
async fn unix_socket() {
    // cttest_peek_ok_unix, cttest_unix_auto_removal
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("beanstalk.sock");
    std::fs::write(&path, b"stale").unwrap();
    let queue = delayq::Queue::memory();
    let server = BeanstalkServer::bind(
        &BeanstalkAddr::Unix(path.clone()),
        queue.clone(),
        BeanstalkOptions::default(),
    )
    .await
    .unwrap();
    let control = server.control();
    let task = tokio::spawn(server.run());
    let stream = tokio::net::UnixStream::connect(&path).await.unwrap();
    let (mut r, mut w) = stream.into_split();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    w.write_all(b"put 0 0 1 1\r\na\r\npeek 1\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    while got.len() < b"INSERTED 1\r\nFOUND 1 1\r\na\r\n".len() {
        let mut buf = [0u8; 64];
        let n = r.read(&mut buf).await.unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, b"INSERTED 1\r\nFOUND 1 1\r\na\r\n");
    control.close();
    task.await.unwrap();
    assert!(!path.exists(), "the socket file is removed at close");
    queue.shutdown().await.unwrap();
}
