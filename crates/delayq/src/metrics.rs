//! Counters and histograms the queue keeps about itself: global ones, exported by the server
//! as Prometheus text, and the same activity per topic, which the dashboard turns into rates.
//!
//! Lock-free on the hot paths: every update is an atomic add. The per-topic counters live in
//! a map of topic → `Arc<TopicCounters>`; an operation finds its topic's entry once (a read
//! lock and one hash lookup, a write lock only the first time a topic is seen), and the
//! embedded engine keeps the `Arc` beside its own per-topic state, so firing a due task costs
//! no lookup at all.
//!
//! Where each count is taken, so that summing the instances of a Redis deployment counts
//! every event once:
//! - `added`, `finished` and the failures of consumers (release, bury) by [`crate::Queue`],
//!   on the instance that served the request;
//! - `fired` (with its lateness), ttr expiries and `dead` by the storage backend, where the
//!   transition happens: the engine's timers, or in Redis mode the instance whose promoter
//!   or request ran the script.
//!
//! The spans of a traced task's events ([`crate::spans`]) are recorded at the same places, so
//! each is recorded once too.
//!
//! Memory: one [`TopicCounters`] is 17 counters (136 bytes) behind an `Arc`; with the map's
//! entry and the shared name that is about 200 bytes per topic plus the name's length. Entries
//! are never removed (a topic's record in the engine is not either), so the map grows with the
//! number of topics ever used, like the storage's own index of topics.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;

use crate::spans::Spans;

/// Upper bounds (ms, inclusive) of the fire-lateness histogram buckets; the last is +Inf.
pub const LATENESS_BUCKETS_MS: [u64; 12] = [0, 1, 2, 3, 5, 10, 25, 50, 100, 250, 1_000, 5_000];

/// Number of lateness buckets including the +Inf one: the length of every
/// `lateness_cumulative`.
pub const LATENESS_BUCKETS: usize = LATENESS_BUCKETS_MS.len() + 1;

/// The queue's own metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    lateness: [AtomicU64; LATENESS_BUCKETS],
    lateness_sum_ms: AtomicU64,
    fired: AtomicU64,
    ttr_expired: AtomicU64,
    dead: AtomicU64,
    expired: AtomicU64,
    topics: RwLock<HashMap<Arc<str>, Arc<TopicCounters>>>,
    /// The spans of traced tasks' events ([`crate::spans`]), recorded where the counters are.
    spans: Spans,
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
    /// delayq's own spans that the collector accepted (docs/tracing.md).
    pub spans_exported: u64,
    /// delayq's own spans dropped: the export queue was full, or the collector failed.
    pub spans_dropped: u64,
    /// Tasks whose expiry passed before they were handed out.
    pub expired: u64,
}

/// The live counters of one topic. Obtained from [`Metrics::topic`]; updated through the
/// `observe_*` methods of [`Metrics`], which also keep the global counters.
#[derive(Debug, Default)]
pub struct TopicCounters {
    added: AtomicU64,
    finished: AtomicU64,
    failed: AtomicU64,
    dead: AtomicU64,
    expired: AtomicU64,
    /// Fires per lateness bucket (not cumulative); their sum is the number fired, so a fire
    /// costs one atomic add per topic.
    lateness: [AtomicU64; LATENESS_BUCKETS],
}

/// The cumulative activity of one topic since this process started (see [`crate::Queue::activity`]).
/// Two snapshots taken a second apart give the rates of that second; counters only grow,
/// except that they start again from zero when the process restarts.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct TopicActivity {
    /// Tasks added (new or replacing a task with the same id).
    pub added: u64,
    /// Tasks moved from DELAYED to READY by their due time.
    pub fired: u64,
    /// Tasks finished (by a consumer, or as handed out with `auto_finish`).
    pub finished: u64,
    /// Attempts that failed: releases, buries and ttr expiries.
    pub failed: u64,
    /// Tasks that went DEAD (retries exhausted, buried, or expired).
    pub dead: u64,
    /// Tasks whose expiry passed before they were handed out (DEAD or dropped).
    pub expired: u64,
    /// Fires per lateness bucket, cumulative as in [`MetricsSnapshot::lateness_cumulative`]:
    /// [`LATENESS_BUCKETS`] entries, the last equal to `fired`.
    pub lateness_cumulative: Vec<u64>,
}

