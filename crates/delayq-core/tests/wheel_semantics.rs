//! The wheel's rules seen from its owner: never early, never missed, in order, any deadline
//! (past, far beyond the wheel's range, `u64::MAX`), any jump of time, no ticking.

use delayq_core::wheel::{Expired, Wheel};

const NOW: u64 = 1_812_345_678_901;
const DAY: u64 = 24 * 3_600_000;
const YEAR: u64 = 365 * DAY;
/// The wheel's range (six levels of 64 slots), 2^36 ms.
const RANGE: u64 = 1 << 36;

/// A small deterministic generator, so failures reproduce.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn drain_all<T: Copy>(wheel: &mut Wheel<T>, now: u64) -> Vec<Expired<T>> {
    let mut out = Vec::new();
    wheel.drain_due(now, usize::MAX, &mut out);
    out
}

/// Plays the owner: sleep until `next_expiration`, drain at exactly that time, repeat.
/// Returns `(fire time, deadline, value)` for every timer and the number of wake-ups.
fn run_owner<T: Copy>(wheel: &mut Wheel<T>, limit: usize) -> (Vec<(u64, u64, T)>, usize) {
    let mut fired = Vec::new();
    let mut wakeups = 0;
    let mut clock = wheel.elapsed();
    let mut out = Vec::new();
    while let Some(t) = wheel.next_expiration() {
        // The clock never goes back; a wake-up time at or before it means "drain now".
        clock = clock.max(t);
        wakeups += 1;
        wheel.drain_due(clock, limit, &mut out);
        fired.extend(out.drain(..).map(|e| (clock, e.deadline, e.value)));
        assert!(wakeups < 1_000_000, "owner loop does not converge");
    }
    (fired, wakeups)
}

#[test]
fn never_early_never_missed_polling_every_millisecond() {
    let mut wheel = Wheel::new(NOW);
    let mut rng = 0x9e37_79b9_7f4a_7c15;
    let mut deadlines: Vec<u64> = (0..2_000)
        .map(|_| NOW + xorshift(&mut rng) % 5_000)
        .collect();
    for &d in &deadlines {
        wheel.insert(d, d);
    }
    let mut fired = Vec::new();
    for now in NOW..=NOW + 5_000 {
        while let Some(e) = wheel.poll(now) {
            assert!(e.deadline <= now, "early: {} at {now}", e.deadline);
            assert_eq!(e.deadline, now, "late: {} at {now}", e.deadline);
            fired.push(e.value);
        }
        assert_eq!(wheel.elapsed(), now);
    }
    deadlines.sort_unstable();
    assert_eq!(fired, deadlines, "every timer, in deadline order");
    assert!(wheel.is_empty());
}

#[test]
fn one_big_jump_returns_everything_due_in_order_and_nothing_else() {
    let mut wheel = Wheel::new(NOW);
    let mut rng = 7;
    let mut due = Vec::new();
    for _ in 0..5_000 {
        let d = NOW + xorshift(&mut rng) % (3 * YEAR);
        wheel.insert(d, d);
        if d <= NOW + YEAR {
            due.push(d);
        }
    }
    due.sort_unstable();
    let fired: Vec<u64> = drain_all(&mut wheel, NOW + YEAR)
        .into_iter()
        .map(|e| e.deadline)
        .collect();
    assert_eq!(fired, due);
    assert_eq!(wheel.elapsed(), NOW + YEAR);
    assert!(wheel.next_expiration().expect("rest is pending") > NOW + YEAR);
}

