//! `GET /metrics`: the server's counters in the Prometheus text format (version 0.0.4).
//!
//! The text is written by hand; the format is small and this keeps the hot path to a few
//! atomic adds, with no global registry. Exported:
//! - `delayq_operations_total{topic,op,outcome}`: queue operations as the HTTP API saw them
//!   (a batch add counts each task). Only valid topic names become labels, and at most
//!   [`MAX_TOPIC_LABELS`] of them; later ones are counted under `topic="_other"`.
//! - `delayq_tasks{topic,state}`: tasks by topic and state, from the storage's counters.
//! - `delayq_topic_paused{topic}`: 1 while a topic is paused (docs/design.md §2 rule 14), else 0.
//! - `delayq_topic_held_back{topic,reason}`: READY tasks held back by a topic's flow limits
//!   (`max_active`, `rate`, `key`), for topics that hold some back.
//! - `delayq_fire_lateness_seconds`: how late tasks became ready after their due time, from
//!   the library's histogram ([`delayq::metrics::LATENESS_BUCKETS_MS`]), plus the fired,
//!   ttr-expired and dead counters.
//! - `delayq_http_request_duration_seconds{method,route,status}`: request latency by route
//!   pattern (never by raw path, which would make labels unbounded).
//! - `delayq_long_polls_open` and `delayq_waiters_parked`.
//! - `delayq_http_connections_open` and `delayq_http_connections_cut_total{reason}`: the
//!   connections the server holds, and those it closed because the client was too slow.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use delayq::State as TaskState;
use delayq::core::validate::check_topic;
use delayq::metrics::{LATENESS_BUCKETS_MS, MetricsSnapshot};
use delayq::{Millis, TopicStats};
use parking_lot::RwLock;

use crate::app::AppState;

/// An operation of the API, a label of `delayq_operations_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `/add` (each task of a batch).
    Add,
    /// `/pop`.
    Pop,
    /// `/finish`.
    Finish,
    /// `/release`.
    Release,
    /// `/touch`.
    Touch,
    /// `/cancel`.
    Cancel,
    /// `/requeue`.
    Requeue,
    /// `/delete`.
    Delete,
    /// `/get`.
    Get,
    /// `/tasks`.
    List,
    /// `/stats` of one topic.
    Stats,
    /// `/bury`.
    Bury,
    /// `/reschedule`.
    Reschedule,
    /// `/pause`.
    Pause,
    /// `/resume`.
    Resume,
}

const OPS: [Op; 15] = [
    Op::Add,
    Op::Pop,
    Op::Finish,
    Op::Release,
    Op::Touch,
    Op::Cancel,
    Op::Requeue,
    Op::Delete,
    Op::Get,
    Op::List,
    Op::Stats,
    Op::Bury,
    Op::Reschedule,
    Op::Pause,
    Op::Resume,
];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Add => "add",
            Op::Pop => "pop",
            Op::Finish => "finish",
            Op::Release => "release",
            Op::Touch => "touch",
            Op::Cancel => "cancel",
            Op::Requeue => "requeue",
            Op::Delete => "delete",
            Op::Get => "get",
            Op::List => "list",
            Op::Stats => "stats",
            Op::Bury => "bury",
            Op::Reschedule => "reschedule",
            Op::Pause => "pause",
            Op::Resume => "resume",
        }
    }
}

/// The outcome labels, in a fixed order so counters live in a flat array.
const OUTCOMES: [&str; 16] = [
    "ok",
    "empty",
    "invalid",
    "too_large",
    "not_found",
    "duplicate",
    "conflict",
    "unavailable",
    "shutting_down",
    "storage_error",
    "unauthorized",
    "forbidden",
    "no_route",
    "overloaded",
    "internal_error",
    "other",
];

fn outcome_index(outcome: &str) -> usize {
    OUTCOMES
        .iter()
        .position(|o| *o == outcome)
        .unwrap_or(OUTCOMES.len() - 1)
}

/// Most distinct topics `delayq_operations_total` keeps apart.
pub const MAX_TOPIC_LABELS: usize = 10_000;

