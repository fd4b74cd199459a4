//! delayq's own spans (docs/tracing.md): the moments of a task's life that its trace shows.
//!
//! A task that carries a trace context (its producer's span, §"what is carried" of the docs)
//! gets a short span for each event, each a child of that context, placed where the event
//! happened: `add` when it is added, `fire` at its due (from the due to the moment it became
//! ready, with the lateness), `pop` or `push` for each delivery attempt, `finish`, `release`,
//! `bury` when a consumer settles it, and `dead` when it goes DEAD by itself. The wait between
//! them is no span: a 15-minute delay is a gap in the trace, not a 15-minute span.
//!
//! An occurrence of a traced schedule starts a trace of its own (its context is derived from
//! the schedule's, `delayq_core::schedule::occurrence_trace`, the same on every instance):
//! the instance whose add created it records a `schedule` span in that trace, linked to the
//! schedule's context, so the schedule's trace is one click away from each occurrence's.
//!
//! delayq starts no trace of its own: a task without a context has no spans, and a context
//! whose sampled flag is off has none either. On top of the producer's decision a ratio
//! samples by trace id (the same rule on every instance, so a trace is kept or dropped whole).
//!
//! The spans go to an OpenTelemetry tracer (the API only; the daemon installs the SDK and its
//! OTLP exporter). Without the crate feature `opentelemetry`, or with no tracer given, a
//! [`Spans`] is off and every method returns at the first branch.
//!
//! Attributes follow the semantic conventions for messaging where they fit
//! (`messaging.system`, `messaging.destination.name`, `messaging.message.id`,
//! `messaging.operation.type` / `.name`), plus `delayq.attempt`, `delayq.lateness_ms` and
//! `delayq.outcome`. Never the body.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use delayq_core::{Delivery, Millis, TraceContext};

/// Where a task's events are recorded as spans; cheap to clone, off by default.
#[derive(Clone, Default)]
pub struct Spans {
    #[cfg(feature = "opentelemetry")]
    on: Option<Arc<On>>,
    counters: Arc<SpanCounters>,
}

/// What became of the spans recorded: exported, or dropped (the export queue was full, or
/// the collector failed or could not be reached). Kept by whoever exports them.
#[derive(Debug, Default)]
pub struct SpanCounters {
    exported: AtomicU64,
    dropped: AtomicU64,
}

impl SpanCounters {
    /// Counts `n` spans the collector accepted.
    pub fn exported(&self, n: u64) {
        self.exported.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts `n` spans dropped.
    pub fn dropped(&self, n: u64) {
        self.dropped.fetch_add(n, Ordering::Relaxed);
    }

    /// Spans exported and dropped so far.
    pub fn snapshot(&self) -> (u64, u64) {
        (
            self.exported.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed),
        )
    }
}

#[cfg(feature = "opentelemetry")]
struct On {
    tracer: opentelemetry::global::BoxedTracer,
    /// Traces kept: those whose id falls under this bound (see [`keeps`]).
    bound: u64,
}

impl std::fmt::Debug for Spans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spans").field("on", &self.is_on()).finish()
    }
}

/// How a consumer settled the task it held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// `finish`.
    Finish,
    /// `release`.
    Release,
    /// `bury`.
    Bury,
}

impl Settle {
    /// The operation's name, as in the API.
    pub fn name(self) -> &'static str {
        match self {
            Settle::Finish => "finish",
            Settle::Release => "release",
            Settle::Bury => "bury",
        }
    }
}

/// The bound under which a trace id's low 64 bits fall for `ratio` of all traces.
#[cfg_attr(not(feature = "opentelemetry"), allow(dead_code))]
fn bound_of(ratio: f64) -> u64 {
    if ratio.is_nan() || ratio <= 0.0 {
        0
    } else if ratio >= 1.0 {
        u64::MAX
    } else {
        // `as` saturates; the product is below 2^64.
        (ratio * u64::MAX as f64) as u64
    }
}

/// Whether a trace is kept: sampled by its producer, and its id under the ratio's bound.
/// The low half of a W3C trace id is random (the specification's recommendation), so the
/// share kept is the ratio, and every instance decides alike.
#[cfg_attr(not(feature = "opentelemetry"), allow(dead_code))]
fn keeps(bound: u64, trace: &TraceContext) -> bool {
    trace.sampled() && (bound == u64::MAX || (trace.trace_id() as u64) < bound)
}

impl Spans {
    /// Spans off: every method does nothing.
    pub fn off() -> Spans {
        Spans::default()
    }

    /// Spans to `tracer`, keeping `ratio` (0 to 1) of the sampled traces; the exporter
    /// behind the tracer counts what became of them in `counters`.
    #[cfg(feature = "opentelemetry")]
    pub fn to(
        tracer: opentelemetry::global::BoxedTracer,
        ratio: f64,
        counters: Arc<SpanCounters>,
    ) -> Spans {
        Spans {
            on: Some(Arc::new(On {
                tracer,
                bound: bound_of(ratio),
            })),
            counters,
        }
    }