#[test]
fn ten_year_deadlines_fire_exactly_on_time_after_one_big_jump() {
    let top = NOW & !(RANGE - 1);
    let deadlines = [
        NOW + 10 * YEAR,
        NOW + 10 * YEAR + 1,
        NOW + 10 * YEAR + 3 * DAY,
        top + 4 * RANGE,     // the first millisecond of a top-level range
        top + 4 * RANGE - 1, // the last millisecond of the one before
        NOW + RANGE,         // just beyond the wheel's range
        NOW + RANGE - 1,     // just inside it
    ];
    for &d in &deadlines {
        let mut wheel = Wheel::new(NOW);
        let key = wheel.insert(d, ());
        assert!(wheel.next_expiration().expect("pending") <= d);
        assert!(wheel.poll(d - 1).is_none(), "{d} fired early");
        assert_eq!(wheel.elapsed(), d - 1);
        assert_eq!(wheel.next_expiration(), Some(d), "exact once within 64 ms");
        let fired = wheel.poll(d).expect("due");
        assert_eq!((fired.key, fired.deadline), (key, d));

        // And straight from the start with one jump past it.
        let mut wheel = Wheel::new(NOW);
        wheel.insert(d, ());
        let fired = drain_all(&mut wheel, d + 10 * YEAR);
        assert_eq!(fired.len(), 1);
        assert_eq!(fired[0].deadline, d);
    }
}

#[test]
fn ten_year_deadlines_fire_on_their_millisecond_when_the_owner_sleeps_until_next_expiration() {
    let mut wheel = Wheel::new(NOW);
    let mut rng = 99;
    for _ in 0..1_000 {
        let d = NOW + 10 * YEAR - xorshift(&mut rng) % (2 * YEAR);
        wheel.insert(d, d);
    }
    wheel.insert(NOW + 10 * YEAR, NOW + 10 * YEAR);
    let (fired, wakeups) = run_owner(&mut wheel, usize::MAX);
    assert_eq!(fired.len(), 1_001);
    for &(at, deadline, value) in &fired {
        assert_eq!(at, deadline, "fired at {at}, due {deadline}");
        assert_eq!(value, deadline);
    }
    assert!(
        fired.windows(2).all(|w| w[0].1 <= w[1].1),
        "in deadline order"
    );
    // No ticking: a handful of wake-ups per timer (cascades), not one per millisecond.
    assert!(wakeups <= 8 * 1_001, "{wakeups} wake-ups");
}

#[test]
fn owner_loop_fires_every_timer_on_its_millisecond() {
    // Deadlines at every scale, some timers removed and some moved while they wait.
    let mut wheel = Wheel::new(NOW);
    let mut rng = 12345;
    let mut keys = Vec::new();
    for i in 0..20_000u64 {
        let scale = [100, 10_000, 3_600_000, 40 * DAY, 4 * YEAR][(i % 5) as usize];
        let d = NOW + xorshift(&mut rng) % scale;
        keys.push(wheel.insert(d, d));
    }
    for (i, key) in keys.iter().enumerate() {
        match i % 7 {
            0 => assert!(wheel.remove(*key).is_some()),
            1 => {
                let d = NOW + xorshift(&mut rng) % (2 * YEAR);
                *wheel.get_mut(*key).expect("live") = d;
                assert!(wheel.reschedule(*key, d));
            }
            _ => {}
        }
    }
    let remaining = wheel.len();
    let (fired, wakeups) = run_owner(&mut wheel, 64);
    assert_eq!(fired.len(), remaining);
    for &(at, deadline, value) in &fired {
        assert_eq!((at, value), (deadline, deadline));
    }
    assert!(
        fired.windows(2).all(|w| w[0].1 <= w[1].1),
        "in deadline order"
    );
    assert!(wakeups <= 8 * remaining, "{wakeups} wake-ups");
}

#[test]
fn time_going_backwards_is_treated_as_the_wheel_time() {
    let mut wheel = Wheel::new(NOW);
    wheel.insert(NOW + 5, 'a');
    assert!(wheel.poll(NOW - 1_000).is_none());
    assert!(wheel.poll(0).is_none());
    assert_eq!(wheel.elapsed(), NOW);
    let mut out = Vec::new();
    assert_eq!(wheel.drain_due(3, 10, &mut out), 0);
    assert_eq!(wheel.elapsed(), NOW);
    assert_eq!(wheel.poll(NOW + 5).map(|e| e.value), Some('a'));
    assert!(
        wheel.poll(NOW).is_none(),
        "after advancing, an older now is ignored"
    );
    assert_eq!(wheel.elapsed(), NOW + 5);
}

