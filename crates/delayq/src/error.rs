//! The one error type of the queue library.
//!
//! Like redis-rs's `RedisError`, an [`Error`] answers the questions its caller has to decide
//! on: [`Error::kind`] says what went wrong in a form the HTTP layer maps to a status code
//! once; [`Error::is_retryable`] says whether trying again later can succeed (storage down,
//! shutting down) or not (bad input, unknown task, wrong state); and [`Error::outcome`] says
//! whether the operation may have happened anyway.
//!
//! **What a failure guarantees.** Every error except a storage failure ([`Error::Unavailable`],
//! [`Error::Storage`]) is a definite answer: nothing was changed. A storage failure carries an
//! [`Outcome`]: [`Outcome::NotApplied`] when the failure came before anything could change
//! (Redis refused the connection, the embedded log refused the write up front), and
//! [`Outcome::Unknown`] when it came after the request reached storage (a Redis reply that
//! never came, a dropped connection, a replica wait that timed out, an embedded log write that
//! failed after the change was applied in memory). After an unknown outcome, sending the same
//! request again may find it done: an add comes back as a duplicate (add again with
//! `on_duplicate: keep` to be safe), a finish as a conflict in state FINISHED.
//!
//! The cause of a storage failure is kept as the error's [`source`](std::error::Error::source)
//! for logs; its text may name server paths, so the HTTP layer shows only the operation.

use std::sync::Arc;

use delayq_core::{InvalidField, Refusal, State};

/// The cause of a storage failure: cheap to clone, so an error can be handed to every task of
/// a batch.
pub type Cause = Arc<dyn std::error::Error + Send + Sync>;

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

impl ErrorKind {
    /// The kind's name in metrics and spans (`not_found`, `conflict`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Invalid => "invalid",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Duplicate => "duplicate",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::ShuttingDown => "shutting_down",
            ErrorKind::Storage => "storage_error",
        }
    }
}

/// What is known of whether a failed operation changed anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Nothing was changed: sending the same request again cannot apply it twice.
    NotApplied,
    /// The operation may have taken effect, in full or for some tasks of a batch: the request
    /// reached storage and its answer was lost, or the change was made but not made durable.
    Unknown,
}

impl Outcome {
    /// The outcome's name on the wire (`not_applied`, `unknown`).
    pub fn name(self) -> &'static str {
        match self {
            Outcome::NotApplied => "not_applied",
            Outcome::Unknown => "unknown",
        }
    }

    /// The words a message ends with, so that a message alone tells a reader what is known.
    fn note(self) -> &'static str {
        match self {
            Outcome::NotApplied => "",
            Outcome::Unknown => "; it may or may not have taken effect",
        }
    }
}

