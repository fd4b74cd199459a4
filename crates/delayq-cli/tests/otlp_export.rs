//! delayq's OTLP export from the outside (docs/tracing.md), through the real binary: spans go
//! over gRPC to a collector serving the official trace service (tonic, the
//! `opentelemetry-proto` definitions) and over HTTP to a receiver when only the SDKs'
//! `OTEL_*` variables say where; a collector that is down, refusing or hanging costs no
//! request anything, and `delayq_spans_dropped_total` counts what was lost; JSON log lines
//! written while a traced request is served carry its trace id.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq_testkit::{Receiver, Reply};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use serde_json::{Value, json};
use std::sync::Mutex;
use support::otlp::{Span, received, spans_of};
use support::{Server, free_port};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const CONSUMER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01";

/// A gRPC collector: the official trace service, keeping what it is sent.
#[derive(Default, Clone)]
struct Collector(Arc<Mutex<Vec<Span>>>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.lock().unwrap().extend(spans_of(request.get_ref()));
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Collector {
    /// Serves on a free loopback port; returns its URL.
    async fn start(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let service = TraceServiceServer::new(self.clone());
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await
                .expect("the collector serves");
        });
        format!("http://{addr}")
    }

    fn spans(&self) -> Vec<Span> {
        self.0.lock().unwrap().clone()
    }
}

/// Waits until `got` returns spans of each name; returns them.
async fn wait_for(names: &[&str], got: impl Fn() -> Vec<Span>) -> Vec<Span> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let spans = got();
        if names.iter().all(|n| spans.iter().any(|s| s.name == *n)) {
            return spans;
        }
        assert!(Instant::now() < deadline, "no spans {names:?} in {spans:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn post(client: &reqwest::Client, url: &str, body: Value, traceparent: &str) -> Value {
    let response = client
        .post(url)
        .header("traceparent", traceparent)
        .json(&body)
        .send()
        .await
        .expect("a request");
    assert_eq!(response.status(), 200, "{url}");
    response.json().await.expect("JSON")
}

/// Adds a traced task due in 50 ms, pops it, finishes it with the consumer's context.
async fn traced_round(server: &Server, topic: &str, id: &str) {
    let c = reqwest::Client::new();
    let base = &server.url;
    post(
        &c,
        &format!("{base}/add"),
        json!({"topic": topic, "id": id, "delay_ms": 50}),
        PRODUCER,
    )
    .await;
    let popped = post(
        &c,
        &format!("{base}/pop"),
        json!({"topic": topic, "timeout_ms": 10_000}),
        PRODUCER,
    )
    .await;
    let receipt = popped["data"]["receipt"]
        .as_str()
        .expect("a task")
        .to_owned();
    post(
        &c,
        &format!("{base}/finish"),
        json!({"topic": topic, "id": id, "receipt": receipt}),
        CONSUMER,
    )
    .await;
}

/// The value of an unlabelled series of `/metrics`.
async fn metric(server: &Server, name: &str) -> u64 {
    let text = reqwest::get(format!("{}/metrics", server.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_go_to_a_grpc_collector() {
    let collector = Collector::default();
    let url = collector.start().await;
    let server = Server::start_with(&[
        "--storage",
        "memory",
        "--otlp-protocol",
        "grpc",
        "--otlp-endpoint",
        &url,
        "--otlp-service-name",
        "queue-a",
    ]);
    traced_round(&server, "orders", "o-1").await;
    let spans = wait_for(
        &["add orders", "fire orders", "pop orders", "finish orders"],
        || collector.spans(),
    )
    .await;
    for s in &spans {
        assert_eq!(
            (s.service.as_str(), s.trace_id.as_str()),
            ("queue-a", TRACE_ID),
            "{s:?}"
        );
        let parent = if s.name == "finish orders" {
            "b7ad6b7169203331"
        } else {
            "00f067aa0ba902b7"
        };
        assert_eq!(s.parent_span_id, parent, "{s:?}");
    }
    // The collector keeps the spans before it answers; the server counts them once the
    // answer is back, so the count may trail what the collector holds for a moment.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let exported = metric(&server, "delayq_spans_exported_total").await;
        if exported >= 4 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{exported} spans counted as exported"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(metric(&server, "delayq_spans_dropped_total").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdks_variables_say_where_when_no_flag_does() {
    let receiver = Receiver::ok().await;
    let server = Server::start_with_env(
        &["--storage", "memory"],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url("")),
            ("OTEL_SERVICE_NAME", "from-env"),
        ],
    );
    traced_round(&server, "mail", "m-1").await;
    let got = || received(&receiver);
    let spans = wait_for(&["add mail", "fire mail", "pop mail", "finish mail"], got).await;
    assert!(spans.iter().all(|s| s.service == "from-env"), "{spans:?}");
}

/// A collector down (nothing listens), refusing (500), slow (answers after 20 s, past the
/// exporter's 10 s timeout) or hanging: every request answers at once as without export,
/// and the spans that could not go are counted as dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_down_refusing_or_hanging_costs_requests_nothing() {
    let refusing = Receiver::start(|_, _| Reply::status(500, "no")).await;
    let hanging = Receiver::start(|_, _| Reply::Hang).await;
    let slow = Receiver::start(|_, _| Reply::Slow(Duration::from_secs(20), 200)).await;
    let down = format!("http://127.0.0.1:{}", free_port());
    for (what, url) in [
        ("down", down),
        ("refusing", refusing.url("")),
        ("slow", slow.url("")),
        ("hanging", hanging.url("")),
    ] {
        let server = Server::start_with(&[
            "--storage",
            "memory",
            "--otlp-endpoint",
            &url,
            "--otlp-max-queue",
            "4",
        ]);
        for i in 0..20 {
            let started = Instant::now();
            traced_round(&server, "t", &format!("{what}-{i}")).await;
            // Generous: a round waits 50 ms for its due; an export that blocked requests
            // would hold them for its 10 s timeout.
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{what}: a round took {:?}",
                started.elapsed()
            );
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while metric(&server, "delayq_spans_dropped_total").await == 0 {
            assert!(
                Instant::now() < deadline,
                "{what}: nothing counted as dropped"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            metric(&server, "delayq_spans_exported_total").await,
            0,
            "{what}"
        );
    }
}

/// `--log-format json`: a line written while a traced request is served starts with the
/// request's trace id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_log_lines_carry_the_requests_trace_id() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let log = dir.path().join("serve.log");
    let mut server = Server::start_logged(
        &["--storage", "memory", "--log-format", "json"],
        // The HTTP layer's per-request lines are at debug.
        &[("RUST_LOG", "info,tower_http=debug")],
        &log,
    );
    traced_round(&server, "logged", "l-1").await;
    server.terminate(Duration::from_secs(10));
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let traced: Vec<&Value> = lines
        .iter()
        .filter(|l| l.get("trace_id").is_some())
        .collect();
    assert!(!traced.is_empty(), "no line with a trace id:\n{text}");
    for l in &traced {
        assert_eq!(l["trace_id"], TRACE_ID, "{l}");
    }
    assert!(
        traced.iter().any(|l| l["span_id"] == "b7ad6b7169203331"),
        "the finish's lines carry the consumer's span:\n{text}"
    );
    // Lines of no request have none.
    assert!(lines.iter().any(|l| l.get("trace_id").is_none()), "{text}");
}
