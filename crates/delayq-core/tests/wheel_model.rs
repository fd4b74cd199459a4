//! Model test: random sequences of operations on a [`Wheel`] checked against a `BTreeMap`
//! oracle after every step.
//!
//! Checked: exactly the due timers come out, earliest first (the deadlines handed out by one
//! call are the smallest ones in the oracle), never one before its deadline, none left behind
//! when a call stops short of its limit; `len`, `get`, `deadline` agree; `next_expiration` is
//! never after the earliest deadline and is at or before the wheel's time exactly when
//! something is due. Times are absolute epoch milliseconds and include jumps of years,
//! deadlines ten years out, deadlines in the past and the ends of the `u64` range.

use std::collections::{BTreeMap, HashMap};

use delayq_core::wheel::{Expired, TimerKey, Wheel};
use proptest::prelude::*;

const BASE: u64 = 1_812_345_678_901;
const DAY: u64 = 24 * 3_600_000;
const YEAR: u64 = 365 * DAY;
const RANGE: u64 = 1 << 36;

/// A time relative to the model's clock.
#[derive(Debug, Clone)]
enum Time {
    /// `clock - n`: in the past (for `now`: behind the wheel).
    Past(u64),
    /// `clock + n`.
    Ahead(u64),
    /// The next multiple of 2^36 (a top-level range boundary) plus a small signed offset.
    Boundary(i64),
    /// `u64::MAX - n`.
    End(u64),
}

fn ahead() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0..70u64,             // level 0 and its edge
        3 => 0..300_000u64,        // seconds to minutes
        2 => 0..(40 * DAY),        // up to level 5
        2 => 0..(11 * YEAR),       // beyond the wheel's range
        1 => (0..4u64).prop_map(|n| n * RANGE),
    ]
}

fn time() -> impl Strategy<Value = Time> {
    prop_oneof![
        2 => (1..5_000u64).prop_map(Time::Past),
        12 => ahead().prop_map(Time::Ahead),
        1 => (-70..70i64).prop_map(Time::Boundary),
        1 => (0..3u64).prop_map(Time::End),
    ]
}

#[derive(Debug, Clone)]
enum Op {
    Insert(Time),
    Remove(usize),
    RemoveStale(usize),
    Reschedule(usize, Time),
    Poll(Time),
    Drain(Time, usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => time().prop_map(Op::Insert),
        2 => any::<usize>().prop_map(Op::Remove),
        1 => any::<usize>().prop_map(Op::RemoveStale),
        2 => (any::<usize>(), time()).prop_map(|(i, t)| Op::Reschedule(i, t)),
        3 => time().prop_map(Op::Poll),
        4 => (time(), prop_oneof![0..5usize, 0..100usize, Just(usize::MAX)])
            .prop_map(|(t, l)| Op::Drain(t, l)),
    ]
}

/// The oracle: every live timer by (deadline, sequence number), and each key's entry.
struct Model {
    wheel: Wheel<u64>,
    /// The largest `now` given to the wheel so far (its time can be at most this).
    clock: u64,
    by_deadline: BTreeMap<(u64, u64), TimerKey>,
    by_key: HashMap<TimerKey, (u64, u64)>,
    live: Vec<TimerKey>,
    stale: Vec<TimerKey>,
    seq: u64,
}

impl Model {
    fn new(start: u64) -> Self {
        Model {
            wheel: Wheel::new(start),
            clock: start,
            by_deadline: BTreeMap::new(),
            by_key: HashMap::new(),
            live: Vec::new(),
            stale: Vec::new(),
            seq: 0,
        }
    }

    fn resolve(&self, time: &Time) -> u64 {
        match *time {
            Time::Past(n) => self.clock.saturating_sub(n),
            Time::Ahead(n) => self.clock.saturating_add(n),
            Time::Boundary(d) => {
                let next = (self.clock | (RANGE - 1)).saturating_add(1);
                next.saturating_add_signed(d)
            }
            Time::End(n) => u64::MAX - n,
        }
    }

