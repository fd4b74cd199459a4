//! The one error type of the HTTP layer, and the response envelope.
//!
//! Every response, success or failure, is the seqdelay envelope
//! `{"code": 0 | <http status>, "message": "...", "data": ...}` with a matching HTTP status
//! (docs/design.md §3). Handlers return `Result<_, AppError>`; [`AppError`] maps each failure
//! once, here, to its status and message, so no handler decides a status code on its own.
//! Library errors ([`delayq::Error`]) are mapped by their [`delayq::ErrorKind`]. An error that
//! concerns one field carries its name in `data.field` as well as in the message.
//!
//! **Did it happen?** A 4xx, and a 5xx without `data.outcome`, changed nothing: the same
//! request may be sent again. A 5xx with `data.outcome: "unknown"` may have taken effect (the
//! request reached storage and the answer was lost, or the change was applied but not made
//! durable): sending it again may find it done. An add is safe to send again with
//! `on_duplicate: keep` (a task already there answers `existed`); a finish that was done
//! answers 409 with the task FINISHED.
//!
//! **What a client sees of a failure.** The body of a storage failure names the operation,
//! never the cause's details: a disk error's cause names server files, and those stay in the
//! server's log. Failures are logged by [`log_failures`], a layer around the router, and not
//! while the response is built.

use axum::Json;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use delayq::{ErrorKind, Outcome};
pub use delayq_api::{Envelope, ErrorData};

/// A success envelope around `data`.
pub fn ok<T>(data: T) -> Json<Envelope<T>> {
    Json(Envelope::ok(data))
}

/// Why a request failed. Converts into the envelope with the matching status.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AppError {
    /// The queue refused or failed the operation.
    #[error(transparent)]
    Queue(#[from] delayq::Error),
    /// The body is not JSON, or not a JSON object.
    #[error("malformed request body: {0}")]
    Malformed(String),
    /// A required field is missing.
    #[error("missing field {field}")]
    Missing {
        /// The field, e.g. `topic` or `tasks[2].id`.
        field: String,
    },
    /// A field has the wrong type or an invalid value.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The field.
        field: String,
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// The request (or a part of it) exceeds a size limit.
    #[error("{what} is too large: {reason}")]
    TooLarge {
        /// The part of the request.
        what: String,
        /// The size and the limit's name and value.
        reason: String,
    },
    /// No or an unknown bearer token.
    #[error("{0}")]
    Unauthorized(&'static str),
    /// The token may not use this topic (or this endpoint).
    #[error("{0}")]
    Forbidden(String),
    /// No route for this path.
    #[error("no route for {method} {path}")]
    RouteNotFound {
        /// The method asked for.
        method: String,
        /// The path asked for.
        path: String,
    },
    /// The route exists, but not for this method.
    #[error("method {method} is not allowed for {path}")]
    MethodNotAllowed {
        /// The method asked for.
        method: String,
        /// The path asked for.
        path: String,
    },
    /// Too many long-polls are open; retry later.
    #[error("too many long-polls are open (the limit is {limit}, max_long_polls); retry later")]
    TooManyLongPolls {
        /// The configured limit.
        limit: usize,
    },
    /// The server is shutting down.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// A bug: a handler panicked or the router is miswired.
    #[error("internal error: {0}")]
    Internal(String),
    /// A client popped a topic that delayq delivers itself (it has a push target).
    #[error(
        "topic {topic} has a push target: delayq delivers its tasks itself, so clients cannot pop it (remove the target with DELETE /push?topic={topic} first; docs/push.md)"
    )]
    PushedTopic {
        /// The topic.
        topic: String,
    },
}

