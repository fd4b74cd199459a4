//! The push dispatcher of `delayq-push` behind the app's [`PushControl`].

use async_trait::async_trait;
use delayq_api::push::{PushStats, PushTarget};
use delayq_server::PushControl;

/// The dispatcher as the app uses it (tests that build an [`delayq_server::AppState`] by hand
/// wrap theirs in it too).
#[derive(Debug)]
pub struct PushDispatcher(pub delayq_push::Push);

#[async_trait]
impl PushControl for PushDispatcher {
    async fn set(&self, target: PushTarget) -> delayq::Result<()> {
        self.0.set(target).await
    }

    async fn get(&self, topic: &str) -> delayq::Result<Option<PushTarget>> {
        self.0.get(topic).await
    }

    async fn list(&self) -> delayq::Result<Vec<PushTarget>> {
        self.0.list().await
    }

    async fn delete(&self, topic: &str) -> delayq::Result<bool> {
        self.0.delete(topic).await
    }

    fn has_target(&self, topic: &str) -> bool {
        self.0.has_target(topic)
    }

    fn stats(&self, topic: &str) -> Option<PushStats> {
        self.0.stats(topic)
    }

    fn all_stats(&self) -> Vec<(String, PushStats)> {
        self.0.all_stats()
    }
}
