//! Hostile clients on the beanstalk listener, over real sockets: a thousand slow or idle
//! connections beside a normal one, the connection cap, a command line or a job body that is
//! started and never finished (slow-loris), a client that sends nothing, and one that never
//! reads its replies.

mod support;

use std::time::Duration;

use delayq_beanstalk::BeanstalkOptions;
use support::{Client, Delayq, Got, Mode, show};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// A generous bound for anything that waits on the real clock.
const PATIENCE: Duration = Duration::from_secs(30);

/// Waits until the server closes `stream` (EOF or reset), at most [`PATIENCE`]; what it sent
/// before closing is returned.
async fn closed_by_server(stream: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(PATIENCE, stream.read(&mut buf)).await {
            Err(_) => panic!("the server did not close the connection within {PATIENCE:?}"),
            Ok(Ok(0)) | Ok(Err(_)) => return got,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// One put, reserve and delete on `c`, asserting each reply.
async fn put_reserve_delete(c: &mut Client, body: &str) {
    let put = c.cmd(&format!("put 0 0 60 {}\r\n{body}", body.len())).await;
    let id = put
        .strip_prefix("INSERTED ")
        .unwrap_or_else(|| panic!("put: {put}"));
    assert_eq!(
        c.cmd("reserve-with-timeout 5").await,
        format!("RESERVED {id} {}|{body}", body.len())
    );
    assert_eq!(c.cmd(&format!("delete {id}")).await, "DELETED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_slow_or_idle_connections_do_not_stop_normal_work() {
    // The read timeout is long enough that the slow connections are all still open while the
    // normal client works, and short enough that the test sees them cut.
    let options = BeanstalkOptions::default().read_timeout_ms(3_000);
    let server = Delayq::start_with(Mode::Memory, options).await;
    let mut hostile = Vec::new();
    for i in 0..1_000 {
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        match i % 3 {
            // Idle: connected, says nothing.
            0 => {}
            // A command line started and never finished.
            1 => s.write_all(b"reserve-with-ti").await.unwrap(),
            // A put whose body never arrives in full.
            _ => s.write_all(b"put 0 0 60 100\r\nonly a part").await.unwrap(),
        }
        hostile.push((i % 3, s));
    }
    // A normal client meanwhile: every command is answered.
    let mut c = Client::connect(server.addr).await;
    for i in 0..50 {
        put_reserve_delete(&mut c, &format!("job {i}")).await;
    }
    // The slow ones are cut (and their puts added nothing); the idle ones stay, as in
    // beanstalkd (no idle timeout by default).
    for (kind, s) in hostile.iter_mut().filter(|(kind, _)| *kind != 0) {
        let sent = closed_by_server(s).await;
        assert!(sent.is_empty(), "kind {kind}: {sent:?}");
    }
    assert_eq!(c.cmd("peek-ready").await, "NOT_FOUND");
    let stats = c.cmd("stats").await;
    assert!(stats.contains("\ncurrent-connections: 335\n"), "{stats}");
    // Every put line counts (beanstalkd counts a put once its line is read); only the
    // normal client's made jobs.
    assert!(stats.contains("\ncmd-put: 383\n"), "{stats}");
    assert!(stats.contains("\ntotal-jobs: 50\n"), "{stats}");
    for (_, s) in hostile.iter_mut().filter(|(kind, _)| *kind == 0).take(3) {
        s.write_all(b"list-tube-used\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(PATIENCE, s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf[..n], b"USING default\r\n");
    }
    drop(hostile);
    server.stop().await;
}

#[tokio::test]
async fn past_the_cap_a_connection_is_closed_at_once_and_a_freed_slot_is_reused() {
    let options = BeanstalkOptions::default().max_connections(3);
    let server = Delayq::start_with(Mode::Memory, options).await;
    let mut open = Vec::new();
    for _ in 0..3 {
        let mut c = Client::connect(server.addr).await;
        assert_eq!(c.cmd("list-tube-used").await, "USING default");
        open.push(c);
    }
    let mut extra = TcpStream::connect(server.addr).await.unwrap();
    // The server closes it without a word, and it was never served.
    let _ = extra.write_all(b"list-tube-used\r\n").await;
    assert!(closed_by_server(&mut extra).await.is_empty());
    // The open ones still work.
    for c in &mut open {
        assert_eq!(c.cmd("list-tube-used").await, "USING default");
    }
    // One leaves: its slot is free again once its session has ended.
    assert_eq!(open.pop().unwrap().cmd("quit").await, "<closed>");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let mut c = Client::connect(server.addr).await;
        match c.cmd("list-tube-used").await.as_str() {
            "USING default" => break,
            "<closed>" => assert!(Instant::now() < deadline, "the freed slot never came back"),
            other => panic!("{other}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.stop().await;
}

#[tokio::test]
async fn a_slow_command_line_or_job_body_is_cut_off_and_adds_nothing() {
    let options = BeanstalkOptions::default().read_timeout_ms(300);
    let server = Delayq::start_with(Mode::Embedded, options).await;
    // A body that stops half-way.
    let mut body = TcpStream::connect(server.addr).await.unwrap();
    body.write_all(b"put 0 0 60 10\r\nhalf").await.unwrap();
    // A command line trickled a byte at a time: the limit counts from its first byte, so the
    // trickle does not keep it alive (14 bytes at 100 ms take longer than 300 ms).
    let mut trickle = TcpStream::connect(server.addr).await.unwrap();
    let trickler = tokio::spawn(async move {
        for b in b"list-tube-used" {
            if trickle.write_all(&[*b]).await.is_err() {
                return (trickle, true);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (trickle, false)
    });
    assert!(closed_by_server(&mut body).await.is_empty());
    let (mut trickle, _) = trickler.await.unwrap();
    assert!(closed_by_server(&mut trickle).await.is_empty());
    // Nothing was added, and a quick client is served as before.
    let mut c = Client::connect(server.addr).await;
    assert_eq!(c.cmd("peek-ready").await, "NOT_FOUND");
    let stats = c.cmd("stats-tube default").await;
    assert!(stats.contains("\ntotal-jobs: 0\n"), "{stats}");
    put_reserve_delete(&mut c, "quick").await;
    server.stop().await;
}

#[tokio::test]
async fn the_idle_timeout_closes_a_silent_connection_gives_its_job_back_and_spares_a_reserve() {
    let options = BeanstalkOptions::default().idle_timeout_ms(500);
    let server = Delayq::start_with(Mode::Memory, options).await;
    let mut holder = Client::connect(server.addr).await;
    let put = holder.cmd("put 0 0 120 2\r\nhi").await;
    let id = put.strip_prefix("INSERTED ").unwrap().to_owned();
    assert_eq!(holder.cmd("reserve").await, format!("RESERVED {id} 2|hi"));
    // A reserve that waits longer than the idle timeout is not idle.
    let mut waiter = Client::connect(server.addr).await;
    assert_eq!(waiter.cmd("watch other").await, "WATCHING 2");
    assert_eq!(waiter.cmd("ignore default").await, "WATCHING 1");
    waiter.send(b"reserve-with-timeout 2\r\n").await;
    // The holder says nothing: it is closed, and its job is ready again at once (not after
    // its 120 s ttr).
    assert_eq!(holder.read(PATIENCE).await, Got::Closed);
    let mut other = Client::connect(server.addr).await;
    assert_eq!(
        other.cmd("reserve-with-timeout 10").await,
        format!("RESERVED {id} 2|hi")
    );
    assert_eq!(other.cmd(&format!("delete {id}")).await, "DELETED");
    assert_eq!(show(&waiter.read(PATIENCE).await), "TIMED_OUT");
    // Once its reserve is over, the waiter is idle like any other.
    assert_eq!(waiter.read(PATIENCE).await, Got::Closed);
    server.stop().await;
}

#[tokio::test]
async fn a_client_that_never_reads_its_replies_is_cut_off() {
    let options = BeanstalkOptions::default().read_timeout_ms(300);
    let server = Delayq::start_with(Mode::Memory, options).await;
    let mut c = Client::connect(server.addr).await;
    assert_eq!(c.cmd("put 0 0 60 1\r\nx").await, "INSERTED 1");
    // Ask for far more replies than the socket buffers hold, and read none of them.
    let mut greedy = TcpStream::connect(server.addr).await.unwrap();
    let writer = tokio::spawn(async move {
        let request = b"peek 1\r\n".repeat(20_000);
        // Blocks once the server stops reading (its replies back up); fails once the server
        // has closed the connection. Bounded either way.
        for _ in 0..200 {
            if greedy.write_all(&request).await.is_err() {
                break;
            }
        }
    });
    // The server gives up on it: only `c` is left.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let stats = c.cmd("stats").await;
        if stats.contains("\ncurrent-connections: 1\n") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the server kept a client that does not read its replies: {stats}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    writer.abort();
    assert_eq!(c.cmd("peek 1").await, "FOUND 1 1|x");
    server.stop().await;
}
