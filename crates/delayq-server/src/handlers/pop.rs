//! `POST /pop`: the long-poll.
//!
//! A waiting pop is a parked future, not a thread: the queue registers it with its topic's
//! waiters and wakes it when a task becomes ready. When the client goes away, hyper drops the
//! handler's future; dropping it unregisters the waiter, and a task that became ready in the
//! meantime stays READY for the next consumer (a wake-up meant for the dropped waiter is passed
//! on). The number of open long-polls is capped (`max_long_polls`); one more gets a 503 with
//! `Retry-After: 1`, which tells clients to come back rather than to give up. A pop with
//! `timeout_ms: 0` never waits and does not count. During a graceful shutdown open long-polls
//! return at once with no task.
//!
//! A pop may carry the acknowledgement of the task its consumer held (`finish` or `release`),
//! so that a consumer loop costs one request a task. The acknowledgement is applied first, with
//! the checks, metrics and errors of its own endpoint; when it fails, its error is the answer
//! and nothing is popped. A finish and the first look for the next task are one step of the
//! storage ([`delayq::Queue::finish_then_pop`]), so on Redis the loop costs one script a task.
//!
//! A task added with a trace context carries it back (`traceparent`, `tracestate` fields);
//! the answer of a pop without `count` (one task) also has them as headers, so an HTTP
//! client's instrumentation can continue the trace as it would any other (docs/tracing.md).

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use delayq::core::trace::{TRACEPARENT, TRACESTATE};
use delayq::core::validate;
use delayq::{Held, PopOptions};
use delayq_api::{AckRequest, PopData, PopRequest, TaskDelivery};

use super::{Body, Reply, ack, counted};
use crate::app::{AppState, LongPoll};
use crate::auth::Caller;
use crate::error::{AppError, ok};
use crate::extract::JsonBody;
use crate::metrics::Op;
use delayq_api::endpoint;

super::handles!(
    endpoint::Pop => pop,
);

/// The handler of [`endpoint::Pop`] (its summary and answers are in the table).
pub async fn pop(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(mut req): Body<endpoint::Pop>,
) -> Result<(HeaderMap, Reply<endpoint::Pop>), AppError> {
    caller.check_topic(&req.topic, "topic")?;
    if state.is_pushed(&req.topic) {
        return Err(AppError::PushedTopic { topic: req.topic });
    }
    // The pop's own fields are checked before the acknowledgement is applied, so a 400 never
    // follows a change.
    let options = pop_options(&state, &req)?;
    // So is the long-poll slot taken: a 503 for want of one must not follow a change either.
    let slot = if options.timeout_ms > 0 && !state.is_draining() {
        Some(state.begin_long_poll()?)
    } else {
        None
    };
    let result = match (req.finish.take(), req.release.take()) {
        (Some(_), Some(_)) => {
            return Err(AppError::invalid(
                "release",
                "give finish or release, not both: one task is acknowledged per pop",
            ));
        }
        (Some(done), None) => {
            finish_and_take(&state, &caller, &done, &req.topic, options, slot).await?
        }
        (None, Some(failed)) => {
            ack::release_one(&state, &caller, failed, "release.topic").await?;
            take(&state, &req.topic, options, slot).await
        }
        (None, None) => take(&state, &req.topic, options, slot).await,
    };
    let as_list = req.count.is_some();
    let outcome = match &result {
        Ok(got) if got.is_empty() => "empty",
        Ok(_) => "ok",
        Err(e) => e.outcome(),
    };
    state.metrics().count(&req.topic, Op::Pop, outcome, 1);
    let mut tasks = result?.into_iter().map(TaskDelivery::from);
    let mut headers = HeaderMap::new();
    let data = if as_list {
        Some(PopData::Many(tasks.collect()))
    } else {
        tasks.next().map(|task| {
            trace_headers(&mut headers, &task);
            PopData::One(Box::new(task))
        })
    };
    Ok((headers, Ok(ok(data))))
}

/// The trace context of a single delivered task as response headers.
fn trace_headers(headers: &mut HeaderMap, task: &TaskDelivery) {
    for (name, value) in [
        (TRACEPARENT, &task.traceparent),
        (TRACESTATE, &task.tracestate),
    ] {
        // Checked when added: visible ASCII, so always a valid header value.
        if let Some(value) = value.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
            headers.insert(name, value);
        }
    }
}

/// The options of a pop, checked against the limits (before a long-poll slot is taken, so
/// that a bad request is a 400 even when every slot is taken; the queue checks the same again).
fn pop_options(state: &AppState, req: &PopRequest) -> Result<PopOptions, AppError> {
    let timeout_ms = req
        .timeout_ms
        .map_or(state.http().default_pop_timeout_ms, |t| t.0);
    let count = req.count.map_or(1, |c| c.0);
    validate::check_pop(count, timeout_ms, state.limits()).map_err(delayq::Error::from)?;
    Ok(PopOptions::default()
        .count(count as usize)
        .timeout_ms(timeout_ms)
        .auto_finish(req.auto_finish.unwrap_or(false)))
}

/// The finish of an ack-and-next pop and the pop: the finish and the first look are one step
/// of the storage (one Redis script where the task and the topic share a partition), never cut
/// short by a drain, so its answer always says whether the finish was applied; the long-poll,
/// when the first look found nothing, is [`take`]'s. The outer error is the finish's (counted
/// as a `/finish`), the inner result the pop's.
async fn finish_and_take(
    state: &AppState,
    caller: &Caller,
    done: &AckRequest,
    topic: &str,
    options: PopOptions,
    slot: Option<LongPoll>,
) -> Result<Result<Vec<delayq::Delivery>, AppError>, AppError> {
    caller.check_topic(&done.topic, "finish.topic")?;
    let held = Held {
        topic: &done.topic,
        id: &done.id,
        receipt: done.receipt.as_deref(),
    };
    let first = state
        .queue()
        .finish_then_pop(held, topic, options.timeout_ms(0))
        .await
        .map_err(AppError::from);
    let first = counted(state, &done.topic, Op::Finish, first)?;
    Ok(match first {
        Ok(got) if got.is_empty() && options.timeout_ms > 0 => {
            take(state, topic, options, slot).await
        }
        Ok(got) => Ok(got),
        Err(e) => Err(AppError::from(e)),
    })
}

/// Pops, waiting only with a long-poll slot (none for `timeout_ms: 0`, nor while draining).
async fn take(
    state: &AppState,
    topic: &str,
    options: PopOptions,
    slot: Option<LongPoll>,
) -> Result<Vec<delayq::Delivery>, AppError> {
    let Some(_slot) = slot else {
        return Ok(state.queue().pop(topic, options.timeout_ms(0)).await?);
    };
    tokio::select! {
        biased;
        got = state.queue().pop(topic, options) => Ok(got?),
        () = state.drained() => Ok(Vec::new()),
    }
}
