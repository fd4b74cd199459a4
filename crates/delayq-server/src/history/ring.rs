//! The pure pieces of the history: what happened over an interval ([`Delta`], the difference
//! of two cumulative activities, restarts included), the fixed-size bucket it is added into
//! ([`Bucket`]), and a ring of such buckets that keeps the last `len` steps ([`Ring`]).
//!
//! A ring is an array indexed by bucket number modulo its length (bucket number = time /
//! step). It remembers the newest bucket number; a sample for a newer bucket clears the
//! buckets it skips (at most the whole ring) and becomes the newest, a sample for an older
//! bucket still inside the window is added where it belongs (late data from another
//! instance), and one older than the window is dropped. Memory is fixed at creation.

use delayq::metrics::{LATENESS_BUCKETS, TopicActivity, bucket_counts_between};

/// The counters a bucket keeps, in this order.
pub(crate) const ADDED: usize = 0;
pub(crate) const FIRED: usize = 1;
pub(crate) const FINISHED: usize = 2;
pub(crate) const FAILED: usize = 3;
/// How many counters a bucket keeps.
pub(crate) const COUNTERS: usize = 4;

/// What happened over an interval: tasks added, fired, finished, failed attempts, and the
/// fires per lateness bucket (not cumulative).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Delta {
    pub counts: [u64; COUNTERS],
    pub lateness: [u64; LATENESS_BUCKETS],
}

impl Delta {
    /// What happened between two cumulative readings of one topic. With no earlier reading,
    /// or when any counter went down (the counting process restarted in between), the
    /// counters start from zero: the delta is everything in `after`.
    pub fn between(before: Option<&TopicActivity>, after: &TopicActivity) -> Delta {
        let zero = TopicActivity::default();
        let before = match before {
            Some(b) if !went_down(b, after) => b,
            _ => &zero,
        };
        let mut lateness = [0; LATENESS_BUCKETS];
        let empty = [0u64; LATENESS_BUCKETS];
        let b_lat = if before.lateness_cumulative.is_empty() {
            &empty[..]
        } else {
            &before.lateness_cumulative[..]
        };
        for (slot, n) in lateness
            .iter_mut()
            .zip(bucket_counts_between(b_lat, &after.lateness_cumulative))
        {
            *slot = n;
        }
        Delta {
            counts: [
                after.added - before.added,
                after.fired - before.fired,
                after.finished - before.finished,
                after.failed - before.failed,
            ],
            lateness,
        }
    }

    /// Whether nothing happened.
    pub fn is_zero(&self) -> bool {
        self.counts.iter().all(|&c| c == 0) && self.lateness.iter().all(|&c| c == 0)
    }

    /// Adds `other` to this one.
    pub fn add(&mut self, other: &Delta) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a = a.saturating_add(b);
        }
        for (a, b) in self.lateness.iter_mut().zip(other.lateness) {
            *a = a.saturating_add(b);
        }
    }

    /// The delta as one flat list: the counters, then the lateness buckets (the published
    /// form, see `publish.rs`).
    pub fn to_flat(&self) -> Vec<u64> {
        self.counts.iter().chain(&self.lateness).copied().collect()
    }

    /// The delta from [`Delta::to_flat`]'s form; `None` when the length is wrong.
    pub fn from_flat(flat: &[u64]) -> Option<Delta> {
        if flat.len() != COUNTERS + LATENESS_BUCKETS {
            return None;
        }
        let mut d = Delta::default();
        d.counts.copy_from_slice(&flat[..COUNTERS]);
        d.lateness.copy_from_slice(&flat[COUNTERS..]);
        Some(d)
    }
}

/// Whether any counter of `after` is below the same counter of `before`: the process that
/// counts restarted in between.
fn went_down(before: &TopicActivity, after: &TopicActivity) -> bool {
    after.added < before.added
        || after.fired < before.fired
        || after.finished < before.finished
        || after.failed < before.failed
        || after.dead < before.dead
        || before.lateness_cumulative.len() != after.lateness_cumulative.len()
        || before
            .lateness_cumulative
            .iter()
            .zip(&after.lateness_cumulative)
            .any(|(b, a)| a < b)
}

/// One step of a ring: 4 counters and the lateness histogram, as `u32` (saturating) to keep
/// it at 68 bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Bucket {
    pub counts: [u32; COUNTERS],
    pub lateness: [u32; LATENESS_BUCKETS],
}

impl Bucket {
    fn add(&mut self, d: &Delta) {
        for (a, b) in self.counts.iter_mut().zip(d.counts) {
            *a = a.saturating_add(u32::try_from(b).unwrap_or(u32::MAX));
        }
        for (a, b) in self.lateness.iter_mut().zip(d.lateness) {
            *a = a.saturating_add(u32::try_from(b).unwrap_or(u32::MAX));
        }
    }

