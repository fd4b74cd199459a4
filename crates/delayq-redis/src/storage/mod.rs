//! [`RedisStorage`]: delayq's storage traits over Redis ([`TaskStore`], [`SettingsStore`],
//! [`JobIds`], [`BeanstalkOps`]), one Lua script per transition.
//!
//! Every operation on a task finds its partition (a stable hash of its id, over the topic's
//! partition count recorded in the registry), reads `now` from the queue's clock and runs
//! one script over the keys of that partition, in one round trip (adds, finishes and pops
//! that wait for the same partition at once share one script:
//! [`delayq::storage::coalesce`]). The script checks the
//! state (and the receipt) itself and answers with a status; the refusals become the same
//! errors the in-memory engine gives. Operations over a whole topic (pop, list, stats,
//! requeue-all) pipeline one command or script per partition.
//!
//! The effects a script reports are handled right after it returns ([`InstanceState::effects`]):
//! consumers of this instance parked in long-polls are woken for the tasks it made ready,
//! and this instance's promoter is told of an earlier timer. Other instances learn the same
//! from the events the script published.
//!
//! The parts, by job; each is a set of methods on [`InstanceState`], what the backend's parts
//! (these, the lease keeper, the promoter, the event subscriber) share:
//!
//! - [`pipeline`]: the connection, timeouts, script pipelines, `WAIT` for replicas.
//! - [`registry`]: the topics' partition counts, and fencing reports for the lease keeper.
//! - [`add`]: batch add, by partition and chunk, in one pipeline; single adds coalesced.
//! - [`consume`]: finish, pop of a one-partition topic, and both (ack and take the next),
//!   coalesced into `consume` scripts.
//! - [`pop`]: pop across partitions (of one topic or several) in rule 11's order, receipts,
//!   and the wake-up of parked consumers when a pause ends.
//! - [`permits`]: the flow limits of a topic of several partitions, counted by its permits
//!   in a slot of their own.
//! - [`acks`]: finish, ack and take the next, release, touch, cancel, requeue (one or
//!   all), delete, bury, reschedule, kick-job.
//! - [`manage`]: kick, pause and resume, peek, locate.
//! - [`meta`]: the job id counter and the settings store.
//! - [`reads`]: get, list, stats, topics.

mod acks;
mod add;
mod consume;
mod manage;
mod meta;
#[cfg(test)]
mod permit_steps;
mod permits;
mod pipeline;
mod pop;
mod reads;
mod registry;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use std::collections::HashMap;

use delayq::{
    AddResult, BeanstalkOps, BuryOptions, Delivery, Error, Held, JobIds, Millis, Page,
    ReleaseOptions, Result, SettingsStore, State, StorageContext, TaskInfo, TaskSpec, TaskStore,
    TopicStats,
};
use delayq_core::hash::splitmix64;
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::keys::{Keys, PartitionKeys};
use crate::options::RedisOptions;
use crate::promoter::Event;
use crate::scripts::{Events, Header, Reply, Script, ScriptInvocation};

pub(crate) use self::pipeline::Redis;
pub(crate) use self::registry::Fencing;

/// A (topic, partition): what calls that share a script have in common.
pub(crate) type Slot = (String, u32);

/// What one instance of the backend holds, shared by its parts (the operations, the lease
/// keeper, the promoter, the event subscriber): the settings, the connection, its identity,
/// the topic cache and the channels to the background tasks.
pub(crate) struct InstanceState {
    pub ctx: StorageContext,
    pub options: RedisOptions,
    pub redis: Redis,
    pub keys: Keys,
    pub channel: String,
    /// This instance's id: lease owner, and origin of the events it publishes.
    pub instance: String,
    /// Where the promoter learns of topics, leases and earlier timers.
    pub promoter: mpsc::UnboundedSender<Event>,
    /// Fenced-off buckets, for the lease keeper.
    pub fencing: Fencing,
    topics: registry::Topics,
    receipts: pop::Receipts,
    /// The last insertion number this instance gave (see [`InstanceState::next_seq`]).
    last_seq: AtomicU64,
    /// The pause ends at which this instance's parked consumers will be woken, by topic.
    pause_wakes: Arc<Mutex<HashMap<String, Millis>>>,
    /// Concurrent adds to one partition, sharing a script.
    adds: add::Adds,
    /// Concurrent finishes and pops of one partition, sharing a script.
    consumers: consume::Consumers,
    /// Concurrent pops of one topic of several partitions, sharing a round.
    shared_pops: pop::SharedPops,
    /// The ack-and-next calls so far, for their fair turn (`acks.rs`, `next_from`).
    ack_turns: AtomicU64,
    closed: AtomicBool,
}

