//! The kinds of setting values: how each is read from a flag's text or a TOML value, what it
//! accepts, and how its default is shown.
//!
//! A [`Kind`] is the type-and-range column of the settings table: `Int::ms(1, 60_000)` reads a
//! whole number of milliseconds in that range, [`Choice`] one of an enum's names. The kind's
//! `Value` is checked by the compiler against the field type the table declares, and every
//! refusal says what is accepted in the same words for flags, variables and file keys.

use std::marker::PhantomData;
use std::net::SocketAddr;
use std::path::PathBuf;

use delayq::MaxRetries;
use delayq::core::validate::check_topic;

use super::{LogFormat, TokenConfig};

/// A value that a kind refused: what was given (as shown to the user) and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rejected {
    /// Where inside the setting, for lists: `[1]`; empty for the setting as a whole.
    pub at: String,
    /// The value as given: quoted text, or the TOML value as written.
    pub value: String,
    /// What is accepted, with the range.
    pub expected: String,
}

impl Rejected {
    fn text(text: &str, expected: String) -> Rejected {
        Rejected {
            at: String::new(),
            value: format!("{text:?}"),
            expected,
        }
    }

    fn toml(value: &toml::Value, expected: String) -> Rejected {
        Rejected {
            at: String::new(),
            value: show_toml(value),
            expected,
        }
    }
}

/// Shows a TOML value in a message: scalars as written, arrays and tables by their type.
pub(crate) fn show_toml(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => format!("{s:?}"),
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(x) => x.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::Array(_) => "(an array)".into(),
        toml::Value::Table(_) => "(a table)".into(),
    }
}

/// How one setting's value is read and described.
pub(crate) trait Kind {
    /// The checked value.
    type Value;
    /// What is accepted, for errors and the reference: `a whole number from 1 to 100000`.
    fn accepts(&self) -> String;
    /// The placeholder of the flag in `--help`: `MS`, `ADDR`, `always|interval|never`.
    fn value_name(&self) -> String;
    /// Reads the text of a flag or environment variable.
    fn read_text(&self, text: &str) -> Result<Self::Value, Rejected>;
    /// Reads a value of the TOML file; by default a string, read like a flag's text.
    fn read_toml(&self, value: &toml::Value) -> Result<Self::Value, Rejected> {
        match value.as_str() {
            Some(text) => self.read_text(text).map_err(|mut r| {
                r.value = show_toml(value);
                r
            }),
            None => Err(Rejected::toml(value, self.accepts())),
        }
    }
    /// Shows a value (the default) in help and docs; empty when there is nothing to show.
    fn show(&self, value: &Self::Value) -> String;
    /// Reads a flag given several times (only [`Tokens`] may be); by default the last wins.
    fn read_texts(&self, texts: &[String]) -> Result<Self::Value, Rejected> {
        let last = texts.last().map_or("", String::as_str);
        self.read_text(last)
    }
    /// Whether the flag may be repeated.
    fn repeated(&self) -> bool {
        false
    }
    /// Whether values are secrets that help must not echo from the environment.
    fn secret(&self) -> bool {
        false
    }
    /// Whether the flag may be given alone, meaning `true` (`--no-dashboard`).
    fn switch(&self) -> bool {
        false
    }
}

/// On or off: the flag alone (`--no-dashboard`) means `true`; its text or variable may say
/// `true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off`), the file a TOML boolean.
pub(crate) struct Switch;

impl Kind for Switch {
    type Value = bool;

    fn accepts(&self) -> String {
        "true or false (the flag alone means true)".into()
    }

    fn value_name(&self) -> String {
        "BOOL".into()
    }

    fn read_text(&self, text: &str) -> Result<bool, Rejected> {
        match text.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(Rejected::text(text, self.accepts())),
        }
    }

    fn read_toml(&self, value: &toml::Value) -> Result<bool, Rejected> {
        value
            .as_bool()
            .ok_or_else(|| Rejected::toml(value, self.accepts()))
    }

    fn show(&self, value: &bool) -> String {
        value.to_string()
    }

    fn switch(&self) -> bool {
        true
    }
}

/// A whole number in `min..=max`, stored as `T`.
pub(crate) struct Int<T> {
    min: u64,
    max: u64,
    unit: &'static str,
    of: PhantomData<T>,
}

