//! Per-topic delivery figures, kept by this instance: delivered, failed by class, in flight,
//! and the target's latency as a histogram (cumulative buckets, the Prometheus way). In
//! Redis mode each instance counts the calls it made.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use delayq_api::push::PushFigures;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::rules::FailureClass;

/// The upper bounds of the latency buckets, in ms.
pub const LATENCY_BUCKETS_MS: [u64; 10] = [1, 2, 5, 10, 25, 50, 100, 250, 1_000, 5_000];

/// The live counters of one topic.
#[derive(Debug, Default)]
pub(crate) struct TopicCounters {
    delivered: AtomicU64,
    failed_status: AtomicU64,
    failed_timeout: AtomicU64,
    failed_connect: AtomicU64,
    in_flight: AtomicU64,
    latency_count: AtomicU64,
    latency_sum_ms: AtomicU64,
    /// Non-cumulative counts per bucket; the last one is over the largest bound.
    latency_buckets: [AtomicU64; LATENCY_BUCKETS_MS.len() + 1],
}

impl TopicCounters {
    pub(crate) fn call_started(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a call that got an answer or failed, with how long it took.
    pub(crate) fn call_ended(&self, failure: Option<FailureClass>, latency_ms: u64) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        let counter = match failure {
            None => &self.delivered,
            Some(FailureClass::Status) => &self.failed_status,
            Some(FailureClass::Timeout) => &self.failed_timeout,
            Some(FailureClass::Connect) => &self.failed_connect,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_sum_ms.fetch_add(latency_ms, Ordering::Relaxed);
        let i = LATENCY_BUCKETS_MS
            .iter()
            .position(|&b| latency_ms <= b)
            .unwrap_or(LATENCY_BUCKETS_MS.len());
        self.latency_buckets[i].fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> PushStats {
        let mut cumulative = 0;
        let buckets = self
            .latency_buckets
            .iter()
            .map(|b| {
                cumulative += b.load(Ordering::Relaxed);
                cumulative
            })
            .collect();
        PushStats {
            delivered: self.delivered.load(Ordering::Relaxed),
            failed_status: self.failed_status.load(Ordering::Relaxed),
            failed_timeout: self.failed_timeout.load(Ordering::Relaxed),
            failed_connect: self.failed_connect.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            latency_count: self.latency_count.load(Ordering::Relaxed),
            latency_sum_ms: self.latency_sum_ms.load(Ordering::Relaxed),
            latency_buckets: buckets,
        }
    }
}

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

/// The counters of every topic that had a target on this instance.
#[derive(Debug, Default, Clone)]
pub(crate) struct StatsRegistry {
    topics: Arc<Mutex<BTreeMap<String, Arc<TopicCounters>>>>,
}

impl StatsRegistry {
    pub(crate) fn topic(&self, topic: &str) -> Arc<TopicCounters> {
        Arc::clone(self.topics.lock().entry(topic.to_owned()).or_default())
    }

    pub(crate) fn get(&self, topic: &str) -> Option<PushStats> {
        self.topics.lock().get(topic).map(|c| c.snapshot())
    }

    pub(crate) fn all(&self) -> Vec<(String, PushStats)> {
        self.topics
            .lock()
            .iter()
            .map(|(t, c)| (t.clone(), c.snapshot()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_land_in_their_class_and_bucket() {
        let c = TopicCounters::default();
        let calls: &[(Option<FailureClass>, u64)] = &[
            (None, 0),
            (None, 3),
            (Some(FailureClass::Status), 30),
            (Some(FailureClass::Timeout), 5_000),
            (Some(FailureClass::Connect), 9_999),
        ];
        for &(failure, ms) in calls {
            c.call_started();
            c.call_ended(failure, ms);
        }
        c.call_started();
        let s = c.snapshot();
        assert_eq!(
            (
                s.delivered,
                s.failed_status,
                s.failed_timeout,
                s.failed_connect,
                s.in_flight
            ),
            (2, 1, 1, 1, 1)
        );
        assert_eq!(s.latency_count, 5);
        assert_eq!(s.latency_sum_ms, 15_032);
        assert_eq!(s.latency_buckets, vec![1, 1, 2, 2, 2, 3, 3, 3, 3, 4, 5]);
        // (q, bound): the bucket where the q-th call falls.
        for (q, bound) in [(0.2, 1), (0.4, 5), (0.6, 50), (0.8, 5_000), (0.99, 5_000)] {
            assert_eq!(s.latency_quantile_ms(q), bound, "q = {q}");
        }
        let f = s.figures();
        assert_eq!(
            (f.delivered, f.latency_avg_ms, f.latency_p99_ms),
            (2, 3_006, 5_000)
        );
        assert_eq!(PushStats::default().figures().latency_p99_ms, 0);
    }
}
