//! The [`Queue`] handle: the library API of docs/design.md §3.
//!
//! A queue validates every input against its limits (so no backend ever sees an invalid
//! value), turns relative delays into absolute due times with its clock, parks long-polling
//! consumers until their topic has ready tasks, and runs callback workers
//! ([`Queue::on_expire`]). The state itself lives in a [`Backend`].
//!
//! A delay becomes a due with [`Clock::due_after`] (now rounded up), never `now_ms() + delay`
//! (now rounded down), so a task is never handed out before the producer's send time plus its
//! delay (`docs/clock.md`). Every operation first asks the clock whether it can bound now
//! ([`Clock::check`]) and is refused as unavailable (503) when it cannot.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use delayq_core::InvalidField;
use delayq_core::validate::{self, check_id, check_topic};
use delayq_core::{
    AddOutcome, BuryOptions, Delivery, Expiry, FlowLimits, Millis, NewTask, Page, State, TaskInfo,
    TaskSpec, TopicStats, When,
};
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::clock::{Clock, ClockUnavailable, SystemClock};
use crate::error::{Error, ErrorKind, Result};
use crate::metrics::{TopicActivity, TopicCounters};
use crate::spans::Settle;
use crate::storage::{
    AddResult, Backend, Held, MAX_DUE_BOUNDS, ReleaseOptions, StorageContext, memory,
};
use crate::workers::{WorkerOptions, Workers};

/// How often a parked long-poll looks again while storage is unavailable.
const OUTAGE_RETRY_MS: u64 = 100;

/// How a consumer pops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PopOptions {
    /// Most tasks to take (default 1).
    pub count: usize,
    /// How long to wait for a ready task; 0 returns at once (default 0).
    pub timeout_ms: u64,
    /// Finish tasks as they are handed out: at-most-once delivery (default false).
    pub auto_finish: bool,
}

impl Default for PopOptions {
    fn default() -> Self {
        PopOptions {
            count: 1,
            timeout_ms: 0,
            auto_finish: false,
        }
    }
}

impl PopOptions {
    /// Take up to `count` tasks.
    pub fn count(mut self, count: usize) -> Self {
        self.count = count;
        self
    }

    /// Wait up to `timeout_ms` for a ready task.
    pub fn timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.timeout_ms = timeout_ms;
        self
    }

    /// Finish the tasks as they are handed out.
    pub fn auto_finish(mut self, auto_finish: bool) -> Self {
        self.auto_finish = auto_finish;
        self
    }
}

struct Inner {
    storage: Backend,
    ctx: StorageContext,
    closing: AtomicBool,
    closed_tx: watch::Sender<bool>,
    workers: Mutex<Vec<Workers>>,
}

/// A handle to a delay queue. Cheap to clone; all clones share one queue.
#[derive(Clone)]
pub struct Queue {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("ctx", &self.inner.ctx)
            .finish_non_exhaustive()
    }
}

impl Queue {
    /// A queue over `storage` (a [`Backend`], or a built-in backend's `Arc`), which must have
    /// been started with the same `ctx`.
    pub fn new(storage: impl Into<Backend>, ctx: StorageContext) -> Self {
        Queue {
            inner: Arc::new(Inner {
                storage: storage.into(),
                ctx,
                closing: AtomicBool::new(false),
                closed_tx: watch::Sender::new(false),
                workers: Mutex::new(Vec::new()),
            }),
        }
    }

    /// An in-memory queue on the system clock with default settings. Must be called inside a
    /// tokio runtime.
    pub fn memory() -> Self {
        Queue::memory_with(StorageContext::new(Arc::new(SystemClock::new())))
    }

    /// An in-memory queue with the given context.
    pub fn memory_with(ctx: StorageContext) -> Self {
        let storage = memory::start(ctx.clone(), memory::DEFAULT_SHARDS);
        Queue::new(storage, ctx)
    }

    /// The context: clock, limits, defaults, metrics, waiters.
    pub fn context(&self) -> &StorageContext {
        &self.inner.ctx
    }

    /// The backend.
    pub fn storage(&self) -> &Backend {
        &self.inner.storage
    }

    /// The backend's settings store (push targets, schedules, …).
    pub fn settings(&self) -> &Arc<dyn crate::storage::SettingsStore> {
        self.inner.storage.settings()
    }

    fn now(&self) -> Millis {
        self.inner.ctx.clock.now_ms()
    }

    fn check_open(&self) -> Result<()> {
        if self.inner.closing.load(Ordering::Acquire) {
            return Err(Error::ShuttingDown);
        }
        self.check_clock()
    }

