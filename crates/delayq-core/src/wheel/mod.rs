//! STUB: replaced by the timing-wheel implementation. Signatures are the contract.
#![allow(missing_docs, unused_variables, dead_code)]

/// Handle of one timer in a [`Wheel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerKey {
    index: u32,
    generation: u32,
}

/// A timer that came due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired<T> {
    pub key: TimerKey,
    pub deadline: u64,
    pub value: T,
}

pub struct Wheel<T> {
    _t: std::marker::PhantomData<T>,
}

impl<T> Wheel<T> {
    pub fn new(now_ms: u64) -> Self {
        todo!()
    }
    pub fn with_capacity(now_ms: u64, capacity: usize) -> Self {
        todo!()
    }
    pub fn len(&self) -> usize {
        todo!()
    }
    pub fn is_empty(&self) -> bool {
        todo!()
    }
    pub fn elapsed(&self) -> u64 {
        todo!()
    }
    pub fn insert(&mut self, deadline_ms: u64, value: T) -> TimerKey {
        todo!()
    }
    pub fn remove(&mut self, key: TimerKey) -> Option<T> {
        todo!()
    }
    pub fn reschedule(&mut self, key: TimerKey, deadline_ms: u64) -> bool {
        todo!()
    }
    pub fn deadline(&self, key: TimerKey) -> Option<u64> {
        todo!()
    }
    pub fn get(&self, key: TimerKey) -> Option<&T> {
        todo!()
    }
    pub fn next_expiration(&self) -> Option<u64> {
        todo!()
    }
    pub fn poll(&mut self, now_ms: u64) -> Option<Expired<T>> {
        todo!()
    }
    pub fn drain_due(&mut self, now_ms: u64, limit: usize, out: &mut Vec<Expired<T>>) -> usize {
        todo!()
    }
}