#[test]
fn past_deadlines_fire_on_the_next_poll_in_deadline_order() {
    let mut wheel = Wheel::new(NOW);
    wheel.insert(NOW + 1, 0);
    wheel.insert(NOW, 1);
    for d in [30, 10, 20] {
        wheel.insert(NOW - d, d);
    }
    wheel.insert(0, 1_000);
    assert_eq!(wheel.next_expiration(), Some(0));
    let values: Vec<u64> = drain_all(&mut wheel, NOW).iter().map(|e| e.value).collect();
    assert_eq!(values, [1_000, 30, 20, 10, 1]);
    // A deadline in the past after the wheel moved on.
    wheel.insert(NOW - 1, 2);
    assert_eq!(wheel.poll(NOW).map(|e| e.value), Some(2));
    assert_eq!(wheel.poll(NOW + 1).map(|e| e.value), Some(0));
}

#[test]
fn a_limit_leaves_the_rest_due_for_the_next_call() {
    let mut wheel = Wheel::new(NOW);
    for i in 0..1_000u64 {
        wheel.insert(NOW + 10 + i % 3, i);
    }
    wheel.insert(NOW + 11, 5_000);
    let mut out = Vec::new();
    let mut calls = 0;
    loop {
        let n = wheel.drain_due(NOW + 100, 64, &mut out);
        calls += 1;
        assert!(n <= 64);
        if n < 64 {
            break;
        }
        // Stopped by the limit: the rest is still due, at or before the wheel's time.
        assert!(wheel.next_expiration().expect("rest") <= wheel.elapsed());
    }
    assert_eq!(out.len(), 1_001);
    assert_eq!(calls, 16);
    assert!(out.windows(2).all(|w| w[0].deadline <= w[1].deadline));
    assert_eq!(wheel.elapsed(), NOW + 100);
    assert_eq!(
        wheel.drain_due(NOW + 100, 0, &mut out),
        0,
        "limit 0 does nothing"
    );
}

#[test]
fn next_expiration_is_exact_on_level_zero_and_a_lower_bound_above() {
    let mut wheel = Wheel::new(NOW);
    assert_eq!(wheel.next_expiration(), None);
    let far = NOW + 3_600_000;
    wheel.insert(far, ());
    let t = wheel.next_expiration().expect("pending");
    assert!(NOW < t && t <= far, "{t}");
    wheel.insert(NOW + 3, ());
    assert_eq!(wheel.next_expiration(), Some(NOW + 3));
    assert!(wheel.poll(NOW + 2).is_none());
    assert_eq!(wheel.next_expiration(), Some(NOW + 3));
    assert!(wheel.poll(NOW + 3).is_some());
    // Sleeping until a lower bound and draining moves the bound closer, never past `far`.
    let mut previous = wheel.elapsed();
    while let Some(t) = wheel.next_expiration() {
        assert!(t > previous && t <= far);
        previous = t;
        if wheel.poll(t).is_some() {
            assert_eq!(t, far);
        }
    }
}

#[test]
fn extreme_times_do_not_overflow() {
    let mut wheel = Wheel::new(NOW);
    wheel.insert(u64::MAX, 'z');
    wheel.insert(u64::MAX - 1, 'y');
    wheel.insert(u64::MAX - RANGE, 'x');
    assert!(wheel.poll(u64::MAX - RANGE - 1).is_none());
    let values: Vec<char> = drain_all(&mut wheel, u64::MAX)
        .iter()
        .map(|e| e.value)
        .collect();
    assert_eq!(values, ['x', 'y', 'z']);
    assert_eq!(wheel.elapsed(), u64::MAX);
    wheel.insert(u64::MAX, 'm');
    wheel.insert(0, 'a');
    let values: Vec<char> = drain_all(&mut wheel, u64::MAX)
        .iter()
        .map(|e| e.value)
        .collect();
    assert_eq!(values, ['a', 'm']);

    let mut wheel = Wheel::new(0);
    wheel.insert(0, 'a');
    wheel.insert(u64::MAX, 'b');
    assert_eq!(wheel.poll(0).map(|e| e.value), Some('a'));
    assert_eq!(wheel.poll(u64::MAX).map(|e| e.value), Some('b'));
}