    /// Refuses the operation while the clock cannot bound now (see the module doc).
    fn check_clock(&self) -> Result<()> {
        self.inner.ctx.clock.check().map_err(clock_unavailable)
    }

    /// Validates `task` and makes its due absolute: a delay from now rounded up, so the task is
    /// never due before the moment it was sent plus its delay (`Clock::due_after`).
    fn spec(&self, task: NewTask, now: Millis) -> std::result::Result<TaskSpec, InvalidField> {
        let ctx = &self.inner.ctx;
        let delay = match task.when {
            When::Delay(delay) => Some(delay),
            When::At(_) => None,
        };
        #[cfg(feature = "opentelemetry")]
        let task = {
            let mut task = task;
            if task.trace.is_none() {
                task.trace = crate::otel::current();
            }
            task
        };
        let expiry = task.expiry;
        let mut spec = validate::validate_task(task, &ctx.limits, &ctx.defaults, now)?;
        if let Some(delay) = delay {
            // Validation checked the delay's limit; the due and the creation time come from
            // one reading rounded up, so `due - created` is the delay asked for.
            let due = ctx.clock.due_after(delay).max(spec.due_ms);
            spec.due_ms = due;
            spec.created_at_ms = due.saturating_sub(delay).max(spec.created_at_ms);
            if let Some(Expiry::In(expires_in)) = expiry {
                // Relative to the same arrival as the due, so it stays after the due.
                spec.expires_at_ms = Some(spec.created_at_ms.saturating_add(expires_in));
            }
        }
        Ok(spec)
    }

    /// Adds one task. An error whose [`outcome`](Error::outcome) is
    /// [`Outcome::Unknown`](crate::Outcome::Unknown) may have added it anyway: add it again
    /// with [`OnDuplicate::Keep`](delayq_core::OnDuplicate::Keep), which answers
    /// [`AddOutcome::Existed`] if it is there.
    pub async fn add(&self, task: NewTask) -> Result<AddOutcome> {
        self.check_open()?;
        let now = self.now();
        let spec = self.spec(task, now)?;
        let counters = self.inner.ctx.metrics.topic(&spec.topic);
        let span = self.add_span(&spec, now);
        let result = match self.inner.storage.tasks().add(vec![spec]).await {
            Ok(mut results) => results.pop().expect("one result per task"),
            Err(e) => Err(e),
        };
        if let Some(span) = span {
            self.end_add_span(span, &result);
        }
        if matches!(result, Ok(AddOutcome::Added | AddOutcome::Replaced)) {
            self.inner.ctx.metrics.observe_added(&counters, 1);
        }
        result
    }

    /// What the add span of a traced task needs after the task went to storage: its topic,
    /// id, context and start. `None` when it gets no span (the common case: nothing cloned).
    fn add_span(&self, spec: &TaskSpec, now: Millis) -> Option<AddSpan> {
        let spans = self.inner.ctx.metrics.spans();
        spans.traces(spec.trace.as_ref()).then(|| AddSpan {
            topic: spec.topic.clone(),
            id: spec.id.clone(),
            trace: spec.trace.clone(),
            start: now,
        })
    }

    fn end_add_span(&self, span: AddSpan, result: &Result<AddOutcome>) {
        let outcome = match result {
            Ok(AddOutcome::Added) => "added",
            Ok(AddOutcome::Replaced) => "replaced",
            Ok(AddOutcome::Existed) => "existed",
            Err(e) => e.kind().name(),
        };
        self.inner.ctx.metrics.spans().added(
            &span.topic,
            &span.id,
            span.trace.as_ref(),
            span.start,
            self.now(),
            outcome,
        );
    }

