//! Server configuration: raw flags in, one validated [`ServerConfig`] out.
//!
//! Like ripgrep's `lowargs` → `hiargs`, configuration is read in steps, and each setting is
//! declared once, in the table of `settings.rs`:
//!
//! 1. [`ServeArgs`] is what clap parses: the `delayq serve` flags and their `DELAYQ_*`
//!    variables, built from the table and kept as text (`sources.rs`).
//! 2. The optional TOML file is parsed and its keys checked against the table.
//! 3. Each setting is picked by precedence (flag > environment > file > default) and read
//!    with its kind (`kinds.rs`), which checks the type and the range: one typed `Settings`.
//! 4. [`ServerConfig`] is composed from those settings, with the checks that span several
//!    (the storage choice, a default above its maximum). Everything downstream takes only
//!    this validated form.
//!
//! Every bad value is a [`ConfigError`] that names where the value came from (the flag and its
//! variable, or the key and the file), the value, and what is accepted. `--help` and the
//! settings table of `docs/operations.md` are generated from the same table (`docs.rs`).
//!
//! The HTTP app's part ([`AppConfig`]: its limits, tokens and dashboard) is declared in
//! `delayq-server`, which reads no settings itself; [`ServerConfig::app`] hands it over.

#[cfg(test)]
mod docs;
mod kinds;
mod push_kinds;
mod settings;
mod sources;

use std::net::SocketAddr;
use std::path::PathBuf;

use delayq::{Limits, TaskDefaults};

pub use kinds::OtlpProtocol;
use kinds::{Choice, FsyncMode, HttpUrl, Kind, Name, StorageKind};
use settings::Settings;
use sources::{ConfigFile, Sources};

pub use delayq_beanstalk::BeanstalkAddr;
pub use delayq_log::FsyncPolicy;
pub use delayq_server::config::{AppConfig, HttpLimits, TlsConfig, TokenConfig};
pub use settings::{DEFAULT_DATA_DIR, DEFAULT_PORT};
pub use sources::ServeArgs;

/// Which storage backend the server runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StorageConfig {
    /// The durable embedded backend in `data_dir`.
    Embedded {
        /// Where the log and snapshots live.
        data_dir: PathBuf,
        /// When the log is flushed to disk (docs/design.md §4).
        fsync: FsyncPolicy,
    },
    /// Everything in memory; nothing survives a restart.
    Memory,
    /// State in Redis.
    Redis {
        /// The connection URL.
        url: String,
    },
    /// State in PostgreSQL.
    Postgres {
        /// The connection URL.
        url: String,
        /// The schema of delayq's tables.
        schema: String,
        /// The most pooled connections.
        pool_size: u32,
    },
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
    /// HTTPS on the listen address; `None` serves plain HTTP.
    pub tls: Option<TlsConfig>,
    /// The log format.
    pub log_format: LogFormat,
    /// How long a graceful shutdown waits for requests in flight.
    pub shutdown_timeout_ms: u64,
    /// With Redis: how many replicas must confirm a write before it is acknowledged (0: do
    /// not wait).
    pub redis_wait_replicas: u32,
    /// With Redis: the partition count of topics this instance creates (`None`: by the kind
    /// of deployment, see [`delayq_redis::RedisOptions::new`]).
    pub redis_partitions: Option<u32>,
    /// With Redis: how long to wait for them, in ms.
    pub redis_wait_timeout_ms: u64,
    /// The beanstalkd protocol listener; `None` when off.
    pub beanstalk: Option<BeanstalkConfig>,
    /// Whether `/` serves the web dashboard (`--no-dashboard` turns it off).
    pub dashboard: bool,
    /// Recurring schedules created or updated at start, validated.
    pub schedules: Vec<delayq::core::schedule::ScheduleDef>,
    /// Flow limits set at start, by topic, validated (docs/flow-control.md).
    pub flow_limits: Vec<(String, delayq::FlowLimits)>,
    /// Push delivery (docs/push.md).
    pub push: PushConfig,
    /// Export of delayq's spans over OTLP; `None` when off (docs/tracing.md).
    pub otlp: Option<OtlpConfig>,
}

/// Where and how delayq's spans are exported (docs/tracing.md).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OtlpConfig {
    /// The URL spans are sent to: the traces endpoint itself (`…/v1/traces`) with
    /// http/protobuf, the collector with gRPC.
    pub endpoint: String,
    /// The transport.
    pub protocol: OtlpProtocol,
    /// The share of sampled traces exported, 0 to 1.
    pub sample_ratio: f64,
    /// The spans' `service.name`.
    pub service_name: String,
    /// Most spans waiting for export before new ones are dropped.
    pub max_queue: usize,
}

impl OtlpConfig {
    /// Export to the collector at base URL `endpoint` (as `OTEL_EXPORTER_OTLP_ENDPOINT`),
    /// with the defaults of the other settings.
    pub fn new(endpoint: &str, protocol: OtlpProtocol) -> OtlpConfig {
        OtlpConfig {
            endpoint: traces_url(endpoint, protocol),
            protocol,
            sample_ratio: 1.0,
            service_name: "delayq".into(),
            max_queue: 4_096,
        }
    }
}

/// The URL spans go to from a collector's base URL: with http/protobuf the signal's path is
/// added, as the OpenTelemetry SDKs do with `OTEL_EXPORTER_OTLP_ENDPOINT`.
fn traces_url(base: &str, protocol: OtlpProtocol) -> String {
    match protocol {
        OtlpProtocol::HttpProtobuf => format!("{}/v1/traces", base.trim_end_matches('/')),
        OtlpProtocol::Grpc => base.to_owned(),
    }
}