impl<T> Int<T> {
    /// A count (`N`).
    pub const fn count(min: u64, max: u64) -> Self {
        Int::with_unit(min, max, "N")
    }

    /// Milliseconds (`MS`).
    pub const fn ms(min: u64, max: u64) -> Self {
        Int::with_unit(min, max, "MS")
    }

    /// Bytes (`BYTES`).
    pub const fn bytes(min: u64, max: u64) -> Self {
        Int::with_unit(min, max, "BYTES")
    }

    const fn with_unit(min: u64, max: u64, unit: &'static str) -> Self {
        Int {
            min,
            max,
            unit,
            of: PhantomData,
        }
    }

    fn checked(&self, n: u64) -> Option<T>
    where
        T: TryFrom<u64>,
    {
        (self.min..=self.max)
            .contains(&n)
            .then(|| T::try_from(n).ok())
            .flatten()
    }
}

impl<T: TryFrom<u64> + ToString> Kind for Int<T> {
    type Value = T;

    fn accepts(&self) -> String {
        format!("a whole number from {} to {}", self.min, self.max)
    }

    fn value_name(&self) -> String {
        self.unit.to_owned()
    }

    fn read_text(&self, text: &str) -> Result<T, Rejected> {
        let n = text.trim().parse::<u64>().ok();
        n.and_then(|n| self.checked(n))
            .ok_or_else(|| Rejected::text(text, self.accepts()))
    }

    fn read_toml(&self, value: &toml::Value) -> Result<T, Rejected> {
        let n = value.as_integer().and_then(|n| u64::try_from(n).ok());
        n.and_then(|n| self.checked(n))
            .ok_or_else(|| Rejected::toml(value, self.accepts()))
    }

    fn show(&self, value: &T) -> String {
        value.to_string()
    }
}

/// Redeliveries: `-1` for no limit, or a count.
pub(crate) struct Retries;

impl Kind for Retries {
    type Value = MaxRetries;

    fn accepts(&self) -> String {
        format!("-1 (no limit) or a whole number from 0 to {}", u32::MAX)
    }

    fn value_name(&self) -> String {
        "N".into()
    }

    fn read_text(&self, text: &str) -> Result<MaxRetries, Rejected> {
        let n = text.trim().parse::<i64>().ok();
        n.and_then(|n| MaxRetries::try_from(n).ok())
            .ok_or_else(|| Rejected::text(text, self.accepts()))
    }

    fn read_toml(&self, value: &toml::Value) -> Result<MaxRetries, Rejected> {
        let n = value.as_integer();
        n.and_then(|n| MaxRetries::try_from(n).ok())
            .ok_or_else(|| Rejected::toml(value, self.accepts()))
    }

    fn show(&self, value: &MaxRetries) -> String {
        value.as_i64().to_string()
    }
}

/// The beanstalk listener's address: an IP address and port, or `unix:PATH`.
pub(crate) struct BeanstalkListen;

impl Kind for BeanstalkListen {
    type Value = delayq_beanstalk::BeanstalkAddr;

    fn accepts(&self) -> String {
        "an IP address and port, like 127.0.0.1:11300, or unix:PATH".into()
    }

    fn value_name(&self) -> String {
        "ADDR".into()
    }

    fn read_text(&self, text: &str) -> Result<Self::Value, Rejected> {
        delayq_beanstalk::BeanstalkAddr::parse(text.trim())
            .map_err(|_| Rejected::text(text, self.accepts()))
    }

    fn show(&self, value: &Self::Value) -> String {
        value.to_string()
    }
}

/// An IP address and port to listen on.
pub(crate) struct Addr;

impl Kind for Addr {
    type Value = SocketAddr;

    fn accepts(&self) -> String {
        "an IP address and port, like 127.0.0.1:9280 or [::1]:9280".into()
    }

    fn value_name(&self) -> String {
        "ADDR".into()
    }

    fn read_text(&self, text: &str) -> Result<SocketAddr, Rejected> {
        text.trim()
            .parse()
            .map_err(|_| Rejected::text(text, self.accepts()))
    }

    fn show(&self, value: &SocketAddr) -> String {
        value.to_string()
    }
}

