//! The backend's own failures, and how they map onto [`delayq::Error`] once.
//!
//! - The database unreachable, a connection that breaks, the pool's wait running out, a
//!   server shutting down or in recovery (a replica), too many connections: [`delayq::Error::Unavailable`]
//!   (retryable, HTTP 503).
//! - Anything else the server refuses, or a row we cannot read: [`delayq::Error::Storage`]
//!   (HTTP 500).
//! - [`Outcome::NotApplied`] for a failure before `COMMIT` was sent (the transaction is rolled
//!   back), [`Outcome::Unknown`] when `COMMIT` itself failed: the server may have committed.

use std::sync::Arc;

use delayq::{Error, Outcome};

/// A failure of the PostgreSQL backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The database answered with an error or could not be reached.
    #[error("{op}: {source}")]
    Postgres {
        /// What was being done.
        op: String,
        /// What tokio-postgres reported.
        source: tokio_postgres::Error,
    },
    /// No pooled connection could be had.
    #[error("{op}: {detail}")]
    Pool {
        /// What was being done.
        op: String,
        /// What the pool reported.
        detail: String,
    },
    /// The schema in the database is newer than this build of delayq knows.
    #[error(
        "the delayq schema {schema:?} is at version {found}, newer than the {known} this \
         delayq knows: upgrade this instance (an older one must not write to a newer schema)"
    )]
    SchemaTooNew {
        /// The schema name.
        schema: String,
        /// The version found in the database.
        found: i32,
        /// The newest version this build knows.
        known: i32,
    },
    /// A row that does not have the expected shape (a bug, or foreign data in our tables).
    #[error("unexpected data in the database: {0}")]
    Corrupt(String),
}

/// A storage error for a row that cannot be read.
pub(crate) fn corrupt(detail: String) -> Error {
    Error::storage("reading a row", BackendError::Corrupt(detail))
}

/// SQLSTATE classes and codes that mean "try again later": connection exceptions (08),
/// insufficient resources (53), operator intervention (57: shutdown, crash, cannot connect
/// now), a read-only transaction on a replica (25006), and a serialization failure or
/// deadlock (40001, 40P01) that a retry resolves.
fn retryable(e: &tokio_postgres::Error) -> bool {
    match e.code() {
        None => true, // no SQLSTATE: the connection itself failed
        Some(code) => {
            let c = code.code();
            c.starts_with("08")
                || c.starts_with("53")
                || c.starts_with("57")
                || c == "25006"
                || c == "40001"
                || c == "40P01"
        }
    }
}

/// Maps a tokio-postgres failure while doing `op`.
pub(crate) fn pg(op: &str, outcome: Outcome, e: tokio_postgres::Error) -> Error {
    let unavailable = retryable(&e);
    let source: Arc<dyn std::error::Error + Send + Sync> = Arc::new(BackendError::Postgres {
        op: op.to_owned(),
        source: e,
    });
    if unavailable {
        Error::Unavailable {
            op: format!("{op} (PostgreSQL)"),
            outcome,
            source,
        }
    } else {
        Error::Storage {
            op: format!("{op} (PostgreSQL)"),
            outcome,
            source,
        }
    }
}

/// Maps a pool failure (no connection could be had: nothing was sent).
pub(crate) fn pool(op: &str, e: deadpool_postgres::PoolError) -> Error {
    if let deadpool_postgres::PoolError::Backend(e) = e {
        return pg(op, Outcome::NotApplied, e);
    }
    Error::unavailable(
        format!("{op} (PostgreSQL)"),
        BackendError::Pool {
            op: op.to_owned(),
            detail: e.to_string(),
        },
    )
}

/// A failure inside a transaction: the database's, or a refusal by the queue's rules (a task
/// not found, a conflict). Either way the transaction is rolled back; `?` takes both.
#[derive(Debug)]
pub(crate) enum TxError {
    /// The database failed.
    Pg(tokio_postgres::Error),
    /// The queue refused, or a row could not be read.
    Queue(Error),
}

/// The result of work inside a transaction.
pub(crate) type TxResult<T> = std::result::Result<T, TxError>;

impl From<tokio_postgres::Error> for TxError {
    fn from(e: tokio_postgres::Error) -> Self {
        TxError::Pg(e)
    }
}

impl From<Error> for TxError {
    fn from(e: Error) -> Self {
        TxError::Queue(e)
    }
}

impl TxError {
    /// The queue's error of a transaction doing `op` that failed before its commit.
    pub(crate) fn into_error(self, op: &str) -> Error {
        match self {
            TxError::Pg(e) => pg(op, Outcome::NotApplied, e),
            TxError::Queue(e) => e,
        }
    }
}
