//! Storage for timer entries: a slab with a stack of free slots, and intrusive doubly linked lists.
//!
//! Every timer lives in one `Vec` slot for its whole life and is named by its `u32` index, so
//! inserting, moving and removing a timer never allocates (once the `Vec` has grown to the
//! working-set size). The lists that make up the wheel's slots are threaded through the entries
//! themselves (`prev`/`next` indices), which is what makes unlinking an arbitrary timer O(1).
//!
//! Free slots are kept on a stack of (index, generation) pairs rather than threaded through the
//! free entries: taking a free slot then never has to read the slot first (neither to find the
//! next free one nor to learn its generation), so an insert into a large slab only writes to
//! the entry, and a burst of inserts does not wait on one cache miss after another.
//! A generation counter per slot, bumped whenever the slot is freed, makes a key to a timer
//! that has since fired or been removed detectably stale even after its slot was reused.

use std::num::NonZeroU32;

use super::TimerKey;

/// The "no entry" index: the end of a list.
pub(super) const NIL: u32 = u32::MAX;

/// Which list an entry is currently linked into.
///
/// Stored in the entry so that `remove` can find the list head to update without recomputing
/// anything from the (changing) current time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// Not linked anywhere: the slot is free (or the entry is being moved).
    Vacant,
    /// A slot of one wheel level.
    Level {
        /// The level, `0..NUM_LEVELS`.
        level: u8,
        /// The slot within the level, `0..SLOTS`.
        slot: u8,
    },
    /// The overflow list: deadlines beyond the top level's current range.
    Overflow,
    /// Inserted with a deadline already behind the wheel's time, not yet sorted.
    Late,
    /// Late entries sorted by deadline, next in line to be handed out.
    LateSorted,
}

/// One slot of the slab.
#[derive(Debug)]
pub(super) struct Entry<T> {
    /// The absolute deadline in epoch milliseconds.
    pub(super) deadline: u64,
    /// The next entry in the same list.
    pub(super) next: u32,
    /// The previous entry in the same list.
    pub(super) prev: u32,
    /// Bumped each time the slot is freed, so old keys stop matching.
    pub(super) generation: NonZeroU32,
    /// The list the entry is linked into; `Vacant` exactly when the slot is free (outside
    /// the wheel's own steps that unlink an entry to link or free it at once).
    pub(super) place: Place,
    /// The caller's value; stale while the slot is free. Not an `Option`: a value of a
    /// word or less then keeps the entry at 32 bytes, so that no entry straddles two cache
    /// lines (40 bytes did, for every other entry, with a `u64`).
    pub(super) value: T,
}

/// The head and tail of an intrusive list threaded through the slab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct List {
    /// The first entry, or `NIL`.
    pub(super) head: u32,
    /// The last entry, or `NIL`.
    pub(super) tail: u32,
}

impl List {
    /// A list with no entries.
    pub(super) const EMPTY: List = List {
        head: NIL,
        tail: NIL,
    };

    /// Returns true if the list has no entries.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.head == NIL
    }
}

/// A `Vec` of entries and a stack of the free ones.
#[derive(Debug)]
pub(super) struct Slab<T> {
    /// All slots, occupied or free.
    pub(super) entries: Vec<Entry<T>>,
    /// The free slots and their current generations; the most recently freed (likely still
    /// cached) on top.
    ///
    /// Its capacity is kept at least that of `entries`, so freeing never allocates.
    free: Vec<(u32, NonZeroU32)>,
    /// The number of occupied slots.
    len: usize,
}

impl<T: Copy> Slab<T> {
    /// Creates a slab with room for `capacity` entries before it has to grow.
    pub(super) fn with_capacity(capacity: usize) -> Self {
        Slab {
            entries: Vec::with_capacity(capacity),
            free: Vec::with_capacity(capacity),
            len: 0,
        }
    }

    /// Returns the number of occupied slots.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Stores a new, unlinked entry and returns its index and generation.
    ///
    /// Free slots are reused most recently freed first, because that one is the most likely
    /// to still be in the CPU cache.
    #[inline]
    pub(super) fn alloc(&mut self, deadline: u64, value: T) -> (u32, NonZeroU32) {
        self.len += 1;
        if let Some((index, generation)) = self.free.pop() {
            let entry = &mut self.entries[index as usize];
            entry.deadline = deadline;
            entry.value = value;
            return (index, generation);
        }
        let index = self.entries.len();
        // NIL is reserved as the end marker, so the last usable index is NIL - 1.
        assert!(
            index < NIL as usize,
            "timing wheel is full: {index} timers at once"
        );
        self.entries.push(Entry {
            deadline,
            next: NIL,
            prev: NIL,
            generation: NonZeroU32::MIN,
            place: Place::Vacant,
            value,
        });
        if self.free.capacity() < self.entries.capacity() {
            // Grow the free stack together with the slab, so that `release` never allocates.
            self.free
                .reserve_exact(self.entries.capacity() - self.free.len());
        }
        (index as u32, NonZeroU32::MIN)
    }

    /// Frees an (already unlinked) entry and returns its key, deadline and value.
    #[inline]
    pub(super) fn release(&mut self, index: u32) -> (TimerKey, u64, T) {
        let entry = &mut self.entries[index as usize];
        debug_assert_eq!(entry.place, Place::Vacant, "release of a linked entry");
        let value = entry.value;
        let key = TimerKey {
            index,
            generation: entry.generation,
        };
        // Never zero, so an `Option<TimerKey>` costs no extra bytes.
        entry.generation = entry.generation.checked_add(1).unwrap_or(NonZeroU32::MIN);
        self.free.push((index, entry.generation));
        self.len -= 1;
        (key, entry.deadline, value)
    }