/// Reads an environment variable; an empty value counts as unset (the OpenTelemetry
/// specification's rule).
type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// A variable of the OpenTelemetry SDKs, read as `kind` reads a flag's text.
fn otel_var<K: Kind>(env: Env<'_>, name: &str, kind: &K) -> Result<Option<K::Value>, ConfigError> {
    let Some(text) = env(name).filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    kind.read_text(&text)
        .map(Some)
        .map_err(|r| ConfigError::Invalid {
            setting: format!("{name} (environment)"),
            value: r.value,
            expected: r.expected,
        })
}

/// OTLP export from its settings; what they leave unset is taken from the variables the
/// OpenTelemetry SDKs read (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT`,
/// `OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL`, `OTEL_SERVICE_NAME`), so a deployment that
/// configures its SDKs that way configures delayq too.
fn otlp(s: &Settings, env: Env<'_>) -> Result<Option<OtlpConfig>, ConfigError> {
    let protocol_kind = Choice::<OtlpProtocol>::of();
    let protocol = if s.origin.otlp_protocol.is_given() {
        s.otlp_protocol
    } else {
        match otel_var(env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", &protocol_kind)? {
            Some(p) => p,
            None => otel_var(env, "OTEL_EXPORTER_OTLP_PROTOCOL", &protocol_kind)?
                .unwrap_or(s.otlp_protocol),
        }
    };
    let endpoint = match &s.otlp_endpoint {
        Some(base) => traces_url(base, protocol),
        None => match otel_var(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &HttpUrl)? {
            // The signal's own variable is the whole URL.
            Some(url) => url,
            None => match otel_var(env, "OTEL_EXPORTER_OTLP_ENDPOINT", &HttpUrl)? {
                Some(base) => traces_url(&base, protocol),
                None => return Ok(None),
            },
        },
    };
    let service_name = if s.origin.otlp_service_name.is_given() {
        s.otlp_service_name.clone()
    } else {
        otel_var(env, "OTEL_SERVICE_NAME", &Name)?.unwrap_or_else(|| s.otlp_service_name.clone())
    };
    Ok(Some(OtlpConfig {
        endpoint,
        protocol,
        sample_ratio: s.otlp_sample_ratio,
        service_name,
        max_queue: s.otlp_max_queue,
    }))
}

/// The push dispatcher's settings (docs/push.md).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PushConfig {
    /// Where calls may go.
    pub allow: delayq_push::AllowList,
    /// Extra CA certificates for HTTPS targets.
    pub ca_file: Option<PathBuf>,
    /// Most calls in flight over all topics.
    pub max_in_flight: usize,
    /// Targets created or updated at start.
    pub targets: Vec<delayq_push::PushTarget>,
}

impl PushConfig {
    /// The dispatcher's options from these settings.
    pub fn options(&self) -> delayq_push::PushOptions {
        let mut options = delayq_push::PushOptions::default()
            .allow(self.allow.clone())
            .max_in_flight(self.max_in_flight);
        if let Some(ca) = &self.ca_file {
            options = options.ca_file(ca);
        }
        options
    }
}

/// The beanstalkd protocol listener's settings (docs/beanstalk.md).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BeanstalkConfig {
    /// Where it listens.
    pub listen: delayq_beanstalk::BeanstalkAddr,
    /// The largest job body a `put` may send.
    pub max_job_size: u32,
    /// Most connections open at once.
    pub max_connections: usize,
    /// Time allowed for a command line, a job body, taking a reply, a TLS handshake (ms).
    pub read_timeout_ms: u64,
    /// Time a connection may send nothing outside a `reserve` (ms); 0: no limit.
    pub idle_timeout_ms: u64,
    /// Whether the listener speaks TLS with the server's certificate (`--beanstalk-tls on`).
    pub tls: bool,
}

impl BeanstalkConfig {
    /// A listener on `listen` with beanstalkd's default job size limit.
    pub fn new(listen: delayq_beanstalk::BeanstalkAddr) -> Self {
        BeanstalkConfig {
            listen,
            max_job_size: delayq_beanstalk::proto::DEFAULT_MAX_JOB_SIZE,
            max_connections: delayq_beanstalk::DEFAULT_MAX_CONNECTIONS,
            read_timeout_ms: delayq_beanstalk::DEFAULT_READ_TIMEOUT_MS,
            idle_timeout_ms: 0,
            tls: false,
        }
    }
}

impl Default for ServerConfig {
    /// The configuration of `delayq serve` with no settings given: the defaults of the
    /// settings table.
    fn default() -> Self {
        ServerConfig::from_settings(Settings::default(), &|_| None)
            .expect("the default settings are consistent (tested)")
    }
}

/// A configuration value that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A value is malformed or out of range.
    #[error("invalid value {value} for {setting}: expected {expected}")]
    Invalid {
        /// Where the value came from: `--max-batch (env DELAYQ_MAX_BATCH)` or
        /// `limits.max_batch in delayq.toml`.
        setting: String,
        /// The value as given: quoted text from a flag or variable, the TOML value as
        /// written in the file, or a description of a secret.
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
    /// The config file is not valid TOML, or a key is no setting.
    #[error("in the config file {path}: {message}")]
    ParseFile {
        /// The file.
        path: PathBuf,
        /// The key and what is wrong with it.
        message: String,
    },
}

impl ServerConfig {
    /// What the HTTP app takes of this configuration.
    pub fn app(&self) -> AppConfig {
        AppConfig {
            http: self.http,
            tokens: self.tokens.clone(),
            dashboard: delayq_server::dashboard::Options::new(self.dashboard, self.tls.is_some()),
        }
    }

    /// Reads the `--config` file (if any), applies the flags and environment over it and
    /// checks every value. See the module doc for the precedence.
    pub fn from_args(args: &ServeArgs) -> Result<ServerConfig, ConfigError> {
        let file = args.config.as_deref().map(ConfigFile::read).transpose()?;
        let sources = Sources {
            args,
            file: file.as_ref(),
        };
        let env = |name: &str| std::env::var(name).ok();
        ServerConfig::from_settings(Settings::read(&sources)?, &env)
    }