/// A path (not empty): a directory or a file, as the setting says.
pub(crate) struct FsPath {
    accepts: &'static str,
    value_name: &'static str,
}

impl FsPath {
    /// A directory.
    pub const fn dir() -> Self {
        FsPath {
            accepts: "a directory path",
            value_name: "DIR",
        }
    }

    /// A file.
    pub const fn file() -> Self {
        FsPath {
            accepts: "a file path",
            value_name: "FILE",
        }
    }
}

impl Kind for FsPath {
    type Value = PathBuf;

    fn accepts(&self) -> String {
        self.accepts.into()
    }

    fn value_name(&self) -> String {
        self.value_name.into()
    }

    fn read_text(&self, text: &str) -> Result<PathBuf, Rejected> {
        if text.trim().is_empty() {
            return Err(Rejected::text(text, self.accepts()));
        }
        Ok(PathBuf::from(text))
    }

    fn show(&self, value: &PathBuf) -> String {
        value.display().to_string()
    }
}

/// A PostgreSQL URL (`postgres://` or `postgresql://`; libpq's key=value form is not taken,
/// so that a typo is not read as a host name).
pub(crate) struct PostgresUrl;

impl Kind for PostgresUrl {
    type Value = String;

    fn accepts(&self) -> String {
        "a URL starting with postgres:// or postgresql:// (TLS: sslmode=disable, prefer, \
         require, verify-ca or verify-full, and sslrootcert=FILE)"
            .into()
    }

    fn value_name(&self) -> String {
        "URL".into()
    }

    fn read_text(&self, text: &str) -> Result<String, Rejected> {
        let trimmed = text.trim();
        let ok = ["postgres://", "postgresql://"]
            .iter()
            .any(|s| trimmed.starts_with(s) && trimmed.len() > s.len())
            // Parsed as the backend will (libpq's sslmode and sslrootcert included).
            && delayq_postgres::PostgresOptions::new(trimmed)
                .connection()
                .is_ok();
        if ok {
            Ok(trimmed.to_owned())
        } else {
            Err(Rejected::text(text, self.accepts()))
        }
    }

    fn show(&self, value: &String) -> String {
        value.clone()
    }
}

/// A schema name of delayq's tables in PostgreSQL: 1 to 48 of a-z, 0-9 and _, not starting
/// with a digit or `pg_` (so it needs no quoting in SQL).
pub(crate) struct SchemaName;

impl Kind for SchemaName {
    type Value = String;

    fn accepts(&self) -> String {
        "1 to 48 of a-z, 0-9 and _, not starting with a digit or pg_".into()
    }

    fn value_name(&self) -> String {
        "NAME".into()
    }

    fn read_text(&self, text: &str) -> Result<String, Rejected> {
        let name = text.trim();
        let options = delayq_postgres::PostgresOptions::new("postgres://localhost").schema(name);
        match options.check() {
            Ok(_) => Ok(name.to_owned()),
            Err(_) => Err(Rejected::text(text, self.accepts())),
        }
    }

    fn show(&self, value: &String) -> String {
        value.clone()
    }
}

/// A Redis URL.
pub(crate) struct RedisUrl;

/// The URL schemes of the Redis deployments delayq can use.
const REDIS_SCHEMES: [&str; 4] = [
    "redis://",
    "rediss://",
    "redis+sentinel://",
    "redis+cluster://",
];

impl Kind for RedisUrl {
    type Value = String;

    fn accepts(&self) -> String {
        format!("a URL starting with one of {}", REDIS_SCHEMES.join(", "))
    }

    fn value_name(&self) -> String {
        "URL".into()
    }

    fn read_text(&self, text: &str) -> Result<String, Rejected> {
        let trimmed = text.trim();
        match REDIS_SCHEMES.iter().find(|s| trimmed.starts_with(*s)) {
            Some(scheme) if trimmed.len() > scheme.len() => Ok(trimmed.to_owned()),
            _ => Err(Rejected::text(text, self.accepts())),
        }
    }

    fn show(&self, value: &String) -> String {
        value.clone()
    }
}

/// An `http://` URL with a host: an OTLP collector. (The exporter is built without TLS: a
/// collector is reached over plain HTTP or gRPC, usually an agent on the same host.)
pub(crate) struct HttpUrl;

