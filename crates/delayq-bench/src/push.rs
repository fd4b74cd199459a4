//! `delayq bench push`: push delivery to a built-in receiver on loopback (docs/design.md §6:
//! ≥ 10 000 deliveries/s, p99 lateness ≤ 5 ms).
//!
//! The bench starts its own HTTP receiver on `127.0.0.1` (never another address: the server
//! must be on this machine), sets a push target on a topic of its own pointing at it, adds
//! tasks due at a steady `--rate` with the lateness bench's producer, and records for each
//! delivery the lateness = arrival at the receiver − `Delayq-Due-Ms`. The figures are the
//! deliveries per second over the run (from the first due time to the last arrival) and the
//! lateness percentiles. The target is removed at the end; the topic's finished records
//! expire with the server's retention.
//!
//! The lateness includes the firing, the dispatcher's pop, the HTTP call over loopback and the
//! receiver's own scheduling; the receiver shares the machine with the server.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use delayq_client::{Client, PushTarget};
use hdrhistogram::Histogram;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Notify;

use super::lateness::{LatenessBench, Produced, produce};
use super::{BenchResult, Percentiles, Target};
use crate::BenchError;
use crate::duration::{format_duration, parse_duration};

/// docs/design.md §6: push delivery to a local receiver.
pub const RATE_TARGET: Target = Target {
    op: ">=",
    value: 10_000.0,
    unit: "deliveries/s",
    condition: "push to a local receiver",
};

/// docs/design.md §6: the lateness of those deliveries.
pub const LATENESS_TARGET: Target = Target {
    op: "<=",
    value: 5.0,
    unit: "ms p99",
    condition: "push to a local receiver",
};

/// How long the bench waits for stragglers after the last task is due.
const GRACE: Duration = Duration::from_secs(5);

/// The flags of `delayq bench push`.
#[derive(Debug, Clone, Args)]
pub struct PushBench {
    /// Tasks due per second.
    #[arg(long, default_value_t = 10_000)]
    pub rate: u64,
    /// How long tasks keep becoming due.
    #[arg(long, value_parser = parse_duration, default_value = "10s", value_name = "DURATION")]
    pub duration: u64,
    /// How far ahead of its due time each task is added.
    #[arg(long, default_value_t = 1_000, value_name = "MS")]
    pub delay_ms: u64,
    /// The push target's concurrency (calls in flight at once).
    #[arg(long, default_value_t = 64)]
    pub concurrency: u32,
}

impl PushBench {
    /// Checks the bounds of every setting (those of the producer as the lateness bench does).
    pub fn validate(&self) -> Result<PushBench, BenchError> {
        self.producer().validate_as("push")?;
        super::require(
            "push",
            (1..=1_024).contains(&self.concurrency),
            "--concurrency must be 1 to 1024",
        )?;
        Ok(self.clone())
    }

    /// The producer's settings (the lateness bench's producer adds the tasks).
    fn producer(&self) -> LatenessBench {
        LatenessBench {
            rate: self.rate,
            duration: self.duration,
            delay_ms: self.delay_ms,
            ..LatenessBench::default()
        }
    }
}

/// What the receiver saw.
struct Received {
    lateness: Histogram<u64>,
    count: u64,
    early: u64,
    last_arrival_us: u64,
}

/// The bench's receiver, running on loopback.
struct Receiver {
    addr: std::net::SocketAddr,
    received: Arc<Mutex<Received>>,
    /// Notified when all `total` tasks have arrived.
    done: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

/// The end of a run, for the report.
struct Outcome<'a> {
    received: &'a Received,
    produced: Produced,
    total: u64,
    first_due_ms: u64,
    finished_in_time: bool,
}

/// Runs the benchmark against the server of `client`.
pub async fn run(client: &Client, bench: &PushBench) -> Result<Vec<BenchResult>, BenchError> {
    let producer = bench.producer();
    let total = producer.total();
    let receiver = start_receiver(total).await?;
    let topic = format!("bench-push-{}", super::run_id());
    let target = PushTarget::new(&topic, format!("http://{}/bench", receiver.addr))
        .concurrency(bench.concurrency);
    client.push_set(&target).await?;
    let first_due_ms = super::lateness::now_ms() + bench.delay_ms;
    let last_due_ms = super::lateness::due_of(total - 1, first_due_ms, bench.rate);
    let produced = produce(client, &topic, &producer, first_due_ms).await;
    let wait = Duration::from_millis(last_due_ms.saturating_sub(super::lateness::now_ms())) + GRACE;
    let all = receiver.done.notified();
    let finished_in_time = tokio::time::timeout(wait, all).await.is_ok()
        || receiver
            .received
            .lock()
            .map(|r| r.count >= total)
            .unwrap_or(false);
    let deleted = client.push_delete(&topic).await;
    receiver.task.abort();
    let produced = produced?;
    deleted?;
    let received = receiver.received.lock().map_err(|_| BenchError::Bench {
        bench: "push",
        reason: "the receiver failed".into(),
    })?;
    let outcome = Outcome {
        received: &received,
        produced,
        total,
        first_due_ms,
        finished_in_time,
    };
    Ok(vec![
        rate_result(bench, &outcome),
        lateness_result(bench, &outcome),
    ])
}

