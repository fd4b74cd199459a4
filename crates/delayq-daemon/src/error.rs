//! [`ServerError`]: why the server could not start or stopped with an error.

use std::net::SocketAddr;

use crate::config::ConfigError;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The listen address cannot be bound.
    #[error("binding the listen address {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Serving connections failed.
    #[error("serving HTTP on {addr}: {source}")]
    Serve {
        /// The address.
        addr: SocketAddr,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The storage failed to start or to shut down (flush).
    #[error("{op}: {source}")]
    Storage {
        /// What was being done.
        op: &'static str,
        /// The library's error.
        source: delayq::Error,
    },
    /// The TLS certificate or key cannot be used.
    #[error(transparent)]
    Tls(#[from] delayq_server::serve::TlsError),
    /// The OTLP exporter could not be built.
    #[error("setting up OTLP export to {endpoint}: {reason}")]
    Otlp {
        /// The collector's URL.
        endpoint: String,
        /// Why.
        reason: String,
    },
    /// Logging could not be set up.
    #[error("setting up logging: {0}")]
    Logging(String),
    /// The beanstalk listener could not start.
    #[error(transparent)]
    Beanstalk(#[from] delayq_beanstalk::BeanstalkError),
    /// The push dispatcher could not start (its CA file).
    #[error(transparent)]
    Push(#[from] delayq_push::PushError),
}
