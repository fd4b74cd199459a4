//! One level of the wheel (64 slots and an occupancy bitfield) and the pure slot arithmetic.
//!
//! A slot is [`LANES`] intrusive lists ("lanes"); a timer goes to lane `index % LANES`. One
//! list per slot would do, but walking a list is a chain of dependent loads: with a million
//! timers the entries are not in cache and every hop waits for memory. Cascading a slot walks
//! its lanes in lockstep, so the CPU has several independent misses in flight at once. A slot's
//! lanes fill exactly two cache lines, and a 16-bit mask per slot says which lanes hold timers,
//! so a removal learns whether its slot became empty from the mask and a cascade of a slot with
//! few timers only visits their lanes.
//! Level 0 is never cascaded, only popped from (its entries were just cascaded down, so they
//! are in cache), and uses lane 0 alone, which keeps popping to one list.
//!
//! All functions here work on absolute times: a level-`l` slot covers `64^l` milliseconds
//! aligned to a multiple of `64^l`, and a level covers the `64^(l+1)`-aligned range that
//! contains the wheel's current time. Which level and slot a deadline belongs to is therefore
//! a matter of a few bit operations on `elapsed ^ deadline`, with no division and no loop.

use super::slab::List;

/// log2 of the number of slots per level.
pub(super) const SLOT_BITS: u32 = 6;

/// Slots per level. A power of two so that slot numbers are bit fields of the time, and 64
/// so that one `u64` holds the occupancy of a whole level.
pub(super) const SLOTS: usize = 1 << SLOT_BITS;

/// Mask of the slot bits of a level-0 time.
pub(super) const SLOT_MASK: u64 = SLOTS as u64 - 1;

/// Number of levels. Six levels of 64 slots cover 2^36 ms (about 795 days) at a
/// one-millisecond resolution.
pub(super) const NUM_LEVELS: usize = 6;

/// The range of the whole wheel: the top level's range, 2^36 ms.
pub(super) const WHEEL_RANGE: u64 = 1 << (SLOT_BITS as usize * NUM_LEVELS);

/// What [`level_for`] returns for a deadline outside the wheel's current top-level range:
/// such a timer goes to the overflow list.
pub(super) const OVERFLOW: usize = NUM_LEVELS;

/// Returns the level a timer due at `when` belongs to while the wheel's time is `elapsed`,
/// or [`OVERFLOW`] if `when` lies beyond the top level's current range.
///
/// The level is the one holding the most significant bit in which `elapsed` and `when`
/// differ: all higher bits are equal, so `when` lies inside the current slot of every
/// higher level and in a later slot of this one. The low six bits are forced on so that
/// a `when` equal to `elapsed` (or differing only inside a level-0 slot) lands on level 0.
///
/// `when` must not be before `elapsed`; late timers are kept outside the levels.
#[inline]
pub(super) fn level_for(elapsed: u64, when: u64) -> usize {
    debug_assert!(
        when >= elapsed,
        "level_for({elapsed}, {when}): deadline in the past"
    );
    let differing = elapsed ^ when;
    if differing >= WHEEL_RANGE {
        return OVERFLOW;
    }
    let significant = 63 - (differing | SLOT_MASK).leading_zeros();
    (significant / SLOT_BITS) as usize
}

/// Returns the slot of `level` that covers time `when`.
#[inline]
pub(super) fn slot_for(when: u64, level: usize) -> usize {
    ((when >> (level as u32 * SLOT_BITS)) & SLOT_MASK) as usize
}

/// Returns the time at which `slot` of `level` begins, for the level range containing
/// `elapsed`.
///
/// Masking off everything below the level's range gives the start of the range; each slot
/// then adds one slot width (`64^level`).
#[inline]
pub(super) fn slot_start(elapsed: u64, level: usize, slot: usize) -> u64 {
    let slot_shift = level as u32 * SLOT_BITS;
    let range_mask = (1u64 << (slot_shift + SLOT_BITS)) - 1;
    (elapsed & !range_mask) + ((slot as u64) << slot_shift)
}

/// Independent lists per slot; 16 lists of two `u32` fill two 64-byte cache lines.
///
/// Measured on the 1M add+fire benchmark: 16 lanes cascade 10-15% faster than 8, and the
/// per-operation costs do not change measurably.
pub(super) const LANES: usize = 16;

