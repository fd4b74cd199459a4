//! What a consumer does with a task it holds: `/finish` (one task or a batch), `/release`,
//! `/touch`.
//!
//! Each may pass the `receipt` of its attempt; a stale one (the task was redelivered since) is a
//! 409, as is a task that is not ACTIVE. seqdelay clients send no receipt and are accepted.

use axum::extract::State;
use delayq::ReleaseOptions;

use super::add::in_batch;
use super::{Body, Reply, check_batch, counted};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{AppError, ok};
use crate::extract::{JsonBody, RawBody, parse_json};
use crate::metrics::Op;
use delayq_api::endpoint;
use delayq_api::{
    AckRequest, FinishBatchData, FinishBatchRequest, FinishItem, FinishRequest, ReleaseData,
    ReleaseRequest, TouchData,
};

super::handles!(
    endpoint::Finish => finish,
    endpoint::Release => release,
    endpoint::Touch => touch,
);

/// The handler of [`endpoint::Finish`] (its summary and answers are in the table).
pub async fn finish(
    State(state): State<AppState>,
    caller: Caller,
    RawBody(bytes): RawBody,
) -> Reply<endpoint::Finish> {
    if FinishRequest::is_batch(&bytes) {
        let batch = finish_batch(&state, &caller, parse_json(&bytes)?).await?;
        return Ok(ok(Some(batch)));
    }
    let req: AckRequest = parse_json(&bytes)?;
    caller.check_topic(&req.topic, "topic")?;
    let result = state
        .queue()
        .finish(&req.topic, &req.id, req.receipt.as_deref())
        .await
        .map_err(AppError::from);
    counted(&state, &req.topic, Op::Finish, result)?;
    Ok(ok(None))
}

/// A batch finish: each task its own result; only a batch over `max_batch` (413), an empty
/// one (400) or a topic the token may not use (403) fails the whole request.
async fn finish_batch(
    state: &AppState,
    caller: &Caller,
    batch: FinishBatchRequest,
) -> Result<FinishBatchData, AppError> {
    let topics = batch.tasks.iter().map(|t| t.topic.as_str());
    check_batch(state, caller, batch.tasks.len(), topics)?;
    let keys: Vec<_> = batch
        .tasks
        .iter()
        .map(|t| (t.topic.as_str(), t.id.as_str(), t.receipt.as_deref()))
        .collect();
    let results = state.queue().finish_batch(&keys).await?;
    let items = batch
        .tasks
        .into_iter()
        .zip(results)
        .enumerate()
        .map(|(i, (task, result))| {
            let result = result.map_err(|e| AppError::from(in_batch(e, i)));
            let (code, message) = match &result {
                Ok(()) => (0, "ok".to_owned()),
                Err(e) => (e.status().as_u16(), e.public_message()),
            };
            let outcome = result.as_ref().map_or_else(AppError::outcome, |()| "ok");
            state.metrics().count(&task.topic, Op::Finish, outcome, 1);
            FinishItem {
                topic: task.topic,
                id: task.id,
                code,
                message,
            }
        })
        .collect();
    Ok(FinishBatchData { items })
}

/// The handler of [`endpoint::Release`] (its summary and answers are in the table).
pub async fn release(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(req): Body<endpoint::Release>,
) -> Reply<endpoint::Release> {
    let new_state = release_one(&state, &caller, req, "topic").await?;
    Ok(ok(ReleaseData::from(new_state)))
}

/// Releases one task as `POST /release` does (also the `release` of an ack-and-next pop,
/// whose topic is the field `topic_field`); returns its new state.
pub(super) async fn release_one(
    state: &AppState,
    caller: &Caller,
    req: ReleaseRequest,
    topic_field: &str,
) -> Result<delayq::State, AppError> {
    caller.check_topic(&req.topic, topic_field)?;
    let mut options = ReleaseOptions::default();
    if let Some(receipt) = req.receipt {
        options = options.receipt(receipt);
    }
    if let Some(delay) = req.delay_ms {
        options = options.delay_ms(delay.0);
    }
    if let Some(error) = req.error {
        options = options.error(error);
    }
    if let Some(priority) = req.priority {
        options = options.priority(priority);
    }
    let result = state
        .queue()
        .release(&req.topic, &req.id, options)
        .await
        .map_err(AppError::from);
    counted(state, &req.topic, Op::Release, result)
}

/// The handler of [`endpoint::Touch`] (its summary and answers are in the table).
pub async fn touch(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(req): Body<endpoint::Touch>,
) -> Reply<endpoint::Touch> {
    caller.check_topic(&req.topic, "topic")?;
    let result = state
        .queue()
        .touch(&req.topic, &req.id, req.receipt.as_deref())
        .await
        .map_err(AppError::from);
    let deadline_ms = counted(&state, &req.topic, Op::Touch, result)?;
    Ok(ok(TouchData { deadline_ms }))
}