/// The topic label of operations on topics beyond [`MAX_TOPIC_LABELS`].
pub const OTHER_TOPICS: &str = "_other";

type OpCounters = [[AtomicU64; OUTCOMES.len()]; OPS.len()];

/// Upper bounds (seconds) of the request-duration buckets. Long-polls end up high on purpose.
const DURATION_BUCKETS_S: [f64; 15] = [
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0, 60.0,
];

#[derive(Default)]
struct Histogram {
    buckets: [AtomicU64; DURATION_BUCKETS_S.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = DURATION_BUCKETS_S
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(DURATION_BUCKETS_S.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }
}

/// Why the server cut a connection (or a request body) short: the `reason` label of
/// `delayq_http_connections_cut_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// No request in progress for longer than the idle timeout.
    Idle,
    /// The request headers did not arrive within the header read timeout.
    Header,
    /// The TLS handshake failed or did not finish within the header read timeout.
    Handshake,
    /// A request body did not arrive within the body read timeout.
    Body,
}

impl Cut {
    const ALL: [Cut; 4] = [Cut::Idle, Cut::Header, Cut::Handshake, Cut::Body];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Cut::Idle => "idle_timeout",
            Cut::Header => "header_timeout",
            Cut::Handshake => "tls_handshake",
            Cut::Body => "body_timeout",
        }
    }
}

/// Method, route pattern and status of a request.
type RequestKey = (&'static str, String, u16);

/// A [`RequestKey`] borrowed from the request, to find its histogram without allocating: it
/// hashes as the tuple does (fields in order, `&str` as `String`).
#[derive(Hash)]
struct RequestKeyRef<'a>(&'static str, &'a str, u16);

impl hashbrown::Equivalent<RequestKey> for RequestKeyRef<'_> {
    fn equivalent(&self, key: &RequestKey) -> bool {
        self.0 == key.0 && self.1 == key.1 && self.2 == key.2
    }
}

/// The HTTP layer's own metrics. Updating one is a read lock and an atomic add; the write
/// lock is taken only the first time a topic or route is seen.
#[derive(Default)]
pub struct HttpMetrics {
    ops: RwLock<HashMap<String, Arc<OpCounters>>>,
    requests: RwLock<hashbrown::HashMap<RequestKey, Arc<Histogram>>>,
    connections_open: AtomicU64,
    cuts: [AtomicU64; Cut::ALL.len()],
}

impl std::fmt::Debug for HttpMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpMetrics").finish_non_exhaustive()
    }
}

impl HttpMetrics {
    /// Counts `n` operations `op` on `topic` that ended with `outcome`.
    pub fn count(&self, topic: &str, op: Op, outcome: &str, n: u64) {
        // An invalid topic name never becomes a label.
        let topic = if check_topic(topic).is_ok() {
            topic
        } else {
            ""
        };
        let counters = self.ops.read().get(topic).cloned();
        let counters = counters.unwrap_or_else(|| {
            let mut ops = self.ops.write();
            // Clients choose topic names; past the cap, new ones share one label so that
            // neither memory nor the scrape grows without bound.
            let topic = if ops.len() >= MAX_TOPIC_LABELS && !ops.contains_key(topic) {
                OTHER_TOPICS
            } else {
                topic
            };
            Arc::clone(
                ops.entry(topic.to_owned())
                    .or_insert_with(|| Arc::new(Default::default())),
            )
        });
        let op_index = OPS.iter().position(|o| *o == op).unwrap_or(0);
        counters[op_index][outcome_index(outcome)].fetch_add(n, Ordering::Relaxed);
    }

    /// Records one HTTP request.
    pub fn observe_request(&self, method: &str, route: &str, status: u16, took: Duration) {
        let method = known_method(method);
        let hist = self
            .requests
            .read()
            .get(&RequestKeyRef(method, route, status))
            .cloned();
        let hist = hist.unwrap_or_else(|| {
            let key = (method, route.to_owned(), status);
            Arc::clone(self.requests.write().entry(key).or_default())
        });
        hist.observe(took);
    }