    /// Adds a batch of tasks, one durable write per shard or partition they fall in. Each task
    /// gets its own result, in the order given: an invalid or duplicate task fails alone, its
    /// error naming the field as for a single add (the result's position says which task; the
    /// HTTP edge names it `tasks[i].field`), and a storage failure is reported on the tasks it
    /// concerns. A batch over the size limit fails whole. A batch can be partly applied; see
    /// [`TaskStore::add`](crate::storage::TaskStore::add) for what an error of the whole call says and how to make sure every
    /// task is there.
    pub async fn add_batch(&self, tasks: Vec<NewTask>) -> Result<Vec<AddResult>> {
        self.check_open()?;
        let ctx = &self.inner.ctx;
        if tasks.len() > ctx.limits.max_batch {
            return Err(Error::TooLarge {
                field: "tasks".into(),
                reason: format!(
                    "{} tasks, the limit is {}",
                    tasks.len(),
                    ctx.limits.max_batch
                ),
            });
        }
        let now = self.now();
        let mut results: Vec<Option<AddResult>> = Vec::with_capacity(tasks.len());
        let mut specs = Vec::with_capacity(tasks.len());
        let mut slots = Vec::with_capacity(tasks.len());
        // The activity counters of each valid task's topic, looked up once per run of tasks
        // of one topic (a batch is usually of one).
        let mut counters: Vec<Arc<TopicCounters>> = Vec::with_capacity(tasks.len());
        // The add spans of the batch's traced tasks, by their place among `specs`.
        let mut spans: Vec<(usize, AddSpan)> = Vec::new();
        for (i, task) in tasks.into_iter().enumerate() {
            match self.spec(task, now) {
                Ok(spec) => {
                    if let Some(span) = self.add_span(&spec, now) {
                        spans.push((specs.len(), span));
                    }
                    let same = specs
                        .last()
                        .is_some_and(|last: &TaskSpec| last.topic == spec.topic);
                    let c = match counters.last() {
                        Some(c) if same => Arc::clone(c),
                        _ => ctx.metrics.topic(&spec.topic),
                    };
                    counters.push(c);
                    specs.push(spec);
                    slots.push(i);
                    results.push(None);
                }
                Err(e) => results.push(Some(Err(e.into()))),
            }
        }
        if !specs.is_empty() {
            let added = self.inner.storage.tasks().add(specs).await?;
            for (k, span) in spans {
                if let Some(result) = added.get(k) {
                    let result = result.as_ref().map(|o| *o).map_err(Error::clone);
                    self.end_add_span(span, &result);
                }
            }
            for ((slot, result), c) in slots.into_iter().zip(added).zip(&counters) {
                if matches!(result, Ok(AddOutcome::Added | AddOutcome::Replaced)) {
                    ctx.metrics.observe_added(c, 1);
                }
                results[slot] = Some(result);
            }
        }
        Ok(results
            .into_iter()
            .map(|r| r.expect("every task has a result"))
            .collect())
    }

    /// Takes up to `options.count` ready tasks of `topic`, waiting up to `options.timeout_ms`
    /// for the first. Returns an empty list on timeout or when the queue shuts down.
    ///
    /// A pop whose error has an unknown [`outcome`](Error::outcome) may have taken tasks that
    /// nobody received: they come back when their ttr passes (with `auto_finish`, which is
    /// at-most-once, they are gone). A parked long-poll therefore looks again through an
    /// outage without losing more than that.
    pub async fn pop(&self, topic: &str, options: PopOptions) -> Result<Vec<Delivery>> {
        self.check_open()?;
        check_topic(topic)?;
        self.check_pop_options(options)?;
        if options.timeout_ms == 0 {
            let got = self
                .inner
                .storage
                .tasks()
                .pop(topic, options.count, options.auto_finish)
                .await?;
            return Ok(self.handed_out(options, got));
        }
        self.long_poll(&[topic.to_owned()], options).await
    }

    fn check_pop_options(&self, options: PopOptions) -> Result<()> {
        let count = options.count as u64;
        validate::check_pop(count, options.timeout_ms, &self.inner.ctx.limits)?;
        Ok(())
    }

    /// One look for tasks: a pop of one topic, or over several.
    async fn pop_now(&self, topics: &[String], options: PopOptions) -> Result<Vec<Delivery>> {
        let storage = self.inner.storage.tasks();
        let got = match topics {
            [topic] => {
                storage
                    .pop(topic, options.count, options.auto_finish)
                    .await?
            }
            _ => {
                storage
                    .pop_any(topics, options.count, options.auto_finish)
                    .await?
            }
        };
        Ok(self.handed_out(options, got))
    }

    /// Records tasks handed out: a delivery span for each traced one, and those handed out
    /// with `auto_finish`, which are finished, counted so in the activity counters.
    fn handed_out(&self, options: PopOptions, got: Vec<Delivery>) -> Vec<Delivery> {
        self.delivered(&got);
        if options.auto_finish {
            let metrics = &self.inner.ctx.metrics;
            for d in &got {
                metrics.observe_finished(&metrics.topic(&d.topic), 1);
            }
        }
        got
    }