    /// The lateness histogram as `u64` counts, for [`delayq::metrics::lateness_quantile`].
    pub fn lateness_counts(&self) -> [u64; LATENESS_BUCKETS] {
        self.lateness.map(u64::from)
    }
}

/// What a ring does with a sample for bucket `n` when its newest bucket is `newest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// `n` is newer: clear the buckets after `newest` up to `n` (at most the whole ring),
    /// make `n` the newest, add there.
    Advance,
    /// `n` is inside the window: add there.
    Inside,
    /// `n` is older than the window: drop it.
    TooOld,
}

/// Where a sample for bucket `n` goes in a ring of `len` buckets whose newest is `newest`.
pub(crate) fn place(newest: Option<u64>, n: u64, len: usize) -> Place {
    match newest {
        None => Place::Advance,
        Some(newest) if n > newest => Place::Advance,
        Some(newest) if newest - n < len as u64 => Place::Inside,
        Some(_) => Place::TooOld,
    }
}

/// The array index of bucket number `n` in a ring of `len`.
pub(crate) fn slot(n: u64, len: usize) -> usize {
    (n % len as u64) as usize
}

/// The last `len` buckets of `step_ms` each. See the module doc.
#[derive(Debug, Clone)]
pub(crate) struct Ring {
    step_ms: u64,
    buckets: Box<[Bucket]>,
    newest: Option<u64>,
}

impl Ring {
    /// An empty ring of `len` buckets of `step_ms`.
    pub fn new(step_ms: u64, len: usize) -> Ring {
        assert!(step_ms > 0 && len > 0, "a ring needs a step and a length");
        Ring {
            step_ms,
            buckets: vec![Bucket::default(); len].into_boxed_slice(),
            newest: None,
        }
    }

    /// The bucket number of the instant `at_ms`.
    pub fn bucket_of(&self, at_ms: u64) -> u64 {
        at_ms / self.step_ms
    }

    /// The newest bucket number, if anything was recorded.
    pub fn newest(&self) -> Option<u64> {
        self.newest
    }

    /// Moves the window so that bucket `n` is inside it (the newest if it is newer), clearing
    /// what falls out. Returns false when `n` is older than the window.
    pub fn advance_to(&mut self, n: u64) -> bool {
        let len = self.buckets.len();
        match place(self.newest, n, len) {
            Place::Advance => {
                let from = match self.newest {
                    Some(newest) => (newest + 1).max(n.saturating_sub(len as u64 - 1)),
                    None => n.saturating_sub(len as u64 - 1),
                };
                for k in from..=n {
                    self.buckets[slot(k, len)] = Bucket::default();
                }
                self.newest = Some(n);
                true
            }
            Place::Inside => true,
            Place::TooOld => false,
        }
    }

    /// Adds `d` to the bucket of `at_ms`. Returns false when that bucket is older than the
    /// window (nothing is added).
    pub fn add(&mut self, at_ms: u64, d: &Delta) -> bool {
        let n = self.bucket_of(at_ms);
        if !self.advance_to(n) {
            return false;
        }
        let len = self.buckets.len();
        self.buckets[slot(n, len)].add(d);
        true
    }

    /// Bucket number `n` if it is inside the window.
    pub fn get(&self, n: u64) -> Option<&Bucket> {
        match self.newest {
            Some(newest) if n <= newest && newest - n < self.buckets.len() as u64 => {
                Some(&self.buckets[slot(n, self.buckets.len())])
            }
            _ => None,
        }
    }

    /// Whether the ring holds no activity in any bucket newer than bucket `n`.
    pub fn quiet_since(&self, n: u64) -> bool {
        match self.newest {
            None => true,
            Some(newest) if newest <= n => true,
            Some(newest) => {
                let oldest = newest
                    .saturating_sub(self.buckets.len() as u64 - 1)
                    .max(n + 1);
                (oldest..=newest).all(|k| self.get(k).is_none_or(|b| *b == Bucket::default()))
            }
        }
    }

    /// Bytes this ring holds (for the documented budget).
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.buckets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn activity(a: u64, f: u64, fin: u64, fail: u64, dead: u64) -> TopicActivity {
        // All fires at <= 0 ms.
        TopicActivity::from_parts(a, fin, fail, dead, vec![f; LATENESS_BUCKETS])
    }

