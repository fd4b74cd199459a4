//! Server configuration: raw flags in, one validated [`ServerConfig`] out.
//!
//! Like ripgrep's `lowargs` → `hiargs`, configuration is read in two steps. [`ServeArgs`] is
//! what clap parses (the `delayq serve` flags and their `DELAYQ_*` environment variables):
//! every value is kept raw, as text, so nothing is interpreted yet. [`ServerConfig::from_args`]
//! then reads the optional TOML file, picks each setting by precedence (flag > environment >
//! file > default; clap already puts a flag before its variable), checks it against its
//! accepted range and builds one [`ServerConfig`]. Everything downstream takes only the
//! validated form.
//!
//! Every bad value is a [`ConfigError`] that names where the value came from (the flag and its
//! variable, or the key and the file), the value, and what is accepted.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use delayq::core::validate::{TEN_YEARS_MS, check_topic};
use delayq::{Limits, MaxRetries, TaskDefaults};
use serde::Deserialize;

/// The default listen address: loopback only, as DESIGN §5 asks.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9280";

/// The default data directory of the embedded backend.
pub const DEFAULT_DATA_DIR: &str = "./delayq-data";

/// The flags of `delayq serve`. Each one can also be given as an environment variable; the
/// flag wins over the variable, the variable over the `--config` file, the file over the
/// default.
///
/// Values are kept as text here and checked by [`ServerConfig::from_args`], so that every
/// error names the flag and the accepted range the same way.
#[derive(Debug, Clone, Default, clap::Args)]
#[non_exhaustive]
pub struct ServeArgs {
    /// Address to listen on [default: 127.0.0.1:9280].
    #[arg(long, env = "DELAYQ_LISTEN", value_name = "ADDR")]
    pub listen: Option<String>,

    /// Directory of the embedded backend's log and snapshots [default: ./delayq-data].
    #[arg(long, env = "DELAYQ_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<String>,

    /// Storage backend: `embedded` (durable, the default) or `memory` (nothing survives a
    /// restart). `--redis` selects Redis.
    #[arg(long, env = "DELAYQ_STORAGE", value_name = "embedded|memory")]
    pub storage: Option<String>,

    /// When the embedded log is flushed to disk: `always`, `interval` (default) or `never`.
    #[arg(long, env = "DELAYQ_FSYNC", value_name = "always|interval|never")]
    pub fsync: Option<String>,

    /// The flush interval of `--fsync interval`, in ms [default: 10].
    #[arg(long, env = "DELAYQ_FSYNC_INTERVAL_MS", value_name = "MS")]
    pub fsync_interval_ms: Option<String>,

    /// Use Redis instead of the embedded backend (`redis://`, `rediss://`,
    /// `redis+sentinel://`, `redis+cluster://`).
    #[arg(long, env = "DELAYQ_REDIS", value_name = "URL")]
    pub redis: Option<String>,

    /// With Redis: acknowledge a write only once this many replicas have it (`WAIT`), else
    /// answer 503 [default: 0, do not wait].
    #[arg(long, env = "DELAYQ_REDIS_WAIT_REPLICAS", value_name = "N")]
    pub redis_wait_replicas: Option<String>,

    /// How long `--redis-wait-replicas` waits for the replicas, in ms [default: 500].
    #[arg(long, env = "DELAYQ_REDIS_WAIT_TIMEOUT_MS", value_name = "MS")]
    pub redis_wait_timeout_ms: Option<String>,

    /// A TOML file with any of these settings (flags and environment win over it).
    #[arg(long, env = "DELAYQ_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Log format: `text` (default) or `json`. The level comes from `RUST_LOG`.
    #[arg(long, env = "DELAYQ_LOG_FORMAT", value_name = "text|json")]
    pub log_format: Option<String>,

    /// Largest task body, in bytes [default: 1048576].
    #[arg(long, env = "DELAYQ_MAX_BODY_BYTES", value_name = "BYTES")]
    pub max_body_bytes: Option<String>,

    /// Largest HTTP request body, in bytes; larger requests get 413 [default: 16777216].
    #[arg(long, env = "DELAYQ_MAX_REQUEST_BYTES", value_name = "BYTES")]
    pub max_request_bytes: Option<String>,

    /// Most tasks in one batch add [default: 10000].
    #[arg(long, env = "DELAYQ_MAX_BATCH", value_name = "N")]
    pub max_batch: Option<String>,

    /// Longest delay (and furthest `run_at_ms` ahead), in ms [default: ten years].
    #[arg(long, env = "DELAYQ_MAX_DELAY_MS", value_name = "MS")]
    pub max_delay_ms: Option<String>,

    /// Longest time to run a task may ask for, in ms [default: 86400000].
    #[arg(long, env = "DELAYQ_MAX_TTR_MS", value_name = "MS")]
    pub max_ttr_ms: Option<String>,

