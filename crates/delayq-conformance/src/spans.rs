//! delayq's own spans (docs/tracing.md) on every backend: a traced task gets a span for each
//! event of its life — add, fire (from its due, with the lateness), each delivery, the
//! consumer's finish, release or bury (children of the consumer's context), and DEAD when its
//! last ttr runs out — each in the producer's trace; an untraced task, or one whose producer
//! did not sample its trace, gets none. An occurrence of a traced schedule has a span in its
//! own trace linked to the schedule's.
//!
//! Fires and ttr expiries happen where the backend's timers run (the engine's driver, the
//! Redis promoter's or a pop's script), so those spans are waited for.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use delayq::core::schedule::ScheduleDef;
use delayq::spans::{SpanCounters, Spans};
use delayq::{
    BuryOptions, MaxRetries, NewTask, ReleaseOptions, Scheduler, SchedulerOptions, State,
    TraceContext,
};
use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::{SpanId, SpanKind, Status, TraceId, TracerProvider as _};
use opentelemetry::{Context, Value};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, Span, SpanData, SpanProcessor};
use parking_lot::Mutex;

use crate::{Harness, START_MS};

const T: &str = "spanned";

/// The spans a queue recorded, kept in memory by a span processor of the SDK.
#[derive(Debug, Clone, Default)]
pub struct Recorded(Arc<Mutex<Vec<SpanData>>>);

impl SpanProcessor for Recorded {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        self.0.lock().push(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

impl Recorded {
    /// Spans that a tracer provider records here.
    pub fn spans(&self) -> Spans {
        let provider = SdkTracerProvider::builder()
            .with_span_processor(self.clone())
            .build();
        let tracer = BoxedTracer::new(Box::new(provider.tracer("delayq")));
        Spans::to(tracer, 1.0, Arc::new(SpanCounters::default()))
    }

    /// The spans recorded about task `id`, in the order they ended.
    pub fn of(&self, id: &str) -> Vec<SpanData> {
        self.0
            .lock()
            .iter()
            .filter(|s| attr(s, "messaging.message.id") == Some(Value::from(id.to_owned())))
            .cloned()
            .collect()
    }
}

fn attr(s: &SpanData, key: &str) -> Option<Value> {
    s.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.clone())
}

fn int(s: &SpanData, key: &str) -> i64 {
    match attr(s, key) {
        Some(Value::I64(n)) => n,
        other => panic!("{key} of {} is {other:?}", s.name),
    }
}

fn text(s: &SpanData, key: &str) -> String {
    match attr(s, key) {
        Some(v) => v.as_str().into_owned(),
        None => panic!("{} has no {key}", s.name),
    }
}

fn producer(span: u64, flags: &str) -> TraceContext {
    TraceContext::parse(
        &format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{span:016x}-{flags}"),
        None,
    )
    .expect("a valid trace context")
}

/// The one span named `name` of `id`, once it was recorded (fires and expiries come from the
/// backend's timers).
async fn span(h: &Harness, id: &str, name: &str) -> SpanData {
    h.eventually(&format!("a span {name} of {id}"), || async {
        h.spans.of(id).iter().any(|s| s.name == name)
    })
    .await;
    let all: Vec<SpanData> = h
        .spans
        .of(id)
        .into_iter()
        .filter(|s| s.name == name)
        .collect();
    assert_eq!(all.len(), 1, "one {name} span of {id}: {all:?}");
    all.into_iter().next().expect("one")
}

/// Asserts `s` is in `parent`'s trace, its child.
fn child_of(s: &SpanData, parent: &TraceContext) {
    assert_eq!(
        s.span_context.trace_id(),
        TraceId::from_bytes(parent.trace_id().to_be_bytes()),
        "{} is in the producer's trace",
        s.name
    );
    assert_eq!(
        s.parent_span_id,
        SpanId::from_bytes(parent.span_id().to_be_bytes()),
        "{}'s parent",
        s.name
    );
    assert_eq!(text(s, "messaging.system"), "delayq");
    assert_eq!(text(s, "messaging.destination.name"), T);
}

fn at(ms: u64) -> std::time::SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// add, fire, pop and finish, each in the producer's trace, placed at the moments they
/// happened; the finish is a child of the consumer's context.
pub async fn a_traced_task_has_a_span_for_each_event(h: &Harness) {
    let t = producer(0xa1, "01");
    h.add(NewTask::new(T, "a").delay_ms(1_000).trace(t.clone()))
        .await;
    let add = span(h, "a", "add spanned").await;
    child_of(&add, &t);
    assert_eq!(add.span_kind, SpanKind::Server);
    assert_eq!(text(&add, "delayq.outcome"), "added");
    assert_eq!(text(&add, "messaging.operation.type"), "send");
    assert_eq!((add.start_time, add.end_time), (at(START_MS), at(START_MS)));
    assert!(h.spans.of("a").iter().all(|s| s.name != "fire spanned"));

    h.advance(1_000);
    let d = h.pop_ready(T).await;
    assert_eq!(d.id, "a");
    let fire = span(h, "a", "fire spanned").await;
    child_of(&fire, &t);
    assert_eq!(
        fire.start_time,
        at(START_MS + 1_000),
        "a fire starts at the due"
    );
    assert!(fire.end_time >= fire.start_time);
    let lateness = int(&fire, "delayq.lateness_ms");
    let ended = fire
        .end_time
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert_eq!(lateness, ended - (START_MS + 1_000) as i64);
    let pop = span(h, "a", "pop spanned").await;
    child_of(&pop, &t);
    assert_eq!(int(&pop, "delayq.attempt"), 1);
    assert_eq!(text(&pop, "messaging.operation.type"), "receive");

    // The consumer finishes inside its own span (its HTTP client would send it as
    // `traceparent`): delayq's finish is that span's child.
    let consumer = t.child(0xc0).expect("a child context");
    delayq::spans::within(Some(&consumer), h.queue.finish(T, "a", Some(&d.receipt)))
        .await
        .unwrap();
    let finish = span(h, "a", "finish spanned").await;
    child_of(&finish, &consumer);
    assert_eq!(text(&finish, "delayq.outcome"), "finished");
    assert_eq!(finish.status, Status::Unset);
    let mut names: Vec<String> = h.spans.of("a").iter().map(|s| s.name.to_string()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "add spanned",
            "finish spanned",
            "fire spanned",
            "pop spanned"
        ]
    );
}

