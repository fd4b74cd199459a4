//! The conformance suite: every rule of docs/design.md §2 and every operation of §3 as one
//! test, run against any [`Backend`]. The cases are grouped by the storage concern they check:
//! - [`tasks`]: rules 1–10 of the task core ([`delayq::TaskStore`]) and callbacks;
//! - [`priority_pause_bury`]: rules 11–15 (priorities, pop over several topics, bury, pause,
//!   reschedule);
//! - [`dashboard_reads`]: what the dashboard reads (due-time range counts, per-topic activity);
//! - [`beanstalk`]: the beanstalkd extras ([`delayq::BeanstalkOps`]);
//! - [`job_ids`]: the job id counter ([`delayq::JobIds`]);
//! - [`settings`]: the settings store ([`delayq::SettingsStore`]);
//! - [`schedules`]: the recurring schedules of §9, over the task core and the settings store;
//! - [`trace`]: trace contexts carried by tasks and schedules (docs/tracing.md);
//! - [`spans`]: delayq's own spans of a traced task's events (every case runs with them on,
//!   recorded in [`Harness::spans`]).
//! - [`expiry`]: task expiry (docs/flow-control.md).
//! - [`flow`]: flow limits of topics and keys (docs/flow-control.md), run by [`flow_suite!`]
//!   on every backend.
//!
//! Beside the suite, [`consumers`] holds what a backend that serves concurrent consumers in
//! rounds checks with a counter of its rounds, and [`recorded`] is the recorded mixed load that the chaos and failover
//! tests of the shared backends run over several instances and check with the history
//! checker.
//!
//! A backend crate adds one line to an integration test file:
//!
//! ```text
//! delayq_conformance::suite!(|ctx| async move { my_backend::start(ctx).await });
//! ```
//!
//! The constructor receives a [`StorageContext`] whose clock is a [`ManualClock`], so rules
//! about time are checked exactly: a test moves the clock to one millisecond before a due time
//! and checks nothing is visible, then to the due time and checks it is. Effects of the
//! backend's own timers (promotion, ttr expiry) happen asynchronously after the clock moves,
//! so tests wait for them with [`Harness::eventually`], bounded in real time.

pub mod beanstalk;
pub mod consumers;
pub mod dashboard_reads;
pub mod expiry;
pub mod flow;
mod guard;
pub mod job_ids;
pub mod priority_pause_bury;
pub mod recorded;
pub mod schedules;
pub mod settings;
pub mod spans;
mod support;
pub mod tasks;
pub mod trace;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub use guard::with_guard;

use delayq::metrics::Metrics;
use delayq::{
    Backend, Clock, Delivery, Limits, ManualClock, NewTask, PopOptions, Queue, State,
    StorageContext, TaskDefaults,
};

/// The epoch millisecond every suite test starts at (a fixed instant in 2027).
pub const START_MS: u64 = 1_800_000_000_000;

/// How long [`Harness::eventually`] waits, in real time, for an asynchronous effect.
pub const EVENTUALLY: Duration = Duration::from_secs(10);

/// A queue on a backend under test, with the manual clock that drives it.
pub struct Harness {
    /// The queue under test.
    pub queue: Queue,
    /// The clock; only the test moves it.
    pub clock: ManualClock,
    /// The spans the queue recorded (all of them: the ratio is 1).
    pub spans: spans::Recorded,
}

impl Harness {
    /// Starts a backend with `make` on a fresh context (manual clock at [`START_MS`], default
    /// limits, retention 60 s) and wraps it in a [`Queue`].
    pub async fn new<F, Fut, B>(make: F) -> Harness
    where
        F: FnOnce(StorageContext) -> Fut,
        Fut: Future<Output = B>,
        B: Into<Backend>,
    {
        let clock = ManualClock::new(START_MS);
        let mut ctx = StorageContext::new(Arc::new(clock.clone()))
            .with_defaults(TaskDefaults::default())
            .with_limits(Limits::default());
        let spans = spans::Recorded::default();
        ctx.metrics = Arc::new(Metrics::with_spans(spans.spans()));
        let storage = make(ctx.clone()).await;
        Harness {
            queue: Queue::new(storage, ctx),
            clock,
            spans,
        }
    }