    /// Most entries in a backoff schedule [default: 64].
    #[arg(long, env = "DELAYQ_MAX_SCHEDULE_LEN", value_name = "N")]
    pub max_schedule_len: Option<String>,

    /// Most tasks one pop may return [default: 1000].
    #[arg(long, env = "DELAYQ_MAX_POP_COUNT", value_name = "N")]
    pub max_pop_count: Option<String>,

    /// Longest long-poll a pop may ask for, in ms [default: 60000].
    #[arg(long, env = "DELAYQ_MAX_POP_TIMEOUT_MS", value_name = "MS")]
    pub max_pop_timeout_ms: Option<String>,

    /// Long-poll of a pop that does not say, in ms [default: 30000].
    #[arg(long, env = "DELAYQ_DEFAULT_POP_TIMEOUT_MS", value_name = "MS")]
    pub default_pop_timeout_ms: Option<String>,

    /// Most long-polls open at once; more get 503 [default: 10000].
    #[arg(long, env = "DELAYQ_MAX_LONG_POLLS", value_name = "N")]
    pub max_long_polls: Option<String>,

    /// Largest `page_size` of `/tasks` [default: 1000].
    #[arg(long, env = "DELAYQ_MAX_PAGE_SIZE", value_name = "N")]
    pub max_page_size: Option<String>,

    /// Longest error text kept on release, in bytes; longer text is cut [default: 4096].
    #[arg(long, env = "DELAYQ_MAX_ERROR_BYTES", value_name = "BYTES")]
    pub max_error_bytes: Option<String>,

    /// Time to run of a task that does not say, in ms [default: 30000].
    #[arg(long, env = "DELAYQ_DEFAULT_TTR_MS", value_name = "MS")]
    pub default_ttr_ms: Option<String>,

    /// Redeliveries of a task that does not say; -1 for no limit [default: 3].
    #[arg(long, env = "DELAYQ_DEFAULT_MAX_RETRIES", value_name = "N")]
    pub default_max_retries: Option<String>,

    /// How long finished and cancelled records are kept, in ms [default: 60000].
    #[arg(long, env = "DELAYQ_RETENTION_MS", value_name = "MS")]
    pub retention_ms: Option<String>,

    /// How long a graceful shutdown waits for requests in flight, in ms [default: 10000].
    #[arg(long, env = "DELAYQ_SHUTDOWN_TIMEOUT_MS", value_name = "MS")]
    pub shutdown_timeout_ms: Option<String>,

    /// A bearer token clients must send; repeat for several. `TOKEN@topic1,topic2` limits a
    /// token to those topics. With no token, auth is off. The variable takes a
    /// space-separated list.
    #[arg(
        long = "auth-token",
        env = "DELAYQ_AUTH_TOKENS",
        value_name = "TOKEN[@TOPICS]",
        value_delimiter = ' ',
        hide_env_values = true
    )]
    pub auth_tokens: Vec<String>,
}

/// Which storage backend the server runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StorageConfig {
    /// The durable embedded backend in `data_dir`.
    Embedded {
        /// Where the log and snapshots live.
        data_dir: PathBuf,
        /// When the log is flushed to disk.
        fsync: FsyncPolicy,
    },
    /// Everything in memory; nothing survives a restart.
    Memory,
    /// State in Redis.
    Redis {
        /// The connection URL.
        url: String,
    },
}

/// When the embedded log is flushed to disk (DESIGN §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FsyncPolicy {
    /// Acknowledge a write after `fdatasync`.
    Always,
    /// Flush every `ms` milliseconds; a crash may lose that window.
    Interval {
        /// The flush interval.
        ms: u64,
    },
    /// Leave flushing to the operating system.
    Never,
}

/// The format of log lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// A bearer token and the topics it may touch.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenConfig {
    /// The secret clients send as `Authorization: Bearer <token>`.
    pub token: String,
    /// The topics the token may use; `None` means every topic.
    pub topics: Option<Vec<String>>,
}

impl TokenConfig {
    /// A token for every topic.
    pub fn new(token: impl Into<String>) -> Self {
        TokenConfig {
            token: token.into(),
            topics: None,
        }
    }

    /// A token limited to `topics`.
    pub fn for_topics(token: impl Into<String>, topics: Vec<String>) -> Self {
        TokenConfig {
            token: token.into(),
            topics: Some(topics),
        }
    }
}

impl fmt::Debug for TokenConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secret.
        f.debug_struct("TokenConfig")
            .field("token", &"<redacted>")
            .field("topics", &self.topics)
            .finish()
    }
}

/// Limits of the HTTP layer that the queue library does not know about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HttpLimits {
    /// Largest request body in bytes; a larger one is a 413.
    pub max_request_bytes: usize,
    /// Long-poll of a pop that gives no `timeout_ms`.
    pub default_pop_timeout_ms: u64,
    /// Most long-polls open at once; one more is refused with 503.
    pub max_long_polls: usize,
    /// Largest `page_size` of `/tasks`.
    pub max_page_size: u64,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_request_bytes: 16 << 20,
            default_pop_timeout_ms: 30_000,
            max_long_polls: 10_000,
            max_page_size: 1_000,
        }
    }
}

