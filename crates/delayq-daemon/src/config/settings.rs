//! The settings table of `delayq serve`: each setting declared once.
//!
//! One entry names a setting's field and type, its default, its flag, environment variable
//! and TOML key, and the kind of value it accepts (with the range); its doc comment is the
//! help text. The [`settings!`] macro turns the table into the checked [`Settings`] (one typed
//! field per entry, like ripgrep's `LowArgs`), the [`Origins`] that say where each value came
//! from, and the [`reference`] that the flags, the file's key check, `--help` and the docs
//! table are built from. [`super::ServerConfig`] is then composed from [`Settings`].
//!
//! Adding a setting takes one entry here (the compiler checks that the default, the kind and
//! the field type agree) and, to have an effect, reading its field where [`super::ServerConfig`]
//! is composed (`from_settings` and the part functions it calls, in `mod.rs`), plus the field
//! of `ServerConfig` that carries it. The flag, the variable, the file key, `--help` follow from
//! the entry; the table of `docs/operations.md` is rewritten by its test with
//! `DELAYQ_UPDATE_DOCS=1` (`docs.rs`).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;

use delayq::core::validate::TEN_YEARS_MS;
use delayq::{Limits, MaxRetries, TaskDefaults};

use super::kinds::{
    Addr, BeanstalkListen, BeanstalkTls, Choice, FLOW_LIMITS, FsPath, FsyncMode, HttpUrl, Int,
    Kind, Name, Optional, OtlpProtocol, PostgresUrl, Ratio, RedisUrl, Retries, SCHEDULES,
    SchemaName, StorageKind, Switch, Tokens,
};
use super::push_kinds::{PushAllow, PushTargets};
use super::sources::{Names, Sources};
use super::{ConfigError, LogFormat, TokenConfig};

/// The default data directory of the embedded backend (also of `delayq data`).
pub const DEFAULT_DATA_DIR: &str = "./delayq-data";

/// The default port; the default address is loopback only (docs/design.md §5).
pub const DEFAULT_PORT: u16 = 9280;

const MIB: u64 = 1 << 20;

/// The queue library's limits, whose defaults the limit settings take.
fn limits() -> Limits {
    Limits::default()
}

/// The queue library's task defaults, whose values the default settings take.
fn defaults() -> TaskDefaults {
    TaskDefaults::default()
}

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Not given: the default. Holds the flag, to name the setting in messages.
    Default(&'static str),
    /// Given; holds the flag and variable, or the key and file.
    Given(String),
}

impl Origin {
    /// Whether the value was given rather than defaulted.
    pub fn is_given(&self) -> bool {
        matches!(self, Origin::Given(_))
    }

    /// Names the setting as the user set it, or by its flag when defaulted.
    pub fn name(&self) -> &str {
        match self {
            Origin::Default(flag) => flag,
            Origin::Given(source) => source,
        }
    }
}

/// One setting's names, help and default, as text.
#[derive(Debug, Clone)]
pub(crate) struct Meta {
    /// Its names in each source.
    pub names: Names,
    /// What it does (the doc comment of its entry).
    pub doc: String,
    /// The flag's placeholder: `MS`, `ADDR`.
    pub value_name: String,
    /// What it accepts, with the range.
    pub accepts: String,
    /// The default, shown; empty when there is none to show.
    pub default: String,
    /// Whether the flag may be repeated.
    pub repeated: bool,
    /// Whether values are secrets.
    pub secret: bool,
    /// Whether the flag may be given alone, meaning `true`.
    pub switch: bool,
}

impl Meta {
    fn new<K: Kind>(names: Names, doc: &[&str], kind: &K, default: &K::Value) -> Meta {
        let doc: Vec<&str> = doc.iter().map(|line| line.trim()).collect();
        Meta {
            names,
            doc: doc.join(" "),
            value_name: kind.value_name(),
            accepts: kind.accepts(),
            default: kind.show(default),
            repeated: kind.repeated(),
            secret: kind.secret(),
            switch: kind.switch(),
        }
    }
}

