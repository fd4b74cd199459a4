//! Push delivery (webhooks, docs/design.md §8): delayq itself consumes a topic that has a
//! target, POSTing each task to the target's URL when it is due.
//!
//! The dispatcher is an ordinary consumer of the [`delayq::Queue`]: it pops with a receipt,
//! then finishes (2xx) or releases with the task's backoff (anything else), so every rule of
//! the lifecycle holds in every storage mode, and in Redis mode any instance may deliver
//! (an instance that dies mid-call has its task redelivered by another after the ttr).
//!
//! Everything is bounded by design, because an unbounded pusher is what exhausts a server
//! when a target hangs: each topic has its own loop with its own concurrency (a semaphore)
//! and rate (a token bucket), all calls share a global cap, connections are pooled with a
//! limit, and answers are read only up to a bound. A target that hangs holds at most its own
//! concurrency's worth of calls; the other topics' loops never wait for it.
//!
//! Targets are stored in the storage's settings store (namespace [`META_NAMESPACE`]), so
//! they survive restarts and are shared by every instance in Redis mode; each instance reads
//! the list again when the settings store says it changed (in Redis mode a notice on the
//! events channel, from whichever instance changed it), and every
//! [`PushOptions::reload_ms`] (default 30 s) in case a notice was lost, and starts or stops
//! its topic loops to match.
//!
//! Layout: [`target`] (the checks of a target; the model is the wire's, [`wire`]), [`rules`] (pure decisions: token bucket,
//! signature, `Retry-After`, what an answer means), [`allow`] (`push_allow`), [`stats`]
//! (per-topic figures), `dispatch` (the loops and the calls).

pub mod allow;
mod dispatch;
pub mod rules;
pub mod stats;
pub mod target;

pub use allow::AllowList;
pub use dispatch::{Push, PushError, PushOptions};
pub use rules::FailureClass;
pub use stats::{LATENCY_BUCKETS_MS, PushStats};
pub use target::{PushTarget, TargetView};

/// The wire types of push delivery, re-exported.
pub use delayq_api::push as wire;

/// The namespace of the settings store that holds the targets, one key per topic.
pub const META_NAMESPACE: &str = "push";
