//! The trace context on the wire: two optional text fields, `traceparent` and `tracestate`,
//! named as the W3C headers are, in a task to add (where they override the request's headers)
//! and in the views of a task (docs/tracing.md).

use delayq_core::trace::{TRACEPARENT, TRACESTATE};
use delayq_core::{InvalidField, TraceContext};

/// The trace context of the wire fields: `None` when neither is given; a `tracestate` alone is
/// refused (it means nothing without the parent it belongs to).
pub fn trace_of(
    traceparent: Option<&str>,
    tracestate: Option<&str>,
) -> Result<Option<TraceContext>, InvalidField> {
    match (traceparent, tracestate) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(InvalidField::new(
            TRACESTATE,
            format!("is given without {TRACEPARENT}"),
        )),
        (Some(parent), state) => TraceContext::parse(parent, state).map(Some),
    }
}

/// The wire fields of a trace context: `(traceparent, tracestate)`.
pub fn trace_fields(trace: Option<&TraceContext>) -> (Option<String>, Option<String>) {
    match trace {
        None => (None, None),
        Some(t) => (
            Some(t.traceparent().to_owned()),
            t.tracestate().map(str::to_owned),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn fields_both_ways() {
        assert_eq!(trace_of(None, None), Ok(None));
        assert_eq!(trace_of(None, Some("a=1")).unwrap_err().field, TRACESTATE);
        assert_eq!(trace_of(Some("x"), None).unwrap_err().field, TRACEPARENT);
        let t = trace_of(Some(GOOD), Some("a=1")).unwrap();
        assert_eq!(
            trace_fields(t.as_ref()),
            (Some(GOOD.to_owned()), Some("a=1".to_owned()))
        );
        assert_eq!(trace_fields(None), (None, None));
    }
}
