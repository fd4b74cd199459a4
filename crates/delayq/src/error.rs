//! The one error type of the queue library.
//!
//! Like redis-rs's `RedisError`, an [`Error`] answers the question its caller has to decide on:
//! [`Error::kind`] says what went wrong in a form the HTTP layer maps to a status code once,
//! and [`Error::is_retryable`] says whether trying again later can succeed (storage down,
//! shutting down) or not (bad input, unknown task, wrong state).

use delayq_core::{InvalidField, Refusal, State};

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The input is invalid (HTTP 400).
    Invalid,
    /// The input is larger than a limit allows (HTTP 413).
    TooLarge,
    /// No task with that (topic, id) exists (HTTP 404).
    NotFound,
    /// A task with that (topic, id) exists already (HTTP 409).
    Duplicate,
    /// The task is in the wrong state or the receipt is stale (HTTP 409).
    Conflict,
    /// Storage cannot be reached right now; retry later (HTTP 503).
    Unavailable,
    /// The queue is shutting down (HTTP 503).
    ShuttingDown,
    /// Storage failed in a way retrying will not fix, e.g. a disk error (HTTP 500).
    Storage,
}

/// An error of a queue operation. Every variant says what was being done and with which value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A field of the request is invalid.
    #[error(transparent)]
    Invalid(InvalidField),
    /// A request exceeds a size limit.
    #[error("{field} is too large: {reason}")]
    TooLarge {
        /// The field or part of the request.
        field: String,
        /// The size and the limit.
        reason: String,
    },
    /// The task does not exist.
    #[error("task {id:?} of topic {topic:?} not found")]
    NotFound {
        /// The topic asked for.
        topic: String,
        /// The id asked for.
        id: String,
    },
    /// The task exists already and `on_duplicate` is `reject`.
    #[error("task {id:?} of topic {topic:?} already exists")]
    Duplicate {
        /// The topic.
        topic: String,
        /// The id.
        id: String,
    },
    /// The task is not in a state the operation applies to, or the receipt is stale.
    #[error("task {id:?} of topic {topic:?}: {refusal}")]
    Conflict {
        /// The topic.
        topic: String,
        /// The id.
        id: String,
        /// Why the transition was refused.
        refusal: Refusal,
    },
    /// Storage could not be reached; the operation did not happen and may be retried.
    #[error("storage unavailable while {op}: {message}")]
    Unavailable {
        /// What was being done.
        op: String,
        /// The underlying failure.
        message: String,
    },
    /// The queue is shutting down and takes no new work.
    #[error("the queue is shutting down")]
    ShuttingDown,
    /// Storage failed permanently (a disk error); the operation did not happen.
    #[error("storage failed while {op}: {message}")]
    Storage {
        /// What was being done.
        op: String,
        /// The underlying failure.
        message: String,
    },
}

impl From<InvalidField> for Error {
    fn from(field: InvalidField) -> Self {
        if field.too_large {
            Error::TooLarge {
                field: field.field,
                reason: field.reason,
            }
        } else {
            Error::Invalid(field)
        }
    }
}

impl Error {
    /// The kind of failure, which decides the HTTP status.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Invalid(_) => ErrorKind::Invalid,
            Error::TooLarge { .. } => ErrorKind::TooLarge,
            Error::NotFound { .. } => ErrorKind::NotFound,
            Error::Duplicate { .. } => ErrorKind::Duplicate,
            Error::Conflict { .. } => ErrorKind::Conflict,
            Error::Unavailable { .. } => ErrorKind::Unavailable,
            Error::ShuttingDown => ErrorKind::ShuttingDown,
            Error::Storage { .. } => ErrorKind::Storage,
        }
    }

    /// Whether the same request may succeed later without change.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind(),
            ErrorKind::Unavailable | ErrorKind::ShuttingDown
        )
    }

    /// The state the task was in, for a wrong-state conflict.
    pub fn conflicting_state(&self) -> Option<State> {
        match self {
            Error::Conflict {
                refusal: Refusal::WrongState { state, .. },
                ..
            } => Some(*state),
            _ => None,
        }
    }

    /// A not-found error for (topic, id).
    pub fn not_found(topic: &str, id: &str) -> Self {
        Error::NotFound {
            topic: topic.to_owned(),
            id: id.to_owned(),
        }
    }

    /// A conflict for (topic, id).
    pub fn conflict(topic: &str, id: &str, refusal: Refusal) -> Self {
        Error::Conflict {
            topic: topic.to_owned(),
            id: id.to_owned(),
            refusal,
        }
    }

    /// An invalid-field error.
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Invalid(InvalidField::new(field, reason))
    }
}

/// The result of a queue operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use delayq_core::Op;

    #[test]
    fn kinds_and_retryability() {
        let table: [(Error, ErrorKind, bool); 6] = [
            (Error::invalid("id", "empty"), ErrorKind::Invalid, false),
            (Error::not_found("t", "i"), ErrorKind::NotFound, false),
            (
                Error::conflict("t", "i", Refusal::StaleReceipt),
                ErrorKind::Conflict,
                false,
            ),
            (
                Error::Unavailable {
                    op: "adding".into(),
                    message: "connection refused".into(),
                },
                ErrorKind::Unavailable,
                true,
            ),
            (Error::ShuttingDown, ErrorKind::ShuttingDown, true),
            (
                Error::Storage {
                    op: "appending".into(),
                    message: "ENOSPC".into(),
                },
                ErrorKind::Storage,
                false,
            ),
        ];
        for (err, kind, retry) in table {
            assert_eq!(err.kind(), kind, "{err}");
            assert_eq!(err.is_retryable(), retry, "{err}");
        }
    }

    #[test]
    fn conflict_message_names_task_and_state() {
        let err = Error::conflict(
            "orders",
            "o-1",
            Refusal::WrongState {
                state: State::Finished,
                op: Op::Cancel,
            },
        );
        assert_eq!(
            err.to_string(),
            "task \"o-1\" of topic \"orders\": cannot cancel a task that is finished"
        );
        assert_eq!(err.conflicting_state(), Some(State::Finished));
    }
}
