//! `reserve`, `reserve-with-timeout` and `reserve-job`.
//!
//! A `reserve` first looks without waiting; then, if a held job's ttr ends within a second
//! (beanstalkd's safety margin) it answers `DEADLINE_SOON`, else it answers
//! [`Outcome::Wait`]: the connection sends what earlier commands answered and runs
//! [`Session::wait_for_job`], which long-polls the watched topics, in steps no longer than the
//! queue's longest long-poll, until a job comes, its timeout passes (`TIMED_OUT`) or a held
//! job enters the safety margin (`DEADLINE_SOON`). The connection keeps reading meanwhile, so
//! a client that goes away ends the wait at once (see `server/handler.rs`).

use std::time::Duration;

use delayq::{Delivery, ErrorKind, PopOptions, ReleaseOptions, State};

use crate::proto::Reply;
use crate::server::session::{Held, Outcome, Session, internal, is_gone};

/// beanstalkd's safety margin: a reserve answers `DEADLINE_SOON` when a job the connection
/// holds has less than this left of its ttr.
const SAFETY_MARGIN_MS: u64 = 1_000;

/// A `reserve` that waits for a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wait {
    /// The watched tubes it may take from.
    topics: Vec<String>,
    /// When it times out (epoch ms); never for `None`.
    until: Option<u64>,
}

/// How a wait ended.
#[derive(Debug)]
pub(crate) enum WaitEnd {
    /// A job came.
    Job(Delivery),
    /// `DEADLINE_SOON`, `TIMED_OUT`, or the error of a pop.
    Reply(Reply),
    /// The queue shuts down: the connection ends.
    ShuttingDown,
}

impl Session {
    /// `reserve` (`timeout_ms` `None`) and `reserve-with-timeout`.
    pub(crate) async fn reserve(&mut self, timeout_ms: Option<u64>) -> Outcome {
        self.set_worker();
        let topics = self.server.reservable(&self.watch);
        let start = self.now();
        self.prune_held(start);
        // A ready job is handed out even inside the safety margin (beanstalkd's conn_ready).
        let first = match topics.is_empty() {
            true => Ok(Vec::new()),
            false => {
                let queue = &self.server.queue;
                queue.pop_any(&topics, PopOptions::default()).await
            }
        };
        match first {
            Ok(mut got) if !got.is_empty() => {
                return Outcome::Reply(self.reserved(got.remove(0)).await);
            }
            Ok(_) => {}
            Err(e) => return Outcome::Reply(internal("reserve", &e)),
        }
        if self
            .soonest_deadline()
            .is_some_and(|d| start + SAFETY_MARGIN_MS >= d)
        {
            return Outcome::Reply(Reply::DeadlineSoon);
        }
        if timeout_ms == Some(0) {
            return Outcome::Reply(Reply::TimedOut);
        }
        let until = timeout_ms.map(|t| start + t);
        Outcome::Wait(Wait { topics, until })
    }

    /// The end of the soonest held ttr.
    fn soonest_deadline(&self) -> Option<u64> {
        self.held.values().map(|h| h.deadline_ms).min()
    }

    /// Counts this connection as waiting (`delta` 1) or no longer (-1), here and in the tubes
    /// it watches.
    pub(crate) fn waiting(&self, delta: i64) {
        let c = &self.server.counters;
        if delta > 0 {
            c.current_waiting
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        } else {
            c.current_waiting
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
        for tube in &self.watch {
            self.server.tubes.with(tube, |t| {
                t.waiting = t.waiting.saturating_add_signed(delta);
            });
        }
    }

    /// Waits for a job for `wait`. The connection drops this future when the client goes
    /// away; a pop cut short then leaves at worst a job reserved until its ttr ends, as a
    /// worker that vanishes does.
    pub(crate) async fn wait_for_job(&self, wait: &Wait) -> WaitEnd {
        let queue = &self.server.queue;
        let max_step = queue.context().limits.max_pop_timeout_ms.max(1);
        loop {
            let now = self.now();
            let soon = self
                .soonest_deadline()
                .map(|d| d.saturating_sub(SAFETY_MARGIN_MS));
            if soon.is_some_and(|s| now >= s) {
                return WaitEnd::Reply(Reply::DeadlineSoon);
            }
            if wait.until.is_some_and(|u| now >= u) {
                return WaitEnd::Reply(Reply::TimedOut);
            }
            let step_end = [Some(now + max_step), soon, wait.until]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(now + max_step);
            let step = step_end.saturating_sub(now).max(1);
            let got = if wait.topics.is_empty() {
                // Every watched tube is delivered by delayq itself: wait like an empty one.
                tokio::time::sleep(Duration::from_millis(step)).await;
                Ok(Vec::new())
            } else {
                let options = PopOptions::default().timeout_ms(step);
                queue.pop_any(&wait.topics, options).await
            };
            match got {
                Ok(mut got) if !got.is_empty() => return WaitEnd::Job(got.remove(0)),
                // A pop over several topics may answer at once instead of waiting, on a
                // backend without that long-poll: look again a little later, not in a tight
                // loop.
                Ok(_) if self.now() < step_end => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::ShuttingDown => return WaitEnd::ShuttingDown,
                Err(e) => return WaitEnd::Reply(internal("reserve", &e)),
            }
        }
    }

    /// The reply a finished wait comes to; `None` when the connection is to end.
    pub(crate) async fn end_wait(&mut self, end: WaitEnd) -> Option<Reply> {
        match end {
            WaitEnd::Job(d) => Some(self.reserved(d).await),
            WaitEnd::Reply(reply) => Some(reply),
            WaitEnd::ShuttingDown => None,
        }
    }

    /// Takes a delivery for this connection and answers `RESERVED`.
    async fn reserved(&mut self, d: Delivery) -> Reply {
        let queue = self.server.queue.clone();
        let id = match self.server.jobs.job_id(&queue, &d.topic, &d.id).await {
            Ok(id) => id,
            Err(e) => {
                // Without a job id the client cannot name it: give it back.
                let options = ReleaseOptions::default().receipt(d.receipt.clone());
                let _ = queue.release(&d.topic, &d.id, options).await;
                return internal("reserve", &e);
            }
        };
        self.hold(id, d)
    }

    /// Keeps a delivery as job `id` of this connection and answers `RESERVED`.
    fn hold(&mut self, id: u64, d: Delivery) -> Reply {
        let deadline_ms = self.now() + d.ttr_ms;
        self.held.insert(
            id,
            Held {
                topic: d.topic,
                task_id: d.id,
                receipt: d.receipt,
                deadline_ms,
            },
        );
        Reply::Reserved(id, d.body)
    }

    /// `reserve-job <id>`: takes the named job if it is ready, delayed or buried, even from a
    /// paused tube (as beanstalkd does); a reserved or unknown job is `NOT_FOUND`.
    pub(crate) async fn reserve_job(&mut self, id: u64) -> Reply {
        let queue = self.server.queue.clone();
        let r = match self.server.jobs.find(&queue, id).await {
            Ok(Some((r, info))) if info.state != State::Active => r,
            Ok(_) => return Reply::NotFound,
            Err(e) => return internal("reserve-job", &e),
        };
        match queue.take(&r.topic, &r.task_id).await {
            Ok(d) => {
                // beanstalkd counts the connection a worker once it got the job.
                self.set_worker();
                self.hold(id, d)
            }
            // Taken, finished or removed by someone else in between.
            Err(e) if is_gone(&e) => Reply::NotFound,
            Err(e) => internal("reserve-job", &e),
        }
    }
}