/// The validated configuration of a server. Build it with [`ServerConfig::from_args`], or
/// start from [`ServerConfig::default`] in tests and programs.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ServerConfig {
    /// The address to listen on.
    pub listen: SocketAddr,
    /// The storage backend.
    pub storage: StorageConfig,
    /// The queue's input limits.
    pub limits: Limits,
    /// The HTTP layer's limits.
    pub http: HttpLimits,
    /// Defaults of task options and the retention of finished records.
    pub defaults: TaskDefaults,
    /// Bearer tokens; empty means auth is off.
    pub tokens: Vec<TokenConfig>,
    /// The log format.
    pub log_format: LogFormat,
    /// How long a graceful shutdown waits for requests in flight.
    pub shutdown_timeout_ms: u64,
    /// With Redis: how many replicas must confirm a write before it is acknowledged (0: do
    /// not wait).
    pub redis_wait_replicas: u32,
    /// With Redis: how long to wait for them, in ms.
    pub redis_wait_timeout_ms: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: DEFAULT_LISTEN.parse().expect("the default address parses"),
            storage: StorageConfig::Embedded {
                data_dir: PathBuf::from(DEFAULT_DATA_DIR),
                fsync: FsyncPolicy::Interval { ms: 10 },
            },
            limits: Limits::default(),
            http: HttpLimits::default(),
            defaults: TaskDefaults::default(),
            tokens: Vec::new(),
            log_format: LogFormat::Text,
            shutdown_timeout_ms: 10_000,
            redis_wait_replicas: 0,
            redis_wait_timeout_ms: 500,
        }
    }
}

/// A configuration value that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A value is malformed or out of range.
    #[error("invalid value {value:?} for {setting}: expected {expected}")]
    Invalid {
        /// Where the value came from: `--max-batch (env DELAYQ_MAX_BATCH)` or
        /// `limits.max_batch in delayq.toml`.
        setting: String,
        /// The value as given.
        value: String,
        /// What is accepted, with the range.
        expected: String,
    },
    /// Two settings contradict each other.
    #[error("conflicting settings: {0}")]
    Conflict(String),
    /// The config file cannot be read.
    #[error("reading the config file {path}: {source}")]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The config file is not valid TOML, or a key is unknown or of the wrong type.
    #[error("in the config file {path}: {message}")]
    ParseFile {
        /// The file.
        path: PathBuf,
        /// The key and what is wrong with it.
        message: String,
    },
}

