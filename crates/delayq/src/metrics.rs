//! Counters and histograms the queue keeps about itself, exported by the server as
//! Prometheus text. Lock-free: every update is one atomic add.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds (ms, inclusive) of the fire-lateness histogram buckets; the last is +Inf.
pub const LATENESS_BUCKETS_MS: [u64; 12] = [0, 1, 2, 3, 5, 10, 25, 50, 100, 250, 1_000, 5_000];

/// The queue's own metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    lateness: [AtomicU64; LATENESS_BUCKETS_MS.len() + 1],
    lateness_sum_ms: AtomicU64,
    fired: AtomicU64,
    ttr_expired: AtomicU64,
    dead: AtomicU64,
}

/// A copy of the metrics at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MetricsSnapshot {
    /// Cumulative counts per bucket of [`LATENESS_BUCKETS_MS`], then +Inf (Prometheus `le`).
    pub lateness_cumulative: Vec<u64>,
    /// Sum of all lateness observations, in ms.
    pub lateness_sum_ms: u64,
    /// Tasks moved from DELAYED to READY by their due time.
    pub fired: u64,
    /// Attempts that ran past their ttr.
    pub ttr_expired: u64,
    /// Tasks that went DEAD.
    pub dead: u64,
}

impl Metrics {
    /// Records that a task became ready `lateness_ms` after its due time.
    pub fn observe_fire(&self, lateness_ms: u64) {
        let bucket = LATENESS_BUCKETS_MS
            .iter()
            .position(|&b| lateness_ms <= b)
            .unwrap_or(LATENESS_BUCKETS_MS.len());
        self.lateness[bucket].fetch_add(1, Ordering::Relaxed);
        self.lateness_sum_ms
            .fetch_add(lateness_ms, Ordering::Relaxed);
        self.fired.fetch_add(1, Ordering::Relaxed);
    }

    /// Records an attempt that ran past its ttr.
    pub fn observe_ttr_expired(&self) {
        self.ttr_expired.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a task going DEAD.
    pub fn observe_dead(&self) {
        self.dead.fetch_add(1, Ordering::Relaxed);
    }

    /// A consistent-enough copy for export.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let mut running = 0;
        let lateness_cumulative = self
            .lateness
            .iter()
            .map(|b| {
                running += b.load(Ordering::Relaxed);
                running
            })
            .collect();
        MetricsSnapshot {
            lateness_cumulative,
            lateness_sum_ms: self.lateness_sum_ms.load(Ordering::Relaxed),
            fired: self.fired.load(Ordering::Relaxed),
            ttr_expired: self.ttr_expired.load(Ordering::Relaxed),
            dead: self.dead.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lateness_lands_in_the_right_bucket() {
        let m = Metrics::default();
        for ms in [0, 1, 2, 4, 6_000] {
            m.observe_fire(ms);
        }
        let s = m.snapshot();
        // buckets: <=0, <=1, <=2, <=3, <=5, ... , +Inf
        assert_eq!(&s.lateness_cumulative[..5], &[1, 2, 3, 3, 4]);
        assert_eq!(*s.lateness_cumulative.last().unwrap(), 5);
        assert_eq!(s.lateness_sum_ms, 6_007);
        assert_eq!(s.fired, 5);
    }
}
