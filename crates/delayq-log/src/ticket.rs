//! Tickets: how an appender learns that its records are written (or durable, per policy).
//!
//! A ticket is a sequence number range and a reference to the log; it allocates nothing.
//! Completion is one shared number, the last acknowledged sequence number, so a ticket is
//! done when that number reaches its last record, and failed when the log failed first.
//! Waiting asynchronously registers a waker in a map ordered by sequence number; after each
//! group the writer removes and wakes exactly the wakers that the group completes. Waiting
//! blocking polls the same future with a waker that unparks the thread, so there is one
//! implementation and it works with any async runtime.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

use crate::error::LogError;
use crate::writer::{GroupCommit, lock};

/// Wakers of pending waits, keyed by (sequence number, registration id).
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    next_id: u64,
    map: BTreeMap<(u64, u64), Waker>,
}

impl Waiters {
    /// Removes and returns the wakers of every wait for a sequence number up to `upto`.
    pub(crate) fn take_upto(&mut self, upto: u64) -> Vec<Waker> {
        if self.map.first_key_value().is_none_or(|(k, _)| k.0 > upto) {
            return Vec::new();
        }
        let rest = match upto.checked_add(1) {
            Some(next) => self.map.split_off(&(next, 0)),
            None => BTreeMap::new(),
        };
        mem_take_values(std::mem::replace(&mut self.map, rest))
    }
}

fn mem_take_values(map: BTreeMap<(u64, u64), Waker>) -> Vec<Waker> {
    map.into_values().collect()
}

/// A promise that records appended to a [`Log`](crate::Log) will be acknowledged.
///
/// When it completes depends on the [`FsyncPolicy`](crate::FsyncPolicy): under `Always` after
/// an fdatasync that covers the records, otherwise after the write(2) that covers them.
/// Dropping a ticket does not cancel anything: the records are written all the same.
/// Records are acknowledged in sequence order, so waiting on a later ticket also waits for
/// every earlier one; callers may drop all but the last ticket of a burst.
pub struct Ticket {
    shared: Arc<GroupCommit>,
    first: u64,
    last: u64,
    /// Whether dropping it must make sure its records get written (see [`Drop`]).
    armed: bool,
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("first", &self.first)
            .field("last", &self.last)
            .finish()
    }
}

impl Ticket {
    pub(crate) fn new(shared: Arc<GroupCommit>, first: u64, last: u64) -> Self {
        Self {
            shared,
            first,
            last,
            armed: true,
        }
    }

    /// Returns the sequence number of the first record covered, or `last_seq() + 1` for an
    /// empty batch.
    pub fn first_seq(&self) -> u64 {
        self.first
    }

    /// Returns the sequence number of the last record covered. For an empty batch it is the
    /// last sequence number assigned before it, so waiting on it waits for everything
    /// appended before.
    pub fn last_seq(&self) -> u64 {
        self.last
    }

    /// Returns whether the ticket has completed (successfully or not) without waiting.
    pub fn is_done(&self) -> bool {
        check(&self.shared, self.last).is_some()
    }

    /// Returns a future that resolves to the last sequence number covered once the records
    /// are acknowledged, or to the log's failure. It works under any async runtime.
    pub fn wait(mut self) -> Wait {
        self.armed = false;
        Wait {
            shared: self.shared.clone(),
            seq: self.last,
            key: None,
            done: false,
        }
    }

    /// Blocks the calling thread until the records are acknowledged; returns the last
    /// sequence number covered, or the log's failure. Do not call it on an async runtime's
    /// worker thread; use [`Ticket::wait`] there.
    pub fn wait_blocking(self) -> Result<u64, LogError> {
        let mut wait = self.wait();
        let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
        let mut cx = Context::from_waker(&waker);
        loop {
            match Pin::new(&mut wait).poll(&mut cx) {
                Poll::Ready(result) => return result,
                Poll::Pending => thread::park(),
            }
        }
    }
}

/// The outcome for `seq`, if there is one yet.
fn check(shared: &GroupCommit, seq: u64) -> Option<Result<u64, LogError>> {
    if shared.acked.load(Ordering::Acquire) >= seq {
        return Some(Ok(seq));
    }
    if let Some(e) = shared.failure.get() {
        return Some(Err(e.clone()));
    }
    if shared.failed_by_stall(seq) {
        return shared.stall_error().map(Err);
    }
    None
}

/// The future returned by [`Ticket::wait`].
#[must_use = "futures do nothing unless polled"]
pub struct Wait {
    shared: Arc<GroupCommit>,
    seq: u64,
    key: Option<u64>,
    /// Whether it resolved.
    done: bool,
}

impl fmt::Debug for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wait").field("seq", &self.seq).finish()
    }
}

impl Wait {
    fn deregister(&mut self) {
        if let Some(id) = self.key.take() {
            lock(&self.shared.waiters).map.remove(&(self.seq, id));
        }
    }
}

impl Future for Wait {
    type Output = Result<u64, LogError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(done) = check(&self.shared, self.seq) {
            self.deregister();
            self.done = true;
            return Poll::Ready(done);
        }
        // Write the waiting group here if nobody else is writing (a leader, see the writer's
        // module doc); then this wait is usually over without a thread hand-off.
        self.shared.lead(self.seq);
        let this = &mut *self;
        let mut waiters = lock(&this.shared.waiters);
        // Checked again under the lock: the writer publishes before it takes this lock to
        // wake, so either we see its update now or it sees our waker.
        if let Some(done) = check(&this.shared, this.seq) {
            if let Some(id) = this.key.take() {
                waiters.map.remove(&(this.seq, id));
            }
            this.done = true;
            return Poll::Ready(done);
        }
        let id = match this.key {
            Some(id) => id,
            None => {
                let id = waiters.next_id;
                waiters.next_id += 1;
                this.key = Some(id);
                id
            }
        };
        match waiters.map.get_mut(&(this.seq, id)) {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            Some(waker) => waker.clone_from(cx.waker()),
            None => {
                waiters.map.insert((this.seq, id), cx.waker().clone());
            }
        }
        Poll::Pending
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        self.deregister();
        if !self.done {
            // Nobody may lead for these records now: make sure the writer thread takes them.
            self.shared.nudge();
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.armed && check(&self.shared, self.last).is_none() {
            // Dropped without waiting: nobody leads for these records, the thread writes them.
            self.shared.nudge();
        }
    }
}

/// Wakes a thread blocked in [`Ticket::wait_blocking`].
struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}
