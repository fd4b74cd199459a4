//! One trace across three processes (docs/tracing.md): a Python producer with the
//! OpenTelemetry SDK (from PyPI, installed by `scripts/python-deps`) adds a task inside its
//! span, `propagate.inject` putting `traceparent` on the `/add`; `delayq serve` keeps the
//! context through the wait; a Python consumer pops the task (or receives it by push) and
//! continues the trace from the answer's (or the request's) headers. Both Python processes
//! export their spans over OTLP/HTTP to a receiver here, which decodes them with the official
//! protobuf definitions (`opentelemetry-proto`): the consumer's span is in the producer's
//! trace, a child of the producer's span. Embedded storage, Redis with the consumer on the
//! other instance, and push delivery.

mod support;

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use delayq_testkit::{Receiver, RedisServer};
use serde_json::Value;
use support::otlp::{Span, received};
use support::{Server, free_port};

/// The Python of the venv `scripts/python-deps` makes under the target directory.
fn python() -> PathBuf {
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let python = target
        .parent()
        .expect("the target directory")
        .join("otel-venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/python-deps (scripts/test does)",
        python.display()
    );
    python
}

fn app() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/otel_app.py")
}

/// The Python push endpoint, killed when the test ends however it ends (a failed step
/// would otherwise leave it waiting for a delivery, holding the test's output open).
struct Hook(std::process::Child);

impl Drop for Hook {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs a role of the Python app to its end; returns the JSON line it printed last.
fn run(args: &[&str]) -> Value {
    let out = Command::new(python())
        .arg(app())
        .args(args)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().expect("a line")).expect("JSON")
}

/// How the task reached its consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Pop,
    Push,
}