impl Kind for HttpUrl {
    type Value = String;

    fn accepts(&self) -> String {
        "a URL starting with http://, with a host (TLS to the collector is not supported)".into()
    }

    fn value_name(&self) -> String {
        "URL".into()
    }

    fn read_text(&self, text: &str) -> Result<String, Rejected> {
        let trimmed = text.trim();
        match trimmed.strip_prefix("http://") {
            Some(rest)
                if !rest.is_empty()
                    && !rest.starts_with('/')
                    && !trimmed.chars().any(|c| c.is_whitespace() || c.is_control()) =>
            {
                Ok(trimmed.to_owned())
            }
            _ => Err(Rejected::text(text, self.accepts())),
        }
    }

    fn show(&self, value: &String) -> String {
        value.clone()
    }
}

/// A share from 0 to 1, as a decimal number (`0.25`).
pub(crate) struct Ratio;

impl Ratio {
    fn checked(x: f64) -> Option<f64> {
        (0.0..=1.0).contains(&x).then_some(x)
    }
}

impl Kind for Ratio {
    type Value = f64;

    fn accepts(&self) -> String {
        "a number from 0 to 1".into()
    }

    fn value_name(&self) -> String {
        "RATIO".into()
    }

    fn read_text(&self, text: &str) -> Result<f64, Rejected> {
        text.trim()
            .parse::<f64>()
            .ok()
            .and_then(Ratio::checked)
            .ok_or_else(|| Rejected::text(text, self.accepts()))
    }

    fn read_toml(&self, value: &toml::Value) -> Result<f64, Rejected> {
        let x = match value {
            toml::Value::Float(x) => Some(*x),
            toml::Value::Integer(n) => Some(*n as f64),
            _ => None,
        };
        x.and_then(Ratio::checked)
            .ok_or_else(|| Rejected::toml(value, self.accepts()))
    }

    fn show(&self, value: &f64) -> String {
        value.to_string()
    }
}

/// A short name: 1 to 255 printable characters, no surrounding spaces.
pub(crate) struct Name;

impl Kind for Name {
    type Value = String;

    fn accepts(&self) -> String {
        "1 to 255 printable characters".into()
    }

    fn value_name(&self) -> String {
        "NAME".into()
    }

    fn read_text(&self, text: &str) -> Result<String, Rejected> {
        let trimmed = text.trim();
        if trimmed.is_empty() || trimmed.len() > 255 || trimmed.chars().any(char::is_control) {
            return Err(Rejected::text(text, self.accepts()));
        }
        Ok(trimmed.to_owned())
    }

    fn show(&self, value: &String) -> String {
        value.clone()
    }
}

/// A setting with no default: `None` unless given, else read as `K` reads it.
pub(crate) struct Optional<K>(pub K);

impl<K: Kind> Kind for Optional<K> {
    type Value = Option<K::Value>;

    fn accepts(&self) -> String {
        self.0.accepts()
    }

    fn value_name(&self) -> String {
        self.0.value_name()
    }

    fn read_text(&self, text: &str) -> Result<Self::Value, Rejected> {
        self.0.read_text(text).map(Some)
    }

    fn read_toml(&self, value: &toml::Value) -> Result<Self::Value, Rejected> {
        self.0.read_toml(value).map(Some)
    }

    fn show(&self, value: &Self::Value) -> String {
        value.as_ref().map_or_else(String::new, |v| self.0.show(v))
    }
}

/// An enum chosen by name; its names are the accepted values.
pub(crate) trait Named: Copy + PartialEq + 'static {
    /// Every value with its name, in the order help lists them.
    const NAMES: &'static [(&'static str, Self)];
}

/// One of the names of `E`.
pub(crate) struct Choice<E>(PhantomData<E>);

impl<E> Choice<E> {
    /// The kind of `E`.
    pub const fn of() -> Self {
        Choice(PhantomData)
    }
}

impl<E: Named> Choice<E> {
    fn names(&self) -> impl Iterator<Item = &'static str> {
        E::NAMES.iter().map(|(name, _)| *name)
    }
}

impl<E: Named> Kind for Choice<E> {
    type Value = E;

    fn accepts(&self) -> String {
        format!("one of {}", self.names().collect::<Vec<_>>().join(", "))
    }

