//! Per-topic delivery figures, kept by this instance: delivered, failed by class, in flight,
//! and the target's latency as a histogram (cumulative buckets, the Prometheus way). In
//! Redis mode each instance counts the calls it made. The snapshot type, [`PushStats`], is
//! the wire crate's, so the HTTP app renders it without depending on this crate.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub use delayq_api::push::{LATENCY_BUCKETS_MS, PushStats};
use parking_lot::Mutex;

use crate::rules::FailureClass;

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
        // `PushStats` is the wire crate's and non-exhaustive: filled field by field.
        let mut s = PushStats::default();
        s.delivered = self.delivered.load(Ordering::Relaxed);
        s.failed_status = self.failed_status.load(Ordering::Relaxed);
        s.failed_timeout = self.failed_timeout.load(Ordering::Relaxed);
        s.failed_connect = self.failed_connect.load(Ordering::Relaxed);
        s.in_flight = self.in_flight.load(Ordering::Relaxed);
        s.latency_count = self.latency_count.load(Ordering::Relaxed);
        s.latency_sum_ms = self.latency_sum_ms.load(Ordering::Relaxed);
        s.latency_buckets = buckets;
        s
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
