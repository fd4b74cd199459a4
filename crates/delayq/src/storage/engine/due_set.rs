//! The per-state due orderings of a topic: an ordered set of keys kept in sorted chunks.
//!
//! A topic's DELAYED ordering holds every delayed task, so its cost per key is a large part
//! of a delayed task's memory (docs/design.md §6). A `BTreeSet` of 16-byte keys splits a full
//! leaf into six and five keys whatever the insertion point; tasks added with one delay arrive
//! in due order, so every leaf but the last stays at six of eleven, and with the internal nodes
//! a key costs about 39 bytes. Here the keys are in sorted `Vec` chunks of at most [`CAP`]
//! keys, found through a `BTreeMap` from each chunk's lower bound:
//!
//! - a key goes into the chunk whose bound is the greatest at or below it (the first chunk,
//!   whose bound is lowered, when it is below every bound);
//! - a full chunk is split before the insert: in two halves, except when the key goes past
//!   the end of the last chunk (adds in due order), where a new chunk starts and the full
//!   one stays full. So keys added in order cost 16 bytes and a sliver of the map's, and keys
//!   added in any order at least half a chunk each (about 22 bytes on average);
//! - removing a key leaves the bound as it is (it stays a lower bound, which is all the lookup
//!   needs) and drops a chunk that became empty, so taking keys from the front, as promotion
//!   does, never touches the map until a chunk is used up.
//!
//! Chunks grow by doubling up to [`CAP`] (a power of two), so a small topic costs little.
//! Each operation is a map lookup (O(log(n / CAP))) and a move of at most [`CAP`] keys.

use std::collections::BTreeMap;
use std::ops::Bound;

/// Keys per chunk: moving 64 keys of 16 bytes is a kilobyte, and the map's entry (about 75
/// bytes with its share of the map's nodes) is a byte or so per key.
pub(crate) const CAP: usize = 64;

/// An ordered set of keys. See the module doc.
#[derive(Debug, Clone)]
pub(crate) struct DueSet<K> {
    /// Chunk lower bound → the chunk's keys, sorted; no chunk is empty, and every key of a
    /// chunk is at or above its bound and below the next chunk's bound.
    chunks: BTreeMap<K, Vec<K>>,
    len: usize,
}

impl<K> Default for DueSet<K> {
    fn default() -> Self {
        DueSet {
            chunks: BTreeMap::new(),
            len: 0,
        }
    }
}

impl<K: Ord + Copy> DueSet<K> {
    /// The number of keys.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the set holds no key.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The least key.
    pub(crate) fn first(&self) -> Option<&K> {
        self.chunks.first_key_value().and_then(|(_, c)| c.first())
    }

    /// The bound of the chunk `key` belongs in, if any chunk's bound is at or below it.
    fn bound_of(&self, key: &K) -> Option<K> {
        self.chunks.range(..=key).next_back().map(|(b, _)| *b)
    }

    /// Adds `key`; returns whether it was new.
    pub(crate) fn insert(&mut self, key: K) -> bool {
        // Past every key (adds with one delay, recovery of a log in due order): one walk down
        // the map's right edge instead of three searches, with the same outcome as below.
        if let Some(mut last) = self.chunks.last_entry()
            && last.get().last().is_some_and(|max| *max < key)
        {
            self.len += 1;
            let chunk = last.get_mut();
            if chunk.len() < CAP {
                chunk.push(key);
            } else {
                self.chunks.insert(key, vec![key]);
            }
            return true;
        }
        let bound = match self.bound_of(&key) {
            Some(b) => b,
            None => match self.chunks.pop_first() {
                // Below every bound: into the first chunk, whose bound comes down to it.
                Some((_, chunk)) => {
                    self.chunks.insert(key, chunk);
                    key
                }
                None => {
                    self.chunks.insert(key, vec![key]);
                    self.len = 1;
                    return true;
                }
            },
        };
        let is_last = self
            .chunks
            .last_key_value()
            .is_some_and(|(last, _)| *last == bound);
        let Some(chunk) = self.chunks.get_mut(&bound) else {
            return false; // not reached: `bound` was just found in the map
        };
        let at = match chunk.binary_search(&key) {
            Ok(_) => return false,
            Err(at) => at,
        };
        self.len += 1;
        if chunk.len() < CAP {
            chunk.insert(at, key);
            return true;
        }
        if at == chunk.len() && is_last {
            // Past the end of the last chunk: a new chunk, the full one stays full.
            self.chunks.insert(key, vec![key]);
            return true;
        }
        let mut upper = chunk.split_off(CAP / 2);
        let upper_bound = upper[0];
        if at <= CAP / 2 {
            chunk.insert(at, key);
        } else {
            upper.insert(at - CAP / 2, key);
        }
        self.chunks.insert(upper_bound, upper);
        true
    }

    /// Removes `key`; returns whether it was there.
    pub(crate) fn remove(&mut self, key: &K) -> bool {
        let Some(bound) = self.bound_of(key) else {
            return false;
        };
        let Some(chunk) = self.chunks.get_mut(&bound) else {
            return false;
        };
        let Ok(at) = chunk.binary_search(key) else {
            return false;
        };
        chunk.remove(at);
        self.len -= 1;
        if chunk.is_empty() {
            self.chunks.remove(&bound);
        }
        true
    }

