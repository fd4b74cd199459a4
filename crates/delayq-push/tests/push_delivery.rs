//! Push delivery against real HTTP receivers on loopback ports (delayq-testkit's
//! `Receiver`): what is sent, what each answer does to the task, and that hostile targets
//! stay contained. The queue is in memory on the system clock, with small ttrs and backoffs
//! so each test takes a few seconds at most.

use std::time::{Duration, Instant};

use delayq::{Backoff, MaxRetries, NewTask, Queue, State, TraceContext};
use delayq_push::{AllowList, Push, PushOptions, PushTarget};
use delayq_testkit::{Receiver, Reply};
use hmac::{Hmac, Mac};
use sha2::Sha256;

const WAIT: Duration = Duration::from_secs(10);

async fn dispatcher(queue: &Queue) -> Push {
    dispatcher_with(queue, PushOptions::default()).await
}

async fn dispatcher_with(queue: &Queue, options: PushOptions) -> Push {
    let push = Push::new(queue.clone(), options).unwrap();
    push.start().await;
    push
}

/// Waits until the task is in `state`, up to `WAIT`.
async fn wait_state(queue: &Queue, topic: &str, id: &str, state: State) -> delayq::TaskInfo {
    let deadline = Instant::now() + WAIT;
    loop {
        let info = queue.get(topic, id).await.unwrap();
        if info.state == state || Instant::now() > deadline {
            assert_eq!(info.state, state, "{info:?}");
            return info;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Verifies a `Delayq-Signature` as a receiver would: this is the README's Rust example,
/// word for word (with the hmac, sha2 and hex crates).
fn verify_at(secret: &[u8], header: &str, body: &[u8], now_ms: u64) -> bool {
    let (mut t, mut v1) = (None, None);
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", v)) => t = v.parse::<u64>().ok(),
            Some(("v1", v)) => v1 = hex::decode(v).ok(),
            _ => {}
        }
    }
    let (Some(t), Some(v1)) = (t, v1) else {
        return false;
    };
    if now_ms.abs_diff(t) > 300_000 {
        return false; // too old: a replay
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("any key length");
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    mac.verify_slice(&v1).is_ok() // compares in constant time
}

fn verify(secret: &str, header: &str, body: &[u8]) -> bool {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    verify_at(secret.as_bytes(), header, body, now_ms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_delivered_once_with_its_headers_and_a_valid_signature() {
    let receiver = Receiver::ok().await;
    let queue = Queue::memory();
    let push = dispatcher(&queue).await;
    push.set(
        PushTarget::new("orders", receiver.url("/hook"))
            .header("X-Env", "test")
            .header("Content-Type", "application/json")
            .secret("s3cret"),
    )
    .await
    .unwrap();
    queue
        .add(
            NewTask::new("orders", "cancel-123")
                .body(r#"{"order":123}"#)
                .delay_ms(100),
        )
        .await
        .unwrap();
    let calls = receiver.wait_for(1, WAIT).await;
    let info = wait_state(&queue, "orders", "cancel-123", State::Finished).await;
    // Nothing more arrives once it is finished.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.calls().len(), 1);
    let call = &calls[0];
    assert_eq!(call.path, "/hook");
    assert_eq!(call.body, br#"{"order":123}"#);
    assert_eq!(call.header("delayq-topic"), Some("orders"));
    assert_eq!(call.header("delayq-id"), Some("cancel-123"));
    assert_eq!(call.header("delayq-attempt"), Some("1"));
    assert_eq!(
        call.header("delayq-due-ms"),
        Some(info.due_ms.to_string().as_str())
    );
    assert_eq!(call.header("x-env"), Some("test"));
    // Added without a trace context: no trace headers.
    assert_eq!(call.header("traceparent"), None);
    assert_eq!(call.header("content-type"), Some("application/json"));
    let sig = call.header("delayq-signature").expect("signed");
    assert!(verify("s3cret", sig, &call.body), "{sig}");
    assert!(!verify("other", sig, &call.body));
    assert!(!verify("s3cret", sig, b"tampered"));
    // An old signature is refused even when it matches.
    assert!(!verify_at(b"s3cret", sig, &call.body, call.at_ms + 600_000));
    // Never early: the call came at or after the due.
    assert!(
        call.at_ms >= info.due_ms,
        "{} < {}",
        call.at_ms,
        info.due_ms
    );
    let stats = push.stats("orders").unwrap();
    assert_eq!(
        (stats.delivered, stats.failed_status, stats.in_flight),
        (1, 0, 0)
    );
    push.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_target_sends_no_signature() {
    let receiver = Receiver::ok().await;
    let queue = Queue::memory();
    let push = dispatcher(&queue).await;
    push.set(PushTarget::new("t", receiver.url("/")))
        .await
        .unwrap();
    queue.add(NewTask::new("t", "1").body("x")).await.unwrap();
    let calls = receiver.wait_for(1, WAIT).await;
    assert_eq!(calls[0].header("delayq-signature"), None);
    assert_eq!(
        calls[0].header("content-type"),
        Some("application/octet-stream")
    );
    push.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_is_retried_on_the_backoff_schedule_then_dead_with_the_answer() {
    let receiver = Receiver::start(|_, _| Reply::status(500, "database down")).await;
    let queue = Queue::memory();
    let push = dispatcher(&queue).await;
    push.set(PushTarget::new("pay", receiver.url("/cb")))
        .await
        .unwrap();
    queue
        .add(
            NewTask::new("pay", "p1")
                .max_retries(MaxRetries::Limited(2))
                .backoff(Backoff::Schedule { ms: vec![200, 400] }),
        )
        .await
        .unwrap();
    let info = wait_state(&queue, "pay", "p1", State::Dead).await;
    let calls = receiver.calls();
    assert_eq!(
        calls.len(),
        3,
        "one attempt and max_retries = 2 redeliveries"
    );
    let attempts: Vec<_> = calls
        .iter()
        .map(|c| c.header("delayq-attempt").unwrap())
        .collect();
    assert_eq!(attempts, ["1", "2", "3"]);
    let gaps: Vec<u128> = calls
        .windows(2)
        .map(|w| (w[1].at - w[0].at).as_millis())
        .collect();
    assert!(
        gaps[0] >= 200 && gaps[1] >= 400,
        "the backoff schedule: {gaps:?}"
    );
    assert_eq!(
        info.last_error.as_deref(),
        Some("push: HTTP 500: database down")
    );
    assert_eq!(info.retries, 2);
    assert_eq!(push.stats("pay").unwrap().failed_status, 3);
    push.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attempt_carries_the_tasks_trace_context() {
    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let receiver = Receiver::start(|_, n| {
        if n == 0 {
            Reply::status(503, "busy")
        } else {
            Reply::ok()
        }
    })
    .await;
    let queue = Queue::memory();
    let push = dispatcher(&queue).await;
    // A static traceparent of the target is replaced by the task's own.
    push.set(PushTarget::new("traced", receiver.url("/cb")).header("traceparent", "static"))
        .await
        .unwrap();
    let trace = TraceContext::parse(PARENT, Some("congo=t61rcWkgMzE")).unwrap();
    queue
        .add(NewTask::new("traced", "t1").trace(trace))
        .await
        .unwrap();
    wait_state(&queue, "traced", "t1", State::Finished).await;
    let calls = receiver.calls();
    assert_eq!(calls.len(), 2, "a failed attempt and a delivered one");
    for call in &calls {
        assert_eq!(call.header("traceparent"), Some(PARENT));
        assert_eq!(call.header("tracestate"), Some("congo=t61rcWkgMzE"));
    }
    push.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_is_redelivered() {
    let receiver = Receiver::start(|_, n| if n == 0 { Reply::Hang } else { Reply::ok() }).await;
    let queue = Queue::memory();
    let push = dispatcher(&queue).await;
    push.set(PushTarget::new("t", receiver.url("/")).timeout_ms(300))
        .await
        .unwrap();
    queue.add(NewTask::new("t", "1")).await.unwrap();
    let info = wait_state(&queue, "t", "1", State::Finished).await;
    let calls = receiver.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].header("delayq-attempt"), Some("2"));
    // The first attempt ended by the call's timeout, as its history says.
    let first = &info.history[0];
    assert_eq!(
        first.error.as_deref(),
        Some("push: no answer within 300 ms"),
        "{info:?}"
    );
    assert!(first.ended_at_ms - first.started_at_ms >= 300, "{first:?}");
    assert_eq!(info.retries, 1);
    let stats = push.stats("t").unwrap();
    assert_eq!((stats.failed_timeout, stats.delivered), (1, 1));
    push.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ttr_is_the_default_timeout() {
    let receiver = Receiver::start(|_, n| if n == 0 { Reply::Hang } else { Reply::ok() }).await;
    let queue = Queue::memory();
    let push = dispatcher(&queue).await;
    push.set(PushTarget::new("t", receiver.url("/")))
        .await
        .unwrap();
    queue.add(NewTask::new("t", "1").ttr_ms(400)).await.unwrap();
    let info = wait_state(&queue, "t", "1", State::Finished).await;
    assert_eq!(receiver.calls().len(), 2);
    // The first attempt ended by the call's timeout, the ttr less its margin, released with
    // the push error rather than expired.
    let first = &info.history[0];
    assert_eq!(
        first.error.as_deref(),
        Some("push: no answer within 360 ms"),
        "{info:?}"
    );
    assert!(first.ended_at_ms - first.started_at_ms >= 360, "{info:?}");
    push.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_the_delay_on_503_and_429_only() {
    // (status, Retry-After in s, whether it is honoured)
    for (status, after, honoured) in [(503, "1", true), (429, "1", true), (500, "30", false)] {
        let receiver = Receiver::start(move |_, n| {
            if n == 0 {
                Reply::Status(
                    status,
                    String::new(),
                    vec![("Retry-After".into(), after.into())],
                )
            } else {
                Reply::ok()
            }
        })
        .await;
        let queue = Queue::memory();
        let push = dispatcher(&queue).await;
        push.set(PushTarget::new("t", receiver.url("/")))
            .await
            .unwrap();
        // The task's own backoff is short: a wait of 1 s can only be the Retry-After, and a
        // 500's 30 s would outlast the test's patience.
        queue
            .add(NewTask::new("t", "1").backoff(Backoff::Fixed { ms: 10 }))
            .await
            .unwrap();
        wait_state(&queue, "t", "1", State::Finished).await;
        let calls = receiver.calls();
        assert_eq!(calls.len(), 2, "{status}");
        if honoured {
            let gap = calls[1].at - calls[0].at;
            assert!(gap >= Duration::from_millis(1_000), "{status}: {gap:?}");
        }
        push.shutdown(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_targets_never_slow_another_topic() {
    let hang = Receiver::start(|_, _| Reply::Hang).await;
    let slow = Receiver::start(|_, _| Reply::Slow(Duration::from_secs(3), 200)).await;
    let reset = Receiver::start(|_, _| Reply::Reset).await;
    let fail = Receiver::start(|_, _| Reply::status(500, "no")).await;
    let good = Receiver::ok().await;
    let queue = Queue::memory();
    // A small global cap: the hostile topics together may take at most their concurrency.
    let push = dispatcher_with(&queue, PushOptions::default().max_in_flight(16)).await;
    for (topic, r) in [
        ("hang", &hang),
        ("slow", &slow),
        ("reset", &reset),
        ("fail", &fail),
    ] {
        push.set(
            PushTarget::new(topic, r.url("/"))
                .concurrency(2)
                .timeout_ms(60_000),
        )
        .await
        .unwrap();
        for i in 0..200 {
            queue
                .add(
                    NewTask::new(topic, format!("{i}"))
                        .max_retries(MaxRetries::Unlimited)
                        .backoff(Backoff::Fixed { ms: 1 }),
                )
                .await
                .unwrap();
        }
    }
    push.set(PushTarget::new("good", good.url("/")))
        .await
        .unwrap();
    // The good topic's tasks fall due over 2 s while the others misbehave.
    for i in 0..40u64 {
        queue
            .add(NewTask::new("good", format!("{i}")).delay_ms(200 + i * 50))
            .await
            .unwrap();
    }
    let calls = good.wait_for(40, WAIT).await;
    assert_eq!(calls.len(), 40);
    let mut worst = 0;
    for call in &calls {
        let id: u64 = call.header("delayq-id").unwrap().parse().unwrap();
        let due: u64 = call.header("delayq-due-ms").unwrap().parse().unwrap();
        assert!(call.at_ms >= due, "task {id} early");
        worst = worst.max(call.at_ms - due);
    }
    // Generous: a shared 2-core machine running tests; the point is not milliseconds but
    // that a hanging neighbour does not hold the good topic for its 60 s timeout.
    assert!(worst < 1_500, "the good topic was held up {worst} ms");
    // The hostile topics hold no more than their concurrency each.
    for topic in ["hang", "slow", "reset", "fail"] {
        assert!(push.stats(topic).unwrap().in_flight <= 2, "{topic}");
    }
    assert_eq!(
        hang.calls().len(),
        2,
        "a hanging target holds its 2 slots, no more"
    );
    assert!(push.stats("reset").unwrap().failed_connect > 0);
    assert!(push.stats("fail").unwrap().failed_status > 0);
    push.shutdown(Duration::from_millis(200)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_topic_is_not_delivered_until_resumed() {
    let receiver = Receiver::ok().await;
    let queue = Queue::memory();
    let push = dispatcher(&queue).await;
    push.set(PushTarget::new("t", receiver.url("/")))
        .await
        .unwrap();
    queue.pause("t", None).await.unwrap();
    queue.add(NewTask::new("t", "1")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(receiver.calls().is_empty(), "delivered while paused");
    assert_eq!(queue.get("t", "1").await.unwrap().state, State::Ready);
    queue.resume("t").await.unwrap();
    receiver.wait_for(1, WAIT).await;
    wait_state(&queue, "t", "1", State::Finished).await;
    push.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_spaces_the_calls() {
    let receiver = Receiver::ok().await;
    let queue = Queue::memory();
    let push = dispatcher(&queue).await;
    // The bucket starts full when the target is applied, after this instant.
    let before = Instant::now();
    push.set(PushTarget::new("t", receiver.url("/")).rate(10.0, Some(2)))
        .await
        .unwrap();
    for i in 0..8 {
        queue.add(NewTask::new("t", format!("{i}"))).await.unwrap();
    }
    let calls = receiver.wait_for(8, WAIT).await;
    assert_eq!(calls.len(), 8);
    // A burst of 2, then 10 a second: the 6 others wait at least 600 ms for their tokens.
    let span = calls[7].at - before;
    assert!(span >= Duration::from_millis(600), "{span:?}");
    push.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_allow_refuses_addresses_outside_it_after_resolution() {
    let receiver = Receiver::ok().await;
    let queue = Queue::memory();
    let allow = AllowList::parse(&["10.0.0.0/8"]).unwrap();
    let push = dispatcher_with(&queue, PushOptions::default().allow(allow)).await;
    let port = receiver.url("").rsplit(':').next().unwrap().to_owned();
    // By address, and by a name that resolves to a refused address.
    push.set(PushTarget::new("ip", receiver.url("/")))
        .await
        .unwrap();
    push.set(PushTarget::new("name", format!("http://localhost:{port}/")))
        .await
        .unwrap();
    for topic in ["ip", "name"] {
        queue
            .add(NewTask::new(topic, "1").max_retries(MaxRetries::Limited(0)))
            .await
            .unwrap();
    }
    let ip = wait_state(&queue, "ip", "1", State::Dead).await;
    let name = wait_state(&queue, "name", "1", State::Dead).await;
    assert!(receiver.calls().is_empty());
    assert!(ip.last_error.unwrap().contains("not allowed by push_allow"));
    let err = name.last_error.unwrap();
    assert!(err.contains("push_allow does not allow"), "{err}");
    assert_eq!(push.stats("name").unwrap().failed_connect, 1);
    push.shutdown(Duration::from_secs(1)).await;

    // The same targets with loopback allowed are delivered.
    let queue = Queue::memory();
    let allow = AllowList::parse(&["127.0.0.0/8", "::1"]).unwrap();
    let push = dispatcher_with(&queue, PushOptions::default().allow(allow)).await;
    push.set(PushTarget::new("name", format!("http://localhost:{port}/")))
        .await
        .unwrap();
    queue.add(NewTask::new("name", "1")).await.unwrap();
    wait_state(&queue, "name", "1", State::Finished).await;
    push.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_are_validated_listed_and_deleted() {
    let queue = Queue::memory();
    let push = dispatcher(&queue).await;
    let err = push
        .set(PushTarget::new("t", "ftp://x/"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), delayq::ErrorKind::Invalid);
    assert!(err.to_string().contains("url"), "{err}");
    push.set(PushTarget::new("b", "http://127.0.0.1:1/"))
        .await
        .unwrap();
    push.set(PushTarget::new("a", "http://127.0.0.1:1/").secret("k"))
        .await
        .unwrap();
    let topics: Vec<_> = push
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.topic)
        .collect();
    assert_eq!(topics, ["a", "b"]);
    assert!(push.has_target("a"));
    assert_eq!(
        push.get("a").await.unwrap().unwrap().secret.as_deref(),
        Some("k")
    );
    assert!(push.delete("a").await.unwrap());
    assert!(!push.delete("a").await.unwrap());
    assert!(!push.has_target("a"));
    assert!(push.get("a").await.unwrap().is_none());
    push.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_target_stops_deliveries() {
    let receiver = Receiver::ok().await;
    let queue = Queue::memory();
    let push = dispatcher(&queue).await;
    push.set(PushTarget::new("t", receiver.url("/")))
        .await
        .unwrap();
    queue.add(NewTask::new("t", "1")).await.unwrap();
    receiver.wait_for(1, WAIT).await;
    push.delete("t").await.unwrap();
    queue.add(NewTask::new("t", "2")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(receiver.calls().len(), 1);
    // The task waits for an ordinary consumer.
    let got = queue.pop_one("t", 0).await.unwrap().unwrap();
    assert_eq!(got.id, "2");
    push.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dispatcher_keeps_within_the_queues_pop_limits() {
    use std::sync::Arc;
    // A server may lower the pop limits below a target's concurrency, even turn long-polls off.
    let mut limits = delayq::Limits::default();
    limits.max_pop_count = 2;
    limits.max_pop_timeout_ms = 0;
    let ctx = delayq::StorageContext::new(Arc::new(delayq::SystemClock::new())).with_limits(limits);
    let queue = Queue::memory_with(ctx);
    let receiver = Receiver::ok().await;
    let push = dispatcher(&queue).await;
    push.set(PushTarget::new("t", receiver.url("/")).concurrency(8))
        .await
        .unwrap();
    for i in 0..10 {
        queue.add(NewTask::new("t", format!("{i}"))).await.unwrap();
    }
    assert_eq!(receiver.wait_for(10, WAIT).await.len(), 10);
    push.shutdown(Duration::from_secs(1)).await;
}
