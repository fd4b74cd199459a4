//! A push target: where and how the tasks of one topic are delivered.
//!
//! The model itself is the wire's ([`delayq_api::push::PushTarget`]). A target is checked
//! whole before it is stored ([`validate`]), so the
//! dispatcher never meets a URL it cannot call or a header it may not send: the delivery
//! headers (`Delayq-*`) and the framing headers (`Host`, `Content-Length`, ...) are the
//! dispatcher's own, and a target may not override them.

use delayq::InvalidField;
use delayq::core::validate::check_topic;
pub use delayq_api::push::{DEFAULT_CONCURRENCY, MAX_BURST, PushTarget, TargetView};
use reqwest::Url;

/// The highest concurrency one target may ask for.
pub const MAX_CONCURRENCY: u32 = 1_024;
/// The longest call timeout a target may ask for (1 hour).
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;
/// The highest rate a target may ask for, in calls per second.
pub const MAX_RATE_PER_S: f64 = 1_000_000.0;
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

/// Checks every field of a target; the error names the field and the limit.
pub fn validate(target: &PushTarget) -> Result<(), InvalidField> {
    check_topic(&target.topic)?;
    check_url(&target.url)?;
    if let Some(t) = target.timeout_ms
        && !(1..=MAX_TIMEOUT_MS).contains(&t)
    {
        return Err(InvalidField::new(
            "timeout_ms",
            format!("is {t}, it must be 1 to {MAX_TIMEOUT_MS} ms"),
        ));
    }
    if !(1..=MAX_CONCURRENCY).contains(&target.concurrency) {
        return Err(InvalidField::new(
            "concurrency",
            format!(
                "is {}, it must be 1 to {MAX_CONCURRENCY}",
                target.concurrency
            ),
        ));
    }
    if let Some(r) = target.rate_per_s
        && !(r.is_finite() && r > 0.0 && r <= MAX_RATE_PER_S)
    {
        return Err(InvalidField::new(
            "rate_per_s",
            format!("is {r}, it must be above 0 and at most {MAX_RATE_PER_S}"),
        ));
    }
    if let Some(b) = target.burst {
        if target.rate_per_s.is_none() {
            return Err(InvalidField::new("burst", "needs rate_per_s"));
        }
        if !(1..=MAX_BURST).contains(&b) {
            return Err(InvalidField::new(
                "burst",
                format!("is {b}, it must be 1 to {MAX_BURST}"),
            ));
        }
    }
    if target.headers.len() > MAX_HEADERS {
        return Err(InvalidField::new(
            "headers",
            format!(
                "has {} headers, the limit is {MAX_HEADERS}",
                target.headers.len()
            ),
        ));
    }
    for (name, value) in &target.headers {
        check_header(name, value)?;
    }
    if let Some(s) = &target.secret
        && (s.is_empty() || s.len() > MAX_VALUE_LEN)
    {
        return Err(InvalidField::new(
            "secret",
            format!("must be 1 to {MAX_VALUE_LEN} bytes"),
        ));
    }
    Ok(())
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
            let got = validate(&target).err().map(|e| e.field);
            assert_eq!(got.as_deref(), field, "{target:?}");
        }
        let mut burst_alone = ok.clone();
        burst_alone.burst = Some(5);
        assert_eq!(validate(&burst_alone).unwrap_err().field, "burst");
    }
}
