//! The shard's record storage: a slab that grows by fixed-size chunks.
//!
//! A record is named by its `u32` index for its whole life (the id table, the ordered sets
//! and the wheel hold indexes, not records). A `Vec`-backed slab doubles its buffer when it
//! fills, so right after growing it holds up to twice the memory its records need, and while
//! it grows it briefly holds both buffers: at 10M records of 120 bytes that is 800 MB of
//! slack (docs/design.md §6 wants at most 150 B a delayed task). Here the storage is a list
//! of boxed chunks of [`CHUNK`] slots: growing adds one chunk and moves nothing, so at most
//! one partly used chunk is slack, and a record never moves once stored.
//!
//! Freed slots go on a stack and are reused first (most recently freed first, which is
//! also the slot most likely still in cache).

/// Slots per chunk: 4096 records of ~120 bytes is ~480 KiB, small next to millions of
/// records and large enough that the chunk list stays short.
pub(crate) const CHUNK: usize = 4096;

/// A slab of `T` in fixed-size chunks. Indexes are stable until the slot is removed.
#[derive(Debug, Clone)]
pub(crate) struct ChunkedSlab<T> {
    chunks: Vec<Box<[Option<T>]>>,
    /// Slots below this index have been handed out at least once.
    high: usize,
    /// Freed slots, reused last-freed first.
    free: Vec<u32>,
    len: usize,
}

impl<T> Default for ChunkedSlab<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// The chunk and the slot in it of index `idx`.
fn split(idx: usize) -> (usize, usize) {
    (idx / CHUNK, idx % CHUNK)
}

impl<T> ChunkedSlab<T> {
    /// An empty slab; it allocates nothing until the first insert.
    pub(crate) fn new() -> Self {
        Self {
            chunks: Vec::new(),
            high: 0,
            free: Vec::new(),
            len: 0,
        }
    }

    /// The number of values stored.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Stores `value` and returns its index.
    pub(crate) fn insert(&mut self, value: T) -> usize {
        let idx = match self.free.pop() {
            Some(idx) => idx as usize,
            None => {
                let idx = self.high;
                if split(idx).0 == self.chunks.len() {
                    self.chunks
                        .push(std::iter::repeat_with(|| None).take(CHUNK).collect());
                }
                self.high += 1;
                idx
            }
        };
        let (c, s) = split(idx);
        debug_assert!(self.chunks[c][s].is_none());
        self.chunks[c][s] = Some(value);
        self.len += 1;
        idx
    }

    /// The value at `idx`, if the slot holds one.
    pub(crate) fn get(&self, idx: usize) -> Option<&T> {
        let (c, s) = split(idx);
        self.chunks.get(c)?.get(s)?.as_ref()
    }

    /// The value at `idx`, mutably, if the slot holds one.
    pub(crate) fn get_mut(&mut self, idx: usize) -> Option<&mut T> {
        let (c, s) = split(idx);
        self.chunks.get_mut(c)?.get_mut(s)?.as_mut()
    }

    /// Takes the value out of slot `idx`, freeing the slot.
    ///
    /// # Panics
    ///
    /// When the slot is empty: the engine removes only records it holds an index of.
    pub(crate) fn remove(&mut self, idx: usize) -> T {
        let (c, s) = split(idx);
        let value = self
            .chunks
            .get_mut(c)
            .and_then(|chunk| chunk.get_mut(s))
            .and_then(Option::take)
            .unwrap_or_else(|| panic!("no record in slot {idx}"));
        self.free.push(idx as u32);
        self.len -= 1;
        value
    }

    /// Every stored value from index `start` on, with its index, in index order (reaching
    /// `start` costs nothing: a reader may resume where it stopped).
    pub(crate) fn iter_from(&self, start: usize) -> impl Iterator<Item = (usize, &T)> {
        let (first, offset) = split(start);
        let high = self.high;
        self.chunks
            .iter()
            .enumerate()
            .skip(first)
            .flat_map(move |(c, chunk)| {
                let skip = if c == first { offset } else { 0 };
                chunk
                    .iter()
                    .enumerate()
                    .skip(skip)
                    .map(move |(i, v)| (c * CHUNK + i, v))
            })
            .take_while(move |&(i, _)| i < high)
            .filter_map(|(i, v)| v.as_ref().map(|v| (i, v)))
    }
}

