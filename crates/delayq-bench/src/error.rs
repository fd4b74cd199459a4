//! [`BenchError`]: why a benchmark did not run or did not finish.

use delayq_client::ClientError;

/// Why a benchmark did not run or did not finish. The binary turns it into its own error,
/// with the same message and exit code (2 when the server cannot be reached).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// The flags do not fit together or a value is out of bounds.
    #[error("{0}")]
    Usage(String),
    /// A client call failed (refused by the server, or the server is unreachable).
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A benchmark could not run to its end.
    #[error("bench {bench}: {reason}")]
    Bench {
        /// Which benchmark.
        bench: &'static str,
        /// Why it stopped.
        reason: String,
    },
    /// Writing the report failed (a closed pipe).
    #[error("cannot write the output: {0}")]
    Output(#[source] std::io::Error),
}

impl BenchError {
    /// A usage error.
    pub fn usage(message: impl Into<String>) -> Self {
        BenchError::Usage(message.into())
    }
}

impl From<std::io::Error> for BenchError {
    fn from(err: std::io::Error) -> Self {
        BenchError::Output(err)
    }
}
