//! White-box tests: the wheel's internal invariants after random operations, and the
//! placement of timers on levels. Behaviour seen through the public API is tested in
//! `tests/wheel_*.rs`.

use proptest::prelude::*;

use super::*;

const NOW: u64 = 1_812_345_678_901;
const DAY: u64 = 24 * 3_600_000;
const YEAR: u64 = 365 * DAY;

impl<T: Copy> Wheel<T> {
    /// Walks `list`, checking its links, and returns its entries.
    fn walk(&self, list: &List, place: Place) -> Vec<u32> {
        let mut out = Vec::new();
        let mut prev = NIL;
        let mut cur = list.head;
        while cur != NIL {
            let entry = &self.slab.entries[cur as usize];
            assert_eq!(entry.prev, prev, "prev link of {cur}");
            assert_eq!(entry.place, place, "place of {cur}");
            out.push(cur);
            prev = cur;
            cur = entry.next;
        }
        assert_eq!(list.tail, prev, "tail of {place:?}");
        out
    }

    /// Panics unless every structural invariant the algorithm relies on holds.
    pub(super) fn check_invariants(&self) {
        let mut linked = 0;
        let deadline = |i: u32| self.slab.entries[i as usize].deadline;
        for (l, lvl) in self.levels.iter().enumerate() {
            for (s, slot) in lvl.slots.iter().enumerate() {
                let used: u16 = (0..LANES)
                    .filter(|&lane| !slot.lanes[lane].is_empty())
                    .map(|lane| 1 << lane)
                    .sum();
                assert_eq!(lvl.lanes[s], used, "lane bits of {l}/{s}");
                assert_eq!(lvl.occupied & (1 << s) != 0, used != 0, "bit {l}/{s}");
                if used == 0 {
                    continue;
                }
                let place = Place::Level {
                    level: l as u8,
                    slot: s as u8,
                };
                let in_lanes = slot.lanes.iter().enumerate().flat_map(|(lane, list)| {
                    self.walk(list, place).into_iter().map(move |i| (lane, i))
                });
                for (lane, i) in in_lanes {
                    assert_eq!(level::lane_for(l, i), lane, "lane of {i}");
                    let d = deadline(i);
                    assert!(d >= self.elapsed, "level timer {d} behind {}", self.elapsed);
                    assert_eq!(level_for(self.elapsed, d), l, "level of {d}");
                    assert_eq!(slot_for(d, l), s, "slot of {d}");
                    if l == 0 {
                        // Level 0 is exact: the slot start is the deadline.
                        assert_eq!(slot_start(self.elapsed, 0, s), d);
                    }
                    linked += 1;
                }
            }
        }
        for i in self.walk(&self.overflow, Place::Overflow) {
            assert!(deadline(i) >= self.overflow_min, "overflow bound");
            assert!(deadline(i) >= self.elapsed);
            linked += 1;
        }
        if !self.overflow.is_empty() {
            assert!(
                self.overflow_min >= self.elapsed,
                "overflow bound behind time"
            );
        }
        for i in self.walk(&self.late, Place::Late) {
            assert!(deadline(i) >= self.late_min, "late bound");
            assert!(deadline(i) < self.elapsed);
            linked += 1;
        }
        let sorted = self.walk(&self.late_sorted, Place::LateSorted);
        assert!(sorted.windows(2).all(|w| deadline(w[0]) <= deadline(w[1])));
        assert!(sorted.iter().all(|&i| deadline(i) <= self.elapsed));
        linked += sorted.len();
        assert_eq!(linked, self.len(), "every timer is linked exactly once");
        let vacant = self
            .slab
            .entries
            .iter()
            .filter(|e| e.place == Place::Vacant)
            .count();
        assert_eq!(vacant + self.len(), self.slab.entries.len());
    }
}

fn place_of<T: Copy>(wheel: &Wheel<T>, key: TimerKey) -> Place {
    wheel.slab.entries[key.index as usize].place
}

#[test]
fn timers_land_on_the_expected_level() {
    let mut wheel = Wheel::new(NOW);
    let level = |wheel: &Wheel<()>, key| match place_of(wheel, key) {
        Place::Level { level, .. } => Some(level),
        _ => None,
    };
    for (offset, expected) in [
        (0, Some(0)),
        (1, Some(0)),
        (60_000, Some(2)),
        (3_600_000, Some(3)),
        (DAY, Some(4)), // NOW is in level-4 slot 56 of 64: a week would be level 5
        (30 * DAY, Some(5)),
        (10 * YEAR, None),
    ] {
        let key = wheel.insert(NOW + offset, ());
        assert_eq!(level(&wheel, key), expected, "offset {offset}");
    }
    let late = wheel.insert(NOW - 1, ());
    assert_eq!(place_of(&wheel, late), Place::Late);
    wheel.check_invariants();
}

