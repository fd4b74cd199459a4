//! The operations that came with the beanstalkd protocol (docs/design.md §2 rules 13–15):
//! `/bury` (the holder gives up on its task), `/reschedule` (a waiting task gets a new due),
//! `/pause` and `/resume` (a topic stops and starts handing out tasks).
//!
//! Like every write, they need a token that may write and may use the topic. A pause may name
//! a topic that has no tasks yet: it is kept, shown in `/stats` and `/topics`, and holds the
//! tasks added later.

use axum::extract::State;

use super::{Body, Reply, counted};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{AppError, ok};
use crate::extract::JsonBody;
use crate::metrics::Op;
use delayq_api::endpoint;
use delayq_api::{PauseData, ReleaseData, StatsView};

super::handles!(
    endpoint::Bury => bury,
    endpoint::Reschedule => reschedule,
    endpoint::Pause => pause,
    endpoint::Resume => resume,
);

/// The handler of [`endpoint::Bury`] (its summary and answers are in the table).
pub async fn bury(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(req): Body<endpoint::Bury>,
) -> Reply<endpoint::Bury> {
    caller.check_topic(&req.topic, "topic")?;
    let result = state
        .queue()
        .bury(&req.topic, &req.id, req.options())
        .await
        .map_err(AppError::from);
    counted(&state, &req.topic, Op::Bury, result)?;
    Ok(ok(None))
}

/// The handler of [`endpoint::Reschedule`] (its summary and answers are in the table).
pub async fn reschedule(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(req): Body<endpoint::Reschedule>,
) -> Reply<endpoint::Reschedule> {
    caller.check_topic(&req.topic, "topic")?;
    let when = req.when().map_err(delayq::Error::from)?;
    let result = state
        .queue()
        .reschedule(&req.topic, &req.id, when)
        .await
        .map_err(AppError::from);
    let new_state = counted(&state, &req.topic, Op::Reschedule, result)?;
    Ok(ok(ReleaseData::from(new_state)))
}

/// The handler of [`endpoint::Pause`] (its summary and answers are in the table).
pub async fn pause(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(req): Body<endpoint::Pause>,
) -> Reply<endpoint::Pause> {
    caller.check_topic(&req.topic, "topic")?;
    let result = state
        .queue()
        .pause(&req.topic, req.for_ms.map(|ms| ms.0))
        .await
        .map_err(AppError::from);
    counted(&state, &req.topic, Op::Pause, result)?;
    Ok(ok(pause_data(&state, req.topic).await?))
}

/// The handler of [`endpoint::Resume`] (its summary and answers are in the table).
pub async fn resume(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(req): Body<endpoint::Resume>,
) -> Reply<endpoint::Resume> {
    caller.check_topic(&req.topic, "topic")?;
    let result = state
        .queue()
        .resume(&req.topic)
        .await
        .map_err(AppError::from);
    counted(&state, &req.topic, Op::Resume, result)?;
    Ok(ok(pause_data(&state, req.topic).await?))
}

/// The pause of `topic` as its counters show it now.
async fn pause_data(state: &AppState, topic: String) -> Result<PauseData, AppError> {
    let stats = state.queue().stats(&topic).await?;
    let view = StatsView::at(stats, state.queue().context().clock.now_ms());
    Ok(PauseData {
        topic,
        paused: view.paused,
        paused_until_ms: view.paused_until_ms,
    })
}