    fn forget(&mut self, key: TimerKey) -> (u64, u64) {
        let (deadline, seq) = self.by_key.remove(&key).expect("key in the model");
        self.by_deadline.remove(&(deadline, seq));
        let at = self.live.iter().position(|k| *k == key).expect("live key");
        self.live.swap_remove(at);
        self.stale.push(key);
        (deadline, seq)
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Insert(t) => {
                let deadline = self.resolve(t);
                self.seq += 1;
                let key = self.wheel.insert(deadline, self.seq);
                assert!(!self.by_key.contains_key(&key), "fresh key {key:?} reused");
                self.by_key.insert(key, (deadline, self.seq));
                self.by_deadline.insert((deadline, self.seq), key);
                self.live.push(key);
            }
            Op::Remove(i) => {
                if self.live.is_empty() {
                    return;
                }
                let key = self.live[i % self.live.len()];
                let (_, seq) = self.forget(key);
                assert_eq!(self.wheel.remove(key), Some(seq));
            }
            Op::RemoveStale(i) => {
                if self.stale.is_empty() {
                    return;
                }
                let key = self.stale[i % self.stale.len()];
                assert_eq!(self.wheel.remove(key), None, "stale key removed something");
                assert!(!self.wheel.reschedule(key, self.clock));
                assert_eq!(self.wheel.get(key), None);
            }
            Op::Reschedule(i, t) => {
                if self.live.is_empty() {
                    return;
                }
                let key = self.live[i % self.live.len()];
                let deadline = self.resolve(t);
                let (old, seq) = self.by_key[&key];
                self.by_deadline.remove(&(old, seq));
                self.by_deadline.insert((deadline, seq), key);
                self.by_key.insert(key, (deadline, seq));
                assert!(self.wheel.reschedule(key, deadline));
            }
            Op::Poll(t) => {
                let now = self.resolve(t);
                let before = self.wheel.elapsed();
                let got: Vec<Expired<u64>> = self.wheel.poll(now).into_iter().collect();
                self.check_drain(before, now, 1, got);
            }
            Op::Drain(t, limit) => {
                let now = self.resolve(t);
                let before = self.wheel.elapsed();
                let mut got = Vec::new();
                let n = self.wheel.drain_due(now, *limit, &mut got);
                assert_eq!(n, got.len(), "returned count");
                self.check_drain(before, now, *limit, got);
            }
        }
    }

    /// Checks what one `poll`/`drain_due(now, limit)` returned; `before` is the wheel's time
    /// before the call.
    fn check_drain(&mut self, before: u64, now: u64, limit: usize, got: Vec<Expired<u64>>) {
        // A `now` behind the wheel counts as the wheel's time.
        let effective = now.max(before);
        let elapsed = self.wheel.elapsed();
        assert!(got.len() <= limit);
        // The deadlines handed out are the smallest ones, in order.
        let expected: Vec<u64> = self
            .by_deadline
            .keys()
            .take(got.len())
            .map(|&(d, _)| d)
            .collect();
        let deadlines: Vec<u64> = got.iter().map(|e| e.deadline).collect();
        assert_eq!(deadlines, expected, "not the earliest timers, in order");
        for e in &got {
            assert!(
                e.deadline <= effective,
                "early: {} at {effective}",
                e.deadline
            );
            let (deadline, seq) = self.forget(e.key);
            assert_eq!(
                (e.deadline, e.value),
                (deadline, seq),
                "wrong entry for key"
            );
        }
        if got.len() < limit {
            if let Some((&(d, _), _)) = self.by_deadline.iter().next() {
                assert!(d > effective, "missed: {d} still in at {effective}");
            }
            assert_eq!(elapsed, effective, "time moves to now when nothing is left");
        }
        assert!(
            before <= elapsed && elapsed <= effective,
            "{before} {elapsed} {effective}"
        );
        self.clock = self.clock.max(effective);
    }

    fn check(&self) {
        assert_eq!(self.wheel.len(), self.by_key.len(), "len");
        assert_eq!(self.wheel.is_empty(), self.by_key.is_empty());
        let elapsed = self.wheel.elapsed();
        assert!(elapsed <= self.clock);
        match (self.wheel.next_expiration(), self.by_deadline.keys().next()) {
            (None, None) => {}
            (Some(t), Some(&(min, _))) => {
                assert!(
                    t <= min,
                    "next_expiration {t} after the earliest deadline {min}"
                );
                assert_eq!(
                    t <= elapsed,
                    min <= elapsed,
                    "next_expiration {t}, earliest {min}, elapsed {elapsed}"
                );
            }
            (t, min) => panic!("next_expiration {t:?} with earliest {min:?}"),
        }
        for key in self.live.iter().take(3) {
            let (deadline, seq) = self.by_key[key];
            assert_eq!(self.wheel.deadline(*key), Some(deadline));
            assert_eq!(self.wheel.get(*key), Some(&seq));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn wheel_matches_a_btreemap_oracle(
        start in prop_oneof![Just(BASE), BASE..BASE + 2 * RANGE, Just(0u64)],
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let mut model = Model::new(start);
        for op in &ops {
            model.apply(op);
            model.check();
        }
        // Finally everything comes out, in order, at the end of time.
        model.apply(&Op::Drain(Time::End(0), usize::MAX));
        model.check();
        prop_assert!(model.wheel.is_empty());
    }

    #[test]
    fn owner_sleeping_until_next_expiration_fires_each_timer_on_its_millisecond(
        offsets in prop::collection::vec(ahead(), 1..200),
        removed in prop::collection::vec(any::<bool>(), 200),
        limit in 1..10usize,
    ) {
        let mut wheel = Wheel::new(BASE);
        let keys: Vec<TimerKey> = offsets.iter().map(|&o| wheel.insert(BASE + o, BASE + o)).collect();
        for (key, gone) in keys.iter().zip(&removed) {
            if *gone {
                wheel.remove(*key);
            }
        }
        let mut clock = BASE;
        let mut out = Vec::new();
        let mut last = 0;
        let mut wakeups = 0;
        while let Some(t) = wheel.next_expiration() {
            wakeups += 1;
            prop_assert!(wakeups <= 8 * offsets.len() + 8, "owner loop does not converge");
            clock = clock.max(t);
            wheel.drain_due(clock, limit, &mut out);
            for e in out.drain(..) {
                prop_assert_eq!(e.deadline, clock, "fired at {} instead of {}", clock, e.deadline);
                prop_assert!(e.deadline >= last);
                last = e.deadline;
            }
        }
        prop_assert!(wheel.is_empty());
    }
}