#[test]
fn cascading_moves_timers_down_one_slot_at_a_time() {
    let mut wheel = Wheel::new(NOW);
    let key = wheel.insert(NOW + 3_600_000, 1);
    let mut steps = 0;
    while let Some(t) = wheel.next_expiration() {
        assert!(t > wheel.elapsed() || t == NOW + 3_600_000);
        if let Some(e) = wheel.poll(t) {
            assert_eq!((e.key, e.deadline, wheel.elapsed()), (key, t, t));
        }
        wheel.check_invariants();
        steps += 1;
    }
    // One wake-up per level the timer passes through, plus the firing one.
    assert!(steps <= NUM_LEVELS + 1, "{steps} wake-ups");
}

#[test]
fn removing_the_last_timer_of_a_slot_clears_its_bit() {
    let mut wheel = Wheel::new(NOW);
    let a = wheel.insert(NOW + 100_000, 'a');
    let b = wheel.insert(NOW + 100_001, 'b');
    let Place::Level { level, slot } = place_of(&wheel, a) else {
        panic!("not on a level")
    };
    assert_eq!(place_of(&wheel, b), place_of(&wheel, a), "same slot");
    wheel.remove(a);
    assert_ne!(wheel.levels[level as usize].occupied & (1 << slot), 0);
    wheel.remove(b);
    assert_eq!(wheel.levels[level as usize].occupied, 0);
    assert_eq!(wheel.next_expiration(), None);
    wheel.check_invariants();
}

#[test]
fn late_timers_are_sorted_once_and_handed_out_first() {
    let mut wheel = Wheel::new(NOW);
    wheel.insert(NOW, 0);
    for d in [5, 1, 3, 2, 4] {
        wheel.insert(NOW - d, d);
    }
    assert_eq!(wheel.next_expiration(), Some(NOW - 5));
    let mut out = Vec::new();
    assert_eq!(wheel.drain_due(NOW, 2, &mut out), 2);
    wheel.check_invariants();
    // A later late insert still comes out in order with the remaining sorted ones.
    wheel.insert(NOW - 10, 10);
    wheel.drain_due(NOW, usize::MAX, &mut out);
    let values: Vec<u64> = out.iter().map(|e| e.value).collect();
    assert_eq!(values, [5, 4, 10, 3, 2, 1, 0]);
    wheel.check_invariants();
}

#[test]
fn overflow_is_rescanned_only_when_its_bound_is_reached() {
    let mut wheel = Wheel::new(NOW);
    let far = wheel.insert(NOW + 10 * YEAR, ());
    assert_eq!(place_of(&wheel, far), Place::Overflow);
    assert_eq!(wheel.next_expiration(), Some(NOW + 10 * YEAR));
    assert!(wheel.poll(NOW + 10 * YEAR - 1).is_none());
    assert_eq!(
        place_of(&wheel, far),
        Place::Overflow,
        "not rescanned early"
    );
    wheel.check_invariants();
    assert_eq!(wheel.poll(NOW + 10 * YEAR).map(|e| e.key), Some(far));
}

/// One row of `advance_table`: times are offsets from `start`, the first millisecond of a
/// slot of `level` that is not the first of a slot of the level above.
struct AdvanceRow {
    level: u32,
    /// Timers inserted while the wheel is two top-level ranges behind: they go to overflow.
    far: &'static [i64],
    /// The time the wheel is polled to (with nothing due) before `near` is inserted.
    before: i64,
    /// Timers inserted at `before`: they go to the levels.
    near: &'static [i64],
    /// The `now` given to `advance`.
    now: i64,
    /// What `advance` returns, and the wheel's time afterwards.
    advanced: bool,
    elapsed: i64,
    /// Where the `far` timers, then the `near` ones, are afterwards: a level, or `None` for
    /// the overflow list.
    places: &'static [Option<u8>],
}