/// Waits until the receiver has a span of each name (delayq exports in batches).
async fn wait_spans(receiver: &Receiver, names: &[String]) -> Vec<Span> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let spans = received(receiver);
        if names.iter().all(|n| spans.iter().any(|s| &s.name == n)) {
            return spans;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "spans {names:?} not all received: {spans:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Checks the received trace: the producer's root span, delayq's spans and the consumer's,
/// in one trace with the right parents, and what each Python process said it did.
async fn check_trace(
    receiver: &Receiver,
    topic: &str,
    via: Via,
    producer: &Value,
    consumer: &Value,
) {
    let mut names: Vec<String> = ["place-order", "cancel-order"].map(String::from).to_vec();
    let ours = match via {
        Via::Pop => vec!["add", "fire", "pop", "finish"],
        Via::Push => vec!["add", "fire", "pop", "push", "finish"],
    };
    names.extend(ours.iter().map(|op| format!("{op} {topic}")));
    let spans = wait_spans(receiver, &names).await;
    let find = |name: &str| {
        let all: Vec<&Span> = spans.iter().filter(|s| s.name == name).collect();
        assert_eq!(all.len(), 1, "one span {name}: {spans:?}");
        all[0].clone()
    };
    // The received trace as text (docs/tracing.md shows one), for whoever reads a failure.
    for s in &spans {
        println!(
            "{:<8} {:<13} trace {} span {} parent {}",
            s.service,
            s.name,
            s.trace_id,
            s.span_id,
            if s.parent_span_id.is_empty() {
                "-"
            } else {
                &s.parent_span_id
            }
        );
    }
    let (place, cancel) = (find("place-order"), find("cancel-order"));
    assert_eq!(place.service, "shop", "{place:?}");
    assert_eq!(cancel.service, "worker", "{cancel:?}");
    assert_eq!(place.trace_id, producer["trace_id"].as_str().unwrap());
    assert_eq!(place.span_id, producer["span_id"].as_str().unwrap());
    assert_eq!(place.parent_span_id, "", "the producer's span is the root");
    // One trace through the wait.
    for s in &spans {
        assert_eq!(
            s.trace_id, place.trace_id,
            "{s:?} is in the producer's trace"
        );
    }
    // delayq's add, fire and hand-out are children of the producer's span: the wait is a
    // gap between them, no span.
    for op in ["add", "fire", "pop"] {
        let s = find(&format!("{op} {topic}"));
        assert_eq!(s.service, "delayq", "{s:?}");
        assert_eq!(s.parent_span_id, place.span_id, "{s:?}");
    }
    // The consumer continues what delayq handed it: the producer's context on a pop (flags
    // included: this SDK sets the sampled and the random-trace-id bits, 03), delayq's push
    // span on a push. delayq's finish is a child of what the consumer's finish carried.
    let handed_by = match via {
        Via::Pop => place.span_id.clone(),
        Via::Push => {
            let push = find(&format!("push {topic}"));
            assert_eq!(push.parent_span_id, place.span_id, "{push:?}");
            push.span_id
        }
    };
    assert_eq!(cancel.parent_span_id, handed_by, "{spans:?}");
    assert_eq!(cancel.span_id, consumer["span_id"].as_str().unwrap());
    let handed = consumer["traceparent"].as_str().unwrap();
    assert!(
        handed.starts_with(&format!("00-{}-{}-", place.trace_id, handed_by)),
        "{handed}"
    );
    let finish = find(&format!("finish {topic}"));
    let finished_under = match via {
        Via::Pop => &cancel.span_id,
        Via::Push => &handed_by,
    };
    assert_eq!(&finish.parent_span_id, finished_under, "{finish:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_one_trace_from_producer_to_consumer() {
    let receiver = Receiver::ok().await;
    let otlp = receiver.url("/v1/traces");
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let server = Server::start_with(&[
        "--data-dir",
        dir.path().to_str().unwrap(),
        "--otlp-endpoint",
        &receiver.url(""),
    ]);
    let producer = run(&["produce", &server.url, "orders", "cancel-1", "300", &otlp]);
    let consumer = run(&["consume", &server.url, "orders", &otlp]);
    check_trace(&receiver, "orders", Via::Pop, &producer, &consumer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_the_consumer_on_the_other_instance_continues_the_trace() {
    let receiver = Receiver::ok().await;
    let otlp = receiver.url("/v1/traces");
    let redis = RedisServer::start();
    let base = receiver.url("");
    let a = Server::start_with(&["--redis", &redis.url(), "--otlp-endpoint", &base]);
    let b = Server::start_with(&["--redis", &redis.url(), "--otlp-endpoint", &base]);
    let producer = run(&["produce", &a.url, "orders", "cancel-2", "300", &otlp]);
    let consumer = run(&["consume", &b.url, "orders", &otlp]);
    check_trace(&receiver, "orders", Via::Pop, &producer, &consumer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_delivery_carries_the_trace_to_the_endpoint() {
    let receiver = Receiver::ok().await;
    let otlp = receiver.url("/v1/traces");
    let port = free_port();
    let mut hook = Hook(
        Command::new(python())
            .arg(app())
            .args(["serve", &port.to_string(), &otlp])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the Python endpoint"),
    );
    let mut lines = BufReader::new(hook.0.stdout.take().unwrap()).lines();
    let ready = lines.next().expect("a line").unwrap();
    assert!(ready.contains("listening"), "{ready}");
    let server = Server::start_with(&["--storage", "memory", "--otlp-endpoint", &receiver.url("")]);
    server
        .run(&[
            "push",
            "set",
            "-t",
            "hooked",
            "--url",
            &format!("http://127.0.0.1:{port}/hook"),
        ])
        .assert_code(0);
    let producer = run(&["produce", &server.url, "hooked", "cancel-3", "300", &otlp]);
    let last = lines.next().expect("the endpoint's result").unwrap();
    let consumer: Value = serde_json::from_str(&last).unwrap();
    assert!(hook.0.wait().unwrap().success());
    check_trace(&receiver, "hooked", Via::Push, &producer, &consumer).await;
}