/// The settings a `--config` file may hold. Unknown keys are an error, so a typo is caught.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    data_dir: Option<String>,
    storage: Option<String>,
    fsync: Option<String>,
    fsync_interval_ms: Option<u64>,
    redis: Option<String>,
    redis_wait_replicas: Option<u64>,
    redis_wait_timeout_ms: Option<u64>,
    log_format: Option<String>,
    shutdown_timeout_ms: Option<u64>,
    limits: FileLimits,
    defaults: FileDefaults,
    tokens: Vec<FileToken>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct FileLimits {
    max_body_bytes: Option<u64>,
    max_request_bytes: Option<u64>,
    max_batch: Option<u64>,
    max_delay_ms: Option<u64>,
    max_ttr_ms: Option<u64>,
    max_schedule_len: Option<u64>,
    max_pop_count: Option<u64>,
    max_pop_timeout_ms: Option<u64>,
    default_pop_timeout_ms: Option<u64>,
    max_long_polls: Option<u64>,
    max_page_size: Option<u64>,
    max_error_bytes: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct FileDefaults {
    ttr_ms: Option<u64>,
    max_retries: Option<i64>,
    retention_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToken {
    token: String,
    topics: Option<Vec<String>>,
}

/// One numeric setting: its names in each source and its accepted range.
struct Num {
    flag: &'static str,
    key: &'static str,
    min: u64,
    max: u64,
}

const MIB: u64 = 1 << 20;

const FSYNC_INTERVAL: Num = num("fsync-interval-ms", "fsync_interval_ms", 1, 60_000);
const REDIS_WAIT_REPLICAS: Num = num("redis-wait-replicas", "redis_wait_replicas", 0, 16);
const REDIS_WAIT_TIMEOUT: Num = num("redis-wait-timeout-ms", "redis_wait_timeout_ms", 1, 1_500);
const SHUTDOWN_TIMEOUT: Num = num("shutdown-timeout-ms", "shutdown_timeout_ms", 0, 600_000);
const MAX_BODY: Num = num("max-body-bytes", "limits.max_body_bytes", 1, 64 * MIB);
const MAX_REQUEST: Num = num(
    "max-request-bytes",
    "limits.max_request_bytes",
    1_024,
    1_024 * MIB,
);
const MAX_BATCH: Num = num("max-batch", "limits.max_batch", 1, 100_000);
const MAX_DELAY: Num = num("max-delay-ms", "limits.max_delay_ms", 1, TEN_YEARS_MS);
const MAX_TTR: Num = num("max-ttr-ms", "limits.max_ttr_ms", 1, TEN_YEARS_MS);
const MAX_SCHEDULE: Num = num("max-schedule-len", "limits.max_schedule_len", 1, 1_024);
const MAX_POP_COUNT: Num = num("max-pop-count", "limits.max_pop_count", 1, 10_000);
const MAX_POP_TIMEOUT: Num = num(
    "max-pop-timeout-ms",
    "limits.max_pop_timeout_ms",
    0,
    3_600_000,
);
const DEFAULT_POP_TIMEOUT: Num = num(
    "default-pop-timeout-ms",
    "limits.default_pop_timeout_ms",
    0,
    3_600_000,
);
const MAX_LONG_POLLS: Num = num("max-long-polls", "limits.max_long_polls", 1, 1_000_000);
const MAX_PAGE_SIZE: Num = num("max-page-size", "limits.max_page_size", 1, 1_000);
const MAX_ERROR: Num = num("max-error-bytes", "limits.max_error_bytes", 0, MIB);
const DEFAULT_TTR: Num = num("default-ttr-ms", "defaults.ttr_ms", 1, TEN_YEARS_MS);
const RETENTION: Num = num("retention-ms", "defaults.retention_ms", 0, TEN_YEARS_MS);

/// Builds a [`Num`].
const fn num(flag: &'static str, key: &'static str, min: u64, max: u64) -> Num {
    Num {
        flag,
        key,
        min,
        max,
    }
}

/// The environment variable of a flag: `DELAYQ_` and the flag in upper snake case.
fn env_name(flag: &str) -> String {
    format!("DELAYQ_{}", flag.replace('-', "_").to_uppercase())
}

impl Num {
    fn env_name(&self) -> String {
        env_name(self.flag)
    }
}

/// Where the file came from, to name keys in errors.
struct Sources<'a> {
    file: Option<&'a Path>,
}

impl Sources<'_> {
    fn flag(&self, flag: &str, env: &str) -> String {
        format!("--{flag} (env {env})")
    }

    fn key(&self, key: &str) -> String {
        match self.file {
            Some(path) => format!("{key} in {}", path.display()),
            None => key.to_owned(),
        }
    }

    /// Picks a numeric setting by precedence and checks its range.
    fn num(
        &self,
        spec: &Num,
        raw: Option<&str>,
        file: Option<u64>,
        default: u64,
    ) -> Result<u64, ConfigError> {
        let expected = || format!("a whole number from {} to {}", spec.min, spec.max);
        let (value, setting) = match (raw, file) {
            (Some(raw), _) => {
                let setting = self.flag(spec.flag, &spec.env_name());
                let value = raw
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| ConfigError::Invalid {
                        setting: setting.clone(),
                        value: raw.to_owned(),
                        expected: expected(),
                    })?;
                (value, setting)
            }
            (None, Some(value)) => (value, self.key(spec.key)),
            (None, None) => return Ok(default),
        };
        if value < spec.min || value > spec.max {
            return Err(ConfigError::Invalid {
                setting,
                value: value.to_string(),
                expected: expected(),
            });
        }
        Ok(value)
    }

    /// Picks a text setting by precedence; returns it with the name of its source.
    fn text(
        &self,
        flag: &str,
        key: &str,
        raw: Option<&str>,
        file: Option<&str>,
    ) -> Option<(String, String)> {
        let env = env_name(flag);
        match (raw, file) {
            (Some(raw), _) => Some((raw.to_owned(), self.flag(flag, &env))),
            (None, Some(file)) => Some((file.to_owned(), self.key(key))),
            (None, None) => None,
        }
    }
}

fn to_usize(value: u64) -> usize {
    // Every range above fits in 32 bits, so this never saturates in practice.
    usize::try_from(value).unwrap_or(usize::MAX)
}