/// Returns the lane of a slot of `level` that the timer stored at slab `index` goes to.
///
/// Consecutive indices go to different lanes, so a burst of inserts spreads evenly; level 0
/// only needs one lane (see the module documentation).
#[inline]
pub(super) fn lane_for(level: usize, index: u32) -> usize {
    if level == 0 {
        0
    } else {
        index as usize % LANES
    }
}

/// The timers of one slot, spread over [`LANES`] lists.
#[derive(Debug, Clone)]
#[repr(align(64))]
pub(super) struct Slot {
    /// The lists; a timer is in lane [`lane_for`] of its level and index.
    pub(super) lanes: [List; LANES],
}

impl Slot {
    /// A slot with no timers.
    pub(super) const EMPTY: Slot = Slot {
        lanes: [List::EMPTY; LANES],
    };
}

/// One level: 64 slots and bitfields of the non-empty slots and lanes.
#[derive(Debug, Clone)]
pub(super) struct Level {
    /// Bit `s` is set exactly when `slots[s]` is non-empty.
    ///
    /// Finding the next slot to process is then one `trailing_zeros` instead of a scan.
    pub(super) occupied: u64,
    /// Bit `l` of `lanes[s]` is set exactly when lane `l` of `slots[s]` is non-empty.
    ///
    /// So a removal learns whether its slot became empty from one load, and a cascade visits
    /// only the lanes that hold timers: a slot holding a few timers (the common case when
    /// timers are sparse) costs a few steps, not a pass over all [`LANES`] lists. Kept apart
    /// from the slots so that a slot stays two cache lines.
    pub(super) lanes: [u16; SLOTS],
    /// The timers of each slot.
    pub(super) slots: [Slot; SLOTS],
}

impl Level {
    /// A level with no timers.
    pub(super) const EMPTY: Level = Level {
        occupied: 0,
        lanes: [0; SLOTS],
        slots: [Slot::EMPTY; SLOTS],
    };

