//! A hierarchical timing wheel with millisecond slots over absolute epoch time.
//!
//! The embedded engine (docs/design.md §4) keeps every due time and ttr deadline in one [`Wheel`]:
//! [`Wheel::insert`] registers a value to become due at an absolute epoch millisecond and
//! returns a [`TimerKey`]; [`Wheel::remove`] and [`Wheel::reschedule`] cancel or move it in
//! O(1); [`Wheel::drain_due`] (or [`Wheel::poll`]) hands out the values whose deadline has
//! come, earliest first. The owner never ticks: it reads its clock, drains, then sleeps until
//! [`Wheel::next_expiration`], so an idle wheel costs nothing and a busy one never drifts
//! (docs/design.md §2 rules 1, 2 and 12).
//!
//! The wheel itself never reads a clock. Every call that depends on time takes `now` in
//! epoch milliseconds; a `now` earlier than the wheel's own time is treated as its own time,
//! and `now` may jump forward arbitrarily far in one call.
//!
//! Guarantees:
//!
//! * **Never early.** No value is handed out before its deadline.
//! * **Never missed.** Every value whose deadline is at or before `now` is handed out by
//!   repeated `drain_due(now, ..)`/`poll(now)` calls, in non-decreasing deadline order within
//!   a call (ties in any order). A `limit` leaves the rest for the next call.
//! * **Any deadline.** Every `u64` deadline works: in the past (due at once), within the
//!   wheel's 795-day range, or far beyond it (10 years, `u64::MAX`).
//! * **No allocation on the hot path.** Timers live in a slab that only grows when more timers
//!   exist at once than ever before; [`Wheel::with_capacity`] pre-sizes it.
//!
//! # Implementation
//!
//! The wheel is the hashed and hierarchical timing wheel of Varghese and Lauck, laid out like
//! tokio's time driver, over a slab instead of pinned heap nodes so that no `unsafe` is needed.
//!
//! **Levels and slots.** There are six levels of 64 slots. A slot of level `l` covers `64^l`
//! milliseconds, so a level covers `64^(l+1)`:
//!
//! * level 0: 64 × 1 ms slots, 64 ms;
//! * level 1: 64 × 64 ms slots, about 4 s;
//! * level 2: 64 × ~4.1 s slots, about 4.4 min;
//! * level 3: 64 × ~4.4 min slots, about 4.7 h;
//! * level 4: 64 × ~4.7 h slots, about 12.4 days;
//! * level 5: 64 × ~12.4 day slots, about 795 days (2^36 ms).
//!
//! Levels are aligned to absolute time: each level covers the `64^(l+1)`-aligned range that
//! contains the wheel's current time ([`Wheel::elapsed`]). A timer due at `when` goes to the
//! level of the most significant bit in which `when` and `elapsed` differ
//! (`level_for`: one XOR and one `leading_zeros`), into the slot given by that level's six
//! bits of `when` (`slot_for`). So a slot never holds a time behind the wheel, the slots of a
//! level never wrap around, and everything on level `l` is due before everything on level
//! `l + 1`.
//!
//! **Slab and lists.** Timers live in a `Vec` of entries with a stack of free slots; a
//! [`TimerKey`] is the entry's `u32` index plus a generation counter that is bumped whenever
//! the entry is freed, so a key to a timer that already fired or was removed is recognised as
//! stale even after the entry is reused. Each slot is made of intrusive doubly linked lists
//! threaded through the entries (`prev`/`next` indices) and each entry records which list it
//! is in, so insert is a push and remove an unlink, both O(1), with no allocation once the
//! slab has grown.
//!
//! **Memory latency.** With a million timers the entries do not fit in the CPU caches, and
//! walking a linked list is a chain of cache misses, each waiting for the one before. Two
//! choices keep that chain short. A slot above level 0 is 16 lists ("lanes", two cache lines
//! of heads) and a timer goes to lane `index % 16`; a cascade walks the lanes in lockstep,
//! reading the next entry of every lane before re-inserting any, so up to 16 misses are in
//! flight at once (level 0 is only popped from, so it uses one lane). And the free slots are
//! a stack of (index, generation) pairs instead of a list threaded through the free entries,
//! so an insert writes to its entry without first having to read it.
//!
//! **Finding the next expiration.** Each level keeps an `occupied: u64` bitfield with bit `s`
//! set when slot `s` is non-empty. Because slots never wrap, the earliest slot of a level is
//! `occupied.trailing_zeros()`, and the earliest slot of the whole wheel is that of the
//! lowest level with any bit set: at most six loads and one bit count. Its start time is the
//! level's range start (`elapsed` with the low bits masked off) plus the slot number times the
//! slot width. On level 0 this is exactly the earliest deadline; on a higher level it is a
//! lower bound, which is what [`Wheel::next_expiration`] promises.
//!
//! **Cascading.** Advancing to `now` repeats: hand out the level-0 slot of the current time;
//! when it is empty, find the earliest occupied slot; if it starts after `now`, set the time
//! to `now` and stop. Otherwise set the time to the slot's start, and if the slot is on a
//! higher level, take its whole list and re-insert each entry relative to the new time, which
//! puts it on a lower level (and the ones due right then into the current level-0 slot). Time
//! thus jumps from one occupied slot to the next, never steps through empty milliseconds, and
//! an entry moves down at most five levels before it fires. A `limit` can stop the loop between
//! two entries of the current level-0 slot; the rest stays there for the next call.
//!
//! **Far deadlines.** A deadline outside the top level's current 2^36 ms range (10 years
//! ahead, or just past the next 795-day boundary) goes to an unordered overflow list, and the
//! wheel remembers a lower bound of the deadlines in it. When the time reaches that bound, the
//! whole list is re-inserted relative to the new time: what now falls inside the range moves
//! into the levels, the rest stays and the bound becomes exact again. A pass at an exact bound
//! moves at least the earliest overflow timer out (a pass at a bound that a removal left too
//! low only makes it exact), so even a jump to `u64::MAX` takes at most a few passes per
//! distinct 795-day range, and a 10-year timer fires on its exact millisecond. When the bound
//! and the earliest slot's start are the same millisecond, both are redistributed in the same
//! step: a higher-level slot left at the wheel's time would be overtaken by any timer the
//! rescan (or a later insert) puts on a lower level, and its own timers would come out late.
//!
//! **Late timers.** A deadline already behind the wheel's time is due at once but must still
//! come out in deadline order before the current slot. Such timers are appended to a `late`
//! list in O(1); the next `poll`/`drain_due` sorts that list by deadline once (into
//! `late_sorted`) and hands it out before anything else. Everything on the levels is due at or
//! after the wheel's time, so this keeps the whole output in order.

