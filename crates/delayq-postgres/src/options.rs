//! How an instance reaches PostgreSQL: the URL, the schema and the pool.

use delayq::{Error, InvalidField};

/// The schema delayq creates its tables in unless told otherwise.
pub const DEFAULT_SCHEMA: &str = "delayq";

/// The pool size unless told otherwise: pops, acknowledgements and adds each hold a
/// connection for one transaction; long-polls hold none.
pub const DEFAULT_POOL_SIZE: usize = 16;

/// The options of the PostgreSQL backend.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PostgresOptions {
    /// A libpq-style URL or key=value string (`postgres://user:pass@host:port/db`).
    pub url: String,
    /// The schema of delayq's tables and SQL functions.
    pub schema: String,
    /// The most connections the pool opens (the LISTEN connection comes on top).
    pub pool_size: usize,
}

impl PostgresOptions {
    /// Options for `url` with the default schema and pool size.
    pub fn new(url: impl Into<String>) -> Self {
        PostgresOptions {
            url: url.into(),
            schema: DEFAULT_SCHEMA.to_owned(),
            pool_size: DEFAULT_POOL_SIZE,
        }
    }

    /// Uses `schema` instead of `delayq`.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Opens at most `n` pooled connections.
    pub fn pool_size(mut self, n: usize) -> Self {
        self.pool_size = n;
        self
    }

    /// Checks the options: the schema is an unquoted SQL identifier of ours
    /// (`[a-z_][a-z0-9_]{0,62}`, so it needs no quoting anywhere), the pool has a connection,
    /// and the URL parses.
    pub fn check(&self) -> Result<tokio_postgres::Config, Error> {
        let s = &self.schema;
        let valid = !s.is_empty()
            && s.len() <= 48
            && s.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && !s.starts_with("pg_");
        if !valid {
            return Err(InvalidField::new(
                "postgres_schema",
                format!(
                    "{s:?} is not a schema name delayq accepts: 1 to 48 of a-z, 0-9 and _, \
                     not starting with a digit or pg_"
                ),
            )
            .into());
        }
        if self.pool_size == 0 || self.pool_size > 1_000 {
            return Err(InvalidField::new(
                "postgres_pool_size",
                format!("{} is out of range: 1 to 1000", self.pool_size),
            )
            .into());
        }
        self.connection().map(|(config, _)| config)
    }

    /// The URL parsed, and the TLS settings it names (libpq's `sslmode` and `sslrootcert`,
    /// [`crate::tls`]).
    pub fn connection(&self) -> Result<(tokio_postgres::Config, crate::tls::TlsSettings), Error> {
        let (rest, tls) = crate::tls::split(&self.url)?;
        let config = rest.parse::<tokio_postgres::Config>().map_err(|e| {
            Error::from(InvalidField::new(
                "postgres",
                format!("is not a PostgreSQL URL: {e}"),
            ))
        })?;
        Ok((config, tls))
    }

    /// The LISTEN/NOTIFY channel of this schema.
    pub fn channel(&self) -> String {
        format!("{}_events", self.schema)
    }
}