    /// Counts a connection opened; [`HttpMetrics::connection_closed`] counts it closed.
    pub fn connection_opened(&self) {
        self.connections_open.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection closed.
    pub fn connection_closed(&self) {
        self.connections_open.fetch_sub(1, Ordering::Relaxed);
    }

    /// Counts a connection or body cut short by the server.
    pub fn cut(&self, why: Cut) {
        let i = Cut::ALL.iter().position(|c| *c == why).unwrap_or(0);
        self.cuts[i].fetch_add(1, Ordering::Relaxed);
    }

    fn write_connections(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP delayq_http_connections_open HTTP connections open now.\n\
             # TYPE delayq_http_connections_open gauge\ndelayq_http_connections_open {}",
            self.connections_open.load(Ordering::Relaxed)
        );
        out.push_str(
            "# HELP delayq_http_connections_cut_total Connections and request bodies the server \
             cut short because the client was too slow or idle.\n\
             # TYPE delayq_http_connections_cut_total counter\n",
        );
        for (why, n) in Cut::ALL.iter().zip(&self.cuts) {
            let _ = writeln!(
                out,
                "delayq_http_connections_cut_total{{reason=\"{}\"}} {}",
                why.name(),
                n.load(Ordering::Relaxed)
            );
        }
    }

    fn write_ops(&self, out: &mut String) {
        out.push_str(
            "# HELP delayq_operations_total Queue operations by topic, operation and outcome.\n",
        );
        out.push_str("# TYPE delayq_operations_total counter\n");
        let ops = self.ops.read();
        let mut topics: Vec<_> = ops.iter().collect();
        topics.sort_by(|a, b| a.0.cmp(b.0));
        for (topic, counters) in topics {
            for (op, row) in OPS.iter().zip(counters.iter()) {
                for (outcome, n) in OUTCOMES.iter().zip(row.iter()) {
                    let n = n.load(Ordering::Relaxed);
                    if n > 0 {
                        let _ = writeln!(
                            out,
                            "delayq_operations_total{{topic=\"{}\",op=\"{}\",outcome=\"{outcome}\"}} {n}",
                            escape(topic),
                            op.name()
                        );
                    }
                }
            }
        }
    }

    fn write_requests(&self, out: &mut String) {
        out.push_str("# HELP delayq_http_request_duration_seconds HTTP request durations by method, route and status.\n");
        out.push_str("# TYPE delayq_http_request_duration_seconds histogram\n");
        let requests = self.requests.read();
        let mut keys: Vec<_> = requests.iter().collect();
        keys.sort_by(|a, b| a.0.cmp(b.0));
        for ((method, route, status), hist) in keys {
            let labels = format!(
                "method=\"{method}\",route=\"{}\",status=\"{status}\"",
                escape(route)
            );
            let mut running = 0;
            for (i, n) in hist.buckets.iter().enumerate() {
                running += n.load(Ordering::Relaxed);
                let le = DURATION_BUCKETS_S
                    .get(i)
                    .map_or_else(|| "+Inf".to_owned(), |b| b.to_string());
                let _ = writeln!(
                    out,
                    "delayq_http_request_duration_seconds_bucket{{{labels},le=\"{le}\"}} {running}"
                );
            }
            let sum = hist.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
            let _ = writeln!(
                out,
                "delayq_http_request_duration_seconds_sum{{{labels}}} {sum}"
            );
            let _ = writeln!(
                out,
                "delayq_http_request_duration_seconds_count{{{labels}}} {running}"
            );
        }
    }
}

fn known_method(method: &str) -> &'static str {
    match method {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        "PATCH" => "PATCH",
        _ => "other",
    }
}

/// Escapes a label value (backslash, quote, newline) per the text format.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Middleware: times every request and records it by its route pattern.
pub async fn track_requests(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = req.method().clone();
    // MatchedPath is an `Arc<str>` inside: cloning it allocates nothing.
    let route = req.extensions().get::<MatchedPath>().cloned();
    let response = next.run(req).await;
    let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
    state.metrics().observe_request(
        method.as_str(),
        route,
        response.status().as_u16(),
        start.elapsed(),
    );
    response
}