    fn value_name(&self) -> String {
        self.names().collect::<Vec<_>>().join("|")
    }

    fn read_text(&self, text: &str) -> Result<E, Rejected> {
        let wanted = text.trim().to_ascii_lowercase();
        E::NAMES
            .iter()
            .find(|(name, _)| *name == wanted)
            .map(|(_, value)| *value)
            .ok_or_else(|| Rejected::text(text, self.accepts()))
    }

    fn show(&self, value: &E) -> String {
        E::NAMES
            .iter()
            .find(|(_, v)| v == value)
            .map_or_else(String::new, |(name, _)| (*name).to_owned())
    }
}

/// Which backend `--storage` names; `redis` needs `--redis` too, `postgres` `--postgres`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StorageKind {
    Embedded,
    Memory,
    Redis,
    Postgres,
}

impl Named for StorageKind {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("embedded", StorageKind::Embedded),
        ("memory", StorageKind::Memory),
        ("redis", StorageKind::Redis),
        ("postgres", StorageKind::Postgres),
    ];
}

/// `--beanstalk-tls`: whether the beanstalk listener speaks TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BeanstalkTls {
    Off,
    On,
}

impl Named for BeanstalkTls {
    const NAMES: &'static [(&'static str, Self)] =
        &[("off", BeanstalkTls::Off), ("on", BeanstalkTls::On)];
}

/// `--fsync`: the policy without its interval, which is a setting of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FsyncMode {
    Always,
    Interval,
    Never,
}

impl Named for FsyncMode {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("always", FsyncMode::Always),
        ("interval", FsyncMode::Interval),
        ("never", FsyncMode::Never),
    ];
}

/// `--otlp-protocol`: the OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// Protobuf over HTTP (`POST /v1/traces`), the OpenTelemetry default.
    HttpProtobuf,
    /// gRPC.
    Grpc,
}

impl Named for OtlpProtocol {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("http/protobuf", OtlpProtocol::HttpProtobuf),
        ("grpc", OtlpProtocol::Grpc),
    ];
}

impl Named for LogFormat {
    const NAMES: &'static [(&'static str, Self)] =
        &[("text", LogFormat::Text), ("json", LogFormat::Json)];
}

/// Bearer tokens: `TOKEN[@topic,topic]` flags, or `[[tokens]]` tables in the file; all
/// may write, or all may only read.
pub(crate) struct Tokens {
    read_only: bool,
}

impl Tokens {
    /// Tokens that may read and write.
    pub const WRITE: Tokens = Tokens { read_only: false };
    /// Tokens that may only read.
    pub const READ_ONLY: Tokens = Tokens { read_only: true };

    fn scoped(&self, token: TokenConfig) -> TokenConfig {
        if self.read_only {
            token.read_only()
        } else {
            token
        }
    }
}

/// What a token must look like.
const TOKEN_RULE: &str = "a token of 1 to 4096 visible ASCII characters other than '@' and ','";

impl Kind for Tokens {
    type Value = Vec<TokenConfig>;

    fn accepts(&self) -> String {
        format!("{TOKEN_RULE}, optionally followed by @ and a comma-separated list of topics")
    }

    fn value_name(&self) -> String {
        "TOKEN[@TOPICS]".into()
    }

    fn read_text(&self, text: &str) -> Result<Vec<TokenConfig>, Rejected> {
        parse_token_spec(text).map(|t| vec![self.scoped(t)])
    }

    fn read_texts(&self, texts: &[String]) -> Result<Vec<TokenConfig>, Rejected> {
        texts
            .iter()
            .filter(|t| !t.is_empty())
            .map(|spec| parse_token_spec(spec).map(|t| self.scoped(t)))
            .collect()
    }

    fn read_toml(&self, value: &toml::Value) -> Result<Vec<TokenConfig>, Rejected> {
        let expected = "an array of tables with a token and optional topics";
        let Some(tables) = value.as_array() else {
            return Err(Rejected::toml(value, expected.into()));
        };
        tables
            .iter()
            .enumerate()
            .map(|(i, table)| {
                token_from_toml(table)
                    .map(|t| self.scoped(t))
                    .map_err(|mut r| {
                        r.at = format!("[{i}]{}", r.at);
                        r
                    })
            })
            .collect()
    }