    /// Every key in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &K> + '_ {
        self.chunks.values().flat_map(|c| c.iter())
    }

    /// The keys in `range`, in order.
    pub(crate) fn range(&self, range: (Bound<K>, Bound<K>)) -> impl Iterator<Item = &K> + '_ {
        let (start, end) = range;
        // The chunk that may hold the start, and every chunk after it.
        let from = match start {
            Bound::Included(k) | Bound::Excluded(k) => self.bound_of(&k),
            Bound::Unbounded => None,
        };
        let chunks = match from {
            Some(b) => self.chunks.range(b..),
            None => self.chunks.range(..),
        };
        chunks
            .flat_map(|(_, c)| c.iter())
            .skip_while(move |k| match start {
                Bound::Included(s) => **k < s,
                Bound::Excluded(s) => **k <= s,
                Bound::Unbounded => false,
            })
            .take_while(move |k| match end {
                Bound::Included(e) => **k <= e,
                Bound::Excluded(e) => **k < e,
                Bound::Unbounded => true,
            })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::ops::Bound::{Excluded, Included, Unbounded};

    use proptest::prelude::*;

    use super::*;

    /// Every chunk is sorted, non-empty, at most CAP long, above its bound and below the next.
    fn check_invariant(set: &DueSet<u32>) {
        let mut total = 0;
        let bounds: Vec<u32> = set.chunks.keys().copied().collect();
        for (i, (bound, chunk)) in set.chunks.iter().enumerate() {
            assert!(!chunk.is_empty() && chunk.len() <= CAP && chunk.capacity() <= CAP);
            assert!(chunk.windows(2).all(|w| w[0] < w[1]));
            assert!(chunk[0] >= *bound);
            if let Some(next) = bounds.get(i + 1) {
                assert!(*chunk.last().unwrap() < *next);
            }
            total += chunk.len();
        }
        assert_eq!(total, set.len());
    }

    #[test]
    fn keys_added_in_order_fill_their_chunks() {
        let mut set = DueSet::default();
        for k in 0..(10 * CAP as u32) {
            assert!(set.insert(k));
        }
        check_invariant(&set);
        assert_eq!(set.chunks.len(), 10);
        assert!(set.chunks.values().all(|c| c.len() == CAP));
        // Taking from the front (promotion) keeps the bounds and drops used-up chunks.
        for k in 0..(CAP as u32 + 1) {
            assert_eq!(set.first(), Some(&k));
            assert!(set.remove(&k));
        }
        check_invariant(&set);
        assert_eq!(set.chunks.len(), 9);
        assert!(!set.remove(&0));
        assert!(!set.insert(CAP as u32 + 5), "already there");
    }

    #[test]
    fn a_key_below_every_bound_lowers_the_first() {
        let mut set = DueSet::default();
        for k in [50u32, 60, 40, 10] {
            set.insert(k);
            check_invariant(&set);
        }
        assert_eq!(set.iter().copied().collect::<Vec<_>>(), [10, 40, 50, 60]);
        assert_eq!(set.first(), Some(&10));
        assert!(!set.is_empty());
        for k in [10, 40, 50, 60] {
            assert!(set.remove(&k));
        }
        assert!(set.is_empty() && set.chunks.is_empty() && set.first().is_none());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32),
        Remove(u32),
        RemoveFirst,
        Range(Bound<u32>, Bound<u32>),
    }

    fn bound() -> impl Strategy<Value = Bound<u32>> {
        prop_oneof![
            (0u32..2_000).prop_map(Included),
            (0u32..2_000).prop_map(Excluded),
            Just(Unbounded),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            // Mostly rising keys, as adds with one delay are, and some anywhere.
            4 => (0u32..2_000).prop_map(Op::Insert),
            2 => (0u32..2_000).prop_map(Op::Remove),
            1 => Just(Op::RemoveFirst),
            1 => (bound(), bound()).prop_map(|(a, b)| Op::Range(a, b)),
        ]
    }

    proptest! {
        /// The set behaves as a `BTreeSet` for every operation the engine uses.
        #[test]
        fn matches_a_btreeset(
            rising in proptest::collection::vec(0u32..3, 0..500),
            ops in proptest::collection::vec(op(), 0..2_000),
        ) {
            let mut set = DueSet::default();
            let mut model = BTreeSet::new();
            let mut k = 0u32;
            for step in rising {
                k += step;
                prop_assert_eq!(set.insert(k), model.insert(k));
            }
            for op in ops {
                match op {
                    Op::Insert(k) => prop_assert_eq!(set.insert(k), model.insert(k)),
                    Op::Remove(k) => prop_assert_eq!(set.remove(&k), model.remove(&k)),
                    Op::RemoveFirst => {
                        let first = set.first().copied();
                        prop_assert_eq!(first, model.first().copied());
                        if let Some(f) = first {
                            prop_assert!(set.remove(&f) && model.remove(&f));
                        }
                    }
                    Op::Range(a, b) => {
                        // BTreeSet panics on an empty or inverted range; the set just yields nothing.
                        let inverted = match (a, b) {
                            (Included(x) | Excluded(x), Included(y) | Excluded(y)) => {
                                x > y || (x == y && !matches!((a, b), (Included(_), Included(_))))
                            }
                            _ => false,
                        };
                        let got: Vec<u32> = set.range((a, b)).copied().collect();
                        let want: Vec<u32> = if inverted {
                            Vec::new()
                        } else {
                            model.range((a, b)).copied().collect()
                        };
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(set.len(), model.len());
            }
            check_invariant(&set);
            prop_assert_eq!(set.iter().copied().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
        }
    }
}
