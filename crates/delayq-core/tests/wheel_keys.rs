//! Timer keys: a key stops working once its timer fired or was removed, also after the wheel
//! reused the timer's storage for a new timer (generation check).

use delayq_core::wheel::{TimerKey, Wheel};

const NOW: u64 = 1_812_345_678_901;

fn assert_stale<T: Copy + std::fmt::Debug>(wheel: &mut Wheel<T>, key: TimerKey) {
    assert!(!wheel.contains(key), "{key:?} still contained");
    assert!(wheel.get(key).is_none());
    assert!(wheel.get_mut(key).is_none());
    assert_eq!(wheel.deadline(key), None);
    assert!(!wheel.reschedule(key, NOW + 5), "reschedule of a stale key");
    assert!(wheel.remove(key).is_none(), "remove of a stale key");
}

#[test]
fn remove_after_fire_is_none() {
    let mut wheel = Wheel::new(NOW);
    let key = wheel.insert(NOW + 10, "a");
    let fired = wheel.poll(NOW + 10).expect("due");
    assert_eq!(fired.key, key, "the expired entry carries the inserted key");
    assert_stale(&mut wheel, key);
    assert!(wheel.is_empty());
}

#[test]
fn remove_twice_is_none_the_second_time() {
    let mut wheel = Wheel::new(NOW);
    let key = wheel.insert(NOW + 10, "a");
    assert_eq!(wheel.remove(key), Some("a"));
    assert_stale(&mut wheel, key);
    assert_eq!(wheel.len(), 0);
    assert_eq!(wheel.poll(NOW + 100), None, "a removed timer never fires");
}

#[test]
fn reused_storage_does_not_revive_an_old_key() {
    let mut wheel = Wheel::new(NOW);
    let old = wheel.insert(NOW + 10, "old");
    wheel.remove(old);
    // The freed entry is reused for the next insert; the old key must not reach it.
    let new = wheel.insert(NOW + 20, "new");
    assert_ne!(old, new);
    assert_stale(&mut wheel, old);
    assert_eq!(wheel.get(new), Some(&"new"));
    assert_eq!(
        wheel.deadline(new),
        Some(NOW + 20),
        "untouched by the stale calls"
    );
    assert_eq!(wheel.len(), 1);
    let fired = wheel.poll(NOW + 20).expect("due");
    assert_eq!((fired.key, fired.value), (new, "new"));
}

#[test]
fn reuse_after_fire_does_not_revive_an_old_key() {
    let mut wheel = Wheel::new(NOW);
    let mut old_keys = Vec::new();
    // Cycle the same few entries many times; every old key stays stale.
    for round in 0..100u64 {
        let keys: Vec<TimerKey> = (0..3).map(|i| wheel.insert(NOW + round, i)).collect();
        let mut out = Vec::new();
        wheel.drain_due(NOW + round, usize::MAX, &mut out);
        assert_eq!(out.len(), 3);
        old_keys.extend(keys);
    }
    let live = wheel.insert(NOW + 1_000, 99);
    for key in old_keys {
        assert_stale(&mut wheel, key);
    }
    assert_eq!(wheel.get(live), Some(&99));
}

#[test]
fn get_mut_changes_the_value_in_place() {
    let mut wheel = Wheel::new(NOW);
    let key = wheel.insert(NOW + 1, 1u32);
    *wheel.get_mut(key).expect("live") += 41;
    assert_eq!(wheel.get(key), Some(&42));
    assert_eq!(wheel.poll(NOW + 1).map(|e| e.value), Some(42));
}

#[test]
fn reschedule_keeps_the_key_and_the_value() {
    let mut wheel = Wheel::new(NOW);
    let key = wheel.insert(NOW + 10_000, "a");
    assert!(wheel.reschedule(key, NOW + 5));
    assert_eq!(wheel.deadline(key), Some(NOW + 5));
    assert_eq!(wheel.poll(NOW + 4), None, "never early after a reschedule");
    let fired = wheel.poll(NOW + 5).expect("due at the new deadline");
    assert_eq!(
        (fired.key, fired.deadline, fired.value),
        (key, NOW + 5, "a")
    );
    assert_eq!(
        wheel.poll(NOW + 20_000),
        None,
        "not at the old deadline either"
    );
}
