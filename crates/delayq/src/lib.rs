//! delayq: a millisecond-precise delay queue.
//!
//! A producer adds a task due at some moment; at that moment it becomes ready, and a consumer
//! pops it (or a callback gets it) and finishes it, or gets it again after its time to run.
//! See `docs/design.md` in the repository for the contract.
//!
//! ```no_run
//! # async fn demo() -> delayq::Result<()> {
//! use delayq::{NewTask, PopOptions, Queue};
//!
//! let queue = Queue::memory();
//! queue.add(NewTask::new("order-auto-cancel", "cancel-123").delay_ms(15 * 60_000)).await?;
//! if let Some(task) = queue.pop_one("order-auto-cancel", 30_000).await? {
//!     queue.finish(&task.topic, &task.id, Some(&task.receipt)).await?;
//! }
//! # Ok(()) }
//! ```
//!
//! Layout:
//! - [`delayq_core`] (re-exported): task model, lifecycle rules, backoff, validation, the
//!   timing wheel. Pure, no IO.
//! - [`storage`]: the storage traits by concern ([`TaskStore`], [`SettingsStore`], [`JobIds`],
//!   [`BeanstalkOps`]), the [`Backend`] that holds one of each, and the built-in backends.
//! - [`Queue`]: validation, long-poll, callbacks ([`Queue::on_expire`]).
//! - [`schedule`]: recurring schedules, each occurrence an ordinary task ([`Scheduler`]).
//! - [`clock`], [`waiters`], [`metrics`]: what the pieces share.

pub mod clock;
pub mod error;
pub mod metrics;
#[cfg(feature = "opentelemetry")]
pub mod otel;
pub mod queue;
pub mod schedule;
pub mod spans;
pub mod storage;
pub mod waiters;
pub mod workers;

pub use delayq_core::{self as core, *};

pub use clock::{Clock, ClockUnavailable, ManualClock, SystemClock};
pub use error::{Cause, Error, ErrorKind, Outcome, Result};
pub use metrics::TopicActivity;
pub use queue::{PopOptions, Queue};
pub use schedule::{PutOutcome, ScheduleInfo, Scheduler, SchedulerOptions, TickReport};
pub use spans::Spans;
pub use storage::{
    AddResult, Backend, BeanstalkOps, Held, JobIds, LIMITS_NAMESPACE, MAX_DUE_BOUNDS,
    ReleaseOptions, SettingsChanges, SettingsStore, StorageContext, TaskStore,
};
pub use workers::{WorkerOptions, Workers};
