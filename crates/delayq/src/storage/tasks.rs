//! Task transitions and reads: the core every backend implements.

use async_trait::async_trait;
use delayq_core::{
    BuryOptions, Delivery, FlowLimits, Millis, Page, ReleaseOptions, State, TaskInfo, TaskSpec,
    TopicStats,
};

use super::AddResult;
use crate::error::Result;

/// The task a consumer holds and acknowledges along with its next pop.
#[derive(Debug, Clone, Copy)]
pub struct Held<'a> {
    /// Its topic.
    pub topic: &'a str,
    /// Its id.
    pub id: &'a str,
    /// The receipt of the attempt, when the consumer passes it.
    pub receipt: Option<&'a str>,
}

/// [`TaskStore::finish_then_pop`] as a finish, then, only when that succeeded, a pop: the
/// default, and what a backend that does both in one step falls back to where it cannot (the
/// held task on another shard or topic than the popped one).
pub async fn finish_then_pop_in_two_steps<S: TaskStore + ?Sized>(
    store: &S,
    held: Held<'_>,
    topic: &str,
    max: usize,
    auto_finish: bool,
) -> Result<Result<Vec<Delivery>>> {
    store.finish(held.topic, held.id, held.receipt).await?;
    Ok(store.pop(topic, max, auto_finish).await)
}

/// The tasks of a backend. Every method is one atomic transition (or one atomic read) of the
/// state of the tasks it names; the rules of docs/design.md §2 hold for every backend alike.
/// A topic's pause is part of it, as it decides what a pop takes (rule 14).
#[async_trait]
pub trait TaskStore: Send + Sync + 'static {
    /// Adds validated tasks, one result per task in order. Each task is added whole or not
    /// at all, and the tasks that were added are durable (per the backend's settings) before
    /// this returns.
    ///
    /// A batch is not one transaction: its tasks are spread over shards (embedded) or
    /// partitions (Redis), each written on its own, so a batch can be partly applied. Each
    /// task's result says what happened to it: `Ok` with its [`AddOutcome`](delayq_core::AddOutcome), or its own error
    /// (a duplicate, or the storage failure of its shard or partition, whose
    /// [`Outcome`](crate::Outcome) says whether the task may be there anyway).
    ///
    /// An `Err` of the whole call concerns the whole batch. With
    /// [`Outcome::NotApplied`](crate::Outcome::NotApplied) none was added; with
    /// [`Outcome::Unknown`](crate::Outcome::Unknown) any of them may have been (Redis stopped
    /// answering part way through, replicas did not confirm). A caller that must know adds the
    /// same tasks again with [`OnDuplicate::Keep`](delayq_core::OnDuplicate::Keep): the ones
    /// already there answer [`AddOutcome::Existed`](delayq_core::AddOutcome::Existed).
    async fn add(&self, tasks: Vec<TaskSpec>) -> Result<Vec<AddResult>>;

    /// Takes up to `max` READY tasks of `topic` in the order of docs/design.md §2 rule 11
    /// (priority, then due, then insertion), without waiting. Each becomes ACTIVE with a fresh
    /// receipt, or FINISHED at once when `auto_finish` is set. A paused topic (rule 14) gives
    /// nothing.
    async fn pop(&self, topic: &str, max: usize, auto_finish: bool) -> Result<Vec<Delivery>>;

    /// Like [`pop`](TaskStore::pop) over several topics at once, with one order across them
    /// (beanstalkd's watch list; rule 11 holds across the topics, best effort across Redis
    /// partitions as docs/storage.md says).
    async fn pop_any(
        &self,
        topics: &[String],
        max: usize,
        auto_finish: bool,
    ) -> Result<Vec<Delivery>>;

    /// ACTIVE → FINISHED.
    async fn finish(&self, topic: &str, id: &str, receipt: Option<&str>) -> Result<()>;

    /// A consumer's "ack and take the next": finishes `held` exactly as
    /// [`finish`](TaskStore::finish) does, then, only when that succeeded, pops as
    /// [`pop`](TaskStore::pop) does. The outer error is the finish's (nothing was popped,
    /// unless its outcome is unknown: a backend that does both in one step may have applied
    /// both before its write or reply was lost); the inner result is the pop's. Such a
    /// backend overrides this (embedded: one shard step and one log write when both topics
    /// live in one shard; Redis: one script on the held task's partition when it is of the
    /// popped topic, but on a fair turn; PostgreSQL: one transaction for one topic); the
    /// default is [`finish_then_pop_in_two_steps`].
    async fn finish_then_pop(
        &self,
        held: Held<'_>,
        topic: &str,
        max: usize,
        auto_finish: bool,
    ) -> Result<Result<Vec<Delivery>>> {
        finish_then_pop_in_two_steps(self, held, topic, max, auto_finish).await
    }

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

    /// ACTIVE → DEAD with the reason "buried" (rule 13).
    async fn bury(&self, topic: &str, id: &str, options: BuryOptions) -> Result<()>;

    /// DELAYED or READY → due at `due_ms` (READY at once when it has passed), keeping body,
    /// id and retries (rule 15). Returns the new state.
    async fn reschedule(&self, topic: &str, id: &str, due_ms: Millis) -> Result<State>;

    /// Pauses `topic` until `until_ms` (or until resumed when `None`), rule 14. Pausing a
    /// paused topic sets the new end.
    async fn pause(&self, topic: &str, until_ms: Option<Millis>) -> Result<()>;

    /// Ends the pause of `topic` (nothing when it is not paused).
    async fn resume(&self, topic: &str) -> Result<()>;

    /// Sets the flow limits of `topic` (docs/design.md §11), or removes them with `None`:
    /// durable, shared by every instance of the storage, and in force from the next pop. Like
    /// the pause, limits decide what a pop takes, so they belong to the task store: a backend
    /// applies them in the same atomic step as each hand-out. Parked consumers of the topic
    /// are woken (a raised limit may let them go).
    async fn set_limits(&self, topic: &str, limits: Option<FlowLimits>) -> Result<()>;

    /// Every topic that has limits, with them, ordered by topic.
    async fn limits(&self) -> Result<Vec<(String, FlowLimits)>>;

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
    /// (sorted, at least 2, at most [`MAX_DUE_BOUNDS`](super::MAX_DUE_BOUNDS)); a topic never seen answers zeros.
    ///
    /// What it costs per backend (docs/storage.md):
    /// - memory and embedded: a walk of the topic's DELAYED ordering between `b0` and `bn`,
    ///   O(log n + k) for k tasks inside, done in steps of at most [`DUE_COUNT_STEP`](super::DUE_COUNT_STEP) tasks
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