    /// The manual clock's time.
    pub fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Moves the clock forward.
    pub fn advance(&self, ms: u64) {
        self.clock.advance(ms);
    }

    /// Waits until `check` holds, polling; panics with `what` after [`EVENTUALLY`].
    pub async fn eventually<F, Fut>(&self, what: &str, mut check: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        let start = std::time::Instant::now();
        while start.elapsed() < EVENTUALLY {
            if check().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        panic!("timed out waiting until {what}");
    }

    /// The state of (topic, id), or `None` when it has no record.
    pub async fn state(&self, topic: &str, id: &str) -> Option<State> {
        self.queue.get(topic, id).await.ok().map(|t| t.state)
    }

    /// Waits until (topic, id) is in `state`.
    pub async fn wait_state(&self, topic: &str, id: &str, state: State) {
        self.eventually(&format!("{topic}/{id} is {state}"), || async {
            self.state(topic, id).await == Some(state)
        })
        .await;
    }

    /// Adds a task, panicking on failure.
    pub async fn add(&self, task: NewTask) {
        let (topic, id) = (task.topic.clone(), task.id.clone());
        self.queue
            .add(task)
            .await
            .unwrap_or_else(|e| panic!("adding {topic}/{id}: {e}"));
    }

    /// Pops without waiting.
    pub async fn pop_now(&self, topic: &str, count: usize) -> Vec<Delivery> {
        self.queue
            .pop(topic, PopOptions::default().count(count))
            .await
            .expect("pop")
    }

    /// Pops one task that must be ready now (waiting for the backend's promotion).
    pub async fn pop_ready(&self, topic: &str) -> Delivery {
        let start = std::time::Instant::now();
        while start.elapsed() < EVENTUALLY {
            if let Some(d) = self.pop_now(topic, 1).await.pop() {
                return d;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        panic!("no task of {topic} became ready");
    }
}

/// Generates one `#[tokio::test]` per case of every module of the suite for the backend built
/// by `$make`, a closure `|ctx: StorageContext| async move { impl Into<Backend> }`.
#[macro_export]
macro_rules! suite {
    ($make:expr) => {
        $crate::suite!(@in tasks $make;
            add_then_get, due_is_absolute, never_early, prompt_without_other_activity,
            long_poll_wakes_when_due, long_poll_times_out_empty, pop_order_is_earliest_due_first,
            pop_count_and_auto_finish, ttr_expiry_redelivers, touch_restarts_ttr,
            stale_receipt_is_conflict, finish_then_pop_acks_then_takes, finish_only_from_active, release_without_backoff_is_immediate,
            release_with_delay_overrides_backoff, backoff_kinds_delay_redelivery,
            max_retries_counts_redeliveries, zero_retries_means_one_attempt,
            unlimited_retries, dead_keeps_error_and_history, requeue_one_and_all,
            cancel_is_final, cancel_conflicts_and_not_found, duplicates_reject_replace_keep,
            replace_makes_old_receipt_stale, retention_removes_finished_and_cancelled,
            dead_is_kept_past_retention, delete_any_state, batch_add_per_task_results,
            list_orders_by_due_and_pages, stats_are_counters, topics_lists_every_topic,
            far_future_task_fires_on_time, callbacks_finish_and_release,
            callback_past_ttr_is_redelivered, callbacks_respect_concurrency, shutdown_refuses_work,
            a_long_poll_whose_first_look_meets_shutdown_returns_empty
        );
        $crate::suite!(@in priority_pause_bury $make;
            pop_order_is_priority_then_due_then_added, equal_tasks_come_out_in_added_order,
            release_priority_reorders, pop_any_orders_across_topics,
            pop_any_long_poll_wakes_on_any_topic, bury_moves_active_to_dead,
            bury_refuses_stale_receipt_and_wrong_state, pause_holds_ready_tasks,
            resume_wakes_a_waiting_pop, pause_with_end_ends_by_itself,
            pause_keeps_ttr_of_active_tasks, pause_of_an_empty_topic_is_listed,
            reschedule_delayed_task, reschedule_ready_task_keeps_body_and_retries,
            reschedule_refuses_active, binary_bodies_round_trip,
            delayed_ties_come_out_in_added_order
        );
        $crate::suite!(@in dashboard_reads $make;
            due_counts_count_delayed_tasks_by_range, activity_counts_each_topic
        );
        $crate::suite!(@in beanstalk $make;
            kick_buried_first_then_delayed, kick_job_moves_one_task,
            kicked_task_gets_its_retries_again, peek_shows_next_without_taking,
            take_hands_out_one_named_task, take_ignores_pause_and_renews_receipt
        );
        $crate::suite!(@in job_ids $make; next_job_id_starts_at_one);
        $crate::suite!(@in settings $make; settings_put_list_delete);
        $crate::suite!(@in schedules $make;
            schedule_occurrences_fire_once_on_time, schedule_delete_stops_it,
            schedule_pause_skips_occurrences, schedule_restart_loses_and_doubles_nothing
        );
        $crate::suite!(@in trace $make;
            trace_context_is_kept_through_the_life_of_a_task, replace_takes_the_new_trace_context,
            batch_tasks_keep_their_own_trace_contexts, schedule_occurrences_start_their_own_traces,
            finish_then_pop_hands_back_the_trace_context
        );
        $crate::suite!(@in spans $make;
            a_traced_task_has_a_span_for_each_event,
            release_bury_and_a_ttr_that_runs_out_have_spans,
            untraced_and_unsampled_tasks_have_no_spans,
            a_schedule_occurrence_links_to_its_schedule, an_expiry_is_a_dead_span
        );
        $crate::suite!(@in expiry $make;
            ready_task_goes_dead_at_its_expiry, task_is_never_handed_out_at_or_after_its_expiry,
            drop_deletes_the_task_at_its_expiry,
            active_task_is_not_cut_short_and_expires_when_it_comes_back,
            paused_topic_tasks_still_expire, requeue_and_kick_clear_the_expiry,
            reschedule_cannot_pass_the_expiry, replace_takes_the_new_expiry_or_none,
            batch_tasks_carry_their_own_expiry, schedule_occurrences_expire_after_their_due
        );
    };
    // One test per case of module `$module`, on a fresh backend each.
    (@in $module:ident $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let harness = $crate::Harness::new($make).await;
                $crate::$module::$case(&harness).await;
                let _ = harness.queue.shutdown().await;
            }
        )*
    };
}

/// Generates one `#[tokio::test]` per case of [`flow`] for the backend built by `$make`, like
/// [`suite!`]: the topic and key limits, for every backend.
#[macro_export]
macro_rules! flow_suite {
    ($make:expr) => {
        $crate::suite!(@in flow $make;
            max_active_bounds_active_tasks, a_waiting_pop_wakes_when_a_slot_frees,
            a_slot_is_held_until_the_ttr_passes, the_rate_bounds_hand_outs,
            a_rate_limited_pop_wakes_when_the_rate_allows, raising_a_limit_wakes_a_waiting_pop,
            limits_are_listed_replaced_and_removed, pop_any_skips_a_topic_at_its_limit,
            a_busy_key_does_not_hold_back_others
        );
    };
}

/// A fresh data directory under the test target's scratch space (`CARGO_TARGET_TMPDIR` of the
/// caller), kept after the test so a failure can be inspected.
pub fn scratch_dir(base: &str) -> std::path::PathBuf {
    tempfile::Builder::new()
        .prefix("delayq-")
        .tempdir_in(base)
        .expect("creating a scratch directory")
        .keep()
}