/// A release and a bury are the consumer's children; a redelivery's span says its attempt; a
/// last ttr that runs out makes a `dead` span, an error.
pub async fn release_bury_and_a_ttr_that_runs_out_have_spans(h: &Harness) {
    let t = producer(0xb2, "01");
    let consumer = t.child(0xc1).expect("a child context");
    h.add(
        NewTask::new(T, "r")
            .ttr_ms(1_000)
            .max_retries(MaxRetries::Limited(1))
            .trace(t.clone()),
    )
    .await;
    let first = h.pop_ready(T).await;
    let released = delayq::spans::within(
        Some(&consumer),
        h.queue
            .release(T, "r", ReleaseOptions::default().receipt(&first.receipt)),
    )
    .await
    .unwrap();
    assert_eq!(released, State::Ready);
    let release = span(h, "r", "release spanned").await;
    child_of(&release, &consumer);
    assert_eq!(text(&release, "delayq.outcome"), "ready");
    let second = h.pop_ready(T).await;
    assert_eq!(second.retries, 1);
    h.eventually("two pop spans of r", || async {
        h.spans
            .of("r")
            .iter()
            .filter(|s| s.name == "pop spanned")
            .count()
            == 2
    })
    .await;
    let attempts: Vec<i64> = h
        .spans
        .of("r")
        .iter()
        .filter(|s| s.name == "pop spanned")
        .map(|s| int(s, "delayq.attempt"))
        .collect();
    assert_eq!(attempts, [1, 2]);

    // Its last attempt's ttr runs out: DEAD by itself.
    h.advance(1_000);
    h.wait_state(T, "r", State::Dead).await;
    let dead = span(h, "r", "dead spanned").await;
    child_of(&dead, &t);
    assert_eq!(text(&dead, "delayq.outcome"), "ttr_expired");
    assert!(
        matches!(dead.status, Status::Error { .. }),
        "{:?}",
        dead.status
    );

    h.add(NewTask::new(T, "b").trace(t.clone())).await;
    let b = h.pop_ready(T).await;
    delayq::spans::within(
        Some(&consumer),
        h.queue
            .bury(T, "b", BuryOptions::default().receipt(&b.receipt)),
    )
    .await
    .unwrap();
    let bury = span(h, "b", "bury spanned").await;
    child_of(&bury, &consumer);
    assert_eq!(text(&bury, "delayq.outcome"), "dead");

    // A refused settle is recorded as an error: the receipt is stale now.
    let refused =
        delayq::spans::within(Some(&consumer), h.queue.finish(T, "b", Some(&b.receipt))).await;
    assert!(refused.is_err());
    let finish = span(h, "b", "finish spanned").await;
    assert_eq!(text(&finish, "delayq.outcome"), "conflict");
    assert!(matches!(finish.status, Status::Error { .. }));
}

