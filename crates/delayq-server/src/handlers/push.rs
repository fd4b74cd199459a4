//! `/push`: a topic's push target (docs/design.md §8, docs/push.md).
//!
//! `POST` sets a topic's target (replacing the one before), `GET` shows one or every target
//! (never the secret), `DELETE` removes one. The dispatcher itself is in `delayq-push`, behind [`PushControl`]; these
//! handlers only check the caller and the input and call it. Setting or removing a target
//! needs a token that may write, like every POST (auth.rs): read-only tokens get 403.

use axum::extract::State;
use delayq_api::push::{PushDeleted, PushList, PushTarget, TargetView};

use super::{Body, Query, Reply};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{AppError, ok};
use crate::extract::{JsonBody, QueryParams};
use crate::push::PushControl;
use delayq_api::endpoint;

super::handles!(
    endpoint::PushSet => set,
    endpoint::PushGet => get,
    endpoint::PushDelete => delete,
);

/// The dispatcher, or 503 when this server runs none.
fn dispatcher(state: &AppState) -> Result<&dyn PushControl, AppError> {
    state.push().ok_or_else(|| {
        AppError::Queue(delayq::Error::unavailable(
            "push delivery",
            "this server runs no push dispatcher",
        ))
    })
}

/// The handler of [`endpoint::PushSet`] (its summary and answers are in the table).
pub async fn set(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(target): Body<endpoint::PushSet>,
) -> Reply<endpoint::PushSet> {
    caller.check_topic(&target.topic, "topic")?;
    let view = target.view();
    dispatcher(&state)?.set(target).await?;
    Ok(ok(view))
}

/// The handler of [`endpoint::PushGet`] (its summary and answers are in the table).
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): Query<endpoint::PushGet>,
) -> Reply<endpoint::PushGet> {
    let push = dispatcher(&state)?;
    let targets = match &q.topic {
        Some(topic) => {
            caller.check_topic(topic, "topic")?;
            push.get(topic).await?.into_iter().collect()
        }
        None => push
            .list()
            .await?
            .into_iter()
            .filter(|t| caller.may_use(&t.topic))
            .collect::<Vec<_>>(),
    };
    let targets: Vec<TargetView> = targets.iter().map(PushTarget::view).collect();
    let total = targets.len() as u64;
    Ok(ok(PushList { targets, total }))
}

/// The handler of [`endpoint::PushDelete`] (its summary and answers are in the table).
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): Query<endpoint::PushDelete>,
) -> Reply<endpoint::PushDelete> {
    let topic = q.topic.ok_or_else(|| AppError::Missing {
        field: "topic".into(),
    })?;
    caller.check_topic(&topic, "topic")?;
    let deleted = dispatcher(&state)?.delete(&topic).await?;
    Ok(ok(PushDeleted { topic, deleted }))
}
