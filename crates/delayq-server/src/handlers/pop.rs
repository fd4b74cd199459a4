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

use axum::extract::State;
use delayq::PopOptions;
use delayq::core::validate;
use delayq_api::{PopData, PopRequest, TaskDelivery};

use super::{Body, Reply};
use crate::app::AppState;
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
    JsonBody(req): Body<endpoint::Pop>,
) -> Reply<endpoint::Pop> {
    caller.check_topic(&req.topic, "topic")?;
    if state.is_pushed(&req.topic) {
        return Err(AppError::PushedTopic { topic: req.topic });
    }
    let topic = req.topic.clone();
    let as_list = req.count.is_some();
    let result = take(&state, req).await;
    let outcome = match &result {
        Ok(got) if got.is_empty() => "empty",
        Ok(_) => "ok",
        Err(e) => e.outcome(),
    };
    state.metrics().count(&topic, Op::Pop, outcome, 1);
    let mut tasks = result?.into_iter().map(TaskDelivery::from);
    let data = if as_list {
        Some(PopData::Many(tasks.collect()))
    } else {
        tasks.next().map(|task| PopData::One(Box::new(task)))
    };
    Ok(ok(data))
}

async fn take(state: &AppState, req: PopRequest) -> Result<Vec<delayq::Delivery>, AppError> {
    let limits = state.limits();
    let timeout_ms = req
        .timeout_ms
        .map_or(state.http().default_pop_timeout_ms, |t| t.0);
    let count = req.count.map_or(1, |c| c.0);
    // Checked before a long-poll slot is taken, so that a bad request is a 400 even when every
    // slot is taken; the queue checks the same again.
    validate::check_pop(count, timeout_ms, limits).map_err(delayq::Error::from)?;
    let options = PopOptions::default()
        .count(count as usize)
        .timeout_ms(timeout_ms)
        .auto_finish(req.auto_finish.unwrap_or(false));
    if timeout_ms == 0 {
        return Ok(state.queue().pop(&req.topic, options).await?);
    }
    if state.is_draining() {
        return Ok(state.queue().pop(&req.topic, options.timeout_ms(0)).await?);
    }
    let _slot = state.begin_long_poll()?;
    tokio::select! {
        biased;
        got = state.queue().pop(&req.topic, options) => Ok(got?),
        () = state.drained() => Ok(Vec::new()),
    }
}