    fn show(&self, _: &Vec<TokenConfig>) -> String {
        String::new()
    }

    fn repeated(&self) -> bool {
        true
    }

    fn secret(&self) -> bool {
        true
    }
}

/// A request the configuration carries as it crosses the API (`POST /schedules`, `POST
/// /limits`): repeated, as `[[<table>]]` tables in the file or a flag whose text is the
/// request's JSON.
pub(crate) trait TableRequest: serde::de::DeserializeOwned + Send + Sync + 'static {
    /// What one is, for messages: "a schedule".
    const NOUN: &'static str;
    /// The endpoint whose JSON it is: "POST /schedules".
    const ENDPOINT: &'static str;
    /// The file's table name: "schedules".
    const TABLE: &'static str;
    /// The keys a table may hold.
    fn fields() -> &'static [&'static str];
}

impl TableRequest for delayq_api::ScheduleRequest {
    const NOUN: &'static str = "a schedule";
    const ENDPOINT: &'static str = "POST /schedules";
    const TABLE: &'static str = "schedules";
    fn fields() -> &'static [&'static str] {
        delayq_api::ScheduleRequest::fields()
    }
}

impl TableRequest for delayq_api::flow::LimitsRequest {
    const NOUN: &'static str = "a topic's flow limits";
    const ENDPOINT: &'static str = "POST /limits";
    const TABLE: &'static str = "flow_limits";
    fn fields() -> &'static [&'static str] {
        delayq_api::flow::LimitsRequest::fields()
    }
}

/// Requests created or updated at start (recurring schedules, flow limits): `[[<table>]]`
/// tables in the file, or a flag (repeatable) whose text is the request's JSON. Each is read
/// into the API's request shape here; the fields are checked when the configuration is
/// composed, naming the field.
pub(crate) struct Requests<T>(std::marker::PhantomData<T>);

/// Recurring schedules created or updated at start.
pub(crate) const SCHEDULES: Requests<delayq_api::ScheduleRequest> =
    Requests(std::marker::PhantomData);

/// Flow limits set at start.
pub(crate) const FLOW_LIMITS: Requests<delayq_api::flow::LimitsRequest> =
    Requests(std::marker::PhantomData);

impl<T: TableRequest> Kind for Requests<T> {
    type Value = Vec<T>;

    fn accepts(&self) -> String {
        format!(
            "{} as the JSON object of {} (in the file, [[{}]] tables with the same keys)",
            T::NOUN,
            T::ENDPOINT,
            T::TABLE
        )
    }

    fn value_name(&self) -> String {
        "JSON".into()
    }

    fn read_text(&self, text: &str) -> Result<Self::Value, Rejected> {
        serde_json::from_str(text)
            .map(|s| vec![s])
            .map_err(|e| Rejected::text(text, format!("{}: {e}", self.accepts())))
    }

    fn read_texts(&self, texts: &[String]) -> Result<Self::Value, Rejected> {
        // A repeatable setting's values are split at spaces (the variable is a
        // space-separated list), which also cuts a JSON object apart: joined with single
        // spaces again, the pieces give back the texts exactly, read as a stream of objects.
        let joined = texts.join(" ");
        serde_json::Deserializer::from_str(&joined)
            .into_iter::<T>()
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Rejected::text(&joined, format!("{}: {e}", self.accepts())))
    }

    fn read_toml(&self, value: &toml::Value) -> Result<Self::Value, Rejected> {
        let expected = format!(
            "an array of tables, each {} with the keys of {}",
            T::NOUN,
            T::ENDPOINT
        );
        let Some(tables) = value.as_array() else {
            return Err(Rejected::toml(value, expected));
        };
        tables
            .iter()
            .enumerate()
            .map(|(i, table)| {
                // The file refuses unknown keys (a typo such as `timezon` would otherwise
                // silently mean UTC), unlike the JSON API, which ignores most of them.
                if let Some((key, v)) = table
                    .as_table()
                    .and_then(|t| t.iter().find(|(k, _)| !T::fields().contains(&k.as_str())))
                {
                    return Err(Rejected {
                        at: format!("[{i}].{key}"),
                        value: show_toml(v),
                        expected: format!("no such key ({})", T::fields().join(", ")),
                    });
                }
                // Through JSON, so numbers and bodies are read by the API's own readers.
                let json = serde_json::to_value(table).map_err(|e| Rejected {
                    at: format!("[{i}]"),
                    value: show_toml(table),
                    expected: e.to_string(),
                })?;
                serde_json::from_value(json).map_err(|e| Rejected {
                    at: format!("[{i}]"),
                    value: show_toml(table),
                    expected: format!("{} with the keys of {}: {e}", T::NOUN, T::ENDPOINT),
                })
            })
            .collect()
    }

    fn show(&self, _: &Self::Value) -> String {
        String::new()
    }

    fn repeated(&self) -> bool {
        true
    }
}

