//! The one error type of the command-line library, and the exit codes it maps to.
//!
//! The binary prints an error as `error: <message>` and exits with [`CliError::exit_code`]:
//! 2 when the server cannot be reached (a transport failure of the client), 1 for everything
//! else (the server refused the request, bad flags, an unreadable file, a failed import).

use std::path::PathBuf;

use delayq_client::ClientError;

/// Exit code: success.
pub const EXIT_OK: u8 = 0;
/// Exit code: an API or usage error.
pub const EXIT_ERROR: u8 = 1;
/// Exit code: the server cannot be reached.
pub const EXIT_UNREACHABLE: u8 = 2;

/// An error of a command.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The flags do not fit together or a value is invalid.
    #[error("{0}")]
    Usage(String),
    /// A client call failed (refused by the server, or the server is unreachable).
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Some lines of an import were refused; the summary has been printed.
    #[error("{failed} of {lines} lines of {} were not added", path.display())]
    ImportIncomplete {
        /// The file.
        path: PathBuf,
        /// How many task lines the file had.
        lines: u64,
        /// How many were refused.
        failed: u64,
    },
    /// A benchmark could not run to its end.
    #[error("bench {bench}: {reason}")]
    Bench {
        /// Which benchmark.
        bench: &'static str,
        /// Why it stopped.
        reason: String,
    },
    /// A data directory is damaged or cannot be read.
    #[error("{0}")]
    Data(String),
    /// Writing the output failed (a closed pipe).
    #[error("cannot write the output: {0}")]
    Output(#[source] std::io::Error),
}

impl CliError {
    /// The process exit code for this error: 2 when the server cannot be reached, else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Client(err) if err.is_transport() => EXIT_UNREACHABLE,
            _ => EXIT_ERROR,
        }
    }

    /// A usage error.
    pub fn usage(message: impl Into<String>) -> Self {
        CliError::Usage(message.into())
    }
}

impl From<delayq_bench::BenchError> for CliError {
    fn from(err: delayq_bench::BenchError) -> Self {
        use delayq_bench::BenchError;
        match err {
            BenchError::Usage(message) => CliError::Usage(message),
            BenchError::Client(err) => CliError::Client(err),
            BenchError::Bench { bench, reason } => CliError::Bench { bench, reason },
            BenchError::Output(err) => CliError::Output(err),
            // The enum is non-exhaustive; a new kind keeps its message.
            other => CliError::Usage(other.to_string()),
        }
    }
}

impl From<std::io::Error> for CliError {
    fn from(err: std::io::Error) -> Self {
        CliError::Output(err)
    }
}
