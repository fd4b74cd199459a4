//! The operations only beanstalkd's protocol needs, beside the task core.

use async_trait::async_trait;
use delayq_core::{Delivery, State, TaskInfo};

use crate::error::Result;

/// beanstalkd's extras: `kick`, `kick-job`, `reserve-job`, the peeks and finding a job by id
/// alone. Each is one atomic transition or read, like those of
/// [`TaskStore`](super::TaskStore), over the same tasks; they are apart because only the
/// beanstalk front end needs them, and a backend can leave them to a later version of itself
/// without touching its core.
#[async_trait]
pub trait BeanstalkOps: Send + Sync + 'static {
    /// beanstalkd's `kick n`: up to `max` DEAD tasks of `topic` → READY (oldest buried
    /// first); if the topic has none, up to `max` DELAYED tasks → READY (earliest due first).
    /// Returns how many moved.
    async fn kick(&self, topic: &str, max: u64) -> Result<u64>;

    /// beanstalkd's `kick-job`: one DEAD or DELAYED task → READY.
    async fn kick_job(&self, topic: &str, id: &str) -> Result<()>;

    /// beanstalkd's `reserve-job`: one READY, DELAYED or DEAD task → ACTIVE with a fresh
    /// receipt, taken by id whatever its place in the order. A DELAYED task is taken as if
    /// kicked first (due now), a DEAD one as if requeued first (retries reset). A pause of the
    /// topic does not hold it back: beanstalkd hands a named job out of a paused tube too
    /// (rule 14 governs what pops choose, not a task named by id). An ACTIVE, FINISHED or
    /// CANCELLED task is refused (`Op::Take`), an unknown one is not found.
    async fn take(&self, topic: &str, id: &str) -> Result<Delivery>;

    /// The next task of `topic` in `state` without taking it: READY in pop order, DELAYED
    /// earliest due first, DEAD oldest first (beanstalkd's peek-ready/-delayed/-buried).
    async fn peek(&self, topic: &str, state: State) -> Result<Option<TaskInfo>>;

    /// The topics that hold a task with this id, in name order (beanstalkd's job ids name no
    /// tube).
    async fn locate(&self, id: &str) -> Result<Vec<String>>;
}