/// Declares the settings table; see the module doc. Each entry is
/// `field: Type = default; "flag", "ENV", "toml.key", kind;` under its doc comment.
macro_rules! settings {
    ($(
        $(#[doc = $doc:literal])*
        $field:ident: $ty:ty = $default:expr;
            $flag:literal, $env:literal, $key:literal, $kind:expr;
    )*) => {
        /// Every setting, read by precedence and checked on its own.
        #[derive(Debug, Clone)]
        pub(crate) struct Settings {
            $( $(#[doc = $doc])* pub $field: $ty, )*
            /// Where each value came from.
            pub origin: Origins,
        }

        /// Where each setting's value came from, field by field.
        #[derive(Debug, Clone)]
        pub(crate) struct Origins {
            $( #[doc = concat!("Where `", stringify!($field), "` came from.")] pub $field: Origin, )*
        }

        impl Default for Settings {
            fn default() -> Self {
                Settings {
                    $( $field: $default, )*
                    origin: Origins { $( $field: Origin::Default(concat!("--", $flag)), )* },
                }
            }
        }

        impl Settings {
            /// Reads every setting from `src` (flag > environment > file > default) and
            /// checks each against its kind.
            pub(crate) fn read(src: &Sources<'_>) -> Result<Settings, ConfigError> {
                let mut s = Settings::default();
                $(
                    let names = Names::new(stringify!($field), $flag, $env, $key);
                    if let Some((value, origin)) = src.pick(&names, &$kind)? {
                        s.$field = value;
                        s.origin.$field = Origin::Given(origin);
                    }
                )*
                Ok(s)
            }
        }

        /// The names, help and default of every setting, in table order.
        pub(crate) fn reference() -> Vec<Meta> {
            vec![$(
                Meta::new(
                    Names::new(stringify!($field), $flag, $env, $key),
                    &[$($doc),*],
                    &$kind,
                    &$default,
                ),
            )*]
        }
    };
}

settings! {
    /// Address to listen on.
    listen: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, DEFAULT_PORT));
        "listen", "DELAYQ_LISTEN", "listen", Addr;
    /// Also speak beanstalkd's text protocol (1.12) on this address (`IP:PORT` or
    /// `unix:PATH`); off unless given. See docs/beanstalk.md.
    beanstalk_listen: Option<delayq_beanstalk::BeanstalkAddr> = None;
        "beanstalk-listen", "DELAYQ_BEANSTALK_LISTEN", "beanstalk.listen", Optional(BeanstalkListen);
    /// The largest job body a beanstalk `put` may send (beanstalkd's `-z`); never above
    /// `--max-body-bytes`.
    beanstalk_max_job_size: u32 = delayq_beanstalk::proto::DEFAULT_MAX_JOB_SIZE;
        "beanstalk-max-job-size", "DELAYQ_BEANSTALK_MAX_JOB_SIZE", "beanstalk.max_job_size", Int::bytes(0, 64 * MIB);
    /// Most beanstalk connections open at once; one past it is accepted and closed at once
    /// (beanstalkd has no "busy" reply). Counted apart from `--max-connections`.
    beanstalk_max_connections: usize = delayq_beanstalk::DEFAULT_MAX_CONNECTIONS;
        "beanstalk-max-connections", "DELAYQ_BEANSTALK_MAX_CONNECTIONS", "beanstalk.max_connections", Int::count(1, 1_000_000);
    /// How long a beanstalk client may take to send a command line (from its first byte), a
    /// job body (from the end of its `put` line), to take a reply, or to finish the TLS
    /// handshake; a slower connection is closed (a cut `put` adds nothing).
    beanstalk_read_timeout_ms: u64 = delayq_beanstalk::DEFAULT_READ_TIMEOUT_MS;
        "beanstalk-read-timeout-ms", "DELAYQ_BEANSTALK_READ_TIMEOUT_MS", "beanstalk.read_timeout_ms", Int::ms(1, 3_600_000);
    /// How long a beanstalk connection may send nothing while not in a `reserve` before it
    /// is closed (giving back its jobs); 0 never closes it, as beanstalkd.
    beanstalk_idle_timeout_ms: u64 = 0;
        "beanstalk-idle-timeout-ms", "DELAYQ_BEANSTALK_IDLE_TIMEOUT_MS", "beanstalk.idle_timeout_ms", Int::ms(0, 86_400_000);
    /// `on`: the beanstalk listener speaks TLS with the certificate and key of `--tls-cert`
    /// and `--tls-key` (which it then needs). Off by default, as most beanstalk clients
    /// speak plain TCP only.
    beanstalk_tls: BeanstalkTls = BeanstalkTls::Off;
        "beanstalk-tls", "DELAYQ_BEANSTALK_TLS", "beanstalk.tls", Choice::<BeanstalkTls>::of();
    /// Storage backend: `embedded` (durable), `memory` (nothing survives a restart),
    /// `redis` (also given by `--redis` alone) or `postgres` (also given by `--postgres`
    /// alone).
    storage: StorageKind = StorageKind::Embedded;
        "storage", "DELAYQ_STORAGE", "storage", Choice::<StorageKind>::of();
    /// Directory of the embedded backend's log and snapshots.
    data_dir: PathBuf = PathBuf::from(DEFAULT_DATA_DIR);
        "data-dir", "DELAYQ_DATA_DIR", "data_dir", FsPath::dir();
    /// When the embedded log is flushed to disk.
    fsync: FsyncMode = FsyncMode::Interval;
        "fsync", "DELAYQ_FSYNC", "fsync", Choice::<FsyncMode>::of();
    /// The flush interval of `--fsync interval`.
    fsync_interval_ms: u64 = 10;
        "fsync-interval-ms", "DELAYQ_FSYNC_INTERVAL_MS", "fsync_interval_ms", Int::ms(1, 60_000);
    /// Use Redis instead of the embedded backend (`redis://`, `rediss://`,
    /// `redis+sentinel://`, `redis+cluster://`).
    redis: Option<String> = None;
        "redis", "DELAYQ_REDIS", "redis", Optional(RedisUrl);
    /// With Redis: how many partitions a topic this instance creates is split into (a topic
    /// keeps the count it was created with). Default: 1 on one Redis or Sentinel (one script
    /// per pop, the exact order of rule 11), 4 on a Cluster (a busy topic spreads over the
    /// masters).
    redis_partitions: Option<u32> = None;
        "redis-partitions", "DELAYQ_REDIS_PARTITIONS", "redis_partitions", Optional(Int::<u32>::count(1, 1_024));
    /// With Redis: acknowledge a write only once this many replicas have it (`WAIT`), else
    /// answer 503; 0 does not wait.
    redis_wait_replicas: u32 = 0;
        "redis-wait-replicas", "DELAYQ_REDIS_WAIT_REPLICAS", "redis_wait_replicas", Int::count(0, 16);
    /// How long `--redis-wait-replicas` waits for the replicas.
    redis_wait_timeout_ms: u64 = 500;
        "redis-wait-timeout-ms", "DELAYQ_REDIS_WAIT_TIMEOUT_MS", "redis_wait_timeout_ms", Int::ms(1, 1_500);
    /// Use PostgreSQL instead of the embedded backend (`postgres://user:password@host/db`):
    /// stateless instances over one database (docs/postgres.md).
    postgres: Option<String> = None;
        "postgres", "DELAYQ_POSTGRES", "postgres", Optional(PostgresUrl);
    /// With PostgreSQL: the schema of delayq's tables, created and migrated at start.
    postgres_schema: String = delayq_postgres::DEFAULT_SCHEMA.to_owned();
        "postgres-schema", "DELAYQ_POSTGRES_SCHEMA", "postgres_schema", SchemaName;
    /// With PostgreSQL: the most pooled connections this instance opens (the LISTEN
    /// connection and the clock's come on top; long-polls hold none).
    postgres_pool_size: u32 = delayq_postgres::DEFAULT_POOL_SIZE as u32;
        "postgres-pool-size", "DELAYQ_POSTGRES_POOL_SIZE", "postgres_pool_size", Int::count(1, 1_000);
    /// PEM file of the certificate chain to serve HTTPS with (server certificate first);
    /// needs `--tls-key`. Without both, the server speaks plain HTTP.
    tls_cert: Option<PathBuf> = None;
        "tls-cert", "DELAYQ_TLS_CERT", "tls.cert", Optional(FsPath::file());
    /// PEM file of the private key of `--tls-cert` (PKCS#8, PKCS#1 or SEC1).
    tls_key: Option<PathBuf> = None;
        "tls-key", "DELAYQ_TLS_KEY", "tls.key", Optional(FsPath::file());
    /// Log format; the level comes from `RUST_LOG`.
    log_format: LogFormat = LogFormat::Text;
        "log-format", "DELAYQ_LOG_FORMAT", "log_format", Choice::<LogFormat>::of();
    /// Export delayq's spans over OTLP to this collector (docs/tracing.md): its base URL, as
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, which is read when this is not given (with
    /// http/protobuf, `/v1/traces` is added to it). Export is off when neither is set.
    otlp_endpoint: Option<String> = None;
        "otlp-endpoint", "DELAYQ_OTLP_ENDPOINT", "otlp.endpoint", Optional(HttpUrl);
    /// The OTLP transport (when not given: `OTEL_EXPORTER_OTLP_PROTOCOL`, else
    /// http/protobuf).
    otlp_protocol: OtlpProtocol = OtlpProtocol::HttpProtobuf;
        "otlp-protocol", "DELAYQ_OTLP_PROTOCOL", "otlp.protocol", Choice::<OtlpProtocol>::of();
    /// The share of sampled traces whose spans are exported, chosen by trace id (the same on
    /// every instance).
    otlp_sample_ratio: f64 = 1.0;
        "otlp-sample-ratio", "DELAYQ_OTLP_SAMPLE_RATIO", "otlp.sample_ratio", Ratio;
    /// The `service.name` of the exported spans (when not given: `OTEL_SERVICE_NAME`, else
    /// delayq).
    otlp_service_name: String = "delayq".to_owned();
        "otlp-service-name", "DELAYQ_OTLP_SERVICE_NAME", "otlp.service_name", Name;
    /// Most spans waiting for export; more are dropped and counted
    /// (`delayq_spans_dropped_total`), never blocking a request.
    otlp_max_queue: usize = 4_096;
        "otlp-max-queue", "DELAYQ_OTLP_MAX_QUEUE", "otlp.max_queue", Int::count(1, 1_000_000);
    /// How long a graceful shutdown waits for requests in flight.
    shutdown_timeout_ms: u64 = 10_000;
        "shutdown-timeout-ms", "DELAYQ_SHUTDOWN_TIMEOUT_MS", "shutdown_timeout_ms", Int::ms(0, 600_000);
    /// Largest task body.
    max_body_bytes: usize = limits().max_body_bytes;
        "max-body-bytes", "DELAYQ_MAX_BODY_BYTES", "limits.max_body_bytes", Int::bytes(1, 64 * MIB);
    /// Largest HTTP request body; larger requests get 413.
    max_request_bytes: usize = 16 << 20;
        "max-request-bytes", "DELAYQ_MAX_REQUEST_BYTES", "limits.max_request_bytes", Int::bytes(1_024, 1_024 * MIB);
    /// Most tasks in one batch add.
    max_batch: usize = limits().max_batch;
        "max-batch", "DELAYQ_MAX_BATCH", "limits.max_batch", Int::count(1, 100_000);
    /// Longest delay (and furthest `run_at_ms` ahead).
    max_delay_ms: u64 = limits().max_delay_ms;
        "max-delay-ms", "DELAYQ_MAX_DELAY_MS", "limits.max_delay_ms", Int::ms(1, TEN_YEARS_MS);
    /// Longest time to run a task may ask for.
    max_ttr_ms: u64 = limits().max_ttr_ms;
        "max-ttr-ms", "DELAYQ_MAX_TTR_MS", "limits.max_ttr_ms", Int::ms(1, TEN_YEARS_MS);
    /// Most entries in a backoff schedule.
    max_schedule_len: usize = limits().max_schedule_len;
        "max-schedule-len", "DELAYQ_MAX_SCHEDULE_LEN", "limits.max_schedule_len", Int::count(1, 1_024);
    /// Most tasks one pop may return.
    max_pop_count: usize = limits().max_pop_count;
        "max-pop-count", "DELAYQ_MAX_POP_COUNT", "limits.max_pop_count", Int::count(1, 10_000);
    /// Longest long-poll a pop may ask for.
    max_pop_timeout_ms: u64 = limits().max_pop_timeout_ms;
        "max-pop-timeout-ms", "DELAYQ_MAX_POP_TIMEOUT_MS", "limits.max_pop_timeout_ms", Int::ms(0, 3_600_000);
    /// Long-poll of a pop that does not say (never above `--max-pop-timeout-ms`).
    default_pop_timeout_ms: u64 = delayq_api::DEFAULT_POP_TIMEOUT_MS;
        "default-pop-timeout-ms", "DELAYQ_DEFAULT_POP_TIMEOUT_MS", "limits.default_pop_timeout_ms", Int::ms(0, 3_600_000);
    /// Most long-polls open at once; more get 503.
    max_long_polls: usize = 10_000;
        "max-long-polls", "DELAYQ_MAX_LONG_POLLS", "limits.max_long_polls", Int::count(1, 1_000_000);
    /// Most connections open at once. Past it, new connections wait in the listen backlog
    /// (the kernel's queue) until one closes; the process needs a file-descriptor limit above
    /// it.
    max_connections: usize = 10_000;
        "max-connections", "DELAYQ_MAX_CONNECTIONS", "limits.max_connections", Int::count(1, 1_000_000);
    /// How long a client may take to send a request's headers, from their first byte (on a
    /// TLS port, also the time allowed for the handshake); a slower client is disconnected.
    header_read_timeout_ms: u64 = 10_000;
        "header-read-timeout-ms", "DELAYQ_HEADER_READ_TIMEOUT_MS", "limits.header_read_timeout_ms", Int::ms(1, 600_000);
    /// How long a connection may stay open with no request in progress (after connecting,
    /// between keep-alive requests, or while the client does not read an answer); then it
    /// is closed.
    idle_timeout_ms: u64 = 60_000;
        "idle-timeout-ms", "DELAYQ_IDLE_TIMEOUT_MS", "limits.idle_timeout_ms", Int::ms(1, 3_600_000);
    /// How long a client may take to send a request body, from the end of its headers; a
    /// slower body is refused with 400 and the connection closed.
    body_read_timeout_ms: u64 = 30_000;
        "body-read-timeout-ms", "DELAYQ_BODY_READ_TIMEOUT_MS", "limits.body_read_timeout_ms", Int::ms(1, 3_600_000);
    /// Largest `page_size` of `/tasks`.
    max_page_size: u64 = limits().max_page_size;
        "max-page-size", "DELAYQ_MAX_PAGE_SIZE", "limits.max_page_size", Int::count(1, delayq_api::MAX_PAGE_SIZE);
    /// Longest error text kept on release; longer text is cut.
    max_error_bytes: usize = limits().max_error_bytes;
        "max-error-bytes", "DELAYQ_MAX_ERROR_BYTES", "limits.max_error_bytes", Int::bytes(0, MIB);
    /// Time to run of a task that does not say (never above `--max-ttr-ms`).
    default_ttr_ms: u64 = defaults().ttr_ms;
        "default-ttr-ms", "DELAYQ_DEFAULT_TTR_MS", "defaults.ttr_ms", Int::ms(1, TEN_YEARS_MS);
    /// Redeliveries of a task that does not say; -1 for no limit.
    default_max_retries: MaxRetries = defaults().max_retries;
        "default-max-retries", "DELAYQ_DEFAULT_MAX_RETRIES", "defaults.max_retries", Retries;
    /// How long finished and cancelled records are kept.
    retention_ms: u64 = defaults().retention_ms;
        "retention-ms", "DELAYQ_RETENTION_MS", "defaults.retention_ms", Int::ms(0, TEN_YEARS_MS);
    /// A bearer token clients must send; repeat for several (the variable takes a
    /// space-separated list, the file `[[tokens]]` tables). `TOKEN@topic1,topic2` limits a
    /// token to those topics. With no token, auth is off.
    auth_tokens: Vec<TokenConfig> = Vec::new();
        "auth-token", "DELAYQ_AUTH_TOKENS", "tokens", Tokens::WRITE;
    /// A bearer token that may only read: like `--auth-token` (also `TOKEN@topic1,topic2`),
    /// but every POST with it (add, pop, finish, release, touch, cancel, requeue, delete) gets
    /// 403. Repeat for several (the variable takes a space-separated list, the file
    /// `[[read_only_tokens]]` tables).
    read_only_tokens: Vec<TokenConfig> = Vec::new();
        "read-only-token", "DELAYQ_READ_ONLY_TOKENS", "read_only_tokens", Tokens::READ_ONLY;

    // Push delivery (docs/push.md).
    /// Where push targets may be called, checked on the addresses a name resolves to:
    /// networks (`10.0.0.0/8`), addresses and host names (`*.example.com` for every name under
    /// it). Empty (the default): anywhere.
    push_allow: Vec<String> = Vec::new();
        "push-allow", "DELAYQ_PUSH_ALLOW", "push_allow", PushAllow;
    /// A PEM file of CA certificates push calls over HTTPS trust besides the system's roots.
    push_ca_file: Option<PathBuf> = None;
        "push-ca-file", "DELAYQ_PUSH_CA_FILE", "push_ca_file", Optional(FsPath::file());
    /// Most push calls in flight over all topics; each topic also has its own `concurrency`.
    push_max_in_flight: usize = 256;
        "push-max-in-flight", "DELAYQ_PUSH_MAX_IN_FLIGHT", "push_max_in_flight", Int::count(1, 100_000);
    /// Push targets created or updated at start: `[[push]]` tables in the file (`topic`,
    /// `url`, `timeout_ms`, `concurrency`, `rate_per_s`, `burst`, `headers`, `secret`), or a
    /// JSON array of them as the flag or variable. Targets set through `POST /push` stay.
    push_targets: Vec<delayq_push::PushTarget> = Vec::new();
        "push-targets", "DELAYQ_PUSH_TARGETS", "push", PushTargets;
    /// Smallest `every_ms` a recurring schedule may have.
    min_every_ms: u64 = limits().min_every_ms;
        "min-every-ms", "DELAYQ_MIN_EVERY_MS", "limits.min_every_ms", Int::ms(1, TEN_YEARS_MS);
    /// A recurring schedule created or updated at start (docs/schedules.md): the JSON of
    /// `POST /schedules`; repeat for several. In the file, `[[schedules]]` tables.
    schedules: Vec<delayq_api::ScheduleRequest> = Vec::new();
        "schedule", "DELAYQ_SCHEDULES", "schedules", SCHEDULES;
    /// A topic's flow limits set at start (docs/flow-control.md): the JSON of `POST
    /// /limits`; repeat for several. In the file, `[[flow_limits]]` tables. Limits set
    /// through `POST /limits` stay until a start that names the topic again.
    flow_limits: Vec<delayq_api::flow::LimitsRequest> = Vec::new();
        "flow-limit", "DELAYQ_FLOW_LIMITS", "flow_limits", FLOW_LIMITS;
    /// Do not serve the web dashboard at `/` (docs/dashboard.md); the API is unchanged.
    no_dashboard: bool = false;
        "no-dashboard", "DELAYQ_NO_DASHBOARD", "no_dashboard", Switch;
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn names_follow_one_convention() {
        let table = reference();
        let (mut flags, mut envs, mut keys) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        for meta in &table {
            let n = &meta.names;
            assert!(flags.insert(n.flag), "--{} is declared twice", n.flag);
            assert!(envs.insert(n.env), "{} is declared twice", n.env);
            assert!(keys.insert(n.key), "{} is declared twice", n.key);
            // The exception: a repeatable flag's variable is plural (--auth-token,
            // DELAYQ_AUTH_TOKENS).
            let flag = if meta.repeated {
                format!("{}s", n.flag)
            } else {
                n.flag.to_owned()
            };
            let env = format!("DELAYQ_{}", flag.replace('-', "_").to_uppercase());
            assert_eq!(n.env, env, "the variable of --{}", n.flag);
            let leaf = n.key.rsplit('.').next().unwrap_or(n.key);
            assert!(!meta.doc.is_empty() && !leaf.is_empty(), "{}", n.flag);
        }
    }
}