/// Reads one `[[tokens]]` table: `token = "..."`, optional `topics = [...]`, nothing else.
fn token_from_toml(value: &toml::Value) -> Result<TokenConfig, Rejected> {
    let refuse = |at: &str, value: &toml::Value, expected: &str| Rejected {
        at: at.to_owned(),
        value: show_toml(value),
        expected: expected.to_owned(),
    };
    let Some(table) = value.as_table() else {
        return Err(refuse(
            "",
            value,
            "a table with a token and optional topics",
        ));
    };
    if let Some((key, v)) = table.iter().find(|(k, _)| *k != "token" && *k != "topics") {
        return Err(refuse(&format!(".{key}"), v, "no such key (token, topics)"));
    }
    let token = match table.get("token") {
        Some(toml::Value::String(token)) => token.clone(),
        Some(other) => return Err(refuse(".token", other, "a string")),
        None => return Err(refuse("", value, "a table with a token")),
    };
    check_token(&token)?;
    let topics = match table.get("topics") {
        None => None,
        Some(toml::Value::Array(items)) => {
            let names: Option<Vec<String>> = items
                .iter()
                .map(|t| t.as_str().map(str::to_owned))
                .collect();
            let names = names
                .ok_or_else(|| refuse(".topics", &table["topics"], "an array of topic names"))?;
            Some(check_topics(names)?)
        }
        Some(other) => return Err(refuse(".topics", other, "an array of topic names")),
    };
    Ok(match topics {
        Some(topics) => TokenConfig::for_topics(token, topics),
        None => TokenConfig::new(token),
    })
}

/// Parses `TOKEN` or `TOKEN@topic1,topic2`.
pub(crate) fn parse_token_spec(spec: &str) -> Result<TokenConfig, Rejected> {
    match spec.rsplit_once('@') {
        Some((token, topics)) => {
            check_token(token)?;
            let topics = topics.split(',').map(str::to_owned).collect();
            Ok(TokenConfig::for_topics(token, check_topics(topics)?))
        }
        None => {
            check_token(spec)?;
            Ok(TokenConfig::new(spec))
        }
    }
}

fn check_token(token: &str) -> Result<(), Rejected> {
    let ok = !token.is_empty()
        && token.len() <= 4_096
        && token
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'@' && b != b',');
    if ok {
        return Ok(());
    }
    Err(Rejected {
        at: String::new(),
        // Say what is wrong without echoing the secret.
        value: format!("<token of {} bytes>", token.len()),
        expected: TOKEN_RULE.into(),
    })
}

