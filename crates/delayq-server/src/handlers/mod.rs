//! The request handlers, one file per area of the API:
//! - [`add`]: `POST /add`, one task or a batch.
//! - [`pop`]: `POST /pop`, the long-poll.
//! - [`ack`]: what a consumer does with a task it holds: `/finish`, `/release`, `/touch`.
//! - [`manage`]: what a producer or operator does: `/cancel`, `/requeue`, `/delete`.
//! - [`control`]: rules 13–15: `/bury`, `/reschedule`, `/pause`, `/resume`.
//! - [`schedules`]: recurring schedules: `/schedules` and its pause, resume and delete.
//! - [`inspect`]: reads: `/get`, `/tasks`, `/stats`, `/topics`.
//! - [`ops`]: `/healthz`, `/readyz`, `/metrics`, `/openapi.json`.
//! - [`push`]: `/push`, the push targets (docs/push.md).
//! - [`flow`]: `/limits`, the flow limits (docs/flow-control.md).
//!
//! Each handler checks the caller may use the topic, calls the queue once, counts the
//! operation in the metrics and wraps the result in the envelope. Errors are returned as
//! [`AppError`] and mapped to a status in one place.

pub mod ack;
pub mod add;
pub mod control;
pub mod flow;
pub mod inspect;
pub mod manage;
pub mod ops;
pub mod pop;
pub mod push;
pub mod schedules;

use axum::handler::Handler;
use axum::routing::{MethodFilter, MethodRouter};
use delayq_api::batch_field;
use delayq_api::endpoint::{Endpoint, Method};
use delayq_api::request::BATCH_FIELD;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::AppError;
use crate::metrics::Op;

/// The result type of handlers.
pub type ApiResult<T> = Result<axum::Json<crate::error::Envelope<T>>, AppError>;

/// The result of the handler of endpoint `E`: its `data` type is the table's.
pub type Reply<E> = ApiResult<<E as Endpoint>::Response>;

/// The JSON body of endpoint `E`: its request type is the table's.
pub type Body<E> = crate::extract::JsonBody<<E as Endpoint>::Request>;

/// The query of endpoint `E`: its request type is the table's.
pub type Query<E> = crate::extract::QueryParams<<E as Endpoint>::Request>;

/// The handler of an endpoint of the table ([`delayq_api::endpoint`]), the one piece of the
/// server written per endpoint; [`crate::app::app`] registers every one at its method and route.
pub trait Handle: Endpoint {
    /// The handler, at the endpoint's method.
    fn handler() -> MethodRouter<AppState>;
}

/// `handler` at the method of `E`.
pub(crate) fn at<E: Endpoint, H, T>(handler: H) -> MethodRouter<AppState>
where
    H: Handler<T, AppState>,
    T: 'static,
{
    let filter = match E::METHOD {
        Method::Get => MethodFilter::GET,
        Method::Post => MethodFilter::POST,
        Method::Delete => MethodFilter::DELETE,
    };
    axum::routing::on(filter, handler)
}

/// Names the handler of each endpoint: `handles!(Add => add)`.
macro_rules! handles {
    ($($endpoint:ty => $handler:path),* $(,)?) => {
        $(
            impl $crate::handlers::Handle for $endpoint {
                fn handler() -> axum::routing::MethodRouter<$crate::app::AppState> {
                    $crate::handlers::at::<Self, _, _>($handler)
                }
            }
        )*
    };
}
pub(crate) use handles;

/// Counts one operation on `topic` in the metrics and passes its result through.
pub(crate) fn counted<T>(
    state: &AppState,
    topic: &str,
    op: Op,
    result: Result<T, AppError>,
) -> Result<T, AppError> {
    let outcome = match &result {
        Ok(_) => "ok",
        Err(e) => e.outcome(),
    };
    state.metrics().count(topic, op, outcome, 1);
    result
}

/// Checks what fails a whole batch (`/add` or `/finish`) before any task is looked at: more
/// than `max_batch` tasks (413), none (400), or a task of a topic the caller may not use (403,
/// naming `tasks[i].topic`).
pub(crate) fn check_batch<'a>(
    state: &AppState,
    caller: &Caller,
    len: usize,
    topics: impl Iterator<Item = &'a str>,
) -> Result<(), AppError> {
    let max = state.limits().max_batch;
    if len > max {
        return Err(AppError::TooLarge {
            what: "the batch".into(),
            reason: format!("{len} tasks, the limit is {max} (max_batch)"),
        });
    }
    if len == 0 {
        return Err(AppError::invalid(
            BATCH_FIELD,
            "must list at least one task",
        ));
    }
    for (i, topic) in topics.enumerate() {
        caller.check_topic(topic, &batch_field(i, "topic"))?;
    }
    Ok(())
}