impl InstanceState {
    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::ShuttingDown)
        } else {
            Ok(())
        }
    }

    /// The insertion number of a task added at `now` (rule 11: FIFO among tasks of equal
    /// priority and due): `now << 20` plus a counter, above every number this instance gave
    /// before. Tasks added by one instance keep their order across all partitions and
    /// topics; tasks added by different instances in the same millisecond of the shared
    /// clock are ordered arbitrarily among themselves.
    pub fn next_seq(&self, now: Millis) -> u64 {
        let floor = now.saturating_mul(1 << 20);
        let mut last = self.last_seq.load(Ordering::Relaxed);
        loop {
            let next = floor.max(last.saturating_add(1));
            match self.last_seq.compare_exchange_weak(
                last,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }

    /// A partition script invocation with the keys and the argument header of `lib.lua`.
    pub fn invocation<'s>(
        &self,
        script: &'s Script,
        pk: &PartitionKeys,
        topic: &str,
        partition: u32,
        now: Millis,
    ) -> ScriptInvocation<'s> {
        // Read after `now`, so never below the true time when `now` was read.
        let upper = self.ctx.clock.window_start(now);
        let header = Header {
            now,
            upper,
            channel: &self.channel,
            instance: &self.instance,
            topic,
            partition,
            retention_ms: self.ctx.defaults.retention_ms,
        };
        header.invoke(script, pk)
    }

    /// Acts on what a script reports: wake local consumers, tell the local promoter of an
    /// earlier timer, count DEAD and expired tasks.
    pub fn effects(&self, topic: &str, partition: u32, reply: &Reply) {
        if reply.ready > 0 {
            self.ctx
                .waiters
                .notify(topic, usize::try_from(reply.ready).unwrap_or(usize::MAX));
        }
        if let Some(at) = reply.wake {
            let _ = self.promoter.send(Event::Wake {
                topic: topic.to_owned(),
                partition,
                at,
            });
        }
        if reply.dead > 0 || reply.expired > 0 {
            let counters = self.ctx.metrics.topic(topic);
            for _ in 0..reply.dead {
                self.ctx.metrics.observe_dead(&counters);
            }
            for _ in 0..reply.expired {
                self.ctx.metrics.observe_expired(&counters);
            }
        }
    }

    /// Records what a script's promotions did at `now`: the lateness of each fire, and the
    /// spans of traced tasks that fired or went DEAD.
    pub fn record_events(&self, topic: &str, events: &Events, now: Millis) {
        let metrics = &self.ctx.metrics;
        if !events.dues.is_empty() {
            let counters = metrics.topic(topic);
            for &due in &events.dues {
                metrics.observe_fire(&counters, now.saturating_sub(due));
            }
        }
        let spans = metrics.spans();
        for e in &events.traced {
            match e.dead {
                Some(reason) => spans.dead(topic, &e.id, Some(&e.trace), now, reason),
                None => spans.fired(topic, &e.id, Some(&e.trace), e.due, now),
            }
        }
    }
}

/// The Redis backend. See the crate doc.
///
/// Dropping it without [`TaskStore::shutdown`] stops its background tasks at once without
/// giving up its leases, as a crash would; other instances take its partitions over when
/// the leases run out.
pub struct RedisStorage {
    state: Arc<InstanceState>,
    stop: watch::Sender<bool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for RedisStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStorage")
            .field("instance", &self.state.instance)
            .field("redis", &self.state.redis.link.addr())
            .finish_non_exhaustive()
    }
}

impl RedisStorage {
    /// This instance's id, as it appears in leases and events.
    pub fn instance_id(&self) -> &str {
        &self.state.instance
    }