    /// Waits up to `options.timeout_ms` for tasks of any of `topics`: parked on each, woken by
    /// any (a task made ready, a pause that ended, a resume), looking again each time.
    ///
    /// A wake-up is one task's worth (see [`crate::waiters`]); one that woke this consumer
    /// for topic A while it took tasks of B only is handed on to A's next consumer, so a
    /// consumer parked on several topics never strands a ready task of one of them.
    async fn long_poll(&self, topics: &[String], options: PopOptions) -> Result<Vec<Delivery>> {
        // The timeout is measured from before the consumer counts as parked, so whoever sees
        // it parked and moves the clock on moves it past a deadline that is already set.
        let timeout = self.inner.ctx.clock.sleep_for(options.timeout_ms);
        let waiters = &self.inner.ctx.waiters;
        let parked = waiters.park_all(topics);
        let mut closed = self.inner.closed_tx.subscribe();
        tokio::pin!(timeout);
        let mut first = true;
        let mut woken_by: Option<usize> = None;
        loop {
            // Register for the wake-ups before looking, so a task made ready in between wakes us.
            let mut notified: Vec<_> = parked.iter().map(|p| Box::pin(p.notified())).collect();
            for n in &mut notified {
                n.as_mut().enable();
            }
            let retry_at = match self.pop_now(topics, options).await {
                Ok(got) if !got.is_empty() => {
                    if let Some(i) = woken_by
                        && !got.iter().any(|d| d.topic == topics[i])
                    {
                        waiters.notify(&topics[i], 1);
                    }
                    return Ok(got);
                }
                Ok(_) => None,
                // A long-poll that began rides out a storage outage until its timeout; the first
                // look reports it, so a caller learns at once that storage is down.
                Err(e) if !first && e.kind() == ErrorKind::Unavailable => Some(OUTAGE_RETRY_MS),
                // The caller was admitted, so a shutdown seen here began after it parked (even
                // during its first look): a parked long-poll returns empty at shutdown,
                // whichever it sees first.
                Err(e) if e.kind() == ErrorKind::ShuttingDown => return Ok(Vec::new()),
                Err(e) => return Err(e),
            };
            first = false;
            let retry = async {
                match retry_at {
                    Some(ms) => self.inner.ctx.clock.sleep_for(ms).await,
                    None => std::future::pending().await,
                }
            };
            let any = futures_util::future::select_all(notified.iter_mut().map(|n| n.as_mut()));
            woken_by = None;
            tokio::select! {
                (_, i, _) = any => woken_by = Some(i),
                _ = retry => {}
                _ = &mut timeout => return Ok(Vec::new()),
                _ = closed.wait_for(|c| *c) => return Ok(Vec::new()),
            }
        }
    }

    /// The delivery spans of what was handed out.
    fn delivered(&self, got: &[Delivery]) {
        let spans = self.inner.ctx.metrics.spans();
        if !spans.is_on() {
            return;
        }
        let now = self.now();
        for d in got {
            spans.delivered(d, now);
        }
    }

    /// The settle span of a consumer's finish, release or bury of `topic`/`id`, from `start`
    /// to now: a child of the caller's current trace context (an HTTP request's
    /// `traceparent`, a callback's task), none without one.
    fn settled<T>(
        &self,
        how: Settle,
        topic: &str,
        id: &str,
        start: Option<Millis>,
        result: &Result<T>,
        outcome: impl FnOnce(&T) -> &'static str,
    ) {
        let Some(start) = start else { return };
        let Some(parent) = caller_trace() else { return };
        let (outcome, failed) = match result {
            Ok(v) => (outcome(v), false),
            Err(e) => (e.kind().name(), true),
        };
        self.inner.ctx.metrics.spans().settled(
            how,
            topic,
            id,
            Some(&parent),
            start,
            self.now(),
            outcome,
            failed,
        );
    }

    /// When spans are on, the moment an operation starts (for its span).
    fn span_start(&self) -> Option<Millis> {
        self.inner.ctx.metrics.spans().is_on().then(|| self.now())
    }

    /// Pops one task, waiting up to `timeout_ms`.
    pub async fn pop_one(&self, topic: &str, timeout_ms: u64) -> Result<Option<Delivery>> {
        let mut got = self
            .pop(topic, PopOptions::default().timeout_ms(timeout_ms))
            .await?;
        Ok(got.pop())
    }

    /// ACTIVE → FINISHED. A given receipt must be the current attempt's.
    pub async fn finish(&self, topic: &str, id: &str, receipt: Option<&str>) -> Result<()> {
        check_key(topic, id)?;
        self.check_clock()?;
        let start = self.span_start();
        let result = self.inner.storage.tasks().finish(topic, id, receipt).await;
        self.settled(Settle::Finish, topic, id, start, &result, |_| "finished");
        result?;
        let metrics = &self.inner.ctx.metrics;
        metrics.observe_finished(&metrics.topic(topic), 1);
        Ok(())
    }