/// Writes every metric of the server in the Prometheus text format.
pub async fn render(state: &AppState) -> String {
    let mut out = String::with_capacity(4_096);
    state.metrics().write_ops(&mut out);
    let topics = match state.queue().topics().await {
        Ok(topics) => topics,
        Err(e) => {
            tracing::warn!(error = %e, "reading topic counters for /metrics failed");
            Vec::new()
        }
    };
    let now = state.queue().context().clock.now_ms();
    write_topics(&mut out, &topics, now);
    write_topic_activity(&mut out, &state.queue().activity());
    write_engine(&mut out, &state.queue().context().metrics.snapshot());
    write_waiting(&mut out, state);
    state.metrics().write_connections(&mut out);
    state.metrics().write_requests(&mut out);
    if let Some(push) = state.push() {
        write_push(&mut out, &push.all_stats());
    }
    out
}

/// The `# HELP` and `# TYPE` lines of one metric.
fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Tasks by topic and state, and whether each topic is paused.
fn write_topics(out: &mut String, topics: &[(String, TopicStats)], now: Millis) {
    header(out, "delayq_tasks", "gauge", "Tasks by topic and state.");
    for (topic, stats) in topics {
        for s in TaskState::ALL {
            let (topic, state, n) = (escape(topic), s.name(), stats.count(s));
            let _ = writeln!(
                out,
                "delayq_tasks{{topic=\"{topic}\",state=\"{state}\"}} {n}"
            );
        }
    }
    header(
        out,
        "delayq_topic_paused",
        "gauge",
        "Whether a topic is paused (1) or hands out tasks (0).",
    );
    for (topic, stats) in topics {
        let paused = u8::from(stats.pause.holds(now));
        let _ = writeln!(
            out,
            "delayq_topic_paused{{topic=\"{}\"}} {paused}",
            escape(topic)
        );
    }
    header(
        out,
        "delayq_topic_held_back",
        "gauge",
        "READY tasks a pop could not take because of the topic's flow limits, by the limit that holds them (docs/flow-control.md).",
    );
    for (topic, stats) in topics.iter().filter(|(_, s)| !s.held_back.is_none()) {
        for (reason, n) in stats.held_back.by_reason() {
            let _ = writeln!(
                out,
                "delayq_topic_held_back{{topic=\"{}\",reason=\"{reason}\"}} {n}",
                escape(topic)
            );
        }
    }
}

/// The engine's figures: the lateness of fired tasks and its event counters.
fn write_engine(out: &mut String, snap: &MetricsSnapshot) {
    header(
        out,
        "delayq_fire_lateness_seconds",
        "histogram",
        "How long after its due time a task became ready.",
    );
    let count = snap.lateness_cumulative.last().copied().unwrap_or(0);
    let lateness = Figures {
        bounds_ms: &LATENESS_BUCKETS_MS,
        buckets: &snap.lateness_cumulative,
        sum_ms: snap.lateness_sum_ms,
        count,
    };
    lateness.write(out, "delayq_fire_lateness_seconds", "");
    let counters = [
        (
            "delayq_fired_total",
            "Tasks that became ready at their due time.",
            snap.fired,
        ),
        (
            "delayq_ttr_expired_total",
            "Attempts that ran past their time to run.",
            snap.ttr_expired,
        ),
        (
            "delayq_dead_total",
            "Tasks that went DEAD: out of retries, or buried.",
            snap.dead,
        ),
        (
            "delayq_spans_exported_total",
            "delayq's own spans the OTLP collector accepted.",
            snap.spans_exported,
        ),
        (
            "delayq_spans_dropped_total",
            "delayq's own spans dropped: the export queue was full, or the collector failed or was unreachable.",
            snap.spans_dropped,
        ),
    ];
    for (name, help, value) in counters {
        header(out, name, "counter", help);
        let _ = writeln!(out, "{name} {value}");
    }
}