fn check_topics(topics: Vec<String>) -> Result<Vec<String>, Rejected> {
    if topics.is_empty() {
        return Err(Rejected::text("", "at least one topic".into()));
    }
    for topic in &topics {
        check_topic(topic)
            .map_err(|e| Rejected::text(topic, format!("a valid topic name ({})", e.reason)))?;
    }
    Ok(topics)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_schedule_key_that_is_no_field_of_post_schedules_is_named() {
        let doc: toml::Table = toml::from_str(
            "s = [{topic = \"t\", name = \"n\", every_ms = 1000, timezon = \"UTC\"}]",
        )
        .unwrap();
        let err = SCHEDULES.read_toml(&doc["s"]).unwrap_err();
        assert_eq!(err.at, "[0].timezon");
    }

    use super::*;

    #[test]
    fn numbers_are_checked_against_their_range() {
        let kind = Int::<usize>::count(1, 100_000);
        let table: [(&str, Option<usize>); 6] = [
            ("5", Some(5)),
            (" 12 ", Some(12)),
            ("100000", Some(100_000)),
            ("0", None),
            ("-3", None),
            ("100001", None),
        ];
        for (text, want) in table {
            let got = kind.read_text(text);
            assert_eq!(got.as_ref().ok().copied(), want, "{text:?}: {got:?}");
            if let Err(r) = got {
                assert!(r.expected.contains("1 to 100000"), "{r:?}");
            }
        }
        let toml_table: [(toml::Value, Option<usize>); 4] = [
            (toml::Value::Integer(7), Some(7)),
            (toml::Value::Integer(-1), None),
            (toml::Value::String("7".into()), None),
            (toml::Value::Float(1.5), None),
        ];
        for (value, want) in toml_table {
            assert_eq!(kind.read_toml(&value).ok(), want, "{value:?}");
        }
    }

    #[test]
    fn retries_take_minus_one_for_no_limit() {
        assert_eq!(Retries.read_text("-1"), Ok(MaxRetries::Unlimited));
        assert_eq!(Retries.read_text(" 0"), Ok(MaxRetries::Limited(0)));
        assert!(Retries.read_text("-2").is_err());
        assert!(Retries.read_toml(&toml::Value::Float(1.5)).is_err());
    }

    #[test]
    fn choices_ignore_case_and_name_every_option() {
        let kind = Choice::<FsyncMode>::of();
        assert_eq!(kind.read_text(" Always "), Ok(FsyncMode::Always));
        let err = kind.read_text("sometimes").unwrap_err();
        assert_eq!(err.expected, "one of always, interval, never");
        assert_eq!(kind.value_name(), "always|interval|never");
        assert_eq!(kind.show(&FsyncMode::Never), "never");
    }

    #[test]
    fn redis_urls_need_a_known_scheme_and_a_host() {
        for good in ["redis://x", "rediss://x", " redis+cluster://a:1,b:2 "] {
            assert!(RedisUrl.read_text(good).is_ok(), "{good}");
            assert!(Optional(RedisUrl).read_text(good).unwrap().is_some());
        }
        for bad in ["http://x", "redis://", ""] {
            assert!(RedisUrl.read_text(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn token_specs() {
        let t = parse_token_spec("s3cret@orders,payments").unwrap();
        assert_eq!(t.token, "s3cret");
        assert_eq!(t.topics, Some(vec!["orders".into(), "payments".into()]));
        assert_eq!(parse_token_spec("plain").unwrap().topics, None);
        for bad in ["", "@orders", "tok@", "tok@bad topic", "two words"] {
            assert!(parse_token_spec(bad).is_err(), "{bad:?}");
        }
        let err = parse_token_spec("a b").unwrap_err();
        assert!(
            !err.value.contains("a b"),
            "the secret is not echoed: {err:?}"
        );
    }

    #[test]
    fn read_only_tokens_are_marked_whatever_their_source() {
        let texts = ["a@orders".to_owned(), "b".to_owned()];
        let tokens = Tokens::READ_ONLY.read_texts(&texts).unwrap();
        assert!(tokens.iter().all(|t| t.read_only), "{tokens:?}");
        let doc: toml::Table = toml::from_str("[[t]]\ntoken = \"c\"").unwrap();
        assert!(Tokens::READ_ONLY.read_toml(&doc["t"]).unwrap()[0].read_only);
        assert!(!Tokens::WRITE.read_toml(&doc["t"]).unwrap()[0].read_only);
        assert!(!Tokens::WRITE.read_text("d").unwrap()[0].read_only);
    }

    #[test]
    fn file_tokens_name_the_entry() {
        let table: [(&str, &str); 4] = [
            ("tokens = \"x\"", ""),
            ("[[tokens]]\ntoken = \"a\"\ncolour = 1", "[0].colour"),
            (
                "[[tokens]]\ntoken = \"a\"\n[[tokens]]\ntoken = 5",
                "[1].token",
            ),
            ("[[tokens]]\ntoken = \"a\"\ntopics = [\"bad topic\"]", "[0]"),
        ];
        for (text, at) in table {
            let doc: toml::Table = toml::from_str(text).unwrap();
            let err = Tokens::WRITE.read_toml(&doc["tokens"]).unwrap_err();
            assert_eq!(err.at, at, "{text}: {err:?}");
        }
    }
}
