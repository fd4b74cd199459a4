//! The scheduler of recurring schedules (docs/design.md §9, `docs/schedules.md`).
//!
//! A schedule lives in the storage's settings store (namespace [`NAMESPACE`]), so it is
//! durable and, in Redis mode, shared by every instance. Each occurrence becomes an ordinary
//! task with the id `<name>@<due ms>`, added ahead of its due with `on_duplicate: keep`: any
//! number of instances that add the same occurrence add it once, and every guarantee of a
//! task (durable, never early, retries, dead letter) applies to it.
//!
//! **How the next occurrence gets added.** Not from inside the engine's or the Redis
//! promoter's firing path: a [`Scheduler`] looks ([`Scheduler::tick`]) when the pending
//! occurrence becomes due and adds the next one then. That keeps the storage backends (the
//! engine, the Lua scripts) free of schedule logic, works the same on every backend, and costs
//! one look per occurrence per instance. What makes it safe is a durable per-schedule cursor
//! (namespace [`CURSOR_NAMESPACE`]): the latest occurrence added. A look computes the next
//! occurrences from the cursor and the schedule alone ([`delayq_core::schedule::plan`]), adds
//! them, and only then moves the cursor, so a crash between the two re-adds the same ids
//! (which `keep` absorbs) and never skips one; instances with slightly different clocks
//! compute the same ids.
//!
//! Every look is driven by the queue's [`Clock`](crate::Clock): [`Scheduler::tick`] takes
//! `now`, so tests drive it with the manual clock, and [`Scheduler::spawn`] runs the loop that
//! sleeps until the earliest pending occurrence (or a change, or the refresh interval that
//! picks up changes made by other instances).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use delayq_core::schedule::{self, Schedule, ScheduleDef, occurrence_id, plan};
use delayq_core::{Millis, NewTask, OnDuplicate};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::error::{Error, ErrorKind, Result};
use crate::queue::Queue;

/// The settings namespace of the schedules (key `<topic>|<name>`).
pub const NAMESPACE: &str = "schedules";

/// The settings namespace of the cursors: per schedule, the latest occurrence added.
pub const CURSOR_NAMESPACE: &str = "schedule-cursors";

/// The separator of topic and name in a settings key: in neither charset.
const KEY_SEPARATOR: char = '|';

/// The most upcoming occurrences one view lists.
pub const MAX_UPCOMING: usize = 1_000;

/// How a [`Scheduler`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchedulerOptions {
    /// How old an occurrence may be when a look finds it and still be added on its own
    /// (late, not missed). Older ones follow the schedule's `missed` policy. Default 5 s.
    pub grace_ms: u64,
    /// The longest sleep of the loop between looks. A schedule changed through any instance
    /// wakes the loop at once (a notice of the settings store; in Redis mode over the events
    /// channel); this bound is the safety net for a lost notice. Each look reads two settings
    /// hashes. Default 30 s.
    pub refresh_ms: u64,
    /// How long the loop waits after a look that failed (storage down). Default 1 s.
    pub retry_ms: u64,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            grace_ms: 5_000,
            refresh_ms: 30_000,
            retry_ms: 1_000,
        }
    }
}

impl SchedulerOptions {
    /// Sets the grace of late occurrences.
    pub fn grace_ms(mut self, ms: u64) -> Self {
        self.grace_ms = ms;
        self
    }

    /// Sets the refresh interval of the loop.
    pub fn refresh_ms(mut self, ms: u64) -> Self {
        self.refresh_ms = ms.max(1);
        self
    }
}

/// A schedule as stored: the definition and when it was written.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Stored {
    def: ScheduleDef,
    created_at_ms: Millis,
    updated_at_ms: Millis,
}

/// A schedule as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScheduleInfo {
    /// The definition.
    pub def: ScheduleDef,
    /// When it was created.
    pub created_at_ms: Millis,
    /// When it was last changed.
    pub updated_at_ms: Millis,
    /// The latest occurrence added as a task (the pending one while it is in the future).
    pub cursor_ms: Option<Millis>,
    /// The next occurrences that will fire if nothing changes (none while paused).
    pub upcoming_ms: Vec<Millis>,
}

/// What [`Scheduler::put`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PutOutcome {
    /// A new schedule.
    Created,
    /// An existing schedule got a new definition.
    Updated,
    /// The same definition was there already; nothing was written.
    Unchanged,
}

