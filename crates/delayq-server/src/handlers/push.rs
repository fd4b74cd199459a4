//! `/push`: a topic's push target (docs/design.md §8, docs/push.md).
//!
//! `POST` sets a topic's target (replacing the one before), `GET` shows one or every target
//! (never the secret), `DELETE` removes one. The dispatcher itself is in `delayq-push`, behind [`PushControl`]; these
//! handlers only check the caller and the input and call it. Setting or removing a target
//! needs a token that may write, like every POST (auth.rs): read-only tokens get 403.

use axum::extract::State;
use delayq_api::push::{PushDeleted, PushList, PushQuery, PushTarget, TargetView};

use super::ApiResult;
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{AppError, Envelope, ErrorData, ok};
use crate::extract::{JsonBody, QueryParams};
use crate::push::PushControl;

/// The dispatcher, or 503 when this server runs none.
fn dispatcher(state: &AppState) -> Result<&dyn PushControl, AppError> {
    state.push().ok_or_else(|| {
        AppError::Queue(delayq::Error::unavailable(
            "push delivery",
            "this server runs no push dispatcher",
        ))
    })
}

/// Sets the push target of a topic; from then on delayq delivers the topic's tasks itself.
#[utoipa::path(
    post,
    path = "/push",
    tag = "push",
    request_body = PushTarget,
    responses(
        (status = 200, description = "Set; data is the target as GET shows it", body = Envelope<TargetView>),
        (status = 400, description = "A field is missing or invalid (named in the message)", body = Envelope<Option<ErrorData>>),
        (status = 403, description = "A read-only token, or a topic the token may not use", body = Envelope<Option<ErrorData>>),
    ),
    security(("bearer" = []))
)]
pub async fn set(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(target): JsonBody<PushTarget>,
) -> ApiResult<TargetView> {
    caller.check_topic(&target.topic, "topic")?;
    let view = target.view();
    dispatcher(&state)?.set(target).await?;
    Ok(ok(view))
}

/// The target of one topic, or every target the caller may see.
#[utoipa::path(
    get,
    path = "/push",
    tag = "push",
    params(PushQuery),
    responses(
        (status = 200, description = "The targets (one, or none, with topic)", body = Envelope<PushList>),
    ),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): QueryParams<PushQuery>,
) -> ApiResult<PushList> {
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

/// Removes a topic's target: its tasks then wait for ordinary consumers again.
#[utoipa::path(
    delete,
    path = "/push",
    tag = "push",
    params(PushQuery),
    responses(
        (status = 200, description = "Removed, or there was none (deleted: false)", body = Envelope<PushDeleted>),
        (status = 400, description = "No topic given, or an invalid one", body = Envelope<Option<ErrorData>>),
        (status = 403, description = "A read-only token, or a topic the token may not use", body = Envelope<Option<ErrorData>>),
    ),
    security(("bearer" = []))
)]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): QueryParams<PushQuery>,
) -> ApiResult<PushDeleted> {
    let topic = q.topic.ok_or_else(|| AppError::Missing {
        field: "topic".into(),
    })?;
    caller.check_topic(&topic, "topic")?;
    let deleted = dispatcher(&state)?.delete(&topic).await?;
    Ok(ok(PushDeleted { topic, deleted }))
}