impl<T> std::ops::Index<usize> for ChunkedSlab<T> {
    type Output = T;

    fn index(&self, idx: usize) -> &T {
        self.get(idx)
            .unwrap_or_else(|| panic!("no record in slot {idx}"))
    }
}

impl<T> std::ops::IndexMut<usize> for ChunkedSlab<T> {
    fn index_mut(&mut self, idx: usize) -> &mut T {
        self.get_mut(idx)
            .unwrap_or_else(|| panic!("no record in slot {idx}"))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn split_table() {
        for (idx, want) in [
            (0, (0, 0)),
            (1, (0, 1)),
            (CHUNK - 1, (0, CHUNK - 1)),
            (CHUNK, (1, 0)),
            (3 * CHUNK + 7, (3, 7)),
        ] {
            assert_eq!(split(idx), want, "{idx}");
        }
    }

    #[test]
    fn grows_by_one_chunk_and_reuses_freed_slots_first() {
        let mut slab = ChunkedSlab::new();
        assert_eq!(slab.chunks.len(), 0);
        for i in 0..=CHUNK {
            assert_eq!(slab.insert(i), i);
        }
        assert_eq!(
            slab.chunks.len(),
            2,
            "one more chunk for the one past the first"
        );
        assert_eq!(slab.remove(5), 5);
        assert_eq!(slab.remove(9), 9);
        assert_eq!(slab.insert(100), 9, "the last freed slot first");
        assert_eq!(slab.insert(101), 5);
        assert_eq!(slab.insert(102), CHUNK + 1);
        assert_eq!(slab.len(), CHUNK + 2);
        assert_eq!(slab[9], 100);
        assert_eq!(slab.get(CHUNK + 2), None);
        assert_eq!(slab.get(10 * CHUNK), None);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16),
        Remove(usize),
        Set(usize, u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => any::<u16>().prop_map(Op::Insert),
            2 => any::<usize>().prop_map(Op::Remove),
            1 => (any::<usize>(), any::<u16>()).prop_map(|(i, v)| Op::Set(i, v)),
        ]
    }

    proptest! {
        /// The slab behaves as a map from index to value, with indexes never shared by two
        /// live values.
        #[test]
        fn matches_a_map(ops in proptest::collection::vec(op(), 0..3000)) {
            let mut slab = ChunkedSlab::new();
            let mut model: BTreeMap<usize, u16> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(v) => {
                        let idx = slab.insert(v);
                        prop_assert!(model.insert(idx, v).is_none(), "index {} reused while live", idx);
                    }
                    Op::Remove(pick) if !model.is_empty() => {
                        let idx = *model.keys().nth(pick % model.len()).unwrap();
                        prop_assert_eq!(slab.remove(idx), model.remove(&idx).unwrap());
                        prop_assert_eq!(slab.get(idx), None);
                    }
                    Op::Set(pick, v) if !model.is_empty() => {
                        let idx = *model.keys().nth(pick % model.len()).unwrap();
                        slab[idx] = v;
                        model.insert(idx, v);
                    }
                    _ => {}
                }
                prop_assert_eq!(slab.len(), model.len());
            }
            // Read from any index on, as a snapshot resumes: what the map holds from there.
            let high = model.keys().next_back().map_or(0, |&i| i + 2);
            for start in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, high / 2, high] {
                let all: Vec<(usize, u16)> = slab.iter_from(start).map(|(i, v)| (i, *v)).collect();
                let want: Vec<(usize, u16)> = model.range(start..).map(|(&i, &v)| (i, v)).collect();
                prop_assert_eq!(all, want, "from {}", start);
            }
        }
    }
}
