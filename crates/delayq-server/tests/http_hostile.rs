//! Hostile clients against the real listener (`delayq_daemon::run` on a real socket): slow
//! headers, idle connections, trickling bodies and more connections than the cap. Clients
//! here speak raw HTTP/1.1 over TCP so they can be as slow as they like.
//!
//! Real time: the server's timeouts run on the real clock, so these tests only use bounds
//! that are generous (seconds) and lower bounds that hold on any machine (a connection is
//! never cut before its timeout).
//!
//! File descriptors: the 1 000-connection test holds about 2 100 descriptors in this process
//! (both ends of every connection); it checks the limit first and says so if it is too low.

mod listener;

use std::time::Duration;

use listener::{PATIENCE, metric_in, start};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Reads one response (status line, headers, a `Content-Length` body) from `stream`.
/// Returns the status and the body; `None` if the connection closed first.
async fn read_response(stream: &mut TcpStream) -> Option<(u16, String)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).to_string();
    Some((status, body))
}

/// Waits until the server closes `stream` (a read returns end of file or an error), reading
/// and dropping anything it sends first. Panics after [`PATIENCE`].
async fn until_closed(stream: &mut TcpStream) {
    let mut chunk = [0u8; 1024];
    tokio::time::timeout(PATIENCE, async {
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("the server closes the connection in time");
}

const GET_HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: delayq\r\n\r\n";

#[cfg(target_os = "linux")]
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

#[cfg(not(target_os = "linux"))]
fn open_files_limit() -> Option<u64> {
    None
}

/// Sends a request head byte by byte, never finishing it, until the server closes the
/// connection; returns how long that took from the first byte.
async fn slow_client(stream: TcpStream, header: Duration) -> Duration {
    let (mut read, mut write) = stream.into_split();
    // Taken before the byte is sent: the server cannot start its clock earlier.
    let first_byte = Instant::now();
    write.write_all(b"P").await.expect("first byte");
    let trickle = async {
        let head = b"OST /add HTTP/1.1\r\nHost: delayq\r\nX-Slow: ";
        for b in head.iter().chain([b'a'].iter().cycle()) {
            tokio::time::sleep(Duration::from_millis(250)).await;
            if write.write_all(&[*b]).await.is_err() {
                break;
            }
        }
        std::future::pending::<()>().await;
    };
    let mut chunk = [0u8; 64];
    tokio::select! {
        () = trickle => unreachable!(),
        read = tokio::time::timeout(header + PATIENCE, read.read(&mut chunk)) => {
            // Only a close (or a reset) may end it: the request never completed.
            assert!(matches!(read, Ok(Ok(0) | Err(_))), "slow client got {read:?}");
        }
    }
    first_byte.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_slow_or_idle_connections_do_not_stop_normal_requests() {
    const SLOW: usize = 500;
    const IDLE: usize = 500;
    if let Some(limit) = open_files_limit() {
        assert!(
            limit >= 2_200,
            "this test holds about 2 100 file descriptors; the soft limit is {limit} (raise it \
             with ulimit -n)"
        );
    }
    let header = Duration::from_millis(10_000);
    let idle = Duration::from_millis(12_000);
    let server = start(|c| {
        c.http.header_read_timeout_ms = header.as_millis() as u64;
        c.http.idle_timeout_ms = idle.as_millis() as u64;
        c.http.max_connections = 2_000;
    })
    .await;
    let addr = server.addr;

    // Half send a request head byte by byte and never finish it; half connect and say
    // nothing. Each reports how long after its first byte (or its connect) it was cut. They
    // connect one after another: a burst of a thousand SYNs at once would make the kernel
    // answer with SYN cookies, and an idle client whose last handshake packet is then lost
    // stays connected on its side while the server never sees it (the kernel's business,
    // not the server's).
    let mut slow = Vec::new();
    let mut idle_conns = Vec::new();
    for i in 0..SLOW + IDLE {
        // Taken before connecting: the server cannot start its clock earlier.
        let connecting = Instant::now();
        let stream = TcpStream::connect(addr).await.expect("connect");
        if i % 2 == 0 {
            slow.push(tokio::spawn(slow_client(stream, header)));
        } else {
            idle_conns.push(tokio::spawn(async move {
                let mut stream = stream;
                let mut chunk = [0u8; 64];
                let read = tokio::time::timeout(idle + PATIENCE, stream.read(&mut chunk)).await;
                assert!(
                    matches!(read, Ok(Ok(0) | Err(_))),
                    "idle client got {read:?}"
                );
                connecting.elapsed()
            }));
        }
    }

    // The server holds them all, and still answers normal requests.
    let open = "delayq_http_connections_open";
    let deadline = Instant::now() + PATIENCE;
    while server.metric(open).await < (SLOW + IDLE) as u64 {
        assert!(
            Instant::now() < deadline,
            "the server never held every connection"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for i in 0..20 {
        let id = format!("t{i}");
        let added = server
            .post("/add", json!({"topic": "normal", "id": id}))
            .await;
        assert_eq!(added["code"], 0, "{added}");
        let popped = server
            .post("/pop", json!({"topic": "normal", "timeout_ms": 0}))
            .await;
        assert_eq!(popped["data"]["id"], id, "{popped}");
    }
    assert!(
        server.metric(open).await > (SLOW + IDLE) as u64,
        "the hostile connections were still open while the requests were answered"
    );
    let cut_header = "delayq_http_connections_cut_total{reason=\"header_timeout\"}";
    let cut_idle = "delayq_http_connections_cut_total{reason=\"idle_timeout\"}";
    assert_eq!(server.metric(cut_header).await, 0, "nothing was cut early");

    // Every slow client is cut after the header timeout, every idle one after the idle
    // timeout: never before.
    for task in slow {
        let lived = task.await.expect("slow client");
        assert!(
            lived >= header,
            "a slow client was cut after {lived:?}, before {header:?}"
        );
    }
    for task in idle_conns {
        let lived = task.await.expect("idle client");
        assert!(
            lived >= idle,
            "an idle client was cut after {lived:?}, before {idle:?}"
        );
    }
    assert_eq!(server.metric(cut_header).await, SLOW as u64);
    assert!(server.metric(cut_idle).await >= IDLE as u64);
    // What is left open: the connections of this test's own client.
    assert!(server.metric(open).await <= 4);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_wait_until_one_closes() {
    const CAP: usize = 8;
    let server = start(|c| c.http.max_connections = CAP).await;
    let addr = server.addr;

    // Fill the cap with keep-alive connections that each got an answer.
    let mut served = Vec::new();
    for _ in 0..CAP {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream.write_all(GET_HEALTHZ).await.unwrap();
        let reply = tokio::time::timeout(PATIENCE, read_response(&mut stream)).await;
        assert_eq!(reply.expect("answered in time").expect("answered").0, 200);
        served.push(stream);
    }
    // More connect (the kernel queues them) but are not served.
    let mut waiting = Vec::new();
    for _ in 0..3 {
        let mut stream = TcpStream::connect(addr)
            .await
            .expect("connect to the backlog");
        stream.write_all(GET_HEALTHZ).await.unwrap();
        waiting.push(tokio::spawn(async move {
            let reply = read_response(&mut stream).await;
            (reply, stream)
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        waiting.iter().all(|w| !w.is_finished()),
        "a connection past the cap was served"
    );
    // The server counts exactly the cap (asked on a connection it already holds).
    served[0]
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: delayq\r\n\r\n")
        .await
        .unwrap();
    let (status, text) = read_response(&mut served[0]).await.expect("metrics");
    assert_eq!(status, 200);
    assert_eq!(metric_in(&text, "delayq_http_connections_open"), CAP as u64);

    // Closing two lets two of the waiting ones in; the third still waits.
    served.truncate(CAP - 2);
    let mut answered = 0;
    let deadline = Instant::now() + PATIENCE;
    while answered < 2 {
        assert!(Instant::now() < deadline, "freed slots were not used");
        answered = waiting.iter().filter(|w| w.is_finished()).count();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        waiting.iter().filter(|w| w.is_finished()).count(),
        2,
        "only as many as were freed"
    );
    drop(served);
    for w in waiting {
        let (reply, _stream) = tokio::time::timeout(PATIENCE, w)
            .await
            .expect("served once slots are free")
            .unwrap();
        assert_eq!(reply.expect("an answer").0, 200);
    }
    // Nothing broke: the server still answers and stops cleanly.
    let resp = server
        .client
        .get(server.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    server.stop().await;
}

#[tokio::test]
async fn a_trickling_body_is_cut_with_a_message_naming_the_limit() {
    let limit = Duration::from_millis(1_000);
    let server = start(|c| c.http.body_read_timeout_ms = limit.as_millis() as u64).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    // Taken before the head is sent: the server cannot start its clock earlier.
    let sent_head = Instant::now();
    stream
        .write_all(
            b"POST /add HTTP/1.1\r\nHost: delayq\r\nContent-Type: application/json\r\n\
              Content-Length: 10000\r\n\r\n{\"topic\":\"t\",",
        )
        .await
        .unwrap();
    let (mut read, mut write) = stream.into_split();
    let trickle = tokio::spawn(async move {
        // 10 000 bytes at one per 50 ms would take over eight minutes.
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if write.write_all(b" ").await.is_err() {
                return;
            }
        }
    });
    let mut buf = Vec::new();
    let got = tokio::time::timeout(PATIENCE, read.read_to_end(&mut buf)).await;
    assert!(got.is_ok(), "the server answered and closed in time");
    assert!(sent_head.elapsed() >= limit, "cut before the limit");
    let text = String::from_utf8_lossy(&buf);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(text.contains("body_read_timeout_ms"), "{text}");
    trickle.abort();
    assert_eq!(
        server
            .metric("delayq_http_connections_cut_total{reason=\"body_timeout\"}")
            .await,
        1
    );
    // A body that arrives in time is not affected.
    let added = server.post("/add", json!({"topic": "t", "id": "a"})).await;
    assert_eq!(added["code"], 0);
    server.stop().await;
}

#[tokio::test]
async fn idle_keep_alive_connections_close_but_busy_ones_do_not() {
    let idle = Duration::from_millis(800);
    let server = start(|c| {
        c.http.idle_timeout_ms = idle.as_millis() as u64;
        c.http.header_read_timeout_ms = 800;
    })
    .await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    // A long-poll lasts longer than both timeouts; the connection is busy, not idle.
    let body = br#"{"topic":"lp","timeout_ms":2000}"#;
    let head = format!(
        "POST /pop HTTP/1.1\r\nHost: delayq\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let started = Instant::now();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let (status, text) = tokio::time::timeout(PATIENCE, read_response(&mut stream))
        .await
        .unwrap()
        .expect("the long-poll is answered on its connection");
    assert_eq!(status, 200, "{text}");
    assert!(started.elapsed() >= Duration::from_millis(2_000));
    // Then the connection is idle and is closed, not before the idle timeout. The server's
    // idle time starts when it has written the answer, which a client cannot see exactly (it
    // reads the answer a moment later), but not before the long-poll's 2 s passed from the
    // request: so the close comes at least 2 s + the idle timeout after the request was sent.
    until_closed(&mut stream).await;
    assert!(
        started.elapsed() >= Duration::from_millis(2_000) + idle,
        "closed {:?} after the request",
        started.elapsed()
    );
    assert!(
        server
            .metric("delayq_http_connections_cut_total{reason=\"idle_timeout\"}")
            .await
            >= 1
    );
    server.stop().await;
}

#[tokio::test]
async fn graceful_shutdown_closes_idle_connections_and_finishes_requests_in_flight() {
    let server = start(|_| {}).await;
    let addr = server.addr;
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(GET_HEALTHZ).await.unwrap();
    assert_eq!(read_response(&mut idle).await.expect("answer").0, 200);
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(
        b"POST /add HTTP/1.1\r\nHost: delayq\r\nContent-Length: 22\r\n\r\n{\"topic\":\"s\",",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stop = tokio::spawn(server.stop());
    // The idle connection closes at once; the server waits for the request in flight.
    until_closed(&mut idle).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!stop.is_finished(), "stopped with a request in flight");
    slow.write_all(b"\"id\":\"x\"}").await.unwrap();
    let (status, text) = read_response(&mut slow)
        .await
        .expect("the request in flight is answered");
    assert_eq!(status, 200, "{text}");
    tokio::time::timeout(PATIENCE, stop)
        .await
        .expect("then the server stops")
        .expect("cleanly");
}