mod level;
mod slab;

use std::fmt;

use self::level::{
    LANES, Level, NUM_LEVELS, OVERFLOW, SLOT_MASK, lane_for, level_for, slot_for, slot_start,
};
use self::slab::{List, NIL, Place, Slab};

/// The handle of one timer in a [`Wheel`], returned by [`Wheel::insert`].
///
/// A key stays valid until its timer fires or is removed. After that, every method taking the
/// key treats it as unknown, even when the wheel has reused the timer's storage for a new
/// timer: the key carries a generation that no longer matches. (The generation is 32 bits,
/// so a key could only be confused with a timer after four billion reuses of the same slot.)
/// Keys are only meaningful for the wheel that issued them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerKey {
    index: u32,
    generation: std::num::NonZeroU32,
}

/// A timer that came due, as handed out by [`Wheel::poll`] and [`Wheel::drain_due`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired<T> {
    /// The key the timer had; it is stale from now on.
    pub key: TimerKey,
    /// The deadline the timer had, in epoch milliseconds.
    pub deadline: u64,
    /// The value given to [`Wheel::insert`].
    pub value: T,
}

/// A hierarchical timing wheel of values keyed by absolute deadlines in epoch milliseconds.
///
/// See the [module documentation](self) for the guarantees and the algorithm. Values are
/// `Copy` (the engine keeps a record's index in it): the slab then needs no `Option` around
/// them, and an entry with a value of a word or less is 32 bytes, two to a cache line.
///
/// ```
/// use delayq_core::wheel::Wheel;
///
/// let now = 1_800_000_000_000;
/// let mut wheel = Wheel::new(now);
/// let a = wheel.insert(now + 1_500, "a");
/// wheel.insert(now + 20, "b");
/// wheel.remove(a);
///
/// // Sleep until the next expiration, then drain what is due.
/// let t = wheel.next_expiration().unwrap();
/// assert_eq!(t, now + 20);
/// let mut due = Vec::new();
/// wheel.drain_due(t, 100, &mut due);
/// assert_eq!(due[0].value, "b");
/// assert!(wheel.is_empty());
/// ```
pub struct Wheel<T> {
    /// The wheel's current time: every timer on the levels is due at or after it.
    elapsed: u64,
    /// The levels, lowest (1 ms slots) first; boxed because they take 48 KiB.
    levels: Box<[Level; NUM_LEVELS]>,
    /// Timers beyond the top level's current range, unordered.
    overflow: List,
    /// A lower bound of the deadlines in `overflow` (exact unless its minimum was removed);
    /// meaningful only while `overflow` is non-empty.
    overflow_min: u64,
    /// Timers inserted with a deadline before `elapsed`, unordered.
    late: List,
    /// A lower bound of the deadlines in `late`; meaningful only while `late` is non-empty.
    late_min: u64,
    /// Late timers sorted by deadline; handed out before anything else.
    late_sorted: List,
    /// Storage of all timers.
    slab: Slab<T>,
    /// Reused buffer for sorting late timers, so sorting does not allocate each time.
    scratch: Vec<u32>,
}