impl PutOutcome {
    /// The outcome's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            PutOutcome::Created => "created",
            PutOutcome::Updated => "updated",
            PutOutcome::Unchanged => "unchanged",
        }
    }
}

/// What one look did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TickReport {
    /// Occurrences added as new tasks.
    pub added: usize,
    /// Occurrences that were there already (another instance added them).
    pub existed: usize,
    /// Schedules whose look failed on a storage error; the loop looks again soon.
    pub failed: usize,
    /// Stored schedules that no longer validate (a limit such as `min_every_ms` was raised
    /// after they were written): skipped and logged until they are fixed or deleted.
    pub invalid: usize,
    /// The earliest pending occurrence: when to look again.
    pub next_wake_ms: Option<Millis>,
}

struct Inner {
    queue: Queue,
    options: SchedulerOptions,
    changed: Notify,
    stopping: AtomicBool,
}

/// Manages the schedules of one queue and adds their occurrences. Cheap to clone.
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

fn key(topic: &str, name: &str) -> String {
    format!("{topic}{KEY_SEPARATOR}{name}")
}

fn corrupt(what: &str, e: impl std::fmt::Display) -> Error {
    Error::storage(format!("reading {what}"), e.to_string())
}

impl Scheduler {
    /// A scheduler of `queue`'s schedules.
    pub fn new(queue: Queue, options: SchedulerOptions) -> Self {
        Scheduler {
            inner: Arc::new(Inner {
                queue,
                options,
                changed: Notify::new(),
                stopping: AtomicBool::new(false),
            }),
        }
    }

    /// The queue it adds occurrences to.
    pub fn queue(&self) -> &Queue {
        &self.inner.queue
    }

    fn now(&self) -> Millis {
        self.inner.queue.context().clock.now_ms()
    }

    /// Validates `def` against the queue's limits: the errors name the field.
    pub fn validate(&self, def: ScheduleDef) -> Result<Schedule> {
        Ok(schedule::validate_schedule(
            def,
            &self.inner.queue.context().limits,
        )?)
    }

    async fn read(&self, topic: &str, name: &str) -> Result<Option<Stored>> {
        let k = key(topic, name);
        let all = self.inner.queue.settings().list(NAMESPACE).await?;
        match all.into_iter().find(|(key, _)| *key == k) {
            Some((_, bytes)) => Ok(Some(
                serde_json::from_slice(&bytes).map_err(|e| corrupt("a schedule", e))?,
            )),
            None => Ok(None),
        }
    }

    async fn cursor(&self, topic: &str, name: &str) -> Result<Option<Millis>> {
        let k = key(topic, name);
        let all = self.inner.queue.settings().list(CURSOR_NAMESPACE).await?;
        Ok(all
            .into_iter()
            .find(|(key, _)| *key == k)
            .and_then(|(_, v)| parse_cursor(&v)))
    }

    async fn write(&self, stored: &Stored) -> Result<()> {
        let bytes = serde_json::to_vec(stored).map_err(|e| corrupt("a schedule", e))?;
        self.inner
            .queue
            .settings()
            .put(NAMESPACE, &key(&stored.def.topic, &stored.def.name), bytes)
            .await
    }

    async fn put_cursor(&self, topic: &str, name: &str, cursor: Millis) -> Result<()> {
        self.inner
            .queue
            .settings()
            .put(
                CURSOR_NAMESPACE,
                &key(topic, name),
                cursor.to_string().into_bytes(),
            )
            .await
    }

