//! A limited topic's flow state in a shard (docs/design.md §11).
//!
//! The topic-wide limits need little: `max_active` compares with the topic's ACTIVE count, and
//! the rate keeps one number, the GCRA's theoretical arrival time
//! ([`delayq_core::flow::take`]).
//!
//! `max_active_per_key` must not let a busy key hold back the others, and a pop must not walk
//! past the tasks of full keys to find one it may take. So the tasks of each key wait in the
//! key's own queue ([`KeyQueue::ready`], in pop order), and the topic's pop order holds only
//! each key's head, and only while the key has room: the topic's first READY entry is then
//! always one a pop may take, and every change is O(log n). The invariant, kept by the four
//! transitions below and rebuilt whole when the limits change:
//!
//! > a key's first READY task is in the topic's pop order iff the key's ACTIVE count is
//! > below the limit; no other task of a key is.

use std::collections::BTreeSet;

use delayq_core::FlowLimits;
use delayq_core::flow::Rate;
use hashbrown::HashMap;

/// An entry of a READY ordering: ([`Record::ready_key`](super::record::Record::ready_key), record).
pub(crate) type ReadyEntry = (u64, u64, u32);

/// One key's tasks.
#[derive(Debug, Default)]
struct KeyQueue {
    /// Its READY tasks in pop order.
    ready: BTreeSet<ReadyEntry>,
    /// Its ACTIVE tasks.
    active: u32,
}

/// The flow state of one limited topic.
#[derive(Debug)]
pub(crate) struct Flow {
    pub limits: FlowLimits,
    pub rate: Option<Rate>,
    /// The GCRA's theoretical arrival time (0: a full burst).
    pub tat: f64,
    /// With `max_active_per_key`: the keys with READY or ACTIVE tasks.
    keys: HashMap<Box<str>, KeyQueue>,
}

impl Flow {
    /// The state of a topic that just got `limits`, its rate bucket carried over from `tat`.
    pub fn new(limits: FlowLimits, tat: f64) -> Self {
        Flow {
            limits,
            rate: limits.rate(),
            tat,
            keys: HashMap::new(),
        }
    }

    /// The per-key limit, when the topic has one.
    pub fn per_key(&self) -> Option<u32> {
        self.limits.max_active_per_key
    }

    /// A keyed task became READY: it waits in its key's queue, and goes into the topic's pop
    /// order (`ready`) when it is the key's new head and the key has room.
    pub fn enter_ready(&mut self, key: &str, entry: ReadyEntry, ready: &mut BTreeSet<ReadyEntry>) {
        let Some(limit) = self.per_key() else {
            ready.insert(entry);
            return;
        };
        let q = self.keys.entry_ref(key).or_default();
        let old_head = q.ready.first().copied();
        q.ready.insert(entry);
        if q.active < limit && q.ready.first() == Some(&entry) {
            if let Some(old) = old_head {
                ready.remove(&old);
            }
            ready.insert(entry);
        }
    }

    /// A keyed task left READY: when it was in the pop order, the key's next head takes its
    /// place.
    pub fn leave_ready(&mut self, key: &str, entry: ReadyEntry, ready: &mut BTreeSet<ReadyEntry>) {
        let Some(limit) = self.per_key() else {
            ready.remove(&entry);
            return;
        };
        let was_head = ready.remove(&entry);
        let Some(q) = self.keys.get_mut(key) else {
            return;
        };
        q.ready.remove(&entry);
        if was_head
            && q.active < limit
            && let Some(&next) = q.ready.first()
        {
            ready.insert(next);
        }
        self.forget_if_idle(key);
    }

    /// A keyed task became ACTIVE: a key that is now full leaves the pop order.
    pub fn enter_active(&mut self, key: &str, ready: &mut BTreeSet<ReadyEntry>) {
        let Some(limit) = self.per_key() else { return };
        let q = self.keys.entry_ref(key).or_default();
        q.active += 1;
        if q.active == limit
            && let Some(head) = q.ready.first()
        {
            ready.remove(head);
        }
    }

    /// A keyed task left ACTIVE: a key that has room again comes back into the pop order.
    /// Returns whether it did (a task of it went back into the pop order).
    pub fn leave_active(&mut self, key: &str, ready: &mut BTreeSet<ReadyEntry>) -> bool {
        let Some(limit) = self.per_key() else {
            return false;
        };
        let Some(q) = self.keys.get_mut(key) else {
            return false;
        };
        q.active = q.active.saturating_sub(1);
        let back = q.active + 1 == limit
            && match q.ready.first() {
                Some(&head) => ready.insert(head),
                None => false,
            };
        self.forget_if_idle(key);
        back
    }

    fn forget_if_idle(&mut self, key: &str) {
        if self
            .keys
            .get(key)
            .is_some_and(|q| q.active == 0 && q.ready.is_empty())
        {
            self.keys.remove(key);
        }
    }

