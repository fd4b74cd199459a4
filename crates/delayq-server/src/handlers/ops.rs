//! Operations endpoints: `/healthz` (liveness, always 200 while the process runs), `/readyz`
//! (readiness: the storage answers and no shutdown has begun), `/metrics` (Prometheus text)
//! and `/openapi.json` (the API description).

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use super::Reply;
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{AppError, ok};
use crate::{metrics, openapi};
use delayq_api::Health;
use delayq_api::endpoint;

super::handles!(
    endpoint::Healthz => healthz,
    endpoint::Readyz => readyz,
    endpoint::Metrics => metrics,
    endpoint::OpenApiDocument => openapi,
);

/// The handler of [`endpoint::Healthz`] (its summary and answers are in the table).
pub async fn healthz() -> Reply<endpoint::Healthz> {
    Ok(ok(Health {
        status: "alive".into(),
    }))
}

/// The handler of [`endpoint::Readyz`] (its summary and answers are in the table).
pub async fn readyz(State(state): State<AppState>) -> Reply<endpoint::Readyz> {
    if state.is_draining() {
        return Err(AppError::ShuttingDown);
    }
    state.queue().check_ready().await?;
    Ok(ok(Health {
        status: "ready".into(),
    }))
}

/// The handler of [`endpoint::Metrics`] (its summary and answers are in the table).
pub async fn metrics(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<impl IntoResponse, AppError> {
    // The metrics name every topic.
    caller.check_unrestricted("/metrics")?;
    let text = metrics::render(&state).await;
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    ))
}

/// The handler of [`endpoint::OpenApiDocument`] (its summary and answers are in the table).
pub async fn openapi(_caller: Caller) -> Json<utoipa::openapi::OpenApi> {
    Json(openapi::document())
}