impl TopicActivity {
    /// An activity from its parts (for a caller outside this crate, e.g. one decoding what
    /// another instance published). `lateness_cumulative` should have [`LATENESS_BUCKETS`]
    /// entries; `fired` is taken as its last.
    pub fn from_parts(
        added: u64,
        finished: u64,
        failed: u64,
        dead: u64,
        lateness_cumulative: Vec<u64>,
    ) -> Self {
        TopicActivity {
            added,
            fired: lateness_cumulative.last().copied().unwrap_or(0),
            finished,
            failed,
            dead,
            expired: 0,
            lateness_cumulative,
        }
    }

    /// The same activity with this count of expired tasks.
    pub fn with_expired(mut self, expired: u64) -> Self {
        self.expired = expired;
        self
    }
}

/// Which bucket of [`LATENESS_BUCKETS_MS`] (or the +Inf one) a lateness falls in.
fn lateness_bucket(lateness_ms: u64) -> usize {
    LATENESS_BUCKETS_MS
        .iter()
        .position(|&b| lateness_ms <= b)
        .unwrap_or(LATENESS_BUCKETS_MS.len())
}

impl Metrics {
    /// Metrics that also record the spans of traced tasks to `spans`.
    pub fn with_spans(spans: Spans) -> Metrics {
        Metrics {
            spans,
            ..Metrics::default()
        }
    }

    /// Where the events of traced tasks are recorded as spans (off unless given).
    pub fn spans(&self) -> &Spans {
        &self.spans
    }

    /// The counters of `topic`, created the first time it is named.
    pub fn topic(&self, topic: &str) -> Arc<TopicCounters> {
        if let Some(c) = self.topics.read().get(topic) {
            return Arc::clone(c);
        }
        let mut topics = self.topics.write();
        Arc::clone(topics.entry(Arc::from(topic)).or_default())
    }

    /// Records that a task of `topic` became ready `lateness_ms` after its due time.
    pub fn observe_fire(&self, topic: &TopicCounters, lateness_ms: u64) {
        let bucket = lateness_bucket(lateness_ms);
        self.lateness[bucket].fetch_add(1, Ordering::Relaxed);
        self.lateness_sum_ms
            .fetch_add(lateness_ms, Ordering::Relaxed);
        self.fired.fetch_add(1, Ordering::Relaxed);
        topic.lateness[bucket].fetch_add(1, Ordering::Relaxed);
    }

