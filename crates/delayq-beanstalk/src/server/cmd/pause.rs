//! `pause-tube`.

use crate::proto::Reply;
use crate::server::session::{Session, has_jobs, internal};

impl Session {
    /// `pause-tube <tube> <delay>`: a pause of the topic, durable in delayq.
    pub(crate) async fn pause_tube(&self, name: &str, delay: u32) -> Reply {
        let queue = &self.server.queue;
        let exists = match queue.stats(name).await {
            Ok(s) => has_jobs(&s) || self.server.tubes.is_referenced(name),
            Err(e) => return internal("pause-tube", &e),
        };
        if !exists {
            return Reply::NotFound;
        }
        // beanstalkd pauses for at least a moment even for 0, so that waiting clients wake.
        let for_ms = (u64::from(delay) * 1_000).clamp(1, queue.context().limits.max_delay_ms);
        match queue.pause(name, Some(for_ms)).await {
            Ok(()) => {
                self.server.tubes.with(name, |t| {
                    t.cmd_pause_tube += 1;
                    t.pause_secs = u64::from(delay);
                });
                Reply::Paused
            }
            Err(e) => internal("pause-tube", &e),
        }
    }
}