    /// Cancels the pending occurrence of a schedule whose cursor is in the future. One that is
    /// already due has fired and is left alone; one that is gone or finished is fine.
    async fn cancel_pending(&self, topic: &str, name: &str, cursor: Option<Millis>) -> Result<()> {
        let Some(c) = cursor else { return Ok(()) };
        if c <= self.now() {
            return Ok(());
        }
        match self
            .inner
            .queue
            .cancel(topic, &occurrence_id(name, c))
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::Conflict) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Creates the schedule `def`, or gives an existing one of the same topic and name the new
    /// definition. A change of its times (cron, interval, zone, start, end) cancels the pending
    /// occurrence and starts the new series after now; pausing cancels the pending
    /// occurrence; resuming starts after now (occurrences during the pause are skipped).
    /// Other changes (body, priority, ...) apply from the next occurrence added.
    pub async fn put(&self, def: ScheduleDef) -> Result<PutOutcome> {
        let schedule = self.validate(def)?;
        let def = schedule.def;
        let now = self.now();
        let old = self.read(&def.topic, &def.name).await?;
        let outcome = match &old {
            None => PutOutcome::Created,
            Some(old) if old.def == def => return Ok(PutOutcome::Unchanged),
            Some(_) => PutOutcome::Updated,
        };
        let stored = Stored {
            created_at_ms: old.as_ref().map_or(now, |o| o.created_at_ms),
            updated_at_ms: now,
            def: def.clone(),
        };
        if let Some(old) = &old {
            let times_changed = (
                &old.def.cron,
                old.def.every_ms,
                &old.def.timezone,
                old.def.start_ms,
                old.def.end_ms,
            ) != (
                &def.cron,
                def.every_ms,
                &def.timezone,
                def.start_ms,
                def.end_ms,
            );
            let cursor = self.cursor(&def.topic, &def.name).await?;
            if times_changed || (def.paused && !old.def.paused) {
                self.cancel_pending(&def.topic, &def.name, cursor).await?;
            }
            if times_changed {
                self.inner
                    .queue
                    .settings()
                    .delete(CURSOR_NAMESPACE, &key(&def.topic, &def.name))
                    .await?;
            }
            if old.def.paused && !def.paused && !times_changed {
                // Resumed: the series goes on after now; what fell in the pause is skipped.
                self.put_cursor(&def.topic, &def.name, now).await?;
            }
        }
        self.write(&stored).await?;
        self.inner.changed.notify_one();
        Ok(outcome)
    }

    /// Pauses a schedule: no occurrence is added while it is paused, and the pending one is
    /// cancelled.
    pub async fn pause(&self, topic: &str, name: &str) -> Result<()> {
        self.set_paused(topic, name, true).await
    }

    /// Resumes a paused schedule: the next occurrence after now is added; those that fell in
    /// the pause are skipped.
    pub async fn resume(&self, topic: &str, name: &str) -> Result<()> {
        self.set_paused(topic, name, false).await
    }

    async fn set_paused(&self, topic: &str, name: &str, paused: bool) -> Result<()> {
        check_key(topic, name)?;
        let mut stored = self
            .read(topic, name)
            .await?
            .ok_or_else(|| not_found(topic, name))?;
        stored.def.paused = paused;
        self.put(stored.def).await.map(|_| ())
    }

    /// Deletes a schedule and cancels its pending occurrence. Occurrences that already fired
    /// are ordinary tasks and stay.
    pub async fn delete(&self, topic: &str, name: &str) -> Result<()> {
        check_key(topic, name)?;
        let k = key(topic, name);
        let storage = self.inner.queue.settings();
        let cursor = self.cursor(topic, name).await?;
        if !storage.delete(NAMESPACE, &k).await? {
            return Err(not_found(topic, name));
        }
        self.cancel_pending(topic, name, cursor).await?;
        storage.delete(CURSOR_NAMESPACE, &k).await?;
        self.inner.changed.notify_one();
        Ok(())
    }

    /// One schedule with its next `upcoming` occurrences (at most [`MAX_UPCOMING`]).
    pub async fn get(&self, topic: &str, name: &str, upcoming: usize) -> Result<ScheduleInfo> {
        check_key(topic, name)?;
        let stored = self
            .read(topic, name)
            .await?
            .ok_or_else(|| not_found(topic, name))?;
        let cursor = self.cursor(topic, name).await?;
        Ok(self.info(stored, cursor, upcoming))
    }

    /// Every schedule (of `topic` when given), ordered by topic and name, each with its next
    /// `upcoming` occurrences.
    pub async fn list(&self, topic: Option<&str>, upcoming: usize) -> Result<Vec<ScheduleInfo>> {
        if let Some(topic) = topic {
            delayq_core::validate::check_topic(topic)?;
        }
        let (all, cursors) = self.read_all().await?;
        let mut out = Vec::new();
        for (k, bytes) in all {
            let stored: Stored =
                serde_json::from_slice(&bytes).map_err(|e| corrupt("a schedule", e))?;
            if topic.is_some_and(|t| t != stored.def.topic) {
                continue;
            }
            let cursor = cursors.get(&k).copied();
            out.push(self.info(stored, cursor, upcoming));
        }
        out.sort_by(|a, b| (&a.def.topic, &a.def.name).cmp(&(&b.def.topic, &b.def.name)));
        Ok(out)
    }