    /// Composes the configuration from checked settings: the storage, the limits of the
    /// queue and of the HTTP layer, and the checks that span several settings. Each part is
    /// composed by a function of its own below.
    /// `env` reads the OpenTelemetry variables that OTLP settings left unset fall back on.
    fn from_settings(s: Settings, env: Env<'_>) -> Result<ServerConfig, ConfigError> {
        // In the order the checks were always made, so the first error named stays the same.
        let storage = storage(&s)?;
        let limits = queue_limits(&s);
        let http = http_limits(&s)?;
        let defaults = task_defaults(&s)?;
        bodies_fit(&s, &limits, &http)?;
        let tls = tls(&s)?;
        Ok(ServerConfig {
            listen: s.listen,
            storage,
            defaults,
            beanstalk: beanstalk(&s, tls.is_some())?,
            tokens: tokens(&s)?,
            push: push(&s)?,
            schedules: schedules(&s, &limits)?,
            flow_limits: flow_limits(&s)?,
            limits,
            http,
            tls,
            log_format: s.log_format,
            shutdown_timeout_ms: s.shutdown_timeout_ms,
            redis_wait_replicas: s.redis_wait_replicas,
            redis_partitions: s.redis_partitions,
            redis_wait_timeout_ms: s.redis_wait_timeout_ms,
            dashboard: !s.no_dashboard,
            otlp: otlp(&s, env)?,
        })
    }
}

/// The queue's input limits from their settings.
fn queue_limits(s: &Settings) -> Limits {
    let mut limits = Limits::default();
    limits.max_body_bytes = s.max_body_bytes;
    limits.max_batch = s.max_batch;
    limits.max_delay_ms = s.max_delay_ms;
    limits.max_ttr_ms = s.max_ttr_ms;
    limits.max_schedule_len = s.max_schedule_len;
    limits.max_pop_count = s.max_pop_count;
    limits.max_pop_timeout_ms = s.max_pop_timeout_ms;
    limits.max_error_bytes = s.max_error_bytes;
    // The queue enforces the page size too, so every caller of the library gets the same.
    limits.max_page_size = s.max_page_size;
    limits.min_every_ms = s.min_every_ms;
    limits
}

/// The HTTP layer's limits; the default pop timeout may not exceed the maximum.
fn http_limits(s: &Settings) -> Result<HttpLimits, ConfigError> {
    Ok(HttpLimits {
        max_request_bytes: s.max_request_bytes,
        default_pop_timeout_ms: below_max(
            s.default_pop_timeout_ms,
            &s.origin.default_pop_timeout_ms,
            s.max_pop_timeout_ms,
            &s.origin.max_pop_timeout_ms,
            "default pop timeout",
        )?,
        max_long_polls: s.max_long_polls,
        max_connections: s.max_connections,
        header_read_timeout_ms: s.header_read_timeout_ms,
        idle_timeout_ms: s.idle_timeout_ms,
        body_read_timeout_ms: s.body_read_timeout_ms,
    })
}

/// The defaults of task options; the default ttr may not exceed the maximum.
fn task_defaults(s: &Settings) -> Result<TaskDefaults, ConfigError> {
    let mut defaults = TaskDefaults::default();
    defaults.ttr_ms = below_max(
        s.default_ttr_ms,
        &s.origin.default_ttr_ms,
        s.max_ttr_ms,
        &s.origin.max_ttr_ms,
        "default ttr",
    )?;
    defaults.max_retries = s.default_max_retries;
    defaults.retention_ms = s.retention_ms;
    Ok(defaults)
}

/// A task with a full body must fit in a request, and a beanstalk job in a task body.
fn bodies_fit(s: &Settings, limits: &Limits, http: &HttpLimits) -> Result<(), ConfigError> {
    if http.max_request_bytes < limits.max_body_bytes {
        return Err(ConfigError::Conflict(format!(
            "the request limit ({} bytes, {}) is smaller than the task body limit ({} bytes, \
             {}); a task with a full body could never be added",
            http.max_request_bytes,
            s.origin.max_request_bytes.name(),
            limits.max_body_bytes,
            s.origin.max_body_bytes.name(),
        )));
    }
    if s.beanstalk_listen.is_some() && s.beanstalk_max_job_size as usize > limits.max_body_bytes {
        return Err(ConfigError::Conflict(format!(
            "the beanstalk job size limit ({} bytes, {}) is larger than the task body limit \
             ({} bytes, {}); raise the body limit too",
            s.beanstalk_max_job_size,
            s.origin.beanstalk_max_job_size.name(),
            limits.max_body_bytes,
            s.origin.max_body_bytes.name(),
        )));
    }
    Ok(())
}

/// The beanstalk listener, when `--beanstalk-listen` is given; its TLS needs the server's
/// certificate (`has_tls`).
fn beanstalk(s: &Settings, has_tls: bool) -> Result<Option<BeanstalkConfig>, ConfigError> {
    let tls = s.beanstalk_tls == kinds::BeanstalkTls::On;
    if tls && !has_tls {
        return Err(ConfigError::Conflict(format!(
            "{} is on but no certificate is given; the beanstalk listener uses the \
             certificate and key of {} and {}",
            s.origin.beanstalk_tls.name(),
            s.origin.tls_cert.name(),
            s.origin.tls_key.name(),
        )));
    }
    Ok(s.beanstalk_listen.clone().map(|listen| BeanstalkConfig {
        listen,
        max_job_size: s.beanstalk_max_job_size,
        max_connections: s.beanstalk_max_connections,
        read_timeout_ms: s.beanstalk_read_timeout_ms,
        idle_timeout_ms: s.beanstalk_idle_timeout_ms,
        tls,
    }))
}