/// The long-polls open and the consumers parked.
fn write_waiting(out: &mut String, state: &AppState) {
    let gauges = [
        (
            "delayq_long_polls_open",
            "Long-polling pops in progress.",
            state.open_long_polls(),
        ),
        (
            "delayq_waiters_parked",
            "Consumers parked waiting for ready tasks.",
            state.queue().context().waiters.parked(),
        ),
    ];
    for (name, help, value) in gauges {
        header(out, name, "gauge", help);
        let _ = writeln!(out, "{name} {value}");
    }
}

/// A histogram's figures: cumulative counts per bound (and `+Inf`), their sum and count.
struct Figures<'a> {
    bounds_ms: &'a [u64],
    buckets: &'a [u64],
    sum_ms: u64,
    count: u64,
}

impl Figures<'_> {
    /// Writes the samples of `name`: a bucket per bound (ms, written in seconds) and `+Inf`,
    /// then the sum and the count; `labels` go before `le` (none when empty).
    fn write(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, n) in self.buckets.iter().enumerate() {
            let le = self
                .bounds_ms
                .get(i)
                .map_or_else(|| "+Inf".to_owned(), |ms| seconds(*ms).to_string());
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {n}");
        }
        let labels = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{labels} {}", seconds(self.sum_ms));
        let _ = writeln!(out, "{name}_count{labels} {}", self.count);
    }
}

fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// The per-topic activity counters of [`delayq::Queue::activity`], one series per topic and
/// event (the dashboard's rates come from the same counters).
fn write_topic_activity(out: &mut String, activity: &[(String, delayq::TopicActivity)]) {
    out.push_str(
        "# HELP delayq_topic_events_total Tasks added, fired, finished, failed attempts and tasks gone dead, per topic, counted by this instance.\n\
         # TYPE delayq_topic_events_total counter\n",
    );
    for (topic, a) in activity {
        for (event, n) in [
            ("added", a.added),
            ("fired", a.fired),
            ("finished", a.finished),
            ("failed", a.failed),
            ("dead", a.dead),
        ] {
            let _ = writeln!(
                out,
                "delayq_topic_events_total{{topic=\"{}\",event=\"{event}\"}} {n}",
                escape(topic)
            );
        }
    }
    header(
        out,
        "delayq_tasks_expired_total",
        "counter",
        "Tasks whose expiry passed before they were handed out (gone DEAD or dropped), per topic, counted by this instance.",
    );
    for (topic, a) in activity {
        let _ = writeln!(
            out,
            "delayq_tasks_expired_total{{topic=\"{}\"}} {}",
            escape(topic),
            a.expired
        );
    }
}

