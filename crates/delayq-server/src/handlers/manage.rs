//! What a producer or operator does with a task: `/cancel`, `/requeue`, `/delete`.

use axum::extract::State;

use super::{Body, Reply, counted};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{AppError, ok};
use crate::extract::JsonBody;
use crate::metrics::Op;
use delayq_api::RequeueData;
use delayq_api::endpoint;

super::handles!(
    endpoint::Cancel => cancel,
    endpoint::Requeue => requeue,
    endpoint::Delete => delete,
);

/// The handler of [`endpoint::Cancel`] (its summary and answers are in the table).
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(req): Body<endpoint::Cancel>,
) -> Reply<endpoint::Cancel> {
    caller.check_topic(&req.topic, "topic")?;
    let result = state
        .queue()
        .cancel(&req.topic, &req.id)
        .await
        .map_err(AppError::from);
    counted(&state, &req.topic, Op::Cancel, result)?;
    Ok(ok(None))
}

/// The handler of [`endpoint::Requeue`] (its summary and answers are in the table).
pub async fn requeue(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(req): Body<endpoint::Requeue>,
) -> Reply<endpoint::Requeue> {
    caller.check_topic(&req.topic, "topic")?;
    let queue = state.queue();
    let result = match (req.id.as_deref(), req.all.unwrap_or(false)) {
        (Some(id), false) => queue.requeue(&req.topic, id).await.map(|()| 1),
        (None, true) => queue.requeue_all(&req.topic).await,
        (Some(_), true) => {
            return Err(AppError::invalid(
                "all",
                "cannot be true together with id; give one of them",
            ));
        }
        (None, false) => {
            return Err(AppError::Missing {
                field: "id (or all: true)".into(),
            });
        }
    };
    let requeued = counted(
        &state,
        &req.topic,
        Op::Requeue,
        result.map_err(AppError::from),
    )?;
    Ok(ok(RequeueData { requeued }))
}

/// The handler of [`endpoint::Delete`] (its summary and answers are in the table).
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(req): Body<endpoint::Delete>,
) -> Reply<endpoint::Delete> {
    caller.check_topic(&req.topic, "topic")?;
    let result = state
        .queue()
        .delete(&req.topic, &req.id)
        .await
        .map_err(AppError::from);
    counted(&state, &req.topic, Op::Delete, result)?;
    Ok(ok(None))
}