/// The push dispatcher's settings.
fn push(s: &Settings) -> Result<PushConfig, ConfigError> {
    Ok(PushConfig {
        // Checked when read (the kind).
        allow: delayq_push::AllowList::parse(&s.push_allow).map_err(|reason| {
            ConfigError::Invalid {
                setting: s.origin.push_allow.name().to_owned(),
                value: s.push_allow.join(","),
                expected: reason,
            }
        })?,
        ca_file: s.push_ca_file.clone(),
        max_in_flight: s.push_max_in_flight,
        targets: s.push_targets.clone(),
    })
}

/// Checks each configured topic's flow limits as `POST /limits` would, naming the field.
fn flow_limits(s: &Settings) -> Result<Vec<(String, delayq::FlowLimits)>, ConfigError> {
    let mut out: Vec<(String, delayq::FlowLimits)> = Vec::with_capacity(s.flow_limits.len());
    for (i, req) in s.flow_limits.iter().enumerate() {
        let refuse = |field: String, reason: String| ConfigError::Invalid {
            setting: format!("{}[{i}].{field}", s.origin.flow_limits.name()),
            value: req.topic.clone(),
            expected: reason,
        };
        delayq::core::validate::check_topic(&req.topic).map_err(|e| refuse(e.field, e.reason))?;
        let limits = req.limits().map_err(|e| refuse(e.field, e.reason))?;
        if out.iter().any(|(t, _)| *t == req.topic) {
            return Err(ConfigError::Conflict(format!(
                "the flow limits of topic {:?} are given twice in {}",
                req.topic,
                s.origin.flow_limits.name()
            )));
        }
        out.push((req.topic.clone(), limits));
    }
    Ok(out)
}

/// Checks each configured schedule as `POST /schedules` would, naming the schedule and field.
fn schedules(
    s: &Settings,
    limits: &Limits,
) -> Result<Vec<delayq::core::schedule::ScheduleDef>, ConfigError> {
    let mut out = Vec::with_capacity(s.schedules.len());
    for (i, req) in s.schedules.iter().enumerate() {
        let refuse = |field: String, reason: String| ConfigError::Invalid {
            setting: format!("{}[{i}].{field}", s.origin.schedules.name()),
            value: format!("{}/{}", req.topic, req.name),
            expected: reason,
        };
        let def = req
            .clone()
            .into_def()
            .map_err(|e| refuse(e.field, e.reason))?;
        let checked = delayq::core::schedule::validate_schedule(def, limits)
            .map_err(|e| refuse(e.field, e.reason))?;
        if out.iter().any(|d: &delayq::core::schedule::ScheduleDef| {
            d.topic == checked.def.topic && d.name == checked.def.name
        }) {
            return Err(ConfigError::Conflict(format!(
                "the schedule {:?} of topic {:?} is given twice in {}",
                checked.def.name,
                checked.def.topic,
                s.origin.schedules.name()
            )));
        }
        out.push(checked.def);
    }
    Ok(out)
}

/// A default that must not exceed its maximum: when not given, it follows a lowered maximum
/// instead of contradicting it; when given above the maximum, that is a conflict.
fn below_max(
    value: u64,
    origin: &settings::Origin,
    max: u64,
    max_origin: &settings::Origin,
    what: &str,
) -> Result<u64, ConfigError> {
    if value <= max {
        return Ok(value);
    }
    if !origin.is_given() {
        return Ok(max);
    }
    Err(ConfigError::Conflict(format!(
        "the {what} ({value} ms, {}) is longer than the maximum ({max} ms, {})",
        origin.name(),
        max_origin.name()
    )))
}

/// The tokens that may write and those that may only read, in one list. A token given twice
/// is refused: which of its scopes applies would otherwise be a guess.
fn tokens(s: &Settings) -> Result<Vec<TokenConfig>, ConfigError> {
    let all: Vec<(TokenConfig, &settings::Origin)> = (s.auth_tokens.iter())
        .map(|t| (t.clone(), &s.origin.auth_tokens))
        .chain(
            s.read_only_tokens
                .iter()
                .map(|t| (t.clone().read_only(), &s.origin.read_only_tokens)),
        )
        .collect();
    for (i, (token, origin)) in all.iter().enumerate() {
        if let Some((_, first)) = all[..i].iter().find(|(t, _)| t.token == token.token) {
            let places = if first.name() == origin.name() {
                format!("twice in {}", origin.name())
            } else {
                format!("in {} and in {}", first.name(), origin.name())
            };
            // Never the secret itself.
            return Err(ConfigError::Conflict(format!(
                "a token of {} bytes is given {places}; give each token once",
                token.token.len()
            )));
        }
    }
    Ok(all.into_iter().map(|(t, _)| t).collect())
}

/// TLS needs both the certificate and its key; either alone is a mistake, not plain HTTP.
fn tls(s: &Settings) -> Result<Option<TlsConfig>, ConfigError> {
    match (&s.tls_cert, &s.tls_key) {
        (Some(cert), Some(key)) => Ok(Some(TlsConfig::new(cert, key))),
        (None, None) => Ok(None),
        (Some(_), None) | (None, Some(_)) => {
            let (given, missing) = if s.tls_cert.is_some() {
                (&s.origin.tls_cert, &s.origin.tls_key)
            } else {
                (&s.origin.tls_key, &s.origin.tls_cert)
            };
            Err(ConfigError::Conflict(format!(
                "{} is given but {} is not; TLS needs both the certificate and its key (give \
                 neither for plain HTTP)",
                given.name(),
                missing.name()
            )))
        }
    }
}

