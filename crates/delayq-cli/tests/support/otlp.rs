//! Reading what an OTLP collector receives: spans decoded with the official protobuf
//! definitions (`opentelemetry-proto`), flattened to what the tracing tests check.

use delayq_testkit::Receiver;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use prost::Message as _;

/// A span as a collector received it.
#[derive(Debug, Clone)]
pub struct Span {
    /// Its resource's `service.name`.
    pub service: String,
    pub name: String,
    /// Ids in lower-case hex; the parent's is empty for a root span.
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The spans of one export request.
pub fn spans_of(request: &ExportTraceServiceRequest) -> Vec<Span> {
    let mut out = Vec::new();
    for resource in &request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|a| a.key == "service.name")
            .and_then(|a| a.value.as_ref()?.value.as_ref())
            .map(|v| match v {
                any_value::Value::StringValue(name) => name.clone(),
                other => format!("{other:?}"),
            })
            .unwrap_or_default();
        for scope in &resource.scope_spans {
            for s in &scope.spans {
                out.push(Span {
                    service: service.clone(),
                    name: s.name.clone(),
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent_span_id: hex(&s.parent_span_id),
                });
            }
        }
    }
    out
}

/// Every span an OTLP/HTTP receiver got (each call a protobuf `POST /v1/traces`).
pub fn received(receiver: &Receiver) -> Vec<Span> {
    receiver
        .calls()
        .iter()
        .flat_map(|call| {
            assert_eq!(call.path, "/v1/traces");
            spans_of(&ExportTraceServiceRequest::decode(call.body.as_slice()).expect("OTLP"))
        })
        .collect()
}