/// An error of a queue operation. Every variant says what was being done and with which value.
///
/// `Display` and `source` are written out below rather than derived: the cause of a storage
/// failure sits behind an `Arc` (so the error is `Clone`), and a derived `source` would hand
/// out the `Arc` itself, which cannot be downcast to the cause.
#[derive(Debug, Clone)]
pub enum Error {
    /// A field of the request is invalid. Nothing was changed.
    Invalid(InvalidField),
    /// A request exceeds a size limit. Nothing was changed.
    TooLarge {
        /// The field or part of the request.
        field: String,
        /// The size and the limit.
        reason: String,
    },
    /// The task does not exist. Nothing was changed.
    NotFound {
        /// The topic asked for.
        topic: String,
        /// The id asked for.
        id: String,
    },
    /// No schedule of that name exists in the topic. Nothing was changed.
    ScheduleNotFound {
        /// The topic asked for.
        topic: String,
        /// The schedule's name.
        name: String,
    },
    /// The task exists already and `on_duplicate` is `reject`. Nothing was changed.
    Duplicate {
        /// The topic.
        topic: String,
        /// The id.
        id: String,
    },
    /// The task is not in a state the operation applies to, or the receipt is stale. Nothing
    /// was changed.
    Conflict {
        /// The topic.
        topic: String,
        /// The id.
        id: String,
        /// Why the transition was refused.
        refusal: Refusal,
    },
    /// Storage could not be reached or did not answer; trying again later may succeed.
    /// `outcome` says whether the operation may have happened anyway.
    Unavailable {
        /// What was being done, naming the task or topic and where storage is.
        op: String,
        /// Whether the operation may have taken effect.
        outcome: Outcome,
        /// The underlying failure.
        source: Cause,
    },
    /// The queue is shutting down and takes no new work. Nothing was changed.
    ShuttingDown,
    /// Storage failed in a way retrying will not fix (a disk error, a reply that cannot be
    /// read, a configuration that does not match the stored data). `outcome` says whether the
    /// operation may have happened anyway.
    Storage {
        /// What was being done. Names no server path: the HTTP layer shows it to clients.
        op: String,
        /// Whether the operation may have taken effect.
        outcome: Outcome,
        /// The underlying failure; its text may name files.
        source: Cause,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Invalid(field) => std::fmt::Display::fmt(field, f),
            Error::TooLarge { field, reason } => write!(f, "{field} is too large: {reason}"),
            Error::NotFound { topic, id } => write!(f, "task {id:?} of topic {topic:?} not found"),
            Error::ScheduleNotFound { topic, name } => {
                write!(f, "schedule {name:?} of topic {topic:?} not found")
            }
            Error::Duplicate { topic, id } => {
                write!(f, "task {id:?} of topic {topic:?} already exists")
            }
            Error::Conflict { topic, id, refusal } => {
                write!(f, "task {id:?} of topic {topic:?}: {refusal}")
            }
            Error::Unavailable {
                op,
                outcome,
                source,
            } => write!(
                f,
                "storage unavailable while {op}: {source}{}",
                outcome.note()
            ),
            Error::ShuttingDown => f.write_str("the queue is shutting down"),
            Error::Storage {
                op,
                outcome,
                source,
            } => write!(f, "storage failed while {op}: {source}{}", outcome.note()),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // Transparent, as the field's own error.
            Error::Invalid(field) => std::error::Error::source(field),
            Error::Unavailable { source, .. } | Error::Storage { source, .. } => Some(&**source),
            Error::TooLarge { .. }
            | Error::NotFound { .. }
            | Error::ScheduleNotFound { .. }
            | Error::Duplicate { .. }
            | Error::Conflict { .. }
            | Error::ShuttingDown => None,
        }
    }
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
            Error::NotFound { .. } | Error::ScheduleNotFound { .. } => ErrorKind::NotFound,
            Error::Duplicate { .. } => ErrorKind::Duplicate,
            Error::Conflict { .. } => ErrorKind::Conflict,
            Error::Unavailable { .. } => ErrorKind::Unavailable,
            Error::ShuttingDown => ErrorKind::ShuttingDown,
            Error::Storage { .. } => ErrorKind::Storage,
        }
    }

    /// Whether the same request may succeed later without change. A retryable error may still
    /// have an [`Outcome::Unknown`]: see [`Error::outcome`] before sending it again.
    pub fn is_retryable(&self) -> bool {
        match self.kind() {
            ErrorKind::Unavailable | ErrorKind::ShuttingDown => true,
            ErrorKind::Invalid
            | ErrorKind::TooLarge
            | ErrorKind::NotFound
            | ErrorKind::Duplicate
            | ErrorKind::Conflict
            | ErrorKind::Storage => false,
        }
    }

    /// Whether the operation may have taken effect despite the error. Only a storage failure
    /// can be [`Outcome::Unknown`]; every other error is a definite refusal.
    pub fn outcome(&self) -> Outcome {
        match self {
            Error::Unavailable { outcome, .. } | Error::Storage { outcome, .. } => *outcome,
            Error::Invalid(_)
            | Error::TooLarge { .. }
            | Error::NotFound { .. }
            | Error::ScheduleNotFound { .. }
            | Error::Duplicate { .. }
            | Error::Conflict { .. }
            | Error::ShuttingDown => Outcome::NotApplied,
        }
    }

    /// Whether the operation may have taken effect despite the error.
    pub fn is_outcome_unknown(&self) -> bool {
        self.outcome() == Outcome::Unknown
    }

    /// The same storage failure, now known to have come after the request reached storage, so
    /// that the operation may have taken effect. Any other error is returned as it is: it is
    /// storage's own definite answer.
    pub fn outcome_unknown(self) -> Self {
        match self {
            Error::Unavailable { op, source, .. } => Error::Unavailable {
                op,
                outcome: Outcome::Unknown,
                source,
            },
            Error::Storage { op, source, .. } => Error::Storage {
                op,
                outcome: Outcome::Unknown,
                source,
            },
            definite @ (Error::Invalid(_)
            | Error::TooLarge { .. }
            | Error::NotFound { .. }
            | Error::ScheduleNotFound { .. }
            | Error::Duplicate { .. }
            | Error::Conflict { .. }
            | Error::ShuttingDown) => definite,
        }
    }

    /// Storage could not be reached while doing `op`, before anything was changed.
    pub fn unavailable(
        op: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Error::Unavailable {
            op: op.into(),
            outcome: Outcome::NotApplied,
            source: Arc::from(source.into()),
        }
    }

    /// Storage failed while doing `op`, before anything was changed. `op` must not name a
    /// server path (clients see it); put the path in `source`.
    pub fn storage(
        op: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Error::Storage {
            op: op.into(),
            outcome: Outcome::NotApplied,
            source: Arc::from(source.into()),
        }
    }

    /// The message for someone outside the server: the error's text, except that the cause of
    /// an [`Error::Storage`], which may name server files, is left to the server's log.
    pub fn public_message(&self) -> String {
        match self {
            Error::Storage { op, outcome, .. } => Error::Storage {
                op: op.clone(),
                outcome: *outcome,
                source: Arc::new(CauseInLog),
            }
            .to_string(),
            Error::Invalid(_)
            | Error::TooLarge { .. }
            | Error::NotFound { .. }
            | Error::ScheduleNotFound { .. }
            | Error::Duplicate { .. }
            | Error::Conflict { .. }
            | Error::Unavailable { .. }
            | Error::ShuttingDown => self.to_string(),
        }
    }

    /// The state the task was in, for a wrong-state conflict.
    pub fn conflicting_state(&self) -> Option<State> {
        match self {
            Error::Conflict {
                refusal: Refusal::WrongState { state, .. },
                ..
            } => Some(*state),
            Error::Conflict {
                refusal: Refusal::StaleReceipt | Refusal::PastExpiry { .. },
                ..
            }
            | Error::Invalid(_)
            | Error::TooLarge { .. }
            | Error::NotFound { .. }
            | Error::ScheduleNotFound { .. }
            | Error::Duplicate { .. }
            | Error::Unavailable { .. }
            | Error::ShuttingDown
            | Error::Storage { .. } => None,
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

/// What a client is shown in place of a storage failure's cause.
#[derive(Debug, thiserror::Error)]
#[error("the cause is in the server's log")]
struct CauseInLog;

/// The result of a queue operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;
    use delayq_core::Op;

    #[test]
    fn kinds_retryability_and_outcomes() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let table: [(Error, ErrorKind, bool, Outcome); 10] = [
            (
                Error::invalid("id", "empty"),
                ErrorKind::Invalid,
                false,
                Outcome::NotApplied,
            ),
            (
                Error::TooLarge {
                    field: "tasks".into(),
                    reason: "10001 tasks".into(),
                },
                ErrorKind::TooLarge,
                false,
                Outcome::NotApplied,
            ),
            (
                Error::not_found("t", "i"),
                ErrorKind::NotFound,
                false,
                Outcome::NotApplied,
            ),
            (
                Error::Duplicate {
                    topic: "t".into(),
                    id: "i".into(),
                },
                ErrorKind::Duplicate,
                false,
                Outcome::NotApplied,
            ),
            (
                Error::conflict("t", "i", Refusal::StaleReceipt),
                ErrorKind::Conflict,
                false,
                Outcome::NotApplied,
            ),
            (
                Error::unavailable("adding", refused),
                ErrorKind::Unavailable,
                true,
                Outcome::NotApplied,
            ),
            (
                Error::unavailable("adding", "no reply within 2000 ms").outcome_unknown(),
                ErrorKind::Unavailable,
                true,
                Outcome::Unknown,
            ),
            (
                Error::ShuttingDown,
                ErrorKind::ShuttingDown,
                true,
                Outcome::NotApplied,
            ),
            (
                Error::storage("writing the log", "ENOSPC"),
                ErrorKind::Storage,
                false,
                Outcome::NotApplied,
            ),
            (
                Error::storage("writing the log", "ENOSPC").outcome_unknown(),
                ErrorKind::Storage,
                false,
                Outcome::Unknown,
            ),
        ];
        for (err, kind, retry, outcome) in table {
            assert_eq!(err.kind(), kind, "{err}");
            assert_eq!(err.is_retryable(), retry, "{err}");
            assert_eq!(err.outcome(), outcome, "{err}");
            assert_eq!(err.is_outcome_unknown(), outcome == Outcome::Unknown);
            // The message says so when the outcome is unknown, and only then.
            assert_eq!(
                err.to_string().contains("may or may not have taken effect"),
                outcome == Outcome::Unknown,
                "{err}"
            );
        }
    }

    #[test]
    fn the_public_message_leaves_out_a_storage_cause() {
        let err = Error::storage("writing the log", "/srv/delayq/shard-3/0001.seg: EIO")
            .outcome_unknown();
        let public = err.public_message();
        assert!(!public.contains("/srv"), "{public}");
        assert_eq!(
            public,
            "storage failed while writing the log: the cause is in the server's log; it may \
             or may not have taken effect"
        );
        assert!(err.to_string().contains("/srv/delayq/shard-3"), "{err}");
        // An outage's cause (Redis's address, the replica count) helps the client.
        let down = Error::unavailable("adding tasks (Redis at 127.0.0.1:7000)", "refused");
        assert_eq!(down.public_message(), down.to_string());
    }

    #[test]
    fn a_definite_answer_stays_definite() {
        let dup = Error::Duplicate {
            topic: "t".into(),
            id: "i".into(),
        };
        assert_eq!(dup.outcome_unknown().outcome(), Outcome::NotApplied);
    }

    #[test]
    fn the_cause_is_kept_as_the_source() {
        let io = std::io::Error::new(std::io::ErrorKind::StorageFull, "no space left");
        let err = Error::storage("writing the log", io);
        let source = err.source().expect("the cause is the source");
        let io = source
            .downcast_ref::<std::io::Error>()
            .expect("the cause itself, not a wrapper");
        assert_eq!(io.kind(), std::io::ErrorKind::StorageFull);
        assert_eq!(
            err.to_string(),
            "storage failed while writing the log: no space left"
        );
        // Clones share the cause, so a batch can hand one error to every task.
        let copy = err.clone();
        assert_eq!(copy.source().unwrap().to_string(), "no space left");
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