impl ServerConfig {
    /// Reads the `--config` file (if any), applies the flags and environment over it and
    /// checks every value. See the module doc for the precedence.
    pub fn from_args(args: &ServeArgs) -> Result<ServerConfig, ConfigError> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        Self::resolve(args, file, args.config.as_deref())
    }

    fn resolve(
        args: &ServeArgs,
        file: FileConfig,
        path: Option<&Path>,
    ) -> Result<ServerConfig, ConfigError> {
        let src = Sources { file: path };
        let d = ServerConfig::default();
        let fl = &file.limits;
        let a = |v: &Option<String>| v.clone();
        let listen = match src.text(
            "listen",
            "listen",
            a(&args.listen).as_deref(),
            file.listen.as_deref(),
        ) {
            None => d.listen,
            Some((value, setting)) => value.trim().parse().map_err(|_| ConfigError::Invalid {
                setting,
                value,
                expected: "an IP address and port, like 127.0.0.1:9280 or [::1]:9280".into(),
            })?,
        };

        let fsync_ms = src.num(
            &FSYNC_INTERVAL,
            args.fsync_interval_ms.as_deref(),
            file.fsync_interval_ms,
            10,
        )?;
        let fsync = match src.text(
            "fsync",
            "fsync",
            args.fsync.as_deref(),
            file.fsync.as_deref(),
        ) {
            None => FsyncPolicy::Interval { ms: fsync_ms },
            Some((value, setting)) => match value.trim().to_ascii_lowercase().as_str() {
                "always" => FsyncPolicy::Always,
                "interval" => FsyncPolicy::Interval { ms: fsync_ms },
                "never" => FsyncPolicy::Never,
                _ => {
                    return Err(ConfigError::Invalid {
                        setting,
                        value,
                        expected: "one of always, interval, never".into(),
                    });
                }
            },
        };
        let data_dir = src
            .text(
                "data-dir",
                "data_dir",
                args.data_dir.as_deref(),
                file.data_dir.as_deref(),
            )
            .map(|(dir, setting)| {
                if dir.trim().is_empty() {
                    Err(ConfigError::Invalid {
                        setting,
                        value: dir,
                        expected: "a directory path".into(),
                    })
                } else {
                    Ok(PathBuf::from(dir))
                }
            })
            .transpose()?
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
        let redis = src.text(
            "redis",
            "redis",
            args.redis.as_deref(),
            file.redis.as_deref(),
        );
        let storage_kind = src.text(
            "storage",
            "storage",
            args.storage.as_deref(),
            file.storage.as_deref(),
        );
        let storage = match (storage_kind, redis) {
            (Some((kind, setting)), redis) => match kind.trim().to_ascii_lowercase().as_str() {
                "embedded" | "memory" if redis.is_some() => {
                    return Err(ConfigError::Conflict(format!(
                        "{setting} is {kind:?} but --redis / redis is also given; use one"
                    )));
                }
                "embedded" => StorageConfig::Embedded { data_dir, fsync },
                "memory" => StorageConfig::Memory,
                "redis" => match redis {
                    Some((url, setting)) => StorageConfig::Redis {
                        url: check_redis_url(url, setting)?,
                    },
                    None => {
                        return Err(ConfigError::Conflict(format!(
                            "{setting} is \"redis\" but no --redis URL is given"
                        )));
                    }
                },
                _ => {
                    return Err(ConfigError::Invalid {
                        setting,
                        value: kind,
                        expected: "one of embedded, memory (or give --redis URL)".into(),
                    });
                }
            },
            (None, Some((url, setting))) => StorageConfig::Redis {
                url: check_redis_url(url, setting)?,
            },
            (None, None) => StorageConfig::Embedded { data_dir, fsync },
        };

        let log_format = match src.text(
            "log-format",
            "log_format",
            args.log_format.as_deref(),
            file.log_format.as_deref(),
        ) {
            None => LogFormat::Text,
            Some((value, setting)) => match value.trim().to_ascii_lowercase().as_str() {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                _ => {
                    return Err(ConfigError::Invalid {
                        setting,
                        value,
                        expected: "one of text, json".into(),
                    });
                }
            },
        };
        let shutdown_timeout_ms = src.num(
            &SHUTDOWN_TIMEOUT,
            args.shutdown_timeout_ms.as_deref(),
            file.shutdown_timeout_ms,
            d.shutdown_timeout_ms,
        )?;
        let redis_wait_replicas = src.num(
            &REDIS_WAIT_REPLICAS,
            args.redis_wait_replicas.as_deref(),
            file.redis_wait_replicas,
            u64::from(d.redis_wait_replicas),
        )? as u32;
        let redis_wait_timeout_ms = src.num(
            &REDIS_WAIT_TIMEOUT,
            args.redis_wait_timeout_ms.as_deref(),
            file.redis_wait_timeout_ms,
            d.redis_wait_timeout_ms,
        )?;

        let dl = Limits::default();
        let mut limits = Limits::default();
        limits.max_body_bytes = to_usize(src.num(
            &MAX_BODY,
            args.max_body_bytes.as_deref(),
            fl.max_body_bytes,
            dl.max_body_bytes as u64,
        )?);
        limits.max_batch = to_usize(src.num(
            &MAX_BATCH,
            args.max_batch.as_deref(),
            fl.max_batch,
            dl.max_batch as u64,
        )?);
        limits.max_delay_ms = src.num(
            &MAX_DELAY,
            args.max_delay_ms.as_deref(),
            fl.max_delay_ms,
            dl.max_delay_ms,
        )?;
        limits.max_ttr_ms = src.num(
            &MAX_TTR,
            args.max_ttr_ms.as_deref(),
            fl.max_ttr_ms,
            dl.max_ttr_ms,
        )?;
        limits.max_schedule_len = to_usize(src.num(
            &MAX_SCHEDULE,
            args.max_schedule_len.as_deref(),
            fl.max_schedule_len,
            dl.max_schedule_len as u64,
        )?);
        limits.max_pop_count = to_usize(src.num(
            &MAX_POP_COUNT,
            args.max_pop_count.as_deref(),
            fl.max_pop_count,
            dl.max_pop_count as u64,
        )?);
        limits.max_pop_timeout_ms = src.num(
            &MAX_POP_TIMEOUT,
            args.max_pop_timeout_ms.as_deref(),
            fl.max_pop_timeout_ms,
            dl.max_pop_timeout_ms,
        )?;
        limits.max_error_bytes = to_usize(src.num(
            &MAX_ERROR,
            args.max_error_bytes.as_deref(),
            fl.max_error_bytes,
            dl.max_error_bytes as u64,
        )?);

        let dh = HttpLimits::default();
        let http = HttpLimits {
            max_request_bytes: to_usize(src.num(
                &MAX_REQUEST,
                args.max_request_bytes.as_deref(),
                fl.max_request_bytes,
                dh.max_request_bytes as u64,
            )?),
            default_pop_timeout_ms: src.num(
                &DEFAULT_POP_TIMEOUT,
                args.default_pop_timeout_ms.as_deref(),
                fl.default_pop_timeout_ms,
                // The default follows a lowered maximum instead of contradicting it.
                dh.default_pop_timeout_ms.min(limits.max_pop_timeout_ms),
            )?,
            max_long_polls: to_usize(src.num(
                &MAX_LONG_POLLS,
                args.max_long_polls.as_deref(),
                fl.max_long_polls,
                dh.max_long_polls as u64,
            )?),
            max_page_size: src.num(
                &MAX_PAGE_SIZE,
                args.max_page_size.as_deref(),
                fl.max_page_size,
                dh.max_page_size,
            )?,
        };
        // The queue enforces the page size too, so every caller of the library gets the same.
        limits.max_page_size = http.max_page_size;
        if http.default_pop_timeout_ms > limits.max_pop_timeout_ms {
            return Err(ConfigError::Conflict(format!(
                "the default pop timeout ({} ms, --default-pop-timeout-ms) is longer than the \
                 maximum ({} ms, --max-pop-timeout-ms)",
                http.default_pop_timeout_ms, limits.max_pop_timeout_ms
            )));
        }
        if http.max_request_bytes < limits.max_body_bytes {
            return Err(ConfigError::Conflict(format!(
                "the request limit ({} bytes, --max-request-bytes) is smaller than the task body \
                 limit ({} bytes, --max-body-bytes); a task with a full body could never be added",
                http.max_request_bytes, limits.max_body_bytes
            )));
        }

        let mut defaults = TaskDefaults::default();
        defaults.ttr_ms = src.num(
            &DEFAULT_TTR,
            args.default_ttr_ms.as_deref(),
            file.defaults.ttr_ms,
            defaults.ttr_ms.min(limits.max_ttr_ms),
        )?;
        if defaults.ttr_ms > limits.max_ttr_ms {
            return Err(ConfigError::Conflict(format!(
                "the default ttr ({} ms, --default-ttr-ms) is longer than the maximum ({} ms, \
                 --max-ttr-ms)",
                defaults.ttr_ms, limits.max_ttr_ms
            )));
        }
        defaults.retention_ms = src.num(
            &RETENTION,
            args.retention_ms.as_deref(),
            file.defaults.retention_ms,
            defaults.retention_ms,
        )?;
        defaults.max_retries =
            resolve_max_retries(&src, args, &file)?.unwrap_or(defaults.max_retries);

        let tokens = resolve_tokens(&src, args, file.tokens)?;

        Ok(ServerConfig {
            listen,
            storage,
            limits,
            http,
            defaults,
            tokens,
            log_format,
            shutdown_timeout_ms,
            redis_wait_replicas,
            redis_wait_timeout_ms,
        })
    }
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
        path: path.to_owned(),
        source,
    })?;
    parse_file(&text, path)
}

