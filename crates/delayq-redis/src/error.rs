//! The backend's own failures, and how they map onto [`delayq::Error`] once.
//!
//! A caller has two questions (as with redis-rs's `RedisError`): can trying again later help,
//! and may the operation have happened anyway?
//!
//! - Redis unreachable, timing out, loading, failing over, busy or out of memory is
//!   [`delayq::Error::Unavailable`] (retryable, HTTP 503); a script that fails, a reply we
//!   cannot read or a partition count that differs from the one recorded in Redis is
//!   [`delayq::Error::Storage`] (HTTP 500), whose message names both counts.
//! - [`Outcome::NotApplied`] when Redis never ran the command: the connection was refused,
//!   no master is known, or Redis answered with a refusal it gives before running anything
//!   (`LOADING`, `BUSY`, `OOM`, `READONLY`, `MASTERDOWN`, `TRYAGAIN`, `CLUSTERDOWN`, ...).
//!   [`Outcome::Unknown`] once the command may have reached Redis: no reply in time, the
//!   connection dropped while waiting, a reply that cannot be read, a script that failed part
//!   way (Redis does not roll a script back), or a write that fewer replicas confirmed than
//!   asked.

use delayq::Outcome;
use redis::{ErrorKind as RedisKind, RedisError, ServerErrorKind};

/// A failure of the Redis backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// Redis answered with an error or could not be reached.
    #[error("{op}: {source}")]
    Redis {
        /// What was being done.
        op: String,
        /// What redis-rs reported.
        source: RedisError,
    },
    /// Redis did not answer in time. A write may or may not have been applied.
    #[error("{op}: no answer from Redis within {ms} ms")]
    Timeout {
        /// What was being done.
        op: String,
        /// The time allowed.
        ms: u128,
    },
    /// A topic's partition count in Redis differs from this instance's setting.
    #[error(
        "topic {topic:?} has {recorded} partitions recorded in Redis, but this instance is \
         configured with {configured}; a topic's partition count never changes, so set it \
         back to {recorded} (per topic) or use a new topic"
    )]
    PartitionMismatch {
        /// The topic.
        topic: String,
        /// The count recorded in Redis on the topic's first use.
        recorded: u32,
        /// The count this instance is configured with.
        configured: u32,
    },
    /// Fewer replicas than asked confirmed a write in time (`WAIT`). The write is applied on
    /// the master but may be lost if it fails now.
    #[error(
        "{op}: only {got} of {wanted} replicas confirmed the write within {ms} ms; it is \
         applied on the master but not acknowledged as replicated"
    )]
    NotReplicated {
        /// What was being done.
        op: String,
        /// How many replicas confirmed.
        got: i64,
        /// How many were asked for.
        wanted: u32,
        /// The time allowed.
        ms: u128,
    },
    /// A reply that does not have the expected shape (a bug, or foreign data in our keys).
    #[error("{op}: unexpected reply from Redis: {detail}")]
    Protocol {
        /// What was being done.
        op: String,
        /// What was wrong.
        detail: String,
    },
}

impl BackendError {
    /// A redis-rs error while doing `op`.
    pub fn redis(op: impl Into<String>, source: RedisError) -> Self {
        BackendError::Redis {
            op: op.into(),
            source,
        }
    }

    /// A reply of the wrong shape while doing `op`.
    pub fn protocol(op: impl Into<String>, detail: impl Into<String>) -> Self {
        BackendError::Protocol {
            op: op.into(),
            detail: detail.into(),
        }
    }

    /// Whether the same request may succeed later (Redis down, failing over, busy).
    pub fn is_retryable(&self) -> bool {
        match self {
            BackendError::Redis { source, .. } => is_transient(source),
            BackendError::Timeout { .. } | BackendError::NotReplicated { .. } => true,
            BackendError::PartitionMismatch { .. } | BackendError::Protocol { .. } => false,
        }
    }

    /// Whether the operation may have taken effect despite the error (see the module doc).
    pub fn outcome(&self) -> Outcome {
        match self {
            BackendError::Redis { source, .. } => outcome_of(source),
            BackendError::Timeout { .. }
            | BackendError::NotReplicated { .. }
            | BackendError::Protocol { .. } => Outcome::Unknown,
            BackendError::PartitionMismatch { .. } => Outcome::NotApplied,
        }
    }
}