/// A task without a context, or whose producer did not sample its trace, leaves no span,
/// whatever happens to it.
pub async fn untraced_and_unsampled_tasks_have_no_spans(h: &Harness) {
    let unsampled = producer(0xd3, "00");
    h.add(NewTask::new(T, "plain").delay_ms(500)).await;
    h.add(
        NewTask::new(T, "quiet")
            .delay_ms(500)
            .ttr_ms(1_000)
            .max_retries(MaxRetries::Limited(0))
            .trace(unsampled.clone()),
    )
    .await;
    h.advance(500);
    let one = h.pop_ready(T).await;
    let two = h.pop_ready(T).await;
    let plain = if one.id == "plain" { &one } else { &two };
    h.queue
        .finish(T, "plain", Some(&plain.receipt))
        .await
        .unwrap();
    // "quiet" runs out of its only attempt: DEAD, still without a span.
    h.advance(1_000);
    h.wait_state(T, "quiet", State::Dead).await;
    // A traced task added after them is recorded: the recorder works, and it is only these
    // two that have none.
    let t = producer(0xd4, "01");
    h.add(NewTask::new(T, "traced").trace(t)).await;
    span(h, "traced", "add spanned").await;
    assert!(h.spans.of("plain").is_empty(), "{:?}", h.spans.of("plain"));
    assert!(h.spans.of("quiet").is_empty(), "{:?}", h.spans.of("quiet"));
}

/// An occurrence of a traced schedule is in a trace of its own; the add that created it
/// records a `schedule` span there, linked to the schedule's context.
pub async fn a_schedule_occurrence_links_to_its_schedule(h: &Harness) {
    let scheduler = Scheduler::new(h.queue.clone(), SchedulerOptions::default());
    let t = producer(0xe5, "01");
    let mut def = ScheduleDef::default();
    def.topic = T.into();
    def.name = "tick".into();
    def.every_ms = Some(1_000);
    def.trace = Some(t.clone());
    scheduler.put(def).await.unwrap();
    scheduler.tick(h.now()).await.unwrap();
    let pending = h.queue.list(T, None, 1, 10).await.unwrap().items;
    let occurrence = pending[0].trace.clone().expect("the occurrence's context");
    let id = pending[0].id.clone();
    let scheduled = span(h, &id, "schedule spanned").await;
    child_of(&scheduled, &occurrence);
    let links: Vec<_> = scheduled
        .links
        .iter()
        .map(|l| l.span_context.clone())
        .collect();
    assert_eq!(links.len(), 1, "{links:?}");
    assert_eq!(
        links[0].trace_id(),
        TraceId::from_bytes(t.trace_id().to_be_bytes())
    );
    assert_eq!(
        links[0].span_id(),
        SpanId::from_bytes(t.span_id().to_be_bytes())
    );
    // The occurrence's own spans are in its trace, not the schedule's.
    let add = span(h, &id, "add spanned").await;
    child_of(&add, &occurrence);
    // A second scheduler's tick finds the occurrence there: no second schedule span.
    let other = Scheduler::new(h.queue.clone(), SchedulerOptions::default());
    other.tick(h.now()).await.unwrap();
    let n = h
        .spans
        .of(&id)
        .iter()
        .filter(|s| s.name == "schedule spanned")
        .count();
    assert_eq!(n, 1);
}

/// An expiry is a `dead` span with the outcome `expired`: of a waiting task at its expiry,
/// and of a held task that comes back after it (one span, not a ttr one as well).
pub async fn an_expiry_is_a_dead_span(h: &Harness) {
    let t = producer(0xf6, "01");
    h.add(
        NewTask::new(T, "x")
            .delay_ms(100)
            .expires_in_ms(1_000)
            .trace(t.clone()),
    )
    .await;
    h.add(
        NewTask::new(T, "y")
            .ttr_ms(500)
            .expires_in_ms(300)
            .trace(t.clone()),
    )
    .await;
    let y = h.pop_ready(T).await;
    assert_eq!(y.id, "y");
    h.advance(100);
    span(h, "x", "fire spanned").await;
    h.advance(900);
    h.wait_state(T, "x", State::Dead).await;
    h.wait_state(T, "y", State::Dead).await;
    for id in ["x", "y"] {
        let dead = span(h, id, "dead spanned").await;
        child_of(&dead, &t);
        assert_eq!(text(&dead, "delayq.outcome"), "expired", "{id}");
    }
}
