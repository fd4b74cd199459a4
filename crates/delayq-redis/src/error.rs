//! The backend's own failures, and how they map onto [`delayq::Error`] once.
//!
//! The question a caller has to decide (as with redis-rs's `RedisError`) is whether trying
//! again later can help: Redis unreachable, timing out, loading, failing over or out of
//! memory is [`delayq::Error::Unavailable`] (retryable, HTTP 503); a script that fails or a
//! reply we cannot read is [`delayq::Error::Storage`] (HTTP 500); a partition count that
//! differs from the one recorded in Redis is a configuration error, also
//! [`delayq::Error::Storage`], whose message names both values.

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
}

/// Whether a redis-rs error is about reaching Redis rather than about the request.
pub fn is_transient(e: &RedisError) -> bool {
    if e.is_io_error()
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
        _ => matches!(e.code(), Some("BUSY" | "OOM")),
    }
}

impl From<BackendError> for delayq::Error {
    fn from(e: BackendError) -> Self {
        let retryable = e.is_retryable();
        match e {
            BackendError::Redis { op, source } => {
                let message = source.to_string();
                if retryable {
                    delayq::Error::Unavailable { op, message }
                } else {
                    delayq::Error::Storage { op, message }
                }
            }
            BackendError::Timeout { op, ms } => delayq::Error::Unavailable {
                op,
                message: format!(
                    "no answer from Redis within {ms} ms (a write may or may not have been applied)"
                ),
            },
            BackendError::NotReplicated {
                op,
                got,
                wanted,
                ms,
            } => delayq::Error::Unavailable {
                op,
                message: format!(
                    "only {got} of {wanted} replicas confirmed the write within {ms} ms; it is \
                     applied on the master but not acknowledged as replicated"
                ),
            },
            mismatch @ BackendError::PartitionMismatch { .. } => delayq::Error::Storage {
                op: "checking the topic's partition count".to_owned(),
                message: mismatch.to_string(),
            },
            BackendError::Protocol { op, detail } => delayq::Error::Storage {
                op,
                message: format!("unexpected reply from Redis: {detail}"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use delayq::ErrorKind;

    #[test]
    fn kinds_decide_retryability() {
        let io = RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "connection refused",
        ));
        let table: [(BackendError, ErrorKind); 4] = [
            (
                BackendError::redis("adding tasks", io),
                ErrorKind::Unavailable,
            ),
            (
                BackendError::Timeout {
                    op: "adding tasks".into(),
                    ms: 2_000,
                },
                ErrorKind::Unavailable,
            ),
            (
                BackendError::PartitionMismatch {
                    topic: "orders".into(),
                    recorded: 4,
                    configured: 8,
                },
                ErrorKind::Storage,
            ),
            (
                BackendError::protocol("popping", "not an array"),
                ErrorKind::Storage,
            ),
        ];
        for (err, kind) in table {
            let mapped = delayq::Error::from(err);
            assert_eq!(mapped.kind(), kind, "{mapped}");
        }
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