#[test]
fn with_capacity_grows_past_its_capacity() {
    let mut wheel = Wheel::with_capacity(NOW, 4);
    for i in 0..100 {
        wheel.insert(NOW + i, i);
    }
    assert_eq!(wheel.len(), 100);
    assert_eq!(drain_all(&mut wheel, NOW + 100).len(), 100);
    assert!(wheel.is_empty());
}

#[test]
fn debug_output_does_not_need_a_debug_value() {
    #[derive(Clone, Copy)]
    struct Opaque;
    let mut wheel = Wheel::new(NOW);
    wheel.insert(NOW + 1, Opaque);
    let text = format!("{wheel:?}");
    assert!(text.contains("len: 1"), "{text}");
}

#[test]
fn a_limit_stop_where_a_far_timer_meets_a_slot_start_leaves_nothing_behind() {
    // A far (overflow) timer due exactly when a higher-level slot starts, handed out alone by
    // `poll`; then a timer lands on a lower level inside that slot. The slot's timer must
    // still come first and on time, and `next_expiration` must never say "now" when nothing
    // is due (the shrunk model-test case of tests/wheel_model.proptest-regressions).
    for level in 1..6u32 {
        let width = 1u64 << (6 * level);
        let start = ((NOW / width) | 1) * width; // starts a slot of `level`, not of `level + 1`
        let mut wheel = Wheel::new(start - 2 * RANGE);
        wheel.insert(start, "far");
        assert!(wheel.poll(start - 1).is_none());
        wheel.insert(start + 1, "slot"); // on `level`, in the slot starting at `start`
        assert_eq!(
            wheel.poll(start).map(|e| e.value),
            Some("far"),
            "level {level}"
        );
        assert_eq!(wheel.elapsed(), start);
        assert_eq!(wheel.next_expiration(), Some(start + 1), "level {level}");
        // On level 0 and level 1 of the new time, both after the slot's timer.
        wheel.insert(start + 40, "level 0");
        wheel.insert(start + 100, "level 1");
        let out = drain_all(&mut wheel, start + 99);
        let got: Vec<(u64, &str)> = out.iter().map(|e| (e.deadline, e.value)).collect();
        assert_eq!(
            got,
            [(start + 1, "slot"), (start + 40, "level 0")],
            "level {level}"
        );
        assert_eq!(wheel.next_expiration(), Some(start + 100), "level {level}");
    }
}

#[test]
fn far_timers_meeting_a_slot_start_come_out_in_order_without_a_limit() {
    // Two far timers, the first due exactly when a higher-level slot starts and the second
    // landing on level 0 when the overflow list is rescanned: the slot's timer, between them,
    // must not be overtaken or left behind by one unlimited drain.
    for level in 1..6u32 {
        let width = 1u64 << (6 * level);
        let start = ((NOW / width) | 1) * width;
        let mut wheel = Wheel::new(start - 2 * RANGE);
        wheel.insert(start, "far 0");
        wheel.insert(start + 5, "far 5");
        assert!(wheel.poll(start - 1).is_none());
        wheel.insert(start + 1, "slot");
        let got: Vec<&str> = drain_all(&mut wheel, start + 3)
            .iter()
            .map(|e| e.value)
            .collect();
        assert_eq!(got, ["far 0", "slot"], "level {level}");
        assert_eq!(wheel.next_expiration(), Some(start + 5), "level {level}");
        let got: Vec<&str> = drain_all(&mut wheel, start + 5)
            .iter()
            .map(|e| e.value)
            .collect();
        assert_eq!(got, ["far 5"], "level {level}");
    }
}
