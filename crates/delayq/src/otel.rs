//! The OpenTelemetry API's side of a task's trace context (feature `opentelemetry`): a task
//! added without a context of its own continues the caller's current span, and a callback of
//! [`Workers`](crate::Workers) runs with its task's context as the current one, so the spans
//! the handler starts are in the producer's trace (docs/tracing.md).
//!
//! Only the API crate is used: the application's tracer provider, whatever it exports to,
//! records the spans.

use delayq_core::TraceContext;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::{Context, KeyValue};

/// The trace context of the current span, if it has a valid one.
pub fn current() -> Option<TraceContext> {
    of_context(&Context::current())
}

/// The trace context of the span of `cx`, if it has a valid one.
pub fn of_context(cx: &Context) -> Option<TraceContext> {
    of_span_context(cx.span().span_context())
}

/// The trace context of a span, if it is valid, with its tracestate.
pub fn of_span_context(sc: &SpanContext) -> Option<TraceContext> {
    if !sc.is_valid() {
        return None;
    }
    let t = TraceContext::from_ids(
        u128::from_be_bytes(sc.trace_id().to_bytes()),
        u64::from_be_bytes(sc.span_id().to_bytes()),
        sc.is_sampled(),
    )?;
    let state = sc.trace_state().header();
    if state.is_empty() {
        return Some(t);
    }
    // A state the checks refuse (the SDK's limits differ) is dropped, not the whole context.
    Some(TraceContext::parse(t.traceparent(), Some(&state)).unwrap_or(t))
}

/// A context whose (remote) parent span is `trace`: the parent of what a consumer does with
/// the task.
pub fn context_of(trace: &TraceContext) -> Context {
    let state = trace
        .tracestate()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    let sc = SpanContext::new(
        TraceId::from_bytes(trace.trace_id().to_be_bytes()),
        SpanId::from_bytes(trace.span_id().to_be_bytes()),
        TraceFlags::new(trace.flags()),
        true,
        state,
    );
    Context::new().with_remote_span_context(sc)
}

/// The messaging attributes of a delivery, for a consumer's span (semantic conventions for
/// messaging: destination, message id; never the body).
pub fn delivery_attributes(d: &crate::Delivery) -> Vec<KeyValue> {
    vec![
        KeyValue::new("messaging.system", "delayq"),
        KeyValue::new("messaging.destination.name", d.topic.clone()),
        KeyValue::new("messaging.message.id", d.id.clone()),
        KeyValue::new("delayq.attempt", i64::from(d.retries) + 1),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_round_trip() {
        let t = TraceContext::parse(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            Some("congo=t61rcWkgMzE,rojo=1"),
        )
        .unwrap();
        let cx = context_of(&t);
        assert_eq!(of_context(&cx), Some(t.clone()));
        let _guard = cx.attach();
        assert_eq!(current(), Some(t));
        drop(_guard);
        assert_eq!(current(), None);
    }
}
