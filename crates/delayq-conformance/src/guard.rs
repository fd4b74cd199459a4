//! A backend that keeps something alive as long as it lives: the server process a test
//! started for it (a `PostgresServer`, a `RedisServer`), so that the suite's constructor can
//! hand back only the backend and the server goes when the queue does.

use std::sync::Arc;

use async_trait::async_trait;
use delayq::{
    AddResult, Backend, BuryOptions, Delivery, FlowLimits, Held, Page, ReleaseOptions, Result,
    State, TaskInfo, TaskSpec, TaskStore, TopicStats,
};

/// `backend`, holding `guard` until the last handle of it is dropped.
pub fn with_guard<G: Send + Sync + 'static>(backend: Backend, guard: G) -> Backend {
    let tasks = Arc::new(Guarded {
        tasks: Arc::clone(backend.tasks()),
        _guard: Box::new(guard),
    });
    Backend::new(
        tasks,
        Arc::clone(backend.settings()),
        Arc::clone(backend.job_ids()),
        Arc::clone(backend.beanstalk()),
    )
}

/// The task store of a guarded backend: every call goes to the backend's own.
struct Guarded {
    tasks: Arc<dyn TaskStore>,
    _guard: Box<dyn Send + Sync>,
}

#[async_trait]
impl TaskStore for Guarded {
    async fn add(&self, tasks: Vec<TaskSpec>) -> Result<Vec<AddResult>> {
        self.tasks.add(tasks).await
    }
    async fn pop(&self, topic: &str, max: usize, auto_finish: bool) -> Result<Vec<Delivery>> {
        self.tasks.pop(topic, max, auto_finish).await
    }
    async fn pop_any(
        &self,
        topics: &[String],
        max: usize,
        auto_finish: bool,
    ) -> Result<Vec<Delivery>> {
        self.tasks.pop_any(topics, max, auto_finish).await
    }
    async fn finish(&self, topic: &str, id: &str, receipt: Option<&str>) -> Result<()> {
        self.tasks.finish(topic, id, receipt).await
    }
    async fn finish_then_pop(
        &self,
        held: Held<'_>,
        topic: &str,
        max: usize,
        auto_finish: bool,
    ) -> Result<Result<Vec<Delivery>>> {
        self.tasks
            .finish_then_pop(held, topic, max, auto_finish)
            .await
    }
    async fn release(&self, topic: &str, id: &str, options: ReleaseOptions) -> Result<State> {
        self.tasks.release(topic, id, options).await
    }
    async fn touch(&self, topic: &str, id: &str, receipt: Option<&str>) -> Result<u64> {
        self.tasks.touch(topic, id, receipt).await
    }
    async fn cancel(&self, topic: &str, id: &str) -> Result<()> {
        self.tasks.cancel(topic, id).await
    }
    async fn requeue(&self, topic: &str, id: &str) -> Result<()> {
        self.tasks.requeue(topic, id).await
    }
    async fn requeue_all(&self, topic: &str) -> Result<u64> {
        self.tasks.requeue_all(topic).await
    }
    async fn delete(&self, topic: &str, id: &str) -> Result<()> {
        self.tasks.delete(topic, id).await
    }
    async fn bury(&self, topic: &str, id: &str, options: BuryOptions) -> Result<()> {
        self.tasks.bury(topic, id, options).await
    }
    async fn reschedule(&self, topic: &str, id: &str, due_ms: u64) -> Result<State> {
        self.tasks.reschedule(topic, id, due_ms).await
    }
    async fn pause(&self, topic: &str, until_ms: Option<u64>) -> Result<()> {
        self.tasks.pause(topic, until_ms).await
    }
    async fn resume(&self, topic: &str) -> Result<()> {
        self.tasks.resume(topic).await
    }
    async fn set_limits(&self, topic: &str, limits: Option<FlowLimits>) -> Result<()> {
        self.tasks.set_limits(topic, limits).await
    }
    async fn limits(&self) -> Result<Vec<(String, FlowLimits)>> {
        self.tasks.limits().await
    }
    async fn get(&self, topic: &str, id: &str) -> Result<TaskInfo> {
        self.tasks.get(topic, id).await
    }
    async fn list(
        &self,
        topic: &str,
        state: Option<State>,
        page: u64,
        page_size: u64,
    ) -> Result<Page<TaskInfo>> {
        self.tasks.list(topic, state, page, page_size).await
    }
    async fn stats(&self, topic: &str) -> Result<TopicStats> {
        self.tasks.stats(topic).await
    }
    async fn topics(&self) -> Result<Vec<(String, TopicStats)>> {
        self.tasks.topics().await
    }
    async fn due_counts(&self, topic: &str, bounds: &[u64]) -> Result<Vec<u64>> {
        self.tasks.due_counts(topic, bounds).await
    }
    fn instance(&self) -> Option<String> {
        self.tasks.instance()
    }
    async fn check_ready(&self) -> Result<()> {
        self.tasks.check_ready().await
    }
    async fn shutdown(&self) -> Result<()> {
        self.tasks.shutdown().await
    }
}