    /// How many ACTIVE tasks `key` has.
    #[cfg(test)]
    pub fn active_of(&self, key: &str) -> u32 {
        self.keys.get(key).map_or(0, |q| q.active)
    }

    /// READY tasks the per-key limit keeps from going now: of each key, those past its room
    /// (the limit less its ACTIVE tasks), so all of a full key's.
    pub fn held_by_keys(&self) -> u64 {
        let Some(limit) = self.per_key() else {
            return 0;
        };
        self.keys
            .values()
            .map(|q| {
                let room = limit.saturating_sub(q.active) as usize;
                q.ready.len().saturating_sub(room) as u64
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(n: u64) -> ReadyEntry {
        (0, n, n as u32)
    }

    /// The invariant of the module doc, checked against the state.
    fn check(flow: &Flow, ready: &BTreeSet<ReadyEntry>, unkeyed: &BTreeSet<ReadyEntry>) {
        let limit = flow.per_key().expect("a per-key limit");
        let mut expected: BTreeSet<ReadyEntry> = unkeyed.clone();
        for q in flow.keys.values() {
            if q.active < limit
                && let Some(&h) = q.ready.first()
            {
                expected.insert(h);
            }
        }
        assert_eq!(ready, &expected);
    }

    #[test]
    fn a_full_key_leaves_the_pop_order_and_comes_back() {
        let mut flow = Flow::new(FlowLimits::default().with_max_active_per_key(1), 0.0);
        let mut ready = BTreeSet::new();
        let unkeyed = BTreeSet::new();
        for n in [3, 1, 2] {
            flow.enter_ready("a", e(n), &mut ready);
            check(&flow, &ready, &unkeyed);
        }
        flow.enter_ready("b", e(5), &mut ready);
        assert_eq!(ready.iter().copied().collect::<Vec<_>>(), [e(1), e(5)]);
        // Pop a's head: a is full, b goes ahead although a has older tasks.
        flow.leave_ready("a", e(1), &mut ready);
        flow.enter_active("a", &mut ready);
        check(&flow, &ready, &unkeyed);
        assert_eq!(ready.iter().copied().collect::<Vec<_>>(), [e(5)]);
        assert_eq!((flow.active_of("a"), flow.held_by_keys()), (1, 2));
        // A new task of a full key waits.
        flow.enter_ready("a", e(0), &mut ready);
        assert_eq!(ready.iter().copied().collect::<Vec<_>>(), [e(5)]);
        // a's task finishes: a's best (0) is back.
        assert!(flow.leave_active("a", &mut ready), "a has room again");
        check(&flow, &ready, &unkeyed);
        assert_eq!(ready.iter().copied().collect::<Vec<_>>(), [e(0), e(5)]);
        // Cancel a task behind the head, then the head.
        flow.leave_ready("a", e(3), &mut ready);
        flow.leave_ready("a", e(0), &mut ready);
        check(&flow, &ready, &unkeyed);
        assert_eq!(ready.iter().copied().collect::<Vec<_>>(), [e(2), e(5)]);
        for (k, n) in [("a", 2), ("b", 5)] {
            flow.leave_ready(k, e(n), &mut ready);
        }
        assert!(
            ready.is_empty() && flow.keys.is_empty(),
            "idle keys are forgotten"
        );
    }

    #[test]
    fn random_transitions_keep_the_invariant() {
        // A small model walk: keys 0..4, limit 2, tasks move READY -> ACTIVE -> gone.
        let mut flow = Flow::new(FlowLimits::default().with_max_active_per_key(2), 0.0);
        let mut ready = BTreeSet::new();
        let unkeyed = BTreeSet::new();
        let mut state: u64 = 7;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut waiting: Vec<(String, ReadyEntry)> = Vec::new();
        let mut active: Vec<String> = Vec::new();
        for n in 0..3_000u64 {
            match next() % 4 {
                0 | 1 => {
                    let key = format!("k{}", next() % 4);
                    flow.enter_ready(&key, e(n), &mut ready);
                    waiting.push((key, e(n)));
                }
                2 => {
                    // Pop the first of the pop order, as the shard does.
                    if let Some(&first) = ready.first() {
                        let i = waiting
                            .iter()
                            .position(|(_, x)| *x == first)
                            .expect("known");
                        let (key, entry) = waiting.remove(i);
                        flow.leave_ready(&key, entry, &mut ready);
                        flow.enter_active(&key, &mut ready);
                        assert!(flow.active_of(&key) <= 2, "never over the key's limit");
                        active.push(key);
                    }
                }
                _ => {
                    if !active.is_empty() {
                        let key = active.remove((next() % active.len() as u64) as usize);
                        flow.leave_active(&key, &mut ready);
                    }
                }
            }
            check(&flow, &ready, &unkeyed);
        }
    }
}
