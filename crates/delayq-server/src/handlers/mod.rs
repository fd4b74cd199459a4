//! The request handlers, one file per area of the API:
//! - [`add`]: `POST /add`, one task or a batch.
//! - [`pop`]: `POST /pop`, the long-poll.
//! - [`ack`]: what a consumer does with a task it holds: `/finish`, `/release`, `/touch`.
//! - [`manage`]: what a producer or operator does: `/cancel`, `/requeue`, `/delete`.
//! - [`inspect`]: reads: `/get`, `/tasks`, `/stats`, `/topics`.
//! - [`ops`]: `/healthz`, `/readyz`, `/metrics`, `/openapi.json`.
//!
//! Each handler checks the caller may use the topic, calls the queue once, counts the
//! operation in the metrics and wraps the result in the envelope. Errors are returned as
//! [`AppError`] and mapped to a status in one place.

pub mod ack;
pub mod add;
pub mod inspect;
pub mod manage;
pub mod ops;
pub mod pop;

use crate::app::AppState;
use crate::error::AppError;
use crate::metrics::Op;

/// The result type of handlers.
pub type ApiResult<T> = Result<axum::Json<crate::error::Envelope<T>>, AppError>;

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
