//! `POST /add`: one task, or a batch `{"tasks": [...]}` added in one durable write.
//!
//! The two forms are told apart by the presence of a `tasks` key. In a batch each task gets its
//! own result (`code` 0 or the status the task alone would have got), so one invalid or
//! duplicate task does not fail the others; a batch over `max_batch` (413), a malformed body
//! (400) or a task of a topic the token may not use (403) fails the whole request.
//!
//! A task continues the W3C trace context of its own `traceparent`/`tracestate` fields, else
//! that of the request's headers of the same names (docs/tracing.md); a malformed one is a 400
//! naming the field (a task's) or the header (the whole request).

use axum::extract::State;
use axum::http::{HeaderMap, HeaderName};
use delayq::core::trace::{TRACEPARENT, TRACESTATE};
use delayq::{AddOutcome, InvalidField, TraceContext};
use delayq_api::{
    AddBatchRequest, AddData, AddRequest, AddResponse, AddTaskRequest, BatchItem, batch_field,
};

use super::{Reply, check_batch, counted};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{AppError, ok};
use crate::extract::{RawBody, parse_json};
use crate::metrics::Op;
use delayq_api::endpoint;

super::handles!(
    endpoint::Add => add,
);

/// The handler of [`endpoint::Add`] (its summary and answers are in the table).
pub async fn add(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    RawBody(bytes): RawBody,
) -> Reply<endpoint::Add> {
    let trace = header_trace(&headers).map_err(delayq::Error::from)?;
    let data = if AddRequest::is_batch(&bytes) {
        let mut batch: AddBatchRequest = parse_json(&bytes)?;
        for task in &mut batch.tasks {
            continue_trace(task, trace.as_ref());
        }
        AddResponse::Batch(add_batch(&state, &caller, batch).await?)
    } else {
        let mut task = parse_json(&bytes)?;
        continue_trace(&mut task, trace.as_ref());
        AddResponse::One(add_one(&state, &caller, task).await?)
    };
    Ok(ok(data))
}

/// The headers of the trace context, as names made once: a lookup by `&str` parses the name
/// first, on every request (the trace-context layer and the handlers that read it).
static TRACEPARENT_HEADER: HeaderName = HeaderName::from_static(TRACEPARENT);
static TRACESTATE_HEADER: HeaderName = HeaderName::from_static(TRACESTATE);

/// The W3C trace context of the request's `traceparent` and `tracestate` headers, if any.
pub(crate) fn header_trace(headers: &HeaderMap) -> Result<Option<TraceContext>, InvalidField> {
    let text = |name: &HeaderName| -> Result<Option<&str>, InvalidField> {
        headers
            .get(name)
            .map(|v| {
                v.to_str().map_err(|_| {
                    InvalidField::new(name.as_str(), "header is not visible ASCII text")
                })
            })
            .transpose()
    };
    let (parent, state) = (text(&TRACEPARENT_HEADER)?, text(&TRACESTATE_HEADER)?);
    match parent {
        // A tracestate header without its parent is ignored, as the W3C specification says
        // (a proxy may add one); in a task's fields it is refused (see `trace_of`).
        None => Ok(None),
        Some(parent) => TraceContext::parse(parent, state)
            .map(Some)
            .map_err(|e| InvalidField {
                reason: format!("header {}", e.reason),
                ..e
            }),
    }
}

/// Gives `task` the request's trace context unless it has fields of its own.
fn continue_trace(task: &mut AddTaskRequest, trace: Option<&TraceContext>) {
    if let (None, None, Some(trace)) = (&task.traceparent, &task.tracestate, trace) {
        task.traceparent = Some(trace.traceparent().to_owned());
        task.tracestate = trace.tracestate().map(str::to_owned);
    }
}