/// Whether a redis-rs error is a reply cut off by the end of its connection. redis-rs's
/// async reader (the one a Cluster connection uses) reports a connection closed in the
/// middle of a reply as a parse error ("Unexpected end of input"), where its blocking reader
/// gives an IO error: it is a connection failure all the same, not a reply of a wrong shape.
fn is_cut_reply(e: &RedisError) -> bool {
    matches!(e.kind(), RedisKind::Parse) && e.to_string().contains("end of input")
}

/// Whether a redis-rs error is about reaching Redis rather than about the request.
pub fn is_transient(e: &RedisError) -> bool {
    if is_cut_reply(e)
        || e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_cluster_error()
    {
        return true;
    }
    match e.kind() {
        RedisKind::Server(kind) => matches!(
            kind,
            ServerErrorKind::BusyLoading
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ReadOnly
        ),
        RedisKind::ClusterConnectionNotFound
        | RedisKind::MasterNameNotFoundBySentinel
        | RedisKind::NoValidReplicasFoundBySentinel => true,
        // BUSY (a script runs too long) and OOM (maxmemory reached) pass once Redis recovers.
        // redis-rs's kinds are `non_exhaustive`: a kind it adds later is not transient.
        _ => matches!(e.code(), Some("BUSY" | "OOM")),
    }
}

/// Whether the command behind a redis-rs error may have run. Only what certainly happened
/// before Redis ran anything is [`Outcome::NotApplied`].
pub fn outcome_of(e: &RedisError) -> Outcome {
    if e.is_connection_refusal() {
        return Outcome::NotApplied;
    }
    let refused_before_running = match e.kind() {
        // Refusals Redis gives before it runs a command or a script.
        RedisKind::Server(kind) => matches!(
            kind,
            ServerErrorKind::BusyLoading
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ReadOnly
                | ServerErrorKind::NoScript
                | ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::CrossSlot
                | ServerErrorKind::NoPerm
        ),
        // Nothing was sent: the client could not find a node or a master, or refused the
        // request itself.
        RedisKind::ClusterConnectionNotFound
        | RedisKind::MasterNameNotFoundBySentinel
        | RedisKind::NoValidReplicasFoundBySentinel
        | RedisKind::EmptySentinelList
        | RedisKind::InvalidClientConfig
        | RedisKind::AuthenticationFailed
        | RedisKind::Client => true,
        // Anything else may have run: a timeout or a dropped connection while waiting for the
        // reply, a reply that cannot be read, a script error part way. A kind redis-rs adds
        // later is treated the same, which is the safe answer.
        _ => false,
    };
    if refused_before_running
        || matches!(e.code(), Some("BUSY" | "OOM" | "NOAUTH" | "WRONGPASS"))
        || crate::scripts::is_missing_function(e)
    {
        Outcome::NotApplied
    } else {
        Outcome::Unknown
    }
}

/// A failure that came after some of the operation's writes were applied (waiting for
/// replicas, a later script of a pipeline, a later chunk): whatever the failure itself, the
/// operation may have taken effect.
pub(crate) fn maybe_applied(e: BackendError) -> delayq::Error {
    delayq::Error::from(e).outcome_unknown()
}