impl AppError {
    /// An invalid-field error.
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        AppError::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            AppError::Queue(e) => match e.kind() {
                ErrorKind::Invalid => StatusCode::BAD_REQUEST,
                ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
                ErrorKind::NotFound => StatusCode::NOT_FOUND,
                ErrorKind::Duplicate | ErrorKind::Conflict => StatusCode::CONFLICT,
                ErrorKind::Unavailable | ErrorKind::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
                ErrorKind::Storage => StatusCode::INTERNAL_SERVER_ERROR,
            },
            AppError::Malformed(_) | AppError::Missing { .. } | AppError::Invalid { .. } => {
                StatusCode::BAD_REQUEST
            }
            AppError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            AppError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            AppError::Forbidden(_) => StatusCode::FORBIDDEN,
            AppError::RouteNotFound { .. } => StatusCode::NOT_FOUND,
            AppError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            AppError::TooManyLongPolls { .. } | AppError::ShuttingDown => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            AppError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            AppError::PushedTopic { .. } => StatusCode::CONFLICT,
        }
    }

    /// The field the error is about, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            AppError::Queue(delayq::Error::Invalid(f)) => Some(&f.field),
            AppError::Queue(delayq::Error::TooLarge { field, .. }) => Some(field),
            AppError::Missing { field } | AppError::Invalid { field, .. } => Some(field),
            AppError::Queue(
                delayq::Error::NotFound { .. }
                | delayq::Error::ScheduleNotFound { .. }
                | delayq::Error::Duplicate { .. }
                | delayq::Error::Conflict { .. }
                | delayq::Error::Unavailable { .. }
                | delayq::Error::ShuttingDown
                | delayq::Error::Storage { .. },
            )
            | AppError::Malformed(_)
            | AppError::TooLarge { .. }
            | AppError::Unauthorized(_)
            | AppError::Forbidden(_)
            | AppError::RouteNotFound { .. }
            | AppError::MethodNotAllowed { .. }
            | AppError::TooManyLongPolls { .. }
            | AppError::ShuttingDown
            | AppError::Internal(_) => None,
            AppError::PushedTopic { .. } => Some("topic"),
        }
    }

    /// Whether the operation may have taken effect despite the error. Only a storage failure
    /// after the request reached storage, or a handler that failed unexpectedly part way, is
    /// [`Outcome::Unknown`]; everything the HTTP layer refuses was refused before the queue
    /// saw it.
    pub fn operation_outcome(&self) -> Outcome {
        match self {
            AppError::Queue(e) => e.outcome(),
            AppError::Internal(_) => Outcome::Unknown,
            AppError::Malformed(_)
            | AppError::Missing { .. }
            | AppError::Invalid { .. }
            | AppError::TooLarge { .. }
            | AppError::Unauthorized(_)
            | AppError::Forbidden(_)
            | AppError::RouteNotFound { .. }
            | AppError::MethodNotAllowed { .. }
            | AppError::TooManyLongPolls { .. }
            | AppError::PushedTopic { .. }
            | AppError::ShuttingDown => Outcome::NotApplied,
        }
    }

    /// The message a client is shown: the error's own text, except that a storage failure's
    /// cause, which may name server files, is left to the log.
    pub fn public_message(&self) -> String {
        match self {
            AppError::Queue(e) => e.public_message(),
            AppError::Malformed(_)
            | AppError::Missing { .. }
            | AppError::Invalid { .. }
            | AppError::TooLarge { .. }
            | AppError::Unauthorized(_)
            | AppError::Forbidden(_)
            | AppError::RouteNotFound { .. }
            | AppError::MethodNotAllowed { .. }
            | AppError::TooManyLongPolls { .. }
            | AppError::ShuttingDown
            | AppError::PushedTopic { .. }
            | AppError::Internal(_) => self.to_string(),
        }
    }

    /// Logs the failure with its whole cause, if it is one the operator must see: every 500,
    /// and a 503 whose operation may have taken effect. Refusals of bad requests and plain
    /// outages (already visible as 503s and in `/readyz`) are not logged one by one.
    pub fn log(&self, method: &str, path: &str) {
        let status = self.status();
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(%method, %path, error = %self, "request failed");
        } else if status.is_server_error() && self.operation_outcome() == Outcome::Unknown {
            tracing::warn!(%method, %path, error = %self, "request failed; it may have taken effect");
        }
    }

    /// A short label of the kind of failure, for the operations metric.
    pub fn outcome(&self) -> &'static str {
        match self {
            AppError::Queue(e) => e.kind().name(),
            AppError::Malformed(_) | AppError::Missing { .. } | AppError::Invalid { .. } => {
                "invalid"
            }
            AppError::TooLarge { .. } => "too_large",
            AppError::Unauthorized(_) => "unauthorized",
            AppError::Forbidden(_) => "forbidden",
            AppError::RouteNotFound { .. } | AppError::MethodNotAllowed { .. } => "no_route",
            AppError::TooManyLongPolls { .. } => "overloaded",
            AppError::ShuttingDown => "shutting_down",
            AppError::Internal(_) => "internal_error",
            AppError::PushedTopic { .. } => "conflict",
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let status = self.status();
        let field = self.field().map(str::to_owned);
        let outcome = match self.operation_outcome() {
            Outcome::Unknown => Some(Outcome::Unknown.name().to_owned()),
            Outcome::NotApplied => None,
        };
        let data = (field.is_some() || outcome.is_some()).then_some(ErrorData { field, outcome });
        let body = Envelope {
            code: status.as_u16(),
            message: self.public_message(),
            data,
        };
        let mut response = (status, Json(body)).into_response();
        // For `log_failures`, which knows the request.
        response.extensions_mut().insert(Failed(self));
        let headers = response.headers_mut();
        match status {
            StatusCode::UNAUTHORIZED => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        response
    }
}

