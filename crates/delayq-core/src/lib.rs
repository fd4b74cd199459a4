//! The pure core of delayq.
//!
//! Everything here is plain data and plain functions: the task model and its lifecycle rules
//! (docs/design.md §1–§2), the retry/backoff policy, input validation and the hierarchical timing
//! wheel. Nothing here does IO, reads a clock or needs an async runtime: every function that
//! depends on time takes `now` (epoch milliseconds) as an argument, so the rules can be tested
//! exactly and reused by every storage backend.
//!
//! - [`task`]: states, the options a producer sets, the views a consumer sees.
//! - [`lifecycle`]: which operation applies in which state, receipts, retries and DEAD.
//! - [`backoff`]: retry schedules.
//! - [`flow`]: a topic's limits on hand-outs (concurrency, rate, per key).
//! - [`hash`]: the stable hashes that place data in shards and partitions.
//! - [`validate`]: limits, defaults and validation at the edge.
//! - [`schedule`]: recurring schedules: model, validation, occurrence times (cron, time zones).
//! - [`wheel`]: the hierarchical timing wheel that decides when things happen.

pub mod backoff;
pub mod flow;
pub mod hash;
pub mod lifecycle;
pub mod schedule;
pub mod task;
pub mod trace;
pub mod validate;
pub mod wheel;

pub use backoff::Backoff;
pub use flow::FlowLimits;
pub use lifecycle::{AfterFailure, Op, Refusal};
pub use task::{
    AddOutcome, Attempt, BuryOptions, DEFAULT_PRIORITY, Delivery, EXPIRED, Expiry, HISTORY_LEN,
    HeldBack, MaxRetries, Millis, NewTask, OnDuplicate, OnExpire, Page, Pause, Priority,
    ReleaseOptions, State, TaskInfo, TopicStats, When,
};
pub use trace::TraceContext;
pub use validate::{InvalidField, Limits, TaskDefaults, TaskSpec};