/// Binds the receiver on 127.0.0.1 and starts it.
async fn start_receiver(total: u64) -> Result<Receiver, BenchError> {
    let failed = |reason: String| BenchError::Bench {
        bench: "push",
        reason,
    };
    let received = Arc::new(Mutex::new(Received {
        lateness: super::histogram(),
        count: 0,
        early: 0,
        last_arrival_us: 0,
    }));
    let done = Arc::new(Notify::new());
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| failed(format!("cannot bind the receiver on 127.0.0.1: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| failed(format!("the receiver's address: {e}")))?;
    let task = tokio::spawn(receive(
        listener,
        Arc::clone(&received),
        Arc::clone(&done),
        total,
    ));
    Ok(Receiver {
        addr,
        received,
        done,
        task,
    })
}

/// Deliveries per second, from the first due time to the last arrival.
fn rate_result(bench: &PushBench, o: &Outcome<'_>) -> BenchResult {
    let r = o.received;
    let span_ms = (r.last_arrival_us / 1_000)
        .saturating_sub(o.first_due_ms)
        .max(1);
    // From the first due time to the last arrival: the deliveries cannot go faster than they
    // fall due, so at --rate the figure is at most --rate.
    let per_s = r.count as f64 * 1_000.0 / span_ms as f64;
    let measured = format!(
        "deliveries to a receiver on 127.0.0.1 per second, from the first due time to the last \
         arrival; {} tasks/s due for {}, added {} ahead; target concurrency {}",
        super::group_digits(bench.rate as f64),
        format_duration(bench.duration),
        format_duration(bench.delay_ms),
        bench.concurrency
    );
    let mut rate = BenchResult::new("push", measured, per_s, "deliveries/s", Some(RATE_TARGET));
    rate.ops = r.count;
    rate.errors = o.produced.errors;
    rate.first_error = o.produced.first_error.clone();
    if bench.rate < 10_000 {
        rate.not_comparable(format!(
            "the target is ≥ 10 000/s and this run had only {} tasks/s due",
            bench.rate
        ));
    }
    rate.notes.push(format!(
        "received {} of {} tasks{}; {} arrived before their due time",
        r.count,
        o.total,
        if o.finished_in_time {
            ""
        } else {
            " before the bench stopped waiting"
        },
        r.early
    ));
    rate
}

/// The lateness of the deliveries at the receiver.
fn lateness_result(bench: &PushBench, o: &Outcome<'_>) -> BenchResult {
    let p = Percentiles::from_micros(&o.received.lateness);
    let mut late = BenchResult::new(
        "push",
        "arrival at the receiver − Delayq-Due-Ms".to_owned(),
        p.p99,
        "ms p99",
        Some(LATENESS_TARGET),
    );
    late.latency_ms = Some(p);
    late.latency_of = "lateness";
    late.ops = o.received.count;
    late.notes.push(
        "lateness includes the firing, the dispatcher's pop, the HTTP call over loopback and \
         the receiver's scheduling; the receiver, the producer and the server share the machine"
            .into(),
    );
    if bench.rate != 10_000 {
        late.not_comparable(format!(
            "the target is for 10 000 tasks/s; this run had {} tasks/s",
            bench.rate
        ));
    }
    late
}

/// The receiver: answers every request 200 and records its lateness.
async fn receive(
    listener: TcpListener,
    received: Arc<Mutex<Received>>,
    done: Arc<Notify>,
    total: u64,
) {
    while let Ok((tcp, _)) = listener.accept().await {
        let _ = tcp.set_nodelay(true);
        let (received, done) = (Arc::clone(&received), Arc::clone(&done));
        tokio::spawn(async move {
            let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let now = super::lateness::now_us();
                let due_ms = request
                    .headers()
                    .get("delayq-due-ms")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok());
                if let (Some(due_ms), Ok(mut r)) = (due_ms, received.lock()) {
                    let due_us = due_ms.saturating_mul(1_000);
                    if now < due_us {
                        r.early += 1;
                    }
                    r.lateness
                        .saturating_record(now.saturating_sub(due_us).max(1));
                    r.count += 1;
                    r.last_arrival_us = r.last_arrival_us.max(now);
                    if r.count >= total {
                        done.notify_one();
                    }
                }
                async { Ok::<_, Infallible>(hyper::Response::new(String::new())) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service)
                .await;
        });
    }
}
