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

/// The registry of parked consumers, by topic. A topic has an entry only while someone is
/// parked on it, so arbitrary topic names in pops cannot grow it without bound.
#[derive(Debug, Default)]
pub struct Waiters {
    topics: RwLock<HashMap<Box<str>, Arc<TopicWaiters>>>,
    /// Parked consumers: one parked on several topics ([`Waiters::park_all`]) counts once.
    consumers: AtomicUsize,
}

/// The parked consumers of one topic.
#[derive(Debug, Default)]
struct TopicWaiters {
    notify: Notify,
    /// Changed only under the registry's read lock (park) or write lock (the last unpark),
    /// so an entry is never removed while a consumer is parking on it.
    parked: AtomicUsize,
}

impl TopicWaiters {
    /// One wake per ready task, but no more than are parked (plus one stored permit, which
    /// covers a consumer that is between its check and its wait).
    fn wake(&self, count: usize) {
        let wakes = count.min(self.parked.load(Ordering::Acquire) + 1);
        for _ in 0..wakes {
            self.notify.notify_one();
        }
    }
}

/// One parked consumer; dropping it unregisters it.
#[derive(Debug)]
pub struct Parked {
    waiters: Arc<Waiters>,
    name: Box<str>,
    topic: Arc<TopicWaiters>,
    /// Whether this registration is the one that counts its consumer.
    counted: bool,
}

impl Parked {
    /// The underlying notification; pin it and call `enable` before checking for work, so a
    /// task made ready between the check and the wait still wakes this consumer.
    pub fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.topic.notify.notified()
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        if self.counted {
            self.waiters.consumers.fetch_sub(1, Ordering::AcqRel);
        }
        if self.topic.parked.fetch_sub(1, Ordering::AcqRel) == 1 {
            let mut topics = self.waiters.topics.write();
            // Re-check under the write lock: another consumer may have parked meanwhile.
            if self.topic.parked.load(Ordering::Acquire) == 0
                && topics
                    .get(&*self.name)
                    .is_some_and(|t| Arc::ptr_eq(t, &self.topic))
            {
                topics.remove(&*self.name);
            }
        }
    }
}

impl Waiters {
    /// An empty registry.
    pub fn new() -> Self {
        Waiters::default()
    }

    /// Parks a consumer on `topic` until the returned guard is dropped.
    pub fn park(self: &Arc<Self>, topic: &str) -> Parked {
        self.register(topic, true)
    }

    /// Parks one consumer on every topic of `topics` (a pop over several topics) until the
    /// returned guards are dropped; it counts as one parked consumer.
    pub fn park_all(self: &Arc<Self>, topics: &[String]) -> Vec<Parked> {
        topics
            .iter()
            .enumerate()
            .map(|(i, t)| self.register(t, i == 0))
            .collect()
    }

    fn register(self: &Arc<Self>, topic: &str, counted: bool) -> Parked {
        if counted {
            self.consumers.fetch_add(1, Ordering::AcqRel);
        }
        let found = {
            let topics = self.topics.read();
            topics.get(topic).map(|t| {
                t.parked.fetch_add(1, Ordering::AcqRel);
                Arc::clone(t)
            })
        };
        let topic_waiters = found.unwrap_or_else(|| {
            let mut topics = self.topics.write();
            let t = Arc::clone(topics.entry(Box::from(topic)).or_default());
            t.parked.fetch_add(1, Ordering::AcqRel);
            t
        });
        Parked {
            waiters: Arc::clone(self),
            name: Box::from(topic),
            topic: topic_waiters,
            counted,
        }
    }

    /// Tells up to `count` parked consumers of `topic` that tasks are ready.
    pub fn notify(&self, topic: &str, count: usize) {
        let Some(t) = self.topics.read().get(topic).cloned() else {
            return; // nobody is parked on this topic
        };
        t.wake(count);
    }

    /// Wakes every parked consumer of every topic, to look again: for when notices may have
    /// been lost (a backend's event connection came back after a gap), so nobody sleeps until
    /// its timeout past a task that became ready meanwhile. A consumer that finds nothing
    /// parks again.
    pub fn notify_all(&self) {
        let topics: Vec<Arc<TopicWaiters>> = self.topics.read().values().cloned().collect();
        for t in topics {
            t.wake(usize::MAX);
        }
    }

    /// How many consumers are parked over all topics (one parked on several counts once).
    pub fn parked(&self) -> usize {
        self.consumers.load(Ordering::Acquire)
    }

    /// How many topics have parked consumers.
    pub fn topics(&self) -> usize {
        self.topics.read().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_exist_only_while_someone_is_parked() {
        let w = Arc::new(Waiters::new());
        let a1 = w.park("a");
        let a2 = w.park("a");
        let b = w.park("b");
        assert_eq!((w.topics(), w.parked()), (2, 3));
        drop(a1);
        assert_eq!((w.topics(), w.parked()), (2, 2));
        drop(a2);
        drop(b);
        assert_eq!((w.topics(), w.parked()), (0, 0));
        for i in 0..1_000 {
            drop(w.park(&format!("t{i}")));
        }
        assert_eq!(
            w.topics(),
            0,
            "no entry left behind by arbitrary topic names"
        );
        let several = w.park_all(&["x".to_owned(), "y".to_owned(), "z".to_owned()]);
        assert_eq!(
            (w.topics(), w.parked()),
            (3, 1),
            "one consumer on three topics"
        );
        drop(several);
        assert_eq!((w.topics(), w.parked()), (0, 0));
    }

    #[tokio::test]
    async fn notify_wakes_a_parked_consumer() {
        let w = Arc::new(Waiters::new());
        let parked = w.park("a");
        let notified = parked.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        w.notify("a", 1);
        tokio::time::timeout(std::time::Duration::from_secs(5), notified)
            .await
            .expect("woken");
        w.notify("nobody", 3); // no entry, no effect
        assert_eq!(w.topics(), 1);
    }

    #[tokio::test]
    async fn notify_all_wakes_every_parked_consumer_of_every_topic() {
        let w = Arc::new(Waiters::new());
        let guards = [w.park("a"), w.park("a"), w.park("b")];
        let mut waits: Vec<_> = guards.iter().map(|g| Box::pin(g.notified())).collect();
        for n in &mut waits {
            n.as_mut().enable();
        }
        w.notify_all();
        for n in waits {
            tokio::time::timeout(std::time::Duration::from_secs(5), n)
                .await
                .expect("every parked consumer woken");
        }
    }
}