    /// What became of the spans recorded.
    pub fn counters(&self) -> &SpanCounters {
        &self.counters
    }

    /// Whether spans are recorded at all.
    pub fn is_on(&self) -> bool {
        #[cfg(feature = "opentelemetry")]
        {
            self.on.is_some()
        }
        #[cfg(not(feature = "opentelemetry"))]
        {
            false
        }
    }

    /// Whether a task with this context gets spans.
    pub fn traces(&self, trace: Option<&TraceContext>) -> bool {
        #[cfg(feature = "opentelemetry")]
        {
            self.kept(trace).is_some()
        }
        #[cfg(not(feature = "opentelemetry"))]
        {
            let _ = trace;
            false
        }
    }

    /// The task `topic`/`id` was added at `start_ms`, answered at `end_ms` with `outcome`
    /// (`added`, `replaced`, `existed`, or the error's kind).
    pub fn added(
        &self,
        topic: &str,
        id: &str,
        trace: Option<&TraceContext>,
        start_ms: Millis,
        end_ms: Millis,
        outcome: &str,
    ) {
        #[cfg(feature = "opentelemetry")]
        if let Some((on, t)) = self.kept(trace) {
            use opentelemetry::trace::SpanKind;
            on.emit(Emit {
                op: "add",
                kind: SpanKind::Server,
                operation_type: "send",
                topic,
                id,
                parent: t,
                start_ms,
                end_ms,
                extra: vec![kv("delayq.outcome", outcome.to_owned())],
                error: None,
                link: None,
            });
        }
        #[cfg(not(feature = "opentelemetry"))]
        let _ = (topic, id, trace, start_ms, end_ms, outcome);
    }

    /// The task became ready at `now`, its due having been `due`: a span from the due to
    /// now, the lateness as an attribute.
    pub fn fired(
        &self,
        topic: &str,
        id: &str,
        trace: Option<&TraceContext>,
        due: Millis,
        now: Millis,
    ) {
        #[cfg(feature = "opentelemetry")]
        if let Some((on, t)) = self.kept(trace) {
            use opentelemetry::trace::SpanKind;
            on.emit(Emit {
                op: "fire",
                kind: SpanKind::Internal,
                operation_type: "process",
                topic,
                id,
                parent: t,
                start_ms: due.min(now),
                end_ms: now,
                extra: vec![kv("delayq.lateness_ms", now.saturating_sub(due) as i64)],
                error: None,
                link: None,
            });
        }
        #[cfg(not(feature = "opentelemetry"))]
        let _ = (topic, id, trace, due, now);
    }

    /// The occurrence `id` of a schedule was added at `now` with the derived context
    /// `occurrence`: a span in the occurrence's trace, linked to the schedule's context. Only
    /// the instance whose add created it calls this, so the span is recorded once.
    pub fn scheduled(
        &self,
        topic: &str,
        id: &str,
        occurrence: &TraceContext,
        schedule: &TraceContext,
        now: Millis,
    ) {
        #[cfg(feature = "opentelemetry")]
        if let Some((on, t)) = self.kept(Some(occurrence)) {
            use opentelemetry::trace::{Link, SpanContext, SpanId, SpanKind, TraceFlags, TraceId};
            let linked = SpanContext::new(
                TraceId::from_bytes(schedule.trace_id().to_be_bytes()),
                SpanId::from_bytes(schedule.span_id().to_be_bytes()),
                TraceFlags::new(schedule.flags()),
                true,
                Default::default(),
            );
            on.emit(Emit {
                op: "schedule",
                kind: SpanKind::Internal,
                operation_type: "create",
                topic,
                id,
                parent: t,
                start_ms: now,
                end_ms: now,
                extra: Vec::new(),
                error: None,
                link: Some(Link::with_context(linked)),
            });
        }
        #[cfg(not(feature = "opentelemetry"))]
        let _ = (topic, id, occurrence, schedule, now);
    }

    /// A delivery attempt handed out at `now` to a consumer (HTTP pop, beanstalk reserve,
    /// the library's pop and callbacks, the push dispatcher).
    pub fn delivered(&self, d: &Delivery, now: Millis) {
        #[cfg(feature = "opentelemetry")]
        if let Some((on, t)) = self.kept(d.trace.as_ref()) {
            use opentelemetry::trace::SpanKind;
            on.emit(Emit {
                op: "pop",
                kind: SpanKind::Server,
                operation_type: "receive",
                topic: &d.topic,
                id: &d.id,
                parent: t,
                start_ms: now,
                end_ms: now,
                extra: vec![
                    kv("delayq.attempt", i64::from(d.retries) + 1),
                    kv("delayq.lateness_ms", now.saturating_sub(d.due_ms) as i64),
                ],
                error: None,
                link: None,
            });
        }
        #[cfg(not(feature = "opentelemetry"))]
        let _ = (d, now);
    }

