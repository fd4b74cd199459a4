//! What the HTTP app is configured with: its limits, its tokens, HTTPS, the dashboard.
//!
//! These are the validated forms; reading them from flags, variables and the config file is
//! the composition root's job (`delayq-daemon`'s `config`), which builds one [`AppConfig`].

use std::fmt;
use std::path::PathBuf;

/// Everything [`crate::AppState`] needs from the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppConfig {
    /// The HTTP layer's limits.
    pub http: HttpLimits,
    /// Bearer tokens; empty means auth is off.
    pub tokens: Vec<TokenConfig>,
    /// How the web dashboard is served.
    pub dashboard: crate::dashboard::Options,
}

/// A bearer token, the topics it may touch, and whether it may only read.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenConfig {
    /// The secret clients send as `Authorization: Bearer <token>`.
    pub token: String,
    /// The topics the token may use; `None` means every topic.
    pub topics: Option<Vec<String>>,
    /// Whether the token may only read (GET); every POST with it is refused with 403.
    pub read_only: bool,
}

impl TokenConfig {
    /// A token for every topic.
    pub fn new(token: impl Into<String>) -> Self {
        TokenConfig {
            token: token.into(),
            topics: None,
            read_only: false,
        }
    }

    /// A token limited to `topics`.
    pub fn for_topics(token: impl Into<String>, topics: Vec<String>) -> Self {
        TokenConfig {
            topics: Some(topics),
            ..TokenConfig::new(token)
        }
    }

    /// The same token, limited to reading.
    pub fn read_only(self) -> Self {
        TokenConfig {
            read_only: true,
            ..self
        }
    }
}

impl fmt::Debug for TokenConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secret.
        f.debug_struct("TokenConfig")
            .field("token", &"<redacted>")
            .field("topics", &self.topics)
            .field("read_only", &self.read_only)
            .finish()
    }
}

/// The certificate and key to serve HTTPS with (rustls). The files are read when the server
/// starts; a file that cannot be read or used stops the start with its path named.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsConfig {
    /// PEM file of the certificate chain, the server's certificate first.
    pub cert: PathBuf,
    /// PEM file of the certificate's private key.
    pub key: PathBuf,
}

impl TlsConfig {
    /// TLS with the certificate chain in `cert` and its key in `key`.
    pub fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        TlsConfig {
            cert: cert.into(),
            key: key.into(),
        }
    }
}

/// Limits of the HTTP layer that the queue library does not know about. Their defaults are
/// those of the settings table (`delayq-daemon`'s `ServerConfig::default().http`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Largest request body in bytes; a larger one is a 413.
    pub max_request_bytes: usize,
    /// Long-poll of a pop that gives no `timeout_ms`.
    pub default_pop_timeout_ms: u64,
    /// Most long-polls open at once; one more is refused with 503.
    pub max_long_polls: usize,
    /// Most connections open at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers (and a TLS handshake), in ms.
    pub header_read_timeout_ms: u64,
    /// How long a connection may stay open with no request in progress, in ms.
    pub idle_timeout_ms: u64,
    /// How long a client may take to send a request body after its headers, in ms.
    pub body_read_timeout_ms: u64,
}
