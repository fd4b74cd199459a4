//! Long-poll waiters: consumers parked until their topic has ready tasks.
//!
//! A waiting pop costs one [`Notify`] registration, no thread and no storage connection. A
//! backend that makes tasks ready calls [`Waiters::notify`] with the topic and how many; each
//! notification wakes one waiter, which then tries to pop. A woken waiter that finds nothing
//! (another consumer was faster) simply waits again, so a notification can be wasted but a
//! ready task is never stranded: tokio hands a `notify_one` on to the next waiter when the
//! woken one is dropped (timed out, client gone) before it could act.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::RwLock;
use tokio::sync::Notify;

/// The registry of parked consumers, by topic.
#[derive(Debug, Default)]
pub struct Waiters {
    topics: RwLock<HashMap<Box<str>, Arc<TopicWaiters>>>,
}

/// The parked consumers of one topic.
#[derive(Debug, Default)]
pub struct TopicWaiters {
    notify: Notify,
    parked: AtomicUsize,
}

impl TopicWaiters {
    /// How many consumers are parked on this topic now.
    pub fn parked(&self) -> usize {
        self.parked.load(Ordering::Relaxed)
    }

    /// Registers interest *before* the caller checks for ready tasks, so that a task made ready
    /// between the check and the wait still wakes it. Await the returned guard's `wait`.
    pub fn park(self: &Arc<Self>) -> Parked {
        self.parked.fetch_add(1, Ordering::Relaxed);
        Parked {
            topic: Arc::clone(self),
        }
    }
}

/// One parked consumer; leaving it (drop) unregisters it.
#[derive(Debug)]
pub struct Parked {
    topic: Arc<TopicWaiters>,
}

impl Parked {
    /// The underlying notification; pin it and call `enable` before checking for work.
    pub fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.topic.notify.notified()
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        self.topic.parked.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Waiters {
    /// An empty registry.
    pub fn new() -> Self {
        Waiters::default()
    }

    /// The waiters of `topic`, created on first use.
    pub fn topic(&self, topic: &str) -> Arc<TopicWaiters> {
        if let Some(t) = self.topics.read().get(topic) {
            return Arc::clone(t);
        }
        let mut topics = self.topics.write();
        Arc::clone(topics.entry(Box::from(topic)).or_default())
    }

    /// Tells up to `count` parked consumers of `topic` that tasks are ready.
    pub fn notify(&self, topic: &str, count: usize) {
        let Some(t) = self.topics.read().get(topic).cloned() else {
            return; // nobody ever waited on this topic
        };
        // One wake per ready task, but no more than are parked (plus one stored permit, which
        // covers a consumer that is between its check and its wait).
        let wakes = count.min(t.parked() + 1);
        for _ in 0..wakes {
            t.notify.notify_one();
        }
    }

    /// How many consumers are parked over all topics.
    pub fn parked(&self) -> usize {
        self.topics.read().values().map(|t| t.parked()).sum()
    }
}