    /// Ack and take the next (docs/design.md §3): finishes the task the consumer holds,
    /// exactly as [`Queue::finish`] does, then pops `topic` as [`Queue::pop`] does, waiting up
    /// to `options.timeout_ms`. The pop's options are checked before anything changes. The
    /// outer error is the finish's (nothing was popped; its [`Error::outcome`] says whether
    /// it may have been applied); the inner result is the pop's.
    ///
    /// The storage does the finish and the first look in one step where it can (embedded:
    /// one shard step and one log write; Redis: one script; PostgreSQL: one transaction), so
    /// a consumer loop costs one round trip a task.
    pub async fn finish_then_pop(
        &self,
        held: Held<'_>,
        topic: &str,
        options: PopOptions,
    ) -> Result<Result<Vec<Delivery>>> {
        self.check_open()?;
        check_topic(topic)?;
        self.check_pop_options(options)?;
        check_key(held.topic, held.id)?;
        self.check_clock()?;
        let (held_topic, held_id) = (held.topic, held.id);
        let start = self.span_start();
        let first = self
            .inner
            .storage
            .tasks()
            .finish_then_pop(held, topic, options.count, options.auto_finish)
            .await;
        self.settled(
            Settle::Finish,
            held_topic,
            held_id,
            start,
            &first,
            |_| "finished",
        );
        let first = first?;
        let metrics = &self.inner.ctx.metrics;
        metrics.observe_finished(&metrics.topic(held.topic), 1);
        let got = match first {
            Ok(got) => self.handed_out(options, got),
            Err(e) => return Ok(Err(e)),
        };
        if !got.is_empty() || options.timeout_ms == 0 {
            return Ok(Ok(got));
        }
        Ok(self.long_poll(&[topic.to_owned()], options).await)
    }

    /// Finishes a batch of tasks, each `(topic, id, receipt)` on its own: one result per task
    /// in the order given, an unknown, stale or invalid one failing alone (its error naming the
    /// field as for a single finish; the HTTP edge names it `tasks[i].field`). A batch over
    /// the size limit (`max_batch`) fails whole.
    ///
    /// The finishes run concurrently: each applies its transition at once and then waits for
    /// its durability, so the embedded log's writer takes the batch's records together (one
    /// write for the batch, not one round trip per task) and a Redis backend pipelines them.
    pub async fn finish_batch(
        &self,
        tasks: &[(&str, &str, Option<&str>)],
    ) -> Result<Vec<Result<()>>> {
        self.check_open()?;
        let max = self.inner.ctx.limits.max_batch;
        if tasks.len() > max {
            return Err(Error::TooLarge {
                field: "tasks".into(),
                reason: format!("{} tasks, the limit is {max}", tasks.len()),
            });
        }
        let finishes = tasks
            .iter()
            .map(|&(topic, id, receipt)| self.finish(topic, id, receipt));
        Ok(futures_util::future::join_all(finishes).await)
    }

    /// ACTIVE → READY/DELAYED/DEAD: the attempt failed. Returns the new state.
    pub async fn release(&self, topic: &str, id: &str, options: ReleaseOptions) -> Result<State> {
        check_key(topic, id)?;
        self.check_clock()?;
        if let Some(delay) = options.delay_ms {
            // The backend counts the delay from the moment it applies the release, never
            // from a reading of now rounded down: the new due is never before the release
            // plus the delay.
            validate::check_duration("delay_ms", delay, self.inner.ctx.limits.max_delay_ms)?;
        }
        let start = self.span_start();
        let state = self.inner.storage.tasks().release(topic, id, options).await;
        self.settled(Settle::Release, topic, id, start, &state, |s| s.name());
        let state = state?;
        let metrics = &self.inner.ctx.metrics;
        metrics.observe_failed(&metrics.topic(topic));
        Ok(state)
    }

    /// ACTIVE: restarts the ttr. Returns the new deadline.
    pub async fn touch(&self, topic: &str, id: &str, receipt: Option<&str>) -> Result<Millis> {
        check_key(topic, id)?;
        self.check_clock()?;
        self.inner.storage.tasks().touch(topic, id, receipt).await
    }