impl<T: Copy> Wheel<T> {
    /// Creates an empty wheel whose current time is `now_ms` (epoch milliseconds).
    pub fn new(now_ms: u64) -> Self {
        Self::with_capacity(now_ms, 0)
    }

    /// Creates an empty wheel with room for `capacity` timers before its storage has to grow.
    pub fn with_capacity(now_ms: u64, capacity: usize) -> Self {
        Wheel {
            elapsed: now_ms,
            levels: Box::new([Level::EMPTY; NUM_LEVELS]),
            overflow: List::EMPTY,
            overflow_min: u64::MAX,
            late: List::EMPTY,
            late_min: u64::MAX,
            late_sorted: List::EMPTY,
            slab: Slab::with_capacity(capacity),
            scratch: Vec::new(),
        }
    }

    /// Returns the number of timers in the wheel (pending or due but not yet handed out).
    pub fn len(&self) -> usize {
        self.slab.len()
    }

    /// Returns true if the wheel holds no timers.
    pub fn is_empty(&self) -> bool {
        self.slab.len() == 0
    }

    /// Returns the wheel's current time in epoch milliseconds.
    ///
    /// It starts at the `now_ms` given to [`Wheel::new`] and only moves forward, during
    /// [`Wheel::poll`] and [`Wheel::drain_due`]: up to their `now` when they run out of due
    /// timers, or to the deadline of the last timer handed out when a limit stopped them.
    pub fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Adds a timer that becomes due at `deadline_ms` (epoch milliseconds) and returns its key.
    ///
    /// This is O(1) and does not allocate unless the wheel holds more timers than ever before.
    /// A deadline at or before [`Wheel::elapsed`] is allowed: the timer is due on the next
    /// [`Wheel::poll`] or [`Wheel::drain_due`].
    ///
    /// # Panics
    ///
    /// Panics if the wheel already holds `u32::MAX` timers.
    pub fn insert(&mut self, deadline_ms: u64, value: T) -> TimerKey {
        let (index, generation) = self.slab.alloc(deadline_ms, value);
        self.link(index, deadline_ms);
        TimerKey { index, generation }
    }

    /// Removes the timer `key` names and returns its value, or `None` if the key is stale
    /// (the timer already fired or was removed) or unknown. O(1).
    pub fn remove(&mut self, key: TimerKey) -> Option<T> {
        self.slab.get(key)?;
        self.unlink(key.index);
        Some(self.slab.release(key.index).2)
    }

    /// Moves the timer `key` names to a new deadline, keeping its key and value. O(1).
    ///
    /// Returns false, and changes nothing, if the key is stale or unknown. A deadline at or
    /// before [`Wheel::elapsed`] makes the timer due on the next poll, as with
    /// [`Wheel::insert`].
    pub fn reschedule(&mut self, key: TimerKey, deadline_ms: u64) -> bool {
        let Some(entry) = self.slab.get_mut(key) else {
            return false;
        };
        entry.deadline = deadline_ms;
        self.unlink(key.index);
        self.link(key.index, deadline_ms);
        true
    }