    /// Records an attempt of a task of `topic` that ran past its ttr (a failed attempt).
    pub fn observe_ttr_expired(&self, topic: &TopicCounters) {
        self.ttr_expired.fetch_add(1, Ordering::Relaxed);
        topic.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a task of `topic` going DEAD.
    pub fn observe_dead(&self, topic: &TopicCounters) {
        self.dead.fetch_add(1, Ordering::Relaxed);
        topic.dead.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a task of `topic` whose expiry passed before it was handed out.
    pub fn observe_expired(&self, topic: &TopicCounters) {
        self.expired.fetch_add(1, Ordering::Relaxed);
        topic.expired.fetch_add(1, Ordering::Relaxed);
    }

    /// Records `n` tasks of `topic` added.
    pub fn observe_added(&self, topic: &TopicCounters, n: u64) {
        topic.added.fetch_add(n, Ordering::Relaxed);
    }

    /// Records `n` tasks of `topic` finished.
    pub fn observe_finished(&self, topic: &TopicCounters, n: u64) {
        topic.finished.fetch_add(n, Ordering::Relaxed);
    }

    /// Records an attempt of a task of `topic` that a consumer gave up (release or bury).
    pub fn observe_failed(&self, topic: &TopicCounters) {
        topic.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// A consistent-enough copy of the global metrics for export.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let (spans_exported, spans_dropped) = self.spans.counters().snapshot();
        MetricsSnapshot {
            lateness_cumulative: cumulative(&self.lateness),
            lateness_sum_ms: self.lateness_sum_ms.load(Ordering::Relaxed),
            fired: self.fired.load(Ordering::Relaxed),
            ttr_expired: self.ttr_expired.load(Ordering::Relaxed),
            dead: self.dead.load(Ordering::Relaxed),
            spans_exported,
            spans_dropped,
            expired: self.expired.load(Ordering::Relaxed),
        }
    }

    /// The cumulative activity of every topic seen, ordered by name. Each counter is read
    /// on its own (no lock against updates), so a snapshot taken during activity may be
    /// a few events apart between counters; every counter is exact by the next snapshot.
    pub fn activity(&self) -> Vec<(String, TopicActivity)> {
        let topics: Vec<(Arc<str>, Arc<TopicCounters>)> = self
            .topics
            .read()
            .iter()
            .map(|(name, c)| (Arc::clone(name), Arc::clone(c)))
            .collect();
        let mut out: Vec<(String, TopicActivity)> = topics
            .into_iter()
            .map(|(name, c)| (name.to_string(), c.snapshot()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

impl TopicCounters {
    fn snapshot(&self) -> TopicActivity {
        TopicActivity::from_parts(
            self.added.load(Ordering::Relaxed),
            self.finished.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            self.dead.load(Ordering::Relaxed),
            cumulative(&self.lateness),
        )
        .with_expired(self.expired.load(Ordering::Relaxed))
    }
}

fn cumulative(buckets: &[AtomicU64]) -> Vec<u64> {
    let mut running = 0;
    buckets
        .iter()
        .map(|b| {
            running += b.load(Ordering::Relaxed);
            running
        })
        .collect()
}

/// The `q` quantile (0.0–1.0) of a lateness histogram given as counts per bucket (not
/// cumulative) of [`LATENESS_BUCKETS_MS`] then +Inf: the upper bound of the bucket that holds
/// it, so "p99 ≤ this many ms". A quantile in the +Inf bucket answers the last finite bound
/// (more than 5 000 ms is shown as 5 000, as Prometheus' `histogram_quantile` does). `None`
/// when the histogram is empty.
pub fn lateness_quantile(counts: &[u64], q: f64) -> Option<u64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    // The rank of the quantile, 1-based: the smallest observation with at least q of all at
    // or below it.
    let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
    let mut seen = 0;
    for (i, &n) in counts.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return Some(bucket_bound(i));
        }
    }
    Some(bucket_bound(counts.len().saturating_sub(1)))
}

/// The `q` quantile of the fires between two cumulative histograms (`before` taken earlier
/// than `after`, e.g. two [`TopicActivity::lateness_cumulative`]), as [`lateness_quantile`]
/// says. A counter that went down (the process restarted in between) counts from zero.
pub fn lateness_quantile_between(before: &[u64], after: &[u64], q: f64) -> Option<u64> {
    lateness_quantile(&bucket_counts_between(before, after), q)
}

/// The fires per bucket (not cumulative) between two cumulative histograms; a reset (a
/// cumulative count that went down) counts `after` from zero.
pub fn bucket_counts_between(before: &[u64], after: &[u64]) -> Vec<u64> {
    let reset = before.len() != after.len() || before.iter().zip(after).any(|(b, a)| a < b);
    let diff: Vec<u64> = if reset {
        after.to_vec()
    } else {
        after.iter().zip(before).map(|(a, b)| a - b).collect()
    };
    let mut prev = 0;
    diff.into_iter()
        .map(|c| {
            // Counters are read one by one, so a cumulative vector can be a little uneven;
            // never answer a negative count.
            let n = c.saturating_sub(prev);
            prev = c.max(prev);
            n
        })
        .collect()
}

fn bucket_bound(i: usize) -> u64 {
    LATENESS_BUCKETS_MS
        .get(i)
        .copied()
        .unwrap_or(LATENESS_BUCKETS_MS[LATENESS_BUCKETS_MS.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lateness_lands_in_the_right_bucket() {
        let m = Metrics::default();
        let t = m.topic("t");
        for ms in [0, 1, 2, 4, 6_000] {
            m.observe_fire(&t, ms);
        }
        let s = m.snapshot();
        // buckets: <=0, <=1, <=2, <=3, <=5, ... , +Inf
        assert_eq!(&s.lateness_cumulative[..5], &[1, 2, 3, 3, 4]);
        assert_eq!(*s.lateness_cumulative.last().unwrap(), 5);
        assert_eq!(s.lateness_sum_ms, 6_007);
        assert_eq!(s.fired, 5);
        let a = m.activity();
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].1.fired, 5);
        assert_eq!(a[0].1.lateness_cumulative, s.lateness_cumulative);
    }

    #[test]
    fn each_topic_counts_its_own_activity() {
        let m = Metrics::default();
        let (a, b) = (m.topic("a"), m.topic("b"));
        assert!(Arc::ptr_eq(&a, &m.topic("a")), "one entry per topic");
        m.observe_added(&a, 3);
        m.observe_added(&b, 1);
        m.observe_finished(&a, 2);
        m.observe_failed(&b);
        m.observe_ttr_expired(&b);
        m.observe_dead(&b);
        m.observe_fire(&a, 7);
        let act = m.activity();
        let names: Vec<&str> = act.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        let (ta, tb) = (&act[0].1, &act[1].1);
        assert_eq!(
            (ta.added, ta.fired, ta.finished, ta.failed, ta.dead),
            (3, 1, 2, 0, 0)
        );
        assert_eq!(
            (tb.added, tb.fired, tb.finished, tb.failed, tb.dead),
            (1, 0, 0, 2, 1)
        );
        assert_eq!(ta.lateness_cumulative.len(), LATENESS_BUCKETS);
        // The global counters still see everything.
        let s = m.snapshot();
        assert_eq!((s.fired, s.ttr_expired, s.dead), (1, 1, 1));
    }

    #[test]
    fn quantiles_of_bucket_counts() {
        let mut only_1ms = [0; LATENESS_BUCKETS];
        only_1ms[1] = 10;
        let mut spread = [0; LATENESS_BUCKETS];
        spread[0] = 98; // <= 0 ms
        spread[5] = 1; // <= 10 ms
        spread[LATENESS_BUCKETS - 1] = 1; // +Inf
        let mut all_inf = [0; LATENESS_BUCKETS];
        all_inf[LATENESS_BUCKETS - 1] = 4;
        let table: [(&[u64], f64, Option<u64>); 8] = [
            (&[0; LATENESS_BUCKETS], 0.5, None),
            (&only_1ms, 0.5, Some(1)),
            (&only_1ms, 0.99, Some(1)),
            (&spread, 0.5, Some(0)),
            (&spread, 0.98, Some(0)),
            (&spread, 0.99, Some(10)),
            (&spread, 1.0, Some(5_000)),
            (&all_inf, 0.5, Some(5_000)),
        ];
        for (counts, q, want) in table {
            assert_eq!(lateness_quantile(counts, q), want, "{counts:?} q={q}");
        }
    }

    #[test]
    fn counts_between_cumulative_histograms() {
        let table: [(&[u64], &[u64], &[u64]); 5] = [
            (&[0, 0, 0], &[1, 3, 6], &[1, 2, 3]),
            (&[1, 3, 6], &[1, 3, 6], &[0, 0, 0]),
            (&[1, 3, 6], &[2, 5, 9], &[1, 1, 1]),
            // A restart in between: the counters start again from zero.
            (&[5, 9, 9], &[1, 1, 2], &[1, 0, 1]),
            // A snapshot read while a fire landed: never negative.
            (&[0, 0, 0], &[2, 1, 3], &[2, 0, 1]),
        ];
        for (before, after, want) in table {
            assert_eq!(
                bucket_counts_between(before, after),
                want,
                "{before:?} → {after:?}"
            );
        }
        let before = [0; LATENESS_BUCKETS];
        let mut after = [0; LATENESS_BUCKETS];
        after.iter_mut().skip(2).for_each(|c| *c = 4); // 4 fires at <= 2 ms
        assert_eq!(lateness_quantile_between(&before, &after, 0.99), Some(2));
    }
}