/// The failure a response was built from, kept in its extensions for [`log_failures`].
#[derive(Clone)]
struct Failed(AppError);

/// A layer (`axum::middleware::from_fn`) that logs each failed request once, with the method,
/// the path and the whole cause, per [`AppError::log`].
pub async fn log_failures(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let mut response = next.run(request).await;
    if let Some(Failed(e)) = response.extensions_mut().remove::<Failed>() {
        e.log(method.as_str(), &path);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use delayq::Refusal;

    #[test]
    fn library_errors_map_to_statuses() {
        let table: [(delayq::Error, StatusCode); 7] = [
            (
                delayq::Error::invalid("delay_ms", "too long"),
                StatusCode::BAD_REQUEST,
            ),
            (
                delayq::Error::TooLarge {
                    field: "tasks".into(),
                    reason: "x".into(),
                },
                StatusCode::PAYLOAD_TOO_LARGE,
            ),
            (delayq::Error::not_found("t", "i"), StatusCode::NOT_FOUND),
            (
                delayq::Error::conflict("t", "i", Refusal::StaleReceipt),
                StatusCode::CONFLICT,
            ),
            (
                delayq::Error::Duplicate {
                    topic: "t".into(),
                    id: "i".into(),
                },
                StatusCode::CONFLICT,
            ),
            (delayq::Error::ShuttingDown, StatusCode::SERVICE_UNAVAILABLE),
            (
                delayq::Error::storage("appending", "disk full"),
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
        ];
        for (err, status) in table {
            assert_eq!(AppError::from(err).status(), status);
        }
    }

    #[tokio::test]
    async fn a_storage_failure_shows_its_operation_and_outcome_but_not_its_cause() {
        let cause = "/var/lib/delayq/shard-1/00000000000000000001.seg: Input/output error";
        let e = AppError::from(delayq::Error::storage("writing the log", cause).outcome_unknown());
        let resp = e.into_response();
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["code"], 500);
        assert_eq!(json["data"]["outcome"], "unknown");
        let message = json["message"].as_str().unwrap();
        assert!(message.contains("writing the log"), "{message}");
        assert!(!message.contains("/var/lib"), "{message}");
    }

    #[test]
    fn outcomes_of_http_refusals_are_known() {
        let table = [
            (AppError::invalid("id", "empty"), Outcome::NotApplied),
            (AppError::ShuttingDown, Outcome::NotApplied),
            (AppError::Internal("panic".into()), Outcome::Unknown),
            (
                AppError::from(delayq::Error::unavailable("adding", "refused")),
                Outcome::NotApplied,
            ),
            (
                AppError::from(delayq::Error::unavailable("adding", "timeout").outcome_unknown()),
                Outcome::Unknown,
            ),
        ];
        for (e, outcome) in table {
            assert_eq!(e.operation_outcome(), outcome, "{e}");
        }
    }

    #[test]
    fn field_is_named() {
        let e = AppError::from(delayq::Error::invalid("tasks[2].id", "must not be empty"));
        assert_eq!(e.field(), Some("tasks[2].id"));
        assert_eq!(e.to_string(), "invalid tasks[2].id: must not be empty");
    }
}