    /// Returns the deadline of the timer `key` names, or `None` if the key is stale or unknown.
    pub fn deadline(&self, key: TimerKey) -> Option<u64> {
        self.slab.get(key).map(|entry| entry.deadline)
    }

    /// Returns the value of the timer `key` names, or `None` if the key is stale or unknown.
    pub fn get(&self, key: TimerKey) -> Option<&T> {
        self.slab.get(key).map(|entry| &entry.value)
    }

    /// Returns the value of the timer `key` names for changing it in place, or `None` if the
    /// key is stale or unknown.
    pub fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        self.slab.get_mut(key).map(|entry| &mut entry.value)
    }

    /// Returns true if `key` names a timer that is still in the wheel.
    pub fn contains(&self, key: TimerKey) -> bool {
        self.slab.get(key).is_some()
    }

    /// Returns the time at which [`Wheel::poll`] or [`Wheel::drain_due`] may next have work,
    /// or `None` if the wheel is empty.
    ///
    /// The owner sleeps until this time, then drains. It is never later than the earliest
    /// deadline in the wheel, and it is exactly that deadline when the earliest timer is on
    /// level 0 (due within the 64 ms range that holds [`Wheel::elapsed`]), unless removing a
    /// far timer left the overflow list's bound below it. Otherwise it may be earlier: the
    /// start of a higher-level slot, or that bound; draining at that time then only moves
    /// timers down and makes the bound exact. It is at or before [`Wheel::elapsed`] exactly
    /// when something is already due, and after it otherwise, so sleeping until it always
    /// makes progress.
    pub fn next_expiration(&self) -> Option<u64> {
        let late = match (self.late.is_empty(), self.late_sorted.is_empty()) {
            (true, true) => None,
            (false, true) => Some(self.late_min),
            (true, false) => Some(self.slab.entries[self.late_sorted.head as usize].deadline),
            (false, false) => Some(
                self.late_min
                    .min(self.slab.entries[self.late_sorted.head as usize].deadline),
            ),
        };
        if late.is_some() {
            // Late timers are behind `elapsed`, so they come before anything on the levels.
            return late;
        }
        let wheel = self.next_slot().map(|(_, _, start)| start);
        let overflow = (!self.overflow.is_empty()).then_some(self.overflow_min);
        match (wheel, overflow) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Returns the next timer whose deadline is at or before `now_ms`, or `None` if there is
    /// none, in which case the wheel's time moves to `now_ms`.
    ///
    /// Successive calls return timers in non-decreasing deadline order, except that a timer
    /// inserted with a deadline in the past comes out before those still waiting.
    pub fn poll(&mut self, now_ms: u64) -> Option<Expired<T>> {
        let now = now_ms.max(self.elapsed);
        self.sort_late();
        self.next_due(now).map(|index| self.expire(index))
    }

    /// Appends up to `limit` timers whose deadline is at or before `now_ms` to `out`, earliest
    /// first, and returns how many it appended.
    ///
    /// When fewer than `limit` were due, the wheel's time moves to `now_ms`; otherwise the rest
    /// stays due for the next call. A `limit` of 0 does nothing. `out` grows as a `Vec` does;
    /// reuse one across calls to avoid allocating.
    pub fn drain_due(&mut self, now_ms: u64, limit: usize, out: &mut Vec<Expired<T>>) -> usize {
        if limit == 0 {
            return 0;
        }
        let now = now_ms.max(self.elapsed);
        self.sort_late();
        let mut count = 0;
        while count < limit {
            let Some(index) = self.next_due(now) else {
                break;
            };
            out.push(self.expire(index));
            count += 1;
        }
        count
    }

    /// Links entry `index` into the list its deadline belongs to, relative to `elapsed`.
    #[inline]
    fn link(&mut self, index: u32, deadline: u64) {
        if deadline < self.elapsed {
            self.late_min = if self.late.is_empty() {
                deadline
            } else {
                self.late_min.min(deadline)
            };
            self.slab.push_back(&mut self.late, index, Place::Late);
            return;
        }
        let level = level_for(self.elapsed, deadline);
        if level == OVERFLOW {
            self.overflow_min = if self.overflow.is_empty() {
                deadline
            } else {
                self.overflow_min.min(deadline)
            };
            self.slab
                .push_back(&mut self.overflow, index, Place::Overflow);
            return;
        }
        let slot = slot_for(deadline, level);
        let lvl = &mut self.levels[level];
        let place = Place::Level {
            level: level as u8,
            slot: slot as u8,
        };
        let lane = lane_for(level, index);
        self.slab
            .push_back(&mut lvl.slots[slot].lanes[lane], index, place);
        lvl.lanes[slot] |= 1 << lane;
        lvl.occupied |= 1 << slot;
    }

    /// Unlinks entry `index` from whichever list it is in.
    #[inline]
    fn unlink(&mut self, index: u32) {
        match self.slab.entries[index as usize].place {
            Place::Level { level, slot } => {
                let lvl = &mut self.levels[level as usize];
                let lane = lane_for(level as usize, index);
                let list = &mut lvl.slots[slot as usize].lanes[lane];
                self.slab.unlink(list, index);
                if list.is_empty() {
                    lvl.lanes[slot as usize] &= !(1 << lane);
                    if lvl.lanes[slot as usize] == 0 {
                        lvl.occupied &= !(1 << slot);
                    }
                }
            }
            // The overflow and late bounds stay valid lower bounds when an entry leaves.
            Place::Overflow => self.slab.unlink(&mut self.overflow, index),
            Place::Late => self.slab.unlink(&mut self.late, index),
            Place::LateSorted => self.slab.unlink(&mut self.late_sorted, index),
            Place::Vacant => unreachable!("a live timer is always linked"),
        }
    }

    /// Frees a due (already unlinked) entry and packages it for the caller.
    #[inline]
    fn expire(&mut self, index: u32) -> Expired<T> {
        let (key, deadline, value) = self.slab.release(index);
        Expired {
            key,
            deadline,
            value,
        }
    }

    /// Unlinks and returns the next due entry, advancing the wheel up to `now` (which must be
    /// at or after `elapsed`) as far as needed; `None` when nothing is due by `now`.
    ///
    /// Late timers must already be sorted into `late_sorted`.
    #[inline]
    fn next_due(&mut self, now: u64) -> Option<u32> {
        if let Some(index) = self.slab.pop_front(&mut self.late_sorted) {
            return Some(index);
        }
        loop {
            // The current level-0 slot holds exactly the timers due at `elapsed`.
            let slot = (self.elapsed & SLOT_MASK) as usize;
            let level0 = &mut self.levels[0];
            if level0.occupied & (1 << slot) != 0 {
                let lane = &mut level0.slots[slot].lanes[0];
                let index = self
                    .slab
                    .pop_front(lane)
                    .expect("an occupied slot has timers");
                if lane.is_empty() {
                    // Level 0 uses lane 0 alone, so the slot is empty too.
                    level0.lanes[slot] = 0;
                    level0.occupied &= !(1 << slot);
                }
                return Some(index);
            }
            if !self.advance(now) {
                return None;
            }
        }
    }

    /// Moves the wheel's time to the earliest slot (or overflow bound) at or before `now` and
    /// redistributes what is there; returns false, after moving the time to `now`, if there is
    /// no such slot.
    ///
    /// Afterwards no slot above level 0 starts at `elapsed` and the overflow bound is after
    /// it, so every timer due at `elapsed` is in the current level-0 slot.
    fn advance(&mut self, now: u64) -> bool {
        let slot = self.next_slot().filter(|&(_, _, start)| start <= now);
        let bound =
            (!self.overflow.is_empty() && self.overflow_min <= now).then_some(self.overflow_min);
        // The earlier of the two; the overflow list may have timers due inside that slot.
        let Some(to) = slot
            .map(|(_, _, start)| start)
            .into_iter()
            .chain(bound)
            .min()
        else {
            self.set_elapsed(now);
            return false;
        };
        self.set_elapsed(to);
        // Both the slot and the overflow list are redistributed when both are at `to`. A
        // higher-level slot left behind with its start at `elapsed` is no longer the lowest
        // occupied level once the rescan (or an insert after a `limit` stop) puts a timer on a
        // lower one: that timer came out first, the slot's earlier timers were missed by the
        // call and came out late, and `next_expiration` reported `elapsed` with nothing due
        // (found by the model test; the saved case is in
        // tests/wheel_model.proptest-regressions).
        if let Some((level, slot, start)) = slot
            && start == to
            && level > 0
        {
            self.cascade(level, slot);
        }
        if bound == Some(to) {
            self.rescan_overflow();
        }
        true
    }

    /// Returns `(level, slot, start time)` of the earliest occupied slot on the levels.
    #[inline]
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        // Everything on a level is due before everything on the level above it, so the
        // lowest occupied level holds the earliest slot.
        self.levels.iter().enumerate().find_map(|(level, lvl)| {
            let slot = lvl.first_occupied()?;
            let start = slot_start(self.elapsed, level, slot);
            // Only the current level-0 slot starts at `elapsed`: `advance` redistributes a
            // higher slot in the same step that brings the time to its start.
            debug_assert!(
                start > self.elapsed || (level == 0 && start == self.elapsed),
                "slot {slot} of level {level} starts at {start}, not after elapsed {}",
                self.elapsed
            );
            Some((level, slot, start))
        })
    }

    fn set_elapsed(&mut self, when: u64) {
        debug_assert!(when >= self.elapsed, "time moves backwards");
        self.elapsed = when;
    }

    /// Re-inserts every timer of a higher-level slot relative to the current time, which has
    /// just reached the slot's start; they all land on lower levels.
    fn cascade(&mut self, level: usize, slot: usize) {
        let lvl = &mut self.levels[level];
        // Detach the non-empty lanes only (usually a few when timers are sparse).
        let mut heads = [NIL; LANES];
        let mut live = 0;
        let mut used = std::mem::take(&mut lvl.lanes[slot]);
        while used != 0 {
            let lane = used.trailing_zeros() as usize;
            used &= used - 1;
            heads[live] = std::mem::replace(&mut lvl.slots[slot].lanes[lane], List::EMPTY).head;
            live += 1;
        }
        lvl.occupied &= !(1 << slot);
        self.relink_all(heads, live);
    }

    /// Re-inserts every overflow timer relative to the current time, which has just reached
    /// the overflow bound: those inside the top level's range move into the levels, the rest
    /// form a new overflow list with an exact bound.
    fn rescan_overflow(&mut self) {
        let list = std::mem::replace(&mut self.overflow, List::EMPTY);
        let mut heads = [NIL; LANES];
        heads[0] = list.head;
        self.relink_all(heads, usize::from(!list.is_empty()));
    }

    /// Re-inserts every entry of lists that have already been detached from the wheel, given
    /// by their first entries: `cursors[..live]`, none of them `NIL`.
    ///
    /// The lists are walked in lockstep: first the next entry of every list is read, then
    /// those entries are re-inserted. The reads do not depend on each other, so the CPU waits
    /// for up to `LANES` cache misses at once instead of one after another; with a million
    /// timers, memory latency is what cascading costs.
    fn relink_all(&mut self, mut cursors: [u32; LANES], mut live: usize) {
        // Cursors of the lists not yet walked to their end are kept packed at the front.
        let mut batch = [(NIL, 0); LANES];
        while live > 0 {
            let mut lane = 0;
            let mut taken = 0;
            while lane < live {
                let entry = &self.slab.entries[cursors[lane] as usize];
                batch[taken] = (cursors[lane], entry.deadline);
                taken += 1;
                if entry.next == NIL {
                    live -= 1;
                    cursors[lane] = cursors[live];
                } else {
                    cursors[lane] = entry.next;
                    lane += 1;
                }
            }
            for &(index, deadline) in &batch[..taken] {
                self.link(index, deadline);
            }
        }
    }

    /// Sorts newly late timers into `late_sorted`, so they come out in deadline order.
    fn sort_late(&mut self) {
        if self.late.is_empty() {
            return;
        }
        let entries = &self.slab.entries;
        self.scratch.clear();
        for list in [&self.late_sorted, &self.late] {
            let mut cur = list.head;
            while cur != NIL {
                self.scratch.push(cur);
                cur = entries[cur as usize].next;
            }
        }
        self.scratch
            .sort_unstable_by_key(|&index| entries[index as usize].deadline);
        self.late = List::EMPTY;
        self.late_sorted = List::EMPTY;
        for &index in &self.scratch {
            self.slab
                .push_back(&mut self.late_sorted, index, Place::LateSorted);
        }
    }
}

impl<T: Copy> fmt::Debug for Wheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wheel")
            .field("elapsed", &self.elapsed)
            .field("len", &self.len())
            .field("next_expiration", &self.next_expiration())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