    #[test]
    fn delta_between_readings() {
        let table: [(Option<TopicActivity>, TopicActivity, [u64; 4], u64); 5] = [
            // No earlier reading: everything counts.
            (None, activity(3, 2, 1, 1, 0), [3, 2, 1, 1], 2),
            (
                Some(activity(3, 2, 1, 1, 0)),
                activity(3, 2, 1, 1, 0),
                [0; 4],
                0,
            ),
            (
                Some(activity(3, 2, 1, 1, 0)),
                activity(10, 4, 2, 1, 1),
                [7, 2, 1, 0],
                2,
            ),
            // A restart: counters went down, so they count from zero.
            (
                Some(activity(100, 90, 80, 5, 1)),
                activity(4, 1, 0, 0, 0),
                [4, 1, 0, 0],
                1,
            ),
            // Only `dead` went down: still a restart.
            (
                Some(activity(1, 1, 1, 1, 9)),
                activity(2, 2, 2, 2, 0),
                [2, 2, 2, 2],
                2,
            ),
        ];
        for (before, after, counts, fires_at_0) in table {
            let d = Delta::between(before.as_ref(), &after);
            assert_eq!(d.counts, counts, "{before:?} → {after:?}");
            assert_eq!(d.lateness[0], fires_at_0);
            assert_eq!(d.lateness[1..].iter().sum::<u64>(), 0);
        }
    }

    #[test]
    fn flat_form_round_trips() {
        let mut d = Delta {
            counts: [1, 2, 3, 4],
            ..Delta::default()
        };
        d.lateness[3] = 9;
        assert_eq!(Delta::from_flat(&d.to_flat()), Some(d));
        assert_eq!(Delta::from_flat(&[1, 2, 3]), None);
    }

    #[test]
    fn place_table() {
        let table = [
            (None, 5, 10, Place::Advance),
            (Some(5), 6, 10, Place::Advance),
            (Some(5), 500, 10, Place::Advance),
            (Some(5), 5, 10, Place::Inside),
            (Some(15), 6, 10, Place::Inside),
            (Some(15), 5, 10, Place::TooOld),
            (Some(15), 0, 10, Place::TooOld),
        ];
        for (newest, n, len, want) in table {
            assert_eq!(place(newest, n, len), want, "newest {newest:?}, n {n}");
        }
        assert_eq!(slot(0, 3), 0);
        assert_eq!(slot(7, 3), 1);
    }

    fn one(counter: usize) -> Delta {
        let mut d = Delta::default();
        d.counts[counter] = 1;
        d
    }

    #[test]
    fn ring_keeps_the_window_and_clears_what_falls_out() {
        let mut r = Ring::new(1_000, 4);
        assert!(r.add(10_500, &one(ADDED))); // bucket 10
        assert!(r.add(11_000, &one(ADDED))); // 11
        assert!(r.add(11_999, &one(ADDED))); // 11
        assert_eq!(r.get(10).unwrap().counts[ADDED], 1);
        assert_eq!(r.get(11).unwrap().counts[ADDED], 2);
        // Late data inside the window lands where it belongs.
        assert!(r.add(9_000, &one(FIRED)));
        assert_eq!(r.get(9).unwrap().counts[FIRED], 1);
        // Older than the window (newest 11, len 4: 8..=11): dropped.
        assert!(!r.add(7_999, &one(FIRED)));
        assert!(r.get(7).is_none());
        // Advancing by 2 clears the two buckets that come round again (old 8 and 9 → 12, 13).
        assert!(r.add(13_000, &one(FAILED)));
        assert_eq!(r.get(12), Some(&Bucket::default()));
        assert_eq!(r.get(13).unwrap().counts[FAILED], 1);
        assert!(r.get(9).is_none(), "bucket 9 fell out");
        assert_eq!(r.get(10).unwrap().counts[ADDED], 1);
        // A jump far ahead clears everything.
        assert!(r.add(1_000_000, &one(FINISHED)));
        assert_eq!(r.newest(), Some(1_000));
        for n in 997..1_000 {
            assert_eq!(r.get(n), Some(&Bucket::default()));
        }
        assert!(r.quiet_since(1_000));
        assert!(!r.quiet_since(999));
    }

    #[test]
    fn buckets_saturate_instead_of_wrapping() {
        let mut r = Ring::new(1_000, 2);
        let mut big = Delta::default();
        big.counts[ADDED] = u64::MAX;
        r.add(0, &big);
        r.add(0, &one(ADDED));
        assert_eq!(r.get(0).unwrap().counts[ADDED], u32::MAX);
    }

    #[test]
    fn ring_memory_is_fixed() {
        let mut r = Ring::new(1_000, 60);
        let before = r.heap_bytes();
        for s in 0..10_000u64 {
            r.add(s * 1_000, &one(ADDED));
        }
        assert_eq!(r.heap_bytes(), before);
        assert_eq!(before, 60 * 68);
    }
}
