//! The storage trait every backend implements, and what a backend is given to run.
//!
//! A backend owns the state of all tasks and applies each transition atomically, asking
//! [`delayq_core::lifecycle`] what the transition does. It also owns time-driven work (moving
//! due tasks to READY, redelivering tasks whose ttr passed, dropping expired records), driven
//! by the [`Clock`] in its [`StorageContext`], and tells parked consumers through
//! [`Waiters`] when tasks become ready. Everything above it ([`crate::Queue`], the HTTP
//! server) is the same for every backend; the conformance suite checks that they all behave
//! alike.
//!
//! Backends:
//! - [`memory`]: all state in process memory, nothing durable.
//! - [`embedded`]: the same [`engine`], with every change written to a log per shard on disk
//!   and compacted by snapshots.
//! - Redis lives in its own crate (`delayq-redis`), behind the same trait.
//!
//! A failure's [`Outcome`](crate::Outcome) is part of the contract: a backend reports
//! [`Outcome::Unknown`](crate::Outcome::Unknown) whenever the operation may have happened
//! despite the error, and never claims [`Outcome::NotApplied`](crate::Outcome::NotApplied)
//! unless nothing changed.

pub mod embedded;
pub mod engine;
pub mod memory;

use std::sync::Arc;

use async_trait::async_trait;
use delayq_core::{
    AddOutcome, BuryOptions, Delivery, Limits, Millis, Page, State, TaskDefaults, TaskInfo,
    TaskSpec, TopicStats,
};

use crate::clock::Clock;
use crate::error::Result;
use crate::metrics::Metrics;
use crate::waiters::Waiters;

/// What every backend is given: the clock, the parked consumers, the metrics and the settings.
#[derive(Clone)]
#[non_exhaustive]
pub struct StorageContext {
    /// Where "now" comes from.
    pub clock: Arc<dyn Clock>,
    /// Consumers parked in long-polls, woken when tasks become ready.
    pub waiters: Arc<Waiters>,
    /// Counters and histograms shared with the server's `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Defaults of task options, and the retention of finished records.
    pub defaults: TaskDefaults,
    /// Input limits (a backend uses `max_error_bytes` and `max_pop_count`).
    pub limits: Limits,
    /// Tells readers of the settings store that a namespace changed (see [`SettingsChanges`]).
    pub settings: Arc<SettingsChanges>,
}

/// Change notices of the settings store (`put_meta`/`delete_meta`), per namespace.
///
/// The push dispatcher and the scheduler keep what they read from the settings store and
/// read it again when it changes. A backend calls [`SettingsChanges::notify`] after each
/// change it makes; in Redis mode the change also reaches the other instances over the events
/// channel, so they need not poll Redis to see it (DESIGN §6 allows an idle instance 5 Redis
/// commands a second). Notices can be lost (a dropped subscription), so readers still read
/// again now and then; after a resubscription the backend calls
/// [`SettingsChanges::notify_all`].
#[derive(Debug, Default)]
pub struct SettingsChanges {
    namespaces:
        parking_lot::Mutex<std::collections::HashMap<String, tokio::sync::watch::Sender<u64>>>,
}

impl SettingsChanges {
    /// A receiver that sees a new value each time `namespace` changes.
    pub fn subscribe(&self, namespace: &str) -> tokio::sync::watch::Receiver<u64> {
        self.namespaces
            .lock()
            .entry(namespace.to_owned())
            .or_insert_with(|| tokio::sync::watch::Sender::new(0))
            .subscribe()
    }

