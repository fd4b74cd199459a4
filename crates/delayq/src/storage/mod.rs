//! The storage traits every backend implements, and what a backend is given to run.
//!
//! Storage is split by concern, so that a front-end feature or a new backend touches only the
//! part it needs:
//! - [`TaskStore`]: the task transitions and reads (add, pop, finish, … list, stats, due
//!   counts), and the pauses and flow limits of topics, which decide what a pop takes;
//! - [`SettingsStore`]: (namespace, key) → bytes beside the tasks, with [`SettingsChanges`];
//! - [`JobIds`]: the job id counter;
//! - [`BeanstalkOps`]: what only the beanstalk protocol needs (kick, take, peek, locate).
//!
//! A [`Backend`] holds one implementation of each; [`crate::Queue`] holds a backend.
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
//!   (and the settings to a log of their own), compacted by snapshots.
//! - Redis lives in its own crate (`delayq-redis`), PostgreSQL in `delayq-postgres`, behind
//!   the same traits.
//!
//! [`coalesce`] is for backends: concurrent calls on one key served together, one round of
//! storage work for many callers (Redis and PostgreSQL use it).
//!
//! A failure's [`Outcome`](crate::Outcome) is part of the contract: a backend reports
//! [`Outcome::Unknown`](crate::Outcome::Unknown) whenever the operation may have happened
//! despite the error, and never claims [`Outcome::NotApplied`](crate::Outcome::NotApplied)
//! unless nothing changed.

mod backend;
mod beanstalk;
pub mod coalesce;
pub mod embedded;
pub mod engine;
mod job_ids;
pub mod memory;
mod settings;
mod tasks;

pub use backend::Backend;
pub use beanstalk::BeanstalkOps;
pub use delayq_core::ReleaseOptions;
pub use job_ids::JobIds;
pub use settings::{SettingsChanges, SettingsStore};
pub use tasks::{Held, TaskStore, finish_then_pop_in_two_steps};

use std::sync::Arc;

use delayq_core::{AddOutcome, Limits, TaskDefaults};

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

/// The most bounds [`TaskStore::due_counts`] takes (so at most 999 ranges).
pub const MAX_DUE_BOUNDS: usize = 1_000;

/// The most DELAYED tasks the engine counts under one hold of a shard's lock in
/// [`TaskStore::due_counts`]; it then lets other operations in and goes on.
pub const DUE_COUNT_STEP: usize = 65_536;

/// The settings-store namespace of the topics' flow limits (topic → JSON of
/// [`FlowLimits`](delayq_core::FlowLimits)).
pub const LIMITS_NAMESPACE: &str = "limits";

/// The limits of the (topic, JSON) pairs read from [`LIMITS_NAMESPACE`] of a settings store.
/// A value that does not parse is reported and left out: the topic then has no limits until
/// they are set again.
pub fn decode_limits(stored: Vec<(String, Vec<u8>)>) -> Vec<(String, delayq_core::FlowLimits)> {
    stored
        .into_iter()
        .filter_map(|(topic, value)| match serde_json::from_slice(&value) {
            Ok(limits) => Some((topic, limits)),
            Err(e) => {
                tracing::error!(topic, error = %e, "stored flow limits do not parse; the topic has none until they are set again");
                None
            }
        })
        .collect()
}

/// A random 64-bit value (std's per-process random hash keys, mixed with the time): the seed
/// of a shared-storage instance's receipts and id, and of its lease offset in Redis mode.
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// The result of one task of a batch add.
pub type AddResult = Result<AddOutcome>;