    /// DELAYED/READY/ACTIVE → CANCELLED. After success the task is never delivered again.
    pub async fn cancel(&self, topic: &str, id: &str) -> Result<()> {
        check_key(topic, id)?;
        self.check_clock()?;
        self.inner.storage.tasks().cancel(topic, id).await
    }

    /// DEAD → READY with retries reset.
    pub async fn requeue(&self, topic: &str, id: &str) -> Result<()> {
        check_key(topic, id)?;
        self.check_clock()?;
        self.inner.storage.tasks().requeue(topic, id).await
    }

    /// Every DEAD task of `topic` → READY. Returns how many.
    pub async fn requeue_all(&self, topic: &str) -> Result<u64> {
        check_topic(topic)?;
        self.check_clock()?;
        self.inner.storage.tasks().requeue_all(topic).await
    }

    /// Removes a task's record, whatever its state.
    pub async fn delete(&self, topic: &str, id: &str) -> Result<()> {
        check_key(topic, id)?;
        self.check_clock()?;
        self.inner.storage.tasks().delete(topic, id).await
    }

    /// The full view of one task.
    pub async fn get(&self, topic: &str, id: &str) -> Result<TaskInfo> {
        check_key(topic, id)?;
        self.check_clock()?;
        self.inner.storage.tasks().get(topic, id).await
    }

    /// One page (from 1) of a topic's tasks, optionally of one state, ordered by due time.
    pub async fn list(
        &self,
        topic: &str,
        state: Option<State>,
        page: u64,
        page_size: u64,
    ) -> Result<Page<TaskInfo>> {
        check_topic(topic)?;
        self.check_clock()?;
        if page == 0 {
            return Err(Error::invalid("page", "must be at least 1"));
        }
        let max = self.inner.ctx.limits.max_page_size;
        if page_size == 0 || page_size > max {
            return Err(Error::invalid(
                "page_size",
                format!("is {page_size}, it must be 1 to {max}"),
            ));
        }
        self.inner
            .storage
            .tasks()
            .list(topic, state, page, page_size)
            .await
    }

    /// The counters of one topic.
    pub async fn stats(&self, topic: &str) -> Result<TopicStats> {
        check_topic(topic)?;
        self.check_clock()?;
        self.inner.storage.tasks().stats(topic).await
    }

    /// Every topic with records, with its counters.
    pub async fn topics(&self) -> Result<Vec<(String, TopicStats)>> {
        self.check_clock()?;
        self.inner.storage.tasks().topics().await
    }

    /// How many DELAYED tasks of `topic` fall due in each range of `bounds` (epoch ms): for
    /// `b0 < b1 < … < bn`, n counts, the i-th of dues in `[b_i, b_(i+1))`. The dashboard's
    /// timeline ahead; see [`TaskStore::due_counts`](crate::storage::TaskStore::due_counts) for what each backend costs. `bounds` must
    /// be strictly increasing, with 2 to [`MAX_DUE_BOUNDS`] entries.
    pub async fn due_counts(&self, topic: &str, bounds: &[Millis]) -> Result<Vec<u64>> {
        check_topic(topic)?;
        check_due_bounds(bounds)?;
        self.check_clock()?;
        self.inner.storage.tasks().due_counts(topic, bounds).await
    }

    /// The cumulative activity of every topic this process has seen, by name: tasks added,
    /// fired, finished, failed attempts, dead, and the fire lateness histogram (see
    /// [`crate::metrics`] for where each is counted). It costs no storage access. Counters
    /// start from zero when the process starts; in Redis mode each instance counts what it
    /// did, so the deployment's activity is the sum over instances.
    pub fn activity(&self) -> Vec<(String, TopicActivity)> {
        self.inner.ctx.metrics.activity()
    }

    /// Pops over several topics at once with one order across them (beanstalkd's watch
    /// list), waiting like [`Queue::pop`].
    /// An empty list of topics is invalid; a topic named twice counts once.
    pub async fn pop_any(&self, topics: &[String], options: PopOptions) -> Result<Vec<Delivery>> {
        self.check_open()?;
        if topics.is_empty() {
            return Err(Error::invalid("topics", "must name at least one topic"));
        }
        for topic in topics {
            check_topic(topic)?;
        }
        self.check_pop_options(options)?;
        let mut unique: Vec<String> = Vec::with_capacity(topics.len());
        for t in topics {
            if !unique.contains(t) {
                unique.push(t.clone());
            }
        }
        if options.timeout_ms == 0 {
            return self.pop_now(&unique, options).await;
        }
        self.long_poll(&unique, options).await
    }