    /// Returns the entry `key` names, or `None` if the key is stale or unknown.
    #[inline]
    pub(super) fn get(&self, key: TimerKey) -> Option<&Entry<T>> {
        self.entries
            .get(key.index as usize)
            .filter(|e| e.generation == key.generation && e.place != Place::Vacant)
    }

    /// Mutable variant of [`Slab::get`].
    #[inline]
    pub(super) fn get_mut(&mut self, key: TimerKey) -> Option<&mut Entry<T>> {
        self.entries
            .get_mut(key.index as usize)
            .filter(|e| e.generation == key.generation && e.place != Place::Vacant)
    }

    /// Appends entry `index` to `list` and records `place` as where it now lives.
    #[inline]
    pub(super) fn push_back(&mut self, list: &mut List, index: u32, place: Place) {
        let tail = list.tail;
        let entry = &mut self.entries[index as usize];
        entry.prev = tail;
        entry.next = NIL;
        entry.place = place;
        if tail == NIL {
            list.head = index;
        } else {
            self.entries[tail as usize].next = index;
        }
        list.tail = index;
    }

    /// Unlinks entry `index` from `list`, which must be the list it is in.
    #[inline]
    pub(super) fn unlink(&mut self, list: &mut List, index: u32) {
        let entry = &mut self.entries[index as usize];
        let (prev, next) = (entry.prev, entry.next);
        entry.place = Place::Vacant;
        if prev == NIL {
            list.head = next;
        } else {
            self.entries[prev as usize].next = next;
        }
        if next == NIL {
            list.tail = prev;
        } else {
            self.entries[next as usize].prev = prev;
        }
    }

    /// Unlinks and returns the first entry of `list`.
    #[inline]
    pub(super) fn pop_front(&mut self, list: &mut List) -> Option<u32> {
        let index = list.head;
        if index == NIL {
            return None;
        }
        let entry = &mut self.entries[index as usize];
        let next = entry.next;
        entry.place = Place::Vacant;
        list.head = next;
        if next == NIL {
            list.tail = NIL;
        } else {
            self.entries[next as usize].prev = NIL;
        }
        Some(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect<T: Copy>(slab: &Slab<T>, list: &List) -> Vec<u32> {
        let mut out = Vec::new();
        let mut cur = list.head;
        while cur != NIL {
            out.push(cur);
            cur = slab.entries[cur as usize].next;
        }
        out
    }

    #[test]
    fn list_operations_keep_both_directions_consistent() {
        let mut slab = Slab::with_capacity(0);
        let mut list = List::EMPTY;
        let ids: Vec<u32> = (0..5).map(|i| slab.alloc(i, i).0).collect();
        for &i in &ids {
            slab.push_back(&mut list, i, Place::Overflow);
        }
        assert_eq!(collect(&slab, &list), [0, 1, 2, 3, 4]);

        // Middle, head and tail removal: each end and the inside of the list.
        for (remove, rest) in [
            (2, &[0, 1, 3, 4][..]),
            (0, &[1, 3, 4][..]),
            (4, &[1, 3][..]),
        ] {
            slab.unlink(&mut list, remove);
            assert_eq!(collect(&slab, &list), rest);
            assert_eq!(slab.entries[list.tail as usize].next, NIL);
            assert_eq!(slab.entries[list.head as usize].prev, NIL);
        }
        assert_eq!(slab.pop_front(&mut list), Some(1));
        assert_eq!(slab.pop_front(&mut list), Some(3));
        assert_eq!(slab.pop_front(&mut list), None);
        assert!(list.is_empty());
        assert_eq!(list.tail, NIL);
    }

    #[test]
    fn freed_slots_are_reused_with_a_new_generation() {
        let mut slab = Slab::with_capacity(2);
        let (a, _) = slab.alloc(10, "a");
        let (key_a, deadline, value) = slab.release(a);
        assert_eq!((deadline, value), (10, "a"));
        assert!(slab.get(key_a).is_none(), "a freed slot is not found");
        let (b, generation) = slab.alloc(20, "b");
        assert_eq!(a, b, "the freed slot is reused");
        assert_eq!(Some(generation), key_a.generation.checked_add(1));
        assert!(slab.get(key_a).is_none(), "the old key is stale");
        let key_b = TimerKey {
            index: b,
            generation,
        };
        assert!(
            slab.get(key_b).is_none(),
            "an entry not yet linked is not live"
        );
        let mut list = List::EMPTY;
        slab.push_back(&mut list, b, Place::Overflow);
        assert_eq!(slab.get(key_b).map(|e| e.deadline), Some(20));
        assert_eq!(slab.len(), 1);
        // A key of the generation the slot will have next (another wheel's, say) finds nothing.
        slab.unlink(&mut list, b);
        let (key_b, ..) = slab.release(b);
        let next = TimerKey {
            index: b,
            generation: key_b.generation.checked_add(1).expect("small"),
        };
        assert!(slab.get(next).is_none(), "a free slot is never live");
    }

    #[test]
    fn entry_stays_small() {
        // docs/design.md §4 keeps the memory per delayed task small; the wheel's share is one entry.
        // 32 bytes: two entries a cache line, none across two.
        assert_eq!(std::mem::size_of::<Entry<u64>>(), 32);
        assert_eq!(std::mem::size_of::<Entry<u32>>(), 32);
    }
}
