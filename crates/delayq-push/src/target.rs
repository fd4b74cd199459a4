//! A push target: where and how the tasks of one topic are delivered.
//!
//! A target is checked whole before it is stored ([`PushTarget::validate`]), so the
//! dispatcher never meets a URL it cannot call or a header it may not send: the delivery
//! headers (`Delayq-*`) and the framing headers (`Host`, `Content-Length`, ...) are the
//! dispatcher's own, and a target may not override them.

use std::collections::BTreeMap;

use delayq::InvalidField;
use delayq::core::validate::check_topic;
use reqwest::Url;
use serde::{Deserialize, Serialize};

/// The concurrency of a target that does not say: small, so one slow target holds few calls.
pub const DEFAULT_CONCURRENCY: u32 = 4;
/// The highest concurrency one target may ask for.
pub const MAX_CONCURRENCY: u32 = 1_024;
/// The longest call timeout a target may ask for (1 hour).
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;
/// The highest rate a target may ask for, in calls per second.
pub const MAX_RATE_PER_S: f64 = 1_000_000.0;
/// The largest burst a target may ask for.
pub const MAX_BURST: u32 = 1_000_000;
/// The longest URL, in bytes.
pub const MAX_URL_LEN: usize = 2_048;
/// Most extra headers of one target.
pub const MAX_HEADERS: usize = 32;
/// The longest header value or secret, in bytes.
pub const MAX_VALUE_LEN: usize = 4_096;

/// Headers the dispatcher sets itself (and the HTTP framing ones), which a target may not set.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
    "proxy-connection",
];

fn default_concurrency() -> u32 {
    DEFAULT_CONCURRENCY
}

/// The push target of one topic (docs/design.md §8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PushTarget {
    /// The topic whose tasks are delivered.
    pub topic: String,
    /// The `http://` or `https://` URL each task is POSTed to.
    pub url: String,
    /// How long one call may take before it counts as failed; `None`: the task's ttr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Most calls to this target at once.
    #[serde(default = "default_concurrency")]
    pub concurrency: u32,
    /// Most calls per second on average (token bucket); `None`: no rate limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_s: Option<f64>,
    /// Calls that may go at once after a quiet time; `None`: one second's worth of the rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// Extra headers sent with every call.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The key of `Delayq-Signature`; `None`: calls are not signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

impl PushTarget {
    /// A target for `topic` calling `url`, with the defaults.
    pub fn new(topic: impl Into<String>, url: impl Into<String>) -> Self {
        PushTarget {
            topic: topic.into(),
            url: url.into(),
            timeout_ms: None,
            concurrency: DEFAULT_CONCURRENCY,
            rate_per_s: None,
            burst: None,
            headers: BTreeMap::new(),
            secret: None,
        }
    }

    /// Sets the call timeout.
    pub fn timeout_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = Some(ms);
        self
    }

    /// Sets the concurrency.
    pub fn concurrency(mut self, n: u32) -> Self {
        self.concurrency = n;
        self
    }

    /// Sets the rate limit and its burst.
    pub fn rate(mut self, per_s: f64, burst: Option<u32>) -> Self {
        self.rate_per_s = Some(per_s);
        self.burst = burst;
        self
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// Sets the signing secret.
    pub fn secret(mut self, secret: impl Into<String>) -> Self {
        self.secret = Some(secret.into());
        self
    }

    /// Checks every field; the error names the field and the limit.
    pub fn validate(&self) -> Result<(), InvalidField> {
        check_topic(&self.topic)?;
        check_url(&self.url)?;
        if let Some(t) = self.timeout_ms
            && !(1..=MAX_TIMEOUT_MS).contains(&t)
        {
            return Err(InvalidField::new(
                "timeout_ms",
                format!("is {t}, it must be 1 to {MAX_TIMEOUT_MS} ms"),
            ));
        }
        if !(1..=MAX_CONCURRENCY).contains(&self.concurrency) {
            return Err(InvalidField::new(
                "concurrency",
                format!("is {}, it must be 1 to {MAX_CONCURRENCY}", self.concurrency),
            ));
        }
        if let Some(r) = self.rate_per_s
            && !(r.is_finite() && r > 0.0 && r <= MAX_RATE_PER_S)
        {
            return Err(InvalidField::new(
                "rate_per_s",
                format!("is {r}, it must be above 0 and at most {MAX_RATE_PER_S}"),
            ));
        }
        if let Some(b) = self.burst {
            if self.rate_per_s.is_none() {
                return Err(InvalidField::new("burst", "needs rate_per_s"));
            }
            if !(1..=MAX_BURST).contains(&b) {
                return Err(InvalidField::new(
                    "burst",
                    format!("is {b}, it must be 1 to {MAX_BURST}"),
                ));
            }
        }
        if self.headers.len() > MAX_HEADERS {
            return Err(InvalidField::new(
                "headers",
                format!(
                    "has {} headers, the limit is {MAX_HEADERS}",
                    self.headers.len()
                ),
            ));
        }
        for (name, value) in &self.headers {
            check_header(name, value)?;
        }
        if let Some(s) = &self.secret
            && (s.is_empty() || s.len() > MAX_VALUE_LEN)
        {
            return Err(InvalidField::new(
                "secret",
                format!("must be 1 to {MAX_VALUE_LEN} bytes"),
            ));
        }
        Ok(())
    }

    /// The burst of the token bucket: as given, else one second's worth of the rate (at
    /// least 1).
    pub fn effective_burst(&self) -> Option<u32> {
        let rate = self.rate_per_s?;
        Some(
            self.burst
                .unwrap_or_else(|| rate.ceil().clamp(1.0, MAX_BURST as f64) as u32),
        )
    }

    /// The target as shown to clients: the secret replaced by whether there is one.
    pub fn view(&self) -> TargetView {
        TargetView {
            topic: self.topic.clone(),
            url: self.url.clone(),
            timeout_ms: self.timeout_ms,
            concurrency: self.concurrency,
            rate_per_s: self.rate_per_s,
            burst: self.effective_burst(),
            headers: self.headers.clone(),
            has_secret: self.secret.is_some(),
        }
    }
}