fn parse_file(text: &str, path: &Path) -> Result<FileConfig, ConfigError> {
    let parse_error = |message: String| ConfigError::ParseFile {
        path: path.to_owned(),
        message,
    };
    let de = toml::Deserializer::parse(text).map_err(|e| parse_error(e.to_string()))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().to_string();
        let inner = e.into_inner().to_string();
        if key == "." {
            parse_error(inner)
        } else {
            parse_error(format!("{key}: {inner}"))
        }
    })
}

fn check_redis_url(url: String, setting: String) -> Result<String, ConfigError> {
    const SCHEMES: [&str; 4] = [
        "redis://",
        "rediss://",
        "redis+sentinel://",
        "redis+cluster://",
    ];
    let trimmed = url.trim();
    match SCHEMES.iter().find(|s| trimmed.starts_with(*s)) {
        Some(scheme) if trimmed.len() > scheme.len() => Ok(trimmed.to_owned()),
        _ => Err(ConfigError::Invalid {
            setting,
            value: url,
            expected: format!("a URL starting with one of {}", SCHEMES.join(", ")),
        }),
    }
}

fn resolve_max_retries(
    src: &Sources<'_>,
    args: &ServeArgs,
    file: &FileConfig,
) -> Result<Option<MaxRetries>, ConfigError> {
    let expected = || format!("-1 (no limit) or a whole number from 0 to {}", u32::MAX);
    let (value, setting) = match (&args.default_max_retries, file.defaults.max_retries) {
        (Some(raw), _) => {
            let setting = src.flag("default-max-retries", "DELAYQ_DEFAULT_MAX_RETRIES");
            let value = raw
                .trim()
                .parse::<i64>()
                .map_err(|_| ConfigError::Invalid {
                    setting: setting.clone(),
                    value: raw.clone(),
                    expected: expected(),
                })?;
            (value, setting)
        }
        (None, Some(value)) => (value, src.key("defaults.max_retries")),
        (None, None) => return Ok(None),
    };
    MaxRetries::try_from(value)
        .map(Some)
        .map_err(|_| ConfigError::Invalid {
            setting,
            value: value.to_string(),
            expected: expected(),
        })
}