    /// A consumer settled the task from `start_ms` to `end_ms`; `outcome` is the state it
    /// went to or the error's kind, `error` the release's or bury's reason.
    #[allow(clippy::too_many_arguments)]
    pub fn settled(
        &self,
        how: Settle,
        topic: &str,
        id: &str,
        parent: Option<&TraceContext>,
        start_ms: Millis,
        end_ms: Millis,
        outcome: &str,
        failed: bool,
    ) {
        #[cfg(feature = "opentelemetry")]
        if let Some((on, t)) = self.kept(parent) {
            use opentelemetry::trace::SpanKind;
            on.emit(Emit {
                op: how.name(),
                kind: SpanKind::Server,
                operation_type: "settle",
                topic,
                id,
                parent: t,
                start_ms,
                end_ms,
                extra: vec![kv("delayq.outcome", outcome.to_owned())],
                error: failed.then(|| outcome.to_owned()),
                link: None,
            });
        }
        #[cfg(not(feature = "opentelemetry"))]
        let _ = (how, topic, id, parent, start_ms, end_ms, outcome, failed);
    }

    /// The task went DEAD at `now` without a consumer saying so (its ttr passed on its last
    /// attempt); `reason` is its last error.
    pub fn dead(
        &self,
        topic: &str,
        id: &str,
        trace: Option<&TraceContext>,
        now: Millis,
        reason: &str,
    ) {
        #[cfg(feature = "opentelemetry")]
        if let Some((on, t)) = self.kept(trace) {
            use opentelemetry::trace::SpanKind;
            on.emit(Emit {
                op: "dead",
                kind: SpanKind::Internal,
                operation_type: "settle",
                topic,
                id,
                parent: t,
                start_ms: now,
                end_ms: now,
                extra: vec![kv("delayq.outcome", reason.to_owned())],
                error: Some(reason.to_owned()),
                link: None,
            });
        }
        #[cfg(not(feature = "opentelemetry"))]
        let _ = (topic, id, trace, now, reason);
    }

    /// Starts the client span of one push attempt of `d` to `url`, at `now`; `None` when the
    /// task gets no spans. The span's context goes in the request's `traceparent`, so the
    /// receiver's span is its child.
    pub fn push(&self, d: &Delivery, url: &str, now: Millis) -> Option<PushSpan> {
        #[cfg(feature = "opentelemetry")]
        if let Some((on, t)) = self.kept(d.trace.as_ref()) {
            use opentelemetry::trace::{Span as _, SpanKind, Tracer as _};
            let cx = crate::otel::context_of(t);
            let span = on
                .tracer
                .span_builder(format!("push {}", d.topic))
                .with_kind(SpanKind::Client)
                .with_start_time(time(now))
                .with_attributes(attributes(
                    "push",
                    "send",
                    &d.topic,
                    &d.id,
                    vec![
                        kv("delayq.attempt", i64::from(d.retries) + 1),
                        kv("delayq.lateness_ms", now.saturating_sub(d.due_ms) as i64),
                        kv("url.full", url.to_owned()),
                    ],
                ))
                .start_with_context(&on.tracer, &cx);
            // The span's tracestate is its parent's: the target gets the task's.
            let context = crate::otel::of_span_context(span.span_context());
            return Some(PushSpan { span, context });
        }
        #[cfg(not(feature = "opentelemetry"))]
        let _ = (d, url, now);
        None
    }

    #[cfg(feature = "opentelemetry")]
    fn kept<'a>(&'a self, trace: Option<&'a TraceContext>) -> Option<(&'a On, &'a TraceContext)> {
        let on = self.on.as_deref()?;
        let t = trace?;
        keeps(on.bound, t).then_some((on, t))
    }
}

/// Runs `f` with `trace` as the current trace context (when the crate feature
/// `opentelemetry` is on), so the settle span of a finish or release inside it is a child of
/// that context.
pub async fn within<F: std::future::Future>(trace: Option<&TraceContext>, f: F) -> F::Output {
    #[cfg(feature = "opentelemetry")]
    if let Some(t) = trace {
        use opentelemetry::trace::FutureExt as _;
        return f.with_context(crate::otel::context_of(t)).await;
    }
    #[cfg(not(feature = "opentelemetry"))]
    let _ = trace;
    f.await
}

/// The span of one push attempt, ended with its outcome.
pub struct PushSpan {
    #[cfg(feature = "opentelemetry")]
    span: opentelemetry::global::BoxedSpan,
    context: Option<TraceContext>,
}