/// Adds one task (also the dashboard's add form).
pub(crate) async fn add_one(
    state: &AppState,
    caller: &Caller,
    req: AddTaskRequest,
) -> Result<AddData, AppError> {
    caller.check_topic(&req.topic, "topic")?;
    let (topic, id) = (req.topic.clone(), req.id.clone());
    let result = match req.into_new_task() {
        Ok(task) => state.queue().add(task).await,
        Err(e) => Err(e.into()),
    };
    let outcome = counted(state, &topic, Op::Add, result.map_err(AppError::from))?;
    Ok(AddData::new(topic, id, outcome))
}

async fn add_batch(
    state: &AppState,
    caller: &Caller,
    batch: AddBatchRequest,
) -> Result<Vec<BatchItem>, AppError> {
    let topics = batch.tasks.iter().map(|t| t.topic.as_str());
    check_batch(state, caller, batch.tasks.len(), topics)?;

    // Tasks that fail before the queue sees them keep their slot; the rest go in one call.
    let mut keys = Vec::with_capacity(batch.tasks.len());
    let mut results: Vec<Option<delayq::Result<AddOutcome>>> = Vec::with_capacity(keys.capacity());
    let (mut pending, mut slots) = (Vec::new(), Vec::new());
    for (i, req) in batch.tasks.into_iter().enumerate() {
        keys.push((req.topic.clone(), req.id.clone()));
        match req.into_new_task() {
            Ok(task) => {
                slots.push(i);
                pending.push(task);
                results.push(None);
            }
            Err(e) => results.push(Some(Err(e.into()))),
        }
    }
    if !pending.is_empty() {
        let added = state.queue().add_batch(pending).await?;
        for (slot, result) in slots.into_iter().zip(added) {
            results[slot] = Some(result);
        }
    }
    Ok(keys
        .into_iter()
        .zip(results)
        .enumerate()
        .map(|(i, ((topic, id), result))| {
            let result = result.map_or_else(
                || Err(AppError::Internal("a batch task got no result".into())),
                |r| r.map_err(|e| AppError::from(in_batch(e, i))),
            );
            let outcome = match &result {
                Ok(_) => "ok",
                Err(e) => e.outcome(),
            };
            state.metrics().count(&topic, Op::Add, outcome, 1);
            item(topic, id, result)
        })
        .collect())
}

fn item(topic: String, id: String, result: Result<AddOutcome, AppError>) -> BatchItem {
    match result {
        Ok(outcome) => BatchItem {
            id,
            topic,
            code: 0,
            message: "ok".into(),
            outcome: Some(outcome),
        },
        Err(e) => BatchItem {
            id,
            topic,
            code: e.status().as_u16(),
            message: e.public_message(),
            outcome: None,
        },
    }
}

/// Names the field of an error about the `index`-th task of a batch as the request does
/// (`tasks[3].delay_ms`); the queue names it as for a single add.
pub(super) fn in_batch(e: delayq::Error, index: usize) -> delayq::Error {
    match e {
        delayq::Error::Invalid(mut f) => {
            f.field = batch_field(index, &f.field);
            delayq::Error::Invalid(f)
        }
        delayq::Error::TooLarge { field, reason } => delayq::Error::TooLarge {
            field: batch_field(index, &field),
            reason,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_errors_name_the_task_once() {
        let table: [(delayq::Error, &str); 3] = [
            (
                delayq::Error::invalid("id", "must not be empty"),
                "invalid tasks[2].id: must not be empty",
            ),
            (
                delayq::Error::TooLarge {
                    field: "body".into(),
                    reason: "is 9 bytes, the limit is 8 bytes".into(),
                },
                "tasks[2].body is too large: is 9 bytes, the limit is 8 bytes",
            ),
            (
                delayq::Error::Duplicate {
                    topic: "t".into(),
                    id: "a".into(),
                },
                "task \"a\" of topic \"t\" already exists",
            ),
        ];
        for (err, want) in table {
            assert_eq!(in_batch(err, 2).to_string(), want);
        }
    }
}
