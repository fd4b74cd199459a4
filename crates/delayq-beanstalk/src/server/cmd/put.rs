//! `put`.

use std::sync::atomic::Ordering;

use delayq::{ErrorKind, MaxRetries, NewTask};

use crate::proto::{MIN_TTR_SECONDS, Reply};
use crate::server::format_job_id;
use crate::server::session::{Session, internal};

/// How many job ids a put tries: a number that an HTTP producer already took as a task id
/// is skipped, and the counter never repeats, so a few tries are plenty.
const PUT_TRIES: usize = 8;

impl Session {
    /// `put <pri> <delay> <ttr> <bytes>` with `data`, the body and what should be its
    /// `\r\n`.
    pub(crate) async fn put(
        &mut self,
        pri: u32,
        delay: u32,
        ttr: u32,
        bytes: u32,
        mut data: Vec<u8>,
    ) -> Reply {
        self.set_producer();
        // beanstalkd numbers the job before it reads the body, so a put refused for its body
        // or for drain mode still uses up an id; so does this one.
        let id = match self.server.queue.next_job_id().await {
            Ok(id) => id,
            Err(e) => return internal("put", &e),
        };
        let n = bytes as usize;
        if data.get(n..) != Some(b"\r\n".as_slice()) {
            return Reply::ExpectedCrlf;
        }
        if self.server.is_draining() {
            return Reply::Draining;
        }
        data.truncate(n);
        self.add(id, pri, delay, ttr, data).await
    }

    /// Adds the job to the used tube under the first free job id from `first_id` on.
    async fn add(&mut self, first_id: u64, pri: u32, delay: u32, ttr: u32, body: Vec<u8>) -> Reply {
        let queue = &self.server.queue;
        let limits = &queue.context().limits;
        // beanstalkd raises a ttr under a second to one; delayq's limits cap both durations
        // (docs/beanstalk.md lists the caps).
        let ttr_ms = (u64::from(ttr.max(MIN_TTR_SECONDS)) * 1_000).min(limits.max_ttr_ms);
        let delay_ms = (u64::from(delay) * 1_000).min(limits.max_delay_ms);
        let mut id = first_id;
        for _ in 0..PUT_TRIES {
            let task = NewTask::new(self.used.clone(), format_job_id(id))
                .body(body.clone())
                .priority(pri)
                .delay_ms(delay_ms)
                .ttr_ms(ttr_ms)
                // beanstalkd never gives up on a job: it is released or times out for ever.
                .max_retries(MaxRetries::Unlimited);
            match queue.add(task).await {
                Ok(_) => {
                    let server = &self.server;
                    server.jobs.note(id, &self.used);
                    server.jobs.note_delay(id, u64::from(delay));
                    server.tubes.with(&self.used, |t| t.total_jobs += 1);
                    server.counters.total_jobs.fetch_add(1, Ordering::Relaxed);
                    return Reply::Inserted(id);
                }
                Err(e) if e.kind() == ErrorKind::Duplicate => {
                    id = match queue.next_job_id().await {
                        Ok(id) => id,
                        Err(e) => return internal("put", &e),
                    };
                }
                Err(e) => return internal("put", &e),
            }
        }
        Reply::InternalError
    }
}