impl std::fmt::Debug for PushSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushSpan")
            .field("context", &self.context)
            .finish()
    }
}

impl PushSpan {
    /// The context to send with the request: this span's.
    pub fn context(&self) -> Option<&TraceContext> {
        self.context.as_ref()
    }

    /// Ends the span at `now`: `status` is the target's HTTP status when it answered,
    /// `outcome` what became of the task (`finished`, `released`, `dead`), `error` why the
    /// attempt failed.
    pub fn end(self, now: Millis, status: Option<u16>, outcome: &str, error: Option<&str>) {
        #[cfg(feature = "opentelemetry")]
        {
            use opentelemetry::trace::{Span as _, Status};
            let mut span = self.span;
            if let Some(status) = status {
                span.set_attribute(kv("http.response.status_code", i64::from(status)));
            }
            span.set_attribute(kv("delayq.outcome", outcome.to_owned()));
            if let Some(e) = error {
                span.set_status(Status::error(e.to_owned()));
            }
            span.end_with_timestamp(time(now));
        }
        #[cfg(not(feature = "opentelemetry"))]
        let _ = (now, status, outcome, error);
    }
}

#[cfg(feature = "opentelemetry")]
struct Emit<'a> {
    op: &'static str,
    kind: opentelemetry::trace::SpanKind,
    operation_type: &'static str,
    topic: &'a str,
    id: &'a str,
    parent: &'a TraceContext,
    start_ms: Millis,
    end_ms: Millis,
    extra: Vec<opentelemetry::KeyValue>,
    error: Option<String>,
    link: Option<opentelemetry::trace::Link>,
}

#[cfg(feature = "opentelemetry")]
impl On {
    /// Records one finished span.
    fn emit(&self, e: Emit<'_>) {
        use opentelemetry::trace::{Span as _, Status, Tracer as _};
        let cx = crate::otel::context_of(e.parent);
        let mut builder = self
            .tracer
            .span_builder(format!("{} {}", e.op, e.topic))
            .with_kind(e.kind)
            .with_start_time(time(e.start_ms))
            .with_attributes(attributes(e.op, e.operation_type, e.topic, e.id, e.extra));
        if let Some(link) = e.link {
            builder = builder.with_links(vec![link]);
        }
        let mut span = builder.start_with_context(&self.tracer, &cx);
        if let Some(error) = e.error {
            span.set_status(Status::error(error));
        }
        span.end_with_timestamp(time(e.end_ms.max(e.start_ms)));
    }
}

#[cfg(feature = "opentelemetry")]
fn kv(key: &'static str, value: impl Into<opentelemetry::Value>) -> opentelemetry::KeyValue {
    opentelemetry::KeyValue::new(key, value)
}

#[cfg(feature = "opentelemetry")]
fn attributes(
    op: &'static str,
    operation_type: &'static str,
    topic: &str,
    id: &str,
    mut extra: Vec<opentelemetry::KeyValue>,
) -> Vec<opentelemetry::KeyValue> {
    let mut out = vec![
        kv("messaging.system", "delayq"),
        kv("messaging.operation.name", op),
        kv("messaging.operation.type", operation_type),
        kv("messaging.destination.name", topic.to_owned()),
        kv("messaging.message.id", id.to_owned()),
    ];
    out.append(&mut extra);
    out
}

#[cfg(feature = "opentelemetry")]
fn time(ms: Millis) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_bounds() {
        let table: [(f64, u64); 6] = [
            (f64::NAN, 0),
            (-1.0, 0),
            (0.0, 0),
            (1.0, u64::MAX),
            (2.0, u64::MAX),
            (0.5, u64::MAX / 2),
        ];
        for (ratio, want) in table {
            let got = bound_of(ratio);
            // The product rounds in f64; half of 2^64 is exact enough to a few ulps.
            assert!(got.abs_diff(want) <= 2048, "ratio {ratio}: {got} vs {want}");
        }
    }

    #[test]
    fn a_trace_is_kept_by_its_flag_and_its_id() {
        let t = |id: u128, sampled: bool| TraceContext::from_ids(id, 1, sampled).unwrap();
        let half = bound_of(0.5);
        let table = [
            (u64::MAX, t(5, true), true),
            (u64::MAX, t(5, false), false),
            (half, t(5, true), true),
            (half, t(u128::from(u64::MAX - 5), true), false),
            (half, t((7u128 << 64) | 5, true), true),
            (0, t(5, true), false),
        ];
        for (bound, trace, want) in table {
            assert_eq!(keeps(bound, &trace), want, "{bound} {trace:?}");
        }
    }

    #[test]
    fn spans_off_trace_nothing() {
        let t = TraceContext::from_ids(5, 1, true).unwrap();
        assert!(!Spans::off().is_on());
        assert!(!Spans::off().traces(Some(&t)));
    }
}