    /// Stops the background tasks at once, without releasing leases or flushing anything:
    /// what a crash does. Operations keep working (they need no background task); only
    /// promotion and the event subscription stop. For failover tests.
    pub fn halt(&self) {
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
    }
}

impl Drop for RedisStorage {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Connects to Redis and starts the backend: its lease keeper, promoter and event
/// subscriber. Must be called inside a tokio runtime.
///
/// Redis need not be reachable yet: operations fail with [`Error::Unavailable`] (and
/// [`TaskStore::check_ready`] fails) until it is, and the background tasks keep trying. A bad
/// option or URL is an [`Error::Invalid`] naming it.
pub async fn start(ctx: StorageContext, options: RedisOptions) -> Result<Arc<RedisStorage>, Error> {
    let link = options.open_link().await?;
    let (promoter_tx, promoter_rx) = mpsc::unbounded_channel();
    let keys = Keys::new(&options.key_prefix);
    let seed = delayq::storage::random_u64();
    let state = Arc::new(InstanceState {
        ctx,
        redis: Redis::new(link, &options),
        channel: keys.channel(),
        keys,
        instance: format!("{:016x}", splitmix64(seed)),
        promoter: promoter_tx,
        fencing: Fencing::default(),
        topics: registry::Topics::default(),
        receipts: pop::Receipts::new(seed),
        pause_wakes: Arc::default(),
        last_seq: AtomicU64::new(0),
        adds: add::Adds::default(),
        consumers: consume::Consumers::default(),
        shared_pops: pop::SharedPops::default(),
        ack_turns: AtomicU64::new(0),
        closed: AtomicBool::new(false),
        options,
    });
    if let Err(e) = state.redis.ping().await {
        tracing::warn!(error = %e, "Redis is not reachable yet; delayq keeps trying");
    }
    let (stop, _) = watch::channel(false);
    let mut tasks = vec![
        tokio::spawn(crate::lease::run(Arc::clone(&state), stop.subscribe())),
        tokio::spawn(crate::promoter::run(
            Arc::clone(&state),
            promoter_rx,
            stop.subscribe(),
        )),
        tokio::spawn(crate::events::run(Arc::clone(&state), stop.subscribe())),
    ];
    if let Some(follow) = state.redis.link.background(stop.subscribe()) {
        tasks.push(tokio::spawn(follow));
    }
    Ok(Arc::new(RedisStorage {
        state,
        stop,
        tasks: Mutex::new(tasks),
    }))
}

#[async_trait]
impl TaskStore for RedisStorage {
    async fn add(&self, tasks: Vec<TaskSpec>) -> Result<Vec<AddResult>> {
        self.state.add(tasks).await
    }

    async fn pop(&self, topic: &str, max: usize, auto_finish: bool) -> Result<Vec<Delivery>> {
        self.state.pop(&[topic], max, auto_finish).await
    }

    async fn pop_any(
        &self,
        topics: &[String],
        max: usize,
        auto_finish: bool,
    ) -> Result<Vec<Delivery>> {
        let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
        self.state.pop(&topics, max, auto_finish).await
    }

    async fn bury(&self, topic: &str, id: &str, options: BuryOptions) -> Result<()> {
        self.state.bury(topic, id, options).await
    }

    async fn reschedule(&self, topic: &str, id: &str, due_ms: Millis) -> Result<State> {
        self.state.reschedule(topic, id, due_ms).await
    }

    async fn pause(&self, topic: &str, until_ms: Option<Millis>) -> Result<()> {
        self.state.pause(topic, until_ms).await
    }

    async fn resume(&self, topic: &str) -> Result<()> {
        self.state.resume(topic).await
    }

    /// Limits live in the topic's partition, where the pop script checks them, and in the
    /// settings store, which lists them (docs/flow-control.md).
    async fn set_limits(&self, topic: &str, limits: Option<delayq::FlowLimits>) -> Result<()> {
        self.state.set_limits(topic, limits).await?;
        match limits {
            Some(l) => {
                let value = serde_json::to_vec(&l).expect("limits serialize");
                SettingsStore::put(self, delayq::LIMITS_NAMESPACE, topic, value).await
            }
            None => SettingsStore::delete(self, delayq::LIMITS_NAMESPACE, topic)
                .await
                .map(drop),
        }
    }