#[test]
fn advance_table() {
    const RANGE: i64 = level::WHEEL_RANGE as i64;
    #[rustfmt::skip]
    let table = [
        // Nothing at all: the time moves to `now`.
        AdvanceRow { level: 1, far: &[], before: -1, near: &[], now: 5,
                     advanced: false, elapsed: 5, places: &[] },
        // Only a slot, due: cascaded.
        AdvanceRow { level: 1, far: &[], before: -1, near: &[1], now: 0,
                     advanced: true, elapsed: 0, places: &[Some(0)] },
        // Only a slot, not due yet.
        AdvanceRow { level: 1, far: &[], before: -1, near: &[1], now: -1,
                     advanced: false, elapsed: -1, places: &[Some(1)] },
        // Only overflow, due: rescanned at its bound.
        AdvanceRow { level: 1, far: &[0], before: -1, near: &[], now: 3,
                     advanced: true, elapsed: 0, places: &[Some(0)] },
        // The overflow bound comes first: the slot waits.
        AdvanceRow { level: 1, far: &[-5], before: -10, near: &[1], now: 0,
                     advanced: true, elapsed: -5, places: &[Some(0), Some(1)] },
        // The slot comes first: the overflow list waits.
        AdvanceRow { level: 1, far: &[5], before: -10, near: &[1], now: 10,
                     advanced: true, elapsed: 0, places: &[None, Some(0)] },
        // A tie: both are redistributed in one step (the regression: the slot used to stay
        // on its level with its start at `elapsed`).
        AdvanceRow { level: 1, far: &[0], before: -1, near: &[1], now: 0,
                     advanced: true, elapsed: 0, places: &[Some(0), Some(0)] },
        AdvanceRow { level: 2, far: &[0, 70], before: -1, near: &[1, 63, 64], now: 0,
                     advanced: true, elapsed: 0,
                     places: &[Some(0), Some(1), Some(0), Some(0), Some(1)] },
        AdvanceRow { level: 5, far: &[0, RANGE], before: -1, near: &[1, 70, 5000, 1 << 25],
                     now: 0, advanced: true, elapsed: 0,
                     places: &[Some(0), None, Some(0), Some(1), Some(2), Some(4)] },
        // A tie that is not due yet changes nothing.
        AdvanceRow { level: 3, far: &[0], before: -1, near: &[1], now: -1,
                     advanced: false, elapsed: -1, places: &[None, Some(3)] },
    ];
    for (row, r) in table.iter().enumerate() {
        let width = 1u64 << (6 * r.level);
        let start = ((NOW / width) | 1) * width;
        let at = |offset: i64| start.checked_add_signed(offset).expect("in range");
        let mut wheel = Wheel::new(start - 2 * level::WHEEL_RANGE);
        let mut keys: Vec<TimerKey> = r.far.iter().map(|&d| wheel.insert(at(d), ())).collect();
        assert!(wheel.poll(at(r.before)).is_none(), "row {row}");
        keys.extend(r.near.iter().map(|&d| wheel.insert(at(d), ())));
        wheel.check_invariants();

        assert_eq!(wheel.advance(at(r.now)), r.advanced, "row {row}");
        assert_eq!(wheel.elapsed(), at(r.elapsed), "row {row}");
        wheel.check_invariants();
        let places: Vec<Option<u8>> = keys
            .iter()
            .map(|&key| match place_of(&wheel, key) {
                Place::Level { level, .. } => Some(level),
                Place::Overflow => None,
                other => panic!("row {row}: {other:?}"),
            })
            .collect();
        assert_eq!(places, r.places, "row {row}");
        // Something due now is exactly something in the current level-0 slot.
        let due_now = wheel.levels[0].occupied & (1 << (wheel.elapsed() & SLOT_MASK)) != 0;
        assert_eq!(
            wheel
                .next_expiration()
                .is_some_and(|t| t <= wheel.elapsed()),
            due_now,
            "row {row}"
        );
    }
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u64),
    Late(u64),
    Remove(usize),
    Reschedule(usize, u64),
    Drain(u64, usize),
}

fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        0..200u64,
        0..5_000_000u64,
        0..(12 * YEAR),
        Just(level::WHEEL_RANGE),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => offset().prop_map(Op::Insert),
        1 => (1..1_000u64).prop_map(Op::Late),
        2 => any::<usize>().prop_map(Op::Remove),
        2 => (any::<usize>(), offset()).prop_map(|(i, d)| Op::Reschedule(i, d)),
        3 => (offset(), 0..8usize).prop_map(|(d, l)| Op::Drain(d, l)),
    ]
}

proptest! {
    #[test]
    fn invariants_hold_after_every_operation(ops in prop::collection::vec(op(), 1..120)) {
        let mut wheel = Wheel::new(NOW);
        let mut keys = Vec::new();
        let mut out = Vec::new();
        for op in ops {
            let at = wheel.elapsed();
            match op {
                Op::Insert(d) => keys.push(wheel.insert(at.saturating_add(d), ())),
                Op::Late(d) => keys.push(wheel.insert(at.saturating_sub(d), ())),
                Op::Remove(i) if !keys.is_empty() => {
                    wheel.remove(keys.swap_remove(i % keys.len()));
                }
                Op::Reschedule(i, d) if !keys.is_empty() => {
                    wheel.reschedule(keys[i % keys.len()], at.saturating_add(d));
                }
                Op::Drain(d, limit) => {
                    wheel.drain_due(at.saturating_add(d), limit, &mut out);
                }
                _ => {}
            }
            wheel.check_invariants();
        }
    }
}
