//! The job id counter (beanstalkd's numeric job ids).

use async_trait::async_trait;

use crate::error::Result;

/// A counter of job ids for a whole deployment.
#[async_trait]
pub trait JobIds: Send + Sync + 'static {
    /// The next number of the job id counter: 1 on a fresh data directory (embedded) or Redis
    /// deployment, never repeated, durable.
    async fn next_id(&self) -> Result<u64>;
}