    /// Records that `namespace` changed; its subscribers wake.
    pub fn notify(&self, namespace: &str) {
        if let Some(tx) = self.namespaces.lock().get(namespace) {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Records that any namespace may have changed (notices may have been lost).
    pub fn notify_all(&self) {
        for tx in self.namespaces.lock().values() {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

impl StorageContext {
    /// A context with the given clock and default settings.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        StorageContext {
            clock,
            waiters: Arc::new(Waiters::new()),
            metrics: Arc::new(Metrics::default()),
            defaults: TaskDefaults::default(),
            limits: Limits::default(),
            settings: Arc::new(SettingsChanges::default()),
        }
    }

    /// Replaces the defaults.
    pub fn with_defaults(mut self, defaults: TaskDefaults) -> Self {
        self.defaults = defaults;
        self
    }

    /// Replaces the limits.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }
}

impl std::fmt::Debug for StorageContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorageContext")
            .field("defaults", &self.defaults)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

pub use delayq_core::ReleaseOptions;

/// The most bounds [`Storage::due_counts`] takes (so at most 999 ranges).
pub const MAX_DUE_BOUNDS: usize = 1_000;

/// The most DELAYED tasks the engine counts under one hold of a shard's lock in
/// [`Storage::due_counts`]; it then lets other operations in and goes on.
pub const DUE_COUNT_STEP: usize = 65_536;

/// The result of one task of a batch add.
pub type AddResult = Result<AddOutcome>;

/// A storage backend. Every method is one atomic transition (or one atomic read) of the state
/// of the tasks it names; the rules of docs/design.md §2 hold for every backend alike.
#[async_trait]
pub trait Storage: Send + Sync + 'static {
    /// Adds validated tasks, one result per task in order. Each task is added whole or not
    /// at all, and the tasks that were added are durable (per the backend's settings) before
    /// this returns.
    ///
    /// A batch is not one transaction: its tasks are spread over shards (embedded) or
    /// partitions (Redis), each written on its own, so a batch can be partly applied. Each
    /// task's result says what happened to it: `Ok` with its [`AddOutcome`], or its own error
    /// (a duplicate, or the storage failure of its shard or partition, whose
    /// [`Outcome`](crate::Outcome) says whether the task may be there anyway).
    ///
    /// An `Err` of the whole call concerns the whole batch. With
    /// [`Outcome::NotApplied`](crate::Outcome::NotApplied) none was added; with
    /// [`Outcome::Unknown`](crate::Outcome::Unknown) any of them may have been (Redis stopped
    /// answering part way through, replicas did not confirm). A caller that must know adds the
    /// same tasks again with [`OnDuplicate::Keep`](delayq_core::OnDuplicate::Keep): the ones
    /// already there answer [`AddOutcome::Existed`].
    async fn add(&self, tasks: Vec<TaskSpec>) -> Result<Vec<AddResult>>;

    /// Takes up to `max` READY tasks of `topic` in the order of docs/design.md §2 rule 11
    /// (priority, then due, then insertion), without waiting. Each becomes ACTIVE with a fresh
    /// receipt, or FINISHED at once when `auto_finish` is set. A paused topic (rule 14) gives
    /// nothing.
    async fn pop(&self, topic: &str, max: usize, auto_finish: bool) -> Result<Vec<Delivery>>;

    /// Like [`pop`](Storage::pop) over several topics at once, with one order across them
    /// (beanstalkd's watch list; rule 11 holds across the topics, best effort across Redis
    /// partitions as docs/storage.md says).
    async fn pop_any(
        &self,
        topics: &[String],
        max: usize,
        auto_finish: bool,
    ) -> Result<Vec<Delivery>>;

    /// ACTIVE → DEAD with the reason "buried" (rule 13).
    async fn bury(&self, topic: &str, id: &str, options: BuryOptions) -> Result<()>;

    /// DELAYED or READY → due at `due_ms` (READY at once when it has passed), keeping body,
    /// id and retries (rule 15). Returns the new state.
    async fn reschedule(&self, topic: &str, id: &str, due_ms: Millis) -> Result<State>;

    /// beanstalkd's `kick n`: up to `max` DEAD tasks of `topic` → READY (oldest buried
    /// first); if the topic has none, up to `max` DELAYED tasks → READY (earliest due first).
    /// Returns how many moved.
    async fn kick(&self, topic: &str, max: u64) -> Result<u64>;

    /// beanstalkd's `kick-job`: one DEAD or DELAYED task → READY.
    async fn kick_job(&self, topic: &str, id: &str) -> Result<()>;

    /// beanstalkd's `reserve-job`: one READY, DELAYED or DEAD task → ACTIVE with a fresh
    /// receipt, taken by id whatever its place in the order. A DELAYED task is taken as if
    /// kicked first (due now), a DEAD one as if requeued first (retries reset). A pause of the
    /// topic does not hold it back: beanstalkd hands a named job out of a paused tube too
    /// (rule 14 governs what pops choose, not a task named by id). An ACTIVE, FINISHED or
    /// CANCELLED task is refused (`Op::Take`), an unknown one is not found.
    async fn take(&self, topic: &str, id: &str) -> Result<Delivery>;

    /// Pauses `topic` until `until_ms` (or until resumed when `None`), rule 14. Pausing a
    /// paused topic sets the new end.
    async fn pause(&self, topic: &str, until_ms: Option<Millis>) -> Result<()>;

    /// Ends the pause of `topic` (nothing when it is not paused).
    async fn resume(&self, topic: &str) -> Result<()>;

    /// The next task of `topic` in `state` without taking it: READY in pop order, DELAYED
    /// earliest due first, DEAD oldest first (beanstalkd's peek-ready/-delayed/-buried).
    async fn peek(&self, topic: &str, state: State) -> Result<Option<TaskInfo>>;

    /// The topics that hold a task with this id, in name order (beanstalkd's job ids name no
    /// tube).
    async fn locate(&self, id: &str) -> Result<Vec<String>>;

    /// The next number of the job id counter: 1 on a fresh data directory (embedded) or Redis
    /// deployment, never repeated, durable.
    async fn next_job_id(&self) -> Result<u64>;

    /// Stores `value` under (`namespace`, `key`) durably, replacing what was there: the
    /// settings that live beside the tasks (push targets, schedules), shared by every instance
    /// in Redis mode.
    async fn put_meta(&self, namespace: &str, key: &str, value: Vec<u8>) -> Result<()>;

    /// Every (key, value) stored under `namespace`, in key order.
    async fn list_meta(&self, namespace: &str) -> Result<Vec<(String, Vec<u8>)>>;

    /// Removes (`namespace`, `key`); whether it was there.
    async fn delete_meta(&self, namespace: &str, key: &str) -> Result<bool>;

    /// ACTIVE → FINISHED.
    async fn finish(&self, topic: &str, id: &str, receipt: Option<&str>) -> Result<()>;

    /// ACTIVE → READY, DELAYED or DEAD: a failed attempt. Returns the new state.
    async fn release(&self, topic: &str, id: &str, options: ReleaseOptions) -> Result<State>;

    /// ACTIVE: restarts the ttr. Returns the new ttr deadline.
    async fn touch(&self, topic: &str, id: &str, receipt: Option<&str>) -> Result<Millis>;

    /// DELAYED, READY or ACTIVE → CANCELLED.
    async fn cancel(&self, topic: &str, id: &str) -> Result<()>;

    /// DEAD → READY with retries reset.
    async fn requeue(&self, topic: &str, id: &str) -> Result<()>;

    /// Every DEAD task of `topic` → READY. Returns how many.
    async fn requeue_all(&self, topic: &str) -> Result<u64>;

    /// Removes the record of a task in any state.
    async fn delete(&self, topic: &str, id: &str) -> Result<()>;

    /// The task's full view.
    async fn get(&self, topic: &str, id: &str) -> Result<TaskInfo>;

    /// The tasks of a topic (optionally of one state) ordered by due time, one page
    /// (`page` from 1).
    async fn list(
        &self,
        topic: &str,
        state: Option<State>,
        page: u64,
        page_size: u64,
    ) -> Result<Page<TaskInfo>>;

    /// The counters of one topic (all zero for a topic never seen).
    async fn stats(&self, topic: &str) -> Result<TopicStats>;

    /// Every topic that has records, with its counters, ordered by name.
    async fn topics(&self) -> Result<Vec<(String, TopicStats)>>;

    /// How many DELAYED tasks of `topic` fall due in each range of `bounds`: for bounds
    /// `b0 < b1 < … < bn` the answer has n counts, the i-th of dues in `[b_i, b_(i+1))`
    /// (the dashboard's timeline ahead). `bounds` is validated by [`crate::Queue::due_counts`]
    /// (sorted, at least 2, at most [`MAX_DUE_BOUNDS`]); a topic never seen answers zeros.
    ///
    /// What it costs per backend (docs/storage.md):
    /// - memory and embedded: a walk of the topic's DELAYED ordering between `b0` and `bn`,
    ///   O(log n + k) for k tasks inside, done in steps of at most [`DUE_COUNT_STEP`] tasks
    ///   under the shard's lock, so a big topic never holds the shard for long (the counts of
    ///   a topic that changes meanwhile are then a close estimate, not one snapshot);
    /// - Redis: one `ZCOUNT` per range and partition on the partition's delayed sorted set,
    ///   all in one pipeline: O(partitions × ranges × log n), no task is read.
    async fn due_counts(&self, topic: &str, bounds: &[Millis]) -> Result<Vec<u64>>;

    /// This instance's id when several instances share this storage (Redis mode), so that
    /// what each instance publishes about itself can be told apart; `None` when the storage
    /// belongs to this process alone.
    fn instance(&self) -> Option<String> {
        None
    }

    /// Whether the storage is reachable and accepting work (`/readyz`).
    async fn check_ready(&self) -> Result<()>;

    /// Stops time-driven work and makes everything durable. Later calls fail with
    /// [`crate::Error::ShuttingDown`].
    async fn shutdown(&self) -> Result<()>;
}