    /// ACTIVE → DEAD with the reason "buried" (rule 13). A given receipt must be the current
    /// attempt's.
    pub async fn bury(&self, topic: &str, id: &str, options: BuryOptions) -> Result<()> {
        check_key(topic, id)?;
        self.check_clock()?;
        let start = self.span_start();
        let result = self.inner.storage.tasks().bury(topic, id, options).await;
        self.settled(Settle::Bury, topic, id, start, &result, |_| "dead");
        result?;
        let metrics = &self.inner.ctx.metrics;
        metrics.observe_failed(&metrics.topic(topic));
        Ok(())
    }

    /// DELAYED or READY → a new due, `When::Delay(0)` meaning now, keeping body, id and
    /// retries (rule 15). Returns the new state.
    pub async fn reschedule(&self, topic: &str, id: &str, when: When) -> Result<State> {
        check_key(topic, id)?;
        self.check_clock()?;
        let limits = &self.inner.ctx.limits;
        let due = match when {
            When::Delay(delay) => {
                validate::check_duration("delay_ms", delay, limits.max_delay_ms)?;
                self.inner.ctx.clock.due_after(delay)
            }
            When::At(at) => validate::check_run_at(at, self.now(), limits)?,
        };
        self.inner.storage.tasks().reschedule(topic, id, due).await
    }

    /// beanstalkd's `kick n`: up to `max` DEAD tasks → READY, or if there are none, up to
    /// `max` DELAYED tasks. Returns how many moved.
    pub async fn kick(&self, topic: &str, max: u64) -> Result<u64> {
        check_topic(topic)?;
        self.check_clock()?;
        self.inner.storage.beanstalk().kick(topic, max).await
    }

    /// beanstalkd's `kick-job`: one DEAD or DELAYED task → READY.
    pub async fn kick_job(&self, topic: &str, id: &str) -> Result<()> {
        check_key(topic, id)?;
        self.check_clock()?;
        self.inner.storage.beanstalk().kick_job(topic, id).await
    }

    /// beanstalkd's `reserve-job`: the task `id` of `topic`, READY, DELAYED or DEAD, becomes
    /// ACTIVE with a fresh receipt and is handed out, whatever its place in the order and
    /// even while the topic is paused (see [`BeanstalkOps::take`](crate::storage::BeanstalkOps::take)).
    pub async fn take(&self, topic: &str, id: &str) -> Result<Delivery> {
        check_key(topic, id)?;
        self.check_clock()?;
        let d = self.inner.storage.beanstalk().take(topic, id).await?;
        self.delivered(std::slice::from_ref(&d));
        Ok(d)
    }

    /// Pauses `topic` for `for_ms` (until resumed when `None`), rule 14.
    pub async fn pause(&self, topic: &str, for_ms: Option<u64>) -> Result<()> {
        check_topic(topic)?;
        self.check_clock()?;
        let until = match for_ms {
            Some(ms) => {
                validate::check_duration("for_ms", ms, self.inner.ctx.limits.max_delay_ms)?;
                Some(self.inner.ctx.clock.due_after(ms))
            }
            None => None,
        };
        self.inner.storage.tasks().pause(topic, until).await
    }

    /// Ends the pause of `topic`.
    pub async fn resume(&self, topic: &str) -> Result<()> {
        check_topic(topic)?;
        self.check_clock()?;
        self.inner.storage.tasks().resume(topic).await
    }

    /// Sets the flow limits of `topic` (docs/design.md §11), replacing any it had: durable,
    /// shared by every instance, in force from the next pop of every consumer.
    pub async fn set_limits(&self, topic: &str, limits: FlowLimits) -> Result<()> {
        check_topic(topic)?;
        limits.check()?;
        self.inner
            .storage
            .tasks()
            .set_limits(topic, Some(limits))
            .await
    }

    /// Removes the limits of `topic` (nothing when it has none).
    pub async fn delete_limits(&self, topic: &str) -> Result<()> {
        check_topic(topic)?;
        self.inner.storage.tasks().set_limits(topic, None).await
    }

    /// The limits of every topic that has some, ordered by topic.
    pub async fn limits(&self) -> Result<Vec<(String, FlowLimits)>> {
        self.inner.storage.tasks().limits().await
    }

    /// The limits of `topic`, if it has some.
    pub async fn topic_limits(&self, topic: &str) -> Result<Option<FlowLimits>> {
        check_topic(topic)?;
        Ok(self
            .limits()
            .await?
            .into_iter()
            .find_map(|(t, l)| (t == topic).then_some(l)))
    }