    async fn limits(&self) -> Result<Vec<(String, delayq::FlowLimits)>> {
        let stored = SettingsStore::list(self, delayq::LIMITS_NAMESPACE).await?;
        Ok(delayq::storage::decode_limits(stored))
    }

    async fn finish(&self, topic: &str, id: &str, receipt: Option<&str>) -> Result<()> {
        self.state.finish(topic, id, receipt).await
    }

    async fn finish_then_pop(
        &self,
        held: Held<'_>,
        topic: &str,
        max: usize,
        auto_finish: bool,
    ) -> Result<Result<Vec<Delivery>>> {
        self.state
            .finish_then_pop(held, topic, max, auto_finish)
            .await
    }

    async fn release(&self, topic: &str, id: &str, options: ReleaseOptions) -> Result<State> {
        self.state.release(topic, id, options).await
    }

    async fn touch(&self, topic: &str, id: &str, receipt: Option<&str>) -> Result<Millis> {
        self.state.touch(topic, id, receipt).await
    }

    async fn cancel(&self, topic: &str, id: &str) -> Result<()> {
        self.state.cancel(topic, id).await
    }

    async fn requeue(&self, topic: &str, id: &str) -> Result<()> {
        self.state.requeue(topic, id).await
    }

    async fn requeue_all(&self, topic: &str) -> Result<u64> {
        self.state.requeue_all(topic).await
    }

    async fn delete(&self, topic: &str, id: &str) -> Result<()> {
        self.state.delete(topic, id).await
    }

    async fn get(&self, topic: &str, id: &str) -> Result<TaskInfo> {
        self.state.get(topic, id).await
    }

    async fn list(
        &self,
        topic: &str,
        state: Option<State>,
        page: u64,
        page_size: u64,
    ) -> Result<Page<TaskInfo>> {
        self.state.list(topic, state, page, page_size).await
    }

    async fn stats(&self, topic: &str) -> Result<TopicStats> {
        self.state.stats(topic).await
    }

    async fn topics(&self) -> Result<Vec<(String, TopicStats)>> {
        self.state.topics().await
    }

    async fn due_counts(&self, topic: &str, bounds: &[Millis]) -> Result<Vec<u64>> {
        self.state.due_counts(topic, bounds).await
    }

    fn instance(&self) -> Option<String> {
        Some(self.state.instance.clone())
    }

    async fn check_ready(&self) -> Result<()> {
        self.state.check_open()?;
        self.state.redis.ping().await?;
        Ok(())
    }

    async fn shutdown(&self) -> Result<()> {
        if self.state.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let _ = self.stop.send(true);
        let tasks = std::mem::take(&mut *self.tasks.lock());
        for task in tasks {
            let _ = task.await;
        }
        Ok(())
    }
}

#[async_trait]
impl SettingsStore for RedisStorage {
    async fn put(&self, namespace: &str, key: &str, value: Vec<u8>) -> Result<()> {
        self.state.put_meta(namespace, key, value).await
    }

    async fn list(&self, namespace: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.state.list_meta(namespace).await
    }

    async fn delete(&self, namespace: &str, key: &str) -> Result<bool> {
        self.state.delete_meta(namespace, key).await
    }
}

#[async_trait]
impl JobIds for RedisStorage {
    async fn next_id(&self) -> Result<u64> {
        self.state.next_job_id().await
    }
}

#[async_trait]
impl BeanstalkOps for RedisStorage {
    async fn kick(&self, topic: &str, max: u64) -> Result<u64> {
        self.state.kick(topic, max).await
    }

    async fn kick_job(&self, topic: &str, id: &str) -> Result<()> {
        self.state.kick_job(topic, id).await
    }

    async fn take(&self, topic: &str, id: &str) -> Result<Delivery> {
        self.state.take(topic, id).await
    }

    async fn peek(&self, topic: &str, state: State) -> Result<Option<TaskInfo>> {
        self.state.peek(topic, state).await
    }

    async fn locate(&self, id: &str) -> Result<Vec<String>> {
        self.state.locate(id).await
    }
}