    /// Returns the first occupied slot.
    ///
    /// Slots never wrap around: a level only ever holds slots later than (or, on level 0,
    /// equal to) the current time's slot, so the lowest set bit is the earliest slot.
    #[inline]
    pub(super) fn first_occupied(&self) -> Option<usize> {
        if self.occupied == 0 {
            None
        } else {
            Some(self.occupied.trailing_zeros() as usize)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_812_345_678_901; // an epoch time of 2027, in no slot's first ms
    const HOUR: u64 = 3_600_000;
    const YEAR: u64 = 365 * 24 * HOUR;

    #[test]
    fn level_for_table() {
        // Start of NOW's level-0 slot range (64 ms) and of its level-2 range (2^18 ms).
        let l0 = NOW & !63;
        let l2 = NOW & !((1 << 18) - 1);
        let top = NOW & !(WHEEL_RANGE - 1);
        #[rustfmt::skip]
        let table: &[(u64, u64, usize)] = &[
            // elapsed, when, level
            (0, 0, 0),
            (0, 63, 0),
            (0, 64, 1),
            (0, 4095, 1),
            (0, 4096, 2),
            (0, (1 << 18) - 1, 2),
            (0, 1 << 18, 3),
            (0, 1 << 24, 4),
            (0, 1 << 30, 5),
            (0, WHEEL_RANGE - 1, 5),
            (0, WHEEL_RANGE, OVERFLOW),
            (NOW, NOW, 0),
            (NOW, l0 + 63, 0),
            (NOW, l0 + 64, 1),           // first ms of the next level-0 range
            (l0 + 63, l0 + 64, 1),       // 1 ms ahead, but across a level-0 range boundary
            (NOW, l2 + (1 << 18), 3),    // across a level-2 range boundary
            (NOW, NOW + HOUR, 3),
            (NOW, NOW + 30 * 24 * HOUR, 5),
            (NOW, top + WHEEL_RANGE - 1, 5), // last ms of the top range
            (NOW, top + WHEEL_RANGE, OVERFLOW),
            (top + WHEEL_RANGE - 1, top + WHEEL_RANGE, OVERFLOW), // 1 ms, but the next top range
            (NOW, NOW + 10 * YEAR, OVERFLOW),
            (NOW, u64::MAX, OVERFLOW),
            (u64::MAX - 5, u64::MAX, 0),
            (u64::MAX, u64::MAX, 0),
        ];
        for &(elapsed, when, level) in table {
            assert_eq!(
                level_for(elapsed, when),
                level,
                "level_for({elapsed}, {when})"
            );
        }
    }

    #[test]
    fn level_for_boundaries_of_every_level() {
        // For each level: the first and last time of its first and last slot after `base`.
        for base in [0, NOW & !(WHEEL_RANGE - 1)] {
            for level in 1..NUM_LEVELS {
                let width = 1u64 << (SLOT_BITS as usize * level);
                for slot in 1..SLOTS as u64 {
                    let start = base + slot * width;
                    assert_eq!(level_for(base, start), level, "start of slot {slot}");
                    assert_eq!(
                        level_for(base, start + width - 1),
                        level,
                        "end of slot {slot}"
                    );
                }
            }
        }
    }

    #[test]
    fn slot_for_table() {
        #[rustfmt::skip]
        let table: &[(u64, usize, usize)] = &[
            // when, level, slot
            (0, 0, 0),
            (63, 0, 63),
            (64, 0, 0),
            (64, 1, 1),
            (4095, 1, 63),
            (4096, 1, 0),
            (4096, 2, 1),
            (5 << 30, 5, 5),
            (WHEEL_RANGE + (5 << 30), 5, 5), // only the level's own bits count
            (u64::MAX, 0, 63),
            (u64::MAX, 5, 63),
        ];
        for &(when, level, slot) in table {
            assert_eq!(slot_for(when, level), slot, "slot_for({when}, {level})");
        }
    }

    #[test]
    fn slot_start_table() {
        let l1 = NOW & !4095; // start of NOW's level-1 range
        #[rustfmt::skip]
        let table: &[(u64, usize, usize, u64)] = &[
            // elapsed, level, slot, start
            (0, 0, 0, 0),
            (0, 0, 63, 63),
            (100, 0, 40, 104),          // 100 = 64 + 36: the range starts at 64
            (100, 1, 1, 64),
            (100, 1, 2, 128),
            (NOW, 1, 0, l1),
            (NOW, 1, 63, l1 + 63 * 64),
            (NOW, 5, 0, NOW & !(WHEEL_RANGE - 1)),
            (NOW, 5, 63, (NOW & !(WHEEL_RANGE - 1)) + (63 << 30)),
            (u64::MAX, 0, 63, u64::MAX),
            (u64::MAX, 5, 63, u64::MAX - (1 << 30) + 1),
        ];
        for &(elapsed, level, slot, start) in table {
            assert_eq!(
                slot_start(elapsed, level, slot),
                start,
                "slot_start({elapsed}, {level}, {slot})"
            );
        }
    }

    #[test]
    fn slot_of_a_deadline_starts_at_or_before_it() {
        // The two functions agree: a deadline's slot at its level starts at or before it,
        // and the slot after it starts after it.
        for when in [NOW, NOW + 1, NOW + 64, NOW + HOUR, NOW + 400 * 24 * HOUR] {
            let level = level_for(NOW, when);
            let slot = slot_for(when, level);
            let start = slot_start(NOW, level, slot);
            let width = 1u64 << (SLOT_BITS as usize * level);
            assert!(
                start <= when && when < start + width,
                "{when}: {start} + {width}"
            );
            assert!(start >= NOW, "slots are never behind the current time");
        }
    }

    #[test]
    fn lane_for_spreads_consecutive_indices_over_all_lanes() {
        #[rustfmt::skip]
        let table: &[(usize, u32, usize)] = &[
            // level, index, lane
            (1, 0, 0),
            (1, 1, 1),
            (1, 15, 15),
            (1, 16, 0),
            (3, 21, 5),
            (5, u32::MAX - 1, 14),
            (0, 0, 0),               // level 0 has one lane
            (0, 13, 0),
            (0, u32::MAX - 1, 0),
        ];
        for &(level, index, lane) in table {
            assert_eq!(lane_for(level, index), lane, "lane_for({level}, {index})");
        }
    }

    #[test]
    fn a_slot_is_two_cache_lines() {
        assert_eq!(std::mem::size_of::<Slot>(), 128);
        assert_eq!(std::mem::align_of::<Slot>(), 64);
    }

    #[test]
    fn first_occupied_is_the_lowest_set_bit() {
        let mut level = Level::EMPTY;
        assert_eq!(level.first_occupied(), None);
        for (occupied, first) in [(1, 0), (0b1010_0000, 5), (1 << 63, 63), (u64::MAX, 0)] {
            level.occupied = occupied;
            assert_eq!(level.first_occupied(), Some(first));
        }
    }
}