/// Tokens from flags or environment replace those of the file; they do not add to them, so
/// that precedence means the same for every setting.
fn resolve_tokens(
    src: &Sources<'_>,
    args: &ServeArgs,
    file: Vec<FileToken>,
) -> Result<Vec<TokenConfig>, ConfigError> {
    if !args.auth_tokens.is_empty() {
        let setting = src.flag("auth-token", "DELAYQ_AUTH_TOKENS");
        return args
            .auth_tokens
            .iter()
            .filter(|t| !t.is_empty())
            .map(|spec| parse_token_spec(spec, &setting))
            .collect();
    }
    file.into_iter()
        .enumerate()
        .map(|(i, t)| {
            let setting = src.key(&format!("tokens[{i}]"));
            check_token(&t.token, &setting)?;
            let topics = t
                .topics
                .map(|topics| check_topics(topics, &setting))
                .transpose()?;
            Ok(TokenConfig {
                token: t.token,
                topics,
            })
        })
        .collect()
}

/// Parses `TOKEN` or `TOKEN@topic1,topic2`.
fn parse_token_spec(spec: &str, setting: &str) -> Result<TokenConfig, ConfigError> {
    match spec.rsplit_once('@') {
        Some((token, topics)) => {
            check_token(token, setting)?;
            let topics = topics.split(',').map(str::to_owned).collect();
            Ok(TokenConfig::for_topics(
                token,
                check_topics(topics, setting)?,
            ))
        }
        None => {
            check_token(spec, setting)?;
            Ok(TokenConfig::new(spec))
        }
    }
}

fn check_token(token: &str, setting: &str) -> Result<(), ConfigError> {
    let ok = !token.is_empty()
        && token.len() <= 4_096
        && token
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'@' && b != b',');
    if ok {
        Ok(())
    } else {
        Err(ConfigError::Invalid {
            setting: setting.to_owned(),
            // Say what is wrong without echoing the secret.
            value: format!("<token of {} bytes>", token.len()),
            expected: "a token of 1 to 4096 visible ASCII characters other than '@' and ','".into(),
        })
    }
}