    /// The next task of `topic` in `state` (READY, DELAYED or DEAD) without taking it.
    pub async fn peek(&self, topic: &str, state: State) -> Result<Option<TaskInfo>> {
        check_topic(topic)?;
        if !matches!(state, State::Ready | State::Delayed | State::Dead) {
            return Err(Error::invalid(
                "state",
                format!("is {state}; peek takes ready, delayed or dead"),
            ));
        }
        self.check_clock()?;
        self.inner.storage.beanstalk().peek(topic, state).await
    }

    /// The topics holding a task with this id.
    pub async fn locate(&self, id: &str) -> Result<Vec<String>> {
        check_id(id)?;
        self.check_clock()?;
        self.inner.storage.beanstalk().locate(id).await
    }

    /// A fresh number from the job id counter (1 on a fresh deployment).
    pub async fn next_job_id(&self) -> Result<u64> {
        self.check_open()?;
        self.inner.storage.job_ids().next_id().await
    }

    /// Whether the storage is reachable (readiness).
    pub async fn check_ready(&self) -> Result<()> {
        self.check_open()?;
        self.inner.storage.tasks().check_ready().await
    }

    /// Runs `handler` for every ready task of `topic` (the seeds' embedded callback mode), with
    /// at most `options.concurrency` handlers at once. `Ok` finishes the task; `Err` releases
    /// it with the error's text (backoff, retries, DEAD); a handler still running past the ttr
    /// has its task redelivered, and its late result is then refused as stale.
    pub fn on_expire<F, Fut, E>(
        &self,
        topic: &str,
        options: WorkerOptions,
        handler: F,
    ) -> Result<Workers>
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        // Not `check_open`: workers may start before the clock can bound now; their pops wait.
        if self.is_closing() {
            return Err(Error::ShuttingDown);
        }
        check_topic(topic)?;
        let workers = Workers::start(self.clone(), topic.to_owned(), options, handler);
        self.inner.workers.lock().push(workers.clone());
        Ok(workers)
    }

    /// Stops taking work: long-polls return empty, workers stop popping and their handlers in
    /// flight finish, then the storage is flushed and stopped.
    pub async fn shutdown(&self) -> Result<()> {
        if self.inner.closing.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.inner.closed_tx.send_replace(true);
        let workers = std::mem::take(&mut *self.inner.workers.lock());
        for w in workers {
            w.shutdown().await;
        }
        self.inner.storage.tasks().shutdown().await
    }

    /// Whether [`Queue::shutdown`] has begun.
    pub fn is_closing(&self) -> bool {
        self.inner.closing.load(Ordering::Acquire)
    }

    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.ctx.clock
    }
}

/// The error of an operation refused because the clock cannot bound now (HTTP 503).
fn clock_unavailable(e: ClockUnavailable) -> Error {
    Error::unavailable("reading the clock", e)
}

/// `bounds` of [`Queue::due_counts`]: 2 to [`MAX_DUE_BOUNDS`] strictly increasing instants.
fn check_due_bounds(bounds: &[Millis]) -> Result<()> {
    if bounds.len() < 2 || bounds.len() > MAX_DUE_BOUNDS {
        return Err(Error::invalid(
            "bounds",
            format!(
                "has {} entries, it must have 2 to {MAX_DUE_BOUNDS}",
                bounds.len()
            ),
        ));
    }
    if let Some(i) = bounds.windows(2).position(|w| w[0] >= w[1]) {
        return Err(Error::invalid(
            "bounds",
            format!(
                "must be strictly increasing, but entry {} ({}) is not below entry {} ({})",
                i,
                bounds[i],
                i + 1,
                bounds[i + 1]
            ),
        ));
    }
    Ok(())
}

/// The add span of a traced task, between its validation and its storage's answer.
struct AddSpan {
    topic: String,
    id: String,
    trace: Option<delayq_core::TraceContext>,
    start: Millis,
}

/// The caller's current trace context, the parent of a settle span: the OpenTelemetry
/// context of the calling task (an HTTP request's `traceparent`, which the server makes
/// current, or a callback's task).
fn caller_trace() -> Option<delayq_core::TraceContext> {
    #[cfg(feature = "opentelemetry")]
    {
        crate::otel::current()
    }
    #[cfg(not(feature = "opentelemetry"))]
    {
        None
    }
}

fn check_key(topic: &str, id: &str) -> Result<()> {
    check_topic(topic)?;
    check_id(id)?;
    Ok(())
}
