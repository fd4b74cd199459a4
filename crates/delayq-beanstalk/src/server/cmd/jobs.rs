//! `delete`, `release`, `bury` and `touch`: what a worker does with a job.

use delayq::{BuryOptions, ReleaseOptions, State};

use crate::proto::Reply;
use crate::server::session::{Held, Session, internal, is_gone};

impl Session {
    /// `delete <id>`: finishes a job this connection holds, or removes one nobody holds.
    pub(crate) async fn delete(&mut self, id: u64) -> Reply {
        let queue = self.server.queue.clone();
        if let Some(h) = self.take_held(id) {
            match queue.finish(&h.topic, &h.task_id, Some(&h.receipt)).await {
                Ok(()) => return self.deleted(id, &h.topic),
                Err(e) if is_gone(&e) => {}
                Err(e) => return internal("delete", &e),
            }
        }
        match self.server.jobs.find(&queue, id).await {
            // Held by another connection: beanstalkd does not find it.
            Ok(Some((_, info))) if info.state == State::Active => Reply::NotFound,
            Ok(Some((r, _))) => match queue.delete(&r.topic, &r.task_id).await {
                Ok(()) => self.deleted(id, &r.topic),
                Err(e) if is_gone(&e) => Reply::NotFound,
                Err(e) => internal("delete", &e),
            },
            Ok(None) => Reply::NotFound,
            Err(e) => internal("delete", &e),
        }
    }

    fn deleted(&self, id: u64, topic: &str) -> Reply {
        self.server.jobs.forget(id);
        self.server.tubes.with(topic, |t| t.cmd_delete += 1);
        Reply::Deleted
    }

    /// `release <id> <pri> <delay>` of a job this connection holds.
    pub(crate) async fn release(&mut self, id: u64, pri: u32, delay: u32) -> Reply {
        let Some(h) = self.take_held(id) else {
            return Reply::NotFound;
        };
        let queue = self.server.queue.clone();
        let mut options = ReleaseOptions::default()
            .receipt(h.receipt.clone())
            .priority(pri);
        if delay > 0 {
            options = options
                .delay_ms((u64::from(delay) * 1_000).min(queue.context().limits.max_delay_ms));
        }
        match queue.release(&h.topic, &h.task_id, options).await {
            Ok(State::Dead) => Reply::Buried,
            Ok(_) => {
                self.server.jobs.note_delay(id, u64::from(delay));
                Reply::Released
            }
            Err(e) if is_gone(&e) => Reply::NotFound,
            Err(e) => internal("release", &e),
        }
    }

    /// `bury <id> <pri>` of a job this connection holds.
    pub(crate) async fn bury(&mut self, id: u64, pri: u32) -> Reply {
        let Some(h) = self.take_held(id) else {
            return Reply::NotFound;
        };
        let options = BuryOptions::default()
            .receipt(h.receipt.clone())
            .priority(pri);
        match self.server.queue.bury(&h.topic, &h.task_id, options).await {
            Ok(()) => Reply::Buried,
            Err(e) if is_gone(&e) => Reply::NotFound,
            Err(e) => internal("bury", &e),
        }
    }

    /// `touch <id>`: a job this connection holds gets its whole ttr again.
    pub(crate) async fn touch(&mut self, id: u64) -> Reply {
        let Some(h) = self.take_held(id) else {
            return Reply::NotFound;
        };
        let queue = self.server.queue.clone();
        match queue.touch(&h.topic, &h.task_id, Some(&h.receipt)).await {
            Ok(deadline_ms) => {
                self.held.insert(id, Held { deadline_ms, ..h });
                Reply::Touched
            }
            Err(e) if is_gone(&e) => Reply::NotFound,
            Err(e) => {
                self.held.insert(id, h);
                internal("touch", &e)
            }
        }
    }
}