fn check_topics(topics: Vec<String>, setting: &str) -> Result<Vec<String>, ConfigError> {
    if topics.is_empty() {
        return Err(ConfigError::Invalid {
            setting: setting.to_owned(),
            value: String::new(),
            expected: "at least one topic".into(),
        });
    }
    for topic in &topics {
        check_topic(topic).map_err(|e| ConfigError::Invalid {
            setting: setting.to_owned(),
            value: topic.clone(),
            expected: format!("a valid topic name ({})", e.reason),
        })?;
    }
    Ok(topics)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<FileConfig, ConfigError> {
        parse_file(text, Path::new("delayq.toml"))
    }

    #[test]
    fn numbers_are_checked_against_their_range() {
        let src = Sources { file: None };
        type Row<'a> = (Option<&'a str>, Option<u64>, Result<u64, &'a str>);
        let table: [Row; 7] = [
            (None, None, Ok(10_000)),
            (Some("5"), Some(7), Ok(5)),
            (None, Some(7), Ok(7)),
            (Some(" 12 "), None, Ok(12)),
            (Some("0"), None, Err("--max-batch (env DELAYQ_MAX_BATCH)")),
            (Some("-3"), None, Err("--max-batch (env DELAYQ_MAX_BATCH)")),
            (None, Some(100_001), Err("limits.max_batch")),
        ];
        for (raw, file, want) in table {
            let got = src.num(&MAX_BATCH, raw, file, 10_000);
            match (got, want) {
                (Ok(v), Ok(w)) => assert_eq!(v, w),
                (
                    Err(ConfigError::Invalid {
                        setting, expected, ..
                    }),
                    Err(w),
                ) => {
                    assert_eq!(setting, w);
                    assert!(expected.contains("1 to 100000"), "{expected}");
                }
                (got, want) => panic!("{raw:?} {file:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn token_specs() {
        let t = parse_token_spec("s3cret@orders,payments", "--auth-token").unwrap();
        assert_eq!(t.token, "s3cret");
        assert_eq!(t.topics, Some(vec!["orders".into(), "payments".into()]));
        assert_eq!(parse_token_spec("plain", "x").unwrap().topics, None);
        for bad in ["", "@orders", "tok@", "tok@bad topic", "two words"] {
            assert!(parse_token_spec(bad, "x").is_err(), "{bad:?}");
        }
        let msg = parse_token_spec("a b", "--auth-token")
            .unwrap_err()
            .to_string();
        assert!(!msg.contains("a b"), "the secret is not echoed: {msg}");
    }

    #[test]
    fn file_keys_are_named_in_errors() {
        let table = [
            ("listen = 5", "listen"),
            ("[limits]\nmax_batch = \"many\"", "limits.max_batch"),
            ("[limits]\nmax_bach = 5", "max_bach"),
            ("[defaults]\nmax_retries = 1.5", "defaults.max_retries"),
            ("listen = ", "line 1"),
        ];
        for (text, want) in table {
            let msg = parse(text).unwrap_err().to_string();
            assert!(msg.contains(want), "{text:?}: {msg}");
            assert!(msg.contains("delayq.toml"), "{msg}");
        }
    }

    #[test]
    fn redis_wait_settings() {
        let resolve = |args: ServeArgs| ServerConfig::resolve(&args, FileConfig::default(), None);
        let plain = resolve(ServeArgs::default()).unwrap();
        assert_eq!(
            (plain.redis_wait_replicas, plain.redis_wait_timeout_ms),
            (0, 500)
        );
        let set = ServeArgs {
            redis: Some("redis+cluster://127.0.0.1:7000,127.0.0.1:7001".into()),
            redis_wait_replicas: Some("1".into()),
            redis_wait_timeout_ms: Some("250".into()),
            ..ServeArgs::default()
        };
        let c = resolve(set).unwrap();
        assert_eq!((c.redis_wait_replicas, c.redis_wait_timeout_ms), (1, 250));
        let file = FileConfig {
            redis_wait_replicas: Some(2),
            ..FileConfig::default()
        };
        let c = ServerConfig::resolve(&ServeArgs::default(), file, None).unwrap();
        assert_eq!(c.redis_wait_replicas, 2);
        let too_long = ServeArgs {
            redis_wait_timeout_ms: Some("5000".into()),
            ..ServeArgs::default()
        };
        let msg = resolve(too_long).unwrap_err().to_string();
        assert!(
            msg.contains("--redis-wait-timeout-ms") && msg.contains("DELAYQ_REDIS_WAIT_TIMEOUT_MS"),
            "{msg}"
        );
    }

    #[test]
    fn storage_selection() {
        let resolve = |args: ServeArgs| ServerConfig::resolve(&args, FileConfig::default(), None);
        let memory = ServeArgs {
            storage: Some("memory".into()),
            ..ServeArgs::default()
        };
        assert_eq!(resolve(memory).unwrap().storage, StorageConfig::Memory);
        let redis = ServeArgs {
            redis: Some("redis://localhost:6379".into()),
            ..ServeArgs::default()
        };
        assert!(matches!(
            resolve(redis).unwrap().storage,
            StorageConfig::Redis { .. }
        ));
        let both = ServeArgs {
            storage: Some("memory".into()),
            redis: Some("redis://x".into()),
            ..ServeArgs::default()
        };
        assert!(matches!(resolve(both), Err(ConfigError::Conflict(_))));
        let bad_url = ServeArgs {
            redis: Some("http://x".into()),
            ..ServeArgs::default()
        };
        let msg = resolve(bad_url).unwrap_err().to_string();
        assert!(
            msg.contains("--redis") && msg.contains("rediss://"),
            "{msg}"
        );
        let fsync = ServeArgs {
            fsync: Some("always".into()),
            ..ServeArgs::default()
        };
        assert!(matches!(
            resolve(fsync).unwrap().storage,
            StorageConfig::Embedded {
                fsync: FsyncPolicy::Always,
                ..
            }
        ));
    }

    #[test]
    fn defaults_match_the_design() {
        let c = ServerConfig::resolve(&ServeArgs::default(), FileConfig::default(), None).unwrap();
        assert_eq!(c, ServerConfig::default());
        assert_eq!(c.listen.to_string(), "127.0.0.1:9280");
        assert_eq!(c.http.default_pop_timeout_ms, 30_000);
        assert_eq!(c.limits.max_pop_timeout_ms, 60_000);
    }
}
