//! Push delivery on the wire (docs/design.md §8): a topic's target as `POST /push` takes it
//! and the settings store keeps it, as `GET /push` shows it (never the secret), and the push
//! figures of `/stats` ([`PushFigures`]) and the per-topic counters behind them and `/metrics`
//! ([`PushStats`], kept here so that the HTTP app reads them without depending on the
//! dispatcher). The checks of a target (URL, headers) are the dispatcher's, in
//! `delayq-push`, which needs an HTTP library this crate does without.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// The concurrency of a target that does not say: small, so one slow target holds few calls.
pub const DEFAULT_CONCURRENCY: u32 = 4;
/// The largest burst a target may ask for.
pub const MAX_BURST: u32 = 1_000_000;

fn default_concurrency() -> u32 {
    DEFAULT_CONCURRENCY
}

/// The push target of one topic (docs/design.md §8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
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

/// The query of `GET /push` (one topic, or every target) and `DELETE /push` (one topic).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PushQuery {
    /// The topic; `GET` without it lists every target.
    #[serde(default)]
    pub topic: Option<String>,
}

/// The `data` of `GET /push`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PushList {
    /// The targets, by topic.
    pub targets: Vec<TargetView>,
    /// How many.
    pub total: u64,
}

/// The `data` of `DELETE /push`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PushDeleted {
    /// The topic.
    pub topic: String,
    /// Whether it had a target.
    pub deleted: bool,
}

/// A topic's push figures in `/stats`, counted by the instance that answers (in Redis mode
/// each instance counts the calls it made) since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[non_exhaustive]
pub struct PushFigures {
    /// Calls answered 2xx (tasks finished).
    pub delivered: u64,
    /// Calls answered with another status.
    pub failed_status: u64,
    /// Calls with no answer in time.
    pub failed_timeout: u64,
    /// Calls that could not connect (refused, reset, TLS, DNS, not allowed by push_allow).
    pub failed_connect: u64,
    /// Calls under way now.
    pub in_flight: u64,
    /// Mean time of a call, ms (0 before the first).
    pub latency_avg_ms: u64,
    /// The bucket bound at or under which 99 % of the calls took, ms (the histogram is in
    /// `/metrics`).
    pub latency_p99_ms: u64,
}

impl PushFigures {
    /// The figures from the counters.
    pub fn new(
        delivered: u64,
        failed: [u64; 3],
        in_flight: u64,
        latency_avg_ms: u64,
        latency_p99_ms: u64,
    ) -> Self {
        PushFigures {
            delivered,
            failed_status: failed[0],
            failed_timeout: failed[1],
            failed_connect: failed[2],
            in_flight,
            latency_avg_ms,
            latency_p99_ms,
        }
    }
}

/// The upper bounds of the latency buckets, in ms.
pub const LATENCY_BUCKETS_MS: [u64; 10] = [1, 2, 5, 10, 25, 50, 100, 250, 1_000, 5_000];

/// A topic's push figures since this instance started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PushStats {
    /// Calls answered 2xx (tasks finished).
    pub delivered: u64,
    /// Calls answered with another status.
    pub failed_status: u64,
    /// Calls with no answer in time.
    pub failed_timeout: u64,
    /// Calls that could not connect (refused, reset, TLS, DNS, not allowed).
    pub failed_connect: u64,
    /// Calls under way now.
    pub in_flight: u64,
    /// Calls timed.
    pub latency_count: u64,
    /// Their total time, ms.
    pub latency_sum_ms: u64,
    /// Cumulative counts of calls at most as long as each bound of
    /// [`LATENCY_BUCKETS_MS`], then all of them.
    pub latency_buckets: Vec<u64>,
}

impl PushStats {
    /// The smallest bucket bound at or under which the fraction `q` of the calls took (ms);
    /// the largest bound when more took longer; 0 before the first call.
    pub fn latency_quantile_ms(&self, q: f64) -> u64 {
        if self.latency_count == 0 {
            return 0;
        }
        let wanted = (self.latency_count as f64 * q).ceil() as u64;
        LATENCY_BUCKETS_MS
            .iter()
            .zip(&self.latency_buckets)
            .find(|&(_, &n)| n >= wanted)
            .map_or(
                LATENCY_BUCKETS_MS[LATENCY_BUCKETS_MS.len() - 1],
                |(&b, _)| b,
            )
    }

    /// The figures `/stats` shows.
    pub fn figures(&self) -> PushFigures {
        PushFigures::new(
            self.delivered,
            [self.failed_status, self.failed_timeout, self.failed_connect],
            self.in_flight,
            self.latency_sum_ms
                .checked_div(self.latency_count)
                .unwrap_or(0),
            self.latency_quantile_ms(0.99),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