    async fn read_all(&self) -> Result<(Vec<(String, Vec<u8>)>, HashMap<String, Millis>)> {
        let storage = self.inner.queue.settings();
        let all = storage.list(NAMESPACE).await?;
        let cursors = storage
            .list(CURSOR_NAMESPACE)
            .await?
            .into_iter()
            .filter_map(|(k, v)| parse_cursor(&v).map(|c| (k, c)))
            .collect();
        Ok((all, cursors))
    }

    fn info(&self, stored: Stored, cursor: Option<Millis>, upcoming: usize) -> ScheduleInfo {
        let upcoming = upcoming.min(MAX_UPCOMING);
        let now = self.now();
        let mut upcoming_ms = Vec::new();
        // A stored schedule that no longer validates is still shown, with no occurrences.
        let valid = self.validate(stored.def.clone()).ok();
        if let Some(schedule) = valid.filter(|_| !stored.def.paused && upcoming > 0) {
            let tt = &schedule.timetable;
            match cursor {
                Some(c) if c > now => {
                    upcoming_ms.push(c);
                    upcoming_ms.extend(tt.upcoming(c, upcoming - 1));
                }
                _ => upcoming_ms = tt.upcoming(now, upcoming),
            }
        }
        ScheduleInfo {
            def: stored.def,
            created_at_ms: stored.created_at_ms,
            updated_at_ms: stored.updated_at_ms,
            cursor_ms: cursor,
            upcoming_ms,
        }
    }

