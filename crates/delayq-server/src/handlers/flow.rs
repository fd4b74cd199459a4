//! `/limits`: a topic's flow limits (docs/design.md §11, docs/flow-control.md).
//!
//! `POST` sets a topic's limits (replacing the ones before), `GET` shows one topic's or every
//! topic's, `DELETE` removes one topic's. The limits live in the storage, so every instance
//! and every restart sees them; the storage applies them at each hand-out. Setting or
//! removing limits needs a token that may write, like every POST and DELETE (auth.rs).

use axum::extract::State;
use delayq_api::flow::{LimitsDeleted, LimitsList, LimitsView};

use super::{Body, Query, Reply};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{AppError, ok};
use crate::extract::{JsonBody, QueryParams};
use delayq_api::endpoint;

super::handles!(
    endpoint::LimitsSet => set,
    endpoint::LimitsGet => get,
    endpoint::LimitsDelete => delete,
);

/// The handler of [`endpoint::LimitsSet`] (its summary and answers are in the table).
pub async fn set(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(req): Body<endpoint::LimitsSet>,
) -> Reply<endpoint::LimitsSet> {
    caller.check_topic(&req.topic, "topic")?;
    let limits = req.limits().map_err(delayq::Error::from)?;
    state.queue().set_limits(&req.topic, limits).await?;
    Ok(ok(LimitsView::new(req.topic, &limits)))
}

/// The handler of [`endpoint::LimitsGet`] (its summary and answers are in the table).
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): Query<endpoint::LimitsGet>,
) -> Reply<endpoint::LimitsGet> {
    if let Some(topic) = &q.topic {
        caller.check_topic(topic, "topic")?;
    }
    let limits: Vec<LimitsView> = state
        .queue()
        .limits()
        .await?
        .into_iter()
        .filter(|(t, _)| q.topic.as_ref().map_or(caller.may_use(t), |only| only == t))
        .map(|(t, l)| LimitsView::new(t, &l))
        .collect();
    let total = limits.len() as u64;
    Ok(ok(LimitsList { limits, total }))
}

/// The handler of [`endpoint::LimitsDelete`] (its summary and answers are in the table).
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): Query<endpoint::LimitsDelete>,
) -> Reply<endpoint::LimitsDelete> {
    let topic = q.topic.ok_or_else(|| AppError::Missing {
        field: "topic".into(),
    })?;
    caller.check_topic(&topic, "topic")?;
    let deleted = state.queue().topic_limits(&topic).await?.is_some();
    state.queue().delete_limits(&topic).await?;
    Ok(ok(LimitsDeleted { topic, deleted }))
}
