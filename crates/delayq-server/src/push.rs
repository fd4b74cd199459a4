//! Push delivery as the app sees it: the targets behind `/push` and the figures of `/stats`,
//! `/metrics` and the dashboard.
//!
//! The dispatcher itself is `delayq-push`; the composition root (`delayq-daemon`) hands the
//! app one behind this trait when [`AppState`](crate::AppState) is built, so this crate
//! depends on no delivery code.

use async_trait::async_trait;
use delayq_api::push::{PushStats, PushTarget};

/// The push dispatcher, as the handlers use it.
#[async_trait]
pub trait PushControl: Send + Sync + std::fmt::Debug {
    /// Sets (creates or replaces) the target of its topic, after checking it.
    async fn set(&self, target: PushTarget) -> delayq::Result<()>;
    /// The target of `topic`, if it has one.
    async fn get(&self, topic: &str) -> delayq::Result<Option<PushTarget>>;
    /// Every stored target.
    async fn list(&self) -> delayq::Result<Vec<PushTarget>>;
    /// Removes the target of `topic`; whether there was one.
    async fn delete(&self, topic: &str) -> delayq::Result<bool>;
    /// Whether `topic` is delivered by push (so clients may not pop it).
    fn has_target(&self, topic: &str) -> bool;
    /// This instance's figures for `topic`, if it had a target here.
    fn stats(&self, topic: &str) -> Option<PushStats>;
    /// This instance's figures for every topic that had a target here.
    fn all_stats(&self) -> Vec<(String, PushStats)>;
}