/// Picks the storage backend: `--redis` alone selects Redis, `--postgres` alone PostgreSQL,
/// `--storage` names any backend, and naming another backend together with a Redis or
/// PostgreSQL URL (or both URLs) is a conflict.
fn storage(s: &Settings) -> Result<StorageConfig, ConfigError> {
    let fsync = match s.fsync {
        FsyncMode::Always => FsyncPolicy::Always,
        FsyncMode::Interval => {
            FsyncPolicy::Interval(std::time::Duration::from_millis(s.fsync_interval_ms))
        }
        FsyncMode::Never => FsyncPolicy::Never,
    };
    if s.redis.is_some() && s.postgres.is_some() {
        return Err(ConfigError::Conflict(format!(
            "{} and {} both give a storage URL; use one",
            s.origin.redis.name(),
            s.origin.postgres.name()
        )));
    }
    let kind = match (s.storage, &s.redis, &s.postgres) {
        (StorageKind::Embedded, Some(_), _) if !s.origin.storage.is_given() => StorageKind::Redis,
        (StorageKind::Embedded, _, Some(_)) if !s.origin.storage.is_given() => {
            StorageKind::Postgres
        }
        (kind, _, _) => kind,
    };
    match (kind, &s.redis, &s.postgres) {
        (StorageKind::Redis, Some(url), None) => Ok(StorageConfig::Redis { url: url.clone() }),
        (StorageKind::Redis, None, _) => Err(ConfigError::Conflict(format!(
            "{} is \"redis\" but no --redis URL is given",
            s.origin.storage.name()
        ))),
        (StorageKind::Postgres, None, Some(url)) => Ok(StorageConfig::Postgres {
            url: url.clone(),
            schema: s.postgres_schema.clone(),
            pool_size: s.postgres_pool_size,
        }),
        (StorageKind::Postgres, _, None) => Err(ConfigError::Conflict(format!(
            "{} is \"postgres\" but no --postgres URL is given",
            s.origin.storage.name()
        ))),
        (_, Some(_), _) => Err(ConfigError::Conflict(format!(
            "{} names another backend but {} gives a Redis URL; use one",
            s.origin.storage.name(),
            s.origin.redis.name()
        ))),
        (_, _, Some(_)) => Err(ConfigError::Conflict(format!(
            "{} names another backend but {} gives a PostgreSQL URL; use one",
            s.origin.storage.name(),
            s.origin.postgres.name()
        ))),
        (StorageKind::Embedded, None, None) => Ok(StorageConfig::Embedded {
            data_dir: s.data_dir.clone(),
            fsync,
        }),
        (StorageKind::Memory, None, None) => Ok(StorageConfig::Memory),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    /// Resolves a configuration from flags only (the variables of the test process are
    /// not `DELAYQ_*`; the environment cases run in a child in `tests/config_serve.rs`).
    fn resolve(argv: &[&str]) -> Result<ServerConfig, ConfigError> {
        let mut all = vec!["serve"];
        all.extend(argv);
        ServerConfig::from_args(&Cli::try_parse_from(all).expect("flags parse").serve)
    }

    fn resolve_file(text: &str) -> Result<ServerConfig, ConfigError> {
        let file = ConfigFile::parse(text, std::path::Path::new("delayq.toml"))?;
        let args = ServeArgs::default();
        let sources = Sources {
            args: &args,
            file: Some(&file),
        };
        ServerConfig::from_settings(Settings::read(&sources)?, &|_| None)
    }

    type Flags<'a> = &'a [&'a str];
    type Vars<'a> = &'a [(&'a str, &'a str)];

    /// Resolves flags with `env` as the OpenTelemetry variables.
    fn resolve_otel(argv: &[&str], env: &[(&str, &str)]) -> Result<ServerConfig, ConfigError> {
        let mut all = vec!["serve"];
        all.extend(argv);
        let args = Cli::try_parse_from(all).expect("flags parse").serve;
        let sources = Sources {
            args: &args,
            file: None,
        };
        let lookup = |name: &str| {
            env.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        };
        ServerConfig::from_settings(Settings::read(&sources)?, &lookup)
    }

    #[test]
    fn otlp_export_from_flags_then_the_sdk_variables() {
        use OtlpProtocol::{Grpc, HttpProtobuf};
        const RATIO: Flags<'_> = &[
            "--otlp-endpoint",
            "http://c",
            "--otlp-sample-ratio",
            "0.25",
            "--otlp-max-queue",
            "10",
        ];
        type Want<'a> = Option<(&'a str, OtlpProtocol, &'a str)>;
        let table: [(Flags<'_>, Vars<'_>, Want<'_>); 9] = [
            (&[], &[], None),
            // An empty variable counts as unset.
            (&[], &[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")], None),
            (
                &["--otlp-endpoint", "http://c:4318/"],
                &[],
                Some(("http://c:4318/v1/traces", HttpProtobuf, "delayq")),
            ),
            (
                &[],
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_SERVICE_NAME", "shop-queue"),
                ],
                Some(("http://c:4318/v1/traces", HttpProtobuf, "shop-queue")),
            ),
            // The signal's own variable is the whole URL, and wins over the general one.
            (
                &[],
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://d/spans"),
                ],
                Some(("http://d/spans", HttpProtobuf, "delayq")),
            ),
            (
                &[],
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ],
                Some(("http://c:4317", Grpc, "delayq")),
            ),
            // Flags win over variables.
            (
                &[
                    "--otlp-endpoint",
                    "http://flag:4317",
                    "--otlp-protocol",
                    "grpc",
                    "--otlp-service-name",
                    "q",
                ],
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
                    ("OTEL_SERVICE_NAME", "env"),
                ],
                Some(("http://flag:4317", Grpc, "q")),
            ),
            (
                &["--otlp-endpoint", "http://c:4318"],
                &[
                    ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
                ],
                Some(("http://c:4318", Grpc, "delayq")),
            ),
            (
                RATIO,
                &[],
                Some(("http://c/v1/traces", HttpProtobuf, "delayq")),
            ),
        ];
        for (argv, env, want) in table {
            let got = resolve_otel(argv, env).unwrap().otlp;
            let got = got
                .as_ref()
                .map(|o| (o.endpoint.as_str(), o.protocol, o.service_name.as_str()));
            assert_eq!(got, want, "{argv:?} {env:?}");
        }
        let o = resolve_otel(RATIO, &[]).unwrap().otlp.unwrap();
        assert_eq!((o.sample_ratio, o.max_queue), (0.25, 10));
    }

    #[test]
    fn bad_otlp_settings_and_variables_are_named() {
        let table: [(Flags<'_>, Vars<'_>, &str); 8] = [
            (&["--otlp-endpoint", "ftp://c"], &[], "--otlp-endpoint"),
            (&["--otlp-endpoint", "https://c"], &[], "--otlp-endpoint"),
            (&["--otlp-endpoint", "http://"], &[], "--otlp-endpoint"),
            (&["--otlp-sample-ratio", "1.5"], &[], "--otlp-sample-ratio"),
            (&["--otlp-sample-ratio", "NaN"], &[], "--otlp-sample-ratio"),
            (&["--otlp-protocol", "http/json"], &[], "--otlp-protocol"),
            (
                &[],
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "c:4318")],
                "OTEL_EXPORTER_OTLP_ENDPOINT (environment)",
            ),
            (
                &[],
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
                ],
                "OTEL_EXPORTER_OTLP_PROTOCOL (environment)",
            ),
        ];
        for (argv, env, named) in table {
            let err = resolve_otel(argv, env).unwrap_err().to_string();
            assert!(err.contains(named), "{argv:?} {env:?}: {err}");
        }
    }

    #[test]
    fn no_dashboard_is_a_switch_from_every_source() {
        assert!(resolve(&[]).unwrap().dashboard);
        assert!(!resolve(&["--no-dashboard"]).unwrap().dashboard);
        assert!(!resolve(&["--no-dashboard=true"]).unwrap().dashboard);
        assert!(resolve(&["--no-dashboard=false"]).unwrap().dashboard);
        assert!(!resolve_file("no_dashboard = true").unwrap().dashboard);
        let err = resolve(&["--no-dashboard=maybe"]).unwrap_err().to_string();
        assert!(
            err.contains("--no-dashboard") && err.contains("true or false"),
            "{err}"
        );
        let err = resolve_file("no_dashboard = \"yes\"")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no_dashboard") && err.contains("true or false"),
            "{err}"
        );
    }

    #[test]
    fn defaults_match_the_design() {
        let c = resolve(&[]).unwrap();
        assert_eq!(c, ServerConfig::default());
        assert_eq!(c.listen.to_string(), "127.0.0.1:9280");
        assert_eq!(c.http.default_pop_timeout_ms, 30_000);
        assert_eq!(c.limits.max_pop_timeout_ms, 60_000);
        assert_eq!(
            c.limits,
            Limits::default(),
            "the library's limits are the defaults"
        );
        assert_eq!(c.defaults, TaskDefaults::default());
        assert_eq!(
            c.storage,
            StorageConfig::Embedded {
                data_dir: PathBuf::from(DEFAULT_DATA_DIR),
                fsync: FsyncPolicy::Interval(std::time::Duration::from_millis(10)),
            }
        );
    }

    #[test]
    fn file_values_of_the_wrong_type_name_the_key_and_the_range() {
        let table = [
            ("listen = 5", "listen in delayq.toml", "127.0.0.1:9280"),
            (
                "[limits]\nmax_batch = \"many\"",
                "limits.max_batch in",
                "1 to 100000",
            ),
            (
                "[defaults]\nmax_retries = 1.5",
                "defaults.max_retries in",
                "-1 (no limit)",
            ),
            ("fsync = true", "fsync in", "always, interval, never"),
            (
                "[limits.max_batch]\nx = 1",
                "limits.max_batch in",
                "1 to 100000",
            ),
            ("[[tokens]]\ntoken = 7", "tokens[0].token in", "a string"),
        ];
        for (text, setting, range) in table {
            let msg = resolve_file(text).unwrap_err().to_string();
            assert!(
                msg.contains(setting) && msg.contains(range),
                "{text:?}: {msg}"
            );
        }
        let c = resolve_file("[defaults]\nmax_retries = -1\n[[tokens]]\ntoken = \"t\"").unwrap();
        assert_eq!(c.defaults.max_retries, delayq::MaxRetries::Unlimited);
        assert_eq!(c.tokens, vec![TokenConfig::new("t")]);
    }

    #[test]
    fn redis_wait_settings() {
        let plain = resolve(&[]).unwrap();
        assert_eq!(
            (plain.redis_wait_replicas, plain.redis_wait_timeout_ms),
            (0, 500)
        );
        let c = resolve(&[
            "--redis",
            "redis+cluster://127.0.0.1:7000,127.0.0.1:7001",
            "--redis-wait-replicas",
            "1",
            "--redis-wait-timeout-ms",
            "250",
        ])
        .unwrap();
        assert_eq!((c.redis_wait_replicas, c.redis_wait_timeout_ms), (1, 250));
        let c = resolve_file("redis_wait_replicas = 2").unwrap();
        assert_eq!(c.redis_wait_replicas, 2);
        let msg = resolve(&["--redis-wait-timeout-ms", "5000"])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("--redis-wait-timeout-ms") && msg.contains("DELAYQ_REDIS_WAIT_TIMEOUT_MS"),
            "{msg}"
        );
    }

    #[test]
    fn beanstalk_limits_and_tls_are_read_and_tls_needs_the_certificate() {
        let c = resolve(&["--beanstalk-listen", "127.0.0.1:11300"]).unwrap();
        let b = c.beanstalk.unwrap();
        assert_eq!(
            (
                b.max_connections,
                b.read_timeout_ms,
                b.idle_timeout_ms,
                b.tls
            ),
            (10_000, 30_000, 0, false)
        );
        let c = resolve(&[
            "--beanstalk-listen",
            "127.0.0.1:11300",
            "--beanstalk-max-connections",
            "5",
            "--beanstalk-read-timeout-ms",
            "700",
            "--beanstalk-idle-timeout-ms",
            "9000",
            "--beanstalk-tls",
            "on",
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
        ])
        .unwrap();
        let b = c.beanstalk.unwrap();
        assert_eq!(
            (
                b.max_connections,
                b.read_timeout_ms,
                b.idle_timeout_ms,
                b.tls
            ),
            (5, 700, 9000, true)
        );
        let msg = resolve(&[
            "--beanstalk-listen",
            "127.0.0.1:11300",
            "--beanstalk-tls",
            "on",
        ])
        .unwrap_err()
        .to_string();
        assert!(
            msg.contains("--beanstalk-tls") && msg.contains("--tls-cert"),
            "{msg}"
        );
        let msg = resolve(&["--beanstalk-read-timeout-ms", "0"])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("--beanstalk-read-timeout-ms"), "{msg}");
    }

    #[test]
    fn tls_needs_both_files_or_neither() {
        assert_eq!(resolve(&[]).unwrap().tls, None);
        let c = resolve(&["--tls-cert", "c.pem", "--tls-key", "k.pem"]).unwrap();
        assert_eq!(c.tls, Some(TlsConfig::new("c.pem", "k.pem")));
        let c = resolve_file("[tls]\ncert = \"/etc/delayq/c.pem\"\nkey = \"/etc/delayq/k.pem\"")
            .unwrap();
        assert_eq!(
            c.tls,
            Some(TlsConfig::new("/etc/delayq/c.pem", "/etc/delayq/k.pem"))
        );
        for (argv, given, missing) in [
            (&["--tls-cert", "c.pem"], "--tls-cert", "--tls-key"),
            (&["--tls-key", "k.pem"], "--tls-key", "--tls-cert"),
        ] {
            let msg = resolve(argv).unwrap_err().to_string();
            assert!(
                msg.contains(&format!("{given} (env DELAYQ_")) && msg.contains(missing),
                "{msg}"
            );
        }
        let msg = resolve_file("[tls]\nkey = \"k.pem\"")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("tls.key in delayq.toml") && msg.contains("--tls-cert"),
            "{msg}"
        );
        let msg = resolve(&["--tls-cert", " "]).unwrap_err().to_string();
        assert!(msg.contains("a file path"), "{msg}");
    }

    #[test]
    fn read_only_tokens_join_the_others_and_no_token_is_given_twice() {
        let c = resolve(&[
            "--auth-token",
            "writer",
            "--read-only-token",
            "reader@orders",
            "--read-only-token",
            "auditor",
        ])
        .unwrap();
        assert_eq!(
            c.tokens,
            vec![
                TokenConfig::new("writer"),
                TokenConfig::for_topics("reader", vec!["orders".into()]).read_only(),
                TokenConfig::new("auditor").read_only(),
            ]
        );
        let c = resolve_file("[[read_only_tokens]]\ntoken = \"r\"\ntopics = [\"a\"]").unwrap();
        assert_eq!(
            c.tokens,
            vec![TokenConfig::for_topics("r", vec!["a".into()]).read_only()]
        );
        let table: [(&[&str], &str); 2] = [
            (
                &["--auth-token", "same", "--read-only-token", "same@a"],
                "in --auth-token (env DELAYQ_AUTH_TOKENS) and in --read-only-token",
            ),
            (
                &["--auth-token", "same", "--auth-token", "same@a"],
                "twice in --auth-token",
            ),
        ];
        for (argv, want) in table {
            let msg = resolve(argv).unwrap_err().to_string();
            assert!(msg.contains(want), "{argv:?}: {msg}");
            assert!(!msg.contains("same"), "the secret is not echoed: {msg}");
        }
    }

    #[test]
    fn storage_selection() {
        let table: [(&[&str], Result<&str, &str>); 17] = [
            (&["--storage", "memory"], Ok("Memory")),
            (&["--redis", "redis://localhost:6379"], Ok("Redis")),
            (&["--storage", "redis", "--redis", "redis://x"], Ok("Redis")),
            (&["--fsync", "always"], Ok("Always")),
            (
                &["--storage", "memory", "--redis", "redis://x"],
                Err("use one"),
            ),
            (&["--storage", "redis"], Err("no --redis URL")),
            (&["--redis", "http://x"], Err("rediss://")),
            (
                &["--postgres", "postgres://u@localhost/app"],
                Ok(
                    "Postgres { url: \"postgres://u@localhost/app\", schema: \"delayq\", pool_size: 16",
                ),
            ),
            (
                &[
                    "--storage",
                    "postgres",
                    "--postgres",
                    "postgresql://h/db",
                    "--postgres-schema",
                    "jobs_2",
                    "--postgres-pool-size",
                    "4",
                ],
                Ok("schema: \"jobs_2\", pool_size: 4"),
            ),
            (&["--storage", "postgres"], Err("no --postgres URL")),
            (
                &["--storage", "memory", "--postgres", "postgres://h/db"],
                Err("gives a PostgreSQL URL; use one"),
            ),
            (
                &["--redis", "redis://x", "--postgres", "postgres://h/db"],
                Err("both give a storage URL"),
            ),
            (&["--postgres", "mysql://h/db"], Err("postgres://")),
            (
                &[
                    "--postgres",
                    "postgres://h/db?sslmode=verify-full&sslrootcert=/etc/ca.pem",
                ],
                Ok("sslmode=verify-full&sslrootcert=/etc/ca.pem"),
            ),
            (
                &["--postgres", "postgres://h/db?sslmode=strict"],
                Err("sslmode=disable, prefer"),
            ),
            (
                &[
                    "--postgres",
                    "postgres://h/db",
                    "--postgres-schema",
                    "Bad-Name",
                ],
                Err("--postgres-schema"),
            ),
            (
                &["--postgres", "postgres://h/db", "--postgres-pool-size", "0"],
                Err("--postgres-pool-size"),
            ),
        ];
        for (argv, want) in table {
            match (resolve(argv), want) {
                (Ok(c), Ok(w)) => assert!(format!("{:?}", c.storage).contains(w), "{argv:?}"),
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{argv:?}: {e}"),
                (got, want) => panic!("{argv:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn defaults_follow_a_lowered_maximum_and_refuse_to_exceed_a_given_one() {
        let c = resolve(&["--max-pop-timeout-ms", "5000", "--max-ttr-ms", "1000"]).unwrap();
        assert_eq!(c.http.default_pop_timeout_ms, 5_000);
        assert_eq!(c.defaults.ttr_ms, 1_000);
        let msg = resolve(&["--default-ttr-ms", "2000", "--max-ttr-ms", "1000"])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("--default-ttr-ms") && msg.contains("--max-ttr-ms"),
            "{msg}"
        );
        let msg = resolve(&["--max-request-bytes", "2048", "--max-body-bytes", "4096"])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("--max-request-bytes") && msg.contains("--max-body-bytes"),
            "{msg}"
        );
    }

    #[test]
    fn flow_limits_come_from_the_file_and_flags_and_are_checked() {
        let c = resolve_file(
            "[[flow_limits]]\ntopic = \"pay\"\nmax_active_per_key = 5\nrate_per_s = 50\n\n[[flow_limits]]\ntopic = \"mail\"\nmax_active = 2\n",
        )
        .unwrap();
        assert_eq!(
            c.flow_limits,
            [
                (
                    "pay".to_owned(),
                    delayq::FlowLimits::default()
                        .with_max_active_per_key(5)
                        .with_rate(50.0, None)
                ),
                ("mail".to_owned(), delayq::FlowLimits::max_active(2)),
            ]
        );
        let c = resolve(&["--flow-limit", r#"{"topic": "t", "max_active": 3}"#]).unwrap();
        assert_eq!(
            c.flow_limits,
            [("t".to_owned(), delayq::FlowLimits::max_active(3))]
        );
        let table = [
            (
                "[[flow_limits]]\ntopic = \"t\"\nmax_active = 0",
                "flow_limits in delayq.toml[0].max_active",
            ),
            ("[[flow_limits]]\ntopic = \"t\"\nburst = 3", "[0].burst"),
            ("[[flow_limits]]\ntopic = \"t\"", "[0].max_active"),
            (
                "[[flow_limits]]\ntopic = \"a b\"\nmax_active = 1",
                "[0].topic",
            ),
            (
                "[[flow_limits]]\ntopic = \"t\"\nmax_actve = 1",
                "[0].max_actve",
            ),
            (
                "[[flow_limits]]\ntopic = \"t\"\nmax_active = -1",
                "flow_limits[0] in delayq.toml",
            ),
            (
                "[[flow_limits]]\ntopic = \"t\"\nmax_active = 1\n[[flow_limits]]\ntopic = \"t\"\nmax_active = 2",
                "given twice",
            ),
        ];
        for (text, want) in table {
            let msg = resolve_file(text).unwrap_err().to_string();
            assert!(msg.contains(want), "{text:?}: {msg}");
        }
    }

    #[test]
    fn schedules_come_from_the_file_and_flags_and_are_checked() {
        let c = resolve_file(
            "[limits]\nmin_every_ms = 500\n\n[[schedules]]\ntopic = \"reports\"\nname = \"daily\"\ncron = \"30 2 * * *\"\ntimezone = \"Europe/Berlin\"\nbody = \"go  now\"\n\n[[schedules]]\ntopic = \"beat\"\nname = \"half\"\nevery_ms = 500\n",
        )
        .unwrap();
        assert_eq!(c.schedules.len(), 2);
        assert_eq!(c.schedules[0].body, b"go  now".to_vec());
        assert_eq!(c.schedules[1].every_ms, Some(500));
        // A flag's JSON survives the space-splitting of repeatable settings, runs of spaces
        // in strings included.
        let c = resolve(&[
            "--schedule",
            r#"{"topic": "t", "name": "a", "every_ms": 1000, "body": "x  y"}"#,
            "--schedule",
            r#"{"topic": "t", "name": "b", "cron": "@hourly"}"#,
        ])
        .unwrap();
        assert_eq!(c.schedules.len(), 2);
        assert_eq!(c.schedules[0].body, b"x  y".to_vec());
        let table = [
            (
                "[[schedules]]\ntopic = \"t\"\nname = \"n\"\ncron = \"99 * * * *\"",
                "schedules in delayq.toml[0].cron",
            ),
            (
                "[[schedules]]\ntopic = \"t\"\nname = \"n\"\nevery_ms = 10",
                "schedules in delayq.toml[0].every_ms",
            ),
            (
                "[[schedules]]\ntopic = \"t\"\nname = \"n\"\ncron = \"@daily\"\ntimezone = \"Nowhere/City\"",
                "[0].timezone",
            ),
            (
                "[[schedules]]\ntopic = \"t\"\nname = \"a@b\"\nevery_ms = 1000",
                "[0].name",
            ),
            (
                "[[schedules]]\ntopic = \"t\"\nname = \"n\"\nevery_ms = -1",
                "schedules[0] in delayq.toml",
            ),
            (
                "[[schedules]]\ntopic = \"t\"\nname = \"n\"\nevery_ms = 1000\n[[schedules]]\ntopic = \"t\"\nname = \"n\"\nevery_ms = 2000",
                "given twice",
            ),
        ];
        for (text, want) in table {
            let msg = resolve_file(text).unwrap_err().to_string();
            assert!(msg.contains(want), "{text:?}: {msg}");
        }
    }
}