/// A target as `GET /push` shows it: never the secret itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct TargetView {
    /// The topic.
    pub topic: String,
    /// The URL.
    pub url: String,
    /// The call timeout; absent: the task's ttr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Most calls at once.
    pub concurrency: u32,
    /// The rate limit, calls per second; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_s: Option<f64>,
    /// The token bucket's size; absent with no rate limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// The extra headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Whether calls are signed.
    pub has_secret: bool,
}

/// Checks a target URL: absolute, `http` or `https`, with a host.
pub fn check_url(url: &str) -> Result<Url, InvalidField> {
    if url.len() > MAX_URL_LEN {
        return Err(InvalidField::new(
            "url",
            format!("is {} bytes, the limit is {MAX_URL_LEN}", url.len()),
        ));
    }
    let parsed = Url::parse(url)
        .map_err(|e| InvalidField::new("url", format!("is not an absolute URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(InvalidField::new(
            "url",
            format!(
                "has the scheme {:?}, it must be http or https",
                parsed.scheme()
            ),
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(InvalidField::new("url", "has no host"));
    }
    Ok(parsed)
}

/// Checks one extra header: a valid name that is not reserved, a valid value.
fn check_header(name: &str, value: &str) -> Result<(), InvalidField> {
    let field = || format!("headers.{name}");
    if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(InvalidField::new(field(), "is not a valid header name"));
    }
    let lower = name.to_ascii_lowercase();
    if lower.starts_with("delayq-") || RESERVED_HEADERS.contains(&lower.as_str()) {
        return Err(InvalidField::new(
            field(),
            "is set by delayq itself (Delayq-*, Host, Content-Length and the connection headers cannot be overridden)",
        ));
    }
    if value.len() > MAX_VALUE_LEN || reqwest::header::HeaderValue::from_str(value).is_err() {
        return Err(InvalidField::new(
            field(),
            format!("must be visible ASCII text of at most {MAX_VALUE_LEN} bytes"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_field() {
        let ok = PushTarget::new("orders", "https://example.com/hook");
        let cases: Vec<(PushTarget, Option<&str>)> = vec![
            (ok.clone(), None),
            (PushTarget::new("orders", "http://127.0.0.1:8080/x"), None),
            (PushTarget::new("bad topic", "http://a/"), Some("topic")),
            (PushTarget::new("orders", "ftp://a/"), Some("url")),
            (PushTarget::new("orders", "/relative"), Some("url")),
            (PushTarget::new("orders", "http://"), Some("url")),
            (ok.clone().timeout_ms(0), Some("timeout_ms")),
            (
                ok.clone().timeout_ms(MAX_TIMEOUT_MS + 1),
                Some("timeout_ms"),
            ),
            (ok.clone().concurrency(0), Some("concurrency")),
            (
                ok.clone().concurrency(MAX_CONCURRENCY + 1),
                Some("concurrency"),
            ),
            (ok.clone().rate(0.0, None), Some("rate_per_s")),
            (ok.clone().rate(f64::NAN, None), Some("rate_per_s")),
            (ok.clone().rate(0.5, Some(0)), Some("burst")),
            (ok.clone().rate(0.5, Some(3)), None),
            (ok.clone().header("X-Env", "prod"), None),
            (ok.clone().header("Content-Type", "application/json"), None),
            (
                ok.clone().header("Delayq-Id", "x"),
                Some("headers.Delayq-Id"),
            ),
            (
                ok.clone().header("delayq-topic", "x"),
                Some("headers.delayq-topic"),
            ),
            (ok.clone().header("Host", "x"), Some("headers.Host")),
            (
                ok.clone().header("content-length", "1"),
                Some("headers.content-length"),
            ),
            (ok.clone().header("bad name", "x"), Some("headers.bad name")),
            (ok.clone().header("X-A", "line\nbreak"), Some("headers.X-A")),
            (ok.clone().secret(""), Some("secret")),
            (ok.clone().secret("s3cret"), None),
        ];
        for (target, field) in cases {
            let got = target.validate().err().map(|e| e.field);
            assert_eq!(got.as_deref(), field, "{target:?}");
        }
        let mut burst_alone = ok.clone();
        burst_alone.burst = Some(5);
        assert_eq!(burst_alone.validate().unwrap_err().field, "burst");
    }

    #[test]
    fn the_view_hides_the_secret_and_fills_the_burst() {
        let t = PushTarget::new("a", "http://h/")
            .secret("k")
            .rate(2.5, None);
        let v = t.view();
        assert!(v.has_secret);
        assert_eq!(v.burst, Some(3));
        let json = serde_json::to_string(&v).unwrap();
        assert!(!json.contains("\"k\""), "{json}");
    }

    #[test]
    fn a_missing_concurrency_takes_the_default() {
        let t: PushTarget = serde_json::from_str(r#"{"topic":"a","url":"http://h/"}"#).unwrap();
        assert_eq!(t.concurrency, DEFAULT_CONCURRENCY);
    }
}