impl From<BackendError> for delayq::Error {
    fn from(e: BackendError) -> Self {
        let retryable = e.is_retryable();
        let outcome = e.outcome();
        // The cause without the operation, which the library error names itself.
        let (op, cause): (String, Box<dyn std::error::Error + Send + Sync>) = match e {
            BackendError::Redis { op, source } => (op, Box::new(source)),
            BackendError::Timeout { op, ms } => {
                (op, format!("no answer from Redis within {ms} ms").into())
            }
            BackendError::NotReplicated {
                op,
                got,
                wanted,
                ms,
            } => (
                op,
                format!(
                    "only {got} of {wanted} replicas confirmed the write within {ms} ms; it is \
                     applied on the master but not acknowledged as replicated"
                )
                .into(),
            ),
            BackendError::PartitionMismatch {
                topic,
                recorded,
                configured,
            } => (
                format!("checking the partition count of topic {topic:?}"),
                Box::new(BackendError::PartitionMismatch {
                    topic,
                    recorded,
                    configured,
                }),
            ),
            BackendError::Protocol { op, detail } => {
                (op, format!("unexpected reply from Redis: {detail}").into())
            }
        };
        let err = if retryable {
            delayq::Error::unavailable(op, cause)
        } else {
            delayq::Error::storage(op, cause)
        };
        match outcome {
            Outcome::Unknown => err.outcome_unknown(),
            Outcome::NotApplied => err,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use delayq::ErrorKind;

    fn io(kind: std::io::ErrorKind) -> RedisError {
        RedisError::from(std::io::Error::new(kind, format!("{kind:?}")))
    }

    #[test]
    fn kinds_retryability_and_outcomes() {
        use std::io::ErrorKind as Io;
        let server = |code: &str| {
            redis::make_extension_error(code.to_owned(), Some("from the server".to_owned()))
        };
        let table: [(BackendError, ErrorKind, Outcome); 12] = [
            // Never sent.
            (
                BackendError::redis("adding tasks", io(Io::ConnectionRefused)),
                ErrorKind::Unavailable,
                Outcome::NotApplied,
            ),
            // Sent, and the reply was lost.
            (
                BackendError::redis("adding tasks", io(Io::TimedOut)),
                ErrorKind::Unavailable,
                Outcome::Unknown,
            ),
            (
                BackendError::redis("adding tasks", io(Io::BrokenPipe)),
                ErrorKind::Unavailable,
                Outcome::Unknown,
            ),
            (
                BackendError::redis("adding tasks", io(Io::ConnectionReset)),
                ErrorKind::Unavailable,
                Outcome::Unknown,
            ),
            // A reply cut in the middle, as redis-rs's async reader reports it.
            (
                BackendError::redis(
                    "adding tasks",
                    RedisError::from(redis::ParsingError::from(
                        "Parse error at 0\nUnexpected end of input\nUnexpected `48`",
                    )),
                ),
                ErrorKind::Unavailable,
                Outcome::Unknown,
            ),
            (
                BackendError::Timeout {
                    op: "adding tasks".into(),
                    ms: 2_000,
                },
                ErrorKind::Unavailable,
                Outcome::Unknown,
            ),
            (
                BackendError::NotReplicated {
                    op: "adding tasks".into(),
                    got: 0,
                    wanted: 1,
                    ms: 500,
                },
                ErrorKind::Unavailable,
                Outcome::Unknown,
            ),
            // Refused by Redis before running anything.
            (
                BackendError::redis("adding tasks", server("OOM")),
                ErrorKind::Unavailable,
                Outcome::NotApplied,
            ),
            (
                BackendError::redis("adding tasks", server("BUSY")),
                ErrorKind::Unavailable,
                Outcome::NotApplied,
            ),
            // A script that failed part way keeps what it wrote.
            (
                BackendError::redis("adding tasks", server("ERR")),
                ErrorKind::Storage,
                Outcome::Unknown,
            ),
            (
                BackendError::PartitionMismatch {
                    topic: "orders".into(),
                    recorded: 4,
                    configured: 8,
                },
                ErrorKind::Storage,
                Outcome::NotApplied,
            ),
            (
                BackendError::protocol("popping", "not an array"),
                ErrorKind::Storage,
                Outcome::Unknown,
            ),
        ];
        for (err, kind, outcome) in table {
            let text = err.to_string();
            assert_eq!(err.outcome(), outcome, "{text}");
            let mapped = delayq::Error::from(err);
            assert_eq!(mapped.kind(), kind, "{text}");
            assert_eq!(mapped.outcome(), outcome, "{text}");
            assert_eq!(
                mapped.is_retryable(),
                kind == ErrorKind::Unavailable,
                "{text}"
            );
        }
    }

    #[test]
    fn the_cause_is_kept_and_the_operation_named_once() {
        let e = delayq::Error::from(BackendError::redis(
            "adding tasks (Redis at 127.0.0.1:1)",
            io(std::io::ErrorKind::ConnectionRefused),
        ));
        let text = e.to_string();
        assert_eq!(text.matches("adding tasks").count(), 1, "{text}");
        let source = std::error::Error::source(&e).expect("a source");
        assert!(source.downcast_ref::<RedisError>().is_some(), "{source:?}");
    }

    #[test]
    fn mismatch_names_both_values() {
        let e = delayq::Error::from(BackendError::PartitionMismatch {
            topic: "orders".into(),
            recorded: 4,
            configured: 8,
        });
        let text = e.to_string();
        assert!(text.contains("4 partitions recorded"), "{text}");
        assert!(text.contains("configured with 8"), "{text}");
    }
}