    /// One look at every schedule at `now`: adds the occurrences that are due to be added
    /// ([`delayq_core::schedule::plan`]) and moves the cursors. A schedule whose look fails is
    /// counted in [`TickReport::failed`] and looked at again next time; the others go on.
    pub async fn tick(&self, now: Millis) -> Result<TickReport> {
        let (all, cursors) = self.read_all().await?;
        let grace = self.inner.options.grace_ms;
        let mut report = TickReport::default();
        let mut live = std::collections::HashSet::new();
        for (k, bytes) in all {
            live.insert(k.clone());
            let schedule = match serde_json::from_slice::<Stored>(&bytes)
                .map_err(|e| corrupt("a schedule", e))
                .and_then(|s| self.validate(s.def))
            {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(key = %k, error = %e, "a stored schedule cannot be used; skipped");
                    report.invalid += 1;
                    continue;
                }
            };
            let cursor = cursors.get(&k).copied();
            let p = plan(&schedule, cursor, now, grace);
            match self.apply(&schedule, cursor, &p.add, &mut report).await {
                Ok(()) => {
                    if let Some(w) = p.wake_at {
                        report.next_wake_ms = Some(report.next_wake_ms.map_or(w, |n| n.min(w)));
                    }
                }
                Err(e) => {
                    tracing::warn!(topic = %schedule.def.topic, name = %schedule.def.name, error = %e, "schedule look failed; trying again");
                    report.failed += 1;
                }
            }
        }
        // A cursor without its schedule (deleted while a look was under way) is dropped.
        for k in cursors.keys().filter(|k| !live.contains(*k)) {
            self.inner
                .queue
                .settings()
                .delete(CURSOR_NAMESPACE, k)
                .await?;
        }
        Ok(report)
    }

    /// Adds the occurrences `dues` of `schedule` in order, then moves its cursor to the last
    /// one added. Stops at the first failure, having moved the cursor only past what was added.
    async fn apply(
        &self,
        schedule: &Schedule,
        cursor: Option<Millis>,
        dues: &[Millis],
        report: &mut TickReport,
    ) -> Result<()> {
        let def = &schedule.def;
        let mut last = None;
        let mut failure = None;
        for &due in dues {
            let mut task = NewTask::new(def.topic.clone(), occurrence_id(&def.name, due))
                .body(def.body.clone())
                .run_at_ms(due)
                .on_duplicate(OnDuplicate::Keep);
            task.priority = def.priority;
            task.ttr_ms = def.ttr_ms;
            task.max_retries = def.max_retries;
            task.backoff = def.backoff.clone();
            task.trace = def
                .trace
                .as_ref()
                .map(|t| delayq_core::schedule::occurrence_trace(t, &def.name, due));
            if let Some(expires_in) = def.expires_in_ms {
                let at = due.saturating_add(expires_in);
                if at <= self.now() {
                    // A missed occurrence whose expiry passed too: it would expire unseen.
                    last = Some(due);
                    continue;
                }
                task = task.expires_at_ms(at);
                task.on_expire = def.on_expire.unwrap_or_default();
            }
            let traced = task.trace.clone().zip(def.trace.clone());
            let id = task.id.clone();
            match self.inner.queue.add(task).await {
                Ok(delayq_core::AddOutcome::Existed) => report.existed += 1,
                Ok(_) => {
                    report.added += 1;
                    if let Some((occurrence, schedule)) = traced {
                        let ctx = self.inner.queue.context();
                        ctx.metrics.spans().scheduled(
                            &def.topic,
                            &id,
                            &occurrence,
                            &schedule,
                            ctx.clock.now_ms(),
                        );
                    }
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
            last = Some(due);
        }
        if let Some(last) = last
            && cursor.is_none_or(|c| last > c)
        {
            self.put_cursor(&def.topic, &def.name, last).await?;
        }
        failure.map_or(Ok(()), Err)
    }

    /// Starts the loop that looks whenever the earliest pending occurrence becomes due, a
    /// schedule changes through this scheduler, or the refresh interval passes. It ends at
    /// [`Scheduler::stop`] or when the queue shuts down.
    pub fn spawn(&self) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move { this.run().await })
    }

    async fn run(&self) {
        let options = self.inner.options;
        let clock = self.inner.queue.context().clock.clone();
        let mut changes = self.inner.queue.context().settings.subscribe(NAMESPACE);
        loop {
            if self.inner.stopping.load(Ordering::Acquire) || self.inner.queue.is_closing() {
                return;
            }
            let now = clock.now_ms();
            let mut wake = now.saturating_add(options.refresh_ms);
            if clock.check().is_ok() {
                match self.tick(now).await {
                    Ok(report) => {
                        if let Some(next) = report.next_wake_ms {
                            wake = wake.min(next);
                        }
                        if report.failed > 0 {
                            wake = wake.min(now.saturating_add(options.retry_ms));
                        }
                    }
                    Err(e) => {
                        if !self.inner.queue.is_closing() {
                            tracing::warn!(error = %e, "scheduler look failed; trying again");
                        }
                        wake = wake.min(now.saturating_add(options.retry_ms));
                    }
                }
            } else {
                wake = wake.min(now.saturating_add(options.retry_ms));
            }
            tokio::select! {
                _ = clock.sleep_until(wake) => {}
                _ = self.inner.changed.notified() => {}
                Ok(()) = changes.changed() => {}
            }
        }
    }

    /// Stops the loop started by [`Scheduler::spawn`].
    pub fn stop(&self) {
        self.inner.stopping.store(true, Ordering::Release);
        self.inner.changed.notify_one();
    }
}

fn parse_cursor(bytes: &[u8]) -> Option<Millis> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

fn check_key(topic: &str, name: &str) -> Result<()> {
    delayq_core::validate::check_topic(topic)?;
    schedule::check_schedule_name(name)?;
    Ok(())
}

fn not_found(topic: &str, name: &str) -> Error {
    Error::ScheduleNotFound {
        topic: topic.to_owned(),
        name: name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{ManualClock, StorageContext};

    #[tokio::test]
    async fn a_stored_schedule_that_no_longer_validates_is_shown_and_skipped() {
        let clock = ManualClock::new(1_800_000_000_000);
        let queue = Queue::memory_with(StorageContext::new(Arc::new(clock)));
        let scheduler = Scheduler::new(queue.clone(), SchedulerOptions::default());
        // Written when the minimum interval was lower than it is now.
        let mut def = ScheduleDef::default();
        def.topic = "t".into();
        def.name = "fast".into();
        def.every_ms = Some(10);
        let stored = Stored {
            def,
            created_at_ms: 1,
            updated_at_ms: 1,
        };
        scheduler.write(&stored).await.unwrap();
        let report = scheduler.tick(1_800_000_000_000).await.unwrap();
        assert_eq!((report.invalid, report.failed, report.added), (1, 0, 0));
        let list = scheduler.list(None, 3).await.unwrap();
        assert_eq!(list.len(), 1);
        assert!(list[0].upcoming_ms.is_empty());
        scheduler.delete("t", "fast").await.unwrap();
    }
}