/// The push figures of each topic that had a target on this instance (docs/push.md).
fn write_push(out: &mut String, topics: &[(String, delayq_api::push::PushStats)]) {
    if topics.is_empty() {
        return;
    }
    let name = "delayq_push_delivered_total";
    header(
        out,
        name,
        "counter",
        "Push calls answered 2xx (tasks finished).",
    );
    for (topic, s) in topics {
        let _ = writeln!(out, "{name}{{topic=\"{}\"}} {}", escape(topic), s.delivered);
    }
    let name = "delayq_push_failed_total";
    header(
        out,
        name,
        "counter",
        "Push calls that failed, by class: status (a non-2xx answer), timeout, connect.",
    );
    for (topic, s) in topics {
        for (class, n) in [
            ("status", s.failed_status),
            ("timeout", s.failed_timeout),
            ("connect", s.failed_connect),
        ] {
            let topic = escape(topic);
            let _ = writeln!(out, "{name}{{topic=\"{topic}\",class=\"{class}\"}} {n}");
        }
    }
    let name = "delayq_push_in_flight";
    header(out, name, "gauge", "Push calls under way.");
    for (topic, s) in topics {
        let _ = writeln!(out, "{name}{{topic=\"{}\"}} {}", escape(topic), s.in_flight);
    }
    let name = "delayq_push_latency_seconds";
    header(
        out,
        name,
        "histogram",
        "How long push targets took to answer.",
    );
    for (topic, s) in topics {
        let latency = Figures {
            bounds_ms: &delayq_api::push::LATENCY_BUCKETS_MS,
            buckets: &s.latency_buckets,
            sum_ms: s.latency_sum_ms,
            count: s.latency_count,
        };
        latency.write(out, name, &format!("topic=\"{}\"", escape(topic)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line of the push and activity series is a comment or a sample from its first
    /// column: text with leading blanks (a multi-line literal's indentation) is not the
    /// exposition format.
    #[test]
    fn push_and_activity_series_start_each_line_in_the_first_column() {
        let mut out = String::new();
        let mut stats = delayq_api::push::PushStats::default();
        stats.delivered = 2;
        stats.latency_count = 2;
        stats.latency_buckets = vec![1; delayq_api::push::LATENCY_BUCKETS_MS.len() + 1];
        write_push(&mut out, &[("hooks".to_owned(), stats)]);
        write_topic_activity(
            &mut out,
            &[("hooks".to_owned(), delayq::TopicActivity::default())],
        );
        assert!(out.contains("delayq_push_delivered_total{topic=\"hooks\"} 2\n"));
        for line in out.lines() {
            assert!(
                line.starts_with("# HELP delayq_")
                    || line.starts_with("# TYPE delayq_")
                    || line.starts_with("delayq_"),
                "{line:?}"
            );
        }
    }

    #[test]
    fn counters_render_with_labels() {
        let m = HttpMetrics::default();
        m.count("orders", Op::Add, "ok", 3);
        m.count("orders", Op::Pop, "empty", 1);
        m.count("bad topic\"", Op::Get, "invalid", 1);
        let mut out = String::new();
        m.write_ops(&mut out);
        assert!(
            out.contains("delayq_operations_total{topic=\"orders\",op=\"add\",outcome=\"ok\"} 3"),
            "{out}"
        );
        assert!(
            out.contains("{topic=\"\",op=\"get\",outcome=\"invalid\"} 1"),
            "{out}"
        );
        assert!(!out.contains("bad topic"), "{out}");
    }

    #[test]
    fn topic_labels_are_capped() {
        let m = HttpMetrics::default();
        for i in 0..MAX_TOPIC_LABELS + 5 {
            m.count(&format!("t{i}"), Op::Pop, "empty", 1);
        }
        m.count("t0", Op::Pop, "empty", 1);
        let ops = m.ops.read();
        assert_eq!(ops.len(), MAX_TOPIC_LABELS + 1);
        let other = &ops[OTHER_TOPICS][1][outcome_index("empty")];
        assert_eq!(other.load(Ordering::Relaxed), 5);
        assert_eq!(
            ops["t0"][1][outcome_index("empty")].load(Ordering::Relaxed),
            2
        );
    }

    #[test]
    fn request_histogram_is_cumulative() {
        let m = HttpMetrics::default();
        m.observe_request("POST", "/add", 200, Duration::from_micros(300));
        m.observe_request("POST", "/add", 200, Duration::from_secs(100));
        let mut out = String::new();
        m.write_requests(&mut out);
        let labels = "method=\"POST\",route=\"/add\",status=\"200\"";
        assert!(
            out.contains(&format!("_bucket{{{labels},le=\"0.0005\"}} 1")),
            "{out}"
        );
        assert!(
            out.contains(&format!("_bucket{{{labels},le=\"+Inf\"}} 2")),
            "{out}"
        );
        assert!(out.contains(&format!("_count{{{labels}}} 2")), "{out}");
    }

    /// The borrowed key finds the entry the owned key made: otherwise every request would
    /// miss the read lock's lookup and take the write lock (the counts would still be right).
    #[test]
    fn a_request_key_is_found_without_allocating() {
        let m = HttpMetrics::default();
        m.observe_request("GET", "/stats", 200, Duration::from_micros(1));
        let requests = m.requests.read();
        assert_eq!(requests.len(), 1);
        assert!(requests.get(&RequestKeyRef("GET", "/stats", 200)).is_some());
        for other in [
            RequestKeyRef("POST", "/stats", 200),
            RequestKeyRef("GET", "/stat", 200),
            RequestKeyRef("GET", "/stats", 404),
        ] {
            assert!(requests.get(&other).is_none());
        }
    }
}
